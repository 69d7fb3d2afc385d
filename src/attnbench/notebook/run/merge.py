"""Bring results measured elsewhere into outputs/: the label folders of another outputs tree (a GPU lease's
archive, a copy back from a cluster job), cell by cell, losing nothing.

    attnbench merge /work/.device/7/outputs.tgz     # an archive, a folder holding outputs/, or an outputs folder

A run on another machine writes whole label folders, but one that started without this checkout's
outputs/ (a lease that travelled light) holds only the cells it ran: unpacking it over outputs/ would
drop the others, and its failed cells would replace good results. So, per cell folder of the source (one
holding result.json), the store's rule (store.py) applies across machines:

- a good result takes the local cell folder, unless the local result finished later (then it is kept);
- a failed or interrupted one goes beside a local good result, into `<cell>/last-failure/`, and takes
  the folder only where there is no good result to keep;
- cells the source does not have stay as they are. run.json and notebook.md (the run as it ran) come
  from the source when its run finished later.

Each label folder is merged under its run lock (runlock.py), so no run writes into it meanwhile.
"""

from __future__ import annotations

import os
import shutil
import tarfile
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from attnbench.notebook.run import runlock
from attnbench.notebook.run.records import CellResult, RecordError, RunRecord, Status
from attnbench.notebook.run.store import (
    FAILURE_DIR,
    RESULT_FILE,
    RUN_FILE,
    SNAPSHOT_FILE,
    TMP_PREFIX,
    artifacts_digest,
    check_label,
    check_notebook_name,
    load_result,
    load_run,
    remove,
    unsafe_entries,
)

ARCHIVE_SUFFIXES = (".tgz", ".tar.gz", ".tar")
FAILURE_BESIDE = "failure kept beside the good result"
KEPT = "kept (the result here finished later)"
SAME = "already here"


class MergeError(Exception):
    """A source that cannot be merged: named, with why; nothing was changed."""


@dataclass(frozen=True)
class Step:
    """What the merge did (or, with dry_run, would do) with one cell folder of the source."""

    folder: str  # <notebook>/<label>/<cell>
    action: str  # added, replaced, failure kept beside the good result, kept (newer here)
    status: str  # the source result's status
    finished: str


@contextmanager
def source_outputs(source: Path) -> Iterator[Path]:
    """The outputs tree inside `source`: an archive (unpacked into a temporary folder, links and paths
    outside it refused), a folder holding outputs/, or an outputs folder itself."""
    source = Path(source)
    if not source.exists():
        raise MergeError(f"{source}: no such file or folder")
    if source.is_file():
        if not source.name.endswith(ARCHIVE_SUFFIXES):
            raise MergeError(f"{source}: not an archive ({', '.join(ARCHIVE_SUFFIXES)}) or a folder")
        with tempfile.TemporaryDirectory(prefix="attnbench-merge-") as tmp:
            try:
                with tarfile.open(source) as archive:
                    archive.extractall(tmp, filter="data")  # refuses absolute paths, '..' and links out
            except (tarfile.TarError, OSError, EOFError) as exc:
                raise MergeError(f"{source}: cannot unpack ({exc})") from exc
            yield _outputs_in(Path(tmp), source)
        return
    yield _outputs_in(source, source)


def _outputs_in(folder: Path, named: Path) -> Path:
    root = folder / "outputs" if (folder / "outputs").is_dir() else folder
    if not label_folders(root):
        raise MergeError(f"{named}: holds no outputs/<notebook>/<label>/<cell>/result.json")
    return root


def label_folders(root: Path) -> list[Path]:
    """`<notebook>/<label>` folders under `root` with at least one cell result or a run.json."""
    found = []
    for label in sorted(p for p in root.glob("*/*") if p.is_dir() and not p.name.startswith(".")):
        if (label / RUN_FILE).is_file() or any(label.glob(f"*/{RESULT_FILE}")):
            found.append(label)
    return found


def merge(
    source: Path, outputs: Path, *, dry_run: bool = False, lock_timeout: float | None = 0.0
) -> list[Step]:
    """Merge every label folder of `source` into `outputs`; the steps taken, in order."""
    steps: list[Step] = []
    with source_outputs(source) as root:
        folders = label_folders(root)
        for folder in folders:  # every name and entry checked before anything is written
            _check(folder, root)
        for folder in folders:
            target = Path(outputs) / folder.relative_to(root)
            if dry_run:
                steps += _merge_label(folder, target, dry_run=True)
                continue
            target.mkdir(parents=True, exist_ok=True)
            try:
                lock = runlock.acquire(target, timeout=lock_timeout, notify=lambda _: None)
            except runlock.LockBusy as exc:
                raise MergeError(f"{exc} (merged so far: {summary(steps)})") from exc
            try:
                steps += _merge_label(folder, target, dry_run=False)
            finally:
                lock.release()
    return steps


