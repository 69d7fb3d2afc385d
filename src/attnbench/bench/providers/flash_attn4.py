"""FlashAttention-4 (CuTe DSL, JIT-compiled per kernel variant; sm90 and sm100): `flash_attn.cute`.

- `flash_attn4`: the public `flash_attn_func` / `flash_attn_varlen_func` (autograd included). Windows use
  FA4's own convention: `window_size=(left, right)` with None = unbounded, so a causal window of W keys
  is causal=True, window_size=(W - 1, 0). The varlen call takes its cu_seqlens by keyword (its 4th
  positional parameter is `qv`, unlike FA2/FA3).
- `flash_attn4_compiled`: torch.compile(fullgraph=True) over FA4's forward. FA4 registers no torch op
  (dynamo cannot trace the CuTe DSL launch), so the forward is wrapped once in a custom op of our own
  namespace (`attnbench_fa4::fwd`, with a fake implementation giving the output's shape) and composes
  as one opaque node; no backward is registered for it, so the compiled variant is forward-only.
Each new variant compiles on its first call (seconds: ~3 s forward, ~6 s backward on an H100), which the
sweep's setup_ms holds (prepare + first call).
"""

from __future__ import annotations

from attnbench import masks
from attnbench.bench.providers.base import (
    Prepared,
    Unsupported,
    bshd_to_canonical,
    compile_fn,
    mark_seq_dynamic,
    to_bshd,
)
from attnbench.bench.providers.flash_attn import FlashStyleProvider, first_output, thd_prepared
from attnbench.rows import Workload

_OP = None


def fa4_window(workload: Workload) -> dict:
    """causal / window_size for FA4 (None = unbounded side; the window includes the query itself)."""
    native = masks.native(workload)
    if native is None:
        raise Unsupported(f"mask {workload.mask} has no causal/window/cu_seqlens form")
    kwargs = {"causal": native.causal}
    if native.window is not None:
        kwargs["window_size"] = (native.window - 1, 0)
    return kwargs


def fa4_forward_op():
    """FA4's forward as a custom op `attnbench_fa4::fwd(q, k, v, causal, window_left) -> out` (registered
    once per process; FA4's function is looked up at each call, ~1 us, so the op never holds a stale one)."""
    global _OP
    if _OP is None:
        import torch

        try:
            _OP = torch.ops.attnbench_fa4.fwd  # registered already (an earlier import of this module)
            return _OP
        except (AttributeError, RuntimeError):
            pass

        # the schema is spelled out: this module's annotations are strings (postponed evaluation)
        @torch.library.custom_op(
            "attnbench_fa4::fwd",
            mutates_args=(),
            schema="(Tensor q, Tensor k, Tensor v, bool causal, int window_left) -> Tensor",
        )
        def fwd(q, k, v, causal, window_left):
            from flash_attn.cute import flash_attn_func

            window = (window_left, 0) if window_left >= 0 else (None, None)
            out = flash_attn_func(q, k, v, causal=causal, window_size=window)
            return (out[0] if isinstance(out, (tuple, list)) else out).contiguous()

        @fwd.register_fake
        def _(q, k, v, causal, window_left):
            return q.new_empty((*q.shape[:-1], v.shape[-1]))

        _OP = fwd
    return _OP


class FlashAttn4(FlashStyleProvider):
    family = "flash_attn4"
    module = "flash_attn.cute"
    install = "pip install --pre flash-attn-4 (pulls nvidia-cutlass-dsl; kernels JIT-compile on first call)"
    head_dims = (64, 96, 128)
    dtypes = ("bfloat16", "float16")
    hue = "#843c39"
    mask_features = ("causal", "window", "documents")

    def __init__(self, name: str, *, compiled: bool = False):
        super().__init__(name, compiled=compiled)
        if compiled:
            self.backward = False  # the custom op wrapping the forward has no autograd registered

    def version(self) -> str:
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("flash-attn-4")
        except PackageNotFoundError:
            return ""

    def unsupported(self, workload: Workload, pass_: str) -> str | None:
        if self.compiled and pass_ != "fwd":
            return "the compiled FA4 wrapper is forward-only (FA4 registers no torch op with a backward)"
        return super().unsupported(workload, pass_)

    def prepare(self, q, k, v, workload: Workload, backward: bool = False) -> Prepared:
        native = masks.native(workload)
        if native is not None and native.doc_lens:
            return self._prepare_varlen(q, k, v, workload, native, backward)
        kwargs = fa4_window(workload)
        q, k, v = (to_bshd(t, backward) for t in (q, k, v))
        if self.compiled:
            op = fa4_forward_op()
            left = kwargs["window_size"][0] if "window_size" in kwargs else -1
            fn = compile_fn(op, fullgraph=True)
            mark_seq_dynamic((q, k, v), 1)
            return Prepared(
                run=lambda: fn(q, k, v, kwargs["causal"], left),
                to_canonical=bshd_to_canonical,
                inputs=(q, k, v),
                note="torch.compile(fullgraph=True) over FA4's forward wrapped as custom op attnbench_fa4::fwd",
            )
        attn = self.load()

        return Prepared(
            run=lambda: first_output(attn(q, k, v, **kwargs)),
            to_canonical=bshd_to_canonical,
            inputs=(q, k, v),
        )

    def _prepare_varlen(self, q, k, v, workload: Workload, native, backward: bool) -> Prepared:
        from flash_attn.cute import flash_attn_varlen_func

        packed, cu, longest, to_canonical = self.varlen_inputs(q, k, v, native, backward)

        def run():
            out = flash_attn_varlen_func(
                *packed,
                cu_seqlens_q=cu,
                cu_seqlens_k=cu,
                max_seqlen_q=longest,
                max_seqlen_k=longest,
                causal=native.causal,
            )
            return first_output(out)

        note = f"flash_attn_varlen_func: {len(native.doc_lens)} documents as cu_seqlens (packed thd)"
        return thd_prepared(run, packed, to_canonical, note)
