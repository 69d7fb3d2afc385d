"""The fp32/fp64 reference and the pass/fail classification."""

import math

import pytest
import torch

from attnbench.bench import correctness
from attnbench.masks import dense_mask
from attnbench.rows import Workload

CASES = [
    Workload(2, 16, 16, 4, 4, 8, dtype="float32"),
    Workload(1, 12, 20, 6, 2, 8, dtype="float32", mask="causal"),  # GQA, Sq < Sk
    Workload(1, 20, 12, 4, 1, 8, dtype="float32", mask="causal"),  # Sq > Sk: empty rows
    Workload(1, 24, 24, 2, 2, 8, dtype="float32", mask="sliding_window", window=5),
    Workload(1, 24, 24, 4, 2, 8, dtype="float32", mask="document", doc_lens=(4, 9, 11)),
    Workload(1, 24, 24, 2, 1, 8, dtype="float32", mask="block_causal", doc_lens=(10, 14)),
]


def inputs(w, seed=0, dtype=torch.float64):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(w.batch, w.heads_q, w.seqlen_q, w.head_dim, generator=gen, dtype=dtype)
    k = torch.randn(w.batch, w.heads_kv, w.seqlen_k, w.head_dim, generator=gen, dtype=dtype)
    v = torch.randn(w.batch, w.heads_kv, w.seqlen_k, w.head_dim, generator=gen, dtype=dtype)
    return q, k, v


def naive(q, k, v, w):
    """Autograd-able float64 attention, GQA by repeat_interleave, empty rows -> 0."""
    group = w.heads_q // w.heads_kv
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    scores = q @ k.transpose(-1, -2) / math.sqrt(w.head_dim)
    allowed = dense_mask(w)
    weights = torch.softmax(scores.masked_fill(~allowed, -math.inf), dim=-1)
    return torch.nan_to_num(weights, nan=0.0) @ v


@pytest.mark.parametrize("w", CASES, ids=lambda w: w.label())
def test_reference_forward_and_grads_match_autograd(w):
    q, k, v = (t.requires_grad_() for t in inputs(w))
    dout = torch.randn(
        w.batch,
        w.heads_q,
        w.seqlen_q,
        w.head_dim,
        dtype=torch.float64,
        generator=torch.Generator().manual_seed(1),
    )
    expected = naive(q, k, v, w)
    grads = torch.autograd.grad(expected, (q, k, v), dout)
    out = correctness.reference_attention(q.detach(), k.detach(), v.detach(), w)
    assert out.dtype == torch.float64  # CPU reference is float64
    torch.testing.assert_close(out, expected.detach(), atol=1e-12, rtol=1e-10)
    mine = correctness.reference_grads(q.detach(), k.detach(), v.detach(), dout, w)
    for got, want in zip(mine, grads):
        assert got.shape == want.shape
        torch.testing.assert_close(got, want, atol=1e-10, rtol=1e-9)


def test_empty_rows_are_zero():
    w = CASES[2]
    out = correctness.reference_attention(*inputs(w), w)
    assert torch.all(out[:, :, : w.seqlen_q - w.seqlen_k] == 0) and torch.isfinite(out).all()


def test_reference_matches_sdpa_math():
    w = Workload(1, 32, 32, 4, 4, 16, dtype="float32", mask="causal")
    q, k, v = inputs(w)
    sdpa = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(correctness.reference_attention(q, k, v, w), sdpa)


def test_chunking_does_not_change_results(monkeypatch):
    w = CASES[4]
    q, k, v = inputs(w)
    dout = torch.randn_like(q)
    whole = correctness.reference_attention(q, k, v, w), correctness.reference_grads(q, k, v, dout, w)
    monkeypatch.setattr(correctness, "CHUNK_ELEMENTS", 5)  # one query row per chunk
    chunked = correctness.reference_attention(q, k, v, w), correctness.reference_grads(q, k, v, dout, w)
    torch.testing.assert_close(chunked[0], whole[0])
    for a, b in zip(chunked[1], whole[1]):
        torch.testing.assert_close(a, b)


