"""FlashAttention-3 and cuDNN frontend wiring on a CPU, against fake libraries computing exact attention."""

from __future__ import annotations

import itertools
import math
import sys
import types

import pytest
import torch

from attnbench.bench import providers
from attnbench.bench.correctness import compare, reference_attention, reference_grads
from attnbench.bench.providers.flash_attn3 import E4M3_MAX, fa3_window, quantize_e4m3
from attnbench.cp.local import FlashAttn3Kernel, MathKernel
from attnbench.rows import Workload

# FA3's documented calling convention is stood in for by a fake `flash_attn_interface` (bshd in, bshd out,
# LSE [b, h, s]), so what is checked is our side: layouts, masks and windows, GQA, the fp8 quantiser and
# descales, gradients, and the context-parallel kernel's transposed views. The real library runs on the
# GPU machine.


def _dense_bshd(q, k, v, causal, left, right, scale=None, descales=None):
    """Exact attention in FA3's convention: bshd, GQA by head groups, bottom-right windows."""
    if descales is not None:
        qd, kd, vd = descales  # [b, hkv] each
        q, k, v = (
            t.float() * d.repeat_interleave(q.shape[2] // d.shape[1], 1)[:, None, :, None]
            if t is q
            else t.float() * d[:, None, :, None]
            for t, d in ((q, qd), (k, kd), (v, vd))
        )
    assert q.dim() == 4 and q.shape[-1] == k.shape[-1], "FA3 takes [batch, seq, heads, dim]"
    _, sq, hq, d = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    assert hq % hkv == 0
    qh, kh, vh = (t.double().transpose(1, 2) for t in (q, k, v))
    kh, vh = (t.repeat_interleave(hq // hkv, 1) for t in (kh, vh))
    logits = qh @ kh.transpose(-1, -2) * (scale or 1 / math.sqrt(d))
    i = torch.arange(sq)[:, None] + (sk - sq)
    j = torch.arange(sk)[None, :]
    allowed = torch.ones(sq, sk, dtype=torch.bool)
    if causal or right >= 0:
        allowed &= j <= i + max(right, 0)
    if left >= 0:
        allowed &= j >= i - left
    logits = logits.masked_fill(~allowed, float("-inf"))
    lse = torch.logsumexp(logits, -1)
    out = torch.softmax(logits, -1) @ vh
    out_dtype = torch.bfloat16 if descales is not None else q.dtype  # FA3's fp8 forward returns bf16
    return out.transpose(1, 2).to(out_dtype), lse.to(
        torch.float64 if q.dtype == torch.float64 else torch.float32
    )


@pytest.fixture
def fake_fa3(monkeypatch):
    """flash_attn_interface with FA3's signatures, exact on CPU, recording what it was called with."""
    mod = types.ModuleType("flash_attn_interface")
    mod.calls = []

    def flash_attn_func(
        q,
        k,
        v,
        softmax_scale=None,
        causal=False,
        window_size=(-1, -1),
        q_descale=None,
        k_descale=None,
        v_descale=None,
        **kw,
    ):
        mod.calls.append(
            {
                "causal": causal,
                "window": window_size,
                "fp8": q.dtype == torch.float8_e4m3fn,
                "descale_shape": None if q_descale is None else tuple(q_descale.shape),
            }
        )
        descales = (q_descale, k_descale, v_descale) if q_descale is not None else None
        if descales is not None:
            q, k, v = (t.float() for t in (q, k, v))
        out, _ = _dense_bshd(q, k, v, causal, *window_size, softmax_scale, descales)
        return out

    def _flash_attn_forward(
        q, k, v, softmax_scale=None, causal=False, window_size_left=-1, window_size_right=-1, **kw
    ):
        out, lse = _dense_bshd(q, k, v, causal, window_size_left, -1 if not causal else 0, softmax_scale)
        return out, lse, None, None

    def _flash_attn_backward(
        dout, q, k, v, out, lse, dq=None, dk=None, dv=None, softmax_scale=None, is_causal=False, **kw
    ):
        # the FA3 contract: bshd tensors; gradients written into dq, dk, dv; delta from `out`
        grads = MathKernel().backward(
            *(t.transpose(1, 2) for t in (dout, q, k, v, out)), lse, causal=is_causal, scale=softmax_scale
        )
        for dst, g in zip((dq, dk, dv), grads):
            dst.copy_(g.transpose(1, 2))
        return torch.empty(0)

    def flash_attn_varlen_func(
        q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale=None, causal=False,
        window_size=(-1, -1), **kw,
    ):  # fmt: skip
        cu = cu_seqlens_q.tolist()
        mod.calls.append({"causal": causal, "window": window_size, "cu": cu, "max": max_seqlen_q,
                          "same_cu": cu == cu_seqlens_k.tolist(), "cu_dtype": cu_seqlens_q.dtype})  # fmt: skip
        assert q.dim() == 3, "varlen takes packed [tokens, heads, dim]"
        parts = [
            _dense_bshd(q[None, a:b], k[None, a:b], v[None, a:b], causal, *window_size, softmax_scale)[0][0]
            for a, b in itertools.pairwise(cu)
        ]
        return torch.cat(parts), None  # FA3 versions return (out, lse) or out: the provider takes either

    mod.flash_attn_func = flash_attn_func
    mod.flash_attn_varlen_func = flash_attn_varlen_func
    mod._flash_attn_forward = _flash_attn_forward
    mod._flash_attn_backward = _flash_attn_backward
    monkeypatch.setitem(sys.modules, "flash_attn_interface", mod)
    return mod


def _inputs(w: Workload, seed=0):
    gen = torch.Generator().manual_seed(seed)
    shape_q = (w.batch, w.heads_q, w.seqlen_q, w.head_dim)
    shape_kv = (w.batch, w.heads_kv, w.seqlen_k, w.head_dim)
    return tuple(torch.randn(s, generator=gen).to(torch.bfloat16) for s in (shape_q, shape_kv, shape_kv))


@pytest.mark.parametrize("mask", ["full", "causal", "sliding_window"])
def test_fa3_plain_provider_maps_masks_gqa_and_gradients(fake_fa3, mask):
    w = Workload(1, 48, 64, 4, 2, 64, "bfloat16", mask, window=16 if mask == "sliding_window" else None)
    q, k, v = _inputs(w)
    prepared = providers.get("flash_attn3").prepare(q, k, v, w, backward=True)
    out = prepared.run()
    assert compare(prepared.to_canonical(out), reference_attention(q, k, v, w), w.dtype).ok
    dout = torch.randn(q.shape).to(torch.bfloat16)
    grads = torch.autograd.grad(prepared.to_canonical(out), prepared.inputs, dout)
    ref = reference_grads(q, k, v, dout, w)
    for got, want in zip(grads, ref):
        assert compare(got.transpose(1, 2), want, w.dtype, grad=True).ok
    assert fake_fa3.calls[-1]["causal"] == (mask != "full")


def test_fa3_window_convention():
    assert fa3_window(Workload(1, 8, 8, 1, 1, 64, "bfloat16", "full")) == (False, -1, -1)
    assert fa3_window(Workload(1, 8, 8, 1, 1, 64, "bfloat16", "causal")) == (True, -1, 0)
    assert fa3_window(Workload(1, 8, 8, 1, 1, 64, "bfloat16", "sliding_window", window=4)) == (True, 3, 0)


def test_e4m3_quantiser_shares_a_scale_per_kv_head_and_round_trips():
    x = torch.randn(2, 32, 8, 64) * torch.tensor([1.0, 2, 3, 4, 5, 6, 7, 8])[None, None, :, None]
    x8, descale = quantize_e4m3(x, heads_kv=2)
    assert x8.dtype == torch.float8_e4m3fn and descale.shape == (2, 2)
    # heads 0-3 share KV head 0's scale: their amax over all four heads, mapped to 448
    assert descale[0, 0] == pytest.approx(x[0, :, :4].abs().max() / E4M3_MAX)
    back = x8.float() * descale.repeat_interleave(4, 1)[:, None, :, None]
    rel = ((back - x).norm() / x.norm()).item()
    assert 0 < rel < 0.05  # e4m3 keeps 3 mantissa bits: a few percent, never exact, never wild


def test_fa3_fp8_provider_passes_descales_and_is_judged_as_quantised(fake_fa3):
    w = Workload(1, 64, 64, 4, 2, 64, "bfloat16", "causal")
    q, k, v = _inputs(w)
    p = providers.get("flash_attn3_fp8")
    assert p.quantized and not p.backward and p.unsupported(w, "fwd_bwd") == "no backward"
    prepared = p.prepare(q, k, v, w)
    assert all(t.dtype == torch.float8_e4m3fn for t in prepared.inputs)
    out = prepared.to_canonical(prepared.run())
    assert fake_fa3.calls[-1] == {"causal": True, "window": (-1, 0), "fp8": True, "descale_shape": (1, 2)}
    ref = reference_attention(q, k, v, w)
    assert compare(out, ref, w.dtype, quantized=True).ok
    assert compare(out, ref, w.dtype).rel_l2 > 1e-3  # the fp8 error is real: the inputs were quantised


@pytest.mark.parametrize("causal", [True, False])
def test_fa3_cp_kernel_matches_the_math_kernel_through_transposed_views(fake_fa3, causal):
    gen = torch.Generator().manual_seed(3)
    q, k, v, dout = (torch.randn(1, 2, 32, 64, generator=gen, dtype=torch.float64) for _ in range(4))
    fa3, math_kernel = FlashAttn3Kernel(), MathKernel()
    out, lse = fa3.forward(q, k, v, causal=causal, scale=0.125)
    ref_out, ref_lse = math_kernel.forward(q, k, v, causal=causal, scale=0.125)
    assert out.shape == q.shape and lse.shape == (1, 2, 32)
    torch.testing.assert_close(out, ref_out)
    torch.testing.assert_close(lse.double(), ref_lse)
    for got, want in zip(
        fa3.backward(dout, q, k, v, out, lse, causal=causal, scale=0.125),
        math_kernel.backward(dout, q, k, v, ref_out, ref_lse, causal=causal, scale=0.125),
    ):
        assert got.shape == want.shape
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)  # FA3 takes the LSE in float32


def test_fa3_build_flags_make_left_out_features_unsupported(fake_fa3, monkeypatch):
    config = types.ModuleType("flash_attn_config")
    config.CONFIG = {
        "build_flags": {"FLASHATTENTION_DISABLE_FP16": True, "FLASHATTENTION_DISABLE_HDIM96": True}
    }
    monkeypatch.setitem(sys.modules, "flash_attn_config", config)
    p = providers.get("flash_attn3")
    assert "leaves out fp16" in p.unsupported(Workload(1, 64, 64, 2, 2, 128, "float16"), "fwd")
    assert "leaves out head dim 96" in p.unsupported(Workload(1, 64, 64, 2, 2, 96, "bfloat16"), "fwd")
    assert p.unsupported(Workload(1, 64, 64, 2, 2, 128, "bfloat16", "causal"), "fwd_bwd") is None
    # the CP kernel asks the build before its probe call (an fp16 call crashed a real process)
    reason = FlashAttn3Kernel().unavailable(torch.device("cpu"), torch.float16, 128)
    assert "leaves out fp16" in reason


@pytest.mark.parametrize("mask", ["varlen_full", "varlen_causal"])
def test_fa3_runs_documents_through_varlen_with_cu_seqlens(fake_fa3, mask):
    w = Workload(1, 64, 64, 4, 2, 64, "bfloat16", mask, doc_lens=(10, 30, 24))
    q, k, v = _inputs(w)
    prepared = providers.get("flash_attn3").prepare(q, k, v, w, backward=True)
    assert fake_fa3.calls == [] and all(t.shape == (64, t.shape[1], 64) for t in prepared.inputs)
    out = prepared.to_canonical(prepared.run())
    call = fake_fa3.calls[-1]
    assert call["cu"] == [0, 10, 40, 64] and call["max"] == 30 and call["same_cu"]
    assert call["cu_dtype"] == torch.int32 and call["causal"] == (mask == "varlen_causal")
    assert compare(out, reference_attention(q, k, v, w), w.dtype).ok
    dout = torch.randn(q.shape).to(torch.bfloat16)
    grads = torch.autograd.grad(out, prepared.inputs, dout)
    for name, got, want, like in zip(("dq", "dk", "dv"), grads, reference_grads(q, k, v, dout, w), (q, k, v)):
        assert compare(prepared.grad_to_canonical(name, got, like), want, w.dtype, grad=True).ok, name


class _FakeTensor:
    """A graph tensor of the fake cuDNN frontend below: a name and chained setters."""

    def __init__(self, name):
        self.name = name

    def set_output(self, _):
        return self

    def set_dim(self, _):
        return self

    def set_stride(self, _):
        return self

    def set_data_type(self, _):
        return self


def _fake_cudnn():
    """cudnn-frontend's graph API (tensor_like, sdpa, sdpa_backward, build, execute with a variant pack),
    computing exact attention on CPU: checks our graph wiring, variant packs and autograd Function."""
    cudnn = types.ModuleType("cudnn")
    cudnn.data_type = types.SimpleNamespace(BFLOAT16="bf16", HALF="f16", FLOAT="f32", FP8_E4M3="fp8")
    cudnn.diagonal_alignment = types.SimpleNamespace(TOP_LEFT="top_left")
    cudnn.heur_mode = types.SimpleNamespace(A="A", FALLBACK="FALLBACK")
    cudnn.backend_version = lambda: 91900
    cudnn.create_handle = lambda: object()
    cudnn.set_stream = lambda handle, stream: None

    class Graph:
        def __init__(self, **kwargs):
            self.selected_engine = None
            self.count = 0

        def tensor_like(self, t):
            self.count += 1
            return _FakeTensor(f"in{self.count}")

        def sdpa(self, q, k, v, generate_stats, attn_scale, **mask):
            self.op = ("fwd", q, k, v, attn_scale, bool(mask))
            self.out = (_FakeTensor("o"), _FakeTensor("stats"))
            return self.out

        def sdpa_backward(self, q, k, v, o, dO, stats, attn_scale, use_deterministic_algorithm, **mask):
            self.op = ("bwd", q, k, v, o, dO, attn_scale, bool(mask))
            self.out = (_FakeTensor("dq"), _FakeTensor("dk"), _FakeTensor("dv"))
            return self.out

        def build(self, modes):
            pass

        def get_workspace_size(self):
            return 0

        def execute(self, pack, workspace, handle=None):
            def attention(q, k, v, scale, causal):
                s = (q.double() @ k.double().transpose(-1, -2)) * scale
                if causal:
                    s = s.masked_fill(torch.ones_like(s, dtype=torch.bool).triu(1), float("-inf"))
                return torch.softmax(s, -1) @ v.double(), torch.logsumexp(s, -1)

            if self.op[0] == "fwd":
                _, q, k, v, scale, causal = self.op
                out, lse = attention(pack[q], pack[k], pack[v], scale, causal)
                pack[self.out[0]].copy_(out)
                if self.out[1] in pack:
                    pack[self.out[1]].copy_(lse.unsqueeze(-1))
            else:
                _, q, k, v, _o, d_o, scale, causal = self.op
                leaves = [pack[t].detach().double().requires_grad_() for t in (q, k, v)]
                with torch.enable_grad():  # called from inside autograd's backward, where it is off
                    out, _ = attention(*leaves, scale, causal)
                for dst, g in zip(self.out, torch.autograd.grad(out, leaves, pack[d_o].double())):
                    pack[dst].copy_(g)

    cudnn.pygraph = Graph
    return cudnn


@pytest.mark.parametrize("mask", ["full", "causal"])
def test_cudnn_frontend_graphs_are_wired_and_differentiable(monkeypatch, mask):
    monkeypatch.setitem(sys.modules, "cudnn", _fake_cudnn())
    w = Workload(1, 64, 64, 2, 2, 32, "bfloat16", mask)
    q, k, v = _inputs(w)
    p = providers.get("cudnn_frontend")
    forward = p.prepare(q, k, v, w)
    assert compare(forward.to_canonical(forward.run()), reference_attention(q, k, v, w), w.dtype).ok
    prepared = p.prepare(q, k, v, w, backward=True)
    out = prepared.run()
    dout = torch.randn(q.shape).to(torch.bfloat16)
    grads = torch.autograd.grad(prepared.to_canonical(out), prepared.inputs, dout)
    for got, want in zip(grads, reference_grads(q, k, v, dout, w)):
        assert compare(got, want, w.dtype, grad=True).ok
