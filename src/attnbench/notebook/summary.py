"""The top of a page and its line in the index: headline, timing, provenance, "as run" parameters.

render.py gathers the cells; this module turns a run's data (sitedata.RunData) and its cells' results
into what the templates show first. Pure functions of their arguments (git is asked through
provenance.py only for dates and for results that did not record their commit).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from attnbench.notebook import artifacts as show
from attnbench.notebook import provenance
from attnbench.notebook.sitedata import RunData
from attnbench.report.headline import PASS_NAMES, Headline, tflops_text

CPU_WARNING = "CPU smoke run: not a GPU measurement"
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


def _percent(value: float | None) -> str:
    return "" if value is None else f"{value:.1%}" if value < 0.1 else f"{value:.0%}"


def headline_view(data: RunData, machine: dict) -> dict[str, Any]:
    """The headline block: verdict badges, one sentence per pass, failures, the table of the best."""
    h = data.headline
    cpu = h.cpu or (not machine.get("gpu") and bool(h.bests))
    rows = [
        {
            "pass": PASS_NAMES.get(b.pass_, b.pass_),
            "shape": b.shape,
            "provider": b.provider,
            "checked": b.checked,
            "tflops": tflops_text(b.tflops) if b.tflops is not None else "",
            "ms": f"{b.ms:.4g}",
            "share": _percent(b.peak_share),
            "peak": b.peak,
            "runner_up": b.runner_up,
            "runner_up_tflops": tflops_text(b.runner_up_tflops) if b.runner_up_tflops is not None else "",
            "slower": f"+{_percent(b.runner_up_slower - 1)}" if b.runner_up_slower else "",
            "quantised": b.quantised,
        }
        for b in h.bests
    ]
    return {
        "cpu": cpu,
        "cpu_warning": CPU_WARNING,
        "sentences": h.sentences,
        "rows": rows,
        "peaks": sorted({b.peak for b in h.bests if b.peak}),
        "incorrect": h.incorrect,
        "missed": h.missed,
        "met": h.met,
        "unchecked": h.unchecked_targets,
        "badges": verdict_badges(h, cpu),
        "empty": h.empty,
        "result_files": data.result_files,
    }


def verdict_badges(h: Headline, cpu: bool = False) -> list[dict[str, str]]:
    """Badges that summarise the verdicts: a missed target or a wrong result is red, never green."""
    badges = []
    targets = [t for t in h.targets if t.source.endswith(".json")]  # a targets file's lines
    checks = [t for t in h.targets if not t.source.endswith(".json")]  # single verdicts (trust check)
    if targets:
        missed = sum(t.verdict == "missed" for t in targets)
        unchecked = sum(t.verdict == "not checked" for t in targets)
        met = len(targets) - missed - unchecked
        text = f"targets: {met} of {len(targets)} met"
        text += f", {missed} missed" if missed else ""
        text += f", {unchecked} not checked" if unchecked else ""
        css = "bad" if missed else "quiet" if unchecked else "good"
        title = "on a CPU smoke run the GPU targets cannot be met" if cpu and missed else ""
        badges.append({"text": text, "css": css, "title": title})
    for check in checks:
        css = {"met": "good", "missed": "bad"}.get(check.verdict, "quiet")
        word = {"met": "holds", "missed": "FAILS"}.get(check.verdict, check.said or "not checked")
        badges.append({"text": f"{check.name} check {word}", "css": css, "title": check.detail})
    if h.incorrect:
        n = len(h.incorrect)
        badges.append({"text": f"{n} correctness failure{'s' if n > 1 else ''}", "css": "bad", "title": ""})
    elif h.bests:
        badges.append({"text": "no correctness failure", "css": "good", "title": ""})
    return badges


def index_lines(h: Headline) -> list[str]:
    """Per pass: the provider that wins most shapes and its best TFLOP/s (share of the peak)."""
    lines = []
    for pass_ in dict.fromkeys(b.pass_ for b in h.bests):
        bests = [b for b in h.bests if b.pass_ == pass_]
        contested = [b for b in bests if b.candidates > 1] or bests
        leader = max(dict.fromkeys(b.provider for b in contested),
                     key=lambda p: sum(b.provider == p for b in contested))  # fmt: skip
        wins = [b for b in contested if b.provider == leader]
        top = max(wins, key=lambda b: b.tflops or 0)
        text = f"{PASS_NAMES.get(pass_, pass_)}: {leader}"
        if len(contested) > 1:
            text += f" ({len(wins)}/{len(contested)} shapes)"
        if top.tflops is not None:
            text += f", up to {tflops_text(top.tflops)} TFLOP/s"
            if top.peak_share is not None:
                text += f" ({_percent(top.peak_share)} of {top.peak} peak)"
        lines.append(text)
    return lines


def notebook_timing(cells: list[dict]) -> dict[str, str]:
    """The notebook's own time: its cells' results (not the whole `attnbench run` that ran them)."""
    finished = [c["finished_at"] for c in cells if c.get("finished_at")]
    started = [c["started_at"] for c in cells if c.get("started_at")]
    durations = [c["duration_s"] for c in cells if isinstance(c.get("duration_s"), (int, float))]
    last = max(finished, key=_safe_time_key, default=None)
    first = min(started, key=_safe_time_key, default=None)
    return {
        "finished": show.when(last),
        "started": show.when(first),
        "took": show.duration(sum(durations)) if durations else "",
        "cells_timed": str(len(durations)),
    }


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
              machine: dict) -> dict[str, Any]:  # fmt: skip
    """Everything the top of a notebook page and its index line show, beside render.py's own view."""
    head = headline_view(data, machine)
    results = [c["result"] for c in cells if c.get("result")]
    timing = notebook_timing(cells)
    return {
        "head": head,
        "index_lines": index_lines(data.headline),
        "timing": timing,
        # the index's "Finished"/"Took" are the notebook's own (cells' results), not the whole run's
        "finished": timing["finished"] or show.when(run.get("finished")),
        "took": timing["took"],
        "provenance": provenance_view(results, run_dir, repo),
        "as_run": as_run(run.get("params") or {}, data),
        "not_gpu": head["cpu"] or (data.profile or {}).get("device") == "cpu",
    }
