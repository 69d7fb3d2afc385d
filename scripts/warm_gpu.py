"""Run the thermal filler's matmul load on a GPU for a while before a lease's first preheated cell.

Why: on 2026-11-28 a cold H100's first Flux cell ran ~14 s a row instead of 2–4 s, likely because the
per-row reheat (bench/thermal.py) chased an equilibrium that the cold start read too high; after 60 s of
this load the next machine's cells ran at their usual pace (scripts/carry/README.md, "Budgeting a lease").
Nothing here is measured: it only brings the GPU and its fans to a sustained load's state.

    PYTHONPATH=src python3 scripts/warm_gpu.py [--seconds 60] [--device cuda:0]
"""

from __future__ import annotations

import argparse
import math
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="how long to run the load (default 60)")
    parser.add_argument("--device", default="cuda", help="the GPU to warm (default cuda, the current one)")
    args = parser.parse_args(argv)
    if not (math.isfinite(args.seconds) and args.seconds > 0):  # nan or inf would never stop the load
        parser.error(f"--seconds {args.seconds:g}: give a positive, finite number of seconds")

    import torch

    from attnbench.bench import clocks
    from attnbench.bench.matmul_load import matmul_operands, run_matmuls

    device = torch.device(args.device)
    if device.type != "cuda" or not torch.cuda.is_available():
        print(f"error: --device {args.device}: no CUDA GPU here; nothing to warm", file=sys.stderr)
        return 2
    source, _ = clocks.source_for(device)

    def temperature() -> str:
        reading = source.read().temperature_c if source is not None else None
        return "unknown" if reading is None else f"{reading:.0f} °C"

    before = temperature()
    a, b, out, _ = matmul_operands(device)
    count, seconds = run_matmuls(a, b, out, args.seconds, device)
    print(
        f"warmed {torch.cuda.get_device_name(device)}: {count} matmuls in {seconds:.0f} s, {before} -> {temperature()}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
