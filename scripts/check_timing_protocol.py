"""On a GPU: does bench.timing's protocol do what it says? Prints one line per check and exits 1 on a failure.

1. the clock source opens (nvml, else nvidia-smi) and the run facts have the power limit and max clock;
2. the bf16 and tf32/fp32 matmul peaks, measured in steady state, are below the peak at their clock;
3. a Flux-shaped SDPA forward is timed after a settled warm-up, with its clock, under every peak;
4. a launch-bound call (a tiny add) is detected and timed queued behind a spin kernel, and its GPU time
   is below what per-call events on an idle queue report (launch latency no longer counted);
5. our Triton FA2 in fp32: the tf32 row and the ieee row, each judged against its own peak.

  PYTHONPATH=src python scripts/check_timing_protocol.py
"""

from __future__ import annotations

import sys


def main() -> int:
    import torch

    from attnbench.bench import clocks, env, flops, providers, timing
    from attnbench.bench.sweep import run_sweep
    from attnbench.rows import Workload

    if not torch.cuda.is_available():
        print("needs a CUDA device")
        return 2
    failures = []

    def check(ok: bool, text: str) -> None:
        print(("ok   " if ok else "FAIL ") + text, flush=True)
        if not ok:
            failures.append(text)

    source, reason = clocks.source_for("cuda")
    check(source is not None, f"clock source: {getattr(source, 'name', None)} {reason or ''}")
    limits = env.gpu_limits()
    check(limits["power_limit_w"] is not None, f"run facts: {limits}")

    props = torch.cuda.get_device_properties(0)
    shape = (props.multi_processor_count, (props.major, props.minor))
    peaks = flops.MeasuredPeaks("cuda")
    for math in ("bf16", "tf32", "fp32"):
        peak = peaks[math]
        check(
            peak > 0,
            f"{math} matmul peak {peak:.1f} TFLOP/s (datasheet bf16: {flops.datasheet_peak(props.name)})",
        )

    a = torch.ones(1, device="cuda")
    tiny = timing.measure(lambda: a.add_(1), device="cuda")
    idle = timing.bare_event_loop(lambda: a.add_(1), reps=200, flush=False)
    check(tiny.timing_method == "cuda_event_per_call_queued", f"tiny add: {tiny.timing_method}, "
          f"host {tiny.host_ms_per_call} ms/call, GPU {tiny.ms_median * 1e3:.1f} us (per-call events: {idle * 1e3:.1f} us)")  # fmt: skip

    flux = [Workload(1, 4352, 4352, 24, 24, 128, "bfloat16", "full")]
    fp32 = [Workload(1, 4096, 4096, 16, 16, 64, "float32", "full")]
    chosen = providers.select(["sdpa_cudnn", "sdpa_flash", "triton_fa2", "triton_fa2_ieee"])
    datasheet = flops.datasheet_peak(props.name)
    rows = run_sweep(chosen, flux + fp32, ("fwd",), peak_tflops=peaks, datasheet_tflops=datasheet)
    for row in rows:
        if row.status in ("unavailable", "unsupported"):
            continue
        at_clock = flops.peak_at_clock(row.math, *shape, row.sm_clock_mhz) if row.math else None
        check(
            row.status == "ok" and row.warmup_settled is not False and row.sm_clock_mhz is not None,
            f"{row.provider} {row.workload.dtype} [{row.math}] {row.status}: {row.ms_median} ms {row.tflops} TFLOP/s "
            f"at {row.sm_clock_mhz} MHz {row.power_w} W via {row.clock_source}, {row.timing_method}, "
            f"warm-up {row.warmup_s} s settled={row.warmup_settled}; shares: measured {row.mfu}, "
            f"datasheet {row.mfu_datasheet}, at clock {row.mfu_at_clock} (peak {at_clock}) {row.reason}",
        )
    print(f"\n{len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
