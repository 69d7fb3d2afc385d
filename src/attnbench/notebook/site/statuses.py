"""Statuses as the site words them: a cell's status on a run's page (run.json's state for the run, else
the stored result), its stale note, the stale cells grouped by reason, the statuses in report order and
their CSS class names. render.py builds the pages with them."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from urllib.parse import quote

from attnbench.notebook.run.machine import label_gpus
from attnbench.notebook.run.plan import SOURCES_CHANGED
from attnbench.notebook.run.records import BAD_STATES, REPORT_ORDER, RecordError, Status
from attnbench.notebook.run.store import load_result

STATUS_ORDER = tuple(str(status) for status in REPORT_ORDER)
NEEDS_GPUS = str(Status.NEEDS_GPUS)


def status_of(entry: dict, result: dict | None) -> tuple[str, str]:
    """The cell's status on this machine: run.json's state for this run, else the stored result."""
    state = entry.get("state")
    if state in BAD_STATES or state == NEEDS_GPUS:
        return state, entry.get("reason") or (result or {}).get("reason") or ""
    if result is not None:
        return result.get("status") or "unknown", result.get("reason") or ""
    if state in ("hit", "ran"):
        return "not run", f"run.json records {state!r} but the cell's result.json is missing"
    return "not run", "not run on this machine"


def stale_note(entry: dict) -> str:
    if entry.get("stale") or entry.get("state") == "stale":
        stale = entry.get("stale")
        return stale if isinstance(stale, str) else entry.get("reason") or "inputs changed since this result"
    return ""


def stale_groups(stale: list[tuple[str, str]]) -> list[tuple[str, list[str]]]:
    """[(reason, cells)]: the stale cells grouped by each of their own reasons, so that a reason several
    cells share ("code changed", "new needs a, b") is written once with every cell it applies to; the
    modules of "attnbench sources changed (…)" are merged into one such reason. An "upstream X changed"
    is left out where a cell has a reason of its own; cells stale only through what they read are
    grouped under that."""
    groups: dict[str, list[str]] = {}
    modules: list[str] = []  # named by any "attnbench sources changed (…)"
    for cell_id, why in stale:
        reasons = _clauses(why)
        own = [r for r in reasons if not (r.startswith("upstream ") and r.endswith(" changed"))]
        for reason in own or ["what it reads was measured again or changed"]:
            found = re.fullmatch(rf"{re.escape(SOURCES_CHANGED)} \((.*)\)", reason)
            if found:
                modules += [
                    m for m in (m.strip() for m in found.group(1).split(",")) if m and m not in modules
                ]
                reason = SOURCES_CHANGED
            cells = groups.setdefault(reason, [])
            if cell_id not in cells:
                cells.append(cell_id)
    if modules:
        groups = {
            (f"{k} ({', '.join(sorted(modules))})" if k == SOURCES_CHANGED else k): v
            for k, v in groups.items()
        }
    return list(groups.items())


def stale_cells(groups: list[tuple[str, list[str]]]) -> list[str]:
    """The stale cells of stale_groups' groups, each once (a cell may be in several reasons' groups)."""
    return list(dict.fromkeys(cell for _, cells in groups for cell in cells))


def _clauses(why: str) -> list[str]:
    """`why` cut at its top-level "; " (not inside the brackets of "environment changed (a; b)")."""
    clauses, depth, current = [], 0, []
    for ch in why:
        depth += ch in "([{"
        depth -= ch in ")]}"
        if ch == ";" and depth <= 0:
            clauses.append("".join(current).strip())
            current = []
        else:
            current.append(ch)
    clauses.append("".join(current).strip())
    return [c for c in clauses if c]


def ordered(counts: Counter) -> list[str]:
    """The statuses present, in STATUS_ORDER, then any unexpected ones."""
    return [s for s in (*STATUS_ORDER, *sorted(set(counts) - set(STATUS_ORDER))) if counts[s]]


def css_class(status: str) -> str:
    return "".join(ch if ch.isalnum() else "-" for ch in status.lower())


def measured_elsewhere(run_dir: Path, cell_id: str) -> list[dict]:
    """The other labels of the notebook that hold a good result of a cell this label has none of (a
    single-GPU cell on a 2-GPU label's page): links to the cell on their pages. A GPU label's page names
    GPU labels only: a CPU smoke run measured nothing."""
    found, gpu = [], label_gpus(run_dir.name) > 0
    for other in sorted(p for p in run_dir.parent.iterdir() if p.is_dir() and p != run_dir):
        if gpu and label_gpus(other.name) == 0:
            continue
        try:
            result = load_result(other / cell_id)
        except RecordError:
            continue
        if result is not None and result.status == "ok":
            found.append({"text": other.name, "href": f"{quote(other.name)}.html#cell-{quote(cell_id)}"})
    return found
