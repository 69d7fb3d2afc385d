"""What one mask is (`Mask`), what a flash-style kernel needs to run it without a mask tensor (`Native`),
and the kernel features a mask requires of a provider (`FEATURES`).

Importing this module imports neither torch nor the rows module (the rows module validates workloads
with the registry, so a workload here is only a type hint); torch is imported where a tensor is made.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from attnbench.masks.mods import MaskMod

if TYPE_CHECKING:
    from attnbench.rows import Workload

DENSE_LIMIT = 1 << 28  # elements; a dense mask bigger than this is refused (use query chunks instead)

# The kernel features a mask may require of a provider, and how a reason names each one missing.
# A provider declares the features it has (Provider.mask_features); "mask_mod" means it takes any
# mask_mod or dense mask, so it runs every mask.
FEATURES = {
    "causal": "a causal flag, bottom-right aligned",
    "window": "a sliding window, window_size",
    "documents": "documents as cu_seqlens, varlen",
    "block_causal": "block-causal masking inside a document",
    "mask_mod": "an arbitrary mask_mod or dense mask",
}
ANY_MASK = "mask_mod"


@dataclass(frozen=True)
class Native:
    """What a flash-style kernel (FA2/FA3, cuDNN, xFormers) needs to run a mask without a mask tensor.

    causal: bottom-right aligned (per document when doc_lens is set); window: the query sees itself
    and window - 1 keys before it; doc_lens: documents, passed as cu_seqlens (varlen).
    """

    causal: bool = False
    window: int | None = None
    doc_lens: tuple[int, ...] | None = None

    def flash_window(self) -> tuple[int, int]:
        """(left, right) in flash-attn's window_size convention (-1 = unbounded)."""
        if self.window is not None:
            return self.window - 1, 0
        return (-1, 0) if self.causal else (-1, -1)

    def cu_seqlens(self, batch: int = 1) -> list[int]:
        """Cumulative document offsets over the packed batch ([0, d0, d0 + d1, ..., batch * S])."""
        if not self.doc_lens:
            raise ValueError("cu_seqlens needs documents (doc_lens)")
        offsets, end = [0], 0
        for _ in range(batch):
            for n in self.doc_lens:
                end += n
                offsets.append(end)
        return offsets


WORKLOAD_FIELDS = ("window", "doc_lens", "block")


@dataclass(frozen=True)
class Mask:
    """One mask type. `build(workload, device)` gives its mask_mod (None: nothing masked);
    `count(workload)` its exact allowed pairs per (batch element, head); `native(workload)` what a
    flash-style kernel needs, or None when no such kernel expresses it (then only a provider with the
    "mask_mod" feature runs it). `needs`: the workload fields it reads; `requires`: the kernel features
    (FEATURES) a provider must declare to run it."""

    name: str
    summary: str
    build: Callable[[Workload, Any], MaskMod | None]
    count: Callable[[Workload], int]
    native: Callable[[Workload], Native] | None = None
    needs: tuple[str, ...] = ()
    requires: tuple[str, ...] = ()
    label: str = ""  # how a figure names it

    def __post_init__(self):
        if not self.name.isidentifier():
            raise ValueError(
                f"mask name {self.name!r} must be an identifier (it names a file and a row field)"
            )
        unknown_fields = set(self.needs) - set(WORKLOAD_FIELDS)
        if unknown_fields:
            raise ValueError(f"mask {self.name}: needs {sorted(unknown_fields)} not among {WORKLOAD_FIELDS}")
        unknown_features = set(self.requires) - set(FEATURES)
        if unknown_features:
            raise ValueError(
                f"mask {self.name}: requires {sorted(unknown_features)} not among {list(FEATURES)}"
            )
        if self.native is None and not self.requires:
            raise ValueError(
                f"mask {self.name}: no native form, so it must require at least one kernel feature"
            )

    @property
    def is_full(self) -> bool:
        return not self.requires

    @property
    def title(self) -> str:
        return self.label or self.name.replace("_", " ")

    def missing(self, features) -> tuple[str, ...]:
        """The kernel features this mask requires that `features` (a provider's) lack; () when it runs."""
        if ANY_MASK in features:
            return ()
        return tuple(f for f in self.requires if f not in features)

    def check(self, w: Workload) -> str | None:
        """Why `w` is not a valid workload of this mask (None when it is)."""
        if "window" in self.needs and not (w.window and w.window > 0):
            return f"a {w.mask} workload needs window > 0, got {w.window}"
        if "block" in self.needs and not (w.block and w.block > 0):
            return f"a {w.mask} workload needs block > 0 (the block size), got {w.block}"
        if "doc_lens" in self.needs:
            if not w.doc_lens or sum(w.doc_lens) != w.seqlen_q or w.seqlen_q != w.seqlen_k:
                return (
                    f"{w.mask} mask: doc_lens {w.doc_lens} must sum to "
                    f"seqlen_q == seqlen_k ({w.seqlen_q}, {w.seqlen_k})"
                )
            if any(n <= 0 for n in w.doc_lens):
                return f"{w.mask} mask: doc_lens {w.doc_lens} must all be positive"
        return None

    def mask_mod(self, w: Workload, device=None) -> MaskMod | None:
        return self.build(w, device)

    def allowed_pairs(self, w: Workload) -> int:
        return self.count(w)

    def native_for(self, w: Workload) -> Native | None:
        return self.native(w) if self.native is not None else None

    def dense(self, w: Workload, device=None, q_start: int = 0, q_end: int | None = None):
        """Bool [q_end - q_start, Sk] tensor (True = allowed) for query rows q_start..q_end-1."""
        import torch

        q_end = w.seqlen_q if q_end is None else q_end
        if not 0 <= q_start <= q_end <= w.seqlen_q:
            raise ValueError(f"query rows [{q_start}, {q_end}) outside [0, {w.seqlen_q})")
        rows, sk = q_end - q_start, w.seqlen_k
        if rows * sk > DENSE_LIMIT:
            raise ValueError(
                f"dense mask of {rows} x {sk} is too big (limit {DENSE_LIMIT} elements): ask for fewer query rows"
            )
        mod = self.mask_mod(w, device)
        if mod is None:
            return torch.ones(rows, sk, dtype=torch.bool, device=device)
        q_idx = torch.arange(q_start, q_end, device=device)[:, None]
        kv_idx = torch.arange(sk, device=device)[None, :]
        zero = torch.zeros((), dtype=torch.long, device=device)
        return mod(zero, zero, q_idx, kv_idx).expand(rows, sk).contiguous()
