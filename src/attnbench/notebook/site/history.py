"""Every committed run of one notebook on one machine label, from the git history of outputs/.

For each commit that touched outputs/<notebook>/<label>/ (`git log`, newest first) it reads, at that
commit (`git show`), every cell's artifacts/headline.json and the cells' result.json: the headline's
key numbers (version 2 `numbers`, else the version-1 `entries`) and the code commit the results name
(result.json's code.commit, else "commit <sha>" in the commit subject).

A commit that only presents the same measurement again (the same code commit and every number it shares
with the run before unchanged: a figure or table re-drawn) is folded into that run, so each point of a
plot is one measurement. A series is named by what it measures, not by who won it (a version-1 entry's
winner is per run), and a key renamed by newer presenting code continues the series of the old key
where both have the same name and never appear in one run.

A number that moved by more than its run-to-run spread against the run before is flagged: the spread
the headline gives the number (`numbers[].spread`, measured by the report, e.g. from a repeatability
run), else DEFAULT_SPREAD (2 %). Works from a clone's history alone (no network); without git, or
outside a repository, `run_history` returns None and the site links no history page.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from attnbench.notebook.run import provenance
from attnbench.notebook.site.artifacts import parse_time
from attnbench.notebook.site.headline import HEADLINE_FILE, HeadlineError, parse_headline

DEFAULT_SPREAD = 0.02  # a number moving by more than 2 % between runs is flagged
MAX_RUNS = 200
PAGE_SUFFIX = ".history.html"


@dataclass
class Run:
    commit: str
    date: str
    subject: str
    code: str = ""  # the oldest code commit its cells name (the measuring code)
    later_code: list[str] = field(default_factory=list)  # the other code commits its cells ran, oldest first
    numbers: dict[str, float] = field(default_factory=dict)  # key -> value
    flagged: dict[str, float] = field(default_factory=dict)  # key -> relative move vs the run before
    spreads: dict[str, float] = field(default_factory=dict)  # key -> measured run-to-run spread
    winners: dict[str, str] = field(default_factory=dict)  # key -> who won it (version-1 entries)
    presented_again: list[str] = field(default_factory=list)  # later commits that only re-presented it

    @property
    def presented_with(self) -> str:
        """The newest code commit its cells ran, where there is more than one (presenting cells re-run)."""
        return self.later_code[-1] if self.later_code else ""

    @property
    def also_code(self) -> list[str]:
        """The code commits between the oldest and the newest (a label measured in parts)."""
        return self.later_code[:-1]


@dataclass
class History:
    notebook: str
    label: str
    runs: list[Run]  # oldest first
    names: dict[str, str]  # key -> "name (unit, per)"
    spread: float = DEFAULT_SPREAD


def run_history(repo: Path | None, run_dir: Path, spread: float = DEFAULT_SPREAD) -> History | None:
    """The committed runs of `run_dir` (outputs/<notebook>/<label>) in `repo`'s history; None without git."""
    if repo is None:
        return None
    try:
        rel = PurePosixPath(Path(run_dir).resolve().relative_to(Path(repo).resolve()).as_posix())
    except ValueError:
        return None
    log = provenance.git_output(repo, "log", f"-{MAX_RUNS}", "--format=%H%x09%cI%x09%s", "--", str(rel))
    if log is None:
        return None
    runs, names = [], {}
    with provenance.GitObjects(repo) as git:
        for line in reversed(log.strip().splitlines()):
            commit, date, subject = (line.split("\t", 2) + ["", ""])[:3]
            run = _run_at(git, rel, Run(commit=commit, date=date[:10], subject=subject), names)
            if run is not None:
                runs.append(run)
    runs = _fold_presentations(runs)
    _merge_renamed(runs, names)
    for key in [k for k in names if not any(k in r.numbers for r in runs)]:
        names.pop(key)  # only in presentations a newer one replaced
    _flag(runs, spread)
    return History(notebook=rel.parts[-2] if len(rel.parts) > 1 else "", label=rel.name, runs=runs,
                   names=names, spread=spread)  # fmt: skip


