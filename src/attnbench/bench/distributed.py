"""Measuring one call on every rank of a process group, for any distributed study (context parallel,
dilated attention): agreeing on the worst outcome of a step, so no rank runs ahead into a collective
that a failed peer will never join, and timing a call as the slowest rank's milliseconds.

Statuses travel between ranks as `Status.severity` (a MAX all-reduce picks the worst) and come back as
the shared Status vocabulary of attnbench.rows.
"""

from __future__ import annotations

import gc
import time

import torch
import torch.distributed as dist

from attnbench.bench import clock_windows, clocks
from attnbench.bench.inputs import torch_dtype
from attnbench.bench.timing import is_oom
from attnbench.rows import Status, status_of_severity


def control_device(group) -> torch.device:
    """Where small control tensors must live for this group's backend (as cp.comm.comm_device; bench
    does not import the cp package, whose import pulls in every strategy)."""
    if dist.get_backend(group) == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def agree_max(value: float, group) -> float:
    t = torch.tensor([float(value)], dtype=torch.float64, device=control_device(group))
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    return float(t.item())


def agreed_peak_memory(device, group) -> int | None:
    """The largest max_memory_allocated over the group's ranks (None off CUDA)."""
    return int(agree_max(torch.cuda.max_memory_allocated(device), group)) if device.type == "cuda" else None


def align(group, device) -> None:
    """All ranks reach this point, and this rank's device has finished its queued work."""
    agree_max(0.0, group)
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def classify(exc: BaseException) -> Status:
    """oom, unsupported (a ValueError: inputs or options the call refuses) or error."""
    if is_oom(exc):
        return Status.OOM
    return Status.UNSUPPORTED if isinstance(exc, ValueError) else Status.ERROR


class AgreedFailure(Exception):
    """A step failed on some rank and every rank knows it (status, message): raised on every rank."""

    def __init__(self, status: Status, message: str):
        super().__init__(message)
        self.status, self.message = status, message


def outcome(exc: BaseException) -> tuple[Status, str]:
    """(status, "Type: first line") of an exception, for agreement."""
    text = str(exc).splitlines()[0] if str(exc) else ""
    return classify(exc), f"{type(exc).__name__}: {text}"


def agree_status(status: Status, message: str, group) -> tuple[Status, str]:
    """Worst status over ranks and, if not ok, the messages of the ranks that failed."""
    worst = status_of_severity(int(agree_max(status.severity, group)))
    return worst, (_failed_messages(worst, status, message, group) if worst != Status.OK else "")


def agree_sample(status: Status, message: str, value: float, group) -> tuple[Status, str, float]:
    """Worst status and max of `value` over ranks in one all_reduce (the messages only if one failed)."""
    t = torch.tensor(
        [float(status.severity), float(value)], dtype=torch.float64, device=control_device(group)
    )
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    worst, value = status_of_severity(int(t[0].item())), float(t[1].item())
    return worst, (_failed_messages(worst, status, message, group) if worst != Status.OK else ""), value


def _failed_messages(worst: Status, status: Status, message: str, group) -> str:
    messages = [None] * dist.get_world_size(group)
    dist.all_gather_object(messages, (status, message), group=group)
    failed = [f"rank {r}: {m}" for r, (s, m) in enumerate(messages) if s == worst]
    return "; ".join(failed)[:1000]


def attempt(step, group) -> tuple[Status, str]:
    """Run `step()` on every rank, then agree on the worst outcome (one all_reduce, more if it failed).

    Safe for failures that happen on every rank alike or before any communication (bad inputs, an
    unsupported option, the communication-free rehearsal). A failure on one rank while its peers wait
    in a collective cannot be agreed on; the benchmark avoids that case with the rehearsal.
    """
    status, message = Status.OK, ""
    try:
        step()
    except Exception as exc:  # noqa: BLE001 - classified, agreed across ranks, reported as a row
        status, message = outcome(exc)
    return agree_status(status, message, group)


def attempt_steps(steps, group, state: dict, device):
    """`attempt` each step in order; at the first that fails on any rank, clear `state` (the row's
    tensors), release the device and return (status, message, the step). None when all succeed."""
    for step in steps:
        status, message = attempt(step, group)
        if status != Status.OK:
            state.clear()
            release(device)
            return status, message, step
    return None


def release(device) -> None:
    """Return a finished row's device memory before the next row allocates (CUDA only: gc.collect
    costs ~0.1 s with torch loaded, more than a whole CPU smoke row)."""
    if device.type == "cuda":
        gc.collect()
        torch.cuda.empty_cache()


