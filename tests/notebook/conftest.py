"""Fixtures of the engine tests (helpers live in engine_helpers.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from engine_helpers import Project


@pytest.fixture
def project(tmp_path: Path, capsys) -> Project:
    """An empty project folder (notebooks/ inside) whose runs use --env python and label `t`."""
    return Project(tmp_path, capsys)
