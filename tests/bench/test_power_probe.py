"""The power-state probe's plumbing on the CPU: every round times each provider on the same, fresh and
reseeded inputs, and the file it writes holds one row per timing."""

import importlib.util
import json
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "probe_power_states.py"
spec = importlib.util.spec_from_file_location("probe_power_states", SCRIPT)
probe = importlib.util.module_from_spec(spec)
spec.loader.exec_module(probe)


def test_smoke_probe_writes_a_row_per_round_input_and_provider(tmp_path):
    out = tmp_path / "probe.json"
    assert probe.main(["--smoke", "--rounds", "2", "--out", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [(r["round"], r["inputs"]) for r in rows] == [
        (0, "same"),
        (0, "fresh"),
        (0, "reseeded"),
        (1, "same"),
        (1, "fresh"),
        (1, "reseeded"),
    ]
    assert all(r["provider"] == "sdpa_math" and r["ms"] > 0 for r in rows)
    assert all(r["energy_mj_per_call"] is None for r in rows)  # no power reading on a CPU: no energy


def test_a_provider_that_cannot_run_is_reported_with_its_reason(tmp_path):
    out = tmp_path / "probe.json"
    assert (
        probe.main(["--smoke", "--rounds", "1", "--providers", "sdpa_math", "flash_attn3", "--out", str(out)])
        == 0
    )
    found = json.loads(out.read_text())
    assert {r["provider"] for r in found["rows"]} == {"sdpa_math"}
    assert found["unavailable"]["flash_attn3"]  # its reason, never silently dropped


def test_each_row_names_the_seed_of_its_inputs(tmp_path):
    out = tmp_path / "probe.json"
    assert probe.main(["--smoke", "--rounds", "2", "--out", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    # `same` times the inputs timed last, as they are: round 1's are round 0's reseeded ones
    assert [(r["round"], r["inputs"], r["seed"]) for r in rows] == [
        (0, "same", 0), (0, "fresh", 0), (0, "reseeded", 1), (1, "same", 1), (1, "fresh", 0), (1, "reseeded", 2)
    ]  # fmt: skip


def test_a_failed_timing_is_a_row_with_its_error_and_the_probe_goes_on(tmp_path, monkeypatch):
    from attnbench.bench import timing

    real, calls = timing.measure, []

    def flaky(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("CUDA out of memory (simulated)")
        return real(*args, **kwargs)

    monkeypatch.setattr(timing, "measure", flaky)
    out = tmp_path / "probe.json"
    assert probe.main(["--smoke", "--rounds", "1", "--out", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert len(rows) == 3 and rows[1]["error"] == "RuntimeError: CUDA out of memory (simulated)"
    assert rows[0]["ms"] > 0 and rows[2]["ms"] > 0


def test_zero_rounds_is_refused_naming_the_value(capsys):
    import pytest

    with pytest.raises(SystemExit):
        probe.main(["--smoke", "--rounds", "0"])
    assert "--rounds 0: at least 1 round is needed" in capsys.readouterr().err
