"""Machine labels, the interpreter probe, the graph order and the cache key's parts."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from engine_helpers import cell, notebook

from attnbench.notebook.document.model import Cell
from attnbench.notebook.run.graph import load_graph
from attnbench.notebook.run.machine import (
    Gpus,
    ProbeError,
    label_for,
    label_gpus,
    parse_nvidia_smi,
    probe_interpreter,
    slug,
)
from attnbench.notebook.run.plan import cell_key, stale_reasons
from attnbench.notebook.run.records import CellResult, Status
from attnbench.notebook.run.sources import SourceIndex

H200 = "NVIDIA H200, 570.86.15\n"


def test_label_slugs():
    assert label_for(parse_nvidia_smi(H200, None)) == "nvidia-h200"
    assert label_for(parse_nvidia_smi(H200 * 2, None)) == "nvidia-h200-x2"
    assert label_for(parse_nvidia_smi(H200 * 8, None)) == "nvidia-h200-x8"
    # read back as written (status --batches leaves out what a label's machine cannot run)
    assert [label_gpus(label_for(parse_nvidia_smi(H200 * n, None))) for n in (1, 2, 8)] == [1, 2, 8]
    assert label_gpus(label_for(Gpus())) == 0
    assert label_for(Gpus()) == "cpu"
    assert slug("NVIDIA GeForce RTX 4090") == "nvidia-geforce-rtx-4090"
    assert slug("NVIDIA A100-SXM4-80GB") == "nvidia-a100-sxm4-80gb"


def test_cuda_visible_devices_is_respected():
    two = "NVIDIA H200, 570.86.15\nNVIDIA H100 80GB HBM3, 570.86.15\n"
    assert parse_nvidia_smi(two, "1").names == ("NVIDIA H100 80GB HBM3",)
    assert label_for(parse_nvidia_smi(two, "1")) == "nvidia-h100-80gb-hbm3"
    assert parse_nvidia_smi(two, "0,1").count == 2
    assert label_for(parse_nvidia_smi(two, "")) == "cpu"
    assert label_for(parse_nvidia_smi(two, "-1")) == "cpu"
    assert parse_nvidia_smi(two, None).driver == "570.86.15"


def test_probe_reads_versions_without_importing_torch():
    found = probe_interpreter(sys.executable, ["pytest", "surely-not-installed-xyz"])
    assert found.python == ".".join(map(str, sys.version_info[:3]))
    assert found.dists["pytest"] == pytest.__version__
    assert found.dists["surely-not-installed-xyz"] is None
    assert found.markers["sys_platform"] == sys.platform


def test_probe_reads_torch_and_cuda_from_a_typed_version_file(tmp_path):
    # torch's version.py annotates its fields (`cuda: Optional[str] = '13.0'`); the H200 run's
    # run.json once said cuda: null because the probe only understood `cuda = '13.0'`.
    fake = tmp_path / "site" / "torch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('the probe must not import torch')\n")
    (fake / "version.py").write_text(
        "from typing import Optional\n__version__ = '9.8.7+cu130'\ncuda: Optional[str] = '13.0'\n"
    )
    found = probe_interpreter(sys.executable, [], env={"PYTHONPATH": str(tmp_path / "site")})
    assert found.cuda == "13.0"
    assert found.torch in ("9.8.7+cu130", _installed_torch())


def _installed_torch():
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("torch")
    except PackageNotFoundError:
        return None


def test_an_interpreter_that_does_not_report_is_named(tmp_path):
    fake = tmp_path / "python-wrapper"
    fake.write_text("#!/bin/sh\necho 'not a python'\n")
    fake.chmod(0o755)
    with pytest.raises(ProbeError, match=r"python-wrapper' did not report its versions; it printed: not a"):
        probe_interpreter(str(fake))


def test_order_is_topological_and_stable(project):
    path = project.write(
        "g.md",
        notebook(
            cell("id=c needs=b", "pass"),
            cell("id=a", "pass"),
            cell("id=b needs=a", "pass"),
            cell("id=d", "pass"),
        ),
    )
    graph = load_graph([path])
    assert graph.order(graph.all_named_nodes()) == [("g", "a"), ("g", "b"), ("g", "c"), ("g", "d")]
    assert graph.order([("g", "b")]) == [("g", "a"), ("g", "b")]


def _key(**changes):
    args = {
        "cell": Cell(id="a", source="print(1)\n", line=3, deps=["numpy"]),
        "params": {"n": 1},
        "upstream": {"up": "k1"},
        "inputs": {"up": "artifacts1"},
        "attnbench": "src1",
        "env": {"kind": "python", "python": "3.11.7"},
        "machine": "fp1",
    }
    args.update(changes)
    return cell_key(**args)


def test_every_key_part_changes_the_key_and_is_named_as_a_reason():
    base = _key()
    stored = CellResult(
        cell="a",
        status=Status.OK,
        key=base.key,
        started="t",
        finished="t",
        key_parts=base.parts,
        params={"n": 1},
    )
    cases = {
        "code changed": {"cell": Cell(id="a", source="print(2)\n", line=3, deps=["numpy"])},
        "cell attributes/deps changed": {"cell": Cell(id="a", source="print(1)\n", line=3, deps=["pandas"])},
        "params changed: n": {"params": {"n": 2}},
        "upstream up changed": {"upstream": {"up": "k2"}},
        "upstream up wrote different artifacts (it ran again)": {"inputs": {"up": "artifacts2"}},
        "upstream up has no stored result": {"inputs": {"up": None}},
        "attnbench sources changed": {"attnbench": "src2"},
        "environment changed (python 3.11.7 -> 3.12.1)": {"env": {"kind": "python", "python": "3.12.1"}},
        "machine fingerprint changed": {"machine": "fp2"},
    }
    for reason, change in cases.items():
        new = _key(**change)
        assert new.key != base.key, reason
        assert stale_reasons(stored, new, change.get("params", {"n": 1})) == [reason]
    assert stale_reasons(stored, _key(), {"n": 1}) == []
    # moving a cell does not change its key; gpus= and outputs= do
    assert _key(cell=Cell(id="a", source="print(1)\n", line=99, deps=["numpy"])).key == base.key
    assert _key(cell=Cell(id="a", source="print(1)\n", line=3, deps=["numpy"], gpus=2)).key != base.key
    assert (
        _key(cell=Cell(id="a", source="print(1)\n", line=3, deps=["numpy"], outputs=["*.svg"])).key
        != base.key
    )


def test_keys_hold_no_absolute_paths(project):
    path = project.write("k.md", notebook(cell("id=a", "pass"), cell("id=b needs=a", "pass")))
    assert project.run(path).code == 0
    text = json.dumps(project.result("k", "b")["key_parts"])
    assert str(project.root) not in text and "/" not in text  # no path of any kind
    assert project.result("k", "b")["key_parts"]["upstream"] == {"a": project.result("k", "a")["key"]}


EVERYTHING = "from attnbench import bench, notebook\n"  # a cell using every part


def test_sources_hash_ignores_the_engine(tmp_path):
    package = tmp_path / "attnbench"
    (package / "notebook").mkdir(parents=True)
    (package / "bench").mkdir()
    (package / "notebook" / "cli.py").write_text("x = 1\n")
    (package / "bench" / "timing.py").write_text("y = 1\n")
    before = SourceIndex.of(package).hash_for(EVERYTHING)
    (package / "notebook" / "cli.py").write_text("x = 2\n")
    assert SourceIndex.of(package).hash_for(EVERYTHING) == before
    (package / "bench" / "timing.py").write_text("y = 2\n")
    assert SourceIndex.of(package).hash_for(EVERYTHING) != before
    before = SourceIndex.of(package).hash_for(EVERYTHING)
    (package / "bench" / "new.py").write_text("")
    assert SourceIndex.of(Path(package)).hash_for(EVERYTHING) != before


def test_a_cell_is_keyed_on_the_parts_it_imports_transitively(tmp_path):
    package = tmp_path / "attnbench"
    for part in ("bench", "cp", "kernels"):
        (package / part).mkdir(parents=True)
        (package / part / "__init__.py").write_text("")
    (package / "__init__.py").write_text("def inputs(cell): ...\n")
    (package / "cp" / "ring.py").write_text("from attnbench.bench.flops import attention_flops\n")
    flux = "import attnbench\nfrom attnbench.bench import sweep\n"
    ring = "from attnbench import cp as context_parallel\nimport torch\n\nx = 1\n"
    index = SourceIndex.of(package)
    assert index.closure(flux) == ["__init__", "bench"]
    assert index.closure(ring) == ["__init__", "bench", "cp"]  # cp uses bench
    assert index.closure("from attnbench import (\n    inputs,\n    kernels,\n)\n") == ["__init__", "kernels"]
    flux_key, ring_key = index.hash_for(flux), index.hash_for(ring)

    (package / "cp" / "ring.py").write_text(
        "from attnbench.bench.flops import (attention_flops)  # comment\n"
    )
    assert SourceIndex.of(package).hash_for(ring) == ring_key  # formatting and comments are not code
    (package / "cp" / "ring.py").write_text("from attnbench.bench.flops import attention_flops, mfu\n")
    index = SourceIndex.of(package)
    assert index.hash_for(flux) == flux_key  # editing cp/ leaves a bench-only cell cached
    assert index.hash_for(ring) != ring_key
    ring_key = index.hash_for(ring)

    (package / "bench" / "flops.py").write_text("def attention_flops(): ...\n")
    index = SourceIndex.of(package)
    assert index.hash_for(flux) != flux_key and index.hash_for(ring) != ring_key
    (package / "__init__.py").write_text("def inputs(cell): return 1\n")
    assert SourceIndex.of(package).hash_for("print(1)") != index.hash_for("print(1)")


def test_the_indexed_package_is_a_project_setting(tmp_path):
    from attnbench.notebook.run.project import ProjectError, indexed_package

    assert indexed_package(tmp_path) is None  # no setting, no package under src/: cells keyed on their code
    (tmp_path / "src" / "mine").mkdir(parents=True)
    (tmp_path / "src" / "mine" / "__init__.py").write_text("")
    assert indexed_package(tmp_path).name == "mine"  # the one package under src/
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "__init__.py").write_text("")
    (tmp_path / "pyproject.toml").write_text('[tool.attnbench]\npackage = "other"\n')
    found = indexed_package(tmp_path)
    assert (found.name, found.folder, found.engine_part) == ("other", tmp_path / "other", None)
    (tmp_path / "pyproject.toml").write_text('[tool.attnbench]\npackage = "absent"\n')
    with pytest.raises(
        ProjectError, match=r"pyproject.toml: \[tool.attnbench\] package = 'absent': no absent/"
    ):
        indexed_package(tmp_path)


def test_the_source_index_follows_the_package_name(tmp_path):
    package = tmp_path / "mine"
    (package / "bench").mkdir(parents=True)
    (package / "bench" / "timing.py").write_text("y = 1\n")
    index = SourceIndex.of(package, "mine", engine_part=None)
    assert index.closure("from mine import bench\n") == ["bench"]
    assert index.closure("from attnbench import bench\n") == []


def test_the_engine_is_never_indexed_even_as_a_folder_of_subpackages(tmp_path):
    """The engine's own package (here an empty __init__.py over run/ and site/, which would otherwise
    make each subpackage a part of its own) never enters a cell's key: editing the engine must not
    make hours of GPU results stale."""
    package = tmp_path / "mine"
    for sub in ("notebook/run", "notebook/site", "bench"):
        (package / sub).mkdir(parents=True)
        (package / sub / "__init__.py").write_text("x = 1\n")
    (package / "notebook" / "__init__.py").write_text("")
    (package / "bench" / "timing.py").write_text("from mine.notebook.run import x\n")
    index = SourceIndex.of(package, "mine")
    assert index.closure("import mine.bench\nfrom mine.notebook import run\n") == ["bench"]
    assert not [part for part in index.files if part.startswith("notebook")]


def test_a_grouping_folders_docstring_is_not_code(tmp_path):
    """kernels/__init__.py lists the kernels in its docstring: adding a kernel there must not make
    every result that uses another kernel stale."""
    package = tmp_path / "mine"
    (package / "kernels" / "fa").mkdir(parents=True)
    (package / "kernels" / "fa" / "__init__.py").write_text("x = 1\n")
    (package / "kernels" / "__init__.py").write_text('"""fa: one kernel."""\n')
    index = SourceIndex.of(package, "mine")
    before = index.hash_for("from mine.kernels import fa\n")
    (package / "kernels" / "__init__.py").write_text('"""fa: one kernel. dilated: another."""\n')
    assert SourceIndex.of(package, "mine").hash_for("from mine.kernels import fa\n") == before
    (package / "kernels" / "fa" / "__init__.py").write_text("x = 2\n")
    assert SourceIndex.of(package, "mine").hash_for("from mine.kernels import fa\n") != before


def test_a_module_beside_the_subpackages_of_a_grouping_folder_is_a_part(tmp_path):
    """kernels/common.py (code, not a docstring) is indexed as the part kernels.common: a kernel that
    imports it goes stale when it changes."""
    package = tmp_path / "mine"
    (package / "kernels" / "fa").mkdir(parents=True)
    (package / "kernels" / "__init__.py").write_text('"""Kernels."""\n')
    (package / "kernels" / "fa" / "__init__.py").write_text("from mine.kernels.common import helper\n")
    (package / "kernels" / "common.py").write_text("def helper():\n    return 1\n")
    index = SourceIndex.of(package, "mine")
    assert index.closure("from mine.kernels import fa\n") == ["kernels.common", "kernels.fa"]
    before = index.hash_for("from mine.kernels import fa\n")
    (package / "kernels" / "common.py").write_text("def helper():\n    return 2\n")
    assert SourceIndex.of(package, "mine").hash_for("from mine.kernels import fa\n") != before


def test_a_reexport_folder_keys_a_cell_on_the_modules_of_the_names_it_imports(tmp_path):
    """rows/: one module per report's rows, an __init__.py that only gathers their names. A cell is keyed
    on the modules defining the names it imports, so one report's row schema can change without staling
    the others' GPU results; the __init__.py (what a name means) is in every module's hash."""
    package = tmp_path / "attnbench"
    (package / "rows").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "rows" / "base.py").write_text("class Row: ...\n")
    (package / "rows" / "kernel.py").write_text(
        "from attnbench.rows.base import Row\nclass Result(Row): ...\n"
    )
    (package / "rows" / "cs336.py").write_text(
        "from attnbench.rows.base import Row\nclass TileAuditRow(Row): ...\n"
    )
    (package / "rows" / "__init__.py").write_text(
        '"""Rows."""\n\nfrom attnbench.rows.cs336 import TileAuditRow\nfrom attnbench.rows.kernel import Result\n\n'
        '__all__ = ["Result", "TileAuditRow"]\n'
    )
    masks = "from attnbench.rows import Result\n"
    cs336 = "from attnbench.rows import Result, TileAuditRow\n"
    everything = "from attnbench import rows\n"
    index = SourceIndex.of(package)
    assert index.closure(masks) == ["__init__", "rows.base", "rows.kernel"]
    assert index.closure(cs336) == ["__init__", "rows.base", "rows.cs336", "rows.kernel"]
    assert index.closure(everything) == ["__init__", "rows.base", "rows.cs336", "rows.kernel"]
    assert index.closure("from attnbench.rows.cs336 import TileAuditRow\n") == [
        "__init__",
        "rows.base",
        "rows.cs336",
    ]
    keys = {
        name: index.hash_for(src) for name, src in (("masks", masks), ("cs336", cs336), ("all", everything))
    }

    (package / "rows" / "cs336.py").write_text(
        "from attnbench.rows.base import Row\nclass TileAuditRow(Row):\n    x = 1\n"
    )
    index = SourceIndex.of(package)
    assert index.hash_for(masks) == keys["masks"]  # the mask report never names the CS336 rows
    assert index.hash_for(cs336) != keys["cs336"] and index.hash_for(everything) != keys["all"]

    keys = {name: index.hash_for(src) for name, src in (("masks", masks), ("cs336", cs336))}
    init = (package / "rows" / "__init__.py").read_text()
    (package / "rows" / "__init__.py").write_text(
        init.replace("import Result\n", "import Result as Result\n")
    )
    index = SourceIndex.of(package)
    assert index.hash_for(masks) != keys["masks"] and index.hash_for(cs336) != keys["cs336"]

    (package / "rows" / "__init__.py").write_text(init + "CACHE = {}\n")  # code in it: one part, as before
    assert SourceIndex.of(package).closure(masks) == ["__init__", "rows"]


def test_a_mention_of_a_reexport_folder_in_prose_is_not_an_import_of_all_of_it(tmp_path):
    package = tmp_path / "attnbench"
    (package / "rows").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "rows" / "kernel.py").write_text("class Result: ...\n")
    (package / "rows" / "cs336.py").write_text("class TileAuditRow: ...\n")
    (package / "rows" / "__init__.py").write_text(
        "from attnbench.rows.cs336 import TileAuditRow\nfrom attnbench.rows.kernel import Result\n"
    )
    index = SourceIndex.of(package)
    prose = (
        '"""Statuses are the shared vocabulary of attnbench.rows.\n"""\nfrom attnbench.rows import Result\n'
    )
    assert index.closure(prose) == ["__init__", "rows.kernel"]
    assert index.closure("import attnbench.rows\n") == ["__init__", "rows.cs336", "rows.kernel"]
    assert index.closure("import attnbench.rows\nattnbench.rows.Result\n") == [
        "__init__",
        "rows.cs336",
        "rows.kernel",
    ]
