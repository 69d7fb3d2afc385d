"""The engine against a fault injector: dependents of a re-run cell, two runs at once, bad --outputs
and --label, killed cells, and a cell run alone."""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from engine_helpers import LABEL, cell, notebook

from attnbench.notebook.run.execute import failure_reason

pytestmark = pytest.mark.timeout(120)

# bench writes what it measured (a fresh token unless `same` is present); plot and summary read it.
BENCH = """
import os, pathlib, uuid
root = pathlib.Path(os.environ["ATTNBENCH_ROOT"])
token = "fixed" if (root / "same").exists() else uuid.uuid4().hex
pathlib.Path("results.txt").write_text(token)
"""
READER = """
import attnbench, os, pathlib
with open(pathlib.Path(os.environ["ATTNBENCH_ROOT"]) / "runs.log", "a") as log:
    log.write("{me}\\n")
pathlib.Path("seen.txt").write_text((attnbench.inputs("bench") / "results.txt").read_text())
"""


def _bench_notebook(project) -> Path:
    return project.write(
        "x.md",
        notebook(
            cell("id=bench", BENCH),
            cell("id=plot needs=bench", READER.format(me="plot")),
            cell("id=summary needs=bench", READER.format(me="summary")),
        ),
    )


def _read(project, cell_id: str, name: str) -> str:
    return (project.cell_dir("x", cell_id) / "artifacts" / name).read_text()


def _status_rows(project, path) -> dict[str, str]:
    out = project.status(path)
    assert out.code == 0, out.err
    return {line.split()[0]: line.split(None, 1)[1] for line in out.out.splitlines()[1:]}


def test_dependents_are_stale_once_their_upstream_wrote_something_else(project):
    path = _bench_notebook(project)
    assert project.run(path).code == 0
    out = project.run(path, "--cell", "bench")  # bench runs again and measures something else
    assert out.code == 0, out.err
    assert _read(project, "bench", "results.txt") != _read(project, "plot", "seen.txt")

    why = "stale: upstream bench wrote different artifacts (it ran again)"
    assert _status_rows(project, path) == {"bench": "cached", "plot": why, "summary": why}
    cells = project.run_json("x")["cells"]
    assert cells["plot"]["stale"] == "upstream bench wrote different artifacts (it ran again)"  # for the site
    assert "stale" not in cells["bench"]

    log = project.root / "runs.log"
    log.unlink()
    out = project.run(path)
    assert out.code == 0, out.err
    assert sorted(log.read_text().split()) == ["plot", "summary"]  # not hits: both ran again
    assert _read(project, "plot", "seen.txt") == _read(project, "bench", "results.txt")
    assert all(row == "cached" for row in _status_rows(project, path).values())
    assert "stale" not in project.run_json("x")["cells"]["plot"]


def test_an_upstream_that_writes_the_same_again_leaves_its_dependents_cached(project):
    (project.root / "same").write_text("1")
    path = _bench_notebook(project)
    assert project.run(path).code == 0
    assert project.run(path, "--cell", "bench").code == 0
    (project.root / "runs.log").unlink()
    out = project.run(path)
    assert out.code == 0 and "3 hit" in out.out, out.out
    assert not (project.root / "runs.log").exists()


def test_a_result_stored_before_inputs_were_keyed_stays_current_until_its_upstream_runs_again(project):
    path = _bench_notebook(project)
    assert project.run(path).code == 0
    # As an older engine stored it: no `inputs` part, the key hashing the other parts only.
    from attnbench.notebook.run.plan import _sha

    result_file = project.cell_dir("x", "plot") / "result.json"
    old = json.loads(result_file.read_text())
    del old["key_parts"]["inputs"]
    old["key"] = _sha(old["key_parts"])
    result_file.write_text(json.dumps(old))
    assert _status_rows(project, path)["plot"] == "cached"
    time.sleep(1.1)  # stored times have whole seconds
    assert project.run(path, "--cell", "bench").code == 0
    assert _status_rows(project, path)["plot"] == "stale: upstream bench ran again after this result"


# --- two runs of one notebook and label --------------------------------------------------------

SLOW_A = """
import os, pathlib, time, uuid
root = pathlib.Path(os.environ["ATTNBENCH_ROOT"])
pathlib.Path("a.txt").write_text(uuid.uuid4().hex)
with open(root / "a.starts", "a") as f:
    f.write("a\\n")
while not (root / "go").exists():
    time.sleep(0.05)
"""
B_COPIES_A = "import attnbench, pathlib\npathlib.Path('b.txt').write_text((attnbench.inputs('a') / 'a.txt').read_text())"


