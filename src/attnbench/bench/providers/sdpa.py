"""torch.nn.functional.scaled_dot_product_attention, one provider per backend, plus torch.compile.

Each backend is pinned with `sdpa_kernel([one backend])`, so a run never silently falls back to
another kernel: if the pinned backend refuses the inputs, torch raises and the row says why.
`is_causal=True` in SDPA is top-left aligned when seqlen_q != seqlen_k; our causal mask is
bottom-right aligned, so the fused backends declare that case unsupported. The math backend takes the
exact dense mask instead (built in prepare, outside the timed region) and so runs every mask.
"""

from __future__ import annotations

import warnings

from attnbench import masks
from attnbench.bench.providers.base import (
    Prepared,
    Provider,
    Unsupported,
    compile_fn,
    cuda_missing,
    leaf,
    mark_seq_dynamic,
)
from attnbench.rows import Workload

# mode="max-autotune" also turns on inductor's CUDA graphs. A replay first copies every input that is not a
# static address of the graph (here q, k, v, and dout in the backward) into the graph's own buffers, so the
# timed call holds those device copies too (3 x 27 MB at the Flux shape: tens of microseconds). Inside a
# compiled model the activations are produced in the graph and nothing is copied; rows say so.
CUDAGRAPH_NOTE = (
    "max-autotune replays a CUDA graph: each call also copies q, k, v (and dout) into the "
    "graph's static buffers, inside the timed region"
)

# SDPBackend member -> the torch.backends.cuda check that explains a refusal
_CHECKS = {
    "FLASH_ATTENTION": "can_use_flash_attention",
    "EFFICIENT_ATTENTION": "can_use_efficient_attention",
    "CUDNN_ATTENTION": "can_use_cudnn_attention",
}


def _why_backend_refuses(backend: str, q, k, v, is_causal: bool, gqa: bool) -> str | None:
    """Ask torch whether the pinned fused backend accepts these tensors; its debug warnings say why not."""
    import torch

    check_name = _CHECKS.get(backend)
    check = getattr(torch.backends.cuda, check_name, None) if check_name else None
    params_cls = getattr(torch.backends.cuda, "SDPAParams", None)
    if check is None or params_cls is None:
        return None
    try:
        params = params_cls(q, k, v, None, 0.0, is_causal, gqa)
    except TypeError:  # older torch: SDPAParams without enable_gqa
        params = params_cls(q, k, v, None, 0.0, is_causal)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ok = check(params, True)
    if ok:
        return None
    why = "; ".join(str(w.message).strip().splitlines()[0] for w in caught) or "no reason given by torch"
    return f"torch refuses {backend} for these inputs: {why}"


def _sdpa(q, k, v, **kwargs):
    """A Python-level function for torch.compile to trace (the torch op itself is a builtin)."""
    import torch.nn.functional as F

    return F.scaled_dot_product_attention(q, k, v, **kwargs)


