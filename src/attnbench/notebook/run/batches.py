"""`attnbench status --batches SECONDS`: the cells a label needs run again, in commands of bounded length.

A machine lent by the job (a SLURM allocation, a device lease) often stops a command at a wall-clock
limit. From each cell's last measured duration (its stored result, or the last failed try, a lower
bound when it was stopped) or, never run, its `timeout=` (an upper bound), the cells that are not
current here (stale, not run, failed) are packed in graph order into commands whose estimate fits the
limit: `attnbench run NOTEBOOK --label L --cell A --cell B`. A cell alone over the limit gets a command of
its own, marked, so that it is split or run where the limit is longer. A cell stopped at its last try
(interrupted, timed out) took longer than it shows and gets a command of its own too.

The times are those of the last runs, which may be of older code: a changed protocol can make a cell
slower than its estimate (the estimate names where it comes from: "on <label>", "≥", "≤"), and the plan
counts the cells whose own code, or the package code they use, changed since their time was measured.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field

from attnbench.notebook.run import records, store
from attnbench.notebook.run.machine import label_gpus, label_overrides
from attnbench.notebook.run.records import Status
from attnbench.notebook.run.session import Session

DONE = frozenset({Status.CACHED, Status.ELSEWHERE})  # current code: nothing to run (elsewhere: its machine)


@dataclass
class Estimate:
    cell: str
    seconds: float | None  # None: never run and no timeout
    basis: str  # "last run", "stopped after" (a lower bound), "timeout" (an upper bound), "unknown"
    gpus: int | None = None
    notebook: str = ""
    older_code: bool = False  # the time is that of code since changed in the cell or the package it uses

    @property
    def measured(self) -> bool:
        """A measured duration (here or on another label), not the timeout's bound."""
        return self.seconds is not None and self.basis not in ("timeout", "unknown")

    def text(self) -> str:
        if self.seconds is None:
            return f"{self.cell} (time unknown)"
        bound = {"stopped after": "≥ ", "timeout": "≤ "}.get(self.basis, "")
        where = f" {self.basis}" if self.basis.startswith("on ") else ""
        return f"{self.cell} {bound}{_minutes(self.seconds)}{where}"


@dataclass
class Batch:
    cells: list[Estimate] = field(default_factory=list)
    over_limit: bool = False
    alone: bool = False  # a cell stopped at its last try: nothing else shares its command
    reads: set[str] = field(default_factory=set)  # notebooks its cells need cells of, directly or further up

    @property
    def seconds(self) -> float:
        return sum(e.seconds or 0.0 for e in self.cells)


@dataclass
class Plan:
    """The commands of a label's re-run, and the cells its machine cannot run (with what reads them)."""

    batches: list[Batch] = field(default_factory=list)
    left_out: list[tuple[str, str]] = field(default_factory=list)
    gpus: int = 0  # the GPUs of the label's machine (Session.label_gpus_stored; 0: a CPU label, multi-rank cells on gloo)


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.0f} s"


STOPPED = (Status.INTERRUPTED, Status.TIMEOUT)  # a try that was stopped: its time is a lower bound


