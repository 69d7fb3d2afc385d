"""Correctness rows of every implementation x backend, the reference's own check, and how much of the
gather path's time is its kernels (what a fused kernel could save at most).

`correctness_rows`: at the profile's correctness length, both masks, every gather backend (the ones
that cannot load here are rows with their reason), our fused kernel and FlexAttention, against the chunked fp32
reference of the same inputs (float64 on CPU): out, and dq, dk, dv for forward+backward, with the
dtype's tolerance from bench.correctness. Not timed.

`reference_rows`: the definition itself (reference.reference_attention: one dense masked softmax per
branch, LSE merge, autograd) against the chunked single softmax with log-multiplicities that the other
rows are compared with, at a length where [heads, N, N] per branch fits: they must agree to fp32
rounding (float32 tolerance).

`breakdown`: the gather path's whole call against its kernels alone on pre-gathered inputs (the same
calls, same shapes); the rest is gathering, merging and scattering, O(N) memory traffic. Each entry
keeps, beside the two medians, how each was timed and at what SM clock (`total_*` and `kernels_*`: the
Timing's conditions), and says it is not checked (BREAKDOWN_CHECK): it times parts of a path whose
output the correctness cell checks.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from attnbench.bench import correctness, timing
from attnbench.bench.inputs import make_dout, make_inputs
from attnbench.bench.providers.base import describe_exception
from attnbench.dilated import gathered, kernels, pattern, reference
from attnbench.rows import Result, Workload
from attnbench.studies.dilated_attention import measure
from attnbench.studies.dilated_attention.profiles import branches_for

# a breakdown entry times the gather path's parts; their outputs are not compared with anything here
BREAKDOWN_CHECK = (
    "not checked: timing of the gather path's parts; "
    "the gather path itself is checked in the correctness cell"
)


def _workload(config: dict, seq_len: int, mask: str) -> Workload:
    s = config["shape"]
    return Workload(s["batch"], seq_len, seq_len, s["heads"], s["heads"], s["head_dim"], s["dtype"], mask)


def correctness_rows(
    config: dict, *, device, env: str = "", progress: Callable[[Result], None] | None = None
):
    spec = config["correctness"]
    backends = list(kernels.BACKENDS) if spec["backends"] == "all" else list(spec["backends"])
    # the fused kernel before FlexAttention: on a CPU it runs under the Triton interpreter, which must be
    # set up before anything (Flex's compiler) imports triton
    candidates = [("gather", b) for b in backends] + ([("fused", None)] if spec.get("fused") else [])
    candidates += [("flex", None)] if spec.get("flex") else []
    references = measure.References(lambda n: branches_for(config, n), device)
    rows = []
    for mask in spec["masks"]:
        w = _workload(config, spec["seq_len"], mask)
        for implementation, backend in candidates:
            # eager FlexAttention (CPU) has no backward: its forward is checked there
            passes = (
                ["fwd"] if implementation == "flex" and torch.device(device).type != "cuda" else ["fwd_bwd"]
            )
            for pass_ in passes:
                row = measure.measure_dilated(
                    implementation, backend, w, pass_, branches_for(config, w.seqlen_q), device=device,
                    timing_options={}, reference=references.get(w), env=env, timed=False,
                )  # fmt: skip
                rows.append(row)
                if progress:
                    progress(row)
        references.clear()
    return rows


def reference_rows(config: dict, *, device, env: str = "") -> list[Result]:
    """The definition against the chunked union form, forward and gradients, both masks."""
    n = config["correctness"]["reference_seq_len"]
    rows = []
    for mask in config["correctness"]["masks"]:
        w = _workload(config, n, mask)
        branches = branches_for(config, n)
        row = Result(
            "dilated_reference",
            "dilated",
            "ok",
            w,
            "fwd_bwd",
            env=env,
            extra=measure.pattern_extra(branches, w),
        )
        row.extra.update(implementation="reference", backend=None,
                         against="chunked single softmax with log-multiplicities (fp32)")  # fmt: skip
        try:
            q, k, v = make_inputs(w, device)
            dout = make_dout(w, device)
            causal = mask == "causal"
            ours = reference.reference_grads(q, k, v, dout, branches, causal=causal)
            theirs = reference.chunked_reference(q, k, v, dout, branches, causal=causal)
            names = ("out", "lse", "dq", "dk", "dv")
            checks = {name: correctness.compare(a, b, "float32", grad=name.startswith("d"), what=name)
                      for name, a, b in zip(names, ours, theirs) if name != "lse"}  # fmt: skip
            finite = torch.isfinite(theirs[1])
            lse_error = float((ours[1] - theirs[1])[finite].abs().max()) if finite.any() else 0.0
            row.extra["lse_max_abs"] = lse_error
            measure.fill_checks(row, checks)
        except Exception as exc:  # noqa: BLE001 - a row, never a crash
            row.status = "oom" if timing.is_oom(exc) else "error"
            row.reason = describe_exception(exc)
        finally:
            timing.release_memory(device)
        rows.append(row)
    return rows


def _groups(q, k, v, plans, kernel):
    return [
        (p, g, [gathered.gather(t, p, g, kernel.layout) for t in (q, k, v)]) for p in plans for g in p.groups
    ]


def breakdown(config: dict, *, device, timing_options: dict) -> list[dict]:
    """Per backend, length and pass: the whole gather call vs its kernels alone (ms, medians)."""
    spec, rows = config["breakdown"], []
    causal = config["sweep"]["mask"] == "causal"
    for backend in spec["backends"]:
        kernel = kernels.get(backend)
        for n in spec["seq_lens"]:
            w = _workload(config, n, config["sweep"]["mask"])
            for pass_ in spec["passes"]:
                entry = {"backend": backend, "seq_len": n, "pass": pass_, "correctness": BREAKDOWN_CHECK}
                reason = kernel.unavailable(torch.device(device), getattr(torch, w.dtype), w.head_dim)
                if reason:
                    rows.append({**entry, "status": "unavailable", "reason": reason})
                    continue
                try:
                    entry.update(_breakdown_one(w, branches_for(config, n), kernel, causal, pass_, device,
                                                timing_options))  # fmt: skip
                    entry["status"] = "ok"
                except Exception as exc:  # noqa: BLE001 - a row, never a crash
                    entry.update(
                        status="oom" if timing.is_oom(exc) else "error", reason=describe_exception(exc)
                    )
                finally:
                    timing.release_memory(device)
                rows.append(entry)
    return rows


def _breakdown_one(w, branches, kernel, causal, pass_, device, timing_options) -> dict:
    """The whole call first (then freed), the kernels alone on pre-gathered inputs second: the two
    working sets never coexist, so the breakdown fits wherever the call itself does."""
    q, k, v = make_inputs(w, device)
    scale = pattern.default_scale(w.head_dim)
    plans = gathered.plan(branches, w.seqlen_q, w.heads_q)
    backward = pass_ != "fwd"
    total = _time_whole(q, k, v, w, branches, kernel, causal, backward, device, timing_options)
    timing.release_memory(device)
    groups = _groups(q, k, v, plans, kernel)
    del q, k, v
    saved = []
    if backward:  # the backward's extra inputs, gathered once: dout and a real block output and LSE
        for _, _, (qg, kg, vg) in groups:
            out, lse = kernel.forward(qg, kg, vg, causal=causal, scale=scale)
            saved.append((torch.randn_like(out), out, lse))

    def kernels_only():
        for i, (_, _, (qg, kg, vg)) in enumerate(groups):
            if backward:
                kernel.backward(saved[i][0], qg, kg, vg, saved[i][1], saved[i][2], causal=causal, scale=scale)
            kernel.forward(qg, kg, vg, causal=causal, scale=scale)

    with torch.no_grad():
        alone = timing.measure(kernels_only, device=device, **timing_options)
    calls = len(groups) * (2 if backward else 1)
    whole, kernels_ms = total.ms_median, alone.ms_median
    entry = {"total_ms": whole, "kernels_ms": kernels_ms, "other_ms": max(whole - kernels_ms, 0.0),
             "kernel_share": kernels_ms / whole, "kernel_calls": calls, "branches": len(plans)}  # fmt: skip
    # the two medians come from separate measurements: each keeps the clock it ran at, so a share taken
    # across two clocks shows as such
    for prefix, t in (("total", total), ("kernels", alone)):
        entry.update({f"{prefix}_{k}": v for k, v in _conditions(t).items()})
    return entry


def _conditions(t: timing.Timing) -> dict:
    return {**t.conditions(), "clock_samples": t.clock_samples, "clock_reason": t.clock_reason}


def _time_whole(q, k, v, w, branches, kernel, causal, backward, device, timing_options) -> timing.Timing:
    if backward:
        dout = make_dout(w, device)
        leaves = [t.detach().requires_grad_(True) for t in (q, k, v)]

        def whole():
            out = gathered.gathered_attention(*leaves, branches, causal=causal, backend=kernel)[0]
            return torch.autograd.grad(out, leaves, dout)

        return timing.measure(whole, device=device, **timing_options)
    with torch.no_grad():
        return timing.measure(
            lambda: gathered.gathered_attention(q, k, v, branches, causal=causal, backend=kernel),
            device=device,
            **timing_options,
        )
