"""Where a strategy's time goes, per rank: attention kernels vs communication vs waiting.

For one strategy and shape, on every rank:
  total_ms     the real call (forward, or forward+backward), timed on this rank with CUDA events
               after all ranks align; the slowest rank's total is what the benchmark reports.
  kernel_ms    the local attention kernel calls inside that same real call, each bracketed by CUDA
               events on the compute stream (so a kernel waiting for data is not counted).
  comm_ms      the same call with every kernel replaced by a no-op that returns zeros: the
               strategy's communication, LSE merges and copies, with its own overlap, and no compute.
  exchange_ms  ring strategies: one K/V block send/recv with the ring neighbours alone.
  work_pairs   the (query, key) pairs this rank's kernels computed (causal blocks counted exactly):
               the work balance, independent of timing. work_share = pairs / mean over ranks.
Each of the three timings (the real call, the no-op call, the exchange) follows the timing protocol:
a steady-state warm-up of untimed calls for at least bench.timing.WARMUP_MIN_S on a GPU (none past one
call on a CPU; bench.distributed.steady_state, its stop agreed after every call, failures agreed too),
then `reps` timed repetitions, all ranks aligned before each, with this rank's SM clock and power
sampled during them (bench.clocks). The median of each time is reported; each rank's row keeps its own
GPU's clock (the rows are per rank): sm_clock_mhz and power_w during the real call's timed calls (what
total_ms and kernel_ms ran at), comm_sm_clock_mhz during the no-op calls and the exchange, and
warmup_s, the real call's warm-up (the ranks' agreed seconds).
"""

from __future__ import annotations

import statistics
import time

import torch
import torch.distributed as dist

from attnbench.bench import clock_windows, clocks
from attnbench.bench.distributed import (
    AgreedFailure,
    align,
    attempt,
    random_call,
    release,
    steady_state,
    time_once,
)
from attnbench.bench.inputs import torch_dtype
from attnbench.cp import comm
from attnbench.cp.circulate import make_topology
from attnbench.cp.local import LocalKernel, get_kernel
from attnbench.rows import Status
from attnbench.studies.context_parallel.measure import (
    cp_function,
    resolved_options,
    start,
    steady_warmup_s,
    strategy_label,
)

RING_STRATEGIES = ("ring", "zigzag", "double_ring", "burst")


class _Stopwatch:
    """Event pairs on the current stream (CUDA) or perf_counter intervals (CPU); summed on demand."""

    def __init__(self, device):
        self.cuda = device.type == "cuda"
        self.spans: list = []
        self.total_cpu_ms = 0.0

    def start(self):
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def stop(self, started) -> None:
        if self.cuda:
            end = torch.cuda.Event(enable_timing=True)
            end.record()
            self.spans.append((started, end))
        else:
            self.total_cpu_ms += (time.perf_counter() - started) * 1e3

    def take_ms(self) -> float:
        if self.cuda:
            if self.spans:
                self.spans[-1][1].synchronize()
            total = sum(s.elapsed_time(e) for s, e in self.spans)
        else:
            total = self.total_cpu_ms
        self.spans, self.total_cpu_ms = [], 0.0
        return total


def _pairs(q, k, causal: bool) -> int:
    b, h, n, m = q.shape[0], q.shape[1], q.shape[2], k.shape[2]
    return b * h * (n * (n + 1) // 2 if causal else n * m)


class TimedKernel(LocalKernel):
    """Wraps a kernel: times every forward/backward call and counts the pairs it computes."""

    def __init__(self, inner: LocalKernel, device):
        self.inner, self.name = inner, inner.name
        self.watch = _Stopwatch(device)
        self.pairs = 0

    def unavailable(self, device, dtype, head_dim):
        return self.inner.unavailable(device, dtype, head_dim)

    def forward(self, q, k, v, *, causal, scale):
        started = self.watch.start()
        result = self.inner.forward(q, k, v, causal=causal, scale=scale)
        self.watch.stop(started)
        self.pairs += _pairs(q, k, causal)
        return result

    def backward(self, dout, q, k, v, out, lse, *, causal, scale):
        started = self.watch.start()
        result = self.inner.backward(dout, q, k, v, out, lse, causal=causal, scale=scale)
        self.watch.stop(started)
        return result


class NoopKernel(LocalKernel):
    """Returns zeros of the right shapes at once: the strategy without attention compute."""

    name = "noop"

    def forward(self, q, k, v, *, causal, scale):
        lse_dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
        return torch.zeros_like(q), torch.zeros(q.shape[:-1], dtype=lse_dtype, device=q.device)

    def backward(self, dout, q, k, v, out, lse, *, causal, scale):
        return torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)


