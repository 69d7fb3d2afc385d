"""The ring engine: move every position's data past every rank, with gradients travelling along.

Topology (LoongTrain's double ring; a single ring is the case window == P): P ring positions in
sequence order, grouped into P/window windows of `window` consecutive positions. Position
p = o * window + i. At outer step t a rank holds the "outer" data of position ((o - t) mod n, i); an
inner ring inside the window passes it along, so at inner step u the rank computes with the data of
position ((o - t) mod n) * window + (i - u) mod window. Over all (t, u) that is every position once.

Overlap: the next inner block is in flight while the current one computes (double buffers); the
next outer block travels during the whole inner ring. Gradients for the travelling data (dK/dV in a
ring backward, dQ in the burst backward) ride with it: one extra inner hop brings an inner
accumulator back to the window's holder of the outer data, where it joins the gradient that arrived
from the previous window; after n outer hops it is home. All buffers are allocated once per call.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from attnbench.cp import comm
from attnbench.cp.local import accumulator_dtype

# step(source_position, data) -> [(rows, [grad parts...]), ...]: gradient contributions for the
# travelling data, `rows` a slice of its sequence dim (dim 2); [] when there are no gradients.
StepFn = Callable[[int, Sequence[torch.Tensor]], list]


@dataclass(frozen=True)
class RingTopology:
    ranks: tuple[int, ...]  # global ranks by ring position (position = sequence order of the shards)
    position: int
    window: int
    inner_group: object  # process group of my window (None when window == 1)
    outer_group: object  # process group across windows (None when there is one window)

    @property
    def size(self) -> int:
        return len(self.ranks)

    @property
    def windows(self) -> int:
        return self.size // self.window

    def source(self, t: int, u: int) -> int:
        o, i = divmod(self.position, self.window)
        return ((o - t) % self.windows) * self.window + (i - u) % self.window

    def _rank(self, o: int, i: int) -> int:
        return self.ranks[(o % self.windows) * self.window + i % self.window]

    def inner_exchange(self) -> comm.Exchange:
        o, i = divmod(self.position, self.window)
        return comm.Exchange(self.inner_group, self._rank(o, i + 1), self._rank(o, i - 1))

    def outer_exchange(self) -> comm.Exchange:
        o, i = divmod(self.position, self.window)
        return comm.Exchange(self.outer_group, self._rank(o + 1, i), self._rank(o - 1, i))


def make_topology(group, window: int | None = None) -> RingTopology:
    """Ring over `group` (None: default group), positions in group-rank order; window None = P."""
    ranks = comm.group_ranks(group)
    window = len(ranks) if window is None else window
    inner, outer, _, _ = comm.grid_groups(group, window)
    return RingTopology(tuple(ranks), comm.group_rank(group), window, inner, outer)


def _like(tensors, dtype=None):
    return [torch.empty_like(t, dtype=dtype) for t in tensors]


def _add(grads, contributions) -> None:
    for rows, parts in contributions:
        for g, part in zip(grads, parts):
            g[:, :, rows] += part


def circulate(
    topo: RingTopology,
    data: Sequence[torch.Tensor],
    step: StepFn,
    grad_like: Sequence[torch.Tensor] | None = None,
) -> list[torch.Tensor] | None:
    """Call `step` once for every position's `data`; return the summed gradients for my own data.

    `data` are this rank's tensors (contiguous, never written). Gradients accumulate in float32
    (float64 for float64) with the shapes of `grad_like`.
    """
    n, w = topo.windows, topo.window
    grads = grad_like is not None
    gdtype = accumulator_dtype(grad_like[0].dtype) if grads else None
    inner = topo.inner_exchange() if w > 1 else None
    outer = topo.outer_exchange() if n > 1 else None
    inner_data = [_like(data), _like(data)] if w > 1 else None
    outer_data = [_like(data), _like(data)] if n > 1 else None
    inner_grads = [_like(grad_like, gdtype), _like(grad_like, gdtype)] if grads and w > 1 else None
    outer_grads = [_like(grad_like, gdtype), _like(grad_like, gdtype)] if grads and n > 1 else None
    single_grad = _like(grad_like, gdtype) if grads and w == 1 else None

    def inner_ring(t: int, first: Sequence[torch.Tensor]):
        current, grad_pending, acc = first, None, None
        for u in range(w):
            pending = inner.start(current, inner_data[u % 2]) if u < w - 1 else None
            contributions = step(topo.source(t, u), current)
            if grads:
                if u == 0:
                    acc = inner_grads[0] if w > 1 else single_grad
                    for g in acc:
                        g.zero_()
                else:
                    grad_pending.wait()  # the previous rank's accumulator for `current`
                    acc = inner_grads[u % 2]
                _add(acc, contributions)
                if w > 1:
                    grad_pending = inner.start(acc, inner_grads[(u + 1) % 2], tag=comm.GRAD_TAG)
            if pending is not None:
                pending.wait()
                current = inner_data[u % 2]
        if grads and w > 1:
            grad_pending.wait()  # one more hop: the accumulator of `first` is back with its holder
            return inner_grads[w % 2]
        return acc

    held = list(data)
    outer_grad_pending = None
    home = None
    for t in range(n):
        pending = outer.start(held, outer_data[t % 2]) if t < n - 1 else None
        window_grad = inner_ring(t, held)
        if grads:
            if n == 1:
                home = window_grad
            else:
                if t == 0:
                    acc = outer_grads[0]
                    for g, part in zip(acc, window_grad):
                        g.copy_(part)
                else:
                    outer_grad_pending.wait()  # the previous windows' gradient for `held`
                    acc = outer_grads[t % 2]
                    for g, part in zip(acc, window_grad):
                        g += part
                outer_grad_pending = outer.start(acc, outer_grads[(t + 1) % 2], tag=comm.GRAD_TAG)
        if pending is not None:
            pending.wait()
            held = outer_data[t % 2]
    if grads and n > 1:
        outer_grad_pending.wait()
        home = outer_grads[n % 2]
    return home
