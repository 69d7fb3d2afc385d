"""Artifacts, outputs= globs, ATTNBENCH_INPUT_* across cells and notebooks, standalone scripts."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib

import pytest
from engine_helpers import LABEL, cell, notebook

# The reference regex of PEP 723.
PEP723_RE = re.compile(r"(?m)^# /// (?P<type>[a-zA-Z0-9-]+)$\s(?P<content>(^#(| .*)$\s)+)^# ///$")

pytestmark = pytest.mark.timeout(120)


def test_artifacts_are_the_working_dir_filtered_by_outputs_globs(project):
    body = """
    import os, pathlib
    pathlib.Path("keep.txt").write_text("k")
    pathlib.Path("sub").mkdir()
    pathlib.Path("sub/plot.svg").write_text("<svg/>")
    pathlib.Path("drop.bin").write_text("d")
    print(os.getcwd())
    """
    path = project.write("a.md", notebook(cell("id=w outputs=*.txt,**/*.svg", body), cell("id=all", body)))
    assert project.run(path).code == 0
    artifacts = project.cell_dir("a", "w") / "artifacts"
    assert project.result("a", "w")["artifacts"] == ["keep.txt", "sub/plot.svg"]
    assert sorted(p.relative_to(artifacts).as_posix() for p in artifacts.rglob("*")) == [
        "keep.txt",
        "sub",
        "sub/plot.svg",
    ]
    assert project.result("a", "all")["artifacts"] == ["drop.bin", "keep.txt", "sub/plot.svg"]
    cwd = project.stdout("a", "w").strip()
    assert ".tmp-w-" in cwd and cwd.endswith("/artifacts")  # a fresh staging folder per cell


def test_inputs_env_vars_and_params_reach_dependents(project):
    project.write("other.md", notebook(cell("id=src", "open('o.txt', 'w').write('from other')")))
    consumer = """
    import json, os, pathlib, attnbench
    print(json.dumps({
        "var": os.environ["ATTNBENCH_INPUT_MAKE_IT"],
        "uvnote": os.environ["UVNOTE_INPUT_MAKE_IT"],
        "other": os.environ["ATTNBENCH_INPUT_OTHER__SRC"],
        "short_other": os.environ["ATTNBENCH_INPUT_SRC"],
        "via_inputs": str(attnbench.inputs("make-it")),
        "other_via_inputs": (attnbench.inputs("other.md:src") / "o.txt").read_text(),
        "data": (attnbench.inputs("make-it") / "data.json").read_text(),
        "params": json.loads(os.environ["ATTNBENCH_PARAMS"]),
        "notebook": os.environ["ATTNBENCH_NOTEBOOK"], "label": os.environ["ATTNBENCH_LABEL"],
        "unbuffered": os.environ["PYTHONUNBUFFERED"], "extra": os.environ["EXTRA"],
    }))
    """
    path = project.write(
        "main.md",
        notebook(
            cell("id=make-it", "open('data.json', 'w').write('[1, 2]')"),
            cell("id=use needs=make-it,other.md:src env=EXTRA=yes,X=1", consumer),
            params={"k": [1, 2]},
        ),
    )
    out = project.run(path, "-p", "k=[3]")
    assert out.code == 0, out.err
    seen = json.loads(project.stdout("main", "use"))
    made = project.cell_dir("main", "make-it") / "artifacts"
    assert seen["var"] == seen["uvnote"] == seen["via_inputs"] == str(made)
    assert seen["other"] == seen["short_other"] == str(project.cell_dir("other", "src") / "artifacts")
    assert seen["other_via_inputs"] == "from other"
    assert seen["data"] == "[1, 2]"
    assert seen["params"] == {"k": [3]}
    assert (seen["notebook"], seen["label"], seen["unbuffered"], seen["extra"]) == ("main", LABEL, "1", "yes")
    other_run = json.loads((project.root / "outputs" / "other" / LABEL / "run.json").read_text())
    assert other_run["cells"]["src"]["state"] == "ran"  # the other notebook's cell ran and was recorded


def test_materialised_script_is_valid_pep723_and_reruns_standalone(project):
    maker = cell("id=make", "open('v.txt', 'w').write(str(size * 2))")
    reader = cell(
        "id=read needs=make deps=packaging",
        "import attnbench\nprint((attnbench.inputs('make') / 'v.txt').read_text(), size)",
    )
    path = project.write("s.md", notebook(maker, reader, params={"size": 21}))
    assert project.run(path, "-p", "size=4").code == 0
    script = project.root / "cells" / "s" / "read.py"
    text = script.read_text()
    assert "params = {'size': 21}\n" in text and "size = params['size']\n" in text  # defaults, not -p
    block = next(m for m in PEP723_RE.finditer(text) if m.group("type") == "script")
    meta = tomllib.loads("".join(line[2:] + "\n" for line in block.group("content").splitlines()))
    assert meta["dependencies"] == ["attnbench", "packaging"]
    assert meta["requires-python"] == ">=3.11"
    source = meta["tool"]["uv"]["sources"]["attnbench"]
    assert not os.path.isabs(source["path"]) and source["editable"] is True
    assert (script.parent / source["path"] / "pyproject.toml").is_file()
    # standalone, as a user would reproduce it: finds the upstream result through outputs/<nb>/<label>/
    env = {k: v for k, v in os.environ.items() if not k.startswith("ATTNBENCH_")}
    env["ATTNBENCH_LABEL"] = LABEL
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=project.root / "cells",
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "8 21"  # the stored artifact (run with size=4) and the default param


def test_removed_cells_lose_their_generated_script(project):
    path = project.write("r.md", notebook(cell("id=a", "pass"), cell("id=b", "pass")))
    project.run(path)
    assert (project.root / "cells" / "r" / "b.py").exists()
    (project.root / "cells" / "r" / "mine.py").write_text("# hand-written\n")
    path.write_text(notebook(cell("id=a", "pass")))
    project.run(path)
    assert not (project.root / "cells" / "r" / "b.py").exists()
    assert (project.root / "cells" / "r" / "mine.py").exists()


def test_missing_deps_are_named_and_the_cell_does_not_run(project):
    body = "open('ran', 'w').write('yes')"
    path = project.write(
        "d.md",
        notebook(
            cell("id=needy deps=surely-not-installed-xyz,pytest>=999", body),
            cell("id=fine deps=pytest", "print('ok')"),
            cell("id=after needs=needy", "pass"),
        ),
    )
    out = project.run(path)
    assert out.code == 1
    result = project.result("d", "needy")
    assert result["status"] == "missing-deps"
    assert "surely-not-installed-xyz" in result["reason"] and "pytest>=999 (found " in result["reason"]
    assert result["artifacts"] == [] and not (project.cell_dir("d", "needy") / "artifacts" / "ran").exists()
    assert project.result("d", "fine")["status"] == "ok"
    assert project.run_json("d")["cells"]["after"]["reason"] == "upstream needy lacks deps"


@pytest.mark.skipif(shutil.which("uv") is None, reason="uv is not on PATH")
@pytest.mark.timeout(300)
def test_uv_environment_runs_the_script_in_its_own_env(project):
    path = project.write(
        "u.md", notebook(cell("id=a", "import sys, attnbench; print(sys.prefix != sys.base_prefix)"))
    )
    out = project.cli("run", path, "--env", "uv", "--label", "uv", "--plain")
    assert out.code == 0, out.err + (project.cell_dir("u", "a", "uv") / "stderr.txt").read_text()
    result = json.loads((project.cell_dir("u", "a", "uv") / "result.json").read_text())
    assert result["command"] == ["uv", "run", "--script", "cells/u/a.py"]
    assert result["env_setup_s"] > 0  # `uv sync --script` ran first, outside the cell's timeout
    assert result["key_parts"]["env"]["kind"] == "uv"
    assert (project.cell_dir("u", "a", "uv") / "stdout.txt").read_text() == "True\n"
