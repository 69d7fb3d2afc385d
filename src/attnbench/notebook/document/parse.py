"""Markdown notebook -> Notebook. Every problem is a NotebookError naming `path:line`.

Layout: optional shebang (line 1), optional YAML front matter between `---` lines (front_matter.py),
then Markdown. Top-level ```python fences are cells (their attributes: attributes.py); other fences are
shown-only code; the text between fences is prose, sliced from the source by lines so that tables,
HTML and the like survive verbatim.

uvnote documents parse unchanged: a cell without `id=` gets uvnote's id (the first 8 hex digits of the
sha256 of its code), `script=` takes the code from a file, an empty fence without an id is no cell.
Every cell is compiled here, so that a syntax error anywhere stops the run before any cell starts.
"""

from __future__ import annotations

import ast
import hashlib
import platform
import re
import shlex
import warnings
from functools import lru_cache
from pathlib import Path

from markdown_it import MarkdownIt

from attnbench.notebook.document.attributes import fence_attributes
from attnbench.notebook.document.front_matter import FrontMatter, load_front_matter
from attnbench.notebook.document.model import Block, Cell, Notebook, NotebookError, env_name
from attnbench.notebook.document.pep723 import ScriptMetadataError, split_script_metadata

# Spellings of Python that are not uvnote's (or our) cell marker ```python: refused, never silently shown.
PYTHON_SPELLINGS = ("python", "py", "python3", "py3")


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


def parse_text(text: str, path: Path | str, *, compile_cells: bool = True) -> Notebook:
    """Parse notebook source `text`; `path` names it in errors and gives the default title.

    `compile_cells=False` skips compiling the cells: the site re-reads the notebook a run saved, whose
    cells may be for another Python than the one building the site (the run already compiled them)."""
    src = _Source(Path(path), text, compile_cells)
    shebang = src.lines[0] if src.lines and src.lines[0].startswith("#!") else None
    body_start = 1 if shebang is not None else 0
    front = FrontMatter()
    span = _front_matter_span(src, body_start)
    if span is not None:
        front = load_front_matter(src.path, src.lines, *span)
        body_start = span[1] + 1
    data = front.data
    notebook = Notebook(
        path=src.path,
        title=data.get("title") or src.path.stem,
        description=data.get("description") or "",
        params=front.params,
        front_matter=data,
        shebang=shebang,
        text=text,
        author=data.get("author") or "",
        platforms=front.platforms,
        display=front.display,
        param_lines=front.param_lines,
    )
    notebook.blocks = _blocks(src, body_start)
    return notebook


def runnable_notebooks(paths: list[Path]) -> tuple[list[Notebook], list[str]]:
    """The notebooks named on a command line that have cells to run here, parsed (the run goes on with
    them: each is read once), and a line for each one left out, as uvnote leaves them out (exit code
    0): its `platforms` exclude this system, or it has no ```python cell. An empty notebook is a
    NotebookError (exit code 2): nothing in it can be meant."""
    keep: list[Notebook] = []
    notes: list[str] = []
    for path in paths:
        notebook = parse_notebook(path)
        if not notebook.blocks:
            after = " after its front matter" if notebook.front_matter or notebook.shebang else ""
            raise NotebookError(path, None, f"empty notebook: no text and no ```python cell{after}")
        if (reason := notebook.skip_reason()) is not None:
            notes.append(f"{path}: skipped: {reason} (uvnote platforms; $UVNOTE_PLATFORM overrides)")
        elif not notebook.cells:
            notes.append(f"{path}: no ```python cells: nothing to run")
        else:
            keep.append(notebook)
    return keep, notes


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

    def __init__(self, path: Path, text: str, compile_cells: bool = True):
        self.path = path
        self.compile_cells = compile_cells
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


# --- blocks -------------------------------------------------------------------------------------


@lru_cache(maxsize=1)
def _markdown() -> MarkdownIt:
    # Only block structure is needed: skipping inline parsing makes parsing several times faster.
    return MarkdownIt("commonmark").disable(["inline", "text_join"], ignoreInvalid=True)


def _blocks(src: _Source, body_start: int) -> list[Block]:
    # Blank out the shebang and front matter so markdown-it's line numbers are the file's.
    masked = "\n".join([""] * body_start + src.lines[body_start:])
    blocks: list[Block] = []
    ids = _Ids(src)
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
            if language.strip("{}").lower() in PYTHON_SPELLINGS:
                raise src.error(
                    opening + 1,
                    f"```{language} is not run: a cell is written ```python (lower case, as uvnote reads "
                    "it); write ```python to run it, or name another language (```text) to only show it",
                )
            blocks.append(Block(kind="code", line=opening + 1, text=token.content, language=language))
            continue
        # uvnote's code of the cell (its id hashes it): the lines between the fences as str.splitlines()
        # cuts them (form feeds and the like end a line too), joined by "\n".
        written = "\n".join(("\n".join(src.lines[opening + 1 : end - 1]) + "\n").splitlines())
        cell = _cell(src, opening + 1, info, token.content, written)
        if cell is None:  # an empty fence without an id: nothing to run (uvnote makes no cell of it)
            blocks.append(Block(kind="code", line=opening + 1, text=token.content, language="python"))
            continue
        ids.add(cell)
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


def code_id(code: str) -> str:
    """uvnote's id of a cell without `id=`: the first 8 hex digits of the sha256 of its code."""
    return hashlib.sha256(code.encode()).hexdigest()[:8]


