"""The Flux notebook's smoke profile, end to end through the engine on this CPU machine."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from attnbench.rows import read_jsonl

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "notebooks" / "flux_attention.md"


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path]:
    outputs = tmp_path_factory.mktemp("outputs")
    proc = subprocess.run(
        [sys.executable, "-m", "attnbench", "run", str(NOTEBOOK), "--env", "python", "--plain",
         "--outputs", str(outputs), "--label", "smoke-test", "-p", "profile=smoke"],
        capture_output=True, text=True, timeout=600, cwd=ROOT, check=False,
    )  # fmt: skip
    return proc, outputs / "flux_attention" / "smoke-test"


@pytest.mark.timeout(600)
def test_every_cell_succeeds(smoke_run):
    proc, run_dir = smoke_run
    assert proc.returncode == 0, proc.stdout + proc.stderr
    states = json.loads((run_dir / "run.json").read_text())["cells"]
    assert {cell: s["state"] for cell, s in states.items()} == dict.fromkeys(
        [
            "gpu",
            "bench",
            "bench_long",
            *(f"bench_fwd_bwd_{part}" for part in range(1, 7)),
            "correctness",
            "plot",
            "summary",
            "trust",
            "cudnn_h200",
            "cudnn_h200_report",
        ],
        "ran",
    )


@pytest.mark.timeout(600)
def test_every_provider_has_a_row_or_a_reason(smoke_run):
    from attnbench.bench.providers import all_providers

    _, run_dir = smoke_run
    rows = read_jsonl(run_dir / "bench" / "artifacts" / "results.jsonl")
    assert {r.provider for r in rows} == {p.name for p in all_providers()}
    for row in rows:
        assert row.status == "ok" or row.reason, row
    ok = [r for r in rows if r.status == "ok"]
    assert ok and all(r.timer == "perf_counter" and r.ok for r in ok)  # CPU smoke: checked, CPU-timed
    assert any(r.provider == "sdpa_math" and r.status == "ok" for r in rows)


@pytest.mark.timeout(600)
def test_smoke_outputs_say_they_are_not_gpu_measurements(smoke_run):
    _, run_dir = smoke_run
    plots = sorted((run_dir / "plot" / "artifacts").glob("*.svg"))
    assert plots and all("not a GPU measurement" in p.read_text() for p in plots)
    assert "not a GPU measurement" in (run_dir / "bench" / "stdout.txt").read_text()
    assert "needs CUDA" in (run_dir / "trust" / "stdout.txt").read_text()
    for table in ("correctness/artifacts/correctness.md", "summary/artifacts/summary.md"):
        assert (run_dir / table).read_text().startswith("**smoke profile: not a GPU measurement**"), table
    for cell in ("correctness", "plot", "summary"):
        assert "not a GPU measurement" in (run_dir / cell / "stdout.txt").read_text(), cell


@pytest.mark.timeout(600)
def test_summary_states_both_peaks_and_ranks_only_correct_rows(smoke_run):
    _, run_dir = smoke_run
    text = (run_dir / "summary" / "stdout.txt").read_text()
    assert "bf16 matmul peak measured in this run (the MFU denominator): n/a (no CUDA" in text
    assert "datasheet peak of this device: unknown" in text
    rows = read_jsonl(run_dir / "bench" / "artifacts" / "results.jsonl")
    correct = {r.provider for r in rows if r.status == "ok" and r.ok}
    summary = (run_dir / "summary" / "artifacts" / "summary.csv").read_text().splitlines()
    assert len(summary) > 1 and all(line.split(",")[3] in correct for line in summary[1:])


@pytest.mark.timeout(600)
def test_plot_lists_every_provider_that_did_not_run_with_its_reason(smoke_run):
    _, run_dir = smoke_run
    rows = read_jsonl(run_dir / "bench" / "artifacts" / "results.jsonl")
    svg = (run_dir / "plot" / "artifacts" / "latency.svg").read_text()
    table = (run_dir / "plot" / "artifacts" / "did_not_run.md").read_text()  # shown under the figures
    missing = {(r.provider, r.status, r.reason) for r in rows if r.status in ("unavailable", "unsupported")}
    assert missing and "did not run:" not in svg  # a table under the figure, not text inside it
    for provider, status, reason in missing:
        assert f"| {provider} | {status} | {reason.replace('|', chr(92) + '|')} |" in table, provider


@pytest.mark.timeout(120)
def test_report_cells_run_without_torch(smoke_run, tmp_path):
    """The correctness and summary cells declare only pandas; they must run where torch cannot import."""
    _, run_dir = smoke_run
    block_torch = (
        "import runpy, sys; sys.modules['torch'] = None; runpy.run_path(sys.argv[1], run_name='__main__')"
    )
    for cell in ("correctness", "summary"):
        script = ROOT / "cells" / "flux_attention" / f"{cell}.py"
        deps = re.search(r"^# dependencies = (.*)$", script.read_text(), re.MULTILINE)
        assert deps and "torch" not in deps.group(1), f"{cell} declares {deps and deps.group(1)}"
        proc = subprocess.run(
            [sys.executable, "-c", block_torch, str(script)], cwd=tmp_path, capture_output=True, text=True,
            timeout=100, check=False, env={**os.environ, "ATTNBENCH_INPUT_BENCH": str(run_dir / "bench" / "artifacts")},
        )  # fmt: skip
        assert proc.returncode == 0, f"{cell}: {proc.stderr[-2000:]}"
