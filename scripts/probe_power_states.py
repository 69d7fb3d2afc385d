"""Why does one kernel time differently from run to run? Time it again and again in one process and print
what the GPU did each time: per-call time, SM clock, power, temperature and energy per call.

The Flux repeatability run (scripts/flux_repeatability.py, H100) found flash_attn3's rows 9-11 % apart
between its two runs: one run at ~1700 MHz and 689 W (the power limit), the other at ~1900 MHz and 635 W,
while flash_attn3_compiled (the same kernel) stayed within 0.4 %. A faster clock at lower power means
less energy per call, so the two states did different work, not the same work at another clock. This
probe separates the candidates: the same inputs timed again (`same`), fresh inputs of the same shape and
seed (`fresh`), and fresh inputs from another seed (`reseeded`), each provider in turn, round after round,
with the report's timing protocol (bench.timing: steady-state warm-up, then >= 200 ms of calls).

    python scripts/probe_power_states.py --out probe.json       # GPU machine, ~1-2 min
    python scripts/probe_power_states.py --smoke                # CPU: the plumbing only
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--providers",
        nargs="*",
        default=None,
        help="names or families (default: flash_attn3 flash_attn3_compiled sdpa_cudnn; --smoke: sdpa_math)",
    )
    parser.add_argument("--seq-len", type=int, default=4224)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--out", type=Path, default=None, help="the rows, rewritten after each timing")
    parser.add_argument("--smoke", action="store_true", help="CPU, tiny shapes, sdpa_math")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error(f"--rounds {args.rounds}: at least 1 round is needed")

    import torch

    from attnbench.bench import providers
    from attnbench.bench.inputs import make_inputs
    from attnbench.rows import Workload
    from attnbench.studies.flux_attention.profiles import PROFILES

    device = "cpu" if args.smoke else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        print("no CUDA device: run on the GPU machine, or pass --smoke")
        return 2
    flux = PROFILES["smoke" if args.smoke else "default"]  # the Flux report's shape and timing counts
    seq = flux["seq_lens"][0] if args.smoke else args.seq_len
    names = args.providers or (
        ["sdpa_math"] if args.smoke else ["flash_attn3", "flash_attn3_compiled", "sdpa_cudnn"]
    )
    workload = Workload(1, seq, seq, flux["heads"], flux["heads"], flux["head_dim"], flux["dtype"], "full")
    counts = flux["timing"]
    chosen, unavailable = [], {}
    for provider in providers.select(names):
        why = provider.unavailable() or provider.unsupported(workload, "fwd")
        if not why and provider.needs_cuda and device != "cuda":
            why = f"needs a CUDA device (this run is on {device})"  # as the sweep rules
        if why:
            unavailable[provider.name] = why
            print(f"{provider.name}: cannot run here: {why}")
        else:
            chosen.append(provider)
    if not chosen:
        print(f"none of {names} can run here")
        return 1
    found = {"workload": workload.label(), "timing": counts, "rows": [], "unavailable": unavailable}
    rows = found["rows"]
    for round_ in range(args.rounds):
        for variant, seed in (("same", None), ("fresh", 0), ("reseeded", round_ + 1)):
            if seed is not None or round_ == 0:  # `same`: the inputs timed last, as they are
                inputs, inputs_seed = make_inputs(workload, device, seed=seed or 0), seed or 0
            for provider in chosen:
                row = {"round": round_, "inputs": variant, "seed": inputs_seed, "provider": provider.name}
                row.update(_timed(provider, inputs, workload, device, counts))
                rows.append(row)
                print(" ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()),
                      flush=True)  # fmt: skip
                if args.out:  # a later failure of the process keeps every row timed so far
                    args.out.write_text(json.dumps(found, indent=1))
    for provider in chosen:
        mine = [r["ms"] for r in rows if r["provider"] == provider.name and r.get("ms")]
        if mine:
            print(f"{provider.name}: {len(mine)} timings, min {min(mine):.4f} max {max(mine):.4f} ms "
                  f"({(max(mine) - min(mine)) / min(mine):.1%} apart)")  # fmt: skip
        else:
            print(f"{provider.name}: no timing succeeded (each row names its error)")
    return 0


def _timed(provider, inputs, workload, device, counts) -> dict:
    """One timing of `provider` with the report's protocol: its time and what the GPU did, or the error
    that stopped it, worded as the sweep words it (a row of its own: an out-of-memory or a library
    failure ends no probe)."""
    import torch

    from attnbench.bench import timing
    from attnbench.bench.providers.base import describe_exception

    try:
        with torch.no_grad():
            prepared = provider.prepare(*inputs, workload)
            t = timing.measure(prepared.run, device=device, **counts)
    except Exception as exc:  # noqa: BLE001 - every failure is a row, never a crash
        return {"error": describe_exception(exc)}
    energy = t.power_w * t.ms_median if t.power_w else None  # mJ per call
    return {"ms": t.ms_median, "sm_clock_mhz": t.sm_clock_mhz, "power_w": t.power_w,
            "temperature_c": t.temperature_c, "energy_mj_per_call": energy, "warmup_s": t.warmup_s,
            "settled": t.warmup_settled}  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
