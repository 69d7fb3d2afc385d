"""`attnbench status --batches SECONDS`: the commands that bring a label current, packed by each cell's
last measured time under a wall-clock limit."""

from __future__ import annotations

import json

from engine_helpers import cell, notebook


def _set_duration(project, cell_id: str, seconds: float, label: str = "t") -> None:
    path = project.cell_dir("s", cell_id, label) / "result.json"
    result = json.loads(path.read_text())
    result["duration_s"] = seconds
    path.write_text(json.dumps(result))


def _commands(out: str) -> list[tuple[str, str]]:
    lines = out.splitlines()
    return [(line.split("--label t ", 1)[1], lines[i + 1].strip()) for i, line in enumerate(lines)
            if line.strip().startswith("attnbench run ")]  # fmt: skip


def test_stale_cells_are_packed_under_the_limit_by_their_last_times(project):
    """a (300 s) and b (200 s) fit one 600-s command; c (400 s) does not fit beside them; d never ran
    here: its time on another GPU label (50 s) is used, never the CPU label's; e's only bound is its
    timeout. After a code change every cell is stale; with nothing stale there is nothing to run."""
    cells = [
        cell("id=a", "print('a')"),
        cell("id=b needs=a", "print('b')"),
        cell("id=c needs=b", "print('c')"),
    ]
    path = project.write("s.md", notebook(*cells))
    assert project.run(path).code == 0
    for cell_id, seconds in (("a", 300), ("b", 200), ("c", 400)):
        _set_duration(project, cell_id, seconds)
    said = project.cli("status", path, "--env", "python", "--label", "t", "--batches", "600").out
    assert "nothing to run for label t: every cell is current" in said

    d = cell("id=d needs=c", "print('d')")
    e = cell("id=e needs=d timeout=90", "print('e')")
    path.write_text(notebook(*cells, d))
    assert project.run(path, label="gpu-b").code == 0 and project.run(path, label="cpu").code == 0
    _set_duration(project, "d", 50, "gpu-b")
    _set_duration(project, "d", 1, "cpu")
    changed = [cell("id=a", "print('a, changed')"), *cells[1:], d, e]
    path.write_text(notebook(*changed))
    said = project.cli("status", path, "--env", "python", "--label", "t", "--batches", "600").out
    assert (
        "5 cells, about 17.3 min by their last runs (1 of them by code that has changed since: a new "
        "protocol can make a cell slower), in 2 command(s) of at most 10.0 min"
    ) in said  # a; b, c: upstream
    assert _commands(said) == [
        ("--cell a --cell b", "# ~8.3 min: a 5.0 min, b 3.3 min"),
        ("--cell c --cell d --cell e", "# ~9.0 min: c 6.7 min, d 50 s on gpu-b, e ≤ 1.5 min"),
    ]


def test_a_cell_stopped_at_its_last_try_gets_a_command_of_its_own(project):
    """An interrupted cell's time is a lower bound: it is not packed with others; a cell whose measured
    time alone passes the limit is marked to be split."""
    slow = cell("id=slow", "import os, signal\nos.kill(os.getpid(), signal.SIGINT)")
    path = project.write("s.md", notebook(cell("id=a", "print('a')"), slow, cell("id=b", "print('b')")))
    project.run(path)
    _set_duration(project, "a", 900)
    result = json.loads((project.cell_dir("s", "slow") / "result.json").read_text())
    assert result["status"] in ("interrupted", "failed"), result
    result["status"], result["duration_s"] = "interrupted", 120
    (project.cell_dir("s", "slow") / "result.json").write_text(json.dumps(result))
    _set_duration(project, "b", 10)
    path.write_text(notebook(cell("id=a", "print('a!')"), slow, cell("id=b", "print('b!')")))
    said = project.cli("status", path, "--env", "python", "--label", "t", "--batches", "600").out
    assert _commands(said) == [
        (
            "--cell a",
            "# over the limit alone: split the cell, or run it where the limit is longer; ~15.0 min: a 15.0 min",
        ),
        (
            "--cell slow",
            "# stopped at its last try, so longer than shown: a command of its own; ~2.0 min: slow ≥ 2.0 min",
        ),
        ("--cell b", "# ~10 s: b 10 s"),
    ]


