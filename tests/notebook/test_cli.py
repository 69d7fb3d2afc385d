"""The CLI: exit 2 with path:line before any cell starts, status reasons, clean."""

from __future__ import annotations

import pytest
from engine_helpers import LABEL, cell, notebook

pytestmark = pytest.mark.timeout(120)

MARK = "import os, pathlib; pathlib.Path(os.environ['ATTNBENCH_ROOT'], 'started').write_text('x')"


def line_of(path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if line.startswith(text))


def assert_exit_2(project, out, where: str, message: str) -> None:
    assert out.code == 2, out.out + out.err
    assert f"{where}: " in out.err and message in out.err, out.err
    assert not (project.root / "started").exists()  # no cell started
    assert not (project.root / "outputs").exists()


def test_cycle_exits_2_naming_the_cycle(project):
    path = project.write(
        "c.md", notebook(cell("id=first", MARK), cell("id=a needs=b", "pass"), cell("id=b needs=a", "pass"))
    )
    out = project.run(path)
    assert_exit_2(
        project, out, f"{path}:{line_of(path, '```python id=a')}", "needs form a cycle: a -> b -> a"
    )


def test_cycle_across_notebooks_exits_2(project):
    project.write("o.md", notebook(cell("id=x needs=m.md:y", "pass")))
    path = project.write("m.md", notebook(cell("id=y needs=o.md:x", MARK)))
    out = project.run(path)
    assert_exit_2(
        project, out, f"{path}:{line_of(path, '```python id=y')}", "needs form a cycle: y -> o.md:x -> y"
    )


def test_missing_needed_cell_exits_2(project):
    path = project.write("n.md", notebook(cell("id=a", MARK), cell("id=b needs=nope", "pass")))
    out = project.run(path)
    assert_exit_2(
        project,
        out,
        f"{path}:{line_of(path, '```python id=b')}",
        "needs=nope: no cell 'nope' in n.md; cells: a, b",
    )


def test_missing_needed_notebook_exits_2(project):
    path = project.write("n.md", notebook(cell("id=a needs=gone.md:x", MARK)))
    out = project.run(path)
    assert_exit_2(project, out, f"{path}:{line_of(path, '```python id=a')}", "needs=gone.md:x: no notebook")


def test_missing_cell_in_other_notebook_exits_2(project):
    project.write("o.md", notebook(cell("id=x", "pass")))
    path = project.write("n.md", notebook(cell("id=a needs=o.md:y", MARK)))
    out = project.run(path)
    assert_exit_2(project, out, f"{path}:{line_of(path, '```python id=a')}", "no cell 'y' in o.md; cells: x")


def test_unknown_param_exits_2_at_the_params_line(project):
    path = project.write("p.md", notebook(cell("id=a", MARK), params={"n": 1}))
    out = project.run(path, "-p", "m=2")
    assert_exit_2(project, out, f"{path}:{line_of(path, 'params:')}", "unknown param 'm'")


FIRST = cell("id=first", MARK)  # a good cell before the bad part: it must not start either
SECOND = 11  # the line of the second cell's fence in notebook(FIRST, ...)
# case: (notebook text, the line the error names, part of the message)
BAD_NOTEBOOKS = {
    "duplicate id": (notebook(FIRST, cell("id=first", "pass")), SECOND, "duplicate cell id 'first'"),
    "unknown attribute": (notebook(FIRST, cell("id=b colour=red", "pass")), SECOND, "attribute 'colour'"),
    "timeout not a number": (notebook(FIRST, cell("id=b timeout=abc", "pass")), SECOND, "timeout='abc'"),
    "gpus zero": (notebook(FIRST, cell("id=b gpus=0", "pass")), SECOND, "gpus='0'"),
    "bad id": (notebook(FIRST, cell("id=b.c", "pass")), SECOND, "bad cell id: id='b.c'"),
    "Python fence": (notebook(FIRST, "```Python id=b\npass\n```\n"), SECOND, "```Python is not run"),
    "front matter YAML": ("---\ntitle: [oops\n---\n" + FIRST, 3, "malformed front matter (YAML)"),
    "front matter not closed": ("---\ntitle: x\n" + FIRST, 1, "never closed by a '---' line"),
    "PEP 723 TOML": (
        notebook(FIRST, cell("id=b", '# /// script\n# dependencies = ["numpy"\n# ///\npass')),
        SECOND + 3,  # TOML reports the unclosed array at the end of the block
        "malformed PEP 723 block (TOML)",
    ),
    "PEP 723 unclosed": (
        notebook(FIRST, cell("id=b", "# /// script\n# dependencies = []\npass")),
        SECOND + 1,
        "'# /// script' block is never closed",
    ),
    "unterminated fence": (notebook(FIRST, "```python id=b\npass\n"), SECOND, "unterminated code fence"),
}