def _cell(src: _Source, line: int, info: str, body: str, written: str) -> Cell | None:
    """The cell of the ```python fence at `line`; None for an empty fence without id= or script=."""
    try:
        words = shlex.split(info)[1:]
    except ValueError as e:
        raise src.error(line, f"cannot read the fence attributes {info!r}: {e}") from None
    attrs = fence_attributes(src.path, line, words)
    code_path, first_line = src.path, line + 1  # where line 1 of the code is
    if attrs.script is not None:
        if body.strip():
            raise src.error(line, f"the cell has script={attrs.script!r} and code of its own: keep one "
                            "(uvnote would ignore the code)")  # fmt: skip
        code_path, first_line = src.path.parent / attrs.script, 1
        written = body = _read_script(src, line, attrs.script, code_path)
    elif attrs.id is None and not written:  # uvnote: `if code`
        return None
    try:
        source, meta = split_script_metadata(body)
    except ScriptMetadataError as e:
        raise NotebookError(code_path, first_line + e.line, e.message) from None
    collapsed = bool(attrs.collapsed)
    cell = Cell(
        id=attrs.id or code_id(written),
        source=source,
        line=line,
        deps=_unique(attrs.deps + meta.get("dependencies", [])),
        requires_python=meta.get("requires-python"),
        script_tool=meta.get("tool", {}),
        needs=_unique(attrs.needs),
        outputs=_unique(attrs.outputs),
        timeout=attrs.timeout,
        gpus=attrs.gpus,
        gpus_or_more=attrs.gpus_or_more,
        env=attrs.env,
        collapse_code=collapsed if attrs.collapse_code is None else attrs.collapse_code,
        collapse_output=collapsed if attrs.collapse_output is None else attrs.collapse_output,
        id_from_code=attrs.id is None,
        script=attrs.script,
    )
    if src.compile_cells:
        _check_syntax(cell, body, code_path, first_line)
    return cell


def _read_script(src: _Source, line: int, script: str, path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")  # newlines translated, as uvnote's open() does
    except FileNotFoundError:
        raise src.error(line, f"script={script!r}: no such file {path}") from None
    except UnicodeDecodeError:
        raise src.error(line, f"script={script!r}: {path} is not UTF-8 text") from None
    except OSError as e:
        raise src.error(line, f"script={script!r}: cannot read {path}: {e.strerror}") from None


def _check_syntax(cell: Cell, code: str, path: Path, first_line: int) -> None:
    """Compile the cell's code (PEP 723 block included: comments) with this Python, unless the cell
    asks for a Python this is not."""
    if cell.requires_python and not _runs_on_this_python(cell.requires_python):
        return
    try:
        with warnings.catch_warnings():  # e.g. invalid escape sequences: the cell's own run warns
            warnings.simplefilter("ignore")
            compile(code, str(path), "exec", dont_inherit=True)
    except SyntaxError as e:
        version = platform.python_version()
        raise NotebookError(
            path,
            first_line - 1 + (e.lineno or 1),
            f"syntax error in cell {cell.id!r}: {e.msg} (checked with Python {version}; a cell that "
            'needs a newer one says so in its PEP 723 block: requires-python = ">=3.X")',
        ) from None
    except (ValueError, RecursionError, MemoryError) as e:  # null bytes; nesting too deep to compile
        raise NotebookError(path, first_line, f"cell {cell.id!r} cannot be compiled: {e}") from None


def _runs_on_this_python(requires_python: str) -> bool:
    from packaging.specifiers import SpecifierSet  # lazy: keeps `import parse` light

    return SpecifierSet(requires_python).contains(platform.python_version(), prereleases=True)


class _Ids:
    """The cell ids seen so far: a repeated id, or two ids with one environment-variable name
    ($UVNOTE_INPUT_<ID>, $ATTNBENCH_INPUT_<ID>: `my-data` and `my_data`, `Data` and `data`), is an error
    naming both cells."""

    def __init__(self, src: _Source):
        self.src = src
        self.by_id: dict[str, Cell] = {}
        self.by_env: dict[str, Cell] = {}

    def add(self, cell: Cell) -> None:
        if (first := self.by_id.get(cell.id)) is not None:
            hint = (
                " (an id from the hash of identical code: give one of them id=)" if cell.id_from_code else ""
            )
            raise self.src.error(
                cell.line, f"duplicate cell id {cell.id!r} (first defined at line {first.line}){hint}"
            )
        name = env_name(cell.id)
        if (first := self.by_env.get(name)) is not None:
            raise self.src.error(
                cell.line,
                f"cell id {cell.id!r} and cell id {first.id!r} at {self.src.path}:{first.line} name one input "
                f"($UVNOTE_INPUT_{name}, $ATTNBENCH_INPUT_{name}) and one file on a case-insensitive disk: "
                "rename one",
            )
        self.by_id[cell.id] = self.by_env[name] = cell


def split_future_imports(source: str) -> tuple[str, str]:
    """(the code's opening docstring and `from __future__` imports, the rest). Python takes those only
    at the top of a file, so a script that puts anything before the cell's code puts them first."""
    if "__future__" not in source:
        return "", source
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return "", source
    end = 0
    for index, node in enumerate(tree.body):
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            end = node.end_lineno or end
        elif not (index == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)):
            break
    lines = source.splitlines(keepends=True)
    return "".join(lines[:end]), "".join(lines[end:])


def _unique(items: list) -> list:
    return list(dict.fromkeys(items))
