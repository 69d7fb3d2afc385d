"""The forward kernel of one branch (math in the package docstring), merging into the running output.

One program = one block of BLOCK_M kept query rows of one segment of one (batch, head); grid
(query blocks, segments, batch * heads), query blocks numbered heaviest first. The program sees its
segment's kept rows as a dense [L, head_dim] matrix through a tensor descriptor whose row stride is
r * head_dim (TMA on Hopper): the first kept row is segment * w + offset, offset = head mod r, and rows
past L read as zeros and are never written. Inside that view the branch is ordinary attention over
L rows (causal: the lower triangle), run with FlashAttention-2's online softmax; the epilogue merges
the block's (O_i, lse_i) into the fp32 running (O, lse) of the same rows by log-sum-exp. A (head,
position) belongs to at most one program of a branch, and branches are separate launches, so the
read-merge-write needs no atomics.
"""

from __future__ import annotations

import triton
import triton.language as tl

from attnbench.kernels.flash_attention2.forward import CAUSAL_MASK, LN2, LOG2E, MASKED, NO_MASK, mma

KEY_TAIL_MASK = tl.constexpr(2)  # key t allowed when t < L (the last, partial key block of a full row)


@triton.jit
def kept_rows(base, first, length, row_stride, HEAD_DIM: tl.constexpr, BLOCK: tl.constexpr,
              D_PAD: tl.constexpr):  # fmt: skip
    """[L, HEAD_DIM] view of a segment's kept rows: row t is position first + t * r (row_stride = r * D),
    read and written in [BLOCK, D_PAD] tiles (zeros past L or past HEAD_DIM; stores there dropped)."""
    return tl.make_tensor_descriptor(
        base + first * HEAD_DIM, shape=[length, HEAD_DIM], strides=[row_stride, 1], block_shape=[BLOCK, D_PAD]
    )


@triton.jit
def kept_rows_fp32(base, first, start, length, dilation, HEAD_DIM: tl.constexpr, BLOCK: tl.constexpr,
                   D_PAD: tl.constexpr):  # fmt: skip
    """(pointers, mask) of kept rows start .. start + BLOCK of an fp32 accumulator. Plain loads and
    stores, not a descriptor: a row of fp32 accumulators is read and written once per block, and a
    [BLOCK, 128] fp32 TMA box would exceed the 128-byte swizzle width."""
    t = start + tl.arange(0, BLOCK)
    d = tl.arange(0, D_PAD)
    rows = first + t.to(tl.int64) * dilation
    return base + rows[:, None] * HEAD_DIM + d[None, :], (t < length)[:, None] & (d < HEAD_DIM)[None, :]


