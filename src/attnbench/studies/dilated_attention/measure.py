"""One Result row of dilated attention on one device, measured like bench/sweep.py measures a provider.

Protocol (`measure_dilated`): inputs q, k, v (and dout) from bench.inputs.make_inputs with a fixed seed,
[batch, heads, N, head_dim] in the workload dtype. setup_ms = preparation (FlexAttention: building the
BlockMask and compiling) + the first call (+ its backward), synchronised. Correctness, where a
reference is given, from that first call: out (fwd), out and dq, dk, dv (fwd_bwd), judged with
bench.correctness's tolerance for the dtype. Timing: bench.timing.measure (CUDA events, cold L2,
warm-up, median and p20-p80); fwd runs under no_grad, fwd_bwd is the call plus torch.autograd.grad
with respect to q, k, v. peak_mem_bytes = the timed calls' peak above what existed before them + the
inputs (and dout), as in bench/sweep.py. OOM is an `oom` row, a backend that cannot run here an
`unavailable` row with its reason, anything else an `error` row naming the stage.

Rows: provider `dilated_gather_<backend>` / `dilated_flex` / `dilated_fused` (our Triton kernel,
kernels/dilated_attention), family `dilated`; the workload's mask is the
base mask (causal or full) and extra["pattern"] == "dilated" with the branches, the exact pairs and
FLOPs of the sparse pattern (tflops uses those, never the dense count), and tokens/s.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from attnbench.bench import correctness, flops, timing
from attnbench.bench.inputs import make_dout, make_inputs
from attnbench.bench.providers.base import describe_exception
from attnbench.bench.sweep import fill_checks, record_timing
from attnbench.dilated import kernels, pattern
from attnbench.rows import Pass, Result, Workload

IMPLEMENTATIONS = ("gather", "flex", "fused")


def provider_name(implementation: str, backend: str | None = None) -> str:
    return f"dilated_{implementation}" + (f"_{backend}" if backend else "")


def pattern_extra(branches, workload: Workload) -> dict[str, Any]:
    """What a row must say about the sparse pattern: branches, exact pairs and FLOPs, density."""
    w, causal = workload, workload.mask == "causal"
    pairs = pattern.pairs(branches, w.seqlen_q, w.heads_q, causal)
    return {
        "pattern": "dilated",
        "branches": [[b.w, b.r] for b in pattern.branches_from(branches)],
        "pairs": pairs * w.batch,
        "dense_pairs": pattern.dense_pairs(w.seqlen_q, w.heads_q, causal) * w.batch,
        "density": pairs / pattern.dense_pairs(w.seqlen_q, w.heads_q, causal),
        "flops_fwd": 4 * w.head_dim * w.batch * pairs,
    }


def row_flops(row: Result) -> float:
    """FLOPs of one call of the row's pass: the sparse pattern's for dilated rows, the mask's otherwise."""
    if row.extra.get("pattern") == "dilated":
        return row.extra["flops_fwd"] * Pass.parse(row.pass_).flop_multiplier
    return flops.attention_flops(row.workload, row.pass_)


def finish(
    row: Result, peak_tflops: float | None, datasheet_tflops: float | None = None, gpus: int = 1
) -> Result:
    """TFLOP/s, MFU and tokens/s of a measured row. A call split over `gpus` GPUs is scored per GPU: each
    GPU's share of the pattern's FLOPs against one GPU's peaks (a share of the whole call's FLOPs would
    be `gpus` times too high)."""
    if row.ms_median is None:
        return row
    device = "cuda" if row.timer == "cuda_event" else "cpu"  # SMs and architecture for the at-clock peak
    flops.score(row, None, peak_tflops, datasheet_tflops, device, work_flops=row_flops(row) / gpus)
    row.extra["tokens_per_s"] = row.workload.batch * row.workload.seqlen_q / (row.ms_median * 1e-3)
    return row


