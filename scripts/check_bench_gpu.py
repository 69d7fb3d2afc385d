"""GPU check of the measuring core (bench/timing, flops, correctness, sweep). Needs one CUDA device.

    PYTHONPATH=src python scripts/check_bench_gpu.py        # exit 1 if a check fails

Prints: environment, measured vs datasheet bf16 peak, the trust check (SDPA cuDNN at the Flux shape
S=4352 timed by `measure` and by the independent `bare_event_loop`: medians within 3 %), flush on/off,
peak-memory accounting, OOM capture inside a sweep, and a small SDPA sweep (fwd, fwd_bwd) with timing.
"""

from __future__ import annotations

import json
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from attnbench.bench import env, flops, inputs, sweep, timing
from attnbench.bench.providers.base import Prepared, Provider
from attnbench.rows import Workload

FLUX = Workload(1, 4352, 4352, 24, 24, 128)
ENV_KEYS = ("gpu", "sm_count", "l2_bytes", "driver", "cuda", "cudnn", "torch", "sm_clock_mhz",
            "max_sm_clock_mhz", "machine_id")  # fmt: skip
failures: list[str] = []


def check(ok: bool, text: str) -> None:
    print(("PASS " if ok else "FAIL ") + text, flush=True)
    if not ok:
        failures.append(text)


class Hog(Provider):
    """Allocates far more than the GPU has: must become an `oom` row, and the sweep must go on."""

    name, family, needs_cuda = "hog", "check", True

    def unavailable(self):
        return None

    def prepare(self, q, k, v, workload, backward=False):
        def run():
            return torch.empty(1 << 50, dtype=torch.uint8, device=q.device)

        return Prepared(run=run, to_canonical=lambda o: o)


def trust_check() -> float:
    """SDPA cuDNN at S=4352: `measure` vs the independent bare event loop, and the TFLOP/s floor.

    Returns the harness's TFLOP/s."""
    q, k, v = inputs.make_inputs(FLUX, "cuda")

    def cudnn():
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            return F.scaled_dot_product_attention(q, k, v)

    _, setup_ms = timing.setup(cudnn, device="cuda")
    harness = timing.measure(cudnn, device="cuda", min_reps=50, min_time_ms=300.0)
    bare = timing.bare_event_loop(cudnn, reps=200)
    gap = abs(harness.ms_median - bare) / bare
    tf = flops.tflops(flops.attention_flops(FLUX), harness.ms_median)
    print(
        f"cuDNN S=4352: setup {setup_ms:.1f} ms; harness {harness.ms_median:.4f} ms "
        f"(p20 {harness.ms_p20:.4f}, p80 {harness.ms_p80:.4f}, {harness.reps} reps, flush {harness.flush_bytes} B); "
        f"bare loop {bare:.4f} ms; {tf:.1f} TFLOP/s"
    )
    check(gap < 0.03, f"trust check: harness vs bare event loop differ by {gap:.2%} (< 3 %)")
    check(tf >= 550, f"cuDNN forward at S=4352 reaches {tf:.0f} TFLOP/s (>= 550)")
    return tf


def print_environment() -> dict:
    info = env.collect_env()
    print(json.dumps({k: info[k] for k in ENV_KEYS}, indent=1))
    return info


def check_matmul_peak(gpu: str | None) -> tuple[float, float | None]:
    """The measured bf16 matmul peak against the datasheet's. Returns both (TFLOP/s)."""
    peak = flops.measure_matmul_peak("cuda")
    sheet = flops.datasheet_peak(gpu)
    print(f"bf16 matmul peak measured {peak:.1f} TFLOP/s, datasheet {sheet}")
    # Sustained torch.mm medians sit well under the datasheet: on our H200 (2026-11-22) 673 TFLOP/s cold
    # and 680 after a 0.5 s warm-up, stable before and after a 60 s sweep (69 % of 989.5; short bursts
    # of 10 products elsewhere reached ~790). Below 0.6 the GPU is throttled or not at its clocks.
    check(
        sheet is None or 0.6 * sheet < peak <= 1.05 * sheet,
        f"measured matmul peak is {peak / sheet:.0%} of the datasheet (expected 60-105 %)"
        if sheet
        else "no datasheet peak for this GPU",
    )
    return peak, sheet


