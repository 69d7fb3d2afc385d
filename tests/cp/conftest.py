"""The cp8 marker; tests/cp on sys.path (cp_worker must be importable by the spawned ranks)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # cp_worker / cp_harness, also for spawned ranks


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "cp8: context-parallel tests at 8 gloo ranks (the CPU part of the 8-GPU strategies)"
    )