def prepare(implementation: str, backend: str | None, branches, workload: Workload, device) -> Callable:
    """fn(q, k, v) -> (out, lse) with its setup done (FlexAttention's BlockMask built here)."""
    causal = workload.mask == "causal"
    if implementation == "gather":
        from attnbench.dilated.gathered import DilatedGather, plan

        # the backend, the gather plans and the scale are made once here, outside the timed call
        # (gathered_attention would redo them per call); `unavailable` already asked the backend
        kernel = kernels.get(backend, device)
        plans = plan(branches, workload.seqlen_q, workload.heads_q)
        scale = pattern.default_scale(workload.head_dim)
        return lambda q, k, v: DilatedGather.apply(q, k, v, plans, kernel, causal, scale)
    if implementation == "flex":
        from attnbench.dilated.flex import FlexDilated

        return FlexDilated(branches, workload.seqlen_q, causal=causal, device=device)
    if implementation == "fused":
        from attnbench.kernels.dilated_attention import dilated_attention

        return lambda q, k, v: dilated_attention(q, k, v, branches, causal=causal)
    raise ValueError(f"unknown implementation {implementation!r}; choose one of {IMPLEMENTATIONS}")


def unavailable(
    implementation: str, backend: str | None, workload: Workload, pass_: str, device
) -> tuple | None:
    """(status, reason) when this implementation cannot run here at all, else None."""
    device = torch.device(device)
    dtype = getattr(torch, workload.dtype)
    if implementation == "gather":
        reason = kernels.get(backend).unavailable(device, dtype, workload.head_dim)
        return ("unavailable", reason) if reason else None
    if implementation == "flex":
        try:
            from torch.nn.attention.flex_attention import flex_attention  # noqa: F401
        except Exception as exc:  # noqa: BLE001
            return "unavailable", f"this torch has no FlexAttention ({describe_exception(exc)})"
        if pass_ != "fwd" and device.type != "cuda":
            return "unsupported", "FlexAttention has no backward on CPU (eager); the GPU run checks it"
    if implementation == "fused":
        return _fused_unavailable(workload, device, dtype)
    return None


def _fused_unavailable(workload: Workload, device, dtype) -> tuple | None:
    """Our Triton kernel runs on CUDA, or on a CPU under the Triton interpreter (slow: tiny shapes)."""
    try:
        from attnbench.kernels.dilated_attention import launch
    except Exception as exc:  # noqa: BLE001 - e.g. triton imported before TRITON_INTERPRET could be set
        return "unavailable", f"the fused kernel does not load here: {describe_exception(exc)}"
    if device.type != "cuda" and not launch.interpreting():
        return "unavailable", "the fused kernel needs CUDA (or the Triton interpreter, TRITON_INTERPRET=1)"
    probe = torch.empty(1, 1, 1, workload.head_dim, dtype=dtype, device=device)  # the dtype and head dim
    try:
        launch.check_inputs(probe, probe, probe)
    except ValueError as exc:
        return "unsupported", str(exc)
    return None


