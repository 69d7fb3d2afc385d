"""The mask registry: every attention mask, one file each, one line here (attention-gym's style).

A mask is a file `attnbench/masks/<name>.py` defining `MASK = Mask(...)`: its tiny mask_mod (built from
mods.py's pieces, combined with and_masks/or_masks), its exact allowed-pair count in closed form, the
workload fields it reads (window, doc_lens, block) and the kernel features a provider needs to run it
(causal flag, window, documents as cu_seqlens, block-causal; base.FEATURES). A new mask is that file plus
its name in BUILT_IN below, or `register(Mask(...))` from anywhere (a test, a notebook) at run time.
Everything else derives from the registry: workload validation, FLOP counts, the reference, which
providers run which mask (providers declare features, not mask names), the masks report's sweep and
pictures; the tests iterate over it (pair counts and native forms against the dense mask).

Positions are absolute indices into the query ([0, Sq)) and key ([0, Sk)) sequences; `offset = Sk - Sq`
aligns causal masks bottom-right (flash-attn's and SDPA's causal_lower_right convention). Document
masks split each batch element into documents (`doc_lens`, summing to Sq == Sk); positions inside a
document count from its first token.

Importing this package imports neither torch nor the rows module (which validates workloads with it),
so report cells can use it; torch is imported where a tensor is made. `attnbench.masks.<name>` is the
module of the mask `<name>`; the mask_mod pieces live in `attnbench.masks.mods`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from attnbench.masks.base import ANY_MASK, DENSE_LIMIT, FEATURES, Mask, Native
from attnbench.masks.mods import (
    MaskMod,
    and_masks,
    clamped_ramp_sum,
    doc_ids_from_lens,
    doc_positions_from_lens,
    document,
    key_limit,
    keys_below,
    or_masks,
)

if TYPE_CHECKING:
    from attnbench.rows import Workload

__all__ = [
    "ALIASES",
    "ANY_MASK",
    "DENSE_LIMIT",
    "FEATURES",
    "REGISTRY",
    "Mask",
    "MaskMod",
    "Native",
    "allowed_pairs",
    "and_masks",
    "clamped_ramp_sum",
    "dense_mask",
    "doc_ids_from_lens",
    "doc_positions_from_lens",
    "document",
    "get",
    "key_limit",
    "keys_below",
    "mask_mod",
    "names",
    "native",
    "of",
    "or_masks",
    "register",
    "same",
    "unregister",
]

REGISTRY: dict[str, Mask] = {}
# Names rows already use, resolved to a registry entry (the row keeps the name it was written with).
ALIASES: dict[str, str] = {}


def register(mask: Mask, aliases: tuple[str, ...] = ()) -> Mask:
    """Add a mask (and names that resolve to it); a name or alias taken already is a ValueError."""
    if not isinstance(mask, Mask):
        raise TypeError(f"register() takes a Mask, got {type(mask).__name__}")
    for name in (mask.name, *aliases):
        if name in REGISTRY or name in ALIASES:
            raise ValueError(f"mask name {name!r} is registered already (as {ALIASES.get(name, name)!r})")
    REGISTRY[mask.name] = mask
    ALIASES.update(dict.fromkeys(aliases, mask.name))
    return mask


def unregister(name: str) -> Mask:
    """Remove a mask registered at run time (and its aliases); the Mask removed."""
    mask = get(name)
    del REGISTRY[mask.name]
    for alias in [a for a, target in ALIASES.items() if target == mask.name]:
        del ALIASES[alias]
    return mask


# The built-in masks, one line each: the module attnbench.masks.<name> defines MASK; then its aliases.
BUILT_IN: dict[str, tuple[str, ...]] = {
    "full": (),
    "causal": (),
    "sliding_window": (),
    "varlen_full": ("document",),
    "varlen_causal": (),
    "varlen_block_causal": (),
    "block_causal": (),
}
for _name, _aliases in BUILT_IN.items():
    register(importlib.import_module(f"{__name__}.{_name}").MASK, _aliases)


def names() -> tuple[str, ...]:
    """Every mask name a workload may carry (registry entries, then aliases)."""
    return (*REGISTRY, *ALIASES)


def get(name: str) -> Mask:
    """The Mask of a name (or alias); a ValueError naming the known masks otherwise."""
    mask = REGISTRY.get(ALIASES.get(name, name))
    if mask is None:
        raise ValueError(f"mask {name!r} is not one of {names()}")
    return mask


def same(a: str, b: str) -> bool:
    """Whether two mask names denote the same registry entry."""
    return ALIASES.get(a, a) == ALIASES.get(b, b)


# --- workload-level helpers (what providers, flops and correctness call) ----------------------------


def of(workload: Workload) -> Mask:
    return get(workload.mask)


def mask_mod(workload: Workload, device=None) -> MaskMod | None:
    """The FlexAttention mask_mod of a workload; None for a full mask (no masking at all)."""
    return of(workload).mask_mod(workload, device)


def dense_mask(workload: Workload, device=None, q_start: int = 0, q_end: int | None = None):
    """Bool [q_end - q_start, Sk] mask (True = allowed) for query rows q_start..q_end-1.

    Whole-mask use is for small sizes (tests, references); pass a row range for big ones.
    """
    return of(workload).dense(workload, device, q_start, q_end)


def allowed_pairs(workload: Workload) -> int:
    """Number of allowed (query, key) pairs in one [Sq, Sk] mask (one batch element, one head)."""
    return of(workload).allowed_pairs(workload)


def native(workload: Workload) -> Native | None:
    """What a flash-style kernel needs for this workload's mask; None when none expresses it."""
    return of(workload).native_for(workload)
