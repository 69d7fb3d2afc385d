"""The repeatability script's pairing and spread, on made-up rows."""

import importlib.util
from pathlib import Path

import pytest

from attnbench.rows import Result, Workload

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "flux_repeatability.py"
spec = importlib.util.spec_from_file_location("flux_repeatability", SCRIPT)
repeatability = importlib.util.module_from_spec(spec)
spec.loader.exec_module(repeatability)


def _row(provider, ms, status="ok", seq=4224, temperature=None):
    return Result(
        provider, "f", status, Workload(1, seq, seq, 24, 24, 128), ms_median=ms, temperature_c=temperature
    )


def test_spread_pairs_rows_ok_in_both_runs():
    first = [_row("a", 1.0), _row("b", 2.0), _row("c", 3.0, status="error"), _row("d", 1.0)]
    second = [_row("a", 1.1), _row("b", 2.0), _row("c", 3.0), _row("d", 1.0, status="oom")]
    pairs = repeatability.pair_spreads(first, second)
    assert [p["provider"] for p in pairs] == ["a", "b"]  # c failed in run 1, d in run 2
    assert pairs[0]["spread"] == pytest.approx(0.1 / 1.05) and pairs[1]["spread"] == 0.0
    stats = repeatability.summary(pairs)
    assert stats["rows"] == 2 and stats["median_spread"] == pytest.approx(0.05 / 1.05)
    assert stats["p95_spread"] == pytest.approx(0.95 * 0.1 / 1.05)
    assert repeatability.summary([])["median_spread"] is None


def test_pairs_keep_both_runs_temperature():
    pairs = repeatability.pair_spreads([_row("a", 1.0, temperature=53.0)], [_row("a", 1.1, temperature=68.0)])
    assert (pairs[0]["temperature_c_a"], pairs[0]["temperature_c_b"]) == (53.0, 68.0)