def test_reference_rejects_wrong_shapes():
    w = CASES[1]
    q, k, v = inputs(w)
    with pytest.raises(ValueError, match=r"k has shape .* needs"):
        correctness.reference_attention(q, k.transpose(1, 2), v, w)


def test_reference_does_not_leak_tf32_setting():
    torch.set_float32_matmul_precision("high")
    try:
        correctness.reference_attention(*inputs(CASES[0]), CASES[0])
        assert torch.get_float32_matmul_precision() == "high"
    finally:
        torch.set_float32_matmul_precision("highest")


def bf16_output():
    w = Workload(1, 256, 256, 2, 2, 64, dtype="bfloat16")
    q, k, v = (t.to(torch.bfloat16) for t in inputs(w))
    ref = correctness.reference_attention(q, k, v, w)
    return ref.to(torch.bfloat16), ref


def test_exact_and_rounded_outputs_pass():
    out, ref = bf16_output()
    assert correctness.compare(ref, ref, "bfloat16").ok
    result = correctness.compare(out, ref, "bfloat16")
    assert result.ok and 0 < result.rel_l2 < 5e-3 and result.reason == ""


def test_perturbed_output_fails_bf16_but_passes_quantised():
    _, ref = bf16_output()
    noisy = ref * (
        1 + 0.04 * torch.randn(ref.shape, generator=torch.Generator().manual_seed(2), dtype=ref.dtype)
    )
    bad = correctness.compare(noisy, ref, "bfloat16")
    assert not bad.ok and "rel_l2" in bad.reason
    assert correctness.compare(noisy, ref, "bfloat16", quantized=True).ok
    assert correctness.compare(noisy, ref, "float8_e4m3fn").ok  # fp8 workloads are judged as quantised


def test_a_local_error_fails_on_max_abs_alone():
    _, ref = bf16_output()
    wrong = ref.clone()
    wrong[0, 0, 100, :4] += 0.2 * ref.abs().max()  # a few bad values: rel_l2 barely moves
    result = correctness.compare(wrong, ref, "bfloat16")
    assert result.rel_l2 < correctness.TOLERANCES["bfloat16"].rel_l2
    assert not result.ok and "max_abs" in result.reason


@pytest.mark.parametrize("bad_value", [math.nan, math.inf, -math.inf])
def test_non_finite_never_passes(bad_value):
    _, ref = bf16_output()
    out = ref.clone()
    out[0, 1, 3, 4] = bad_value
    result = correctness.compare(out, ref, "bfloat16", quantized=True)
    assert not result.ok and "non-finite" in result.reason


def test_shape_mismatch_and_zero_reference():
    _, ref = bf16_output()
    assert not correctness.compare(ref[..., :10], ref, "bfloat16").ok
    zero = torch.zeros(3, 4)
    assert correctness.compare(zero, zero, "float32").ok
    assert not correctness.compare(zero + 1e-3, zero, "float32").ok


def test_tolerance_table():
    assert correctness.tolerance_for("float16").rel_l2 < correctness.tolerance_for("bfloat16").rel_l2
    assert correctness.tolerance_for(torch.bfloat16) == correctness.TOLERANCES["bfloat16"]
    grad = correctness.tolerance_for("bfloat16", grad=True)
    assert grad.rel_l2 == 2 * correctness.TOLERANCES["bfloat16"].rel_l2
    with pytest.raises(ValueError, match="no tolerance"):
        correctness.tolerance_for("int8")


def test_worst_prefers_failures():
    _, ref = bf16_output()
    good = correctness.compare(ref, ref, "bfloat16")
    bad = correctness.compare(ref * 1.5, ref, "bfloat16", what="dk")
    assert correctness.worst({"out": good, "dk": bad}) is bad
    assert correctness.worst({"out": good}) is good
