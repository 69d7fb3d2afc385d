"""Measuring apart from presenting: editing a figure or table module leaves every measuring cell
of the real notebooks cached (a cell's key hashes only the attnbench parts it imports, transitively)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import attnbench
from attnbench.notebook.document.parse import parse_notebook
from attnbench.notebook.run.sources import SourceIndex

PACKAGE = Path(attnbench.__file__).parent
NOTEBOOKS = sorted((PACKAGE.parents[1] / "notebooks").glob("*.md"))
PRESENTING = ("report/figures.py", "report/cp_figures.py", "report/tables.py", "report/cp_tables.py",
              "report/masks.py")  # fmt: skip
# a cell naming one of those modules; report/ is a grouping folder (answers/ is a package of its own), so a
# cell that only writes its headline (report.headline_data) is keyed by what that imports, not by figures
DRAWS = re.compile(r"attnbench\.report\.(figures|cp_figures|tables|cp_tables|masks)\b")


def _cells():
    return [(path.stem, cell) for path in NOTEBOOKS for cell in parse_notebook(path).cells]


def _measuring(cell) -> bool:
    """A cell that measures: it runs torch (report cells need only pandas or matplotlib)."""
    return "torch" in cell.deps


def test_measuring_cells_import_nothing_that_presents():
    index = SourceIndex.of(PACKAGE)
    measuring = [(nb, c) for nb, c in _cells() if _measuring(c)]
    assert {f"{nb}:{c.id}" for nb, c in measuring} >= {"flux_attention:bench", "context_parallel:bench",
                                                      "context_parallel:overlap", "attention_masks:bench"}  # fmt: skip
    for nb, cell in measuring:
        assert "report" not in index.closure(cell.source), f"{nb}:{cell.id} imports attnbench.report"
        assert "attnbench.report" not in cell.source


def test_editing_a_figure_or_table_keeps_every_measurement_cached(tmp_path):
    copy = tmp_path / "attnbench"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    cells = _cells()
    before_index = SourceIndex.of(copy)  # reads sources lazily: hash every cell before the edit
    before = {(nb, cell.id): before_index.hash_for(cell.source) for nb, cell in cells}
    for rel in PRESENTING:
        with open(copy / rel, "a") as f:
            f.write("\n\ndef an_edit():\n    return 'a new colour'\n")
    after = SourceIndex.of(copy)
    for nb, cell in cells:
        same = before[(nb, cell.id)] == after.hash_for(cell.source)
        if _measuring(cell):
            assert same, f"{nb}:{cell.id} measures and would be re-run after a figure edit"
        elif DRAWS.search(cell.source):
            assert not same, f"{nb}:{cell.id} draws from report/ and must see the edit"
    summary = next(cell for nb, cell in cells if (nb, cell.id) == ("environment", "summary"))
    assert before[("environment", "summary")] == after.hash_for(summary.source)  # it draws no figure or table
    drawing = [c for _, c in cells if "figures import" in c.source]
    assert len(drawing) >= 2  # the Flux and context-parallel plots: the check above is not vacuous
