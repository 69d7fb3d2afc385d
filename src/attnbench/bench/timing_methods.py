"""One call timed three ways, to explain why a vendor's published TFLOP/s differ from ours.

- `events`: our harness (`timing.measure`): CUDA events around each call, a 3x-L2 write before each
  (not timed), calls back to back; median.
- `kernels`: the summed device time of the GPU kernels one call launches, read by torch.profiler
  (CUPTI), median over calls, each after the same L2 flush: no launch latency, no gaps between
  kernels. This is how cudnn-frontend's SDPA training benchmark (benchmark_single_sdpa.py) times.
- `events_idle`: CUDA events as ours, but with the GPU idle for `idle_s` before every call (that
  benchmark slept min(t/100, 1 s) after each call): a rested GPU runs its first milliseconds at a
  higher clock than one in a back-to-back loop at its power limit.

`pass_callable` builds what the sweep times for a pass (fwd under no_grad; bwd as autograd.grad on a
saved forward; fwd_bwd as both), from a provider's Prepared call.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch

from attnbench.bench import timing


def pass_callable(prepared, pass_: str, dout_like: torch.Tensor | None = None) -> Callable[[], object]:
    """The timed callable of one pass (first call already made, so compile/autotune are outside).

    A forward is `prepared.run` itself, as the sweep times it: time it under torch.no_grad() (as
    `compare(..., grad=False)` does), so no grad-mode switch sits inside the timed call."""
    if pass_ == "fwd":
        with torch.no_grad():
            prepared.run()
        return prepared.run
    inputs = tuple(t if t.requires_grad else t.requires_grad_(True) for t in prepared.inputs)
    out = prepared.run()
    dout = torch.randn_like(out) if dout_like is None else dout_like
    torch.autograd.grad(out, inputs, dout, retain_graph=pass_ == "bwd")
    if pass_ == "bwd":
        saved = out  # one forward, its graph kept: each call is the backward alone

        return lambda: torch.autograd.grad(saved, inputs, dout, retain_graph=True)
    return lambda: torch.autograd.grad(prepared.run(), inputs, dout)


def _flush_buffer(device) -> torch.Tensor:
    return torch.empty(timing.flush_buffer_bytes(device), dtype=torch.int8, device=device)


def kernel_ms(fn: Callable[[], object], reps: int = 10, device="cuda") -> float:
    """Median over `reps` calls of the summed GPU kernel time of one call (CUPTI via torch.profiler)."""
    from torch.profiler import ProfilerActivity, profile

    flush = _flush_buffer(device)
    totals = []
    for _ in range(reps):
        flush.zero_()
        torch.cuda.synchronize(device)
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize(device)
        # kernels only: memsets and copies count in our timed region, not in a kernel-only figure
        us = sum(
            e.self_device_time_total
            for e in prof.key_averages()
            if e.self_device_time_total > 0 and not e.key.lower().startswith(("memset", "memcpy"))
        )
        totals.append(us / 1e3)
    return statistics.median(totals)


def idle_event_ms(fn: Callable[[], object], reps: int = 10, idle_s: float = 0.1, device="cuda") -> float:
    """Median CUDA-event time of calls that each start on a GPU idle for `idle_s` (after an L2 flush)."""
    flush = _flush_buffer(device)
    samples = []
    for _ in range(reps):
        flush.zero_()
        torch.cuda.synchronize(device)
        time.sleep(idle_s)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize(device)
        samples.append(start.elapsed_time(end))
    return statistics.median(samples)


def compare(
    fn: Callable[[], object], *, timing_options: dict, grad: bool = True, reps: int = 10, idle_s: float = 0.1
) -> dict:
    """Milliseconds of one call by each method (see the module docstring); `grad=False` for a forward."""
    with torch.set_grad_enabled(grad):
        return {
            "events": timing.measure(fn, device="cuda", **timing_options).ms_median,
            "kernels": kernel_ms(fn, reps),
            "events_idle": idle_event_ms(fn, reps, idle_s),
        }
