"""Run providers over workloads and passes; every (provider, workload, pass) becomes one Result row.

Per workload: canonical q, k, v ([batch, heads, seq, head_dim], randn from a seeded generator on the
device, cast to the workload dtype; scores have unit spread after the 1/sqrt(d) scale) are made once,
and the fp32 reference once (gradients only when a backward pass needs them).

Per provider and pass:
  unavailable() -> row `unavailable`; unsupported() (or a CUDA-only provider on a CPU run) -> `unsupported`.
  setup_ms = prepare + first call (+ first backward), synchronised: compile and autotune live here.
  Correctness comes from that first call: output (fwd), gradients (bwd), both (fwd_bwd). A failing
  row is `incorrect` with the failed check as reason; it keeps its timing and is never the fastest.
  The row's max_abs/mean_abs/rel_l2/ok are those of the failing check, else of the check closest to
  its bound; extra["correctness"] has every check.
  Timed callables: fwd = run() under no_grad; fwd_bwd = run() then torch.autograd.grad w.r.t. the
  native q, k, v (no .grad accumulation kernels); bwd = torch.autograd.grad(out, ..., retain_graph=True)
  on one saved forward (the graph is built once, outside the timed region).
  peak_mem_bytes = peak allocated by the timed calls above what existed before them + bytes of the
  canonical q, k, v (+ dout for backward passes) + (bwd only) what the saved forward holds:
  i.e. the peak of an application holding just the inputs. extra has the parts.
  Any exception -> `error` row "Type: first line" (extra["stage"] says where); OOM -> `oom` row,
  memory released, the sweep goes on.
Backward contract: Prepared.inputs are the native (q, k, v) in that order; leaves get requires_grad
here if the provider did not; gradients are mapped back to canonical layout by Provider.layout
(bhsd | bshd | sbhd | thd). prepare(..., backward=True) is called for bwd and fwd_bwd; a prepare() that
raises providers.base.Unsupported gives an `unsupported` row.
rounds=K measures the whole grid K times and keeps each row's fastest round (bench/rounds.py says why).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import torch

from attnbench.bench import correctness, flops, timing
from attnbench.bench.inputs import Workspace
from attnbench.bench.providers.base import Unsupported, describe_exception
from attnbench.rows import PASSES, Result, Workload

Progress = Callable[[Result], None]


def print_progress(row: Result) -> None:
    """One line per row, flushed so the engine streams it."""
    text = f"[sweep] {row.provider:<30} {row.pass_:<7} {row.workload.label():<44} {row.status:<11}"
    if row.ms_median is not None:
        text += f" {row.ms_median:9.4f} ms"
        text += f" {row.tflops:8.4g} TFLOP/s" if row.tflops is not None else ""
        text += f" MFU {row.mfu:5.1%}" if row.mfu is not None else ""
        text += f" @{row.sm_clock_mhz:.0f} MHz" if row.sm_clock_mhz is not None else ""
    if row.rel_l2 is not None:
        text += f" rel_l2 {row.rel_l2:.2e}"
    if row.reason:
        text += f"  {row.reason}"
    print(text, flush=True)


def _nbytes(*tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def _finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


def _grad_inputs(prepared) -> tuple[torch.Tensor, ...]:
    inputs = tuple(prepared.inputs)
    if len(inputs) != 3:
        raise ValueError(
            f"Prepared.inputs must be the native (q, k, v) for a backward pass, got {len(inputs)}"
        )
    for name, t in zip("qkv", inputs):
        if not t.requires_grad:
            if not t.is_leaf:
                raise ValueError(f"native {name} is a non-leaf tensor without grad: detach() it in prepare()")
            t.requires_grad_(True)
    return inputs


def _native_grad_output(out, to_canonical, dout: torch.Tensor) -> torch.Tensor:
    """dout in the provider's native output layout (the adjoint of to_canonical), strides like out."""
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"run() returned {type(out).__name__}; a backward pass needs a tensor")
    probe = out.detach().requires_grad_(True)
    with torch.enable_grad():
        canonical = to_canonical(probe)
    if tuple(canonical.shape) != tuple(dout.shape) or not canonical.requires_grad:
        raise ValueError(
            f"to_canonical gives {tuple(canonical.shape)} (requires_grad={canonical.requires_grad}); "
            f"need a differentiable map to {tuple(dout.shape)}"
        )
    (grad,) = torch.autograd.grad(canonical, probe, dout.to(canonical.dtype))
    return torch.empty_like(out).copy_(grad)


