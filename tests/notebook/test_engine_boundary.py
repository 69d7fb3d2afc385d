"""The notebook engine stands alone: no module under attnbench.notebook imports the rest of attnbench.

Reports, benchmarks and models depend on the engine, never the reverse, so the engine can run any
uvnote-style notebook. Checked on the source (every import statement, at any depth, lazy ones too).
"""

from __future__ import annotations

import ast
from pathlib import Path

import attnbench.notebook

ENGINE = Path(attnbench.notebook.__file__).parent
PACKAGE = "attnbench"
ENGINE_PACKAGE = "attnbench.notebook"


def _imported_modules(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every absolute import in a file; relative imports stay inside the engine."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
    return found


def outside_imports(folder: Path) -> list[str]:
    """'path:line imports module' for every import of attnbench outside attnbench.notebook."""
    bad = []
    for path in sorted(folder.rglob("*.py")):
        for line, module in _imported_modules(path):
            inside = module == ENGINE_PACKAGE or module.startswith(ENGINE_PACKAGE + ".")
            if (module == PACKAGE or module.startswith(PACKAGE + ".")) and not inside:
                bad.append(f"{path.relative_to(folder.parent)}:{line} imports {module}")
    return bad


def test_the_engine_imports_nothing_of_attnbench_outside_itself():
    assert outside_imports(ENGINE) == []


def test_the_check_sees_lazy_and_package_root_imports(tmp_path):
    engine = tmp_path / "notebook"
    engine.mkdir()
    (engine / "a.py").write_text("import attnbench\nfrom attnbench.notebook import x\n")
    (engine / "b.py").write_text("def f():\n    from attnbench.rows import Workload\n")
    assert outside_imports(engine) == [
        "notebook/a.py:1 imports attnbench",
        "notebook/b.py:2 imports attnbench.rows",
    ]
