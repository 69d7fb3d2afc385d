"""Transformer Engine `DotProductAttention` (TE picks its fused cuDNN or flash backend itself).

Inputs in TE's bshd or sbhd format; the output comes back with heads flattened ([b, s, h*d] or
[s, b, h*d]) and is reshaped to canonical outside the timed call. Causal uses TE's bottom-right mask
type when seqlen_q != seqlen_k. The module is built in prepare (setup), once per workload.
"""

from __future__ import annotations

import os

from attnbench import masks
from attnbench.bench.providers.base import Prepared, Provider, cuda_missing, import_failure, module_version
from attnbench.rows import Workload

# Pinning TE to one backend (te_backends.py's rows): the NVTE_* variables and TE's backend cache.
BACKENDS = {"flash": "NVTE_FLASH_ATTN", "fused": "NVTE_FUSED_ATTN", "unfused": "NVTE_UNFUSED_ATTN"}
CACHE_MODULE = "transformer_engine.pytorch.attention.dot_product_attention.dot_product_attention"


def backend_env(backend: str) -> dict[str, str]:
    """The NVTE_* settings that enable exactly `backend`."""
    if backend not in BACKENDS:
        raise ValueError(f"TE backend {backend!r} is not one of {', '.join(BACKENDS)}")
    return {var: str(int(name == backend)) for name, var in BACKENDS.items()}


def _backend_cache() -> dict | None:
    import importlib

    try:
        return importlib.import_module(CACHE_MODULE)._attention_backends
    except (ImportError, AttributeError):
        return None


_ORIGINAL: dict[str, str | None] = {}  # the NVTE_* values before our first pin (restored on unpin)


def pin_backend(backend: str | None) -> None:
    """Enable only `backend` through the NVTE_* variables (None: restore what they were before we pinned)
    and make TE reselect its backend on the next call. Unpinning without a pin changes nothing, so a
    user's own NVTE_* settings stand."""
    if backend is None and not _ORIGINAL:
        return
    if backend is not None and not _ORIGINAL:
        _ORIGINAL.update({var: os.environ.get(var) for var in BACKENDS.values()})
    settings = dict(_ORIGINAL) if backend is None else backend_env(backend)
    if backend is None:
        _ORIGINAL.clear()
    for var, value in settings.items():
        if value is None:
            os.environ.pop(var, None)
        else:
            os.environ[var] = value
    cache = _backend_cache()
    if cache is not None:
        cache["backend_selection_requires_update"] = True


def picked_backend() -> str:
    """What TE's cache says it selected, e.g. 'flash (FlashAttention 3.0.0)' or 'fused (sub-backend 1)'."""
    cache = _backend_cache()
    if not cache:
        return "unknown (TE's backend cache not found)"
    if cache.get("use_flash_attention"):
        return f"flash ({cache.get('flash_attention_backend')})"
    if cache.get("use_fused_attention"):
        return f"fused (sub-backend {cache.get('fused_attention_backend')})"
    if cache.get("use_unfused_attention"):
        return "unfused"
    return "none"


class TransformerEngine(Provider):
    family = "te"
    hue = "#bcbd22"
    install = "pip install --no-build-isolation transformer_engine[pytorch] (builds transformer-engine-torch)"
    dtypes = ("bfloat16", "float16")
    mask_features = ("causal", "window")
    gqa = True  # num_gqa_groups
    backward = True

    def __init__(self, name: str, qkv_format: str = "bshd"):
        if qkv_format not in ("bshd", "sbhd"):
            raise ValueError(f"qkv_format {qkv_format!r} is not bshd or sbhd")
        self.name = name
        self.qkv_format = qkv_format
        self.layout = qkv_format

    def unavailable(self) -> str | None:
        return import_failure("transformer_engine.pytorch", self.install) or cuda_missing()

    def version(self) -> str:
        return module_version("transformer_engine")

    def unsupported(self, workload: Workload, pass_: str) -> str | None:
        reason = super().unsupported(workload, pass_)
        native = masks.native(workload)
        if reason is None and native and native.window and workload.seqlen_q != workload.seqlen_k:
            return "sliding_window with seqlen_q != seqlen_k not mapped onto window_size"
        return reason

    def prepare(self, q, k, v, workload: Workload, backward: bool = False, unpin: bool = True) -> Prepared:
        from transformer_engine.pytorch import DotProductAttention

        if unpin:  # TE picks its backend itself: drop the pins a te_backends row left (te_backends.py)
            pin_backend(None)

        b, hq, sq, d = q.shape
        same = workload.seqlen_q == workload.seqlen_k
        window = None
        native = masks.native(workload)
        if not native.causal:
            mask_type = "no_mask"
        elif native.window is None:
            mask_type = "causal" if same else "causal_bottom_right"
        else:  # sliding_window: 0 <= i - j < window
            mask_type, window = "causal", native.flash_window()
        module_kwargs = {
            "num_gqa_groups": workload.heads_kv,
            "attention_dropout": 0.0,
            "qkv_format": self.qkv_format,
            "attn_mask_type": mask_type,
        }
        if window is not None:
            module_kwargs["window_size"] = window
        attention = DotProductAttention(hq, d, **module_kwargs).to(q.device)
        # bhsd -> bshd ([0, 2, 1, 3]) or sbhd ([2, 0, 1, 3]), once, before timing
        order = (0, 2, 1, 3) if self.qkv_format == "bshd" else (2, 0, 1, 3)
        q, k, v = (t.detach().permute(*order).contiguous().requires_grad_(backward) for t in (q, k, v))

        def to_canonical(out):
            if self.qkv_format == "bshd":
                return out.reshape(b, sq, hq, d).transpose(1, 2)
            return out.reshape(sq, b, hq, d).permute(1, 2, 0, 3)

        return Prepared(run=lambda: attention(q, k, v), to_canonical=to_canonical, inputs=(q, k, v))
