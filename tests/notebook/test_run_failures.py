"""Failures stay contained: failed cells, skipped dependents, timeouts, Ctrl-C and kill -9."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from engine_helpers import LABEL, cell, notebook

pytestmark = pytest.mark.timeout(120)


def alive(pid: int) -> bool:
    """True while `pid` runs (a zombie waiting to be reaped counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat[stat.rfind(")") + 2] != "Z"


def wait_for(path: Path, seconds: float = 30) -> str:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            return path.read_text()
        time.sleep(0.05)
    raise AssertionError(f"{path} never appeared")


def test_failed_cell_skips_dependents_but_not_independent_cells(project):
    path = project.write(
        "f.md",
        notebook(
            cell("id=bad", "1 / 0"),
            cell("id=child needs=bad", "print('child ran')"),
            cell("id=grandchild needs=child", "print('grandchild ran')"),
            cell("id=solo", "print('solo ran')"),
        ),
    )
    out = project.run(path)
    assert out.code == 1
    cells = project.run_json("f")["cells"]
    assert cells["bad"]["state"] == "failed"
    assert "ZeroDivisionError" in cells["bad"]["reason"]
    assert cells["child"] == {"state": "skipped", "reason": "upstream bad failed"}
    assert cells["grandchild"] == {"state": "skipped", "reason": "upstream child was skipped"}
    assert cells["solo"]["state"] == "ran"
    assert project.stdout("f", "solo") == "solo ran\n"
    assert not project.cell_dir("f", "child").exists()  # skipped cells are not written
    result = project.result("f", "bad")
    assert result["status"] == "failed" and result["returncode"] == 1
    assert "ZeroDivisionError" in (project.cell_dir("f", "bad") / "stderr.txt").read_text()


def test_timeout_ends_the_whole_process_group(project):
    body = """
    import os, subprocess, sys, time, pathlib
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    pathlib.Path(os.environ["ATTNBENCH_ROOT"], "pids").write_text(f"{os.getpid()} {child.pid}")
    print("started", flush=True)
    time.sleep(60)
    """
    path = project.write(
        "t.md", notebook(cell("id=slow timeout=1", body), cell("id=after needs=slow", "pass"))
    )
    started = time.monotonic()
    out = project.run(path)
    assert time.monotonic() - started < 30
    assert out.code == 1
    cell_pid, grandchild_pid = map(int, (project.root / "pids").read_text().split())
    deadline = time.monotonic() + 5
    while (alive(cell_pid) or alive(grandchild_pid)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(grandchild_pid), "the timed-out cell's grandchild survived"
    assert not alive(cell_pid)
    result = project.result("t", "slow")
    assert result["status"] == "timeout"
    assert result["reason"] == "timed out after 1 s"
    assert project.stdout("t", "slow") == "started\n"
    assert project.run_json("t")["cells"]["after"]["reason"] == "upstream slow timed out"
    assert project.run(path).code == 1  # a timeout is never a cache hit
    assert project.result("t", "slow")["started"] >= result["started"]


def _engine(project, path: Path, grace: float = 2) -> subprocess.Popen:
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
        "--kill-grace",
        str(grace),
    ]
    # the engine starts as from a terminal, SIGINT and SIGHUP at their defaults: a shell's background job
    # ignores SIGINT and `nohup` SIGHUP, a child inherits that, and the engine rightly keeps ignoring what
    # it was started ignoring. A handler is not inherited (exec resets it to the default), so one stands
    # in for SIG_IGN while the engine starts.
    previous = {sig: signal.signal(sig, lambda *_: None) for sig in (signal.SIGINT, signal.SIGHUP)}
    try:
        return subprocess.Popen(
            cmd, cwd=project.root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


# Ignores SIGTERM, and so does its child: only SIGKILL ends them. Run again with `fast` present, it
# reports which processes of the killed run are still alive as it starts.
STUBBORN_WITH_CHILD = """
import os, pathlib, signal, subprocess, sys, time
root = pathlib.Path(os.environ["ATTNBENCH_ROOT"])
pathlib.Path("partial.txt").write_text("half")
if (root / "fast").exists():
    old = [int(p) for p in (root / "slow.pid").read_text().split()]
    alive = [p for p in old if os.path.exists(f"/proc/{p}") and open(f"/proc/{p}/stat").read().split()[2] != "Z"]
    (root / "orphans.txt").write_text(" ".join(map(str, alive)) or "none")
    raise SystemExit(0)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
(root / "slow.pid").write_text(f"{os.getpid()} {child.pid}")
time.sleep(60)
"""


def test_kill_9_of_the_engine_leaves_no_process_and_the_next_run_cleans_up(project):
    path = project.write(
        "k.md", notebook(cell("id=quick", "print('quick')"), cell("id=slow needs=quick", STUBBORN_WITH_CHILD))
    )
    engine = _engine(project, path, grace=4)
    try:
        cell_pid, child_pid = map(int, wait_for(project.root / "slow.pid").split())
        engine.kill()  # SIGKILL: no cleanup in the engine at all
        engine.wait(timeout=10)
    finally:
        engine.kill()
    run_folder = project.root / "outputs" / "k" / LABEL
    staging = [p for p in run_folder.iterdir() if p.name.startswith(".tmp-slow-")]
    assert staging and not (staging[0] / "result.json").exists()  # it was mid-run: nothing looks complete
    assert (staging[0] / "artifacts" / "partial.txt").exists()
    assert not project.cell_dir("k", "slow").exists()

    # At once, while the killed run's cell (SIGTERM ignored) is still being ended: the next run
    # waits for it, then runs the cell with nothing of the old one left, and removes the .tmp- folder.
    (project.root / "fast").write_text("1")
    out = project.run(path)
    assert out.code == 0, out.out + out.err
    assert "which was killed: waiting for its cells to be stopped" in out.err
    assert (project.root / "orphans.txt").read_text() == "none"
    assert not alive(cell_pid) and not alive(child_pid)
    assert project.result("k", "slow")["status"] == "ok"
    assert not [p for p in run_folder.iterdir() if p.name.startswith(".tmp-")]
    assert not (run_folder / ".run.lock").exists()  # a finished run leaves no lock file to commit


def test_kill_9_of_the_engine_ends_the_cells_group_within_the_grace(project):
    path = project.write("k.md", notebook(cell("id=slow", WITH_GRANDCHILD)))
    engine = _engine(project, path, grace=30)
    try:
        cell_pid, grandchild_pid = map(int, wait_for(project.root / "slow.pid").split())
        engine.kill()
        engine.wait(timeout=10)
    finally:
        engine.kill()
    deadline = time.monotonic() + 5  # they take SIGTERM: no need to wait for the 30 s grace
    while (alive(cell_pid) or alive(grandchild_pid)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(cell_pid), "the cell outlived the engine"
    assert not alive(grandchild_pid), "the cell's child outlived the engine"


WITH_GRANDCHILD = """
import os, pathlib, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
pathlib.Path(os.environ["ATTNBENCH_ROOT"], "slow.pid").write_text(f"{os.getpid()} {child.pid}")
time.sleep(60)
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_ctrl_c_sigterm_or_hangup_ends_the_cell_group_and_exits_130(project, sig):
    # SIGHUP: the terminal or ssh session closed. The cell is in its own session, so only the engine
    # can end it; before, a hang-up killed the engine and left the cell running.
    path = project.write(
        "c.md", notebook(cell("id=slow", WITH_GRANDCHILD), cell("id=next needs=slow", "print('next')"))
    )
    engine = _engine(project, path)
    try:
        cell_pid, grandchild_pid = map(int, wait_for(project.root / "slow.pid").split())
        engine.send_signal(sig)
        output, _ = engine.communicate(timeout=30)
    finally:
        engine.kill()
    assert engine.returncode == 130, output
    deadline = time.monotonic() + 5
    while (alive(cell_pid) or alive(grandchild_pid)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(cell_pid)
    assert not alive(grandchild_pid), "the interrupted cell's grandchild survived"
    assert project.result("c", "slow")["status"] == "interrupted"
    assert not project.cell_dir("c", "next").exists()
    assert project.run_json("c")["cells"]["slow"]["state"] == "interrupted"


STUBBORN = """
import os, pathlib, signal, time
root = pathlib.Path(os.environ["ATTNBENCH_ROOT"])
signal.signal(signal.SIGTERM, lambda *_: (root / "got-sigterm").write_text("1"))  # only SIGKILL ends it
(root / "slow.pid").write_text(str(os.getpid()))
time.sleep(60)
"""


def test_ctrl_c_during_a_timed_out_cells_grace_period_stops_the_run(project):
    path = project.write(
        "g.md",
        notebook(
            cell("id=stubborn timeout=1", STUBBORN),
            cell(
                "id=independent",
                "import os, pathlib; pathlib.Path(os.environ['ATTNBENCH_ROOT'], 'ran').touch()",
            ),
        ),
    )
    engine = _engine(project, path, grace=30)
    try:
        pid = int(wait_for(project.root / "slow.pid"))
        wait_for(project.root / "got-sigterm")  # timed out: the engine now waits up to 30 s to SIGKILL
        engine.send_signal(signal.SIGINT)
        output, _ = engine.communicate(timeout=15)  # far less than the grace period
    finally:
        engine.kill()
    assert engine.returncode == 130, output
    assert not alive(pid)
    assert not (project.root / "ran").exists(), "the run went on after Ctrl-C"
    assert project.result("g", "stubborn")["status"] == "interrupted"


def _cell_process(tmp_path: Path, argv: list[str], **kwargs):
    from attnbench.notebook.run.execute import CellProcess

    proc = CellProcess(
        argv, cwd=tmp_path, env=dict(os.environ), stdout=tmp_path / "out", stderr=tmp_path / "err", **kwargs
    )
    deadline = time.monotonic() + 30
    while (finished := proc.poll(0.05)) is None and time.monotonic() < deadline:
        pass
    return proc, finished


def test_environment_setup_does_not_count_against_the_timeout(tmp_path):
    # uv mode: a first `uv sync --script` may download torch for minutes; `timeout=` is the cell's own.
    setup = [sys.executable, "-c", "import time; print('setup', flush=True); time.sleep(1.5)"]
    proc, finished = _cell_process(
        tmp_path, [sys.executable, "-c", "print('cell')"], timeout=1.0, setup=setup, grace=1
    )
    assert (finished.status, finished.reason) == ("ok", "")
    # duration_s is the cell's own run; the environment's setup is reported apart, as env_setup_s
    assert proc.setup_s >= 1.5 and finished.duration_s < proc.setup_s
    assert (tmp_path / "out").read_text() == "setup\ncell\n"  # one stdout.txt: setup's lines, then the cell's


def test_failed_environment_setup_fails_the_cell_without_running_it(tmp_path):
    setup = [sys.executable, "-c", "import sys; sys.exit('no solution for torch==0.0.1')"]
    proc, finished = _cell_process(
        tmp_path, [sys.executable, "-c", "print('cell')"], timeout=None, setup=setup
    )
    assert proc.setup_s is not None and finished.status == "failed"
    assert finished.reason == "environment setup failed (exit code 1: no solution for torch==0.0.1)"
    assert (tmp_path / "out").read_text() == ""


DAEMON = """
import os, pathlib, time
if os.fork() == 0:
    os.setsid()  # leaves the cell's session and process group: killpg cannot reach it
    if os.fork() == 0:
        pathlib.Path({pidfile!r}).write_text(str(os.getpid()))
        time.sleep(120)
    os._exit(0)
time.sleep(0.2)
print('cell done')
"""


@pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="the subreaper is Linux's PR_SET_CHILD_SUBREAPER"
)
def test_a_daemon_that_left_the_process_group_does_not_outlive_its_cell(project):
    pidfile = project.root / "daemon.pid"
    path = project.write("d.md", notebook(cell("id=spawns", DAEMON.format(pidfile=str(pidfile)))))
    out = project.run(path)
    assert out.code == 0, out.out + out.err
    daemon = int(wait_for(pidfile))
    deadline = time.monotonic() + 5
    while alive(daemon) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(daemon), "a daemon that called setsid outlived its cell"
