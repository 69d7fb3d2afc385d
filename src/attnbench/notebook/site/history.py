"""Every committed run of one notebook on one machine label, from the git history of outputs/.

For each commit that touched outputs/<notebook>/<label>/ (`git log`, newest first) it reads, at that
commit (`git show`), every cell's artifacts/headline.json and the cells' result.json: the headline's
key numbers (version 2 `numbers`, else the version-1 `entries`) and the code commit the results name
(result.json's code.commit, else "commit <sha>" in the commit subject). A number that moved by more
than its run-to-run spread against the run before is flagged: the spread the headline gives the number
(`numbers[].spread`, measured by the report, e.g. from a repeatability run), else DEFAULT_SPREAD (2 %). Works from a clone's history alone (no network); without git, or
outside a repository, `run_history` returns None and the site links no history page.
"""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from attnbench.notebook.site.headline import HEADLINE_FILE, HeadlineError, parse_headline

DEFAULT_SPREAD = 0.02  # a number moving by more than 2 % between runs is flagged
MAX_RUNS = 200
PAGE_SUFFIX = ".history.html"


@dataclass
class Run:
    commit: str
    date: str
    subject: str
    code: str = ""  # the code commit the results name
    numbers: dict[str, float] = field(default_factory=dict)  # key -> value
    flagged: dict[str, float] = field(default_factory=dict)  # key -> relative move vs the run before
    spreads: dict[str, float] = field(default_factory=dict)  # key -> measured run-to-run spread


@dataclass
class History:
    notebook: str
    label: str
    runs: list[Run]  # oldest first
    names: dict[str, str]  # key -> "name (unit, per)"
    spread: float = DEFAULT_SPREAD


def _git(repo: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def run_history(repo: Path | None, run_dir: Path, spread: float = DEFAULT_SPREAD) -> History | None:
    """The committed runs of `run_dir` (outputs/<notebook>/<label>) in `repo`'s history; None without git."""
    if repo is None:
        return None
    try:
        rel = PurePosixPath(Path(run_dir).resolve().relative_to(Path(repo).resolve()).as_posix())
    except ValueError:
        return None
    log = _git(repo, "log", f"-{MAX_RUNS}", "--format=%H%x09%cI%x09%s", "--", str(rel))
    if log is None:
        return None
    runs, names = [], {}
    for line in reversed(log.strip().splitlines()):
        commit, date, subject = (line.split("\t", 2) + ["", ""])[:3]
        run = Run(commit=commit, date=date[:10], subject=subject)
        files = (_git(repo, "ls-tree", "-r", "--name-only", commit, "--", str(rel)) or "").splitlines()
        for path in files:
            parts = PurePosixPath(path).parts
            if path.endswith(f"/artifacts/{HEADLINE_FILE}"):
                _read_numbers(repo, commit, path, run, names)
            elif path.endswith("/result.json") and not run.code and len(parts) == len(rel.parts) + 2:
                run.code = _code_commit(_git(repo, "show", f"{commit}:{path}"))
        if not run.code:
            found = re.search(r"commit ([0-9a-f]{7,40})", subject)
            run.code = found.group(1) if found else ""
        runs.append(run)
    _flag(runs, spread)
    return History(notebook=rel.parts[-2] if len(rel.parts) > 1 else "", label=rel.name, runs=runs,
                   names=names, spread=spread)  # fmt: skip


def _code_commit(text: str | None) -> str:
    try:
        code = (json.loads(text or "") or {}).get("code") or {}
    except (ValueError, AttributeError):
        return ""
    return str(code.get("commit") or "") if isinstance(code, dict) else ""


def _read_numbers(repo: Path, commit: str, path: str, run: Run, names: dict[str, str]) -> None:
    text = _git(repo, "show", f"{commit}:{path}")
    try:
        headline = parse_headline(json.loads(text or ""), Path(path))
    except (ValueError, HeadlineError):
        return
    for n in headline.numbers:
        if isinstance(n.value, (int, float)):
            run.numbers[n.key] = float(n.value)
            if isinstance(n.spread, (int, float)) and n.spread > 0:
                run.spreads[n.key] = float(n.spread)
            names.setdefault(n.key, f"{n.name} ({', '.join(x for x in (n.unit, n.per) if x)})")
    if not headline.numbers:  # a version-1 headline: its ranked entries
        for e in headline.entries:
            if isinstance(e.value, (int, float)) and not e.baseline:
                key = f"entry|{e.key}"
                run.numbers[key] = float(e.value)
                names.setdefault(key, f"{e.group} {e.label}: {e.winner} ({e.unit})".strip())


def _flag(runs: list[Run], spread: float) -> None:
    last: dict[str, float] = {}
    for run in runs:
        for key, value in run.numbers.items():
            before = last.get(key)
            if before not in (None, 0) and abs(value / before - 1) > run.spreads.get(key, spread):
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
        f'fill="{"#d1242f" if flagged[i] else "currentColor"}"><title>{v:.4g}</title></circle>'
        for i, v in points
    )
    return (f'<svg class="spark" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img">'
            f'<polyline points="{line}" fill="none" stroke="currentColor" stroke-width="1.5"/>{dots}</svg>')  # fmt: skip


def history_view(h: History) -> dict[str, Any]:
    """What history.html.j2 shows: a plot per number and a row per run, flags marked."""
    numbers = []
    for key, name in h.names.items():
        values = [r.numbers.get(key) for r in h.runs]
        flags = [key in r.flagged for r in h.runs]
        measured = next((r.spreads[key] for r in reversed(h.runs) if key in r.spreads), None)
        numbers.append({"key": key, "name": name, "svg": sparkline(values, flags), "moves": sum(flags),
                        "spread": f"{measured or h.spread:.1%}", "measured": measured is not None})  # fmt: skip
    runs = [
        {"commit": r.commit[:9], "full": r.commit, "date": r.date, "subject": r.subject, "code": r.code,
         "cells": [("" if r.numbers.get(k) is None else f"{r.numbers[k]:.4g}", k in r.flagged,
                     f"{r.flagged[k]:+.1%} against the run before" if k in r.flagged else "") for k in h.names]}
        for r in reversed(h.runs)
    ]  # fmt: skip
    return {"notebook": h.notebook, "label": h.label, "numbers": numbers, "runs": runs,
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
