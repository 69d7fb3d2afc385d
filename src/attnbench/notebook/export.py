"""Notebook → Jupyter (.ipynb) or a py:percent script, through jupytext.

The export is laid out for papermill: the notebook's params are assignments in a first code cell
tagged `parameters` (papermill injects its overrides right after it), then an untagged cell rebuilds
`params = {...}` from those variables so cell bodies that read `params["key"]` see the overrides too.
Each cell keeps its id and attributes in `metadata["attnbench"]`; shown-only code stays Markdown.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from attnbench.notebook.document.model import Cell, Notebook
from attnbench.notebook.document.parse import parse_notebook
from attnbench.notebook.run.materialise import workdir_prelude

# --to value → (file suffix, jupytext format)
FORMATS = {"ipynb": (".ipynb", "ipynb"), "py:percent": (".py", "py:percent")}
NBFORMAT_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")  # nbformat 4.5 cell ids


def export_notebook(nb_path: Path, out_path: Path | None = None, to: str = "ipynb") -> Path:
    """Write `nb_path` as `to` ("ipynb" or "py:percent"); default output: beside it, same stem."""
    try:
        import jupytext
    except ImportError as err:  # an optional dependency: the `export` extra
        raise ImportError(
            f"attnbench export needs jupytext and nbformat (pip install 'attnbench[export]'): {err}"
        ) from err
    if to not in FORMATS:
        raise ValueError(f"--to {to!r} is not supported; choose one of: {', '.join(FORMATS)}")
    nb_path = Path(nb_path)
    suffix, fmt = FORMATS[to]
    out_path = Path(out_path) if out_path is not None else nb_path.with_suffix(suffix)
    if out_path.resolve() == nb_path.resolve():
        raise ValueError(f"{out_path}: the export would overwrite the notebook itself")
    jupyter = to_jupyter(parse_notebook(nb_path))
    out_path.parent.mkdir(parents=True, exist_ok=True)
    jupytext.write(jupyter, out_path, fmt=fmt)
    return out_path


def to_jupyter(notebook: Notebook):
    """The nbformat v4 notebook for `notebook` (no I/O)."""
    from nbformat import v4

    header = f"# {notebook.title}" + (f"\n\n{notebook.description}" if notebook.description else "")
    # (id, cell): stable ids keep re-exports diff-free; runnable cells keep their own id.
    cells = [
        ("title", v4.new_markdown_cell(header)),
        (
            "parameters",
            v4.new_code_cell(_parameters_source(notebook.params), metadata={"tags": ["parameters"]}),
        ),
        (
            "params",
            v4.new_code_cell(_params_dict_source(notebook), metadata={"attnbench": {"role": "params"}}),
        ),
    ]
    for block in notebook.blocks:
        if block.kind == "markdown" and block.text.strip():
            cells.append((f"md-{block.line}", v4.new_markdown_cell(block.text.strip("\n"))))
        elif block.kind == "code":
            cells.append((f"code-{block.line}", v4.new_markdown_cell(_fenced(block.text, block.language))))
        elif block.kind == "cell" and block.cell is not None:
            cells.append((block.cell.id, _code_cell(block.cell)))
    _assign_ids(cells)
    return v4.new_notebook(
        cells=[cell for _, cell in cells],
        metadata={
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
            "language_info": {"name": "python"},
            "attnbench": {"notebook": notebook.name, "source": notebook.path.name, "title": notebook.title},
        },
    )


def _code_cell(cell: Cell):
    from nbformat import v4

    meta: dict[str, Any] = {"id": cell.id, "line": cell.line}
    optional = {
        "deps": cell.deps,
        "needs": [str(n) for n in cell.needs],
        "outputs": cell.outputs,
        "timeout": cell.timeout,
        "gpus": f"{cell.gpus}+" if cell.gpus_or_more else cell.gpus,  # as written: N+ resolves per label
        "env": cell.env,
        "requires-python": cell.requires_python,
        "script": cell.script,  # uvnote's script=: the code below was read from this file
        "id_from_code": cell.id_from_code,  # no id= in the notebook: uvnote's id from the code's hash
    }
    meta.update({key: value for key, value in optional.items() if value})
    metadata: dict[str, Any] = {"attnbench": meta}
    hidden = {"source_hidden": cell.collapse_code, "outputs_hidden": cell.collapse_output}
    if any(hidden.values()):  # Jupyter's own collapse flags
        metadata["jupyter"] = {key: True for key, value in hidden.items() if value}
    return v4.new_code_cell(cell.source.strip("\n"), metadata=metadata)


def _assign_ids(cells: list[tuple[str, Any]]) -> None:
    """Runnable cells get their own id (unique already); the others a stable id that avoids those."""
    own = {wanted for wanted, cell in cells if cell.metadata.get("attnbench", {}).get("id") == wanted}
    taken: set[str] = set()
    for wanted, cell in cells:
        candidate, n = wanted, 1
        while candidate in taken or (
            candidate in own and candidate != cell.metadata.get("attnbench", {}).get("id")
        ):
            n += 1
            candidate = f"{wanted}-{n}"
        if NBFORMAT_ID.fullmatch(candidate):
            cell["id"] = candidate  # else nbformat's random id stays
        taken.add(cell["id"])


def _parameters_source(params: dict[str, Any]) -> str:
    lines = [f"{name} = {_literal(value)}" for name, value in params.items()]
    return "\n".join(lines) or "# this notebook has no params"


def _params_dict_source(notebook: Notebook) -> str:
    """Like the engine's prelude: `params` as a dict, and the notebook name for attnbench.inputs()."""
    items = ", ".join(f"{json.dumps(name)}: {name}" for name in notebook.params)
    return "\n".join(
        [
            "# Rebuilt from the variables above, so papermill's overrides reach params[...] too.",
            f"params = {{{items}}}",
            "import os as _os, sys as _sys",
            f'_os.environ.setdefault("ATTNBENCH_NOTEBOOK", {json.dumps(notebook.name)})',
            "# One kernel runs every cell in one folder: upstream artifacts of this notebook are right here.",
            '_os.environ.setdefault("ATTNBENCH_INPUTS_CWD", "1")',
            *workdir_prelude(notebook.name, None),  # that folder: .scratch/<notebook>/, not the current one
        ]
    )


def _literal(value: Any) -> str:
    """A Python literal for a plain-data param (parse.py allows str, number, bool, null, list, mapping)."""
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)  # a JSON string is a valid Python string literal
    if value is None or isinstance(value, (bool, int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_literal(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_literal(str(k))}: {_literal(v)}" for k, v in value.items()) + "}"
    raise ValueError(f"param value {value!r} ({type(value).__name__}) has no Python literal form")


def _fenced(code: str, language: str) -> str:
    longest = max((len(run) for run in re.findall(r"`{3,}", code)), default=2)
    fence = "`" * (longest + 1)
    return f"{fence}{language}\n{code.rstrip(chr(10))}\n{fence}"
