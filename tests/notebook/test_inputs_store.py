"""attnbench.inputs(), the atomic cell folder, run.json merging, script text, progress."""

from __future__ import annotations

import io
import os
import stat
import sys
from pathlib import Path

import pytest
from engine_helpers import cell, notebook

import attnbench
from attnbench.notebook.document.parse import parse_text
from attnbench.notebook.run import records, store
from attnbench.notebook.run.materialise import script_header
from attnbench.notebook.run.progress import LiveProgress, PlainProgress


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    """No ATTNBENCH_* variables, and a __main__ script inside tmp_path (as `uv run cells/x/y.py`)."""
    for name in ("ATTNBENCH_ROOT", "ATTNBENCH_LABEL", "ATTNBENCH_NOTEBOOK", "ATTNBENCH_OUTPUTS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(
        sys.modules["__main__"], "__file__", str(tmp_path / "cells" / "nb" / "x.py"), raising=False
    )
    return monkeypatch


def _stored(root: Path, nb: str, label: str, cell_id: str) -> Path:
    folder = root / "outputs" / nb / label / cell_id
    (folder / "artifacts").mkdir(parents=True)
    (folder / "result.json").write_text("{}")
    return folder / "artifacts"


def test_inputs_prefers_the_engine_env_vars(clean_env):
    clean_env.setenv("ATTNBENCH_INPUT_MAKE_DATA", "/x/make")
    clean_env.setenv("ATTNBENCH_INPUT_ENVIRONMENT__GPU", "/x/gpu")
    assert attnbench.inputs("make-data") == Path("/x/make")
    assert attnbench.inputs("environment.md:gpu") == Path("/x/gpu")
    clean_env.delenv("ATTNBENCH_INPUT_MAKE_DATA")
    clean_env.setenv("UVNOTE_INPUT_MAKE_DATA", "/x/uvnote")
    assert attnbench.inputs("make-data") == Path("/x/uvnote")


def test_inputs_standalone_finds_stored_results(tmp_path, clean_env):
    (tmp_path / "cells").mkdir()
    mine = _stored(tmp_path, "nb", "lab", "up")
    only = _stored(tmp_path, "environment", "nvidia-h200", "gpu")
    clean_env.chdir(tmp_path / "cells")
    clean_env.setenv("ATTNBENCH_NOTEBOOK", "nb")
    clean_env.setenv("ATTNBENCH_LABEL", "lab")
    assert attnbench.inputs("up") == mine
    assert attnbench.inputs("environment.md:gpu") == only  # the single label that has it
    _stored(tmp_path, "environment", "other", "gpu")
    with pytest.raises(FileNotFoundError) as err:
        attnbench.inputs("environment.md:gpu")
    message = str(err.value)
    assert "ATTNBENCH_INPUT_ENVIRONMENT__GPU" in message and "outputs/environment/lab/gpu" in message
    assert "labels that have it: nvidia-h200, other" in message


def test_inputs_without_a_project_says_what_it_looked_for(tmp_path, clean_env):
    clean_env.chdir(tmp_path)
    clean_env.setenv("ATTNBENCH_NOTEBOOK", "nb")
    with pytest.raises(FileNotFoundError, match=r"ATTNBENCH_INPUT_UP .*no project folder"):
        attnbench.inputs("up")


def _result(key: str = "k") -> records.CellResult:
    return records.CellResult(cell="a", status=records.Status.OK, key=key, started="t0", finished="t1")


def test_staged_cell_is_renamed_into_place_replacing_the_old_one(tmp_path):
    run_folder = tmp_path / "nb" / "cpu"
    first = store.StagedCell(run_folder, "a")
    (first.artifacts / "old.txt").write_text("1")
    first.commit(_result("k1"))
    second = store.StagedCell(run_folder, "a")
    assert store.load_result(second.path) is None  # under construction: no result.json
    (second.artifacts / "new.txt").write_text("2")
    (second.artifacts / "x.log").write_text("2")
    assert second.keep_only(["*.txt"]) == ["new.txt"]
    second.commit(_result("k2"))
    assert store.load_result(run_folder / "a") == _result("k2")
    assert sorted(p.name for p in (run_folder / "a" / "artifacts").iterdir()) == ["new.txt"]
    assert [p.name for p in run_folder.iterdir()] == ["a"]  # no leftovers


