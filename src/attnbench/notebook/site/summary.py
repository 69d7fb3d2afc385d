"""The top of a page and its line in the index: headline, timing, provenance, "as run" parameters.

render.py gathers the cells; this module turns a run's data (sitedata.RunData) and its cells' results
into what the templates show first. Pure functions of their arguments (git is asked through
provenance.py only for dates and for results that did not record their commit).
"""

from __future__ import annotations

import math
from collections.abc import Collection
from pathlib import Path
from typing import Any

from attnbench.notebook.run import provenance
from attnbench.notebook.run.records import Status
from attnbench.notebook.site import artifacts as show
from attnbench.notebook.site.headline import HEADLINE_FILE, Entry
from attnbench.notebook.site.sitedata import RunData

NO_HEADLINE = "No headline: this run predates headline data; re-run the report cell."
# profile.json entries shown beside the params: the shapes and passes that actually ran
AS_RUN_KEYS = (
    "device",
    "seq_lens",
    "points",
    "shape",
    "batch",
    "heads",
    "head_dim",
    "dtype",
    "mask",
    "passes",
)


def number_text(value: float | None) -> str:
    """One decimal from 10 up; three significant digits below (a CPU smoke run's tiny numbers)."""
    if value is None:
        return ""
    return f"{value:.1f}" if abs(value) >= 10 else f"{value:.3g}"


def key_number_text(value: float | None) -> str:
    """A key number: whole lengths, counts, clocks and watts as integers (32,768 tokens, 132 SMs, 700 W),
    measured values as number_text gives them."""
    if isinstance(value, (int, float)) and math.isfinite(value) and value == int(value) and abs(value) >= 100:
        return f"{int(value):,}"
    return number_text(value)


def _entry_row(e: Entry) -> dict[str, Any]:
    return {
        "group": e.group,
        "label": e.label,
        "winner": e.winner,
        "value": number_text(e.value),
        "unit": e.unit,
        "detail": e.detail,
        "runner_up": e.runner_up,
        "runner_up_value": number_text(e.runner_up_value),
        "margin": e.margin,
        "notes": e.notes,
        "wall": f"{number_text(e.ms)} ms" if e.ms else "",
    }


def unit_text(e: Entry) -> str:
    """An entry's unit with what it is of: "TFLOP/s per GPU", "ms wall time"; a bare unit if unsaid."""
    return " ".join(x for x in (e.unit, e.per) if x)


def _ranking(entries: list[Entry]) -> dict[str, Any]:
    """One table's rows and its value column's heading: the unit with its basis when all rows share it,
    else each value carries its own."""
    units = list(dict.fromkeys(unit_text(e) for e in entries))
    shared = units[0] if len(units) == 1 else ""
    rows = []
    for e in entries:
        row = _entry_row(e)
        if not shared:
            row["value"] = f"{row['value']} {unit_text(e)}".strip()
        rows.append(row)
    return {"rows": rows, "unit": shared or "value (unit on each row)", "wall": any(e.ms for e in entries)}


def answer_view(h) -> dict[str, Any]:
    """Headline version 2: the question, its answer, what qualifies it, the key numbers and the key figure's
    path."""

    numbers = [{"name": n.name, "value": key_number_text(n.value), "unit": n.unit, "per": n.per, "detail": n.detail}
               for n in h.numbers]  # fmt: skip
    return {"question": h.question, "answer": h.answer, "caveats": h.caveats, "numbers": numbers,
            "key_figure": h.key_figure}  # fmt: skip


def missing_headline(report_cells: list[dict]) -> str:
    """Why a run has no headline.json: the cells that write it (their views: id, status, reason, and
    `blocked_by`, the upstream cells where their chain stopped) did not run here, or (they ran) the run
    predates headline data."""
    unfinished = [c for c in report_cells if c.get("status") != "ok"]
    if not unfinished:
        return NO_HEADLINE

    def why(cell: dict) -> str:  # the reason, unless it only repeats the status ("not run on this machine")
        reason = cell.get("reason") or ""
        adds = reason.removeprefix(str(cell.get("status"))).strip(" :") not in ("", "on this machine")
        return f" ({reason})" if adds else ""

    def said(cell: dict) -> str:
        text = f"{cell['id']} {cell.get('status')}{why(cell)}"
        upstream = [f"{b['id']} {b.get('status')}{why(b)}" for b in cell.get("blocked_by") or []]
        return text + (f", as what it needs did not finish: {', '.join(upstream)}" if upstream else "")

    # failed, timed out: it ran, and stopped; "needs more GPUs": it never started
    ran = any(c.get("status") not in ("not run", str(Status.NEEDS_GPUS)) for c in unfinished)
    verb = "did not finish" if ran else "has not run"
    who = "the cell that writes it" if len(report_cells) == 1 else "the cells that write it"
    return f"No headline: {who} {verb} on this machine: {'; '.join(map(said, unfinished))}."


