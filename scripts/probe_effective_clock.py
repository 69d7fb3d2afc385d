"""Does the SM clock NVML reports under load match the clock the SMs run at? Measure both at once.

Every GPU row's share "of the measured matmul peak at the row's SM clock" scales the matmul peak by the
ratio of two NVML clock readings (bench.flops.MeasuredPeak.at_clock). On 2026-11-28 the same cuBLAS GEMM
on the same 132 SMs gave 0.521 TFLOP/s per reported MHz on an H100 and 0.456 on an H200: 96 % and 84 % of
the 0.541 a Hopper SM can do per MHz. The same kernel on the same SMs should do the same work per cycle,
so at least one card's reported clock is not the clock the SMs ran at under its power limit (a power
brake can slow the SMs without the reported clock changing).

This probe settles it per card. While a load runs (idle, the bf16 GEMM the peak is measured with, Flux's
forward attention through SDPA), a one-warp Triton kernel on a high-priority side stream reads the SM's
cycle counter (%clock64) and the GPU's nanosecond timer (%globaltimer) at both ends of a ~2 ms spin,
started at a random point of the first half of each batch of load:
cycles per nanosecond is the clock the SM ran at, whatever NVML says. NVML is sampled beside it
(bench.clocks). Per load it prints the reported and the effective clock, the load's TFLOP/s, and the
load's share of the Hopper per-clock peak at each: where they differ, the shares on the pages take the
reported clock (the one to correct).

    python3 scripts/probe_effective_clock.py --out measurements/effective_clock-<label>.json  # GPU, ~20 s
    python3 scripts/probe_effective_clock.py --smoke   # CPU: the summary arithmetic only
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

LOADS = ("idle", "matmul", "attention")
SPIN_NS = 2_000_000  # one probe: 2 ms of spin, so the timer's resolution (~1 µs) is 0.05 % of it
FLUX_SHAPE = (1, 24, 4608, 128)  # batch, heads, tokens, head dim: Flux's joint attention at 1024²


def effective_mhz(cycles: float, nanoseconds: float) -> float | None:
    """The SM clock over a probe: cycles it counted per nanosecond of the GPU timer, in MHz."""
    return cycles / nanoseconds * 1000.0 if cycles > 0 and nanoseconds > 0 else None


def summarize(load: str, probes: list[tuple[float, float]], reported: list[float], tflops: float | None,
              per_mhz: float | None) -> dict:  # fmt: skip
    """One load's line: the reported (NVML median) and effective (probe median) clock, their ratio, and
    the load's share of the per-clock peak (`per_mhz` TFLOP/s per MHz) at each clock."""
    clocks = [mhz for cycles, ns in probes if (mhz := effective_mhz(cycles, ns))]
    effective = statistics.median(clocks) if clocks else None
    nvml = statistics.median(reported) if reported else None
    line = {"load": load, "probes": len(clocks), "effective_mhz": effective, "reported_mhz": nvml,
            "effective_range_mhz": [min(clocks), max(clocks)] if clocks else None,
            "reported_over_effective": nvml / effective if nvml and effective else None,
            "tflops": tflops, "share_at_reported": None, "share_at_effective": None}  # fmt: skip
    if tflops and per_mhz:
        line["share_at_reported"] = tflops / (per_mhz * nvml) if nvml else None
        line["share_at_effective"] = tflops / (per_mhz * effective) if effective else None
    return line


def _probe_kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def timer():  # the GPU's nanosecond timer
        return tl.inline_asm_elementwise(
            "mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False, pack=1
        )

    @triton.jit
    def cycles():  # this SM's cycle counter
        return tl.inline_asm_elementwise(
            "mov.u64 $0, %clock64;", "=l", [], dtype=tl.int64, is_pure=False, pack=1
        )

    @triton.jit
    def spin(out_ptr, delay_ns, spin_ns):
        start = timer()
        t0 = start
        while t0 - start < delay_ns:  # wait to a random point of the batch before measuring
            t0 = timer()
        c0 = cycles()
        t = t0
        while t - t0 < spin_ns:
            t = timer()
        c1 = cycles()
        tl.store(out_ptr, c1 - c0)
        tl.store(out_ptr + 1, t - t0)

    return spin


