"""scripts/dilated_kernel_gpu_check.py: its --forward-tiles are checked before any GPU work, and its
per-branch FLOPs are the report's own (dilated.pattern.forward_flops)."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

import dilated_kernel_gpu_check as check


def test_tiles_parse_and_a_bad_one_is_named():
    assert check.parse_tiles("64,64,4,3;128,64,8,2", causal=True) == [(64, 64, 4, 3), (128, 64, 8, 2)]
    for text, why in (("64,64,4", "'64,64,4' is not BLOCK_M,BLOCK_N,warps,stages"),
                      ("64,x,4,3", "'64,x,4,3' is not"), ("64,64,0,3", "'64,64,0,3' is not"),
                      ("64,128,4,3", "'64,128,4,3': a causal tile needs BLOCK_M % BLOCK_N == 0")):  # fmt: skip
        with pytest.raises(ValueError, match=why):
            check.parse_tiles(text, causal=True)
    assert check.parse_tiles("64,128,4,3", causal=False) == [(64, 128, 4, 3)]


def test_a_bad_tile_stops_the_script_before_it_looks_for_a_gpu():
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "dilated_kernel_gpu_check.py"), "--profile",
                           "--forward-tiles", "64,64"], capture_output=True, text=True, cwd=ROOT, check=False,
                          env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"})  # fmt: skip
    assert proc.returncode == 2 and "'64,64' is not BLOCK_M,BLOCK_N,warps,stages" in proc.stderr
    assert "no CUDA device" not in proc.stdout


def test_branch_flops_are_the_pattern_s():
    from attnbench.dilated import pattern
    from attnbench.studies.dilated_attention import profiles

    config = profiles.resolve("default", cuda=True)
    branches = profiles.branches_for(config, 1 << 20)
    total = check._flops(config, branches, 1 << 20)
    assert total == sum(check._flops(config, [b], 1 << 20) for b in branches)
    assert total / (4 * 128 * 16 * (1 << 20)) == pytest.approx(
        2244.64, abs=0.01
    )  # pairs per query, the gpu cell's
    assert total == pattern.forward_flops(branches, 1 << 20, 16, 128, 1, causal=True)
