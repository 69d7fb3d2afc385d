"""Communication helpers: P2P ring exchange, all-to-all (heads <-> sequence), all-gather /
reduce-scatter along the sequence, 2-D process groups, and a rehearsal mode.

Rehearsal (`with rehearsal():`) replaces every transfer by a local copy into the same preallocated
buffers. A strategy then allocates exactly what it would in a real run, without talking to any other
rank, so the benchmark can find out-of-memory on every rank *before* a real run could leave peers
waiting in a collective (bench.py).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

import torch
import torch.distributed as dist

_REHEARSAL = False
GRAD_TAG = 100  # gloo matches P2P messages by tag: data and gradients travel on distinct tags


@contextlib.contextmanager
def rehearsal():
    global _REHEARSAL
    previous, _REHEARSAL = _REHEARSAL, True
    try:
        yield
    finally:
        _REHEARSAL = previous


def in_rehearsal() -> bool:
    return _REHEARSAL


def group_ranks(group) -> list[int]:
    """Global ranks of `group` (None: the default group), in group-rank order."""
    return dist.get_process_group_ranks(group if group is not None else dist.group.WORLD)


def group_size(group) -> int:
    return dist.get_world_size(group)


def group_rank(group) -> int:
    return dist.get_rank(group)


def comm_device(group) -> torch.device:
    """Where small control tensors must live for this group's backend."""
    if dist.get_backend(group) == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


class _Pending:
    def __init__(self, works):
        self.works = works

    def wait(self) -> None:
        for work in self.works:
            work.wait()
        self.works = []


class Exchange:
    """Send to one peer and receive from another, all tensors in one batch_isend_irecv.

    The caller owns the buffers: `start(send, recv)` returns a handle; after `wait()` the received
    tensors are valid and the sent ones may be overwritten. With NCCL the transfer runs on NCCL's
    stream, overlapping whatever the caller computes before waiting.
    """

    def __init__(self, group, send_to: int, recv_from: int):
        self.group, self.send_to, self.recv_from = group, send_to, recv_from

    def start(self, send: Sequence[torch.Tensor], recv: Sequence[torch.Tensor], tag: int = 0) -> _Pending:
        if _REHEARSAL:
            for s, r in zip(send, recv):
                r.copy_(s)
            return _Pending([])
        ops = [dist.P2POp(dist.isend, t, self.send_to, self.group, tag=tag + j) for j, t in enumerate(send)]
        ops += [
            dist.P2POp(dist.irecv, t, self.recv_from, self.group, tag=tag + j) for j, t in enumerate(recv)
        ]
        return _Pending(dist.batch_isend_irecv(ops))


# -------------------------------------------------------------------------------------------------
# all-to-all between the sequence and head dimensions (Ulysses)


def _all_to_all(send: torch.Tensor, group) -> torch.Tensor:
    recv = torch.empty_like(send)
    if _REHEARSAL:
        recv.copy_(send)
    else:
        dist.all_to_all_single(recv, send, group=group)
    return recv


def _as4d(t: torch.Tensor) -> torch.Tensor:
    return t if t.dim() == 4 else t.unsqueeze(-1)


