"""The YAML front matter of a notebook, typed and checked: our keys (title, description, params,
not_rerun: {machine label: why its stored results were not re-run with the code of now}, which the site
shows beside those results) and
every key uvnote (0.3.1) reads (author, platforms and its presentation keys). Any other key is an
error, so that a typo (`parms:`, `platfroms:`) is never silently ignored. Every problem names
`path:line`.
"""

from __future__ import annotations

import keyword
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from attnbench.notebook.document.model import (
    PLAIN_DATA,
    Display,
    NotebookError,
    described,
    plain_data_problem,
)

_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

OUR_KEYS = ("title", "description", "params", "not_rerun")
# uvnote's DocumentConfig (parser.py): `platform` is its alias of `platforms`, `show_widgets` of `widgets`.
UVNOTE_KEYS = (
    "author", "platforms", "platform", "theme", "ui_theme", "widgets", "show_widgets", "syntax_theme",
    "show_line_numbers", "collapse_code", "custom_css", "code_font_size", "on_github", "on_huggingface",
)  # fmt: skip
KNOWN_KEYS = OUR_KEYS + UVNOTE_KEYS
# platform.system(), lower-cased: what uvnote compares `platforms` with.
PLATFORMS = (
    "linux", "darwin", "windows", "freebsd", "openbsd", "netbsd", "sunos", "aix", "java", "emscripten",
    "wasi", "ios", "android",
)  # fmt: skip
THEMES = ("dark", "light", "auto")
STRING_KEYS = ("title", "description", "author", "ui_theme", "syntax_theme", "custom_css")
BOOL_KEYS = ("widgets", "show_widgets", "show_line_numbers", "collapse_code")


@dataclass
class FrontMatter:
    data: dict[str, Any] = field(default_factory=dict)  # as written
    params: dict[str, Any] = field(default_factory=dict)
    param_lines: dict[str, int] = field(default_factory=dict)
    platforms: tuple[str, ...] | None = None
    display: Display = field(default_factory=Display)


def load_front_matter(path: Path, lines: list[str], opening: int, closing: int) -> FrontMatter:
    """The front matter between the 0-based `---` lines `opening` and `closing` of `lines`."""
    first_line = opening + 2  # 1-based line of the first YAML line
    loader = _YAML_LOADER("\n".join(lines[opening + 1 : closing]))
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line = first_line + mark.line if mark else opening + 1
        problem = ", ".join(part for part in (e.context, e.problem) if part)
        raise NotebookError(path, line, f"malformed front matter (YAML): {problem}") from None
    except yaml.YAMLError as e:
        raise NotebookError(path, opening + 1, f"malformed front matter (YAML): {e}") from None
    except RecursionError:  # a structure nested thousands deep
        raise NotebookError(path, opening + 1, "front matter nested too deeply") from None
    finally:
        loader.dispose()
    if data is None:
        return FrontMatter()
    if not isinstance(data, dict):
        raise NotebookError(
            path,
            opening + 1,
            f"front matter must be a mapping (title: ..., params: ...), got {described(data)}",
        )
    key_lines = _key_lines(path, node, first_line, "front-matter key")
    _check_keys(path, data, key_lines)
    _check_not_rerun(path, data.get("not_rerun"), key_lines.get("not_rerun"))
    found = FrontMatter(data=data, platforms=_platforms(path, data, key_lines), display=_display(data))
    params = data.get("params")
    if params is not None:
        params_node = next((value for key, value in node.value if key.value == "params"), None)
        if not isinstance(params, dict):
            raise NotebookError(
                path, key_lines["params"], f"front matter 'params' must be a mapping, got {described(params)}"
            )
        found.param_lines = _key_lines(path, params_node, first_line, "param") if params_node else {}
        for name, value in params.items():
            line = found.param_lines.get(str(name), key_lines["params"])
            if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name):
                # Each param becomes a variable in the cell script's prelude.
                raise NotebookError(path, line, f"param name {name!r} is not a Python identifier")
            if (problem := plain_data_problem(value)) is not None:
                raise NotebookError(
                    path, line, f"param {name!r}: default must be plain data ({PLAIN_DATA}), {problem}"
                )
        found.params = dict(params)
    return found


