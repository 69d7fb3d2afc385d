"""The tiny mask_mods every mask is built from, and attention-gym's combinators (and_masks, or_masks).

A mask_mod is `mask_mod(b, h, q_idx, kv_idx) -> bool` (FlexAttention's signature); each also runs on
broadcast index tensors, which gives the dense form for the reference. torch is imported only where a
tensor is made, so importing this module stays torch-free.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

MaskMod = Callable[..., Any]


def causal(b, h, q_idx, kv_idx):
    """Top-left == bottom-right causal for Sq == Sk."""
    return q_idx >= kv_idx


def causal_offset(offset: int) -> MaskMod:
    """Bottom-right aligned causal for Sq != Sk: key j is visible to query i when j <= i + offset."""

    def causal_br(b, h, q_idx, kv_idx):
        return q_idx + offset >= kv_idx

    return causal_br


def sliding_window(window: int, offset: int = 0) -> MaskMod:
    """Causal window including the diagonal: 0 <= (i + offset) - j < window."""
    if window < 1:
        raise ValueError(f"sliding window must be >= 1, got {window}")

    def sliding(b, h, q_idx, kv_idx):
        distance = q_idx + offset - kv_idx
        return (distance >= 0) & (distance < window)

    return sliding


def _lens_tensor(doc_lens):
    import torch

    lens = torch.as_tensor(list(doc_lens), dtype=torch.long)
    if (lens <= 0).any():
        raise ValueError(f"document lengths must be positive, got {list(doc_lens)}")
    return lens


def doc_ids_from_lens(doc_lens, device=None):
    """[sum(doc_lens)] tensor: the document index of each position."""
    import torch

    lens = _lens_tensor(doc_lens)
    return torch.repeat_interleave(torch.arange(len(lens)), lens).to(device)


def doc_positions_from_lens(doc_lens, device=None):
    """[sum(doc_lens)] tensor: each position's index inside its own document (0 at a document's start)."""
    import torch

    lens = _lens_tensor(doc_lens)
    starts = torch.cumsum(lens, 0) - lens
    return (torch.arange(int(lens.sum())) - torch.repeat_interleave(starts, lens)).to(device)


def document(doc_ids) -> MaskMod:
    """Full attention inside a document, none across documents."""

    def same_document(b, h, q_idx, kv_idx):
        return doc_ids[q_idx] == doc_ids[kv_idx]

    return same_document


def block_causal(block_ids) -> MaskMod:
    """Full attention inside a block and to every earlier block (`block_ids`: each position's block)."""

    def block_causal_mod(b, h, q_idx, kv_idx):
        return block_ids[kv_idx] <= block_ids[q_idx]

    return block_causal_mod


def key_limit(positions, block: int):
    """Per query position p (inside its document): keys at positions < (p // block + 1) * block are visible."""
    return (positions // block + 1) * block


def keys_below(positions, limits) -> MaskMod:
    """Key kv visible to query q when positions[kv] < limits[q] (positions inside the document)."""

    def below(b, h, q_idx, kv_idx):
        return positions[kv_idx] < limits[q_idx]

    return below


def _fold(mods: tuple[MaskMod, ...], combine, name: str, what: str) -> MaskMod:
    """One mask_mod combining every mod's answer with `combine` (`&` or `|`), left to right."""
    if not mods:
        raise ValueError(f"{what} needs at least one mask")

    def folded(b, h, q_idx, kv_idx):
        result = mods[0](b, h, q_idx, kv_idx)
        for mod in mods[1:]:
            result = combine(result, mod(b, h, q_idx, kv_idx))
        return result

    folded.__name__ = folded.__qualname__ = name
    return folded


def and_masks(*mods: MaskMod) -> MaskMod:
    """Allowed where every mask allows."""
    return _fold(mods, operator.and_, "all_of", "and_masks")


def or_masks(*mods: MaskMod) -> MaskMod:
    """Allowed where any mask allows."""
    return _fold(mods, operator.or_, "any_of", "or_masks")


# --- closed-form sums the pair counts use -----------------------------------------------------------


def _relu_sum(first: int, last: int, c: int) -> int:
    """sum over v = first..last of max(v - c, 0)."""
    lo = max(first, c + 1)
    if last < lo:
        return 0
    n = last - lo + 1
    return (lo - c + last - c) * n // 2


def clamped_ramp_sum(a: int, n: int, hi: int) -> int:
    """sum over i = 0..n-1 of clamp(a + i, 0, hi)."""
    if n <= 0:
        return 0
    return _relu_sum(a, a + n - 1, 0) - _relu_sum(a, a + n - 1, hi)
