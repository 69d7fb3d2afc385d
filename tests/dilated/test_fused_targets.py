"""The fused dilated kernel's targets on the report: met, missed by how much and why, or not judged."""

from __future__ import annotations

from attnbench.report import dilated as report
from attnbench.rows import Result, Workload

M, TWO_M = 1 << 20, 2 << 20


def _row(provider, n, pass_="fwd", ms=10.0, tflops=100.0, status="ok", ok=None, timer="cuda_event", **kw):
    work = Workload(1, n, n, 8, 8, 64, "bfloat16", "causal")
    return Result(provider, "dilated", status, work, pass_, ms_median=ms if status == "ok" else None,
                  tflops=tflops, timer=timer, ok=ok, **kw)  # fmt: skip


CHECKS = [
    _row("dilated_fused", 32768, "fwd_bwd", ok=True),
    _row("dilated_gather_fa3", 32768, "fwd_bwd", ok=True),
]
BREAKDOWN = [
    {"backend": "fa3", "seq_len": M, "pass": "fwd", "status": "ok", "kernels_ms": 36.2, "total_ms": 101.8}
]


def test_a_missed_speed_up_says_by_how_much_and_what_the_breakdown_shows():
    rows = [_row("dilated_fused", M, ms=59.6, tflops=323.3), _row("dilated_gather_fa3", M, ms=101.8, tflops=189.4),
            _row("dilated_gather_cudnn", M, ms=105.7, tflops=182.5),
            _row("dilated_fused", TWO_M, "fwd_bwd", ms=509.7, peak_mem_bytes=int(104.4 * 2**30))]  # fmt: skip
    speed, reach = report.fused_targets(rows, CHECKS, BREAKDOWN)
    assert speed["met"] is False and round(speed["value"], 2) == 1.71  # against the faster gather (fa3)
    assert "dilated_gather_fa3 189.4" in speed["detail"] and "the goal needs 50.9 ms" in speed["detail"]
    assert "correctness: ok (1 checks at 32,768 tokens)" in speed["detail"]
    assert (
        "own attention kernels take 36.2 ms of its 101.8" in speed["detail"]
        and "61% of fa3" in speed["detail"]
    )
    assert reach["met"] is True and reach["detail"] == "509.7 ms, peak 104.4 GiB"
    document = report.targets_document([speed, reach])
    assert [t["verdict"] for t in document["targets"]] == ["missed", "met"]
    assert report.target_lines([reach])[0] == f"met: {reach['target']}: 509.7 ms, peak 104.4 GiB"


def test_met_only_when_fast_enough_and_correct():
    rows = [_row("dilated_fused", M, ms=40.0, tflops=400.0), _row("dilated_gather_fa3", M, tflops=190.0)]
    assert report.fused_targets(rows, CHECKS, [])[0]["met"] is True
    wrong = [_row("dilated_fused", 32768, "fwd_bwd", status="ok", ok=False)]
    speed = report.fused_targets(rows, wrong, [])[0]
    assert speed["met"] is False and "correctness: incorrect (1 checks at 32,768 tokens)" in speed["detail"]
    unchecked = [_row("dilated_fused", 32768, "fwd_bwd", status="ok", ok=None)]  # ran, never compared
    speed = report.fused_targets(rows, unchecked, [])[0]
    assert speed["met"] is None and "correctness: not checked (1 checks" in speed["detail"]
    speed = report.fused_targets(rows, [], [])[0]  # fast enough, but no correctness run: not checked
    assert speed["met"] is None and speed["detail"].endswith("; correctness: not checked")


def test_nothing_is_judged_on_a_cpu_run_or_without_both_sides():
    cpu = [_row("dilated_fused", 512, timer="perf_counter")]
    assert [t["met"] for t in report.fused_targets(cpu, CHECKS, [])] == [None, None]
    no_tflops = [_row("dilated_fused", M, tflops=None), _row("dilated_gather_fa3", M)]
    assert "no TFLOP/s" in report.fused_targets(no_tflops, CHECKS, [])[0]["detail"]
    only_fused = [_row("dilated_fused", M)]
    speed, reach = report.fused_targets(only_fused, CHECKS, [])
    assert speed["met"] is None and "no gather row" in speed["detail"]
    assert reach["met"] is None and reach["detail"] == "no row"
    oom = [_row("dilated_fused", TWO_M, "fwd_bwd", status="oom", reason="out of memory")]
    assert report.fused_targets(oom, CHECKS, [])[1] == {
        "target": f"fused forward + backward measured at {TWO_M:,} tokens", "value": None,
        "goal": float(TWO_M), "met": False, "detail": "oom: out of memory"}  # fmt: skip
