"""uvnote documents run unmodified: its example documents (fixtures/uvnote/, copied from uvnote 0.3.1:
SOURCE.txt there), its ids for cells without `id=`, every fence attribute and front-matter key it
reads, `platforms`, and the UVNOTE_* variables its cells read. What uvnote does not define stays an
error."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from engine_helpers import LABEL, cell, notebook

from attnbench.notebook.document.model import Display, NotebookError
from attnbench.notebook.document.parse import parse_notebook, parse_text

UVNOTE = Path(__file__).parent / "fixtures" / "uvnote"
DOCUMENTS = sorted(UVNOTE.glob("*/*.md")) + sorted(UVNOTE.glob("test_notes/*/*.md"))
FENCE = "```"

# What uvnote 0.3.1's own parser (uvnote/parser.py parse_markdown) makes of each document:
# (title, platforms, [(cell id, deps, needs, outputs)]), recorded by running it at commit 197a528.
UVNOTE_PARSE = {
    "README": ("", None, []),
    "linux_report": ("Linux System Report", ["linux"], [
        ("sysinfo", [], [], []), ("linux_info", [], ["sysinfo"], []), ("memory", [], [], []), ("disk", [], [], []),
    ]),
    "macos_report": ("macOS System Report", ["darwin"], [
        ("sysinfo", [], [], []), ("macos_info", [], ["sysinfo"], []), ("disk", [], [], []),
    ]),
    "report": ("uvnote Integration Test Report", ["linux"], [
        ("generate_data", ["numpy", "pandas"], [], []),
        ("stats", ["numpy", "pandas"], [], []),
        ("plot", ["matplotlib", "pandas", "numpy"], [], ["scatter_plot.png", "histogram.png"]),
        ("save_data", ["pandas", "numpy"], [], ["data.csv", "summary.txt"]),
        ("use_saved_data", ["pandas"], ["save_data"], []),
    ]),
    "algebra": ("", None, [("ab4acb3e", [], [], [])]),
    "python_basics": ("", None, [("5c3c9f01", [], [], []), ("454fe358", [], [], [])]),
    "physics": ("", None, [("856f4433", [], [], []), ("1d814eb4", [], [], [])]),
}  # fmt: skip


def test_every_example_document_is_a_fixture():
    assert sorted(p.stem for p in DOCUMENTS) == sorted(UVNOTE_PARSE)


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda p: p.stem)
def test_example_documents_parse_as_uvnote_parses_them(path):
    title, platforms, cells = UVNOTE_PARSE[path.stem]
    parsed = parse_notebook(path)
    assert parsed.title == (title or path.stem)  # uvnote titles the page by the file name too
    assert parsed.platforms == (tuple(platforms) if platforms else None)
    got = [(c.id, c.deps, [str(n) for n in c.needs], c.outputs) for c in parsed.cells]
    assert got == cells
    assert all(c.id_from_code == (c.id not in path.read_text()) for c in parsed.cells)


def test_front_matter_of_the_integration_report_is_typed():
    report = parse_notebook(UVNOTE / "test-repo" / "report.md")
    assert report.author == "uvnote"
    assert report.display == Display(theme="dark", syntax_theme="monokai", show_line_numbers=True)


def test_an_id_from_the_code_is_uvnotes():
    # `uvnote init` writes this note; uvnote's README shows its build naming the cell 1eb8d5a3.
    init = '# New Note\n\nThis is a new uvnote markdown file.\n\n```python\n# Your Python code here\nprint("Hello, uvnote!")\n```\n'
    assert [c.id for c in parse_text(init, Path("mynote.md")).cells] == ["1eb8d5a3"]


def test_ids_from_the_code_match_uvnote_on_awkward_text():
    # CRLF, a form feed and U+2028 (str.splitlines() ends lines there), an empty fence (no cell in
    # uvnote), a whitespace-only one (a cell in uvnote). Ids recorded from uvnote 0.3.1's parser.
    text = (
        "# T\r\n\r\n```python\r\nx = 1\r\n\r\n```\r\n\r\n"
        "```python\r\n# a page break:\x0c\r\nprint(1)  # \u2028 in a comment\r\n```\r\n\r\n"
        "```python\r\n```\r\n\r\n```python\r\n   \r\n```\r\n\r\n```python\r\ny = 2\r\n```\r\n"
    )
    parsed = parse_text(text, Path("t.md"))
    assert [c.id for c in parsed.cells] == ["9e26bf36", "0f888ec1", "0aad7da7", "9067770c"]
    assert [b.kind for b in parsed.blocks if b.language == "python"] == [
        "cell",
        "cell",
        "code",
        "cell",
        "cell",
    ]


def test_identical_cells_without_ids_are_a_duplicate_with_a_hint():
    with pytest.raises(NotebookError) as caught:
        parse_text("```python\nx = 1\n```\n\n```python\nx = 1\n```\n", Path("d.md"))
    assert caught.value.line == 5 and "give one of them id=" in caught.value.message


# --- platforms --------------------------------------------------------------------------------------


def copy_documents(project, *names: str) -> list[Path]:
    by_stem = {p.stem: p for p in DOCUMENTS}
    return [Path(shutil.copy(by_stem[name], project.root / "notebooks")) for name in names]


def test_a_document_for_another_system_is_skipped_as_uvnote_skips_it(project, monkeypatch):
    monkeypatch.setenv("UVNOTE_PLATFORM", "linux")
    (path,) = copy_documents(project, "macos_report")
    out = project.run(path)
    assert out.code == 0
    assert f"{path}: skipped: requires platforms darwin; this system is linux" in out.err
    assert not (project.root / "outputs").exists() and not (project.root / "cells").exists()
    # On the system it names, it is planned like any other (its cells need macOS to succeed).
    monkeypatch.setenv("UVNOTE_PLATFORM", "Darwin")
    status = project.status(path)
    *rows, note = status.out.splitlines()[1:]
    assert status.code == 0 and [line.split()[0] for line in rows] == ["sysinfo", "macos_info", "disk"]
    assert note.endswith("holds no results (no label holds results of it yet)")


@pytest.mark.parametrize(
    "front, platforms", [("platforms: [Linux, darwin]", ("linux", "darwin")), ("platform: linux", ("linux",))]
)
def test_platforms_as_uvnote_reads_them(front, platforms):
    assert parse_text(f"---\n{front}\n---\ntext\n", Path("p.md")).platforms == platforms


@pytest.mark.parametrize(
    "front, line, phrase",
    [
        ("platforms: [macos]", 2, "unknown system 'macos' (macOS is 'darwin')"),
        ("platforms: 3", 2, "must be a system name or a list of them"),
        ("platforms: []", 2, "must be a system name or a list of them"),
        ("platforms: [linux]\nplatform: linux", 3, "both 'platforms' and 'platform'"),
        ("parms:\n  n: 1", 2, "unknown front-matter key 'parms'; known keys: title, description, params"),
        ("platfroms: [linux]", 2, "unknown front-matter key 'platfroms'"),
        ("theme: blue", 2, "'theme' must be one of dark, light, auto"),
        ("show_line_numbers: yes please", 2, "'show_line_numbers' must be true or false"),
        ("syntax_theme: no-such-style", 2, "not a pygments style"),
        ("on_github: drbh", 2, "'on_github' must be 'owner/name'"),
        ("code_font_size: [12]", 2, "'code_font_size' must be a CSS size or a number"),
        ("author: [a, b]", 2, "'author' must be a string"),
        ("not_rerun: no 2-GPU machine", 2, "'not_rerun' must map machine labels"),
        ("not_rerun:\n  nvidia-h200-x2: ''", 2, "'nvidia-h200-x2' needs a sentence saying why"),
    ],
)
def test_front_matter_mistakes_are_errors(front, line, phrase):
    with pytest.raises(NotebookError) as caught:
        parse_text(f"---\n{front}\n---\ntext\n", Path("f.md"))
    assert caught.value.line == line and phrase in caught.value.message, str(caught.value)


def test_every_front_matter_key_uvnote_reads_is_accepted():
    front = """---
