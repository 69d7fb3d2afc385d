"""A cell that runs more processes than the machine has GPUs (gpus=2 on one GPU), and what reads it: the
runner does not start them and says why, without failing the run (unless such a cell was named); a
stored result it can take is taken. `status` and the site judge a label by the GPUs of the machine its
results came from (run.json): a placeholder an older engine stored is neither judged stale nor shown."""

from __future__ import annotations

import dataclasses
import html
import json
import re

import pytest
from engine_helpers import cell, notebook

from attnbench.notebook.document.parse import parse_notebook
from attnbench.notebook.run import machine as machine_mod
from attnbench.notebook.run.launchers import EnvSpec
from attnbench.notebook.run.status import stored_states
from attnbench.notebook.site.render import build_site

CELLS = (
    cell("id=a", "print('one GPU is enough')"),
    # one string per print: two ranks share stdout, and the parts of print('a', 'b') interleave
    cell("id=d gpus=2", "print('placeholder' + ' output')"),
    cell("id=r needs=d", "print('reads d')"),
)
SHORT = "runs 2 processes, one per GPU; label gpu-b's machine has 1: measured under label gpu-b-x2"
READS = "reads d, which needs more GPUs than this machine has"


@pytest.fixture
def gpus(monkeypatch):
    """set(n): detect_machine as on a machine with n GPUs, the same machine otherwise (fingerprint and
    all); the runner asks the machine, not the label. With 0 every cell runs here (multi-rank on gloo)."""
    real = machine_mod.detect_machine()

    def set_count(n: int) -> None:
        monkeypatch.setattr(machine_mod, "detect_machine", lambda: dataclasses.replace(real, gpu_count=n))

    return set_count


def run_json(project, label: str) -> dict:
    return json.loads((project.root / "outputs" / "s" / label / "run.json").read_text())


def page(project, path) -> dict:
    states, problems = stored_states([parse_notebook(path)], project.root / "outputs", EnvSpec("python"))
    assert problems == []
    build_site(project.root / "outputs", project.root / "site", states)
    return states


def test_the_runner_leaves_them_out_saying_why_and_the_run_succeeds(project, gpus):
    gpus(1)
    path = project.write("s.md", notebook(*CELLS))
    ran = project.run(path, label="gpu-b")
    assert ran.code == 0, ran.out + ran.err
    cells = run_json(project, "gpu-b")["cells"]
    assert cells["a"]["state"] == "ran"
    assert cells["d"] == {"state": "needs more GPUs", "reason": SHORT}
    assert cells["r"] == {"state": "needs more GPUs", "reason": READS}
    assert (
        not project.cell_dir("s", "d", "gpu-b").exists() and not project.cell_dir("s", "r", "gpu-b").exists()
    )
    assert "needs more GPUs" in ran.out
    again = project.run(path, label="gpu-b")
    assert again.code == 0 and "1 hit" in again.out
    named = project.run(path, "--cell", "d", label="gpu-b")  # asked for by name and not done: exit 1
    assert named.code == 1 and "needs more GPUs" in named.out
    # a label whose name does not say this machine's GPUs: no other label can be inferred from it
    custom = project.run(path, "--cell", "d", label="cpu")
    assert custom.code == 1 and "label cpu's machine has 1: run it on a machine with 2 GPUs" in custom.err
    plus = project.run(path, "--cell", "d", label="gpu-b+n-2")
    assert "measured under label gpu-b-x2+n-2" in plus.err


def test_a_smaller_machine_takes_what_a_bigger_one_stored_and_leaves_its_label_alone(project, gpus):
    """Under the two-GPU label, a one-GPU machine takes d and r from the store (reading a result needs no
    GPUs) and leaves run.json saying the label's results came from the machine that measured them. Once
    d's code changes it cannot measure d again: d stays judged stale by that machine, and shown."""
    path = project.write("s.md", notebook(*CELLS))
    gpus(2)
    assert project.run(path, label="gpu-b-x2").code == 0  # measured here: gloo stands in for two GPUs
    before = run_json(project, "gpu-b-x2")
    gpus(1)
    hits = project.run(path, label="gpu-b-x2")
    assert hits.code == 0 and "3 hit" in hits.out
    after = run_json(project, "gpu-b-x2")
    assert after["machine"] == before["machine"] and after["machine"]["gpu_count"] == 2
    assert {c: e["state"] for c, e in after["cells"].items()} == {"a": "ran", "d": "ran", "r": "ran"}

    path.write_text(notebook(CELLS[0], cell("id=d gpus=2", "print('changed')"), CELLS[2]))
    left = project.run(path, label="gpu-b-x2")
    assert left.code == 0 and run_json(project, "gpu-b-x2")["cells"]["d"]["state"] == "needs more GPUs"
    states = page(project, path)
    assert states["s"]["gpu-b-x2"]["d"][0] == "stale"  # judged by the two-GPU machine it came from
    shown = (project.root / "site" / "s" / "gpu-b-x2.html").read_text()
    assert "placeholder output" in shown  # the earlier measurement stays on the page


