"""MagiAttention's Flex-Flash-Attention kernel (`magi_attention.api.flex_flash_attn_func`), single GPU.

FFA takes packed tokens ([tokens, heads, dim]) and the mask as a list of rectangles: row r lets the
queries q_ranges[r] = [qs, qe) see the keys k_ranges[r] = [ks, ke) under attn_type_map[r]:
  0 full, 1 causal (bottom-right aligned inside the rectangle), 2 inverse causal (top-left aligned),
  3 bi-causal (both: a band).
`ffa_ranges` expresses every mask of the mask report this way, natively (no dense mask); the batch is
packed into one sequence, element b's ranges shifted by b * S. In every encoding here the q_ranges do not
overlap, which is what `disable_fwd_atomic_reduction=True` requires.

- `magi_ffa`: `disable_fwd_atomic_reduction=True` (bf16 output, no atomic reduction): the main row.
- `magi_ffa_default`: the library defaults (fp32 atomic reduction of the output, then cast).

FFA compiles each kernel variant by JIT on first use (~4.5 min per variant on 16 cores); our GPU machine
gets the bf16 head-dim-128 variants prebuilt (scripts/carry), so only those dims are declared there.
"""

from __future__ import annotations

import itertools

from attnbench import masks
from attnbench.bench.providers.base import (
    Prepared,
    Provider,
    Unsupported,
    cuda_missing,
    import_failure,
    module_version,
)
from attnbench.bench.providers.flash_attn import thd_prepared
from attnbench.rows import Workload

FULL, CAUSAL, INV_CAUSAL, BI_CAUSAL = 0, 1, 2, 3
MODULE = "magi_attention.api"


def _window_ranges(s: int, window: int) -> list[tuple[int, int, int, int, int]]:
    """Causal window of `window` keys incl. the query (0 <= i - j < window) over one sequence of s tokens."""
    if window >= s:
        return [(0, s, 0, s, CAUSAL)]
    # the first `window` queries see every earlier key (plain causal); query i >= window sees keys
    # [i - window + 1, i]: a band, which is bi-causal on q [window, s) x k [1, s) (causal bottom-right
    # gives j <= i, inverse causal top-left gives j >= i - window + 1)
    return [(0, window, 0, window, CAUSAL), (window, s, 1, s, BI_CAUSAL)]


def _document_ranges(doc_lens, mask: str, block: int | None) -> list[tuple[int, int, int, int, int]]:
    rows, start = [], 0
    for n in doc_lens:
        if mask == "varlen_full":
            rows.append((start, start + n, start, start + n, FULL))
        elif mask == "varlen_causal":
            rows.append((start, start + n, start, start + n, CAUSAL))
        else:  # varlen_block_causal: the queries of a block see the document up to the end of that block
            for b0 in range(0, n, block):
                b1 = min(b0 + block, n)
                rows.append((start + b0, start + b1, start, start + b1, FULL))
        start += n
    return rows


def ffa_ranges(workload: Workload) -> list[tuple[int, int, int, int, int]]:
    """(q_start, q_end, k_start, k_end, attn_type) rows expressing the workload's mask over the packed
    batch; raises Unsupported for a mask (or shape) with no encoding here."""
    mask = masks.get(workload.mask).name  # an alias resolved to its registry name
    sq, sk = workload.seqlen_q, workload.seqlen_k
    if mask == "full":
        one = [(0, sq, 0, sk, FULL)]
    elif mask == "causal":
        one = [(0, sq, 0, sk, CAUSAL)]  # bottom-right aligned, as our causal is
    elif mask == "sliding_window":
        if sq != sk:
            raise Unsupported("sliding_window with seqlen_q != seqlen_k: not encoded as FFA ranges")
        one = _window_ranges(sq, workload.window)
    elif mask in ("varlen_full", "varlen_causal", "varlen_block_causal"):
        one = _document_ranges(workload.doc_lens, mask, workload.block)
    elif mask == "block_causal":  # doc_lens are blocks of one sequence: each sees itself and all before
        ends = list(itertools.accumulate(workload.doc_lens))
        one = [(end - n, end, 0, end, FULL) for n, end in zip(workload.doc_lens, ends, strict=True)]
    else:
        raise Unsupported(f"mask {workload.mask}: no q_ranges/k_ranges encoding here")
    return [
        (qs + b * sq, qe + b * sq, ks + b * sk, ke + b * sk, t)
        for b in range(workload.batch)
        for qs, qe, ks, ke, t in one
    ]


