"""The benchmark driver at 2 gloo ranks (the CPU part of the GPU fixes): warm-up before the first timed
row, a failed first call as a row, the per-rank time breakdown, the correctness check's verdicts.
The records come from cp_worker_sweep.py, run in the shared 2-rank group."""

import pytest
from cp_harness import WORLD_SUITES, by_case, spawned
from cp_worker_sweep import WARM_S

from attnbench.rows import OverlapRow, Result, Workload
from attnbench.studies.context_parallel.checks import attach_checks


def values(case_id: str) -> list:
    per_rank = by_case(spawned(2, WORLD_SUITES[2]), case_id)
    out = []
    for rank, recs in enumerate(per_rank):
        assert len(recs) == 1, f"{case_id}: rank {rank} recorded {recs}"
        rec = recs[0]
        assert rec["kind"] == "value", (
            f"{case_id}: rank {rank}: {rec.get('type')}: {rec.get('message')}\n{rec.get('traceback', '')}"
        )
        out.append(rec["value"])
    return out


@pytest.mark.timeout(400)
def test_sweep_warms_up_before_the_first_timed_row():
    rank0, rank1 = values("sweep-order")
    for v in (rank0, rank1):
        assert v["order"] == ["warm_up", "reference", "measure", "measure"], v["order"]
        assert v["warmup_gap_s"] >= 0.2  # the first row starts only after the warm-up's seconds
    warm = rank0["warmup"]
    assert warm == rank1["warmup"]  # agreed: every rank returns the same record
    assert [r["rank"] for r in warm["ranks"]] == [0, 1]
    assert all(r["seconds"] >= 0.2 and r["matmuls"] > 0 for r in warm["ranks"])
    assert warm["clocks_before"] and warm["clocks_after_under_load"]  # read once per node (local rank 0)
    assert "SM clock" in warm["report"]  # no nvidia-smi here: says so instead of a number
    assert rank0["statuses"] == ["ok", "ok", "ok"]
    assert rank0["providers"] == ["single_gpu_math", "cp_ring", "cp_zigzag"]


@pytest.mark.timeout(400)
def test_failed_first_call_is_a_row_and_the_group_goes_on():
    rank0, rank1 = values("first-call-error")
    assert rank0 == rank1
    failed = rank0["failed"]
    assert failed["status"] == "error", failed
    assert "Load balancing requires" in failed["reason"] and "rank 0" in failed["reason"]
    assert rank0["after"]["status"] == "ok"


@pytest.mark.timeout(400)
def test_breakdown_measures_work_imbalance_and_times_per_rank():
    rank0, rank1 = ({k: v for k, v in r.items() if k != "warm_seconds"} for r in values("breakdown"))
    assert rank0 == rank1  # but for each rank's own wall time of the "warm" case
    ring, zigzag, ulysses = rank0["ring"], rank0["zigzag"], rank0["ulysses"]
    assert [r["rank"] for r in ring] == [0, 1] and all(r["status"] == "ok" for r in ring + zigzag + ulysses)
    # contiguous causal ring at 2 ranks, 32 local rows: rank 0 the diagonal (528 pairs per head),
    # rank 1 the diagonal + one full block (528 + 1024): shares 0.508 and 1.492
    assert [r["work_pairs"] for r in ring] == [4 * 528, 4 * (528 + 1024)]
    assert ring[1]["work_share"] == pytest.approx(1552 / 1040)
    assert [r["work_share"] for r in zigzag] == [1.0, 1.0]
    assert [r["work_share"] for r in ulysses] == [1.0, 1.0]
    for r in ring + zigzag + ulysses:
        assert r["kernel_ms"] > 0 and r["comm_ms"] > 0 and r["total_ms"] > 0
    assert all(r["exchange_ms"] > 0 and r["exchange_bytes"] == 2 * 4 * 32 * 16 * 4 for r in ring)
    assert "exchange_ms" not in ulysses[0]
    # the timing protocol: a steady-state warm-up (none past one call on a CPU) and this rank's clock
    # fields (None here: a CPU has no clock to read), readable as OverlapRow
    for r in ring + zigzag + ulysses:
        assert r["warmup_s"] >= 0 and r["sm_clock_mhz"] is None and r["clock_source"] is None, r
        assert {"power_w", "comm_sm_clock_mhz"} <= set(r)
        assert OverlapRow.from_dict(OverlapRow.from_dict(r).to_dict()).warmup_s == r["warmup_s"]
    # the same guards as measure(): a reason on every rank, nothing run
    mask, length = rank0["bad-mask"], rank0["bad-length"]
    assert [r["rank"] for r in mask] == [0, 1] and [r["rank"] for r in length] == [0, 1]
    assert {r["status"] for r in mask + length} == {"unsupported"}
    assert all(r["reason"] == "mask sliding_window: CP strategies do causal and full" for r in mask)
    assert all(r["reason"] == "seq_len 63 is not divisible by the world size 2" for r in length)
    assert not any("total_ms" in r for r in mask + length)


