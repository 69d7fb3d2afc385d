"""scripts/device_run.sh chains the calls of one device lease: each call sends the tree as committed, so
the label folders an earlier call wrote come back from the machine's store before the next call runs,
and the last call's archive holds every label folder of the lease. Run here with a stand-in python3
that writes what `attnbench run` would (no GPU, no torch needed)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tarfile
import time
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
# LOSE: the machine is taken back while the run still works (the test kills every process of the call)
[ -n "${LOSE:-}" ] && { touch "$LOSE"; sleep 60; }
exit 0
"""


def _start(
    tree: Path, store: Path, out: Path, call: str, notebook: str, **env_extra: str
) -> subprocess.Popen:
    """One device call started: a fresh copy of the committed tree, the script run in it, in a session of
    its own (which a lost machine kills whole)."""
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
           "ATTNBENCH_DEVICE_STORE": str(store), "ATTNBENCH_WHEELS": str(tree / "no-wheels"), **env_extra}  # fmt: skip
    return subprocess.Popen(["bash", "scripts/device_run.sh", f"notebooks/{notebook}.md"], cwd=tree, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)  # fmt: skip


def _call(tree: Path, store: Path, out: Path, call: str, notebook: str) -> subprocess.CompletedProcess:
    """One device call, run to its end."""
    proc = _start(tree, store, out, call, notebook)
    stdout, stderr = proc.communicate(timeout=60)
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def _kill_session(sid: int) -> None:
    """SIGKILL every process of session `sid` at once, as a machine taken back would end them (`timeout`
    puts the run in a process group of its own, so killing one group is not enough)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # ended meanwhile
            continue
        if int(fields[3]) == sid:  # after the command: state, ppid, pgrp, session
            try:
                os.kill(int(entry.name), signal.SIGKILL)
            except ProcessLookupError:
                pass


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


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux's /proc")
def test_a_call_lost_whole_still_returns_the_cells_it_finished(tmp_path):
    """The lease's device time runs out mid-run: every process of the call dies at once, with no chance
    to pack at the end. What is under $OUT comes back, so the archive is packed as run.json changes."""
    tree, store, out = tmp_path / "tree", tmp_path / "store", tmp_path / "out"
    working = tmp_path / "working"  # the stand-in run has written its label folder and works on
    proc = _start(tree, store, out, "1", "first", LOSE=str(working), ATTNBENCH_PACK_EVERY="1")
    deadline = time.monotonic() + 30
    while not (working.exists() and (out / "outputs.tgz").exists()) and time.monotonic() < deadline:
        time.sleep(0.1)  # the packer's turn comes after the stand-in wrote its run.json
    _kill_session(proc.pid)
    stdout, _ = proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL and "packed:" not in stdout  # it never reached its end
    assert _packed(out) == {"outputs/first/gpu-label/cell/result.json": '{"call": "1"}\n'}
    assert not (out / "outputs.tgz.part").exists()


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_a_pack_interval_that_is_not_whole_seconds_is_refused_by_name(tmp_path):
    proc = _start(
        tmp_path / "tree", tmp_path / "store", tmp_path / "out", "1", "first", ATTNBENCH_PACK_EVERY="2.5"
    )
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 2 and "ATTNBENCH_PACK_EVERY=2.5: expected whole seconds" in stderr


def _hold_tree(tmp_path: Path) -> Path:
    tree = tmp_path / "tree"
    (tree / "scripts" / "carry").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "carry" / "hold_outputs.sh", tree / "scripts" / "carry")
    for folder in ("report/gpu-label", "report/cpu", "other/gpu-label"):
        (tree / "outputs" / folder).mkdir(parents=True)
        (tree / "outputs" / folder / "run.json").write_text(folder)
    return tree


def _hold(tree: Path, hold: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "HOLD": str(hold)}
    return subprocess.run(["bash", str(tree / "scripts" / "carry" / "hold_outputs.sh"), *args], env=env,
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_holding_outputs_keeps_the_named_label_folders_and_restores_the_rest(tmp_path):
    tree, hold = _hold_tree(tmp_path), tmp_path / "held"
    held = _hold(tree, hold, "hold", "report/gpu-label")
    assert held.returncode == 0, held.stderr
    travelling = sorted(str(p.relative_to(tree / "outputs")) for p in (tree / "outputs").rglob("run.json"))
    assert travelling == ["report/gpu-label/run.json"]
    assert (
        _hold(tree, hold, "hold").returncode == 2
    )  # one lease at a time: the held tree is never overwritten
    restored = _hold(tree, hold, "restore")
    assert restored.returncode == 0, restored.stderr
    assert (tree / "outputs" / "other" / "gpu-label" / "run.json").read_text() == "other/gpu-label"
    assert not hold.exists()


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_a_held_tree_is_not_restored_over_a_folder_that_changed(tmp_path):
    tree, hold = _hold_tree(tmp_path), tmp_path / "held"
    missing = _hold(tree, hold, "hold", "report/no-such-label")
    assert missing.returncode == 2 and "outputs/report/no-such-label" in missing.stderr
    assert (tree / "outputs" / "other").is_dir()  # nothing moved
    assert _hold(tree, hold, "hold", "report/gpu-label").returncode == 0
    (tree / "outputs" / "report" / "gpu-label" / "run.json").write_text("merged while held")
    refused = _hold(tree, hold, "restore")
    assert refused.returncode == 2 and "outputs/report/gpu-label changed while held" in refused.stderr
    assert (tree / "outputs" / "report" / "gpu-label" / "run.json").read_text() == "merged while held"
    assert hold.is_dir()
    (tree / "outputs" / "report" / "gpu-label" / "run.json").write_text("report/gpu-label")  # as held again
    (tree / "outputs" / "other").mkdir()  # a folder hold did not make: restore would delete it
    (tree / "outputs" / "other" / "new.txt").write_text("written while held")
    refused = _hold(tree, hold, "restore")
    assert refused.returncode == 2 and "outputs/other appeared while held" in refused.stderr
    (tree / "outputs" / "other" / "new.txt").unlink()
    (tree / "outputs" / "other").rmdir()
    assert _hold(tree, hold, "restore").returncode == 0
    assert (tree / "outputs" / "other" / "gpu-label" / "run.json").read_text() == "other/gpu-label"


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_holding_takes_label_folders_only_once_each(tmp_path):
    tree, hold = _hold_tree(tmp_path), tmp_path / "held"
    for args in (("report/gpu-label", "report/gpu-label"), ("report/gpu-label/cell",), ("report",),
                 ("report/..",), ("../outputs",), ("report/gpu label",)):  # fmt: skip
        refused = _hold(tree, hold, "hold", *args)
        assert refused.returncode == 2 and not hold.exists(), args
    assert (tree / "outputs" / "other" / "gpu-label").is_dir()  # nothing moved
