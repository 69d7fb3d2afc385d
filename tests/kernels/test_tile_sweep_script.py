"""scripts/fa2_tile_sweep.py: the GPU tile experiment runs end to end on the CPU (interpreter, tiny shapes)
and every candidate it would time is legal for the kernel it feeds."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

import fa2_tile_sweep


def test_candidates_are_causal_legal_and_vary_one_kernel_at_a_time():
    for tiles in fa2_tile_sweep.forward_tiles(causal=True).values():
        assert tiles and all(t.block_m % t.block_n == 0 for t in tiles)
    assert any(t.block_m < t.block_n for t in fa2_tile_sweep.FORWARD_D128)  # the filter has work to do
    rows = fa2_tile_sweep.backward_tiles()
    dkdv = [t for which, t in rows if which == "dkdv"]
    dq = [t for which, t in rows if which == "dq"]
    assert {(t.block_m2, t.block_n2, *t.dq_launch) for t in dkdv} == {fa2_tile_sweep.DQ_BEST}
    assert {(t.block_m1, t.block_n1, t.warps, t.stages) for t in dq} == {fa2_tile_sweep.DKDV_BEST}
    assert all(t.block_m2 % t.block_n2 == 0 for t in dq)


def test_smoke_sweep_checks_and_writes_every_row(tmp_path):
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "fa2_tile_sweep.py"), "--smoke", "--out", str(tmp_path)],
                          capture_output=True, text=True, env=env, timeout=300, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads((tmp_path / "fa2_tile_sweep.json").read_text())
    assert doc["smoke"] is True and doc["gpu"] is None
    assert [r["sweep"] for r in doc["rows"]] == ["forward d64", "forward d128", "backward d64, dkdv tile varied",
                                                 "backward d64, dq tile varied"]  # fmt: skip
    assert all(r["status"] == "ok" and r["rel_l2"] < 2e-2 for r in doc["rows"])
