"""The backward kernels (math and the dQ choice in the package docstring). Three launches:

flash_bwd_preprocess   Δ_i = Σ_d dO_id · O_id (fp32), one program per block of query rows.
flash_bwd_dkdv_kernel  grid (key blocks, batch * kv_heads). Program j owns dK, dV of key block j
                       (BLOCK_N1 keys, kept in fp32 registers): it loops over the query heads of its group
                       and over the query blocks (BLOCK_M1 rows) that see it; causal: it starts at the
                       diagonal, the diagonal blocks masked, every later one without a mask.
                       (dq_mode "atomic") it also adds scale · dS K into an fp32 dQ buffer: with TMA
                       bulk reductions (one `cp.reduce.async.bulk` per 128-byte-wide column chunk of the
                       tile, as FlashAttention-3 does) on a GPU, with per-element atomics under the
                       interpreter, which has no descriptor reductions.
flash_bwd_dq_kernel    (dq_mode "recompute") grid (query blocks, batch * heads). Program i owns dQ of
                       query block i (BLOCK_M2 rows): it loops over the key blocks it sees (BLOCK_N2
                       keys), recomputing P and dP; causal: the blocks left of the diagonal unmasked,
                       then the diagonal ones masked; heaviest query blocks launched first.

The two main kernels are separate launches so that each runs at its own tile, warps and pipeline depth
(dK/dV keeps two fp32 accumulators of BLOCK_N1 x D; dQ one of BLOCK_M2 x D), and the dQ grid covers every
query head instead of looping over a GQA group.

Rows past the end of a sequence read as zeros through the descriptors; their lse is loaded as +inf, so
their P is exactly 0 and they add nothing to dK, dV (and their dQ rows are never stored).
"""

from __future__ import annotations

import triton
import triton.language as tl

from attnbench.kernels.flash_attention2.forward import (
    CAUSAL_MASK,
    KEY_TAIL_MASK,
    LOG2E,
    NO_MASK,
    _head_descriptor,
    mma,
)

# How the dK/dV kernel contributes to dQ (its DQ_ACCUMULATE constexpr)
DQ_OWN_KERNEL = tl.constexpr(0)  # not at all: flash_bwd_dq_kernel computes dQ (dq_mode "recompute")
DQ_ATOMIC_ADD = tl.constexpr(
    1
)  # per-element fp32 atomic adds (dq_mode "atomic" where descriptors cannot reduce)
DQ_BULK_REDUCE = tl.constexpr(
    2
)  # TMA bulk reductions of whole tiles into the fp32 buffer (dq_mode "atomic" on a GPU)
DQ_CHUNK = tl.constexpr(
    32
)  # fp32 columns per bulk reduction: 128 bytes, the widest box a swizzled TMA transfer takes


@triton.jit
def _put(desc, row, col, x, ADD: tl.constexpr):
    if ADD:
        desc.atomic_add([row, col], x)
    else:  # a plain store: what the interpreter can run, so that tests check the chunking
        desc.store([row, col], x)


@triton.jit
def _reduce_dq(desc_dq, start_m, dq, D_PAD: tl.constexpr, ADD: tl.constexpr = True):
    """Add the [BLOCK, D_PAD] fp32 tile `dq` into the buffer at row start_m, DQ_CHUNK columns per
    transfer: the tile is split in registers (chunk c of a row holds columns c*DQ_CHUNK ...)."""
    if D_PAD <= DQ_CHUNK:
        _put(desc_dq, start_m, 0, dq, ADD)
    elif D_PAD == 2 * DQ_CHUNK:
        c0, c1 = tl.split(tl.reshape(dq, [dq.shape[0], 2, DQ_CHUNK]).permute(0, 2, 1))
        _put(desc_dq, start_m, 0, c0, ADD)
        _put(desc_dq, start_m, DQ_CHUNK, c1, ADD)
    else:
        tl.static_assert(D_PAD == 4 * DQ_CHUNK, "bulk dQ reduction: head dims up to 128")
        # chunk 2a + b sits at [:, a, b, :]: split off b, then a
        even, odd = tl.split(tl.reshape(dq, [dq.shape[0], 2, 2, DQ_CHUNK]).permute(0, 3, 1, 2))
        c0, c2 = tl.split(even)
        c1, c3 = tl.split(odd)
        _put(desc_dq, start_m, 0, c0, ADD)
        _put(desc_dq, start_m, DQ_CHUNK, c1, ADD)
        _put(desc_dq, start_m, 2 * DQ_CHUNK, c2, ADD)
        _put(desc_dq, start_m, 3 * DQ_CHUNK, c3, ADD)