class _Timed:
    """Medians of one timed phase, its steady-state warm-up and this rank's clock during the timed calls."""

    def __init__(self, device, warmup_min_s: float):
        self.device, self.warmup_min_s = device, warmup_min_s
        self.source = clock_windows.device_source(device)[0]
        self.warmup_s: float | None = None
        self.clock: dict = {}

    def run(self, call, group, reps: int, watch: _Stopwatch | None = None) -> tuple[float, float]:
        """(median total ms, median watched ms) of `reps` calls after the warm-up. The calls hold
        communication: agree_failures turns a failure that comes before any collective of the call into
        an AgreedFailure on every rank; one inside an exchange still leaves the peer blocked until the
        process group's timeout, as any failing collective does (the sweep ran these shapes first)."""
        self.warmup_s = steady_state(call, group, self.device, self.warmup_min_s, agree_failures=True)
        if watch:
            watch.take_ms()  # the warm-up's kernel spans are not timed calls
        totals, watched = [], []
        with clocks.ClockSampler(self.source) as sampler:  # the clock of the timed calls only
            for _ in range(reps):
                call.before(False)
                align(group, self.device)
                totals.append(time_once(call, self.device))
                watched.append(watch.take_ms() if watch else 0.0)
        self.clock = {**sampler.summary(), "clock_source": getattr(self.source, "name", None)}
        return statistics.median(totals), statistics.median(watched)


class _ExchangeCall:
    """One K/V block send/recv with the ring neighbours, as a Call (steady_state and time_once)."""

    def __init__(self, shape, dtype, group, device):
        topo = make_topology(group)
        after, before = (
            topo.ranks[(topo.position + 1) % topo.size],
            topo.ranks[(topo.position - 1) % topo.size],
        )
        self.exchange = comm.Exchange(group, after, before)
        self.send = [torch.randn(shape, device=device).to(dtype) for _ in range(2)]
        self.recv = [torch.empty_like(t) for t in self.send]

    def before(self, _check_ranks: bool) -> None:
        pass

    def __call__(self, _check_ranks: bool) -> None:
        self.exchange.start(self.send, self.recv).wait()


def _exchange_ms(shape, dtype, group, timer: _Timed, reps: int) -> float:
    """Median ms of one exchange alone; the warm-up also opens the connection (NCCL's are lazy)."""
    return timer.run(_ExchangeCall(shape, dtype, group, timer.device), group, reps)[0]


def _clock_fields(real: _Timed, comm_only: list[_Timed]) -> dict:
    """This rank's clock fields of its row (module doc): the real call's, and the lowest of the others."""
    others = [t.clock["sm_clock_mhz"] for t in comm_only if t.clock.get("sm_clock_mhz") is not None]
    return {
        "warmup_s": real.warmup_s,
        "sm_clock_mhz": real.clock.get("sm_clock_mhz"),
        "power_w": real.clock.get("power_w"),
        "clock_source": real.clock.get("clock_source"),
        "comm_sm_clock_mhz": min(others) if others else None,
    }


