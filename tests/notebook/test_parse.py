"""Markdown notebook -> Notebook: the positive cases, then one case per error with its exact line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from attnbench.notebook.document import Need, NotebookError
from attnbench.notebook.parse import KNOWN_ATTRIBUTES, front_matter_line, parse_notebook, parse_text

FIXTURES = Path(__file__).parent / "fixtures"
REPO = Path(__file__).resolve().parents[2]
FENCE = "```"


def nb(*lines: str) -> str:
    """Notebook text from its lines: line N of the notebook is argument N (1-based)."""
    return "\n".join(lines) + "\n"


def parse(*lines: str):
    return parse_text(nb(*lines), Path("notebooks/t.md"))


def error_of(*lines: str) -> NotebookError:
    with pytest.raises(NotebookError) as caught:
        parse(*lines)
    return caught.value


# --- positive cases ---------------------------------------------------------------------------------


def test_fixture_notebook_full_attribute_set():
    notebook = parse_notebook(FIXTURES / "full.md")
    assert notebook.name == "full"
    assert notebook.shebang == "#!/usr/bin/env -S uv run attnbench run"
    assert notebook.title == "Flux attention"
    assert notebook.description == "one line"
    assert notebook.params == {"profile": "auto", "seq_lens": [4224, 4352]}
    assert notebook.text == (FIXTURES / "full.md").read_text()
    assert [c.id for c in notebook.cells] == ["bench", "env"]
    bench = notebook.cell("bench")
    assert bench.line == 15
    assert bench.deps == ["pandas", "torch", "numpy"]
    assert bench.requires_python == ">=3.11"
    assert bench.needs == [Need("env"), Need("gpu", notebook="environment")]
    assert bench.outputs == ["results.jsonl", "*.svg"]
    assert bench.timeout == 900.0
    assert bench.gpus == 2
    assert bench.env == {"NCCL_DEBUG": "WARN"}
    assert bench.collapse_code and bench.collapse_output
    assert bench.source == "print(profile, seq_lens)\n"
    assert bench.metadata == {"dependencies": ["numpy", "pandas", "torch"], "requires-python": ">=3.11"}
    env = notebook.cell("env")
    assert (env.line, env.deps, env.needs, env.timeout, env.gpus, env.env) == (29, [], [], None, None, {})
    assert not env.collapse_code and not env.collapse_output


def test_fixture_block_order_lines_and_prose():
    notebook = parse_notebook(FIXTURES / "full.md")
    kinds = [(b.kind, b.line) for b in notebook.blocks]
    assert kinds == [("markdown", 9), ("cell", 15), ("markdown", 23), ("code", 25), ("cell", 29)]
    prose = notebook.blocks[0].text
    assert prose == "Prose with a table:\n\n| provider | ms |\n|----------|---:|\n| sdpa     | 1.0 |\n"
    code = notebook.blocks[3]
    assert (code.language, code.text) == ("bash", "uv run notebooks/full.md\n")
    # The cell block keeps the body as written (PEP 723 header included) for display.
    assert notebook.blocks[1].text.startswith("# /// script\n")
    assert notebook.blocks[1].cell is notebook.cell("bench")


def test_other_notebook_fixture_and_title_from_front_matter():
    notebook = parse_notebook(FIXTURES / "environment.md")
    assert notebook.title == "Environment" and notebook.shebang is None
    assert [(c.id, c.line, c.source) for c in notebook.cells] == [("gpu", 4, 'print("no gpu here")\n')]


def test_no_front_matter_title_is_stem_and_no_params():
    notebook = parse("# Heading", "", FENCE + "python id=a", "x = 1", FENCE)
    assert notebook.title == "t" and notebook.params == {} and notebook.front_matter == {}
    assert notebook.shebang is None
    assert notebook.blocks[0].text == "# Heading\n"


def test_params_defaults_and_unknown_keys_kept():
    notebook = parse(
        "---",
        "params:",
        "  profile: smoke",
        "  heads: {q: 32, kv: 8}",
        "  window: null",
        "author: someone",
        "---",
    )
    assert notebook.params == {"profile": "smoke", "heads": {"q": 32, "kv": 8}, "window": None}
    assert notebook.front_matter["author"] == "someone"
    assert front_matter_line(notebook, "params") == 2
    assert front_matter_line(notebook, "missing") is None
    assert notebook.resolve_params({"profile": "full"})["profile"] == "full"


def test_pep723_merge_with_deps_attribute():
    cell = parse(
        FENCE + "python id=a deps=pandas,numpy",
        "import sys",
        "# /// script",
        '# dependencies = ["numpy", "rich>=13"]',
        '# requires-python = ">=3.12"',
        "# [tool.uv]",
        '# index-url = "https://example.invalid/simple"',
        "# ///",
        "print(sys.argv)",
        FENCE,
    ).cell("a")
    assert cell.deps == ["pandas", "numpy", "rich>=13"]
    assert cell.requires_python == ">=3.12"
    assert cell.script_tool == {"uv": {"index-url": "https://example.invalid/simple"}}
    assert cell.source == "import sys\nprint(sys.argv)\n"


def test_other_language_fences_are_shown_code():
    notebook = parse(
        FENCE + "bash",
        "make all",
        FENCE,
        FENCE,
        "no language",
        FENCE,
        "~~~~yaml title=x",
        "```python id=inner",
        "~~~~",
    )
    assert notebook.cells == []
    assert [(b.kind, b.language, b.line, b.text) for b in notebook.blocks] == [
        ("code", "bash", 1, "make all\n"),
        ("code", "", 4, "no language\n"),
        ("code", "yaml", 7, "```python id=inner\n"),
    ]


def test_longer_fences_tilde_fences_and_crlf():
    notebook = parse_text(
        "Intro\r\n\r\n~~~~python id=a\r\n```\r\nx\r\n~~~~\r\n\r\n````python id=b\r\n```\r\n````\r\n",
        Path("c.md"),
    )
    assert [(c.id, c.line) for c in notebook.cells] == [("a", 3), ("b", 8)]
    assert notebook.cell("a").source == "```\nx\n"


def test_needs_across_notebooks_and_uvnote_aliases():
    cell = parse(
        FENCE + "python id=c needs=a,other.md:b,sub/x.md:y depends=a,z collapsed collapse-output=false",
        FENCE,
    ).cell("c")
    assert cell.needs == [Need("a"), Need("b", "other"), Need("y", "sub/x"), Need("z")]
    assert str(cell.needs[1]) == "other.md:b"
    assert cell.collapse_code is True and cell.collapse_output is False


def test_quoted_values_env_pairs_and_version_ranges():
    cell = parse(
        FENCE + 'python id=q env="A=1 B=x=y" env=CUDA_VISIBLE_DEVICES=0,1,NCCL_DEBUG=WARN '
        "deps=numpy,torch>=2.5,<2.16 timeout=1.5 collapse-code=true",
        FENCE,
    ).cell("q")
    assert cell.env == {"A": "1", "B": "x=y", "CUDA_VISIBLE_DEVICES": "0,1", "NCCL_DEBUG": "WARN"}
    assert cell.deps == ["numpy", "torch>=2.5,<2.16"]
    assert cell.timeout == 1.5 and cell.collapse_code is True


def test_nested_fences_stay_in_prose():
    notebook = parse(
        "- step one:",
        "",
        "  " + FENCE + "python",
        "  x = 1",
        "  " + FENCE,
        "",
        "> " + FENCE,
        "> q",
        "> " + FENCE,
    )
    assert notebook.cells == []
    assert [b.kind for b in notebook.blocks] == ["markdown"]
    assert "  x = 1" in notebook.blocks[0].text


@pytest.mark.timeout(60)
def test_import_stays_light():
    code = (
        "import sys, attnbench.notebook.parse as p; "
        "print(sorted(m for m in ('torch', 'numpy', 'pandas', 'jinja2', 'rich', 'packaging') "
        "if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("path", sorted((REPO / "notebooks").glob("*.md")), ids=lambda p: p.name)
def test_repository_notebooks_parse(path):
    assert parse_notebook(path).cells


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
    "python without id": (["# T", "", FENCE + "python deps=numpy", FENCE], 3, "python cell without id="),
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
