"""Context-parallel strategies at 2 and 4 gloo ranks against single-process attention.

One spawned group per world size runs every case (cp_worker.py states inputs and tolerances);
each test reads its case's records. A group that hangs is killed at its timeout and fails.
"""

import pytest
from cp_asserts import EXPECTED_ERRORS, assert_matches_reference, assert_same_error_everywhere, rows
from cp_harness import WORLD_SUITES as SUITES
from cp_harness import spawned
from cp_worker import PEAKS, correctness_cases

from attnbench.bench.flops import attention_flops
from attnbench.rows import Workload

CASES = [(world, case.id) for world in (2, 4) for case in correctness_cases(world)]
ERRORS = [
    (world, case_id)
    for world in (2, 4)
    for case_id in EXPECTED_ERRORS
    if case_id != "err-usp-heads" or world >= 4
]


@pytest.mark.timeout(400)
@pytest.mark.parametrize("world,case_id", CASES, ids=[f"w{w}-{c}" for w, c in CASES])
def test_matches_single_process_attention(world, case_id):
    assert_matches_reference(spawned(world, SUITES[world]), case_id)


@pytest.mark.timeout(400)
@pytest.mark.parametrize("world,case_id", ERRORS, ids=[f"w{w}-{c}" for w, c in ERRORS])
def test_bad_input_raises_same_error_on_every_rank(world, case_id):
    assert_same_error_everywhere(spawned(world, SUITES[world]), case_id)


@pytest.mark.timeout(400)
@pytest.mark.parametrize("world", [2, 4])
def test_group_still_works_after_errors(world):
    assert_matches_reference(spawned(world, SUITES[world]), "after-errors")


@pytest.mark.timeout(400)
def test_bench_rows_are_measured_and_agree_across_ranks():
    group = spawned(2, SUITES[2])
    measured = (("bench-zigzag", "fwd_bwd"), ("bench-ring-fwd", "fwd"), ("bench-burst-bwd", "bwd"))
    for case_id, pass_ in measured:
        rank0, rank1 = rows(group, case_id)
        assert rank0 == rank1, f"{case_id}: ranks disagree"
        assert rank0["status"] == "ok", rank0
        assert rank0["pass"] == pass_ and rank0["timer"] == "perf_counter"
        assert rank0["reps"] >= 2 and rank0["ms_median"] > 0 and rank0["tflops"] > 0
        assert rank0["extra"]["world_size"] == 2 and rank0["seqlen_q"] == 32
    burst = rows(group, "bench-burst-bwd")[0]
    assert burst["extra"]["options"] == {"window": 2}  # the default window, resolved for the label


@pytest.mark.timeout(400)
def test_bench_reports_unavailable_unsupported_and_oom_rows():
    group = spawned(2, SUITES[2])
    torch_cp = rows(group, "bench-torch-cp")
    assert {r["status"] for r in torch_cp} == {"unavailable"} and "CUDA" in torch_cp[0]["reason"]
    heads = rows(group, "bench-ulysses-heads")
    assert {r["status"] for r in heads} == {"unsupported"} and "not divisible" in heads[0]["reason"]
    oom = rows(group, "bench-oom")  # injected on rank 1 only; both ranks report it, neither hangs
    assert {r["status"] for r in oom} == {"oom"}
    assert "rank 1" in oom[0]["reason"] and "rehearsal" in oom[0]["reason"]
    reference = rows(group, "bench-reference")
    assert reference[0]["status"] == "ok" and reference[0]["provider"] == "single_gpu_math"  # CPU: SDPA math
    assert reference[0]["extra"]["world_size"] == 1 and reference[0]["seqlen_q"] == 16


@pytest.mark.timeout(400)
def test_reference_oom_in_warmup_or_timed_repetitions_is_a_row_on_every_rank():
    group = spawned(2, SUITES[2])  # a hang here would kill the group at its timeout and fail
    where = {
        "bench-reference-oom-warmup": "in the steady-state warm-up",
        "bench-reference-oom": "in the timed repetitions",
        "bench-reference-oom-bwd": "in the timed repetitions",
    }
    for case_id, place in where.items():
        rank0, rank1 = rows(group, case_id)
        assert rank0 == rank1, f"{case_id}: ranks disagree"
        assert rank0["status"] == "oom", rank0
        assert rank0["provider"] == "single_gpu_math"
        assert "rank 1: OutOfMemoryError" in rank0["reason"] and "rank 0" not in rank0["reason"]
        assert place in rank0["reason"], (case_id, rank0["reason"])
    # the group still works afterwards: the sweep suite runs after these cases in the same group
    assert rows(group, "bench-reference")[0]["status"] == "ok"


@pytest.mark.timeout(400)
def test_reference_row_follows_the_timing_protocol():
    rank0, rank1 = rows(spawned(2, SUITES[2]), "bench-reference")
    assert rank0 == rank1
    assert rank0["warmup_s"] is not None and rank0["timing_method"] == "perf_counter"
    assert "sm_clock_mhz" in rank0 and "clock_source" in rank0  # None on a CPU: no clock to read
    assert rank0["setup_ms"] > 0 and rank0["extra"]["baseline"] is True


@pytest.mark.timeout(400)
def test_bench_rows_are_scored_per_gpu_and_a_row_above_a_peak_is_an_error_on_every_rank():
    group = spawned(2, SUITES[2])
    rank0, rank1 = rows(group, "bench-scored")
    assert rank0 == rank1 and rank0["status"] == "ok", rank0
    work = attention_flops(Workload(1, 32, 32, 4, 4, 16, "float32", "causal"), "fwd")
    per_gpu = work / 2 / (rank0["ms_median"] * 1e-3) / 1e12  # the whole call's FLOPs over 2 GPUs
    assert rank0["tflops"] == pytest.approx(per_gpu) and rank0["math"] in ("fp32", "tf32")
    assert (
        rank0["mfu"] == pytest.approx(per_gpu / PEAKS["huge"][rank0["math"]]) and rank0["over_peak"] is None
    )
    # no peak given: still scored (its math), a CPU has no datasheet or clock peak to share
    zigzag = rows(group, "bench-zigzag")[0]
    assert zigzag["math"] in ("fp32", "tf32") and zigzag["mfu"] is None and zigzag["over_peak"] is None
    for case_id in ("bench-over-peak", "bench-reference-over-peak"):
        rank0, rank1 = rows(group, case_id)
        assert rank0 == rank1, f"{case_id}: ranks disagree"
        assert rank0["status"] == "error" and rank0["reason"] == rank0["over_peak"], rank0
        assert rank0["reason"].startswith("above peak, a measurement error") and "measured" in rank0["reason"]
