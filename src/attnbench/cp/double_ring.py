"""Double ring attention (LoongTrain): an inner ring inside windows of `window` consecutive ranks
(one node under torchrun) and an outer ring across windows; the next outer K/V block travels during
the whole inner ring. Zigzag layout over all P ranks, so causal work stays balanced."""

from __future__ import annotations

import os

from attnbench.cp import comm
from attnbench.cp.ring import kv_ring_attention


def window_for(world: int) -> int:
    """GPUs per node (LOCAL_WORLD_SIZE, set by torchrun) when it divides the world, else the world: the
    inner ring then stays on NVLink and only the outer ring crosses nodes."""
    local = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    return local if 0 < local <= world and world % local == 0 else world


def default_window(group) -> int:
    return window_for(comm.group_size(group))


def defaults(world: int, heads: int, given: dict) -> dict:
    """The options this strategy fills in when the caller leaves them out (the registry collects this)."""
    return {"window": window_for(world)} if given.get("window") is None else {}


def windowed_ring_attention(q, k, v, *, strategy: str, window: int | None = None, group=None, **common):
    """The zigzag ring over an inner window (double ring, burst): window divides P; default: GPUs per
    node. `common`: the other keywords of cp.attention, and burst's backward."""
    window = default_window(group) if window is None else int(window)
    return kv_ring_attention(
        q, k, v, strategy=strategy, layout="zigzag", window=window, group=group, **common
    )


def double_ring_attention(q, k, v, **options):
    """Double ring attention. options: cp.attention's keywords and window (inner ring size)."""
    return windowed_ring_attention(q, k, v, strategy="double_ring", **options)
