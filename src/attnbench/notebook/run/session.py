"""Everything a run or a status check needs before any cell starts: graph, params, machine,
interpreter and label; and each cell's cache key and verdict on its stored result (Judgment), worked
out when asked, since a key depends on what the upstream cells stored. Any problem in prepare()
stops the command (exit 2)."""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from attnbench.notebook.document.model import Notebook
from attnbench.notebook.run import machine as machine_mod
from attnbench.notebook.run import store
from attnbench.notebook.run.graph import Graph, NodeId, load_graph, node_name, resolve_params
from attnbench.notebook.run.launchers import DistOptions, EnvSpec, LaunchError, dist_names
from attnbench.notebook.run.machine import Interpreter, Machine, ProbeError
from attnbench.notebook.run.plan import SOURCES_CHANGED, CacheKey, cell_key, stale_reasons
from attnbench.notebook.run.project import HOST_DIR, ProjectError, host_checkout, indexed_package
from attnbench.notebook.run.records import CellResult, RecordError, RunRecord, Status
from attnbench.notebook.run.sources import SourceIndex


@dataclass
class Options:
    env: EnvSpec = field(default_factory=lambda: EnvSpec("uv"))
    label: str | None = None
    outputs: Path | None = None
    params: dict[str, Any] = field(default_factory=dict)  # -p overrides
    cells: list[str] = field(default_factory=list)  # --cell specs
    force: bool = False
    # Only the --cell cells run; the results they need are used as they are, never re-run here:
    # "elsewhere" (--reuse-elsewhere) those of the code of now measured on another machine or
    # environment: how a report's presenting cells are refreshed away from the GPU that measured;
    # "stale" (--reuse-stale) also those measured by older code: the named cells present them with the
    # presenting code of now and stay stale until those are measured again.
    reuse: str = ""  # "" | "elsewhere" | "stale"

    jobs: int = 1
    dist: DistOptions = field(default_factory=DistOptions)
    kill_grace: float | None = None
    lock_timeout: float | None = None  # None: wait for another run of the notebook and label to end


@dataclass(frozen=True)
class Judgment:
    """A cell's key now, and whether its stored result (if any) is current under it."""

    key: CacheKey
    stored: CellResult | None
    reasons: list[str]  # why the stored result is not current; [] when it is (or none is stored)
    elsewhere: list[str] = field(default_factory=list)  # those of `reasons` that say only "another
    # machine or environment measured it" (not staleness: the code it ran is the code now)

    @property
    def code_reasons(self) -> list[str]:
        """The reasons that say the code (source, deps, params, attnbench, upstream data) changed."""
        return [r for r in self.reasons if r not in self.elsewhere]

    @property
    def current(self) -> bool:
        return self.stored is not None and self.stored.status == Status.OK and not self.reasons

    @property
    def measured_elsewhere(self) -> bool:
        """A good stored result of the code of now, measured on another machine or environment."""
        ok = self.stored is not None and self.stored.status == Status.OK
        return ok and bool(self.reasons) and not self.code_reasons

    def reusable(self, mode: str) -> bool:
        """Used as it is under the --reuse mode `mode` ("" | "elsewhere" | "stale")."""
        ok = self.stored is not None and self.stored.status == Status.OK
        return self.current or (mode == "elsewhere" and self.measured_elsewhere) or (mode == "stale" and ok)

    def key_for_dependents(self, mode: str) -> str:
        """effective_key, except that a stale result reused under --reuse-stale is keyed as stored: the
        dependents run on it say so (they are stale until it is measured again)."""
        if mode == "stale" and self.reusable(mode) and self.stored is not None:
            return self.stored.key
        return self.effective_key

    @property
    def effective_key(self) -> str:
        """What dependents key on: the stored result's key while it is current or only measured
        elsewhere (a result stored by an older engine keeps its key; a dependent keys on the result it
        read, wherever it was measured, so its key is the same on every machine), else the key the
        cell will be stored under."""
        if self.stored is not None and (self.current or self.measured_elsewhere):
            return self.stored.key
        return self.key.key


ENVIRONMENT_REASONS = ("environment changed", "machine fingerprint changed")  # stale_reasons' words


