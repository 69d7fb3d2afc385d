"""Timing one callable: CUDA events per repetition with a cold L2, or perf_counter on CPU.

Protocol on CUDA (`measure`):
  1. A flush buffer of 3x the L2 size is allocated once (int8); before every repetition it is zeroed on
     the same stream, *before* the start event, so the timed region starts with a cold L2 and the
     flush itself is never timed.
  2. `warmup_reps` untimed-for-statistics repetitions (their event times give a first estimate).
  3. Timed repetitions in batches: one sync per batch, then all events of the batch are read. We stop
     once at least `min_reps` repetitions AND at least `min_time_ms` of summed timed GPU time were
     collected, or at `max_reps`. The first batch is sized from the warm-up estimate, so usually one
     batch (one sync) is enough.
  4. Median, p20, p80 (linear interpolation between order statistics, as numpy's default).

Memory (CUDA): `peak_mem_bytes` is the peak allocated by the timed calls *on top of* what was
allocated just before them (outputs, workspace, autograd state, gradients); `baseline_mem_bytes` is what
was allocated before them (inputs and anything else alive), the flush buffer excluded. The sweep adds
the input sizes to report "peak with inputs included" (see sweep.py).

CPU fallback: perf_counter around each call, same stopping rule, no cache flush, timer="perf_counter".
It is not a GPU measurement and must be labelled as such wherever it is shown.

Setup cost (compile, autotune, first call) is measured separately with `setup`, never in `measure`.
"""

from __future__ import annotations

import gc
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch

FLUSH_L2_FACTOR = 3  # the flush buffer is this many times the L2 (the rule is "more than twice")
FALLBACK_FLUSH_BYTES = 256 * 1024 * 1024  # when the L2 size is not reported


@dataclass(frozen=True)
class Timing:
    ms_median: float
    ms_p20: float
    ms_p80: float
    reps: int
    timer: str  # "cuda_event" | "perf_counter"
    peak_mem_bytes: int | None = None  # peak allocated by the timed calls above the baseline (CUDA only)
    baseline_mem_bytes: int | None = None  # allocated before the timed calls, flush buffer excluded
    total_ms: float = 0.0  # summed timed time of all repetitions
    flush_bytes: int = 0  # size of the L2 flush buffer (0: no flush)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def quantile(sorted_values: list[float], q: float) -> float:
    """Linear-interpolated quantile of already sorted values (numpy's default 'linear' method)."""
    if not sorted_values:
        raise ValueError("quantile of no values")
    pos = q * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def summarize(samples_ms: list[float], timer: str, **memory) -> Timing:
    """Median/p20/p80 of per-repetition times."""
    ordered = sorted(samples_ms)
    return Timing(
        ms_median=statistics.median(ordered),
        ms_p20=quantile(ordered, 0.2),
        ms_p80=quantile(ordered, 0.8),
        reps=len(ordered),
        timer=timer,
        total_ms=float(sum(ordered)),
        **memory,
    )


def enough(reps: int, total_ms: float, *, min_reps: int, min_time_ms: float, max_reps: int) -> bool:
    """The stopping rule: both a minimum count and a minimum summed time, or the cap."""
    return reps >= max_reps or (reps >= min_reps and total_ms >= min_time_ms)


def next_batch(
    reps: int, total_ms: float, estimate_ms: float, *, min_reps: int, min_time_ms: float, max_reps: int
) -> int:
    """How many repetitions still look needed to satisfy `enough`, from a per-call estimate."""
    by_time = math.ceil(max(min_time_ms - total_ms, 0.0) / max(estimate_ms, 1e-4))
    return max(1, min(max(min_reps - reps, by_time), max_reps - reps))


def _check_args(min_reps: int, min_time_ms: float, warmup_reps: int, max_reps: int) -> None:
    if min_reps < 1 or max_reps < min_reps or warmup_reps < 0 or min_time_ms < 0:
        raise ValueError(
            f"bad timing arguments: min_reps={min_reps} max_reps={max_reps} "
            f"warmup_reps={warmup_reps} min_time_ms={min_time_ms} "
            "(need 1 <= min_reps <= max_reps, warmup_reps >= 0, min_time_ms >= 0)"
        )


def is_cuda(device) -> bool:
    return torch.device(device).type == "cuda"


def flush_buffer_bytes(device) -> int:
    """Bytes of the L2 flush buffer: FLUSH_L2_FACTOR x the device's L2 size."""
    l2 = getattr(torch.cuda.get_device_properties(torch.device(device)), "L2_cache_size", 0) or 0
    return FLUSH_L2_FACTOR * l2 if l2 > 0 else FALLBACK_FLUSH_BYTES


