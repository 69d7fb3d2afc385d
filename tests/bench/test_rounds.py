"""Rounds: the grid measured K times, each row its fastest ok round, a failure in any round kept."""

import pytest

from attnbench.bench import rounds, sweep
from attnbench.bench.providers.sdpa import SdpaProvider
from attnbench.rows import Result, Workload
from attnbench.studies.flux_attention.measure import lengths_part

FAST = {"min_reps": 2, "min_time_ms": 0.0, "warmup_reps": 0}

W = Workload(1, 4096, 4096, 24, 24, 128, "bfloat16", "full")


def _row(provider, ms, status="ok", pass_="fwd"):
    return Result(provider, "f", status, W, pass_=pass_, ms_median=ms)


def test_each_row_is_its_fastest_ok_round_with_every_round_kept():
    """FA3's forward on an H200: 0.291 ms at 1965 MHz in one run, 0.332 ms power-limited in the next."""
    first = [_row("flash_attn3", 0.332), _row("sdpa_cudnn", 0.354)]
    second = [_row("flash_attn3", 0.291), _row("sdpa_cudnn", 0.366)]
    kept = rounds.fastest_of_rounds([first, second])
    assert [r.provider for r in kept] == ["flash_attn3", "sdpa_cudnn"]
    fa3, cudnn = kept
    assert fa3.ms_median == 0.291 and fa3 is second[0] and cudnn is first[1]
    assert fa3.extra["rounds"] == 2 and fa3.extra["round_ms"] == [0.332, 0.291]
    assert fa3.extra["round_spread"] == pytest.approx((0.332 - 0.291) / 0.291)


def test_a_failure_in_any_round_is_the_row_and_no_ok_round_keeps_the_first():
    wrong_once = [_row("k", 1.0), _row("k", 0.9, status="incorrect")]
    kept = rounds.fastest_of_rounds([[wrong_once[0]], [wrong_once[1]]])
    assert kept[0].status == "incorrect" and kept[0].extra["round_ms"] == [1.0, None]
    assert "round_spread" not in kept[0].extra  # one ok round: no spread to state
    skipped = rounds.fastest_of_rounds([[_row("k", None, "skipped")], [_row("k", None, "oom")]])
    assert skipped[0].status == "skipped"
    ok_then_oom = rounds.fastest_of_rounds([[_row("k", 2.0)], [_row("k", None, "oom")]])
    assert ok_then_oom[0].status == "ok" and ok_then_oom[0].ms_median == 2.0


def test_rounds_must_hold_the_same_grid():
    with pytest.raises(ValueError, match=r"flex / .* / fwd is missing from round\(s\) \[2\] of 2"):
        rounds.fastest_of_rounds([[_row("flex", 1.0)], [_row("sdpa_flash", 1.0)]])
    with pytest.raises(ValueError, match="at least one round"):
        rounds.fastest_of_rounds([])
    assert rounds.fastest_of_rounds([[_row("a", 1.0)]])[0].extra == {}  # one round: rows as measured


def test_run_sweep_passes_over_the_grid_rounds_times():
    seen, printed = [], []
    w = [Workload(1, 24, 24, 4, 2, 16, dtype="float32")]
    math = SdpaProvider("sdpa_math_kv_repeated", "MATH", repeat_kv=True)
    rows = sweep.run_sweep([math], w, ("fwd", "fwd_bwd"), device="cpu", env_id="t", progress=seen.append,
                           timing_options=FAST, rounds=2)  # fmt: skip
    assert len(rows) == 2 and len(seen) == 4  # every round's rows are shown as they are measured
    assert all(r.status == "ok" and len(r.extra["round_ms"]) == 2 for r in rows)
    assert all(r.ms_median == min(r.extra["round_ms"]) for r in rows)
    with pytest.raises(ValueError, match="rounds=0"):
        sweep.run_sweep([math], w, ("fwd",), device="cpu", progress=printed.append, rounds=0)


def test_lengths_part_splits_consecutive_and_even():
    lengths = [4224, 4352, 4416, 4480, 4544, 4608]
    assert lengths_part(lengths, (1, 2)) == [4224, 4352, 4416]
    assert lengths_part(lengths, (2, 2)) == [4480, 4544, 4608]
    assert lengths_part(lengths[:5], (1, 2)) + lengths_part(lengths[:5], (2, 2)) == lengths[:5]
    assert lengths_part(lengths, None) == lengths
    with pytest.raises(ValueError, match="part 3 of 2"):
        lengths_part(lengths, (3, 2))