@pytest.mark.parametrize("text, line, message", BAD_NOTEBOOKS.values(), ids=BAD_NOTEBOOKS.keys())
def test_bad_notebook_exits_2_before_any_cell_starts(project, text, line, message):
    path = project.write("e.md", text)
    out = project.run(path)
    assert_exit_2(project, out, f"{path}:{line}", message)


def test_bad_param_syntax_is_a_usage_error(project):
    path = project.write("p.md", notebook(cell("id=a", MARK), params={"n": 1}))
    with pytest.raises(SystemExit) as exited:
        project.run(path, "-p", "n")
    assert exited.value.code == 2


def test_multinode_without_rendezvous_exits_2(project, monkeypatch):
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    path = project.write("g.md", notebook(cell("id=a gpus=2", MARK)))
    out = project.run(path, "--nnodes", "2")
    assert_exit_2(project, out, "attnbench run", "need a rendezvous")


def test_status_says_why_cells_are_stale(project):
    path = project.write(
        "s.md",
        notebook(
            cell("id=a", "print(n)"),
            cell("id=b needs=a", "pass"),
            cell("id=bad", "raise SystemExit(4)"),
            cell("id=later needs=bad", "pass"),
            cell("id=new", "pass"),
            params={"n": 1},
        ),
    )
    project.run(path)
    (project.cell_dir("s", "new") / "result.json").unlink()
    rows = _status_rows(project, path)
    assert rows["a"] == "cached" and rows["b"] == "cached"
    assert rows["bad"].startswith("failed: exit code 4")
    assert rows["later"] == "not run: skipped: upstream bad failed"
    assert rows["new"] == "not run"

    path.write_text(path.read_text().replace("print(n)", "print(n, n)"))
    rows = _status_rows(project, path)
    assert rows["a"] == "stale: code changed"
    assert rows["b"] == "stale: upstream a changed"

    rows = _status_rows(project, path, "-p", "n=2")
    assert rows["a"] == "stale: code changed; params changed: n"


def test_status_of_a_label_without_results_names_the_labels_that_have_some(project):
    """A mistyped --label reads "not run" everywhere, as a first run's label does: the note names the
    labels holding results, and says nothing where the label holds some."""
    path = project.write("s.md", notebook(cell("id=a", "pass")))
    out = project.cli("status", path, "--env", "python", "--label", "typo")
    assert out.code == 0 and "  a                        not run" in out.out
    assert "note: outputs/s/typo holds no results (no label holds results of it yet)" in out.out
    project.run(path)
    out = project.cli("status", path, "--env", "python", "--label", "typo")
    assert f"note: outputs/s/typo holds no results (labels with results: {LABEL})" in out.out
    assert "note:" not in project.status(path).out
    (project.root / "outputs" / "s" / "stopped" / ".tmp-a-x").mkdir(parents=True)  # what a killed run leaves
    out = project.cli("status", path, "--env", "python", "--label", "stopped")
    assert f"note: outputs/s/stopped holds no results (labels with results: {LABEL})" in out.out


def test_status_names_results_of_cells_the_notebook_no_longer_has(project):
    """A renamed or split cell leaves its old result behind; status names it and how to remove it."""
    path = project.write("s.md", notebook(cell("id=a", "pass"), cell("id=old", "pass")))
    project.run(path)
    assert "no longer has" not in project.status(path).out
    path.write_text(notebook(cell("id=a", "pass"), cell("id=new", "pass")))
    out = project.status(path).out
    assert f"note: outputs/s/{LABEL} holds results of cells the notebook no longer has: old " in out
    assert f"git rm -r outputs/s/{LABEL}/old`" in out
    assert "remove them now" in out


def test_status_of_every_label_counts_states_and_fails_on_stale_cells_no_note_keeps(project):
    """`status --all-labels`: a line per label folder; a label whose cells went stale makes it exit 1,
    unless the notebook's not_rerun note keeps that label (then the line says so and it exits 0)."""
    path = project.write("s.md", notebook(cell("id=a", "print(1)"), cell("id=b needs=a", "pass")))
    project.run(path)
    project.run(path, label="other")
    out = project.cli("status", path, "--env", "python", "--all-labels")
    assert out.code == 0, out.out + out.err
    assert [line.split()[:3] for line in out.out.splitlines()] == [["s", "other", "2"], ["s", LABEL, "2"]]
    assert "2 cells: 2 cached" in out.out
    path.write_text(path.read_text().replace("print(1)", "print(2)"))
    out = project.cli("status", path, "--env", "python", "--all-labels")
    assert out.code == 1 and "2 cells: 2 stale; stale: a, b" in out.out
    assert "2 label(s) hold stale or failed cells that no not_rerun note keeps" in out.out
    text = path.read_text().replace("title: T", 'title: T\nnot_rerun:\n  other: "kept: measured elsewhere"')
    path.write_text(text)
    out = project.cli("status", path, "--env", "python", "--all-labels")
    assert (
        "stale: a, b (kept by its not_rerun note)" in out.out
        and "1 label(s) hold stale or failed cells" in out.out
    )
    out = project.cli("status", path, "--env", "python", "--all-labels", "--label", LABEL)
    assert out.code == 2 and "--all-labels judges every label folder" in out.err
    assert project.cli("status", path, "--env", "python", "--all-labels", "-p", "n=1").code == 2


