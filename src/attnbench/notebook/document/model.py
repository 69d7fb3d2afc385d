"""The one data model of a notebook: front matter, params, cells, prose.

Parsing (parse.py, front_matter.py) builds these; planning, execution, rendering and export only read
them. Every element remembers the 1-based line it came from so that any later error can say `path:line`.
"""

from __future__ import annotations

import json
import math
import os
import platform
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Cell ids name files (cells/<nb>/<id>.py, outputs/.../.tmp-old-<id>-<hex>/): well under the 255-byte
# limit of a file name.
MAX_ID_LENGTH = 100
PLAIN_DATA = "string, number, bool, null, list or mapping"


def plain_data_problem(value: Any) -> str | None:
    """Why `value` is not JSON-like data (None, str, bool, int, finite float, lists, str-keyed dicts),
    or None when it is: what a param may hold, since every param becomes JSON for the cell and a
    Python literal in its script. A list or mapping reached twice (a YAML alias, or a value containing
    itself) is refused: written out, an alias bomb is billions of items. Linear in the value's size."""
    seen: set[int] = set()
    stack: list[tuple[str, Any]] = [("", value)]
    while stack:
        where, item = stack.pop()
        at = f" at {where}" if where else ""
        if item is None or isinstance(item, (str, bool, int)):
            continue
        if isinstance(item, float):
            if not math.isfinite(item):
                return f"{item!r}{at} is not a finite number"
            continue
        if not isinstance(item, (list, dict)):
            return f"got {described(item)}{at}"
        if id(item) in seen:
            return (
                f"the {'list' if isinstance(item, list) else 'mapping'}{at} appears more than once "
                "(a YAML alias *name, or a value that contains itself): write the value out"
            )
        seen.add(id(item))
        if isinstance(item, list):
            stack.extend((f"{where}[{index}]", v) for index, v in reversed(list(enumerate(item))))
            continue
        for key in item:
            if not isinstance(key, str):
                return f"key {clip(repr(key))}{at} is a {type(key).__name__}, not a string"
        stack.extend((f"{where}.{key}" if where else key, v) for key, v in reversed(item.items()))
    return None


def _a(kind: str) -> str:
    return f"an {kind}" if kind[0] in "aeiou" else f"a {kind}"


def clip(text: str, limit: int = 60) -> str:
    """`text` cut to `limit` characters, '…' marking the cut: how a message shows a value of any size."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def described(value: Any) -> str:
    """A value's Python type and, unless it is a list or a mapping, the value: 'int (3)', 'list'."""
    name = type(value).__name__
    return name if isinstance(value, (dict, list)) else f"{name} ({clip(repr(value))})"


