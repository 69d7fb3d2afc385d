"""Dilated attention as one FlexAttention call over the whole sequence.

A single flex_attention call computes one softmax per query, over the keys its mask allows. With
mask_mod = "some branch keeps the pair" alone that is one softmax over the *union* of the branches,
which is not LongNet's operator wherever branches overlap (a key kept by two branches counts twice in
the LSE merge, once in the union). The score_mod adds log m(q, k), m = the number of branches that
keep the pair, and then the single softmax is exactly the LSE merge of the branches (pattern.py
derives it; tests check it against the reference). So this computes the same thing as the reference
and the gather path, with one kernel and no gather, scatter or merge.

The cost is work: Flex tiles the original [N, N] coordinates in 128 x 128 blocks, and a block inside a
segment of rate r holds about 1/r^2 useful pairs but is computed whole. Per head the computed pairs
are about sum_i N * w_i (causal: half), against sum_i N * w_i / r_i^2 for the gather path: 15x more
for the paper's five branches, and quadratic in N once a branch's segment spans the whole sequence
(pattern.for_length(..., extend=True)), where Flex does about the work of dense causal attention. (A
per-head BlockMask would skip the tiles of the widest, r > 128 branches that a head keeps nothing of,
about 8/9 of them for r = 384, at 16x the BlockMask memory; it stays quadratic, so it is not done.)

The BlockMask is built from the structure instead of by evaluating mask_mod on every (q, k) pair
(create_block_mask is O(N^2) per head: 10^13 evaluations at a million tokens). For query block I the
kv blocks listed are those of the union of the branch segments that contain I's rows, a contiguous
interval because every one of them contains block I: a superset of the non-empty blocks (dilation is
left to mask_mod). Full blocks (mask_mod skipped, score_mod still applied) are the blocks inside one
segment of the widest r = 1 branch, strictly below the diagonal when causal: every pair there is kept.
The same mask serves every batch element and head (the head enters through mask_mod and score_mod).
"""

from __future__ import annotations

import inspect
import warnings

import torch

from attnbench.dilated import pattern

BLOCK_SIZE = 128


def mods(branches, causal: bool):
    """(mask_mod, score_mod) of the pattern: the union, and + log(multiplicity)."""
    branches = pattern.branches_from(branches)

    def dilated_mask(b, h, q_idx, kv_idx):
        allowed = pattern.branch_allowed(branches[0], h, q_idx, kv_idx, causal)
        for branch in branches[1:]:
            allowed = allowed | pattern.branch_allowed(branch, h, q_idx, kv_idx, causal)
        return allowed

    def log_multiplicity(score, b, h, q_idx, kv_idx):
        count = pattern.multiplicity(branches, h, q_idx, kv_idx, causal)
        return score + torch.log(torch.clamp(count, min=1).to(score.dtype))

    return dilated_mask, log_multiplicity