def _engine(project, path: Path, *args: str) -> subprocess.Popen:
    cmd = [
        sys.executable,
        "-m",
        "attnbench",
        "run",
        str(path),
        "--env",
        "python",
        "--label",
        LABEL,
        "--plain",
    ]
    return subprocess.Popen(
        [*cmd, *args], cwd=project.root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _wait_for(path: Path, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def _first_line(proc: subprocess.Popen, seconds: float = 30) -> str:
    """The first line `proc` writes to stderr, waiting at most `seconds`."""
    ready, _, _ = select.select([proc.stderr], [], [], seconds)
    assert ready, f"nothing on stderr within {seconds} s"
    return proc.stderr.readline()


def test_a_second_run_of_the_same_notebook_and_label_waits_naming_the_first(project):
    path = project.write("w.md", notebook(cell("id=a", SLOW_A), cell("id=b needs=a", B_COPIES_A)))
    first = _engine(project, path)
    try:
        _wait_for(project.root / "a.starts")
        second = _engine(project, path)
        try:
            waiting = _first_line(second)  # said before it does anything else
            assert second.poll() is None, "the second run did not wait"
            (project.root / "go").write_text("1")
            _, err1 = first.communicate(timeout=60)
            out2, err2 = second.communicate(timeout=60)
        finally:
            second.kill()
    finally:
        first.kill()
    assert (first.returncode, second.returncode) == (0, 0), err1 + err2
    assert f"is in use by another run (pid {first.pid}, started " in waiting, waiting
    assert "2 hit" in out2  # it ran after the first and found its results current
    assert (project.root / "a.starts").read_text() == "a\n"
    b = (project.cell_dir("w", "b") / "artifacts" / "b.txt").read_text()
    assert b == (project.cell_dir("w", "a") / "artifacts" / "a.txt").read_text()


def test_a_second_run_gives_up_after_the_lock_timeout(project):
    path = project.write("w.md", notebook(cell("id=a", SLOW_A)))
    first = _engine(project, path)
    try:
        _wait_for(project.root / "a.starts")
        started = time.monotonic()
        out = project.run(path, "--lock-timeout", "1")
        assert time.monotonic() - started < 10
        (project.root / "go").write_text("1")
        first.communicate(timeout=60)
    finally:
        first.kill()
    assert out.code == 2
    assert f"in use by another run (pid {first.pid}" in out.err and "gave up after waiting 1 s" in out.err
    assert (project.root / "a.starts").read_text() == "a\n"


def test_clean_keeps_what_a_live_run_is_writing(project):
    path = project.write("w.md", notebook(cell("id=a", SLOW_A)))
    first = _engine(project, path)
    try:
        _wait_for(project.root / "a.starts")
        staging = list((project.root / "outputs" / "w" / LABEL).glob(".tmp-a-*"))
        out = project.cli("clean", path)
        assert staging and all(p.exists() for p in staging)  # the running cell's folder stays
        (project.root / "go").write_text("1")
        assert first.wait(timeout=60) == 0
    finally:
        first.kill()
    assert out.code == 1
    assert f"kept outputs/w/{LABEL}: in use by another run (pid {first.pid}" in out.err
    assert (project.cell_dir("w", "a") / "result.json").is_file()


def test_a_lock_file_left_by_a_dead_run_is_taken_over(project):
    path = project.write("d.md", notebook(cell("id=a", "print('a')")))
    folder = project.root / "outputs" / "d" / LABEL
    folder.mkdir(parents=True)
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=False
    )
    (folder / ".run.lock").write_text(json.dumps({"pid": int(dead.stdout), "started": "x", "command": "y"}))
    out = project.run(path, "--lock-timeout", "0")
    assert out.code == 0, out.err
    assert not (folder / ".run.lock").exists()


# --- bad --outputs and --label: exit 2 before anything runs or is written ----------------------------

LOGGED = "import os, pathlib\npathlib.Path(os.environ['ATTNBENCH_ROOT'], 'ran').write_text('1')"


def test_outputs_that_is_a_file_exits_2_before_any_cell(project):
    path = project.write("o.md", notebook(cell("id=a", LOGGED)))
    (project.root / "results").write_text("not a folder")
    out = project.run(path, "--outputs", project.root / "results")
    assert out.code == 2
    assert f"--outputs {project.root / 'results'}: is a file, not a folder" in out.err
    assert "interrupted" not in out.out + out.err and "Traceback" not in out.err
    assert not (project.root / "ran").exists() and not (project.root / "cells").exists()


def _without_root_powers() -> list[str]:
    """A prefix that runs a command without the capabilities that let root write a read-only folder."""
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv: a read-only folder cannot be made read-only")
    return ["setpriv", "--bounding-set=-dac_override,-dac_read_search,-fowner", "--"]


def test_read_only_outputs_exits_2_before_any_cell(project):
    path = project.write("o.md", notebook(cell("id=a", LOGGED)))
    outputs = project.root / "outputs"
    outputs.mkdir()
    outputs.chmod(0o555)
    try:
        cmd = [
            sys.executable,
            "-m",
            "attnbench",
            "run",
            str(path),
            "--env",
            "python",
            "--label",
            LABEL,
            "--plain",
        ]
        done = subprocess.run(
            [*_without_root_powers(), *cmd],
            cwd=project.root,
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
    finally:
        outputs.chmod(0o755)
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"cannot write the outputs folder {outputs}" in done.stderr and "Permission denied" in done.stderr
    assert "interrupted" not in done.stdout + done.stderr and "Traceback" not in done.stderr
    assert not (project.root / "ran").exists() and list(outputs.iterdir()) == []


def test_a_300_character_label_exits_2_and_writes_nothing(project):
    path = project.write("l.md", notebook(cell("id=a", LOGGED)))
    out = project.run(path, label="x" * 300)
    assert out.code == 2
    assert "(300 characters): a label is at most 100 printable characters" in out.err
    assert "Traceback" not in out.err
    assert sorted(p.name for p in project.root.iterdir()) == ["notebooks"]


# --- how a killed cell is reported -------------------------------------------------------------------


def test_a_cell_killed_by_sigkill_says_so(project):
    path = project.write(
        "s.md", notebook(cell("id=oom", "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)"))
    )
    assert project.run(path).code == 1
    result = project.result("s", "oom")
    assert (result["status"], result["returncode"]) == ("failed", -9)
    assert result["reason"] == "killed (SIGKILL — out of memory?)"


def test_signals_are_named_in_the_failure_reason(tmp_path):
    stderr = tmp_path / "stderr.txt"
    stderr.write_text("")
    assert failure_reason(137, stderr) == "killed (SIGKILL — out of memory?) (exit code 137)"  # via a shell
    assert failure_reason(-11, stderr) == "killed (SIGSEGV — segmentation fault)"
    assert failure_reason(-6, stderr) == "killed (SIGABRT — aborted)"
    assert failure_reason(3, stderr) == "exit code 3"
    stderr.write_text("Traceback...\nMemoryError\n")
    assert failure_reason(-9, stderr) == "killed (SIGKILL — out of memory?): MemoryError"


# --- a cell run alone ------------------------------------------------------------------------------


def test_a_cell_run_alone_writes_into_the_projects_scratch_folder_not_the_current_one(project, tmp_path):
    path = project.write("alone.md", notebook(cell("id=make", "open('made.txt', 'w').write('1')")))
    (project.root / "pyproject.toml").write_text("")
    assert project.run(path).code == 0
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("ATTNBENCH_")}
    script = project.root / "cells" / "alone" / "make.py"
    for cwd in (elsewhere, project.root):
        done = subprocess.run(
            [sys.executable, str(script)],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        assert not (cwd / "made.txt").exists()
    scratch = project.root / ".scratch" / "alone" / "make"
    assert (scratch / "made.txt").read_text() == "1"
    assert f"files go to {scratch}" in done.stderr
    assert (project.cell_dir("alone", "make") / "artifacts" / "made.txt").read_text() == "1"  # the engine's


def test_run_json_records_each_cell_as_it_finishes_not_only_at_the_end(project):
    """A run lost whole (its machine taken back, SIGKILL) must keep the records of the cells it finished:
    the engine writes run.json after every finished cell, so the next cell already finds the first in it."""
    reader = f"""
import json, os, pathlib
run = pathlib.Path(os.environ["ATTNBENCH_ROOT"]) / "outputs" / "r" / {LABEL!r} / "run.json"
cells = json.loads(run.read_text())["cells"] if run.exists() else {{}}
print("recorded before me:", sorted(cells), cells.get("a", {{}}).get("state"))
"""
    path = project.write("r.md", notebook(cell("id=a", "print('first')"), cell("id=b needs=a", reader)))
    assert project.run(path).code == 0
    assert "recorded before me: ['a'] ran" in project.stdout("r", "b")
    assert set(project.run_json("r")["cells"]) == {"a", "b"}  # and the end of the run records both
