"""Markdown notebook -> Notebook. Every problem is a NotebookError naming `path:line`.

Layout: optional shebang (line 1), optional YAML front matter between `---` lines, then Markdown.
Top-level ```python fences are cells (their attributes: attributes.py); other fences are shown-only
code; the text between fences is prose, sliced from the source by lines so that tables, HTML and the
like survive verbatim.
"""

from __future__ import annotations

import keyword
import re
import shlex
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml
from markdown_it import MarkdownIt

from attnbench.notebook.attributes import fence_attributes
from attnbench.notebook.document import Block, Cell, Notebook, NotebookError, is_plain_data
from attnbench.notebook.pep723 import ScriptMetadataError, split_script_metadata

_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def parse_notebook(path: Path | str) -> Notebook:
    """Read and parse a notebook file."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise NotebookError(path, None, "no such notebook") from None
    except IsADirectoryError:
        raise NotebookError(path, None, "is a folder, not a notebook") from None
    except OSError as e:
        raise NotebookError(path, None, f"cannot read notebook: {e.strerror}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise NotebookError(path, line, f"not UTF-8 text (byte {data[e.start]:#04x})") from None
    return parse_text(text.removeprefix("\ufeff"), path)


def parse_text(text: str, path: Path | str) -> Notebook:
    """Parse notebook source `text`; `path` names it in errors and gives the default title."""
    src = _Source(Path(path), text)
    shebang = src.lines[0] if src.lines and src.lines[0].startswith("#!") else None
    body_start = 1 if shebang is not None else 0
    front_matter: dict[str, Any] = {}
    span = _front_matter_span(src, body_start)
    if span is not None:
        front_matter = _load_front_matter(src, *span)
        body_start = span[1] + 1
    notebook = Notebook(
        path=src.path,
        title=front_matter.get("title") or src.path.stem,
        description=front_matter.get("description") or "",
        params=dict(front_matter.get("params") or {}),
        front_matter=front_matter,
        shebang=shebang,
        text=text,
    )
    notebook.blocks = _blocks(src, body_start)
    return notebook


def front_matter_line(notebook: Notebook, key: str) -> int | None:
    """1-based line of a top-level front-matter key, e.g. for resolve_params(line_of=...)."""
    src = _Source(notebook.path, notebook.text)
    span = _front_matter_span(src, 1 if notebook.shebang is not None else 0)
    if span is None:
        return None
    pattern = re.compile(rf"""(["']?){re.escape(key)}\1\s*:""")
    for index in range(span[0] + 1, span[1]):
        if pattern.match(src.lines[index]):
            return index + 1
    return None


class _Source:
    """The notebook text split into lines the way markdown-it counts them (\\r\\n, \\r and \\n)."""

    def __init__(self, path: Path, text: str):
        self.path = path
        self.lines = re.sub(r"\r\n?", "\n", text).split("\n")

    def error(self, line: int | None, message: str) -> NotebookError:
        return NotebookError(self.path, line, message)


# --- front matter -------------------------------------------------------------------------------


def _front_matter_span(src: _Source, start: int) -> tuple[int, int] | None:
    """0-based (opening, closing) `---` lines, or None without front matter."""
    lines = src.lines
    first = start
    while first < len(lines) and not lines[first].strip():
        first += 1
    if first >= len(lines) or lines[first].rstrip() != "---":
        return None
    for index in range(first + 1, len(lines)):
        if lines[index].rstrip() == "---":
            return first, index
    raise src.error(first + 1, "front matter opened with '---' is never closed by a '---' line")


def _load_front_matter(src: _Source, opening: int, closing: int) -> dict[str, Any]:
    first_line = opening + 2  # 1-based line of the first YAML line
    loader = _YAML_LOADER("\n".join(src.lines[opening + 1 : closing]))
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line = first_line + mark.line if mark else opening + 1
        problem = ", ".join(part for part in (e.context, e.problem) if part)
        raise src.error(line, f"malformed front matter (YAML): {problem}") from None
    except yaml.YAMLError as e:
        raise src.error(opening + 1, f"malformed front matter (YAML): {e}") from None
    finally:
        loader.dispose()
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise src.error(
            opening + 1, f"front matter must be a mapping (title: ..., params: ...), got {_kind(data)}"
        )
    key_lines = _key_lines(src, node, first_line, "front-matter key")
    for key in ("title", "description"):
        if key in data and not isinstance(data[key], str):
            raise src.error(key_lines[key], f"front matter {key!r} must be a string, got {_kind(data[key])}")
    params = data.get("params")
    if params is not None:
        params_node = next((value for key, value in node.value if key.value == "params"), None)
        if not isinstance(params, dict):
            raise src.error(
                key_lines["params"], f"front matter 'params' must be a mapping, got {_kind(params)}"
            )
        param_lines = _key_lines(src, params_node, first_line, "param") if params_node else {}
        for name, value in params.items():
            line = param_lines.get(str(name), key_lines["params"])
            if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name):
                # Each param becomes a variable in the cell script's prelude.
                raise src.error(line, f"param name {name!r} is not a Python identifier")
            if not is_plain_data(value):
                raise src.error(
                    line,
                    f"param {name!r}: default must be plain data (str, number, bool, null, list, "
                    f"mapping), got {_kind(value)}",
                )
    return data


