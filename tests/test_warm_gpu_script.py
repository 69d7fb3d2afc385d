"""scripts/warm_gpu.py refuses what it cannot do with a message that names the value, on a CPU."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "warm_gpu.py"


def _script():
    spec = importlib.util.spec_from_file_location("warm_gpu", SCRIPT)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script


def test_a_cpu_device_is_refused_by_name(capsys):
    assert _script().main(["--device", "cpu", "--seconds", "1"]) == 2
    assert "--device cpu: no CUDA GPU here" in capsys.readouterr().err


@pytest.mark.parametrize("seconds", ["0", "-5", "nan", "inf"])
def test_seconds_must_be_positive_and_finite(capsys, seconds):
    with pytest.raises(SystemExit) as stop:
        _script().main(["--seconds", seconds])
    assert stop.value.code == 2
    assert (
        f"--seconds {float(seconds):g}: give a positive, finite number of seconds" in capsys.readouterr().err
    )
