"""The attention-masks notebook's smoke profile, end to end through the engine on this CPU machine."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from attnbench.rows import read_jsonl, read_rows_document
from attnbench.studies.attention_masks import profiles

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "notebooks" / "attention_masks.md"
CELLS = ["gpu", "inputs_drawn", "checks", "bench", "bench_fwd_bwd", "figures", "summary"]


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory) -> Path:
    outputs = tmp_path_factory.mktemp("outputs")
    proc = subprocess.run(
        [sys.executable, "-m", "attnbench", "run", str(NOTEBOOK), "--env", "python", "--plain",
         "--outputs", str(outputs), "--label", "smoke-test", "-p", "profile=smoke"],
        capture_output=True, text=True, timeout=600, cwd=ROOT, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return outputs / "attention_masks" / "smoke-test"


@pytest.mark.timeout(600)
def test_every_cell_runs_and_every_provider_mask_length_pass_has_a_row(smoke_run):
    states = json.loads((smoke_run / "run.json").read_text())["cells"]
    assert {cell: s["state"] for cell, s in states.items()} == dict.fromkeys(CELLS, "ran")
    config = profiles.configure("smoke")
    separate = read_jsonl(smoke_run / "bench" / "artifacts" / "results.jsonl")
    both = read_jsonl(smoke_run / "bench_fwd_bwd" / "artifacts" / "results.jsonl")
    assert {r.pass_ for r in separate} == {"fwd", "bwd"} and {r.pass_ for r in both} == {"fwd_bwd"}
    rows = separate + both
    keys = {(r.provider, r.workload.mask, r.workload.seqlen_q, r.pass_) for r in rows}
    want = {(p, m, s, ps) for names, passes in config["tiers"] for p in names for ps in passes
            for m in config["masks"] for s in config["seq_lens"]}  # fmt: skip
    assert keys == want and len(rows) == len(want)
    assert all(r.status == "ok" or r.reason for r in rows)
    ok = [r for r in rows if r.status == "ok"]
    assert {r.workload.mask for r in ok} == set(config["masks"])  # every mask measured by sdpa_math/flex
    assert all(r.timer == "perf_counter" and r.ok and r.extra["checked_at_seqlen"] == 128 for r in ok)
    checks = read_rows_document(smoke_run / "checks" / "artifacts" / "checks.json")
    assert {(r.workload.mask, r.pass_) for r in checks if r.provider == "sdpa_math" and r.ok} == {
        (m, p) for m in config["masks"] for p in ("fwd", "bwd")
    }


@pytest.mark.timeout(600)
def test_the_site_takes_only_the_timed_rows_as_results(smoke_run):
    from attnbench.report.headline_data import read_artifacts

    data = read_artifacts({cell: smoke_run / cell / "artifacts" for cell in CELLS})
    assert data.result_files == [
        "bench/results.jsonl",
        "bench_fwd_bwd/results.jsonl",
    ]  # the checks are a document, not rows
    assert not any(row.get("extra", {}).get("check") for row in data.rows)


@pytest.mark.timeout(600)
def test_figures_tables_and_pictures_are_written_and_labelled(smoke_run):
    figures = smoke_run / "figures" / "artifacts"
    for mask in profiles.configure("smoke")["masks"]:  # every registered mask
        svg = (figures / f"{mask}.svg").read_text()
        assert "not a GPU measurement" in svg and "series-fwd-sdpa_math-ok" in svg, mask
        # three panels side by side are drawn at ~90 % on a 1400 px page: 9 pt keeps text >= 8 px there
        assert min(float(x) for x in re.findall(r"font-size: ([\d.]+)px", svg)) >= 9, mask
    assert "| flash_attn3 | unavailable |" in (figures / "did_not_run.md").read_text()
    drawn = smoke_run / "inputs_drawn" / "artifacts"
    assert (drawn / "masks.svg").exists() and (drawn / "documents.svg").exists()
    for name in ("masks.svg", "documents.svg"):
        sizes = [float(x) for x in re.findall(r"font-size: ([\d.]+)px", (drawn / name).read_text())]
        assert min(sizes) >= 9, name
    assert "probability 0.305" in (smoke_run / "inputs_drawn" / "stdout.txt").read_text()  # 0.40 / 1.31
    summary = smoke_run / "summary" / "artifacts"
    assert (summary / "best.md").read_text().startswith("**smoke profile: not a GPU measurement**")
    assert "read from their charts" in (summary / "published.md").read_text()
    assert "Checked at 128 tokens" in (summary / "correctness.md").read_text()


@pytest.mark.timeout(120)
def test_report_cells_run_without_torch(smoke_run, tmp_path):
    block_torch = (
        "import runpy, sys; sys.modules['torch'] = None; runpy.run_path(sys.argv[1], run_name='__main__')"
    )
    inputs = {"ATTNBENCH_INPUT_BENCH": str(smoke_run / "bench" / "artifacts"),
              "ATTNBENCH_INPUT_CHECKS": str(smoke_run / "checks" / "artifacts"),
              "ATTNBENCH_INPUT_BENCH_FWD_BWD": str(smoke_run / "bench_fwd_bwd" / "artifacts"),
              "ATTNBENCH_INPUT_GPU": str(smoke_run / "gpu" / "artifacts")}  # fmt: skip
    for cell in ("inputs_drawn", "figures", "summary"):
        script = ROOT / "cells" / "attention_masks" / f"{cell}.py"
        deps = re.search(r"^# dependencies = (.*)$", script.read_text(), re.MULTILINE)
        assert deps and "torch" not in deps.group(1), f"{cell} declares {deps and deps.group(1)}"
        proc = subprocess.run(
            [sys.executable, "-c", block_torch, str(script)], cwd=tmp_path, capture_output=True, text=True,
            timeout=100, check=False, env={**os.environ, **inputs},
        )  # fmt: skip
        assert proc.returncode == 0, f"{cell}: {proc.stderr[-2000:]}"