def test_a_quick_failure_after_a_good_run_does_not_shrink_the_estimate(project):
    """b's good run took 500 s; a later try failed at once (0.03 s): b is still 500 s, not 0 s."""
    path = project.write("s.md", notebook(cell("id=a", "print('a')"), cell("id=b", "print('b')")))
    assert project.run(path).code == 0
    _set_duration(project, "a", 300)
    _set_duration(project, "b", 500)
    path.write_text(notebook(cell("id=a", "print('a')"), cell("id=b", "raise SystemExit('broken')")))
    assert project.run(path).code != 0
    failure = project.cell_dir("s", "b") / "last-failure" / "result.json"
    assert json.loads(failure.read_text())["status"] == "failed"
    said = project.cli("status", path, "--env", "python", "--label", "t", "--batches", "600").out
    assert _commands(said) == [("--cell b", "# ~8.3 min: b 8.3 min")]


def test_the_commands_carry_the_params_of_the_label_and_a_bad_limit_is_refused(project):
    path = project.write("p.md", notebook(cell("id=a", "print(params['n'])"), params={"n": 1}))
    said = project.cli("status", path, "--env", "python", "--label", "t+n-2", "-p", "n=2", "--batches", "600")
    assert "attnbench run " in said.out and "--label t+n-2 -p n=2 --cell a" in said.out
    refused = project.cli("status", path, "--env", "python", "--label", "t", "--batches", "0")
    assert (
        refused.code == 2 and "--batches 0: a command's time limit must be more than 0 seconds" in refused.err
    )


def test_a_smoke_label_never_estimates_a_default_one(project):
    path = project.write("p.md", notebook(cell("id=a", "print(params['n'])"), params={"n": 1}))
    assert project.run(path, "-p", "n=2", label="gpu+n-2").code == 0
    assert project.run(path, label="gpu-b").code == 0
    for label, seconds in (("gpu+n-2", 5), ("gpu-b", 240)):
        result = project.root / "outputs" / "p" / label / "a" / "result.json"
        data = json.loads(result.read_text())
        data["duration_s"] = seconds
        result.write_text(json.dumps(data))
    said = project.cli("status", path, "--env", "python", "--label", "t", "--batches", "600").out
    assert _commands(said) == [("--cell a", "# ~4.0 min: a 4.0 min on gpu-b")]


def test_cells_of_several_notebooks_share_a_command(project):
    """Two notebooks' stale cells fit one 600-s command: it names both notebooks and each cell as
    nb.md:id (fewer commands: each start of a lent machine costs time)."""
    one = project.write("s.md", notebook(cell("id=a", "print('a')")))
    two = project.write("u.md", notebook(cell("id=x", "print('x')")))
    assert project.run(one, two).code == 0
    path_a = project.cell_dir("s", "a") / "result.json"
    path_x = project.root / "outputs" / "u" / "t" / "x" / "result.json"
    for path, seconds in ((path_a, 120), (path_x, 180)):
        data = json.loads(path.read_text())
        data["duration_s"] = seconds
        path.write_text(json.dumps(data))
    one.write_text(notebook(cell("id=a", "print('a!')")))
    two.write_text(notebook(cell("id=x", "print('x!')")))
    said = project.cli("status", one, two, "--env", "python", "--label", "t", "--batches", "600").out
    command = next(line.strip() for line in said.splitlines() if line.strip().startswith("attnbench run"))
    assert (
        command.endswith("--label t --cell s.md:a --cell u.md:x")
        and str(one) in command
        and str(two) in command
    )
    assert "# ~5.0 min: s:a 2.0 min, u:x 3.0 min" in said
    ran = project.cli(*command.split()[1:], "--env", "python", "--plain")
    assert ran.code == 0, ran.err
    assert "nothing to run for label t" in project.cli("status", one, two, "--env", "python", "--label", "t",
                                                        "--batches", "600").out  # fmt: skip


