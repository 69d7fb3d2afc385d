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

from attnbench.bench.providers.base import Prepared, describe_exception
from attnbench.bench.providers.te import TransformerEngine, backend_env, picked_backend, pin_backend
from attnbench.rows import Workload


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
