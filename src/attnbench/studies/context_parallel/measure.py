"""One benchmark row of context-parallel attention, measured the same way on every rank.

Protocol for one row (`measure`):
  1. Inputs: random shards [batch, heads, seq_len/world, head_dim] on every rank (no layout needed:
     timing does not depend on values).
  2. Rehearsal: one call (fwd or fwd+bwd) with every transfer replaced by a local copy
     (comm.rehearsal), so each rank allocates what the real run will, without waiting on peers. An
     out-of-memory on any rank is agreed through one all_reduce and becomes an `oom` row on all ranks,
     instead of a real run leaving peers blocked in a P2P exchange. torch_cp cannot rehearse (its
     communication is inside PyTorch); bench.run_sweep skips it where its peak memory, extrapolated
     from a shorter length, would not fit.
  3. Warm-up: `warmup` real calls, the first with the cross-rank input check (its wall time is
     setup_ms: NCCL P2P connections are made lazily here). A failure of that first call on every
     rank (e.g. an option PyTorch refuses) is agreed and becomes an `error`/`unsupported` row. Then
     real calls until bench.timing.WARMUP_MIN_S has passed (on GPUs: the clock settles at the power
     limit under load), the stop agreed after each call so every rank makes the same calls.
  4. Timed repetitions: ranks align (all_reduce + synchronize), each times its call with CUDA events
     (perf_counter on CPU), and the per-repetition MAX over ranks (all_reduce) is the sample: the
     slowest rank. Stop after min_reps and min_time_s, or max_reps, or max_time_s. No L2 flush: the
     working set is gigabytes, hundreds of times the L2. A bench.clocks sampler on each rank reads the
     SM clock and power during the timed calls: the row keeps the lowest clock and highest power over
     ranks (the slowest GPU, as the time is the slowest rank's).
  5. TFLOP/s per GPU = FLOPs of the whole mask (bench.flops.attention_flops) / (median x world),
     scored like every other row (bench.flops.score through scoring.score_row): its math and its share
     of each peak of that math (a measured matmul peak when the caller gives one, the GPU's datasheet
     peak, and SMs x FLOP/clk x the row's SM clock); a row above 100 % of any of them is a measurement
     error and becomes an `error` row with the reason. Peak memory = max over ranks of
     torch.cuda.max_memory_allocated during the timed calls, inputs included.
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist

from attnbench.bench import timing
from attnbench.bench.distributed import (
    AgreedFailure,
    agree_max,
    agreed_peak_memory,
    attempt_steps,
    random_call,
    release,
    steady_state,
    timed_with_clock,
)
from attnbench.bench.inputs import torch_dtype
from attnbench.bench.timing import is_oom
from attnbench.cp import attention, comm, get_strategy
from attnbench.cp.local import flash_attn3_bhsd, get_kernel
from attnbench.rows import Result, Status, Workload
from attnbench.studies.context_parallel.scoring import measured_row


def resolved_options(strategy: str, group, heads: int, options: dict) -> dict:
    """The options a strategy will actually use, defaults filled in (for the row's label)."""
    return get_strategy(strategy).resolved_options(comm.group_size(group), heads, dict(options))


def row(provider, workload, pass_, status, reason="", **fields) -> Result:
    return Result(
        provider=provider, family="cp", status=status, workload=workload, pass_=pass_, reason=reason, **fields
    )


# Kernels other than the default ones (cuDNN on GPUs, the math kernel on CPUs) are named in the row's
# provider, so one results file can hold the same strategy over several kernels: cp_zigzag+fa3.
KERNEL_LABELS = {"flash_attn3": "fa3", "sdpa_flash": "flash2"}


def strategy_label(strategy: str, kernel: str | None) -> str:
    """The strategy as rows and tables name it: `zigzag` (default kernel) or `zigzag+fa3`."""
    if kernel in (None, "cudnn", "cpu_math"):
        return strategy
    return f"{strategy}+{KERNEL_LABELS.get(kernel, kernel)}"


def precheck(
    spec, *, mask: str, seq_len: int, world: int, device, kernel, dtype: str = "bfloat16", head_dim: int = 128
) -> tuple[str, str] | None:
    """(status, reason) when a strategy cannot run this case at all, else None (measure and breakdown)."""
    if mask not in ("causal", "full"):
        return "unsupported", f"mask {mask}: CP strategies do causal and full"
    reason = spec.unavailable(device, kernel)
    if reason:
        return "unavailable", reason
    if kernel is not None and spec.name != "torch_cp":
        reason = get_kernel(kernel, device).unavailable(device, torch_dtype(dtype), head_dim)
        if reason:
            return "unavailable", f"local kernel {kernel}: {reason}"
    if seq_len % world:
        return "unsupported", f"seq_len {seq_len} is not divisible by the world size {world}"
    return None


def cp_function(strategy: str, *, mask: str, group, kernel, options: dict):
    """fn(q, k, v, check_ranks) -> out of the strategy (what Call times)."""

    def fn(q, k, v, check_ranks):
        return attention(
            q,
            k,
            v,
            strategy=strategy,
            causal=mask == "causal",
            group=group,
            kernel=kernel,
            check_ranks=check_ranks,
            **options,
        )[0]

    return fn


def start(strategy: str, group, **case):
    """(world, rank, device, strategy spec, precheck's refusal or None) of a run of `strategy` over
    `group`; `case`: precheck's mask, seq_len, kernel, dtype and head_dim (measure and breakdown)."""
    world, rank, device = comm.group_size(group), dist.get_rank(), comm.comm_device(group)
    spec = get_strategy(strategy)
    return world, rank, device, spec, precheck(spec, world=world, device=device, **case)


def measure(
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
    warmup: int = 1,
    min_reps: int = 3,
    max_reps: int = 20,
    min_time_s: float = 1.0,
    max_time_s: float = 60.0,
    seed: int = 0,
    env: str = "",
    peak_tflops=None,
) -> Result:
    """Time one strategy on `seq_len` total tokens over the group; the same Result on every rank.
    `peak_tflops`: a measured matmul peak to score against besides the datasheet's (scoring.score_row)."""
    options = dict(options or {})
    world, rank, device, spec, refused = start(
        strategy, group, mask=mask, seq_len=seq_len, kernel=kernel, dtype=dtype, head_dim=head_dim
    )
    workload = Workload(batch, seq_len, seq_len, heads, heads, head_dim, dtype, mask)
    provider = f"cp_{strategy_label(strategy, kernel)}"
    extra = _strategy_extra(world, seq_len, kernel, device, options, group, spec.rehearsable)
    if refused:
        return row(provider, workload, pass_, *refused, env=env, extra=extra)

    options = resolved_options(strategy, group, heads, options)
    extra["options"] = options
    fn = cp_function(strategy, mask=mask, group=group, kernel=kernel, options=options)
    shape = (batch, heads, seq_len // world, head_dim)
    state, failed = _first_calls(fn, pass_, shape, dtype, device, seed * 1000 + rank, group, spec.rehearsable)
    if failed:
        return row(provider, workload, pass_, *failed, env=env, extra=extra)
    call = state["call"]
    rule = {"min_reps": min_reps, "max_reps": max_reps, "min_time_s": min_time_s, "max_time_s": max_time_s}
    try:
        for _ in range(max(warmup, 1) - 1):
            call.before(False)
            call(False)
        warm_s = timing.WARMUP_MIN_S if device.type == "cuda" else 0.0
        timed = _timed_phase(call, group, device, state["setup_start"], warm_s, rule)
    except Exception as exc:
        if is_oom(exc):
            raise RuntimeError(
                f"{strategy}: out of memory on rank {rank} in the real run after the "
                f"rehearsal passed; peers may be blocked in communication"
            ) from exc
        raise
    finally:
        call = None
        state.clear()
        release(device)
    # TFLOP/s per GPU: the whole mask's FLOPs over the slowest rank's time x world
    return measured_row(
        provider,
        workload,
        pass_,
        device=device,
        world=world,
        peak_tflops=peak_tflops,
        env=env,
        extra=extra,
        **timed,
    )


def _strategy_extra(world, seq_len, kernel, device, options, group, rehearsable) -> dict:
    """What a strategy's row records beside its numbers: the run's shape over ranks and its method."""
    return {
        "world_size": world,
        "seq_per_gpu": seq_len // world,
        "kernel": kernel or ("cudnn" if device.type == "cuda" else "cpu_math"),
        "options": options,
        "backend": dist.get_backend(group),
        "rehearsal": rehearsable,
        "timing": "per repetition, max over ranks (slowest rank)",
        "peak_mem": "max over ranks of max_memory_allocated, inputs included",
    }


def _first_calls(fn, pass_, shape, dtype, device, seed, group, rehearsable) -> tuple[dict, tuple | None]:
    """Protocol steps 1-3 up to the first real call: inputs, the communication-free rehearsal (when the
    strategy can) and the first real call, each ended by an agreement so that no rank runs ahead into a
    collective. Returns (state with the call and `setup_start`, None) or (state, (status, reason))."""
    state: dict = {}

    def make_inputs():
        state["call"] = random_call(fn, pass_, shape, dtype, device, seed)

    def rehearse():
        with comm.rehearsal():
            state["call"].before(True)
            state["call"](True)

    def first_real_call():
        state["setup_start"] = time.perf_counter()
        state["call"].before(True)
        state["call"](True)
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    steps = [make_inputs] + ([rehearse] if rehearsable else []) + [first_real_call]
    failed = attempt_steps(steps, group, state, device)
    if not failed:
        return state, None
    status, message, step = failed
    where = {rehearse: " (in the communication-free rehearsal)", first_real_call: " (in the first real call)"}
    return state, (status, message + (where.get(step, "") if status == Status.OOM else ""))


def _timed_phase(
    call, group, device, setup_start: float, warm_s: float, rule: dict, agree_failures=False
) -> dict:
    """Protocol steps 3 (after the first call) and 4, the same for strategies and references: setup time
    (the slowest rank's, from `setup_start`: a strategy's starts at its first real call, a reference's
    before its inputs are made, as each always did), the steady-state warm-up of at least `warm_s`, then the timed
    repetitions with the clock sampled and the peak memory over ranks. `agree_failures`: a call with no
    communication inside, whose failure on one rank is agreed after every call. measured_row's fields."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    setup_ms = agree_max((time.perf_counter() - setup_start) * 1e3, group)
    warmup_s = steady_state(call, group, device, warm_s, agree_failures=agree_failures)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    samples, conditions = timed_with_clock(call, group, device, agree_failures=agree_failures, **rule)
    peak = agreed_peak_memory(device, group)
    return {
        "samples": samples,
        "setup_ms": setup_ms,
        "warmup_s": warmup_s,
        "peak_mem_bytes": peak,
        **conditions,
    }


def reference_fn(kernel: str, device, mask: str):
    """fn(q, k, v, check) -> out of single-device attention with `kernel` (SDPA pinned to cudnn |
    sdpa_flash, FA3's flash_attn_func for flash_attn3; SDPA's math backend off CUDA)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    causal = mask == "causal"
    if kernel == "flash_attn3":

        def fa3(q, k, v, _check):
            return flash_attn3_bhsd(q, k, v, causal=causal)

        return fa3
    backends = {"cudnn": SDPBackend.CUDNN_ATTENTION, "sdpa_flash": SDPBackend.FLASH_ATTENTION}
    chosen = [backends.get(kernel, SDPBackend.MATH)]

    def sdpa(q, k, v, _check):
        with sdpa_kernel(chosen):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)

    return sdpa


def steady_warmup_s(device, warmup_min_s: float | None, caller: str = "measure_reference") -> float:
    """A steady-state warm-up's seconds: bench.timing's floor on a GPU (a profile may ask for more, never
    less), none on a CPU unless asked (a test asks, to prove long warm-ups cannot time out)."""
    if device.type != "cuda":
        return warmup_min_s or 0.0
    if warmup_min_s is not None and warmup_min_s < timing.WARMUP_MIN_S:
        raise ValueError(
            f"{caller}: warmup_min_s={warmup_min_s} is below the protocol's floor of "
            f"{timing.WARMUP_MIN_S} s on a GPU (bench.timing.WARMUP_MIN_S)"
        )
    return warmup_min_s or timing.WARMUP_MIN_S


def measure_reference(
    seq_len: int,
    *,
    mask: str = "causal",
    pass_: str = "fwd_bwd",
    batch: int = 1,
    heads: int = 40,
    head_dim: int = 128,
    dtype: str = "bfloat16",
    kernel: str = "cudnn",
    group=None,
    min_reps: int = 3,
    max_reps: int = 20,
    min_time_s: float = 1.0,
    max_time_s: float = 60.0,
    warmup_min_s: float | None = None,
    env: str = "",
    peak_tflops=None,
) -> Result:
    """Single-GPU attention on `seq_len` tokens (e.g. the CP per-GPU tokens) with `kernel`: SDPA pinned to
    cudnn | sdpa_flash, or FlashAttention-3's public flash_attn_func (flash_attn3).

    The strategies' protocol: every rank runs it alone on its own GPU at the same time (no communication
    inside the call), warms up to steady state (bench.distributed.steady_state) and is timed with its
    clock sampled (timed_with_clock); the slowest rank is reported. The ranks meet after every call and
    agree on failures there, so no rank waits at a barrier while another warms up or times (a long
    reference can never trip the process group's timeout, and an out-of-memory on one rank is a row).
    Scored as the strategies' rows (scoring.score_row, with one GPU's FLOPs).
    """
    device = comm.comm_device(group)
    workload = Workload(batch, seq_len, seq_len, heads, heads, head_dim, dtype, mask)
    if device.type == "cuda" and kernel not in ("cudnn", "sdpa_flash", "flash_attn3"):
        raise ValueError(f"reference kernel {kernel!r}: choose cudnn, sdpa_flash or flash_attn3")
    if device.type != "cuda":
        kernel = "math"  # SDPA's math backend: the CPU smoke runs
    provider = f"single_gpu_{kernel}"
    extra = {"world_size": 1, "ran_on": "every GPU of the job at once, slowest reported", "kernel": kernel,
             "timing": "steady-state warm-up, then timed calls with the clock sampled (as the strategies)",
             "baseline": True}  # fmt: skip
    if kernel == "flash_attn3":
        why = get_kernel(kernel, device).unavailable(device, torch_dtype(dtype), head_dim)
        if why:
            return row(provider, workload, pass_, "unavailable", why, env=env, extra=extra)
    warm_s = steady_warmup_s(device, warmup_min_s)
    fn, state = reference_fn(kernel, device, mask), {}

    def first_call():
        state["setup_start"] = time.perf_counter()
        state["call"] = random_call(
            fn, pass_, (batch, heads, seq_len, head_dim), dtype, device, dist.get_rank()
        )
        state["call"].before(False)
        state["call"](False)
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    failed = attempt_steps([first_call], group, state, device)
    if failed:
        return row(provider, workload, pass_, *failed[:2], env=env, extra=extra)
    rule = {"min_reps": min_reps, "max_reps": max_reps, "min_time_s": min_time_s, "max_time_s": max_time_s}
    try:
        # no communication inside the call: a failure on one rank is agreed after every call
        timed = _timed_phase(
            state["call"], group, device, state["setup_start"], warm_s, rule, agree_failures=True
        )
    except AgreedFailure as failure:
        where = "" if "warm-up" in failure.message else " (in the timed repetitions)"
        return row(
            provider, workload, pass_, failure.status, f"{failure.message}{where}", env=env, extra=extra
        )
    finally:
        state.clear()
        release(device)
    # world=1: every rank ran the whole workload alone
    return measured_row(
        provider,
        workload,
        pass_,
        device=device,
        world=1,
        peak_tflops=peak_tflops,
        env=env,
        extra=extra,
        **timed,
    )
