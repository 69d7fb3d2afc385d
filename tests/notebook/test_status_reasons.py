"""`attnbench status` says "stale" only when the code changed since a result was measured; a result
measured on another machine or environment is information ("measured elsewhere"). The source hash is
the same text on every Python version."""

from __future__ import annotations

import dataclasses
import hashlib
import json

from engine_helpers import cell, notebook

from attnbench.notebook.run import machine as machine_mod
from attnbench.notebook.run.sources import _canonical


def _on_another_machine(monkeypatch):
    real = machine_mod.detect_machine()
    other = dataclasses.replace(real, fingerprint="another-machine")
    monkeypatch.setattr(machine_mod, "detect_machine", lambda: other)


def _rows(out: str) -> dict[str, str]:
    rows = {}
    for line in out.splitlines():
        if line.startswith("  "):
            cell_id, rest = line.strip().split(None, 1)
            rows[cell_id] = rest
    return rows


def test_another_machine_is_information_not_staleness(project, monkeypatch):
    path = project.write("s.md", notebook(cell("id=a", "print(1)"), cell("id=b needs=a", "print(2)")))
    assert project.run(path).code == 0
    _on_another_machine(monkeypatch)
    rows = _rows(project.status(path).out)
    assert rows["a"].startswith("measured elsewhere: measured on another machine or environment")
    assert rows["b"].startswith("measured elsewhere")  # its upstream differs only by the machine
    assert "stale" not in project.status(path).out

    path.write_text(notebook(cell("id=a", "print(10)"), cell("id=b needs=a", "print(2)")))
    rows = _rows(project.status(path).out)
    assert rows["a"] == "stale: code changed"
    assert rows["b"].startswith("stale: upstream a changed")


def test_the_source_hash_is_the_same_on_every_python_version():
    src = (
        'def f(x, w):  # comment\n    """Doc."""\n    return f"{x!r:>{w}} and {x + 1}" + \'s\'\n\n\n'
        "class A:\n    y = [1,\n         2]\n"
    )
    canonical = _canonical(src)
    # fixed text: a change here (or on another Python) would invalidate every stored result
    assert hashlib.sha256(canonical.encode()).hexdigest() == (
        "17dac0255ca6ada74a6b074697f2dc52c27f91399730c939cede4f4ad8b2a598"
    )
    assert _canonical(src.replace("  # comment", "").replace("[1,\n         2]", "[1, 2]")) == canonical
    assert _canonical(src.replace("Doc.", "Doc!")) != canonical
    assert "type_params" not in canonical and "kind=None" not in canonical  # empty fields: version-dependent
    assert _canonical(src.replace("return f", "return (f").replace("+ 's'", "+ 's')")) == canonical


def test_presenting_cells_are_refreshed_away_from_the_machine_that_measured(project, monkeypatch):
    """--reuse-elsewhere --cell b: the measuring cell `a` (same code, another machine) is read as it
    is, never re-run here; `b` runs here on a's stored artifacts; afterwards neither is stale."""
    measure = cell("id=a outputs=n.txt", "import pathlib\npathlib.Path('n.txt').write_text('measured')")
    present = "import attnbench, pathlib\nprint('shown', (attnbench.inputs('a') / 'n.txt').read_text())"
    other = cell("id=c", "print('another measurement, not needed by b')")
    path = project.write("s.md", notebook(measure, cell("id=b needs=a", present), other))
    assert project.run(path).code == 0
    measured = project.status(path)
    _on_another_machine(monkeypatch)
    path.write_text(notebook(measure, cell("id=b needs=a", present + "\nprint('new presentation')"), other))
    assert _rows(project.status(path).out)["b"] == "stale: code changed"

    machine = project.run_json("s")["machine"]
    plain = project.run(path, "--cell", "b", "--reuse-elsewhere")
    assert plain.code == 0, plain.out + plain.err
    assert project.run_json("s")["machine"] == machine  # still the machine that measured
    rows = _rows(project.status(path).out)
    assert rows["a"].startswith("measured elsewhere")  # not re-run: still the other machine's result
    assert rows["b"] == "cached"
    assert "stale" not in project.status(path).out and measured.code == 0
    # c, not reached by this run, is measured elsewhere, not stale: run.json (and so the site) says no more
    assert "stale" not in project.run_json("s")["cells"]["c"]

    refused = project.run(path, "--reuse-elsewhere")
    assert refused.code == 2 and "--reuse-elsewhere needs --cell" in refused.err

    path.write_text(notebook(cell("id=a outputs=n.txt", "print('changed')"), cell("id=b needs=a", present)))
    stale = project.run(path, "--cell", "b", "--reuse-elsewhere")
    assert stale.code == 2
    assert "cell a of s.md is needed by the named cells but cannot be reused (code changed)" in stale.err


