"""The typed records stored in outputs/: the one vocabulary of cell states (Status), result.json
(CellResult), run.json (RunRecord, one CellEntry per cell), and the error that names a record's file
when it is not valid. store.py reads and writes them; everything that judges or shows a cell's state
speaks this vocabulary.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from attnbench.notebook.document.validate import FieldError, from_json, shown

# --- the one vocabulary of cell states --------------------------------------------------------------


class Status(StrEnum):
    """Every state a cell can be in, spelled once. result.json's `status` is OK or one of the
    failures; run.json's per-cell `state` is HIT, RAN, NEEDS_GPUS or one of the BAD ones; the runner's
    progress adds WAITING and RUNNING; `attnbench status` and the site add CACHED, STALE and NOT_RUN."""

    WAITING = "waiting"
    RUNNING = "running"
    HIT = "hit"  # this run took the stored result (no process started)
    RAN = "ran"  # this run ran the cell and it succeeded
    OK = "ok"  # a stored result that succeeded
    FAILED = "failed"
    TIMEOUT = "timeout"
    INTERRUPTED = "interrupted"
    MISSING_DEPS = "missing-deps"
    SKIPPED = "skipped"  # an upstream cell did not succeed; nothing is stored
    CACHED = "cached"  # `status`: the stored result is current
    STALE = "stale"  # `status`: the code changed since the stored result was measured (and how)
    ELSEWHERE = "measured elsewhere"  # `status`: same code, another machine or environment (information)
    NOT_RUN = "not run"
    NEEDS_GPUS = "needs more GPUs"  # the machine has fewer GPUs than the cell runs processes (or it reads
    # such a cell): not run, not a failure; its results are another label's (machine.too_few_gpus)

    @property
    def bad(self) -> bool:
        """Did not produce a good result in this run (dependents are skipped; exit code 1)."""
        return self in BAD_STATES

    @property
    def words(self) -> str:
        """How a skipped dependent names this state: 'upstream bench timed out'."""
        return _WORDS.get(self, self.value)


BAD_STATES = frozenset(
    {Status.FAILED, Status.TIMEOUT, Status.INTERRUPTED, Status.MISSING_DEPS, Status.SKIPPED}
)
_WORDS = {
    Status.TIMEOUT: "timed out",
    Status.INTERRUPTED: "was interrupted",
    Status.SKIPPED: "was skipped",
    Status.MISSING_DEPS: "lacks deps",
}
RESULT_STATUSES = frozenset({Status.OK, *BAD_STATES} - {Status.SKIPPED})  # what result.json may hold
RUN_STATES = frozenset(
    {Status.HIT, Status.RAN, Status.NEEDS_GPUS, *BAD_STATES}
)  # what run.json's cells may hold
REPORT_ORDER = (  # how the site orders the statuses of a page
    Status.OK,
    Status.FAILED,
    Status.TIMEOUT,
    Status.INTERRUPTED,
    Status.MISSING_DEPS,
    Status.SKIPPED,
    Status.NEEDS_GPUS,
    Status.NOT_RUN,
)


class RecordError(ValueError):
    """A result.json or run.json that is not a valid record; the message names the file."""

    def __init__(self, path: Path, problem: str):
        super().__init__(f"{path}: {problem}")
        self.path = Path(path)
        self.problem = problem


@dataclass(frozen=True)
class CellResult:
    """`outputs/<nb>/<label>/<cell>/result.json`: one finished cell. The engine writes every field;
    the loader requires only what deciding a cache hit needs, so older results still load."""

    cell: str
    status: Status  # one of RESULT_STATUSES
    key: str
    started: str  # ISO 8601, UTC
    finished: str
    key_parts: dict[str, Any] = field(default_factory=dict)  # what the key hashes (plan.cell_key)
    reason: str = ""  # why, for every status but ok
    notebook: str = ""
    label: str = ""
    params: dict[str, Any] = field(default_factory=dict)
    duration_s: float | None = None  # the cell itself; environment setup is env_setup_s
    env_setup_s: float | None = None  # uv mode: `uv sync --script` before the cell
    returncode: int | None = None
    command: list[str] = field(default_factory=list)  # repository-relative, as a reviewer types it
    gpus: int | None = None
    env: dict[str, Any] = field(default_factory=dict)  # kind, python, launcher
    artifacts: list[str] | None = None  # relative POSIX paths under artifacts/ (None: not recorded)
    code: dict[str, Any] | None = None  # provenance.code_version: commit, dirty flag, date (None: older)

    def to_json(self) -> dict[str, Any]:
        data = _plain(dataclasses.asdict(self))
        return {**{k: data.pop(k) for k in _RESULT_ORDER}, **data}

    @classmethod
    def from_json(cls, data: Any, path: Path) -> CellResult:
        return _record(cls, data, path, {"status": RESULT_STATUSES})


_RESULT_ORDER = ("cell", "notebook", "label", "status", "reason", "key", "key_parts", "params", "started")


@dataclass(frozen=True)
class CellEntry:
    """One cell in run.json: what this run (or the last run that reached it) did with it."""

    state: Status  # one of RUN_STATES
    reason: str = ""
    stale: str = ""  # not reached by the last run and no longer current: why (the site shows it)

    def to_json(self) -> dict[str, Any]:
        data = {"state": str(self.state), "reason": self.reason}
        return {**data, "stale": self.stale} if self.stale else data


@dataclass(frozen=True)
class RunRecord:
    """`outputs/<nb>/<label>/run.json`: the machine, params and per-cell states of the last run."""

    cells: dict[str, CellEntry]  # in notebook order
    notebook: str = ""
    title: str = ""
    label: str = ""
    started: str | None = None
    finished: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    machine: dict[str, Any] = field(default_factory=dict)
    env: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        data = _plain({f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "cells"})
        return {**data, "cells": {cid: entry.to_json() for cid, entry in self.cells.items()}}

    @classmethod
    def from_json(cls, data: Any, path: Path) -> RunRecord:
        cells = data.get("cells") if isinstance(data, dict) else None
        if not isinstance(cells, dict):
            raise RecordError(path, f"cells is {shown(cells)}: expected an object of cell id -> entry")
        entries = {
            str(cid): _record(CellEntry, entry, path, {"state": RUN_STATES}, where=f"cells.{cid}.")
            for cid, entry in cells.items()
        }
        record = _record(cls, {**data, "cells": entries}, path, {})
        count = record.machine.get("gpu_count")
        if count is not None and (type(count) is not int or count < 0):  # a bool is no count
            raise RecordError(
                path, f"machine.gpu_count is {shown(count)}: expected a whole number of GPUs >= 0"
            )
        return record


def _plain(value: Any) -> Any:
    """Enums as their strings, tuples as lists: what json.dumps writes and json.loads gives back."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, Status):
        return str(value)
    return value


def _record(cls, data: Any, path: Path, choices: dict[str, frozenset[Status]], where: str = ""):
    try:
        return from_json(cls, data, choices=choices, where=where)
    except FieldError as e:
        raise RecordError(path, str(e)) from None
