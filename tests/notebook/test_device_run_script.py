"""scripts/device_run.sh chains the calls of one device lease: each call sends the tree as committed, so
the label folders an earlier call wrote come back from the machine's store before the next call runs,
and the last call's archive holds every label folder of the lease. Run here with a stand-in python3
that writes what `attnbench run` would (no GPU, no torch needed)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FAKE_PYTHON = """#!/usr/bin/env bash
# stands in for `python3 -m attnbench run NOTEBOOK... --env python`: one label folder per notebook
for arg in "$@"; do
  case "$arg" in notebooks/*.md)
    nb=$(basename "$arg" .md); mkdir -p "outputs/$nb/gpu-label/cell"
    echo "{\\"call\\": \\"$CALL\\"}" > "outputs/$nb/gpu-label/cell/result.json"
    echo '{}' > "outputs/$nb/gpu-label/run.json";;
  esac
done
[ -f "outputs/first/gpu-label/cell/result.json" ] && echo "sees first: $(cat outputs/first/gpu-label/cell/result.json)"
exit 0
"""


def _call(tree: Path, store: Path, out: Path, call: str, notebook: str) -> subprocess.CompletedProcess:
    """One device call: a fresh copy of the committed tree, the script run in it."""
    if tree.exists():
        shutil.rmtree(tree)
    (tree / "scripts").mkdir(parents=True)
    for name in ("device_run.sh", "device_env.sh"):
        shutil.copy(ROOT / "scripts" / name, tree / "scripts" / name)
    (tree / "outputs" / "committed" / "cpu").mkdir(parents=True)
    (tree / "outputs" / "committed" / "cpu" / "run.json").write_text("{}")
    bin_dir = tree / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").write_text(FAKE_PYTHON)
    (bin_dir / "python3").chmod(0o755)
    (bin_dir / "nvidia-smi").write_text("#!/bin/sh\necho 'GPU 0: stand-in'\n")
    (bin_dir / "nvidia-smi").chmod(0o755)
    out.mkdir(parents=True, exist_ok=True)
    for old in out.iterdir():
        old.unlink()
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "OUT": str(out), "CALL": call,
           "ATTNBENCH_DEVICE_STORE": str(store), "ATTNBENCH_WHEELS": str(tree / "no-wheels")}  # fmt: skip
    return subprocess.run(["bash", "scripts/device_run.sh", f"notebooks/{notebook}.md"], cwd=tree, env=env, check=False,
                          capture_output=True, text=True, timeout=60)  # fmt: skip


def _packed(out: Path) -> dict[str, str]:
    with tarfile.open(out / "outputs.tgz") as tar:
        return {
            m.name: tar.extractfile(m).read().decode()
            for m in tar.getmembers()
            if m.name.endswith("result.json")
        }


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_a_later_call_finds_what_an_earlier_call_measured_and_packs_it_all(tmp_path):
    tree, store, out = tmp_path / "tree", tmp_path / "store", tmp_path / "out"
    first = _call(tree, store, out, "1", "first")
    assert first.returncode == 0, first.stdout + first.stderr
    assert set(_packed(out)) == {"outputs/first/gpu-label/cell/result.json"}

    second = _call(tree, store, out, "2", "second")  # a fresh tree: the first call's folder is not in it
    assert second.returncode == 0, second.stdout + second.stderr
    assert "restored outputs/first/gpu-label" in second.stdout
    assert 'sees first: {"call": "1"}' in second.stdout  # the run itself found it in place
    packed = _packed(out)
    assert packed == {
        "outputs/first/gpu-label/cell/result.json": '{"call": "1"}\n',
        "outputs/second/gpu-label/cell/result.json": '{"call": "2"}\n',
    }
    assert not any(name.startswith("outputs/committed") for name in packed)  # only what the lease wrote

    third = _call(tree, store, out, "3", "first")  # a re-run replaces the stored folder
    assert third.returncode == 0, third.stdout + third.stderr
    assert _packed(out)["outputs/first/gpu-label/cell/result.json"] == '{"call": "3"}\n'
