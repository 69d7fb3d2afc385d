"""The CS336 systems notebook's smoke profile, end to end through the engine on this CPU machine."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from attnbench.report.systems import read_json_lines
from attnbench.rows import read_jsonl

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "notebooks" / "cs336_systems.md"
TABLE_CELLS = [
    "kernels_bf16",
    "kernels_bf16_d64",
    "kernels_bf16_d128",
    "kernels_fp32",
    "kernels_fp32_d64",
    "kernels_fp32_d128",
]
CELLS = ["gpu", "steps_fp32", "steps_bf16", "breakdown", "scan", *TABLE_CELLS, "leaderboard", "steps_report",
         "scan_report", "leaderboard_report", "kernels_report"]  # fmt: skip
REPORT_CELLS = ["steps_report", "scan_report", "leaderboard_report", "kernels_report"]
NOT_GPU = "not a GPU measurement"


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path]:
    outputs = tmp_path_factory.mktemp("outputs")
    proc = subprocess.run(
        [sys.executable, "-m", "attnbench", "run", str(NOTEBOOK), "--env", "python", "--plain", "--jobs", "2",
         "--outputs", str(outputs), "--label", "smoke-test", "-p", "profile=smoke"],
        capture_output=True, text=True, timeout=900, cwd=ROOT, check=False,
    )  # fmt: skip
    return proc, outputs / "cs336_systems" / "smoke-test"


def _artifacts(run_dir: Path, cell: str) -> Path:
    return run_dir / cell / "artifacts"


@pytest.mark.timeout(900)
def test_every_cell_succeeds(smoke_run):
    proc, run_dir = smoke_run
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-3000:]
    states = json.loads((run_dir / "run.json").read_text())["cells"]
    assert {cell: s["state"] for cell, s in states.items()} == dict.fromkeys(CELLS, "ran")


@pytest.mark.timeout(900)
def test_training_steps_have_every_size_precision_and_step(smoke_run):
    _, run_dir = smoke_run
    config = json.loads((_artifacts(run_dir, "gpu") / "profile.json").read_text())
    spec = config["steps"]
    for precision in spec["precisions"]:
        rows = read_json_lines(_artifacts(run_dir, f"steps_{precision}") / f"steps_{precision}.jsonl")
        assert {(r["size"], r["context"]) for r in rows} == {
            (s, c) for s in spec["sizes"] for c in spec["contexts"]
        }
        for row in rows:
            assert row["status"] == "ok", row["reason"]
            assert row["timer"] == "perf_counter"
            assert all(len(t) == max(spec["warmups"]) + spec["measured"] for t in row["times_ms"].values())
    variants = read_json_lines(_artifacts(run_dir, "steps_bf16") / "variants.jsonl")
    assert {r["attention"]: r["status"] for r in variants} == {"eager": "ok", "sdpa": "ok", "triton": "ok"}


@pytest.mark.timeout(900)
def test_breakdown_and_memory(smoke_run):
    _, run_dir = smoke_run
    summary = json.loads((_artifacts(run_dir, "breakdown") / "breakdown.json").read_text())
    assert set(summary["phases"]) == {"forward", "backward", "optimizer"}
    blocks = summary["phases"]["forward"]["blocks_us_per_step"]
    assert any(k.startswith("attention/") for k in blocks) and any(k.startswith("mlp/") for k in blocks)
    record = json.loads((_artifacts(run_dir, "breakdown") / "memory.json").read_text())
    assert record["status"] == "skipped" and "needs CUDA" in record["reason"]


@pytest.mark.timeout(900)
def test_scan_eager_and_compiled(smoke_run):
    _, run_dir = smoke_run
    config = json.loads((_artifacts(run_dir, "gpu") / "profile.json").read_text())["scan"]
    for variant in ("eager", "compiled"):
        rows = read_json_lines(_artifacts(run_dir, "scan") / f"scan_{variant}.jsonl")
        assert len(rows) == len(config["d_models"]) * len(config["seq_lens"])
        assert all(r["status"] == "ok" and r["forward_ms"]["n"] == config["iterations"] for r in rows), rows


@pytest.mark.timeout(900)
def test_kernel_rows_are_checked_or_explained(smoke_run):
    _, run_dir = smoke_run
    rows, dims = [], []
    for cell in TABLE_CELLS:
        name = "table_bfloat16" if "bf16" in cell else "table_float32"
        part = read_jsonl(_artifacts(run_dir, cell) / f"{name}.jsonl")
        dims.append(sorted({r.workload.head_dim for r in part}))
        assert {r.workload.dtype for r in part} == {name.removeprefix("table_")}, cell
        rows += part
    assert dims == [[16, 32], [64], [128]] * 2  # each cell's head dims (profiles.TABLE_CELLS), both dtypes
    ours_and_compared = {"torch_eager", "triton_fa2", "triton_fa2_ieee", "sdpa_cudnn", "flash_attn3"}
    assert {r.provider for r in rows} == ours_and_compared
    for row in rows:
        assert row.status == "ok" or row.reason, row
        if row.provider in ("torch_eager", "triton_fa2", "triton_fa2_ieee"):
            assert row.status == "ok" and row.ok, (row.provider, row.pass_, row.workload.label(), row.reason)
    leaderboard = read_jsonl(_artifacts(run_dir, "leaderboard") / "leaderboard.jsonl")
    ours = [r for r in leaderboard if r.provider.startswith("triton_fa2")]
    assert len(ours) == 6 and all(r.status == "ok" and r.ok for r in ours)


@pytest.mark.timeout(900)
def test_smoke_outputs_say_they_are_not_gpu_measurements(smoke_run):
    _, run_dir = smoke_run
    tables = [t for cell in REPORT_CELLS for t in _artifacts(run_dir, cell).glob("*.md")]
    figures = [f for cell in REPORT_CELLS for f in _artifacts(run_dir, cell).glob("*.svg")]
    assert tables and figures  # the loops below check something
    for cell in REPORT_CELLS:
        for table in _artifacts(run_dir, cell).glob("*.md"):
            assert table.read_text().startswith(f"**smoke profile: {NOT_GPU}**"), table
        for figure in _artifacts(run_dir, cell).glob("*.svg"):
            assert NOT_GPU in figure.read_text(), figure
    assert "not judged" in (run_dir / "leaderboard_report" / "stdout.txt").read_text()
    targets = json.loads((_artifacts(run_dir, "leaderboard_report") / "targets.json").read_text())["targets"]
    assert [t["verdict"] for t in targets] == ["not checked", "not checked"]  # a CPU run judges no target
    for cell in ("steps_fp32", "scan", "kernels_bf16", "leaderboard"):
        assert NOT_GPU in (run_dir / cell / "stdout.txt").read_text(), cell


@pytest.mark.timeout(300)
def test_report_cells_run_without_torch(smoke_run, tmp_path):
    """The report cells declare no torch; they must run where torch cannot import."""
    _, run_dir = smoke_run
    block_torch = (
        "import runpy, sys; sys.modules['torch'] = None; runpy.run_path(sys.argv[1], run_name='__main__')"
    )
    inputs = {f"ATTNBENCH_INPUT_{cell.upper()}": str(_artifacts(run_dir, cell)) for cell in CELLS}
    for cell in REPORT_CELLS:
        script = ROOT / "cells" / "cs336_systems" / f"{cell}.py"
        deps = re.search(r"^# dependencies = (.*)$", script.read_text(), re.MULTILINE)
        assert deps and "torch" not in deps.group(1), f"{cell} declares {deps and deps.group(1)}"
        proc = subprocess.run(
            [sys.executable, "-c", block_torch, str(script)], cwd=tmp_path, capture_output=True, text=True,
            timeout=200, check=False, env={**os.environ, **inputs},
        )  # fmt: skip
        assert proc.returncode == 0, f"{cell}: {proc.stderr[-2000:]}"