def check_attention_below_matmul(attention_tflops: float, peak: float) -> None:
    # attention spends issue slots on softmax that a matmul does not: at or above the matmul, the
    # denominator is wrong (cold clocks while measuring it), not the kernel brilliant
    check(
        attention_tflops < peak,
        f"cuDNN attention ({attention_tflops:.0f}) stays below the measured matmul "
        f"peak ({peak:.0f} TFLOP/s), so MFU < 100 %",
    )


def check_l2_flush() -> None:
    small = torch.randn(4 << 20, device="cuda")  # 16 MiB: fits in L2, so a warm L2 helps
    warm = timing.measure(lambda: small * 2, device="cuda", flush_l2=False, min_reps=50, min_time_ms=50.0)
    cold = timing.measure(lambda: small * 2, device="cuda", flush_l2=True, min_reps=50, min_time_ms=50.0)
    print(f"16 MiB scale: warm L2 {warm.ms_median * 1e3:.1f} us, cold L2 {cold.ms_median * 1e3:.1f} us")
    check(
        cold.ms_median >= 0.95 * warm.ms_median, "flushing the L2 does not make a memory-bound kernel faster"
    )


def check_peak_memory_accounting() -> None:
    gib = 1 << 30
    mem = timing.measure(
        lambda: torch.empty(gib, dtype=torch.uint8, device="cuda"), device="cuda", min_reps=5, min_time_ms=0.0
    )
    check(
        gib <= mem.peak_mem_bytes < gib + (64 << 20),
        f"peak memory of a 1 GiB allocation: {mem.peak_mem_bytes} B",
    )


def check_sweep_survives_oom(peak: float, sheet: float | None) -> None:
    """A small SDPA sweep behind the Hog: its rows are `oom`, the sweep goes on, memory is accounted."""
    providers = [Hog(), *_sdpa_providers()]
    start = time.perf_counter()
    rows = sweep.run_sweep(
        providers,
        [FLUX, Workload(1, 4224, 4224, 24, 24, 128)],
        ("fwd", "fwd_bwd"),
        device="cuda",
        peak_tflops=peak,
        datasheet_tflops=sheet,
    )
    print(f"sweep of {len(rows)} rows took {time.perf_counter() - start:.1f} s")
    check(
        all(r.status == "oom" for r in rows if r.provider == "hog" and r.pass_ == "fwd"),
        "huge allocation -> oom rows",
    )
    check(any(r.status == "ok" for r in rows), "the sweep went on after the OOM")
    for r in rows:
        if r.status == "ok":
            check(
                r.peak_mem_bytes and r.peak_mem_bytes >= r.extra["mem_inputs_bytes"],
                f"{r.provider} peak memory",
            )


def main() -> int:
    info = print_environment()
    before = env.clock_snapshot()
    peak, sheet = check_matmul_peak(info["gpu"])
    check_attention_below_matmul(trust_check(), peak)
    check_l2_flush()
    check_peak_memory_accounting()
    check_sweep_survives_oom(peak, sheet)
    print(env.clock_report(before, env.clock_snapshot()))
    print(f"{len(failures)} check(s) failed" if failures else "all checks passed")
    return 1 if failures else 0


def _sdpa_providers():
    try:
        from attnbench.bench.providers import get
    except Exception as exc:  # noqa: BLE001 - the registry is another helper's; report, go on
        print(f"provider registry not importable: {exc}")
        return []
    return [get(n) for n in ("sdpa_flash", "sdpa_efficient", "sdpa_cudnn", "sdpa_math")]


if __name__ == "__main__":
    sys.exit(main())
