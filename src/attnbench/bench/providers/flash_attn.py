"""FlashAttention 2 (`flash_attn.flash_attn_func`), plain and under torch.compile.

The same calling convention (bshd tensors, `causal=`, `window_size=(left, right)`, GQA by head count,
causal aligned bottom-right) is shared by FlashAttention 3 and the HF `kernels` builds, which subclass
`FlashStyleProvider` and only change how the function is found.
"""

from __future__ import annotations

from attnbench.bench.providers.base import (
    Prepared,
    Provider,
    bshd_to_canonical,
    compile_fn,
    cuda_missing,
    describe_exception,
    import_failure,
    mark_seq_dynamic,
    module_version,
    to_bshd,
)
from attnbench.bench.results import Workload


class FlashStyleProvider(Provider):
    """A `flash_attn_func(q, k, v, causal=..., window_size=...)` on bshd tensors."""

    layout = "bshd"
    dtypes = ("bfloat16", "float16")
    masks = ("full", "causal", "sliding_window")
    gqa = True
    backward = True
    head_dims = tuple(range(8, 257, 8))  # multiples of 8 up to 256
    module = ""  # importable module holding the function
    function = "flash_attn_func"

    def __init__(self, name: str, *, compiled: bool = False):
        self.name = name
        self.compiled = compiled

    def load(self):
        """The attention function; raises if it cannot be had."""
        import importlib

        return getattr(importlib.import_module(self.module), self.function)

    def unavailable(self) -> str | None:
        missing = import_failure(self.module, self.install) or cuda_missing()
        if missing:
            return missing
        try:
            self.load()
        except Exception as exc:  # noqa: BLE001 - a load failure is a reason, never a crash
            return f"load failed: {describe_exception(exc)}"
        return None

    def version(self) -> str:
        return module_version(self.module)

    def call_kwargs(self, workload: Workload) -> dict:
        if workload.mask == "causal":
            return {"causal": True}
        if workload.mask == "sliding_window":
            # 0 <= i + (Sk - Sq) - j < window: (window - 1) keys left, none right (both bottom-right aligned)
            return {"causal": True, "window_size": (workload.window - 1, 0)}
        return {}

    def prepare(self, q, k, v, workload: Workload, backward: bool = False) -> Prepared:
        attn = self.load()
        q, k, v = (to_bshd(t, backward) for t in (q, k, v))
        kwargs = self.call_kwargs(workload)

        fn = attn
        if self.compiled:
            fn = compile_fn(attn)
            mark_seq_dynamic((q, k, v), 1)

        def run():
            out = fn(q, k, v, **kwargs)
            # some versions return (out, softmax_lse) or (out, lse, probs): indexing launches nothing
            return out[0] if isinstance(out, (tuple, list)) else out

        return Prepared(run=run, to_canonical=bshd_to_canonical, inputs=(q, k, v))


class FlashAttn2(FlashStyleProvider):
    family = "flash_attn"
    module = "flash_attn"
    install = "pip install flash-attn --no-build-isolation (compiles CUDA sources: long; needs nvcc)"


class FlashAttn4(FlashStyleProvider):
    """FlashAttention-4 (CuTe DSL, JIT-compiled; sm90 and sm100), `flash_attn.cute.flash_attn_func`."""

    family = "flash_attn4"
    module = "flash_attn.cute"
    install = "pip install --pre flash-attn-4 (pulls nvidia-cutlass-dsl; kernels JIT-compile on first call)"
    head_dims = (64, 96, 128)
    dtypes = ("bfloat16", "float16")
    masks = ("full", "causal")  # its window_size convention differs (None = unbounded): not mapped yet
