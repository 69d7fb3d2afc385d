"""FlashAttention-3 (Hopper): bf16 plain and under torch.compile(fullgraph=True), and an fp8 forward.

FA3 is the `hopper/` package of Dao-AILab/flash-attention (no PyPI wheel: built from source, e.g.
`cd hopper && python setup.py install`, or the sm90 wheel in ../shared/wheels for our GPU machine).
Its module `flash_attn_interface` registers FA3's own torch ops under `torch.ops.flash_attn_3`
(`fwd`/`bwd` from the C++ extension, plus the Python custom ops `_flash_attn_forward` and
`_flash_attn_backward` with fake tensors and autograd). We never register anything in that namespace:
a wrapper that defines its own `flash_attn_3::...` op collides with FA3's and fails with "expected
at most 3 argument(s) but received 32".

- `flash_attn3`: the public `flash_attn_func` (an autograd.Function over FA3's custom op).
- `flash_attn3_compiled`: `torch.compile(fullgraph=True)` over a function that calls FA3's own
  registered op `_flash_attn_forward` directly, so dynamo traces it through its fake implementation
  and its registered autograd without a graph break (fullgraph makes any break an error, not a
  silent eager fallback).
- `flash_attn3_fp8`: the e4m3 forward. Q, K and V are quantised once, before timing, with one scale
  per (batch, KV head) (FA3's descale shape), as a producer that already holds fp8 activations would
  hand them over; the timed call is the attention kernel alone and the row says so. Judged with the
  quantised tolerance against the fp32 reference on the original bf16 inputs, ranked apart.
"""

from __future__ import annotations

from attnbench import masks
from attnbench.bench.providers.base import (
    Prepared,
    bshd_to_canonical,
    compile_fn,
    mark_seq_dynamic,
    module_version,
    to_bshd,
)
from attnbench.bench.providers.flash_attn import FlashStyleProvider
from attnbench.rows import Workload

E4M3_MAX = 448.0  # largest finite float8_e4m3fn
FP8_NOTE = (
    "fp8 e4m3 inputs quantised before timing (one scale per batch and KV head, amax/448); "
    "the timed call is the FA3 kernel with descales; output bf16"
)


def fa3_window(workload: Workload) -> tuple[bool, int, int]:
    """(causal, window_left, window_right) in FA3's convention (bottom-right aligned, -1 = unbounded)."""
    native = masks.native(workload)
    if native is None:
        raise ValueError(f"mask {workload.mask} has no causal/window form for FlashAttention-3")
    return (native.causal, *native.flash_window())


def build_flags() -> dict:
    """FA3's setup.py records what a build left out (flash_attn_config.CONFIG["build_flags"]); {} if unknown."""
    try:
        from flash_attn_config import CONFIG

        return dict(CONFIG.get("build_flags", {}))
    except Exception:  # noqa: BLE001 - older builds have no config module: nothing known to be left out
        return {}


def build_leaves_out(workload: Workload, pass_: str) -> str | None:
    """Why this FA3 build cannot run the workload (a call outside the build can crash the process)."""
    flags = build_flags()
    left_out = [
        (flags.get("FLASHATTENTION_DISABLE_FP16") and workload.dtype == "float16", "fp16"),
        (flags.get(f"FLASHATTENTION_DISABLE_HDIM{workload.head_dim}"), f"head dim {workload.head_dim}"),
        (
            flags.get("FLASHATTENTION_DISABLE_LOCAL") and getattr(masks.native(workload), "window", None),
            "local (sliding window)",
        ),
        (
            flags.get("FLASHATTENTION_DISABLE_VARLEN") and getattr(masks.native(workload), "doc_lens", None),
            "varlen (cu_seqlens)",
        ),
        (flags.get("FLASHATTENTION_DISABLE_BACKWARD") and pass_ != "fwd", "the backward"),
    ]
    missing = [what for off, what in left_out if off]
    if missing:
        return f"this FlashAttention-3 build leaves out {', '.join(missing)} (flash_attn_config build flags)"
    return None


def _fa3_op_attention(q, k, v, causal: bool, window_left: int, window_right: int):
    """FA3's own registered custom op (traceable: fake impl + autograd registered by FA3)."""
    from flash_attn_interface import _flash_attn_forward

    out, _lse, *_ = _flash_attn_forward(
        q,
        k,
        v,
        causal=causal,
        window_size_left=window_left,
        window_size_right=window_right,
    )
    return out


