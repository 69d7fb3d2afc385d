"""result.json and run.json as typed records: every reader goes through them, and a broken record
is an error naming the file, never a silent re-run or a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from engine_helpers import LABEL, cell, notebook

from attnbench.notebook.run import store
from attnbench.notebook.run.records import CellEntry, CellResult, RecordError, RunRecord, Status
from attnbench.notebook.site.render import build_site

REPO = Path(__file__).resolve().parents[2]
COUNTING = "import os, pathlib\nwith open(pathlib.Path(os.environ['ATTNBENCH_ROOT'], 'runs.log'), 'a') as f: f.write('a')"


def test_every_committed_record_loads():
    runs = sorted((REPO / "outputs").glob("*/*/run.json"))
    if not runs:
        pytest.skip("no committed outputs in this checkout")
    for run_file in runs:
        run = store.load_run(run_file.parent)
        assert run is not None and run.cells, run_file
        for cell_id in run.cells:
            store.load_result(
                run_file.parent / cell_id
            )  # raises RecordError naming a record that does not load


def test_records_round_trip_through_json(tmp_path):
    result = CellResult(
        cell="a",
        status=Status.TIMEOUT,
        key="k",
        started="2025-01-01T00:00:00+00:00",
        finished="2025-01-01T00:00:09+00:00",
        key_parts={"upstream": {"b": "k2"}},
        reason="timed out after 9 s",
        duration_s=9.0,
        artifacts=["x.txt"],
    )
    assert CellResult.from_json(json.loads(json.dumps(result.to_json())), tmp_path) == result
    assert result.to_json()["status"] == "timeout" and list(result.to_json())[:4] == [
        "cell",
        "notebook",
        "label",
        "status",
    ]
    run = RunRecord(cells={"a": CellEntry(Status.RAN), "b": CellEntry(Status.HIT, stale="code changed")})
    assert RunRecord.from_json(json.loads(json.dumps(run.to_json())), tmp_path) == run
    assert run.to_json()["cells"] == {
        "a": {"state": "ran", "reason": ""},
        "b": {"state": "hit", "reason": "", "stale": "code changed"},
    }


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"status": "bogus"},
            "status is 'bogus': expected one of failed, interrupted, missing-deps, ok, timeout",
        ),
        ({"status": "skipped"}, "status is 'skipped': expected one of"),  # never stored for a cell
        ({"status": ["ok"]}, 'status is ["ok"]: expected one of'),  # not a string: named, no TypeError
        ({"duration_s": "fast"}, "duration_s is 'fast': expected a number or null"),
        ({"key": None}, "key is null: expected a string"),
        ({"artifacts": ["a", 3]}, 'artifacts is ["a", 3]: expected a list or null'),
    ],
)
def test_a_bad_result_json_is_named(tmp_path, change, message):
    good = CellResult(cell="a", status=Status.OK, key="k", started="s", finished="f").to_json()
    (tmp_path / "result.json").write_text(json.dumps({**good, **change}))
    with pytest.raises(RecordError) as err:
        store.load_result(tmp_path)
    assert str(err.value).startswith(f"{tmp_path / 'result.json'}: ")
    assert message in str(err.value)


def test_missing_fields_and_bad_json_are_named(tmp_path):
    (tmp_path / "result.json").write_text('{"cell": "a", "status": "ok"}')
    with pytest.raises(RecordError, match=r"result.json: key is missing"):
        store.load_result(tmp_path)
    (tmp_path / "run.json").write_text('{"cells": {"a": {"state": "ran"}')
    with pytest.raises(RecordError, match=r"run.json: is not valid JSON"):
        store.load_run(tmp_path)
    (tmp_path / "run.json").write_text('{"cells": {"a": {"state": "cached"}}}')
    with pytest.raises(
        RecordError, match=r"run.json: cells.a.state is 'cached': expected one of failed, hit"
    ):
        store.load_run(tmp_path)


def test_run_and_status_stop_with_exit_2_on_a_broken_result_json(project):
    path = project.write("r.md", notebook(cell("id=a", COUNTING), cell("id=b needs=a", "pass")))
    assert project.run(path).code == 0
    result_file = project.cell_dir("r", "a") / "result.json"
    result_file.write_text(result_file.read_text().replace('"status": "ok"', '"status": "fine"'))
    out = project.run(path, "--force")
    assert out.code == 2
    assert f"{result_file}: status is 'fine': expected one of" in out.err and "nothing was run" in out.err
    assert (project.root / "runs.log").read_text() == "a"  # not run again over the broken record
    status = project.status(path)
    assert status.code == 2 and f"{result_file}: status is 'fine'" in status.err


def test_run_stops_with_exit_2_on_a_broken_run_json(project):
    path = project.write("r.md", notebook(cell("id=a", COUNTING)))
    assert project.run(path).code == 0
    run_file = project.root / "outputs" / "r" / LABEL / "run.json"
    run_file.write_text("<<<<<<< HEAD\n" + run_file.read_text())  # a merge conflict in committed outputs
    out = project.run(path, "--force")
    assert out.code == 2 and f"{run_file}: is not valid JSON" in out.err
    assert run_file.read_text().startswith("<<<<<<< HEAD")  # left for the user to resolve


def test_the_site_names_a_broken_result_json(project, tmp_path):
    path = project.write("r.md", notebook(cell("id=a", "print('hi')")))
    assert project.run(path).code == 0
    result_file = project.cell_dir("r", "a") / "result.json"
    result_file.write_text(result_file.read_text().replace('"duration_s": ', '"duration_s": "x", "_": '))
    build_site(project.root / "outputs", tmp_path / "site")
    page = (tmp_path / "site" / "r" / f"{LABEL}.html").read_text()
    assert "result.json: duration_s is &#39;x&#39;: expected a number or null" in page


def test_a_stored_key_of_another_shape_is_stale_not_a_crash():
    from attnbench.notebook.run.plan import _upstream_reasons

    new = {"upstream": {"bench": "k2"}, "inputs": {"bench": "d2"}}
    assert _upstream_reasons({"upstream": "x", "inputs": []}, new) == ["new need bench"]


def test_needs_added_and_dropped_are_named_once_each():
    from attnbench.notebook.run.plan import _upstream_reasons

    old = {"upstream": {"bench": "k1", "bench_long": "k2"}, "inputs": {"bench": "d1", "bench_long": "d2"}}
    new = {"upstream": {"bench": "k1", "part_1": "k3", "part_2": "k4"}, "inputs": {"bench": "d1"}}
    assert _upstream_reasons(old, new) == ["new needs part_1, part_2", "no longer needs bench_long"]
