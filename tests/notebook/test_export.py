"""export.export_notebook: Markdown notebook → ipynb / py:percent, and a papermill run with an override."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from attnbench.notebook.export import export_notebook

TINY = """\
#!/usr/bin/env -S uv run attnbench run
---
title: Tiny
description: A CPU notebook for the export test
params:
  n: 2
  name: "say \\"hi\\" é"
  sizes: [1, 2]
---
Intro prose with a **table**.

| a | b |
|---|---|
| 1 | 2 |

```python id=write collapse-output
# /// script
# dependencies = ["numpy"]
# ///
from pathlib import Path

print(n * 10)
Path("written.txt").write_text(str(n))
```

```bash
echo shown-only
```

```python id=read needs=write outputs=*.txt
import attnbench

print("from params", params["n"] * 100, params["name"], sizes)
print("upstream wrote", (attnbench.inputs("write") / "written.txt").read_text())
```
"""


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.md"
    path.write_text(TINY)
    return path


def test_ipynb_structure(tiny: Path):
    import nbformat

    out = export_notebook(tiny)
    assert out == tiny.with_suffix(".ipynb")
    nb = nbformat.read(out, as_version=4)
    nbformat.validate(nb)
    kinds = [(c.cell_type, c.metadata.get("attnbench", {}).get("id")) for c in nb.cells]
    assert kinds == [
        ("markdown", None),
        ("code", None),
        ("code", None),
        ("markdown", None),
        ("code", "write"),
        ("markdown", None),
        ("code", "read"),
    ]
    title, parameters, params_cell, prose, write, shown, read = nb.cells
    assert title.source.startswith("# Tiny")
    assert parameters.metadata["tags"] == ["parameters"]
    assert parameters.source == 'n = 2\nname = "say \\"hi\\" é"\nsizes = [1, 2]'
    assert "tags" not in params_cell.metadata
    assert 'params = {"n": n, "name": name, "sizes": sizes}' in params_cell.source
    assert "| a | b |" in prose.source
    assert write.source.startswith("from pathlib import Path") and "# /// script" not in write.source
    assert "ATTNBENCH" not in write.source  # the body only, no materialised prelude
    assert write.id == "write" and write.metadata["attnbench"]["deps"] == ["numpy"]
    assert write.metadata["jupyter"] == {"outputs_hidden": True}
    assert read.metadata["attnbench"]["needs"] == ["write"] and read.metadata["attnbench"]["outputs"] == [
        "*.txt"
    ]
    assert shown.source == "```bash\necho shown-only\n```"


def test_uvnote_document_without_ids(tmp_path: Path):
    import nbformat

    uvnote = Path(__file__).parent / "fixtures" / "uvnote" / "test_notes" / "science" / "physics.md"
    nb = nbformat.read(export_notebook(uvnote, tmp_path / "physics.ipynb"), as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.metadata.get("attnbench", {}).get("id")]
    assert [(c.id, c.metadata["attnbench"]["id_from_code"]) for c in code] == [
        ("856f4433", True),
        ("1d814eb4", True),
    ]
    assert code[0].source.startswith("# F = ma calculation")


def test_py_percent(tiny: Path, tmp_path: Path):
    import jupytext

    out = export_notebook(tiny, tmp_path / "scripts" / "tiny.py", to="py:percent")
    text = out.read_text()
    assert '# %% tags=["parameters"]\nn = 2\n' in text
    back = jupytext.read(out)
    code = [c for c in back.cells if c.cell_type == "code"]
    assert code[0].metadata["tags"] == ["parameters"]
    assert [c.metadata.get("attnbench", {}).get("id") for c in code[2:]] == ["write", "read"]


def test_bad_format(tiny: Path):
    with pytest.raises(ValueError, match="'html' is not supported.*ipynb, py:percent"):
        export_notebook(tiny, to="html")


@pytest.fixture
def kernel_name(tmp_path_factory, monkeypatch) -> str:
    """python3 if Jupyter knows it; else a kernelspec for this interpreter in a temporary JUPYTER_PATH."""
    from jupyter_client.kernelspec import KernelSpecManager

    if "python3" in KernelSpecManager().find_kernel_specs():
        return "python3"
    root = tmp_path_factory.mktemp("jupyter")
    spec = root / "kernels" / "attnbench-test"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": "attnbench test",
                "language": "python",
            }
        )
    )
    monkeypatch.setenv("JUPYTER_PATH", str(root))
    return "attnbench-test"


def _stdout(cell) -> str:
    return "".join(o.get("text", "") for o in cell.outputs if o.get("output_type") == "stream")


@pytest.mark.timeout(120)
def test_papermill_override(tiny: Path, tmp_path: Path, kernel_name: str):
    import papermill

    exported = export_notebook(tiny)
    ran = papermill.execute_notebook(
        str(exported),
        str(tmp_path / "ran.ipynb"),
        parameters={"n": 5},
        kernel_name=kernel_name,
        cwd=str(tmp_path),
        progress_bar=False,
    )
    by_id = {c.metadata.get("attnbench", {}).get("id"): c for c in ran.cells}
    assert _stdout(by_id["write"]) == "50\n"  # the override, not the default 2 → 20
    # the upstream cell's artifact is found in the kernel's folder, not in some stored outputs/
    assert _stdout(by_id["read"]) == 'from params 500 say "hi" é [1, 2]\nupstream wrote 5\n'
    # the kernel's folder is .scratch/<notebook>/, never the folder papermill ran in
    assert (tmp_path / ".scratch" / "tiny" / "written.txt").read_text() == "5"
    assert not (tmp_path / "written.txt").exists()
    injected = [c for c in ran.cells if "injected-parameters" in c.metadata.get("tags", [])]
    assert len(injected) == 1 and "n = 5" in injected[0].source
