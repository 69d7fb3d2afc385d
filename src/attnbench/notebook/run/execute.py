"""Run one cell process: its own process group, output to files, timeout, and ending the group.

A cell is started with `start_new_session=True` under a small supervisor (supervise.py), so the
supervisor, the cell and everything it spawns (torchrun workers, compilers, a stray `sleep`) share
one process group that the engine can end as a whole: SIGTERM, then SIGKILL after a grace period.
The terminal's Ctrl-C reaches only the engine (the cell is in another session); the engine then ends
the cell's group itself. If the engine dies without doing so (kill -9), the supervisor ends the group.
"""

from __future__ import annotations

import errno
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from attnbench.notebook.document.model import clip
from attnbench.notebook.run.records import Status

KILL_GRACE_S = 10.0  # between SIGTERM and SIGKILL
INTERRUPTED = "interrupted (Ctrl-C, SIGTERM or SIGHUP)"  # the reason of a cell the run's stop ended
TAIL_BYTES = 4096
SUPERVISOR = Path(__file__).with_name("supervise.py")


@dataclass
class Finished:
    returncode: int | None
    status: Status  # OK, FAILED, TIMEOUT, INTERRUPTED or MISSING_DEPS
    reason: str
    duration_s: float


class CellProcess:
    """A started cell; poll() until it returns a Finished.

    `setup` (uv mode: `uv sync --script`) runs first, untimed, in the same group and output files: a
    first run that downloads torch must not spend the cell's `timeout`, which starts with `argv`.
    """

    def __init__(
        self,
        argv: list[str],
        *,
        cwd: Path,
        env: dict[str, str],
        stdout: Path,
        stderr: Path,
        timeout: float | None,
        grace: float = KILL_GRACE_S,
        setup: list[str] | None = None,
        hold_fds: tuple[int, ...] = (),
    ):
        """`hold_fds`: descriptors the supervisor keeps open until the cell's group is gone (the
        run locks), so a kill -9 of the engine does not free them while the cell still runs."""
        self.argv, self.cwd, self.env, self.hold_fds = argv, cwd, env, hold_fds
        self.stdout_path, self.stderr_path = stdout, stderr
        self.timeout, self.grace = timeout, grace
        self.started = time.monotonic()
        self.setup_s: float | None = None  # how long `setup` took; None without one
        self.in_setup = setup is not None
        self.pidfd: int | None = None
        self.proc = self._start(setup if setup is not None else argv, "wb")
        self.run_started = self.started

    def _start(self, argv: list[str], mode: str) -> subprocess.Popen:
        if shutil.which(argv[0], path=self.env.get("PATH", os.defpath)) is None:
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), argv[0])
        held = ",".join(str(fd) for fd in self.hold_fds)
        supervised = [sys.executable, "-I", "-S", str(SUPERVISOR), f"{self.grace:g}", held, "--", *argv]
        with open(self.stdout_path, mode) as out, open(self.stderr_path, mode) as err:
            # stdin is the pipe whose end of file tells the supervisor that the engine has died
            proc = subprocess.Popen(
                supervised,
                cwd=self.cwd,
                env=self.env,
                stdin=subprocess.PIPE,
                stdout=out,
                stderr=err,
                start_new_session=True,
                pass_fds=self.hold_fds,
            )
        self._close_pidfd()
        try:  # readable the moment the process exits (Linux): poll() wakes up at once, not on a tick
            self.pidfd = os.pidfd_open(proc.pid)
        except (AttributeError, OSError):
            self.pidfd = None
        return proc

    def _close_pidfd(self) -> None:
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None

    def _wait(self, wait: float) -> int | None:
        if wait <= 0:
            return self.proc.poll()
        if self.pidfd is not None:
            select.select([self.pidfd], [], [], wait)
            return self.proc.poll()
        try:
            return self.proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            return None

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def poll(self, wait: float = 0.0) -> Finished | None:
        """Finished when the cell has exited (or timed out and was ended), else None.
        `wait` blocks up to that many seconds for the exit."""
        code = self._wait(wait)
        if code is not None:
            # Whatever the cell left running in its group goes too. A Ctrl-C while waiting for it
            # must still stop the run, so it is raised again once the group is gone.
            self._close_pidfd()
            end_group(self.proc, 1.0, reraise=True)
            if self.in_setup:
                return self._after_setup(code)
            duration = self.run_elapsed  # the cell itself; `uv sync` time is env_setup_s
            if code == 0:
                return Finished(code, Status.OK, "", duration)
            return Finished(code, Status.FAILED, failure_reason(code, self.stderr_path), duration)
        if not self.in_setup and self.timeout is not None and self.run_elapsed > self.timeout:
            self._close_pidfd()
            end_group(self.proc, self.grace, reraise=True)
            return Finished(
                self.proc.returncode, Status.TIMEOUT, f"timed out after {self.timeout:g} s", self.run_elapsed
            )
        return None

    @property
    def run_elapsed(self) -> float:
        """Seconds since the cell itself (not its setup) started: what `timeout` limits."""
        return time.monotonic() - self.run_started

    def _after_setup(self, code: int) -> Finished | None:
        self.in_setup = False
        self.setup_s = self.elapsed
        if code != 0:
            reason = f"environment setup failed ({failure_reason(code, self.stderr_path)})"
            return Finished(code, Status.FAILED, reason, self.elapsed)
        try:
            self.proc = self._start(self.argv, "ab")
        except OSError as e:
            return Finished(None, Status.FAILED, f"cannot start {self.argv[0]}: {e}", self.elapsed)
        self.run_started = time.monotonic()
        return None

    def terminate(self) -> None:
        """SIGTERM to the cell's group, without waiting (interrupt() then waits and kills)."""
        self.proc.poll()
        _signal_group(self.proc.pid, signal.SIGTERM)

    def interrupt(self, reason: str = INTERRUPTED) -> Finished:
        """End the cell's group (SIGTERM, SIGKILL after the grace); it is interrupted with `reason`."""
        self._close_pidfd()
        end_group(self.proc, self.grace)  # already interrupting: a second Ctrl-C only skips the grace
        return Finished(self.proc.returncode, Status.INTERRUPTED, reason, self.elapsed)

    def latest_line(self) -> str:
        """The last non-empty line the cell printed (stdout or stderr, whichever was written last)."""
        paths = [p for p in (self.stdout_path, self.stderr_path) if p.exists()]
        paths.sort(key=lambda p: p.stat().st_mtime_ns)
        for path in reversed(paths):
            line = last_line(path)
            if line:
                return line
        return ""


