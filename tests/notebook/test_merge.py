"""`attnbench merge`: results measured elsewhere (a GPU lease that ran some cells, a failed re-run) come into
outputs/ cell by cell, and nothing stored here is lost."""

from __future__ import annotations

import json
import os
import tarfile

from engine_helpers import LABEL, cell, notebook

from attnbench.notebook.run.merge import FAILURE_BESIDE, KEPT, merge

BODY = """
import os, time
from pathlib import Path
if os.environ.get("FAIL_FLAG") and Path(os.environ["FAIL_FLAG"]).exists():
    raise RuntimeError("out of memory on the lease")
Path("out.txt").write_text(f"{NAME} {time.time_ns()}")
"""


def two_cells(project, flag):
    body = BODY.replace("{NAME}", "{__name__}")
    return project.write("m.md", notebook(cell(f"id=a outputs=out.txt env=FAIL_FLAG={flag}", body),
                                          cell("id=b outputs=out.txt", body)))  # fmt: skip


def out(folder):
    return (folder / "artifacts" / "out.txt").read_text()


def test_a_lease_that_ran_one_cell_replaces_that_cell_and_keeps_the_others(project):
    path = two_cells(project, project.root / "flag")
    assert project.run(path).code == 0
    a_before = out(project.cell_dir("m", "a"))
    away = project.root / "away"
    assert project.run(path, "--cell", "b", "--outputs", away).code == 0  # the lease ran b alone
    assert not (away / "m" / LABEL / "a").exists()
    b_away = out(away / "m" / LABEL / "b")

    result = project.cli("merge", away, "--outputs", project.root / "outputs")
    assert result.code == 0, result.err
    assert "m/t/b" in result.out and "1 cell results: 1 replaced" in result.out
    assert out(project.cell_dir("m", "a")) == a_before
    assert out(project.cell_dir("m", "b")) == b_away
    assert "cached" in project.status(path).out
    again = project.cli("merge", away, "--outputs", project.root / "outputs")
    assert again.code == 0 and "1 cell results: 1 already here" in again.out


def test_a_failed_cell_goes_beside_the_good_result_it_would_have_replaced(project):
    flag = project.root / "flag"
    path = two_cells(project, flag)
    assert project.run(path).code == 0
    good = project.result("m", "a")
    flag.write_text("")
    away = project.root / "away"
    assert project.run(path, "--outputs", away).code == 1  # a fresh tree: the failure is stored in place
    assert json.loads((away / "m" / LABEL / "a" / "result.json").read_text())["status"] == "failed"

    steps = merge(away, project.root / "outputs")
    assert {s.folder: s.action for s in steps}["m/t/a"] == FAILURE_BESIDE
    assert project.result("m", "a") == good
    failure = json.loads((project.cell_dir("m", "a") / "last-failure" / "result.json").read_text())
    assert "out of memory on the lease" in failure["reason"]
    assert "out of memory on the lease" in project.status(path).out


def test_a_result_here_that_finished_later_is_kept_and_a_dry_run_changes_nothing(project):
    path = two_cells(project, project.root / "flag")
    away = project.root / "away"
    assert project.run(path, "--outputs", away).code == 0  # measured elsewhere first
    assert project.run(path).code == 0  # then here, later (stamped an hour earlier there: same second here)
    for result in away.glob("m/t/*/result.json"):
        record = json.loads(result.read_text())
        result.write_text(json.dumps({**record, "finished": "2026-01-01T00:00:00+00:00"}))
    here = out(project.cell_dir("m", "a"))
    assert {s.action for s in merge(away, project.root / "outputs")} == {KEPT}
    assert out(project.cell_dir("m", "a")) == here

    (project.root / "outputs" / "m").rename(project.root / "moved")
    result = project.cli("merge", away, "--outputs", project.root / "outputs", "--dry-run")
    assert result.code == 0 and "would merge" in result.out and "2 added" in result.out
    assert not (project.root / "outputs" / "m").exists()


def test_an_archive_packed_as_the_device_script_packs_it_merges_the_same(project):
    path = two_cells(project, project.root / "flag")
    away = project.root / "lease"
    assert project.run(path, "--outputs", away / "outputs").code == 0
    archive = project.root / "outputs.tgz"
    with tarfile.open(
        archive, "w:gz"
    ) as tar:  # scripts/device_run.sh: tar czf outputs.tgz outputs/<nb>/<label>
        tar.add(away / "outputs" / "m" / LABEL, arcname=f"outputs/m/{LABEL}")
    steps = merge(archive, project.root / "outputs")
    assert sorted(s.folder for s in steps) == ["m/t/a", "m/t/b"] and {s.action for s in steps} == {"added"}
    assert (project.root / "outputs" / "m" / LABEL / "run.json").is_file()
    assert "cached" in project.status(path).out


def test_bad_sources_are_named_and_change_nothing(project):
    outputs = project.root / "outputs"
    missing = project.cli("merge", project.root / "nowhere", "--outputs", outputs)
    assert missing.code == 2 and "nowhere: no such file or folder" in missing.err

    empty = project.root / "empty"
    (empty / "m" / LABEL).mkdir(parents=True)
    result = project.cli("merge", empty, "--outputs", outputs)
    assert result.code == 2 and "holds no outputs/<notebook>/<label>/<cell>/result.json" in result.err

    text = project.root / "notes.txt"
    text.write_text("x")
    result = project.cli("merge", text, "--outputs", outputs)
    assert result.code == 2 and "not an archive" in result.err

    path = two_cells(project, project.root / "flag")
    away = project.root / "away"
    assert project.run(path, "--outputs", away).code == 0
    (away / "m" / LABEL / "b" / "result.json").write_text("{not json")
    result = project.cli("merge", away, "--outputs", outputs)
    assert result.code == 2 and "m/t/b/result.json" in result.err
    assert not (outputs / "m" / LABEL / "a").exists()  # checked before anything was written

    (away / "m" / LABEL / "b" / "result.json").unlink()
    os.symlink("/etc/passwd", away / "m" / LABEL / "a" / "artifacts" / "leak.txt")
    result = project.cli("merge", away, "--outputs", outputs)
    assert result.code == 2 and "leak.txt is" in result.err
    assert not (outputs / "m").exists()
