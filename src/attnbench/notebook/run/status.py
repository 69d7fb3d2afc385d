"""`attnbench status`: for each cell, is its stored result cached, stale (and why), failed or missing?"""

from __future__ import annotations

import json
from pathlib import Path

from attnbench.notebook.run import records, store
from attnbench.notebook.run.machine import label_overrides
from attnbench.notebook.run.records import Status
from attnbench.notebook.run.session import Session


def cell_statuses(session: Session, notebook: str) -> list[tuple[str, Status, str]]:
    """[(cell id, state, why)] in notebook order; state is CACHED, STALE (the code changed),
    ELSEWHERE (current code, measured on another machine or environment), NOT_RUN, NEEDS_GPUS (the
    label's machine has fewer GPUs than the cell runs processes, or the cell reads one that does) or the stored
    result's failure (FAILED, TIMEOUT, INTERRUPTED, MISSING_DEPS). RecordError on a broken record."""
    run = store.load_run(session.run_dir(notebook))
    entries = run.cells if run else {}
    rows = []
    have = session.label_gpus_stored(notebook, run)
    for node in session.graph.nodes(notebook):
        if short := session.too_few_gpus(node, have):
            # what such a cell stored here (a placeholder an older engine ran) measures nothing
            rows.append((node[1], Status.NEEDS_GPUS, short))
            continue
        judged = session.judge(node)
        result = judged.stored
        if result is None:
            entry = entries.get(node[1])
            why = f"{entry.state}: {entry.reason}" if entry and entry.state == Status.SKIPPED else ""
            rows.append((node[1], Status.NOT_RUN, why))
        elif result.status == Status.OK:
            # stale: the code changed since; measured elsewhere: the same code, another machine or
            # environment (information: `run` here would measure it again, the result is not outdated)
            code, elsewhere = judged.code_reasons, judged.elsewhere
            state = Status.STALE if code else Status.ELSEWHERE if elsewhere else Status.CACHED
            why = "; ".join(code)  # a stale result names only what changed in the code
            if elsewhere and not code:
                why = f"measured on another machine or environment ({'; '.join(elsewhere)})"
            failure = store.load_failure(session.cell_dir(node))
            if failure is not None and failure.finished >= result.finished:
                kept = f"the last run ({failure.finished}) {failure.status.words}: {failure.reason}; this result is the last good one"
                why = f"{why}; {kept}" if why else kept
            rows.append((node[1], state, why))
        else:
            why = result.reason + (f" (and stale: {'; '.join(judged.reasons)})" if judged.reasons else "")
            rows.append((node[1], result.status, why))
    return rows


def stored_states(notebooks: list, outputs: Path, env=None) -> tuple[dict[str, dict[str, dict]], list[str]]:
    """{notebook: {label: {cell: (state, why)}}} for every label folder under `outputs` of the given
    (parsed) notebooks, judged against the code of now, and the problems met (a notebook or label that
    cannot be judged is left out, named). What `attnbench build` hands the site so that every page says
    which of its results the code has moved past, not only those a later run happened to note in
    run.json. A stale cell's `why` holds its code reasons alone.

    A label made by a `-p` run (`<label>+key-value`, session.override_label) is judged with the params
    its run.json records where they differ from the defaults, in a session of its own; any other label
    with the defaults, so that a changed default shows as stale."""
    from attnbench.notebook.document.model import NotebookError
    from attnbench.notebook.run.launchers import EnvSpec
    from attnbench.notebook.run.session import Options, SetupError, prepare

    states: dict[str, dict[str, dict]] = {}
    problems: list[str] = []
    groups: dict[tuple[str, str], list] = {}  # (label, params) -> notebooks judged in one session
    for nb in notebooks:
        try:
            defaults = nb.resolve_params({})
        except NotebookError as e:
            problems.append(f"{e}; the staleness of its results is not shown")
            continue
        folder = Path(outputs) / nb.name
        for run_dir in sorted(p for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []:
            own: dict = {}
            if label_overrides(run_dir.name):  # a -p run's label
                try:
                    run = store.load_run(run_dir)
                except records.RecordError as e:
                    problems.append(f"{run_dir}: {e}; its staleness is not shown")
                    continue
                own = {
                    k: v for k, v in ((run.params if run else None) or {}).items() if defaults.get(k, v) != v
                }
            groups.setdefault((run_dir.name, json.dumps(own, sort_keys=True)), []).append(nb)
    for (label, own), members in groups.items():
        try:
            options = Options(
                env=env or EnvSpec("uv"), label=label, outputs=Path(outputs), params=json.loads(own)
            )
            session = prepare(members, options)
            for nb in members:
                states.setdefault(nb.name, {})[label] = {
                    c: (str(s), "; ".join(session.judge((nb.name, c)).code_reasons) if s == Status.STALE else why)
                    for c, s, why in cell_statuses(session, nb.name)
                }  # fmt: skip
        except (SetupError, NotebookError, records.RecordError, ValueError) as e:
            problems.append(
                f"label {label} of {', '.join(nb.name for nb in members)}: {e}; its staleness is not shown"
            )
    return states, problems
