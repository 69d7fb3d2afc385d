"""FlashAttention 2 (`flash_attn.flash_attn_func`), plain and under torch.compile.

The same calling convention (bshd tensors, `causal=`, `window_size=(left, right)`, GQA by head count,
causal aligned bottom-right) is shared by FlashAttention 3 and 4 and the HF `kernels` builds, which subclass
`FlashStyleProvider` (FlashAttention-4: flash_attn4.py).
"""

from __future__ import annotations

from attnbench import masks
from attnbench.bench.providers.base import (
    Prepared,
    Provider,
    Unsupported,
    bshd_to_canonical,
    compile_fn,
    cuda_missing,
    describe_exception,
    import_failure,
    machine_note,
    mark_seq_dynamic,
    module_version,
    to_bshd,
)
from attnbench.rows import Workload


class FlashStyleProvider(Provider):
    """A `flash_attn_func(q, k, v, causal=..., window_size=...)` on bshd tensors."""

    layout = "bshd"
    dtypes = ("bfloat16", "float16")
    mask_features = ("causal", "window")
    gqa = True
    backward = True
    head_dims = tuple(range(8, 257, 8))  # multiples of 8 up to 256
    module = ""  # importable module holding the function
    function = "flash_attn_func"
    varlen_function = "flash_attn_varlen_func"  # documents (cu_seqlens), where masks lists varlen ones

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

    def unsupported(self, workload: Workload, pass_: str) -> str | None:
        reason = super().unsupported(workload, pass_)
        native = masks.native(workload)
        if reason is None and self.compiled and native is not None and native.doc_lens:
            reason = "the compiled variant wraps the fixed-length call only (documents: the plain provider)"
        return reason

    def call_kwargs(self, workload: Workload) -> dict:
        """causal / window_size from the mask's native form (bottom-right aligned, window incl. the diagonal)."""
        native = masks.native(workload)
        if native is None:
            raise Unsupported(f"mask {workload.mask} has no causal/window/cu_seqlens form")
        if native.window is not None:
            # 0 <= i + (Sk - Sq) - j < window: (window - 1) keys left, none right
            return {"causal": True, "window_size": native.flash_window()}
        return {"causal": True} if native.causal else {}

    def prepare(self, q, k, v, workload: Workload, backward: bool = False) -> Prepared:
        native = masks.native(workload)
        if native is not None and native.doc_lens:
            return self._prepare_varlen(q, k, v, workload, native, backward)
        attn = self.load()
        q, k, v = (to_bshd(t, backward) for t in (q, k, v))
        kwargs = self.call_kwargs(workload)

        fn = attn
        if self.compiled:
            fn = compile_fn(attn)
            mark_seq_dynamic((q, k, v), 1)

        return Prepared(
            run=lambda: first_output(fn(q, k, v, **kwargs)), to_canonical=bshd_to_canonical, inputs=(q, k, v)
        )

    def _prepare_varlen(self, q, k, v, workload: Workload, native, backward: bool) -> Prepared:
        """Documents through `flash_attn_varlen_func`: packed [tokens, heads, dim] with cu_seqlens."""
        import importlib

        packed, cu, longest, to_canonical = self.varlen_inputs(q, k, v, native, backward)
        attn = getattr(importlib.import_module(self.module), self.varlen_function)
        kwargs = {"causal": native.causal}
        if native.window is not None:
            kwargs["window_size"] = native.flash_window()
        return thd_prepared(
            lambda: first_output(attn(*packed, cu, cu, longest, longest, **kwargs)),
            packed,
            to_canonical,
            f"{self.varlen_function}: {len(native.doc_lens)} documents as cu_seqlens (packed thd)",
        )

    def varlen_inputs(self, q, k, v, native, backward: bool):
        """(packed, cu_seqlens, longest document, to_canonical) of the documents as packed thd tensors."""
        import torch

        if self.compiled:
            raise Unsupported(
                "the compiled variant wraps the fixed-length call only (varlen: use the plain one)"
            )
        b, hq, s, d = q.shape
        packed = tuple(
            t.detach().transpose(1, 2).reshape(b * s, t.shape[1], d).contiguous().requires_grad_(backward)
            for t in (q, k, v)
        )
        cu = torch.tensor(native.cu_seqlens(b), dtype=torch.int32, device=q.device)
        return packed, cu, max(native.doc_lens), lambda out: out.reshape(b, s, hq, d).transpose(1, 2)


def first_output(out):
    """The attention output of a call: some versions return (out, softmax_lse) or (out, lse, probs);
    indexing launches nothing."""
    return out[0] if isinstance(out, (tuple, list)) else out


def thd_prepared(run, packed, to_canonical, note: str) -> Prepared:
    """The Prepared of a call on packed [tokens, heads, dim] inputs (their gradients packed likewise)."""
    return Prepared(
        run=run,
        to_canonical=to_canonical,
        inputs=packed,
        note=note,
        grad_to_canonical=lambda name, grad, like: canonical_grad_thd(grad, like),
    )


def canonical_grad_thd(grad, like):
    """A packed [b * s, h, d] gradient as [b, h, s, d] like the canonical tensor `like`."""
    b, h, s, d = like.shape
    return grad.reshape(b, s, h, d).transpose(1, 2)


class FlashAttn2(FlashStyleProvider):
    family = "flash_attn"
    hue = "#e377c2"
    module = "flash_attn"
    mask_features = ("causal", "window", "documents")
    install = "pip install flash-attn --no-build-isolation (compiles CUDA sources: long; needs nvcc)"

    def unavailable(self) -> str | None:
        # flash-attn-4 installs flash_attn/cute/ without flash_attn/__init__.py: `flash_attn` then imports
        # as an empty namespace package, which is FA2 not being installed (not a failed load)
        import importlib

        try:
            namespace_only = getattr(importlib.import_module(self.module), "__file__", None) is None
        except Exception:  # noqa: BLE001 - the base class reports import failures
            namespace_only = False
        if namespace_only:
            reason = f"not installed (only flash-attn-4's namespace package flash_attn); to install: {self.install}"
            note = machine_note(self.module)
            return f"{reason}; on this machine: {note}" if note else reason
        return super().unavailable()