def estimate(session: Session, node: tuple[str, str]) -> Estimate:
    """How long `node` takes, from what this label's folder remembers of it: the longest of its good
    run and a later try that was stopped (a lower bound); a try that failed on its own counts only where
    no good run is known (it may have failed at once); where that time is of code since changed, the
    newest run under another label of the same kind when it took longer. Else its time under another
    label of the same kind, else its timeout (an upper bound)."""
    cell, older = session.graph.cell(node), _older_code(session, node)
    tries = [r for r in (session.judge(node).stored, store.load_failure(session.cell_dir(node)))
             if r is not None and r.duration_s is not None]  # fmt: skip
    good = [r.duration_s for r in tries if r.status == Status.OK]
    stopped = [r.duration_s for r in tries if r.status in STOPPED]
    failed = [r.duration_s for r in tries if r.status not in STOPPED and r.status != Status.OK]

    def guess(seconds, basis) -> Estimate:
        return Estimate(node[1], seconds, basis, cell.gpus, older_code=older)

    if stopped and max(stopped) >= max(good, default=0.0):
        return guess(max(stopped), "stopped after")
    if good or failed:
        own = max(good or failed)
        # a time of code since changed says little of the code of now: a run elsewhere finished after it
        # that took longer is the better guess (a new protocol made the H100's Flux sweep 6.6 -> 9.0 min)
        elsewhere = _latest_elsewhere(session, node) if older else None
        finished = max((r.finished or "" for r in tries), default="")
        if elsewhere is not None and elsewhere[1] > own and elsewhere[2] > finished:
            return guess(elsewhere[1], f"on {elsewhere[0]}")
        return guess(own, "last run")
    if (elsewhere := _latest_elsewhere(session, node)) is not None:
        return guess(elsewhere[1], f"on {elsewhere[0]}")
    if cell.timeout:
        return guess(float(cell.timeout), "timeout")
    return guess(None, "unknown")


def _kind(label: str) -> tuple[bool, str]:
    """What a label's times say something of: CPU or GPU, and its -p overrides ("nvidia-h200+profile-smoke"
    times a smoke profile, not nvidia-h200's default one)."""
    return label_gpus(label) == 0, label_overrides(label)


def _latest_elsewhere(session: Session, node: tuple[str, str]) -> tuple[str, float, str] | None:
    """The newest good run of the cell under another label of its notebook and of the same kind (a CPU
    smoke run's time says nothing of a GPU run's, nor a smoke profile's of the default's): (label, s,
    when it finished)."""
    here = session.run_dir(node[0])
    found = []
    for folder in sorted(here.parent.iterdir()) if here.parent.is_dir() else []:
        if folder == here or not folder.is_dir() or _kind(folder.name) != _kind(here.name):
            continue
        try:
            result = store.load_result(folder / node[1])
        except records.RecordError:
            continue
        if result is not None and result.status == Status.OK and result.duration_s is not None:
            found.append((result.finished or "", folder.name, result.duration_s))
    if not found:
        return None
    finished, label, seconds = max(found)
    return label, seconds, finished


def _older_code(session: Session, node: tuple[str, str]) -> bool:
    """The stored result was measured by code that changed since, in the cell or in the package parts it
    uses (a new timing protocol can make it slower), not only upstream of it."""
    try:
        reasons = session.judge(node).code_reasons
    except records.RecordError:
        return False
    return any(not reason.startswith("upstream") for reason in reasons)


def rerun_plan(session: Session, states: dict[tuple[str, str], Status], limit_s: float) -> Plan:
    """The cells of the named notebooks whose state (cell_statuses, by node) is not current, with every
    cell they need that is not current either, in graph order, packed across notebooks into batches
    whose estimate stays within `limit_s` (fewer commands: each start of a lent machine costs time)."""

    def pending(node) -> bool:
        if node in states:
            return states[node] not in DONE
        # a cell of a notebook not named that a named one needs (needs=other.md:x): the run runs it too
        judged = session.judge(node)
        return not (judged.current or judged.measured_elsewhere)

    todo = [node for name in session.graph.named for node in session.graph.nodes(name) if pending(node)]
    # the GPUs of the machine each notebook's results came from, as status and the site judge them
    stored = {name: session.label_gpus_stored(name) for name in session.graph.notebooks}
    plan = Plan(gpus=stored[session.graph.named[0]])
    batches, left_out = plan.batches, set()
    for node in (n for n in session.graph.order(todo) if pending(n)):
        if session.too_few_gpus(node, stored[node[0]]):
            left_out.add(node)  # this label's machine cannot run it, nor what reads it
            continue
        guess = estimate(session, node)
        guess.notebook = node[0]
        seconds = guess.seconds or 0.0
        last = batches[-1] if batches else None
        # a cell stopped at its last try took longer than it shows: it gets a command of its own
        alone = guess.basis == "stopped after" or (last is not None and last.alone)
        if last is None or alone or last.over_limit or last.seconds + seconds > limit_s:
            last = Batch(alone=guess.basis == "stopped after")
            batches.append(last)
        last.cells.append(guess)
        last.reads |= {up[0] for up in session.graph.order([node]) if up[0] != node[0]}
        # a timeout is a bound, not a measured time: it never marks a command as over the limit
        last.over_limit = sum(e.seconds for e in last.cells if e.measured) > limit_s
    plan.left_out = sorted(left_out)
    return plan


