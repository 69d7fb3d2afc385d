"""Benchmark driver for context-parallel attention: a sweep of Result rows, one per (strategy, length,
mask, pass), plus a single-GPU reference row at the same per-GPU tokens.

Run under torchrun (the notebook's gpus=N cells); every rank calls the same functions in the same
order and gets the same rows back; rank 0 writes them (`run_sweep`). How one row is measured (inputs,
communication-free rehearsal for OOM, warm-up, slowest-rank timing, TFLOP/s per GPU) is in
measure.py. A sweep starts with `warmup.warm_up`: about a second of matmuls on every rank, because an
idle GPU needs that long to reach its boost clock and the first row would otherwise be timed partly
at idle clocks (the first 2x H200 run: 281 TFLOP/s for a row that measured 563 once warm).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from attnbench.bench.profiles import measured_peak
from attnbench.bench.warmup import warm_up
from attnbench.cp import STRATEGIES, comm, get_strategy
from attnbench.cp.launch import init_distributed
from attnbench.rows import Result, Workload, write_jsonl
from attnbench.studies.context_parallel.checks import attach_checks
from attnbench.studies.context_parallel.measure import measure, measure_reference, row, strategy_label

MEMORY_FRACTION = 0.9  # a strategy that cannot rehearse is not run where its predicted peak exceeds this
REFERENCE_KEYS = {
    "batch",
    "heads",
    "head_dim",
    "dtype",
    "min_reps",
    "max_reps",
    "min_time_s",
    "max_time_s",
    "env",
    "peak_tflops",
}


@dataclass
class Sweep:
    rows: list[Result]
    warmup: dict = field(default_factory=dict)  # warm_up()'s record: seconds, TFLOP/s, clocks
    seconds: float = 0.0


def grid(seq_lens: Iterable[int], masks: Iterable[str] = ("causal", "full")) -> list[tuple[int, str]]:
    """Every (seq_len, mask) pair, lengths outermost."""
    masks = list(masks)
    return [(s, m) for s in seq_lens for m in masks]


def predicted_oom(history: dict, key: tuple, seq_len: int, total_bytes: int | None) -> str | None:
    """Why a strategy that cannot rehearse should not run at `seq_len`, or None.

    history[key] = (seq_len, peak bytes) of its longest measured row with the same mask and pass.
    Per-GPU memory of every strategy here is linear in the sequence (flash-style kernels keep no
    S x S matrix), so the peak is extrapolated linearly.
    """
    if key not in history or not total_bytes:
        return None
    measured_seq, peak = history[key]
    predicted = peak * seq_len / measured_seq
    if predicted <= MEMORY_FRACTION * total_bytes:
        return None
    gib = 2**30
    return (
        f"not run: predicted peak {predicted / gib:.0f} GiB per GPU (linear in sequence length from "
        f"{peak / gib:.1f} GiB at {measured_seq}) exceeds {MEMORY_FRACTION:.0%} of the "
        f"{total_bytes / gib:.0f} GiB device; this strategy cannot rehearse (its communication is inside "
        f"PyTorch) and an out-of-memory inside its collectives would leave the other ranks waiting"
    )


def _device_bytes(group) -> int | None:
    device = comm.comm_device(group)
    return torch.cuda.get_device_properties(device).total_memory if device.type == "cuda" else None


def run_sweep(
    strategies,
    points: Iterable[tuple[int, str]],
    *,
    passes=("fwd", "fwd_bwd"),
    out_path=None,
    reference_kernel: str | None = "cudnn",
    group=None,
    strategy_options: dict | None = None,
    warmup_s: float = 1.0,
    progress: Callable[[Result], None] | None = None,
    checks: list[dict] | None = None,
    **measure_kwargs,
) -> Sweep:
    """Every strategy at every (seq_len, mask) point and pass, each point preceded by a single-GPU
    reference at the same per-GPU tokens (seq_len / world); `warmup_s` seconds of GPU warm-up first.

    Rows go to `out_path` (JSONL, rank 0) as soon as they exist, so a crash keeps what was measured;
    `progress(row)` is called on every rank. `checks` (the correctness cell's results): each row says
    which check vouches for it (checks.attach_checks). strategy_options: {strategy: {option: value}}. Unknown
    strategies fail before anything runs.
    """
    strategy_options = strategy_options or {}
    strategies, points = list(strategies), list(points)
    for name in strategies + list(strategy_options):
        get_strategy(name)
    world, rows, history = comm.group_size(group), [], {}
    device_bytes = _device_bytes(group)
    started = time.perf_counter()

    def emit(result: Result) -> None:
        if checks is not None:  # which correctness check vouches for it (checks.py), before it is written
            attach_checks([result], checks)
        rows.append(result)
        if result.status == "ok" and result.peak_mem_bytes:
            key = (result.provider, result.workload.mask, result.pass_)
            if result.workload.seqlen_q >= history.get(key, (0, 0))[0]:
                history[key] = (result.workload.seqlen_q, result.peak_mem_bytes)
        if out_path and dist.get_rank() == 0:
            write_jsonl(out_path, [result], append=True)
        if progress:
            progress(result)

    warmup = warm_up(warmup_s, group=group) if warmup_s > 0 else {"seconds": 0, "report": "no warm-up"}
    reference_kwargs = {k: v for k, v in measure_kwargs.items() if k in REFERENCE_KEYS}
    for seq_len, mask in points:
        for pass_ in passes:
            if reference_kernel:
                emit(
                    measure_reference(
                        seq_len // world,
                        mask=mask,
                        pass_=pass_,
                        kernel=reference_kernel,
                        group=group,
                        **reference_kwargs,
                    )
                )
            for name in strategies:
                provider = f"cp_{strategy_label(name, measure_kwargs.get('kernel'))}"
                # a strategy that can rehearse finds its own out-of-memory; one that cannot is predicted
                why = None
                if not STRATEGIES[name].rehearsable:
                    why = predicted_oom(history, (provider, mask, pass_), seq_len, device_bytes)
                if why:
                    emit(_skipped(name, seq_len, mask, pass_, why, world, measure_kwargs))
                    continue
                emit(
                    measure(
                        name,
                        seq_len=seq_len,
                        mask=mask,
                        pass_=pass_,
                        group=group,
                        options=strategy_options.get(name),
                        **measure_kwargs,
                    )
                )
    return Sweep(rows, warmup, time.perf_counter() - started)


def notebook_sweep(
    config: dict,
    kernel: str,
    out_path: str = "results.jsonl",
    checks: list[dict] | None = None,
    strategies: list[str] | None = None,
    reference: bool = True,
) -> tuple[int, Sweep]:
    """The notebook's benchmark with one local kernel: `strategies` (default: the profile's) at the
    profile's points, the single-GPU reference with the same kernel first (unless `reference` is False:
    another cell of the run times it); rows to `out_path` (rank 0, appended as measured), a progress line
    per row and `sweep.json` (rank 0). Returns (rank, sweep); every rank gets the rows.
    """
    from attnbench.bench import env

    rank, world, device = init_distributed(timeout_s=600)
    if (device.type == "cuda") != (config["device"] == "cuda"):
        raise SystemExit(
            f"profile.json was resolved for {config['device']}; rerun the gpu cell on this machine"
        )
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else None
    if rank == 0:
        # rows are appended as they are measured; the file exists (empty) even when none is, e.g. a
        # `-p strategies=[...]` run naming no peer leaves the peers' cell nothing to time
        open(out_path, "w").close()
        banner = f"*** {config['label']} ***" if config.get("label") else f"{gpu} x {world}"
        print(f"{banner}; local kernel {kernel}", flush=True)

    # the reference runs the same kernel family alone; on CPU SDPA's math backend, once (default kernel)
    reference_kernel = (
        kernel if device.type == "cuda" else ("cudnn" if kernel in ("cpu_math", "cudnn") else None)
    )
    sweep = run_sweep(
        config["strategies"] if strategies is None else strategies,
        config["points"],
        passes=config["passes"],
        out_path=out_path,
        reference_kernel=reference_kernel if reference else None,
        strategy_options=config["strategy_options"],
        warmup_s=config["warmup_s"],
        progress=progress_line if rank == 0 else None,
        checks=checks,
        kernel=kernel,
        env=env.machine_id(gpu),
        # the gpu cell's measured bf16 matmul peak, with its clock (the same on every rank: one verdict)
        peak_tflops=(peak := measured_peak(config, "bf16")),
        **config["shape"],
        **config["timing"],
    )
    if rank == 0:
        _write_summary(config, sweep, gpu=gpu, world=world, kernel=kernel, peak=peak)
    return rank, sweep


def progress_line(r: Result) -> None:
    """One row as it is measured (rank 0): provider, length, mask, pass, status, time, TFLOP/s, memory."""
    ms = f"{r.ms_median:10.2f} ms" if r.ms_median else f"{'-':>13}"
    tf = f"{r.tflops:7.3g} TFLOP/s/GPU" if r.tflops else f"{'':19}"
    mem = f"{r.peak_mem_bytes / 2**30:6.1f} GiB" if r.peak_mem_bytes else f"{'':10}"
    print(
        f"{r.provider:<24} {r.workload.seqlen_q:>8} {r.workload.mask:<6} {r.pass_:<8} {r.status:<12} "
        f"{ms} {tf} {mem} {r.reason[:90]}",
        flush=True,
    )


def _write_summary(config: dict, sweep: Sweep, *, gpu, world: int, kernel: str, peak) -> None:
    """sweep.json (rank 0): the profile, the machine, the peaks scored against, seconds and status counts."""
    from attnbench.bench import flops

    counts = {s: sum(r.status == s for r in sweep.rows) for s in {r.status for r in sweep.rows}}
    summary = {
        "profile": config["profile"],
        "label": config.get("label"),
        "gpu": gpu,
        "world_size": world,
        "kernel": kernel,
        "datasheet_peak_tflops": flops.datasheet_peak(gpu),
        "measured_matmul_peak_tflops": None if peak is None else float(peak),
        "matmul_peak_sm_clock_mhz": flops.clock_of(peak),
        "sweep_seconds": round(sweep.seconds, 1),
        "estimate": config.get("estimate"),
        "warmup": sweep.warmup,
        "status_counts": counts,
    }
    with open("sweep.json", "w") as f:
        json.dump(summary, f, indent=2, default=str)
    print(f"\nwarm-up: {sweep.warmup.get('report')}")
    print(f"{len(sweep.rows)} rows in {sweep.seconds:.0f} s: {counts}\n")


def _skipped(name, seq_len, mask, pass_, reason, world, kwargs) -> Result:
    workload = Workload(
        kwargs.get("batch", 1),
        seq_len,
        seq_len,
        kwargs.get("heads", 40),
        kwargs.get("heads", 40),
        kwargs.get("head_dim", 128),
        kwargs.get("dtype", "bfloat16"),
        mask,
    )
    return row(
        f"cp_{strategy_label(name, kwargs.get('kernel'))}",
        workload,
        pass_,
        "oom",
        reason,
        env=kwargs.get("env", ""),
        extra={"world_size": world, "seq_per_gpu": seq_len // world, "predicted": True},
    )


__all__ = [
    "STRATEGIES",
    "Sweep",
    "grid",
    "init_distributed",
    "measure",
    "measure_reference",
    "notebook_sweep",
    "predicted_oom",
    "progress_line",
    "run_sweep",
]
