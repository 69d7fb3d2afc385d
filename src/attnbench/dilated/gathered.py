"""Dilated attention by gathering: each branch's sparsified segments become one dense batch for a fused
kernel that returns the LSE; results are scattered back and merged by LSE in float32.

Gather without index tensors. With x [batch, heads, N, dim] viewed as [batch, heads, N/w, w, dim], the
positions a head of offset o keeps are the strided view x5[:, o::r, :, o::r] — heads o, o+r, ... (all
have offset o) and segment-relative positions o, o+r, ... It has L_o = ceil((w - o)/r) positions per
segment, so offsets group by L (at most two lengths per branch: ceil(w/r) and floor(w/r)). Per group
one copy builds the kernel's input [batch * N/w, heads_in_group, L, dim] (or bshd), one kernel call
runs every segment of every head of the group, and the result merges in place into the float32
accumulators through the same strided views. Nothing is padded: every gathered row is a real position.

Forward: out, lse accumulators start at 0, -inf; the first branch writes, later ones merge
(cp.merge.merge_). Rows no branch keeps stay 0 / -inf. Backward (autograd.Function): per branch and
group, gather dout, q, k, v, the merged out and the merged LSE, run the kernel's backward with them
(exact share of the gradient, see kernels.py) and add dq, dk, dv in float32 through the views. Nothing
per branch is kept between forward and backward: the backward gathers again (copies are O(N)).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from attnbench.cp.local import accumulator_dtype
from attnbench.cp.merge import merge_
from attnbench.dilated import kernels, pattern


@dataclass(frozen=True)
class OffsetGroup:
    """Offsets of one branch that keep the same number of positions per segment."""

    length: int  # L, kept positions per segment
    offsets: tuple[int, ...]
    head_counts: tuple[int, ...]  # heads with each offset (h = o, o + r, ...)

    @property
    def heads(self) -> int:
        return sum(self.head_counts)

    def head_slice(self, i: int) -> slice:
        start = sum(self.head_counts[:i])
        return slice(start, start + self.head_counts[i])


@dataclass(frozen=True)
class BranchPlan:
    branch: pattern.Branch
    segments: int  # segments in the sequence this plan is for
    groups: tuple[OffsetGroup, ...]


def plan(branches, seq_len: int, heads: int) -> tuple[BranchPlan, ...]:
    """How each branch runs on `seq_len` positions: its segments and its offset groups."""
    branches = pattern.branches_from(branches)
    pattern.check(branches, seq_len)
    plans = []
    for b in branches:
        by_length: dict[int, list[int]] = {}
        for o in range(min(b.r, heads)):
            if b.kept(o):
                by_length.setdefault(b.kept(o), []).append(o)
        groups = tuple(
            OffsetGroup(length, tuple(offs), tuple(len(range(o, heads, b.r)) for o in offs))
            for length, offs in sorted(by_length.items(), reverse=True)
        )
        plans.append(BranchPlan(b, seq_len // b.w, groups))
    return tuple(plans)


def kept_view(x: torch.Tensor, plan: BranchPlan, offset: int) -> torch.Tensor:
    """[batch, heads_o, segments, L, ...] view of the positions heads of `offset` keep (x: [b, H, N, ...])."""
    r = plan.branch.r
    return x.unflatten(2, (plan.segments, plan.branch.w))[:, offset::r, :, offset::r]


def block_view(block: torch.Tensor, plan: BranchPlan, group: OffsetGroup, i: int, layout: str, batch: int):
    """The part of a kernel tensor for offset i of the group, as [batch, heads_o, segments, L, ...].

    block: [batch * segments, heads_g, L, dim] (bhsd), [batch * segments, L, heads_g, dim] (bshd) or an
    LSE [batch * segments, heads_g, L] (either layout)."""
    heads, length, seg = group.head_slice(i), group.length, plan.segments
    if block.dim() == 3:
        return block.view(batch, seg, group.heads, length)[:, :, heads].transpose(1, 2)
    if layout == "bhsd":
        return block.view(batch, seg, group.heads, length, -1)[:, :, heads].transpose(1, 2)
    return block.view(batch, seg, length, group.heads, -1)[:, :, :, heads].permute(0, 3, 1, 2, 4)


def gather(x: torch.Tensor, plan: BranchPlan, group: OffsetGroup, layout: str, dtype=None) -> torch.Tensor:
    """One contiguous kernel input for a group: [batch * segments, heads_g, L, dim] (bhsd) or bshd; an
    LSE [b, H, N] gives [batch * segments, heads_g, L]."""
    b, seg, length = x.shape[0], plan.segments, group.length
    if x.dim() == 3:
        shape = (b * seg, group.heads, length)
    elif layout == "bhsd":
        shape = (b * seg, group.heads, length, x.shape[-1])
    else:
        shape = (b * seg, length, group.heads, x.shape[-1])
    buffer = torch.empty(shape, dtype=dtype or x.dtype, device=x.device)
    for i, offset in enumerate(group.offsets):
        block_view(buffer, plan, group, i, layout, b).copy_(kept_view(x, plan, offset))
    return buffer


def new_accumulators(q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(out, lse) float32 accumulators (float64 for float64 inputs): 0 and -inf."""
    acc = accumulator_dtype(q.dtype)
    out = torch.zeros(q.shape, dtype=acc, device=q.device)
    return out, torch.full(q.shape[:-1], float("-inf"), dtype=acc, device=q.device)


