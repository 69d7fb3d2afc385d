"""A timed context-parallel row's statistics and its score: TFLOP/s per GPU and its share of each peak.

A CP row's time is the slowest rank's and its work is spread over `world` GPUs, so its TFLOP/s per GPU is
the whole call's FLOPs / world / median, and that per-GPU number is what is compared with one GPU's
peaks (bench.flops.score, the same rule as every other row): a row above 100 % of any peak is a
measurement error, never a result, and becomes an `error` row with the reason. The single-GPU reference
is scored the same way with world 1. Every input of the verdict is agreed over the ranks (the samples are
the slowest rank's, the clock the lowest rank's, the GPU model and the given peak the same), so every rank
returns the same row.
"""

from __future__ import annotations

import torch

from attnbench.bench import flops
from attnbench.bench.timing import quantile
from attnbench.rows import Result


def summary(samples: list[float]) -> dict:
    """Median, p20, p80 and count of the timed milliseconds."""
    ordered = sorted(samples)
    return {
        "ms_median": quantile(ordered, 0.5),
        "ms_p20": quantile(ordered, 0.2),
        "ms_p80": quantile(ordered, 0.8),
        "reps": len(samples),
    }


def score_row(row: Result, device, *, world: int = 1, peak_tflops=None) -> Result:
    """TFLOP/s per GPU (the call's FLOPs / world) and its share of each peak of the row's math: the
    measured matmul peak `peak_tflops` when given (a bf16/fp16 number or {math: TFLOP/s}, the same on
    every rank, or ranks could disagree on the verdict), this GPU's datasheet peak, and SMs x FLOP/clk x
    the row's SM clock. A row above any of them becomes an `error` row with the reason."""
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else None
    work = flops.attention_flops(row.workload, row.pass_) / world
    flops.score(row, None, peak_tflops, flops.datasheet_peak(gpu), device, work_flops=work)
    return row


def measured_row(provider, workload, pass_, samples, *, device, world, peak_tflops, **fields) -> Result:
    """The `ok` row of the timed `samples` (the same on every rank), scored by `score_row`."""
    timer = "cuda_event" if device.type == "cuda" else "perf_counter"
    row = Result(
        provider=provider,
        family="cp",
        status="ok",
        workload=workload,
        pass_=pass_,
        **summary(samples),
        timer=timer,
        **fields,
    )
    return score_row(row, device, world=world, peak_tflops=peak_tflops)