def test_run_json_is_rewritten_only_when_it_changes(tmp_path):
    folder = tmp_path / "nb" / "cpu"

    def run(state: records.Status) -> records.RunRecord:
        return records.RunRecord(notebook="nb", cells={"a": records.CellEntry(state)})

    assert store.write_run(folder, run(records.Status.RAN))
    assert not store.write_run(folder, run(records.Status.RAN))
    assert store.write_run(folder, run(records.Status.FAILED))
    assert store.load_run(folder).cells["a"].state == records.Status.FAILED
    assert [p.name for p in folder.iterdir()] == ["run.json"]  # the atomic write left no .tmp- file


def test_cell_folders_follow_the_umask_not_0700(tmp_path):
    # Committed outputs are read by other users and tools: a private 0700 folder would leak into them.
    previous = os.umask(0o022)
    try:
        staged = store.StagedCell(tmp_path / "nb" / "cpu", "a")
        final = staged.commit(_result())
    finally:
        os.umask(previous)
    assert stat.S_IMODE(final.stat().st_mode) == 0o755
    assert stat.S_IMODE((final / "artifacts").stat().st_mode) == 0o755


def test_script_header_merges_the_cells_tool_table():
    nb = parse_text(
        notebook(
            cell(
                "id=a deps=numpy",
                """
        # /// script
        # dependencies = ["pandas>=2"]
        # [tool.uv]
        # exclude-newer = "2025-01-01T00:00:00Z"
        # ///
        print(1)
    """,
            )
        ),
        Path("notebooks/x.md"),
    )
    header = script_header(nb.cells[0], "../../")
    assert header == [
        "# /// script",
        '# requires-python = ">=3.11"',
        '# dependencies = ["attnbench", "numpy", "pandas>=2"]',
        "# [tool.uv]",
        '# exclude-newer = "2025-01-01T00:00:00Z"',
        "# [tool.uv.sources]",
        '# attnbench = { path = "../../", editable = true }',
        "# ///",
    ]


def test_plain_progress_lines():
    stream = io.StringIO()
    progress = PlainProgress(stream, every=0.0)
    progress.begin("header", [("n1", "a"), ("n2", "b")])
    progress.update("n1", "hit")
    progress.update("n2", "running")
    progress.tick({"n2": (12.0, "step 3/10")})
    progress.update("n2", "failed", "exit code 1", 13.0)
    lines = stream.getvalue().splitlines()
    assert lines[0] == "header"
    assert lines[1].split() == ["a", "hit"]
    assert lines[3].split() == ["b", "running", "12.0s", "|", "step", "3/10"]
    assert lines[4].split(None, 2) == ["b", "failed", "13.0s (exit code 1)"]


def test_live_progress_table_shows_cache_state_time_and_latest_output():
    from rich.console import Console

    progress = LiveProgress()
    progress.begin("attnbench run x", [("n1", "gpu"), ("n2", "bench"), ("n3", "plot")])
    progress.update("n1", "hit")
    progress.update("n2", "running")
    progress.tick({"n2": (3.0, "[sweep] 12/48 sdpa_flash fwd")})
    progress.update("n3", "failed", "exit code 1", 2.5)
    progress.live.stop()
    console = Console(record=True, width=120, color_system=None)
    console.print(progress)
    rows = {line.split("│")[0].strip(): [c.strip() for c in line.split("│")[1:]] for line in
            console.export_text().splitlines() if "│" in line}  # fmt: skip
    assert rows["gpu"][:2] == ["hit", "hit"]
    assert rows["bench"][0:2] == ["running", "miss"] and rows["bench"][2].endswith("s")
    assert rows["bench"][3] == "[sweep] 12/48 sdpa_flash fwd"
    assert rows["plot"] == ["failed", "", "2.5s", "exit code 1"]


def test_progress_survives_a_closed_terminal():
    stream = io.StringIO()
    progress = PlainProgress(stream)
    progress.begin("header", [("n1", "a")])
    stream.close()  # as after SIGHUP: writing raises
    progress.update("n1", "interrupted", "interrupted")
    progress.end("1 cells: 1 interrupted")
