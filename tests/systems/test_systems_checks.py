"""The CS336 report's measurement standard on CPU: scan rows are checked against the fp32 reference (or
say why not), MFU is against the matmul peak at the steps' clock and never shown above 100 %, and the
device-kernel listing and the profiler breakdown record the SM clock they ran at (a fake clock source
stands in for the GPU's)."""

from __future__ import annotations

import itertools

import pytest
import torch

import attnbench.kernels.flash_attention2  # noqa: F401 - first: without a GPU, Triton must start in interpreter mode
from attnbench.bench import clock_windows, timing
from attnbench.bench.clocks import ClockReading
from attnbench.report import systems as tables
from attnbench.report import systems_kernels as kernel_tables
from attnbench.rows import ScanRow, StepRow
from attnbench.studies.cs336_systems import attention_scan, breakdown, kernels, profiles, steps

CPU = torch.device("cpu")


class FakeSource:
    """A GPU clock source that always reads 1755 MHz (bench.clocks.ClockSampler polls it)."""

    name = "test source"

    def read(self):
        return ClockReading(sm_mhz=1755.0, power_w=600.0, temperature_c=60.0)


# --- the attention scan's check ------------------------------------------------------------------------


def _scan(fn=None, variant="eager"):
    return attention_scan.scan_one(16, 32, batch=2, iterations=2, device=CPU, variant=variant, fn=fn)


def test_scan_rows_are_checked_against_the_fp32_reference():
    row = _scan()
    assert row["status"] == "ok" and row["ok"] is True and row["rel_l2"] < 1e-6 and row["check_reason"] == ""
    assert row["check_worst"] in ("out", "dq", "dk", "dv")
    assert ScanRow.from_dict(row).to_dict()["ok"] is True  # the row type keeps the check
    compiled = _scan(attention_scan.compiled_attention("aot_eager"), "compiled")
    assert compiled["status"] == "ok" and compiled["ok"] is True
    table = tables.scan_table([row], [compiled]).iloc[0]
    assert table["eager check"].startswith("ok (") and table["compiled check"].startswith("ok (")
    clocked = {**row, "forward_ms": {**row["forward_ms"], "sm_clock_mhz": 1755.0}}
    clocked["backward_ms"] = {**row["backward_ms"], "sm_clock_mhz": 1740.0}
    assert tables.scan_table([clocked], [compiled]).iloc[0]["eager fwd / bwd MHz"] == "1755 / 1740"
    assert table["eager fwd / bwd MHz"] == ""  # a CPU row has no clock: nothing, not "None"


def test_a_wrong_result_is_an_incorrect_row_and_the_table_shows_no_time():
    def wrong(q, k, v):  # a 1 % scale error: well outside fp32's tolerance
        return attention_scan._noncausal_eager(q, k, v) * 1.01

    row = _scan(wrong, "compiled")
    assert row["status"] == "incorrect" and row["ok"] is False
    assert row["reason"].startswith("check: out: rel_l2 0.01 > 0.002")
    table = tables.scan_table([_scan()], [row]).iloc[0]
    assert table["compiled fwd ms"] == "incorrect" and table["compiled check"].startswith(
        "incorrect (1.0e-02 out"
    )
    assert any("incorrect" in line for line in tables.scan_failures([row]))


def test_a_check_that_cannot_run_says_why_and_keeps_the_row(monkeypatch):
    def no_room(*_):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 8.00 GiB")

    monkeypatch.setattr(attention_scan, "check", no_room)
    row = _scan()
    assert row["status"] == "ok" and row.get("ok") is None
    assert row["check_reason"].startswith("not checked: the check ran out of memory (CUDA out of memory")
    assert tables.scan_check(row) == row["check_reason"]
    oom = {"status": "oom", "check_reason": "not checked: the row stopped in backward"}
    assert tables.scan_check(oom) == "not checked (oom)"
    assert tables.scan_check({"status": "ok"}).startswith("not checked (measured before")  # older rows


