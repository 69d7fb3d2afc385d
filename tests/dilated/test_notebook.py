"""The dilated-attention notebook's smoke profile, end to end through the engine on this CPU machine
(2 gloo ranks for the distributed cell)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from attnbench.dilated.kernels import BACKENDS
from attnbench.rows import read_jsonl

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "notebooks" / "dilated_attention.md"
CELLS = ["gpu", "correctness", "scaling", "extras", "distributed", "distributed_report", "report", "figures"]
NOT_GPU = "not a GPU measurement"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    outputs = tmp_path_factory.mktemp("outputs")
    proc = subprocess.run(
        [sys.executable, "-m", "attnbench", "run", str(NOTEBOOK), "--env", "python", "--plain",
         "--outputs", str(outputs), "--label", "smoke-test", "-p", "profile=smoke"],
        capture_output=True, text=True, timeout=900, cwd=ROOT, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return outputs / "dilated_attention" / "smoke-test"


def artifacts(run_dir: Path, cell: str) -> Path:
    return run_dir / cell / "artifacts"


@pytest.mark.timeout(900)
def test_every_cell_runs(run_dir):
    states = json.loads((run_dir / "run.json").read_text())["cells"]
    assert {cell: s["state"] for cell, s in states.items()} == dict.fromkeys(CELLS, "ran")


@pytest.mark.timeout(900)
def test_correctness_rows_for_every_implementation_and_backend(run_dir):
    rows = read_jsonl(artifacts(run_dir, "correctness") / "results.jsonl")
    names = {r.provider for r in rows}
    assert {f"dilated_gather_{b}" for b in BACKENDS} | {
        "dilated_fused",
        "dilated_flex",
        "dilated_reference",
    } == names
    for row in rows:
        assert row.status in ("ok", "unavailable"), (row.provider, row.status, row.reason)
        assert row.status == "ok" or "CUDA" in row.reason
    checked = [r for r in rows if r.status == "ok"]
    # the fused kernel runs on this CPU under the Triton interpreter
    assert {r.provider for r in checked} == {
        "dilated_gather_math",
        "dilated_fused",
        "dilated_flex",
        "dilated_reference",
    }
    assert all(r.ok and r.rel_l2 is not None for r in checked)
    assert {r.workload.mask for r in checked} == {"causal", "full"}
    grads = [
        r for r in checked if r.pass_ == "fwd_bwd" and r.provider in ("dilated_gather_math", "dilated_fused")
    ]
    assert grads and all(set(r.extra["correctness"]) == {"out", "dq", "dk", "dv"} for r in grads)


@pytest.mark.timeout(900)
def test_scaling_rows_carry_exact_pattern_flops_and_reasons(run_dir):
    rows = read_jsonl(artifacts(run_dir, "scaling") / "results.jsonl")
    assert {"dilated_gather_math", "dilated_flex", "sdpa_math"} <= {r.provider for r in rows}
    for row in rows:
        assert row.status == "ok" or row.reason, row
        assert row.timer in (None, "perf_counter")
        if row.extra.get("pattern") == "dilated" and row.ms_median:
            multiplier = {"fwd": 1.0, "fwd_bwd": 3.5}[row.pass_]
            expected = row.extra["flops_fwd"] * multiplier / (row.ms_median * 1e-3) / 1e12
            assert row.tflops == pytest.approx(expected)
            assert row.extra["pairs"] < row.extra["dense_pairs"]
    flex_bwd = [r for r in rows if r.provider == "dilated_flex" and r.pass_ == "fwd_bwd"]
    assert len(flex_bwd) == 1 and flex_bwd[0].status == "unsupported"  # one row says why, not one per length
    checked = [r for r in rows if r.ok is not None]
    assert checked and all(r.ok for r in checked)


@pytest.mark.timeout(900)
def test_distributed_cell_checks_and_times_on_two_ranks(run_dir):
    folder = artifacts(run_dir, "distributed")
    records = json.loads((folder / "correctness.json").read_text())
    assert {r["mask"] for r in records} == {"causal", "full"} and all(r["status"] == "ok" for r in records)
    assert all(r["world"] == 2 for r in records)
    rows = read_jsonl(folder / "results.jsonl")
    assert {r.extra["world_size"] for r in rows} == {1, 2}
    assert all(r.status == "ok" and r.ms_median > 0 for r in rows)
    # the timing protocol: a steady-state warm-up, then timed calls with the clock sampled (none on a CPU)
    assert all(r.warmup_s is not None and r.timing_method == "perf_counter" for r in rows)


@pytest.mark.timeout(900)
def test_outputs_say_they_are_not_gpu_measurements(run_dir):
    for table in (
        "correctness.md",
        "scaling.md",
        "cost.md",
        "headline.md",
        "suite_defaults.md",
        "breakdown.md",
    ):
        assert (
            (artifacts(run_dir, "report") / table).read_text().startswith(f"**smoke profile: {NOT_GPU}**")
        ), table
    svgs = sorted(artifacts(run_dir, "figures").glob("*.svg"))
    assert len(svgs) == 6
    for svg in svgs:
        if not svg.name.startswith("pattern"):
            text = svg.read_text()
            assert NOT_GPU in text and "where each series ended" in text, svg.name
    assert (
        (artifacts(run_dir, "distributed_report") / "distributed.md")
        .read_text()
        .startswith("**smoke profile")
    )
    for cell in (
        "correctness",
        "scaling",
        "extras",
        "distributed",
        "distributed_report",
        "report",
        "figures",
    ):
        assert NOT_GPU in (run_dir / cell / "stdout.txt").read_text(), cell


@pytest.mark.timeout(900)
def test_report_shows_the_suite_beside_ours_and_where_series_ended(run_dir):
    printed = (run_dir / "report" / "stdout.txt").read_text()
    assert "RingDilatedAttentionV2Collective" in printed and "internally inconsistent" in printed
    assert "where each series ended" in printed and "dilated_flex [forward+backward]" in printed
    assert "strong-scaling efficiency" in (run_dir / "distributed_report" / "stdout.txt").read_text()
    picture = (run_dir / "gpu" / "stdout.txt").read_text()
    assert "head 0, (w=8, r=1), (w=16, r=2), (w=32, r=4), causal, N = 32" in picture


@pytest.mark.timeout(900)
def test_the_page_headline_carries_the_fused_kernels_targets(run_dir):
    """targets.json is the report cell's own file: the headline must read it, or the page shows no target."""
    written = json.loads((artifacts(run_dir, "report") / "targets.json").read_text())["targets"]
    shown = json.loads((artifacts(run_dir, "report") / "headline.json").read_text())["targets"]
    assert len(written) == 2
    assert [t["name"] for t in shown] == [t["target"] for t in written]
    assert {t["verdict"] for t in shown} == {"not applicable"}  # a CPU smoke run judges no GPU target


@pytest.mark.timeout(300)
def test_report_cells_run_without_torch(run_dir, tmp_path):
    """The report and figures cells declare no torch; they must run where torch cannot import."""
    block_torch = (
        "import runpy, sys; sys.modules['torch'] = None; runpy.run_path(sys.argv[1], run_name='__main__')"
    )
    inputs = {f"ATTNBENCH_INPUT_{cell.upper()}": str(artifacts(run_dir, cell)) for cell in CELLS}
    for cell in ("report", "figures", "distributed_report"):
        script = ROOT / "cells" / "dilated_attention" / f"{cell}.py"
        deps = re.search(r"^# dependencies = (.*)$", script.read_text(), re.MULTILINE)
        assert deps and "torch" not in deps.group(1), f"{cell} declares {deps and deps.group(1)}"
        proc = subprocess.run(
            [sys.executable, "-c", block_torch, str(script)], cwd=tmp_path, capture_output=True, text=True,
            timeout=120, check=False, env={**os.environ, **inputs},
        )  # fmt: skip
        assert proc.returncode == 0, f"{cell}: {proc.stderr[-2000:]}"
