"""scripts/check_clock_paths.py, the first command of a GPU lease, runs end to end here on the CPU: every
timing path outside the sweep's rows runs once on tiny shapes and says why it has no clock."""

from __future__ import annotations

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "check_clock_paths.py"


def test_every_clock_path_runs_on_a_cpu(capsys):
    spec = importlib.util.spec_from_file_location("check_clock_paths", SCRIPT)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert script.main(["--device", "cpu"]) == 0
    said = capsys.readouterr().out
    for path in ("CS336 steps", "CS336 device kernels", "CS336 breakdown", "CS336 scan",
                 "Flux timing method events_idle", "dilated breakdown"):  # fmt: skip
        assert f"ok   {path}" in said
    assert "0 failure(s)" in said
