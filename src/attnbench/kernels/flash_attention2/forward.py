"""The forward kernel (math in the package docstring). One program = one block of BLOCK_M query rows of
one (batch, head); the grid is (query blocks, batch * heads), query blocks numbered heaviest first.

Every tensor is addressed through a tensor descriptor of shape [seq, head_dim] for this (batch, head):
TMA loads past the end of the sequence (or past head_dim, when it is padded to a power of two) return
zeros and stores there are dropped, so no load or store needs a mask. Keys past the end do need one in
the scores (a zero key still scores 0): only the last key block of a non-causal row carries it; with a
causal mask (seqlen_q == seqlen_k) the diagonal mask already excludes them for every real row.

Two loop structures, chosen by the tile: the default splits the key blocks into stages that need no
mask (all but the diagonal/last block) and the one or two that do; a warp-specialised tile
(WARP_SPECIALIZE) runs a single loop that masks every block, the only form Triton 3.6 warp-specialises
on Hopper (configs.py says why).
"""

from __future__ import annotations

import triton
import triton.language as tl

# Globals a @triton.jit function reads must be tl.constexpr.
LOG2E = tl.constexpr(1.4426950408889634)  # log2(e): exp(x) = exp2(x * LOG2E)
LN2 = tl.constexpr(0.6931471805599453)  # ln(2): log(x) = log2(x) * LN2
MASKED = tl.constexpr(-1.0e6)  # added to masked scores (log2 units): finite, so a fully masked block
# contributes exp2(-1e6 - m) = 0 and never NaN (as -inf - -inf would)
NO_MASK = tl.constexpr(0)
CAUSAL_MASK = tl.constexpr(1)  # key j allowed for query i when j <= i (seqlen_q == seqlen_k)
KEY_TAIL_MASK = tl.constexpr(2)  # key j allowed when j < seqlen_k (the last, partial key block)


# How mma multiplies (a constexpr, so each mode compiles its own kernel):
MMA_NATIVE = tl.constexpr(0)  # tl.dot's default: tensor cores in the input dtype; fp32 inputs run TF32
MMA_UPCAST = tl.constexpr(1)  # 16-bit inputs multiplied in fp32: only for the Triton interpreter (below)
MMA_IEEE = tl.constexpr(2)  # true fp32 (input_precision="ieee"): no TF32 rounding of fp32 inputs


@triton.jit
def mma(a, b, acc, MMA_MODE: tl.constexpr):
    """acc + a @ b with fp32 accumulation. MMA_UPCAST: multiply in fp32 instead (exact for 16-bit inputs,
    whose products fit an fp32 mantissa); only for the Triton interpreter, whose dot misreads bfloat16 as
    integers. MMA_IEEE: fp32 inputs multiplied in full fp32 (slower: no TF32 tensor-core rounding)."""
    if MMA_MODE == 1:
        return tl.dot(a.to(tl.float32), b.to(tl.float32), acc)
    if MMA_MODE == 2:
        return tl.dot(a, b, acc, input_precision="ieee")
    return tl.dot(a, b, acc)


@triton.jit
def _fwd_inner(
    acc,
    l_i,
    m_i,
    q,
    desc_k,
    desc_v,
    lo,
    hi,
    offs_m,
    qk_scale,
    seqlen_k,
    BLOCK_N: tl.constexpr,
    MASK: tl.constexpr,
    WARP_SPECIALIZE: tl.constexpr,
    MMA_MODE: tl.constexpr,
):
    """Online softmax over key blocks [lo, hi): returns the updated (acc, l_i, m_i)."""
    offs_n = tl.arange(0, BLOCK_N)
    for start_n in tl.range(lo, hi, BLOCK_N, warp_specialize=WARP_SPECIALIZE):
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
                allowed = (start_n + offs_n)[None, :] < seqlen_k
            qk = qk * qk_scale + tl.where(allowed, 0.0, MASKED)
            m_ij = tl.maximum(m_i, tl.max(qk, 1))
            qk = qk - m_ij[:, None]
        p = tl.math.exp2(qk)
        alpha = tl.math.exp2(m_i - m_ij)
        l_ij = tl.sum(p, 1)
        acc = acc * alpha[:, None]
        v = desc_v.load([start_n, 0])
        acc = mma(p.to(v.dtype), v, acc, MMA_MODE)
        l_i = l_i * alpha + l_ij  # updated after the dot: keeps fewer values live across it
        m_i = m_ij
    return acc, l_i, m_i


