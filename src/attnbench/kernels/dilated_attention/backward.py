"""The backward kernels (math in the package docstring). Per call: one preprocess, then per branch two
launches that add the branch's share into fp32 gradient accumulators:

dilated_bwd_preprocess  Δ = rowsum(dO ∘ O) of the merged output, once for every branch (contiguous rows).
dilated_bwd_dkdv_kernel grid (key blocks, segments, batch * heads): program j owns dK, dV of kept key
                        block j of one segment (fp32 registers), loops over the kept query blocks that
                        see it (causal: from the diagonal on, only the diagonal masked), then adds them
                        into the accumulators' rows (read, add, write: the rows are its alone this launch).
dilated_bwd_dq_kernel   grid (query blocks, segments, batch * heads): program i owns dQ of kept query block
                        i, loops over the key blocks it sees (recomputing P and dP), adds into dQ's rows.

P = exp(scale · q kᵀ - lse) with lse the *merged* LSE of all branches, read like every per-row value
at stride r (position first + t · r). Query rows past L load lse = +inf, so their P is exactly 0.
"""

from __future__ import annotations

import triton
import triton.language as tl

from attnbench.kernels.dilated_attention.forward import KEY_TAIL_MASK, kept_rows, kept_rows_fp32
from attnbench.kernels.flash_attention2.forward import CAUSAL_MASK, LOG2E, NO_MASK, mma


@triton.jit
def dilated_bwd_preprocess(O, DO, DELTA, rows, HEAD_DIM: tl.constexpr, D_PAD: tl.constexpr,
                           BLOCK: tl.constexpr):  # fmt: skip
    """Δ for BLOCK rows of the [rows, HEAD_DIM] contiguous O and dO (every (batch, head, position))."""
    offs_r = (tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)).to(tl.int64)
    offs_d = tl.arange(0, D_PAD)
    mask = (offs_r < rows)[:, None] & (offs_d < HEAD_DIM)[None, :]
    where = offs_r[:, None] * HEAD_DIM + offs_d[None, :]
    o = tl.load(O + where, mask=mask, other=0.0).to(tl.float32)
    do = tl.load(DO + where, mask=mask, other=0.0).to(tl.float32)
    tl.store(DELTA + offs_r, tl.sum(o * do, axis=1), mask=offs_r < rows)


@triton.jit
def _dkdv_over_queries(dk, dv, k, v, desc_q, desc_do, lse_ptr, delta_ptr, lo, hi, offs_n, qk_scale, length,
                       dilation, BLOCK_M1: tl.constexpr, BLOCK_N1: tl.constexpr, MASK: tl.constexpr,
                       MMA_MODE: tl.constexpr):  # fmt: skip
    """Add to dK (unscaled), dV of one kept key block the query blocks [lo, hi) (keys are the tile rows)."""
    offs_base = tl.arange(0, BLOCK_M1)
    for start_m in tl.range(lo, hi, BLOCK_M1):
        start_m = tl.multiple_of(start_m, min(BLOCK_M1, BLOCK_N1))
        offs_m = start_m + offs_base
        valid = offs_m < length
        q = desc_q.load([start_m, 0])
        lse = tl.load(lse_ptr + offs_m * dilation, mask=valid, other=float("inf")) * LOG2E
        p_t = tl.math.exp2(
            mma(k, q.T, tl.zeros([BLOCK_N1, BLOCK_M1], tl.float32), MMA_MODE) * qk_scale - lse[None, :]
        )
        if MASK == CAUSAL_MASK:
            p_t = tl.where(offs_m[None, :] >= offs_n[:, None], p_t, 0.0)
        do = desc_do.load([start_m, 0])
        dv = mma(p_t.to(do.dtype), do, dv, MMA_MODE)
        delta = tl.load(delta_ptr + offs_m * dilation, mask=valid, other=0.0)
        dp_t = mma(v, do.T, tl.zeros([BLOCK_N1, BLOCK_M1], tl.float32), MMA_MODE)
        dk = mma((p_t * (dp_t - delta[None, :])).to(q.dtype), q, dk, MMA_MODE)
    return dk, dv


