"""Large artifacts and logs are linked, not copied whole; each result records the code's commit."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from site_helpers import run_engine

from attnbench.notebook.run import provenance
from attnbench.notebook.site.render import MAX_COPY_BYTES, build_site
from attnbench.notebook.site.summary import provenance_view

NOTEBOOK = "---\ntitle: Big\n---\n\n```python id=make\nprint('hi')\n```\n"


def _outputs(tmp_path: Path) -> Path:
    run = tmp_path / "outputs" / "big" / "cpu"
    art = run / "make" / "artifacts"
    art.mkdir(parents=True)
    (run / "notebook.md").write_text(NOTEBOOK)
    (run / "run.json").write_text(
        json.dumps({"title": "Big", "machine": {}, "cells": {"make": {"state": "ran"}}})
    )
    with open(art / "huge.bin", "wb") as f:  # sparse: large on paper, fast to make
        f.truncate(MAX_COPY_BYTES + 1)
    (art / "small.txt").write_text("small\n")
    log = "".join(f"log line {i}\n" for i in range(1_000_000))  # ~16 MiB of stdout
    (run / "make" / "stdout.txt").write_text(log)
    (run / "make" / "stderr.txt").write_text("")
    result = {
        "cell": "make",
        "status": "ok",
        "key": "0" * 16,
        "started": "2026-11-23T00:00:00+00:00",
        "finished": "2026-11-23T00:00:01+00:00",
        "artifacts": ["huge.bin", "small.txt"],
        "duration_s": 1.0,
    }
    (run / "make" / "result.json").write_text(json.dumps(result))
    return tmp_path / "outputs"


def test_large_artifacts_and_logs_are_linked_with_a_warning(tmp_path, caplog):
    outputs = _outputs(tmp_path)
    site = tmp_path / "site"
    build_site(outputs, site)
    size = sum(p.stat().st_size for p in site.rglob("*") if p.is_file())
    assert size < 2 * 2**20  # neither the 8 MiB artifact nor the 16 MiB log was copied
    page = (site / "big" / "cpu.html").read_text()
    assert (site / "big" / "cpu" / "files" / "make" / "small.txt").is_file()
    assert not (site / "big" / "cpu" / "files" / "make" / "huge.bin").exists()
    # linked where it lies (relative to the page, so it resolves while the site sits beside outputs/)
    assert 'href="../../outputs/big/cpu/make/artifacts/huge.bin"' in page
    assert 'href="../../outputs/big/cpu/make/stdout.txt"' in page
    assert "Not copied into the site: 8.0 MiB: over the site" in page
    assert "log line 999999" in page and "log line 0\n" not in page  # the tail is shown
    assert any("huge.bin" in r.getMessage() and "not copied" in r.getMessage() for r in caplog.records)


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, text=True).stdout


def test_result_records_the_code_commit(tmp_path, monkeypatch):
    root = tmp_path / "proj"
    (root / "notebooks").mkdir(parents=True)
    (root / "notebooks" / "tiny.md").write_text(NOTEBOOK.replace("Big", "Tiny"))
    _git(root, "init", "-q")
    _git(root, "-c", "user.name=t", "-c", "user.email=t@t", "add", ".")
    _git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "tiny")
    head = _git(root, "rev-parse", "HEAD").strip()
    provenance.code_version.cache_clear()
    monkeypatch.delenv(provenance.COMMIT_VARIABLE, raising=False)
    run_engine("run", root / "notebooks" / "tiny.md", "--env", "python", "--label", "cpu", "--plain")
    result = json.loads((root / "outputs" / "tiny" / "cpu" / "make" / "result.json").read_text())
    assert result["code"]["commit"] == head and result["code"]["dirty"] is False and result["code"]["date"]
    view = provenance_view([result], root / "outputs" / "tiny" / "cpu", root)
    assert view["commits"][0]["short"] == head[:9] and view["unrecorded"] == 0
    # a copy without git history says which commit it was made from
    provenance.code_version.cache_clear()
    monkeypatch.setenv(provenance.COMMIT_VARIABLE, head)
    assert provenance.code_version(tmp_path)["commit"] == head
    provenance.code_version.cache_clear()


def test_older_results_show_where_they_were_committed(tmp_path):
    root = tmp_path / "repo"
    run = root / "outputs" / "nb" / "cpu"
    run.mkdir(parents=True)
    (run / "run.json").write_text("{}")
    _git(root, "init", "-q")
    _git(root, "-c", "user.name=t", "-c", "user.email=t@t", "add", ".")
    _git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "results of commit abc1234")
    view = provenance_view([{"cell": "a"}], run, root)
    assert view["unrecorded"] == 1 and view["commits"] == []
    assert view["stored"]["subject"] == "results of commit abc1234"


def test_results_finished_shows_the_span_when_cells_ran_on_different_days():
    """A report re-presented today over measurements of two days ago shows both dates, so the page does
    not pass the re-presentation off as a fresh measurement; cells of one day show one time."""
    from attnbench.notebook.site.summary import notebook_timing

    def cell(started: str, finished: str) -> dict:
        return {"started_at": started, "finished_at": finished, "duration_s": 1.0}

    measured = cell("2026-11-25T12:30:00+00:00", "2026-11-25T12:37:00+00:00")
    presented = cell("2026-11-27T09:10:00+00:00", "2026-11-27T09:10:30+00:00")
    assert notebook_timing([measured, presented])["finished"] == "2026-11-25 to 2026-11-27 09:10 UTC"
    assert notebook_timing([measured])["finished"] == "2026-11-25 12:37 UTC"
    assert notebook_timing([measured, cell("", "not a time")])["finished"] == "2026-11-25 12:37 UTC"
    # knowing the label's machine, the cells that ran elsewhere (presented again here) are dated apart
    measured["result"] = {"key_parts": {"machine": "gpu-box"}}
    presented["result"] = {"key_parts": {"machine": "laptop"}}
    assert notebook_timing([measured, presented], "gpu-box")["finished"] == (
        "2026-11-25 12:37 UTC; presented again 2026-11-27 09:10 UTC"
    )
    # a presentation with no time it finished at says nothing of it
    undated = {**presented, "finished_at": "not a time"}
    assert notebook_timing([measured, undated], "gpu-box")["finished"] == "2026-11-25 12:37 UTC"
    # a presentation older than the last measurement (a stale page) is not "presented again"
    remeasured = cell("2026-11-28T08:00:00+00:00", "2026-11-28T08:05:00+00:00")
    remeasured["result"] = {"key_parts": {"machine": "gpu-box"}}
    assert notebook_timing([measured, remeasured, presented], "gpu-box")["finished"] == (
        "2026-11-25 to 2026-11-28 08:05 UTC; last presented 2026-11-27 09:10 UTC, before the last measurement"
    )
    assert (
        notebook_timing([measured, presented], "gpu-box")["took"]
        == notebook_timing([measured, presented])["took"]
    )
