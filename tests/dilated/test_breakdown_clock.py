"""The gather path's breakdown keeps the SM clock each of its two measurements ran at and says it is
not checked, and breakdown.md shows both (CPU: the Timing's clock is supplied by a fake harness)."""

from __future__ import annotations

import dataclasses

from attnbench.bench import timing
from attnbench.report import dilated as report
from attnbench.report.tables import markdown_table
from attnbench.studies.dilated_attention import checks, profiles


def test_breakdown_entries_keep_both_clocks_and_a_check_label(monkeypatch):
    real_measure, clocks = timing.measure, iter([1755.0, 1980.0])  # the whole call first, then the kernels

    def measure_with_clock(fn, **kw):
        return dataclasses.replace(
            real_measure(fn, **kw), sm_clock_mhz=next(clocks), clock_source="test source"
        )

    monkeypatch.setattr(timing, "measure", measure_with_clock)
    config = profiles.resolve("smoke", cuda=False)
    config["breakdown"].update(seq_lens=[128], passes=["fwd"])
    (entry,) = checks.breakdown(config, device="cpu", timing_options=config["timing"])
    assert entry["status"] == "ok" and entry["total_ms"] > 0 and entry["kernels_ms"] > 0
    assert entry["total_sm_clock_mhz"] == 1755.0 and entry["kernels_sm_clock_mhz"] == 1980.0
    assert entry["total_clock_source"] == "test source" and entry["kernels_warmup_s"] is not None
    assert entry["correctness"] == checks.BREAKDOWN_CHECK and entry["correctness"].startswith("not checked: ")

    (line,) = report.breakdown_table([entry]).to_dict("records")
    assert line[report.BREAKDOWN_CLOCK] == "1755 / 1980" and line["check"] == checks.BREAKDOWN_CHECK
    assert (
        "total_sm_clock_mhz" not in line
    )  # the conditions stay in breakdown.json, the table shows the clock
    assert "1755 / 1980" in markdown_table(report.breakdown_table([entry]))
    assert "whole / kernels: 1755 / 1980" in report.breakdown_sentences([entry])[0]


def test_a_breakdown_without_a_clock_says_why():
    cpu = {"status": "ok", "total_sm_clock_mhz": None, "kernels_sm_clock_mhz": None,
           "total_timing_method": "perf_counter"}  # fmt: skip
    assert report.breakdown_clock(cpu) == "none (CPU run: not a GPU measurement)"
    older = {"backend": "fa3", "seq_len": 1 << 20, "pass": "fwd", "total_ms": 2.0, "kernels_ms": 1.0,
             "other_ms": 1.0, "kernel_share": 0.5, "kernel_calls": 12, "branches": 10, "status": "ok"}  # fmt: skip
    (line,) = report.breakdown_table([older]).to_dict("records")
    assert line[report.BREAKDOWN_CLOCK] == "not recorded" and line["check"] == "not checked"
