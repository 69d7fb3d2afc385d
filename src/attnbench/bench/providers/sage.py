"""SageAttention: INT8 Q·K with FP16 P·V (quantised on purpose; judged with the quantised tolerance).

One provider per entry point; an entry point the installed version lacks is an `unavailable` row
naming the version, so the table shows what this install offers. SageAttention 1.0.6 (pure Triton)
has `sageattn` (bhsd "HND" or bshd "NHD") and `sageattn_varlen` (packed thd, one segment per document);
2.x adds the CUDA kernels below. No backward: forward only.

What the timed call contains: the whole `sageattn(q, k, v)` API call, i.e. the library's own per-call
preprocessing as well as the attention kernel: the K mean and its in-place subtraction (smooth_k), the
V cast to fp16 for bf16 inputs, and the per-block int8 quantisation of Q and K. That is what a caller
pays per call, so it is timed, and every row says so (extra["note"]). Because smooth_k writes K in
place, prepare() hands the library a private copy of K; that copy is made once, outside the timed
region (the bshd and varlen layouts are fresh tensors already).
"""

from __future__ import annotations

import importlib

from attnbench import masks
from attnbench.bench.providers.base import (
    Prepared,
    Provider,
    bshd_to_canonical,
    cuda_missing,
    describe_exception,
    import_failure,
    module_version,
)
from attnbench.rows import Workload

# SageAttention 2's CUDA kernels come from a source build (PyPI's wheel, 1.0.6, is pure Triton)
UPGRADE = (
    "with network and nvcc: pip install --no-build-isolation git+https://github.com/thu-ml/SageAttention"
)

TIMED_NOTE = (
    "timed call = the sageattn API: K-mean subtraction, V cast to fp16 (bf16 inputs), int8 "
    "quantisation of Q and K, then the attention kernel"
)


def _private_bshd(t):
    """A new contiguous [b, s, h, d] copy. Not `.contiguous()`: with one head (or one token) the transpose
    is already contiguous and would share the caller's storage, which smooth_k then edits in place."""
    import torch

    return t.detach().transpose(1, 2).clone(memory_format=torch.contiguous_format)


class SageProvider(Provider):
    family = "sage"
    hue = "#9467bd"
    install = "pip install sageattention"
    dtypes = ("bfloat16", "float16")
    mask_features = ("causal",)
    gqa = True
    backward = False
    quantized = True
    head_dims = (64, 96, 128)
    causal_any_lengths = False  # "is_causal ... only applicable when qo_len == kv_len"

    def __init__(self, name: str, entry: str, *, layout: str = "bhsd", head_dims=(64, 96, 128)):
        self.name = name
        self.entry = entry
        self.layout = layout  # bhsd -> tensor_layout="HND", bshd -> "NHD"
        self.head_dims = tuple(head_dims)

    def load(self):
        return getattr(importlib.import_module("sageattention"), self.entry)

    def unavailable(self) -> str | None:
        missing = import_failure("sageattention", self.install) or cuda_missing()
        if missing:
            return missing
        try:
            self.load()
        except AttributeError:
            return (f"sageattention {self.version() or '(unknown version)'} has no {self.entry}: SageAttention 2 "
                    f"added it ({UPGRADE})")  # fmt: skip
        except Exception as exc:  # noqa: BLE001
            return f"load failed: {describe_exception(exc)}"
        return None

    def version(self) -> str:
        return module_version("sageattention")

    def prepare(self, q, k, v, workload: Workload, backward: bool = False) -> Prepared:
        attn = self.load()
        causal = masks.native(workload).causal
        if self.layout == "bshd":
            q, k, v = (_private_bshd(t) for t in (q, k, v))
            kwargs, to_canonical = {"tensor_layout": "NHD"}, bshd_to_canonical
        else:
            q, v = q.detach(), v.detach()
            k = k.detach().clone()  # smooth_k edits K in place: never the caller's K (made here, untimed)
            kwargs, to_canonical = {"tensor_layout": "HND"}, (lambda out: out)
        return Prepared(
            run=lambda: attn(q, k, v, is_causal=causal, **kwargs),
            to_canonical=to_canonical,
            inputs=(q, k, v),
            note=TIMED_NOTE,
        )


class SageVarlen(SageProvider):
    """`sageattn_varlen` on packed [tokens, heads, dim]: the batch (or the documents) as segments."""

    layout = "thd"
    mask_features = ("causal", "documents")

    def __init__(self, name: str, entry: str = "sageattn_varlen"):
        super().__init__(name, entry, layout="thd", head_dims=(64, 128))

    def unsupported(self, workload: Workload, pass_: str) -> str | None:
        reason = super().unsupported(workload, pass_)
        if reason is None and workload.seqlen_q != workload.seqlen_k:
            return "varlen segments here are self-attention (seqlen_q == seqlen_k)"
        if reason is None and masks.native(workload).doc_lens and workload.batch != 1:
            return "document mask packed only for batch 1"
        return reason

    def prepare(self, q, k, v, workload: Workload, backward: bool = False) -> Prepared:
        import torch

        attn = self.load()
        b, hq, s, d = q.shape
        native = masks.native(workload)
        lens = list(native.doc_lens) if native.doc_lens else [s] * b
        cu = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32, device=q.device)
        packed = [_private_bshd(t).view(b * s, t.shape[1], d) for t in (q, k, v)]
        causal = native.causal
        max_len = max(lens)

        def run():
            return attn(*packed, cu, cu, max_len, max_len, is_causal=causal)

        def to_canonical(out):
            return out.reshape(b, s, hq, d).transpose(1, 2)

        return Prepared(
            run=run,
            to_canonical=to_canonical,
            inputs=tuple(packed),
            note=f"packed varlen (thd); {TIMED_NOTE}",
        )
