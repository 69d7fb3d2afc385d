"""Markdown notebook -> Notebook: the positive cases (the errors: test_parse_errors.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from attnbench.notebook.document.model import Need
from attnbench.notebook.document.parse import front_matter_line, parse_notebook, parse_text

FIXTURES = Path(__file__).parent / "fixtures"
REPO = Path(__file__).resolve().parents[2]
FENCE = "```"


def nb(*lines: str) -> str:
    """Notebook text from its lines: line N of the notebook is argument N (1-based)."""
    return "\n".join(lines) + "\n"


def parse(*lines: str):
    return parse_text(nb(*lines), Path("notebooks/t.md"))


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
        "Intro\r\n\r\n~~~~python id=a\r\nx = '''\r\n```\r\n'''\r\n~~~~\r\n\r\n````python id=b\r\n# ```\r\n````\r\n",
        Path("c.md"),
    )
    assert [(c.id, c.line) for c in notebook.cells] == [("a", 3), ("b", 9)]
    assert notebook.cell("a").source == "x = '''\n```\n'''\n"


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
        "import sys, attnbench.notebook.document.parse as p; "
        "print(sorted(m for m in ('torch', 'numpy', 'pandas', 'jinja2', 'rich', 'packaging') "
        "if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("path", sorted((REPO / "notebooks").glob("*.md")), ids=lambda p: p.name)
def test_repository_notebooks_parse(path):
    assert parse_notebook(path).cells
