"""The one reader and writer of row files: JSON Lines of one row type, and the rows-document form
({**about, "rows": [...]}) for rows that are not results to rank."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any, TypeVar

from attnbench.rows.kernel import Result

RowT = TypeVar("RowT")


def write_jsonl(path: Path | str, rows: Iterable, *, append: bool = False) -> None:
    """Rows of any row type (Result, StepRow, ...) one JSON object a line."""
    with open(path, "a" if append else "w") as f:
        f.writelines(json.dumps(row.to_dict(), default=str) + "\n" for row in rows)


def read_jsonl(path: Path | str, kind: type[RowT] = Result) -> list[RowT]:
    """Every row of `path` as `kind`; a bad line is a ValueError naming the file and line."""
    rows = []
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rows.append(kind.from_dict(json.loads(line)))
            except (ValueError, TypeError) as exc:
                raise ValueError(f"{path}:{lineno}: bad {kind.__name__} row: {exc}") from exc
    return rows


def read_jsonl_dicts(path: Path | str, kind: type) -> list[dict[str, Any]]:
    """The rows of `path`, checked against `kind`, as plain dicts (for report code that reads dicts)."""
    return [row.to_dict() for row in read_jsonl(path, kind)]


def write_jsonl_dicts(path: Path | str, rows: Iterable[dict[str, Any]], kind: type) -> None:
    """Rows built as plain dicts, checked against `kind` (a bad one is a ValueError naming its index),
    then written like typed rows."""
    typed = []
    for index, row in enumerate(rows):
        try:
            typed.append(kind.from_dict(row))
        except (ValueError, TypeError) as exc:
            raise ValueError(f"{path}: row {index}: bad {kind.__name__} row: {exc}") from exc
    write_jsonl(path, typed)


def write_rows_document(path: Path | str, rows: Iterable, **about) -> None:
    """Rows that are not results to rank (e.g. correctness checks at a shorter length) as one JSON
    document {**about, "rows": [...]}: the site reads every *.jsonl of rows as results, never this."""
    with open(path, "w") as f:
        json.dump({**about, "rows": [row.to_dict() for row in rows]}, f, indent=1)


def read_rows_document(path: Path | str, kind: type[RowT] = Result) -> list[RowT]:
    with open(path) as f:
        document = json.load(f)
    rows = []
    for index, row in enumerate(document.get("rows", [])):
        try:
            rows.append(kind.from_dict(row))
        except (ValueError, TypeError) as exc:
            raise ValueError(f"{path}: rows[{index}]: bad {kind.__name__} row: {exc}") from exc
    return rows
