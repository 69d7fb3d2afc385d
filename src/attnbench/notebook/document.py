"""The one data model of a notebook: front matter, params, cells, prose.

Parsing (parse.py) builds these; planning, execution, rendering and export only read them.
Every element remembers the 1-based line it came from so that any later error can say `path:line`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


def is_plain_data(value: Any) -> bool:
    """JSON-like data (None, str, bool, int, finite float, lists, str-keyed dicts): what a param may hold,
    since every param becomes JSON for the cell and a Python literal in its script."""
    if value is None or isinstance(value, (str, bool, int)):
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, list):
        return all(is_plain_data(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and is_plain_data(v) for k, v in value.items())
    return False


class NotebookError(Exception):
    """A problem with a notebook that stops the run before any cell starts (exit code 2)."""

    def __init__(self, path: Path | str, line: int | None, message: str):
        self.path = Path(path)
        self.line = line
        self.message = message
        super().__init__(str(self))

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.line else f"{self.path}"
        return f"{where}: {self.message}"


@dataclass(frozen=True)
class Need:
    """An upstream dependency: `cell` in this notebook, or `other.md:cell` in another one."""

    cell: str
    notebook: str | None = None  # notebook stem (e.g. "environment"); None means "this notebook"

    def __str__(self) -> str:
        return f"{self.notebook}.md:{self.cell}" if self.notebook else self.cell

    @property
    def notebook_name(self) -> str | None:
        """The other notebook's name (its folder under outputs/ and site/), without any path."""
        return self.notebook.rsplit("/", 1)[-1] if self.notebook else None


@dataclass
class Cell:
    """A fenced ```python block with an `id`: one self-contained script."""

    id: str
    source: str  # the cell body without its PEP 723 block
    line: int  # line of the opening fence
    deps: list[str] = field(default_factory=list)  # merged: deps= attribute + PEP 723 dependencies
    requires_python: str | None = None  # from the PEP 723 block
    script_tool: dict[str, Any] = field(default_factory=dict)  # the PEP 723 [tool] table, kept verbatim
    needs: list[Need] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)  # artifact globs; empty = every file written
    timeout: float | None = None  # seconds
    gpus: int | None = None  # launch under torch.distributed.run with this many processes per node
    env: dict[str, str] = field(default_factory=dict)  # per-cell environment overrides
    collapse_code: bool = False
    collapse_output: bool = False

    @property
    def metadata(self) -> dict[str, Any]:
        """The resolved PEP 723 metadata of the materialised script (part of the cache key)."""
        meta: dict[str, Any] = {"dependencies": sorted(set(self.deps))}
        if self.requires_python:
            meta["requires-python"] = self.requires_python
        if self.script_tool:
            meta["tool"] = self.script_tool
        return meta


@dataclass
class Block:
    """A piece of the document in order: Markdown prose, a runnable cell, or a shown-only code block."""

    kind: str  # "markdown" | "cell" | "code"
    line: int
    text: str = ""  # markdown text, or the code of a shown-only block
    language: str = ""  # for "code" blocks
    cell: Cell | None = None  # for "cell" blocks


@dataclass
class Notebook:
    path: Path
    title: str
    description: str = ""
    params: dict[str, Any] = field(default_factory=dict)  # front-matter defaults
    front_matter: dict[str, Any] = field(default_factory=dict)  # everything in the front matter
    blocks: list[Block] = field(default_factory=list)
    shebang: str | None = None
    text: str = ""  # the whole source, as read

    @property
    def name(self) -> str:
        """The notebook's stem: the folder name under cells/ and outputs/."""
        return self.path.stem

    @property
    def cells(self) -> list[Cell]:
        return [b.cell for b in self.blocks if b.kind == "cell" and b.cell is not None]

    def cell(self, cell_id: str) -> Cell:
        for c in self.cells:
            if c.id == cell_id:
                return c
        raise KeyError(cell_id)

    def resolve_params(self, overrides: dict[str, Any] | None = None, *, line_of=None) -> dict[str, Any]:
        """Front-matter defaults overridden by `-p key=value`; an unknown key is a NotebookError."""
        resolved = dict(self.params)
        for key, value in (overrides or {}).items():
            if key not in self.params:
                known = ", ".join(sorted(self.params)) or "none"
                raise NotebookError(
                    self.path, line_of, f"unknown param {key!r} (-p {key}=...); params: {known}"
                )
            if not is_plain_data(value):
                raise NotebookError(
                    self.path,
                    line_of,
                    f"param {key!r}: -p {key}={value!r} is a {type(value).__name__}, not plain "
                    "data (string, number, bool, null, list or mapping); quote it to pass a string",
                )
            resolved[key] = value
        return resolved
