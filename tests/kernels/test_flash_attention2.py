"""Our Triton FlashAttention-2 against the fp32 (float64 on CPU) reference: out, LSE, dq, dk, dv.

Without a GPU the kernels run under the Triton interpreter (the package sets TRITON_INTERPRET=1), so the
shapes are tiny; they still cover several blocks (interpreter tiles are 32x16 forward, 16/32 backward),
the causal diagonal stage, lengths that are not multiples of a block, padded head dims and GQA.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from attnbench.bench.correctness import compare, reference_attention, reference_grads
from attnbench.kernels.flash_attention2 import attention_backward, attention_forward, flash_attention
from attnbench.kernels.flash_attention2.backward import DQ_CHUNK, _reduce_dq
from attnbench.kernels.flash_attention2.configs import BackwardTile, ForwardTile
from attnbench.kernels.flash_attention2.launch import _set_scratch_allocator, tma_ready
from attnbench.rows import Workload

ROOT = Path(__file__).resolve().parents[2]

# triton after the package (imported above), which sets TRITON_INTERPRET=1 on a machine without a GPU
import triton
import triton.language as tl

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"

# (batch, heads, kv_heads, seqlen_q, seqlen_k, head_dim, causal, dtype)
CASES = [
    (1, 2, 2, 64, 64, 64, True, "bfloat16"),  # whole blocks, causal
    (1, 2, 2, 37, 37, 16, True, "float32"),  # odd length, smallest head dim
    (2, 2, 2, 50, 70, 32, False, "bfloat16"),  # seqlen_q != seqlen_k, partial last key block
    (1, 4, 2, 45, 45, 24, True, "float16"),  # GQA 2:1, head dim padded 24 -> 32
    (1, 4, 1, 33, 47, 128, False, "bfloat16"),  # GQA 4:1 (multi-query), largest head dim
    (1, 1, 1, 17, 17, 48, True, "float32"),  # shorter than one block, padded head dim
]


def _inputs(case, seed=0):
    batch, heads, kv_heads, sq, sk, d, causal, dtype = case
    workload = Workload(batch, sq, sk, heads, kv_heads, d, dtype, "causal" if causal else "full")
    gen = torch.Generator().manual_seed(seed)
    make = lambda *shape: torch.randn(*shape, generator=gen).to(getattr(torch, dtype)).to(DEVICE)
    q, k, v = make(batch, heads, sq, d), make(batch, kv_heads, sk, d), make(batch, kv_heads, sk, d)
    return workload, q, k, v, make(batch, heads, sq, d)


def _reference_lse(q, k, workload):
    group = workload.heads_q // workload.heads_kv
    kk = k.double().repeat_interleave(group, dim=1)
    scores = q.double() @ kk.transpose(-1, -2) / math.sqrt(workload.head_dim)
    if workload.mask == "causal":
        scores = scores.masked_fill(torch.ones_like(scores, dtype=torch.bool).triu(1), float("-inf"))
    return torch.logsumexp(scores, dim=-1)


def _run(q, k, v, dout, causal, **kwargs):
    leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
    out, lse = flash_attention(*leaves, causal=causal, return_lse=True, **kwargs)
    out.backward(dout)
    return out, lse, *(t.grad for t in leaves)


@pytest.mark.parametrize(
    "case", CASES, ids=lambda c: f"B{c[0]}H{c[1]}/{c[2]}S{c[3]}x{c[4]}D{c[5]}{'c' if c[6] else ''}-{c[7]}"
)
def test_matches_the_reference(case):
    workload, q, k, v, dout = _inputs(case)
    out, lse, dq, dk, dv = _run(q, k, v, dout, case[6])
    assert out.shape == q.shape and out.dtype == q.dtype and lse.dtype == torch.float32
    checks = {"out": compare(out, reference_attention(q, k, v, workload), workload.dtype, what="out")}
    for name, got, ref in zip(("dq", "dk", "dv"), (dq, dk, dv), reference_grads(q, k, v, dout, workload)):
        checks[name] = compare(got, ref, workload.dtype, grad=True, what=name)
    failed = {name: c.reason for name, c in checks.items() if not c.ok}
    assert not failed, failed
    # fp32 inputs run TF32 tensor cores on a GPU (10-bit mantissa in the scores); 16-bit inputs and the
    # interpreter give near-exact scores
    atol = 5e-3 if workload.dtype == "float32" and DEVICE == "cuda" else 1e-4
    assert torch.allclose(lse.double(), _reference_lse(q, k, workload), atol=atol, rtol=1e-5)


def test_atomic_dq_agrees_with_recompute():
    _, q, k, v, dout = _inputs((1, 4, 2, 40, 40, 32, True, "float32"), seed=1)
    _, _, dq, dk, dv = _run(q, k, v, dout, True)
    _, _, dq_atomic, dk_atomic, dv_atomic = _run(q, k, v, dout, True, dq_mode="atomic")
    for a, b in ((dq, dq_atomic), (dk, dk_atomic), (dv, dv_atomic)):
        assert torch.allclose(a, b, atol=1e-4, rtol=1e-3)  # the same math summed in another order
    assert not torch.equal(dq, torch.zeros_like(dq))


def test_custom_scale_and_strided_views_need_no_copy():
    """A [B, S, H, D] buffer seen as [B, H, S, D] (what a model's projection gives) is used in place."""
    gen = torch.Generator().manual_seed(2)
    buffer = torch.randn(1, 40, 2, 32, generator=gen).to(DEVICE)  # [B, S, H, D]
    q = buffer.transpose(1, 2)
    assert tma_ready(q) is q  # strides are 16-byte multiples: no copy
    k, v = torch.randn(2, 1, 2, 40, 32, generator=gen).to(DEVICE).unbind(0)
    workload = Workload(1, 40, 40, 2, 2, 32, "float32", "full")
    out = flash_attention(q, k, v, sm_scale=0.3)
    assert out.stride() == q.stride()  # the output is laid out like q
    check = compare(out, reference_attention(q, k, v, workload, scale=0.3), "float32")
    assert check.ok, check.reason


@pytest.mark.parametrize(
    ("shapes", "kwargs", "message"),
    [
        (((1, 2, 8, 12), (1, 2, 8, 12)), {}, "head_dim 12 not supported"),
        (((1, 2, 8, 256), (1, 2, 8, 256)), {}, "head_dim 256 not supported"),
        (((1, 3, 8, 16), (1, 2, 8, 16)), {}, "multiple of key/value heads"),
        (((1, 2, 8, 16), (1, 2, 9, 16)), {"causal": True}, "seqlen_q == seqlen_k"),
        (((1, 2, 8, 16), (1, 2, 8, 16)), {"dq_mode": "fast"}, "dq_mode"),
    ],
)
def test_bad_inputs_are_named(shapes, kwargs, message):
    q = torch.zeros(*shapes[0], device=DEVICE)
    k = torch.zeros(*shapes[1], device=DEVICE)
    with pytest.raises(ValueError, match=message):
        flash_attention(q, k, k.clone(), **kwargs)


def test_mixed_dtypes_are_refused():
    q = torch.zeros(1, 1, 8, 16, device=DEVICE)
    with pytest.raises(ValueError, match="share one dtype"):
        flash_attention(q, q.bfloat16(), q)


@pytest.mark.skipif(sys.platform != "linux", reason="Triton's CUDA compiler ships for Linux")
@pytest.mark.timeout(300)
def test_compiles_for_hopper_without_a_gpu():
    """Triton's full compiler (to an sm_90 cubin) accepts the first forward tile of each loop structure
    (plain, warp-specialised, persistent), the dK/dV kernel in both dQ modes and the dQ kernel; the
    warp-specialised tile really is."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "check_triton_fa2_sm90.py"), "--quick", "--dtypes", "bfloat16",
         "--head-dims", "64", "--first"],
        capture_output=True, text=True, timeout=280, check=False,
        # the warp-specialised tiles are opt-in (wrong results on H200, configs.py): compile them anyway
        env={**os.environ, "PYTHONPATH": str(ROOT / "src"), "ATTNBENCH_FA2_WARP_SPECIALIZE": "1"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    lines = [line for line in proc.stdout.splitlines() if line.startswith("ok")]
    assert len(lines) == 6, proc.stdout  # forward: plain, warp-specialised, persistent; dK/dV (2 modes), dQ
    assert any("ws" in line and "warp-specialised" in line for line in lines), proc.stdout
    assert any("persistent" in line for line in lines), proc.stdout


# (forward tile, backward tile): the dK/dV tile with more query rows than keys (BLOCK_M1 > BLOCK_N1: the
# causal diagonal stage is one query block not aligned to BLOCK_M1) and the usual shape (BLOCK_M1 < BLOCK_N1)
TILE_PAIRS = [
    (ForwardTile(32, 16, 4, 1), BackwardTile(32, 16, 32, 16, 4, 1)),
    (ForwardTile(16, 16, 4, 1), BackwardTile(16, 32, 32, 16, 4, 1, 4, 1)),
]


@pytest.mark.parametrize("tiles", TILE_PAIRS, ids=["m1>n1", "m1<n1"])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
@pytest.mark.parametrize("head_dim", [16, 32, 64])
def test_given_tiles_match_the_reference(tiles, causal, head_dim):
    """The split backward (dK/dV kernel, dQ kernel) at explicit tiles, uneven lengths, both masks."""
    seqlen_k = 45 if causal else 53
    case = (1, 2, 2, 45, seqlen_k, head_dim, causal, "bfloat16")
    workload, q, k, v, dout = _inputs(case, seed=head_dim)
    out, lse = attention_forward(q, k, v, causal, tile=tiles[0])
    grads = attention_backward(dout, q, k, v, out, lse, causal, tile=tiles[1])
    checks = {"out": compare(out, reference_attention(q, k, v, workload), workload.dtype, what="out")}
    for name, got, ref in zip(("dq", "dk", "dv"), grads, reference_grads(q, k, v, dout, workload)):
        checks[name] = compare(got, ref, workload.dtype, grad=True, what=name)
    failed = {name: c.reason for name, c in checks.items() if not c.ok}
    assert not failed, failed


def test_input_precision_is_checked_and_ieee_matches_the_reference():
    from attnbench.kernels.flash_attention2.launch import mma_mode

    assert mma_mode(torch.float32, "ieee") == 2 and mma_mode(torch.float32, "tf32") == 0
    assert mma_mode(torch.float16, "ieee") == 0  # 16-bit inputs: the option does not apply
    q = torch.randn(1, 2, 20, 16, device=DEVICE)
    with pytest.raises(ValueError, match="input_precision"):
        flash_attention(q, q, q, input_precision="fp64")
    out = flash_attention(q, q, q, input_precision="ieee")
    ref = reference_attention(q, q, q, Workload(1, 20, 20, 2, 2, 16, "float32", "full"))
    assert torch.allclose(out.double(), ref.double(), atol=1e-5, rtol=1e-5)


@triton.jit
def _put_tile(TILE, OUT, seqlen, start_m, BLOCK: tl.constexpr, D_PAD: tl.constexpr, CHUNK: tl.constexpr):
    """Load a [BLOCK, D_PAD] tile and hand it to the backward's dQ chunking, as stores."""
    rows, cols = tl.arange(0, BLOCK), tl.arange(0, D_PAD)
    tile = tl.load(TILE + rows[:, None] * D_PAD + cols[None, :])
    desc = tl.make_tensor_descriptor(
        OUT, shape=[seqlen, D_PAD], strides=[D_PAD, 1], block_shape=[BLOCK, CHUNK]
    )
    _reduce_dq(desc, start_m, tile, D_PAD, False)


@pytest.mark.parametrize("d_pad", [16, 32, 64, 128])
def test_bulk_dq_reduction_puts_every_column_chunk_in_place(d_pad):
    """The GPU's atomic dQ adds whole tiles with TMA bulk reductions, DQ_CHUNK (128-byte) columns at a
    time; the interpreter has no descriptor reductions, so the same chunking is run here as stores: each
    chunk lands at its columns and rows past the end are dropped."""
    seqlen, block, start = 20, 16, 16  # rows 16..31 of the tile: 16..19 inside, 20..31 past the end
    tile = torch.arange(block * d_pad, dtype=torch.float32, device=DEVICE).reshape(block, d_pad)
    out = torch.full((seqlen, d_pad), -1.0, device=DEVICE)
    _set_scratch_allocator(out.device)
    _put_tile[(1,)](tile, out, seqlen, start, BLOCK=block, D_PAD=d_pad, CHUNK=min(d_pad, DQ_CHUNK.value))
    assert torch.equal(out[start:], tile[: seqlen - start])
    assert torch.equal(out[:start], torch.full((start, d_pad), -1.0, device=DEVICE))


@pytest.mark.parametrize(
    "case", CASES, ids=lambda c: f"B{c[0]}H{c[1]}:{c[2]}S{c[3]}x{c[4]}D{c[5]}{'c' if c[6] else ''}"
)
@pytest.mark.parametrize("per_sm", [1, 3])
def test_persistent_forward_matches_the_reference(case, per_sm):
    """A persistent grid (a few programs, each taking query blocks from one heaviest-first list over every
    (batch, head)) computes the same output and LSE as one program per block: every block exactly once,
    batches, GQA, uneven lengths and both masks included."""
    workload, q, k, v, _ = _inputs(case, seed=per_sm)
    causal = case[6]
    plain = attention_forward(q, k, v, causal, tile=ForwardTile(32, 16, 4, 1))
    out, lse = attention_forward(q, k, v, causal, tile=ForwardTile(32, 16, 4, 1, persistent=per_sm))
    check = compare(out, reference_attention(q, k, v, workload), workload.dtype, what="out")
    assert check.ok, check.reason
    torch.testing.assert_close(lse.double(), _reference_lse(q, k, workload), rtol=2e-3, atol=2e-3)
    torch.testing.assert_close(out, plain[0], rtol=0, atol=0)  # the same blocks, the same arithmetic