@dataclass
class Session:
    graph: Graph
    options: Options
    root: Path
    outputs: Path
    label: str
    machine: Machine
    interpreter: Interpreter | None  # python mode: the probed interpreter
    params: dict[str, dict[str, Any]]  # resolved, per notebook
    envs: dict[NodeId, dict[str, Any]]  # the env part of each cell's key
    sources: SourceIndex
    src_dir: Path | None  # the checkout's src/ (prepended to PYTHONPATH in python mode); None if installed
    _judged: dict[NodeId, Judgment] = field(default_factory=dict)
    _attnbench: dict[NodeId, str] = field(default_factory=dict)
    _too_few: dict[int, dict[NodeId, str]] = field(default_factory=dict)  # GPU count -> {cell: why}

    def judge(self, node: NodeId) -> Judgment:
        """The cell's key from its upstream cells' effective keys and stored artifacts, and whether
        its stored result is current. Remembered until forget() of it or of a cell upstream of it;
        RecordError on a bad result.json."""
        if node not in self._judged:
            cell = self.graph.cell(node)
            ups = [(str(need), up, self.judge(up)) for need, up in self.graph.upstream[node]]
            stored = store.load_result(self.cell_dir(node))
            if node not in self._attnbench:
                self._attnbench[node] = self._sources_hash(cell.source, stored)
            key = cell_key(
                cell,
                self.params[node[0]],
                {need: judged.key_for_dependents(self.options.reuse) for need, _, judged in ups},
                self._attnbench[node],
                self.envs[node],
                self.machine.fingerprint,
                inputs={need: store.artifacts_digest(self.cell_dir(up)) for need, up, _ in ups},
            )
            reasons = []
            if stored is not None:
                finished = {
                    need: judged.stored.finished if judged.stored else None for need, _, judged in ups
                }
                reasons = self._named_sources(stale_reasons(stored, key, self.params[node[0]], finished),
                                              cell.source, stored)  # fmt: skip
            # an upstream cell whose result is stale only for its machine or environment changes its
            # dependents' keys for that reason alone
            env_only = {
                need for need, _, j in ups if j.stored is not None and j.reasons and not j.code_reasons
            }
            elsewhere = [
                r
                for r in reasons
                if r.startswith(ENVIRONMENT_REASONS)
                or any(r == f"upstream {need} changed" for need in env_only)
            ]
            self._judged[node] = Judgment(key, stored, reasons, elsewhere)
        return self._judged[node]

    def _named_sources(self, reasons: list[str], source: str, stored: CellResult) -> list[str]:
        """ "attnbench sources changed" names the parts whose code changed since the commit the result
        was measured at (read from git), where that commit is known and clean."""
        code = stored.code or {}
        if SOURCES_CHANGED not in reasons or not code.get("commit") or code.get("dirty") is True:
            return reasons
        then = self.sources.as_of(code["commit"])
        parts = self.sources.changed_parts(then, source) if then is not None else []
        if not parts:
            return reasons
        named = f"{SOURCES_CHANGED} ({', '.join(parts)})"
        return [named if r == SOURCES_CHANGED else r for r in reasons]

    def _sources_hash(self, source: str, stored: CellResult | None) -> str:
        """The hash of the package parts the cell uses. A result keyed by an earlier way of hashing them
        (the index's rules changed, the files did not) keeps its stored hash when those parts, hashed
        the way of now, are the same at the commit it was measured at (read from git) as today."""
        now = self.sources.hash_for(source)
        was = stored.key_parts.get("attnbench") if stored else None
        code = (stored.code or {}) if stored else {}
        if was and was != now and code.get("commit") and code.get("dirty") is not True:
            then = self.sources.as_of(code["commit"])
            if then is not None and then.hash_for(source) == now:
                return was
        return now

    def too_few_gpus(self, node: NodeId, have: int, starts: Callable[[NodeId], bool] | None = None) -> str:
        """Why `node` cannot be measured on a machine with `have` GPUs: it runs more processes than that
        (machine.too_few_gpus), or it reads a cell left out for that, however far upstream; "" when it
        can. The one walk for every caller: `status`, the site and the batches ask of the label's stored
        machine (label_gpus_stored) with every cell counted; a run asks of this machine, passing
        `starts` (which cells it would start: a stored result it takes needs no GPUs, so a cell that
        does not start is never left out; preflight.left_out_for_gpus)."""
        if starts is None:  # every cell counts: one memo per GPU count, shared by every question
            seen = self._too_few.setdefault(have, {})
            return self._gpu_shortfall(node, have, lambda _: True, "the label's machine", seen)
        return self._gpu_shortfall(node, have, starts, "this machine", {})

    def _gpu_shortfall(
        self, node: NodeId, have: int, starts: Callable[[NodeId], bool], machine: str, seen: dict[NodeId, str]
    ) -> str:
        if node not in seen:
            why = ""
            if starts(node):
                why = machine_mod.too_few_gpus(self.graph.cell(node).gpus, have, self.label)
                for _, up in self.graph.upstream[node] if not why else ():
                    if self._gpu_shortfall(up, have, starts, machine, seen):
                        why = f"reads {node_name(up, node[0])}, which needs more GPUs than {machine} has"
                        break
            seen[node] = why
        return seen[node]

    def label_gpus_stored(self, notebook: str, run: RunRecord | None = None) -> int:
        """The GPUs of the machine the label's results of `notebook` came from: its run.json's (a run under
        --reuse-elsewhere keeps the measuring machine's; `run` when the caller has read it), else what
        the label's name says (machine.label_gpus). RecordError on a broken run.json."""
        run = run if run is not None else store.load_run(self.run_dir(notebook))
        count = run.machine.get("gpu_count") if run else None  # validated when run.json was read
        return count if count is not None else machine_mod.label_gpus(self.label)

    def forget(self, node: NodeId) -> None:
        """After `node` ran: what it stored changed, so its judgment and those of the cells downstream
        of it (their keys hold its key and artifacts) are worked out again; no other judgment reads
        what it stored. The walk stops at a cell not judged: judge() judges a cell's upstream cells
        before the cell, and this drops a cell with its downstream, so none downstream of it is."""
        todo = [node]
        while todo:
            current = todo.pop()
            if self._judged.pop(current, None) is not None:
                todo.extend(self.graph.downstream.get(current, ()))

    def run_dir(self, notebook: str) -> Path:
        return store.run_dir(self.outputs, notebook, self.label)

    def cell_dir(self, node: NodeId) -> Path:
        return store.cell_dir(self.outputs, node[0], self.label, node[1])

    def machine_summary(self) -> dict[str, Any]:
        interp = self.interpreter
        m = self.machine
        python = interp.python if interp else next(iter(self.envs.values()), {}).get("python")
        return {
            "gpu": m.gpu,
            "gpu_count": m.gpu_count,
            "driver": m.driver,
            "cuda": interp.cuda if interp else None,
            "torch": interp.torch if interp else None,
            "python": python,
            "platform": m.platform,
            "cpu": m.cpu,
            "fingerprint": m.fingerprint,
        }

    def env_summary(self) -> dict[str, Any]:
        summary = self.machine_summary()
        return {
            "kind": self.options.env.kind,
            "python": summary["python"],
            "interpreter": self.options.env.shown(),
        }


