"""Transformer Engine's `DotProductAttention` pinned to one of its three backends: one row each.

TE chooses among its flash backend (FlashAttention-3 on Hopper when importable, else FA2/FA4), its fused
backend (cuDNN) and its unfused one (plain PyTorch ops) from the environment variables NVTE_FLASH_ATTN,
NVTE_FUSED_ATTN and NVTE_UNFUSED_ATTN, read when it (re)selects a backend, and caches the choice in
`transformer_engine.pytorch.attention.dot_product_attention.dot_product_attention._attention_backends`
until the attention parameters change or `backend_selection_requires_update` is set. So `prepare` pins
the variables (one backend enabled), sets that flag, and makes the one call that selects: what TE picked
is the row's note. The pins stay set (TE reads them again whenever it reselects); the auto-selecting
providers in te.py unpin first (`pin_backend(None)` restores the variables as they were).

TE's forward is launch-bound at Flux sizes (0.4-0.9 ms of host time per call): see the row's timing.
"""

from __future__ import annotations

import os

from attnbench.bench.providers.base import Prepared, describe_exception
from attnbench.bench.providers.te import TransformerEngine
from attnbench.bench.results import Workload

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


class TransformerEngineBackend(TransformerEngine):
    """TE with one backend enabled (bshd inputs). TE raises when the pinned backend cannot run the
    workload; that is recorded as an `unsupported` row with TE's message."""

    def __init__(self, name: str, backend: str):
        super().__init__(name, "bshd")
        backend_env(backend)  # a bad name fails at registration
        self.backend = backend

    def prepare(self, q, k, v, workload: Workload, backward: bool = False) -> Prepared:
        from attnbench.bench.providers.base import Unsupported

        pin_backend(self.backend)
        prepared = super().prepare(q, k, v, workload, backward, unpin=False)
        try:
            prepared.run()  # the call that selects (TE's backend cache is reset above)
        except Exception as exc:
            raise Unsupported(f"TE {self.backend} backend: {describe_exception(exc)}") from exc
        picked = picked_backend()
        if not picked.startswith(self.backend):
            raise Unsupported(f"TE ran {picked} although only its {self.backend} backend was enabled")
        prepared.note = f"TE picked: {picked}"
        return prepared
