"""Spawn one gloo group on 127.0.0.1 running dilated_worker on every rank; collect the records.

One group per world size (shared by the tests that read it). A group that does not finish within its
timeout is killed (each child by its own handle) and reported as a deadlock.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import socket
import tempfile
import time
from pathlib import Path

import dilated_worker
import pytest

GROUP_TIMEOUT_S = {2: 240, 4: 300}
_GROUPS: dict = {}


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_group(world: int, timeout_s: float) -> list[list[dict]]:
    ctx = mp.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="dilated_test_") as tmp:
        port = free_port()
        procs = [
            ctx.Process(target=dilated_worker.main, args=(r, world, port, tmp), daemon=True)
            for r in range(world)
        ]
        deadline = time.monotonic() + timeout_s
        try:
            for p in procs:
                p.start()
            for p in procs:
                p.join(max(deadline - time.monotonic(), 0.1))
            stuck = [r for r, p in enumerate(procs) if p.is_alive()]
        finally:  # never leave ranks behind, also when pytest-timeout interrupts
            for p in procs:
                if p.is_alive():
                    p.kill()
                    p.join(5)
        if stuck:
            raise AssertionError(f"world {world}: ranks {stuck} still running after {timeout_s}s (deadlock?)")
        records = []
        for rank in range(world):
            path = Path(tmp) / f"rank{rank}.json"
            records.append(json.loads(path.read_text()) if path.exists() else [])
        crashes = [r for recs in records for r in recs if r.get("kind") == "crash"]
        bad = {r: p.exitcode for r, p in enumerate(procs) if p.exitcode != 0}
        if bad or crashes:
            raise AssertionError(f"world {world}: exit codes {bad}; crashes: {crashes[:2]}")
    return records


def spawned(world: int) -> list[list[dict]]:
    if world not in _GROUPS:
        try:
            _GROUPS[world] = run_group(world, GROUP_TIMEOUT_S[world])
        except AssertionError as exc:
            _GROUPS[world] = exc
    if isinstance(_GROUPS[world], AssertionError):
        pytest.fail(str(_GROUPS[world]))
    return _GROUPS[world]


def records_of(world: int, case: str) -> list[dict]:
    """The record of `case` from every rank (one per rank)."""
    found = [[r for r in recs if r.get("case") == case] for recs in spawned(world)]
    assert all(len(f) == 1 for f in found), f"world {world}: case {case} missing on some rank: {found}"
    return [f[0] for f in found]
