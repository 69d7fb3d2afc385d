"""The CS336 Transformer LM on CPU: parameter counts of the five sizes, causality, RoPE, and the three
attention kernels giving the same model output."""

from __future__ import annotations

import pytest
import torch

import attnbench.kernels.flash_attention2  # noqa: F401 - first: without a GPU it must switch Triton to its interpreter before torch imports triton
from attnbench.models import transformer
from attnbench.models.attention import eager_attention
from attnbench.models.transformer import ModelSize, RotaryEmbedding, build, flops_per_step, parameter_count

TINY = ModelSize(d_model=64, d_ff=128, num_layers=2, num_heads=4)


@pytest.mark.parametrize("name", list(transformer.SIZES))
def test_parameter_count_matches_the_modules(name):
    model = build(name, context_length=128, device="meta")  # no memory: shapes only
    assert sum(p.numel() for p in model.parameters()) == parameter_count(transformer.SIZES[name])["total"]


def test_the_27b_size_has_34b_parameters_with_swiglu():
    # CS336 names it after a 2-matrix MLP; SwiGLU's three d_model x d_ff matrices make it 3.4B
    assert 3.3e9 < parameter_count(transformer.SIZES["2.7B"])["total"] < 3.5e9


def test_logits_are_causal():
    torch.manual_seed(0)
    model = build(TINY, context_length=16)
    tokens = torch.randint(0, transformer.VOCAB_SIZE, (2, 16))
    changed = tokens.clone()
    changed[:, 10] = (changed[:, 10] + 1) % transformer.VOCAB_SIZE
    with torch.no_grad():
        a, b = model(tokens), model(changed)
    assert a.shape == (2, 16, transformer.VOCAB_SIZE)
    assert torch.equal(a[:, :10], b[:, :10]) and not torch.allclose(a[:, 10:], b[:, 10:])


def test_rope_keeps_norms_and_depends_on_relative_position():
    rope = RotaryEmbedding(head_dim=8, context_length=32)
    q, k = torch.randn(8), torch.randn(8)
    at = lambda x, p: rope(x.expand(32, 8))[p]  # the vector x placed at position p
    assert torch.allclose(at(q, 5).norm(), q.norm(), atol=1e-5)
    assert torch.allclose(at(q, 7) @ at(k, 3), at(q, 20) @ at(k, 16), atol=1e-4)


def test_attention_kernels_agree():
    torch.manual_seed(1)
    tokens = torch.randint(0, transformer.VOCAB_SIZE, (2, 40))
    outputs = {}
    for kernel in ("eager", "sdpa", "triton"):
        torch.manual_seed(2)
        model = build(TINY, context_length=40, attention=kernel)
        logits = model(tokens)
        logits.float().square().mean().backward()
        outputs[kernel] = (logits.detach(), model.layers[0].attn.q_proj.weight.grad)
    for kernel in ("sdpa", "triton"):
        for got, ref in zip(outputs[kernel], outputs["eager"]):
            assert torch.allclose(got, ref, atol=2e-4, rtol=1e-3), kernel


def test_eager_attention_without_heads_or_mask():
    q, k, v = torch.randn(3, 2, 5, 4).unbind(0)  # [batch, seq, d]: the attention scan's layout
    out = eager_attention(q, k, v, causal=False)
    ref = torch.softmax(q @ k.transpose(-1, -2) / 2.0, dim=-1) @ v
    assert torch.allclose(out, ref, atol=1e-6)


def test_flops_count_matmuls_and_attention():
    flops = flops_per_step(TINY, batch=2, seq=16)
    matmul = parameter_count(TINY)["matmul"]
    assert flops["forward"] == 2 * 32 * matmul + 4 * 2 * 2 * 16 * 16 * 64
    assert flops["train"] == 3 * flops["forward"]


def test_bad_names_are_refused():
    with pytest.raises(ValueError, match="unknown model size 'huge'"):
        build("huge", context_length=8)
    with pytest.raises(ValueError, match="unknown attention 'fast'"):
        build(TINY, context_length=8, attention="fast")