def headline_view(data: RunData, report_cells: list[dict] | None = None) -> dict[str, Any]:
    """The headline block, from the run's headline.json (headline.py): badges, lead sentences, failures,
    missed targets, the table of entries; or the note that the run has none (`report_cells`: the views of
    the cells declaring headline.json among their outputs, to say why)."""
    h = data.headline
    if h is None:
        return {"missing": missing_headline(report_cells or []), "badges": [], "sentences": [], "rows": [], "failures": [],
                "missed": [], "not_gpu": False, "index_lines": [],
                "question": "", "answer": [], "caveats": [], "numbers": [], "key_figure": ""}  # fmt: skip
    return {
        "missing": "",
        "not_gpu": h.not_gpu,
        "sentences": h.sentences,
        "index_lines": h.index_lines,
        "badges": [{"text": b.text, "css": str(b.tone), "title": b.title} for b in h.badges],
        "failures": h.failures,
        "missed": h.missed,
        "title": h.entries_title or "headline numbers",
        "note": h.entries_note,
        "units": sorted({e.unit for e in h.entries if e.unit}),
        "rows": [_entry_row(e) for e in h.entries],
        "ranked": _ranking([e for e in h.entries if not e.baseline]),
        "baselines": _ranking([e for e in h.entries if e.baseline]),
        "files": data.headline_files,
        **answer_view(h),
        "key_figure_title": data.key_figure_title,
    }


def notebook_timing(cells: list[dict], fingerprint: str | None = None) -> dict[str, str]:
    """The notebook's own time: its cells' results (not the whole `attnbench run` that ran them). With the
    label machine's `fingerprint`, cells that ran on another machine (presenting cells re-run over stored
    measurements) are dated apart: "2026-11-27 23:11 UTC; presented again 2026-11-28 00:23 UTC"."""
    elsewhere = [c for c in cells if fingerprint and _machine_of(c) not in (None, fingerprint)]
    if elsewhere and len(elsewhere) < len([c for c in cells if c.get("finished_at")]):
        here = notebook_timing([c for c in cells if c not in elsewhere])
        again = max(
            (c["finished_at"] for c in elsewhere if c.get("finished_at")), key=_safe_time_key, default=""
        )
        again_at = _safe_time_key(again) if again else 0.0
        if not again_at:  # no time the presentation finished at: nothing to say of it
            return {**notebook_timing(cells), "finished": here["finished"]}
        last = max((_safe_time_key(c["finished_at"]) for c in cells if c not in elsewhere and c.get("finished_at")),
                   default=0.0)  # fmt: skip
        # presented before the last measurement finished: the page shows an older presentation (stale)
        said = (f"last presented {show.when(again)}, before the last measurement" if again_at < last
                else f"presented again {show.when(again)}")  # fmt: skip
        return {**notebook_timing(cells), "finished": f"{here['finished']}; {said}"}
    finished = [c["finished_at"] for c in cells if c.get("finished_at")]
    started = [c["started_at"] for c in cells if c.get("started_at")]
    durations = [c["duration_s"] for c in cells if isinstance(c.get("duration_s"), (int, float))]
    last = max(finished, key=_safe_time_key, default=None)
    first = min(started, key=_safe_time_key, default=None)
    # cells re-run on another day (a report re-presented over older measurements) show the span, so a
    # re-presentation does not pass for a fresh measurement: "2026-11-25 to 2026-11-27 09:10 UTC"
    earliest = min((f for f in finished if _safe_time_key(f)), key=_safe_time_key, default=None)
    since = show.when(earliest)[:10]
    span = f"{since} to " if last and since and since != show.when(last)[:10] else ""
    return {
        "finished": span + show.when(last),
        "started": show.when(first),
        "took": show.duration(sum(durations)) if durations else "",
        "cells_timed": str(len(durations)),
    }


def _machine_of(cell: dict) -> str | None:
    """The fingerprint of the machine the cell's stored result ran on (its cache key's machine part)."""
    parts = (cell.get("result") or {}).get("key_parts") or {}
    machine = parts.get("machine") if isinstance(parts, dict) else None
    return machine if isinstance(machine, str) else None


