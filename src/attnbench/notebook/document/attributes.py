"""The attributes of a ```python fence: `id=bench deps=torch,pandas needs=gpu,other.md:x outputs=*.svg
timeout=900 gpus=2 env=K=V,K2=V2 collapse-code collapse-output script=file.py`, typed and checked.
`gpus=2+` asks for every GPU of the label's machine, at least 2 (the engine resolves it per label).

Every problem is a NotebookError naming the fence's `path:line` and the bad value.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from attnbench.notebook.document.model import MAX_ID_LENGTH, Need, NotebookError, clip
from attnbench.notebook.document.pep723 import requirement_problem

ID_RE = re.compile(r"[A-Za-z0-9_-]+")
# uvnote's attributes (0.3.1 parser.py: id, deps, needs | depends, outputs, timeout, script, collapse-*,
# collapsed) plus ours (gpus, env).
KNOWN_ATTRIBUTES = (
    "id", "deps", "needs", "depends", "outputs", "timeout", "script", "gpus", "env",
    "collapse-code", "collapse-output", "collapsed",
)  # fmt: skip
FLAG_ATTRIBUTES = ("collapse-code", "collapse-output", "collapsed")
ENV_KEY_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass
class FenceAttributes:
    """What a ```python fence line says, typed; parse.py makes the Cell from it."""

    id: str | None = None
    deps: list[str] = field(default_factory=list)
    needs: list[Need] = field(default_factory=list)  # needs= and uvnote's depends=, in order
    outputs: list[str] = field(default_factory=list)
    timeout: float | None = None
    gpus: int | None = None
    gpus_or_more: bool = False  # gpus=N+: every GPU of the label's machine, at least N
    env: dict[str, str] = field(default_factory=dict)  # repeated env= merge
    script: str | None = None
    collapse_code: bool | None = None  # None: not given
    collapse_output: bool | None = None
    collapsed: bool | None = None  # uvnote's shorthand for both; an explicit collapse-* wins


def fence_attributes(path: Path, line: int, words: list[str]) -> FenceAttributes:
    """Typed attributes from the words after ```python. `path` and `line` (the fence's) name the place
    in errors."""
    attrs = FenceAttributes()
    seen: set[str] = set()
    for word in words:
        key, has_value, value = word.partition("=")
        if key not in KNOWN_ATTRIBUTES:
            known = ", ".join(KNOWN_ATTRIBUTES)
            raise NotebookError(path, line, f"unknown fence attribute {key!r}; known attributes: {known}")
        if key in seen and key != "env":
            raise NotebookError(path, line, f"fence attribute {key!r} given twice")
        seen.add(key)
        if key in FLAG_ATTRIBUTES:
            setattr(attrs, key.replace("-", "_"), _flag(path, line, key, value) if has_value else True)
            continue
        if not has_value:
            raise NotebookError(path, line, f"fence attribute {key!r} needs a value: {key}=...")
        if key == "id":
            attrs.id = _check_id(path, line, value, "id")
        elif key == "deps":
            attrs.deps = [_check_requirement(path, line, dep) for dep in _split_deps(value)]
        elif key in ("needs", "depends"):
            attrs.needs.extend(_need(path, line, key, v) for v in _split_list(value))
        elif key == "outputs":
            attrs.outputs = [_check_glob(path, line, glob) for glob in _split_list(value)]
        elif key == "timeout":
            attrs.timeout = _timeout(path, line, value)
        elif key == "gpus":
            found = re.fullmatch(r"([0-9]+)(\+?)", value)
            if not found or int(found.group(1)) < 1:
                raise NotebookError(
                    path,
                    line,
                    f"gpus={value!r} must be a whole number >= 1, or N+ for every GPU (at least N)",
                )
            attrs.gpus, attrs.gpus_or_more = int(found.group(1)), bool(found.group(2))
        elif key == "env":
            attrs.env.update(_env(path, line, value))
        elif key == "script":
            attrs.script = _script(path, line, value)
    return attrs


def _flag(path: Path, line: int, key: str, value: str) -> bool:
    if value.lower() not in ("true", "false"):
        raise NotebookError(path, line, f"{key}={value!r} must be true or false (or the bare flag {key})")
    return value.lower() == "true"


def _check_id(path: Path, line: int, value: str, what: str) -> str:
    if not ID_RE.fullmatch(value):
        shown = f"{what}={value!r}" if value else f"empty {what}="
        raise NotebookError(path, line, f"bad cell id: {shown}; ids use only letters, digits, '_' and '-'")
    if len(value) > MAX_ID_LENGTH:
        raise NotebookError(
            path,
            line,
            f"bad cell id: {what}={clip(value, 21)} is {len(value)} characters; at most {MAX_ID_LENGTH} "
            "(an id names the cell's files and folders)",
        )
    return value


def _script(path: Path, line: int, value: str) -> str:
    if not value or "\0" in value:
        raise NotebookError(path, line, f"script={value!r} must name a file (relative to the notebook)")
    return value


def _timeout(path: Path, line: int, value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise NotebookError(path, line, f"timeout={value!r} must be a positive number of seconds")
    return seconds


def _split_list(value: str) -> list[str]:
    return [item.strip() for item in value.split(",") if item.strip()]


def _split_deps(value: str) -> list[str]:
    """Comma list; a piece starting with a version operator continues the previous one (`torch>=2,<3`)."""
    deps: list[str] = []
    for piece in _split_list(value):
        if deps and piece[0] in "<>=!~":
            deps[-1] += "," + piece
        else:
            deps.append(piece)
    return deps


def _check_requirement(path: Path, line: int, requirement: str) -> str:
    if problem := requirement_problem(requirement):
        raise NotebookError(path, line, f"bad dependency {requirement!r} in deps=: {problem}")
    return requirement


def _need(path: Path, line: int, key: str, value: str) -> Need:
    notebook, sep, cell = value.rpartition(":")
    if not sep:
        if value.endswith(".md"):
            raise NotebookError(
                path,
                line,
                f"{key}={value!r} names a whole notebook (uvnote's manifest of its cells): name the cells "
                f"it needs instead, {key}={value}:CELL",
            )
        return Need(_check_id(path, line, value, key))
    if not notebook.endswith(".md") or notebook == ".md":
        raise NotebookError(
            path, line, f"{key}={value!r}: a cell in another notebook is written other.md:cell"
        )
    return Need(_check_id(path, line, cell, key), notebook=notebook.removesuffix(".md"))


def _check_glob(path: Path, line: int, glob: str) -> str:
    if glob.startswith("/") or ".." in glob.replace("\\", "/").split("/"):
        raise NotebookError(path, line, f"outputs={glob!r} must be a relative glob inside the cell's folder")
    return glob


def _env(path: Path, line: int, value: str) -> dict[str, str]:
    """`K=V` pairs separated by commas or spaces; a piece without `K=` continues the previous
    value, so `CUDA_VISIBLE_DEVICES=0,1` keeps its comma."""
    env: dict[str, str] = {}
    last = None
    for separator, piece in re.findall(r"([,\s]*)([^,\s]+)", value):
        name, has_value, val = piece.partition("=")
        if has_value and ENV_KEY_RE.fullmatch(name):
            env[name], last = val, name
        elif last is not None:
            env[last] += separator + piece
        else:
            raise NotebookError(path, line, f"env={value!r}: expected NAME=VALUE pairs, got {piece!r}")
    return env