def _nbytes(*tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def measure_dilated(
    implementation: str,
    backend: str | None,
    workload: Workload,
    pass_: str,
    branches,
    *,
    device,
    timing_options: dict[str, Any],
    reference: Callable[[], tuple] | None = None,
    peak_tflops: float | None = None,
    datasheet_tflops: float | None = None,
    env: str = "",
    seed: int = 0,
    timed: bool = True,
) -> Result:
    """One row: every failure of the measurement is a row, never a crash; a configuration that is not
    a dilated pattern or an unknown backend is a ValueError naming it (a mistake, not a measurement).
    `reference()` -> (out, lse, dq, dk, dv) of the
    same seeded inputs, or None for an unchecked row. `branches`: the configuration for this length
    (profiles.branches_for). timed=False: correctness only (no timing fields)."""
    branches = pattern.branches_from(branches)
    pattern.check(branches, workload.seqlen_q)
    row = Result(provider_name(implementation, backend if implementation == "gather" else None), "dilated",
                 "ok", workload, pass_, env=env, extra=pattern_extra(branches, workload))  # fmt: skip
    row.extra.update(implementation=implementation, backend=backend)
    refused = unavailable(implementation, backend, workload, pass_, device)
    if refused:
        row.status, row.reason = refused
        return row
    stage = ["inputs"]
    try:
        _measure(row, implementation, backend, branches, device, pass_, timing_options, reference, stage, seed,
                 timed)  # fmt: skip
    except Exception as exc:  # noqa: BLE001 - every failure is a row, never a crash
        row.status = "oom" if timing.is_oom(exc) else "error"
        row.reason = describe_exception(exc) + f" (in {stage[0]})"
        row.extra["stage"] = stage[0]
        row.ms_median = row.ms_p20 = row.ms_p80 = None
    finally:
        timing.release_memory(device, collect=row.status in ("error", "oom"))
    return finish(row, peak_tflops, datasheet_tflops)


def _measure(
    row, implementation, backend, branches, device, pass_, timing_options, reference, stage, seed, timed
):
    w = row.workload
    q, k, v = make_inputs(w, device, seed)
    backward = pass_ != "fwd"
    dout = make_dout(w, device, seed) if backward else None
    inputs_bytes = _nbytes(q, k, v) + (_nbytes(dout) if backward else 0)
    if backward:
        q, k, v = (t.requires_grad_(True) for t in (q, k, v))

    def first():
        stage[0] = "setup"
        fn = prepare(implementation, backend, branches, w, device)
        stage[0] = "first call"
        if not backward:
            with torch.no_grad():
                return fn, fn(q, k, v)[0], None
        out = fn(q, k, v)[0]
        stage[0] = "first backward"
        return fn, out.detach(), torch.autograd.grad(out, (q, k, v), dout)

    (fn, out, grads), row.setup_ms = timing.setup(first, device=device)
    if reference is not None:
        stage[0] = "reference"
        ref = reference()
        stage[0] = "correctness"
        checks = {"out": correctness.compare(out, ref[0], w.dtype, what="out")}
        for name, grad, expected in zip(("dq", "dk", "dv"), grads or (), ref[2:]):
            checks[name] = correctness.compare(grad, expected, w.dtype, grad=True, what=name)
        fill_checks(row, checks)
    else:
        row.extra["correctness"] = "not checked at this length (see the correctness rows)"
    del out, grads
    if not timed:
        return
    stage[0] = "timing"
    if backward:

        def step():
            return torch.autograd.grad(fn(q, k, v)[0], (q, k, v), dout)

        result = timing.measure(step, device=device, **timing_options)
    else:
        with torch.no_grad():
            result = timing.measure(lambda: fn(q, k, v), device=device, **timing_options)
    record_timing(row, result)
    if result.peak_mem_bytes is not None:
        row.peak_mem_bytes = result.peak_mem_bytes + inputs_bytes
        row.extra.update(mem_inputs_bytes=inputs_bytes, mem_timed_delta_bytes=result.peak_mem_bytes)


class References:
    """fp32 references (float64 on CPU) of the seeded inputs, cached per (length, mask): the chunked
    single softmax with log-multiplicities, equal to the definition (tests/dilated check it)."""

    def __init__(self, branches_for: Callable[[int], tuple], device, seed: int = 0):
        self.branches_for, self.device, self.seed = branches_for, device, seed
        self.cache: dict = {}

    def get(self, workload: Workload) -> Callable[[], tuple]:
        def compute():
            key = (workload.seqlen_q, workload.mask, workload.dtype, workload.heads_q, workload.head_dim)
            if key not in self.cache:
                from attnbench.dilated.reference import chunked_reference

                q, k, v = make_inputs(workload, self.device, self.seed)
                dout = make_dout(workload, self.device, self.seed)
                branches = self.branches_for(workload.seqlen_q)
                self.cache[key] = chunked_reference(q, k, v, dout, branches, causal=workload.mask == "causal")
            return self.cache[key]

        return compute

    def clear(self) -> None:
        self.cache.clear()
