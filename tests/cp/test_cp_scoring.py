"""The peak rule on context-parallel rows (a share of a peak above 100 % is a measurement error, never a
result): scoring per GPU when measured, and the report's tables on rows measured before that; the
baselines' correctness column; the overlap rows' clock fields."""

import pandas as pd
import pytest
import torch

from attnbench.bench.flops import attention_flops
from attnbench.report.cp_tables import bench_table, markdown, overlap_table, published_table
from attnbench.rows import OverlapRow, Result, Workload
from attnbench.studies.context_parallel.scoring import score_row

GIB = 2**30
CPU = torch.device("cpu")


def cp_row(strategy, seq, tflops, status="ok", reason="", over=None, world=2):
    return Result(
        provider=strategy if strategy.startswith("single_gpu_") else f"cp_{strategy}",
        family="cp",
        status=status,
        reason=reason,
        pass_="fwd_bwd",
        workload=Workload(1, seq, seq, 40, 40, 128, "bfloat16", "causal"),
        tflops=tflops,
        ms_median=100.0,
        over_peak=over,
        peak_mem_bytes=10 * GIB,
        extra={"world_size": world, "seq_per_gpu": seq // world},
    )


def test_a_cp_row_is_scored_per_gpu_and_above_a_peak_it_is_an_error():
    w = Workload(1, 64, 64, 4, 4, 16, "bfloat16", "causal")
    per_gpu = attention_flops(w, "fwd_bwd") / 4 / 1e-3 / 1e12  # 4 GPUs, 1 ms
    row = score_row(
        Result("cp_zigzag", "cp", "ok", w, "fwd_bwd", ms_median=1.0), CPU, world=4, peak_tflops=1.0
    )
    assert row.tflops == pytest.approx(per_gpu) and row.math == "bf16"
    assert row.mfu == pytest.approx(per_gpu) and row.status == "ok" and row.over_peak is None
    low = per_gpu / 2  # a peak half of what the row claims per GPU
    over = score_row(
        Result("cp_zigzag", "cp", "ok", w, "fwd_bwd", ms_median=1.0), CPU, world=4, peak_tflops=low
    )
    assert over.status == "error" and over.reason == over.over_peak and "200%" in over.reason


def test_published_table_never_shows_ours_above_the_datasheet_peak():
    rows = [
        cp_row("zigzag", 262144, 1000.0),  # measured before rows were scored: 101 % of 989 TFLOP/s
        cp_row("usp", 262144, 1200.0, status="error", reason="above peak, a measurement error: x", over="x"),
        cp_row("burst", 262144, 500.0),
    ]
    table = published_table(rows, our_peak_tflops=989.0, world=2).set_index(["our strategy", "seq_len"])
    zig, usp, burst = (table.loc[(s, 262144)] for s in ("zigzag", "usp", "burst"))
    assert pd.isna(zig["our TFLOP/s/GPU"]) and pd.isna(zig["our % peak"])
    assert zig["our status"].startswith(
        "error: above peak, a measurement error: 1000.0 TFLOP/s per GPU is 101%"
    )
    assert pd.isna(usp["our TFLOP/s/GPU"]) and usp["our status"] == "error: x"
    assert burst["our TFLOP/s/GPU"] == 500.0 and burst["our % peak"] == pytest.approx(500 / 989)


def test_bench_table_shows_no_tflops_above_a_peak_and_a_baselines_own_check():
    checked = cp_row("single_gpu_cudnn", 131072, 600.0, world=1)
    checked.extra["checked_by"] = {"scope": "same heads, checked at 262144 tokens", "ok": True}
    old = cp_row("single_gpu_cudnn", 65536, 560.0, world=1)
    old.extra["checked_by"] = {
        "by": None,
        "scope": "baseline (not a strategy)",
    }  # before baselines were checked
    wrong = cp_row("single_gpu_flash_attn3", 65536, 700.0, world=1)
    wrong.extra.update(kernel="flash_attn3", checked_by={"ok": False, "reason": "max |error| beyond: dq"})
    over = cp_row("zigzag", 131072, 700.0)
    over.mfu_datasheet = 1.05  # an older row's share above 100 %: the rule applied when it is read
    rows = [checked, old, wrong, over, cp_row("ulysses", 262144, 480.0)]
    checks = [{"strategy": s, "mask": "causal", "status": "ok"} for s in ("zigzag", "ulysses")]
    table = bench_table(rows, checks)
    assert list(table.correctness[:3]) == [
        "ok",
        "not checked: a baseline measured before baselines were checked",
        "incorrect: max |error| beyond: dq",
    ]
    # a strategy row of older code, without its check and without the correctness results: said as such,
    # never as a baseline
    mixed = bench_table([checked, cp_row("ring", 131072, 500.0)])
    assert list(mixed.correctness) == [
        "ok", "not checked: measured before rows carried their check (see the correctness table)"]  # fmt: skip
    zig, uly = table.iloc[3], table.iloc[4]
    assert zig.status == "error" and "105%" in zig.reason
    assert pd.isna(zig.tflops_per_gpu) and pd.isna(zig.vs_single_gpu)
    assert uly.tflops_per_gpu == 480.0 and uly.vs_single_gpu == pytest.approx(480 / 600)
    # each row's clock beside its share: a share above 100 % may be a reference timed at a lower clock
    clocked = cp_row("ulysses", 262144, 480.0)
    clocked.sm_clock_mhz = 1590.0
    assert bench_table([checked, clocked]).iloc[1].sm_clock_mhz == 1590.0
    assert "| 1590 |" in markdown(bench_table([checked, clocked]))


def test_overlap_rows_keep_their_clock_and_older_rows_still_read():
    old = {"strategy": "ring", "seq_len": 128, "mask": "causal", "pass": "fwd_bwd", "world_size": 2,
           "heads": 4, "head_dim": 16, "dtype": "float32", "rank": 0, "status": "ok", "reason": "", "total_ms": 2.0}  # fmt: skip
    assert OverlapRow.from_dict(old).to_dict() == old  # measured before the protocol: unchanged
    new = {**old, "warmup_s": 1.2, "sm_clock_mhz": 1755.0, "power_w": 690.0, "clock_source": "nvml"}
    row = OverlapRow.from_dict(new)
    assert (row.warmup_s, row.sm_clock_mhz, row.clock_source) == (1.2, 1755.0, "nvml")
    table = overlap_table([new, {**old, "rank": 1}])
    assert table.sm_clock_mhz[0] == 1755.0 and pd.isna(table.sm_clock_mhz[1])