@triton.jit
def _head_descriptor(
    base, seqlen, stride_s, HEAD_DIM: tl.constexpr, BLOCK: tl.constexpr, D_PAD: tl.constexpr
):
    """[seqlen, HEAD_DIM] view of one (batch, head), read and written in [BLOCK, D_PAD] tiles."""
    return tl.make_tensor_descriptor(
        base, shape=[seqlen, HEAD_DIM], strides=[stride_s, 1], block_shape=[BLOCK, D_PAD]
    )


@triton.jit
def flash_fwd_kernel(
    Q,
    K,
    V,
    O,
    LSE,
    sm_scale,
    stride_qb,
    stride_qh,
    stride_qs,
    stride_kb,
    stride_kh,
    stride_ks,
    stride_vb,
    stride_vh,
    stride_vs,
    stride_ob,
    stride_oh,
    stride_os,
    heads,
    group,
    seqlen_q,
    seqlen_k,
    batch_heads,
    HEAD_DIM: tl.constexpr,
    D_PAD: tl.constexpr,
    CAUSAL: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    WARP_SPECIALIZE: tl.constexpr,
    PERSISTENT: tl.constexpr = 0,
    MMA_MODE: tl.constexpr = 0,
):
    """One block of BLOCK_M query rows of one (batch, head) per program, on the grid (query blocks,
    batch * heads); or, PERSISTENT = k > 0, a grid of k programs per SM, each taking blocks in turn from
    one list ordered heaviest first over every head (block i: query block num_m - 1 - i // batch_heads of
    (batch, head) i % batch_heads), so that the causal mask's long rows start first on every SM and the
    short ones fill the tail."""
    if PERSISTENT:
        num_m = tl.cdiv(seqlen_q, BLOCK_M)
        for block in tl.range(tl.program_id(0), num_m * batch_heads, tl.num_programs(0)):
            _fwd_block(
                Q, K, V, O, LSE, sm_scale, stride_qb, stride_qh, stride_qs, stride_kb, stride_kh, stride_ks,
                stride_vb, stride_vh, stride_vs, stride_ob, stride_oh, stride_os, heads, group, seqlen_q,
                seqlen_k, num_m - 1 - block // batch_heads, block % batch_heads,
                HEAD_DIM, D_PAD, CAUSAL, BLOCK_M, BLOCK_N, WARP_SPECIALIZE, MMA_MODE,
            )  # fmt: skip
    else:
        _fwd_block(
            Q, K, V, O, LSE, sm_scale, stride_qb, stride_qh, stride_qs, stride_kb, stride_kh, stride_ks,
            stride_vb, stride_vh, stride_vs, stride_ob, stride_oh, stride_os, heads, group, seqlen_q,
            seqlen_k, tl.num_programs(0) - 1 - tl.program_id(0), tl.program_id(1),  # heaviest blocks first
            HEAD_DIM, D_PAD, CAUSAL, BLOCK_M, BLOCK_N, WARP_SPECIALIZE, MMA_MODE,
        )  # fmt: skip


