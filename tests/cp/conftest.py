"""Markers and shared spawned groups for the context-parallel tests (tests/cp)."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # cp_worker / cp_harness, also for spawned ranks

from cp_harness import run_group  # noqa: E402

# Wall-clock limits for one spawned group (every rank must finish by then or the group is killed).
GROUP_TIMEOUT_S = {2: 150, 4: 240, 8: 420}


def pytest_configure(config):
    config.addinivalue_line("markers", "cp8: context-parallel tests at 8 gloo ranks (issue 5, CPU part)")


_GROUPS: dict = {}


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