@triton.jit
def _dkdv_block(Q, K, V, DO, DK, DV, lse_ptr, delta_ptr, sm_scale, start_n, first, length, dilation,
                HEAD_DIM: tl.constexpr, D_PAD: tl.constexpr, CAUSAL: tl.constexpr, BLOCK_M1: tl.constexpr,
                BLOCK_N1: tl.constexpr, MMA_MODE: tl.constexpr):  # fmt: skip
    row_stride = dilation * HEAD_DIM
    k = kept_rows(K, first, length, row_stride, HEAD_DIM, BLOCK_N1, D_PAD).load([start_n, 0])
    v = kept_rows(V, first, length, row_stride, HEAD_DIM, BLOCK_N1, D_PAD).load([start_n, 0])
    desc_q = kept_rows(Q, first, length, row_stride, HEAD_DIM, BLOCK_M1, D_PAD)
    desc_do = kept_rows(DO, first, length, row_stride, HEAD_DIM, BLOCK_M1, D_PAD)
    offs_n = start_n + tl.arange(0, BLOCK_N1)
    dk = tl.zeros([BLOCK_N1, D_PAD], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N1, D_PAD], dtype=tl.float32)
    qk_scale = sm_scale * LOG2E
    if CAUSAL:  # the query blocks on the diagonal (masked), then every later one (all pairs allowed)
        diagonal: tl.constexpr = max(BLOCK_M1, BLOCK_N1)
        dk, dv = _dkdv_over_queries(dk, dv, k, v, desc_q, desc_do, lse_ptr, delta_ptr, start_n, start_n + diagonal,
                                    offs_n, qk_scale, length, dilation, BLOCK_M1, BLOCK_N1, CAUSAL_MASK,
                                    MMA_MODE)  # fmt: skip
        dk, dv = _dkdv_over_queries(dk, dv, k, v, desc_q, desc_do, lse_ptr, delta_ptr, start_n + diagonal, length,
                                    offs_n, qk_scale, length, dilation, BLOCK_M1, BLOCK_N1, NO_MASK,
                                    MMA_MODE)  # fmt: skip
    else:
        dk, dv = _dkdv_over_queries(dk, dv, k, v, desc_q, desc_do, lse_ptr, delta_ptr, 0, length, offs_n, qk_scale,
                                    length, dilation, BLOCK_M1, BLOCK_N1, NO_MASK, MMA_MODE)  # fmt: skip
    ptrs, mask = kept_rows_fp32(DK, first, start_n, length, dilation, HEAD_DIM, BLOCK_N1, D_PAD)
    tl.store(ptrs, tl.load(ptrs, mask=mask) + dk * sm_scale, mask=mask)
    ptrs, mask = kept_rows_fp32(DV, first, start_n, length, dilation, HEAD_DIM, BLOCK_N1, D_PAD)
    tl.store(ptrs, tl.load(ptrs, mask=mask) + dv, mask=mask)


@triton.jit
def dilated_bwd_dkdv_kernel(Q, K, V, DO, DK, DV, LSE, DELTA, sm_scale, heads, seq_len, seg_len, dilation,
                            kept_max, HEAD_DIM: tl.constexpr, D_PAD: tl.constexpr, CAUSAL: tl.constexpr,
                            BLOCK_M1: tl.constexpr, BLOCK_N1: tl.constexpr, MMA_MODE: tl.constexpr = 0):  # fmt: skip
    """One branch's dK, dV added into the fp32 DK, DV (contiguous [B, H, N, D], like Q, K, V, DO)."""
    start_n = tl.program_id(0) * BLOCK_N1  # causal: key block 0 sees every query block, launched first
    segment = tl.program_id(1)
    bh = tl.program_id(2)
    offset = (bh % heads) % dilation
    length = (seg_len - offset + dilation - 1) // dilation
    if start_n < length:
        plane = bh.to(tl.int64) * seq_len * HEAD_DIM
        first = segment.to(tl.int64) * seg_len + offset
        row0 = bh.to(tl.int64) * seq_len + first
        _dkdv_block(Q + plane, K + plane, V + plane, DO + plane, DK + plane, DV + plane, LSE + row0, DELTA + row0,
                    sm_scale, start_n, first, length, dilation, HEAD_DIM, D_PAD, CAUSAL, BLOCK_M1, BLOCK_N1,
                    MMA_MODE)  # fmt: skip


@triton.jit
def _dq_over_keys(dq, q, do, lse, delta, desc_k, desc_v, lo, hi, offs_m, qk_scale, length,
                  BLOCK_N2: tl.constexpr, MASK: tl.constexpr, MMA_MODE: tl.constexpr):  # fmt: skip
    """Add to dQ (unscaled) of one kept query block the key blocks [lo, hi)."""
    offs_base = tl.arange(0, BLOCK_N2)
    for start_n in tl.range(lo, hi, BLOCK_N2):
        start_n = tl.multiple_of(start_n, BLOCK_N2)
        offs_n = start_n + offs_base
        k = desc_k.load([start_n, 0])
        v = desc_v.load([start_n, 0])
        p = tl.math.exp2(
            mma(q, k.T, tl.zeros([q.shape[0], BLOCK_N2], tl.float32), MMA_MODE) * qk_scale - lse[:, None]
        )
        if MASK == CAUSAL_MASK:
            p = tl.where(offs_m[:, None] >= offs_n[None, :], p, 0.0)
        elif MASK == KEY_TAIL_MASK:
            p = tl.where(offs_n[None, :] < length, p, 0.0)
        dp = mma(do, v.T, tl.zeros([do.shape[0], BLOCK_N2], tl.float32), MMA_MODE)
        dq = mma((p * (dp - delta[:, None])).to(k.dtype), k, dq, MMA_MODE)
    return dq


