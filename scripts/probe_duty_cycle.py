"""Does a row's time depend on how idle the GPU was before it? Time one call three ways and compare.

Why. bench.timing times a launch-bound call (the host needs at least half the call's GPU time to enqueue
it) "queued": each batch of at most QUEUED_BATCH_MAX calls waits behind a spin kernel that lasts 1.5x
the batch's enqueue time, so the GPU never waits for the host inside the batch. A spin is one busy warp:
the GPU is nearly idle while it runs, and the batch starts cool and below its power limit. A call that
is not launch-bound runs back to back, at the power limit. On the H200's Flux page (forward, S 4224)
te_flash (0.73 ms of host time per 0.29 ms call, so idle ~70 % of the time) read 1980 MHz, 444 W and
49 °C; flash_attn3, the same kernel with 0.18 ms of host time, 1860 MHz, 682 W, 59 °C; sdpa_cudnn (not
queued) 1725 MHz, 690 W, 64 °C. If a batch after a lull runs faster than the same call back to back,
a provider's host overhead buys it speed in the report, and rows timed queued are ranked against rows
timed sustained on unequal terms.

What. For each provider (Flux's forward: batch 1, 24 heads, 4608 tokens, head dim 128, bf16, under
no_grad as the sweep times it; with --pass fwd_bwd the forward and backward step the sweep times, the
gradients of q, k and v taken from one upstream gradient), each mode is timed for --seconds after the thermal reheat the Flux
profiles use, with the protocol's L2 flush before every call and per-call CUDA events, twice, in the
order of MODES and then reversed (so a drift over the minutes shows as the two repetitions disagreeing):
- sustained: batches of QUEUED_BATCH_MAX calls back to back (where the host enqueues a call in no less time
  than the GPU runs it, the events count the host's time: that repetition is marked host_bound and gets
  no ratio, by report.duty_cycle.timed_by_gpu, the rule the reports read these files by);
- queued_spin: the protocol's way, each batch behind a spin of 1.5x its enqueue time (+1 ms);
- queued_matmul: the same lull filled with bf16 GEMMs (the thermal filler's), so the batch starts at
  the power limit, as a training step's attention does after its matmuls.
Per mode and repetition: the median ms per call, its ratio to queued_matmul's, the lull measured on the
GPU (an event before the spin or the GEMMs to the batch's first call), the median ms at each position
in the batch (does a boost after the lull fade within it?), and the NVML clock, power and temperature
over the mode (the lulls included: the burst's own clock is not separable here). A provider that cannot
be prepared or fails is recorded with its reason and the others go on; --out is rewritten after each.

    PYTHONPATH=src python3 scripts/probe_duty_cycle.py --out $OUT/duty_cycle.json   # GPU, ~3-5 min
    PYTHONPATH=src python3 scripts/probe_duty_cycle.py --pass fwd_bwd --providers sdpa_cudnn flash_attn3 flash_attn4
    PYTHONPATH=src python3 scripts/probe_duty_cycle.py --smoke                      # CPU: the summary only
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time
from pathlib import Path

from attnbench.report.duty_cycle import timed_by_gpu

FLUX_SHAPE = (1, 24, 4608, 128)  # batch, heads, tokens, head dim: Flux's joint attention at 1024²
MODES = ("sustained", "queued_spin", "queued_matmul")
PROVIDERS = ("sdpa_cudnn", "flash_attn3", "te_flash", "xformers_fa3")
PASSES = ("fwd", "fwd_bwd")  # the sweep's names (rows.Row.pass)


def lull_ms(calls: int, host_ms_per_call: float) -> float:
    """The protocol's lull before a queued batch (bench.timing.CudaBackend.batch): 1.5x the batch's
    enqueue time, +1 ms."""
    return 1.5 * calls * host_ms_per_call + 1.0


def summarize(provider: str, modes: dict[str, list[dict]], host_ms: float | None = None) -> dict:
    """One provider's line: per mode its repetitions (median ms per call and conditions) and each
    repetition's time over queued_matmul's of the same repetition (below 1: faster than a batch that
    starts at the power limit). A back-to-back repetition the host set (host_ms per call not below its ms,
    report.duty_cycle.timed_by_gpu) is marked host_bound and gets no ratio."""
    base = [m.get("ms_median") for m in modes.get("queued_matmul") or []]
    line = {"provider": provider, "modes": {}}
    for mode, reps in modes.items():
        bound = [mode == "sustained" and host_ms is not None and not timed_by_gpu(host_ms, m.get("ms_median"))
                 for m in reps]  # fmt: skip
        line["modes"][mode] = [
            {**m, "host_bound": bound[i],
             "over_queued_matmul": None if bound[i] or i >= len(base) or not base[i] or not m.get("ms_median")
             else m["ms_median"] / base[i]}
            for i, m in enumerate(reps)
        ]  # fmt: skip
    return line


def _median(values) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _run_mode(mode, call, flush, filler, host_ms, seconds, device, sampler, max_mhz) -> dict:
    """Batches of QUEUED_BATCH_MAX calls for `seconds`: per-call ms, the lull the GPU ran, NVML conditions."""
    import torch

    from attnbench.bench.timing import QUEUED_BATCH_MAX

    n, stream, samples, lulls, by_position = QUEUED_BATCH_MAX, torch.cuda.current_stream(device), [], [], {}
    lull = lull_ms(n, host_ms)
    fills = max(1, round(lull / filler[1]))
    mark, stop = sampler.mark(), time.perf_counter() + seconds
    while time.perf_counter() < stop:
        before = torch.cuda.Event(enable_timing=True)
        before.record(stream)
        if mode == "queued_spin":
            torch.cuda._sleep(int(lull * max_mhz * 1e3))
        elif mode == "queued_matmul":
            for _ in range(fills):
                filler[0]()
        events = [
            (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(n)
        ]
        for start, end in events:
            flush.zero_()
            start.record(stream)
            call()
            end.record(stream)
        torch.cuda.synchronize(device)
        lulls.append(before.elapsed_time(events[0][0]))
        for i, (start, end) in enumerate(events):
            by_position.setdefault(i, []).append(start.elapsed_time(end))
            samples.append(by_position[i][-1])
    got = sampler.samples[mark:]
    return {"calls": len(samples), "ms_median": _median(samples), "lull_ms_target": 0.0 if mode == "sustained" else lull,
            "lull_ms_measured": _median(lulls), "gemms": fills if mode == "queued_matmul" else 0,
            "ms_by_position": [_median(by_position[i]) for i in sorted(by_position)],
            "sm_clock_mhz": _median(s.sm_mhz for s in got), "power_w": _median(s.power_w for s in got),
            "temperature_c": _median(s.temperature_c for s in got)}  # fmt: skip


def _host_ms(call, flush, device, reps: int = 64) -> tuple[float, float]:
    """(host enqueue ms per call, GPU ms per call) from back-to-back calls, after a settling second."""
    import torch

    stop = time.perf_counter() + 1.0
    while time.perf_counter() < stop:
        call(), torch.cuda.synchronize(device)
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t = time.perf_counter()
    begin.record()
    for _ in range(reps):
        flush.zero_()
        call()
    host = (time.perf_counter() - t) * 1e3 / reps
    end.record()
    torch.cuda.synchronize(device)
    return host, begin.elapsed_time(end) / reps


def _prepared(name: str, device, pass_: str = "fwd"):
    """(the provider's call at Flux's shape, its note, why it cannot run here or ""): its forward, or for
    fwd_bwd the step bench.sweep times, autograd.grad of q, k and v from one upstream gradient."""
    import torch

    from attnbench.bench import providers

    # the sweep's own helpers, so that the probe times the step the report times
    from attnbench.bench.sweep import _grad_inputs, _native_grad_output
    from attnbench.rows import Workload

    provider = providers.get(name)
    why = provider.unavailable()
    if why:
        return None, "", why
    batch, heads, tokens, dim = FLUX_SHAPE
    workload = Workload(batch, tokens, tokens, heads, heads, dim)
    q, k, v = (torch.randn(batch, heads, tokens, dim, device=device, dtype=torch.bfloat16) for _ in range(3))
    if pass_ == "fwd":
        with torch.no_grad():
            prepared = provider.prepare(q, k, v, workload, backward=False)
        return prepared.run, getattr(prepared, "note", ""), ""
    prepared = provider.prepare(q, k, v, workload, backward=True)
    inputs = _grad_inputs(prepared)
    dout = _native_grad_output(prepared.run(), prepared.to_canonical, torch.randn_like(q))
    return (lambda: torch.autograd.grad(prepared.run(), inputs, dout)), getattr(prepared, "note", ""), ""


def _measure(name, device, flush, gemm, conditioner, sampler, seconds, max_mhz, pass_="fwd") -> dict:
    """One provider's line: its host time per call, then each mode twice (MODES, then reversed), each
    after a reheat; a forward's every step under no_grad, as the sweep times it."""
    import torch

    call, note, why = _prepared(name, device, pass_)
    if call is None:
        return {"provider": name, "not_measured": why}
    with torch.no_grad() if pass_ == "fwd" else contextlib.nullcontext():
        host_ms, span_ms = _host_ms(call, flush, device)
        modes: dict[str, list[dict]] = {mode: [] for mode in MODES}
        for mode in (*MODES, *reversed(MODES)):
            heated = conditioner.reheat()
            modes[mode].append({**_run_mode(mode, call, flush, gemm, host_ms, seconds, device, sampler, max_mhz),
                                "reheat_s": round(heated, 2)})  # fmt: skip
    # launch-bound as the protocol judges it: the host's enqueue time against the call's GPU time (queued)
    gpu_ms = _median(m["ms_median"] for m in modes["queued_spin"])
    bound = bool(gpu_ms) and host_ms >= 0.5 * gpu_ms
    return {**summarize(name, modes, host_ms), "note": note, "host_ms_per_call": host_ms,
            "span_ms_per_call": span_ms, "launch_bound": bound}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--seconds", type=float, default=2.0, help="seconds per mode and repetition (default 2)"
    )
    parser.add_argument(
        "--providers", nargs="+", default=list(PROVIDERS), help=f"default: {' '.join(PROVIDERS)}"
    )
    parser.add_argument(
        "--out", type=Path, help="write the lines as JSON here (rewritten after each provider)"
    )
    parser.add_argument(
        "--pass",
        dest="pass_",
        choices=PASSES,
        default="fwd",
        help="the forward (default) or forward + backward",
    )
    parser.add_argument("--smoke", action="store_true", help="CPU: the summary of made-up timings only")
    args = parser.parse_args(argv)
    if not args.seconds > 0:
        parser.error(f"--seconds {args.seconds}: give a positive number of seconds per mode")
    from attnbench.bench import providers

    known = {p.name for p in providers.all_providers()}
    if unknown := [n for n in args.providers if n not in known]:
        parser.error(
            f"--providers: no provider named {', '.join(unknown)} (known: {', '.join(sorted(known))})"
        )
    if args.smoke:
        made_up = {mode: [{"ms_median": ms}] for mode, ms in zip(MODES, (0.35, 0.33, 0.35))}
        print(json.dumps(summarize("sdpa_cudnn", made_up)))
        return 0
    import torch

    from attnbench.bench import clocks, env, thermal
    from attnbench.bench.matmul_load import matmul_operands
    from attnbench.bench.timing import ASSUMED_MAX_MHZ, flush_buffer_bytes

    if not torch.cuda.is_available():
        print("error: no CUDA device: this probe times GPU calls (use --smoke on a CPU)", file=sys.stderr)
        return 2
    device = torch.device("cuda")
    flush = torch.empty(flush_buffer_bytes(device), dtype=torch.int8, device=device)
    a, b, out, _ = matmul_operands(device, thermal.MATMUL_SIZE)
    gemm = lambda: torch.mm(a, b, out=out)
    gemm_ms = _host_ms(gemm, flush, device)[1]
    conditioner = thermal.conditioner_for(device)
    source, why = clocks.source_for(device)
    if source is None:
        print(f"warning: no NVML clock ({why}): times only", file=sys.stderr)
    limits = source.limits() if hasattr(source, "limits") else {}
    max_mhz = limits.get("max_sm_clock_mhz") or ASSUMED_MAX_MHZ  # the spin's cycles per ms, as the protocol
    gpu = torch.cuda.get_device_name(device)
    # machine_id (host and GPU model, as the repeatability files): what a report matches this file by
    result = {"gpu": gpu, "machine_id": env.machine_id(gpu), "pass": args.pass_, "shape": FLUX_SHAPE,
              "seconds": args.seconds,
              "gemm_ms": gemm_ms, "max_sm_clock_mhz": max_mhz, "equilibrium": None, "lines": []}  # fmt: skip
    with clocks.ClockSampler(source) as sampler:
        for name in args.providers:
            try:
                line = _measure(name, device, flush, (gemm, gemm_ms), conditioner, sampler, args.seconds,
                                max_mhz, args.pass_)  # fmt: skip
            except Exception as e:  # noqa: BLE001 - one provider's failure is its line; the others go on
                line = {"provider": name, "not_measured": f"{type(e).__name__}: {e}"}
            result["lines"].append(line)
            result["equilibrium"] = vars(conditioner.settle())
            print(json.dumps(line), flush=True)
            if args.out:
                args.out.parent.mkdir(parents=True, exist_ok=True)
                args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