def branch_forward(q, k, v, plan: BranchPlan, kernel, causal: bool, scale: float, acc, first: bool) -> None:
    """Run one branch and merge it into acc = (out, lse); `first`: the accumulators are untouched."""
    acc_out, acc_lse = acc
    b = q.shape[0]
    for group in plan.groups:
        inputs = [gather(t, plan, group, kernel.layout) for t in (q, k, v)]
        out, lse = kernel.forward(*inputs, causal=causal, scale=scale)
        del inputs
        for i, offset in enumerate(group.offsets):
            dest_out, dest_lse = kept_view(acc_out, plan, offset), kept_view(acc_lse, plan, offset)
            src_out, src_lse = (
                block_view(out, plan, group, i, kernel.layout, b),
                block_view(lse, plan, group, i, "", b),
            )
            if first:  # a branch keeps each (head, position) once: nothing to merge with yet
                dest_out.copy_(src_out)
                dest_lse.copy_(src_lse)
            else:
                merge_(dest_out, dest_lse, src_out, src_lse)


def branch_backward(
    dout, q, k, v, out, lse, plan: BranchPlan, kernel, causal: bool, scale: float, grads
) -> None:
    """Add one branch's share of (dq, dk, dv) into the float32 `grads`, given the merged out and LSE."""
    b = q.shape[0]
    for group in plan.groups:
        tensors = [gather(t, plan, group, kernel.layout) for t in (dout, q, k, v, out)]
        lse_g = gather(lse, plan, group, kernel.layout)
        parts = kernel.backward(*tensors, lse_g, causal=causal, scale=scale)
        del tensors, lse_g
        for grad, part in zip(grads, parts):
            for i, offset in enumerate(group.offsets):
                kept_view(grad, plan, offset).add_(block_view(part, plan, group, i, kernel.layout, b))


class DilatedGather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, plans, kernel, causal, scale):
        acc = new_accumulators(q)
        for index, p in enumerate(plans):
            branch_forward(q, k, v, p, kernel, causal, scale, acc, first=index == 0)
        out, lse = acc[0].to(q.dtype), acc[1]
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.args = (plans, kernel, causal, scale)
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, dout, _dlse):
        q, k, v, out, lse = ctx.saved_tensors
        plans, kernel, causal, scale = ctx.args
        acc = accumulator_dtype(q.dtype)
        grads = tuple(torch.zeros(t.shape, dtype=acc, device=t.device) for t in (q, k, v))
        for p in plans:
            branch_backward(dout, q, k, v, out, lse, p, kernel, causal, scale, grads)
        return grads[0].to(q.dtype), grads[1].to(k.dtype), grads[2].to(v.dtype), None, None, None, None


def check_inputs(q, k, v) -> None:
    if q.dim() != 4 or q.shape != k.shape or q.shape != v.shape:
        raise ValueError(
            f"dilated attention takes q, k, v of one shape [batch, heads, seq, head_dim]; got "
            f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}"
        )


def gathered_attention(q, k, v, branches, *, causal: bool, backend=None, scale: float | None = None):
    """(out [b, H, N, d] in q.dtype, lse [b, H, N] float32) of dilated attention; differentiable in q, k, v."""
    check_inputs(q, k, v)
    kernel = kernels.get(backend, q.device)
    reason = kernel.unavailable(q.device, q.dtype, q.shape[-1])
    if reason:
        raise RuntimeError(f"backend {kernel.name}: {reason}")
    plans = plan(branches, q.shape[2], q.shape[1])
    scale = pattern.default_scale(q.shape[-1]) if scale is None else float(scale)
    return DilatedGather.apply(q, k, v, plans, kernel, causal, scale)
