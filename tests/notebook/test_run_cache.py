"""The cache: hits start no process; params, --force and --cell decide what re-runs."""

from __future__ import annotations

import pytest
from engine_helpers import cell, notebook

from attnbench.notebook.run.machine import detect_machine

pytestmark = pytest.mark.timeout(120)

COUNTING = """
import os, pathlib
log = pathlib.Path(os.environ["ATTNBENCH_ROOT"]) / "runs.log"
with log.open("a") as f:
    f.write(f"{CELL} n={n}\\n")
print("n is", n)
"""


def counting(cell_id: str, attrs: str = "") -> str:
    return cell(f"id={cell_id} {attrs}", COUNTING.replace("{CELL}", cell_id))


def runs(project) -> list[str]:
    log = project.root / "runs.log"
    return log.read_text().splitlines() if log.exists() else []


@pytest.fixture
def chain(project):
    """a -> b -> c, each logging every start to runs.log."""
    path = project.write(
        "x.md", notebook(counting("a"), counting("b", "needs=a"), counting("c", "needs=b"), params={"n": 1})
    )
    return project, path


def test_second_run_is_a_full_hit_and_starts_no_process(chain):
    project, path = chain
    first = project.run(path)
    assert first.code == 0, first.err
    assert runs(project) == ["a n=1", "b n=1", "c n=1"]
    before = {c: project.result("x", c)["key"] for c in "abc"}
    second = project.run(path)
    assert second.code == 0
    assert runs(project) == ["a n=1", "b n=1", "c n=1"]  # nothing started
    assert "3 hit" in second.out
    assert {c: project.result("x", c)["key"] for c in "abc"} == before
    assert project.run_json("x")["cells"]["a"]["state"] == "ran"  # a full hit leaves run.json as it was


def test_param_override_changes_key_and_reaches_the_cell(chain):
    project, path = chain
    project.run(path)
    key = project.result("x", "a")["key"]
    out = project.run(path, "-p", "n=5")
    assert out.code == 0, out.err
    assert runs(project)[3:] == ["a n=5", "b n=5", "c n=5"]
    assert project.result("x", "a")["key"] != key
    assert project.result("x", "a")["params"] == {"n": 5}
    assert "n is 5" in project.stdout("x", "a")
    project.run(path, "-p", "n=5")
    assert len(runs(project)) == 6  # cached under the new params
    assert project.run_json("x")["params"] == {"n": 5}


def test_yaml_param_values(project):
    body = "print(repr(params['v']), type(v).__name__)"
    path = project.write("y.md", notebook(cell("id=a", body), params={"v": None}))  # null: any type
    project.run(path, "-p", "v=[1, 2.5, true]")
    assert "[1, 2.5, True] list" in project.stdout("y", "a")


def test_force_reruns_every_cell(chain):
    project, path = chain
    project.run(path)
    out = project.run(path, "--force")
    assert out.code == 0
    assert len(runs(project)) == 6


def test_cell_reruns_only_that_cell_using_cached_upstream(chain):
    project, path = chain
    project.run(path)
    out = project.run(path, "--cell", "b")
    assert out.code == 0, out.err
    assert runs(project)[3:] == ["b n=1"]  # a from cache, c not run


def test_cell_runs_stale_upstream_first(chain):
    project, path = chain
    project.run(path)
    path.write_text(path.read_text().replace('print("n is", n)', 'print("n is now", n)', 1))  # edits cell a
    out = project.run(path, "--cell", "b")
    assert out.code == 0, out.err
    assert runs(project)[3:] == ["a n=1", "b n=1"]
    assert "n is now" in project.stdout("x", "a")


def test_cell_unknown_id_exits_2(chain):
    project, path = chain
    out = project.run(path, "--cell", "nope")
    assert out.code == 2
    assert "--cell nope: no such cell" in out.err
    assert runs(project) == []