class SdpaProvider(Provider):
    family = "sdpa"
    hue = "#1f77b4"
    layout = "bhsd"
    gqa = True  # enable_gqa=True; torch's own check (in prepare) rejects it where a backend cannot
    backward = True
    causal_any_lengths = False

    def __init__(
        self,
        name: str,
        backend: str,
        *,
        compile_mode: str | None = None,
        compiled: bool = False,
        repeat_kv: bool = False,
    ):
        self.name = name
        self.backend = backend  # SDPBackend member name, or "" for torch's default selection
        self.compiled = compiled
        self.compile_mode = compile_mode
        self.repeat_kv = repeat_kv  # GQA by K/V repeated to every query head (a labelled variant)
        if repeat_kv:
            self.stands_in_for = name.removesuffix("_kv_repeated")
        if backend == "MATH":
            # the math backend runs anywhere and takes an explicit mask: every mask, any lengths
            self.needs_cuda = False
            self.dtypes = ("bfloat16", "float16", "float32")
            self.mask_features = (masks.ANY_MASK,)
            self.causal_any_lengths = True
        else:
            self.needs_cuda = True
            self.dtypes = ("bfloat16", "float16")
            self.mask_features = ("causal",)

    def unsupported(self, workload: Workload, pass_: str) -> str | None:
        reason = super().unsupported(workload, pass_)
        if reason is None and self.repeat_kv and not workload.gqa:
            reason = "the K/V-repeated variant is for GQA workloads (heads_kv < heads_q) only"
        mask = masks.of(workload)
        too_big = workload.seqlen_q * workload.seqlen_k > masks.DENSE_LIMIT
        if reason is None and self.backend == "MATH" and not mask.is_full and too_big:
            reason = (
                f"the dense boolean mask ({workload.seqlen_q} x {workload.seqlen_k}) is above the "
                f"{masks.DENSE_LIMIT}-element limit for dense masks"
            )
        return reason

    def unavailable(self) -> str | None:
        missing = cuda_missing() if self.needs_cuda else None
        if missing:
            return missing
        if self.backend:
            from torch.nn.attention import SDPBackend

            if not hasattr(SDPBackend, self.backend):
                return f"this torch has no SDPBackend.{self.backend}"
        return None

    def version(self) -> str:
        import torch

        return torch.__version__

    def prepare(self, q, k, v, workload: Workload, backward: bool = False) -> Prepared:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        q, k, v = (leaf(t, backward) for t in (q, k, v))
        gqa = workload.gqa
        note, grad_to_canonical = "", None
        if self.repeat_kv and gqa:
            groups = workload.heads_q // workload.heads_kv
            # repeated before timing (materialised): the kernel runs as multi-head attention
            k, v = (t.detach().repeat_interleave(groups, dim=1).requires_grad_(backward) for t in (k, v))
            gqa = False
            note = f"K/V repeated {groups}x to {workload.heads_q} heads before timing (not native GQA)"
            grad_to_canonical = _sum_groups
        kwargs = {"enable_gqa": True} if gqa else {}
        mask = masks.of(workload)
        native = mask.native_for(workload)
        if self.backend == "MATH" and not mask.is_full:
            # exact mask (bottom-right causal, windows, documents) as a boolean tensor
            kwargs["attn_mask"] = mask.dense(workload, device=q.device)
            note = "; ".join(filter(None, [note, "explicit dense boolean mask"]))
        elif native is not None and native.causal and native.window is None and not native.doc_lens:
            kwargs["is_causal"] = True  # seqlen_q == seqlen_k here (unsupported() rules out the rest)
        elif not mask.is_full:
            raise Unsupported(f"no {self.backend or 'SDPA'} form for mask {workload.mask}")
        if self.backend in _CHECKS and q.is_cuda:
            reason = _why_backend_refuses(self.backend, q, k, v, bool(kwargs.get("is_causal")), gqa)
            if reason:
                raise Unsupported(reason)
        backends = [getattr(SDPBackend, self.backend)] if self.backend else None
        if self.compiled:
            fn = compile_fn(_sdpa, mode=self.compile_mode)
            mark_seq_dynamic((q, k, v), 2)
            note = f"torch.compile(mode={self.compile_mode or 'default'}), torch picks the SDPA backend"
            if self.compile_mode == "max-autotune":
                note += "; " + CUDAGRAPH_NOTE
        else:
            fn = _sdpa

        if backends is None:

            def run():
                return fn(q, k, v, **kwargs)
        else:

            def run():
                with sdpa_kernel(backends):
                    return fn(q, k, v, **kwargs)

        return Prepared(
            run=run,
            to_canonical=lambda out: out,
            inputs=(q, k, v),
            note=note,
            grad_to_canonical=grad_to_canonical,
        )


def _sum_groups(name: str, grad, like):
    """dK/dV of repeated K/V summed over each group of query heads (outside the timed call)."""
    if name == "dq" or grad.shape[1] == like.shape[1]:
        return grad
    b, h, s, d = like.shape
    return grad.view(b, h, grad.shape[1] // h, s, d).sum(dim=2)