def canonical_grad(grad: torch.Tensor, layout: str, like: torch.Tensor) -> torch.Tensor:
    """A native-layout gradient as [batch, heads, seq, head_dim] like the canonical tensor `like`."""
    b, h, s, d = like.shape
    if layout == "bhsd":
        mapped = grad
    elif layout == "bshd":
        mapped = grad.transpose(1, 2)
    elif layout == "sbhd":
        mapped = grad.permute(1, 2, 0, 3)
    elif layout == "thd":
        mapped = grad.reshape(b, s, h, d).transpose(1, 2)
    else:
        raise ValueError(f"cannot map gradients of layout {layout!r} (bhsd | bshd | sbhd | thd)")
    if tuple(mapped.shape) != tuple(like.shape):
        raise ValueError(
            f"{layout} gradient of shape {tuple(grad.shape)} does not map to {tuple(like.shape)}"
        )
    return mapped


def fill_checks(
    row: Result, checks: dict[str, correctness.Comparison], reference_error: str | None = None
) -> None:
    """Fill the correctness fields of `row` from named comparisons; mark it incorrect if one failed."""
    if not checks:
        row.reason = f"not checked: {reference_error}"
        return
    main = correctness.worst(checks)
    row.max_abs, row.mean_abs, row.rel_l2 = (
        _finite(main.max_abs),
        _finite(main.mean_abs),
        _finite(main.rel_l2),
    )
    row.ok = main.ok
    row.extra["tolerance"] = {
        "name": main.tolerance.name,
        "rel_l2": main.tolerance.rel_l2,
        "max_abs": main.tolerance.max_abs,
    }
    row.extra["correctness"] = {
        name: {
            "max_abs": _finite(c.max_abs),
            "mean_abs": _finite(c.mean_abs),
            "rel_l2": _finite(c.rel_l2),
            "ok": c.ok,
        }
        for name, c in checks.items()
    }
    if not main.ok:
        row.status, row.reason = "incorrect", main.reason


