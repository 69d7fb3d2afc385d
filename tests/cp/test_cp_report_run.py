"""How the cp report runs: profiles, torch_cp guards, OOM skip, warm-up line, breakdown kernels, notebook."""

import contextlib
import types
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from cp_report_helpers import GIB

from attnbench.bench.warmup import report_line
from attnbench.cp import STRATEGIES, torch_cp
from attnbench.cp.local import MathKernel
from attnbench.studies.context_parallel import profiles
from attnbench.studies.context_parallel.overlap import NoopKernel, TimedKernel
from attnbench.studies.context_parallel.sweep import predicted_oom

NOTEBOOK = Path(__file__).parents[2] / "notebooks" / "context_parallel.md"


# --- profiles -------------------------------------------------------------------------------------


def test_profile_resolution_and_cpu_smoke():
    assert profiles.resolve("auto", cuda=False)["profile"] == "smoke"
    assert profiles.resolve("auto", cuda=True)["profile"] == "default"
    smoke = profiles.resolve("smoke", cuda=False)
    assert (
        smoke["device"] == "cpu"
        and smoke["kernel"] == "cpu_math"
        and "not a GPU measurement" in smoke["label"]
    )
    with pytest.raises(ValueError, match="needs CUDA"):
        profiles.resolve("default", cuda=False)
    with pytest.raises(ValueError, match="got 'huge'"):
        profiles.resolve("huge", cuda=True)


def test_default_profile_fits_one_device_call_on_two_h200():
    config = profiles.PROFILES["default"]
    points = {tuple(p) for p in config["points"]}
    assert points == {(131072, "causal"), (131072, "full"), (262144, "causal")}  # 256k causal: the target
    assert config["timing"]["min_reps"] == 3 and config["timing"]["min_time_s"] == 1.0
    estimate = profiles.estimate_seconds(config, profiles.ours(STRATEGIES), world=2)
    assert 180 <= estimate["bench_s"] <= 330  # about 4-5 minutes of benchmark per local kernel
    assert estimate["kernels"] == 2  # cuDNN and FlashAttention-3: each sweep is a cell of its own
    # one device command runs at most 10 minutes: every distributed cell fits one (cached cells carry
    # over), the peers (TE, MagiAttention) included where they are installed
    everything = profiles.estimate_seconds(config, list(STRATEGIES), world=2)
    assert everything["bench_s"] == estimate["bench_s"]  # the peers are timed in bench_peers, once
    assert 0 < everything["bench_peers_s"] < everything["bench_s"] and estimate["bench_peers_s"] == 0
    assert everything["notebook_s"] > estimate["notebook_s"]
    for e in (estimate, everything):
        assert max(e["bench_s"], e["bench_peers_s"]) + profiles.CELL_START_S <= 9 * 60, e
        assert e["correctness_s"] <= 9 * 60, e  # the check at 256k x 40 heads with its fp32 reference
        assert e["notebook_s"] <= 3 * 9 * 60, e
    for seq in (131072, 262144, 524288, 1048576):  # every length splits into 2P zigzag chunks at P <= 8
        assert seq % 16 == 0


def test_cost_model_scales_with_length_mask_and_the_ring_imbalance():
    base = profiles.call_ms("zigzag", 131072, "causal", "fwd_bwd", 2)
    assert base == pytest.approx(580.0)
    assert profiles.call_ms("zigzag", 262144, "causal", "fwd_bwd", 2) == pytest.approx(4 * base)
    assert profiles.call_ms("zigzag", 131072, "full", "fwd_bwd", 2) == pytest.approx(2 * base)
    assert profiles.call_ms("ring", 131072, "causal", "fwd_bwd", 2) == pytest.approx(854.0)
    assert profiles.call_ms("zigzag", 131072, "causal", "fwd_bwd", 4) == pytest.approx(base / 2)


# --- torch_cp guards (torch <= 2.11 behaviour simulated) -------------------------------------------


def fake_cp_module(calls):
    options = types.SimpleNamespace(rotate_method="gather", enable_load_balance=True)

    def set_rotate_method(method):
        options.rotate_method = method

    def disable():
        calls.append("disable")

    return types.SimpleNamespace(
        _cp_options=options,
        set_rotate_method=set_rotate_method,
        _disable_context_parallel_dispatcher_impl=disable,
    )


@contextlib.contextmanager
def leaky_patch():
    """Like torch 2.11's context_parallel: patches SDPA, and skips its clean-up when the body raises."""
    original = F.scaled_dot_product_attention
    F.scaled_dot_product_attention = lambda *a, **k: "ring"
    yield
    F.scaled_dot_product_attention = original


