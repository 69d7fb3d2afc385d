"""One call timed three ways, to explain why a vendor's published TFLOP/s differ from ours.

- `events`: our harness (`timing.measure`): CUDA events around each call, a 3x-L2 write before each
  (not timed), calls back to back; median.
- `kernels`: the summed device time of the GPU kernels one call launches, read by torch.profiler
  (CUPTI), median over calls, each after the same L2 flush: no launch latency, no gaps between
  kernels. This is how cudnn-frontend's SDPA training benchmark (benchmark_single_sdpa.py) times.
- `events_idle`: CUDA events as ours, but with the GPU idle for `idle_s` before every call (that
  benchmark slept min(t/100, 1 s) after each call): a rested GPU runs its first milliseconds at a
  higher clock than one in a back-to-back loop at its power limit.

Every method keeps the clock its timed calls ran at, since the clock is what separates them: `events`
the Timing's own conditions; `kernels` and `events_idle` a sampler's readings inside each call's window
(bench.clock_windows; for `kernels` inside the profiler), so the gaps between calls (profiler start-up
and tear-down, the idle sleep) do not count. `events` and `kernels` start from the protocol's steady
state (`steady_warm_up`); `events_idle` has no warm-up, by design (IDLE_WARMUP): what it measures is
the idle-clock first call.

`steady_bare_loop` is the trust check's bare side: `timing.bare_event_loop` after the same warm-up,
with its clock. `pass_callable` builds what the sweep times for a pass (fwd under no_grad; bwd as
autograd.grad on a saved forward; fwd_bwd as both), from a provider's Prepared call.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from contextlib import nullcontext
from typing import Any

import torch

from attnbench.bench import clock_windows, clocks, timing

STEADY_WARMUP = (
    "steady state: bench.timing.warm_up (>= WARMUP_MIN_S, until per-call time and SM clock settle)"
)
IDLE_WARMUP = "none: measures the idle-clock first call by design"


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


def _source_fields(source, reason: str | None) -> dict[str, Any]:
    return {"clock_source": getattr(source, "name", None), "clock_reason": reason}


def steady_warm_up(fn: Callable[[], object], device, sampler) -> dict[str, Any]:
    """The protocol's warm-up (`timing.warm_up`): back-to-back calls for at least WARMUP_MIN_S and until
    per-call time and SM clock settle. It is load, not timing: the caller's own timed loop follows."""
    if timing.is_cuda(device):
        backend = timing.CudaBackend(fn, torch.device(device), flush_l2=True, max_mhz=None)
    else:
        backend = timing.CpuBackend(fn, time.perf_counter)
    warm = timing.warm_up(backend, sampler, min_calls=1, min_s=timing.WARMUP_MIN_S)
    del backend  # its flush buffer
    return {"warmup": STEADY_WARMUP, "warmup_s": warm["warmup_s"], "warmup_calls": warm["warmup_calls"],
            "warmup_settled": warm["warmup_settled"]}  # fmt: skip


def _flush_buffer(device) -> torch.Tensor | None:
    if not timing.is_cuda(device):
        return None  # a CPU run (tests): no L2 to flush
    return torch.empty(timing.flush_buffer_bytes(device), dtype=torch.int8, device=device)


def _profiled_kernel_ms(
    fn: Callable[[], object], device, clock: clock_windows.ClockWindows | None = None
) -> float:
    """The summed GPU kernel time of one call, from torch.profiler (CUPTI); on a CPU (tests, the smoke
    check) the operators' summed self time, the nearest thing a CPU has. The clock window (`clock`)
    covers the call alone, inside the profiler: its start-up and tear-down leave the GPU idle."""
    from torch.profiler import ProfilerActivity, profile

    cuda = timing.is_cuda(device)
    activities = [ProfilerActivity.CUDA if cuda else ProfilerActivity.CPU]
    with profile(activities=activities) as prof, clock.window() if clock else nullcontext():
        fn()
        timing.synchronize(device)

    def own_us(e) -> float:
        return e.self_device_time_total if cuda else e.self_cpu_time_total

    # kernels only: memsets and copies count in our timed region, not in a kernel-only figure
    us = sum(
        own_us(e)
        for e in prof.key_averages()
        if own_us(e) > 0 and not e.key.lower().startswith(("memset", "memcpy"))
    )
    return us / 1e3


