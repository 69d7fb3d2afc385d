"""Dilated attention with the sequence split over ranks (LongNet section 3.1), exact and differentiable.

Layout: P ranks, rank p holds positions [p*n, (p+1)*n) of q, k, v (n = N/P; contiguous shards).

- A branch with w <= n (n a multiple of w) has every segment inside one shard: it runs locally with
  the gather path (gathered.py), no communication.
- A branch with w > n (w a multiple of n) has each segment spread over s = w/n consecutive ranks. Each
  rank sends only the keys and values its heads keep (per head offset o: positions o, o + r, ... of the
  segment that fall in its shard), padded to ceil(n/r) slots per head, in one all-gather inside the
  segment's group of s ranks; every rank rebuilds the segment's sparsified K/V (for offset o the
  L_o = ceil((w - o)/r) kept keys, in order) and runs its own kept queries against them. Its queries
  are rows [a, a + c) of the sparsified segment (a = kept positions before its shard), so causal
  attention is a full block over keys [0, a) and a causal square over keys [a, a + c), merged by LSE.
  Backward: the same blocks through the kernel's backward with the merged out and LSE; dK/dV of the
  segment's kept keys go back to their owners by one reduce-scatter (float32) in the same group.
  What travels per spanning branch and rank: about 2 * heads * (n / r) * head_dim values each way.
- All branches merge into one float32 accumulator per rank (LSE merge), exactly as on one device.

Every rank runs the same branches in the same order, so collectives always match.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist

from attnbench.cp import comm
from attnbench.cp.local import accumulator_dtype
from attnbench.cp.merge import merge_
from attnbench.dilated import gathered, kernels, pattern


def _kept_before(x: int, offset: int, r: int) -> int:
    """Kept positions (offset, offset + r, ...) of a segment that lie before segment-relative index x."""
    return max(0, -(-(x - offset) // r))


@dataclass(frozen=True)
class Geometry:
    """Where one offset's kept positions of a spanning segment lie, for one rank."""

    length: int  # L: kept positions in the whole segment
    start: int  # a: this rank's first kept position, as a row of the sparsified segment
    count: int  # c: kept positions in this rank's shard
    first: int  # local index of this rank's first kept position (meaningful when count > 0)
    counts: tuple[int, ...]  # c of every rank of the segment group, in group order
    starts: tuple[int, ...]  # a of every rank of the segment group


def geometry(branch: pattern.Branch, offset: int, shard: int, position: int, span: int) -> Geometry:
    r = branch.r
    starts = tuple(_kept_before(j * shard, offset, r) for j in range(span))
    ends = tuple(_kept_before((j + 1) * shard, offset, r) for j in range(span))
    counts = tuple(e - s for s, e in zip(starts, ends))
    a = starts[position]
    return Geometry(
        branch.kept(offset), a, counts[position], offset + a * r - position * shard, counts, starts
    )


@dataclass(frozen=True)
class SpanPlan:
    """A branch whose segments span `span` ranks: offsets grouped by identical geometry."""

    branch: pattern.Branch
    span: int
    slots: int  # per head and rank in the exchange: ceil(shard / r)
    offsets: tuple[int, ...]
    geometries: tuple[Geometry, ...]  # per offset
    groups: tuple[tuple[int, ...], ...]  # indices into offsets; one kernel batch each
    heads: int

    def head_slices(self, group: tuple[int, ...]) -> list[slice]:
        slices, start = [], 0
        for i in group:
            n = len(range(self.offsets[i], self.heads, self.branch.r))
            slices.append(slice(start, start + n))
            start += n
        return slices