@triton.jit
def flash_bwd_preprocess(
    O,
    DO,
    DELTA,
    stride_ob,
    stride_oh,
    stride_os,
    stride_dob,
    stride_doh,
    stride_dos,
    heads,
    seqlen_q,
    HEAD_DIM: tl.constexpr,
    D_PAD: tl.constexpr,
    BLOCK_M: tl.constexpr,
):
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    bh = tl.program_id(1)
    b = (bh // heads).to(tl.int64)
    h = (bh % heads).to(tl.int64)
    offs_d = tl.arange(0, D_PAD)
    mask = (offs_m < seqlen_q)[:, None] & (offs_d < HEAD_DIM)[None, :]
    o = tl.load(
        O + b * stride_ob + h * stride_oh + offs_m[:, None] * stride_os + offs_d[None, :],
        mask=mask,
        other=0.0,
    )
    do = tl.load(
        DO + b * stride_dob + h * stride_doh + offs_m[:, None] * stride_dos + offs_d[None, :],
        mask=mask,
        other=0.0,
    )
    delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), axis=1)
    tl.store(DELTA + bh.to(tl.int64) * seqlen_q + offs_m, delta, mask=offs_m < seqlen_q)


@triton.jit
def _bwd_dkdv(
    dk,
    dv,
    k,
    v,
    desc_q,
    desc_do,
    lse_ptr,
    delta_ptr,
    dq_ptr,
    desc_dq,
    lo,
    hi,
    offs_n,
    sm_scale,
    qk_scale,
    seqlen_q,
    D_PAD: tl.constexpr,
    BLOCK_M1: tl.constexpr,
    MASK: tl.constexpr,
    DQ_ACCUMULATE: tl.constexpr,
    MMA_MODE: tl.constexpr,
    BLOCK_N1: tl.constexpr,
):
    """Accumulate dK, dV of one key block over query blocks [lo, hi) (transposed tiles: keys are rows)."""
    offs_base = tl.arange(0, BLOCK_M1)
    for start_m in tl.range(lo, hi, BLOCK_M1):
        start_m = tl.multiple_of(start_m, min(BLOCK_M1, BLOCK_N1))
        offs_m = start_m + offs_base
        q = desc_q.load([start_m, 0])
        lse = tl.load(lse_ptr + offs_m, mask=offs_m < seqlen_q, other=float("inf")) * LOG2E
        qk_t = mma(k, q.T, tl.zeros([k.shape[0], BLOCK_M1], tl.float32), MMA_MODE)
        p_t = tl.math.exp2(qk_t * qk_scale - lse[None, :])
        if MASK == CAUSAL_MASK:
            p_t = tl.where(offs_m[None, :] >= offs_n[:, None], p_t, 0.0)
        do = desc_do.load([start_m, 0])
        dv = mma(p_t.to(do.dtype), do, dv, MMA_MODE)
        delta = tl.load(delta_ptr + offs_m, mask=offs_m < seqlen_q, other=0.0)
        dp_t = mma(v, do.T, tl.zeros([v.shape[0], BLOCK_M1], tl.float32), MMA_MODE)
        ds_t = p_t * (dp_t - delta[None, :])
        dk = mma(ds_t.to(q.dtype), q, dk, MMA_MODE)
        if DQ_ACCUMULATE == DQ_BULK_REDUCE:
            dq = mma(ds_t.T.to(k.dtype), k, tl.zeros([BLOCK_M1, D_PAD], tl.float32), MMA_MODE) * sm_scale
            _reduce_dq(desc_dq, start_m, dq, D_PAD)  # rows past seqlen_q fall outside the descriptor
        elif DQ_ACCUMULATE == DQ_ATOMIC_ADD:
            dq = mma(ds_t.T.to(k.dtype), k, tl.zeros([BLOCK_M1, D_PAD], tl.float32), MMA_MODE) * sm_scale
            offs_d = tl.arange(0, D_PAD)
            tl.atomic_add(
                dq_ptr + offs_m[:, None] * D_PAD + offs_d[None, :],
                dq,
                mask=(offs_m < seqlen_q)[:, None],
                sem="relaxed",
            )
    return dk, dv