def test_torch_cp_restores_sdpa_and_options_after_a_failure():
    calls, original = [], F.scaled_dot_product_attention
    module = fake_cp_module(calls)
    seen = {}
    with (
        pytest.raises(RuntimeError, match="boom"),
        torch_cp._options_set(module, rotate_method="alltoall", load_balance=False),
        torch_cp._sdpa_restored(module),
        leaky_patch(),
    ):
        seen["balance"], seen["rotate"] = (
            module._cp_options.enable_load_balance,
            module._cp_options.rotate_method,
        )
        raise RuntimeError("boom")
    assert seen == {"balance": False, "rotate": "alltoall"}  # full mask: load balancing off inside
    assert F.scaled_dot_product_attention is original and calls == ["disable"]
    assert module._cp_options.enable_load_balance is True and module._cp_options.rotate_method == "gather"


def test_torch_cp_leaves_a_clean_exit_alone():
    calls = []
    module = fake_cp_module(calls)
    with (
        torch_cp._options_set(module, rotate_method="allgather", load_balance=True),
        torch_cp._sdpa_restored(module),
    ):
        assert module._cp_options.enable_load_balance is True
    assert calls == []


def test_torch_cp_module_has_the_options_we_set():
    module = torch_cp.cp_module()
    assert hasattr(module._cp_options, "enable_load_balance") and hasattr(module._cp_options, "rotate_method")
    assert callable(module.set_rotate_method) and callable(module._disable_context_parallel_dispatcher_impl)


# --- predicted OOM, warm-up line -----------------------------------------------------------------


def test_predicted_oom_extrapolates_linearly():
    key = ("cp_torch_cp", "causal", "fwd_bwd")
    history = {key: (131072, 20 * GIB)}
    assert predicted_oom({}, key, 1048576, 141 * GIB) is None  # nothing measured yet: run it
    assert predicted_oom(history, key, 524288, 141 * GIB) is None  # 80 GiB fits
    why = predicted_oom(history, key, 1048576, 141 * GIB)
    assert why.startswith("not run: predicted peak 160 GiB") and "cannot rehearse" in why
    assert predicted_oom(history, key, 1048576, None) is None  # CPU: no device memory to exceed


def test_warm_up_clock_line():
    def snap(mhz):
        return {"sm_mhz": mhz, "max_sm_mhz": [1980.0] * len(mhz), "reason": None}

    nodes = [{"before": snap([345.0, 345.0]), "after": snap([1980.0, 1965.0])}]
    assert report_line(nodes) == (
        "SM clock before warm-up 345 MHz, under load at its end 1965-1980 MHz (max 1980 MHz)"
    )
    unread = {"sm_mhz": None, "max_sm_mhz": None, "reason": "nvidia-smi not found on PATH"}
    assert (
        report_line([{"before": unread, "after": unread}])
        == "SM clock not read (nvidia-smi not found on PATH)"
    )


# --- kernels of the breakdown ---------------------------------------------------------------------