class Call:
    """One timed unit: fwd, fwd_bwd, or bwd (a fresh untimed forward precedes each timed backward)."""

    def __init__(self, fn, pass_: str, q, k, v, dout):
        self.fn, self.pass_, self.inputs, self.dout = fn, pass_, (q, k, v), dout
        self.pending = None

    def before(self, check_ranks: bool) -> None:
        for t in self.inputs:
            t.grad = None
        if self.pass_ == "bwd":
            self.pending = self.fn(*self.inputs, check_ranks)

    def __call__(self, check_ranks: bool) -> None:
        if self.pass_ == "fwd":
            with torch.no_grad():
                self.fn(*self.inputs, check_ranks)
        elif self.pass_ == "fwd_bwd":
            self.fn(*self.inputs, check_ranks).backward(self.dout)
        else:
            out, self.pending = self.pending, None
            out.backward(self.dout)


def time_once(call: Call, device) -> float:
    """Milliseconds of one call on this rank (CUDA events; perf_counter on CPU)."""
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        call(False)
        end.record()
        end.synchronize()
        return start.elapsed_time(end)
    t0 = time.perf_counter()
    call(False)
    return (time.perf_counter() - t0) * 1e3


def time_reps(
    call: Call, group, device, *, min_reps, max_reps, min_time_s, max_time_s, agree_failures=False
) -> list[float]:
    """Per repetition, the slowest rank's milliseconds; every rank returns the same list.

    agree_failures, for calls with no communication inside (the single-GPU reference): a failure of one
    rank's call is agreed together with the sample and AgreedFailure is raised on every rank, instead of
    its peers waiting alone in the next collective. A CP call that fails mid-exchange leaves its peers
    blocked before any agreement, so for CP the exception propagates (agree_failures=False).
    """
    samples: list[float] = []
    while True:
        status, message, ms = Status.OK, "", 0.0
        try:
            call.before(False)
        except Exception as exc:
            if not agree_failures:
                raise
            status, message = outcome(exc)
        align(group, device)
        if status == Status.OK:
            try:
                ms = time_once(call, device)
            except Exception as exc:
                if not agree_failures:
                    raise
                status, message = outcome(exc)
        if agree_failures:
            status, message, ms = agree_sample(status, message, ms, group)
            if status != Status.OK:
                raise AgreedFailure(status, message)
            samples.append(ms)
        else:
            samples.append(agree_max(ms, group))
        total = sum(samples)
        if len(samples) >= max_reps or total >= max_time_s * 1e3:
            return samples
        if len(samples) >= min_reps and total >= min_time_s * 1e3:
            return samples


def steady_state(call: Call, group, device, min_s: float, *, agree_failures: bool = False) -> float:
    """Untimed real calls until the ranks have run for `min_s` (the decision agreed after each call, so
    every rank makes the same calls and none waits alone in a collective); returns the seconds. On GPUs
    the clock settles at the power limit under load (bench.timing.WARMUP_MIN_S).

    agree_failures, as in time_reps, for calls with no communication inside (a single-GPU reference run
    on every rank at once): a failure (out of memory) on one rank is agreed with the elapsed time and
    AgreedFailure is raised on every rank, so no rank waits alone in the next collective."""
    began = time.perf_counter()
    while True:
        status, message = Status.OK, ""
        try:
            call.before(False)
            call(False)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
        except Exception as exc:
            if not agree_failures:
                raise
            status, message = outcome(exc)
        if agree_failures:
            status, message, elapsed = agree_sample(status, message, time.perf_counter() - began, group)
            if status != Status.OK:
                raise AgreedFailure(status, f"{message} (in the steady-state warm-up)")
        else:
            elapsed = agree_max(time.perf_counter() - began, group)
        if elapsed >= min_s:
            return elapsed


def timed_with_clock(call: Call, group, device, **rule) -> tuple[list[float], dict]:
    """time_reps with each rank's clock sampled; the row's clock fields: lowest SM clock and highest power
    over ranks (the slowest GPU, as the time is the slowest rank's; every rank takes part in the
    agreement, with or without a clock source)."""
    source = clock_windows.device_source(device)[0]
    with clocks.ClockSampler(source) as sampler:
        samples = time_reps(call, group, device, **rule)
    mine = sampler.summary()
    low_mhz = -agree_max(-(mine["sm_clock_mhz"] or float("inf")), group)
    high_w = agree_max(mine["power_w"] if mine["power_w"] is not None else -1.0, group)
    return samples, {
        "sm_clock_mhz": None if low_mhz == float("inf") else low_mhz,
        "power_w": None if high_w < 0 else high_w,
        "clock_source": getattr(source, "name", None),
        "timing_method": "cuda_event_per_call" if device.type == "cuda" else "perf_counter",
    }


def random_call(fn, pass_: str, shape, dtype: str, device, seed: int) -> Call:
    gen = torch.Generator(device=device).manual_seed(seed)
    q, k, v, dout = (
        torch.randn(shape, generator=gen, device=device, dtype=torch_dtype(dtype)) for _ in range(4)
    )
    for t in (q, k, v):
        t.requires_grad_(pass_ != "fwd")
    return Call(fn, pass_, q, k, v, dout)
