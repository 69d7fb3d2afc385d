"""The triton_fa2 provider through the benchmark sweep: registered, correct rows, reasons where it cannot run."""

from __future__ import annotations

import torch

from attnbench.bench import providers
from attnbench.bench.providers.triton_fa2 import INTERPRETER_NOTE, TritonFlashAttention2
from attnbench.bench.sweep import run_sweep
from attnbench.rows import Workload

FAST = {"min_reps": 1, "min_time_ms": 0.0, "warmup_reps": 0, "max_reps": 1}


def test_registered_with_its_family():
    provider = providers.get("triton_fa2")
    assert provider.family == "attnbench_triton"
    assert providers.select(["attnbench_triton"]) == [provider, providers.get("triton_fa2_ieee")]
    assert provider.unavailable() is None  # triton imports here (the interpreter runs it without a GPU)


def test_sweep_rows_are_checked_and_correct():
    workloads = [
        Workload(1, 40, 40, 4, 2, 32, "bfloat16", "causal"),
        Workload(1, 24, 56, 2, 2, 16, "float32", "full"),
    ]
    variants = [providers.get("triton_fa2"), TritonFlashAttention2("triton_fa2_atomic", dq_mode="atomic")]
    rows = run_sweep(variants, workloads, ["fwd", "bwd", "fwd_bwd"], progress=None, timing_options=FAST)
    assert len(rows) == 12
    for row in rows:
        assert row.status == "ok" and row.ok, (row.provider, row.workload.label(), row.pass_, row.reason)
        assert set(row.extra["correctness"]) == ({"out"} if row.pass_ == "fwd" else {"dq", "dk", "dv"} | (
            {"out"} if row.pass_ == "fwd_bwd" else set()))  # fmt: skip
        if not torch.cuda.is_available():
            assert row.extra["note"].startswith(INTERPRETER_NOTE)


def test_unsupported_workloads_have_reasons():
    provider = providers.get("triton_fa2")
    cases = {
        Workload(1, 64, 64, 2, 2, 256, "bfloat16"): "head_dim 256",
        Workload(1, 64, 96, 2, 2, 64, "bfloat16", "causal"): "seqlen_q != seqlen_k",
        Workload(1, 64, 64, 2, 2, 64, "bfloat16", "sliding_window", window=16): "mask sliding_window",
    }
    for workload, reason in cases.items():
        status = provider.why_not(workload, "fwd")
        assert status is not None and status[0] == "unsupported" and reason in status[1], status


def test_true_fp32_is_its_own_provider_and_fp32_rows_say_which_math_they_ran():
    from attnbench.bench import flops

    tf32, ieee = providers.get("triton_fa2"), providers.get("triton_fa2_ieee")
    assert (tf32.tf32, ieee.tf32) == (True, False)
    assert flops.row_math("float32", tf32=tf32.tf32) == "tf32"
    assert flops.row_math("float32", tf32=ieee.tf32) == "fp32"
    assert "float32" in ieee.unsupported(Workload(1, 16, 16, 1, 1, 16, "bfloat16"), "fwd")  # fp32 only
    rows = run_sweep([ieee], [Workload(1, 24, 40, 2, 1, 16, "float32", "full")],
                     ["fwd", "bwd"], progress=None, timing_options=FAST)  # fmt: skip
    for row in rows:
        assert row.status == "ok" and row.ok, (row.pass_, row.reason)
        assert "fp32 inputs multiplied as ieee" in row.extra["note"]
        assert row.math == "fp32"
