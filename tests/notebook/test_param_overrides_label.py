"""`-p key=value` results never replace the label's default results: without --label they go to a
label derived from the overrides."""

from __future__ import annotations

from engine_helpers import cell, notebook

from attnbench.notebook.run.machine import detect_label
from attnbench.notebook.run.session import override_label

BODY = """
from pathlib import Path
Path("n.txt").write_text(str(n))
"""


def _run(project, path, *args):
    return project.cli("run", path, "--env", "python", "--plain", *args)


def test_overrides_go_to_their_own_label_and_leave_the_default_results(project):
    path = project.write("p.md", notebook(cell("id=a", BODY), params={"n": 1}))
    base = detect_label()
    assert _run(project, path).code == 0
    default = project.cell_dir("p", "a", label=base) / "artifacts" / "n.txt"
    assert default.read_text() == "1"

    outcome = _run(project, path, "-p", "n=2")
    assert outcome.code == 0
    assert default.read_text() == "1"  # untouched
    assert (project.cell_dir("p", "a", label=f"{base}+n-2") / "artifacts" / "n.txt").read_text() == "2"
    assert f"{base}+n-2" in outcome.out + outcome.err

    assert _run(project, path, "-p", "n=1").code == 0  # the default value: the default label, cached
    assert default.read_text() == "1"
    assert not (project.root / "outputs" / "p" / f"{base}+n-1").exists()


def test_an_explicit_label_is_used_as_given(project):
    path = project.write("q.md", notebook(cell("id=a", BODY), params={"n": 1}))
    assert project.run(path, "-p", "n=3").code == 0
    assert (project.cell_dir("q", "a") / "artifacts" / "n.txt").read_text() == "3"


def test_override_labels_are_valid_folder_names():
    assert override_label("cpu", {}) == "cpu"
    assert (
        override_label("cpu", {"profile": "smoke", "seq_lens": [4224]}) == "cpu+profile-smoke+seq_lens-4224"
    )
    long = override_label("cpu", {"seq_lens": list(range(100)), "x": "../../etc"})
    assert long.startswith("cpu+p-") and "/" not in long
    assert "/" not in override_label("cpu", {"x": "../a/b"})
