"""Fixtures of the engine tests (helpers live in engine_helpers.py) and of the site-rendering tests
(the fake outputs tree they build is in render_helpers.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from engine_helpers import Project
from render_helpers import SVG, _cell, _png, _results_jsonl, _run_json

from attnbench.notebook.site.render import build_site
from attnbench.notebook.site.tables import MAX_TABLE_ROWS


@pytest.fixture
def project(tmp_path: Path, capsys) -> Project:
    """An empty project folder (notebooks/ inside) whose runs use --env python and label `t`."""
    return Project(tmp_path, capsys)


@pytest.fixture
def outputs(tmp_path: Path) -> Path:
    out = tmp_path / "outputs"
    csv_rows = "provider,ms\n" + "".join(f"sdpa,{i}.5\n" for i in range(MAX_TABLE_ROWS + 50))
    jsonl = (
        json.dumps({"provider": "flex", "status": "ok", "correctness": {"max_abs": 0.001, "ok": True}})
        + "\n"
        + json.dumps({"provider": "fa3", "status": "unavailable", "reason": "not installed"})
        + "\n"
    )
    cpu = out / "bench" / "cpu"
    _run_json(
        cpu,
        "cpu",
        None,
        0,
        {
            "make": {"state": "ran", "reason": ""},
            "boom": {"state": "failed", "reason": "exit code 1"},
            "after": {"state": "skipped", "reason": "upstream cell boom failed"},
        },
    )
    _cell(
        cpu,
        "make",
        "ok",
        stdout="<b>bold</b> & <script>alert(1)</script>\n",
        files={
            "plots/fig.svg": SVG,
            "img.png": _png(),
            "table.csv": csv_rows,
            "results.jsonl": jsonl,
            "blob.bin": b"\0\1\2",
        },
    )
    _cell(cpu, "boom", "failed", reason="exit code 1", stderr="Traceback: SystemExit(1)\n")
    h200 = out / "bench" / "nvidia-h200"
    _run_json(h200, "nvidia-h200", "NVIDIA H200", 2, {c: {"state": "hit"} for c in ("make", "boom", "after")})
    for cell in ("boom", "after"):
        _cell(h200, cell, "ok", stdout=f"{cell} on h200\n")
    _cell(
        h200,
        "make",
        "ok",
        stdout="".join(f"line {i}\n" for i in range(1, 101)) + "make on h200\n",
        files={
            "results.jsonl": _results_jsonl(),
            "summary.csv": "provider,ms\nsdpa,0.3424319922924042\n",
            "summary.md": "| provider | ms |\n|---|---|\n| sdpa | 0.3424 |\n",
            "env.json": json.dumps({f"key{i}": i for i in range(40)}, indent=2),
            "short.txt": "one line\n",
        },
    )
    # A cell folder being written right now must be ignored.
    (h200 / ".tmp-later-xyz").mkdir()
    # A second notebook that ran only on cpu: the index says it did not run on the H200.
    other = out / "other" / "cpu"
    other.mkdir(parents=True)
    (other / "notebook.md").write_text("---\ntitle: Other\n---\nJust prose.\n")
    (other / "run.json").write_text(
        json.dumps(
            {"title": "Other", "finished": "2025-05-02T00:00:00Z", "machine": {"gpu": None}, "cells": {}}
        )
    )
    return out


@pytest.fixture
def site(outputs: Path, tmp_path: Path) -> tuple[Path, list[Path]]:
    site_dir = tmp_path / "site"
    return site_dir, build_site(outputs, site_dir)
