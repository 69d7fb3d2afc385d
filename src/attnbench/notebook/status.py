"""`attnbench status`: for each cell, is its stored result cached, stale (and why), failed or missing?"""

from __future__ import annotations

from attnbench.notebook import store
from attnbench.notebook.plan import stale_reasons
from attnbench.notebook.session import Session


def cell_statuses(session: Session, notebook: str) -> list[tuple[str, str, str]]:
    """[(cell id, state, why)] in notebook order; state is cached | stale | failed | timeout |
    interrupted | missing-deps | not run."""
    run = store.read_run(session.run_dir(notebook)) or {}
    entries = run.get("cells") or {}
    rows = []
    for node in session.graph.nodes(notebook):
        key = session.keys[node]
        result = store.read_result(session.cell_dir(node))
        if result is None:
            entry = entries.get(node[1]) or {}
            why = f"{entry['state']}: {entry.get('reason', '')}" if entry.get("state") == "skipped" else ""
            rows.append((node[1], "not run", why))
            continue
        reasons = stale_reasons(result, key, result.get("params"), session.params[notebook])
        status = result.get("status")
        if status == "ok":
            rows.append((node[1], "stale" if reasons else "cached", "; ".join(reasons)))
        else:
            why = result.get("reason") or ""
            if reasons:
                why += f" (and stale: {'; '.join(reasons)})"
            rows.append((node[1], status or "unknown", why))
    return rows
