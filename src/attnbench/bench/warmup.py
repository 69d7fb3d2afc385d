"""Bring every rank's GPU to its working clock before the first timed row of a sweep.

An idle H200 sits at ~345 MHz and needs a few hundred ms of load to reach its ~1980 MHz boost
clock. Without a warm-up the first row of the first 2x H200 run (single-GPU cuDNN, causal forward,
64k tokens) measured 281 TFLOP/s while its forward+backward row right after measured 563: the first
row was timed partly at idle clocks. `warm_up` keeps every rank busy with matrix multiplications for
`seconds`, then reads the SM clock while more work is still queued (the clock under load), so the
record says whether the GPUs were at speed when timing began.
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist

from attnbench.bench.distributed import control_device
from attnbench.bench.matmul_load import matmul_operands, run_matmuls, synchronize

QUEUED_WHILE_READING_S = 0.3  # work left in the queue while nvidia-smi reads the clock under load


def _clocks() -> dict | None:
    """This node's clocks (nvidia-smi), read by local rank 0 only (one process per node)."""
    if int(os.environ.get("LOCAL_RANK", "0")) != 0:
        return None
    from attnbench.bench.env import clock_snapshot

    return clock_snapshot()


def warm_up(seconds: float = 1.0, *, group=None) -> dict:
    """Run matmuls on every rank for `seconds` (wall clock), then agree (all ranks return together).

    Returns, the same on every rank: seconds and matmul TFLOP/s per rank, and the SM clocks of every
    node before the warm-up and under load at its end (`clock_snapshot` dicts, by node).
    """
    device = control_device(group)
    before = _clocks()
    a, b, out, flops = matmul_operands(device)
    count, elapsed = run_matmuls(a, b, out, seconds, device)
    achieved = flops * count / elapsed / 1e12
    if device.type == "cuda":  # keep the GPU busy while nvidia-smi samples it
        for _ in range(max(1, int(QUEUED_WHILE_READING_S * achieved * 1e12 / flops))):
            torch.mm(a, b, out=out)
    after = _clocks()
    synchronize(device)
    mine = {
        "rank": dist.get_rank(),
        "seconds": round(elapsed, 3),
        "matmuls": count,
        "matmul_tflops": round(achieved, 1),
        "before": before,
        "after": after,
    }
    everyone: list = [None] * dist.get_world_size(group)
    dist.all_gather_object(everyone, mine, group=group)
    nodes = [r for r in everyone if r["before"] is not None]
    return {
        "seconds": seconds,
        "device": device.type,
        "ranks": [{k: r[k] for k in ("rank", "seconds", "matmuls", "matmul_tflops")} for r in everyone],
        "clocks_before": [r["before"] for r in nodes],
        "clocks_after_under_load": [r["after"] for r in nodes],
        "report": report_line(nodes),
    }


def report_line(nodes: list[dict]) -> str:
    """'SM clock before warm-up 345 MHz, under load 1980 MHz (max 1980)' over every GPU seen."""

    def values(snapshots, key):
        return [v for s in snapshots if s and s.get(key) for v in s[key] if v is not None]

    before = values([n["before"] for n in nodes], "sm_mhz")
    after = values([n["after"] for n in nodes], "sm_mhz")
    peak = values([n["before"] for n in nodes], "max_sm_mhz")
    if not after:
        reasons = {(n["after"] or {}).get("reason") for n in nodes} - {None}
        return f"SM clock not read ({'; '.join(sorted(reasons)) or 'no nvidia-smi'})"
    span = lambda xs: f"{min(xs):.0f}" if min(xs) == max(xs) else f"{min(xs):.0f}-{max(xs):.0f}"
    return (
        f"SM clock before warm-up {span(before) if before else '?'} MHz, under load at its end "
        f"{span(after)} MHz (max {span(peak) if peak else '?'} MHz)"
    )
