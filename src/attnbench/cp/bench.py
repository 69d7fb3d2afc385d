"""Benchmark driver for context-parallel attention: one Result row per (strategy, length, mask, pass).

Run under torchrun (the notebook's gpus=N cells); every rank calls the same functions in the same
order and gets the same rows back; rank 0 writes them (`run_sweep`).

Protocol for one row:
  1. Inputs: random shards [batch, heads, seq_len/world, head_dim] on every rank (no layout needed:
     timing does not depend on values).
  2. Rehearsal: one call (fwd or fwd+bwd) with every transfer replaced by a local copy
     (comm.rehearsal), so each rank allocates what the real run will, without waiting on peers. An
     out-of-memory on any rank is agreed through one all_reduce and becomes an `oom` row on all ranks,
     instead of a real run leaving peers blocked in a P2P exchange. torch_cp cannot rehearse (its
     communication is inside PyTorch); an OOM there ends the run through the NCCL timeout, so run it
     in its own cell.
  3. Warm-up: `warmup` real calls, the first with the cross-rank input check (its wall time is
     setup_ms: NCCL P2P connections are made lazily here); timed calls skip that check.
  4. Timed repetitions: ranks align (all_reduce + synchronize), each times its call with CUDA events
     (perf_counter on CPU), and the per-repetition MAX over ranks (all_reduce) is the sample: the
     slowest rank. Stop after min_reps and min_time_s, or max_reps, or max_time_s. No L2 flush: the
     working set is gigabytes, hundreds of times the L2.
  5. TFLOP/s per GPU = FLOPs of the whole mask (bench.flops.attention_flops) / (median x world).
     Peak memory = max over ranks of torch.cuda.max_memory_allocated during the timed calls, inputs
     included.
"""

from __future__ import annotations

import gc
import os
import time
from datetime import timedelta

import torch
import torch.distributed as dist

from attnbench.bench.flops import attention_flops
from attnbench.bench.results import Result, Workload, write_jsonl
from attnbench.bench.timing import is_oom, quantile
from attnbench.cp import STRATEGIES, attention, comm, get_strategy
from attnbench.cp.double_ring import default_window
from attnbench.cp.usp import default_degrees

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32,
          "float64": torch.float64}
_OK, _OOM, _BAD_INPUT, _ERROR = 0, 1, 2, 3


def _env_from_slurm() -> None:
    """srun with one task per GPU (no torchrun): take rank and sizes from SLURM's variables.
    MASTER_ADDR/MASTER_PORT must still be exported (README: the first node of the allocation)."""
    if "RANK" in os.environ or "SLURM_PROCID" not in os.environ:
        return
    os.environ["RANK"] = os.environ["SLURM_PROCID"]
    os.environ["WORLD_SIZE"] = os.environ["SLURM_NTASKS"]
    os.environ.setdefault("LOCAL_RANK", os.environ.get("SLURM_LOCALID", "0"))
    per_node = os.environ.get("SLURM_NTASKS_PER_NODE", "").split("(")[0]
    if per_node.isdigit():
        os.environ.setdefault("LOCAL_WORLD_SIZE", per_node)


def init_distributed(backend: str | None = None, timeout_s: float = 900) -> tuple[int, int, torch.device]:
    """Join the torchrun (or srun) job; returns (rank, world, device). Device: cuda:LOCAL_RANK, the only
    single-node assumption (LOCAL_WORLD_SIZE also sets the default double-ring window and USP degree)."""
    if not dist.is_initialized():
        _env_from_slurm()
        backend = backend or ("nccl" if torch.cuda.is_available() else "gloo")
        if backend == "nccl":
            local = int(os.environ.get("LOCAL_RANK", "0"))
            # A launcher that binds one GPU per task shows it as device 0.
            torch.cuda.set_device(local if local < torch.cuda.device_count() else 0)
        dist.init_process_group(backend, timeout=timedelta(seconds=timeout_s))
    return dist.get_rank(), dist.get_world_size(), comm.comm_device(None)


