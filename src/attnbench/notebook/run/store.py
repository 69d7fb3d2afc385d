"""The outputs/ folder: layout, atomic writes, and reading and writing the records stored in it (records.py).

    outputs/<notebook>/<label>/run.json       the last run of the notebook on that machine label (RunRecord)
    outputs/<notebook>/<label>/notebook.md    the notebook source as it ran
    outputs/<notebook>/<label>/<cell>/        result.json (CellResult), stdout.txt, stderr.txt, artifacts/
    outputs/<notebook>/<label>/<cell>/last-failure/   the same files of a failed or interrupted re-run

A failed or interrupted run never replaces a good result: the cell folder keeps its last good
result (result.json, artifacts/) and the failure is stored beside it in `last-failure/`; the next
good run replaces the whole folder.

A cell folder is built as `.tmp-<cell>-<random>/` beside its final place and renamed into place
after result.json (written last) is complete, so an interrupted or killed run never leaves a folder
that looks complete. `.tmp-*` leftovers are ignored by readers; a run removes those of its run
folders once it holds their lock (see runlock.py), and `attnbench clean` removes them too.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from attnbench.notebook.document.model import clip
from attnbench.notebook.run.records import (
    CellResult,
    RecordError,
    RunRecord,
    Status,
)

RUN_FILE = "run.json"
RESULT_FILE = "result.json"
SNAPSHOT_FILE = "notebook.md"
STDOUT_FILE = "stdout.txt"
STDERR_FILE = "stderr.txt"
ARTIFACTS_DIR = "artifacts"
FAILURE_DIR = "last-failure"  # <cell>/last-failure/: a failed re-run, beside the last good result it kept
TMP_PREFIX = ".tmp-"
ROOT_MARKERS = ("pyproject.toml", ".git")
MAX_LABEL_CHARS = 100  # a label is a folder name and a page name (<label>.html); NAME_MAX is 255 bytes


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


def check_label(label: str) -> str:
    """A machine label names one folder under outputs/<notebook>/; anything else is a ValueError."""
    if not label or "/" in label or "\\" in label or label.startswith(".") or Path(label).is_absolute():
        raise ValueError(f"--label {label!r}: a label is one folder name (no '/', not starting with '.')")
    if len(label) > MAX_LABEL_CHARS or any(ch < " " for ch in label):
        raise ValueError(
            f"--label {clip(label, 41)!r} ({len(label)} characters): a label is at most {MAX_LABEL_CHARS} "
            "printable characters"
        )
    return label


def check_notebook_name(name: str) -> str:
    """A notebook's name (its file name without .md) names outputs/<name>/, cells/<name>/ and pages:
    the same rules as a label; anything else is a ValueError."""
    try:
        return check_label(name)
    except ValueError as e:
        raise ValueError(
            str(e).replace("--label", "notebook file name", 1).replace("a label", "a notebook name")
        ) from None


def shown(path: Path, root: Path | None = None) -> str:
    """`path` as a message shows it: relative to `root` (default: the working directory) when inside it."""
    try:
        return path.resolve().relative_to((root or Path.cwd()).resolve()).as_posix()
    except ValueError:
        return str(path)


def file_kind(path: Path) -> str:
    """'file', 'folder', 'link', or what a cell's artifacts must not be: 'FIFO (named pipe)', 'socket',
    'device', 'missing'. Never opens or follows `path`."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return "missing"
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "folder"
    if stat.S_ISLNK(mode):
        return "link"
    if stat.S_ISFIFO(mode):
        return "FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "socket"
    return "device"


def unsafe_entries(folder: Path) -> list[tuple[Path, str]]:
    """Entries under `folder` the engine must never open or follow: FIFOs, sockets, devices, and links
    that point outside `folder` (or nowhere). [(path, what it is)]; walks without following links."""
    folder = Path(folder)
    if file_kind(folder) != "folder":
        return []
    root = folder.resolve()
    bad = []
    for top, dirs, files in os.walk(folder, followlinks=False):
        for name in sorted(dirs + files):
            path = Path(top) / name
            kind = file_kind(path)
            if kind in ("file", "folder"):
                continue
            if kind == "link":
                target = path.resolve()
                if target.is_relative_to(root) and file_kind(target) in ("file", "folder"):
                    continue
                kind = f"a link to {os.readlink(path)} (outside {folder.name}/)"
            else:
                kind = f"a {kind}"
            bad.append((path, kind))
    return bad


def run_dir(outputs: Path, notebook: str, label: str) -> Path:
    return outputs / notebook / label


def cell_dir(outputs: Path, notebook: str, label: str, cell: str) -> Path:
    return outputs / notebook / label / cell


def artifacts_dir(outputs: Path, notebook: str, label: str, cell: str) -> Path:
    return cell_dir(outputs, notebook, label, cell) / ARTIFACTS_DIR


# --- typed records: result.json and run.json ------------------------------------------------------


def _load(path: Path, make):
    """The record at `path`, None when there is no file; RecordError when it is not a valid record."""
    kind = file_kind(path)
    if kind == "missing":
        return None
    if kind != "file":  # a FIFO would hang the read, a link could point anywhere
        raise RecordError(path, f"is a {kind}, not a regular file")
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as e:
        raise RecordError(path, f"cannot be read: {e}") from None
    try:
        data = json.loads(text)
    except ValueError as e:
        raise RecordError(path, f"is not valid JSON ({e})") from None
    return make(data, path)