class SetupError(Exception):
    """A problem with the command's settings or the environment (exit code 2, no cell started)."""


def changed_params(graph, params: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The params some named notebook runs with that differ from its front-matter default."""
    changed: dict[str, Any] = {}
    for name in graph.named:
        defaults = graph.notebooks[name].params
        for key, value in params[name].items():
            if defaults.get(key) != value:
                changed[key] = value
    return changed


def override_label(label: str, changed: dict[str, Any]) -> str:
    """`cpu` run with `-p profile=smoke -p seq_lens=[4224]` is `cpu+profile-smoke+seq_lens-4224`: results
    of overridden params have their own folder, never the label's default results (--label chooses
    one). A long or unwieldy suffix is a hash of the overrides."""
    if not changed:
        return label
    parts = []
    for key in sorted(changed):
        text = json.dumps(changed[key], sort_keys=True) if not isinstance(changed[key], str) else changed[key]
        parts.append(re.sub(r"[^A-Za-z0-9_.]+", "-", f"{key}-{text}").strip("-."))
    suffix = "+".join(parts)
    if len(suffix) > 48 or not suffix:
        digest = hashlib.sha256(json.dumps(changed, sort_keys=True, default=str).encode()).hexdigest()
        suffix = f"p-{digest[:10]}"
    return f"{label}+{suffix}"


def resolve_gpus_or_more(graph: Graph, label: str, outputs: Path, here: int) -> None:
    """Each `gpus=N+` cell's process count under `label`, at least N: the GPUs of the machine the label's
    results came from (its run.json); for a label with none yet, this machine's `here` (what its first run
    will record), else, on a machine without GPUs, what the label's name says (machine.label_gpus: a CPU
    label runs N ranks on gloo). The graph gets copies of those notebooks: the parsed ones may serve
    another label."""
    for name, notebook in list(graph.notebooks.items()):
        if not any(c.gpus_or_more for c in notebook.cells):
            continue
        try:
            run = store.load_run(outputs / name / label)
        except RecordError:
            run = None  # a broken run.json is reported where the label's results are read
        count = run.machine.get("gpu_count") if run else None
        count = (here or machine_mod.label_gpus(label)) if count is None else count
        blocks = [replace(b, cell=replace(b.cell, gpus=max(b.cell.gpus or 1, count)))
                  if b.cell is not None and b.cell.gpus_or_more else b for b in notebook.blocks]  # fmt: skip
        graph.notebooks[name] = replace(notebook, blocks=blocks)


def prepare(notebooks: list[Path | Notebook], options: Options) -> Session:
    """Load the notebooks (paths, or notebooks already parsed) and everything a run needs. Raises
    NotebookError or SetupError."""
    graph = load_graph(notebooks)
    params = resolve_params(graph, options.params)
    root = store.find_root(graph.notebooks[graph.named[0]].path)
    outputs = Path(options.outputs).resolve() if options.outputs else root / "outputs"
    if outputs.exists() and not outputs.is_dir():
        raise SetupError(f"--outputs {options.outputs or outputs}: is a file, not a folder")
    machine = machine_mod.detect_machine()
    try:
        label = store.check_label(options.label or machine_mod.label_of(machine))
        if options.label is None:  # -p overrides never land on the machine's default results
            label = store.check_label(override_label(label, changed_params(graph, params)))
    except ValueError as e:
        raise SetupError(str(e)) from None
    resolve_gpus_or_more(graph, label, outputs, machine.gpu_count)
    # Cells import inputs() from the engine's host package. Only a source checkout's src/ goes on
    # PYTHONPATH: an installed package's parent is a site-packages folder, which must not leak into
    # another interpreter.
    checkout = host_checkout()
    src_dir = HOST_DIR.parent if checkout is not None and HOST_DIR.parent.name == "src" else None
    all_nodes = graph.order([n for name in graph.notebooks for n in graph.nodes(name)])
    cells = [graph.cell(n) for n in all_nodes]
    interpreter = None
    envs: dict[NodeId, dict[str, Any]] = {}
    try:
        if options.env.kind == "python":
            probe_env = dict(os.environ)
            if src_dir is not None:
                probe_env["PYTHONPATH"] = os.pathsep.join(
                    p for p in (str(src_dir), os.environ.get("PYTHONPATH")) if p
                )
            interpreter = machine_mod.probe_interpreter(
                options.env.executable(), dist_names(cells), probe_env
            )
            for node, cell in zip(all_nodes, cells):
                deps = {name: interpreter.dists.get(name) for name in dist_names([cell])}
                envs[node] = {
                    "kind": "python",
                    "python": interpreter.python,
                    "torch": interpreter.torch,
                    "cuda": interpreter.cuda,
                    "deps": deps,
                }
        else:
            versions: dict[str, str] = {}
            for node, cell in zip(all_nodes, cells):
                wanted = cell.requires_python or ">=3.11"
                if wanted not in versions:
                    versions[wanted] = machine_mod.uv_python_version(wanted)
                envs[node] = {"kind": "uv", "python": versions[wanted]}
    except (ProbeError, LaunchError) as e:
        raise SetupError(str(e)) from None
    try:
        package = indexed_package(root)
    except ProjectError as e:
        raise SetupError(str(e)) from None
    sources = (
        SourceIndex.of(package.folder, package.name, package.engine_part)
        if package is not None
        else SourceIndex({}, root)
    )
    return Session(graph, options, root, outputs, label, machine, interpreter, params, envs, sources, src_dir)
