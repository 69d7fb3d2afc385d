"""The sequence-parallel dilated attention on N GPUs: correctness against one process, timing, scaling.

Run under torchrun (the notebook's gpus=2 cells); every rank calls the same functions in the same order.

`check`: every rank builds the same global q, k, v, dout (seeded); the distributed version runs on its
contiguous shard, the single-process gather path (same kernel) on the whole sequence, and both are
compared with the chunked fp32 reference of the pattern (bench.correctness tolerance of the dtype):
out, dq, dk, dv of the shard, plus the largest LSE difference. Worst over ranks, on every rank.

`measure`: as cp/measure.py (its Call, rehearsal-free agreement, steady-state warm-up and slowest-rank
timing with the clock sampled are reused: bench.distributed):
`single` runs the gather path on the whole length alone on every GPU at once (no communication; the
slowest is reported); `distributed` runs this module's function on length / world per GPU. An
out-of-memory in the first call is agreed by all ranks and becomes an `oom` row; the distributed
call is first rehearsed with every transfer replaced by a local copy (cp.comm.rehearsal), so a rank
that would run out of memory is found before any rank waits in a collective.
TFLOP/s per GPU = the pattern's FLOPs / (median x GPUs used).
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist

from attnbench.bench import correctness, flops
from attnbench.bench.distributed import (
    AgreedFailure,
    agreed_peak_memory,
    attempt_steps,
    outcome,
    random_call,
    release,
    steady_state,
    timed_with_clock,
)
from attnbench.bench.inputs import make_dout, make_inputs
from attnbench.bench.timing import WARMUP_MIN_S, quantile
from attnbench.cp import comm
from attnbench.dilated.distributed import distributed_attention
from attnbench.dilated.gathered import gathered_attention
from attnbench.dilated.reference import chunked_reference
from attnbench.rows import Result, Status, Workload
from attnbench.studies.dilated_attention import measure as single
from attnbench.studies.dilated_attention.profiles import branches_for


def _workload(config: dict, seq_len: int, mask: str) -> Workload:
    s = config["shape"]
    return Workload(s["batch"], seq_len, seq_len, s["heads"], s["heads"], s["head_dim"], s["dtype"], mask)


def _errors(ours, ref, dtype: str) -> dict:
    names = ("out", "dq", "dk", "dv")
    return {
        name: correctness.compare(a, b, dtype, grad=name != "out", what=name).to_dict()
        for name, a, b in zip(names, ours, ref)
    }


def check(config: dict, *, group=None) -> list[dict]:
    """One record per mask (the same on every rank): errors of the distributed and the single-process
    version against the fp32 reference, worst rank, and a status."""
    spec = config["distributed"]
    world, rank, device = comm.group_size(group), comm.group_rank(group), comm.comm_device(group)
    n, backend = spec["correctness_seq_len"], spec["backend"]
    records = []
    for mask in config["correctness"]["masks"]:
        w = _workload(config, n, mask)
        branches, causal = branches_for(config, n), mask == "causal"
        record = {"mask": mask, "seq_len": n, "world": world, "backend": backend, "dtype": w.dtype}
        status, message = Status.OK, ""
        try:
            q, k, v = make_inputs(w, device)
            dout = make_dout(w, device)
            ref = chunked_reference(q, k, v, dout, branches, causal=causal)
            rows = slice(rank * (n // world), (rank + 1) * (n // world))
            shard = [t[:, :, rows].detach().clone().requires_grad_(True) for t in (q, k, v)]
            out, lse = distributed_attention(*shard, branches, causal=causal, group=group, backend=backend)
            grads = torch.autograd.grad(out, shard, dout[:, :, rows])
            mine = {
                "distributed": _errors((out, *grads), [t[:, :, rows] for t in (ref[0], *ref[2:])], w.dtype)
            }
            finite = torch.isfinite(ref[1][:, :, rows])
            mine["lse_max_abs"] = (
                float((lse - ref[1][:, :, rows])[finite].abs().max()) if finite.any() else 0.0
            )
            full = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
            out1, _ = gathered_attention(*full, branches, causal=causal, backend=backend)
            grads1 = torch.autograd.grad(out1, full, dout)
            mine["single"] = _errors([t[:, :, rows] for t in (out1, *grads1)],
                                     [t[:, :, rows] for t in (ref[0], *ref[2:])], w.dtype)  # fmt: skip
        except Exception as exc:  # noqa: BLE001 - agreed below, then a record
            status, message = outcome(exc)
            mine = {}
        finally:
            release(device)
        everyone: list = [None] * world
        dist.all_gather_object(everyone, (status, message, mine), group=group)
        failed = [f"rank {r}: {m}" for r, (s, m, _) in enumerate(everyone) if s != Status.OK]
        if failed:
            record.update(status="error", reason="; ".join(failed)[:600])
        else:
            record.update(_worst([e[2] for e in everyone]))
        records.append(record)
    return records


def _worst(per_rank: list[dict]) -> dict:
    errors = {}
    for version in ("distributed", "single"):
        errors[version] = {}
        for name in ("out", "dq", "dk", "dv"):
            worst = max((r[version][name] for r in per_rank), key=lambda c: (not c["ok"], c["rel_l2"]))
            errors[version][name] = worst
    bad = [f"{n}: {c['reason']}" for n, c in errors["distributed"].items() if not c["ok"]]
    return {"status": "incorrect" if bad else "ok", "reason": "; ".join(bad), "errors": errors,
            "lse_max_abs": max(r["lse_max_abs"] for r in per_rank)}  # fmt: skip


def _row(provider, w, pass_, status, reason="", **fields) -> Result:
    return Result(provider, "dilated", status, w, pass_, reason=reason, **fields)


def measure(kind: str, config: dict, seq_len: int, pass_: str, *, group=None, env: str = "") -> Result:
    """One timed row on every rank (the same Result everywhere). kind: single | distributed."""
    spec, world = config["distributed"], comm.group_size(group)
    device, backend = comm.comm_device(group), spec["backend"]
    w = _workload(config, seq_len, config["sweep"]["mask"])
    branches, causal = branches_for(config, seq_len), w.mask == "causal"
    used = 1 if kind == "single" else world
    provider = single.provider_name("gather" if kind == "single" else "distributed", backend)
    extra = {**single.pattern_extra(branches, w), "world_size": used, "backend": backend,
             "timing": "steady-state warm-up, then per repetition the slowest rank, the clock sampled"}  # fmt: skip
    if kind == "single":
        extra["ran_on"] = "every GPU of the job at once, alone (no communication), slowest reported"
        shape = (w.batch, w.heads_q, seq_len, w.head_dim)

        def fn(q, k, v, _check):
            return gathered_attention(q, k, v, branches, causal=causal, backend=backend)[0]
    else:
        shape = (w.batch, w.heads_q, seq_len // world, w.head_dim)

        def fn(q, k, v, check_ranks):
            return distributed_attention(q, k, v, branches, causal=causal, group=group, backend=backend,
                                         check_ranks=check_ranks)[0]  # fmt: skip

    state: dict = {}
    steps = [
        lambda: state.update(call=random_call(fn, pass_, shape, w.dtype, device, comm.group_rank(group)))
    ]
    if kind == "distributed":
        steps.append(lambda: _rehearse(state["call"]))
    steps.append(lambda: _first_call(state, device))
    failed = attempt_steps(steps, group, state, device)
    if failed:
        status, message, _ = failed
        return _row(provider, w, pass_, status, message, env=env, extra=extra)
    # `single` has no communication inside the call: a failure on one rank is agreed after every call
    agree, rule = kind == "single", spec["timing"]
    try:
        warmup_s = steady_state(state["call"], group, device, WARMUP_MIN_S if device.type == "cuda" else 0.0,
                                agree_failures=agree)  # fmt: skip
        samples, conditions = timed_with_clock(state["call"], group, device, agree_failures=agree, **rule)
        peak = agreed_peak_memory(device, group)
    except AgreedFailure as failure:
        return _row(provider, w, pass_, failure.status, failure.message, env=env, extra=extra)
    finally:
        state.pop("call", None)
        release(device)
    ordered = sorted(samples)
    row = _row(provider, w, pass_, "ok", ms_median=quantile(ordered, 0.5), ms_p20=quantile(ordered, 0.2),
               ms_p80=quantile(ordered, 0.8), reps=len(samples), peak_mem_bytes=peak, setup_ms=state.get("setup_ms"),
               timer="cuda_event" if device.type == "cuda" else "perf_counter", warmup_s=warmup_s, **conditions,
               env=env, extra=extra)  # fmt: skip
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else None
    single.finish(row, None, flops.datasheet_peak(gpu), gpus=used)
    row.extra["tflops_per_gpu"] = True
    return row


def _rehearse(call) -> None:
    with comm.rehearsal():
        call.before(False)
        call(False)


def _first_call(state: dict, device) -> None:
    start = time.perf_counter()
    state["call"].before(True)
    state["call"](True)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
    state["setup_ms"] = (time.perf_counter() - start) * 1e3


def run_sweep(config: dict, *, group=None, env: str = "", progress=None) -> list[Result]:
    """Single-GPU rows at every length and length / world (weak scaling), distributed rows at every
    length, forward and forward+backward."""
    spec, world = config["distributed"], comm.group_size(group)
    lengths = spec["seq_lens"]
    singles = sorted(set(lengths) | {n // world for n in lengths})
    rows = []
    for pass_ in spec["passes"]:
        for kind, ns in (("single", singles), ("distributed", lengths)):
            for n in ns:
                row = measure(kind, config, n, pass_, group=group, env=env)
                rows.append(row)
                if progress:
                    progress(row)
    return rows
