"""Bring results measured elsewhere into outputs/: the label folders of another outputs tree (a GPU lease's
archive, a copy back from a cluster job), cell by cell, losing nothing.

    attnbench merge /work/.device/7/outputs.tgz     # an archive, a folder holding outputs/, or an outputs folder

A run on another machine writes whole label folders, but one that started without this checkout's
outputs/ (a lease that travelled light) holds only the cells it ran: unpacking it over outputs/ would
drop the others, and its failed cells would replace good results. So, per cell folder of the source (one
holding result.json), the store's rule (store.py) applies across machines:

- a good result takes the cell's place unless the good result here finished later; it keeps the newest
  failure of either side in `<cell>/last-failure/` where that failure came after it;
- a failed or interrupted one goes beside a good result here that finished before it, into
  `<cell>/last-failure/`, and takes the cell's place only where there is no good result to keep;
- cells the source does not have stay; the same result merged twice changes nothing;
- run.json's cell entries are merged (the later run's entry for a cell both have), and notebook.md (the
  notebook as it ran) comes from the source when its run finished later.

Everything is read and checked before anything is written; each label folder is merged under its run lock
(runlock.py), so no run writes into it meanwhile.
"""

from __future__ import annotations

import dataclasses
import shutil
import tarfile
import tempfile
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from attnbench.notebook.run import runlock
from attnbench.notebook.run.records import CellResult, RecordError, Status
from attnbench.notebook.run.store import (
    FAILURE_DIR,
    RESULT_FILE,
    SNAPSHOT_FILE,
    TMP_PREFIX,
    artifacts_digest,
    check_label,
    check_notebook_name,
    file_kind,
    load_result,
    load_run,
    replace_folder,
    unsafe_entries,
    write_run,
    write_text_atomic,
)

ARCHIVE_SUFFIXES = (".tgz", ".tar.gz", ".tar")
ADDED, REPLACED, SAME = "added", "replaced", "already here"
FAILURE_BESIDE = "failure kept beside the good result"
KEPT = "kept (the result here finished later)"


class MergeError(Exception):
    """A source that cannot be merged, named with why. Raised before anything is written, except a run
    lock held by a live run, whose message says what was merged before it."""


@dataclass(frozen=True)
class Step:
    """What the merge did (or, with dry_run, would do) with one cell folder of the source."""

    folder: str  # <notebook>/<label>/<cell>
    action: str  # ADDED, REPLACED, SAME, FAILURE_BESIDE or KEPT
    status: str  # the source result's status
    finished: str


def merge(
    source: Path, outputs: Path, *, dry_run: bool = False, lock_timeout: float | None = 0.0
) -> list[Step]:
    """Merge every label folder of `source` into the existing folder `outputs`; the steps, in order."""
    outputs = Path(outputs)
    steps: list[Step] = []
    with source_outputs(source) as root:
        if not outputs.is_dir():
            raise MergeError(f"{outputs}: no outputs folder here (name one with --outputs)")
        if root.resolve() == outputs.resolve():
            raise MergeError(f"{source}: is the outputs folder it would merge into")
        labels = label_folders(root)
        try:
            for folder in labels:  # every name, entry, record and time read before anything is written
                _check(folder, root)
        except MergeError as exc:
            raise MergeError(f"{source}: {exc}") from None
        for folder in labels:
            target = outputs / folder.relative_to(root)
            if dry_run:
                steps += _merge_label(folder, target, write=False)
                continue
            try:
                lock = runlock.acquire(target, timeout=lock_timeout, notify=lambda _: None)
            except runlock.LockBusy as exc:
                raise MergeError(f"{exc} (merged before it: {summary(steps)})") from exc
            try:
                steps += _merge_label(folder, target, write=True)
            finally:
                lock.release()
    return steps


