"""`attnbench merge`: results measured elsewhere (a GPU lease that ran some cells, a failed re-run) come into
outputs/ cell by cell, and nothing stored here is lost."""

from __future__ import annotations

import io
import json
import os
import tarfile

import pytest
from engine_helpers import LABEL, cell, notebook

from attnbench.notebook.run.merge import ADDED, FAILURE_BESIDE, KEPT, REPLACED, SAME, MergeError, merge

BODY = """
import os, time
from pathlib import Path
if os.environ.get("FAIL_FLAG") and Path(os.environ["FAIL_FLAG"]).exists():
    raise RuntimeError("out of memory on the lease")
Path("out.txt").write_text(str(time.time_ns()))
"""


def two_cells(project):
    flag = project.root / "flag"
    path = project.write("m.md", notebook(cell(f"id=a outputs=out.txt env=FAIL_FLAG={flag}", BODY),
                                          cell("id=b outputs=out.txt", BODY)))  # fmt: skip
    return path, flag


def out(folder):
    return (folder / "artifacts" / "out.txt").read_text()


def restamp(result_json, finished):
    """Give a stored result another finish time (runs of a test fall in one second)."""
    record = json.loads(result_json.read_text())
    result_json.write_text(json.dumps({**record, "finished": finished}))


def actions(steps):
    return {step.folder: step.action for step in steps}


