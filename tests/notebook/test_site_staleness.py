"""`attnbench build` judges every stored result against the code of now and the site says which are
stale: a note on the run's page naming the cells and why, a badge on the index card."""

from __future__ import annotations

from engine_helpers import cell, notebook

from attnbench.notebook.document.parse import parse_notebook
from attnbench.notebook.run.launchers import EnvSpec
from attnbench.notebook.run.status import stored_states
from attnbench.notebook.site.render import build_site

PYTHON = EnvSpec("python")  # the interpreter the test project's runs used (engine_helpers)


def test_the_site_marks_results_the_code_has_moved_past(project):
    a = cell("id=a", "print('measured')")
    path = project.write("s.md", notebook(a, cell("id=b needs=a", "print('presented')")))
    assert project.run(path).code == 0
    outputs = project.root / "outputs"

    states, problems = stored_states([parse_notebook(path)], outputs, PYTHON)
    assert problems == [] and {c: s for c, (s, _) in states["s"]["t"].items()} == {
        "a": "cached",
        "b": "cached",
    }

    path.write_text(
        notebook(cell("id=a", "print('measured anew')"), cell("id=b needs=a", "print('presented')"))
    )
    states, _ = stored_states([parse_notebook(path)], outputs, PYTHON)
    assert states["s"]["t"]["a"] == ("stale", "code changed")
    assert states["s"]["t"]["b"][0] == "stale"

    site = project.root / "site"
    build_site(outputs, site, states)
    page = (site / "s" / "t.html").read_text()
    assert (
        'class="stale-note"' in page
        and "2 cells of this run were measured by code that has changed since" in page
    )
    assert "code changed: " in page and "what it reads was measured again or changed: " in page
    assert "2 cells stale" in (site / "index.html").read_text()

    build_site(outputs, site)  # without the engine's judgement: only what run.json noted (nothing here)
    assert "of this run were measured by code" not in (site / "s" / "t.html").read_text()


def test_a_label_run_with_its_own_params_is_judged_with_them(project):
    """A `-p` run's label (`<label>+key-value`) is judged with its params; a default label with the
    defaults, so that a changed default shows as stale, not as cached."""
    path = project.write("p.md", notebook(cell("id=a", "print(params['n'])"), params={"n": 1}))
    assert project.run(path, "-p", "n=2", label="t+n-2").code == 0
    assert project.run(path).code == 0
    states, problems = stored_states([parse_notebook(path)], project.root / "outputs", PYTHON)
    assert (
        problems == [] and states["p"]["t+n-2"]["a"][0] == "cached" and states["p"]["t"]["a"][0] == "cached"
    )

    path.write_text(notebook(cell("id=a", "print(params['n'])"), params={"n": 3}))
    states, _ = stored_states([parse_notebook(path)], project.root / "outputs", PYTHON)
    assert states["p"]["t"]["a"] == ("stale", "params changed: n")
    assert states["p"]["t+n-2"]["a"][0] == "cached"


def test_a_broken_notebook_costs_its_own_staleness_not_the_site(project):
    path = project.write("s.md", notebook(cell("id=a", "print(1)")))
    assert project.run(path).code == 0
    project.write("broken.md", "")  # an empty notebook is a NotebookError
    built = project.cli("build", "--outputs", project.root / "outputs", "--site", project.root / "site")
    assert built.code == 0, built.err
    assert "broken.md" in built.err and "staleness of its results is not shown" in built.err
    assert (project.root / "site" / "s" / "t.html").exists()


def test_without_uv_the_build_judges_with_this_interpreter(project, monkeypatch):
    """`attnbench build` on a machine without uv still marks stale results (the code verdicts do not
    depend on the kind of environment), instead of a warning per label."""
    from attnbench.notebook import cli
    from attnbench.notebook.run import status

    path = project.write("s.md", notebook(cell("id=a", "print(1)")))
    assert project.run(path).code == 0
    seen = []
    real = status.stored_states
    monkeypatch.setattr(
        status, "stored_states", lambda nbs, out, env=None: seen.append(env) or real(nbs, out, env)
    )
    monkeypatch.setattr(cli.shutil, "which", lambda name: None)
    built = project.cli("build", "--outputs", project.root / "outputs", "--site", project.root / "site")
    assert built.code == 0 and seen and seen[0].kind == "python" and "staleness is not shown" not in built.err


def test_a_kept_label_says_why_it_was_not_re_run_without_staling_anything(project):
    """The front matter's `not_rerun` ({label: why}) reaches the label's page and index card through
    `attnbench build`; writing it changes no cell's verdict."""
    body = cell("id=a", "print('measured')")
    path = project.write("s.md", notebook(body))
    assert project.run(path).code == 0
    text = path.read_text().replace("title: T\n", "title: T\nnot_rerun:\n  t: no 2-GPU machine was lent\n")
    path.write_text(text)
    states, _ = stored_states([parse_notebook(path)], project.root / "outputs", PYTHON)
    assert states["s"]["t"]["a"][0] == "cached"
    built = project.cli("build", "--outputs", project.root / "outputs", "--site", project.root / "site")
    assert built.code == 0, built.err
    page = (project.root / "site" / "s" / "t.html").read_text()
    assert "<strong>Not re-run:</strong> no 2-GPU machine was lent" in page
    card = (project.root / "site" / "index.html").read_text()  # on the card itself, not in a tooltip
    assert '<p class="not-rerun small"><strong>Not re-run:</strong> no 2-GPU machine was lent</p>' in card
    assert "not_rerun names label" not in built.err

    path.write_text(text.replace("  t: no", "  tt: no"))  # a label with no results: said, not silent
    built = project.cli("build", "--outputs", project.root / "outputs", "--site", project.root / "site")
    assert built.code == 0 and "s.md: not_rerun names label 'tt', which has no results" in built.err


def test_a_cell_with_no_result_under_a_label_links_the_gpu_labels_that_ran_it(project):
    """A single-GPU cell is not run on a 2-GPU label: its section there links the cell on the pages of the
    GPU labels holding a good result of it, never a CPU smoke run's."""
    path = project.write("s.md", notebook(cell("id=a", "print('a')"), cell("id=b", "print('b')")))
    for label in ("nvidia-h200", "cpu"):
        assert project.run(path, label=label).code == 0
    assert project.run(path, "--cell", "a", label="nvidia-h200-x2").code == 0
    built = project.cli("build", "--outputs", project.root / "outputs", "--site", project.root / "site")
    assert built.code == 0, built.err
    page = (project.root / "site" / "s" / "nvidia-h200-x2.html").read_text()
    assert (
        'not run on this machine; measured under <a href="nvidia-h200.html#cell-b">nvidia-h200</a></p>'
        in page
    )
    assert 'href="cpu.html#cell-b"' not in page and 'href="nvidia-h200.html#cell-a"' not in page