def test_timed_kernel_counts_pairs_and_noop_kernel_has_the_shapes():
    q = torch.randn(1, 2, 8, 4)
    k = torch.randn(1, 2, 6, 4)
    timed = TimedKernel(MathKernel(), torch.device("cpu"))
    timed.forward(q, q, q, causal=True, scale=0.5)
    timed.forward(q, k, k, causal=False, scale=0.5)
    assert timed.pairs == 2 * (8 * 9 // 2) + 2 * 8 * 6
    assert timed.watch.take_ms() > 0 and timed.watch.take_ms() == 0
    out, lse = NoopKernel().forward(q, k, k, causal=False, scale=0.5)
    assert out.shape == q.shape and lse.shape == (1, 2, 8) and lse.dtype == torch.float32
    assert [g.shape for g in NoopKernel().backward(q, q, k, k, out, lse, causal=False, scale=0.5)] == [
        q.shape,
        k.shape,
        k.shape,
    ]


# --- the notebook ---------------------------------------------------------------------------------


def test_notebook_parses_with_distributed_cells():
    from attnbench.notebook.document.parse import parse_notebook
    from attnbench.notebook.run.graph import load_graph

    notebook = parse_notebook(NOTEBOOK)
    assert NOTEBOOK.read_text().startswith("#!/usr/bin/env -S uv run attnbench run\n")
    cells = {c.id: c for c in notebook.cells}
    assert list(cells) == [
        "gpu",
        "correctness",
        "correctness_table",
        "bench",
        "bench_peers",
        "bench_table",
        "bench_fa3",
        "bench_fa3_table",
        "overlap",
        "overlap_table",
        "plot",
        "targets",
        "published",
    ]
    distributed = {"correctness", "bench", "bench_peers", "bench_fa3", "overlap"}
    assert {i for i, c in cells.items() if c.gpus} == distributed
    assert all(cells[i].gpus == 2 for i in distributed)
    assert set(notebook.front_matter["params"]) == {"profile", "strategies", "strategy_options"}
    load_graph([NOTEBOOK])  # every `needs` names a cell, no cycle


def _run_alone(script: Path, cwd: Path):
    """Run `script` as one process outside torchrun (no RANK/WORLD_SIZE, no GPU), as a user would."""
    import os
    import subprocess
    import sys

    env = {
        k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    }
    env["CUDA_VISIBLE_DEVICES"] = ""
    done = subprocess.run([sys.executable, str(script)], check=False, capture_output=True, text=True,
                          timeout=100, env=env, cwd=cwd)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip().splitlines()[-1]


@pytest.mark.timeout(120)
def test_a_distributed_cell_started_alone_runs_as_one_process(tmp_path):
    script = tmp_path / "alone.py"
    script.write_text(
        "from attnbench.cp.launch import init_distributed\n"
        "from attnbench.studies.context_parallel.sweep import run_sweep, grid\n"
        "rank, world, device = init_distributed()\n"
        "sweep = run_sweep(['zigzag'], grid([16], ['causal']), passes=('fwd',), warmup_s=0, kernel='cpu_math',\n"
        "                  heads=2, head_dim=8, dtype='float32', min_reps=1, max_reps=1, min_time_s=0)\n"
        "print(rank, world, [r.status for r in sweep.rows])\n"
    )
    assert _run_alone(script, tmp_path) == "0 1 ['ok', 'ok']"


def test_ours_and_peers_split_the_strategies():
    names = list(STRATEGIES)
    assert profiles.peers(names) == ["te_p2p", "te_a2a", "te_all_gather", "magi"]
    assert profiles.ours(names) + profiles.peers(names) == names  # each in one bench cell, in order


@pytest.mark.timeout(120)
def test_the_peers_cell_sweeps_only_its_strategies_without_a_reference(tmp_path):
    script = tmp_path / "peers.py"
    script.write_text(
        "from attnbench.studies.context_parallel import profiles\n"
        "from attnbench.studies.context_parallel.sweep import notebook_sweep\n"
        "config = profiles.resolve('smoke', False)\n"
        "config.update(strategies=['zigzag', 'te_p2p'], strategy_options={})\n"
        "rank, sweep = notebook_sweep(config, config['kernel'], strategies=profiles.peers(config['strategies']),\n"
        "                             reference=False)\n"
        "print(sorted({r.provider for r in sweep.rows}))\n"
    )
    assert _run_alone(script, tmp_path) == "['cp_te_p2p']"  # no zigzag, no single-GPU reference
    assert (tmp_path / "results.jsonl").exists() and (tmp_path / "sweep.json").exists()


@pytest.mark.timeout(120)
def test_a_run_naming_no_peer_leaves_the_peers_cell_an_empty_results_file(tmp_path):
    """`-p strategies=[zigzag]`: the peers' cell times nothing, and its results.jsonl exists (empty), so
    the report cells that read every bench cell's rows (read_stages) do not fail on a missing file."""
    (tmp_path / "results.jsonl").write_text('{"stale": "row of an earlier run"}\n')
    script = tmp_path / "none.py"
    script.write_text(
        "from attnbench.studies.context_parallel import profiles\n"
        "from attnbench.studies.context_parallel.sweep import notebook_sweep\n"
        "config = profiles.resolve('smoke', False)\n"
        "config.update(strategies=['zigzag'], strategy_options={})\n"
        "rank, sweep = notebook_sweep(config, config['kernel'], strategies=profiles.peers(config['strategies']),\n"
        "                             reference=False)\n"
        "print(len(sweep.rows))\n"
    )
    assert _run_alone(script, tmp_path) == "0"
    assert (tmp_path / "results.jsonl").read_text() == ""


@pytest.mark.timeout(120)
def test_every_row_is_scored_against_the_gpu_cells_measured_peak(tmp_path):
    """The gpu cell's measured bf16 matmul peak (profile.json) reaches every row, the single-GPU reference
    too, and sweep.json keeps it for the headline: with a peak far below what the rows do, each timed row
    is a measurement error, never a result."""
    script = tmp_path / "peak.py"
    script.write_text(
        "import json\n"
        "from attnbench.studies.context_parallel import profiles\n"
        "from attnbench.studies.context_parallel.sweep import notebook_sweep\n"
        "config = profiles.resolve('smoke', False)\n"
        "config.update(strategies=['zigzag'], strategy_options={}, points=[[64, 'causal']], passes=['fwd'],\n"
        "              peak_tflops={'bf16': 1e-9}, peak_sm_clock_mhz={'bf16': None})\n"
        "rank, sweep = notebook_sweep(config, config['kernel'])\n"
        "rows = [(r.provider, r.status, 'measured bf16 matmul peak' in r.reason) for r in sweep.rows]\n"
        "print(rows, json.load(open('sweep.json'))['measured_matmul_peak_tflops'])\n"
    )
    said = _run_alone(script, tmp_path)
    assert said == "[('single_gpu_math', 'error', True), ('cp_zigzag', 'error', True)] 1e-09"