@triton.jit
def _attend(acc, l_i, m_i, q, desc_k, desc_v, lo, hi, offs_m, qk_scale, length,
            BLOCK_N: tl.constexpr, MASK: tl.constexpr, MMA_MODE: tl.constexpr):  # fmt: skip
    """Online softmax over key blocks [lo, hi) of the kept rows: the updated (acc, l_i, m_i), log2 units."""
    offs_n = tl.arange(0, BLOCK_N)
    for start_n in tl.range(lo, hi, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        k = desc_k.load([start_n, 0])
        qk = mma(q, k.T, tl.zeros([q.shape[0], BLOCK_N], tl.float32), MMA_MODE)
        if MASK == NO_MASK:
            m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
            qk = qk * qk_scale - m_ij[:, None]
        else:
            if MASK == CAUSAL_MASK:
                allowed = offs_m[:, None] >= (start_n + offs_n)[None, :]
            else:  # KEY_TAIL_MASK
                allowed = (start_n + offs_n)[None, :] < length
            qk = qk * qk_scale + tl.where(allowed, 0.0, MASKED)
            m_ij = tl.maximum(m_i, tl.max(qk, 1))
            qk = qk - m_ij[:, None]
        p = tl.math.exp2(qk)
        alpha = tl.math.exp2(m_i - m_ij)
        acc = acc * alpha[:, None]
        v = desc_v.load([start_n, 0])
        acc = mma(p.to(v.dtype), v, acc, MMA_MODE)
        l_i = l_i * alpha + tl.sum(p, 1)
        m_i = m_ij
    return acc, l_i, m_i


@triton.jit
def _merged(acc, l_i, m_i, running, lse_run):
    """(O, lse) of this block's rows after merging its branch result into their running (O, lse).

    lse = log(e^lse_run + e^lse_i) (natural log); O = e^(lse_run - lse) O_run + e^(lse_i - lse) O_i. A
    row no earlier branch kept has lse_run = -inf, O_run = 0 (not read): weight 0, no NaN (lse_i is
    finite, since every kept query sees at least one key)."""
    lse_i = (m_i + tl.math.log2(l_i)) * LN2
    top = tl.maximum(lse_run, lse_i)
    lse = top + tl.log(tl.exp(lse_run - top) + tl.exp(lse_i - top))
    merged = running * tl.exp(lse_run - lse)[:, None]
    merged += (acc / l_i[:, None]) * tl.exp(lse_i - lse)[:, None]
    return merged, lse


@triton.jit
def _forward_block(Q, K, V, ACC, OUT, sm_scale, start_m, first, length, dilation, lse_rows,
                   HEAD_DIM: tl.constexpr, D_PAD: tl.constexpr, CAUSAL: tl.constexpr, FINAL: tl.constexpr,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, MMA_MODE: tl.constexpr):  # fmt: skip
    row_stride = dilation * HEAD_DIM
    desc_q = kept_rows(Q, first, length, row_stride, HEAD_DIM, BLOCK_M, D_PAD)
    desc_k = kept_rows(K, first, length, row_stride, HEAD_DIM, BLOCK_N, D_PAD)
    desc_v = kept_rows(V, first, length, row_stride, HEAD_DIM, BLOCK_N, D_PAD)
    offs_m = start_m + tl.arange(0, BLOCK_M)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, D_PAD], dtype=tl.float32)
    qk_scale = sm_scale * LOG2E
    q = desc_q.load([start_m, 0])
    if CAUSAL:  # keys left of the diagonal need no mask; the diagonal block's keys past L are masked too
        acc, l_i, m_i = _attend(acc, l_i, m_i, q, desc_k, desc_v, 0, start_m, offs_m, qk_scale, length,
                                BLOCK_N, NO_MASK, MMA_MODE)  # fmt: skip
        acc, l_i, m_i = _attend(acc, l_i, m_i, q, desc_k, desc_v, start_m, start_m + BLOCK_M, offs_m, qk_scale,
                                length, BLOCK_N, CAUSAL_MASK, MMA_MODE)  # fmt: skip
    else:
        full_end = (length // BLOCK_N) * BLOCK_N
        acc, l_i, m_i = _attend(acc, l_i, m_i, q, desc_k, desc_v, 0, full_end, offs_m, qk_scale, length,
                                BLOCK_N, NO_MASK, MMA_MODE)  # fmt: skip
        acc, l_i, m_i = _attend(acc, l_i, m_i, q, desc_k, desc_v, full_end, length, offs_m, qk_scale, length,
                                BLOCK_N, KEY_TAIL_MASK, MMA_MODE)  # fmt: skip
    acc_ptrs, acc_mask = kept_rows_fp32(ACC, first, start_m, length, dilation, HEAD_DIM, BLOCK_M, D_PAD)
    # a row's running O is read only if an earlier branch wrote it (its lse is finite): the accumulator
    # needs no zero fill, and the first branch to keep a row reads nothing for it
    lse_run = tl.load(lse_rows, mask=offs_m < length, other=float("-inf"))
    written = lse_run > float("-inf")
    running = tl.load(acc_ptrs, mask=acc_mask & written[:, None], other=0.0)
    merged, lse = _merged(acc, l_i, m_i, running, lse_run)
    if FINAL:  # the last launch (an r = 1 branch: it keeps every row) writes the output in its dtype
        desc_out = kept_rows(OUT, first, length, row_stride, HEAD_DIM, BLOCK_M, D_PAD)
        desc_out.store([start_m, 0], merged.to(OUT.dtype.element_ty))
    else:
        tl.store(acc_ptrs, merged, mask=acc_mask)
    tl.store(lse_rows, lse, mask=offs_m < length)


@triton.jit
def dilated_fwd_kernel(Q, K, V, ACC, OUT, LSE, sm_scale, heads, seq_len, seg_len, dilation, kept_max,
                       HEAD_DIM: tl.constexpr, D_PAD: tl.constexpr, CAUSAL: tl.constexpr, FINAL: tl.constexpr,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, MMA_MODE: tl.constexpr = 0):  # fmt: skip
    """One branch (w = seg_len, r = dilation) over q, k, v, ACC, OUT contiguous [B, H, N, D] and LSE [B, H, N].
    kept_max = ceil(w / r) sizes the grid (and keys the autotuner); a head whose offset keeps fewer
    rows (or none: offset >= w) leaves the extra programs idle."""
    start_m = (tl.num_programs(0) - 1 - tl.program_id(0)) * BLOCK_M  # heaviest causal blocks first
    segment = tl.program_id(1)
    bh = tl.program_id(2)
    offset = (bh % heads) % dilation
    length = (seg_len - offset + dilation - 1) // dilation  # L of this head's offset (<= 0: none kept)
    if start_m < length:
        plane = bh.to(tl.int64) * seq_len * HEAD_DIM  # this (batch, head)'s [N, D] plane
        first = segment.to(tl.int64) * seg_len + offset
        lse_rows = LSE + bh.to(tl.int64) * seq_len + first + (start_m + tl.arange(0, BLOCK_M)) * dilation
        _forward_block(Q + plane, K + plane, V + plane, ACC + plane, OUT + plane, sm_scale, start_m, first,
                       length, dilation, lse_rows, HEAD_DIM, D_PAD, CAUSAL, FINAL, BLOCK_M, BLOCK_N,
                       MMA_MODE)  # fmt: skip