# --- MFU: the peak at the steps' clock, never above 100 % -------------------------------------------------


def _step_row(steps_mhz, peak_mhz, peak_tflops=600.0):
    """Steps of 10 ms at 6e12 FLOPs: 600 TFLOP/s achieved."""
    return {"size": "small", "context": 128, "batch": 4, "precision": "bf16", "attention": "eager",
            "params": 10**8, "status": "ok", "reason": "", "flops": {"train": 6e12}, "peak_tflops": peak_tflops,
            "peak_sm_clock_mhz": peak_mhz, "sm_clock_mhz": [steps_mhz] * 4,
            "times_ms": {"forward": [2.5] * 4, "backward": [5.0] * 4, "optimizer": [2.5] * 4},
            "peak_mem_bytes": {"forward": 2**30, "backward": 2**30, "optimizer": 2**30}}  # fmt: skip


def test_mfu_is_against_the_matmul_peak_scaled_to_the_steps_clock():
    # a GEMM at its power limit (1500 MHz) made 720 TFLOP/s; steps at 1250 MHz: the peak there is 600
    entry = tables.step_table([_step_row(1250.0, 1500.0, 720.0)], "bf16", warmup=2, measured=2).iloc[0]
    assert entry[tables.MFU_AT_STEPS_CLOCK] == "100.0%" and entry["SM clock MHz"] == "1250"
    assert tables.MFU_AT_PEAKS_CLOCK not in entry  # the column names the peak it used
    unscaled = tables.step_table([_step_row(None, None, 720.0)], "bf16", warmup=2, measured=2).iloc[0]
    assert unscaled[tables.MFU_AT_PEAKS_CLOCK] == "83.3%"  # no clock: the peak as measured
    model = {f"model_{k}": v for k, v in vars(steps.ModelSize(64, 128, 2, 4)).items()}
    row = StepRow.from_dict({**_step_row(1250.0, 1500.0), **model})
    assert row.to_dict()["peak_sm_clock_mhz"] == 1500.0  # the row type keeps the peak's clock
    kept = {}
    steps._keep_peak(kept, {"peak_tflops": {"bf16": 686.2}, "peak_sm_clock_mhz": {"bf16": 1485.0}}, "bf16")
    assert kept == {"peak_tflops": 686.2, "peak_sm_clock_mhz": 1485.0}


@pytest.mark.parametrize(
    ("steps_mhz", "peak_mhz", "peak"),
    [(None, None, 500.0), (1250.0, 1500.0, 600.0)],  # 600 at 1500 MHz is 500 at the steps' 1250 MHz
)
def test_a_share_above_100_percent_is_a_measurement_error_not_a_result(steps_mhz, peak_mhz, peak):
    entry = tables.step_table([_step_row(steps_mhz, peak_mhz, peak)], "bf16", warmup=2, measured=2).iloc[0]
    column = tables.MFU_AT_STEPS_CLOCK if steps_mhz else tables.MFU_AT_PEAKS_CLOCK
    assert entry[column] == "ERROR: above 100% (measurement error)"  # 120 % is never shown as a share
    assert entry["status"] == "error" and "a measurement error: 600.0 TFLOP/s is 120% of" in entry["reason"]


# --- the device-kernel listing and the breakdown record their clock -------------------------------------


def test_the_device_kernel_listing_warms_up_and_records_the_clock_of_the_profiled_calls():
    ticks = itertools.count()
    calls = []

    def fn():
        calls.append(1)
        return torch.ones(64, 64) @ torch.ones(64, 64)

    backend = timing.CpuBackend(fn, clock=lambda: next(ticks) * 0.025)  # 50 ms a call on a fake clock
    listing = kernels.profile_kernels(
        fn, CPU, backend, FakeSource(), calls=3, warmup_min_s=timing.WARMUP_MIN_S
    )
    assert listing["warmup_s"] >= timing.WARMUP_MIN_S and listing["warmup_settled"] is True
    assert len(calls) == listing["warmup_calls"] + 3 and listing["warmup_calls"] >= 10
    assert listing["sm_clock_mhz"] == 1755.0 and listing["clock_source"] == "test source"
    assert listing["clock_samples"] >= 1 and any("mm" in k["kernel"] for k in listing["kernels"])
    assert kernels.device_kernels(fn, "cpu") == {
        "kernels": [], "calls": 0, "reason": "no CUDA device: no device kernels to list"}  # fmt: skip


