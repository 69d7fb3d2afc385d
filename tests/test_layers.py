"""The layering of src/attnbench, as import-linter contracts in pyproject.toml ([tool.importlinter]):
the engine alone, algorithms free of report code, measuring code free of presenting code, each study
alone, no cycles. This test runs them, so CI enforces the layers."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_import_contracts_are_kept():
    lint = Path(sys.executable).with_name("lint-imports")
    done = subprocess.run([str(lint), "--config", str(ROOT / "pyproject.toml"), "--no-cache"], check=False, cwd=ROOT,
                          capture_output=True, text=True, timeout=240)  # fmt: skip
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert re.search(r"Contracts: [1-9]\d* kept, 0 broken", done.stdout), done.stdout[-2000:]