def block_intervals(branches, seq_len: int, causal: bool, block: int, device=None):
    """Per query block: (lo, hi) of the listed kv blocks and (flo, fhi) of the full ones (fhi < flo:
    none), as int64 tensors [num_blocks]."""
    branches = pattern.branches_from(branches)
    nblocks = -(-seq_len // block)
    rows = torch.arange(nblocks, device=device)
    first, last = rows * block, torch.clamp((rows + 1) * block, max=seq_len) - 1
    lo = torch.full_like(rows, nblocks)
    hi = torch.full_like(rows, -1)
    for b in branches:
        start = (first // b.w) * b.w  # first key of the segment holding the block's first row
        end = torch.clamp((last // b.w + 1) * b.w, max=seq_len) - 1
        lo, hi = torch.minimum(lo, start // block), torch.maximum(hi, end // block)
    if causal:
        hi = torch.minimum(hi, rows)
    flo, fhi = hi + 1, hi  # empty
    dense = [b for b in branches if b.r == 1]
    if dense:
        w = max(b.w for b in dense)
        segment = first // w
        inside = segment == last // w  # the whole query block lies in one segment
        f_lo = -(-(segment * w) // block)  # kv blocks entirely inside that segment
        f_hi = torch.clamp((segment + 1) * w, max=seq_len) // block - 1
        if causal:
            f_hi = torch.minimum(f_hi, rows - 1)
        has = inside & (f_hi >= f_lo)
        flo, fhi = torch.where(has, f_lo, flo), torch.where(has, f_hi, fhi)
    return lo, hi, flo, fhi


def build_block_mask(branches, seq_len: int, causal: bool, block: int = BLOCK_SIZE, device=None):
    """The BlockMask of the pattern (see the module docstring), [1, 1, blocks, blocks]."""
    from torch.nn.attention.flex_attention import BlockMask

    lo, hi, flo, fhi = block_intervals(branches, seq_len, causal, block, device)
    nblocks = lo.shape[0]
    has_full = fhi >= flo
    left = torch.where(has_full, flo - lo, hi - lo + 1)
    right = torch.where(has_full, hi - fhi, torch.zeros_like(hi))
    t = torch.arange(nblocks, device=device).view(1, nblocks)
    left_, lo_, fhi_ = left.view(-1, 1), lo.view(-1, 1), fhi.view(-1, 1)
    partial = torch.where(t < left_, lo_ + t, fhi_ + 1 + (t - left_)).clamp(0, nblocks - 1)
    full = (flo.view(-1, 1) + t).clamp(0, nblocks - 1)
    as_mask = {
        "kv_num_blocks": (left + right).to(torch.int32).view(1, 1, nblocks),
        "kv_indices": partial.to(torch.int32).view(1, 1, nblocks, nblocks),
        "full_kv_num_blocks": torch.where(has_full, fhi - flo + 1, 0).to(torch.int32).view(1, 1, nblocks),
        "full_kv_indices": full.to(torch.int32).view(1, 1, nblocks, nblocks),
        "BLOCK_SIZE": block,
        "mask_mod": mods(branches, causal)[0],
    }
    if "seq_lengths" in inspect.signature(BlockMask.from_kv_blocks).parameters:
        as_mask["seq_lengths"] = (seq_len, seq_len)
    return BlockMask.from_kv_blocks(**as_mask)


def _flex_call(fn, q, k, v, score_mod, block_mask, scale):
    """flex_attention returning (out, lse): return_aux on newer torch, return_lse on older."""
    try:
        from torch.nn.attention.flex_attention import AuxRequest
    except ImportError:
        return fn(q, k, v, score_mod=score_mod, block_mask=block_mask, scale=scale, return_lse=True)
    out, aux = fn(
        q, k, v, score_mod=score_mod, block_mask=block_mask, scale=scale, return_aux=AuxRequest(lse=True)
    )
    return out, aux.lse


class FlexDilated:
    """Prepared dilated FlexAttention for one (branches, sequence length, mask): the BlockMask is built
    here (setup, never timed); calling it runs one flex_attention. compiled=None compiles on CUDA only
    (eager Flex on CPU evaluates the mods densely and has no backward there)."""

    def __init__(self, branches, seq_len: int, *, causal: bool, device, compiled: bool | None = None,
                 block: int = BLOCK_SIZE):  # fmt: skip
        from torch.nn.attention.flex_attention import flex_attention

        self.branches = pattern.branches_from(branches)
        pattern.check(self.branches, seq_len)
        device = torch.device(device)
        self.compiled = device.type == "cuda" if compiled is None else compiled
        self.score_mod = mods(self.branches, causal)[1]
        self.block_mask = build_block_mask(self.branches, seq_len, causal, block, device)
        if self.compiled:
            from attnbench.bench.providers.base import compile_fn

            self.fn = compile_fn(flex_attention)
        else:
            self.fn = flex_attention

    def __call__(self, q, k, v, scale: float | None = None):
        scale = pattern.default_scale(q.shape[-1]) if scale is None else scale
        with warnings.catch_warnings():  # eager Flex warns that it is not compiled: on CPU that is the point
            warnings.simplefilter("ignore", UserWarning)
            return _flex_call(self.fn, q, k, v, self.score_mod, self.block_mask, scale)


def flex_attention_dilated(q, k, v, branches, *, causal: bool, compiled: bool | None = None, scale=None):
    """(out, lse) of dilated attention through one FlexAttention call (builds the BlockMask each call)."""
    runner = FlexDilated(branches, q.shape[2], causal=causal, device=q.device, compiled=compiled)
    return runner(q, k, v, scale)