def _run_at(git, rel: PurePosixPath, run: Run, names: dict[str, str]) -> Run | None:
    """The run the label folder `rel` held at `run.commit`: its headline numbers and the code commits its
    cells ran; None where the commit removed the folder (it holds no run)."""
    repo = git.root
    files = git.tree(run.commit, str(rel)) or []
    if not files:
        return None
    cells: dict[str, tuple[str, list[str] | None]] = {}  # cell -> (its code commit, the cells it reads)
    numbered: set[str] = set()  # the cells whose headline.json gave numbers
    for sha, path in files:
        parts = PurePosixPath(path).parts
        # <cell>/artifacts/headline.json: not a failed try's, kept in <cell>/last-failure/
        if path.endswith(f"/artifacts/{HEADLINE_FILE}") and len(parts) == len(rel.parts) + 3:
            if _read_numbers(git.text(sha), path, run, names):
                numbered.add(parts[-3])
        elif path.endswith("/result.json") and len(parts) == len(rel.parts) + 2:
            cells[parts[-2]] = _cell_record(git.text(sha))
    # the code of the cells the numbers come from: the headline's writers and what they read, however
    # far upstream (a label also holds cells of other runs, e.g. a placeholder an older engine left)
    measuring = _upstream_closure(numbered, cells) or set(cells)
    codes = [code for cell, (code, _) in cells.items() if cell in measuring]
    # the oldest code its cells ran (the measuring cells; presenting cells may have re-run later)
    # ties (commits this clone does not hold) keep the order the cells are listed in: the same every build
    known = sorted(dict.fromkeys(c for c in codes if c), key=lambda sha: _commit_time(repo, sha))
    run.code, run.later_code = (known[0], known[1:]) if known else ("", [])
    if not run.code:
        found = re.search(r"commit ([0-9a-f]{7,40})", run.subject)
        run.code = found.group(1) if found else ""
    return run


def _commit_time(repo: Path, sha: str) -> float:
    """The commit's time (provenance.commit_date, asked once per build), for ordering code commits; unknown
    here (a commit of another clone) counts as newest."""
    when = parse_time(provenance.commit_date(repo, sha))
    return when.timestamp() if when else math.inf


def _cell_record(text: str | None) -> tuple[str, list[str] | None]:
    """A result.json's code commit and the names of the cells it read (its key's `upstream` part; None
    where the record has no key parts to say)."""
    try:
        record = json.loads(text or "") or {}
        code = record.get("code") or {}
        parts = record.get("key_parts")
    except (ValueError, AttributeError):
        return "", None
    commit = str(code.get("commit") or "") if isinstance(code, dict) else ""
    upstream = parts.get("upstream") if isinstance(parts, dict) else None
    return commit, [str(name) for name in upstream] if isinstance(upstream, dict) else None


def _upstream_closure(start: set[str], cells: dict[str, tuple[str, list[str] | None]]) -> set[str]:
    """`start` and every cell of `cells` they read, directly or not (a need of another notebook, or of a
    cell not stored here, is not in `cells` and ends its chain); empty where a record on the way does not
    say what it read (then every cell counts)."""
    seen: set[str] = set()
    todo = [c for c in start if c in cells]
    while todo:
        cell = todo.pop()
        if cell in seen:
            continue
        reads = cells[cell][1]
        if reads is None:
            return set()
        seen.add(cell)
        todo += [up for up in reads if up in cells]
    return seen