def test_editing_a_cell_reruns_it_and_its_dependents_only(project):
    path = project.write(
        "z.md", notebook(counting("a"), counting("b", "needs=a"), counting("solo"), params={"n": 1})
    )
    project.run(path)
    path.write_text(path.read_text().replace("```python id=b needs=a\n", "```python id=b needs=a\nx = 1\n"))
    project.run(path)
    assert runs(project)[3:] == ["b n=1"]


def test_failed_cell_is_never_a_hit(project):
    body = """
    import os, pathlib
    p = pathlib.Path(os.environ["ATTNBENCH_ROOT"]) / "tries"
    p.write_text(p.read_text() + "x" if p.exists() else "x")
    raise SystemExit(3)
    """
    path = project.write("f.md", notebook(cell("id=a", body)))
    assert project.run(path).code == 1
    assert project.run(path).code == 1
    assert (project.root / "tries").read_text() == "xx"
    assert project.result("f", "a")["returncode"] == 3


WAIT_FOR_OTHER = """
import os, pathlib, time
root = pathlib.Path(os.environ["ATTNBENCH_ROOT"])
(root / "{me}.started").write_text("1")
deadline = time.monotonic() + 20
while not (root / "{other}.started").exists():
    if time.monotonic() > deadline:
        raise SystemExit("{other} never ran alongside {me}")
    time.sleep(0.02)
"""


@pytest.mark.skipif(detect_machine().gpu_count > 0, reason="with a GPU visible, cells run one at a time")
def test_jobs_run_independent_cells_at_once_without_a_gpu(project):
    path = project.write(
        "j.md",
        notebook(
            cell("id=a", WAIT_FOR_OTHER.format(me="a", other="b")),
            cell("id=b", WAIT_FOR_OTHER.format(me="b", other="a")),
            cell("id=c needs=a,b", "print('after both')"),
        ),
    )
    out = project.run(path, "-j", "2")
    assert out.code == 0, out.err
    assert project.stdout("j", "c") == "after both\n"


def test_a_run_reads_each_notebook_once(project, monkeypatch):
    from attnbench.notebook.document import parse

    other = project.write("other.md", notebook(cell("id=up", "print(1)")))
    path = project.write("x.md", notebook(cell("id=a needs=other.md:up", "print(2)")))
    parsed: list[str] = []
    real = parse.parse_text
    monkeypatch.setattr(
        parse, "parse_text", lambda text, at, **kw: parsed.append(str(at)) or real(text, at, **kw)
    )
    out = project.run(path)
    assert out.code == 0, out.err
    assert sorted(parsed) == sorted([str(path), str(other)])  # the runnable check's parse is the run's


def test_a_finished_cell_has_only_itself_and_its_downstream_judged_again(project, monkeypatch):
    """A cell's key and verdict are worked out again after a cell upstream of it ran, and only then:
    `alone` needs nothing, so the runs of a and b leave its judgment as it was."""
    from attnbench.notebook.run import session

    path = project.write(
        "x.md", notebook(counting("a"), counting("b", "needs=a"), counting("alone"), params={"n": 1})
    )
    keyed: list[str] = []
    real = session.cell_key
    monkeypatch.setattr(
        session, "cell_key", lambda cell, *a, **kw: keyed.append(cell.id) or real(cell, *a, **kw)
    )
    out = project.run(path)
    assert out.code == 0, out.err
    assert runs(project) == ["a n=1", "b n=1", "alone n=1"]  # `alone` waited for a and b (-j 1)
    # once before any cell starts; a and b once more after a ran (b's key holds a's new artifacts)
    assert sorted(keyed) == ["a", "a", "alone", "b", "b"]
    assert project.result("x", "b")["key_parts"]["upstream"]["a"] == project.result("x", "a")["key"]
    keyed.clear()
    again = project.run(path)
    assert again.code == 0 and "3 hit" in again.out
    assert sorted(keyed) == ["a", "alone", "b"]