title: T
author: me
theme: light
ui_theme: monocolor
show_widgets: false
syntax_theme: monokai
show_line_numbers: true
collapse_code: true
custom_css: "body { color: red; }"
code_font_size: 13
on_github: huggingface/kernels-uvnotes
on_huggingface: kernels-community/flash-attn2
platforms: linux
---
text
"""
    parsed = parse_text(front, Path("all.md"))
    assert parsed.display == Display(
        theme="light", ui_theme="monocolor", widgets=False, syntax_theme="monokai", show_line_numbers=True,
        collapse_code=True, custom_css="body { color: red; }", code_font_size=13,
        on_github="huggingface/kernels-uvnotes", on_huggingface="kernels-community/flash-attn2",
    )  # fmt: skip
    assert parsed.author == "me" and parsed.platforms == ("linux",)


# --- fence attributes ---------------------------------------------------------------------------------


def test_every_fence_attribute_uvnote_reads_is_accepted(tmp_path):
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "analysis.py").write_text(
        '# /// script\n# dependencies = ["rich"]\n# ///\nprint(1)\n'
    )
    text = (
        "```python id=a deps=numpy,pandas outputs=x.csv,y.png collapse-code=true collapse-output=false timeout=60\n"
        "open('x.csv', 'w')\n```\n\n"
        "```python depends=a collapsed=true script=scripts/analysis.py\n```\n"
    )
    a, b = parse_text(text, tmp_path / "n.md").cells
    assert (a.deps, a.outputs, a.timeout, a.collapse_code, a.collapse_output) == (
        ["numpy", "pandas"], ["x.csv", "y.png"], 60.0, True, False,
    )  # fmt: skip
    # script=: the code, and the id, come from the file (uvnote hashes the file's text)
    import hashlib

    code = (tmp_path / "scripts" / "analysis.py").read_text()
    assert b.id == hashlib.sha256(code.encode()).hexdigest()[:8] and b.id_from_code
    assert (b.script, b.source, b.deps) == ("scripts/analysis.py", "print(1)\n", ["rich"])
    assert [str(n) for n in b.needs] == ["a"] and b.collapse_code and b.collapse_output


@pytest.mark.parametrize(
    "fence, body, phrase",
    [
        ("python id=a colour=red", "", "unknown fence attribute 'colour'"),  # a typo stays an error
        ("python id=a collapse_code=true", "", "unknown fence attribute 'collapse_code'"),
        ("python id=a script=missing.py", "", "script='missing.py': no such file"),
        ("python id=a script=helper.py", "print(2)", "has script='helper.py' and code of its own"),
        ("python id=a needs=../math/algebra.md", "", "names a whole notebook"),
    ],
)
def test_what_uvnote_does_not_define_or_cannot_mean_is_an_error(tmp_path, fence, body, phrase):
    (tmp_path / "helper.py").write_text("print(1)\n")
    with pytest.raises(NotebookError) as caught:
        parse_text(f"text\n\n{FENCE}{fence}\n{body}\n{FENCE}\n", tmp_path / "e.md")
    assert caught.value.line == 3 and phrase in caught.value.message, str(caught.value)


def test_errors_in_a_script_file_name_that_file(tmp_path):
    (tmp_path / "bad.py").write_text("x = 1\ndef f(:\n")
    with pytest.raises(NotebookError) as caught:
        parse_text(f"{FENCE}python script=bad.py\n{FENCE}\n", tmp_path / "s.md")
    assert (caught.value.path, caught.value.line) == (tmp_path / "bad.py", 2)


# --- running them -------------------------------------------------------------------------------------


def test_input_variables_reach_cells_as_uvnote_sets_them(project):
    reader = """
    import json, os
    print(json.dumps({k: v for k, v in os.environ.items() if k.startswith("UVNOTE_")}))
    """
    path = project.write(
        "u.md",
        notebook(
            cell("id=save_data", "open('data.csv', 'w').write('x\\n1\\n')"),
            cell("id=my-plot", "pass"),
            cell("id=use depends=save_data,my-plot", reader),
        ),
    )
    out = project.run(path)
    assert out.code == 0, out.err
    seen = json.loads(project.stdout("u", "use"))
    assert seen["UVNOTE_INPUTS"] == "UVNOTE_INPUT_SAVE_DATA,UVNOTE_INPUT_MY_PLOT"
    assert Path(seen["UVNOTE_INPUT_SAVE_DATA"], "data.csv").read_text() == "x\n1\n"


def test_a_cell_opening_with_future_imports_runs(project):
    # uvnote puts nothing before the code; the engine's params prelude must not break this either.
    body = '''
    """A docstring."""
    from __future__ import annotations

    x: undefined_name = 1
    print(x, __doc__)
    '''
    path = project.write("f.md", notebook(cell("id=a", body), params={"n": 1}))
    out = project.run(path)
    assert out.code == 0, out.err
    assert project.stdout("f", "a") == "1 A docstring.\n"


@pytest.mark.timeout(120)
def test_notes_without_ids_and_the_readme_run_unmodified(project):
    paths = copy_documents(project, "algebra", "python_basics", "physics", "README")
    out = project.run(*paths)
    assert out.code == 0, out.err
    assert f"{paths[-1]}: no ```python cells: nothing to run" in out.err
    assert project.stdout("algebra", "ab4acb3e") == "Two solutions: x1 = 3.0, x2 = 2.0\n"
    assert "Total fruits: 4" in project.stdout("python_basics", "5c3c9f01")
    assert "Class average: 90.5" in project.stdout("python_basics", "454fe358")
    assert project.stdout("physics", "856f4433") == "Force = 50 N\n"
    assert project.stdout("physics", "1d814eb4") == "Kinetic Energy = 250.0 J\n"
    assert (project.root / "cells" / "algebra" / "ab4acb3e.py").is_file()


@pytest.mark.skipif(sys.platform != "linux", reason="its cells read /proc and /etc/os-release")
@pytest.mark.timeout(180)
def test_the_linux_reports_run_unmodified(project, monkeypatch):
    pytest.importorskip("pandas")
    pytest.importorskip("matplotlib")
    monkeypatch.delenv("UVNOTE_PLATFORM", raising=False)
    paths = copy_documents(project, "linux_report", "report")
    out = project.run(*paths)
    assert out.code == 0, out.err
    assert "Memory Info:" in project.stdout("linux_report", "memory")
    assert "Kernel: " in project.stdout("linux_report", "linux_info")
    # use_saved_data finds save_data's data.csv through $UVNOTE_INPUT_SAVE_DATA
    assert "Dependent cell read 100 rows from save_data/data.csv" in project.stdout(
        "report", "use_saved_data"
    )
    assert project.result("report", "plot")["artifacts"] == ["histogram.png", "scatter_plot.png"]


def test_a_script_cell_keeps_its_file_beside_the_snapshot_and_its_page_renders(project):
    """The site re-parses the notebook a run saved; a script= path is relative to that copy."""
    from attnbench.notebook.site.render import build_site

    (project.root / "notebooks" / "helper.py").write_text("print('from the script')\n")
    path = project.write("s.md", notebook("```python script=helper.py\n```\n"))
    assert project.run(path).code == 0
    run_dir = project.root / "outputs" / "s" / LABEL
    assert (run_dir / "helper.py").read_text() == "print('from the script')\n"
    report = build_site(project.root / "outputs", project.root / "site")
    assert not [p for p in getattr(report, "problems", []) if "script=" in str(p)]
    assert "from the script" in (project.root / "site" / "s" / f"{LABEL}.html").read_text()
