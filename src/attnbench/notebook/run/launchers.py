"""How a cell is started: the environment kind (uv | python), torchrun for gpus=N, its env vars.

Pure functions (no processes are started here), so the commands can be unit-tested.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnbench.notebook.document.model import Cell, Need
from attnbench.notebook.run.inputs import env_name as _var  # the one naming rule, shared with inputs()
from attnbench.notebook.run.machine import Interpreter

DEFAULT_MASTER_PORT = "29500"


class LaunchError(ValueError):
    """Bad launch settings (exit code 2, before any cell starts)."""


@dataclass(frozen=True)
class EnvSpec:
    """`--env uv` (every cell in its own `uv run --script` environment) or `--env python[=PATH]`
    (an existing interpreter; default: the one running attnbench)."""

    kind: str  # "uv" | "python"
    python: str | None = None  # the interpreter as given to --env python=PATH

    @classmethod
    def parse(cls, text: str) -> EnvSpec:
        kind, sep, path = text.partition("=")
        if kind == "uv" and not sep:
            return cls("uv")
        if kind == "python":
            if sep and not path:
                raise LaunchError("--env python=PATH needs a path")
            return cls("python", path or None)
        raise LaunchError(f"--env {text!r}: expected uv, python or python=PATH")

    def executable(self) -> str:
        """The interpreter to run (python mode): PATH resolved through $PATH, else sys.executable."""
        if self.python is None:
            return sys.executable
        found = shutil.which(self.python)
        if found is None:
            raise LaunchError(f"--env python={self.python}: no such interpreter")
        return str(Path(found).absolute())

    def shown(self) -> str:
        """The interpreter for run.json/result.json: as given, never an absolute path."""
        if self.kind == "uv":
            return "uv"
        given = self.python or Path(sys.executable).name
        return Path(given).name if os.path.isabs(given) else given


@dataclass(frozen=True)
class DistOptions:
    """torch.distributed.run settings passed through from the command line (None = not given)."""

    nnodes: str | None = None
    node_rank: str | None = None
    rdzv_endpoint: str | None = None
    rdzv_backend: str | None = None
    rdzv_id: str | None = None


def torchrun_args(nproc: int, dist: DistOptions, environ: Mapping[str, str]) -> list[str]:
    """Arguments for `python -m torch.distributed.run` (before the script).

    One node without an endpoint: `--standalone` (a free local port). Several nodes: the command
    line wins, else Slurm's SLURM_NNODES / SLURM_NODEID and MASTER_ADDR / MASTER_PORT; the static
    rendezvous (node rank given) is the default backend, c10d otherwise.
    """
    nnodes = dist.nnodes or environ.get("SLURM_NNODES") or "1"
    endpoint = dist.rdzv_endpoint
    if endpoint is None and environ.get("MASTER_ADDR") and nnodes != "1":
        endpoint = f"{environ['MASTER_ADDR']}:{environ.get('MASTER_PORT') or DEFAULT_MASTER_PORT}"
    if nnodes == "1" and endpoint is None:
        return ["--standalone", "--nnodes", "1", "--nproc-per-node", str(nproc)]
    if endpoint is None:
        raise LaunchError(
            f"{nnodes} nodes need a rendezvous: pass --rdzv-endpoint HOST:PORT or set MASTER_ADDR"
        )
    node_rank = dist.node_rank if dist.node_rank is not None else environ.get("SLURM_NODEID")
    backend = dist.rdzv_backend or ("static" if node_rank is not None else "c10d")
    args = [
        "--nnodes",
        nnodes,
        "--nproc-per-node",
        str(nproc),
        "--rdzv-backend",
        backend,
        "--rdzv-endpoint",
        endpoint,
    ]
    if backend == "static":
        if node_rank is None:
            raise LaunchError("the static rendezvous needs --node-rank (or SLURM_NODEID)")
        args += ["--node-rank", node_rank]
    else:
        args += ["--rdzv-id", dist.rdzv_id or environ.get("SLURM_JOB_ID") or "attnbench"]
    return args


# Runs under `sh`: make the script's uv environment, then start torchrun with that environment's python.
_UV_TORCHRUN = 's="$1"; shift; uv sync --quiet --script "$s" && exec "$(uv python find --script "$s")" -m torch.distributed.run "$@"'


def cell_command(
    env: EnvSpec,
    script: str,
    gpus: int | None,
    dist: DistOptions,
    environ: Mapping[str, str],
    python: str | None = None,
    uv: str = "uv",
) -> tuple[list[str], str]:
    """(argv, launcher) for one cell; launcher is "uv", "python" or "torchrun".

    `python` is the interpreter path for python mode (default: env.executable()); pass display names
    for `script`/`python`/`uv` to get the repo-relative form recorded in result.json.
    """
    if env.kind == "python":
        python = python or env.executable()
        if gpus:
            return [
                python,
                "-m",
                "torch.distributed.run",
                *torchrun_args(gpus, dist, environ),
                script,
            ], "torchrun"
        return [python, script], "python"
    if gpus:
        return [
            "sh",
            "-c",
            _UV_TORCHRUN,
            "sh",
            script,
            *torchrun_args(gpus, dist, environ),
            script,
        ], "torchrun"
    return [uv, "run", "--script", script], "uv"


def setup_command(env: EnvSpec, script: str, uv: str = "uv") -> list[str] | None:
    """What prepares a cell's environment before its timed run: `uv sync --script` in uv mode (the
    environment `uv run --script` then uses); nothing in python mode."""
    return [uv, "sync", "--quiet", "--script", script] if env.kind == "uv" else None


# --- environment variables ------------------------------------------------------------------------


INPUT_VARIABLE_PREFIXES = ("ATTNBENCH_INPUT_", "UVNOTE_INPUT", "UVNOTE_FILE_")  # UVNOTE_INPUT: also _INPUTS


def input_vars(inputs: list[tuple[Need, Path]], notebook: str) -> dict[str, str]:
    """Env vars naming upstream artifacts folders: ATTNBENCH_INPUT_<ID> and UVNOTE_INPUT_<ID> (ID
    upper-cased, '-' -> '_'); a cell of another notebook also gets ATTNBENCH_INPUT_<NOTEBOOK>__<ID>
    (and uvnote's UVNOTE_FILE_<NOTEBOOK>_<ID>), and the short names only when no cell of this notebook
    has the same id. UVNOTE_INPUTS lists the UVNOTE_INPUT_* names, as uvnote does."""
    other = [(n, f) for n, f in inputs if n.notebook and n.notebook != notebook]
    local = [(n, f) for n, f in inputs if (n, f) not in other]
    out: dict[str, str] = {}
    for need, folder in other:
        stem = Path(need.notebook).name  # needs=sub/other.md:x -> notebook "other", as inputs() reads it
        out[f"ATTNBENCH_INPUT_{_var(stem)}__{_var(need.cell)}"] = str(folder)
        out[f"UVNOTE_FILE_{_var(stem)}_{_var(need.cell)}"] = str(folder)  # uvnote's name for it
    for need, folder in other + local:  # local last: it owns the short name
        out[f"ATTNBENCH_INPUT_{_var(need.cell)}"] = out[f"UVNOTE_INPUT_{_var(need.cell)}"] = str(folder)
    uvnote = dict.fromkeys(f"UVNOTE_INPUT_{_var(need.cell)}" for need, _ in inputs)
    if uvnote:  # as uvnote sets it: the names of the input variables in needs= order, comma-separated
        out["UVNOTE_INPUTS"] = ",".join(uvnote)
    return out


def cell_environment(
    base: Mapping[str, str],
    *,
    env: EnvSpec,
    root: Path,
    notebook: str,
    label: str,
    params: dict[str, Any],
    inputs: list[tuple[Need, Path]],
    cell: Cell,
    src_dir: Path | None,
) -> dict[str, str]:
    """The environment of a cell process: the engine's, plus inputs, params and the cell's env=."""
    out = {k: v for k, v in base.items() if not k.startswith(INPUT_VARIABLE_PREFIXES)}
    if env.kind == "uv":
        out.pop("VIRTUAL_ENV", None)  # the engine's project venv is not the script's environment
    elif src_dir is not None:
        out["PYTHONPATH"] = os.pathsep.join(p for p in (str(src_dir), base.get("PYTHONPATH", "")) if p)
    out.update(input_vars(inputs, notebook))
    out.update(
        ATTNBENCH_PARAMS=json.dumps(params),
        ATTNBENCH_NOTEBOOK=notebook,
        ATTNBENCH_LABEL=label,
        ATTNBENCH_ROOT=str(root),
        PYTHONUNBUFFERED="1",
    )
    out.update(cell.env)
    return out


def missing_deps(cell: Cell, interpreter: Interpreter) -> list[str]:
    """The cell's deps that `interpreter` lacks or has in a version outside the specifier."""
    if not cell.deps:
        return []
    from packaging.requirements import Requirement

    missing = []
    for dep in cell.deps:
        req = Requirement(dep)
        if req.name.lower() == "attnbench":
            continue  # comes from the repository through PYTHONPATH
        if req.marker is not None and not req.marker.evaluate(dict(interpreter.markers)):
            continue
        have = interpreter.dists.get(req.name)
        if have is None:
            missing.append(dep)
        elif req.specifier and not req.specifier.contains(have, prereleases=True):
            missing.append(f"{dep} (found {have})")
    return missing


def dist_names(cells: list[Cell]) -> list[str]:
    """Every distribution name the cells declare (for one interpreter probe)."""
    if not any(cell.deps for cell in cells):
        return []  # and packaging, a noticeable import, stays unloaded
    from packaging.requirements import Requirement

    return sorted({Requirement(dep).name for cell in cells for dep in cell.deps})
