"""How the site shows one artifact file: images embedded, CSV/TSV/JSONL as tables, text inline.

Pure functions of a file; render.py decides where they go on the page.
"""

from __future__ import annotations

import base64
import csv
import json
from pathlib import Path
from typing import Any

MAX_TABLE_ROWS = 200  # rows shown per CSV/JSONL table; the full file is a download link
MAX_EMBED_BYTES = 8 * 2**20  # larger images are linked, not embedded
MAX_TEXT_CHARS = 100_000  # stdout/stderr/text artifacts: the tail is shown, the full file linked
IMAGE_TYPES = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".gif": "image/gif",
               ".webp": "image/webp", ".svg": "image/svg+xml"}  # fmt: skip
TEXT_SUFFIXES = {".txt", ".log", ".md", ".json", ".yaml", ".yml", ".toml", ".py", ".sh", ".cfg", ".ini"}


def artifact_view(src: Path, rel: str, href: str) -> dict[str, Any]:
    suffix, size = src.suffix.lower(), src.stat().st_size
    view: dict[str, Any] = {"name": rel, "href": href, "size": human_size(size), "kind": "file"}
    if suffix in IMAGE_TYPES and size <= MAX_EMBED_BYTES:
        # SVG too goes through <img>: an SVG shown as an image runs no script and fetches nothing,
        # a guarantee no hand-written sanitiser gives; it also keeps figure ids and CSS apart.
        data = base64.b64encode(src.read_bytes()).decode("ascii")
        view.update(kind="image", src=f"data:{IMAGE_TYPES[suffix]};base64,{data}")
    elif suffix in (".csv", ".tsv"):
        view.update(kind="table", **_csv_table(src, "\t" if suffix == ".tsv" else ","))
    elif suffix == ".jsonl":
        view.update(kind="table", **_jsonl_table(src))
    elif suffix in TEXT_SUFFIXES:
        text = src.read_text(encoding="utf-8", errors="replace")
        view.update(kind="text", text=text[:MAX_TEXT_CHARS], omitted=max(0, len(text) - MAX_TEXT_CHARS))
    return view


def _csv_table(path: Path, delimiter: str) -> dict[str, Any]:
    with path.open(newline="", encoding="utf-8", errors="replace") as f:
        reader = csv.reader(f, delimiter=delimiter)
        header = next(reader, [])
        rows, total = [], 0
        for row in reader:
            total += 1
            if total <= MAX_TABLE_ROWS:
                rows.append(row)
    return {"columns": header, "rows": rows, "total": total, "note": ""}


def _jsonl_table(path: Path) -> dict[str, Any]:
    columns: dict[str, None] = {}  # insertion-ordered set
    records, total, bad = [], 0, []
    with path.open(encoding="utf-8", errors="replace") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except json.JSONDecodeError as err:
                bad.append(f"line {number}: {err.msg}")
                continue
            total += 1
            if total > MAX_TABLE_ROWS:
                continue
            record = _flatten(value) if isinstance(value, dict) else {"value": value}
            columns.update(dict.fromkeys(record))
            records.append(record)
    rows = [[_cell_text(r.get(c, "")) for c in columns] for r in records]
    note = f"{len(bad)} line(s) are not JSON ({'; '.join(bad[:3])})" if bad else ""
    return {"columns": list(columns), "rows": rows, "total": total, "note": note}


def _flatten(record: dict, prefix: str = "") -> dict[str, Any]:
    """One level of nesting becomes dotted columns (correctness.max_abs); deeper stays JSON."""
    flat: dict[str, Any] = {}
    for key, value in record.items():
        if isinstance(value, dict) and not prefix:
            flat.update(_flatten(value, f"{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _cell_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return format(value, ".6g")
    if isinstance(value, (dict, list, bool)):  # as JSON writes them: true, not True
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def human_size(n: int) -> str:
    for unit in ("B", "KiB", "MiB"):
        if n < 1024:
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"
