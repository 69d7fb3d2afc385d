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