def _loads(device):
    """{load: (one call, its FLOPs)}: nothing, the peak's GEMM, Flux's forward attention (SDPA)."""
    import torch
    import torch.nn.functional as F

    from attnbench.bench.flops import MATMUL_PEAK_SHAPES
    from attnbench.bench.matmul_load import matmul_operands

    a, b, out, matmul_flops = matmul_operands(device, MATMUL_PEAK_SHAPES[0][0])  # the peak's square GEMM
    batch, heads, tokens, dim = FLUX_SHAPE
    q, kk, v = (torch.randn(batch, heads, tokens, dim, device=device, dtype=torch.bfloat16) for _ in range(3))
    return {"idle": (None, 0.0), "matmul": (lambda: torch.mm(a, b, out=out), matmul_flops),
            "attention": (lambda: F.scaled_dot_product_attention(q, kk, v), 4.0 * batch * heads * tokens**2 * dim)}  # fmt: skip


def measure(call, flops: float, seconds: float, device, spin, sampler) -> tuple[list, list, float | None]:
    """Run `call` for a settling second, then `seconds` with a probe beside each ~20 ms batch of calls
    (no `call`: probes alone): (probes as (cycles, ns), NVML clocks over the window, the load's TFLOP/s).

    Each probe starts measuring at a random point of the first half of its batch (the batch starts after
    a host sync, and its first milliseconds need not run at the clock of the rest); the load's TFLOP/s
    counts those syncs' short gaps as load time (a fraction of a percent low)."""
    import random

    import torch

    draw = random.Random(0)
    side = torch.cuda.Stream(device=device, priority=-1)  # high priority: the probe is scheduled promptly
    main_stream = torch.cuda.current_stream(device)
    slots = torch.zeros(4096, 2, dtype=torch.int64, device=device)
    batch, batch_ns = 0, 0
    if call is not None:
        start = time.perf_counter()
        while time.perf_counter() - start < 1.0:  # settle at the load's clock, and size a ~20 ms batch
            t = time.perf_counter()
            call(), torch.cuda.synchronize(device)
            one = max(time.perf_counter() - t, 1e-6)
            batch = max(1, int(0.02 / one))
            batch_ns = int(batch * one * 1e9)
    mark, calls, used = sampler.mark(), 0, 0
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    begin.record(main_stream)
    stop = time.perf_counter() + seconds
    while time.perf_counter() < stop and used < len(slots):
        for _ in range(batch):  # queued first, so the probe runs while they do
            call()
        calls += batch
        with torch.cuda.stream(side):
            delay = int(draw.uniform(0, max(batch_ns // 2 - SPIN_NS, 0)))
            spin[(1,)](slots[used], delay, SPIN_NS, num_warps=1)
        used += 1
        (main_stream if batch else side).synchronize()  # the host keeps pace: one batch in flight
    end.record(main_stream)
    torch.cuda.synchronize(device)
    reported = [s.sm_mhz for s in sampler.samples[mark:] if s.sm_mhz]
    tflops = flops * calls / (begin.elapsed_time(end) * 1e-3) / 1e12 if calls else None
    return [tuple(map(float, row)) for row in slots[:used].tolist()], reported, tflops


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=4.0, help="seconds of probes per load (default 4)")
    parser.add_argument("--out", type=Path, help="write the lines as JSON here")
    parser.add_argument("--smoke", action="store_true", help="CPU: the summary of made-up probes only")
    args = parser.parse_args(argv)
    if not args.seconds > 0:
        parser.error(f"--seconds {args.seconds}: give a positive number of seconds of probes per load")
    if args.smoke:
        line = summarize("matmul", [(1_500_000.0, 1_000_000.0)], [1620.0], 700.0, 0.5407)
        print(json.dumps(line))
        return 0
    import torch

    from attnbench.bench import clocks
    from attnbench.bench.flops import peak_at_clock

    if not torch.cuda.is_available():
        print(
            "error: no CUDA device: the probe reads an SM's cycle counter (use --smoke on a CPU)",
            file=sys.stderr,
        )
        return 2
    device = torch.device("cuda")
    props = torch.cuda.get_device_properties(device)
    per_mhz = peak_at_clock(
        "bf16", props.multi_processor_count, (props.major, props.minor), 1.0
    )  # TFLOP/s a MHz
    source, why = clocks.source_for(device)
    if source is None:
        print(f"warning: no NVML clock ({why}): only the effective clock is measured", file=sys.stderr)
    spin, lines = _probe_kernel(), []
    with clocks.ClockSampler(source) as sampler:
        for load, (call, flops) in _loads(device).items():
            probes, reported, tflops = measure(call, flops, args.seconds, device, spin, sampler)
            lines.append(summarize(load, probes, reported, tflops, per_mhz))
            print(json.dumps(lines[-1]), flush=True)
    result = {"gpu": props.name, "sm_count": props.multi_processor_count, "bf16_tflops_per_mhz": per_mhz,
              "spin_ns": SPIN_NS, "seconds": args.seconds, "loads": lines}  # fmt: skip
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
