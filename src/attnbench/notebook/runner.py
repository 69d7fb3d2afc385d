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

from attnbench.notebook import store
from attnbench.notebook.execute import KILL_GRACE_S, CellProcess, Finished
from attnbench.notebook.launchers import LaunchError, cell_command, cell_environment, missing_deps
from attnbench.notebook.materialise import materialise
from attnbench.notebook.plan import NodeId, node_name
from attnbench.notebook.session import Session, SetupError

BAD_STATES = {"failed", "timeout", "interrupted", "skipped", "missing-deps"}
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
        self.s = session
        self.g = session.graph
        self.progress = progress
        self.states: dict[NodeId, CellState] = {}
        self.running: dict[NodeId, tuple[CellProcess, store.StagedCell, dict]] = {}
        self.scripts: dict[NodeId, Path] = {}
        self.grace = session.options.kill_grace if session.options.kill_grace is not None else KILL_GRACE_S

    # --- public ---------------------------------------------------------------------------------

    def run(self) -> int:
        """Run the session's cells; the exit code: 0 ok, 1 a cell did not succeed, 130 interrupted."""
        opts = self.s.options
        if opts.jobs < 1:
            raise SetupError(f"-j {opts.jobs}: needs at least 1")
        selected = [n for spec in opts.cells for n in self.g.find_cell(spec)] or self.g.all_named_nodes()
        order = self.g.order(selected)
        forced = set(selected) if opts.cells else set()
        if opts.force:
            forced |= {n for n in order if n[0] in self.g.named}
        self._check_launchers(order)
        for name in dict.fromkeys(n[0] for n in order):
            for cell_id, path in materialise(self.g.notebooks[name], self.s.root).items():
                self.scripts[(name, cell_id)] = path
        self.started = store.now_iso()
        self.progress.begin(self._header(), [(n, self._name(n)) for n in order])
        previous = _on_sigterm(_raise_interrupt)
        code = 130
        try:
            self._loop(order, forced)
            code = 1 if any(st.state in BAD_STATES for st in self.states.values()) else 0
        except KeyboardInterrupt:
            self._interrupt_all()
        finally:
            _on_sigterm(previous)
            self._write_runs(order)
            self.progress.end(self._summary(order, code))
        return code

    # --- scheduling -----------------------------------------------------------------------------

    def _loop(self, order: list[NodeId], forced: set[NodeId]) -> None:
        pending = list(order)
        capacity = 1 if self.s.machine.gpu_count > 0 else self.s.options.jobs
        while pending or self.running:
            for node in list(pending):
                ups = [up for _, up in self.g.upstream[node]]
                if any(
                    up not in self.states or self.states[up].state in ("waiting", "running") for up in ups
                ):
                    continue
                bad = [up for up in ups if self.states[up].state in BAD_STATES]
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
                    del self.running[node]
                    self._finish(node, staged, meta, finished)
            if len(self.running) > 1:
                time.sleep(0.05)
            self.progress.tick({n: (p.elapsed, p.latest_line()) for n, (p, _, _) in self.running.items()})

    def _is_hit(self, node: NodeId) -> bool:
        result = store.read_result(self.s.cell_dir(node))
        return bool(result) and result.get("status") == "ok" and result.get("key") == self.s.keys[node].key

    def _check_launchers(self, order: list[NodeId]) -> None:
        for node in order:
            cell = self.g.cell(node)
            if cell.gpus:
                try:
                    cell_command(
                        self.s.options.env, "x.py", cell.gpus, self.s.options.dist, os.environ, "python"
                    )
                except LaunchError as e:
                    raise SetupError(f"cell {self._name(node)} (gpus={cell.gpus}): {e}") from None

    def _launch(self, node: NodeId) -> None:
        s, opts, cell = self.s, self.s.options, self.g.cell(node)
        meta = {"started": store.now_iso(), "command": [], "launcher": ""}
        staged = store.StagedCell(s.run_dir(node[0]), cell.id)
        if s.interpreter is not None:
            missing = missing_deps(cell, s.interpreter)
            if missing:
                reason = f"missing in {opts.env.shown()}: {', '.join(missing)}"
                self._finish(node, staged, meta, Finished(None, "missing-deps", reason, 0.0))
                return
        inputs = [
            (need, store.artifacts_dir(s.outputs, up[0], s.label, up[1]))
            for need, up in self.g.upstream[node]
        ]
        env = cell_environment(
            os.environ,
            env=opts.env,
            root=s.root,
            notebook=node[0],
            label=s.label,
            params=s.params[node[0]],
            inputs=inputs,
            cell=cell,
            src_dir=s.src_dir,
        )
        env["ATTNBENCH_OUTPUTS"] = str(s.outputs)
        script = self.scripts[node]
        argv, meta["launcher"] = cell_command(opts.env, str(script), cell.gpus, opts.dist, os.environ)
        shown_python = opts.env.shown() if opts.env.kind == "python" else None
        meta["command"] = cell_command(
            opts.env, _relative(script, s.root), cell.gpus, opts.dist, os.environ, python=shown_python
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
            )
        except OSError as e:
            self._finish(node, staged, meta, Finished(None, "failed", f"cannot start {argv[0]}: {e}", 0.0))
            return
        self.running[node] = (proc, staged, meta)
        self._set(node, CellState("running"))

    def _finish(self, node: NodeId, staged: store.StagedCell, meta: dict, finished: Finished) -> None:
        s, cell = self.s, self.g.cell(node)
        key = s.keys[node]
        if not staged.stdout.exists():  # never started: say why where the output would be
            staged.stdout.write_text("")
            staged.stderr.write_text(finished.reason + "\n")
        artifacts = staged.keep_only(cell.outputs)
        result = {
            "cell": cell.id,
            "notebook": node[0],
            "label": s.label,
            "status": finished.status,
            "reason": finished.reason,
            "key": key.key,
            "key_parts": key.parts,
            "params": s.params[node[0]],
            "started": meta["started"],
            "finished": store.now_iso(),
            "duration_s": round(finished.duration_s, 3),
            "returncode": finished.returncode,
            "command": meta["command"],
            "gpus": cell.gpus,
            "env": {
                "kind": s.options.env.kind,
                "python": s.envs[node].get("python"),
                "launcher": meta["launcher"],
            },
            "artifacts": artifacts,
        }
        staged.commit(result)
        state = "ran" if finished.status == "ok" else finished.status
        self._set(node, CellState(state, finished.reason, finished.duration_s))

    def _interrupt_all(self) -> None:
        for node, (proc, staged, meta) in list(self.running.items()):
            del self.running[node]
            self._finish(node, staged, meta, proc.interrupt())

    def _set(self, node: NodeId, state: CellState) -> None:
        self.states[node] = state
        self.progress.update(node, state.state, state.reason, state.duration_s)

    # --- run.json -------------------------------------------------------------------------------

    def _write_runs(self, order: list[NodeId]) -> None:
        """run.json and notebook.md per notebook. A run where every cell of a notebook was a cache hit
        leaves its run.json unchanged, so committed outputs do not churn."""
        for name in dict.fromkeys(n[0] for n in order):
            notebook = self.g.notebooks[name]
            folder = self.s.run_dir(name)
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
                "label": self.s.label,
                "started": previous.get("started") if nothing_ran and previous else self.started,
                "finished": previous.get("finished") if nothing_ran and previous else store.now_iso(),
                "params": self.s.params[name],
                "machine": self.s.machine_summary(),
                "env": self.s.env_summary(),
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
            return f"{node[0]}:{node[1]}" if len(self.g.notebooks) > 1 else node[1]
        return node_name(node, home)

    def _header(self) -> str:
        env = self.s.env_summary()
        names = ", ".join(self.g.named)
        return f"attnbench run {names} · label {self.s.label} · env {env['interpreter']} (python {env['python']})"

    def _summary(self, order: list[NodeId], code: int) -> str:
        counts: dict[str, int] = {}
        for node in order:
            state = self.states.get(node, CellState("not started")).state
            counts[state] = counts.get(state, 0) + 1
        parts = ", ".join(f"{n} {state}" for state, n in counts.items())
        tail = " (interrupted)" if code == 130 else ""
        return f"{len(order)} cells: {parts}{tail}"


def _on_sigterm(handler):
    """Install a SIGTERM handler (main thread only); returns the previous one."""
    try:
        return signal.signal(signal.SIGTERM, handler)
    except (ValueError, TypeError):  # not the main thread, or no previous Python handler
        return None


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt


def _relative(path: Path, root: Path) -> str:
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return path.name