def span_plan(branch: pattern.Branch, shard: int, position: int, heads: int) -> SpanPlan:
    span = branch.w // shard
    offsets = tuple(o for o in range(min(branch.r, heads)) if branch.kept(o))
    geos = tuple(geometry(branch, o, shard, position, span) for o in offsets)
    by_key: dict[tuple, list[int]] = {}
    for i, g in enumerate(geos):
        by_key.setdefault((g.length, g.start, g.count), []).append(i)
    groups = tuple(tuple(v) for v in by_key.values())
    return SpanPlan(branch, span, -(-shard // branch.r), offsets, geos, groups, heads)


def _native(x: torch.Tensor, layout: str) -> torch.Tensor:
    return x if layout == "bhsd" else x.transpose(1, 2).contiguous()


def _canonical(x: torch.Tensor, layout: str) -> torch.Tensor:
    return x if layout == "bhsd" else x.transpose(1, 2)


def _my_rows(x, sp: SpanPlan, group, slices):
    """This rank's kept rows of the group's offsets: [b, heads_g, c, ...] (x: [b, H, n, ...])."""
    c = sp.geometries[group[0]].count
    out = torch.empty((x.shape[0], slices[-1].stop, c, *x.shape[3:]), dtype=x.dtype, device=x.device)
    for i, hs in zip(group, slices):
        o, g = sp.offsets[i], sp.geometries[i]
        out[:, hs] = x[:, o :: sp.branch.r, g.first :: sp.branch.r][:, :, :c]
    return out


def _blocks(g: Geometry, causal: bool) -> list[tuple[slice, bool]]:
    """(key rows of the sparsified segment, causal) for this rank's queries."""
    if not causal:
        return [(slice(0, g.length), False)]
    blocks = [(slice(0, g.start), False)] if g.start else []
    return blocks + [(slice(g.start, g.start + g.count), True)]


class SpanBranch:
    """Forward and backward of one spanning branch on this rank."""

    def __init__(self, sp: SpanPlan, group, kernel, causal: bool, scale: float):
        self.sp, self.group, self.kernel, self.causal, self.scale = sp, group, kernel, causal, scale

    def exchange(self, k, v) -> torch.Tensor:
        """All-gather of the kept K/V: [span, 2, b, H, slots, d]."""
        sp, r = self.sp, self.sp.branch.r
        send = torch.zeros((2, k.shape[0], k.shape[1], sp.slots, k.shape[-1]), dtype=k.dtype, device=k.device)
        for o, g in zip(sp.offsets, sp.geometries):
            if g.count:
                send[0, :, o::r, : g.count] = k[:, o::r, g.first :: r]
                send[1, :, o::r, : g.count] = v[:, o::r, g.first :: r]
        return comm.all_gather_stacked(send, self.group)

    def segment_kv(self, received, group, slices) -> torch.Tensor:
        """The sparsified segment's K/V for a group: [2, b, heads_g, L, d]."""
        sp, r = self.sp, self.sp.branch.r
        g0 = sp.geometries[group[0]]
        b, d = received.shape[2], received.shape[-1]
        kv = torch.empty((2, b, slices[-1].stop, g0.length, d), dtype=received.dtype, device=received.device)
        for i, hs in zip(group, slices):
            o, g = sp.offsets[i], sp.geometries[i]
            for j, (a, c) in enumerate(zip(g.starts, g.counts)):
                kv[:, :, hs, a : a + c] = received[j, :, :, o::r, :c]
        return kv

    def forward(self, q, k, v, acc) -> list[torch.Tensor]:
        sp, layout = self.sp, self.kernel.layout
        received = self.exchange(k, v)
        saved = []
        for group in sp.groups:
            slices = sp.head_slices(group)
            kv = self.segment_kv(received, group, slices)
            saved.append(kv)
            g = sp.geometries[group[0]]
            if not g.count:
                continue
            q_rows = _native(_my_rows(q, sp, group, slices), layout)
            for keys, causal in _blocks(g, self.causal):
                k_b, v_b = (_native(t[:, :, keys].contiguous(), layout) for t in kv)
                out, lse = self.kernel.forward(q_rows, k_b, v_b, causal=causal, scale=self.scale)
                out = _canonical(out, layout)
                for i, hs in zip(group, slices):
                    o, gi = sp.offsets[i], sp.geometries[i]
                    dest = (t[:, o :: sp.branch.r, gi.first :: sp.branch.r][:, :, : gi.count] for t in acc)
                    merge_(*dest, out[:, hs], lse[:, hs])
        return saved

    def backward(self, dout, q, out, lse, saved, grads) -> None:
        sp, layout, r = self.sp, self.kernel.layout, self.sp.branch.r
        b, heads, _, d = q.shape
        acc = accumulator_dtype(q.dtype)
        returned = torch.zeros((sp.span, 2, b, heads, sp.slots, d), dtype=acc, device=q.device)
        for group, kv in zip(sp.groups, saved):
            g = sp.geometries[group[0]]
            if not g.count:
                continue
            slices = sp.head_slices(group)
            rows = [_my_rows(t, sp, group, slices) for t in (dout, q, out, lse)]
            do_n, q_n, out_n = (_native(t, layout) for t in rows[:3])
            dq = torch.zeros(rows[1].shape, dtype=acc, device=q.device)
            dkv = torch.zeros(kv.shape, dtype=acc, device=q.device)
            for keys, causal in _blocks(g, self.causal):
                k_b, v_b = (_native(t[:, :, keys].contiguous(), layout) for t in kv)
                parts = self.kernel.backward(
                    do_n, q_n, k_b, v_b, out_n, rows[3], causal=causal, scale=self.scale
                )
                dq += _canonical(parts[0], layout)
                dkv[0][:, :, keys] += _canonical(parts[1], layout)
                dkv[1][:, :, keys] += _canonical(parts[2], layout)
            for i, hs in zip(group, slices):
                o, gi = sp.offsets[i], sp.geometries[i]
                grads[0][:, o::r, gi.first :: r][:, :, : gi.count] += dq[:, hs]
                for j, (a, c) in enumerate(zip(gi.starts, gi.counts)):
                    returned[j, :, :, o::r, :c] = dkv[:, :, hs, a : a + c]
        mine = comm.reduce_scatter_stacked(returned, self.group)  # [2, b, H, slots, d]
        for o, g in zip(sp.offsets, sp.geometries):
            if g.count:
                grads[1][:, o::r, g.first :: r] += mine[0, :, o::r, : g.count]
                grads[2][:, o::r, g.first :: r] += mine[1, :, o::r, : g.count]


class DistributedDilated(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, local_plans, spans, kernel, causal, scale):
        acc = gathered.new_accumulators(q)
        saved = []
        touched = False
        for p in local_plans:
            gathered.branch_forward(q, k, v, p, kernel, causal, scale, acc, first=not touched)
            touched = True
        for branch in spans:
            saved.append(branch.forward(q, k, v, acc))
        out, lse = acc[0].to(q.dtype), acc[1]
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.args = (local_plans, spans, kernel, causal, scale, saved)
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, dout, _dlse):
        q, k, v, out, lse = ctx.saved_tensors
        local_plans, spans, kernel, causal, scale, saved = ctx.args
        acc = accumulator_dtype(q.dtype)
        grads = tuple(torch.zeros(t.shape, dtype=acc, device=t.device) for t in (q, k, v))
        for p in local_plans:
            gathered.branch_backward(dout, q, k, v, out, lse, p, kernel, causal, scale, grads)
        for branch, kept in zip(spans, saved):
            branch.backward(dout, q, out, lse, kept, grads)
        return (grads[0].to(q.dtype), grads[1].to(k.dtype), grads[2].to(v.dtype)) + (None,) * 5


def split(branches, seq_local: int, world: int) -> tuple[list[pattern.Branch], list[pattern.Branch]]:
    """(local branches, spanning branches) for shards of seq_local tokens; errors name the branch."""
    branches = pattern.branches_from(branches)
    pattern.check(branches, seq_local * world)
    local, spanning = [], []
    for i, b in enumerate(branches):
        if b.w <= seq_local:
            if seq_local % b.w:
                raise ValueError(
                    f"branch {i} (w={b.w}, r={b.r}): segment length does not divide the {seq_local} tokens per rank"
                )
            local.append(b)
        else:
            if b.w % seq_local:
                raise ValueError(
                    f"branch {i} (w={b.w}, r={b.r}): a segment spanning ranks must be a multiple of the "
                    f"{seq_local} tokens per rank"
                )
            spanning.append(b)
    return local, spanning


def _check_same_shape(q, group) -> None:
    """Every rank must hold a shard of the same shape (else collectives would mismatch)."""
    shape = torch.tensor(list(q.shape), dtype=torch.float64, device=comm.comm_device(group))
    low, high = shape.clone(), shape.clone()
    dist.all_reduce(low, op=dist.ReduceOp.MIN, group=group)
    dist.all_reduce(high, op=dist.ReduceOp.MAX, group=group)
    if not torch.equal(low, high):
        raise ValueError(f"ranks hold shards of different shapes (min {low.tolist()}, max {high.tolist()})")


def distributed_attention(q, k, v, branches, *, causal: bool, group=None, backend=None, scale=None,
                          check_ranks: bool = True):  # fmt: skip
    """(out, lse) of this rank's shard [b, H, N/P, d] (contiguous layout); differentiable in q, k, v."""
    gathered.check_inputs(q, k, v)
    world, rank = comm.group_size(group), comm.group_rank(group)
    if check_ranks:
        _check_same_shape(q, group)
    kernel = kernels.get(backend, q.device)
    reason = kernel.unavailable(q.device, q.dtype, q.shape[-1])
    if reason:
        raise RuntimeError(f"backend {kernel.name}: {reason}")
    shard, heads = q.shape[2], q.shape[1]
    local, spanning = split(branches, shard, world)
    scale = pattern.default_scale(q.shape[-1]) if scale is None else float(scale)
    local_plans = gathered.plan(local, shard, heads) if local else ()
    spans = []
    for b in spanning:
        span = b.w // shard
        row_group = comm.grid_groups(group, span)[0] if span < world else group
        sp = span_plan(b, shard, rank % span, heads)
        spans.append(SpanBranch(sp, row_group, kernel, causal, scale))
    return DistributedDilated.apply(q, k, v, local_plans, spans, kernel, causal, scale)
