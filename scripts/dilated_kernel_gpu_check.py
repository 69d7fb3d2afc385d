"""GPU check of the fused dilated-attention kernel (kernels/dilated_attention), in under 3 minutes on one
H100/H200, at the dilated report's default shape (batch 1, 16 heads x 128, bf16, the paper's branches
scaled to each length):

1. correctness at a medium length (default 32k: its kept lengths L = 2048 and 2731 are those of every
   longer length, so the tiles the autotuner picks here serve 1M and 2M untuned), causal and full, out and
   dq, dk, dv against the fp32 chunked reference, with bench.correctness's bf16 tolerance;
2. timing with the project's protocol (bench.timing.measure through the report's measure_dilated):
   fused vs the gather path, forward at 1M tokens, forward + backward at 1M, and the fused forward +
   backward at 2M where its memory model says it fits. TFLOP/s on the sparse pattern's FLOPs, peak memory.

    PYTHONPATH=src python3 scripts/dilated_kernel_gpu_check.py
    PYTHONPATH=src python3 scripts/dilated_kernel_gpu_check.py --check-len 16384 --gather cudnn --lengths 1048576

Without a GPU it says so and exits 0. Exits 1 if a checked case is incorrect or fails.
"""

from __future__ import annotations

import argparse
import sys
import time

try:
    import torch
except ImportError as exc:  # a machine without torch has no GPU to check either
    print(f"torch does not import ({exc}): nothing to check here")
    sys.exit(0)

M = 1 << 20
GATHER_FWD_BWD_GIB_PER_M = 84.0  # the gather path's forward + backward peak at 1M tokens (issue 21, H200)


def show(row, started: float) -> None:
    ms = f"{row.ms_median:9.2f} ms" if row.ms_median is not None else " " * 12
    tf = f"{row.tflops:6.1f} TFLOP/s" if row.tflops else " " * 14
    mem = f"{row.peak_mem_bytes / 2**30:6.1f} GiB" if row.peak_mem_bytes else " " * 10
    err = f"rel_l2 {row.rel_l2:.2e} max_abs {row.max_abs or 0:.2e}" if row.rel_l2 is not None else ""
    print(f"[{time.perf_counter() - started:5.0f} s] {row.provider:<22} {row.workload.mask:<6} {row.pass_:<7} "
          f"{row.workload.seqlen_q:>8} {row.status:<10} {ms} {tf} {mem} {err} {row.reason[:110]}", flush=True)  # fmt: skip


def fits_on_paper(config: dict, seq_len: int, backward: bool) -> tuple[bool, str]:
    from attnbench.kernels.dilated_attention import predicted_peak_bytes

    s = config["shape"]
    need = predicted_peak_bytes(s["batch"], s["heads"], seq_len, s["head_dim"], 2, backward)
    free, _ = torch.cuda.mem_get_info()
    return need <= 0.95 * free, f"predicted peak {need / 2**30:.1f} GiB, {free / 2**30:.1f} GiB free"


def check(config: dict, seq_len: int, started: float) -> int:
    from attnbench.studies.dilated_attention import measure, scaling
    from attnbench.studies.dilated_attention.profiles import branches_for

    references = measure.References(lambda n: branches_for(config, n), "cuda")
    bad = 0
    for mask in ("causal", "full"):
        w = scaling.workload({**config, "sweep": {**config["sweep"], "mask": mask}}, seq_len)
        row = measure.measure_dilated("fused", None, w, "fwd_bwd", branches_for(config, seq_len), device="cuda",
                                      timing_options={}, reference=references.get(w), timed=False)  # fmt: skip
        show(row, started)
        for name, c in (row.extra.get("correctness") or {}).items():
            print(f"      {name:<3} rel_l2 {c['rel_l2']:.2e}  max_abs {c['max_abs']:.2e}  ok {c['ok']}")
        bad += not (row.status == "ok" and row.ok)
        references.clear()
    return bad


def timing_rows(config: dict, gather: list[str], lengths: list[int], started: float) -> list:
    from attnbench.studies.dilated_attention import measure, scaling
    from attnbench.studies.dilated_attention.profiles import branches_for

    rows = []
    for seq_len in lengths:
        w = scaling.workload(config, seq_len)
        for pass_ in ("fwd", "fwd_bwd"):
            candidates = [("fused", None)] + ([("gather", b) for b in gather] if seq_len <= M else [])
            for implementation, backend in candidates:
                if implementation == "fused":
                    fits, why = fits_on_paper(config, seq_len, pass_ != "fwd")
                    if not fits:
                        print(f"           dilated_fused {pass_} {seq_len}: skipped, {why}")
                        continue
                elif pass_ != "fwd" and backend == "fa3":  # FA3 cannot report an OOM: it ends the process
                    free = torch.cuda.mem_get_info()[0] / 2**30
                    if GATHER_FWD_BWD_GIB_PER_M * seq_len / M > 0.9 * free:
                        print(
                            f"           dilated_gather_fa3 {pass_} {seq_len}: skipped, ~84 GiB per 1M > {free:.0f} free"
                        )
                        continue
                row = measure.measure_dilated(implementation, backend, w, pass_, branches_for(config, seq_len),
                                              device="cuda", timing_options=config["timing"])  # fmt: skip
                rows.append(row)
                show(row, started)
    return rows


def summary(rows: list) -> None:
    """The issue's target: the fused forward at 1M tokens >= 2x the gather path's TFLOP/s."""
    by = {(r.provider, r.pass_, r.workload.seqlen_q): r for r in rows if r.tflops}
    for pass_ in ("fwd", "fwd_bwd"):
        fused = by.get(("dilated_fused", pass_, M))
        for (provider, p, n), row in sorted(by.items()):
            if fused and p == pass_ and n == M and provider.startswith("dilated_gather"):
                print(f"{pass_} 1M: fused {fused.tflops:.1f} TFLOP/s vs {provider} {row.tflops:.1f}: "
                      f"{fused.tflops / row.tflops:.2f}x ({fused.ms_median:.1f} vs {row.ms_median:.1f} ms)")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check-len", type=int, default=32768)
    parser.add_argument(
        "--gather", default="fa3,cudnn", help="gather-path backends to time beside the fused kernel"
    )
    parser.add_argument("--lengths", default=f"{M},{2 * M}")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print(
            "no CUDA device: this check times the fused kernel on a GPU (the CPU tests are tests/test_dilated_kernel.py)"
        )
        return 0
    from attnbench.kernels import dilated_attention
    from attnbench.studies.dilated_attention import profiles

    config = profiles.resolve("default", cuda=True)
    started = time.perf_counter()
    print(f"{torch.cuda.get_device_name()}  torch {torch.__version__}  shape {config['shape']}", flush=True)
    bad = check(config, args.check_len, started)
    rows = timing_rows(config, [b for b in args.gather.split(",") if b], [int(n) for n in args.lengths.split(",")],
                       started)  # fmt: skip
    summary(rows)
    print("tiles:", dilated_attention.best_tiles())
    bad += sum(r.status in ("error", "incorrect") and r.provider == "dilated_fused" for r in rows)
    print(
        "all correct" if not bad else f"{bad} failing fused cases", f"({time.perf_counter() - started:.0f} s)"
    )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
