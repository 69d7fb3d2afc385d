"""Attention masks as tiny `mask_mod(b, h, q_idx, kv_idx) -> bool` functions (attention-gym style).

They work on tensors (FlexAttention's vmap, broadcast dense masks) and the semantics are those of
flops.py, which counts their allowed pairs in closed form. Positions are absolute indices into the
query ([0, Sq)) and key ([0, Sk)) sequences; `offset = Sk - Sq` aligns causal masks bottom-right.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from attnbench.bench.results import Workload

MaskMod = Callable[..., torch.Tensor]
DENSE_LIMIT = 1 << 28  # elements; a dense mask bigger than this is refused (use query chunks instead)


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


def doc_ids_from_lens(doc_lens, device=None) -> torch.Tensor:
    """[sum(doc_lens)] tensor: the document index of each position."""
    lens = torch.as_tensor(list(doc_lens), dtype=torch.long)
    if (lens <= 0).any():
        raise ValueError(f"document lengths must be positive, got {list(doc_lens)}")
    return torch.repeat_interleave(torch.arange(len(lens)), lens).to(device)


def document(doc_ids: torch.Tensor) -> MaskMod:
    """Full attention inside a document, none across documents."""

    def same_document(b, h, q_idx, kv_idx):
        return doc_ids[q_idx] == doc_ids[kv_idx]

    return same_document


def block_causal(block_ids: torch.Tensor) -> MaskMod:
    """Full attention inside a block and to every earlier block."""

    def block_causal_mod(b, h, q_idx, kv_idx):
        return block_ids[kv_idx] <= block_ids[q_idx]

    return block_causal_mod


def and_masks(*mods: MaskMod) -> MaskMod:
    """Allowed where every mask allows."""
    if not mods:
        raise ValueError("and_masks needs at least one mask")

    def all_of(b, h, q_idx, kv_idx):
        result = mods[0](b, h, q_idx, kv_idx)
        for mod in mods[1:]:
            result = result & mod(b, h, q_idx, kv_idx)
        return result

    return all_of


def or_masks(*mods: MaskMod) -> MaskMod:
    """Allowed where any mask allows."""
    if not mods:
        raise ValueError("or_masks needs at least one mask")

    def any_of(b, h, q_idx, kv_idx):
        result = mods[0](b, h, q_idx, kv_idx)
        for mod in mods[1:]:
            result = result | mod(b, h, q_idx, kv_idx)
        return result

    return any_of


def mask_mod(workload: Workload, device=None) -> MaskMod | None:
    """The FlexAttention mask_mod of a workload; None for a full mask (no masking at all)."""
    offset = workload.seqlen_k - workload.seqlen_q
    if workload.mask == "full":
        return None
    if workload.mask == "causal":
        return causal if offset == 0 else causal_offset(offset)
    if workload.mask == "sliding_window":
        return sliding_window(workload.window, offset)
    if workload.mask == "document":
        return document(doc_ids_from_lens(workload.doc_lens, device))
    if workload.mask == "block_causal":
        return block_causal(doc_ids_from_lens(workload.doc_lens, device))
    raise ValueError(f"no mask_mod for mask {workload.mask!r}")


def dense_mask(workload: Workload, device=None, q_start: int = 0, q_end: int | None = None) -> torch.Tensor:
    """Bool [q_end - q_start, Sk] mask (True = allowed) for query rows q_start..q_end-1.

    Whole-mask use is for small sizes (tests, references); pass a row range for big ones.
    """
    q_end = workload.seqlen_q if q_end is None else q_end
    if not 0 <= q_start <= q_end <= workload.seqlen_q:
        raise ValueError(f"query rows [{q_start}, {q_end}) outside [0, {workload.seqlen_q})")
    rows, sk = q_end - q_start, workload.seqlen_k
    if rows * sk > DENSE_LIMIT:
        raise ValueError(
            f"dense mask of {rows} x {sk} is too big (limit {DENSE_LIMIT} elements): ask for fewer query rows"
        )
    mod = mask_mod(workload, device)
    if mod is None:
        return torch.ones(rows, sk, dtype=torch.bool, device=device)
    q_idx = torch.arange(q_start, q_end, device=device)[:, None]
    kv_idx = torch.arange(sk, device=device)[None, :]
    zero = torch.zeros((), dtype=torch.long, device=device)
    return mod(zero, zero, q_idx, kv_idx).expand(rows, sk).contiguous()
