"""Time tiles of our Triton FlashAttention-2 that configs.py does not offer yet, at the CS336 shapes, on a GPU.

A GPU experiment that comes before a tile enters configs.py: each tile is launched directly (no
autotuning), checked against the fp32 reference and timed with the steady-state protocol, beside the
tile the autotuner picks today. Three sweeps, at the report's two kernel shapes:

- forward, causal, head dim 64 and head dim 128 (the leaderboard shape; the 0.85x-FA3 target shape);
- the dK/dV kernel's tile, with the dQ kernel at today's best tile (so differences are the dK/dV kernel's);
- the dQ kernel's tile, with the dK/dV kernel at today's best tile.

A backward row times the whole backward (preprocess + dK/dV + dQ, recompute mode). Candidates that need
more than the 227 KB of shared memory a block may have, or spill, show up in `--compile-only` (sm_90
compile on any machine, no GPU) before a GPU minute is spent:

    uv run python scripts/fa2_tile_sweep.py --compile-only
    python3 scripts/fa2_tile_sweep.py --out "$OUT"      # on the GPU machine (PYTHONPATH=src)

Writes fa2_tile_sweep.json (every row) to --out; prints each sweep fastest first.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))
if "--compile-only" in sys.argv:  # compile for real: the package would pick the interpreter without a GPU
    os.environ["TRITON_INTERPRET"] = "0"

from attnbench.kernels.flash_attention2.configs import BackwardTile, ForwardTile

LEADERBOARD = {"batch": 1, "heads": 16, "seq": 16384, "head_dim": 64, "dtype": "bfloat16", "mask": "causal"}
TARGET_FORWARD = {**LEADERBOARD, "head_dim": 128}

# today's picks on the H200 (outputs/cs336_systems/nvidia-h200/leaderboard): the fixed half of each sweep
DKDV_BEST = (128, 64, 4, 2)  # BLOCK_M1, BLOCK_N1, warps, stages
DQ_BEST = (128, 64, 8, 3)  # BLOCK_M2, BLOCK_N2, warps, stages

FORWARD_D64 = [
    ForwardTile(64, 64, 4, 2),  # today's pick
    ForwardTile(128, 64, 4, 2),
    ForwardTile(128, 64, 8, 2),
    ForwardTile(128, 128, 8, 2),
    ForwardTile(128, 32, 4, 3),
    ForwardTile(64, 32, 4, 3),
    ForwardTile(64, 64, 4, 5),
    ForwardTile(128, 64, 4, 5),
]
FORWARD_D128 = [
    ForwardTile(128, 128, 8, 3),  # today's pick
    ForwardTile(128, 64, 4, 2),
    ForwardTile(128, 64, 8, 2),
    ForwardTile(128, 32, 4, 3),
    ForwardTile(64, 64, 4, 3),
    ForwardTile(64, 128, 4, 2),  # BLOCK_M < BLOCK_N: not causal-legal here, filtered below
    ForwardTile(256, 128, 8, 2),
    ForwardTile(256, 64, 8, 3),
]
# (BLOCK_M1, BLOCK_N1, warps, stages): Triton's fused-attention tutorial runs 32x128 at 4 warps, 5 stages
DKDV = [DKDV_BEST, (32, 128, 4, 5), (32, 128, 4, 3), (64, 128, 8, 2), (64, 128, 8, 3), (32, 128, 8, 3),
        (128, 128, 8, 2), (64, 64, 4, 3), (128, 64, 4, 3), (128, 64, 8, 2), (64, 64, 4, 2)]  # fmt: skip
DQ = [DQ_BEST, (128, 32, 4, 5), (128, 32, 4, 3), (128, 64, 4, 2), (128, 64, 8, 2), (128, 128, 8, 2),
      (64, 64, 4, 3), (64, 32, 4, 3), (128, 32, 8, 3)]  # fmt: skip


def backward_tiles() -> list[tuple[str, BackwardTile]]:
    m2, n2, dw, ds = DQ_BEST
    m1, n1, w, s = DKDV_BEST
    rows = [("dkdv", BackwardTile(a, b, m2, n2, c, d, dw, ds)) for a, b, c, d in DKDV]
    rows += [("dq", BackwardTile(m1, n1, a, b, w, s, c, d)) for a, b, c, d in DQ if a % b == 0]
    return rows


def forward_tiles(causal: bool = True) -> dict[int, list[ForwardTile]]:
    legal = (lambda t: t.block_m % t.block_n == 0) if causal else (lambda t: True)
    return {64: [t for t in FORWARD_D64 if legal(t)], 128: [t for t in FORWARD_D128 if legal(t)]}


def compile_only() -> int:
    """Every candidate compiled for sm_90 (scripts/check_triton_fa2_sm90.py's compiler call)."""
    sys.path.insert(0, str(HERE))
    from check_triton_fa2_sm90 import report_compile

    from attnbench.kernels.flash_attention2.backward import (
        DQ_OWN_KERNEL,
        flash_bwd_dkdv_kernel,
        flash_bwd_dq_kernel,
    )
    from attnbench.kernels.flash_attention2.forward import flash_fwd_kernel

    def base(d: int) -> dict:
        return {"HEAD_DIM": d, "D_PAD": d, "CAUSAL": True, "MMA_MODE": 0}

    jobs = [(f"fwd d{d} {t.label()}", flash_fwd_kernel, {**base(d), **t.meta()}, t.warps, t.stages)
            for d, tiles in forward_tiles().items() for t in tiles]  # fmt: skip
    for which, t in backward_tiles():
        if which == "dkdv":
            meta = {**base(64), **t.dkdv_meta(), "DQ_ACCUMULATE": DQ_OWN_KERNEL.value}
            jobs.append(
                (f"bwd d64 {t.label()} (dkdv kernel)", flash_bwd_dkdv_kernel, meta, t.warps, t.stages)
            )
        else:
            jobs.append((f"bwd d64 {t.label()} (dq kernel)", flash_bwd_dq_kernel, {**base(64), **t.dq_meta()},
                         *t.dq_launch))  # fmt: skip
    failures = sum(not report_compile(what, kernel, "bfloat16", *rest) for what, kernel, *rest in jobs)
    print(f"{failures} failure(s)")
    return 1 if failures else 0


def sweep(out: Path, timing_options: dict, smoke: bool = False) -> int:
    """Every candidate timed on the GPU (cs336_systems.kernels' audit machinery), fastest first. smoke:
    on the CPU under the Triton interpreter, 256 tokens and one tile per sweep (proves the script runs)."""
    import torch

    from attnbench.studies.cs336_systems.kernels import audit_backward, audit_forward

    device = torch.device("cpu" if smoke else "cuda")
    shape = {**LEADERBOARD, "seq": 256, "heads": 2} if smoke else LEADERBOARD
    rows = []

    def keep(name: str, audited: list[dict]) -> None:  # the report's tile audit, one sweep at a time
        for row in audited:
            rows.append({"sweep": name, **row})
            print(_line(rows[-1]), flush=True)

    for d, tiles in forward_tiles().items():
        keep(
            f"forward d{d}",
            audit_forward({**shape, "head_dim": d}, device, timing_options, tiles[:1] if smoke else tiles),
        )
    for which in ("dkdv", "dq"):
        tiles = [t for kind, t in backward_tiles() if kind == which]
        keep(f"backward d64, {which} tile varied",
             audit_backward(shape, device, timing_options, tiles[:1] if smoke else tiles, dq_modes=("recompute",)))  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    gpu = torch.cuda.get_device_name(0) if device.type == "cuda" else None
    (out / "fa2_tile_sweep.json").write_text(json.dumps({"gpu": gpu, "smoke": smoke, "rows": rows}, indent=1))
    for name in dict.fromkeys(r["sweep"] for r in rows):
        print(f"\n{name}, fastest first:")
        ranked = sorted(
            (r for r in rows if r["sweep"] == name), key=lambda r: (r["status"] != "ok", r.get("ms") or 1e9)
        )
        for r in ranked:
            print("  " + _line(r))
    return 0


def _line(row: dict) -> str:
    ms = f"{row['ms']:.4f} ms {row['tflops']:6.1f} TFLOP/s" if row.get("ms") else ""
    clock = f" @{row['sm_clock_mhz']:.0f} MHz" if row.get("sm_clock_mhz") else ""
    res = f" regs {row.get('regs')} spills {row.get('spills')}" if row.get("regs") is not None else ""
    reason = f" ({row.get('reason')})" if row.get("status") != "ok" and row.get("reason") else ""
    return f"{row['sweep']:<32} {row['tile']:<48} {row['status']:<9} {ms}{clock}{res}{reason}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--compile-only", action="store_true", help="compile each candidate for sm_90 (no GPU)"
    )
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "fa2-tile-sweep")))
    parser.add_argument(
        "--min-time-ms", type=float, default=100.0, help="timed GPU time per tile (default 100)"
    )
    parser.add_argument(
        "--smoke", action="store_true", help="CPU, TRITON_INTERPRET=1, tiny shapes: proves it runs"
    )
    args = parser.parse_args()
    if args.compile_only:
        return compile_only()
    if args.smoke:
        return sweep(
            args.out, {"min_reps": 1, "min_time_ms": 0.0, "warmup_reps": 0, "max_reps": 1}, smoke=True
        )
    return sweep(
        args.out, {"min_reps": 10, "min_time_ms": args.min_time_ms, "warmup_reps": 3, "max_reps": 2000}
    )


if __name__ == "__main__":
    sys.exit(main())
