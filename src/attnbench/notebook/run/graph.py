"""The dependency graph over (notebook, cell) and its order; each notebook's resolved params.

A node is `(notebook name, cell id)`. `needs=other.md:cell` loads `other.md` from the referring
notebook's folder. A missing notebook or cell and a cycle are NotebookErrors that stop the run
before any cell starts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attnbench.notebook.document.model import Cell, Need, Notebook, NotebookError
from attnbench.notebook.document.parse import front_matter_line, parse_notebook
from attnbench.notebook.run import store

NodeId = tuple[str, str]  # (notebook name, cell id)


def node_name(node: NodeId, home: str | None = None) -> str:
    """'cell' inside notebook `home`, 'nb.md:cell' elsewhere."""
    return node[1] if node[0] == home else f"{node[0]}.md:{node[1]}"


@dataclass
class Graph:
    notebooks: dict[str, Notebook]  # by name; the named ones first, in command-line order
    named: list[str]  # names of the notebooks given on the command line
    upstream: dict[NodeId, list[tuple[Need, NodeId]]] = field(default_factory=dict)
    downstream: dict[NodeId, list[NodeId]] = field(default_factory=dict)  # the cells that need each one

    def cell(self, node: NodeId) -> Cell:
        return self.notebooks[node[0]].cell(node[1])

    def nodes(self, notebook: str) -> list[NodeId]:
        return [(notebook, c.id) for c in self.notebooks[notebook].cells]

    def all_named_nodes(self) -> list[NodeId]:
        return [node for name in self.named for node in self.nodes(name)]

    def order(self, selected: list[NodeId]) -> list[NodeId]:
        """`selected` and everything they need, upstream first; otherwise in the given order."""
        done: dict[NodeId, None] = {}

        def visit(node: NodeId) -> None:
            if node in done:
                return
            for _, up in self.upstream[node]:
                visit(up)
            done[node] = None

        for node in selected:
            visit(node)
        return list(done)

    def find_cell(self, spec: str) -> list[NodeId]:
        """Nodes named by `--cell`: 'id' (in any named notebook) or 'nb.md:id'."""
        notebook, sep, cell_id = spec.rpartition(":")
        names = [notebook.removesuffix(".md").rsplit("/", 1)[-1]] if sep else self.named
        found = [(n, cell_id) for n in names if n in self.notebooks and _has_cell(self.notebooks[n], cell_id)]
        if not found:
            nb = self.notebooks[names[0]] if names and names[0] in self.notebooks else None
            known = ", ".join(c.id for c in nb.cells) if nb else "none"
            where = nb.path if nb else self.notebooks[self.named[0]].path
            raise NotebookError(where, None, f"--cell {spec}: no such cell; cells: {known}")
        return found


def _has_cell(notebook: Notebook, cell_id: str) -> bool:
    return any(c.id == cell_id for c in notebook.cells)


def load_graph(named: list[Path | Notebook]) -> Graph:
    """The named notebooks (paths, or notebooks already parsed) and every notebook they reach through
    `other.md:cell`, parsed; needs checked."""
    graph = Graph(notebooks={}, named=[])
    by_name_path: dict[str, Path] = {}

    def load(given: Path | Notebook, line_ref: tuple[Path, int] | None = None) -> Notebook:
        path = given.path if isinstance(given, Notebook) else Path(given)
        name = path.stem
        try:
            store.check_notebook_name(name)
        except ValueError as e:
            raise NotebookError(*(line_ref or (path, None)), str(e)) from None
        if name in graph.notebooks:
            if by_name_path[name] != path.resolve():
                where = line_ref or (path, None)
                raise NotebookError(
                    *where,
                    f"two notebooks named {name!r}: {by_name_path[name]} and {path} "
                    "(cells/ and outputs/ are keyed by the notebook's name)",
                )
            return graph.notebooks[name]
        notebook = given if isinstance(given, Notebook) else parse_notebook(path)
        graph.notebooks[name] = notebook
        by_name_path[name] = path.resolve()
        return notebook

    for given in named:
        notebook = load(given)
        if notebook.name not in graph.named:
            graph.named.append(notebook.name)
    queue = list(graph.notebooks.values())
    while queue:
        notebook = queue.pop(0)
        for cell in notebook.cells:
            edges = []
            for need in cell.needs:
                target = notebook
                if need.notebook and Path(need.notebook).name != notebook.name:
                    other = notebook.path.parent / f"{need.notebook}.md"
                    if not other.is_file():
                        raise NotebookError(
                            notebook.path, cell.line, f"needs={need}: no notebook {other} (cell {cell.id!r})"
                        )
                    fresh = other.stem not in graph.notebooks
                    target = load(other, (notebook.path, cell.line))
                    if fresh:
                        queue.append(target)
                if not _has_cell(target, need.cell):
                    known = ", ".join(c.id for c in target.cells) or "none"
                    raise NotebookError(
                        notebook.path,
                        cell.line,
                        f"needs={need}: no cell {need.cell!r} in {target.path.name}; cells: {known}",
                    )
                edges.append((need, (target.name, need.cell)))
            graph.upstream[(notebook.name, cell.id)] = edges
            for _, up in edges:
                graph.downstream.setdefault(up, []).append((notebook.name, cell.id))
    _check_cycles(graph)
    return graph


def _check_cycles(graph: Graph) -> None:
    state: dict[NodeId, int] = {}  # 1 = on the current path, 2 = done
    path: list[NodeId] = []

    def visit(node: NodeId) -> None:
        state[node] = 1
        path.append(node)
        for _, up in graph.upstream[node]:
            if state.get(up) == 1:
                cycle = path[path.index(up) :] + [up]
                home = cycle[0][0]
                shown = " -> ".join(node_name(n, home) for n in cycle)
                first = graph.notebooks[home]
                raise NotebookError(first.path, first.cell(cycle[0][1]).line, f"needs form a cycle: {shown}")
            if up not in state:
                visit(up)
        path.pop()
        state[node] = 2

    for node in graph.upstream:
        if node not in state:
            visit(node)


# --- params ---------------------------------------------------------------------------------------


def resolve_params(graph: Graph, overrides: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Resolved params per notebook. An override applies to every loaded notebook that declares the
    key; a key that none of the named notebooks declares is a NotebookError at its `params:` line."""
    for key, value in overrides.items():
        if not any(key in graph.notebooks[name].params for name in graph.named):
            first = graph.notebooks[graph.named[0]]
            first.resolve_params({key: value}, line_of=front_matter_line(first, "params") or 1)
    return {
        name: nb.resolve_params({k: v for k, v in overrides.items() if k in nb.params})
        for name, nb in graph.notebooks.items()
    }
