"""The Flux report's timing comparisons keep the clock they ran at (CPU: a fake clock source and
monkeypatched GPU-only pieces), and its measuring cells refuse a GPU label's profile on a CPU."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import threading
import time
from pathlib import Path

import pytest
import torch

from attnbench.bench import clock_windows, flops, providers, timing, timing_methods
from attnbench.bench.clocks import ClockReading
from attnbench.bench.profiles import NOT_GPU
from attnbench.report import vendor_cudnn
from attnbench.rows import Result, Workload
from attnbench.studies.flux_attention import measure, profiles

OPTIONS = {"min_reps": 3, "min_time_ms": 1.0, "warmup_reps": 1, "max_reps": 20}
SEQ_LENS = [4224, 4352]


class Source:
    """1980 MHz while a call runs, 345 MHz (an idle GPU) otherwise."""

    name = "test source"

    def __init__(self):
        self.busy = threading.Event()

    def read(self):
        return ClockReading(sm_mhz=1980.0 if self.busy.is_set() else 345.0, power_w=500.0, temperature_c=50.0)


@pytest.fixture
def gpu_like(monkeypatch):
    """A fake clock source, a short warm-up floor, and a harness whose Timing carries a clock (a CPU
    Timing has none): what a GPU run would give, on this CPU."""
    source = Source()
    monkeypatch.setattr(clock_windows, "device_source", lambda device: (source, None))
    monkeypatch.setattr(timing, "WARMUP_MIN_S", 0.02)
    real_measure = timing.measure

    def measure_with_clock(fn, **kw):
        t = real_measure(fn, **kw)
        return dataclasses.replace(t, sm_clock_mhz=1755.0, clock_source="harness source", clock_samples=7)

    monkeypatch.setattr(timing, "measure", measure_with_clock)

    def call():
        source.busy.set()
        time.sleep(0.012)  # long enough for the sampler (5 ms) to read the clock during the call
        source.busy.clear()

    return source, call


def test_every_timing_method_keeps_its_clock_and_says_how_it_was_warmed_up(gpu_like, monkeypatch):
    _, call = gpu_like

    def profiled(fn, device, clock=None):  # the profiler stood in for: the call inside its clock window
        with clock.window() if clock else contextlib.nullcontext():
            fn()
        return 1.0

    monkeypatch.setattr(timing_methods, "_profiled_kernel_ms", profiled)
    out = timing_methods.compare(call, timing_options=OPTIONS, device="cpu", reps=3, idle_s=0.03)
    assert set(out) == {"events", "kernels", "events_idle"} and all(m["ms"] > 0 for m in out.values())
    # events: the harness's own Timing conditions, kept (before: only ms_median)
    assert out["events"]["sm_clock_mhz"] == 1755.0 and out["events"]["clock_source"] == "harness source"
    # kernels: the protocol's warm-up first, and the clock read inside the calls
    kernels = out["kernels"]
    assert kernels["warmup"].startswith(timing_methods.STEADY_WARMUP) and kernels["warmup_s"] >= 0.02
    assert "the profiler's start-up between the profiled calls idles the GPU" in kernels["warmup"]
    assert kernels["sm_clock_mhz"] == 1980.0 and kernels["clock_source"] == "test source"
    # events_idle: no warm-up by design, said so; the clock of the calls, not of the idle sleeps
    idle = out["events_idle"]
    assert idle["warmup"] == "none: measures the idle-clock first call by design" and idle["warmup_s"] is None
    assert idle["sm_clock_mhz"] == 1980.0 and idle["clock_samples"] >= 3


def test_a_timing_method_record_keeps_the_conditions_and_shows_the_clock():
    w = Workload(1, 16384, 16384, 64, 8, 128, "bfloat16", "causal")
    timed = {"events": {"ms": 10.0, "sm_clock_mhz": 1545.0, "warmup": "steady"},
             "kernels": {"ms": 9.0, "sm_clock_mhz": 1710.0}, "events_idle": {"ms": 8.0, "sm_clock_mhz": None}}  # fmt: skip
    record = measure.method_record("sdpa_cudnn", w, "fwd", timed)
    assert record["ms"] == {"events": 10.0, "kernels": 9.0, "events_idle": 8.0}
    assert record["conditions"]["events"] == {"sm_clock_mhz": 1545.0, "warmup": "steady"}
    assert record["correctness"].startswith("not checked here")
    line = measure.method_line(record)
    assert "@1545 MHz" in line and "@1710 MHz" in line and "@? MHz" in line


def test_the_vendor_table_shows_each_methods_clock_and_the_check_of_the_call():
    w = Workload(1, 16384, 16384, 64, 8, 128, "bfloat16", "full")
    timed = {m: {"ms": ms, "sm_clock_mhz": mhz, "warmup": warm, "clock_source": "nvml"}
             for m, ms, mhz, warm in (("events", 1.0, 1545.0, timing_methods.STEADY_WARMUP),
                                      ("kernels", 0.9, 1710.0, timing_methods.STEADY_WARMUP),
                                      ("events_idle", 0.8, 1980.0, timing_methods.IDLE_WARMUP))}  # fmt: skip
    record = measure.method_record("sdpa_cudnn", w, "fwd", timed)
    row = Result("sdpa_cudnn", "sdpa", "ok", w, "fwd", ms_median=1.0, rel_l2=2.3e-3, ok=True)
    (line,) = vendor_cudnn.comparison_table([record], [row]).to_dict("records")
    assert line[vendor_cudnn.CLOCK_COLUMN] == "1545 / 1710 / 1980"
    assert line["check"] == "ok (sweep row, rel_l2 2.3e-03)"
    (sentence,) = vendor_cudnn.gap_sentences([record])
    assert "at 1545 MHz" in sentence and "at 1710 MHz" in sentence and "at 1980 MHz" in sentence
    # each method's gain is on our events figure and its own gap is to the published one, both said
    assert "sdpa_cudnn full fwd: published 702 TFLOP/s, ours " in sentence and "to reach it)" in sentence
    assert (
        "kernel-only time gives" in sentence
        and "% on ours, " in sentence
        and "% to reach published)" in sentence
    )
    lines = vendor_cudnn.conditions_lines([record])
    assert any(s.startswith("events_idle: warm-up none: measures the idle-clock first call") for s in lines)
    # a record of older code (no conditions) says its clock was not recorded, never a number
    old = {k: v for k, v in record.items() if k not in ("conditions", "correctness")}
    (line,) = vendor_cudnn.comparison_table([old]).to_dict("records")
    assert line[vendor_cudnn.CLOCK_COLUMN] == "not recorded" and line["check"] == "not checked"


def test_a_timing_method_above_a_peak_is_a_measurement_error_never_a_number(monkeypatch):
    """Causal 16k forward: 4.4 TFLOP per call. 10 ms is 440 TFLOP/s; 4 ms (1100) is above the datasheet's
    989.5 and above 132 SMs x 4096 FLOP/clk at 1980 MHz; 20 ms (220) at an idle 345 MHz clock is above that
    clock's 187 TFLOP/s even where the datasheet alone would let a wrong clock through."""
    monkeypatch.setattr(flops, "_gpu_shape", lambda device: (132, (9, 0)))  # an H200's SMs, on this CPU
    sdpa, fp8 = providers.get("sdpa_cudnn"), providers.get("cudnn_frontend_fp8")
    w = Workload(1, 16384, 16384, 64, 8, 128, "bfloat16", "causal")
    timed = {"events": {"ms": 10.0, "sm_clock_mhz": 1980.0}, "kernels": {"ms": 4.0, "sm_clock_mhz": 1980.0},
             "events_idle": {"ms": 20.0, "sm_clock_mhz": 345.0}}  # fmt: skip
    over = measure.over_peaks(sdpa, w, "fwd", timed, "cuda", 989.5)
    record = measure.method_record("sdpa_cudnn", w, "fwd", timed, over)
    assert set(record["over_peak"]) == {"kernels", "events_idle"}
    assert "datasheet bf16 peak" in record["over_peak"]["kernels"]
    assert "bf16 peak at 345.0 MHz" in record["over_peak"]["events_idle"]
    (line,) = vendor_cudnn.comparison_table([record]).to_dict("records")
    assert line["events TFLOP/s"] == pytest.approx(439.8, rel=1e-3)
    assert line["kernels TFLOP/s"] is None and line["events_idle TFLOP/s"] is None
    assert line["peak check"] == "kernels, events_idle above peak: a measurement error"
    (sentence,) = vendor_cudnn.gap_sentences([record])
    assert "kernel-only" not in sentence and "idle GPU" not in sentence  # no gap from an impossible number
    assert len(vendor_cudnn.peak_lines([record])) == 2
    # an fp8 kernel on bf16 inputs has no bf16 peak to be judged against (bench.flops.score's rule)
    assert measure.over_peaks(fp8, w, "fwd", timed, "cuda", 989.5) is None
    assert (
        measure.over_peaks(sdpa, w, "fwd", {"events": timed["events"]}, "cuda", 989.5) == {}
    )  # judged, fine
    unjudged = measure.method_record("cudnn_frontend_fp8", w, "fwd", timed, None)
    assert vendor_cudnn.peak_cell(unjudged).startswith(
        "not checked (no peak known"
    )  # never "below every peak"
    assert vendor_cudnn.comparison_table([unjudged]).to_dict("records")[0][
        "kernels TFLOP/s"
    ] == pytest.approx(1099.5, rel=1e-3)  # shown, with its peak check saying it was not judged
    # without the device's peaks (a CPU, no datasheet) nothing is judged; a record of older code says it
    # was not checked
    monkeypatch.undo()
    assert measure.over_peaks(sdpa, w, "fwd", timed, "cpu", None) is None
    old = {k: v for k, v in record.items() if k != "over_peak"}
    (line,) = vendor_cudnn.comparison_table([old]).to_dict("records")
    assert line["peak check"] == "not checked (records of older code)"
    assert line["kernels TFLOP/s"] == pytest.approx(1099.5, rel=1e-3)


