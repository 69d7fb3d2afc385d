"""Peaks that match a row's math, the peak at the clock it ran at, and over-peak rows flagged."""

from types import SimpleNamespace

import pytest

from attnbench.bench import flops
from attnbench.rows import Result, Workload

H100 = (132, (9, 0))


def test_hopper_peak_at_its_datasheet_clock_is_the_datasheet_peak():
    assert flops.peak_at_clock("bf16", *H100, 1830.0) == pytest.approx(989.4, abs=0.1)
    assert flops.peak_at_clock("fp8", *H100, 1830.0) == pytest.approx(2 * 989.4, abs=0.2)
    assert flops.peak_at_clock("tf32", *H100, 1830.0) == pytest.approx(989.4 / 2, abs=0.1)
    assert flops.peak_at_clock("fp32", *H100, 1980.0) == pytest.approx(66.9, abs=0.1)
    assert flops.peak_at_clock("bf16", 132, (12, 0), 1830.0) is None  # unknown architecture: no guess
    assert flops.peak_at_clock("bf16", *H100, None) is None


def test_fp32_rows_say_whether_they_ran_tf32():
    assert flops.row_math("float32", tf32=True) == "tf32"
    assert flops.row_math("float32", tf32=False) == "fp32"
    assert flops.row_math("bfloat16") == "bf16"
    assert flops.row_math("bfloat16", quantized=True) is None


def test_a_bf16_peak_is_never_the_denominator_of_an_fp32_row():
    assert flops.matching_peak(700.0, "bf16") == 700.0
    assert flops.matching_peak(700.0, "tf32") is None
    assert flops.matching_peak({"bf16": 700.0, "fp32": 50.0}, "fp32") == 50.0


def _row(dtype="bfloat16", ms=1.0, mhz=1500.0):
    w = Workload(1, 4096, 4096, 16, 16, 128, dtype, "full")  # 4 * 128 * 16 * 4096^2 = 137.4 GFLOP
    return Result("p", "f", "ok", w, ms_median=ms, sm_clock_mhz=mhz)


def test_score_gives_each_share_of_the_matching_peaks(monkeypatch):
    monkeypatch.setattr(flops, "_gpu_shape", lambda device: H100)
    row = _row(ms=0.25)  # 549.8 TFLOP/s
    flops.score(row, SimpleNamespace(), 700.0, 989.5, "cuda")
    assert row.status == "ok" and row.over_peak is None and row.math == "bf16"
    assert row.mfu == pytest.approx(549.8 / 700.0, rel=1e-3)
    assert row.mfu_datasheet == pytest.approx(549.8 / 989.5, rel=1e-3)
    assert row.mfu_at_clock == pytest.approx(549.8 / (132 * 4096 * 1.5e9 / 1e12), rel=1e-3)


def test_a_row_above_a_peak_is_an_error_naming_the_share_and_the_peak(monkeypatch):
    monkeypatch.setattr(flops, "_gpu_shape", lambda device: H100)
    row = _row(ms=0.18, mhz=1400.0)  # 763.5 TFLOP/s: under the datasheet, over measured and at-clock (757)
    flops.score(row, SimpleNamespace(), 680.0, 989.5, "cuda")
    assert row.status == "error" and row.reason == row.over_peak
    assert "112% of the measured bf16 matmul peak 680.0 TFLOP/s" in row.reason
    assert "101% of the bf16 peak at 1400.0 MHz" in row.reason and "datasheet" not in row.reason


def test_an_fp32_row_that_ran_tf32_is_judged_against_the_tf32_peak(monkeypatch):
    monkeypatch.setattr(flops, "_gpu_shape", lambda device: H100)
    row = _row("float32", ms=1.0)  # 137.4 TFLOP/s: 279 % of an ieee fp32 peak, fine for tf32
    flops.score(row, SimpleNamespace(tf32=True), {"tf32": 400.0, "fp32": 49.0}, 989.5, "cuda")
    assert row.math == "tf32" and row.status == "ok" and row.mfu == pytest.approx(137.4 / 400.0, rel=1e-3)
    assert row.mfu_datasheet == pytest.approx(137.4 / (989.5 / 2), rel=1e-3)
    ieee = _row("float32", ms=1.0)
    flops.score(ieee, SimpleNamespace(tf32=False), {"tf32": 400.0, "fp32": 49.0}, 989.5, "cuda")
    assert ieee.math == "fp32" and ieee.status == "error" and "280% of the measured fp32" in ieee.reason