def test_a_cell_needing_more_gpus_than_the_label_has_is_left_out_named(project):
    """On a one-GPU label (`gpu-b`; `-x2` would be two) a gpus=2 cell and what reads it are left out,
    named; a CPU label runs them (gloo)."""
    from attnbench.notebook.run.machine import label_gpus, label_overrides

    assert (label_gpus("nvidia-h200"), label_gpus("nvidia-h200-x2"), label_gpus("cpu"), label_gpus("cpu+n-2")) == (
        1, 2, 0, 0)  # fmt: skip
    assert (label_overrides("cpu+n-2"), label_overrides("nvidia-h200-x2")) == ("n-2", "")
    path = project.write("s.md", notebook(cell("id=a", "print('a')"), cell("id=d gpus=2", "print('d')"),
                                          cell("id=r needs=d", "print('r')")))  # fmt: skip
    said = project.cli("status", path, "--env", "python", "--label", "gpu-b", "--batches", "600").out
    assert _commands(said.replace("--label gpu-b ", "--label t ")) == [
        ("--cell a", "# ~0 s: a (time unknown)")
    ]
    assert "left out: 2 cells need more GPUs than label gpu-b has (1), or read one that does: s: d, r" in said


def test_a_command_carries_only_the_params_its_notebooks_declare(project):
    one = project.write("p.md", notebook(cell("id=a", "print(params['n'])"), params={"n": 1}))
    two = project.write("q.md", notebook(cell("id=b", "print('b')")))
    said = project.cli(
        "status", one, two, "--env", "python", "--label", "t", "-p", "n=2", "--batches", "600"
    ).out
    command = next(line.strip() for line in said.splitlines() if line.strip().startswith("attnbench run"))
    assert "-p n=2" in command  # p.md declares n; the command holds both notebooks' cells
    said = project.cli("status", two, "--env", "python", "--label", "t", "--batches", "600").out
    assert "-p" not in next(line for line in said.splitlines() if line.strip().startswith("attnbench run"))


def test_an_upstream_cell_of_a_notebook_not_named_is_planned_and_left_out_where_it_must_be(project):
    """s.md needs u.md:x; the run of s.md runs x too, so the plan counts x, and on a one-GPU label a
    gpus=2 x is left out with the cell that reads it."""
    project.write("u.md", notebook(cell("id=x", "print('x')")))
    path = project.write("s.md", notebook(cell("id=y needs=u.md:x", "print('y')")))
    said = project.cli("status", path, "--env", "python", "--label", "t", "--batches", "600").out
    command = next(line.strip() for line in said.splitlines() if line.strip().startswith("attnbench run"))
    assert command.endswith("--cell u.md:x --cell s.md:y") and "2 cells" in said
    project.write("u.md", notebook(cell("id=x gpus=2", "print('x')")))
    said = project.cli("status", path, "--env", "python", "--label", "gpu-b", "--batches", "600").out
    assert "nothing to run for label gpu-b" in said and "left out: 2 cells" in said and "s: y; u: x" in said


def test_an_override_reaches_the_notebook_a_command_reads_from(project):
    """q.md:b reads p.md:a, and only p.md declares n: a command for b alone would run a with the default
    n into this label, so it names p.md too and carries -p n=2."""
    from attnbench.notebook.run.batches import Batch, Estimate, Plan, plan_lines

    plan = Plan([Batch(cells=[Estimate("b", 10.0, "last run", notebook="q")], reads={"p"})], gpus=1)
    lines = plan_lines(plan, {"p": "p.md", "q": "q.md"}, "t", 600, {"n": 2}, {"p": {"n"}, "q": set()})
    assert lines[1].strip() == "attnbench run q.md p.md --label t -p n=2 --cell q.md:b"
    one = project.write("p.md", notebook(cell("id=a", "print(params['n'])"), params={"n": 1}))
    two = project.write("q.md", notebook(cell("id=b needs=p.md:a", "print('b')")))
    said = project.cli("status", two, "--env", "python", "--label", "t", "-p", "n=2", "--batches", "600")
    assert said.code == 2  # a key no named notebook declares is refused, as a run refuses it
    said = project.cli(
        "status", one, two, "--env", "python", "--label", "t", "-p", "n=2", "--batches", "600"
    ).out
    commands = [line.strip() for line in said.splitlines() if line.strip().startswith("attnbench run")]
    assert all("-p n=2" in c for c in commands) and commands


