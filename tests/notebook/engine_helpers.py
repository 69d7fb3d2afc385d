"""Helpers for engine tests: a throw-away project folder with notebooks/, run in-process with
`--env python` (this interpreter: no network, no uv) and a fixed label."""

from __future__ import annotations

import json
import textwrap
from dataclasses import dataclass
from pathlib import Path

from attnbench.notebook.cli import main

LABEL = "t"


def notebook(*cells: str, params: dict | None = None, title: str = "T") -> str:
    """Notebook text: front matter with `params`, then the given cell texts."""
    lines = ["#!/usr/bin/env -S uv run attnbench run", "---", f"title: {title}"]
    if params:
        lines.append("params:")
        lines += [f"  {k}: {json.dumps(v)}" for k, v in params.items()]
    lines += ["---", "Some prose.", ""]
    return "\n".join(lines) + "\n" + "\n".join(cells)


def cell(attrs: str, body: str) -> str:
    """One ```python fence with `attrs` (e.g. "id=a needs=b") around the dedented `body`."""
    return f"```python {attrs}\n{textwrap.dedent(body).strip()}\n```\n"


@dataclass
class Outcome:
    code: int
    out: str
    err: str


class Project:
    def __init__(self, root: Path, capsys):
        self.root = root
        self.capsys = capsys
        (root / "notebooks").mkdir()

    def write(self, name: str, text: str) -> Path:
        path = self.root / "notebooks" / name
        path.write_text(text)
        return path

    def cli(self, *argv: str) -> Outcome:
        self.capsys.readouterr()
        code = main([str(a) for a in argv])
        captured = self.capsys.readouterr()
        return Outcome(code, captured.out, captured.err)

    def run(self, *args, label: str = LABEL) -> Outcome:
        return self.cli("run", *args, "--env", "python", "--label", label, "--plain", "--kill-grace", "2")

    def status(self, *args) -> Outcome:
        return self.cli("status", *args, "--env", "python", "--label", LABEL)

    def cell_dir(self, nb: str, cell_id: str, label: str = LABEL) -> Path:
        return self.root / "outputs" / nb / label / cell_id

    def result(self, nb: str, cell_id: str) -> dict:
        return json.loads((self.cell_dir(nb, cell_id) / "result.json").read_text())

    def run_json(self, nb: str) -> dict:
        return json.loads((self.root / "outputs" / nb / LABEL / "run.json").read_text())

    def stdout(self, nb: str, cell_id: str) -> str:
        return (self.cell_dir(nb, cell_id) / "stdout.txt").read_text()
