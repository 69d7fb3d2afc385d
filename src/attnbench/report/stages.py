"""A report measured in several cells (stages): their rows read as one, and one summary of them.

A sweep too long for one GPU command (the device's 10-minute limit) is split into measuring cells, one
per pass or group of passes, each writing `results.jsonl` and `sweep.json`; the report cells read them
back here as if one cell had measured them all.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from attnbench.rows import Result, read_jsonl


def read_stages(*folders: Path) -> tuple[list[Result], dict]:
    """The timed rows of the measuring cells' folders (in order) and one summary: the first cell's, with
    seconds and status counts added up over all of them and each cell's own summary under "stages"."""
    rows, stages = [], []
    for folder in folders:
        rows += read_jsonl(Path(folder) / "results.jsonl")
        stages.append(json.loads((Path(folder) / "sweep.json").read_text()))
    summary = dict(stages[0], stages=stages)
    for key in ("estimate_s", "check_seconds", "sweep_seconds"):
        summary[key] = round(sum(s.get(key) or 0.0 for s in stages), 1)
    counts: dict[str, int] = defaultdict(int)
    for s in stages:
        for status, n in s["status_counts"].items():
            counts[status] += n
    summary["status_counts"] = dict(sorted(counts.items()))
    return rows, summary