def _check(folder: Path, root: Path) -> None:
    notebook, label = folder.relative_to(root).parts
    try:
        check_notebook_name(notebook)
        check_label(label)
    except ValueError as exc:
        raise MergeError(f"{folder.relative_to(root)}: {exc}") from exc
    for path, what in unsafe_entries(folder):
        raise MergeError(f"{path.relative_to(root)} is {what}: a result folder holds regular files only")
    for result in sorted(folder.glob(f"*/{RESULT_FILE}")):
        try:
            load_result(result.parent)
        except RecordError as exc:
            raise MergeError(f"{result.relative_to(root)}: {exc}") from exc


def _merge_label(source: Path, target: Path, *, dry_run: bool) -> list[Step]:
    steps = []
    name = "/".join(source.parts[-2:])
    for cell in sorted(
        p for p in source.iterdir() if (p / RESULT_FILE).is_file() and not p.name.startswith(".")
    ):
        incoming = load_result(cell)
        here = target / cell.name
        # the same run's record and artifacts: merging an archive twice changes nothing
        same = _result(here) == incoming and artifacts_digest(here) == artifacts_digest(cell)
        action = SAME if same else _action(incoming, _result(here), _result(here / FAILURE_DIR))
        steps.append(Step(f"{name}/{cell.name}", action, incoming.status.value, incoming.finished))
        if dry_run or action in (KEPT, SAME):
            continue
        if action == FAILURE_BESIDE:
            _replace(cell, here / FAILURE_DIR, drop=(FAILURE_DIR,))
        else:
            _replace(cell, here)
    if not dry_run and _later(load_run(source), load_run(target)):
        for file in (RUN_FILE, SNAPSHOT_FILE):
            if (source / file).is_file():
                shutil.copy2(source / file, target / file)
    return steps


def _action(incoming: CellResult, here: CellResult | None, failure_here: CellResult | None) -> str:
    """What to do with `incoming` where `here` is stored (and `failure_here` beside it)."""
    if here is None:
        return "added"
    if incoming.status == Status.OK:
        if here.status == Status.OK and _stamp(here.finished) > _stamp(incoming.finished):
            return KEPT
        return "replaced"  # a good result takes the place of an older good one or of a failure
    if here.status == Status.OK:
        if failure_here is not None and _stamp(failure_here.finished) > _stamp(incoming.finished):
            return KEPT
        return FAILURE_BESIDE
    return KEPT if _stamp(here.finished) > _stamp(incoming.finished) else "replaced"


def _result(folder: Path) -> CellResult | None:
    try:
        return load_result(folder) if folder.is_dir() else None
    except RecordError:
        return None  # a broken record here is replaced by the source's


def _later(incoming: RunRecord | None, here: RunRecord | None) -> bool:
    if incoming is None:
        return False
    return here is None or _stamp(incoming.finished or "") >= _stamp(here.finished or "")


def _stamp(iso: str) -> datetime:
    try:
        return datetime.fromisoformat(iso)
    except ValueError:
        return datetime.min.replace(tzinfo=UTC)  # an unreadable time is older than any


def _replace(source: Path, final: Path, drop: tuple[str, ...] = ()) -> None:
    """Copy `source` to `final` through a temporary folder beside it, then swap: never half a folder."""
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.with_name(f"{TMP_PREFIX}{final.name}-{uuid.uuid4().hex[:8]}")
    shutil.copytree(source, tmp, ignore=shutil.ignore_patterns(*drop) if drop else None)
    old = None
    if final.exists():
        old = final.with_name(f"{TMP_PREFIX}old-{final.name}-{uuid.uuid4().hex[:8]}")
        os.rename(final, old)
    os.rename(tmp, final)
    if old is not None:
        remove(old)


def summary(steps: list[Step]) -> str:
    counts: dict[str, int] = {}
    for step in steps:
        key = step.action.split(" (")[0]
        counts[key] = counts.get(key, 0) + 1
    parts = ", ".join(f"{n} {what}" for what, n in counts.items())
    return f"{len(steps)} cell results: {parts}" if steps else "no cell results"
