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

What. For each provider (Flux's forward: batch 1, 24 heads, 4608 tokens, head dim 128, bf16), after the
thermal reheat the Flux profiles use and a settling second, each mode is timed for --seconds with the
protocol's L2 flush before every call and per-call CUDA events:
- sustained: batches of QUEUED_BATCH_MAX calls back to back (for a launch-bound call the GPU waits
  for the host between calls, and the mode says so);
- queued_spin: the protocol's way, each batch behind a spin of 1.5x its enqueue time (+1 ms);
- queued_matmul: the same lull filled with bf16 GEMMs (the thermal filler's), so the batch starts at
  the power limit, as a training step's attention does after its matmuls.
Per mode: the median ms per call, its ratio to queued_matmul, and the NVML clock, power and temperature
over the mode (the lulls included: the burst's own clock is not separable here).

    PYTHONPATH=src python3 scripts/probe_duty_cycle.py --out $OUT/duty_cycle.json   # GPU, ~1 min
    PYTHONPATH=src python3 scripts/probe_duty_cycle.py --smoke                      # CPU: the summary only
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

FLUX_SHAPE = (1, 24, 4608, 128)  # batch, heads, tokens, head dim: Flux's joint attention at 1024²
MODES = ("sustained", "queued_spin", "queued_matmul")
PROVIDERS = ("sdpa_cudnn", "flash_attn3", "te_flash", "xformers_fa3")


def lull_ms(calls: int, host_ms_per_call: float) -> float:
    """The protocol's lull before a queued batch (bench.timing.CudaBackend.batch): 1.5x the batch's
    enqueue time, +1 ms."""
    return 1.5 * calls * host_ms_per_call + 1.0


def summarize(provider: str, modes: dict[str, dict]) -> dict:
    """One provider's line: per mode its median ms per call and conditions, and its time over
    queued_matmul's (below 1: faster than a batch that starts at the power limit)."""
    base = (modes.get("queued_matmul") or {}).get("ms_median")
    line = {"provider": provider, "modes": {}}
    for mode, m in modes.items():
        ratio = m["ms_median"] / base if base and m.get("ms_median") else None
        line["modes"][mode] = {**m, "over_queued_matmul": ratio}
    return line


def _median(values) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _run_mode(mode, call, flush, filler, host_ms, seconds, device, sampler) -> dict:
    """Batches of QUEUED_BATCH_MAX calls for `seconds`: per-call ms and NVML conditions."""
    import torch

    from attnbench.bench.timing import ASSUMED_MAX_MHZ, QUEUED_BATCH_MAX

    n, stream, samples = QUEUED_BATCH_MAX, torch.cuda.current_stream(device), []
    lull = lull_ms(n, host_ms)
    mark, stop = sampler.mark(), time.perf_counter() + seconds
    while time.perf_counter() < stop:
        if mode == "queued_spin":
            torch.cuda._sleep(int(lull * ASSUMED_MAX_MHZ * 1e3))
        elif mode == "queued_matmul":
            for _ in range(max(1, round(lull / filler[1]))):
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
        samples += [s.elapsed_time(e) for s, e in events]
    got = sampler.samples[mark:]
    return {"calls": len(samples), "ms_median": _median(samples), "lull_ms": 0.0 if mode == "sustained" else lull,
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


def _prepared(name: str, device):
    """The provider's one forward call at Flux's shape, or why it cannot run here."""
    import torch

    from attnbench.bench import providers
    from attnbench.rows import Workload

    provider = providers.get(name)
    why = provider.unavailable()
    if why:
        return None, why
    batch, heads, tokens, dim = FLUX_SHAPE
    workload = Workload(batch, tokens, tokens, heads, heads, dim)
    q, k, v = (torch.randn(batch, heads, tokens, dim, device=device, dtype=torch.bfloat16) for _ in range(3))
    return provider.prepare(q, k, v, workload, backward=False).run, None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="seconds per mode (default 3)")
    parser.add_argument(
        "--providers", nargs="+", default=list(PROVIDERS), help=f"default: {' '.join(PROVIDERS)}"
    )
    parser.add_argument("--out", type=Path, help="write the lines as JSON here")
    parser.add_argument("--smoke", action="store_true", help="CPU: the summary of made-up timings only")
    args = parser.parse_args(argv)
    if not args.seconds > 0:
        parser.error(f"--seconds {args.seconds}: give a positive number of seconds per mode")
    if args.smoke:
        made_up = {
            "sustained": {"ms_median": 0.35},
            "queued_spin": {"ms_median": 0.33},
            "queued_matmul": {"ms_median": 0.35},
        }
        print(json.dumps(summarize("sdpa_cudnn", made_up)))  # fmt: skip
        return 0
    import torch

    from attnbench.bench import clocks, thermal
    from attnbench.bench.matmul_load import matmul_operands
    from attnbench.bench.timing import flush_buffer_bytes

    if not torch.cuda.is_available():
        print("error: no CUDA device: this probe times GPU calls (use --smoke on a CPU)", file=sys.stderr)
        return 2
    device = torch.device("cuda")
    flush = torch.empty(flush_buffer_bytes(device), dtype=torch.int8, device=device)
    a, b, out, _ = matmul_operands(device, thermal.MATMUL_SIZE)
    gemm = lambda: torch.mm(a, b, out=out)
    gemm_ms = _host_ms(gemm, flush, device)[1]
    conditioner, lines, skipped = thermal.conditioner_for(device), [], {}
    source, why = clocks.source_for(device)
    if source is None:
        print(f"warning: no NVML clock ({why}): times only", file=sys.stderr)
    with clocks.ClockSampler(source) as sampler:
        for name in args.providers:
            call, why = _prepared(name, device)
            if call is None:
                skipped[name] = why
                print(f"{name}: not measured: {why}", file=sys.stderr, flush=True)
                continue
            host_ms, gpu_ms = _host_ms(call, flush, device)
            modes = {}
            for mode in MODES:
                conditioner.reheat()
                modes[mode] = _run_mode(
                    mode, call, flush, (gemm, gemm_ms), host_ms, args.seconds, device, sampler
                )
            lines.append({**summarize(name, modes), "host_ms_per_call": host_ms, "gpu_ms_per_call": gpu_ms,
                          "launch_bound": host_ms >= 0.5 * gpu_ms})  # fmt: skip
            print(json.dumps(lines[-1]), flush=True)
    result = {"gpu": torch.cuda.get_device_name(device), "shape": FLUX_SHAPE, "seconds": args.seconds,
              "gemm_ms": gemm_ms, "lines": lines, "not_measured": skipped}  # fmt: skip
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
