"""`attnbench status`: for each cell, is its stored result cached, stale (and why), failed or missing?"""

from __future__ import annotations

from attnbench.notebook.run import store
from attnbench.notebook.run.session import Session
from attnbench.notebook.run.store import Status


def cell_statuses(session: Session, notebook: str) -> list[tuple[str, Status, str]]:
    """[(cell id, state, why)] in notebook order; state is CACHED, STALE (the code changed),
    ELSEWHERE (current code, measured on another machine or environment), NOT_RUN or the stored
    result's failure (FAILED, TIMEOUT, INTERRUPTED, MISSING_DEPS). RecordError on a broken record."""
    run = store.load_run(session.run_dir(notebook))
    entries = run.cells if run else {}
    rows = []
    for node in session.graph.nodes(notebook):
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
