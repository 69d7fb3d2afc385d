"""The measurement files a report reads from `measurements/` (made by scripts/, committed beside the code).

A report finds them from where it runs: the nearest folder above the working directory that holds any
file of the pattern, else the nearest above this package (a cell runs in its own folder under outputs/);
a search stops at the project root (pyproject.toml), so another project's files are never read.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def nearest(pattern: str, start: Path | None = None) -> list[Path]:
    """The files matching `pattern` (a glob relative to a folder) in the nearest folder that holds any,
    searched above `start` (default: the working directory), then above this package; [] where none."""
    for top in (start or Path.cwd(), Path(__file__).resolve()):
        for folder in (top, *top.parents):
            found = sorted(folder.glob(pattern))
            if found:
                return found
            if (folder / "pyproject.toml").exists():
                break
    return []


def load(path: Path, made_by: str) -> dict:
    """The file as a dict; one that cannot be read, or is not a JSON object with a string machine_id (what
    a report matches a file to its rows by), is named on stderr and counts as no file (`made_by`: the script
    that writes it)."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        print(f"warning: {path}: {e}; it is not used", file=sys.stderr)
        return {}
    if not isinstance(document, dict) or not isinstance(document.get("machine_id"), str):
        what = (
            "not a JSON object"
            if not isinstance(document, dict)
            else f"machine_id {document.get('machine_id')!r}"
        )
        print(f"warning: {path}: {what} ({made_by} writes an object with a string machine_id); it is not used",
              file=sys.stderr)  # fmt: skip
        return {}
    return document