def _read_numbers(text: str | None, path: str, run: Run, names: dict[str, str]) -> bool:
    """The key numbers of the headline `text` (at `path`) into `run`; whether it had any."""
    cell = PurePosixPath(path).parts[-3]  # <cell>/artifacts/headline.json: the cell whose ranking it is
    try:
        headline = parse_headline(json.loads(text or ""), Path(path))
    except (ValueError, HeadlineError):
        return False
    found = False
    for n in headline.numbers:
        if isinstance(n.value, (int, float)):
            run.numbers[n.key], found = float(n.value), True
            if isinstance(n.spread, (int, float)) and n.spread > 0:
                run.spreads[n.key] = float(n.spread)
            names.setdefault(n.key, f"{n.name} ({', '.join(x for x in (n.unit, n.per) if x)})")
    if not headline.numbers:  # a version-1 headline: its ranked entries, named without the winner
        for e in headline.entries:
            if isinstance(e.value, (int, float)) and not e.baseline:
                key = f"entry|{e.key}"
                run.numbers[key], found = float(e.value), True
                run.winners[key] = e.winner
                if isinstance(e.spread, (int, float)) and e.spread > 0:
                    run.spreads[key] = float(e.spread)
                what = " ".join(x for x in (e.group, e.label or e.key) if x)
                unit = ", ".join(x for x in (e.unit, e.per) if x)
                names.setdefault(key, f"{cell}: {what}, fastest ({unit})")
    return found


def _fold_presentations(runs: list[Run]) -> list[Run]:
    """Runs oldest first, each commit that only re-presented the run before folded into it: the same
    measuring code (_same_code) and the same numbers, value for value (under the same keys, or keys newer
    presenting code renamed), none added or dropped. The measurement is
    shown as its newest presentation presents it (today's keys and names), and the run lists the commits
    that presented it again."""
    folded: list[Run] = []
    for run in runs:
        before = folded[-1] if folded else None
        if (
            before is not None
            and run.numbers
            and sorted(run.numbers.values()) == sorted(before.numbers.values())
            and _same_code(run.code, before.code)
        ):
            before.numbers, before.spreads, before.winners = run.numbers, run.spreads, run.winners
            before.later_code = run.later_code or before.later_code
            before.presented_again.append(run.commit)
            continue
        folded.append(run)
    return folded


def _same_code(a: str, b: str) -> bool:
    """The same measuring code, or unknown for one of them (a short sha matches its full form). Numbers
    that cannot vary (an environment's SM count) agree to the last bit when measured again: only a
    re-presentation keeps the measuring code."""
    return not a or not b or a.startswith(b) or b.startswith(a)


def _merge_renamed(runs: list[Run], names: dict[str, str]) -> None:
    """Keys of one name that never share a run are one series under the newest key (presenting code
    renamed the key; what it measures is the same)."""
    by_name: dict[str, list[str]] = {}
    for key, name in names.items():
        by_name.setdefault(name, []).append(key)
    for keys in by_name.values():
        if len(keys) < 2 or any(sum(k in r.numbers for k in keys) > 1 for r in runs):
            continue
        newest = next((k for r in reversed(runs) for k in keys if k in r.numbers), None)
        if newest is None:  # in no run left: every presentation of it was folded into a newer one
            continue
        for run in runs:
            for key in keys:
                if key != newest and key in run.numbers:
                    run.numbers[newest] = run.numbers.pop(key)
                    for table in (run.spreads, run.winners):
                        if key in table:
                            table[newest] = table.pop(key)
        for key in keys:
            if key != newest:
                names.pop(key)


def _flag(runs: list[Run], spread: float) -> None:
    """Flag each number that moved against the run before by more than its spread: the spread measured
    for it (the newest run that says one: an older run predates the measurement, not the noise), else
    `spread`."""
    measured: dict[str, float] = {}
    for run in runs:
        measured.update(run.spreads)
    last: dict[str, float] = {}
    for run in runs:
        for key, value in run.numbers.items():
            before = last.get(key)
            if before not in (None, 0) and abs(value / before - 1) > measured.get(key, spread):
                run.flagged[key] = value / before - 1
            last[key] = value


