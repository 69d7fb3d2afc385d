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
The median over `reps` repetitions (after one warm-up call) is reported for each time.
"""

from __future__ import annotations

import statistics
import time

import torch
import torch.distributed as dist

from attnbench.bench.distributed import align, attempt, random_call, release, time_once
from attnbench.bench.inputs import torch_dtype
from attnbench.cp import comm
from attnbench.cp.circulate import make_topology
from attnbench.cp.local import LocalKernel, get_kernel
from attnbench.rows import Status
from attnbench.studies.context_parallel.measure import (
    cp_function,
    resolved_options,
    start,
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


def _median_times(call, group, device, reps: int, watch: _Stopwatch | None = None) -> tuple[float, float]:
    """(median total ms, median watched ms) over `reps` calls after one warm-up call."""
    call.before(False)
    call(False)
    if watch:
        watch.take_ms()
    totals, watched = [], []
    for _ in range(reps):
        call.before(False)
        align(group, device)
        totals.append(time_once(call, device))
        watched.append(watch.take_ms() if watch else 0.0)
    return statistics.median(totals), statistics.median(watched)


def _exchange_ms(shape, dtype, group, device, reps: int) -> float:
    topo = make_topology(group)
    exchange = comm.Exchange(
        group, topo.ranks[(topo.position + 1) % topo.size], topo.ranks[(topo.position - 1) % topo.size]
    )
    send = [torch.randn(shape, device=device).to(dtype) for _ in range(2)]
    recv = [torch.empty_like(t) for t in send]
    watch = _Stopwatch(device)
    times = []
    for i in range(reps + 1):
        align(group, device)
        started = watch.start()
        exchange.start(send, recv).wait()
        watch.stop(started)
        ms = watch.take_ms()
        if i:  # the first exchange also opens the connection
            times.append(ms)
    return statistics.median(times)


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
) -> list[dict]:
    """One dict per rank (the same list on every rank): total, kernel, comm and exchange ms and work."""
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

    def measure_all():
        call = random_call(fn_with(timed), pass_, shape, dtype, device, seed * 1000 + rank)
        timed.pairs = 0
        call.before(True)
        call(True)  # checked first call: also what `reps` warm-up means for the real run
        timed.watch.take_ms()
        mine["work_pairs"] = timed.pairs  # of one call: the forward's blocks (the backward repeats them)
        mine["total_ms"], mine["kernel_ms"] = _median_times(call, group, device, reps, timed.watch)
        noop = random_call(fn_with(NoopKernel()), pass_, shape, dtype, device, seed * 1000 + rank)
        mine["comm_ms"], _ = _median_times(noop, group, device, reps)
        if strategy in RING_STRATEGIES and world > 1:
            mine["exchange_ms"] = _exchange_ms(shape, torch_dtype(dtype), group, device, reps)
            mine["exchange_bytes"] = (
                2 * batch * heads * (seq_len // world) * head_dim * torch_dtype(dtype).itemsize
            )

    status, message = attempt(measure_all, group)
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
