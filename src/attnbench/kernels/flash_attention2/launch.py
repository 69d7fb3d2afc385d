"""Host side: check the inputs, make them TMA-addressable, pick the tile (autotuned, or given), launch."""

from __future__ import annotations

import functools
import math

import torch
import triton

from attnbench.kernels.flash_attention2 import checked_tuning, configs
from attnbench.kernels.flash_attention2.backward import (
    DQ_ATOMIC_ADD,
    DQ_BULK_REDUCE,
    DQ_OWN_KERNEL,
    flash_bwd_dkdv_kernel,
    flash_bwd_dq_kernel,
    flash_bwd_preprocess,
)
from attnbench.kernels.flash_attention2.forward import flash_fwd_kernel

# fp32 inputs: "tf32" (tl.dot's default, TF32 tensor cores) or "ieee" (true fp32). 16-bit inputs ignore it.
INPUT_PRECISIONS = ("tf32", "ieee")

DTYPES = (torch.bfloat16, torch.float16, torch.float32)
MIN_HEAD_DIM, MAX_HEAD_DIM = 16, 128
PREPROCESS_BLOCK = 64
MAX_GRID_Y = 65535  # CUDA's limit on gridDim.y, where batch * heads goes


def interpreting() -> bool:
    """True when Triton runs kernels in its CPU interpreter (TRITON_INTERPRET=1)."""
    return bool(triton.knobs.runtime.interpret)


def _quick_bench(fn, quantiles):
    # Each candidate tile is timed for ~25 ms (Triton's default is 100 ms): a sweep tunes many shapes.
    return triton.testing.do_bench(fn, warmup=5, rep=25, quantiles=quantiles)


def _autotuned(kernel, candidates, prune, tuning, *, key_extra=(), **options):
    """`kernel` autotuned over `candidates` (pruned by `prune`) per shape, head dim, mask and MMA mode; a
    candidate is kept only if its result matches PyTorch's attention (`tuning`: checked_tuning.py)."""
    return triton.autotune(
        configs=candidates,
        key=["seqlen_q", "seqlen_k", "HEAD_DIM", "CAUSAL", *key_extra, "MMA_MODE"],
        prune_configs_by={"early_config_prune": prune},
        do_bench=tuning.do_bench,
        post_hook=tuning.post_hook,
        **options,
    )(kernel)


_TUNING = {
    "forward": checked_tuning.CheckedTuning("forward", checked_tuning.check_forward, _quick_bench),
    "dkdv": checked_tuning.CheckedTuning(
        "backward dK/dV", lambda nargs: checked_tuning.check_dkdv(nargs, DQ_OWN_KERNEL.value), _quick_bench
    ),
    "dq": checked_tuning.CheckedTuning("backward dQ", checked_tuning.check_dq, _quick_bench),
}
_forward_tuned = _autotuned(
    flash_fwd_kernel, configs.ALL_FORWARD_CONFIGS, configs.prune_forward, _TUNING["forward"]
)
_dkdv_tuned = _autotuned(
    flash_bwd_dkdv_kernel,
    configs.ALL_DKDV_CONFIGS,
    configs.prune_dkdv,
    _TUNING["dkdv"],
    key_extra=["DQ_ACCUMULATE"],
    reset_to_zero=["DQ_ACC"],  # the atomic mode accumulates into it: every timed run starts from zero
)
_dq_tuned = _autotuned(flash_bwd_dq_kernel, configs.ALL_DQ_CONFIGS, configs.prune_dq, _TUNING["dq"])


def _tuned_launch(tuned, tuning: checked_tuning.CheckedTuning, launch):
    """launch() of an autotuned kernel; if its tuning rejected every candidate (the kept one is wrong),
    RuntimeError, and the autotuner forgets what it kept so that no later call runs that tile unchecked."""
    since = len(tuning.rejected)
    kernel = launch()
    try:
        tuning.refuse_rejected(getattr(tuned, "best_config", None), since)
    except RuntimeError:
        tuned.cache.clear()
        raise
    return kernel


# Run the dQ kernel on a side stream, concurrently with the dK/dV kernel (module switch, for measuring).
# Off: on an H100 (causal d64 16k) it saved 0.06-0.15 ms of the backward but the forward + backward times
# varied more (5.07 and 5.70 ms against 5.26 and 5.23 without), and one stream keeps the order simple.
OVERLAP_DQ = False
_SIDE_STREAMS: dict = {}


def _side_stream(device: torch.device) -> torch.cuda.Stream:
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _SIDE_STREAMS:
        _SIDE_STREAMS[index] = torch.cuda.Stream(device=index)
    return _SIDE_STREAMS[index]


