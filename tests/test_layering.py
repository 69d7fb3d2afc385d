"""Who may import whom inside src/attnbench, read from the source's AST (imports inside functions count):

- a studies/<x> package (one report's measuring code) imports no other studies/<y> package and nothing
  of attnbench.report: what two studies share lives in bench/;
- attnbench.rows imports no torch (report cells read rows on machines without it);
- the algorithm packages (cp, dilated, kernels, models) use only a small public part of bench/.
"""

import ast
import importlib
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "attnbench"

# (module, name) pairs of bench/ an algorithm package may import; everything else in bench/ is the
# benchmark's own machinery
ALGORITHM_BENCH_API = {
    ("attnbench.bench.providers.base", "describe_exception"),
    ("attnbench.bench.providers.base", "import_failure"),
    ("attnbench.bench.providers.base", "compile_fn"),
    ("attnbench.bench.providers.flash_attn3", "build_leaves_out"),
    ("attnbench.bench.correctness", "full_fp32_matmul"),
    ("attnbench.rows", "Workload"),  # the re-export of attnbench.rows.Workload
}
ALGORITHM_PACKAGES = ("cp", "dilated", "kernels", "models")


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, text: str | None = None) -> list[tuple[int, str, str | None]]:
    """(line, imported module, imported name or None) of every import in `path` (or in `text`, read as
    if it were that file), relative ones resolved."""
    package = module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    found = []
    tree = ast.parse(path.read_text() if text is None else text, filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name, None) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
            found += [(node.lineno, base, alias.name) for alias in node.names]
    return found


def sources(*under: str) -> list[Path]:
    return sorted(p for part in under for p in (SRC / part).rglob("*.py"))


def where(path: Path, line: int) -> str:
    return f"{path.relative_to(SRC.parent)}:{line}"


def test_the_tree_is_there():
    assert len(sources("studies")) >= 20 and sources("rows")


def cross_study_imports(path: Path, text: str | None = None) -> list[str]:
    own = module_name(path).split(".")[:3]  # attnbench.studies.<x>
    bad = []
    for line, module, name in imports(path, text):
        target = module.split(".")
        if target[:2] == ["attnbench", "report"]:
            bad.append(f"{where(path, line)}: imports {module}")
        if target[:2] == ["attnbench", "studies"]:
            other = target[:3] if len(target) > 2 else target[:2] + [name]
            if other != own:
                bad.append(f"{where(path, line)}: imports {'.'.join(other)}")
    return bad


@pytest.mark.parametrize("path", sources("studies"), ids=lambda p: str(p.relative_to(SRC)))
def test_a_study_imports_no_other_study_and_no_report(path):
    bad = cross_study_imports(path)
    assert not bad, "\n".join(bad)


def test_rows_import_no_torch():
    bad = [
        f"{where(path, line)}: imports {module}"
        for path in sources("rows")
        for line, module, _ in imports(path)
        if module.split(".")[0] in ("torch", "triton", "numpy")
    ]
    assert not bad, "\n".join(bad)


def test_algorithms_use_only_the_public_bench_api():
    bad = [
        f"{where(path, line)}: imports {module}.{name}"
        for path in sources(*ALGORITHM_PACKAGES)
        for line, module, name in imports(path)
        if module.startswith("attnbench.bench") and (module, name) not in ALGORITHM_BENCH_API
    ]
    assert not bad, "\n".join(bad)


def test_the_check_sees_every_spelling_of_a_cross_study_import():
    path = SRC / "studies" / "attention_masks" / "measure.py"
    allowed = "from attnbench.studies.attention_masks import profiles\nfrom . import series\n"
    assert cross_study_imports(path, allowed) == []
    for text in (
        "from attnbench.studies import context_parallel\n",
        "import attnbench.studies.dilated_attention.measure\n",
        "from ..cs336_systems import steps\n",
        "def f():\n    from attnbench.report import tables\n",
    ):
        assert cross_study_imports(path, text), text


@pytest.mark.parametrize("path", sources("studies", "rows", "bench"), ids=lambda p: str(p.relative_to(SRC)))
def test_every_module_imports(path):
    """A name moved between modules (say, into bench/distributed.py) breaks its importers here, not
    first inside a multi-rank worker."""
    importlib.import_module(module_name(path))
