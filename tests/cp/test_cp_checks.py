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
    assert single.extra["checked_by"]["scope"].startswith("baseline") and single.ok is None
