"""Check every context-parallel strategy on GPUs against single-GPU attention, then time a few sizes.

    torchrun --nproc-per-node 2 scripts/cp_gpu_check.py            # 2 GPUs, one node
    torchrun --nproc-per-node 2 scripts/cp_gpu_check.py --no-timing --kernels cudnn
    torchrun --nproc-per-node 2 scripts/cp_gpu_check.py --cpu   # dry run of the script itself (gloo)

Correctness (bf16, batch 1, --heads x --head-dim, --seq total tokens): every rank builds the same
global q, k, v, dO, shards them in the strategy's layout and runs the strategy; the reference is
float32 math attention on the whole sequence (per head, autograd). Single-GPU attention with the same
kernel on the whole sequence is measured against the same reference; a strategy passes when each of
out, dq, dk, dv is within 3x the single-GPU error + 2e-3 x max|reference| (CP adds one bf16 rounding
per block partial: the kernels return bf16 block outputs and gradients) and the LSE within 1e-3.
Timing: attnbench.cp.bench.measure (slowest rank, TFLOP/s per GPU) and the single-GPU reference at
the same per-GPU tokens. Exit code 1 when any check fails.
"""

from __future__ import annotations

import argparse
import math
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F

from attnbench import cp
from attnbench.cp import bench
from attnbench.cp.local import get_kernel

METRICS = ("out", "dq", "dk", "dv")


def reference_fp32(q, k, v, dout, causal):
    """float32 math attention, one head at a time (bounded memory): out, lse, dq, dk, dv."""
    res = {m: [] for m in ("out", "lse", "dq", "dk", "dv")}
    scale = 1.0 / math.sqrt(q.shape[-1])
    for h in range(q.shape[1]):
        qh, kh, vh = (t[:, h:h + 1].float().requires_grad_() for t in (q, k, v))
        logits = (qh @ kh.transpose(-1, -2)) * scale
        if causal:
            n = logits.shape[-1]
            logits = logits.masked_fill(torch.ones(n, n, dtype=torch.bool, device=q.device).triu_(1),
                                        float("-inf"))
        lse = torch.logsumexp(logits, -1)
        out = torch.softmax(logits, -1) @ vh
        out.backward(dout[:, h:h + 1].float())
        for name, t in (("out", out), ("lse", lse), ("dq", qh.grad), ("dk", kh.grad), ("dv", vh.grad)):
            res[name].append(t.detach())
        del logits, out
    return {m: torch.cat(ts, dim=1) for m, ts in res.items()}


def single_gpu(q, k, v, dout, causal, kernel):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backend = {"cudnn": SDPBackend.CUDNN_ATTENTION, "sdpa_flash": SDPBackend.FLASH_ATTENTION}.get(
        kernel, SDPBackend.MATH)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    with sdpa_kernel([backend]):
        out = F.scaled_dot_product_attention(*leaves, is_causal=causal)
    out.backward(dout)
    return {"out": out.detach(), "dq": leaves[0].grad, "dk": leaves[1].grad, "dv": leaves[2].grad}


def max_err(a, b) -> float:
    return (a.float() - b.float()).abs().max().item()


def options_for(name: str, args) -> dict:
    return {"window": args.window} if name in ("double_ring", "burst") and args.window else {}