def test_stale_measurements_are_presented_anew_and_the_presentation_stays_stale(project):
    """--reuse-stale --cell b: `a`, measured by older code, is read as it is (never re-run); `b` runs
    with the code of now on it and is stale until `a` is measured again."""
    a = cell("id=a outputs=n.txt", "import pathlib\npathlib.Path('n.txt').write_text('old measurement')")
    b = "import attnbench\nprint('shown', (attnbench.inputs('a') / 'n.txt').read_text())"
    path = project.write("s.md", notebook(a, cell("id=b needs=a", b)))
    assert project.run(path).code == 0
    newer_a = cell(
        "id=a outputs=n.txt", "import pathlib\npathlib.Path('n.txt').write_text('new measurement')"
    )
    path.write_text(notebook(newer_a, cell("id=b needs=a", b + "\nprint('new presentation')")))

    refused = project.run(path, "--cell", "b", "--reuse-elsewhere")
    assert (
        refused.code == 2
        and "cell a of s.md is needed by the named cells but cannot be reused" in refused.err
    )
    done = project.run(path, "--cell", "b", "--reuse-stale")
    assert done.code == 0, done.out + done.err
    assert "shown old measurement" in project.stdout("s", "b") and "new presentation" in project.stdout(
        "s", "b"
    )
    rows = _rows(project.status(path).out)
    assert rows["a"] == "stale: code changed"
    assert rows["b"].startswith("stale: upstream a changed")
    assert project.run(path, "--reuse-stale").code == 2  # names no cell


def _git(root, *args):
    import subprocess

    subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True)


def test_a_result_keyed_by_an_earlier_index_is_rekeyed_from_git(project, monkeypatch):
    """The index's rules change (here: a salt on every hash, then none) while the files do not: the
    result stays cached, checked against the files at the commit it was measured at; once a file it
    uses differs from that commit, it is stale."""
    from attnbench.notebook.run.sources import SourceIndex

    root = project.root
    (root / "pyproject.toml").write_text('[tool.attnbench]\npackage = "mine"\n')
    (root / "src" / "mine" / "bench" / "sub").mkdir(parents=True)
    (root / "src" / "mine" / "__init__.py").write_text('"""Mine."""\n')
    (root / "src" / "mine" / "bench" / "__init__.py").write_text('"""Grouping."""\n')
    (root / "src" / "mine" / "bench" / "sub" / "__init__.py").write_text("x = 1\n")
    (root / "src" / "mine" / "bench" / "timing.py").write_text("y = 1\n")
    path = project.write("s.md", notebook(cell("id=a", "print('uses mine.bench.timing')")))
    _git(root, "init", "-q")
    _git(root, "add", "-A")
    _git(root, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "code")

    real = SourceIndex.hash_for
    monkeypatch.setattr(SourceIndex, "hash_for", lambda self, source: "earlier-" + real(self, source))
    assert project.run(path).code == 0
    assert project.result("s", "a")["key_parts"]["attnbench"].startswith("earlier-")
    monkeypatch.setattr(SourceIndex, "hash_for", real)

    assert _rows(project.status(path).out)["a"] == "cached"
    (root / "src" / "mine" / "bench" / "timing.py").write_text("y = 2\n")
    # the part whose code changed since the commit the result was measured at is named
    assert _rows(project.status(path).out)["a"] == "stale: attnbench sources changed (bench.timing)"
    (root / "src" / "mine" / "bench" / "sub" / "__init__.py").write_text("x = 2\n")  # a part it does not use
    assert _rows(project.status(path).out)["a"] == "stale: attnbench sources changed (bench.timing)"


