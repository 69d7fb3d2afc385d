"""Worker side of the sweep/overlap/verify tests (suite "sweep"): runs on every rank of a gloo group and
records what the parent asserts on (cp_worker.main calls `run_sweep_suite`)."""

from __future__ import annotations

import time

import torch
import torch.distributed as dist

SMALL = {
    "heads": 4,
    "head_dim": 16,
    "dtype": "float32",
    "min_reps": 2,
    "max_reps": 2,
    "min_time_s": 0.0,
    "max_time_s": 5.0,
}


def _record(rec, case_id: str, fn) -> None:
    try:
        rec.add(case=case_id, kind="value", value=fn())
    except Exception as exc:  # noqa: BLE001 - the parent asserts on the record
        rec.exception(case_id, exc)


def _sweep_order():
    """run_sweep must warm the GPU up before its first timed row: record the order of the calls."""
    from attnbench.studies.context_parallel import sweep as bench

    calls = []
    originals = bench.warm_up, bench.measure_reference, bench.measure

    def warm_up(seconds, group=None):
        calls.append(("warm_up", time.perf_counter()))
        return originals[0](seconds, group=group)

    def reference(*args, **kwargs):
        calls.append(("reference", time.perf_counter()))
        return originals[1](*args, **kwargs)

    def measure(*args, **kwargs):
        calls.append(("measure", time.perf_counter()))
        return originals[2](*args, **kwargs)

    bench.warm_up, bench.measure_reference, bench.measure = warm_up, reference, measure
    try:
        sweep = bench.run_sweep(
            ["ring", "zigzag"],
            bench.grid([32], ["causal"]),
            passes=("fwd",),
            warmup_s=0.2,
            kernel="cpu_math",
            **SMALL,
        )
    finally:
        bench.warm_up, bench.measure_reference, bench.measure = originals
    return {
        "order": [name for name, _ in calls],
        "warmup_gap_s": calls[1][1] - calls[0][1],
        "warmup": sweep.warmup,
        "statuses": [r.status for r in sweep.rows],
        "providers": [r.provider for r in sweep.rows],
    }


def _first_call_error():
    """A failure in the first real call on every rank, before any communication (like torch_cp's
    'Load balancing requires `is_causal=True`', raised before its ring starts) is a row with the
    reason, and the group keeps working."""
    from attnbench.cp import comm
    from attnbench.studies.context_parallel import measure
    from attnbench.studies.context_parallel import sweep as bench

    original = measure.attention

    def refusing(*args, **kwargs):
        if not comm.in_rehearsal():
            raise RuntimeError("Load balancing requires `is_causal=True`. (injected by the test)")
        return original(*args, **kwargs)

    measure.attention = refusing
    try:
        failed = bench.measure("zigzag", seq_len=32, mask="full", pass_="fwd", kernel="cpu_math", **SMALL)
    finally:
        measure.attention = original
    after = bench.measure("zigzag", seq_len=32, mask="full", pass_="fwd", kernel="cpu_math", **SMALL)
    return {"failed": failed.to_dict(), "after": after.to_dict()}


WARM_S = 0.3  # the breakdown's steady-state warm-up asked for in the "warm" case


def _breakdown():
    from attnbench.cp.local import MathKernel
    from attnbench.studies.context_parallel.overlap import breakdown

    common = {"mask": "causal", "pass_": "fwd_bwd", "heads": 4, "head_dim": 16, "dtype": "float32"}
    common.update(kernel="cpu_math", reps=2)
    out = {}
    for strategy in ("ring", "zigzag", "ulysses"):
        out[strategy] = breakdown(strategy, seq_len=64, **common)
    # the timing protocol's warm-up, asked for on a CPU: each of the real call, the no-op call and the
    # exchange warms up this long before it is timed
    began = time.perf_counter()
    out["warm"] = breakdown("zigzag", seq_len=64, warmup_min_s=WARM_S, **{**common, "pass_": "fwd"})
    out["warm_seconds"] = time.perf_counter() - began
    # an out-of-memory on every rank in the steady-state warm-up's first call (the checked first call
    # passed): agreed there, the rows say oom and where; Ulysses, whose all-to-all is done before its
    # kernel fails, so no rank is left in a transfer
    original, calls = MathKernel.forward, []

    def failing_forward(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise torch.OutOfMemoryError("CUDA out of memory (injected by the test)")
        return original(self, *args, **kwargs)

    MathKernel.forward = failing_forward
    try:
        out["warm-oom"] = breakdown("ulysses", seq_len=64, **common)
    finally:
        MathKernel.forward = original
    refused = {"bad-mask": {"mask": "sliding_window", "seq_len": 64}, "bad-length": {"seq_len": 63}}
    for name, case in refused.items():
        kw = {"mask": "causal", **case}
        out[name] = breakdown("ring", heads=4, head_dim=16, dtype="float32", kernel="cpu_math", reps=2, **kw)
    return out


def _verify():
    """verify.check_all passes correct strategies, and fails a case that is wrong on one rank only."""
    from attnbench.cp.local import MathKernel
    from attnbench.studies.context_parallel import verify

    good = verify.check_all(
        ["ring", "ulysses", "torch_cp"], seq_len=32, heads=4, head_dim=16, kernel="cpu_math"
    )
    original = MathKernel.backward

    def wrong_on_rank1(self, *args, **kwargs):
        dq, dk, dv = original(self, *args, **kwargs)
        return (dq * 1.5 if dist.get_rank() == 1 else dq), dk, dv

    MathKernel.backward = wrong_on_rank1
    try:
        bad = verify.check_all(["zigzag"], seq_len=32, heads=4, head_dim=16, kernel="cpu_math")
    finally:
        MathKernel.backward = original
    return {"good": good, "bad": bad}


def run_sweep_suite(rec) -> None:
    torch.manual_seed(0)
    _record(rec, "sweep-order", _sweep_order)
    _record(rec, "first-call-error", _first_call_error)
    _record(rec, "breakdown", _breakdown)
    _record(rec, "verify", _verify)