def _attempt_agreed(step, group) -> tuple[Status, str]:
    """bench.distributed.attempt, keeping an AgreedFailure's own status: it is raised on every rank (an
    out-of-memory in a warm-up stays `oom`, where attempt would call any exception an error)."""
    agreed: list[AgreedFailure] = []

    def run():
        try:
            step()
        except AgreedFailure as failure:
            agreed.append(failure)

    status, message = attempt(run, group)
    return (agreed[0].status, agreed[0].message) if agreed else (status, message)


def breakdown(
    strategy: str,
    *,
    seq_len: int,
    mask: str = "causal",
    pass_: str = "fwd_bwd",
    batch: int = 1,
    heads: int = 40,
    head_dim: int = 128,
    dtype: str = "bfloat16",
    kernel: str | None = None,
    group=None,
    options: dict | None = None,
    reps: int = 2,
    seed: int = 0,
    warmup_min_s: float | None = None,
) -> list[dict]:
    """One dict per rank (the same list on every rank): total, kernel, comm and exchange ms, work, and
    this rank's clock. `warmup_min_s`: each timing's steady-state warm-up (measure.steady_warmup_s:
    WARMUP_MIN_S on a GPU, never less; none on a CPU unless asked)."""
    world, rank, device, spec, refused = start(
        strategy, group, mask=mask, seq_len=seq_len, kernel=kernel, dtype=dtype, head_dim=head_dim
    )
    base = {
        "strategy": strategy_label(strategy, kernel),
        "seq_len": seq_len,
        "mask": mask,
        "pass": pass_,
        "world_size": world,
        "heads": heads,
        "head_dim": head_dim,
        "dtype": dtype,
    }
    if not refused and not spec.rehearsable:
        refused = "unavailable", "its kernels are inside PyTorch: nothing to time apart"
    if refused:
        status, reason = refused
        return [{**base, "rank": r, "status": status, "reason": reason} for r in range(world)]
    options = resolved_options(strategy, group, heads, options or {})
    timed = TimedKernel(get_kernel(kernel, device), device)
    shape = (batch, heads, seq_len // world, head_dim)
    mine: dict = {}

    def fn_with(local_kernel):
        return cp_function(strategy, mask=mask, group=group, kernel=local_kernel, options=options)

    warm_s = steady_warmup_s(device, warmup_min_s, "breakdown")
    real, others = _Timed(device, warm_s), [_Timed(device, warm_s), _Timed(device, warm_s)]

    def measure_all():
        call = random_call(fn_with(timed), pass_, shape, dtype, device, seed * 1000 + rank)
        timed.pairs = 0
        call.before(True)
        call(True)  # the checked first call, untimed: it also counts this rank's pairs
        timed.watch.take_ms()
        mine["work_pairs"] = timed.pairs  # of one call: the forward's blocks (the backward repeats them)
        mine["total_ms"], mine["kernel_ms"] = real.run(call, group, reps, timed.watch)
        noop = random_call(fn_with(NoopKernel()), pass_, shape, dtype, device, seed * 1000 + rank)
        mine["comm_ms"], _ = others[0].run(noop, group, reps)
        if strategy in RING_STRATEGIES and world > 1:
            mine["exchange_ms"] = _exchange_ms(shape, torch_dtype(dtype), group, others[1], reps)
            mine["exchange_bytes"] = (
                2 * batch * heads * (seq_len // world) * head_dim * torch_dtype(dtype).itemsize
            )
        mine.update(_clock_fields(real, others))

    status, message = _attempt_agreed(measure_all, group)
    release(device)
    if status != Status.OK:
        return [{**base, "rank": r, "status": status, "reason": message} for r in range(world)]
    everyone: list = [None] * world
    dist.all_gather_object(
        everyone,
        {**base, "rank": rank, "status": "ok", "reason": "", "options": options, **mine},
        group=group,
    )
    mean_pairs = sum(r["work_pairs"] for r in everyone) / world
    for r in everyone:
        r["work_share"] = r["work_pairs"] / mean_pairs if mean_pairs else None
    return everyone