@triton.jit
def _dq_block(Q, K, V, DO, DQ, lse_ptr, delta_ptr, sm_scale, start_m, first, length, dilation,
              HEAD_DIM: tl.constexpr, D_PAD: tl.constexpr, CAUSAL: tl.constexpr, BLOCK_M2: tl.constexpr,
              BLOCK_N2: tl.constexpr, MMA_MODE: tl.constexpr):  # fmt: skip
    row_stride = dilation * HEAD_DIM
    desc_k = kept_rows(K, first, length, row_stride, HEAD_DIM, BLOCK_N2, D_PAD)
    desc_v = kept_rows(V, first, length, row_stride, HEAD_DIM, BLOCK_N2, D_PAD)
    q = kept_rows(Q, first, length, row_stride, HEAD_DIM, BLOCK_M2, D_PAD).load([start_m, 0])
    do = kept_rows(DO, first, length, row_stride, HEAD_DIM, BLOCK_M2, D_PAD).load([start_m, 0])
    offs_m = start_m + tl.arange(0, BLOCK_M2)
    valid = offs_m < length
    lse = tl.load(lse_ptr + offs_m * dilation, mask=valid, other=float("inf")) * LOG2E
    delta = tl.load(delta_ptr + offs_m * dilation, mask=valid, other=0.0)
    dq = tl.zeros([BLOCK_M2, D_PAD], dtype=tl.float32)
    qk_scale = sm_scale * LOG2E
    if CAUSAL:  # key blocks left of the diagonal (no mask), then the diagonal ones (masked)
        dq = _dq_over_keys(dq, q, do, lse, delta, desc_k, desc_v, 0, start_m, offs_m, qk_scale, length,
                           BLOCK_N2, NO_MASK, MMA_MODE)  # fmt: skip
        dq = _dq_over_keys(dq, q, do, lse, delta, desc_k, desc_v, start_m, start_m + BLOCK_M2, offs_m, qk_scale,
                           length, BLOCK_N2, CAUSAL_MASK, MMA_MODE)  # fmt: skip
    else:
        full_end = (length // BLOCK_N2) * BLOCK_N2
        dq = _dq_over_keys(dq, q, do, lse, delta, desc_k, desc_v, 0, full_end, offs_m, qk_scale, length,
                           BLOCK_N2, NO_MASK, MMA_MODE)  # fmt: skip
        dq = _dq_over_keys(dq, q, do, lse, delta, desc_k, desc_v, full_end, length, offs_m, qk_scale, length,
                           BLOCK_N2, KEY_TAIL_MASK, MMA_MODE)  # fmt: skip
    ptrs, mask = kept_rows_fp32(DQ, first, start_m, length, dilation, HEAD_DIM, BLOCK_M2, D_PAD)
    tl.store(ptrs, tl.load(ptrs, mask=mask) + dq * sm_scale, mask=mask)


@triton.jit
def dilated_bwd_dq_kernel(Q, K, V, DO, DQ, LSE, DELTA, sm_scale, heads, seq_len, seg_len, dilation, kept_max,
                          HEAD_DIM: tl.constexpr, D_PAD: tl.constexpr, CAUSAL: tl.constexpr,
                          BLOCK_M2: tl.constexpr, BLOCK_N2: tl.constexpr, MMA_MODE: tl.constexpr = 0):  # fmt: skip
    """One branch's dQ added into the fp32 DQ (contiguous [B, H, N, D]); heaviest causal blocks first."""
    start_m = (tl.num_programs(0) - 1 - tl.program_id(0)) * BLOCK_M2
    segment = tl.program_id(1)
    bh = tl.program_id(2)
    offset = (bh % heads) % dilation
    length = (seg_len - offset + dilation - 1) // dilation
    if start_m < length:
        plane = bh.to(tl.int64) * seq_len * HEAD_DIM
        first = segment.to(tl.int64) * seg_len + offset
        row0 = bh.to(tl.int64) * seq_len + first
        _dq_block(Q + plane, K + plane, V + plane, DO + plane, DQ + plane, LSE + row0, DELTA + row0, sm_scale,
                  start_m, first, length, dilation, HEAD_DIM, D_PAD, CAUSAL, BLOCK_M2, BLOCK_N2, MMA_MODE)  # fmt: skip
