"""USP (unified sequence parallel, 2-D): Ulysses inside groups of `ulysses_degree` consecutive ranks,
zigzag ring across the `ring_degree` groups. Layout (layout.py "usp"): the sequence is cut into
2*ring_degree zigzag chunks; ring index i (= rank // ulysses_degree) owns chunks i and
2*ring_degree-1-i, split contiguously over the Ulysses group. After the all-to-all each rank holds
heads/ulysses_degree heads of its ring index's zigzag segment and runs the zigzag ring on it."""

from __future__ import annotations

import os

from attnbench.cp import comm
from attnbench.cp.blocks import zigzag_plan
from attnbench.cp.circulate import make_topology
from attnbench.cp.function import LocalCore, prepare, run_core
from attnbench.cp.ring import RingCore
from attnbench.cp.ulysses import UlyssesCore, heads_requirement


def default_degrees(world: int, heads: int) -> tuple[int, int]:
    """Largest Ulysses degree that divides the world, the heads and the GPUs per node."""
    local = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    best = 1
    for d in range(1, world + 1):
        if world % d == 0 and heads % d == 0 and d <= local:
            best = d
    return best, world // best


def defaults(world: int, heads: int, given: dict) -> dict:
    """Both degrees (default_degrees) when the caller gives neither; one given, the other follows it at
    run time (usp_attention), so nothing is filled in then."""
    if given.get("ulysses_degree") is None and given.get("ring_degree") is None:
        ulysses_degree, ring_degree = default_degrees(world, heads)
        return {"ulysses_degree": ulysses_degree, "ring_degree": ring_degree}
    return {}


def usp_requirements(ulysses_degree: int, ring_degree: int):
    def check(shape, world):
        unmet = []
        if ulysses_degree < 1 or ring_degree < 1 or ulysses_degree * ring_degree != world:
            unmet.append(
                f"ulysses_degree={ulysses_degree} x ring_degree={ring_degree} must equal the "
                f"world size {world}"
            )
            return unmet
        unmet += heads_requirement(shape[1], ulysses_degree, "ulysses_degree")
        if ring_degree > 1 and (ulysses_degree * shape[2]) % 2:
            unmet.append(
                f"the zigzag ring needs ulysses_degree*seq_local even (total divisible by "
                f"2*world={2 * world}), got seq_local={shape[2]}"
            )
        return unmet

    return check


def usp_attention(
    q, k, v, *, group=None, ulysses_degree: int | None = None, ring_degree: int | None = None, **common
):
    """USP attention. Degrees default to default_degrees(); give one and the other follows.
    `common`: causal, kernel, scale, check_ranks, as cp.attention passes them."""
    world = comm.group_size(group)
    if ulysses_degree is None and ring_degree is None:
        ulysses_degree, ring_degree = default_degrees(world, q.shape[1])
    elif ulysses_degree is None:
        ulysses_degree = world // ring_degree if ring_degree and world % ring_degree == 0 else 0
    elif ring_degree is None:
        ring_degree = world // ulysses_degree if ulysses_degree and world % ulysses_degree == 0 else 0
    ulysses_degree, ring_degree = int(ulysses_degree), int(ring_degree)
    call = prepare(
        "usp",
        q,
        k,
        v,
        group=group,
        options={"ulysses_degree": ulysses_degree, "ring_degree": ring_degree},
        requirements=usp_requirements(ulysses_degree, ring_degree),
        **common,
    )
    ulysses_group, ring_group, _, _ = comm.grid_groups(group, ulysses_degree)
    if ring_degree > 1:
        plan = zigzag_plan(call.causal, ulysses_degree * q.shape[2])
        inner = RingCore(make_topology(ring_group), plan, call.kernel, call.scale)
    else:
        inner = LocalCore(call.kernel, call.causal, call.scale)
    core = UlyssesCore(ulysses_group, inner) if ulysses_degree > 1 else inner
    return run_core(core, q, k, v)