@triton.jit
def _bwd_dq(
    dq,
    q,
    do,
    lse,
    delta,
    desc_k,
    desc_v,
    lo,
    hi,
    offs_m,
    qk_scale,
    seqlen_k,
    BLOCK_N2: tl.constexpr,
    MASK: tl.constexpr,
    MMA_MODE: tl.constexpr,
):
    """Accumulate dQ (unscaled) of one query block over key blocks [lo, hi)."""
    offs_base = tl.arange(0, BLOCK_N2)
    for start_n in tl.range(lo, hi, BLOCK_N2):
        start_n = tl.multiple_of(start_n, BLOCK_N2)
        offs_n = start_n + offs_base
        k = desc_k.load([start_n, 0])
        v = desc_v.load([start_n, 0])
        qk = mma(q, k.T, tl.zeros([q.shape[0], BLOCK_N2], tl.float32), MMA_MODE)
        p = tl.math.exp2(qk * qk_scale - lse[:, None])
        if MASK == CAUSAL_MASK:
            p = tl.where(offs_m[:, None] >= offs_n[None, :], p, 0.0)
        elif MASK == KEY_TAIL_MASK:
            p = tl.where(offs_n[None, :] < seqlen_k, p, 0.0)
        dp = mma(do, v.T, tl.zeros([do.shape[0], BLOCK_N2], tl.float32), MMA_MODE)
        ds = p * (dp - delta[:, None])
        dq = mma(ds.to(k.dtype), k, dq, MMA_MODE)
    return dq