def check(args, rank, world, device) -> list[str]:
    gen = torch.Generator(device=device).manual_seed(1234)  # identical global tensors on every rank
    shape = (1, args.heads, args.seq, args.head_dim)
    q, k, v, dout = (torch.randn(shape, generator=gen, device=device, dtype=torch.bfloat16)
                     for _ in range(4))
    failures = []
    if rank == 0:
        print(f"\n== correctness: world {world}, seq {args.seq}, heads {args.heads}, "
              f"head_dim {args.head_dim}, "
              f"bf16 (errors: max |x - fp32 reference|; single = one GPU, same kernel)")
        columns = " ".join(f"{m + ' cp/single':>20}" for m in METRICS)
        print(f"{'strategy':<12} {'kernel':<10} {'mask':<6} {columns} {'lse':>9}  ok")
    for causal in (True, False):
        ref = reference_fp32(q, k, v, dout, causal)
        for kernel in args.kernels:
            reason = get_kernel(kernel).unavailable(device, torch.bfloat16, args.head_dim)
            if reason:
                failures.append(f"kernel {kernel}: {reason}")
                if rank == 0:
                    print(f"kernel {kernel} unavailable: {reason}")
                continue
            single = single_gpu(q, k, v, dout, causal, kernel)
            for name in args.strategies:
                spec = cp.get_strategy(name)
                reason = spec.unavailable(device, kernel)
                if reason:
                    if rank == 0:
                        print(f"{name:<12} {kernel:<10} unavailable: {reason}")
                    continue
                options = options_for(name, args)
                layout = spec.layout(world, args.heads, **options)
                mine = [layout.shard(t, rank) for t in (q, k, v, dout)]
                leaves = [t.clone().requires_grad_() for t in mine[:3]]
                try:
                    out, lse = cp.attention(*leaves, strategy=name, causal=causal, kernel=kernel, **options)
                    out.backward(mine[3])
                except Exception as exc:  # noqa: BLE001 - reported, then the next case
                    failures.append(f"{name}/{kernel}/causal={causal}: {type(exc).__name__}: {exc}")
                    if rank == 0:
                        print(f"{name:<12} {kernel:<10} ERROR {type(exc).__name__}: {exc}")
                    continue
                got = {"out": out, "dq": leaves[0].grad, "dk": leaves[1].grad, "dv": leaves[2].grad}
                cells, ok = [], True
                for m in METRICS:
                    expected = layout.shard(ref[m], rank)
                    e_cp = max_err(got[m], expected)
                    e_single = max_err(layout.shard(single[m], rank), expected)
                    ok &= e_cp <= 3 * e_single + 2e-3 * expected.abs().max().item()
                    cells.append(f"{e_cp:9.2e}/{e_single:9.2e}")
                e_lse = max_err(lse, layout.shard(ref["lse"], rank)) if lse is not None else float("nan")
                ok &= lse is None or e_lse <= 1e-3
                verdict = torch.tensor([0.0 if ok else 1.0], device=device)
                dist.all_reduce(verdict, op=dist.ReduceOp.MAX)  # a case passes only on every rank
                ok = verdict.item() == 0.0
                if not ok:
                    failures.append(f"{name}/{kernel}/causal={causal}: errors beyond tolerance")
                if rank == 0:
                    mask = "causal" if causal else "full"
                    print(f"{name:<12} {kernel:<10} {mask:<6} " + " ".join(f"{c:>20}" for c in cells)
                          + f" {e_lse:9.2e}  {'OK' if ok else 'FAIL'}")
        del ref
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return failures


def timing(args, rank, world) -> None:
    if rank == 0:
        print(f"\n== timing: world {world}, heads {args.time_heads}, head_dim {args.head_dim}, bf16, kernel "
              f"{args.kernels[0]} (slowest rank; TFLOP/s per GPU = whole-mask FLOPs / (time x world))")
        print(f"{'provider':<20} {'seq':>8} {'mask':<6} {'pass':<8} {'status':<12} {'ms':>10} "
              f"{'TFLOP/s/GPU':>12} {'peak GiB':>9}")
    kernel = args.kernels[0]
    common = {"heads": args.time_heads, "head_dim": args.head_dim, "dtype": "bfloat16", "min_reps": 3,
              "max_reps": 10, "min_time_s": 0.5, "max_time_s": 20.0}
    for seq in args.time_seqs:
        for mask in ("causal", "full"):
            for pass_ in ("fwd", "fwd_bwd"):
                rows = [bench.measure_reference(seq // world, mask=mask, pass_=pass_, kernel=kernel,
                                                **common)]
                rows += [bench.measure(name, seq_len=seq, mask=mask, pass_=pass_, kernel=kernel,
                                       options=options_for(name, args), **common) for name in args.strategies]
                if rank == 0:
                    for r in rows:
                        ms = f"{r.ms_median:10.2f}" if r.ms_median else f"{'-':>10}"
                        tf = f"{r.tflops:12.1f}" if r.tflops else f"{'-':>12}"
                        mem = f"{r.peak_mem_bytes / 2**30:9.1f}" if r.peak_mem_bytes else f"{'-':>9}"
                        note = f"  {r.reason[:80]}" if r.reason else ""
                        print(f"{r.provider:<20} {r.workload.seqlen_q:>8} {mask:<6} {pass_:<8} "
                              f"{r.status:<12} {ms} {tf} {mem}{note}", flush=True)
                    if args.out:
                        from attnbench.bench.results import write_jsonl
                        write_jsonl(args.out, rows, append=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seq", type=int, default=16384, help="total tokens for the correctness check")
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--kernels", type=lambda s: s.split(","), default=["cudnn", "sdpa_flash"])
    parser.add_argument("--strategies", type=lambda s: s.split(","),
                        default=[n for n in cp.STRATEGIES if n != "torch_cp"] + ["torch_cp"])
    parser.add_argument("--window", type=int, default=None, help="double_ring/burst inner ring size")
    parser.add_argument("--no-timing", action="store_true")
    parser.add_argument("--time-seqs", type=lambda s: [int(x) for x in s.split(",")], default=[32768, 131072])
    parser.add_argument("--time-heads", type=int, default=40)
    parser.add_argument("--out", default=None, help="append the timing rows to this JSONL (rank 0)")
    parser.add_argument("--cpu", action="store_true",
                        help="gloo + cpu_math at tiny sizes: checks this script, not the GPU kernels")
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
        timing(args, rank, world)
    if rank == 0:
        print("\nALL CHECKS PASSED" if not failures else "\nFAILURES:\n  " + "\n  ".join(failures))
    dist.barrier()
    dist.destroy_process_group()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