def test_the_gap_lines_state_the_clock_each_listing_ran_at():
    def entry(kernels, mhz):
        return {"kernels": kernels, "calls": 3, "warmup_s": 1.21, "warmup_settled": True, "sm_clock_mhz": mhz}

    ours = entry([{"kernel": "flash_fwd_kernel", "us_per_call": 2000.0, "launches_per_call": 1.0}], 1755.0)
    fa3 = entry(
        [{"kernel": "flash::FlashAttnFwdSm90", "us_per_call": 1000.0, "launches_per_call": 1.0}], 1830.0
    )
    lines = kernel_tables.gap_lines({"ours": ours, "flash_attn3": fa3})
    assert lines[1] == "forward kernels: ours 2.000 ms, FA3 1.000 ms (2.00x), 100% of the gap"
    assert lines[-1] == ("SM clock while profiled: ours 1755 MHz after a 1.2 s warm-up; "
                         "FA3 1830 MHz after a 1.2 s warm-up")  # fmt: skip
    cpu = {"ours": {"kernels": [], "calls": 0, "reason": "no CUDA device: no device kernels to list"}}
    assert kernel_tables.gap_lines(cpu) == ["not profiled: no CUDA device: no device kernels to list"]


def test_the_breakdown_records_the_clock_of_the_profiled_steps(monkeypatch):
    monkeypatch.setattr(clock_windows, "device_source", lambda device: (FakeSource(), None))
    summary = breakdown.profile_breakdown("tiny", 16, "fp32", batch=1, warmup=1, steps=2, device=CPU,
                                          custom_sizes=profiles.PROFILES["smoke"]["custom_sizes"])  # fmt: skip
    assert summary["sm_clock_mhz"] == 1755.0 and summary["power_w"] == 600.0
    assert summary["clock_source"] == "test source" and summary["clock_samples"] >= 1
    assert tables.breakdown_clock(summary) == "SM clock 1755 MHz while profiled (test source)"
    assert tables.breakdown_clock({"timer": "cuda_kernels"}).startswith("SM clock not recorded")
    real_cpu = {"timer": "cpu_operators", "sm_clock_mhz": None}
    assert tables.breakdown_clock(real_cpu) == "CPU operators: no GPU clock"


def test_the_scan_sets_the_measured_backward_peak_against_the_model_and_moves_its_limit():
    """A measured backward peak 1.32× the model's at the longest measured length is shown as such, and the
    model's out-of-memory length moves by √1.32 (the S² term dominates there); a short length's ratio
    (the allocator's fixed megabytes), another width's and a row without a peak do not count."""
    model = {"before_backward": 100, "peak_backward": 1000}
    rows = [{"d_model": 128, "seq": 256, "model": model, "peak_backward_bytes": 5570},
            {"d_model": 128, "seq": 8192, "model": model, "peak_backward_bytes": 1320},
            {"d_model": 64, "seq": 16384, "model": model, "peak_backward_bytes": 2000},
            {"d_model": 128, "seq": 16384, "model": model}]  # fmt: skip
    ratio, seq = tables.measured_limit(rows, "128", 40000)
    assert ratio == pytest.approx(1.32) and seq == int(40000 / 1.32**0.5)
    assert tables.measured_limit(rows, 32, 40000) is None
    table = tables.scan_table([{**rows[1], "status": "ok"}], []).iloc[0]
    assert table["bwd measured / model"] == "1.320"