def test_the_trust_check_records_both_sides_clock_after_the_protocols_warm_up(gpu_like, monkeypatch, capsys):
    _, call = gpu_like

    def bare_loop(fn, reps=100, flush=True):  # bench.timing.bare_event_loop is CUDA-only
        for _ in range(reps):
            fn()
        return 0.5

    monkeypatch.setattr(timing, "bare_event_loop", bare_loop)
    result = measure.trust_rounds(call, OPTIONS, device="cpu", rounds=2, reps=2)
    assert result["harness_sm_clock_mhz"] == 1755.0 and result["bare_sm_clock_mhz"] == 1980.0
    assert [r["sm_clock_mhz"] for r in result["harness_rounds"]] == [1755.0, 1755.0]
    for bare in result["bare_rounds"]:  # before: a 5-call warm-up and no clock
        assert bare["warmup"] == timing_methods.STEADY_WARMUP and bare["warmup_s"] >= timing.WARMUP_MIN_S
        assert bare["clock_source"] == "test source" and bare["ms"] == 0.5
    assert result["bare_rounds_ms"] == [0.5, 0.5] and result["verdict"] in ("holds", "FAILS")
    measure.print_trust({**result, "workload": "w", "gpu": "g"})
    shown = capsys.readouterr().out
    assert "SM clock 1755 MHz" in shown and "SM clock 1980 MHz" in shown and "not checked here" in shown


