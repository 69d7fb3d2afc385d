"""One run per notebook and machine label at a time: a lock on each run folder a run writes into.

`outputs/<notebook>/<label>/.run.lock` is locked with flock(2). The kernel releases such a lock when
the last descriptor of it closes, whatever ended the process (kill -9 included), so a lock of a dead
run is never left behind: the next run simply takes it. The file records who holds it (pid, start
time, command) for the message of a run that has to wait. The cell supervisors keep a copy of the
descriptor (execute.py), so after a kill -9 of the engine the lock is free only once its cells are
gone. A released lock's file is removed; a file left by a killed run is taken over and removed later.
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from attnbench.notebook.run.store import now_iso

LOCK_FILE = ".run.lock"
POLL_S = 0.2


class LockBusy(Exception):
    """Another run held the lock for longer than the caller would wait."""


@dataclass
class RunLock:
    path: Path
    fd: int

    def release(self) -> None:
        # Removed while still held, so a run that opened the old file sees it is gone and opens anew.
        try:
            if os.stat(self.path).st_ino == os.fstat(self.fd).st_ino:
                os.unlink(self.path)
        except OSError:
            pass
        fcntl.flock(self.fd, fcntl.LOCK_UN)  # also for the copies the supervisors hold
        os.close(self.fd)


def try_lock(folder: Path) -> RunLock | None:
    """The lock of `folder` if it is free now, else None. OSError if it cannot be created there."""
    path = Path(folder) / LOCK_FILE
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return RunLock(path, fd)
        os.close(fd)  # the holder released it and removed the file meanwhile: lock the new one


def acquire(folder: Path, *, timeout: float | None, notify: Callable[[str], None]) -> RunLock:
    """Lock `folder` (created if missing), waiting for another run that holds it: `notify` is told
    once who that is. `timeout` None waits as long as it takes; else LockBusy after `timeout` s."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    deadline = None if timeout is None else time.monotonic() + timeout
    told = False
    while (lock := try_lock(folder)) is None:
        holder = describe_holder(folder)
        if deadline is not None and time.monotonic() >= deadline:
            raise LockBusy(f"{folder} is in use by {holder}; gave up after waiting {timeout:g} s")
        if not told:
            limit = "as long as it runs" if timeout is None else f"up to {timeout:g} s"
            notify(f"{folder} is in use by {holder}; waiting {limit} (Ctrl-C to stop)")
            told = True
        time.sleep(POLL_S)
    record = {"pid": os.getpid(), "started": now_iso(), "command": " ".join(["attnbench", *sys.argv[1:]])}
    os.ftruncate(lock.fd, 0)
    os.pwrite(lock.fd, (json.dumps(record) + "\n").encode(), 0)
    return lock


def describe_holder(folder: Path) -> str:
    """'attnbench run (pid 123, started ..., `attnbench run notebooks/x.md`)' as recorded in the lock."""
    try:
        record = json.loads((Path(folder) / LOCK_FILE).read_text())
        pid = int(record["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return "another run (it has not said who it is yet)"
    state = "" if _alive(pid) else ", which was killed: waiting for its cells to be stopped"
    return f"another run (pid {pid}, started {record.get('started')}, `{record.get('command')}`{state})"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Locks:
    """The locks of every run folder a run writes into, taken in sorted order so that two runs of
    notebooks that need each other's cells cannot each hold one and wait for the other."""

    def __init__(self) -> None:
        self.held: list[RunLock] = []

    def acquire(self, folders, *, timeout: float | None, notify: Callable[[str], None]) -> Locks:
        try:
            for folder in sorted(set(folders)):
                self.held.append(acquire(folder, timeout=timeout, notify=notify))
        except BaseException:
            self.release()
            raise
        return self

    @property
    def fds(self) -> tuple[int, ...]:
        return tuple(lock.fd for lock in self.held)

    def release(self) -> None:
        while self.held:
            self.held.pop().release()
