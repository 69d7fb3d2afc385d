"""Statuses as the site words them: a cell's status on a run's page (run.json's state for the run, else
the stored result), its stale note, the stale cells grouped by reason, the statuses in report order and
their CSS class names. render.py builds the pages with them."""

from __future__ import annotations

from collections import Counter

from attnbench.notebook.run.records import BAD_STATES, REPORT_ORDER, Status

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
    """[(reason, cells)]: the stale cells grouped by their own reasons ("attnbench sources changed"),
    an "upstream X changed" left out where a cell has its own; cells stale only through what they read
    are grouped under that."""
    groups: dict[str, list[str]] = {}
    for cell_id, why in stale:
        reasons = [r.strip() for r in why.split(";") if r.strip()]
        own = [r for r in reasons if not (r.startswith("upstream ") and r.endswith(" changed"))]
        key = "; ".join(own) if own else "what it reads was measured again or changed"
        groups.setdefault(key, []).append(cell_id)
    return list(groups.items())


def ordered(counts: Counter) -> list[str]:
    """The statuses present, in STATUS_ORDER, then any unexpected ones."""
    return [s for s in (*STATUS_ORDER, *sorted(set(counts) - set(STATUS_ORDER))) if counts[s]]


def css_class(status: str) -> str:
    return "".join(ch if ch.isalnum() else "-" for ch in status.lower())
