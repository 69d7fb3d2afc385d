"""Every notebook mistake the parser catches: a NotebookError naming the file, the exact line and the
bad value (the CLI turns it into `path:line: message` and exit code 2: test_cli.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from attnbench.notebook.document.attributes import KNOWN_ATTRIBUTES
from attnbench.notebook.document.model import NotebookError
from attnbench.notebook.document.parse import parse_notebook, parse_text

FENCE = "```"


def error_of(*lines: str) -> NotebookError:
    """The error of parsing the notebook whose line N is argument N (1-based)."""
    with pytest.raises(NotebookError) as caught:
        parse_text("\n".join(lines) + "\n", Path("notebooks/t.md"))
    return caught.value


# --- errors: each names the file, the exact line and the bad value ------------------------------------


ERRORS = {
    "duplicate id": (
        [FENCE + "python id=a", FENCE, "", FENCE + "python id=a", FENCE],
        4,
        "duplicate cell id 'a' (first defined at line 1)",
    ),
    "unknown attribute": (
        ["text", "", FENCE + "python id=a colour=red", FENCE],
        3,
        "unknown fence attribute 'colour'; known attributes: " + ", ".join(KNOWN_ATTRIBUTES),
    ),
    "attribute twice": ([FENCE + "python id=a id=b", FENCE], 1, "fence attribute 'id' given twice"),
    "attribute without value": ([FENCE + "python id=a timeout", FENCE], 1, "'timeout' needs a value"),
    "timeout not a number": (
        [FENCE + "python id=a timeout=abc", FENCE],
        1,
        "timeout='abc' must be a positive",
    ),
    "timeout negative": ([FENCE + "python id=a timeout=-1", FENCE], 1, "timeout='-1' must be a positive"),
    "timeout zero": ([FENCE + "python id=a timeout=0", FENCE], 1, "timeout='0' must be a positive"),
    "gpus zero": (["", FENCE + "python id=a gpus=0", FENCE], 2, "gpus='0' must be a whole number >= 1"),
    "gpus not int": ([FENCE + "python id=a gpus=x", FENCE], 1, "gpus='x' must be a whole number"),
    "gpus fraction": ([FENCE + "python id=a gpus=1.5", FENCE], 1, "gpus='1.5' must be a whole number"),
    "bad id chars": ([FENCE + "python id=a.b", FENCE], 1, "bad cell id: id='a.b'"),
    "empty id": ([FENCE + "python id=", FENCE], 1, "bad cell id: empty id="),
    "bad flag": (
        [FENCE + "python id=a collapse-code=maybe", FENCE],
        1,
        "collapse-code='maybe' must be true or",
    ),
    "bad needs id": ([FENCE + "python id=a needs=b/c", FENCE], 1, "bad cell id: needs='b/c'"),
    "needs notebook without .md": ([FENCE + "python id=a needs=other:b", FENCE], 1, "written other.md:cell"),
    "absolute outputs": (
        [FENCE + "python id=a outputs=/etc/*", FENCE],
        1,
        "outputs='/etc/*' must be a relative",
    ),
    "bad env": ([FENCE + "python id=a env=oops", FENCE], 1, "env='oops': expected NAME=VALUE pairs"),
    "bad dependency": ([FENCE + "python id=a deps=numpy[", FENCE], 1, "bad dependency 'numpy[' in deps="),
    "unclosed quote": ([FENCE + 'python id=a env="A=1', FENCE], 1, "cannot read the fence attributes"),
    "python cell nested in a list": (
        ["- item", "", "  " + FENCE + "python id=a", "  x", "  " + FENCE],
        3,
        "must start at the left margin",
    ),
    "unterminated fence at EOF": (
        ["# T", "", FENCE + "python id=a", "x = 1", "", "more"],
        3,
        "unterminated code fence: no closing ``` line",
    ),
    "unterminated fence ending in a fence-like line": (
        [FENCE + "python id=a", "x", FENCE + "python id=b", "y"],
        1,
        "unterminated code fence",
    ),
    "unterminated longer fence closed by a shorter one": (
        ["text", "````python id=a", "x", FENCE],
        2,
        "no closing ```` line",
    ),
    "unterminated empty fence on the last line": (["text", "", "~~~"], 3, "unterminated code fence"),
    "unterminated fence in a block quote": (["> " + FENCE, "> q", "", "after"], 1, "unterminated code fence"),
    "front matter YAML error": (
        ["#!/usr/bin/env -S uv run attnbench run", "---", "title: a", "params:", "  a: 1", " b: 2", "---"],
        6,
        "malformed front matter (YAML): while parsing a block mapping",
    ),
    "front matter YAML error in a value": (
        ["---", "title: a: b", "---"],
        2,
        "mapping values are not allowed",
    ),
    "front matter not a mapping": (["---", "- a", "- b", "---"], 1, "front matter must be a mapping"),
    "front matter params not a mapping": (
        ["---", "title: x", "params: [1, 2]", "---"],
        3,
        "front matter 'params' must be a mapping, got list",
    ),
    "front matter title not a string": (["---", "title: 123", "---"], 2, "'title' must be a string, got int"),
    "front matter description not a string": (
        ["---", "description: [a]", "---"],
        2,
        "'description' must be a string",
    ),
    "param name not an identifier": (
        ["---", "params:", "  profile: x", "  seq-lens: [1]", "---"],
        4,
        "param name 'seq-lens' is not a Python identifier",
    ),
    "param default not plain data": (
        ["---", "params:", "  when: 2024-01-01", "---"],
        3,
        "param 'when': default must be plain data",
    ),
    "duplicate front matter key": (
        ["---", "params: {}", "title: a", "params: {}", "---"],
        4,
        "duplicate front-matter key 'params' (first at line 2)",
    ),
    "front matter never closed": (
        ["#!/bin/sh", "---", "title: x", "", "text"],
        2,
        "never closed by a '---' line",
    ),
    "PEP 723 bad TOML": (
        [
            FENCE + "python id=a",
            "# /// script",
            "# dependencies = [",
            '#   "numpy",',
            "#   oops",
            "# ]",
            "# ///",
            FENCE,
        ],
        5,
        "malformed PEP 723 block (TOML): Invalid value (column 3)",
    ),
    "PEP 723 block never closed": (
        [
            "text",
            "",
            FENCE + "python id=a",
            "import os",
            "# /// script",
            '# dependencies = ["x"]',
            "x = 1",
            FENCE,
        ],
        5,
        "'# /// script' block is never closed",
    ),
    "PEP 723 dependencies not a list": (
        [
            FENCE + "python id=a",
            "# /// script",
            '# requires-python = ">=3.11"',
            '# dependencies = "numpy"',
            "# ///",
            FENCE,
        ],
        4,
        "PEP 723 'dependencies' must be a list of strings, got 'numpy'",
    ),
    "PEP 723 dependencies not strings": (
        [FENCE + "python id=a", "# /// script", "# dependencies = [1]", "# ///", FENCE],
        3,
        "must be a list of strings, got [1]",
    ),
    "PEP 723 bad requirement": (
        [FENCE + "python id=a", "# /// script", '# dependencies = ["a b"]', "# ///", FENCE],
        3,
        "bad PEP 723 dependency 'a b'",
    ),
    "PEP 723 empty block": (
        [FENCE + "python id=a", "x", "# /// script", "# ///", FENCE],
        3,
        "empty '# /// script' block",
    ),
    "PEP 723 unknown key": (
        [FENCE + "python id=a", "# /// script", "# dependencies = []", '# python = "3"', "# ///", FENCE],
        4,
        "unknown key 'python' in the PEP 723 block",
    ),
    "PEP 723 requires-python not a string": (
        [FENCE + "python id=a", "# /// script", "# requires-python = 3", "# ///", FENCE],
        3,
        "'requires-python' must be a string",
    ),
    "PEP 723 two blocks": (
        [
            FENCE + "python id=a",
            "# /// script",
            "# dependencies = []",
            "# ///",
            "x = 1",  # without it, PEP 723's greedy regex reads both blocks as one
            "# /// script",
            "#",
            "# ///",
            FENCE,
        ],
        6,
        "more than one '# /// script' block",
    ),
}


@pytest.mark.parametrize("lines, line, phrase", ERRORS.values(), ids=ERRORS.keys())
def test_error_names_file_line_and_value(lines, line, phrase):
    error = error_of(*lines)
    assert (error.path, error.line) == (Path("notebooks/t.md"), line), str(error)
    assert phrase in error.message, str(error)
    assert str(error).startswith(f"notebooks/t.md:{line}: ")


def test_missing_notebook(tmp_path):
    with pytest.raises(NotebookError) as caught:
        parse_notebook(tmp_path / "nope.md")
    assert (caught.value.line, caught.value.message) == (None, "no such notebook")
    assert str(caught.value) == f"{tmp_path / 'nope.md'}: no such notebook"


def test_not_utf8(tmp_path):
    path = tmp_path / "bad.md"
    path.write_bytes(b"ok\nalso ok\n\xff\n")
    with pytest.raises(NotebookError) as caught:
        parse_notebook(path)
    assert caught.value.line == 3 and "not UTF-8" in caught.value.message