def _key_lines(src: _Source, mapping: yaml.MappingNode, first_line: int, what: str) -> dict[str, int]:
    """1-based line of each key of a YAML mapping node; a repeated key is an error."""
    lines: dict[str, int] = {}
    for key_node, _ in mapping.value:
        key, line = str(key_node.value), first_line + key_node.start_mark.line
        if key in lines:
            raise src.error(line, f"duplicate {what} {key!r} (first at line {lines[key]})")
        lines[key] = line
    return lines


def _kind(value: Any) -> str:
    return (
        f"{type(value).__name__} ({value!r})" if not isinstance(value, (dict, list)) else type(value).__name__
    )


# --- blocks -------------------------------------------------------------------------------------


@lru_cache(maxsize=1)
def _markdown() -> MarkdownIt:
    # Only block structure is needed: skipping inline parsing makes parsing several times faster.
    return MarkdownIt("commonmark").disable(["inline", "text_join"], ignoreInvalid=True)


def _blocks(src: _Source, body_start: int) -> list[Block]:
    # Blank out the shebang and front matter so markdown-it's line numbers are the file's.
    masked = "\n".join([""] * body_start + src.lines[body_start:])
    blocks: list[Block] = []
    first_line_of: dict[str, int] = {}
    prose_from = body_start
    for token in _markdown().parse(masked):
        if token.type != "fence" or token.map is None:
            continue
        opening, end = token.map
        nested = token.level > 0  # inside a list item or block quote: part of the prose
        if end - opening < 2 or not _fence_closed(src.lines[end - 1], token.markup, nested):
            raise src.error(opening + 1, f"unterminated code fence: no closing {token.markup} line")
        if nested:
            words = token.info.split()
            if words[:1] == ["python"] and len(words) > 1:
                raise src.error(opening + 1, "a ```python cell must start at the left margin, "
                                "not inside a list or block quote")  # fmt: skip
            continue
        # The raw info string: markdown-it's token.info has backslash escapes and entities decoded.
        info = src.lines[opening].strip()[len(token.markup) :].strip()
        language = info.split(maxsplit=1)[0] if info else ""
        blocks.extend(_prose(src.lines, prose_from, opening))
        prose_from = end
        if language != "python":
            blocks.append(Block(kind="code", line=opening + 1, text=token.content, language=language))
            continue
        cell = _cell(src, opening + 1, info, token.content)
        if cell.id in first_line_of:
            raise src.error(
                cell.line, f"duplicate cell id {cell.id!r} (first defined at line {first_line_of[cell.id]})"
            )
        first_line_of[cell.id] = cell.line
        blocks.append(Block(kind="cell", line=cell.line, text=token.content, language="python", cell=cell))
    blocks.extend(_prose(src.lines, prose_from, len(src.lines)))
    return blocks


def _fence_closed(last_line: str, marker: str, nested: bool) -> bool:
    """markdown-it closes an unterminated fence at the end of the file or container: check the last line."""
    # A nested fence's closing line carries its container's prefix (indent or `>`).
    line = last_line.lstrip(" \t>") if nested else last_line
    indent = "[ \t>]*" if nested else " {0,3}"
    return re.fullmatch(rf"{indent}{re.escape(marker[0])}{{{len(marker)},}}[ \t]*", line) is not None


def _prose(lines: list[str], start: int, stop: int) -> list[Block]:
    while start < stop and not lines[start].strip():
        start += 1
    while stop > start and not lines[stop - 1].strip():
        stop -= 1
    if start == stop:
        return []
    return [Block(kind="markdown", line=start + 1, text="\n".join(lines[start:stop]) + "\n")]


# --- cells --------------------------------------------------------------------------------------


def _cell(src: _Source, line: int, info: str, body: str) -> Cell:
    try:
        words = shlex.split(info)[1:]
    except ValueError as e:
        raise src.error(line, f"cannot read the fence attributes {info!r}: {e}") from None
    attrs = fence_attributes(src.path, line, words)
    if "id" not in attrs:
        raise src.error(line, "python cell without id= (uvnote needs one: ```python id=NAME)")
    try:
        source, meta = split_script_metadata(body)
    except ScriptMetadataError as e:
        raise src.error(line + 1 + e.line, e.message) from None  # the body starts after the fence line
    deps = _unique(attrs.get("deps", []) + meta.get("dependencies", []))
    return Cell(
        id=attrs["id"],
        source=source,
        line=line,
        deps=deps,
        requires_python=meta.get("requires-python"),
        script_tool=meta.get("tool", {}),
        needs=_unique(attrs.get("needs", [])),
        outputs=_unique(attrs.get("outputs", [])),
        timeout=attrs.get("timeout"),
        gpus=attrs.get("gpus"),
        env=attrs.get("env", {}),
        collapse_code=attrs.get("collapse-code", attrs.get("collapsed", False)),
        collapse_output=attrs.get("collapse-output", attrs.get("collapsed", False)),
    )


def _unique(items: list) -> list:
    return list(dict.fromkeys(items))
