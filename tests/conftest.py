"""The `slow` marker: whole-notebook smoke runs and 4- and 8-rank gloo checks, minutes each on a
2-core machine. `make test` (pyproject's addopts: -m "not slow") leaves them out; `make test-all`
and CI (`.ci/run`) run everything. Kept here, by node id, so the test files stay as they are."""

from __future__ import annotations

import pytest

SLOW_FILES = (
    "tests/bench/test_flux_notebook.py",  # each runs its notebook's every cell (smoke profile)
    "tests/bench/test_masks_notebook.py",
    "tests/dilated/test_notebook.py",
    "tests/systems/test_cs336_notebook.py",
    "tests/cp/test_cp_world8.py",  # 8 gloo ranks
)
SLOW_IDS = (  # 4 gloo ranks
    ("tests/cp/test_cp_world.py", "[w4-"),
    ("tests/dilated/test_distributed.py", "[w4-"),
)


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: minutes on a 2-core CPU; `make test-all` and CI run them")


def pytest_collection_modifyitems(config, items):
    for item in items:
        path = item.nodeid.split("::", 1)[0]
        if path in SLOW_FILES or any(path == f and marker in item.nodeid for f, marker in SLOW_IDS):
            item.add_marker(pytest.mark.slow)