@triton.jit
def flash_bwd_dkdv_kernel(
    Q,
    K,
    V,
    DO,
    DK,
    DV,
    LSE,
    DELTA,
    DQ_ACC,
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
    stride_dob,
    stride_doh,
    stride_dos,
    heads,
    kv_heads,
    group,
    seqlen_q,
    seqlen_k,
    HEAD_DIM: tl.constexpr,
    D_PAD: tl.constexpr,
    CAUSAL: tl.constexpr,
    BLOCK_M1: tl.constexpr,
    BLOCK_N1: tl.constexpr,
    DQ_ACCUMULATE: tl.constexpr,
    MMA_MODE: tl.constexpr = 0,
):
    """dK, dV of key block `program_id(0)` (grid: key blocks, batch * kv_heads). With a causal mask key
    block 0 sees every query block: program 0 is the heaviest, so the launch order is heaviest first.
    DK, DV have the strides of K, V (the launcher allocates them with empty_like)."""
    pid = tl.program_id(0)
    bhk = tl.program_id(1)
    b = (bhk // kv_heads).to(tl.int64)
    hk = (bhk % kv_heads).to(tl.int64)
    qk_scale = sm_scale * LOG2E
    start_n = pid * BLOCK_N1
    DIAG: tl.constexpr = max(BLOCK_M1, BLOCK_N1)
    desc_k = _head_descriptor(
        K + b * stride_kb + hk * stride_kh, seqlen_k, stride_ks, HEAD_DIM, BLOCK_N1, D_PAD
    )
    desc_v = _head_descriptor(
        V + b * stride_vb + hk * stride_vh, seqlen_k, stride_vs, HEAD_DIM, BLOCK_N1, D_PAD
    )
    k = desc_k.load([start_n, 0])
    v = desc_v.load([start_n, 0])
    offs_n = start_n + tl.arange(0, BLOCK_N1)
    dk = tl.zeros([BLOCK_N1, D_PAD], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N1, D_PAD], dtype=tl.float32)
    for g in range(group):
        h = hk * group + g
        desc_q = _head_descriptor(
            Q + b * stride_qb + h * stride_qh, seqlen_q, stride_qs, HEAD_DIM, BLOCK_M1, D_PAD
        )
        desc_do = _head_descriptor(
            DO + b * stride_dob + h * stride_doh, seqlen_q, stride_dos, HEAD_DIM, BLOCK_M1, D_PAD
        )
        row = (b * heads + h) * seqlen_q
        dq_ptr = DQ_ACC + row * D_PAD
        desc_dq = dq_ptr  # unused unless bulk-reducing (the interpreter cannot build what it cannot run)
        if DQ_ACCUMULATE == DQ_BULK_REDUCE:
            desc_dq = tl.make_tensor_descriptor(
                dq_ptr,
                shape=[seqlen_q, D_PAD],
                strides=[D_PAD, 1],
                block_shape=[BLOCK_M1, min(D_PAD, DQ_CHUNK)],
            )
        if CAUSAL:
            # query blocks on the diagonal (masked), then every later one (all pairs allowed). The diagonal
            # stage spans max(BLOCK_N1, BLOCK_M1) rows from start_n: with BLOCK_M1 > BLOCK_N1 it is one
            # query block starting at start_n (not a multiple of BLOCK_M1: descriptors take any offset)
            dk, dv = _bwd_dkdv(
                dk, dv, k, v, desc_q, desc_do, LSE + row, DELTA + row, dq_ptr, desc_dq, start_n, start_n + DIAG,
                offs_n, sm_scale, qk_scale, seqlen_q, D_PAD, BLOCK_M1, CAUSAL_MASK, DQ_ACCUMULATE, MMA_MODE, BLOCK_N1,
            )  # fmt: skip
            dk, dv = _bwd_dkdv(
                dk, dv, k, v, desc_q, desc_do, LSE + row, DELTA + row, dq_ptr, desc_dq, start_n + DIAG, seqlen_q,
                offs_n, sm_scale, qk_scale, seqlen_q, D_PAD, BLOCK_M1, NO_MASK, DQ_ACCUMULATE, MMA_MODE, BLOCK_N1,
            )  # fmt: skip
        else:
            dk, dv = _bwd_dkdv(
                dk, dv, k, v, desc_q, desc_do, LSE + row, DELTA + row, dq_ptr, desc_dq, 0, seqlen_q,
                offs_n, sm_scale, qk_scale, seqlen_q, D_PAD, BLOCK_M1, NO_MASK, DQ_ACCUMULATE, MMA_MODE, BLOCK_N1,
            )  # fmt: skip
    desc_dk = _head_descriptor(
        DK + b * stride_kb + hk * stride_kh, seqlen_k, stride_ks, HEAD_DIM, BLOCK_N1, D_PAD
    )
    desc_dv = _head_descriptor(
        DV + b * stride_vb + hk * stride_vh, seqlen_k, stride_vs, HEAD_DIM, BLOCK_N1, D_PAD
    )
    desc_dk.store([start_n, 0], (dk * sm_scale).to(DK.dtype.element_ty))
    desc_dv.store([start_n, 0], dv.to(DV.dtype.element_ty))