@contextmanager
def source_outputs(source: Path) -> Iterator[Path]:
    """The outputs tree inside `source`: an archive (unpacked into a temporary folder; absolute paths,
    '..' and links out are refused), a folder holding outputs/, or an outputs folder itself."""
    source = Path(source)
    if not source.exists():
        raise MergeError(f"{source}: no such file or folder")
    if not source.is_file():
        yield _outputs_in(source, source)
        return
    if not source.name.endswith(ARCHIVE_SUFFIXES):
        raise MergeError(f"{source}: not an archive ({', '.join(ARCHIVE_SUFFIXES)}) or a folder")
    with tempfile.TemporaryDirectory(prefix="attnbench-merge-") as tmp:
        try:
            with tarfile.open(source) as archive:
                archive.extractall(tmp, filter="data")
        except (tarfile.TarError, OSError, EOFError) as exc:
            raise MergeError(f"{source}: cannot unpack ({exc})") from exc
        yield _outputs_in(Path(tmp), source)


def _outputs_in(folder: Path, named: Path) -> Path:
    root = folder / "outputs" if (folder / "outputs").is_dir() else folder
    if not label_folders(root):
        raise MergeError(f"{named}: holds no outputs/<notebook>/<label>/<cell>/result.json")
    return root


def label_folders(root: Path) -> list[Path]:
    """`<notebook>/<label>` folders under `root` holding at least one cell result."""
    return [
        label
        for label in sorted(root.glob("*/*"))
        if label.is_dir() and not _hidden(label) and not _hidden(label.parent) and _cells(label)
    ]


def _hidden(path: Path) -> bool:
    return path.name.startswith(".")  # .tmp-* leftovers, .run.lock


def _cells(label: Path) -> list[Path]:
    return sorted(p for p in label.iterdir() if not _hidden(p) and (p / RESULT_FILE).is_file())


def _check(folder: Path, root: Path) -> None:
    rel = folder.relative_to(root)
    try:
        check_notebook_name(rel.parts[0])
        check_label(rel.parts[1])
    except ValueError as exc:
        raise MergeError(f"{rel}: {exc}") from exc
    for entry in sorted(p for p in folder.iterdir() if not _hidden(p)):
        if file_kind(entry) not in ("file", "folder"):
            raise MergeError(
                f"{entry.relative_to(root)} is a {file_kind(entry)}: a label folder holds files and folders"
            )
        for path, what in unsafe_entries(entry):  # per cell: a link into another cell is refused too
            raise MergeError(f"{path.relative_to(root)} is {what}: a result folder holds regular files only")
    # the source's records must all read (what is here is read leniently: a broken record here is replaced)
    for record in [
        f for cell in _cells(folder) for f in (cell, cell / FAILURE_DIR) if (f / RESULT_FILE).is_file()
    ]:
        try:
            _stamp(load_result(record).finished, record / RESULT_FILE)
        except RecordError as exc:
            raise MergeError(f"{(record / RESULT_FILE).relative_to(root)}: {exc.problem}") from exc
    try:
        run = load_run(folder)
        if run is not None and run.finished:
            _stamp(run.finished, folder / "run.json")
    except RecordError as exc:
        raise MergeError(f"{rel}/run.json: {exc.problem}") from exc


def _merge_label(source: Path, target: Path, *, write: bool) -> list[Step]:
    name = "/".join(source.parts[-2:])
    steps = []
    for cell in _cells(source):
        here, incoming = target / cell.name, load_result(cell)
        action = _action(cell, incoming, here)
        steps.append(Step(f"{name}/{cell.name}", action, incoming.status.value, incoming.finished))
        if write and action not in (SAME, KEPT):
            _write_cell(cell, incoming, here, action)
    if write:
        _merge_run(source, target)
    return steps