def kernel_ms(
    fn: Callable[[], object], reps: int = 10, device="cuda", clock: clock_windows.ClockWindows | None = None
) -> float:
    """Median over `reps` calls of the summed GPU kernel time of one call (CUPTI via torch.profiler)."""
    flush = _flush_buffer(device)
    totals = []
    for _ in range(reps):
        if flush is not None:
            flush.zero_()
        timing.synchronize(device)
        totals.append(_profiled_kernel_ms(fn, device, clock))
    return statistics.median(totals)


def _one_call_ms(fn: Callable[[], object], device) -> float:
    """CUDA events around one call (perf_counter on a CPU), synchronised."""
    if not timing.is_cuda(device):
        start = time.perf_counter()
        fn()
        return (time.perf_counter() - start) * 1e3
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    torch.cuda.synchronize(device)
    return start.elapsed_time(end)


def idle_event_ms(
    fn: Callable[[], object],
    reps: int = 10,
    idle_s: float = 0.1,
    device="cuda",
    clock: clock_windows.ClockWindows | None = None,
) -> float:
    """Median CUDA-event time of calls that each start on a GPU idle for `idle_s` (after an L2 flush)."""
    flush = _flush_buffer(device)
    samples = []
    for _ in range(reps):
        if flush is not None:
            flush.zero_()
        timing.synchronize(device)
        time.sleep(idle_s)
        # the clock window opens after the sleep: the idle gap is not the call's clock
        with clock.window() if clock else nullcontext():
            samples.append(_one_call_ms(fn, device))
    return statistics.median(samples)


def compare(
    fn: Callable[[], object],
    *,
    timing_options: dict,
    grad: bool = True,
    reps: int = 10,
    idle_s: float = 0.1,
    device="cuda",
) -> dict[str, dict[str, Any]]:
    """Per method (see the module docstring): {"ms": median ms of one call, "warmup": how it was warmed
    up, warmup_s, warmup_settled, sm_clock_mhz, power_w, temperature_c, clock_samples, clock_source,
    timing_method}; `grad=False` for a forward."""
    source, reason = clock_windows.device_source(device)
    with torch.set_grad_enabled(grad):
        events = timing.measure(fn, device=device, **timing_options)
        out = {"events": {"ms": events.ms_median, "warmup": STEADY_WARMUP, **events.conditions(),
                          "warmup_calls": events.warmup_calls, "clock_samples": events.clock_samples,
                          "clock_reason": events.clock_reason}}  # fmt: skip
        with clocks.ClockSampler(source) as sampler:
            warm, clock = steady_warm_up(fn, device, sampler), clock_windows.ClockWindows(sampler)
            ms = kernel_ms(fn, reps, device, clock)
            # steady state before the first profiled call; the profiler's start-up between calls then lets
            # the GPU rest briefly, which the label says (the clock is read inside each call alone)
            warm["warmup"] = (
                f"{STEADY_WARMUP}; the profiler's start-up between the profiled calls idles the GPU briefly"
            )
            out["kernels"] = {"ms": ms, "timing_method": "cupti_kernel_sum", **warm, **clock.summary()}
            clock = clock_windows.ClockWindows(sampler)
            ms = idle_event_ms(fn, reps, idle_s, device, clock)
            out["events_idle"] = {"ms": ms, "timing_method": f"cuda_event_after_{idle_s:g}s_idle",
                                  "warmup": IDLE_WARMUP, "warmup_s": None, "warmup_settled": None,
                                  **clock.summary()}  # fmt: skip
    for method in ("kernels", "events_idle"):
        out[method].update(_source_fields(source, reason))
    return out


def steady_bare_loop(fn: Callable[[], object], *, device="cuda", reps: int = 200) -> dict[str, Any]:
    """`timing.bare_event_loop` (the trust check's independent timer) after the protocol's warm-up, with
    the clock its calls ran at. The warm-up is load and shared; the timed loop shares no code with
    `timing.measure`."""
    source, reason = clock_windows.device_source(device)
    with clocks.ClockSampler(source) as sampler:
        warm, clock = steady_warm_up(fn, device, sampler), clock_windows.ClockWindows(sampler)
        with clock.window():
            ms = timing.bare_event_loop(fn, reps=reps)  # synchronises at its end
    return {
        "ms": ms,
        "timing_method": "bare_event_loop",
        **warm,
        **clock.summary(),
        **_source_fields(source, reason),
    }