@triton.jit
def _fwd_block(
    Q,
    K,
    V,
    O,
    LSE,
    sm_scale,
    stride_qb,
    stride_qh,
    stride_qs,
    stride_kb,
    stride_kh,
    stride_ks,
    stride_vb,
    stride_vh,
    stride_vs,
    stride_ob,
    stride_oh,
    stride_os,
    heads,
    group,
    seqlen_q,
    seqlen_k,
    start_m,
    bh,
    HEAD_DIM: tl.constexpr,
    D_PAD: tl.constexpr,
    CAUSAL: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    WARP_SPECIALIZE: tl.constexpr,
    MMA_MODE: tl.constexpr,
):
    """Query block `start_m` of (batch, head) `bh`: its output rows and their log-sum-exp."""
    b = bh // heads
    h = bh % heads
    hk = h // group  # the key/value head this query head reads (GQA)
    b64, h64, hk64 = b.to(tl.int64), h.to(tl.int64), hk.to(tl.int64)
    desc_q = _head_descriptor(
        Q + b64 * stride_qb + h64 * stride_qh, seqlen_q, stride_qs, HEAD_DIM, BLOCK_M, D_PAD
    )
    desc_k = _head_descriptor(
        K + b64 * stride_kb + hk64 * stride_kh, seqlen_k, stride_ks, HEAD_DIM, BLOCK_N, D_PAD
    )
    desc_v = _head_descriptor(
        V + b64 * stride_vb + hk64 * stride_vh, seqlen_k, stride_vs, HEAD_DIM, BLOCK_N, D_PAD
    )
    desc_o = _head_descriptor(
        O + b64 * stride_ob + h64 * stride_oh, seqlen_q, stride_os, HEAD_DIM, BLOCK_M, D_PAD
    )

    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, D_PAD], dtype=tl.float32)
    qk_scale = sm_scale * LOG2E
    q = desc_q.load([start_m * BLOCK_M, 0])

    if WARP_SPECIALIZE:
        # Triton 3.6 warp-specialises a loop on Hopper only when it is the kernel's only loop with dots
        # and has no branch inside: one loop over every key block, the mask applied on each of them.
        if CAUSAL:
            hi = (start_m + 1) * BLOCK_M  # keys past the end read as zeros and are masked for every real row
            acc, l_i, m_i = _fwd_inner(
                acc, l_i, m_i, q, desc_k, desc_v, 0, hi, offs_m, qk_scale, seqlen_k,
                BLOCK_N, CAUSAL_MASK, True, MMA_MODE,
            )  # fmt: skip
        else:
            acc, l_i, m_i = _fwd_inner(
                acc, l_i, m_i, q, desc_k, desc_v, 0, seqlen_k, offs_m, qk_scale, seqlen_k,
                BLOCK_N, KEY_TAIL_MASK, True, MMA_MODE,
            )  # fmt: skip
    elif CAUSAL:
        # keys strictly left of this block's diagonal: every (query, key) pair allowed, no mask
        diagonal = start_m * BLOCK_M
        acc, l_i, m_i = _fwd_inner(
            acc, l_i, m_i, q, desc_k, desc_v, 0, diagonal, offs_m, qk_scale, seqlen_k,
            BLOCK_N, NO_MASK, False, MMA_MODE,
        )  # fmt: skip
        diagonal_end = diagonal + BLOCK_M  # keys past the end: zeros, masked for every real row
        acc, l_i, m_i = _fwd_inner(
            acc, l_i, m_i, q, desc_k, desc_v, diagonal, diagonal_end, offs_m, qk_scale, seqlen_k,
            BLOCK_N, CAUSAL_MASK, False, MMA_MODE,
        )  # fmt: skip
    else:
        full_end = (seqlen_k // BLOCK_N) * BLOCK_N
        acc, l_i, m_i = _fwd_inner(
            acc, l_i, m_i, q, desc_k, desc_v, 0, full_end, offs_m, qk_scale, seqlen_k,
            BLOCK_N, NO_MASK, False, MMA_MODE,
        )  # fmt: skip
        acc, l_i, m_i = _fwd_inner(
            acc, l_i, m_i, q, desc_k, desc_v, full_end, seqlen_k, offs_m, qk_scale, seqlen_k,
            BLOCK_N, KEY_TAIL_MASK, False, MMA_MODE,
        )  # fmt: skip

    acc = acc / l_i[:, None]
    desc_o.store([start_m * BLOCK_M, 0], acc.to(O.dtype.element_ty))
    lse = (m_i + tl.math.log2(l_i)) * LN2
    tl.store(LSE + bh.to(tl.int64) * seqlen_q + offs_m, lse, mask=offs_m < seqlen_q)