def mma_mode(dtype: torch.dtype, input_precision: str) -> int:
    """The kernels' MMA_MODE constexpr (forward.py) for an input dtype and precision."""
    if input_precision not in INPUT_PRECISIONS:
        raise ValueError(f"input_precision must be one of {INPUT_PRECISIONS}, got {input_precision!r}")
    if interpreting() and dtype == torch.bfloat16:
        return 1  # MMA_UPCAST: the interpreter's dot misreads bfloat16
    return 2 if dtype == torch.float32 and input_precision == "ieee" else 0


def padded_head_dim(head_dim: int) -> int:
    return max(16, 1 << math.ceil(math.log2(head_dim)))


def check_inputs(q, k, v, causal: bool) -> tuple[int, int, int, int, int, int]:
    """(batch, heads, kv_heads, seqlen_q, seqlen_k, head_dim); ValueError naming what is wrong."""
    for name, t in zip("qkv", (q, k, v)):
        if not isinstance(t, torch.Tensor) or t.dim() != 4:
            raise ValueError(
                f"{name} must be a 4-D tensor [batch, heads, seq, head_dim], got {getattr(t, 'shape', t)}"
            )
    if not (q.dtype == k.dtype == v.dtype) or q.dtype not in DTYPES:
        raise ValueError(f"q, k, v must share one dtype of {DTYPES}; got {q.dtype}, {k.dtype}, {v.dtype}")
    if not (q.device == k.device == v.device):
        raise ValueError(f"q, k, v must be on one device; got {q.device}, {k.device}, {v.device}")
    if q.device.type != "cuda" and not interpreting():
        raise ValueError(f"inputs are on {q.device}: the kernel needs CUDA tensors (or TRITON_INTERPRET=1)")
    batch, heads, seqlen_q, head_dim = q.shape
    if k.shape != v.shape or k.shape[0] != batch or k.shape[3] != head_dim:
        raise ValueError(
            f"k {tuple(k.shape)} and v {tuple(v.shape)} must match each other and q {tuple(q.shape)}"
        )
    kv_heads, seqlen_k = k.shape[1], k.shape[2]
    if kv_heads == 0 or heads % kv_heads:
        raise ValueError(f"query heads ({heads}) must be a multiple of key/value heads ({kv_heads})")
    per_16_bytes = 16 // q.element_size()
    if not MIN_HEAD_DIM <= head_dim <= MAX_HEAD_DIM or head_dim % per_16_bytes:
        raise ValueError(
            f"head_dim {head_dim} not supported: {MIN_HEAD_DIM}..{MAX_HEAD_DIM} and a multiple of "
            f"{per_16_bytes} for {q.dtype} (rows must be whole 16-byte units for TMA)"
        )
    if causal and seqlen_q != seqlen_k:
        raise ValueError(f"causal attention needs seqlen_q == seqlen_k, got {seqlen_q} and {seqlen_k}")
    if min(seqlen_q, seqlen_k) < 1:
        raise ValueError(f"empty sequence: seqlen_q={seqlen_q}, seqlen_k={seqlen_k}")
    if batch * heads > MAX_GRID_Y:
        raise ValueError(f"batch * heads = {batch * heads} exceeds the grid limit {MAX_GRID_Y}")
    return batch, heads, kv_heads, seqlen_q, seqlen_k, head_dim


def tma_ready(x: torch.Tensor) -> torch.Tensor:
    """x itself if a TMA descriptor can address its [seq, head_dim] planes, else a contiguous copy.

    Needs: unit stride along head_dim, every other stride a multiple of 16 bytes (also the batch and
    head strides, which move the base address), a 16-byte aligned start. A [B, S, H, D] tensor viewed as
    [B, H, S, D] (transpose(1, 2)) qualifies as it is: no copy.
    """
    size = x.element_size()
    aligned = x.data_ptr() % 16 == 0 and x.stride(3) == 1
    aligned = aligned and all((x.stride(i) * size) % 16 == 0 for i in range(3) if x.shape[i] > 1)
    return x if aligned else x.contiguous()


INTERPRETER_SMS = 2  # under the interpreter a persistent grid is small: each program takes several blocks


def streaming_multiprocessors(device: torch.device) -> int:
    """The SMs a persistent grid is sized by (a tile's PERSISTENT programs on each)."""
    if interpreting() or device.type != "cuda":
        return INTERPRETER_SMS
    return _sm_count(device.index if device.index is not None else torch.cuda.current_device())


