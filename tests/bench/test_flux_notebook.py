"""The Flux notebook's smoke profile, end to end through the engine on this CPU machine."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from attnbench.bench.results import read_jsonl

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "notebooks" / "flux_attention.md"


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path]:
    outputs = tmp_path_factory.mktemp("outputs")
    proc = subprocess.run(
        [sys.executable, "-m", "attnbench", "run", str(NOTEBOOK), "--env", "python", "--plain",
         "--outputs", str(outputs), "--label", "smoke-test", "-p", "profile=smoke"],
        capture_output=True, text=True, timeout=600, cwd=ROOT,
    )  # fmt: skip
    return proc, outputs / "flux_attention" / "smoke-test"


@pytest.mark.timeout(600)
def test_every_cell_succeeds(smoke_run):
    proc, run_dir = smoke_run
    assert proc.returncode == 0, proc.stdout + proc.stderr
    states = json.loads((run_dir / "run.json").read_text())["cells"]
    assert {cell: s["state"] for cell, s in states.items()} == dict.fromkeys(
        ["gpu", "bench", "correctness", "plot", "summary", "trust"], "ran"
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