def test_a_label_measured_on_other_gpus_is_never_measured_over(project, monkeypatch):
    """A run that would measure under a label whose run.json names other GPUs (here: results of a machine
    without a GPU, and now an H200) stops before any cell starts, naming the file; what is stored stays.
    Presenting its results with --reuse-elsewhere --cell is still allowed: naming the cells asks for it."""
    measure = cell("id=a outputs=n.txt", "import pathlib\npathlib.Path('n.txt').write_text('measured')")
    present = "import attnbench\nprint('shown', (attnbench.inputs('a') / 'n.txt').read_text())"
    path = project.write("s.md", notebook(measure, cell("id=b needs=a", present)))
    assert project.run(path).code == 0
    before = project.run_json("s")
    real = machine_mod.detect_machine()
    h200 = dataclasses.replace(real, gpu="NVIDIA H200", gpu_count=1, fingerprint="an-h200")
    monkeypatch.setattr(machine_mod, "detect_machine", lambda: h200)
    path.write_text(notebook(measure, cell("id=b needs=a", present + "\nprint('new presentation')")))

    for args in ((), ("--cell", "b"), ("--force",)):
        refused = project.run(path, *args)
        assert refused.code == 2, refused.out + refused.err
        assert "holds results measured on a machine with no GPU" in refused.err
        assert "run.json" in refused.err and "this machine has 1 x NVIDIA H200" in refused.err
        assert "Nothing was run" in refused.err and project.run_json("s") == before

    shown = project.run(path, "--cell", "b", "--reuse-elsewhere", "--force")
    assert shown.code == 0, shown.out + shown.err
    assert "new presentation" in project.stdout("s", "b")
    assert project.run_json("s")["cells"]["a"] == before["cells"]["a"]  # a was reused, not forced


def test_a_machine_measures_under_its_own_label_and_is_told_how_to_narrow_a_bigger_one(project, monkeypatch):
    """A label named for this machine is its own, whatever machine wrote run.json last; a machine with
    more GPUs of the same model than a label's is told how to give the run the label's count."""
    path = project.write("s.md", notebook(cell("id=a", "print(1)")))
    assert project.run(path, label="nvidia-h200").code == 0  # written here, on a machine without a GPU
    real = machine_mod.detect_machine()
    for count in (1, 2):
        one = dataclasses.replace(real, gpu="NVIDIA H200", gpu_count=count, fingerprint=f"h200-x{count}")
        monkeypatch.setattr(machine_mod, "detect_machine", lambda one=one: one)
        if count == 1:  # its own label: measured again here
            ran = project.run(path, "--force", label="nvidia-h200")
            assert ran.code == 0, ran.out + ran.err
            record = json.loads((project.root / "outputs" / "s" / "nvidia-h200" / "run.json").read_text())
            assert record["machine"]["gpu_count"] == 1
        else:
            refused = project.run(path, "--force", label="nvidia-h200")
            assert refused.code == 2 and "CUDA_VISIBLE_DEVICES=0 gives it the label's 1" in refused.err
            assert "this machine's own: nvidia-h200-x2" in refused.err


def test_a_cell_named_under_a_label_with_no_results_says_its_upstream_runs_first(project):
    """On a tree without the label's folder (a GPU lease that left outputs/ behind) naming one cell runs
    every cell it reads too: said before anything starts; not said once the label holds results."""
    path = project.write("s.md", notebook(cell("id=a", "print('a')"), cell("id=b needs=a", "print('b')")))
    first = project.run(path, "--cell", "b")
    assert first.code == 0, first.err
    assert "note: outputs/s/t holds no results: a run first, for the cells named" in first.err.replace(
        str(project.root) + "/", ""
    )
    again = project.run(path, "--cell", "b")
    assert again.code == 0 and "holds no results" not in again.err


def test_a_cell_named_over_a_stale_upstream_cell_says_it_runs_first_with_its_time(project):
    """A label with results whose upstream cell's code changed: naming the reader runs the stale cell
    first, said before anything starts with its time by its last run; a current upstream cell is not
    named, and nothing is said once it is current again."""
    a, b, c = cell("id=a", "print('a')"), cell("id=b needs=a,c", "print('b')"), cell("id=c", "print('c')")
    path = project.write("s.md", notebook(a, b, c))
    assert project.run(path).code == 0
    project.write("s.md", notebook(cell("id=a", "print('a, changed')"), b, c))  # c stays current
    stale = project.run(path, "--cell", "b")
    assert stale.code == 0, stale.err
    note = next(line for line in stale.err.splitlines() if line.startswith("note: the cells named"))
    assert "not current under label t, so these run first: a " in note
    assert note.split("run first: ")[1].split(" (")[0].endswith(" s")  # its time by its last run
    assert " c " not in note and "c," not in note
    again = project.run(path, "--cell", "b")
    assert again.code == 0 and "run first" not in again.err