class FlashAttn3(FlashStyleProvider):
    family = "flash_attn3"
    hue = "#ff7f0e"
    module = "flash_attn_interface"
    install = (
        "no PyPI wheel: git clone https://github.com/Dao-AILab/flash-attention && cd hopper && "
        "python setup.py install (Hopper GPUs, nvcc >= 12.3)"
    )
    head_dims = (64, 96, 128, 192, 256)  # FA3's kernel head dims; a build may hold fewer (then: unsupported)
    dtypes = ("bfloat16", "float16")
    mask_features = ("causal", "window", "documents")  # documents: cu_seqlens

    def unsupported(self, workload: Workload, pass_: str) -> str | None:
        reason = super().unsupported(workload, pass_)
        if reason is None:
            reason = build_leaves_out(workload, pass_)
        return reason

    def version(self) -> str:
        # the module has no __version__; the distribution is "flash_attn_3" (or an older name)
        from importlib.metadata import PackageNotFoundError, version

        for dist in ("flash_attn_3", "flash-attn-3", "flashattn-hopper"):
            try:
                return version(dist)
            except PackageNotFoundError:
                continue
        return module_version(self.module)

    def prepare(self, q, k, v, workload: Workload, backward: bool = False) -> Prepared:
        if not self.compiled:
            return super().prepare(q, k, v, workload, backward)
        self.load()  # the same import check as the plain provider
        q, k, v = (to_bshd(t, backward) for t in (q, k, v))
        causal, left, right = fa3_window(workload)
        fn = compile_fn(_fa3_op_attention, fullgraph=True)
        mark_seq_dynamic((q, k, v), 1)
        return Prepared(
            run=lambda: fn(q, k, v, causal, left, right),
            to_canonical=bshd_to_canonical,
            inputs=(q, k, v),
            note="torch.compile(fullgraph=True) over FA3's registered op torch.ops.flash_attn_3._flash_attn_forward",
        )


def quantize_e4m3(x, heads_kv: int):
    """[b, s, h, d] -> (float8_e4m3fn tensor, float32 descale [b, heads_kv]); scale = amax / 448.

    Query heads share their KV head's scale (FA3 takes descales per batch and KV head).
    """
    import torch

    b, s, h, d = x.shape
    groups = h // heads_kv
    amax = x.detach().float().abs().view(b, s, heads_kv, groups, d).amax(dim=(1, 3, 4))
    descale = (amax / E4M3_MAX).clamp(min=torch.finfo(torch.float32).tiny)
    per_head = descale.repeat_interleave(groups, dim=1)[:, None, :, None]
    return (x.detach().float() / per_head).to(torch.float8_e4m3fn).contiguous(), descale.contiguous()


class FlashAttn3Fp8(FlashAttn3):
    """FA3's fp8 (e4m3) forward on bf16 workloads, quantised outside the timed call."""

    quantized = True
    backward = False
    dtypes = ("bfloat16",)
    mask_features = ("causal", "window")

    def unsupported(self, workload: Workload, pass_: str) -> str | None:
        reason = super().unsupported(workload, pass_)
        if reason is None and build_flags().get("FLASHATTENTION_DISABLE_FP8"):
            reason = "this FlashAttention-3 build leaves out fp8 (flash_attn_config build flags)"
        return reason

    def prepare(self, q, k, v, workload: Workload, backward: bool = False) -> Prepared:
        attn = self.load()
        q, k, v = (to_bshd(t, False) for t in (q, k, v))
        (q8, q_descale), (k8, k_descale), (v8, v_descale) = (
            quantize_e4m3(t, workload.heads_kv) for t in (q, k, v)
        )
        causal, left, right = fa3_window(workload)

        def run():
            out = attn(
                q8,
                k8,
                v8,
                causal=causal,
                window_size=(left, right),
                q_descale=q_descale,
                k_descale=k_descale,
                v_descale=v_descale,
            )
            return out[0] if isinstance(out, (tuple, list)) else out

        return Prepared(run=run, to_canonical=bshd_to_canonical, inputs=(q8, k8, v8), note=FP8_NOTE)
