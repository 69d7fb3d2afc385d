"""A cell that runs more processes than the machine has GPUs (gpus=2 on one GPU), and what reads it: the
runner does not start them and says why, without failing the run; `status` and the site say the same
of a one-GPU label whatever it stores, instead of judging a placeholder stale; a CPU machine runs them."""

from __future__ import annotations

import dataclasses
import json

import pytest
from engine_helpers import cell, notebook

from attnbench.notebook.document.parse import parse_notebook
from attnbench.notebook.run import machine as machine_mod
from attnbench.notebook.run.launchers import EnvSpec
from attnbench.notebook.run.status import stored_states
from attnbench.notebook.site.render import build_site

CELLS = (
    cell("id=a", "print('one GPU is enough')"),
    cell("id=d gpus=2", "print('placeholder', 'output')"),
    cell("id=r needs=d", "print('reads d')"),
)
SHORT = "runs 2 processes, one per GPU; this machine has 1: measured under label gpu-b-x2"


@pytest.fixture
def one_gpu(monkeypatch):
    """detect_machine as on a one-GPU machine (the runner asks the machine, not the label)."""
    real = machine_mod.detect_machine()
    fake = dataclasses.replace(real, gpu="Test GPU", gpu_count=1)
    monkeypatch.setattr(machine_mod, "detect_machine", lambda: fake)


def test_the_runner_leaves_them_out_saying_why_and_the_run_succeeds(project, one_gpu):
    path = project.write("s.md", notebook(*CELLS))
    ran = project.run(path, label="gpu-b")
    assert ran.code == 0, ran.out + ran.err
    cells = json.loads((project.root / "outputs" / "s" / "gpu-b" / "run.json").read_text())["cells"]
    assert cells["a"]["state"] == "ran"
    assert cells["d"] == {"state": "needs more GPUs", "reason": SHORT}
    assert cells["r"] == {
        "state": "needs more GPUs",
        "reason": "reads d, which needs more GPUs than this machine has",
    }
    assert (
        not project.cell_dir("s", "d", "gpu-b").exists() and not project.cell_dir("s", "r", "gpu-b").exists()
    )
    assert "needs more GPUs" in ran.out
    again = project.run(path, label="gpu-b")  # nothing to do: a run of hits leaves run.json as it was
    assert again.code == 0 and "1 hit" in again.out


def test_status_and_the_site_say_so_of_a_one_gpu_label_whatever_it_stores(project):
    """On this (CPU) machine every cell runs, so the label gpu-b holds what an older engine left: a
    placeholder result of d and r. Judged as a one-GPU label, neither is stale nor shown: they need 2."""
    path = project.write("s.md", notebook(*CELLS))
    assert project.run(path, label="gpu-b").code == 0 and project.cell_dir("s", "d", "gpu-b").is_dir()
    path.write_text(notebook(CELLS[0], cell("id=d gpus=2", "print('changed')"), CELLS[2]))

    said = project.cli("status", path, "--env", "python", "--label", "gpu-b").out
    assert f"d                        needs more GPUs: {SHORT}" in said
    assert (
        "r                        needs more GPUs: reads d, which needs more GPUs than this machine has"
        in said
    )
    assert "stale" not in said

    outputs = project.root / "outputs"
    states, problems = stored_states([parse_notebook(path)], outputs, EnvSpec("python"))
    assert problems == [] and states["s"]["gpu-b"]["d"] == ("needs more GPUs", SHORT)
    site = project.root / "site"
    build_site(outputs, site, states)
    page = (site / "s" / "gpu-b.html").read_text()
    assert f"<strong>needs more GPUs</strong>: {SHORT}" in page
    assert "placeholder output" not in page  # what the stored placeholder printed is not shown
    assert "measured by code that has changed since" not in page

    said = project.cli("status", path, "--env", "python", "--label", "gpu-b-x2").out
    assert "needs more GPUs" not in said  # a two-GPU label runs them
