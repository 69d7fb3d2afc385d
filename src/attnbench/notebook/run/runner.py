"""The scheduler of `attnbench run`: cache hits, launches, failures, Ctrl-C, run.json.

Cells start in topological order. On a machine with a visible GPU every cell runs alone (any cell
may time something on the GPU, and timings must not share it); without a GPU up to `-j N` cells
run at once. A failed cell does not stop cells that do not depend on it; its dependents are
`skipped` with the reason.

Before any cell starts, the run locks the run folder of every notebook it writes into (runlock.py;
a second run of the same notebook and label waits, saying who holds it), removes what killed runs
left there (`.tmp-*`) and checks the stored records, so a bad --outputs, a locked folder or a broken
result.json is an exit 2 with nothing run.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from attnbench.notebook.run import preflight, provenance, run_records, store
from attnbench.notebook.run.execute import INTERRUPTED, KILL_GRACE_S, CellProcess, Finished
from attnbench.notebook.run.graph import NodeId, node_name
from attnbench.notebook.run.launchers import (
    cell_command,
    cell_environment,
    missing_deps,
    setup_command,
)
from attnbench.notebook.run.materialise import materialise
from attnbench.notebook.run.records import CellResult, RecordError, RunRecord, Status
from attnbench.notebook.run.runlock import LockBusy, Locks
from attnbench.notebook.run.session import Session, SetupError


@dataclass
class CellState:
    state: Status  # WAITING, RUNNING, HIT, RAN, NEEDS_GPUS or one of the BAD_STATES
    reason: str = ""
    duration_s: float | None = None


class Runner:
    def __init__(self, session: Session, progress):
        self.session = session
        self.graph = session.graph
        self.progress = progress
        self.states: dict[NodeId, CellState] = {}
        self.running: dict[NodeId, tuple[CellProcess, store.StagedCell, dict]] = {}
        self.scripts: dict[NodeId, Path] = {}
        self.previous: dict[str, RunRecord | None] = {}  # run.json of each notebook before this run
        self.lock_fds: tuple[int, ...] = ()
        self.named: set[NodeId] = set()  # the cells named with --cell: one left out for GPUs fails the run
        self.grace = session.options.kill_grace if session.options.kill_grace is not None else KILL_GRACE_S

    # --- public ---------------------------------------------------------------------------------

    def run(self) -> int:
        """Run the session's cells; the exit code: 0 ok, 1 a cell did not succeed (or a cell named with
        --cell needs more GPUs than this machine has), 130 interrupted."""
        opts = self.session.options
        if opts.jobs < 1:
            raise SetupError(f"-j {opts.jobs}: needs at least 1")
        selected = [n for spec in opts.cells for n in self.graph.find_cell(spec)]
        selected = selected or self.graph.all_named_nodes()
        order = self.graph.order(selected)
        forced = set(selected) if opts.cells else set()
        self.named = set(forced)
        if opts.reuse:
            preflight.check_reusable(self.session, order, forced)
        if opts.force and not opts.reuse:  # under --reuse-*, the cells it reads are reused, never forced
            forced |= {n for n in order if n[0] in self.graph.named}
        preflight.check_launchers(self.session, order, self._name)
        locks = self._lock(order)
        try:
            self.lock_fds = locks.fds
            self._tidy(order)
            if opts.cells:
                preflight.note_upstream_runs(self.session, order, self.named, forced, self.previous)
            if not opts.reuse:  # --reuse-* starts only the named cells, over what is stored: asked for
                preflight.check_machine(self.session, order, forced, self.previous)
            for name in dict.fromkeys(n[0] for n in order):
                for cell_id, path in materialise(self.graph.notebooks[name], self.session.root).items():
                    self.scripts[(name, cell_id)] = path
            return self._run_locked(order, forced)
        finally:
            locks.release()

    def _lock(self, order: list[NodeId]) -> Locks:
        """Lock the run folder of every notebook this run writes into; also where a bad --outputs
        (a file, a read-only folder) is found, before anything is written."""
        folders = [self.session.run_dir(name) for name in dict.fromkeys(n[0] for n in order)]

        def notify(message: str) -> None:
            print(f"attnbench run: {message}", file=sys.stderr, flush=True)

        try:
            return Locks().acquire(folders, timeout=self.session.options.lock_timeout, notify=notify)
        except LockBusy as e:
            raise SetupError(str(e)) from None
        except OSError as e:
            where = e.filename or self.session.outputs
            raise SetupError(
                f"cannot write the outputs folder {self.session.outputs}: {where}: {e.strerror}"
            ) from None

    def _tidy(self, order: list[NodeId]) -> None:
        """Remove what killed runs left in the locked run folders, and read every record this run
        depends on: a broken one stops the run here, naming the file, before any cell starts."""
        session = self.session
        for name in dict.fromkeys(n[0] for n in order):
            for leftover in store.leftovers(session.outputs, name, session.label):
                store.remove(leftover)
        try:
            for name in dict.fromkeys(n[0] for n in order):
                self.previous[name] = store.load_run(session.run_dir(name))
            for node in order:
                session.judge(node)
        except RecordError as e:
            raise SetupError(f"{e} (fix or delete it; nothing was run)") from None

    def _run_locked(self, order: list[NodeId], forced: set[NodeId]) -> int:
        self.started = store.now_iso()
        self.progress.begin(self._header(), [(n, self._name(n)) for n in order])
        previous = _on_stop_signals(_raise_interrupt)
        code, error = 130, None
        try:
            self._loop(order, forced)
            bad = any(st.state.bad for st in self.states.values())
            # a cell named with --cell that this machine cannot run was asked for and not done
            left_out = any(self.states[n].state == Status.NEEDS_GPUS for n in self.named if n in self.states)
            code = 1 if bad or left_out else 0
        except KeyboardInterrupt:
            self._stop_all(INTERRUPTED)
        except BaseException as e:  # the engine's own failure (disk full, a bug): end the cells first
            code, error = 2, e
            self._stop_all(f"interrupted: the engine stopped ({type(e).__name__}: {e})")
            raise
        finally:
            _restore_signals(previous)
            try:
                run_records.write_runs(self.session, self.states, self.previous, order, self.started)
            finally:
                self.progress.end(self._summary(order, code, error))
        return code

    # --- scheduling -----------------------------------------------------------------------------

    def _loop(self, order: list[NodeId], forced: set[NodeId]) -> None:
        pending = list(order)
        capacity = 1 if self.session.machine.gpu_count > 0 else self.session.options.jobs
        while pending or self.running:
            for node in list(pending):
                ups = [up for _, up in self.graph.upstream[node]]
                if any(
                    up not in self.states or self.states[up].state in (Status.WAITING, Status.RUNNING)
                    for up in ups
                ):
                    continue
                bad = [up for up in ups if self.states[up].state.bad]
                if bad:
                    words = self.states[bad[0]].state.words
                    why = f"upstream {self._name(bad[0], node[0])} {words}"
                    self._set(node, CellState(Status.SKIPPED, why))
                elif node not in forced and self._reusable(node):
                    self._set(node, CellState(Status.HIT))
                elif short := preflight.left_out_for_gpus(self.session, node, forced):
                    self._set(node, CellState(Status.NEEDS_GPUS, short))  # not a failure: another label's
                elif len(self.running) >= capacity:
                    break
                else:
                    self._launch(node)
                pending.remove(node)
            wait = 0.1 if len(self.running) == 1 else 0.0
            for node, (proc, staged, meta) in list(self.running.items()):
                finished = proc.poll(wait)
                if finished is not None:
                    meta["env_setup_s"] = proc.setup_s
                    del self.running[node]
                    self._finish(node, staged, meta, finished)
                    self._checkpoint(order)
            if len(self.running) > 1:
                time.sleep(0.05)
            self.progress.tick({n: (p.elapsed, p.latest_line()) for n, (p, _, _) in self.running.items()})

    def _reusable(self, node: NodeId) -> bool:
        return preflight.reusable(self.session, node)

    def _launch(self, node: NodeId) -> None:
        session, opts, cell = self.session, self.session.options, self.graph.cell(node)
        # The key as of now: what the upstream cells stored (they have all finished) is in it.
        meta = {"started": store.now_iso(), "command": [], "launcher": "", "key": session.judge(node).key}
        staged = store.StagedCell(session.run_dir(node[0]), cell.id)
        if session.interpreter is not None:
            missing = missing_deps(cell, session.interpreter)
            if missing:
                reason = f"missing in {opts.env.shown()}: {', '.join(missing)}"
                self._finish(node, staged, meta, Finished(None, Status.MISSING_DEPS, reason, 0.0))
                return
        inputs = [
            (need, store.artifacts_dir(session.outputs, up[0], session.label, up[1]))
            for need, up in self.graph.upstream[node]
        ]
        env = cell_environment(
            os.environ,
            env=opts.env,
            root=session.root,
            notebook=node[0],
            label=session.label,
            params=session.params[node[0]],
            inputs=inputs,
            cell=cell,
            src_dir=session.src_dir,
        )
        env["ATTNBENCH_OUTPUTS"] = str(session.outputs)
        env["ATTNBENCH_WORKDIR"] = str(staged.artifacts)  # the script's prelude stays in it
        script = self.scripts[node]
        argv, meta["launcher"] = cell_command(opts.env, str(script), cell.gpus, opts.dist, os.environ)
        shown_python = opts.env.shown() if opts.env.kind == "python" else None
        meta["command"] = cell_command(
            opts.env, store.shown(script, session.root), cell.gpus, opts.dist, os.environ, python=shown_python
        )[0]
        try:
            proc = CellProcess(
                argv,
                cwd=staged.artifacts,
                env=env,
                stdout=staged.stdout,
                stderr=staged.stderr,
                timeout=cell.timeout,
                grace=self.grace,
                setup=setup_command(opts.env, str(script)),
                hold_fds=self.lock_fds,
            )
        except OSError as e:
            reason = f"cannot start {argv[0]}: {e}"
            self._finish(node, staged, meta, Finished(None, Status.FAILED, reason, 0.0))
            return
        self.running[node] = (proc, staged, meta)
        self._set(node, CellState(Status.RUNNING))

    def _finish(self, node: NodeId, staged: store.StagedCell, meta: dict, finished: Finished) -> None:
        session, cell = self.session, self.graph.cell(node)
        key = meta["key"]
        if not staged.stdout.exists():  # never started: say why where the output would be
            staged.stdout.write_text("")
            staged.stderr.write_text(finished.reason + "\n")
        setup_s = meta.get("env_setup_s")
        unsafe = staged.remove_unsafe()
        if unsafe:  # a named failure of this cell, never a hang nor a file from elsewhere in outputs/
            reason = f"{'; '.join(unsafe)}: a cell's artifacts must be regular files (links only inside artifacts/)"
            if finished.status == Status.OK:
                finished = Finished(finished.returncode, Status.FAILED, reason, finished.duration_s)
        result = CellResult(
            cell=cell.id,
            notebook=node[0],
            label=session.label,
            status=finished.status,
            reason=finished.reason,
            key=key.key,
            key_parts=key.parts,
            params=session.params[node[0]],
            started=meta["started"],
            finished=store.now_iso(),
            duration_s=round(finished.duration_s, 3),
            # uv mode: `uv sync --script` before the cell; not part of its timeout
            env_setup_s=None if setup_s is None else round(setup_s, 3),
            returncode=finished.returncode,
            command=meta["command"],
            gpus=cell.gpus,
            env={
                "kind": session.options.env.kind,
                "python": session.envs[node].get("python"),
                "launcher": meta["launcher"],
            },
            artifacts=staged.keep_only(cell.outputs),
            code=provenance.code_version(session.root),  # the commit that produced this result
        )
        where = staged.commit(result)
        session.forget(node)  # what this cell stored changes its dependents' keys
        state = Status.RAN if finished.status == Status.OK else finished.status
        reason = finished.reason
        if where.name == store.FAILURE_DIR:  # the failure went beside the last good result
            kept = store.good_result(staged.final)
            when = f" of {kept.finished}" if kept is not None else ""
            reason += (
                f" (the last good result{when} is kept; this failure is in {cell.id}/{store.FAILURE_DIR}/)"
            )
        self._set(node, CellState(state, reason, finished.duration_s))

    def _checkpoint(self, order: list[NodeId]) -> None:
        """run.json after every finished cell, not only at the end: a run lost whole (the machine taken
        back, SIGKILL) keeps the records of the cells it finished. Best effort: the run's last write is
        the one that must succeed, so a failed checkpoint (a full disk) is said and the cells go on."""
        try:
            run_records.write_runs(self.session, self.states, self.previous, order, self.started)
        except OSError as e:
            print(f"warning: run.json not updated after this cell ({e}); the run goes on", file=sys.stderr)

    def _stop_all(self, reason: str) -> None:
        """End every running cell (Ctrl-C, a stop signal, an engine error); each is stored as
        interrupted with `reason`."""
        running = list(self.running.items())
        self.running.clear()
        for _, (proc, _, _) in running:
            proc.terminate()  # every group gets SIGTERM now, so their grace periods overlap
        for node, (proc, staged, meta) in running:
            finished = proc.interrupt(reason)
            meta["env_setup_s"] = proc.setup_s
            self._finish(node, staged, meta, finished)

    def _set(self, node: NodeId, state: CellState) -> None:
        self.states[node] = state
        self.progress.update(node, state.state, state.reason, state.duration_s)

    # --- words ----------------------------------------------------------------------------------

    def _name(self, node: NodeId, home: str | None = None) -> str:
        if home is None:
            return f"{node[0]}:{node[1]}" if len(self.graph.notebooks) > 1 else node[1]
        return node_name(node, home)

    def _header(self) -> str:
        env = self.session.env_summary()
        names = ", ".join(self.graph.named)
        return f"attnbench run {names} · label {self.session.label} · env {env['interpreter']} (python {env['python']})"

    def _summary(self, order: list[NodeId], code: int, error: BaseException | None) -> str:
        counts: dict[str, int] = {}
        for node in order:
            state = self.states[node].state if node in self.states else "not started"
            counts[state] = counts.get(state, 0) + 1
        parts = ", ".join(f"{n} {state}" for state, n in counts.items())
        tail = " (interrupted)" if code == 130 else ""
        if error is not None:
            tail = f" (stopped by an error: {type(error).__name__}: {error})"
        return f"{len(order)} cells: {parts}{tail}"


# SIGTERM (a scheduler, `kill`) and SIGHUP (the terminal or ssh session closed) end the run like
# Ctrl-C: the cells run in their own sessions, so nothing else would end them.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def _on_stop_signals(handler) -> dict:
    """Install `handler` for STOP_SIGNALS (main thread only); returns the previous handlers. An
    ignored SIGHUP (`nohup attnbench run ...`) stays ignored."""
    previous = {}
    for sig in STOP_SIGNALS:
        try:
            if signal.getsignal(sig) == signal.SIG_IGN and sig == signal.SIGHUP:
                continue
            previous[sig] = signal.signal(sig, handler)
        except (ValueError, TypeError):  # not the main thread
            pass
    return previous


def _restore_signals(previous: dict) -> None:
    for sig, handler in previous.items():
        try:
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
        except (ValueError, TypeError):
            pass


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt
