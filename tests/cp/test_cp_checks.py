"""The check length rule, the exact fp32 reference, and which check vouches for which timed row."""

import math

import pytest
import torch

from attnbench.rows import Result, Workload
from attnbench.studies.context_parallel import profiles
from attnbench.studies.context_parallel.checks import attach_checks, check_bytes, check_plan
from attnbench.studies.context_parallel.verify import reference_fp32

GIB = 2**30


@pytest.mark.parametrize("causal", [True, False])
def test_chunked_reference_is_exact_attention_and_its_gradients(causal):
    torch.manual_seed(0)
    q, k, v, dout = (torch.randn(2, 3, 50, 8, dtype=torch.float64) for _ in range(4))
    res = reference_fp32(q, k, v, dout, causal, chunk_bytes=4 * 50 * 7)  # 7-row chunks: 8 of them
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    logits = leaves[0] @ leaves[1].transpose(-1, -2) / math.sqrt(8)
    if causal:
        logits = logits.masked_fill(torch.ones(50, 50, dtype=torch.bool).triu(1), float("-inf"))
    out = torch.softmax(logits, -1) @ leaves[2]
    out.backward(dout)
    expected = {"out": out, "lse": torch.logsumexp(logits, -1), "dq": leaves[0].grad}
    expected.update(dk=leaves[1].grad, dv=leaves[2].grad)
    for name, want in expected.items():
        assert (res[name].double() - want.detach()).abs().max() < 1e-5, name


def test_check_runs_at_the_timed_heads_and_the_longest_timed_length_that_fits():
    config = profiles.resolve("default", True)
    h100 = check_plan(config, 2, 80 * GIB)
    assert (h100["heads"], h100["head_dim"]) == (40, 128)  # the timed shape, not 16 heads
    # 256k needs ~65 GiB by the model, past 75% of 80 GiB (NCCL's buffers are not in the model: at 90% the
    # check's all-gather ran out of memory on an 80 GB H100): the H100 checks at 128k, an H200 at 256k
    assert h100["seq_len"] == 131072 and h100["fits"]
    assert (
        0.75 * 80 * GIB
        < check_bytes(262144, heads=40, head_dim=128, dtype="bfloat16", world=2)
        <= 0.9 * 80 * GIB
    )
    assert check_plan(config, 2, 141 * GIB)["seq_len"] == 262144
    assert check_plan(config, 2, 48 * GIB)["seq_len"] == 131072  # less memory: the shorter timed length
    tiny = check_plan(config, 2, 8 * GIB)  # nothing timed fits: halve the shortest until it does
    assert tiny["seq_len"] < 131072 and tiny["fits"] and "8 GiB" in tiny["rule"]
    assert check_plan(profiles.resolve("smoke", False), 2, None)["seq_len"] == 128


def _row(provider, seq, heads=40, status="ok", world=2):
    w = Workload(1, seq, seq, heads, heads, 128, "bfloat16", "causal")
    return Result(
        provider=provider,
        family="cp",
        status=status,
        workload=w,
        pass_="fwd_bwd",
        extra={"world_size": world},
    )


def _check(strategy, seq, heads=40, status="ok", ok=True, world=2):
    return {"strategy": strategy, "mask": "causal", "seq_len": seq, "heads": heads, "head_dim": 128,
            "dtype": "bfloat16", "world_size": world, "status": status, "ok": ok, "reason": ""}  # fmt: skip


def test_each_timed_row_says_which_check_vouches_for_it():
    rows = [
        _row("cp_zigzag", 262144),
        _row("cp_zigzag", 131072),
        _row("cp_ring", 262144),
        _row("cp_ulysses", 262144),
        _row("cp_te_p2p", 262144, status="unavailable"),
        _row("single_gpu_cudnn", 131072),
    ]
    checks = [_check("zigzag", 262144), _check("ring", 16384, heads=16), _check("ulysses", 262144, ok=False)]
    checks.append(_check("te_p2p", 262144, status="unavailable", ok=None))
    checks[2]["status"], checks[2]["reason"] = "incorrect", "beyond tolerance: dq"
    z256, z128, ring, ulysses, te, single = attach_checks(rows, checks)
    assert z256.extra["checked_by"]["scope"] == "same shape" and z256.ok is True
    assert z128.extra["checked_by"]["scope"] == "same heads, checked at 262144 tokens" and z128.ok is True
    # the old check at 16 heads vouches for nothing timed at 40
    assert ring.extra["checked_by"]["scope"] == "not checked" and ring.ok is None
    assert "16 heads" in ring.extra["checked_by"]["reason"]
    assert ulysses.status == "incorrect" and ulysses.ok is False and "dq" in ulysses.reason
    assert te.extra["checked_by"]["scope"] == "not checked" and te.status == "unavailable"
    assert "unavailable" in te.extra["checked_by"]["reason"]  # a check that could not run vouches for nothing
    # a baseline with no single-device run of its kernel in the checks: "not checked", and why
    assert single.extra["checked_by"]["scope"] == "not checked" and single.ok is None
    assert "no single-device" in single.extra["checked_by"]["reason"]


# --- single-GPU baselines: vouched for by the correctness cell's single-device run of their kernel ----


def _baseline(seq=65536, kernel="cudnn", mask="causal", heads=40):
    row = _row("single_gpu_" + kernel, seq, heads=heads)
    row.workload = Workload(1, seq, seq, heads, heads, 128, "bfloat16", mask)
    row.extra = {"world_size": 1, "kernel": kernel, "baseline": True}
    return row


def _rank_errors(single_out=0.01, ref_max=4.0, with_ref_max=True):
    """Two ranks' errors as verify.check_strategy records them: bound = 3 x single + 2e-3 x max|ref|."""
    ranks = []
    for rank in range(2):
        errors = {}
        for m in ("out", "dq", "dk", "dv"):
            single = single_out if m == "out" and rank == 1 else 0.001
            errors[m] = {"cp": 0.002, "single": single, "bound": 3 * single + 2e-3 * ref_max}
            if with_ref_max:
                errors[m]["ref_max"] = ref_max
        errors["lse"] = {"cp": 1e-6, "bound": 1e-3}
        ranks.append(errors)
    return ranks


def _kernel_check(strategy="zigzag", kernel="cudnn", seq=131072, **errors):
    check = _check(strategy, seq)
    check.update(kernel=kernel, rank_errors=_rank_errors(**errors))
    return check


def test_a_baseline_is_checked_by_its_kernels_single_device_run():
    checks = [_kernel_check(), _kernel_check("flash_attn3", kernel="flash_attn3")]
    (ok,) = attach_checks([_baseline()], checks)
    found = ok.extra["checked_by"]
    assert ok.ok is True and ok.status == "ok", found
    assert found["scope"] == "same heads, checked at 131072 tokens" and "single-device cudnn" in found["by"]
    # the worst rank's error against bench.correctness's bf16 max_abs bound x max|reference|
    assert found["errors"]["out"] == {"single": 0.01, "bound": pytest.approx(4e-2 * 4.0)}
    assert found["errors"]["dq"]["bound"] == pytest.approx(8e-2 * 4.0)  # gradients: x2


def test_a_baseline_beyond_its_bound_is_incorrect_and_older_records_recover_the_reference_max():
    # an older correctness.jsonl has no ref_max: max|reference| comes back out of the strategy's bound
    checks = [_kernel_check(single_out=0.5, with_ref_max=False)]
    (row,) = attach_checks([_baseline(131072)], checks)
    assert row.status == "incorrect" and row.ok is False and "out" in row.reason
    assert row.extra["checked_by"]["scope"] == "same shape"
    assert row.extra["checked_by"]["errors"]["out"]["bound"] == pytest.approx(4e-2 * 4.0)
    nan = [_kernel_check(single_out=float("nan"))]  # a NaN error fails, even on one rank
    assert attach_checks([_baseline()], nan)[0].ok is False


@pytest.mark.parametrize(
    "check,why",
    [
        (_kernel_check(kernel="flash_attn3"), "no single-device cudnn run"),  # another kernel
        ({**_kernel_check(), "rank_errors": None}, "per-rank errors"),  # an older record: worst rank only
        ({**_kernel_check(), "heads": 16}, "40 heads"),
    ],
)
def test_a_baseline_without_its_kernels_run_says_not_checked_and_why(check, why):
    (row,) = attach_checks([_baseline()], [check])
    assert row.ok is None and row.status == "ok"
    assert row.extra["checked_by"]["scope"] == "not checked" and why in row.extra["checked_by"]["reason"]


def test_the_cpu_baseline_is_checked_by_the_cpu_math_kernels_run():
    row = _baseline(kernel="math")
    assert attach_checks([row], [_kernel_check(kernel="cpu_math")])[0].ok is True