def measure(
    fn: Callable[[], Any],
    *,
    device="cuda",
    min_reps: int = 10,
    min_time_ms: float = 100.0,
    warmup_reps: int = 3,
    max_reps: int = 1000,
    flush_l2: bool = True,
    clock: Callable[[], float] | None = None,
) -> Timing:
    """Time `fn()` (its return value is dropped). CUDA events on a CUDA device, else perf_counter.

    `clock` (seconds, CPU path only) exists so tests can drive the stopping rule deterministically.
    Exceptions (including torch.OutOfMemoryError) propagate; the sweep turns them into rows.
    """
    _check_args(min_reps, min_time_ms, warmup_reps, max_reps)
    rule = {"min_reps": min_reps, "min_time_ms": min_time_ms, "max_reps": max_reps}
    if not is_cuda(device):
        return _measure_cpu(fn, warmup_reps, rule, clock or time.perf_counter)
    return _measure_cuda(fn, torch.device(device), warmup_reps, rule, flush_l2)


def _measure_cpu(fn, warmup_reps: int, rule: dict, clock: Callable[[], float]) -> Timing:
    for _ in range(warmup_reps):
        fn()
    samples: list[float] = []
    while not enough(len(samples), sum(samples), **rule):
        start = clock()
        fn()
        samples.append((clock() - start) * 1e3)
    return summarize(samples, "perf_counter")


def _measure_cuda(fn, device: torch.device, warmup_reps: int, rule: dict, flush_l2: bool) -> Timing:
    with torch.cuda.device(device):
        stream = torch.cuda.current_stream(device)
        flush_bytes = flush_buffer_bytes(device) if flush_l2 else 0
        flush = torch.empty(flush_bytes, dtype=torch.int8, device=device) if flush_l2 else None

        def timed_batch(n: int) -> list[float]:
            starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
            ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
            for start, end in zip(starts, ends):
                if flush is not None:
                    flush.zero_()  # evicts L2; queued before the start event, so not timed
                start.record(stream)
                fn()
                end.record(stream)
            torch.cuda.synchronize(device)
            return [s.elapsed_time(e) for s, e in zip(starts, ends)]

        estimate = statistics.median(timed_batch(warmup_reps)) if warmup_reps else None
        torch.cuda.synchronize(device)
        baseline = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        samples: list[float] = []
        while not enough(len(samples), sum(samples), **rule):
            if estimate is None:  # no warm-up: the first batch is min_reps, later ones use its estimate
                n = rule["min_reps"]
            else:
                n = next_batch(len(samples), sum(samples), estimate, **rule)
            samples += timed_batch(n)
            estimate = statistics.median(samples)
        peak = torch.cuda.max_memory_allocated(device)
    return summarize(
        samples,
        "cuda_event",
        peak_mem_bytes=max(peak - baseline, 0),
        baseline_mem_bytes=baseline - flush_bytes,
        flush_bytes=flush_bytes,
    )


def synchronize(device) -> None:
    if is_cuda(device):
        torch.cuda.synchronize(torch.device(device))


def setup(fn: Callable[[], Any], *, device="cuda") -> tuple[Any, float]:
    """Run `fn()` once (compile, autotune, first call) and return (its result, wall ms incl. a sync)."""
    synchronize(device)
    start = time.perf_counter()
    result = fn()
    synchronize(device)
    return result, (time.perf_counter() - start) * 1e3


def is_oom(exc: BaseException) -> bool:
    """True for torch.OutOfMemoryError and for libraries that raise a plain 'out of memory' error."""
    if isinstance(exc, torch.OutOfMemoryError):
        return True
    text = str(exc).lower()
    return isinstance(exc, RuntimeError) and ("out of memory" in text or "cuda_error_out_of_memory" in text)


def release_memory(device=None, collect: bool = True) -> None:
    """Return cached blocks to the driver; with `collect`, first free tensors held by reference cycles.

    A full gc.collect costs ~0.1 s with torch loaded: worth it after an exception (tracebacks keep
    frames and their tensors alive), not after every successful measurement.
    """
    if collect:
        gc.collect()
    if torch.cuda.is_available() and (device is None or is_cuda(device)):
        torch.cuda.empty_cache()


def bare_event_loop(fn: Callable[[], Any], reps: int = 100, flush: bool = True) -> float:
    """Median ms of `reps` calls, each between two CUDA events after an L2-evicting write.

    Deliberately shares no code with `measure` (the trust check compares the two). Assumes the
    current CUDA device; does its own warm-up of 5 calls.
    """
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    words = max(3 * props.L2_cache_size, 1 << 26) // 4
    scratch = torch.empty(words, dtype=torch.int32, device="cuda") if flush else None
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    events = []
    for _ in range(reps):
        if scratch is not None:
            scratch.fill_(1)
        begin, finish = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        fn()
        finish.record()
        events.append((begin, finish))
    torch.cuda.synchronize()
    return statistics.median(b.elapsed_time(f) for b, f in events)