def kind_of(value: Any) -> str:
    """A param value's type as a reader names it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "list"
    return "mapping" if isinstance(value, dict) else type(value).__name__


def param_type_problem(default: Any, value: Any, where: str = "") -> str | None:
    """Why `value` cannot stand in for the front-matter `default`, or None when it can: the same kind
    (an int where a float is expected is fine; a null default takes anything), list items like the
    default's items when those all have one kind, mapping values like the default's under the same key."""
    if default is None:
        return None
    if isinstance(default, float) and not isinstance(value, bool) and isinstance(value, (int, float)):
        return None
    if kind_of(default) != kind_of(value):
        if not where:
            return f"is {_a(kind_of(value))}, but the default {_as_param(default)} is {_a(kind_of(default))}"
        return (
            f"has {_a(kind_of(value))} at {where} ({_as_param(value)}), "
            f"where the default has {_a(kind_of(default))} ({_as_param(default)})"
        )
    if isinstance(default, list):
        model = _item_model(default)
        if model is not _MIXED:
            for index, item in enumerate(value):
                if problem := param_type_problem(model, item, f"{where}[{index}]"):
                    return problem
    elif isinstance(default, dict):
        for key in [key for key in value if key in default]:  # in the given order: one stable message
            if problem := param_type_problem(default[key], value[key], f"{where}.{key}" if where else key):
                return problem
    return None


_MIXED = object()


def _item_model(items: list) -> Any:
    """What every item of a default list is like: one of them, 0.0 for ints mixed with floats, or
    _MIXED when the items differ (or there are none): then any item goes."""
    kinds = {kind_of(item) for item in items}
    if not kinds or "null" in kinds:
        return _MIXED
    if kinds == {"int", "float"}:
        return 0.0
    return items[0] if len(kinds) == 1 else _MIXED


def current_platform() -> str:
    """This system as uvnote names it (`platform.system()` lower-cased: linux, darwin, windows);
    $UVNOTE_PLATFORM overrides it, as in uvnote."""
    return os.environ.get("UVNOTE_PLATFORM", platform.system()).lower()


def env_name(cell_id: str) -> str:
    """The upper-case form of an id in $UVNOTE_INPUT_<ID> / $ATTNBENCH_INPUT_<ID> (uvnote's rule:
    letters and digits upper-cased, anything else '_'): two ids with one form cannot both be inputs.
    The one naming rule: launchers and inputs() (run/inputs.py) use it too."""
    return re.sub(r"[^A-Za-z0-9_]", "_", cell_id).upper()


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
    """A fenced ```python block: one self-contained script."""

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
    # gpus=N+: as many processes as the label's machine has GPUs, at least N (session.prepare resolves it into
    # `gpus` per label, so a key, a launch and a GPU check see the count that ran; a CPU label runs N)
    gpus_or_more: bool = False
    env: dict[str, str] = field(default_factory=dict)  # per-cell environment overrides
    collapse_code: bool = False
    collapse_output: bool = False
    id_from_code: bool = False  # no id= given: uvnote's id, the first 8 hex digits of the code's sha256
    script: str | None = None  # uvnote's script=: the code came from this file (relative to the notebook)

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


@dataclass(frozen=True)
class Display:
    """uvnote's presentation keys of the front matter, typed. Nothing runs differently for them; the
    site may honour them."""

    theme: str | None = None  # dark | light | auto
    ui_theme: str | None = None
    widgets: bool | None = None  # uvnote's `widgets` or `show_widgets`
    syntax_theme: str | None = None  # a pygments style
    show_line_numbers: bool = False
    collapse_code: bool = False
    custom_css: str = ""
    code_font_size: str | float | None = None  # a CSS size, or a number of pixels
    on_github: str | None = None  # "owner/repo"
    on_huggingface: str | None = None  # "owner/name"


@dataclass
class Notebook:
    path: Path
    title: str
    description: str = ""
    params: dict[str, Any] = field(default_factory=dict)  # front-matter defaults
    front_matter: dict[str, Any] = field(default_factory=dict)  # the front matter as written
    blocks: list[Block] = field(default_factory=list)
    shebang: str | None = None
    text: str = ""  # the whole source, as read
    author: str = ""
    platforms: tuple[str, ...] | None = None  # uvnote's platforms: run only on these systems
    display: Display = field(default_factory=Display)
    param_lines: dict[str, int] = field(default_factory=dict)  # 1-based line of each param's default

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

    def skip_reason(self, system: str | None = None) -> str | None:
        """Why this notebook does not run on `system` (default: this one), as uvnote >= 0.3.1 skips a
        document whose `platforms` leave the system out; None when it runs."""
        system = system or current_platform()
        if self.platforms is None or system in self.platforms:
            return None
        return f"requires platforms {', '.join(self.platforms)}; this system is {system}"

    def resolve_params(self, overrides: dict[str, Any] | None = None, *, line_of=None) -> dict[str, Any]:
        """Front-matter defaults overridden by `-p key=value`. An unknown key, a value that is not plain
        data or not of the default's type is a NotebookError (at the param's line when known)."""
        resolved = dict(self.params)
        for key, value in (overrides or {}).items():
            if key not in self.params:
                known = ", ".join(sorted(self.params)) or "none"
                raise NotebookError(
                    self.path, line_of, f"unknown param {key!r} (-p {key}=...); params: {known}"
                )
            line = self.param_lines.get(key, line_of)
            if (problem := plain_data_problem(value)) is not None:
                scalar = problem.startswith("got ") and not isinstance(value, (list, dict))
                shown = f"is a {type(value).__name__}" if scalar else f"is refused: {problem}"
                raise NotebookError(
                    self.path,
                    line,
                    f"param {key!r}: -p {key}={clip(repr(value))} {shown}, not plain data ({PLAIN_DATA}); "
                    "quote it to pass a string",
                )
            default = self.params[key]
            if (problem := param_type_problem(default, value)) is not None:
                hint = f"; quote it to pass a string: -p '{key}=\"...\"'" if isinstance(default, str) else ""
                raise NotebookError(
                    self.path, line, f"param {key!r}: -p {key}={_as_param(value)} {problem}{hint}"
                )
            resolved[key] = value
        return resolved


def _as_param(value: Any) -> str:
    """A param value as it would be written after -p key= (JSON is YAML), clipped."""
    return clip(json.dumps(value))