def snapshot(folder):
    return {p.relative_to(folder): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_lease_that_ran_one_cell_replaces_that_cell_and_keeps_the_others(project):
    path, _ = two_cells(project)
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
    assert set(project.run_json("m")["cells"]) == {"a", "b"}  # run.json's entries merged, not replaced
    assert "cached" in project.status(path).out
    again = project.cli("merge", away, "--outputs", project.root / "outputs")
    assert again.code == 0 and "1 cell results: 1 already here" in again.out


def test_a_failed_cell_goes_beside_the_good_result_it_would_have_replaced(project):
    path, flag = two_cells(project)
    assert project.run(path).code == 0
    restamp(project.cell_dir("m", "a") / "result.json", "2026-01-01T00:00:00+00:00")
    good = project.result("m", "a")
    flag.write_text("")
    away = project.root / "away"
    assert project.run(path, "--outputs", away).code == 1  # a fresh tree: the failure is stored in place
    assert json.loads((away / "m" / LABEL / "a" / "result.json").read_text())["status"] == "failed"

    outputs = project.root / "outputs"
    assert actions(merge(away, outputs))["m/t/a"] == FAILURE_BESIDE
    assert project.result("m", "a") == good
    failure = json.loads((project.cell_dir("m", "a") / "last-failure" / "result.json").read_text())
    assert "out of memory on the lease" in failure["reason"]
    assert "out of memory on the lease" in project.status(path).out
    assert actions(merge(away, outputs))["m/t/a"] == SAME  # merged twice: nothing changes
    assert not [p for p in (outputs / "m" / LABEL).iterdir() if p.name.startswith(".tmp-")]


def test_what_finished_later_here_wins_and_a_later_failure_here_moves_beside_a_good_result(project):
    path, flag = two_cells(project)
    away = project.root / "away"
    assert project.run(path, "--outputs", away).code == 0  # good results elsewhere, stamped earlier
    for result in away.glob("m/t/*/result.json"):
        restamp(result, "2026-01-01T00:00:00")  # no zone: UTC, as the engine writes
    assert project.run(path).code == 0
    here = out(project.cell_dir("m", "a"))
    outputs = project.root / "outputs"
    assert set(actions(merge(away, outputs)).values()) == {KEPT}
    assert out(project.cell_dir("m", "a")) == here

    flag.write_text("")  # a failure stored in place here, later than the good result from away
    (project.cell_dir("m", "a") / "result.json").unlink()
    assert project.run(path, "--cell", "a").code == 1
    assert project.result("m", "a")["status"] == "failed"
    assert actions(merge(away, outputs))["m/t/a"] == REPLACED
    assert project.result("m", "a")["status"] == "ok"
    kept = json.loads((project.cell_dir("m", "a") / "last-failure" / "result.json").read_text())
    assert "out of memory on the lease" in kept["reason"]  # the later failure was not lost


def test_a_dry_run_says_what_would_change_and_changes_nothing(project):
    path, flag = two_cells(project)
    assert project.run(path).code == 0
    for result in (project.root / "outputs").glob("m/t/*/result.json"):
        restamp(result, "2026-01-01T00:00:00+00:00")
    flag.write_text("")
    away = project.root / "away"
    assert project.run(path, "--outputs", away).code == 1
    before = snapshot(project.root / "outputs")
    result = project.cli("merge", away, "--outputs", project.root / "outputs", "--dry-run")
    assert result.code == 0 and "would merge" in result.out, result.err
    assert FAILURE_BESIDE in result.out and "1 replaced" in result.out
    assert snapshot(project.root / "outputs") == before


def test_an_archive_packed_as_the_device_script_packs_it_merges_the_same(project):
    path, _ = two_cells(project)
    away = project.root / "lease"
    assert project.run(path, "--outputs", away / "outputs").code == 0
    archive = project.root / "outputs.tgz"
    with tarfile.open(
        archive, "w:gz"
    ) as tar:  # scripts/device_run.sh: tar czf outputs.tgz outputs/<nb>/<label>
        tar.add(away / "outputs" / "m" / LABEL, arcname=f"outputs/m/{LABEL}")
    (project.root / "outputs").mkdir()
    steps = merge(archive, project.root / "outputs")
    assert sorted(s.folder for s in steps) == ["m/t/a", "m/t/b"] and {s.action for s in steps} == {ADDED}
    assert (project.root / "outputs" / "m" / LABEL / "run.json").is_file()
    assert "cached" in project.status(path).out


def test_an_archive_member_outside_its_folder_is_refused_and_named(project, tmp_path):
    archive = tmp_path / "evil.tgz"
    with tarfile.open(archive, "w:gz") as tar:
        data = b"{}"
        member = tarfile.TarInfo("../escape.json")
        member.size = len(data)
        tar.addfile(member, io.BytesIO(data))
    (project.root / "outputs").mkdir()
    with pytest.raises(MergeError, match="evil.tgz: cannot unpack"):
        merge(archive, project.root / "outputs")
    assert not (tmp_path.parent / "escape.json").exists()


def test_bad_sources_are_named_and_change_nothing(project):
    outputs = project.root / "outputs"
    missing = project.cli("merge", project.root / "nowhere", "--outputs", outputs)
    assert missing.code == 2 and "nowhere: no such file or folder" in missing.err

    path, _ = two_cells(project)
    away = project.root / "away"
    assert project.run(path, "--outputs", away).code == 0
    result = project.cli("merge", away, "--outputs", outputs)
    assert result.code == 2 and "outputs: no outputs folder here (name one with --outputs)" in result.err
    outputs.mkdir()
    result = project.cli("merge", outputs, "--outputs", outputs)
    assert result.code == 2 and "holds no outputs" in result.err

    empty = project.root / "empty"
    (empty / "m" / LABEL).mkdir(parents=True)
    result = project.cli("merge", empty, "--outputs", outputs)
    assert result.code == 2 and "holds no outputs/<notebook>/<label>/<cell>/result.json" in result.err

    text = project.root / "notes.txt"
    text.write_text("x")
    result = project.cli("merge", text, "--outputs", outputs)
    assert result.code == 2 and "not an archive" in result.err

    restamp(away / "m" / LABEL / "b" / "result.json", "yesterday")
    result = project.cli("merge", away, "--outputs", outputs)
    assert result.code == 2 and "m/t/b/result.json: finished is 'yesterday'" in result.err
    (away / "m" / LABEL / "b" / "result.json").write_text("{not json")
    result = project.cli("merge", away, "--outputs", outputs)
    assert result.code == 2 and "m/t/b/result.json" in result.err
    assert not (outputs / "m").exists()  # checked before anything was written

    (away / "m" / LABEL / "b" / "result.json").unlink()
    os.symlink(
        away / "m" / LABEL / "b" / "artifacts" / "out.txt", away / "m" / LABEL / "a" / "artifacts" / "b.txt"
    )
    result = project.cli("merge", away, "--outputs", outputs)
    assert result.code == 2 and "a/artifacts/b.txt is a link" in result.err  # into another cell: refused
    assert not (outputs / "m").exists()


def test_a_broken_record_here_is_replaced_and_an_empty_folder_is_filled(project):
    path, _ = two_cells(project)
    away = project.root / "away"
    assert project.run(path, "--outputs", away).code == 0
    outputs = project.root / "outputs"
    (outputs / "m" / LABEL / "a").mkdir(parents=True)
    (outputs / "m" / LABEL / "a" / "result.json").write_text("{broken")
    (outputs / "m" / LABEL / "b" / "artifacts").mkdir(parents=True)  # what an emptied folder leaves
    assert actions(merge(away, outputs)) == {"m/t/a": REPLACED, "m/t/b": ADDED}
    assert project.result("m", "a")["status"] == "ok" and "cached" in project.status(path).out
