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


def test_summaries_of_k_runs_compare_the_first_half_with_the_second():
    # a row that flips between a fast and a slow state from run to run: one run against another spreads
    # 10 %; the fastest of two runs against the fastest of the next two repeats exactly
    runs = [[_row("fa3", ms)] for ms in (1.0, 1.1, 1.1, 1.0)]
    assert repeatability.pair_spreads(runs[0], runs[1])[0]["spread"] == pytest.approx(0.1 / 1.05)
    halves = repeatability.summaries_of_halves(runs)
    assert halves["fastest_of_2"]["max_spread"] == 0.0
    assert halves["mean_of_2"]["max_spread"] == 0.0  # 1.05 and 1.05
    assert [r.ms_median for r in repeatability.summarised(runs[:3], "mean")] == [pytest.approx(3.2 / 3)]
    assert runs[0][0].ms_median == 1.0  # the runs' own rows are left as they were


def test_summaries_keep_only_rows_ok_in_every_run():
    runs = [[_row("a", 1.0), _row("b", 2.0)], [_row("a", 1.0), _row("b", 2.0, status="oom")]]
    assert [r.provider for r in repeatability.summarised(runs, "fastest")] == ["a"]


def test_an_odd_run_count_is_refused_naming_it(capsys):
    with pytest.raises(SystemExit):
        repeatability.main(["--runs", "3", "--smoke"])
    assert "--runs 3: give 2, or an even count of at least 4" in capsys.readouterr().err


def test_require_all_refuses_before_timing_naming_what_cannot_run(capsys, monkeypatch, tmp_path):
    """On the GPU machine a provider whose wheel was carried but not installed would silently be missing
    from every pair; --require-all stops before any timing and says which and why."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # the refusal comes before any CUDA call
    out = tmp_path / "r.json"
    code = repeatability.main(["--providers", "flash_attn3", "sdpa_math", "--require-all", "--out", str(out)])
    said = capsys.readouterr().out
    assert code == 2 and not out.exists()
    assert "unavailable: flash_attn3: not installed" in said
    # a family name selects its every variant: flash_attn3, _compiled, _fp8 (and sdpa_math)
    assert "--require-all: 3 of 4 providers cannot run here; nothing timed" in said