def ranges_tensors(rows, device=None):
    """(q_ranges [n, 2] int32, k_ranges [n, 2] int32, attn_type_map [n] int32) for flex_flash_attn_func."""
    import torch

    q_ranges = torch.tensor([[r[0], r[1]] for r in rows], dtype=torch.int32, device=device)
    k_ranges = torch.tensor([[r[2], r[3]] for r in rows], dtype=torch.int32, device=device)
    types = torch.tensor([r[4] for r in rows], dtype=torch.int32, device=device)
    return q_ranges, k_ranges, types


def dense_from_ranges(rows, total_q: int, total_k: int):
    """Int [total_q, total_k] tensor: how many rows allow each (q, k) pair (FFA's type semantics).

    For tests: a correct encoding covers each allowed pair exactly once and nothing else."""
    import torch

    cover = torch.zeros(total_q, total_k, dtype=torch.int32)
    for qs, qe, ks, ke, t in rows:
        i = torch.arange(qe - qs)[:, None]
        j = torch.arange(ke - ks)[None, :]
        lq, lk = qe - qs, ke - ks
        causal = j <= i + (lk - lq)  # bottom-right aligned
        inverse = j >= i  # top-left aligned
        allowed = {
            FULL: torch.ones(lq, lk, dtype=torch.bool),
            CAUSAL: causal,
            INV_CAUSAL: inverse.expand(lq, lk),
            BI_CAUSAL: causal & inverse,
        }[t]
        cover[qs:qe, ks:ke] += allowed.to(torch.int32)
    return cover


def q_ranges_overlap(rows) -> bool:
    spans = sorted((r[0], r[1]) for r in rows)
    return any(a_end > b_start for (_, a_end), (b_start, _) in itertools.pairwise(spans))


class MagiFFA(Provider):
    family = "magi_ffa"
    layout = "thd"  # packed [tokens, heads, dim]
    dtypes = ("bfloat16", "float16")
    hue = "#7b4173"
    mask_features = ("causal", "window", "documents", "block_causal")
    gqa = True
    backward = True
    head_dims = (64, 128)
    install = (
        "git clone https://github.com/SandAI-org/MagiAttention && cd MagiAttention && git submodule update "
        "--init --recursive && pip install --no-build-isolation . (Hopper, CUDA >= 12.8; kernels JIT-compile)"
    )

    def __init__(self, name: str, *, no_fwd_atomic: bool = True):
        self.name = name
        self.no_fwd_atomic = no_fwd_atomic

    def unavailable(self) -> str | None:
        return import_failure(MODULE, self.install) or cuda_missing()

    def version(self) -> str:
        return module_version("magi_attention")

    def unsupported(self, workload: Workload, pass_: str) -> str | None:
        reason = super().unsupported(workload, pass_)
        window = masks.get(workload.mask).name == "sliding_window"
        if reason is None and window and workload.seqlen_q != workload.seqlen_k:
            reason = "sliding_window with seqlen_q != seqlen_k: not encoded as FFA ranges"
        return reason

    def call_kwargs(self) -> dict:
        # valid for every encoding here: their q_ranges never overlap (tests check it)
        return {"disable_fwd_atomic_reduction": True} if self.no_fwd_atomic else {}

    def prepare(self, q, k, v, workload: Workload, backward: bool = False) -> Prepared:
        from magi_attention.api import flex_flash_attn_func

        b, hq, sq, d = q.shape
        rows = ffa_ranges(workload)
        q_ranges, k_ranges, types = ranges_tensors(rows, q.device)
        packed = tuple(
            t.detach()
            .transpose(1, 2)
            .reshape(b * t.shape[2], t.shape[1], d)
            .contiguous()
            .requires_grad_(backward)
            for t in (q, k, v)
        )
        kwargs = self.call_kwargs()

        def run():
            out, _meta = flex_flash_attn_func(
                *packed, q_ranges=q_ranges, k_ranges=k_ranges, attn_type_map=types, **kwargs
            )
            return out

        which = "disable_fwd_atomic_reduction=True" if self.no_fwd_atomic else "library defaults"
        return thd_prepared(
            run,
            packed,
            lambda out: out.reshape(b, sq, hq, d).transpose(1, 2),
            f"flex_flash_attn_func, {which}; mask as {len(rows)} (q_range, k_range, type) rows",
        )