def _check_keys(path: Path, data: dict[Any, Any], key_lines: dict[str, int]) -> None:
    for key, value in data.items():
        line = key_lines.get(str(key))
        if key not in KNOWN_KEYS:
            raise NotebookError(
                path,
                line,
                f"unknown front-matter key {key!r}; known keys: {', '.join(OUR_KEYS)} and uvnote's "
                + ", ".join(UVNOTE_KEYS),
            )
        if key in STRING_KEYS and not isinstance(value, str):
            raise NotebookError(path, line, f"front matter {key!r} must be a string, got {described(value)}")
        if key in BOOL_KEYS and not isinstance(value, bool):
            raise NotebookError(
                path, line, f"front matter {key!r} must be true or false, got {described(value)}"
            )
    for key, alias in (("platforms", "platform"), ("widgets", "show_widgets")):
        if key in data and alias in data:
            raise NotebookError(
                path, key_lines[alias], f"front matter has both {key!r} and {alias!r}: keep one"
            )
    if "theme" in data and data["theme"] not in THEMES:
        raise NotebookError(
            path,
            key_lines["theme"],
            f"front matter 'theme' must be one of {', '.join(THEMES)}, got {described(data['theme'])}",
        )
    for key in ("on_github", "on_huggingface"):
        value = data.get(key)
        if value is not None and (not isinstance(value, str) or value.count("/") != 1):
            raise NotebookError(
                path, key_lines[key], f"front matter {key!r} must be 'owner/name', got {described(value)}"
            )
    size = data.get("code_font_size")
    if size is not None and (isinstance(size, bool) or not isinstance(size, (str, int, float))):
        raise NotebookError(
            path,
            key_lines["code_font_size"],
            f"front matter 'code_font_size' must be a CSS size or a number of pixels, got {described(size)}",
        )
    if isinstance(data.get("syntax_theme"), str):
        from pygments.styles import get_all_styles  # lazy: only notebooks that name a style pay for it

        if data["syntax_theme"] not in set(get_all_styles()):
            raise NotebookError(
                path,
                key_lines["syntax_theme"],
                f"front matter 'syntax_theme' {data['syntax_theme']!r} is not a pygments style",
            )


def _check_not_rerun(path: Path, value: Any, line: int | None) -> None:
    """`not_rerun`: a mapping of machine labels to a non-empty sentence saying why."""
    if value is None:
        return
    if not isinstance(value, dict):
        raise NotebookError(path, line, f"front matter 'not_rerun' must map machine labels to why their "
                                        f"results were not re-run, got {described(value)}")  # fmt: skip
    for label, why in value.items():
        if not isinstance(label, str) or not label.strip():
            raise NotebookError(path, line, f"front matter 'not_rerun': label {label!r} must be a label name")
        if not isinstance(why, str) or not why.strip():
            raise NotebookError(path, line, f"front matter 'not_rerun': {label!r} needs a sentence saying why "
                                            f"its results were not re-run, got {described(why)}")  # fmt: skip


def _platforms(path: Path, data: dict[str, Any], key_lines: dict[str, int]) -> tuple[str, ...] | None:
    """uvnote's `platforms` (or `platform`): one name or a list, compared lower-cased with this system."""
    key = "platforms" if "platforms" in data else "platform"
    if key not in data:
        return None
    value, line = data[key], key_lines[key]
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list) or not names or not all(isinstance(name, str) for name in names):
        raise NotebookError(
            path,
            line,
            f"front matter {key!r} must be a system name or a list of them, got {described(value)}",
        )
    for name in names:
        if name.lower() not in PLATFORMS:
            hint = " (macOS is 'darwin')" if name.lower() in ("macos", "mac", "osx", "macosx") else ""
            raise NotebookError(
                path,
                line,
                f"front matter {key!r}: unknown system {name!r}{hint}; known: {', '.join(PLATFORMS)}",
            )
    return tuple(dict.fromkeys(name.lower() for name in names))


def _display(data: dict[str, Any]) -> Display:
    widgets = data.get("widgets", data.get("show_widgets"))
    return Display(
        theme=data.get("theme"),
        ui_theme=data.get("ui_theme"),
        widgets=widgets,
        syntax_theme=data.get("syntax_theme"),
        show_line_numbers=data.get("show_line_numbers", False),
        collapse_code=data.get("collapse_code", False),
        custom_css=data.get("custom_css", ""),
        code_font_size=data.get("code_font_size"),
        on_github=data.get("on_github"),
        on_huggingface=data.get("on_huggingface"),
    )


def _key_lines(path: Path, mapping: yaml.MappingNode, first_line: int, what: str) -> dict[str, int]:
    """1-based line of each key of a YAML mapping node; a repeated key is an error."""
    lines: dict[str, int] = {}
    for key_node, _ in mapping.value:
        key, line = str(key_node.value), first_line + key_node.start_mark.line
        if key in lines:
            raise NotebookError(path, line, f"duplicate {what} {key!r} (first at line {lines[key]})")
        lines[key] = line
    return lines