def test_the_gpus_a_label_was_measured_on_decide_what_its_plan_leaves_out(project):
    """The plan counts the GPUs of the machine the label's results came from (run.json), as status and
    the site do: `gpu-b`, named like a one-GPU label but measured on two, keeps its gpus=2 cell; told
    one GPU, the same cell and what reads it are left out."""
    path = project.write("s.md", notebook(cell("id=a", "print('a')"), cell("id=d gpus=2", "print('d')"),
                                          cell("id=r needs=d", "print('r')")))  # fmt: skip
    assert project.run(path, "--cell", "a", label="gpu-b").code == 0
    run_json = project.root / "outputs" / "s" / "gpu-b" / "run.json"
    for count, left_out in ((2, False), (1, True)):
        run = json.loads(run_json.read_text())
        run["machine"].update(gpu="NVIDIA H200", gpu_count=count)
        run_json.write_text(json.dumps(run))
        said = project.cli("status", path, "--env", "python", "--label", "gpu-b", "--batches", "600").out
        assert ("left out: 2 cells need more GPUs than label gpu-b has (1)" in said) is left_out, said
        assert ("--cell d" in said) is not left_out, said


def test_a_time_of_older_code_gives_way_to_a_longer_newer_run_elsewhere(project):
    """The label's own time was measured by code since changed (a new protocol can make a cell slower):
    where another GPU label's run finished after it and took longer, that is the estimate; a shorter one,
    an older one, or any other label's while the own code is unchanged, is not."""
    path = project.write("s.md", notebook(cell("id=a", "print('a')"), cell("id=b needs=a", "print('b')")))
    for label in ("t", "gpu-b"):
        assert project.run(path, label=label).code == 0

    def set_run(label, cell_id, seconds, finished):
        result_path = project.cell_dir("s", cell_id, label) / "result.json"
        result = json.loads(result_path.read_text())
        result.update(duration_s=seconds, finished=finished)
        result_path.write_text(json.dumps(result))

    def plan() -> list[tuple[str, str]]:
        return _commands(
            project.cli("status", path, "--env", "python", "--label", "t", "--batches", "600").out
        )

    set_run("t", "a", 100, "2026-11-01T00:00:00+00:00")
    set_run("gpu-b", "a", 300, "2026-11-02T00:00:00+00:00")
    set_run("t", "b", 60, "2026-11-01T00:00:00+00:00")
    set_run("gpu-b", "b", 240, "2026-11-02T00:00:00+00:00")
    path.write_text(notebook(cell("id=a", "print('a, changed')"), cell("id=b needs=a", "print('b')")))
    # a's code changed: gpu-b's newer, longer time; b is stale only through a: its own time stands
    assert plan() == [("--cell a --cell b", "# ~6.0 min: a 5.0 min on gpu-b, b 1.0 min")]
    set_run("gpu-b", "a", 300, "2026-10-01T00:00:00+00:00")  # finished before the label's own: not newer
    assert plan() == [("--cell a --cell b", "# ~2.7 min: a 1.7 min, b 1.0 min")]
    set_run("gpu-b", "a", 50, "2026-11-02T00:00:00+00:00")  # newer but shorter: the own time stands
    assert plan() == [("--cell a --cell b", "# ~2.7 min: a 1.7 min, b 1.0 min")]