def _safe_time_key(value: str):
    moment = show.parse_time(value)
    return moment.timestamp() if moment and moment.tzinfo else 0.0


def provenance_view(results: list[dict], run_dir: Path, repo: Path | None) -> dict[str, Any]:
    """The commits of the code that produced the page's results, with their dates.

    Results record `code` when they run (provenance.py). For older results the repository says when
    the run folder was last committed, and that commit's subject (which names the code commit by
    this project's habit) is shown as such, never as the code commit itself."""
    commits: dict[str, dict] = {}
    unrecorded = 0
    for result in results:
        code = result.get("code") if isinstance(result.get("code"), dict) else None
        if not code or not code.get("commit"):
            unrecorded += 1
            continue
        entry = commits.setdefault(code["commit"], {"commit": code["commit"], "cells": [], "dirty": False,
                                                    "date": code.get("date")})  # fmt: skip
        entry["cells"].append(result.get("cell", "?"))
        entry["dirty"] = entry["dirty"] or bool(code.get("dirty"))
    for entry in commits.values():
        if not entry["date"] and repo is not None:
            entry["date"] = provenance.commit_date(repo, entry["commit"])
        entry["short"] = entry["commit"][:9]
        entry["date"] = show.when(entry["date"]) if entry["date"] else "date unknown"
    stored = provenance.last_commit_of(repo, run_dir) if repo is not None and unrecorded else None
    if stored:
        stored = {**stored, "short": stored["commit"][:9], "date": show.when(stored["date"])}
    return {"commits": list(commits.values()), "unrecorded": unrecorded, "stored": stored}


def as_run(params: dict, data: RunData) -> dict[str, Any]:
    """The parameters that actually ran: a profile.json (the gpu cell resolves `auto`) overrides the
    front matter's values it names; both are shown where they differ."""
    profile = data.profile or {}
    shown = []
    for key, value in params.items():
        ran = profile.get(key, value) if key != "profile" else profile.get("profile", value)
        shown.append({"key": key, "value": ran, "asked": value if ran != value else None})
    extra = [
        {"key": k, "value": v, "asked": None}
        for k, v in profile.items()
        if k not in params and k in AS_RUN_KEYS
    ]
    return {"params": shown + extra, "source": data.profile_source}


def page_view(data: RunData, run: dict, cells: list[dict], run_dir: Path, repo: Path | None,
              machine: dict, report_cells: Collection[dict] = ()) -> dict[str, Any]:  # fmt: skip
    """Everything the top of a notebook page and its index line show, beside render.py's own view
    (`report_cells`: the views of the cells that write headline.json, with what blocked each)."""
    head = headline_view(data, list(report_cells))
    results = [c["result"] for c in cells if c.get("result")]
    timing = notebook_timing(cells, machine.get("fingerprint"))
    return {
        "head": head,
        "index_lines": head["index_lines"],
        "timing": timing,
        # the index's "Finished"/"Took" are the notebook's own (cells' results), not the whole run's
        "finished": timing["finished"] or show.when(run.get("finished")),
        "took": timing["took"],
        "provenance": provenance_view(results, run_dir, repo),
        "as_run": as_run(run.get("params") or {}, data),
        "not_gpu": head["not_gpu"] or (data.profile or {}).get("device") == "cpu",
    }


def headline_writers(notebook, cells: list[dict]) -> list[dict]:
    """The views of the cells that write headline.json, each with `blocked_by`: the cells upstream of it
    (in this notebook) that did not finish here while everything they need did, i.e. where its chain
    stopped (a report cell not run because a measuring cell before it was interrupted names that cell)."""
    if notebook is None:
        return []
    views = {c.get("id"): c for c in cells if c.get("id")}
    needs = {c.id: [n.cell for n in c.needs if n.notebook is None] for c in notebook.cells}

    def done(cell_id: str) -> bool:
        return views.get(cell_id, {}).get("status") == "ok"

    def stops(cell_id: str, seen: set[str]) -> list[str]:
        found: list[str] = []
        for up in needs.get(cell_id, []):
            if up in seen or done(up):
                continue
            seen.add(up)
            below = stops(up, seen)
            found += below or [up]
        return found

    writers = []
    for cell in notebook.cells:
        if HEADLINE_FILE in cell.outputs and cell.id in views:
            blocked = [] if done(cell.id) else stops(cell.id, {cell.id})
            writers.append({**views[cell.id], "blocked_by": [views[b] for b in blocked if b in views]})
    return writers
