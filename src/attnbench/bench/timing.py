"""Timing one callable: the one protocol every GPU number of this project goes through.

Protocol on CUDA (`measure`):
  1. Steady state first. The GPU idles at a low clock, boosts for its first seconds of load and then
     settles at its power limit (an H100 ran FA3 at 741 TFLOP/s right after idle, 668 after 4 s). So
     the workload runs untimed-for-results in batches of ~100 ms until both the per-call time and the
     SM clock agree within SETTLE_TOLERANCE with those of the batch SETTLE_WINDOW_S earlier, and for at least
     WARMUP_MIN_S (a profile may ask for more, never less), at most WARMUP_MAX_S (then the row says
     warmup_settled=False).
  2. A flush buffer of 3x the L2 size is zeroed before every repetition, *before* the start event, so
     each timed call starts with a cold L2 and the flush itself is never timed.
  3. Timed repetitions in batches, one sync per batch, until at least `min_reps` repetitions AND
     `min_time_ms` (default 100 ms) of summed GPU time, or `max_reps`.
  4. Launch-bound calls (the host needs at least LAUNCH_BOUND_SHARE of the GPU time to enqueue one
     call, so the GPU would wait for the host between events) are timed behind a GPU spin kernel
     (torch.cuda._sleep) long enough for the host to enqueue the whole batch first: the per-call events
     then measure GPU time, not launch latency. `timing_method` says which way a row was timed.
  5. A `clocks.ClockSampler` polls the SM clock, power and temperature during the timed calls; the
     result carries their medians and the source (nvml | nvidia-smi).
  6. Median (of an even count: the mean of the two middle values), p20, p80 (linear interpolation
     between order statistics, as numpy's default).
  Opt-in (`preheat=True`), before step 1: thermal steady state. `thermal.Conditioner` brings the GPU to
  the temperature a sustained load settles at, and back to it before each row (bench/thermal.py: it
  narrowed the Flux run-to-run spread on an H200 but did not remove it; bench/rounds.py is what repeats).

Memory (CUDA): `peak_mem_bytes` is the peak allocated by the timed calls *on top of* what was
allocated just before them (outputs, workspace, autograd state, gradients); `baseline_mem_bytes` is what
was allocated before them (inputs and anything else alive), the flush buffer excluded. The sweep adds
the input sizes to report "peak with inputs included" (see sweep.py).

CPU fallback: perf_counter around each call, same stopping rule, no cache flush, no warm-up floor (no
GPU clock to settle), timing_method="perf_counter". It is not a GPU measurement and must be labelled
as such wherever it is shown.

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
WARMUP_MIN_S = 1.0  # the floor of the warm-up on a GPU: boost-to-power-limit takes about a second
WARMUP_MAX_S = 5.0  # give up settling after this long (the row then says warmup_settled=False)
WARMUP_BATCH_S = 0.1  # one warm-up batch; consecutive batches are compared
WARMUP_BATCH_MAX = 2000  # calls in one warm-up batch (events are made per call)
SETTLE_TOLERANCE = 0.03  # per-call time and SM clock agree within 3 % with those SETTLE_WINDOW_S earlier
SETTLE_WINDOW_S = 0.5  # compared over half a second, so a slow drift (a clock sinking ~7 %/s) is seen
LAUNCH_BOUND_SHARE = 0.5  # host enqueue time per call >= this share of GPU time: launch-bound
QUEUED_BATCH_MAX = 32  # calls per batch behind one spin kernel: their launches must fit the launch queue
ASSUMED_MAX_MHZ = 2000.0  # converts spin milliseconds to cycles when the max clock is unknown (errs long)


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
    timing_method: str = "perf_counter"  # see TIMING_METHODS
    warmup_s: float = 0.0  # seconds of untimed load before the timed calls
    warmup_calls: int = 0
    warmup_settled: bool | None = None  # per-call time and clock settled (None: no warm-up asked)
    host_ms_per_call: float | None = None  # host enqueue time of one call (launch-bound test)
    sm_clock_mhz: float | None = None  # medians over the timed calls
    power_w: float | None = None
    temperature_c: float | None = None
    clock_samples: int = 0
    clock_source: str | None = None  # nvml | nvidia-smi | None (then clock_reason says why)
    clock_reason: str | None = None
    preheat_s: float | None = None  # seconds of filler before the warm-up (preheat=True; None: not asked)
    equilibrium_c: float | None = None  # the temperature the filler settled at (preheat=True)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def conditions(self) -> dict[str, Any]:
        """How it was timed and at what clock: the fields a row of any study keeps beside its times."""
        names = ("timing_method", "warmup_s", "warmup_settled", "sm_clock_mhz", "power_w", "temperature_c")
        return {name: getattr(self, name) for name in (*names, "clock_source")}


TIMING_METHODS = {
    "cuda_event_per_call": "CUDA events around each call, the GPU ahead of the host",
    "cuda_event_per_call_queued": "CUDA events around each call, queued behind a GPU spin kernel "
    "(launch-bound call: the host enqueues the batch before the GPU starts it)",
    "perf_counter": "host wall clock per call (CPU run, not a GPU measurement)",
}


def quantile(sorted_values: list[float], q: float) -> float:
    """Linear-interpolated quantile of already sorted values (numpy's default 'linear' method)."""
    if not sorted_values:
        raise ValueError("quantile of no values")
    pos = q * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def summarize(samples_ms: list[float], timer: str, **details) -> Timing:
    """Median/p20/p80 of per-repetition times; `details` are further Timing fields."""
    ordered = sorted(samples_ms)
    return Timing(
        ms_median=statistics.median(ordered),
        ms_p20=quantile(ordered, 0.2),
        ms_p80=quantile(ordered, 0.8),
        reps=len(ordered),
        timer=timer,
        total_ms=float(sum(ordered)),
        **details,
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
    min_reps: int = 3,
    min_time_ms: float = 100.0,
    warmup_reps: int = 3,
    max_reps: int = 10000,
    flush_l2: bool = True,
    warmup_min_s: float | None = None,
    before: Callable[[], tuple] | None = None,
    clock: Callable[[], float] | None = None,
    preheat: bool = False,
) -> Timing:
    """Time `fn()` (its return value is dropped) with the module's protocol. CUDA events on a CUDA
    device, else perf_counter.

    warmup_reps: at least this many warm-up calls; the warm-up also lasts at least `warmup_min_s`
    (default and floor on a GPU: WARMUP_MIN_S) and until settled. `before()`, if given, runs untimed
    ahead of each call (e.g. a forward whose graph the timed backward consumes) and its tuple is passed to
    `fn`. `clock` (seconds, CPU path only) exists so tests can drive the protocol deterministically.
    preheat: on a GPU, bring it to its thermal equilibrium first (bench/thermal.py); no effect on a CPU.
    Exceptions (including torch.OutOfMemoryError) propagate; the sweep turns them into rows.
    """
    _check_args(min_reps, min_time_ms, warmup_reps, max_reps)
    rule = {"min_reps": min_reps, "min_time_ms": min_time_ms, "max_reps": max_reps}
    if not is_cuda(device):
        backend = CpuBackend(fn, clock or time.perf_counter, before)
        warm = warm_up(backend, None, min_calls=warmup_reps, min_s=warmup_min_s or 0.0)
        samples = timed_samples(backend, rule, warm["estimate_ms"])
        return summarize(samples, "perf_counter", **_warmup_fields(warm), timing_method="perf_counter")
    if warmup_min_s is not None and warmup_min_s < WARMUP_MIN_S:
        raise ValueError(
            f"warmup_min_s={warmup_min_s} is below the protocol's floor of {WARMUP_MIN_S} s on a GPU "
            "(a profile may lower the counts, never the warm-up)"
        )
    return _measure_cuda(
        fn, torch.device(device), warmup_reps, rule, flush_l2, warmup_min_s or WARMUP_MIN_S, before, preheat
    )


class CpuBackend:
    """perf_counter around each call (or a test's clock)."""

    def __init__(self, fn: Callable[..., Any], clock: Callable[[], float], before=None):
        self.fn, self.now, self.before = fn, clock, before
        self.host_ms_per_call: float | None = None

    def batch(self, n: int, queued: bool = False) -> list[float]:
        samples = []
        for _ in range(n):
            args = self.before() if self.before else ()
            start = self.now()
            self.fn(*args)
            samples.append((self.now() - start) * 1e3)
        return samples


class CudaBackend:
    """Per-call CUDA events with an L2 flush before each start event; optionally behind a spin kernel."""

    def __init__(self, fn, device: torch.device, flush_l2: bool, max_mhz: float | None, before=None):
        self.fn, self.device, self.now, self.before = fn, device, time.perf_counter, before
        self.stream = torch.cuda.current_stream(device)
        self.flush_bytes = flush_buffer_bytes(device) if flush_l2 else 0
        self.flush = torch.empty(self.flush_bytes, dtype=torch.int8, device=device) if flush_l2 else None
        self.cycles_per_ms = (max_mhz or ASSUMED_MAX_MHZ) * 1e3
        self.host_ms_per_call: float | None = None

    def batch(self, n: int, queued: bool = False) -> list[float]:
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        if queued and self.host_ms_per_call:
            # keep the GPU busy while the host enqueues the batch (1.5x its enqueue time, +1 ms)
            torch.cuda._sleep(int((1.5 * n * self.host_ms_per_call + 1.0) * self.cycles_per_ms))
        host_start = time.perf_counter()
        for start, end in zip(starts, ends):
            args = self.before() if self.before else ()  # untimed: queued before the start event
            if self.flush is not None:
                self.flush.zero_()  # evicts L2; queued before the start event, so not timed
            start.record(self.stream)
            self.fn(*args)
            end.record(self.stream)
        host_ms = (time.perf_counter() - host_start) * 1e3 / n
        torch.cuda.synchronize(self.device)
        if not queued:  # behind a spin the host never waits, so this is the pure enqueue time
            self.host_ms_per_call = host_ms
        return [s.elapsed_time(e) for s, e in zip(starts, ends)]


def _settled(previous: tuple[float, float | None], current: tuple[float, float | None], tol: float) -> bool:
    """Per-call time (and the clock, when sampled) of two batches agree within `tol`."""
    pairs = [(p, c) for p, c in zip(previous, current) if p is not None and c is not None]
    return all(abs(c - p) <= tol * abs(p) for p, c in pairs)


def warm_up(
    backend,
    sampler,
    *,
    min_calls: int,
    min_s: float,
    max_s: float = WARMUP_MAX_S,
    batch_s: float = WARMUP_BATCH_S,
    tolerance: float = SETTLE_TOLERANCE,
    settle_window_s: float = SETTLE_WINDOW_S,
) -> dict[str, Any]:
    """Run the workload until per-call time and clock settle, for at least `min_s` and `min_calls`.

    Returns warmup_s, warmup_calls, warmup_settled and estimate_ms (median per-call time of the last
    batch). With min_s == 0 and min_calls == 0 nothing runs (estimate_ms None).
    """
    begin, calls, estimate = backend.now(), 0, None
    history: list[tuple[float, float, float | None]] = []  # (elapsed s, per-call ms, SM MHz) per batch
    settled = False
    while min_s > 0 or calls < min_calls:
        if estimate is None:
            n = 1
        else:
            n = max(1, min(WARMUP_BATCH_MAX, math.ceil(batch_s * 1e3 / max(estimate, 1e-4))))
        n = max(n, min_calls - calls) if min_s == 0 else n
        mark = sampler.mark() if sampler is not None else 0
        estimate = statistics.median(backend.batch(n))
        calls += n
        clock_mhz = sampler.summary(mark)["sm_clock_mhz"] if sampler is not None else None
        elapsed = backend.now() - begin
        earlier = [h for h in history if h[0] <= elapsed - settle_window_s]
        settled = bool(earlier) and _settled(earlier[-1][1:], (estimate, clock_mhz), tolerance)
        history.append((elapsed, estimate, clock_mhz))
        if calls >= min_calls and elapsed >= min_s and (settled or min_s == 0):
            break
        if calls >= min_calls and elapsed >= max(max_s, min_s):
            break
    return {
        "warmup_s": backend.now() - begin,
        "warmup_calls": calls,
        "warmup_settled": settled if min_s > 0 else None,
        "estimate_ms": estimate,
    }


def _warmup_fields(warm: dict[str, Any]) -> dict[str, Any]:
    return {k: warm[k] for k in ("warmup_s", "warmup_calls", "warmup_settled")}


def timed_samples(backend, rule: dict, estimate: float | None, queued: bool = False) -> list[float]:
    """Per-call ms in batches sized from the estimate, until `enough`."""
    samples: list[float] = []
    while not enough(len(samples), sum(samples), **rule):
        if estimate is None:  # no warm-up: the first batch is min_reps, later ones use its estimate
            n = rule["min_reps"]
        else:
            n = next_batch(len(samples), sum(samples), estimate, **rule)
        n = min(n, QUEUED_BATCH_MAX) if queued else n
        samples += backend.batch(n, queued=queued)
        estimate = statistics.median(samples)
    return samples


def launch_bound(host_ms_per_call: float | None, gpu_ms_per_call: float | None) -> bool:
    """The GPU would wait for the host between events: time the call queued behind a spin kernel."""
    if host_ms_per_call is None or not gpu_ms_per_call:
        return False
    return host_ms_per_call >= LAUNCH_BOUND_SHARE * gpu_ms_per_call


def _measure_cuda(
    fn,
    device: torch.device,
    warmup_reps: int,
    rule: dict,
    flush_l2: bool,
    warmup_min_s: float,
    before=None,
    preheat: bool = False,
) -> Timing:
    from attnbench.bench import clocks, thermal

    thermal_fields = {}
    if preheat:
        conditioner = thermal.conditioner_for(device)
        thermal_fields["preheat_s"] = conditioner.reheat()
        thermal_fields["equilibrium_c"] = conditioner.settle().temperature_c
    source, clock_reason = clocks.source_for(device)
    limits = source.limits() if hasattr(source, "limits") else {}
    with torch.cuda.device(device), clocks.ClockSampler(source) as sampler:
        backend = CudaBackend(fn, device, flush_l2, limits.get("max_sm_clock_mhz"), before)
        warm = warm_up(backend, sampler, min_calls=max(warmup_reps, 1), min_s=warmup_min_s)
        queued = launch_bound(backend.host_ms_per_call, warm["estimate_ms"])
        host_ms_per_call = backend.host_ms_per_call
        torch.cuda.synchronize(device)
        baseline = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        mark = sampler.mark()
        samples = timed_samples(backend, rule, warm["estimate_ms"], queued=queued)
        clock = sampler.summary(mark)
        peak = torch.cuda.max_memory_allocated(device)
    return summarize(
        samples,
        "cuda_event",
        peak_mem_bytes=max(peak - baseline, 0),
        baseline_mem_bytes=baseline - backend.flush_bytes,
        flush_bytes=backend.flush_bytes,
        timing_method="cuda_event_per_call_queued" if queued else "cuda_event_per_call",
        host_ms_per_call=host_ms_per_call,
        clock_source=getattr(source, "name", None),
        clock_reason=clock_reason,
        **_warmup_fields(warm),
        **clock,
        **thermal_fields,
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
