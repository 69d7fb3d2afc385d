"""What a run leaves in each run folder besides the cells' own results: run.json (every cell's state of
this run, and the entry of each cell it did not reach, marked stale where it is no longer current), the
notebook snapshot the site renders, and copies of the scripts cells name with script=. The runner
writes them after every finished cell and once more at a run's end (runner.py)."""

from __future__ import annotations

from pathlib import Path

from attnbench.notebook.run import store
from attnbench.notebook.run.graph import NodeId
from attnbench.notebook.run.records import CellEntry, RecordError, RunRecord, Status
from attnbench.notebook.run.session import Session


def write_runs(session: Session, states: dict, previous: dict, order: list[NodeId], started: str) -> None:
    """run.json and notebook.md per notebook. A run where every cell of a notebook was a cache hit
    leaves its run.json unchanged, so committed outputs do not churn. A cell this run did not
    reach keeps its entry, marked stale with the reason when its result is no longer current
    (`run --cell bench` leaves plot built on the old bench: the site must not show it as current)."""
    for name in dict.fromkeys(n[0] for n in order):
        notebook = session.graph.notebooks[name]
        folder = session.run_dir(name)
        before = previous.get(name)
        old_cells = before.cells if before else {}
        cells: dict[str, CellEntry] = {}
        for node in (n for n in order if n[0] == name and n in states):
            st = states[node]
            old = old_cells.get(node[1])
            if st.state == Status.HIT and old is not None and old.state in (Status.HIT, Status.RAN):
                cells[node[1]] = CellEntry(old.state, old.reason)
            elif st.state not in (Status.WAITING, Status.RUNNING):
                cells[node[1]] = CellEntry(st.state, st.reason)
        if not cells:
            continue
        # a cell this machine has too few GPUs for runs nowhere here: it does not make a run of hits new
        nothing_ran = all(states[(name, c)].state in (Status.HIT, Status.NEEDS_GPUS) for c in cells)
        kept = before if nothing_ran else None  # its times stand: run.json stays as it was
        merged: dict[str, CellEntry] = {}
        for c in notebook.cells:
            entry = cells.get(c.id) or unreached(session, name, c.id, old_cells.get(c.id))
            if entry is not None:
                merged[c.id] = entry
        # --reuse-elsewhere presents another machine's measurements: the run stays that machine's
        # (its cells' result.json say where each ran)
        measured_by = before if before and session.options.reuse else None
        # a run that measured nothing here (hits, cells this machine has too few GPUs for) leaves the label
        # the machine its results came from too
        source = measured_by or kept
        run = RunRecord(
            notebook=name,
            title=notebook.title,
            label=session.label,
            started=kept.started if kept else started,
            finished=kept.finished if kept else store.now_iso(),
            params=session.params[name],
            machine=source.machine if source else session.machine_summary(),
            env=source.env if source else session.env_summary(),
            cells=merged,
        )
        store.write_run(folder, run)
        snapshot = folder / store.SNAPSHOT_FILE
        if not snapshot.is_file() or snapshot.read_text() != notebook.text:
            store.write_text_atomic(snapshot, notebook.text)
        keep_scripts(notebook, folder)


def keep_scripts(notebook, folder: Path) -> None:
    """Copies of the files cells name with script=, beside the snapshot that names them relative to
    itself (the site re-parses the snapshot; a cell's id may be the hash of its script). A script
    outside the notebook's folder is not copied (it would land outside outputs/)."""
    for cell in notebook.cells:
        if not cell.script:
            continue
        target = (folder / cell.script).resolve()
        if not target.is_relative_to(folder.resolve()):
            continue
        text = (notebook.path.parent / cell.script).read_text(encoding="utf-8")
        if not target.is_file() or target.read_text(encoding="utf-8") != text:
            target.parent.mkdir(parents=True, exist_ok=True)
            store.write_text_atomic(target, text)


def unreached(session: Session, notebook: str, cell_id: str, old: CellEntry | None) -> CellEntry | None:
    """The entry of a cell this run did not reach: the old one, with why it is stale, if it is. A
    result of the code of now measured on another machine (--reuse-elsewhere runs away from it) is
    not stale: its machine or environment alone differs from this one's."""
    if old is None or old.state not in (Status.HIT, Status.RAN):
        return old
    try:
        judged = session.judge((notebook, cell_id))
    except RecordError as e:
        return CellEntry(old.state, old.reason, stale=str(e))
    stale = "; ".join(judged.code_reasons) if judged.stored is not None else "its result.json is missing"
    return CellEntry(old.state, old.reason, stale)