def test_a_gpu_labels_profile_on_a_cpu_machine_is_refused_and_writes_nothing(tmp_path, monkeypatch):
    """Every measuring cell reads the profile through gpu_profile, which refuses a GPU label's profile on a
    CPU: a presenting run there once stored "skipped: needs CUDA" over the H100's measured trust.json."""
    from attnbench.bench.profiles import gpu_profile, write_profile
    from attnbench.notebook.document.parse import parse_notebook

    notebook = parse_notebook(Path(__file__).resolve().parents[2] / "notebooks" / "flux_attention.md")
    measuring = {c.id: c.source for c in notebook.cells  # cells that time on the gpu cell's profile
                 if "torch" in c.deps and "gpu" in map(str, c.needs)}  # fmt: skip
    assert {"trust", "cudnn_h200", "bench"} <= set(measuring)
    for cell_id, source in measuring.items():
        assert "gpu_profile()" in source and "read_profile" not in source, cell_id
    inputs = tmp_path / "gpu"
    inputs.mkdir()
    monkeypatch.chdir(inputs)
    write_profile(profiles.resolve("auto", True, SEQ_LENS, []), {"gpu": "NVIDIA H100"})  # the H100's gpu cell
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr("attnbench.inputs", lambda name: inputs)
    with pytest.raises(SystemExit, match="resolved for cuda"):  # the cell's line: refused before it measures
        measure.trust_check(gpu_profile())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gpu"]  # so no trust.json under a GPU label


def test_a_cpu_smoke_run_still_says_it_was_skipped_and_is_not_a_gpu_measurement(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    measure.trust_check(profiles.resolve("auto", False, SEQ_LENS, []))
    record = json.loads((tmp_path / "trust.json").read_text())
    assert record["verdict"] == "skipped" and record["reason"].startswith("needs CUDA")
    assert record["label"] == NOT_GPU
