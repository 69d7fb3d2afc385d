"""Quick GPU check of dilated attention before the notebook: every implementation x backend against the
fp32 reference at a small length (both masks, forward + backward), and, under torchrun, the
distributed version against one process. About a minute; prints one line per case, exits 1 on any
incorrect result or error.

    python scripts/dilated_gpu_check.py                          # one GPU
    torchrun --nproc-per-node 2 scripts/dilated_gpu_check.py     # + the distributed version on 2 GPUs
    python scripts/dilated_gpu_check.py --seq-len 8192 --heads 8 --head-dim 64
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

from attnbench.studies.dilated_attention import checks, profiles


def config_for(args) -> dict:
    config = profiles.resolve("default" if torch.cuda.is_available() else "smoke", torch.cuda.is_available())
    config["shape"].update(heads=args.heads, head_dim=args.head_dim)
    config["correctness"].update(seq_len=args.seq_len, reference_seq_len=min(args.seq_len, 2048))
    config["distributed"]["correctness_seq_len"] = args.seq_len * 2
    return config


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seq-len", type=int, default=4096)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--head-dim", type=int, default=128)
    args = parser.parse_args()
    config = config_for(args)
    bad = 0
    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    rank = int(os.environ.get("RANK", "0"))
    if rank == 0:
        print(f"device {config['device']}, shape {config['shape']}, {args.seq_len} tokens", flush=True)
        rows = checks.correctness_rows(config, device=config["device"])
        rows += checks.reference_rows(config, device=config["device"])
        for r in rows:
            err = f"rel_l2 {r.rel_l2:.2e}" if r.rel_l2 is not None else ""
            print(
                f"{r.provider:<28} {r.workload.mask:<6} {r.pass_:<7} {r.status:<11} {err:<16} {r.reason[:120]}"
            )
            bad += r.status in ("incorrect", "error", "oom")
    if distributed:
        import torch.distributed as dist

        from attnbench.cp.launch import init_distributed
        from attnbench.studies.dilated_attention import distributed as dist_bench

        init_distributed(timeout_s=300)
        for rec in dist_bench.check(config):
            bad += rec["status"] != "ok"
            if rank == 0:
                errs = rec.get("errors", {}).get("distributed", {})
                text = ", ".join(f"{n} {c['rel_l2']:.2e}" for n, c in errs.items())
                print(
                    f"distributed x{rec['world']} {rec['mask']:<6} {rec['seq_len']} tokens: {rec['status']} {text} "
                    f"lse max abs {rec.get('lse_max_abs')} {rec.get('reason', '')}"
                )
        dist.destroy_process_group()
    if rank == 0:
        print("all correct" if not bad else f"{bad} failing cases")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
