"""The scheduler of `attnbench run`: cache hits, launches, failures, Ctrl-C, run.json.

Cells start in topological order. On a machine with a visible GPU every cell runs alone (any cell
may time something on the GPU, and timings must not share it); without a GPU up to `-j N` cells
run at once. A failed cell does not stop cells that do not depend on it; its dependents are
`skipped` with the reason.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from attnbench.notebook import provenance, store
from attnbench.notebook.execute import KILL_GRACE_S, CellProcess, Finished
from attnbench.notebook.launchers import (
    LaunchError,
    cell_command,
    cell_environment,
    missing_deps,
    setup_command,
)
from attnbench.notebook.materialise import materialise
from attnbench.notebook.plan import NodeId, node_name
from attnbench.notebook.session import Session, SetupError

STATE_WORDS = {
    "failed": "failed",
    "timeout": "timed out",
    "interrupted": "was interrupted",
    "skipped": "was skipped",
    "missing-deps": "lacks deps",
}


@dataclass
class CellState:
    state: str  # waiting | hit | running | ran | failed | timeout | interrupted | skipped | missing-deps
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
        self.grace = session.options.kill_grace if session.options.kill_grace is not None else KILL_GRACE_S

    # --- public ---------------------------------------------------------------------------------

    def run(self) -> int:
        """Run the session's cells; the exit code: 0 ok, 1 a cell did not succeed, 130 interrupted."""
        opts = self.session.options
        if opts.jobs < 1:
            raise SetupError(f"-j {opts.jobs}: needs at least 1")
        selected = [n for spec in opts.cells for n in self.graph.find_cell(spec)]
        selected = selected or self.graph.all_named_nodes()
        order = self.graph.order(selected)
        forced = set(selected) if opts.cells else set()
        if opts.force:
            forced |= {n for n in order if n[0] in self.graph.named}
        self._check_launchers(order)
        for name in dict.fromkeys(n[0] for n in order):
            for cell_id, path in materialise(self.graph.notebooks[name], self.session.root).items():
                self.scripts[(name, cell_id)] = path
        self.started = store.now_iso()
        self.progress.begin(self._header(), [(n, self._name(n)) for n in order])
        previous = _on_stop_signals(_raise_interrupt)
        code = 130
        try:
            self._loop(order, forced)
            code = 1 if any(st.state in store.BAD_STATES for st in self.states.values()) else 0
        except KeyboardInterrupt:
            self._interrupt_all()
        finally:
            _restore_signals(previous)
            self._write_runs(order)
            self.progress.end(self._summary(order, code))
        return code

    # --- scheduling -----------------------------------------------------------------------------

    def _loop(self, order: list[NodeId], forced: set[NodeId]) -> None:
        pending = list(order)
        capacity = 1 if self.session.machine.gpu_count > 0 else self.session.options.jobs
        while pending or self.running:
            for node in list(pending):
                ups = [up for _, up in self.graph.upstream[node]]
                if any(
                    up not in self.states or self.states[up].state in ("waiting", "running") for up in ups
                ):
                    continue
                bad = [up for up in ups if self.states[up].state in store.BAD_STATES]
                if bad:
                    words = STATE_WORDS[self.states[bad[0]].state]
                    self._set(node, CellState("skipped", f"upstream {self._name(bad[0], node[0])} {words}"))
                elif node not in forced and self._is_hit(node):
                    self._set(node, CellState("hit"))
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
            if len(self.running) > 1:
                time.sleep(0.05)
            self.progress.tick({n: (p.elapsed, p.latest_line()) for n, (p, _, _) in self.running.items()})

    def _is_hit(self, node: NodeId) -> bool:
        result = store.read_result(self.session.cell_dir(node)) or {}
        return result.get("status") == "ok" and result.get("key") == self.session.keys[node].key

    def _check_launchers(self, order: list[NodeId]) -> None:
        """A bad torchrun setting (several nodes, no rendezvous) stops the run before any cell starts."""
        opts = self.session.options
        for node in order:
            cell = self.graph.cell(node)
            if cell.gpus:
                try:
                    cell_command(opts.env, "x.py", cell.gpus, opts.dist, os.environ, python="python")
                except LaunchError as e:
                    raise SetupError(f"cell {self._name(node)} (gpus={cell.gpus}): {e}") from None

    def _launch(self, node: NodeId) -> None:
        session, opts, cell = self.session, self.session.options, self.graph.cell(node)
        meta = {"started": store.now_iso(), "command": [], "launcher": ""}
        staged = store.StagedCell(session.run_dir(node[0]), cell.id)
        if session.interpreter is not None:
            missing = missing_deps(cell, session.interpreter)
            if missing:
                reason = f"missing in {opts.env.shown()}: {', '.join(missing)}"
                self._finish(node, staged, meta, Finished(None, "missing-deps", reason, 0.0))
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
        script = self.scripts[node]
        argv, meta["launcher"] = cell_command(opts.env, str(script), cell.gpus, opts.dist, os.environ)
        shown_python = opts.env.shown() if opts.env.kind == "python" else None
        meta["command"] = cell_command(
            opts.env, _relative(script, session.root), cell.gpus, opts.dist, os.environ, python=shown_python
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
            )
        except OSError as e:
            self._finish(node, staged, meta, Finished(None, "failed", f"cannot start {argv[0]}: {e}", 0.0))
            return
        self.running[node] = (proc, staged, meta)
        self._set(node, CellState("running"))

    def _finish(self, node: NodeId, staged: store.StagedCell, meta: dict, finished: Finished) -> None:
        session, cell = self.session, self.graph.cell(node)
        key = session.keys[node]
        if not staged.stdout.exists():  # never started: say why where the output would be
            staged.stdout.write_text("")
            staged.stderr.write_text(finished.reason + "\n")
        artifacts = staged.keep_only(cell.outputs)
        result = {
            "cell": cell.id,
            "notebook": node[0],
            "label": session.label,
            "status": finished.status,
            "reason": finished.reason,
            "key": key.key,
            "key_parts": key.parts,
            "params": session.params[node[0]],
            "started": meta["started"],
            "finished": store.now_iso(),
            "duration_s": round(finished.duration_s, 3),
            # uv mode: `uv sync --script` before the cell; not part of its timeout
            "env_setup_s": None if meta.get("env_setup_s") is None else round(meta["env_setup_s"], 3),
            "returncode": finished.returncode,
            "command": meta["command"],
            "gpus": cell.gpus,
            "env": {
                "kind": session.options.env.kind,
                "python": session.envs[node].get("python"),
                "launcher": meta["launcher"],
            },
            "artifacts": artifacts,
            "code": provenance.code_version(session.root),  # the commit that produced this result
        }
        staged.commit(result)
        state = "ran" if finished.status == "ok" else finished.status
        self._set(node, CellState(state, finished.reason, finished.duration_s))

    def _interrupt_all(self) -> None:
        running = list(self.running.items())
        self.running.clear()
        for _, (proc, _, _) in running:
            proc.terminate()  # every group gets SIGTERM now, so their grace periods overlap
        for node, (proc, staged, meta) in running:
            finished = proc.interrupt()
            meta["env_setup_s"] = proc.setup_s
            self._finish(node, staged, meta, finished)

    def _set(self, node: NodeId, state: CellState) -> None:
        self.states[node] = state
        self.progress.update(node, state.state, state.reason, state.duration_s)

    # --- run.json -------------------------------------------------------------------------------

    def _write_runs(self, order: list[NodeId]) -> None:
        """run.json and notebook.md per notebook. A run where every cell of a notebook was a cache hit
        leaves its run.json unchanged, so committed outputs do not churn."""
        for name in dict.fromkeys(n[0] for n in order):
            notebook = self.graph.notebooks[name]
            folder = self.session.run_dir(name)
            previous = store.read_run(folder) or {}
            old_cells = previous.get("cells") or {}
            cells: dict[str, dict] = {}
            for node in (n for n in order if n[0] == name and n in self.states):
                st = self.states[node]
                if st.state == "hit" and (old_cells.get(node[1]) or {}).get("state") in ("hit", "ran"):
                    cells[node[1]] = old_cells[node[1]]
                elif st.state not in ("waiting", "running"):
                    cells[node[1]] = {"state": st.state, "reason": st.reason}
            if not cells:
                continue
            nothing_ran = all(self.states[(name, c)].state == "hit" for c in cells)
            run = {
                "notebook": name,
                "title": notebook.title,
                "label": self.session.label,
                "started": previous.get("started") if nothing_ran and previous else self.started,
                "finished": previous.get("finished") if nothing_ran and previous else store.now_iso(),
                "params": self.session.params[name],
                "machine": self.session.machine_summary(),
                "env": self.session.env_summary(),
            }
            order_ids = [c.id for c in notebook.cells]
            merged = {cid: cells.get(cid) or old_cells.get(cid) for cid in order_ids}
            data = {**run, "cells": {cid: e for cid, e in merged.items() if e is not None}}
            store.write_run(folder, data)
            snapshot = folder / store.SNAPSHOT_FILE
            if not snapshot.is_file() or snapshot.read_text() != notebook.text:
                store.write_text_atomic(snapshot, notebook.text)

    # --- words ----------------------------------------------------------------------------------

    def _name(self, node: NodeId, home: str | None = None) -> str:
        if home is None:
            return f"{node[0]}:{node[1]}" if len(self.graph.notebooks) > 1 else node[1]
        return node_name(node, home)

    def _header(self) -> str:
        env = self.session.env_summary()
        names = ", ".join(self.graph.named)
        return f"attnbench run {names} · label {self.session.label} · env {env['interpreter']} (python {env['python']})"

    def _summary(self, order: list[NodeId], code: int) -> str:
        counts: dict[str, int] = {}
        for node in order:
            state = self.states.get(node, CellState("not started")).state
            counts[state] = counts.get(state, 0) + 1
        parts = ", ".join(f"{n} {state}" for state, n in counts.items())
        tail = " (interrupted)" if code == 130 else ""
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


def _relative(path: Path, root: Path) -> str:
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return path.name
