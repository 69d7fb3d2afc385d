"""Attention masks as data: one named `Mask` per mask type, in one registry (attention-gym's style).

A mask is a tiny `mask_mod(b, h, q_idx, kv_idx) -> bool` function (FlexAttention's signature; it also
runs on broadcast index tensors, which gives the dense form for the reference), its exact count of
allowed (q, k) pairs in closed form (flops.py), the workload fields it needs (window, doc_lens,
block), and what a native (flash-style) kernel needs to run it: a causal flag, a window, cu_seqlens
(`Native`); `native is None` when no such kernel expresses it (then only FlexAttention or a dense mask
can). Adding a mask is one `Mask(...)` entry in REGISTRY; the tests iterate over the registry (pair
counts against brute force, mask_mod against the dense form, native against the dense form).

Positions are absolute indices into the query ([0, Sq)) and key ([0, Sk)) sequences; `offset = Sk - Sq`
aligns causal masks bottom-right (flash-attn's and SDPA's causal_lower_right convention). Document
masks split each batch element into documents (`doc_lens`, summing to Sq == Sk); positions inside a
document count from its first token.

Importing this module imports no torch (results.py validates workloads with it, and report cells run
without torch); torch is imported where a tensor is made.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from attnbench.bench.results import Workload

MaskMod = Callable[..., Any]
DENSE_LIMIT = 1 << 28  # elements; a dense mask bigger than this is refused (use query chunks instead)


# --- tiny mask_mods ---------------------------------------------------------------------------------


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


# --- exact pair counts ------------------------------------------------------------------------------


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


def _causal_pairs(w: Workload) -> int:
    return clamped_ramp_sum(w.seqlen_k - w.seqlen_q + 1, w.seqlen_q, w.seqlen_k)


def _window_pairs(w: Workload) -> int:
    offset = w.seqlen_k - w.seqlen_q
    return clamped_ramp_sum(offset + 1, w.seqlen_q, w.seqlen_k) - clamped_ramp_sum(
        offset + 1 - w.window, w.seqlen_q, w.seqlen_k
    )


def _block_causal_pairs(w: Workload) -> int:
    total, end = 0, 0
    for n in w.doc_lens:
        end += n
        total += n * end
    return total


def block_causal_document_pairs(n: int, block: int) -> int:
    """Pairs of one document of n tokens under the in-document block-causal mask: the queries of block
    b (min(block, n - b*block) of them) each see min((b + 1) * block, n) keys."""
    return sum(min(block, n - start) * min(start + block, n) for start in range(0, n, block))


# --- the Mask object --------------------------------------------------------------------------------


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


def _mod_full(w, device):
    return None


def _mod_causal(w, device):
    offset = w.seqlen_k - w.seqlen_q
    return causal if offset == 0 else causal_offset(offset)


def _mod_window(w, device):
    return sliding_window(w.window, w.seqlen_k - w.seqlen_q)


def _mod_documents(w, device):
    return document(doc_ids_from_lens(w.doc_lens, device))


def _mod_documents_causal(w, device):
    return and_masks(causal, document(doc_ids_from_lens(w.doc_lens, device)))


def _mod_documents_block_causal(w, device):
    positions = doc_positions_from_lens(w.doc_lens, device)
    ids = doc_ids_from_lens(w.doc_lens, device)
    return and_masks(document(ids), keys_below(positions, key_limit(positions, w.block)))


def _mod_block_causal(w, device):
    return block_causal(doc_ids_from_lens(w.doc_lens, device))


@dataclass(frozen=True)
class Mask:
    """One mask type. `build(workload, device)` gives its mask_mod (None: nothing masked);
    `count(workload)` its allowed pairs per (batch element, head); `native(workload)` what a flash-style
    kernel needs, or None when no such kernel expresses it."""

    name: str
    summary: str
    build: Callable[[Workload, Any], MaskMod | None]
    count: Callable[[Workload], int]
    native: Callable[[Workload], Native] | None = None
    needs: tuple[str, ...] = ()  # workload fields this mask reads: "window", "doc_lens", "block"
    label: str = ""  # how a figure names it

    @property
    def is_full(self) -> bool:
        return self.build is _mod_full

    @property
    def title(self) -> str:
        return self.label or self.name.replace("_", " ")

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


REGISTRY: dict[str, Mask] = {
    m.name: m
    for m in (
        Mask(
            "full",
            "every query sees every key",
            _mod_full,
            lambda w: w.seqlen_q * w.seqlen_k,
            lambda w: Native(),
        ),
        Mask(
            "causal",
            "query i sees keys j <= i + (Sk - Sq) (bottom-right aligned)",
            _mod_causal,
            _causal_pairs,
            lambda w: Native(causal=True),
        ),
        Mask(
            "sliding_window",
            "causal, and only the last `window` keys including the query's own position",
            _mod_window,
            _window_pairs,
            lambda w: Native(causal=True, window=w.window),
            needs=("window",),
            label="sliding-window causal",
        ),
        Mask(
            "varlen_full",
            "documents packed into one sequence: full attention inside a document, none across",
            _mod_documents,
            lambda w: sum(n * n for n in w.doc_lens),
            lambda w: Native(doc_lens=tuple(w.doc_lens)),
            needs=("doc_lens",),
            label="varlen full",
        ),
        Mask(
            "varlen_causal",
            "documents packed into one sequence: causal inside a document, none across",
            _mod_documents_causal,
            lambda w: sum(n * (n + 1) // 2 for n in w.doc_lens),
            lambda w: Native(causal=True, doc_lens=tuple(w.doc_lens)),
            needs=("doc_lens",),
            label="varlen causal",
        ),
        Mask(
            # MagiAttention's benchmark defines it as k <= (q // block + 1) * block (positions inside the
            # document), which lets every block see the first key of the next block as well. We use
            # k < (q // block + 1) * block: full attention inside a block and to all earlier blocks of the
            # document, nothing later. The pair counts differ by (blocks - 1) * block per document
            # (< 0.1 % at block 2048), but a block-sparse kernel would touch one more key tile per block.
            "varlen_block_causal",
            "documents of blocks: a query sees every key of its own block and of the earlier blocks of "
            "its document (k < (q // block + 1) * block inside the document), nothing across documents",
            _mod_documents_block_causal,
            lambda w: sum(block_causal_document_pairs(n, w.block) for n in w.doc_lens),
            None,
            needs=("doc_lens", "block"),
            label="varlen block causal",
        ),
        Mask(
            "block_causal",
            "`doc_lens` are blocks of one sequence: full attention inside a block and to every earlier block",
            _mod_block_causal,
            _block_causal_pairs,
            None,
            needs=("doc_lens",),
        ),
    )
}
# Names rows already use, resolved to a registry entry (the row keeps the name it was written with).
ALIASES = {"document": "varlen_full"}


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