def last_line(path: Path, limit: int = 200) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - TAIL_BYTES))
            tail = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    for line in reversed(tail.replace("\r", "\n").split("\n")):
        if line.strip():
            return clip(line.strip(), limit)
    return ""


def failure_reason(code: int, stderr: Path) -> str:
    """'exit code 3: <last stderr line>', or the signal that ended the cell, named."""
    what = f"exit code {code}"
    if code < 0:
        what = killed_by(-code)
    elif code > 128 and _signal_name(code - 128):  # a shell, uv or torchrun reporting a killed child
        what = f"{killed_by(code - 128)} (exit code {code})"
    line = exception_line(stderr) or last_line(stderr)
    return f"{what}: {line}" if line else what


_PREFIX = re.compile(r"^(?:\[[^\]]*\]:\s?)?")  # torchrun's per-rank "[rank0]: " prefix
_LAUNCHER_ERRORS = ("ChildFailedError",)  # torchrun's own summary of a failed rank: not the cause


def exception_line(stderr: Path, limit: int = 200) -> str:
    """The last exception a Python traceback in the tail of `stderr` ended with ("RuntimeError: Numpy
    is not available"), skipping a launcher's own summary exception (torchrun's ChildFailedError and
    its "=====" banner) so a distributed cell's reason names what failed in the rank. "" if none."""
    try:
        with open(stderr, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 4 * TAIL_BYTES))
            lines = f.read().decode("utf-8", "replace").replace("\r", "\n").split("\n")
    except OSError:
        return ""
    found, in_traceback = "", False
    for raw in lines:
        line = _PREFIX.sub("", raw, count=1).rstrip()
        if line.startswith("Traceback (most recent call last)"):
            in_traceback = True
        elif in_traceback and line and not line[0].isspace():
            in_traceback = False
            name = line.split(":", 1)[0].rsplit(".", 1)[-1]
            if name not in _LAUNCHER_ERRORS:
                found = line.strip()
    return clip(found, limit) if found else ""


def killed_by(signum: int) -> str:
    """'killed (SIGKILL — out of memory?)': the kernel's OOM killer sends SIGKILL, so does `kill -9`."""
    name = _signal_name(signum) or f"signal {signum}"
    if signum == signal.SIGKILL:
        return f"killed ({name} — out of memory?)"
    meaning = signal.strsignal(signum) if _signal_name(signum) else None
    return f"killed ({name} — {meaning.lower()})" if meaning else f"killed ({name})"


def _signal_name(signum: int) -> str | None:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return None


def _group_alive(pgid: int) -> bool:
    """Is any non-zombie process left in group `pgid`? (Zombies of reparented grandchildren may
    linger where PID 1 does not reap; they hold no resources worth waiting for.)"""
    try:
        os.killpg(pgid, 0)  # the common case, at once: nothing at all is left in the group
    except (ProcessLookupError, PermissionError):
        return False
    proc = Path("/proc")
    if sys.platform.startswith("linux") and proc.is_dir():
        for entry in proc.iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rfind(")") + 2 :].split()  # state ppid pgrp ...
            if len(fields) > 2 and fields[2] == str(pgid) and fields[0] != "Z":
                return True
        return False
    return True


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def end_group(proc: subprocess.Popen, grace: float, *, reraise: bool = False) -> None:
    """End the process group led by `proc`: SIGTERM, wait up to `grace` s, then SIGKILL; then close
    the supervisor's pipe (its end of file alone would also end the group).

    A Ctrl-C while waiting skips to SIGKILL; with `reraise` it is raised again once the group is
    gone (a Ctrl-C during a timed-out cell's grace period must stop the run, not vanish)."""
    try:
        _end_group(proc, grace, reraise)
    finally:
        if proc.stdin is not None:
            proc.stdin.close()


def _end_group(proc: subprocess.Popen, grace: float, reraise: bool) -> None:
    pgid = proc.pid
    proc.poll()  # reap the leader if it has exited, so it does not count as alive
    if not _group_alive(pgid):
        return
    _signal_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    interrupted = False
    try:
        while time.monotonic() < deadline:
            proc.poll()
            if not _group_alive(pgid):
                break
            time.sleep(0.05)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        if _group_alive(pgid):
            _signal_group(pgid, signal.SIGKILL)
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
    if interrupted and reraise:
        raise KeyboardInterrupt
