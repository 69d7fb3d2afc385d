"""Ties a cell's process group to the engine's life. Run as a script, never imported by a cell:

    python -I -S supervise.py GRACE_S HELD_FDS -- ARGV...

The engine starts this in a new session, so it leads the cell's process group, with a pipe on its
stdin whose write end only the engine holds. It starts ARGV in the same group (stdin /dev/null,
stdout and stderr inherited, HELD_FDS closed) and waits for whichever comes first:

- ARGV exits: the supervisor exits the same way (the same code, or the same signal), so to the
  engine it is the cell itself, and the engine ends the group as before (timeout, Ctrl-C, leftovers).
- stdin reaches end of file: the engine has died, however it died (on kill -9 the kernel closes its
  descriptors). The supervisor sends SIGTERM to the group, waits up to GRACE_S for ARGV to exit,
  then sends SIGKILL to the whole group, itself included.

Why not PR_SET_PDEATHSIG on the cell: it is Linux-only and reaches only the process it is set on,
while a cell's torchrun workers, compilers and stray children share its process group and would be
orphaned; a pipe's end of file reaches the supervisor on every POSIX system and the supervisor
reaches the whole group. Signals the engine sends to the group reach ARGV directly; the supervisor
only notes them for itself and keeps waiting.

A process that leaves the group (a daemon: fork, setsid, fork) is beyond killpg. On Linux the
supervisor is a child subreaper (PR_SET_CHILD_SUBREAPER): such orphans are re-parented to it, and when
ARGV exits it ends every process still below it before exiting itself, so no process outlives its cell.

HELD_FDS (comma-separated, may be empty) are the engine's run-lock descriptors: the supervisor keeps
them open, so after a kill -9 of the engine the lock is released only once the cell's group is gone
and a next run never starts beside an orphan. The cell does not inherit them.
"""

import os
import resource
import select
import signal
import sys
import time


def _exit_like(status: int) -> None:
    """Exit with the cell's wait status: its code, or death by the same signal."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            if sig not in (signal.SIGKILL, signal.SIGSTOP):  # the two that take no handler
                signal.signal(sig, signal.SIG_DFL)
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # the cell's core dump, if any, is its own
        except (OSError, ValueError):
            pass
        os.kill(os.getpid(), sig)
        os._exit(128 + sig)  # a signal that does not end a process by default
    os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 1)


def _become_subreaper() -> bool:
    """Linux: orphaned descendants of the cell are re-parented to this process instead of init."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        return False


def _children() -> list[int]:
    """The live processes whose parent is this one (Linux /proc)."""
    me, found = os.getpid(), []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == me and fields[0] != b"Z":
            found.append(int(entry))
    return found


def _end_descendants(grace: float) -> None:
    """End every process still below this one once the cell has exited: SIGTERM, then SIGKILL after
    `grace`; a killed daemon's own children are re-parented here in turn, so repeat until none is left."""
    deadline = time.monotonic() + grace
    signalled: set[int] = set()
    for _ in range(1000):  # bounded: each round reaps or kills what it finds
        while True:  # reap the exited ones (zombies re-parented to this process)
            try:
                if not os.waitpid(-1, os.WNOHANG)[0]:
                    break
            except ChildProcessError:
                break
        left = _children()
        if not left:
            return
        sig = signal.SIGKILL if time.monotonic() >= deadline else signal.SIGTERM
        for pid in left:
            if sig == signal.SIGKILL or pid not in signalled:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
                signalled.add(pid)
        time.sleep(0.02)


def _end_group(child: int, grace: float) -> None:
    os.killpg(0, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if os.waitpid(child, os.WNOHANG)[0]:
            break
        time.sleep(0.05)
    os.killpg(0, signal.SIGKILL)  # everything left in the group, this process last of all


def main(argv: list[str]) -> None:
    grace, held, argv = float(argv[1]), [int(fd) for fd in argv[2].split(",") if fd], argv[4:]
    subreaper = _become_subreaper()
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)  # SIGCHLD wakes the select below, with no race against waitpid
    for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: None)  # handlers, not SIG_IGN: exec resets them for ARGV
    actions = [(os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0)]
    actions += [(os.POSIX_SPAWN_CLOSE, fd) for fd in held]
    try:
        child = os.posix_spawnp(argv[0], argv, os.environ, file_actions=actions)
    except OSError as e:
        print(f"attnbench: cannot start {argv[0]}: {e.strerror}", file=sys.stderr, flush=True)
        os._exit(127)
    while True:
        pid, status = os.waitpid(child, os.WNOHANG)
        if pid:
            if subreaper:
                _end_descendants(min(grace, 2.0))
            _exit_like(status)
        ready, _, _ = select.select([0, wake_r], [], [])
        if wake_r in ready:
            os.read(wake_r, 512)
        if 0 in ready and not os.read(0, 512):
            _end_group(child, grace)
            os._exit(1)  # not reached: the group's SIGKILL ends this process too


if __name__ == "__main__":
    main(sys.argv)
