"""`inputs(cell)`: where a cell finds an upstream cell's artifacts, inside the engine, in an exported
notebook or standalone. Light on purpose: every cell imports it (re-exported as `attnbench.inputs`).

The environment variable names come from one rule, `env_name`, which the launchers use too.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from attnbench.notebook.document.model import env_name  # the one naming rule


def inputs(cell: str) -> Path:
    """The artifacts folder of upstream cell `cell` ("id" or "other.md:id").

    Inside the engine: $ATTNBENCH_INPUT_<ID> (for another notebook's cell also
    $ATTNBENCH_INPUT_<NOTEBOOK>__<ID>). In an exported notebook ($ATTNBENCH_INPUTS_CWD set by its
    params cell) a cell of the same notebook wrote its files into the kernel's working directory. Standalone (`uv run cells/<nb>/<id>.py`): the stored result
    outputs/<notebook>/<label>/<id>/artifacts of the project found from $ATTNBENCH_ROOT or by walking
    up from the working directory and the script; label = $ATTNBENCH_LABEL or this machine's label,
    else the only label that has that cell.
    """
    notebook, sep, cell_id = cell.rpartition(":")
    notebook = Path(notebook).name.removesuffix(".md") if sep else None
    current = os.environ.get("ATTNBENCH_NOTEBOOK")
    names = []
    if notebook:
        names.append(f"ATTNBENCH_INPUT_{env_name(notebook)}__{env_name(cell_id)}")
    if not notebook or notebook == current:
        names += [f"ATTNBENCH_INPUT_{env_name(cell_id)}", f"UVNOTE_INPUT_{env_name(cell_id)}"]
    for name in names:
        if os.environ.get(name):
            return Path(os.environ[name])
    if os.environ.get("ATTNBENCH_INPUTS_CWD") and (not notebook or notebook == current):
        return Path.cwd()  # an exported notebook in Jupyter/papermill: all cells share one folder
    return _stored_artifacts(cell, notebook or current, cell_id, names)


def _project_root() -> Path | None:
    if os.environ.get("ATTNBENCH_ROOT"):
        return Path(os.environ["ATTNBENCH_ROOT"])
    starts = [Path.cwd()]
    main_file = getattr(sys.modules.get("__main__"), "__file__", None)
    if main_file:
        starts.insert(0, Path(main_file).resolve().parent)
    for start in starts:
        for folder in (start, *start.parents):
            if (folder / "outputs").is_dir() and (
                (folder / "cells").is_dir() or (folder / "notebooks").is_dir()
            ):
                return folder
    return None


def _stored_artifacts(cell: str, notebook: str | None, cell_id: str, names: list[str]) -> Path:
    looked = f"attnbench.inputs({cell!r}): ${' / $'.join(names)} not set"
    if not notebook:
        raise FileNotFoundError(
            f"{looked}, and no notebook given (use 'name.md:{cell_id}' or set ATTNBENCH_NOTEBOOK)"
        )
    root = _project_root()
    if root is None:
        raise FileNotFoundError(
            f"{looked}, and no project folder (with outputs/ and cells/ or notebooks/) "
            "found above the working directory; set ATTNBENCH_ROOT"
        )
    outputs = Path(os.environ.get("ATTNBENCH_OUTPUTS") or root / "outputs")
    label = os.environ.get("ATTNBENCH_LABEL")
    if not label:
        from attnbench.notebook.run.machine import detect_label  # runs nvidia-smi; only in standalone use

        label = detect_label()
    wanted = outputs / notebook / label / cell_id
    if (wanted / "result.json").is_file():
        return wanted / "artifacts"
    labels = sorted(p.parent.parent.name for p in outputs.glob(f"{notebook}/*/{cell_id}/result.json"))
    if len(labels) == 1:
        return outputs / notebook / labels[0] / cell_id / "artifacts"
    found = f"labels that have it: {', '.join(labels)}" if labels else "no label has it"
    raise FileNotFoundError(
        f"{looked}, and {wanted} has no result ({found}); run "
        f"`attnbench run notebooks/{notebook}.md` first or set ATTNBENCH_LABEL"
    )