@triton.jit
def flash_bwd_dq_kernel(
    Q,
    K,
    V,
    DO,
    DQ,
    LSE,
    DELTA,
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
    stride_dob,
    stride_doh,
    stride_dos,
    heads,
    group,
    seqlen_q,
    seqlen_k,
    HEAD_DIM: tl.constexpr,
    D_PAD: tl.constexpr,
    CAUSAL: tl.constexpr,
    BLOCK_M2: tl.constexpr,
    BLOCK_N2: tl.constexpr,
    MMA_MODE: tl.constexpr = 0,
):
    """dQ of one query block of one query head (grid: query blocks, batch * heads), recomputing P and dP
    over its key blocks; causal query blocks are launched heaviest (last) first. DQ has Q's strides."""
    start_m = (tl.num_programs(0) - 1 - tl.program_id(0)) * BLOCK_M2
    bh = tl.program_id(1)
    b = (bh // heads).to(tl.int64)
    h = (bh % heads).to(tl.int64)
    hk = h // group
    qk_scale = sm_scale * LOG2E
    desc_k = _head_descriptor(
        K + b * stride_kb + hk * stride_kh, seqlen_k, stride_ks, HEAD_DIM, BLOCK_N2, D_PAD
    )
    desc_v = _head_descriptor(
        V + b * stride_vb + hk * stride_vh, seqlen_k, stride_vs, HEAD_DIM, BLOCK_N2, D_PAD
    )
    desc_q = _head_descriptor(
        Q + b * stride_qb + h * stride_qh, seqlen_q, stride_qs, HEAD_DIM, BLOCK_M2, D_PAD
    )
    desc_do = _head_descriptor(
        DO + b * stride_dob + h * stride_doh, seqlen_q, stride_dos, HEAD_DIM, BLOCK_M2, D_PAD
    )
    offs_m = start_m + tl.arange(0, BLOCK_M2)
    row = (b * heads + h) * seqlen_q
    q = desc_q.load([start_m, 0])
    do = desc_do.load([start_m, 0])
    lse = tl.load(LSE + row + offs_m, mask=offs_m < seqlen_q, other=float("inf")) * LOG2E
    delta = tl.load(DELTA + row + offs_m, mask=offs_m < seqlen_q, other=0.0)
    dq = tl.zeros([BLOCK_M2, D_PAD], dtype=tl.float32)
    if CAUSAL:
        # key blocks strictly left of the diagonal (no mask), then the diagonal ones (masked)
        dq = _bwd_dq(
            dq, q, do, lse, delta, desc_k, desc_v, 0, start_m, offs_m, qk_scale, seqlen_k,
            BLOCK_N2, NO_MASK, MMA_MODE,
        )  # fmt: skip
        dq = _bwd_dq(
            dq, q, do, lse, delta, desc_k, desc_v, start_m, start_m + BLOCK_M2, offs_m, qk_scale,
            seqlen_k, BLOCK_N2, CAUSAL_MASK, MMA_MODE,
        )  # fmt: skip
    else:
        full_end = (seqlen_k // BLOCK_N2) * BLOCK_N2
        dq = _bwd_dq(
            dq, q, do, lse, delta, desc_k, desc_v, 0, full_end, offs_m, qk_scale, seqlen_k,
            BLOCK_N2, NO_MASK, MMA_MODE,
        )  # fmt: skip
        dq = _bwd_dq(
            dq, q, do, lse, delta, desc_k, desc_v, full_end, seqlen_k, offs_m, qk_scale, seqlen_k,
            BLOCK_N2, KEY_TAIL_MASK, MMA_MODE,
        )  # fmt: skip
    desc_dq = _head_descriptor(
        DQ + b * stride_qb + h * stride_qh, seqlen_q, stride_qs, HEAD_DIM, BLOCK_M2, D_PAD
    )
    desc_dq.store([start_m, 0], (dq * sm_scale).to(DQ.dtype.element_ty))