def test_status_of_every_label_counts_a_failed_cell_and_not_a_cell_not_run(project):
    """A failed cell is what a re-run must mend (exit 1); a cell never run is information (a label may
    hold a part of a report by design), so a label with one exits 0."""
    path = project.write("f.md", notebook(cell("id=a", "pass"), cell("id=bad", "raise SystemExit(3)")))
    project.run(path)
    out = project.cli("status", path, "--env", "python", "--all-labels")
    assert out.code == 1 and "2 cells: 1 cached, 1 failed; failed: bad" in out.out, out.out
    path.write_text(notebook(cell("id=a", "pass"), cell("id=later", "pass")))
    out = project.cli("status", path, "--env", "python", "--all-labels")
    assert out.code == 0 and "2 cells: 1 cached, 1 not run" in out.out, out.out


def _status_rows(project, path, *args) -> dict[str, str]:
    out = project.status(path, *args)
    assert out.code == 0, out.err
    lines = out.out.splitlines()
    assert lines[0].startswith(f"{path} (label {LABEL}, env python")
    return {line.split()[0]: line.split(None, 1)[1] for line in lines[1:]}


def test_clean_removes_scripts_and_leftovers_but_keeps_outputs(project):
    path = project.write("k.md", notebook(cell("id=a", "pass")))
    project.run(path)
    leftover = project.root / "outputs" / "k" / LABEL / ".tmp-a-xyz"
    leftover.mkdir()
    out = project.cli("clean", path)
    assert out.code == 0
    assert "removed cells/k/a.py" in out.out and "removed outputs/k/t/.tmp-a-xyz" in out.out
    assert not (project.root / "cells" / "k").exists() and not leftover.exists()
    assert (project.cell_dir("k", "a") / "result.json").is_file()
    out = project.cli("clean", path, "--outputs")
    assert out.code == 0 and not (project.root / "outputs" / "k").exists()


def test_clean_without_notebook_uses_the_project_of_the_working_dir(project, monkeypatch):
    path = project.write("k.md", notebook(cell("id=a", "pass")))
    project.run(path)
    (project.root / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    monkeypatch.chdir(project.root / "notebooks")
    out = project.cli("clean")
    assert out.code == 0 and "removed cells/k/a.py" in out.out
    assert (project.cell_dir("k", "a") / "result.json").is_file()


def test_build_calls_render(project, monkeypatch):
    path = project.write("b.md", notebook(cell("id=a", "print('hi')")))
    project.run(path)
    out = project.cli("build", "--outputs", project.root / "outputs", "--site", project.root / "site")
    assert out.code == 0, out.err
    assert (project.root / "site" / "index.html").is_file()


def test_export_writes_an_ipynb(project):
    path = project.write("e.md", notebook(cell("id=a", "print(n)"), params={"n": 1}))
    out = project.cli("export", path, "--to", "ipynb", "-o", project.root / "e.ipynb")
    assert out.code == 0, out.err
    assert (project.root / "e.ipynb").is_file()
    assert project.cli("export", path, "--to", "docx").code == 2


def test_clean_refuses_a_label_that_leaves_the_outputs_folder(project):
    path = project.write("k.md", notebook(cell("id=a", "pass")))
    project.run(path)
    keep = project.root / "keep"
    keep.mkdir()
    for label in ("../../keep", str(keep), ".hidden"):
        out = project.cli("clean", path, "--outputs", "--label", label)
        assert out.code == 2 and f"--label {label!r}: a label is one folder name" in out.err
    assert keep.is_dir() and project.cell_dir("k", "a").is_dir()


def test_a_param_override_that_is_not_plain_data_exits_2_naming_it(project):
    path = project.write("p.md", notebook(cell("id=a", "print(d)"), params={"d": "x"}))
    out = project.run(path, "-p", "d=2024-01-01")  # YAML reads a date
    assert out.code == 2
    assert "param 'd': -p d=datetime.date(2024, 1, 1) is a date, not plain data" in out.err
    assert not (project.root / "outputs" / "p").exists()  # nothing started, nothing half-written
    assert project.run(path, "-p", "d='2024-01-01'").code == 0  # quoted, it is a string