def sparkline(values: list[float | None], flagged: list[bool], width: int = 220, height: int = 44) -> str:
    """An inline SVG of one number over the runs (oldest left); a flagged run is a red dot."""
    points = [(i, v) for i, v in enumerate(values) if v is not None]
    if not points:
        return ""
    low, high = min(v for _, v in points), max(v for _, v in points)
    span = (high - low) or abs(high) or 1.0
    step = (width - 12) / max(len(values) - 1, 1)

    def xy(i: int, v: float) -> tuple[float, float]:
        return 6 + i * step, height - 6 - (v - low) / span * (height - 12)

    line = " ".join(f"{x:.1f},{y:.1f}" for x, y in (xy(i, v) for i, v in points))
    dots = "".join(
        f'<circle cx="{xy(i, v)[0]:.1f}" cy="{xy(i, v)[1]:.1f}" r="{3.5 if flagged[i] else 2.2}" '
        f'fill="{"#d1242f" if flagged[i] else "currentColor"}"><title>{_shown(v)}</title></circle>'
        for i, v in points
    )
    return (f'<svg class="spark" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img">'
            f'<polyline points="{line}" fill="none" stroke="currentColor" stroke-width="1.5"/>{dots}</svg>')  # fmt: skip


def _shown(value: float) -> str:
    """Whole lengths and counts as integers (16,384 tokens), measured values to four digits."""
    whole = math.isfinite(value) and value == int(value) and abs(value) >= 100
    return f"{int(value):,}" if whole else f"{value:.4g}"


def _values_text(values: list[float | None]) -> str:
    """'now 667.3, first 659.4 (range 640.1–667.3)' over the runs that have the number."""
    have = [v for v in values if v is not None]
    if not have:
        return ""
    if len(have) == 1:
        return f"{_shown(have[0])}"
    text = f"now {_shown(have[-1])}, first {_shown(have[0])}"
    low, high = min(have), max(have)
    return text + (
        f" (range {_shown(low)}–{_shown(high)})" if (low, high) != tuple(sorted((have[0], have[-1]))) else ""
    )


def _cell(run: Run, key: str) -> tuple[str, bool, str]:
    """A table cell: the value, whether it is flagged, and its hover text (the move, who won it)."""
    value = run.numbers.get(key)
    why = [f"{run.flagged[key]:+.1%} against the run before"] if key in run.flagged else []
    if key in run.winners:
        why.append(f"fastest: {run.winners[key]}")
    return ("" if value is None else _shown(value), key in run.flagged, "; ".join(why))


def history_view(h: History) -> dict[str, Any]:
    """What history.html.j2 shows: a plot per number and a row per measurement, flags marked."""
    numbers = []
    for key, name in h.names.items():
        values = [r.numbers.get(key) for r in h.runs]
        flags = [key in r.flagged for r in h.runs]
        measured = next((r.spreads[key] for r in reversed(h.runs) if key in r.spreads), None)
        numbers.append({"key": key, "name": name, "svg": sparkline(values, flags), "moves": sum(flags),
                        "seen": _values_text(values),
                        "spread": f"{measured or h.spread:.1%}", "measured": measured is not None})  # fmt: skip
    runs = [
        {"commit": r.commit[:9], "full": r.commit, "date": r.date, "subject": r.subject, "code": r.code[:9],
         "again": [c[:9] for c in r.presented_again], "presented_with": r.presented_with[:9],
         "also_code": [c[:9] for c in r.also_code],
         "cells": [_cell(r, k) for k in h.names]}
        for r in reversed(h.runs)
    ]  # fmt: skip
    return {"notebook": h.notebook, "label": h.label, "numbers": numbers, "runs": runs,
            "commits": sum(1 + len(r.presented_again) for r in h.runs),
            "spread": f"{h.spread:.0%}", "keys": list(h.names.values())}  # fmt: skip


def write_history_page(env, site: Path, repo: Path | None, run_dir: Path, title: str) -> str:
    """site/<notebook>/<label>.history.html; its href relative to the notebook's folder, or "" without git."""
    h = run_history(repo, run_dir)
    if h is None or not h.runs:
        return ""
    name = f"{run_dir.name}{PAGE_SUFFIX}"
    page = site / run_dir.parent.name / name
    page.parent.mkdir(parents=True, exist_ok=True)
    page.write_text(env.get_template("history.html.j2").render(root="../", title=title, **history_view(h)))
    return name