def plan_lines(
    plan: Plan,
    paths: dict[str, str],
    label: str,
    limit_s: float,
    overrides: dict | None = None,
    declared: dict[str, set[str]] | None = None,
) -> list[str]:
    """The commands, each with its estimate and what it is based on (`paths`: each notebook's path);
    `overrides` (the `-p` params the status was asked with) go on each command whose notebooks declare
    them (`declared`: each notebook's params; a run refuses a key none of its notebooks declares), so
    each runs what the label holds. A command of one notebook names its cells by id; one of several, as
    `nb.md:id`."""
    batches, tail = plan.batches, []
    if plan.left_out:
        by_notebook: dict[str, list[str]] = {}
        for notebook, cell in plan.left_out:
            by_notebook.setdefault(notebook, []).append(cell)
        said = "; ".join(f"{nb}: {', '.join(cells)}" for nb, cells in by_notebook.items())
        why = f"need more GPUs than label {label} has ({plan.gpus}), or read one that does"
        tail = [f"left out: {len(plan.left_out)} cells {why}: {said}"]
    if not batches:
        return [f"nothing to run for label {label}: every cell is current", *tail]
    total = sum(b.seconds for b in batches)
    count = sum(len(b.cells) for b in batches)
    older = sum(e.older_code and e.measured for b in batches for e in b.cells)
    caveat = (f" ({older} of them by code that has changed since: a new protocol can make a cell slower)"
              if older else "")  # fmt: skip
    head = (f"to bring label {label} current: {count} cells, about {_minutes(total)} by their last runs{caveat}, "
            f"in {len(batches)} command(s) of at most {_minutes(limit_s)}:")  # fmt: skip
    lines = [head]
    for b in batches:
        notebooks = list(dict.fromkeys(e.notebook for e in b.cells))
        if declared is not None:
            # an override that a notebook it reads declares must reach that notebook too: a run applies -p
            # only to the notebooks named on its command line (else it would run the upstream cell with the
            # defaults into this label), so that notebook is named as well
            wanted = set(overrides or {})
            notebooks += [
                n for n in sorted(b.reads) if n not in notebooks and declared.get(n, set()) & wanted
            ]
        keys = (
            set().union(*((declared or {}).get(n, set()) for n in notebooks))
            if declared is not None
            else None
        )
        mine = {k: v for k, v in (overrides or {}).items() if keys is None or k in keys}
        params = "".join(f" -p {shlex.quote(f'{k}={json.dumps(v)}')}" for k, v in mine.items())
        one = len(notebooks) == 1
        cells = " ".join(f"--cell {e.cell if one else f'{e.notebook}.md:{e.cell}'}" for e in b.cells)
        files = " ".join(paths.get(n, f"{n}.md") for n in notebooks)
        lines.append(f"  attnbench run {files} --label {label}{params} {cells}")
        note = ""
        if b.over_limit:
            note = "over the limit alone: split the cell, or run it where the limit is longer; "
        elif b.alone:
            note = "stopped at its last try, so longer than shown: a command of its own; "
        gpus = max((e.gpus or 1 for e in b.cells), default=1)
        needs = f"; needs {gpus} GPUs" if gpus > 1 else ""
        shown = ", ".join(e.text() if one else f"{e.notebook}:{e.text()}" for e in b.cells)
        lines.append(f"    # {note}~{_minutes(b.seconds)}: {shown}{needs}")
    return lines + tail
