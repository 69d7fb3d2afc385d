"""Run one gloo process group on 127.0.0.1 and collect every rank's records (parent side).

One spawn per world size runs many cases (torch import costs seconds per rank on a small machine);
the workers write their records as JSON and the tests assert on them. A group that does not finish
within `timeout_s` is killed (each child by its own handle) and reported as a deadlock.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import socket
import tempfile
import time
from pathlib import Path

import cp_worker
import pytest

# Wall-clock limits for one spawned group (every rank must finish by then or the group is killed).
GROUP_TIMEOUT_S = {2: 150, 4: 240, 8: 420}
# What each world size's one spawned group runs (every test module asks for the same tuple, so the
# group is spawned once per session).
WORLD_SUITES = {2: ("correctness", "errors", "bench", "sweep"), 4: ("correctness", "errors")}
_GROUPS: dict = {}


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_group(world: int, suites: list[str], timeout_s: float) -> dict:
    """Spawn `world` ranks running `suites`; returns {"records": [[...] per rank], "seconds": wall}."""
    ctx = mp.get_context("spawn")
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="cp_test_") as tmp:
        port = free_port()
        procs = [
            ctx.Process(target=cp_worker.main, args=(rank, world, port, suites, tmp), daemon=True)
            for rank in range(world)
        ]
        try:
            for p in procs:
                p.start()
            deadline = start + timeout_s
            for p in procs:
                p.join(max(deadline - time.monotonic(), 0.1))
            stuck = [rank for rank, p in enumerate(procs) if p.is_alive()]
        finally:  # also when pytest-timeout interrupts us: never leave ranks behind
            for p in procs:
                if p.is_alive():
                    p.kill()
                    p.join(5)
        if stuck:
            raise AssertionError(
                f"world {world}: ranks {stuck} still running after {timeout_s:.0f}s "
                f"(deadlock or far too slow)"
            )
        bad = {rank: p.exitcode for rank, p in enumerate(procs) if p.exitcode != 0}
        records = []
        for rank in range(world):
            path = Path(tmp) / f"rank{rank}.json"
            records.append(json.loads(path.read_text()) if path.exists() else [])
        if bad:
            crashes = [r for recs in records for r in recs if r.get("kind") == "crash"]
            raise AssertionError(f"world {world}: ranks exited with {bad}; crashes: {crashes[:3]}")
    return {"records": records, "seconds": time.monotonic() - start}


def by_case(group_result: dict, case_id: str) -> list[list[dict]]:
    """Records of one case, one list per rank."""
    return [[r for r in recs if r.get("case") == case_id] for recs in group_result["records"]]


def spawned(world: int, suites: tuple[str, ...]) -> dict:
    """Run the group once per session and share its records between the tests that read them."""
    key = (world, suites)
    if key not in _GROUPS:
        try:
            _GROUPS[key] = run_group(world, list(suites), GROUP_TIMEOUT_S[world])
        except AssertionError as exc:
            _GROUPS[key] = exc
    if isinstance(_GROUPS[key], AssertionError):
        pytest.fail(str(_GROUPS[key]))
    return _GROUPS[key]