def _action(cell: Path, incoming: CellResult, here: Path) -> str:
    stored = _result(here)
    if stored is None:
        return REPLACED if (here / RESULT_FILE).exists() else ADDED  # a broken record here is replaced
    if _same(cell, here) or (incoming.status != Status.OK and _same(cell, here / FAILURE_DIR)):
        return SAME
    later_here = _stamp(stored.finished) > _stamp(incoming.finished)
    if incoming.status == Status.OK:  # a failure here, later or not, moves beside it (_write_cell)
        return KEPT if stored.status == Status.OK and later_here else REPLACED
    if stored.status == Status.OK:
        failure = _result(here / FAILURE_DIR)
        if later_here or (failure is not None and _stamp(failure.finished) > _stamp(incoming.finished)):
            return KEPT  # what came after this failure here wins
        return FAILURE_BESIDE
    return KEPT if later_here else REPLACED


def _write_cell(cell: Path, incoming: CellResult, here: Path, action: str) -> None:
    """Build the cell's new folder beside it (`.tmp-<cell>-…`, where leftovers are looked for), then swap."""
    built = here.with_name(f"{TMP_PREFIX}{here.name}-{uuid.uuid4().hex[:12]}")
    if action == FAILURE_BESIDE:
        _copy_cell(here, built)
        _copy_cell(cell, built / FAILURE_DIR)
    else:
        _copy_cell(cell, built)
        failures = [f for f in (cell / FAILURE_DIR, here / FAILURE_DIR, here) if _failure(f)]
        failures = [f for f in failures if _stamp(_result(f).finished) > _stamp(incoming.finished)]
        if incoming.status == Status.OK and failures:  # a failure after this good result stays beside it
            _copy_cell(max(failures, key=lambda f: _stamp(_result(f).finished)), built / FAILURE_DIR)
    replace_folder(built, here, beside=here)


def _copy_cell(cell: Path, to: Path) -> None:
    """A cell folder's files, without its own last-failure/ (only at its top: artifacts keep any name)."""
    shutil.copytree(cell, to, ignore=lambda folder, names: [FAILURE_DIR] if Path(folder) == cell else [])


def _merge_run(source: Path, target: Path) -> None:
    incoming = load_run(source)
    try:
        here = load_run(target)
    except RecordError:
        here = None  # a broken run.json here is replaced
    if incoming is None:
        return
    if here is None or _stamp(incoming.finished) >= _stamp(here.finished):
        newer, older = incoming, here
        if (source / SNAPSHOT_FILE).is_file():
            write_text_atomic(target / SNAPSHOT_FILE, (source / SNAPSHOT_FILE).read_text(encoding="utf-8"))
    else:
        newer, older = here, incoming
    order = list(older.cells) if older else []
    order += [c for c in newer.cells if c not in order]
    cells = {c: newer.cells[c] if c in newer.cells else older.cells[c] for c in order}
    write_run(target, dataclasses.replace(newer, cells=cells))


def _result(folder: Path) -> CellResult | None:
    try:
        return load_result(folder) if folder.is_dir() else None
    except RecordError:
        return None


def _failure(folder: Path) -> bool:
    result = _result(folder)
    return result is not None and result.status != Status.OK


def _same(cell: Path, here: Path) -> bool:
    return _result(here) == load_result(cell) and artifacts_digest(here) == artifacts_digest(cell)


def _stamp(iso: str | None, path: Path | None = None) -> datetime:
    """An ISO 8601 time; without a zone it is UTC (what the engine writes). Unreadable: a RecordError
    when `path` names its file, else the oldest time there is."""
    try:
        stamp = datetime.fromisoformat(iso or "")
    except ValueError:
        if path is not None:
            raise RecordError(path, f"finished is {iso!r}: not an ISO 8601 time") from None
        return datetime.min.replace(tzinfo=UTC)
    return stamp if stamp.tzinfo else stamp.replace(tzinfo=UTC)


def summary(steps: list[Step]) -> str:
    parts = ", ".join(f"{n} {what}" for what, n in Counter(step.action for step in steps).items())
    return f"{len(steps)} cell results: {parts}" if steps else "no cell results"
