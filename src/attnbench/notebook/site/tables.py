"""Table cells as the site shows them: values rounded for reading (the exact one in the tooltip), long
text cut, numeric columns right-aligned. artifacts.py turns CSV, TSV and JSONL files into such tables;
results_view.py builds the curated view of benchmark result rows from them."""

from __future__ import annotations

import json
import re
import statistics
from typing import Any, NamedTuple

MAX_TABLE_ROWS = 200  # rows shown per table; the full file is a download link
MAX_RECORDS = 20_000  # JSONL lines read for the curated view (beyond: counted, not read)
LONG_VALUE = 60  # table values longer than this are cut with an ellipsis (whole value in the tooltip)
REPEATED = 3  # a long value in this many rows of a column is said once, under the table, as a note
NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
MEASURE = re.compile(r"[+-]?(\d[\d,]*\.?\d*|\.\d+)([eE][+-]?\d+)?\s*(%|x|×|ms|s|[KMGT]i?B)?")  # 95.2%, 1.82x


class Shown(NamedTuple):
    """One table cell as displayed."""

    text: str
    title: str = ""  # the exact value when `text` is rounded, or the whole of a cut value
    css: str = ""  # "num" right-aligns; "good"/"bad" colour a verdict; "long" cuts with an ellipsis


def shown(value: Any) -> Shown:
    """A CSV string or a JSON value as a table cell: long numbers rounded to 4 digits, long text cut."""
    if value is None:
        return Shown("")
    # a series (per-step times, per-call clocks): its size and spread, the whole of it in the tooltip
    if _numbers(value):
        low, high = min(value), max(value)
        text = f"{len(value)} values: median {statistics.median(value):.4g} ({low:.4g}–{high:.4g})"
        return Shown(text, json.dumps(value, separators=(",", ":")))
    if isinstance(value, list) and value and all(v is None for v in value):
        return Shown("", json.dumps(value))  # [null, null]: nothing recorded, said as nothing
    if (
        isinstance(value, dict)
        and value
        and all(isinstance(v, (int, float, str)) or v is None for v in value.values())
    ):
        # a small record (a peak with its clock): each field as read, numbers rounded; the JSON in the tooltip
        parts = [f"{key} {shown(v).text}" for key, v in value.items() if v is not None]
        return Shown(", ".join(parts), json.dumps(value, separators=(",", ":")))
    if isinstance(value, (bool, dict, list)):  # as JSON writes them: true, not True
        text = json.dumps(value, separators=(",", ":"))
    else:
        text = str(value) if not isinstance(value, float) else repr(value)
    if NUMBER.fullmatch(text):
        mantissa = re.split("[eE]", text)[0]
        digits = mantissa.lstrip("+-").replace(".", "").lstrip("0")
        if ("." in text or "e" in text.lower()) and len(digits) > 6:
            return Shown(format(float(text), "#.4g"), text, "num")  # '#': 17.00, not 17
        return Shown(text, "", "num")
    if len(text) > LONG_VALUE:
        return Shown(text, text, "long")
    return Shown(text)


SERIES = 5  # a list of this many numbers or more is summarised in its cell


def _numbers(value: Any) -> bool:
    return (isinstance(value, list) and len(value) >= SERIES
            and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value))  # fmt: skip


def table(columns: list[str], rows: list[list[Shown]], total: int, note: str = "", titles=None) -> dict:
    """A table for the template; a column of numbers is right-aligned, its header too. A column empty in
    every row shown is left out and named in `empty`, so the page says what it dropped."""
    titles = titles or [""] * len(columns)
    rows = [row + [Shown("")] * (len(columns) - len(row)) for row in rows]  # a short CSV row
    keep = [i for i in range(len(columns)) if not rows or any(row[i].text for row in rows)]
    numeric = {
        i: any(row[i].text for row in rows) and all(row[i].css == "num" for row in rows if row[i].text)
        for i in keep
    }
    rows = [[row[i] for i in keep] + row[len(columns) :] for row in rows]
    return {
        "columns": [
            {"name": columns[i], "title": titles[i], "css": "num" if numeric[i] else ""} for i in keep
        ],
        "rows": rows,
        "total": total,
        "note": note,
        "empty": [columns[i] for i in range(len(columns)) if i not in keep],
        "repeated": _notes_for_repeats(rows),
    }


def _notes_for_repeats(rows: list[list[Shown]]) -> list[str]:
    """Long values that stand in REPEATED or more rows (an unavailable provider's reason, once per length
    and pass) become "note N" in their cells, the whole text once under the table (returned in order):
    the same paragraph fifty times hides the rows it explains."""
    counts: dict[tuple[int, str], int] = {}  # (column, text): a value repeated down one column
    for row in rows:
        for j, cell in enumerate(row):
            if cell.css == "long":
                counts[(j, cell.text)] = counts.get((j, cell.text), 0) + 1
    notes = list(dict.fromkeys(text for (_, text), n in counts.items() if n >= REPEATED))
    number = {text: i + 1 for i, text in enumerate(notes)}
    for row in rows:
        for j, cell in enumerate(row):
            if cell.css == "long" and counts.get((j, cell.text), 0) >= REPEATED:
                row[j] = Shown(f"note {number[cell.text]}", cell.text, "ref")
    return notes


def human_size(n: int) -> str:
    for unit in ("B", "KiB", "MiB"):
        if n < 1024:
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"