def seq_to_heads(tensors: Sequence[torch.Tensor], group) -> list[torch.Tensor]:
    """[B, H, S_loc, D] sharded by sequence -> [B, H/P, P*S_loc, D] sharded by heads (one all-to-all).

    3-D tensors ([B, H, S_loc], e.g. an LSE) are accepted too. All tensors must share a shape.
    """
    p = group_size(group)
    b, h, s, d = _as4d(tensors[0]).shape
    send = torch.empty((p, len(tensors), b, h // p, s, d), dtype=tensors[0].dtype, device=tensors[0].device)
    for j, t in enumerate(tensors):  # send[i] goes to rank i: head group i of my sequence chunk
        send[:, j].copy_(_as4d(t).reshape(b, p, h // p, s, d).transpose(0, 1))
    recv = _all_to_all(send, group)  # recv[i]: sequence chunk i of my head group
    return [
        recv[:, j]
        .permute(1, 2, 0, 3, 4)
        .reshape(b, h // p, p * s, d)
        .reshape((b, h // p, p * s, d) if t.dim() == 4 else (b, h // p, p * s))
        for j, t in enumerate(tensors)
    ]


def heads_to_seq(tensors: Sequence[torch.Tensor], group) -> list[torch.Tensor]:
    """Inverse of seq_to_heads: [B, H/P, P*S_loc, D] -> [B, H, S_loc, D]."""
    p = group_size(group)
    b, h, s_all, d = _as4d(tensors[0]).shape
    s = s_all // p
    send = torch.empty((p, len(tensors), b, h, s, d), dtype=tensors[0].dtype, device=tensors[0].device)
    for j, t in enumerate(tensors):  # send[i] goes to rank i: its sequence chunk of my head group
        send[:, j].copy_(_as4d(t).reshape(b, h, p, s, d).permute(2, 0, 1, 3, 4))
    recv = _all_to_all(send, group)  # recv[i]: head group i of my sequence chunk
    return [
        recv[:, j]
        .transpose(0, 1)
        .reshape(b, p * h, s, d)
        .reshape((b, p * h, s, d) if t.dim() == 4 else (b, p * h, s))
        for j, t in enumerate(tensors)
    ]


# -------------------------------------------------------------------------------------------------
# all-gather / reduce-scatter of whole shards (all-gather K/V baseline)


def all_gather_stacked(x: torch.Tensor, group) -> torch.Tensor:
    """[...] per rank -> [P, ...] in group-rank order."""
    p = group_size(group)
    x = x.contiguous()
    flat = x.reshape(-1)
    out = torch.empty((p * flat.numel(),), dtype=x.dtype, device=x.device)  # gloo wants a dim-0 concat
    if _REHEARSAL:
        out.view(p, -1).copy_(flat.unsqueeze(0).expand(p, -1))
    else:
        dist.all_gather_into_tensor(out, flat, group=group)
    return out.view(p, *x.shape)


def reduce_scatter_stacked(x: torch.Tensor, group) -> torch.Tensor:
    """[P, ...] per rank -> [...]: the sum over ranks of slice [my group rank]."""
    x = x.contiguous()
    out = torch.empty(x.shape[1:], dtype=x.dtype, device=x.device)
    if _REHEARSAL:
        out.copy_(x[group_rank(group)])
    else:
        dist.reduce_scatter_tensor(out.view(-1), x.view(-1), group=group)
    return out


# -------------------------------------------------------------------------------------------------
# 2-D process groups

_SUBGROUPS: dict[tuple[int, ...], object] = {}


def _subgroup(members: tuple[int, ...], parent) -> object:
    """The process group of `members` (None for a single rank); created once, then cached."""
    if len(members) == 1:
        return None
    if list(members) == group_ranks(parent):
        return parent
    if members not in _SUBGROUPS:
        # Only the members take part (use_local_synchronization), so the parent may itself be a
        # subgroup of a larger job (CP x DP): replicas build their own grids independently.
        _SUBGROUPS[members] = dist.new_group(list(members), use_local_synchronization=True)
    return _SUBGROUPS[members]


def grid_groups(parent, inner: int) -> tuple[object, object, list[int], list[int]]:
    """Split `parent` (P ranks) into a grid of P/inner rows of `inner` consecutive group ranks.

    Returns (row_group, column_group, row_ranks, column_ranks) for this rank: rows are the inner
    groups (consecutive ranks: one node under torchrun's rank order), columns the strided ones; a
    single-rank group is None. Every rank creates its row group, then its column group, so all
    members of a group create it at the same point (what use_local_synchronization needs).
    """
    ranks = group_ranks(parent)
    p = len(ranks)
    if inner < 1 or p % inner:
        raise ValueError(f"inner size {inner} does not divide the group size {p}")
    position = ranks.index(dist.get_rank())
    row_start = position - position % inner
    my_row = tuple(ranks[row_start : row_start + inner])
    my_col = tuple(ranks[position % inner :: inner])
    return _subgroup(my_row, parent), _subgroup(my_col, parent), list(my_row), list(my_col)