def _agree_max(value: float, group) -> float:
    t = torch.tensor([float(value)], dtype=torch.float64, device=comm.comm_device(group))
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    return float(t.item())


def _align(group, device) -> None:
    _agree_max(0.0, group)
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _classify(exc: BaseException) -> int:
    if is_oom(exc):
        return _OOM
    return _BAD_INPUT if isinstance(exc, ValueError) else _ERROR


def _agree_status(status: int, message: str, group) -> tuple[int, str]:
    """Worst status over ranks and, if not ok, the messages of the ranks that failed."""
    worst = int(_agree_max(status, group))
    if worst == _OK:
        return worst, ""
    messages = [None] * comm.group_size(group)
    dist.all_gather_object(messages, (status, message), group=group)
    failed = [f"rank {r}: {m}" for r, (s, m) in enumerate(messages) if s == worst]
    return worst, "; ".join(failed)[:1000]


def _attempt(step, group) -> tuple[int, str]:
    """Run `step()` on every rank, then agree on the worst outcome (one all_reduce, more if it failed)."""
    status, message = _OK, ""
    try:
        step()
    except Exception as exc:  # noqa: BLE001 - classified, agreed across ranks, reported as a row
        text = str(exc).splitlines()[0] if str(exc) else ""
        status, message = _classify(exc), f"{type(exc).__name__}: {text}"
    return _agree_status(status, message, group)