@pytest.mark.timeout(400)
def test_verify_passes_good_strategies_and_fails_a_wrong_rank():
    rank0, rank1 = values("verify")
    assert rank0 == rank1
    good = {(c["strategy"], c["mask"]): c for c in rank0["good"]}
    for name in ("ring", "ulysses"):
        for mask in ("causal", "full"):
            c = good[(name, mask)]
            assert c["status"] == "ok" and c["ok"], c
            assert set(c["errors"]) == {"out", "dq", "dk", "dv"} and c["lse_err"] < 1e-3
    assert good[("torch_cp", "causal")]["status"] == "unavailable"
    # the single-device run the check records (every rank's shard) vouches for a CPU baseline row of the
    # same kernel, heads, head dim and dtype: within bench.correctness's bf16 bound of the fp32 reference
    for mask in ("causal", "full"):
        assert all("ref_max" in e for e in good[("ring", mask)]["errors"].values())
        w = Workload(1, 16, 16, 4, 4, 16, "bfloat16", mask)
        baseline = Result(
            "single_gpu_math", "cp", "ok", w, "fwd_bwd", extra={"kernel": "math", "world_size": 1}
        )
        (checked,) = attach_checks([baseline], rank0["good"])
        assert checked.ok is True, checked.extra["checked_by"]
        assert checked.extra["checked_by"]["scope"] == "same heads, checked at 32 tokens"
    bad = {c["mask"]: c for c in rank0["bad"]}
    for mask in ("causal", "full"):
        assert bad[mask]["status"] == "incorrect" and not bad[mask]["ok"]
        assert bad[mask]["reason"] == "beyond tolerance: dq"  # wrong on rank 1 only, failed on both


@pytest.mark.timeout(400)
def test_breakdown_warms_each_timing_up_to_steady_state_and_agrees_a_failure_there():
    rank0, rank1 = values("breakdown")
    warm = rank0["warm"]
    assert warm == rank1["warm"] and [r["status"] for r in warm] == ["ok", "ok"]
    # the real call's warm-up lasted the asked seconds (agreed: the same on every rank) ...
    assert all(r["warmup_s"] >= WARM_S for r in warm)
    # ... and so did the no-op call's and the exchange's: three warm-ups before their timed calls
    assert min(rank0["warm_seconds"], rank1["warm_seconds"]) >= 3 * WARM_S
    oom = rank0["warm-oom"]  # injected on every rank in the warm-up's first call: an oom row, not an error
    assert oom == rank1["warm-oom"] and [r["status"] for r in oom] == ["oom", "oom"]
    assert (
        "in the steady-state warm-up" in oom[0]["reason"] and "rank 1: OutOfMemoryError" in oom[0]["reason"]
    )
    assert not any("total_ms" in r for r in oom)
