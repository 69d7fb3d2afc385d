"""Exercise every provider's code path on a GPU in about a minute: masks, GQA, Sq != Sk, backward.

    PYTHONPATH=src python scripts/gpu_check_providers.py [--providers sdpa flex ...] [--jsonl out.jsonl]
    PYTHONPATH=src python scripts/gpu_check_providers.py --kernels [--pass fwd_bwd] [--providers ...]

Each (provider, workload, pass) is one line: ok / incorrect / unsupported / unavailable / error with the
reason. Timing is minimal (a handful of repetitions): this checks behaviour, not speed. The process exits
1 if any row is `error` or `incorrect`, so a GPU run can be judged from its exit status.

--kernels instead shows what each provider's timed call contains at the Flux shape (S=4352): every GPU
kernel, memcpy and memset one call launches (torch.profiler), their summed GPU time, and the CUDA-event
median the sweep would report. Kernels other than attention (copies, casts, quantisation) are in the
timed region; a median well above the summed kernel time means gaps (launch-bound) in the timed region.
"""

from __future__ import annotations

import argparse
import sys
import time

from attnbench.bench import providers
from attnbench.bench.sweep import run_sweep
from attnbench.rows import Workload, write_jsonl

FLUX = Workload(1, 4352, 4352, 24, 24, 128, "bfloat16", "full")
WORKLOADS = [
    FLUX,
    Workload(2, 512, 1024, 16, 4, 128, "bfloat16", "causal"),  # bottom-right causal, GQA 4:1
    Workload(1, 1024, 1024, 8, 8, 64, "float16", "sliding_window", window=200),
    Workload(1, 1024, 1024, 8, 2, 128, "bfloat16", "document", doc_lens=(300, 500, 224)),
]


def _device_us(event) -> float:
    """Self GPU time of a profiler average in microseconds (the attribute was renamed in torch 2.4)."""
    for name in ("self_device_time_total", "self_cuda_time_total"):
        value = getattr(event, name, None)
        if value is not None:
            return float(value)
    return 0.0


def _timed_step(provider, pass_: str, q, k, v):
    """The callable the sweep would time for this pass (see bench/timing_methods.pass_callable)."""
    from attnbench.bench.timing_methods import pass_callable

    return pass_callable(provider.prepare(q, k, v, FLUX, backward=pass_ != "fwd"), pass_)


def profile_kernels(names: list[str], pass_: str, reps: int = 5) -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile

    from attnbench.bench.inputs import make_inputs
    from attnbench.bench.providers.base import describe_exception
    from attnbench.bench.timing import measure

    q, k, v = make_inputs(FLUX, "cuda")
    print(f"what one timed call launches, {pass_}, {FLUX.label()}\n")
    for provider in providers.select(names):
        why = provider.why_not(FLUX, pass_)
        if why:
            print(f"{provider.name}: {why[0]}: {why[1]}\n")
            continue
        try:
            step = _timed_step(provider, pass_, q, k, v)
            with torch.set_grad_enabled(pass_ != "fwd"):  # a forward is timed without autograd
                median_us = measure(step, device="cuda", min_reps=20, min_time_ms=50.0).ms_median * 1e3
                torch.cuda.synchronize()
                with profile(activities=[ProfilerActivity.CUDA]) as prof:
                    for _ in range(reps):
                        step()
                    torch.cuda.synchronize()
        except Exception as exc:  # noqa: BLE001 - one provider's failure is a line, the others go on
            print(f"{provider.name}: error: {describe_exception(exc)}\n")
            continue
        kernels = [(e.key, e.count, _device_us(e)) for e in prof.key_averages() if _device_us(e) > 0]
        busy_us = sum(us for *_, us in kernels) / reps
        print(
            f"{provider.name}: event-timed median {median_us:.1f} us; GPU busy {busy_us:.1f} us per call "
            f"({len(kernels)} kinds of GPU work)"
        )
        for name, count, us in sorted(kernels, key=lambda item: -item[2]):
            print(f"    {us / reps:9.1f} us  x{count / reps:g}  {name[:120]}")
        print()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--providers", nargs="*", default=[], help="names or families (default: all)")
    parser.add_argument("--jsonl", help="also write the rows here")
    parser.add_argument("--kernels", action="store_true", help="list the GPU work of each timed call instead")
    parser.add_argument(
        "--pass", dest="pass_", default="fwd", choices=("fwd", "fwd_bwd"), help="the pass --kernels profiles"
    )
    args = parser.parse_args(argv)
    if args.kernels:
        profile_kernels(args.providers, args.pass_)
        return 0
    started = time.perf_counter()
    rows = run_sweep(
        providers.select(args.providers),
        WORKLOADS,
        ("fwd", "fwd_bwd"),
        peak_tflops=None,
        timing_options={"min_reps": 3, "min_time_ms": 0.0, "warmup_reps": 1, "max_reps": 3},
    )
    if args.jsonl:
        write_jsonl(args.jsonl, rows)
    counts = {s: sum(r.status == s for r in rows) for s in sorted({r.status for r in rows})}
    print(f"\n{len(rows)} rows in {time.perf_counter() - started:.0f} s: {counts}")
    bad = [r for r in rows if r.status in ("error", "incorrect")]
    for row in bad:
        print(
            f"  {row.status}: {row.provider} {row.pass_} {row.workload.label()}: {row.reason}"
            f" (stage {row.extra.get('stage', '-')})"
        )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