def _measure_row(
    row: Result, provider, ws: Workspace, pass_: str, stage: list[str], timing_options: dict[str, Any]
) -> None:
    """Setup, correctness and timing of one (provider, workload, pass); fills `row` or raises."""
    w, device = ws.workload, ws.device
    canonical = (ws.q.detach(), ws.k.detach(), ws.v.detach())
    cuda = timing.is_cuda(device)
    memory = {"mem_inputs_bytes": _nbytes(ws.q, ws.k, ws.v)}
    checks: dict[str, correctness.Comparison] = {}

    def compare(name, out, ref, grad=False):
        if tuple(out.shape) != tuple(ref.shape):
            raise ValueError(
                f"{name} has shape {tuple(out.shape)}, expected {tuple(ref.shape)} (to_canonical?)"
            )
        judged = provider.tolerance or provider.quantized
        checks[name] = correctness.compare(out, ref, w.dtype, judged, grad=grad, what=name)

    if pass_ == "fwd":

        def first():
            stage[0] = "prepare"
            prepared = provider.prepare(*canonical, w, backward=False)
            row.extra.update({"note": prepared.note} if getattr(prepared, "note", "") else {})
            stage[0] = "first call"
            return prepared, prepared.run()

        with torch.no_grad():
            (prepared, out), row.setup_ms = timing.setup(first, device=device)
            stage[0] = "correctness"
            if ws.ref_out() is not None:
                compare("out", prepared.to_canonical(out), ws.ref_out())
            fill_checks(row, checks, ws.reference_error)
            del out
            stage[0] = "timing"
            result = timing.measure(prepared.run, device=device, **timing_options)
    else:
        memory["mem_inputs_bytes"] += _nbytes(ws.dout)

        def first():
            stage[0] = "prepare"
            prepared = provider.prepare(*canonical, w, backward=True)
            row.extra.update({"note": prepared.note} if getattr(prepared, "note", "") else {})
            inputs = _grad_inputs(prepared)
            stage[0] = "first call"
            before = torch.cuda.memory_allocated(device) if cuda else 0
            out = prepared.run()
            saved = torch.cuda.memory_allocated(device) - before if cuda else 0
            dout = _native_grad_output(out, prepared.to_canonical, ws.dout)
            stage[0] = "first backward"
            grads = torch.autograd.grad(out, inputs, dout, retain_graph=(pass_ == "bwd"))
            return prepared, inputs, out, dout, grads, saved

        (prepared, inputs, out, dout, grads, saved), row.setup_ms = timing.setup(first, device=device)
        stage[0] = "correctness"
        if pass_ == "fwd_bwd" and ws.ref_out() is not None:
            compare("out", prepared.to_canonical(out.detach()), ws.ref_out())
        if ws.ref_grads() is not None:
            for name, grad, ref, like in zip(("dq", "dk", "dv"), grads, ws.ref_grads(), canonical):
                mapped = (
                    prepared.grad_to_canonical(name, grad, like)
                    if getattr(prepared, "grad_to_canonical", None)
                    else canonical_grad(grad, provider.layout, like)
                )
                compare(name, mapped, ref, grad=True)
        fill_checks(row, checks, ws.reference_error)
        del grads
        stage[0] = "timing"
        if pass_ == "fwd_bwd":
            del out

            def step():
                return torch.autograd.grad(prepared.run(), inputs, dout)
        else:
            memory["mem_saved_forward_bytes"] = saved

            def step():
                return torch.autograd.grad(out, inputs, dout, retain_graph=True)

        result = timing.measure(step, device=device, **timing_options)

    record_timing(row, result)
    if result.peak_mem_bytes is not None:
        memory["mem_timed_delta_bytes"] = result.peak_mem_bytes
        row.peak_mem_bytes = sum(memory.values())
        row.extra.update(memory)


TIMING_FIELDS = ("timing_method", "warmup_s", "warmup_settled", "sm_clock_mhz", "power_w", "temperature_c")
TIMING_EXTRA = (
    "warmup_calls",
    "host_ms_per_call",
    "clock_samples",
    "clock_reason",
    "preheat_s",
    "equilibrium_c",
)


def record_timing(row: Result, result: timing.Timing) -> None:
    """Copy a timing.measure result into a row: statistics, how it was timed, the clock it ran at."""
    row.ms_median, row.ms_p20, row.ms_p80 = result.ms_median, result.ms_p20, result.ms_p80
    row.reps, row.timer, row.clock_source = result.reps, result.timer, result.clock_source
    for name in TIMING_FIELDS:
        setattr(row, name, getattr(result, name))
    row.extra["timed_total_ms"], row.extra["flush_bytes"] = result.total_ms, result.flush_bytes
    row.extra.update(
        {name: getattr(result, name) for name in TIMING_EXTRA if getattr(result, name) is not None}
    )