def _release(device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


class _Call:
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


def _time_reps(call: _Call, group, device, *, min_reps, max_reps, min_time_s, max_time_s) -> list[float]:
    samples: list[float] = []
    while True:
        call.before(False)
        _align(group, device)
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            call(False)
            end.record()
            end.synchronize()
            ms = start.elapsed_time(end)
        else:
            t0 = time.perf_counter()
            call(False)
            ms = (time.perf_counter() - t0) * 1e3
        samples.append(_agree_max(ms, group))
        total = sum(samples)
        if len(samples) >= max_reps or total >= max_time_s * 1e3:
            return samples
        if len(samples) >= min_reps and total >= min_time_s * 1e3:
            return samples


def resolved_options(strategy: str, group, heads: int, options: dict) -> dict:
    """The options a strategy will actually use, defaults filled in (for the row's label)."""
    options = dict(options)
    if strategy in ("double_ring", "burst") and options.get("window") is None:
        options["window"] = default_window(group)
    if strategy == "usp" and options.get("ulysses_degree") is None and options.get("ring_degree") is None:
        options["ulysses_degree"], options["ring_degree"] = default_degrees(comm.group_size(group), heads)
    return options


def _row(provider, workload, pass_, status, reason="", **fields) -> Result:
    return Result(provider=provider, family="cp", status=status, workload=workload, pass_=pass_,
                  reason=reason, **fields)


def measure(strategy: str, *, seq_len: int, mask: str = "causal", pass_: str = "fwd_bwd", batch: int = 1,
            heads: int = 40, head_dim: int = 128, dtype: str = "bfloat16", kernel: str | None = None,
            group=None, options: dict | None = None, warmup: int = 1, min_reps: int = 3,
            max_reps: int = 20, min_time_s: float = 1.0, max_time_s: float = 60.0, seed: int = 0,
            env: str = "") -> Result:
    """Time one strategy on `seq_len` total tokens over the group; the same Result on every rank."""
    options = dict(options or {})
    world, rank, device = comm.group_size(group), dist.get_rank(), comm.comm_device(group)
    workload = Workload(batch, seq_len, seq_len, heads, heads, head_dim, dtype, mask)
    spec = get_strategy(strategy)
    provider = f"cp_{strategy}"
    extra = {"world_size": world, "seq_per_gpu": seq_len // world, "kernel": kernel or
             ("cudnn" if device.type == "cuda" else "cpu_math"), "options": options,
             "backend": dist.get_backend(group), "rehearsal": spec.rehearsable,
             "timing": "per repetition, max over ranks (slowest rank)",
             "peak_mem": "max over ranks of max_memory_allocated, inputs included"}
    if mask not in ("causal", "full"):
        return _row(provider, workload, pass_, "unsupported",
                    f"mask {mask}: CP strategies do causal and full",
                    env=env, extra=extra)
    reason = spec.unavailable(device, kernel)
    if reason:
        return _row(provider, workload, pass_, "unavailable", reason, env=env, extra=extra)
    if seq_len % world:
        return _row(provider, workload, pass_, "unsupported",
                    f"seq_len {seq_len} is not divisible by the world size {world}", env=env, extra=extra)

    options = resolved_options(strategy, group, heads, options)
    extra["options"] = options

    def fn(q, k, v, check_ranks):
        return attention(q, k, v, strategy=strategy, causal=mask == "causal", group=group, kernel=kernel,
                         check_ranks=check_ranks, **options)[0]

    state: dict = {}

    def make_inputs():
        gen = torch.Generator(device=device).manual_seed(seed * 1000 + rank)
        shape = (batch, heads, seq_len // world, head_dim)
        q, k, v, dout = (torch.randn(shape, generator=gen, device=device, dtype=DTYPES[dtype])
                         for _ in range(4))
        for t in (q, k, v):
            t.requires_grad_(pass_ != "fwd")
        state["call"] = _Call(fn, pass_, q, k, v, dout)

    def rehearse():
        with comm.rehearsal():
            state["call"].before(True)
            state["call"](True)

    steps = [make_inputs] + ([rehearse] if spec.rehearsable else [])
    for step in steps:  # each step ends with an agreement, so no rank runs ahead into a collective
        status, message = _attempt(step, group)
        if status != _OK:
            state.clear()
            _release(device)
            kind = {_OOM: "oom", _BAD_INPUT: "unsupported", _ERROR: "error"}[status]
            where = " (in the communication-free rehearsal)" if step is rehearse and status == _OOM else ""
            return _row(provider, workload, pass_, kind, f"{message}{where}", env=env, extra=extra)
    call = state["call"]

    try:
        setup_start = time.perf_counter()
        for i in range(max(warmup, 1)):
            call.before(i == 0)
            call(i == 0)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        setup_ms = _agree_max((time.perf_counter() - setup_start) * 1e3, group)
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        samples = _time_reps(call, group, device, min_reps=min_reps, max_reps=max_reps,
                             min_time_s=min_time_s, max_time_s=max_time_s)
        peak = (int(_agree_max(torch.cuda.max_memory_allocated(device), group))
                if device.type == "cuda" else None)
    except Exception as exc:
        if is_oom(exc):
            raise RuntimeError(f"{strategy}: out of memory on rank {rank} in the real run after the "
                               f"rehearsal passed; peers may be blocked in communication") from exc
        raise
    finally:
        call = None
        state.clear()
        _release(device)
    ordered = sorted(samples)
    median = quantile(ordered, 0.5)
    tflops = attention_flops(workload, pass_) / (median * 1e-3 * world) / 1e12
    return _row(provider, workload, pass_, "ok", ms_median=median, ms_p20=quantile(ordered, 0.2),
                ms_p80=quantile(ordered, 0.8), reps=len(samples), tflops=tflops, peak_mem_bytes=peak,
                setup_ms=setup_ms, timer="cuda_event" if device.type == "cuda" else "perf_counter",
                env=env, extra=extra)


def measure_reference(seq_len: int, *, mask: str = "causal", pass_: str = "fwd_bwd", batch: int = 1,
                      heads: int = 40, head_dim: int = 128, dtype: str = "bfloat16", kernel: str = "cudnn",
                      group=None, min_reps: int = 3, max_reps: int = 20, min_time_s: float = 1.0,
                      max_time_s: float = 60.0, env: str = "") -> Result:
    """Single-GPU SDPA (`kernel`: cudnn | sdpa_flash) on `seq_len` tokens, e.g. the CP per-GPU tokens.

    Every rank runs it alone on its own GPU at the same time (no communication); the slowest is reported.
    """
    from torch.nn.attention import SDPBackend, sdpa_kernel

    device = comm.comm_device(group)
    workload = Workload(batch, seq_len, seq_len, heads, heads, head_dim, dtype, mask)
    backends = {"cudnn": [SDPBackend.CUDNN_ATTENTION], "sdpa_flash": [SDPBackend.FLASH_ATTENTION]}
    if device.type != "cuda" or kernel not in backends:
        kernel = "math"  # SDPA's math backend: the CPU smoke runs
    chosen = backends.get(kernel, [SDPBackend.MATH])
    provider = f"single_gpu_{kernel}"
    extra = {"world_size": 1, "ran_on": "every GPU of the job at once, slowest reported", "kernel": kernel}

    def fn(q, k, v, _check):
        with sdpa_kernel(chosen):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=mask == "causal")

    state: dict = {}

    def first_call():
        shape = (batch, heads, seq_len, head_dim)
        q, k, v, dout = (torch.randn(shape, device=device, dtype=DTYPES[dtype]) for _ in range(4))
        for t in (q, k, v):
            t.requires_grad_(pass_ != "fwd")
        state["call"] = _Call(fn, pass_, q, k, v, dout)
        state["call"].before(False)
        state["call"](False)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
            torch.cuda.reset_peak_memory_stats(device)

    status, message = _attempt(first_call, group)
    if status != _OK:
        state.clear()
        _release(device)
        kind = {_OOM: "oom", _BAD_INPUT: "unsupported", _ERROR: "error"}[status]
        return _row(provider, workload, pass_, kind, message, env=env, extra=extra)
    samples = _time_reps(state["call"], group, device, min_reps=min_reps, max_reps=max_reps,
                         min_time_s=min_time_s, max_time_s=max_time_s)
    peak = int(_agree_max(torch.cuda.max_memory_allocated(device), group)) if device.type == "cuda" else None
    state.clear()
    _release(device)
    ordered = sorted(samples)
    median = quantile(ordered, 0.5)
    return _row(provider, workload, pass_, "ok", ms_median=median, ms_p20=quantile(ordered, 0.2),
                ms_p80=quantile(ordered, 0.8), reps=len(samples),
                tflops=attention_flops(workload, pass_) / (median * 1e-3) / 1e12, peak_mem_bytes=peak,
                timer="cuda_event" if device.type == "cuda" else "perf_counter", env=env, extra=extra)


def run_sweep(strategies, seq_lens, *, masks=("causal", "full"), passes=("fwd", "fwd_bwd"), out_path=None,
              reference_kernel: str | None = "cudnn", group=None, strategy_options: dict | None = None,
              **measure_kwargs) -> list[Result]:
    """Every (strategy, length, mask, pass) plus a single-GPU reference at the same per-GPU tokens.

    Rows go to `out_path` (JSONL, rank 0) as soon as they exist, so a crash keeps what was measured.
    strategy_options: {strategy: {option: value}}; unknown strategies fail before anything runs.
    """
    strategy_options = strategy_options or {}
    for name in list(strategies) + list(strategy_options):
        get_strategy(name)
    world, rows = comm.group_size(group), []

    def emit(row: Result) -> None:
        rows.append(row)
        if out_path and dist.get_rank() == 0:
            write_jsonl(out_path, [row], append=True)

    ref_keys = {"batch", "heads", "head_dim", "dtype", "min_reps", "max_reps", "min_time_s", "max_time_s",
                "env"}
    for seq_len in seq_lens:
        for mask in masks:
            for pass_ in passes:
                if reference_kernel:
                    emit(measure_reference(seq_len // world, mask=mask, pass_=pass_, kernel=reference_kernel,
                                           group=group, **{k: v for k, v in measure_kwargs.items()
                                                           if k in ref_keys}))
                for name in strategies:
                    emit(measure(name, seq_len=seq_len, mask=mask, pass_=pass_, group=group,
                                 options=strategy_options.get(name), **measure_kwargs))
    return rows


__all__ = ["STRATEGIES", "init_distributed", "measure", "measure_reference", "run_sweep"]
