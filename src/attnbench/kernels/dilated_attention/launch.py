"""Host side: check the inputs, order the branches, pick the tiles (autotuned, or fixed under the
interpreter), launch one forward kernel per branch and two backward kernels per branch.

Tiles (Hopper, H100/H200): 64- or 128-row blocks, 4 or 8 warps, a few candidates per kernel so that
autotuning compiles in seconds. The autotuner is keyed by L = ceil(w / r) (kept rows per segment), not
by the sequence length: the paper's configuration keeps L = 2048 or 2731 at every length from 32k on,
so the tiles tuned at a medium length serve 1M and 2M tokens without tuning there. Tuning reruns the
kernel, which adds into its accumulators: `restore_value` puts them back after each timed run.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import triton

from attnbench.kernels.dilated_attention.backward import (
    dilated_bwd_dkdv_kernel,
    dilated_bwd_dq_kernel,
    dilated_bwd_preprocess,
)
from attnbench.kernels.dilated_attention.forward import dilated_fwd_kernel

DTYPES = (torch.bfloat16, torch.float16, torch.float32)
MIN_HEAD_DIM, MAX_HEAD_DIM = 16, 128
MAX_GRID_YZ = 65535  # CUDA's limit on gridDim.y (segments) and gridDim.z (batch * heads)
PREPROCESS_BLOCK = 64

# (BLOCK_M, BLOCK_N, warps, stages); causal needs BLOCK_M % BLOCK_N == 0 (the diagonal is whole key blocks).
# Compiled for sm_90 at head dim 128 (bf16): forward 128x64 with 4 warps spills ~1 KB (left out), the others
# do not; dK/dV 32x64 with 8 warps does not spill, its other tiles sit at 255 registers with 64-72 B of spills
# (two fp32 BLOCK_N1 x 128 accumulators); dQ tiles do not spill. The autotuner times them all.
# Measured on an H200 at 1M tokens (the whole forward, one tile at a time: scripts/dilated_kernel_gpu_check.py
# --forward-tiles): 64x64 w4 s3 55.9 ms, 128x64 w8 s3 62.0, 128x128 w8 s3 62.3, 64x64 w4 s2 63.3, 128x128 w8 s2
# 67.3, 128x64 w8 s2 78.0. Programs that took two query blocks each (i and n - 1 - i of a segment: half the
# programs, equal causal work) were slower: 63.9 ms at 64x64 w4 s3 against 57.2 for the plain grid in the
# same run (measurements/dilated_forward_paired-nvidia-h200.log): a program's start and end are not what
# costs. The r = 1 branch runs at our dense FlashAttention-2's speed (365 vs 345 TFLOP/s); FA3's is 534.
# 64x64 w4 at 4 and 5 stages (148 and 181 KB of shared memory, 240 registers, no spill on sm_90) are offered
# since; on an H200 (code 77cc7cb) the autotuner still kept s3 at every key (dilated_kernel_check-nvidia-h200.log).
FORWARD_TILES = [
    (64, 64, 4, 3),
    (128, 64, 8, 3),
    (128, 128, 8, 3),
    (128, 64, 8, 2),
    (64, 64, 4, 4),
    (64, 64, 4, 5),
]
DKDV_TILES = [
    (32, 64, 8, 2),
    (16, 128, 8, 2),
    (32, 128, 8, 2),
    (64, 64, 4, 2),
]  # (BLOCK_M1, BLOCK_N1, warps, stages)
DQ_TILES = [(64, 64, 4, 2), (128, 64, 8, 2), (128, 32, 8, 2)]  # (BLOCK_M2, BLOCK_N2, warps, stages)
# Under the interpreter: small tiles, so that test shapes span several blocks, a diagonal stage with
# BLOCK_M > BLOCK_N (forward, dQ) and BLOCK_N1 > BLOCK_M1 (dK/dV), and partial last blocks.
BLOCK_NAMES = {
    "forward": ("BLOCK_M", "BLOCK_N"),
    "dkdv": ("BLOCK_M1", "BLOCK_N1"),
    "dq": ("BLOCK_M2", "BLOCK_N2"),
}
INTERPRETER_TILES = {"forward": (32, 16), "dkdv": (16, 32), "dq": (32, 16)}


def interpreting() -> bool:
    return bool(triton.knobs.runtime.interpret)


def _configs(tiles, names) -> list[triton.Config]:
    return [triton.Config(dict(zip(names, t[:2])), num_warps=t[2], num_stages=t[3]) for t in tiles]


def _quick_bench(fn, quantiles):
    return triton.testing.do_bench(fn, warmup=5, rep=25, quantiles=quantiles)


def _tuned(kernel, tiles, names, restore, key=("kept_max", "HEAD_DIM", "CAUSAL", "MMA_MODE")):
    return triton.autotune(
        configs=_configs(tiles, names),
        key=list(key),
        restore_value=restore,
        do_bench=_quick_bench,
    )(kernel)


# Restoring LSE (all -inf before the first branch) is also what keeps a tuning run from reading the unfilled
# ACC. FINAL is a key: the last launch (an r = 1 branch: ~43 % of the forward at 1M tokens) writes the output
# instead of the accumulator, needs fewer registers (sm_90, 128x64 w8: 214 against 254) and is tuned apart.
_forward_tuned = _tuned(dilated_fwd_kernel, FORWARD_TILES, BLOCK_NAMES["forward"], ["ACC", "OUT", "LSE"],
                        key=("kept_max", "HEAD_DIM", "CAUSAL", "MMA_MODE", "FINAL"))  # fmt: skip
_dkdv_tuned = _tuned(dilated_bwd_dkdv_kernel, DKDV_TILES, BLOCK_NAMES["dkdv"], ["DK", "DV"])
_dq_tuned = _tuned(dilated_bwd_dq_kernel, DQ_TILES, BLOCK_NAMES["dq"], ["DQ"])


def mma_mode(dtype: torch.dtype) -> int:
    """forward.mma's mode: native tensor cores for 16-bit inputs, true fp32 for fp32 inputs; 16-bit
    multiplied in fp32 under the interpreter (its dot misreads bfloat16)."""
    if dtype == torch.float32:
        return 2
    return 1 if interpreting() else 0


def padded_head_dim(head_dim: int) -> int:
    return max(16, 1 << math.ceil(math.log2(head_dim)))


def kept_max(w: int, r: int) -> int:
    """Kept rows per segment of offset 0, the most of any head: ceil(w / r)."""
    return -(-w // r)


def check_branches(branches: Sequence[tuple[int, int]], seq_len: int) -> tuple[tuple[int, int], ...]:
    """((w, r), ...) validated: at least one, w, r >= 1, every w dividing the sequence length."""
    result = tuple((int(w), int(r)) for w, r in branches)
    if not result:
        raise ValueError("dilated attention needs at least one branch (w, r)")
    for i, (w, r) in enumerate(result):
        if w < 1 or r < 1:
            raise ValueError(f"branch {i} (w={w}, r={r}): segment length and dilation must be >= 1")
        if seq_len % w:
            raise ValueError(
                f"sequence length {seq_len} is not a multiple of segment length {w} (branch {i}: w={w}, r={r})"
            )
        if seq_len // w > MAX_GRID_YZ:
            raise ValueError(f"branch {i}: {seq_len // w} segments exceed the grid limit {MAX_GRID_YZ}")
    return result


def check_inputs(q, k, v) -> None:
    """ValueError naming what is wrong: shape, dtype, device, head dim, grid size."""
    for name, t in zip("qkv", (q, k, v)):
        if not isinstance(t, torch.Tensor) or t.dim() != 4:
            raise ValueError(
                f"{name} must be a 4-D tensor [batch, heads, seq, head_dim], got {getattr(t, 'shape', t)}"
            )
    if not q.shape == k.shape == v.shape:
        raise ValueError(
            f"q, k, v must have one shape; got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}"
        )
    if not (q.dtype == k.dtype == v.dtype) or q.dtype not in DTYPES:
        raise ValueError(f"q, k, v must share one dtype of {DTYPES}; got {q.dtype}, {k.dtype}, {v.dtype}")
    if not (q.device == k.device == v.device):
        raise ValueError(f"q, k, v must be on one device; got {q.device}, {k.device}, {v.device}")
    if q.device.type != "cuda" and not interpreting():
        raise ValueError(f"inputs are on {q.device}: the kernel needs CUDA tensors (or TRITON_INTERPRET=1)")
    batch, heads, _, head_dim = q.shape
    per_16_bytes = 16 // q.element_size()
    if not MIN_HEAD_DIM <= head_dim <= MAX_HEAD_DIM or head_dim % per_16_bytes:
        raise ValueError(
            f"head_dim {head_dim} not supported: {MIN_HEAD_DIM}..{MAX_HEAD_DIM} and a multiple of {per_16_bytes} "
            f"for {q.dtype} (rows must be whole 16-byte units for TMA)"
        )
    if batch * heads > MAX_GRID_YZ:
        raise ValueError(f"batch * heads = {batch * heads} exceeds the grid limit {MAX_GRID_YZ}")


def _set_scratch_allocator(device: torch.device) -> None:
    """Device-side tensor descriptors need global scratch memory per descriptor and program."""
    triton.set_allocator(lambda size, alignment, stream: torch.empty(size, dtype=torch.int8, device=device))


def _launch(tuned, kernel, which: str, grid_of, args, meta) -> None:
    if interpreting():
        tile = dict(zip(BLOCK_NAMES[which], INTERPRETER_TILES[which]))
        kernel[grid_of(tile)](*args, **meta, **tile, num_warps=4, num_stages=1)
    else:
        tuned[grid_of](*args, **meta)


def _grid(batch_heads: int, seq_len: int, w: int, r: int, block_name: str):
    return lambda m: (triton.cdiv(kept_max(w, r), m[block_name]), seq_len // w, batch_heads)


def forward_order(branches) -> tuple[tuple[int, int], ...]:
    """Branches in launch order: the first r = 1 branch moved last, since it keeps every row and can write
    the output in its dtype (the LSE merge is commutative: the order changes only rounding)."""
    ones = [i for i, (_, r) in enumerate(branches) if r == 1]
    if not ones:
        return tuple(branches)
    return tuple(b for i, b in enumerate(branches) if i != ones[0]) + (branches[ones[0]],)


def forward(q, k, v, branches, causal: bool, scale: float):
    """(out like q, lse [B, H, N] fp32) of contiguous q, k, v; branches already checked."""
    batch, heads, seq_len, _ = q.shape
    order = forward_order(branches)
    writes_out = order[-1][1] == 1  # the last launch keeps every row: it writes out, no conversion pass
    # the kernel reads a row's running O only where its lse is finite (an earlier branch wrote both), so
    # the accumulator needs no zero fill (4 bytes a value: 8 GiB at 1M tokens of the report's shape, ~2 ms)
    # unless it is the output: without an r = 1 branch, a row no branch keeps must read 0
    acc = (torch.empty if writes_out else torch.zeros)(q.shape, dtype=torch.float32, device=q.device)
    lse = torch.full(q.shape[:-1], float("-inf"), dtype=torch.float32, device=q.device)
    out = torch.empty_like(q) if writes_out else acc
    meta = _meta(q, causal)
    _set_scratch_allocator(q.device)
    for i, (w, r) in enumerate(order):
        final = writes_out and i == len(order) - 1
        args = (q, k, v, acc, out, lse, scale, heads, seq_len, w, r, kept_max(w, r))
        _launch(_forward_tuned, dilated_fwd_kernel, "forward", _grid(batch * heads, seq_len, w, r, "BLOCK_M"), args,
                {**meta, "FINAL": final})  # fmt: skip
    return (out if writes_out else acc.to(q.dtype)), lse


def _meta(q, causal: bool) -> dict:
    head_dim = q.shape[-1]
    return {
        "HEAD_DIM": head_dim,
        "D_PAD": padded_head_dim(head_dim),
        "CAUSAL": causal,
        "MMA_MODE": mma_mode(q.dtype),
    }


def _delta(out, dout) -> torch.Tensor:
    rows = out.numel() // out.shape[-1]
    delta = torch.empty(out.shape[:-1], dtype=torch.float32, device=out.device)
    head_dim = out.shape[-1]
    dilated_bwd_preprocess[(triton.cdiv(rows, PREPROCESS_BLOCK),)](
        out, dout, delta, rows, HEAD_DIM=head_dim, D_PAD=padded_head_dim(head_dim), BLOCK=PREPROCESS_BLOCK
    )
    return delta


def _in_dtype(accumulator: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return accumulator if accumulator.dtype == dtype else accumulator.to(dtype)


def backward(dout, q, k, v, out, lse, branches, causal: bool, scale: float):
    """(dq, dk, dv) in q's dtype. fp32 accumulators, converted one at a time so that at most two of the
    three are alive with their converted copy (the peak memory.py counts)."""
    batch, heads, seq_len, _ = q.shape
    _set_scratch_allocator(q.device)
    delta = _delta(out, dout)
    meta = _meta(q, causal)
    dk_acc = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    dv_acc = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    for w, r in branches:
        args = (q, k, v, dout, dk_acc, dv_acc, lse, delta, scale, heads, seq_len, w, r, kept_max(w, r))
        _launch(_dkdv_tuned, dilated_bwd_dkdv_kernel, "dkdv", _grid(batch * heads, seq_len, w, r, "BLOCK_N1"), args,
                meta)  # fmt: skip
    dk = _in_dtype(dk_acc, q.dtype)
    del dk_acc
    dv = _in_dtype(dv_acc, q.dtype)
    del dv_acc
    dq_acc = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    for w, r in branches:
        args = (q, k, v, dout, dq_acc, lse, delta, scale, heads, seq_len, w, r, kept_max(w, r))
        _launch(
            _dq_tuned,
            dilated_bwd_dq_kernel,
            "dq",
            _grid(batch * heads, seq_len, w, r, "BLOCK_M2"),
            args,
            meta,
        )
    return _in_dtype(dq_acc, q.dtype), dk, dv


def best_tiles() -> dict:
    """The tiles the autotuner chose so far, per tuning key (for the GPU check and the report)."""
    return {name: {str(key): str(cfg) for key, cfg in tuned.cache.items()}
            for name, tuned in (("forward", _forward_tuned), ("dkdv", _dkdv_tuned), ("dq", _dq_tuned))}  # fmt: skip