def test_status_and_the_site_say_so_of_a_one_gpu_label_whatever_it_stores(project, gpus):
    """An older engine ran every cell on one GPU: d stored a placeholder and r a headline number from it.
    Judged by that one-GPU machine (run.json), neither is stale nor shown, and neither the placeholder's
    output nor r's number reaches the page; a two-GPU label's page is left as it is."""
    writes_number = """
        from attnbench.notebook.site import headline as h
        h.write_headline(h.Headline(question='q?', answer=['a'], numbers=[h.Number('k', 'placeholder ' + 'number', 1.0, 'x')]), '.')
    """
    cells = (*CELLS[:2], cell("id=r needs=d outputs=headline.json", writes_number))
    path = project.write("s.md", notebook(*cells))
    gpus(0)  # the older engine started every cell: here, on the CPU...
    assert project.run(path, label="gpu-b").code == 0 and project.cell_dir("s", "r", "gpu-b").is_dir()
    record = run_json(project, "gpu-b")  # ...and recorded the one-GPU machine it ran on
    record["machine"]["gpu_count"] = 1
    (project.root / "outputs" / "s" / "gpu-b" / "run.json").write_text(json.dumps(record))
    gpus(1)
    path.write_text(notebook(cell("id=a", "print('a again')"), *cells[1:]))
    assert project.run(path, "--cell", "a", label="gpu-b").code == 0  # run.json: a one-GPU machine now
    path.write_text(
        notebook(cell("id=a", "print('a again')"), cell("id=d gpus=2", "print('changed')"), cells[2])
    )

    said = project.cli("status", path, "--env", "python", "--label", "gpu-b").out
    assert f"d                        needs more GPUs: {SHORT}" in said
    assert (
        "r                        needs more GPUs: reads d, which needs more GPUs than the label's machine has"
        in said
    )
    assert "stale" not in said
    states = page(project, path)
    assert states["s"]["gpu-b"]["d"] == ("needs more GPUs", SHORT)
    shown = html.unescape((project.root / "site" / "s" / "gpu-b.html").read_text())
    assert f"<strong>needs more GPUs</strong>: {SHORT}" in shown

    for said in ("placeholder output", "placeholder number"):
        assert said not in shown, [
            shown[max(0, m.start() - 300) : m.end() + 50] for m in re.finditer(said, shown)
        ][:2]
    assert "measured by code that has changed since" not in shown


def test_a_smaller_machine_does_not_present_a_bigger_ones_label_in_a_plain_run(project, gpus):
    """On one GPU, only r's code changed under the two-GPU label: r would run on d's stored result and put
    this machine in run.json, after which d (a real two-GPU result) would read as 'needs more GPUs'. The
    run stops before any cell starts; --reuse-elsewhere --cell r is the way to present it here."""
    path = project.write("s.md", notebook(*CELLS))
    gpus(2)
    assert project.run(path, label="gpu-b-x2").code == 0
    before = run_json(project, "gpu-b-x2")
    gpus(1)
    path.write_text(notebook(*CELLS[:2], cell("id=r needs=d", "print('reads d, shown anew')")))
    refused = project.run(path, label="gpu-b-x2")
    assert refused.code == 2 and "running r here would replace them" in refused.err, refused.err
    assert run_json(project, "gpu-b-x2") == before
    shown = project.run(path, "--cell", "r", "--reuse-elsewhere", label="gpu-b-x2")
    assert shown.code == 0, shown.out + shown.err
    assert run_json(project, "gpu-b-x2")["machine"] == before["machine"]


@pytest.mark.parametrize(("count", "said"), [('"2"', "'2'"), ("true", "true"), ("-1", "-1")])
def test_a_run_json_with_a_bad_gpu_count_is_named(project, count, said):
    path = project.write("s.md", notebook(CELLS[0]))
    assert project.run(path, label="gpu-b").code == 0
    record = project.root / "outputs" / "s" / "gpu-b" / "run.json"
    text = re.sub(r'"gpu_count": \d+', f'"gpu_count": {count}', record.read_text())
    record.write_text(text)
    for outcome in (
        project.run(path, label="gpu-b"),
        project.cli("status", path, "--env", "python", "--label", "gpu-b"),
    ):
        assert outcome.code == 2, outcome.out + outcome.err
        assert f"run.json: machine.gpu_count is {said}: expected a whole number of GPUs" in outcome.err
