"""`gpus=N+`: a multi-rank cell that takes every GPU of the label's machine, at least N. The engine resolves
it per label (run.json's machine, else the label's name), so a key, a launch and the GPU check all see the
count that ran, a result stays current wherever it is judged, and one parsed notebook serves labels of
different sizes without one leaking into the other."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest
from engine_helpers import cell, notebook

from attnbench.notebook.document.model import NotebookError
from attnbench.notebook.document.parse import parse_notebook
from attnbench.notebook.run import machine as machine_mod
from attnbench.notebook.run.launchers import EnvSpec
from attnbench.notebook.run.session import Options, prepare
from attnbench.notebook.run.status import stored_states
from attnbench.notebook.site.render import build_site

WORLD = cell("id=w gpus=2+", "import os\nprint('world ' + os.environ['WORLD_SIZE'])")
READS = cell("id=r needs=w", "print('reads w')")


@pytest.fixture
def gpus(monkeypatch):
    """set(n): detect_machine as on a machine with n GPUs (0: multi-rank cells run here on gloo)."""
    real = machine_mod.detect_machine()

    def set_count(n: int) -> None:
        monkeypatch.setattr(machine_mod, "detect_machine", lambda: dataclasses.replace(real, gpu_count=n))

    return set_count


def _processes(path, label, outputs) -> int:
    session = prepare([path], Options(env=EnvSpec("python"), label=label, outputs=outputs))
    return session.graph.cell(("s", "w")).gpus


def test_the_fence_says_n_plus_and_a_bad_count_is_named(tmp_path):
    path = tmp_path / "s.md"
    path.write_text(notebook(WORLD))
    (parsed,) = parse_notebook(path).cells
    assert (parsed.gpus, parsed.gpus_or_more) == (2, True)
    for bad in ("0+", "+", "2++", "two+"):
        path.write_text(notebook(cell(f"id=w gpus={bad}", "print(1)")))
        with pytest.raises(
            NotebookError, match=re.escape(f"gpus={bad!r} must be a whole number >= 1, or N+")
        ):
            parse_notebook(path)


def test_the_count_is_the_labels_machine_at_least_n(project):
    path = project.write("s.md", notebook(WORLD, READS))
    outputs = project.root / "outputs"
    assert _processes(path, "gpu-x4", outputs) == 4  # what the label's name says
    assert _processes(path, "cpu", outputs) == 2  # gloo ranks: N
    assert _processes(path, "gpu", outputs) == 2  # one GPU: still N, so the GPU check leaves it out
    folder = outputs / "s" / "gpu-x4"
    folder.mkdir(parents=True)
    (folder / "run.json").write_text(json.dumps({"cells": {}, "machine": {"gpu_count": 3}}))
    assert _processes(path, "gpu-x4", outputs) == 3  # the machine the label's results came from


def test_a_run_takes_every_gpu_and_its_result_stays_current_where_it_is_judged(project, gpus):
    path = project.write("s.md", notebook(WORLD, READS))
    gpus(3)
    ran = project.run(path, label="gpu-x3")
    assert ran.code == 0, ran.out + ran.err
    out = (project.root / "outputs" / "s" / "gpu-x3" / "w" / "stdout.txt").read_text()
    assert out.count("world 3") == 3 and "world 2" not in out
    gpus(0)  # judged on a machine without GPUs: the label's run.json says 3, so the key is the one that ran
    states, problems = stored_states([parse_notebook(path)], project.root / "outputs", EnvSpec("python"))
    assert problems == [] and {c: s for c, (s, _) in states["s"]["gpu-x3"].items()} == {
        "w": "cached",
        "r": "cached",
    }
    small = project.run(path, label="cpu")  # and the same notebook on the CPU label runs its N ranks
    assert small.code == 0, small.out + small.err
    assert (project.root / "outputs" / "s" / "cpu" / "w" / "stdout.txt").read_text().count("world 2") == 2


def test_a_first_run_under_a_label_of_another_name_takes_what_its_run_json_will_record(project, gpus):
    """No run.json yet: the count is this machine's (what the run records), not the label's name, so the
    result is current on the next look rather than stale at once."""
    path = project.write("s.md", notebook(WORLD, READS))
    gpus(4)
    assert project.run(path, label="mybox").code == 0  # a label of the user's naming (one GPU by its name)
    assert (project.root / "outputs" / "s" / "mybox" / "w" / "stdout.txt").read_text().count("world 4") == 4
    states, problems = stored_states([parse_notebook(path)], project.root / "outputs", EnvSpec("python"))
    assert problems == [] and {c: s for c, (s, _) in states["s"]["mybox"].items()} == {
        "w": "cached",
        "r": "cached",
    }
    again = project.run(path, label="mybox")
    assert again.code == 0 and "2 hit" in again.out
    build_site(
        project.root / "outputs", project.root / "site", states
    )  # the page says what ran, not the fence
    assert "4 GPU processes" in (project.root / "site" / "s" / "mybox.html").read_text()


def test_one_parsed_notebook_judges_labels_of_different_sizes_apart(project):
    path = project.write("s.md", notebook(WORLD))
    parsed = parse_notebook(path)
    outputs = project.root / "outputs"
    big = prepare([parsed], Options(env=EnvSpec("python"), label="gpu-x8", outputs=outputs))
    small = prepare([parsed], Options(env=EnvSpec("python"), label="gpu-x2", outputs=outputs))
    assert big.graph.cell(("s", "w")).gpus == 8 and small.graph.cell(("s", "w")).gpus == 2
    assert parsed.cells[0].gpus == 2  # the parsed notebook keeps what the fence says