def test_the_measured_peak_is_scaled_to_the_clock_the_row_ran_at(monkeypatch):
    """Seen on an H100: the GEMM peak (702.6 TFLOP/s) was measured at the power limit's clock, FA3 ran
    at 1965 MHz and 747.9 TFLOP/s: 106 % of the unscaled number, 80 % of it at FA3's clock."""
    monkeypatch.setattr(flops, "_gpu_shape", lambda device: H100)
    gemm = flops.MeasuredPeak(702.6, sm_clock_mhz=1455.0)
    row = _row(ms=137.4 / 747.9, mhz=1965.0)
    flops.score(row, SimpleNamespace(), gemm, 989.5, "cuda")
    assert row.status == "ok" and row.over_peak is None
    assert row.mfu == pytest.approx(747.9 / (702.6 * 1965.0 / 1455.0), rel=1e-3)
    assert row.extra["matmul_peak_measured"] == {"tflops": 702.6, "sm_clock_mhz": 1455.0}
    slow_clock = _row(ms=137.4 / 650.0, mhz=1300.0)  # the same GEMM efficiency at 1300 MHz is 627.8
    flops.score(slow_clock, SimpleNamespace(), gemm, 989.5, "cuda")
    assert slow_clock.status == "error" and "measured bf16 matmul peak" in slow_clock.reason


def test_a_measured_peak_without_a_clock_is_used_as_measured():
    assert flops.MeasuredPeak(700.0).at_clock(1900.0) == 700.0
    assert flops.MeasuredPeak(700.0, 1400.0).at_clock(None) == 700.0
    assert flops.MeasuredPeak(700.0, 1400.0).at_clock(2100.0) == pytest.approx(1050.0)


def test_a_peak_read_back_from_json_keeps_its_clock(monkeypatch):
    """The mask report's timed stages read the peak its checks stage measured from sweep.json, and CS336's
    cells read it from the gpu cell's profile.json: as a bare number it lost its clock, and FA3's full
    forward at 16k (688.7 TFLOP/s at 1620 MHz on an H200) came out at 101 % of a GEMM peak measured at
    the power limit's clock (684.1). Restored with its clock, the share is taken at the row's clock."""
    import json

    from attnbench.bench import profiles

    monkeypatch.setattr(flops, "_gpu_shape", lambda device: H100)
    gemm = flops.MeasuredPeak(684.1, sm_clock_mhz=1455.0)
    document = json.loads(json.dumps({"peak": gemm, "clock": flops.clock_of(gemm)}))
    assert flops.clock_of(document["peak"]) is None  # what JSON keeps: the number alone
    restored = flops.restore_peak(document["peak"], document["clock"])
    row = _row(ms=137.4 / 688.7, mhz=1620.0)
    flops.score(row, SimpleNamespace(), restored, 989.5, "cuda")
    assert row.status == "ok" and row.mfu == pytest.approx(688.7 / (684.1 * 1620.0 / 1455.0), rel=1e-3)
    bare = _row(ms=137.4 / 688.7, mhz=1620.0)
    flops.score(bare, SimpleNamespace(), document["peak"], 989.5, "cuda")
    assert bare.status == "error" and "101%" in bare.reason  # why the clock must travel with it
    assert flops.restore_peak(None, 1455.0) is None
    config = json.loads(json.dumps({"peak_tflops": {"bf16": gemm}, "peak_sm_clock_mhz": {"bf16": 1455.0}}))
    assert profiles.measured_peak(config, "bf16").at_clock(1620.0) == pytest.approx(684.1 * 1620.0 / 1455.0)
    assert profiles.measured_peak(config, "fp32") is None and profiles.measured_peak({}, "bf16") is None