def run_one(
    provider,
    workload: Workload,
    pass_: str,
    ws: Workspace,
    *,
    unavailable: str | None,
    timing_options: dict[str, Any],
    peak_tflops: float | None,
    datasheet_tflops: float | None,
    env_id: str,
) -> Result:
    """One row; never raises (except KeyboardInterrupt)."""
    row = Result(
        provider=provider.name,
        family=provider.family,
        status="ok",
        workload=workload,
        pass_=pass_,
        env=env_id,
    )
    if getattr(provider, "quantized", False):
        row.extra["quantized"] = True  # ranked apart from exact kernels (results.best_by_workload)
    if unavailable:
        row.status, row.reason = "unavailable", unavailable
        return row
    stage = ["unsupported()"]
    try:
        why = provider.unsupported(workload, pass_)
        if not why and provider.needs_cuda and not timing.is_cuda(ws.device):
            why = f"needs a CUDA device (this run is on {ws.device})"
        if why:
            row.status, row.reason = "unsupported", why
            return row
        _measure_row(row, provider, ws, pass_, stage, timing_options)
    except Unsupported as exc:  # only the library could tell, in prepare(): a capability, not a failure
        row.status, row.reason = "unsupported", str(exc) or type(exc).__name__
        row.extra["stage"] = stage[0]
    except Exception as exc:  # noqa: BLE001 - every failure is a row, never a crash
        row.status = "oom" if timing.is_oom(exc) else "error"
        row.reason = describe_exception(exc)
        row.extra["stage"] = stage[0]
    finally:
        timing.release_memory(ws.device, collect=row.status in ("error", "oom"))
    if row.ms_median is not None:
        flops.score(row, provider, peak_tflops, datasheet_tflops, ws.device)
    return row


def _availability(provider) -> str | None:
    try:
        return provider.unavailable()
    except Exception as exc:  # noqa: BLE001 - the contract says never raise; a provider that does is still a row
        return f"unavailable() raised {describe_exception(exc)}"


def run_sweep(
    providers: Iterable,
    workloads: Iterable[Workload],
    passes: Iterable[str] = ("fwd",),
    *,
    device=None,
    reference: bool = True,
    seed: int = 0,
    peak_tflops: float | str | None = "measure",
    datasheet_tflops: float | None = None,
    env_id: str | None = None,
    progress: Progress | None = print_progress,
    timing_options: dict[str, Any] | None = None,
    rounds: int = 1,
) -> list[Result]:
    """Measure every provider on every workload and pass. Returns all rows, one per combination.

    peak_tflops: the MFU denominator; "measure" times a bf16 matmul now (CUDA only, else no MFU).
    timing_options: keyword arguments of timing.measure (min_reps, min_time_ms, warmup_reps, ...).
    rounds: passes over the whole grid; each row is its fastest round (rounds.fastest_of_rounds).
    """
    from attnbench.bench.env import machine_id
    from attnbench.bench.rounds import fastest_of_rounds

    providers, workloads, passes = list(providers), list(workloads), list(passes)
    bad = [p for p in passes if p not in PASSES]
    if bad:
        raise ValueError(f"unknown passes {bad}; known: {PASSES}")
    device = torch.device(device if device is not None else ("cuda" if torch.cuda.is_available() else "cpu"))
    if peak_tflops == "measure":
        peak_tflops = flops.MeasuredPeaks(device, progress is not None) if timing.is_cuda(device) else None
    env_id = env_id or machine_id()
    if rounds < 1:
        raise ValueError(f"rounds={rounds}: give 1 or more passes over the grid")
    availability = {id(p): _availability(p) for p in providers}
    measured = []
    for round_ in range(1, rounds + 1):
        if progress is not None and rounds > 1:
            print(f"[sweep] round {round_} of {rounds} over the grid", flush=True)
        measured.append(_one_round(providers, workloads, passes, device, seed, reference, availability,
                                   timing_options, peak_tflops, datasheet_tflops, env_id, progress))  # fmt: skip
    return fastest_of_rounds(measured)


def _one_round(providers, workloads, passes, device, seed, reference, availability, timing_options,
               peak_tflops, datasheet_tflops, env_id, progress) -> list[Result]:  # fmt: skip
    """One pass over the grid: workload by workload (its inputs and reference made once), every provider
    and pass."""
    rows: list[Result] = []
    for workload in workloads:
        ws = Workspace(workload, device, seed, reference)
        for provider in providers:
            for pass_ in passes:
                row = run_one(
                    provider,
                    workload,
                    pass_,
                    ws,
                    unavailable=availability[id(provider)],
                    timing_options=timing_options or {},
                    peak_tflops=peak_tflops,
                    datasheet_tflops=datasheet_tflops,
                    env_id=env_id,
                )
                rows.append(row)
                if progress is not None:
                    progress(row)
        del ws
        timing.release_memory(device)
    return rows
