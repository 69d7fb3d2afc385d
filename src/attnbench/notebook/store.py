"""The outputs/ folder: layout, atomic writes, and reading stored results back.

    outputs/<notebook>/<label>/run.json       the last run of the notebook on that machine label
    outputs/<notebook>/<label>/notebook.md    the notebook source as it ran
    outputs/<notebook>/<label>/<cell>/        result.json, stdout.txt, stderr.txt, artifacts/

A cell folder is built as `.tmp-<cell>-<random>/` beside its final place and renamed into place
after result.json (written last) is complete, so an interrupted or killed run never leaves a folder
that looks complete. `.tmp-*` leftovers are ignored by readers and removed by `attnbench clean`.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

RUN_FILE = "run.json"
RESULT_FILE = "result.json"
SNAPSHOT_FILE = "notebook.md"
STDOUT_FILE = "stdout.txt"
STDERR_FILE = "stderr.txt"
ARTIFACTS_DIR = "artifacts"
TMP_PREFIX = ".tmp-"
ROOT_MARKERS = ("pyproject.toml", ".git")


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def find_root(notebook_path: Path) -> Path:
    """The project folder holding cells/ and outputs/ for a notebook: the nearest ancestor with a
    pyproject.toml or .git; else the parent of a `notebooks/` folder; else the notebook's folder."""
    folder = Path(notebook_path).resolve().parent
    for candidate in (folder, *folder.parents):
        if any((candidate / marker).exists() for marker in ROOT_MARKERS):
            return candidate
    return folder.parent if folder.name == "notebooks" else folder


# run.json states of a cell that did not produce a good result in this run
BAD_STATES = frozenset({"failed", "timeout", "interrupted", "skipped", "missing-deps"})


def check_label(label: str) -> str:
    """A machine label names one folder under outputs/<notebook>/; anything else is a ValueError."""
    if not label or "/" in label or "\\" in label or label.startswith(".") or Path(label).is_absolute():
        raise ValueError(f"--label {label!r}: a label is one folder name (no '/', not starting with '.')")
    return label


def run_dir(outputs: Path, notebook: str, label: str) -> Path:
    return outputs / notebook / label


def cell_dir(outputs: Path, notebook: str, label: str, cell: str) -> Path:
    return outputs / notebook / label / cell


def artifacts_dir(outputs: Path, notebook: str, label: str, cell: str) -> Path:
    return cell_dir(outputs, notebook, label, cell) / ARTIFACTS_DIR


# --- writing --------------------------------------------------------------------------------------


def write_text_atomic(path: Path, text: str) -> None:
    """Write `path` through a `.tmp-` sibling renamed over it: readers see the old or the new file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{TMP_PREFIX}{path.name}-{uuid.uuid4().hex[:8]}")
    tmp.write_text(text)
    os.replace(tmp, path)


def write_json_atomic(path: Path, data: Any) -> None:
    write_text_atomic(path, json.dumps(data, indent=2, default=str) + "\n")


class StagedCell:
    """A cell folder under construction: `.tmp-<cell>-<random>/` with artifacts/ as the working dir."""

    def __init__(self, run_folder: Path, cell: str):
        run_folder.mkdir(parents=True, exist_ok=True)
        self.final = run_folder / cell
        # Not tempfile.mkdtemp: its 0700 folder would become the committed cell folder; mkdir honours
        # the umask like every other file the run writes.
        self.path = run_folder / f"{TMP_PREFIX}{cell}-{uuid.uuid4().hex[:12]}"
        self.path.mkdir()
        self.artifacts = self.path / ARTIFACTS_DIR
        self.artifacts.mkdir()
        self.stdout = self.path / STDOUT_FILE
        self.stderr = self.path / STDERR_FILE

    def keep_only(self, globs: list[str]) -> list[str]:
        """Delete artifacts matching none of `globs` (Path.glob patterns; empty = keep all).
        Returns the kept files as sorted relative POSIX paths."""
        files = {p for p in self.artifacts.rglob("*") if p.is_file() or p.is_symlink()}
        if globs:
            kept = {p for g in globs for p in self.artifacts.glob(g) if p in files}
            for path in files - kept:
                path.unlink()
            for folder in sorted((p for p in self.artifacts.rglob("*") if p.is_dir()), reverse=True):
                if not any(folder.iterdir()):
                    folder.rmdir()
            files = kept
        return sorted(p.relative_to(self.artifacts).as_posix() for p in files)

    def commit(self, result: dict[str, Any]) -> Path:
        """Write result.json (last) and move the folder into place, replacing an older one."""
        (self.path / RESULT_FILE).write_text(json.dumps(result, indent=2, default=str) + "\n")
        old = None
        if self.final.exists():
            old = self.final.with_name(f"{TMP_PREFIX}old-{self.final.name}-{uuid.uuid4().hex[:8]}")
            os.rename(self.final, old)
        os.rename(self.path, self.final)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        return self.final


def write_run(folder: Path, data: dict[str, Any]) -> bool:
    """Write run.json unless it already holds `data` (a fully cached run changes no file)."""
    if read_run(folder) == json.loads(json.dumps(data, default=str)):
        return False
    write_json_atomic(folder / RUN_FILE, data)
    return True


# --- reading (used by run and status) -------------------------------------------------------------


def _read_json(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def read_run(run_folder: Path) -> dict | None:
    """`outputs/<nb>/<label>/run.json` as a dict, or None if absent/unreadable."""
    return _read_json(Path(run_folder) / RUN_FILE)


def read_result(cell_folder: Path) -> dict | None:
    """`outputs/<nb>/<label>/<cell>/result.json` as a dict, or None if absent/unreadable.
    A folder without result.json is never a complete result."""
    return _read_json(Path(cell_folder) / RESULT_FILE)


def leftovers(outputs: Path, notebook: str | None = None) -> list[Path]:
    """`.tmp-*` files and folders left by interrupted runs in `outputs/<nb>/<label>/` (one notebook, or all)."""
    outputs = Path(outputs)
    if not outputs.is_dir():
        return []
    return sorted(outputs.glob(f"{notebook or '*'}/*/{TMP_PREFIX}*"))
