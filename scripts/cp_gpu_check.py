"""Check every context-parallel strategy on GPUs against single-GPU attention, then time a few sizes.

    torchrun --nproc-per-node 2 scripts/cp_gpu_check.py            # 2 GPUs, one node
    torchrun --nproc-per-node 2 scripts/cp_gpu_check.py --no-timing --kernels cudnn
    torchrun --nproc-per-node 2 scripts/cp_gpu_check.py --cpu   # dry run of the script itself (gloo)

Correctness (attnbench.studies.context_parallel.verify; bf16, batch 1, --heads x --head-dim, --seq total tokens): every
strategy x {causal, full} x kernel against an fp32 reference on the whole sequence; a strategy passes
when out, dq, dk, dv are within 3x the single-GPU error (same kernel) + 2e-3 x max|reference| and the
LSE within 1e-3. Timing: a GPU warm-up (attnbench.studies.context_parallel.warmup, clocks before and under load), then
attnbench.studies.context_parallel.sweep.run_sweep (slowest rank, TFLOP/s per GPU) with the single-GPU reference at the
same per-GPU tokens. Exit code 1 when any check fails or a timed row is an error.
"""

from __future__ import annotations

import argparse
import sys

import torch
import torch.distributed as dist

from attnbench import cp
from attnbench.cp.local import get_kernel
from attnbench.studies.context_parallel import sweep as bench
from attnbench.studies.context_parallel import verify


def options_for(args) -> dict:
    return {name: {"window": args.window} for name in ("double_ring", "burst")} if args.window else {}


def check(args, rank, world, device) -> list[str]:
    failures = []
    if rank == 0:
        print(
            f"\n== correctness: world {world}, seq {args.seq}, heads {args.heads}, head_dim {args.head_dim}, "
            f"bf16 (errors: max |x - fp32 reference|, cp / single GPU with the same kernel; worst rank)"
        )
    for kernel in args.kernels:
        reason = get_kernel(kernel).unavailable(device, torch.bfloat16, args.head_dim)
        if reason:
            failures.append(f"kernel {kernel}: {reason}")
            if rank == 0:
                print(f"kernel {kernel} unavailable: {reason}")
            continue

        def progress(c, kernel=kernel):
            if c["status"] not in ("ok", "unavailable"):
                failures.append(f"{c['strategy']}/{kernel}/{c['mask']}: {c['status']}: {c['reason']}")
            if rank == 0:
                cells = " ".join(f"{m} {e['cp']:8.2e}/{e['single']:8.2e}" for m, e in c["errors"].items())
                lse = f"lse {c['lse_err']:8.2e}" if c["lse_err"] is not None else ""
                print(
                    f"{c['strategy']:<12} {kernel:<10} {c['mask']:<6} {c['status']:<11} {cells} {lse} "
                    f"{c['reason'][:120]}",
                    flush=True,
                )

        verify.check_all(
            args.strategies,
            seq_len=args.seq,
            heads=args.heads,
            head_dim=args.head_dim,
            kernel=kernel,
            strategy_options=options_for(args),
            progress=progress,
        )
    return failures


def timing(args, rank, world) -> list[str]:
    kernel = args.kernels[0]
    if rank == 0:
        print(
            f"\n== timing: world {world}, heads {args.time_heads}, head_dim {args.head_dim}, bf16, kernel {kernel} "
            f"(slowest rank; TFLOP/s per GPU = whole-mask FLOPs / (time x world))",
            flush=True,
        )

    sweep = bench.run_sweep(
        args.strategies,
        bench.grid(args.time_seqs),
        passes=("fwd", "fwd_bwd"),
        out_path=args.out,
        reference_kernel=kernel,
        strategy_options=options_for(args),
        warmup_s=1.0,
        progress=bench.progress_line if rank == 0 else None,
        kernel=kernel,
        heads=args.time_heads,
        head_dim=args.head_dim,
        dtype="bfloat16",
        min_reps=3,
        max_reps=10,
        min_time_s=0.5,
        max_time_s=20.0,
    )
    if rank == 0:
        print(f"warm-up: {sweep.warmup.get('report')}; sweep {sweep.seconds:.0f} s")
    return [
        f"{r.provider} {r.workload.seqlen_q} {r.workload.mask} {r.pass_}: {r.reason}"
        for r in sweep.rows
        if r.status == "error"
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seq", type=int, default=16384, help="total tokens for the correctness check")
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--kernels", type=lambda s: s.split(","), default=["cudnn", "sdpa_flash"])
    parser.add_argument("--strategies", type=lambda s: s.split(","), default=list(cp.STRATEGIES))
    parser.add_argument("--window", type=int, default=None, help="double_ring/burst inner ring size")
    parser.add_argument("--no-timing", action="store_true")
    parser.add_argument("--time-seqs", type=lambda s: [int(x) for x in s.split(",")], default=[32768, 131072])
    parser.add_argument("--time-heads", type=int, default=40)
    parser.add_argument("--out", default=None, help="append the timing rows to this JSONL (rank 0)")
    parser.add_argument(
        "--cpu",
        action="store_true",
        help="gloo + cpu_math at tiny sizes: checks this script, not the GPU kernels",
    )
    args = parser.parse_args()
    if args.cpu:
        args.kernels, args.seq, args.heads, args.head_dim = ["cpu_math"], 256, 4, 16
        args.time_seqs, args.time_heads = [256], 4
    rank, world, device = bench.init_distributed("gloo" if args.cpu else "nccl", timeout_s=600)
    if rank == 0:
        name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
        print(f"torch {torch.__version__}, {name} x {world}, cuDNN {torch.backends.cudnn.version()}")
    failures = check(args, rank, world, device)
    if not args.no_timing:
        failures += timing(args, rank, world)
    if rank == 0:
        print("\nALL CHECKS PASSED" if not failures else "\nFAILURES:\n  " + "\n  ".join(failures))
    dist.barrier()
    dist.destroy_process_group()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