@functools.cache
def _sm_count(index: int) -> int:  # once per GPU: a launch is timed, and the count never changes
    return torch.cuda.get_device_properties(index).multi_processor_count


def _set_scratch_allocator(device: torch.device) -> None:
    """Device-side tensor descriptors need 128 bytes of global scratch per descriptor and program."""

    def alloc(size: int, alignment: int, stream):
        return torch.empty(size, dtype=torch.int8, device=device)

    triton.set_allocator(alloc)


def _strides(t: torch.Tensor) -> tuple[int, int, int]:
    return t.stride(0), t.stride(1), t.stride(2)


def attention_forward(
    q,
    k,
    v,
    causal: bool = False,
    sm_scale: float | None = None,
    tile=None,
    return_kernel=False,
    input_precision: str = "tf32",
):
    """(out [B, H, Sq, D] like q, lse [B, H, Sq] fp32, natural log). `tile`: a configs.ForwardTile to use
    instead of autotuning (the interpreter uses configs.interpreter_tiles). return_kernel: also return
    Triton's compiled kernel (its n_regs, n_spills, metadata.shared), None under the interpreter.
    input_precision: for fp32 inputs, "tf32" (tl.dot's default) or "ieee" (true fp32)."""
    batch, heads, kv_heads, seqlen_q, seqlen_k, head_dim = check_inputs(q, k, v, causal)
    q, k, v = tma_ready(q), tma_ready(k), tma_ready(v)
    scale = 1.0 / math.sqrt(head_dim) if sm_scale is None else float(sm_scale)
    out = torch.empty_like(q)
    lse = torch.empty((batch, heads, seqlen_q), device=q.device, dtype=torch.float32)
    args = (q, k, v, out, lse, scale, *_strides(q), *_strides(k), *_strides(v), *_strides(out))
    args += (heads, heads // kv_heads, seqlen_q, seqlen_k, batch * heads)
    meta = {"HEAD_DIM": head_dim, "D_PAD": padded_head_dim(head_dim), "CAUSAL": bool(causal)}
    meta["MMA_MODE"] = mma_mode(q.dtype, input_precision)

    def grid(m):
        blocks = triton.cdiv(seqlen_q, m["BLOCK_M"])
        if m.get("PERSISTENT"):
            return (min(streaming_multiprocessors(q.device) * m["PERSISTENT"], blocks * batch * heads), 1)
        return (blocks, batch * heads)

    _set_scratch_allocator(q.device)
    if interpreting():
        tile = tile or configs.interpreter_tiles(seqlen_q, seqlen_k)[0]
    if tile is None:
        kernel = _tuned_launch(
            _forward_tuned, _TUNING["forward"], lambda: _forward_tuned[grid](*args, **meta)
        )
    else:
        kernel = flash_fwd_kernel[grid(tile.meta())](
            *args, **meta, **tile.meta(), num_warps=tile.warps, num_stages=tile.stages
        )
    checked_tuning.release()  # the references of a tuning this launch made
    return (out, lse, kernel) if return_kernel else (out, lse)


def attention_backward(
    dout,
    q,
    k,
    v,
    out,
    lse,
    causal: bool = False,
    sm_scale: float | None = None,
    dq_mode: str = "recompute",
    tile=None,
    return_kernel: bool = False,
    input_precision: str = "tf32",
):
    """(dq, dk, dv) shaped like q, k, v. dq_mode: "recompute" (dQ in its own loop, no atomics) or "atomic".
    tile / return_kernel: as for attention_forward (the kernel returned is the dK/dV kernel)."""
    if dq_mode not in ("recompute", "atomic"):
        raise ValueError(f"dq_mode must be 'recompute' or 'atomic', got {dq_mode!r}")
    batch, heads, kv_heads, seqlen_q, seqlen_k, head_dim = check_inputs(q, k, v, causal)
    if dout.shape != q.shape or out.shape != q.shape or lse.shape != (batch, heads, seqlen_q):
        raise ValueError(
            f"dout {tuple(dout.shape)}, out {tuple(out.shape)} must be {tuple(q.shape)}; lse {tuple(lse.shape)}"
        )
    q, k, v, dout = tma_ready(q), tma_ready(k), tma_ready(v), tma_ready(dout.to(q.dtype))
    scale = 1.0 / math.sqrt(head_dim) if sm_scale is None else float(sm_scale)
    d_pad = padded_head_dim(head_dim)
    lse = lse.contiguous()
    delta = torch.empty_like(lse)
    flash_bwd_preprocess[(triton.cdiv(seqlen_q, PREPROCESS_BLOCK), batch * heads)](
        out, dout, delta, *_strides(out), *_strides(dout), heads, seqlen_q,
        HEAD_DIM=head_dim, D_PAD=d_pad, BLOCK_M=PREPROCESS_BLOCK,
    )  # fmt: skip
    atomic = dq_mode == "atomic"
    # how the atomic mode adds into the fp32 buffer: TMA bulk reductions on a GPU, per-element atomics
    # under the interpreter (it cannot run descriptor reductions)
    accumulate = (DQ_ATOMIC_ADD if interpreting() else DQ_BULK_REDUCE) if atomic else DQ_OWN_KERNEL
    accumulate = accumulate.value  # a launch argument (and autotuning key) is a plain int
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    shape = (batch, heads, seqlen_q, d_pad) if atomic else (1,)
    dq_acc = torch.zeros(shape, device=q.device, dtype=torch.float32)
    strides = (*_strides(q), *_strides(k), *_strides(v), *_strides(dout))
    dkdv_args = (q, k, v, dout, dk, dv, lse, delta, dq_acc, scale, *strides)
    dkdv_args += (heads, kv_heads, heads // kv_heads, seqlen_q, seqlen_k)
    dq_args = (q, k, v, dout, dq, lse, delta, scale, *strides, heads, heads // kv_heads, seqlen_q, seqlen_k)
    meta = {"HEAD_DIM": head_dim, "D_PAD": d_pad, "CAUSAL": bool(causal)}
    meta["MMA_MODE"] = mma_mode(q.dtype, input_precision)

    def dkdv_grid(m):
        return (triton.cdiv(seqlen_k, m["BLOCK_N1"]), batch * kv_heads)

    def dq_grid(m):
        return (triton.cdiv(seqlen_q, m["BLOCK_M2"]), batch * heads)

    _set_scratch_allocator(q.device)
    if interpreting():
        tile = tile or configs.interpreter_tiles(seqlen_q, seqlen_k)[1]

    def launch_dkdv():
        if tile is None:
            return _tuned_launch(_dkdv_tuned, _TUNING["dkdv"],
                                 lambda: _dkdv_tuned[dkdv_grid](*dkdv_args, **meta, DQ_ACCUMULATE=accumulate))  # fmt: skip
        return flash_bwd_dkdv_kernel[dkdv_grid(tile.dkdv_meta())](
            *dkdv_args, **meta, **tile.dkdv_meta(), DQ_ACCUMULATE=accumulate, num_warps=tile.warps, num_stages=tile.stages
        )  # fmt: skip

    def launch_dq():
        if tile is None:
            return _tuned_launch(_dq_tuned, _TUNING["dq"], lambda: _dq_tuned[dq_grid](*dq_args, **meta))
        warps, stages = tile.dq_launch
        return flash_bwd_dq_kernel[dq_grid(tile.dq_meta())](
            *dq_args, **meta, **tile.dq_meta(), num_warps=warps, num_stages=stages
        )

    if atomic:
        kernel = launch_dkdv()
        dq.copy_(dq_acc[..., :head_dim])
    elif OVERLAP_DQ and q.device.type == "cuda" and not interpreting():
        # The two kernels are independent (both read q, k, v, dO, lse, Δ): the dQ kernel runs on a side
        # stream so its blocks fill the SMs the dK/dV kernel's tail leaves idle (and the reverse).
        main = torch.cuda.current_stream(q.device)
        side = _side_stream(q.device)
        side.wait_stream(main)
        kernel = launch_dkdv()
        with torch.cuda.stream(side):
            launch_dq()
        main.wait_stream(side)
        for t in (q, k, v, dout, lse, delta, dq):
            t.record_stream(side)  # allocated on the caller's stream, used on the side stream
    else:
        kernel = launch_dkdv()
        launch_dq()
    checked_tuning.release()  # the references of a tuning these launches made (both kernels share them)
    return (dq, dk, dv, kernel) if return_kernel else (dq, dk, dv)


def best_tiles() -> dict:
    """The tiles the autotuner chose so far, per tuning key, and the candidates it rejected because their
    result was wrong (for the report)."""
    return {
        "forward": {str(key): str(cfg) for key, cfg in _forward_tuned.cache.items()},
        "backward": {str(key): str(cfg) for key, cfg in _dkdv_tuned.cache.items()},
        "backward_dq": {str(key): str(cfg) for key, cfg in _dq_tuned.cache.items()},
        "rejected_as_wrong": [r.text() for tuning in _TUNING.values() for r in tuning.rejected],
        "not_checked": [text for tuning in _TUNING.values() for text in tuning.unchecked],
    }