def load_result(cell_folder: Path) -> CellResult | None:
    """`<cell folder>/result.json`; None if absent (a folder without one is never a complete result)."""
    return _load(Path(cell_folder) / RESULT_FILE, CellResult.from_json)


def load_run(run_folder: Path) -> RunRecord | None:
    """`<run folder>/run.json`; None if absent."""
    return _load(Path(run_folder) / RUN_FILE, RunRecord.from_json)


# --- writing --------------------------------------------------------------------------------------


def write_text_atomic(path: Path, text: str) -> None:
    """Write `path` through a `.tmp-` sibling renamed over it: readers see the old or the new file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{TMP_PREFIX}{path.name}-{uuid.uuid4().hex[:8]}")
    tmp.write_text(text)
    os.replace(tmp, path)


def _json_text(data: Any) -> str:
    return json.dumps(data, indent=2, default=str) + "\n"


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

    def remove_unsafe(self) -> list[str]:
        """Remove what a cell left in artifacts/ that must never be kept (FIFOs, sockets, devices,
        links out of artifacts/); returns what each was, named ("artifacts/p: a FIFO (named pipe)")."""
        found = []
        for path, what in unsafe_entries(self.artifacts):
            found.append(f"{ARTIFACTS_DIR}/{path.relative_to(self.artifacts).as_posix()}: {what}")
            path.unlink(missing_ok=True)
        return found

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

    def commit(self, result: CellResult) -> Path:
        """Write result.json (last) and move the folder into place, replacing an older one; where the
        result is a failure and the place holds a good result, the good result stays and the failure
        goes to `<cell>/last-failure/` (replacing an older failure). Returns where it went."""
        (self.path / RESULT_FILE).write_text(_json_text(result.to_json()))
        target = self.final
        if result.status != Status.OK and good_result(self.final) is not None:
            target = self.final / FAILURE_DIR
        replace_folder(self.path, target, beside=self.final)
        return target


def replace_folder(built: Path, target: Path, *, beside: Path) -> None:
    """Move the finished folder `built` to `target`, replacing what is there: the old one is first renamed
    to `.tmp-old-…` beside `beside` (the cell folder: leftovers stay where `leftovers` finds them), then
    removed, so a reader sees the old folder or the new one, never half of one."""
    old = None
    if target.exists() or target.is_symlink():
        old = beside.with_name(f"{TMP_PREFIX}old-{beside.name}-{uuid.uuid4().hex[:8]}")
        os.rename(target, old)
    os.rename(built, target)
    if old is not None:
        remove(old)


def good_result(cell_folder: Path) -> CellResult | None:
    """The good (status ok) result stored in `cell_folder`, else None (none, a failure, or broken)."""
    folder = Path(cell_folder)
    if folder.is_symlink() or not folder.is_dir():
        return None
    try:
        result = load_result(folder)
    except RecordError:
        return None
    return result if result is not None and result.status == Status.OK else None


def load_failure(cell_folder: Path) -> CellResult | None:
    """The failed re-run kept beside a good result (`<cell>/last-failure/result.json`), else None."""
    try:
        return load_result(Path(cell_folder) / FAILURE_DIR)
    except RecordError:
        return None


def write_run(folder: Path, run: RunRecord) -> bool:
    """Write run.json unless it already holds `run` (a fully cached run changes no file)."""
    text = _json_text(run.to_json())
    try:
        if json.loads((folder / RUN_FILE).read_text(encoding="utf-8")) == json.loads(text):
            return False
    except (OSError, ValueError):
        pass
    write_text_atomic(folder / RUN_FILE, text)
    return True


# --- artifacts as inputs of downstream cells --------------------------------------------------------

_DIGESTS: dict[tuple[Path, int, int], str] = {}


def artifacts_digest(cell_folder: Path) -> str | None:
    """sha256 over the committed artifacts of a cell (relative path and content of every file), or
    None when the folder holds no complete result. A downstream cell's key includes it, so re-running
    an upstream cell that writes something else makes its dependents stale.

    Memoised per result.json inode and mtime: a cell folder is only ever replaced whole."""
    folder = Path(cell_folder)
    try:
        stat = (folder / RESULT_FILE).stat()
    except FileNotFoundError:
        return None
    memo = (folder.resolve(), stat.st_ino, stat.st_mtime_ns)
    if memo not in _DIGESTS:
        digest = hashlib.sha256()
        root = folder / ARTIFACTS_DIR
        files = sorted(p for p in root.rglob("*") if not p.is_dir()) if root.is_dir() else []
        unsafe = dict(unsafe_entries(root))
        if unsafe:  # never opened: a FIFO would hang the run, a link could read anything
            path, what = next(iter(unsafe.items()))
            raise RecordError(path, f"is {what}: a cell's artifacts must be regular files")
        for path in files:
            digest.update(path.relative_to(root).as_posix().encode() + b"\0")
            if file_kind(path) == "link":  # a link inside artifacts/: what it says
                digest.update(b"link:" + os.readlink(path).encode())
                continue
            with path.open("rb") as f:
                digest.update(hashlib.file_digest(f, "sha256").digest())
        _DIGESTS[memo] = digest.hexdigest()
    return _DIGESTS[memo]


def leftovers(outputs: Path, notebook: str | None = None, label: str | None = None) -> list[Path]:
    """`.tmp-*` files and folders left by interrupted runs in `outputs/<nb>/<label>/`."""
    outputs = Path(outputs)
    if not outputs.is_dir():
        return []
    return sorted(outputs.glob(f"{notebook or '*'}/{label or '*'}/{TMP_PREFIX}*"))


def remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)
