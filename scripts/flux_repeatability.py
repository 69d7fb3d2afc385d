"""How repeatable is a Flux row? Run the Flux sweep twice in one process on one GPU and write the spread.

The sweep is the Flux report's default profile (notebooks/flux_attention.md): batch 1, 24 heads, head dim
128, bf16, non-causal, its six sequence lengths, forward and forward + backward, every registered
provider (or those named), timed with bench.timing's protocol and its counts (>= 20 repetitions,
>= 200 ms). Both runs share the process, the GPU and the measured matmul peak; the second starts right
after the first, so what differs is run-to-run noise (clock, power, allocator, scheduling), not setup.

Per row measured ok in both runs: spread = |a - b| / mean(a, b) of ms_median. Printed: the median and
95th percentile of the spread; written (--out): those, every pair with both runs' clocks, the machine.

--preheat times every row at the GPU's thermal equilibrium (bench/thermal.py; the Flux profiles set it);
run it beside a run without to see what it is worth.

Each run is the report's own protocol, the profile's `rounds` included (each row the fastest of its
rounds: bench/rounds.py), so runs 1 and 2 are the report run twice; --rounds 1 times one pass per run, as
the report did before rounds.

--runs 2K (K >= 2) runs the sweep 2K times and also asks which way of summarising K runs repeats: the
first K runs against the last K, each row summarised by its fastest run (`fastest_of_K`) and by the
mean of its K times (`mean_of_K`). The H100's FlashAttention-3 rows flip between a boost-clock state and a
power-limited one from run to run (measurements/power_states-*.json), so one run against another
cannot repeat within 5 %; whether a summary of several can is what this measures. The headline figures
stay those of runs 1 and 2.

    python scripts/flux_repeatability.py --out flux_repeatability.json            # on the GPU machine
    python scripts/flux_repeatability.py --smoke --out /tmp/r.json                # CPU, tiny: the plumbing
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from pathlib import Path
from typing import NamedTuple

FLUX_SEQ_LENS = (4224, 4352, 4416, 4480, 4544, 4608)  # 4096 image tokens + 128 ... 512 text tokens
SMOKE = {"seq_lens": (288, 320), "heads": 2, "head_dim": 64, "providers": ["sdpa_math"],
         "timing": {"min_reps": 3, "min_time_ms": 5.0, "warmup_reps": 1, "max_reps": 20}}  # fmt: skip


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolated quantile (numpy's default), q in [0, 1]."""
    from attnbench.bench.timing import quantile

    return quantile(sorted(values), q)


def row_key(row) -> tuple[str, str, str]:
    return (row.provider, row.workload.label(), row.pass_)


def pair_spreads(first: list, second: list) -> list[dict]:
    """One entry per (provider, workload, pass) measured ok in both runs, with |a - b| / mean(a, b)."""
    later = {row_key(r): r for r in second if r.status == "ok" and r.ms_median}
    pairs = []
    for a in first:
        b = later.get(row_key(a))
        if a.status != "ok" or not a.ms_median or b is None:
            continue
        pairs.append({
            "provider": a.provider, "workload": a.workload.label(), "pass": a.pass_,
            "ms_a": a.ms_median, "ms_b": b.ms_median,
            "spread": abs(a.ms_median - b.ms_median) / ((a.ms_median + b.ms_median) / 2),
            "sm_clock_mhz_a": a.sm_clock_mhz, "sm_clock_mhz_b": b.sm_clock_mhz,
            "power_w_a": a.power_w, "power_w_b": b.power_w,
            "temperature_c_a": a.temperature_c, "temperature_c_b": b.temperature_c,
        })  # fmt: skip
    return pairs


def summary(pairs: list[dict]) -> dict:
    spreads = [p["spread"] for p in pairs]
    if not spreads:
        return {"rows": 0, "median_spread": None, "p95_spread": None, "max_spread": None}
    return {
        "rows": len(spreads),
        "median_spread": statistics.median(spreads),
        "p95_spread": percentile(spreads, 0.95),
        "max_spread": max(spreads),
    }


def summarised(runs: list[list], how: str) -> list:
    """One row per (provider, workload, pass) measured ok in every run: its fastest run (`fastest`), or
    that row with ms_median the mean over the runs (`mean`)."""
    ok = [{row_key(r): r for r in run if r.status == "ok" and r.ms_median} for run in runs]
    rows = []
    for key in ok[0]:
        seen = [run[key] for run in ok if key in run]
        if len(seen) < len(runs):
            continue
        if how == "fastest":
            rows.append(min(seen, key=lambda r: r.ms_median))
        else:
            rows.append(dataclasses.replace(seen[0], ms_median=statistics.fmean(r.ms_median for r in seen)))
    return rows


def summaries_of_halves(runs: list[list]) -> dict:
    """{"fastest_of_K": summary, "mean_of_K": summary}: the first K runs against the last K."""
    k = len(runs) // 2
    return {f"{how}_of_{k}": summary(pair_spreads(summarised(runs[:k], how), summarised(runs[k:], how)))
            for how in ("fastest", "mean")}  # fmt: skip


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("flux_repeatability.json"))
    parser.add_argument("--providers", nargs="*", default=[], help="names or families (default: all)")
    parser.add_argument("--seq-lens", nargs="*", type=int, default=list(FLUX_SEQ_LENS),
                        help="a subset of the Flux lengths, to fit a time limit")  # fmt: skip
    parser.add_argument("--smoke", action="store_true", help="CPU, tiny shapes: checks the plumbing only")
    parser.add_argument("--runs", type=int, default=2, help="2, or 2K (K >= 2) to compare K-run summaries")
    parser.add_argument("--rounds", type=int, default=None,
                        help="passes over the grid per run, each row its fastest (default: the profile's)")  # fmt: skip
    parser.add_argument("--require-all", action="store_true",
                        help="refuse to start (exit 2) when a named provider cannot run here, naming why "
                             "(e.g. carried wheels copied but not installed: source scripts/device_env.sh)")  # fmt: skip
    parser.add_argument("--preheat", action=argparse.BooleanOptionalAction, default=None,
                        help="time every row at the GPU's thermal equilibrium (bench/thermal.py); "
                             "default: as the Flux profile does (it preheats)")  # fmt: skip
    args = parser.parse_args(argv)
    if args.runs < 2 or args.runs % 2:
        parser.error(f"--runs {args.runs}: give 2, or an even count of at least 4")
    return args


class SweepPlan(NamedTuple):  # not a dataclass: tests load this script without registering it in sys.modules
    """What every run times, and how: the Flux profile's shape and counts (SMOKE's with --smoke), as the
    options override them."""

    shape: dict  # seq_lens, heads, head_dim, providers (names asked for), timing
    rounds: int
    providers: list  # the registered providers chosen
    unavailable: dict[str, str]  # chosen providers that cannot run here, and why
    device: str

    @property
    def preheat(self) -> bool:
        return bool(self.shape["timing"].get("preheat"))


def plan_sweep(args: argparse.Namespace, cuda: bool) -> SweepPlan:
    """The plan for the options given; names each chosen provider that cannot run here."""
    from attnbench.bench import providers
    from attnbench.studies.flux_attention.profiles import PROFILES  # the report's own counts and shape

    flux = PROFILES["default"]
    shape = SMOKE if args.smoke else {"seq_lens": args.seq_lens, "heads": flux["heads"], "head_dim": flux["head_dim"],
                                      "providers": args.providers, "timing": flux["timing"]}  # fmt: skip
    if args.preheat is not None:  # --preheat / --no-preheat over the profile's choice
        shape = {**shape, "timing": {**shape["timing"], "preheat": args.preheat}}
    rounds = args.rounds if args.rounds is not None else (1 if args.smoke else flux.get("rounds", 1))
    chosen = providers.select(shape["providers"])
    missing = {p.name: why for p in chosen if (why := p.unavailable())}
    for name, why in missing.items():  # said before the long runs, not found in their rows after
        print(f"unavailable: {name}: {why}", flush=True)
    device = "cuda" if cuda and not args.smoke else "cpu"
    return SweepPlan(shape=shape, rounds=rounds, providers=chosen, unavailable=missing, device=device)


def preheat_summary(runs: list[list]) -> dict:
    """What the rows started from: seconds of filler per row, the equilibrium."""
    heated = [r for run in runs for r in run if r.extra.get("preheat_s") is not None]
    return {
        "equilibrium_c": max(
            (e for r in heated if (e := r.extra.get("equilibrium_c")) is not None), default=None
        ),
        "seconds": round(sum(r.extra["preheat_s"] for r in heated), 1),
        "rows": len(heated),
    }


def repeatability_result(
    plan: SweepPlan, runs: list[list], seconds: list[float], info: dict, smoke: bool
) -> dict:
    """The document --out holds once two or more runs are done."""
    pairs = pair_spreads(runs[0], runs[1])
    result = {
        "what": f"Flux sweep run {len(runs)} times in one process: per-row spread |a-b|/mean of ms_median "
        "of runs 1 and 2 (and, with 4+ runs, of K-run summaries)",
        "smoke": smoke,
        "gpu": info.get("gpu"),
        "machine_id": info.get("machine_id"),
        "power_limit_w": info.get("power_limit_w"),
        "max_sm_clock_mhz": info.get("max_sm_clock_mhz"),
        "timing": plan.shape["timing"],
        "rounds": plan.rounds,
        # each row warmed to steady state before its timed calls (bench.warmup): how the pages' rows are
        # timed since the timing protocol; report.repeatability matches the rows' protocol against it
        "row_warmup": any(r.warmup_s is not None for run in runs for r in run),
        "seq_lens": list(plan.shape["seq_lens"]),
        "providers": [p.name for p in plan.providers],
        "unavailable": plan.unavailable,  # named providers that could not run here, and why
        "run_seconds": seconds,
        **summary(pairs),
        "summaries": summaries_of_halves(runs) if len(runs) >= 4 and len(runs) % 2 == 0 else {},
        "pairs": pairs,
    }
    if plan.preheat:
        result["preheat"] = preheat_summary(runs)
    return result


def run_and_write(plan: SweepPlan, args: argparse.Namespace) -> dict:
    """Runs the sweep args.runs times; returns the result of them all, written to args.out."""
    from attnbench.bench import env, flops
    from attnbench.bench.sweep import run_sweep
    from attnbench.rows import Workload

    heads, head_dim = plan.shape["heads"], plan.shape["head_dim"]
    workloads = [
        Workload(1, s, s, heads, heads, head_dim, "bfloat16", "full") for s in plan.shape["seq_lens"]
    ]
    info = env.collect_env(plan.providers)
    peaks = flops.MeasuredPeaks(plan.device) if plan.device == "cuda" else None
    datasheet = flops.datasheet_peak(info.get("gpu"))
    runs, seconds = [], []
    for attempt in range(1, args.runs + 1):
        started = time.perf_counter()
        print(f"--- run {attempt} of {args.runs} ---", flush=True)
        runs.append(run_sweep(plan.providers, workloads, ("fwd", "fwd_bwd"), device=plan.device,
                              peak_tflops=peaks, datasheet_tflops=datasheet,
                              timing_options=plan.shape["timing"], rounds=plan.rounds))  # fmt: skip
        seconds.append(round(time.perf_counter() - started, 1))
        # written after every run from the second on: a run stopped by a time limit keeps these
        if attempt >= 2:
            result = repeatability_result(plan, runs, seconds, info, args.smoke)
            args.out.write_text(json.dumps(result, indent=1))
    return result


def print_spreads(result: dict, out: Path) -> None:
    if result["rows"]:
        print(f"{result['rows']} rows: median spread {result['median_spread']:.2%}, "
              f"95th percentile {result['p95_spread']:.2%}, max {result['max_spread']:.2%}")  # fmt: skip
        for name, stats in result["summaries"].items():
            if stats["rows"]:
                print(f"{name}: {stats['rows']} rows, median spread {stats['median_spread']:.2%}, "
                      f"95th percentile {stats['p95_spread']:.2%}")  # fmt: skip
    else:
        print("no row was measured ok in both runs")
    print(f"wrote {out}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    cuda = torch.cuda.is_available()
    if not cuda and not args.smoke:
        print("no CUDA device: run on the GPU machine, or pass --smoke for the CPU plumbing check")
        return 2
    plan = plan_sweep(args, cuda)
    if plan.unavailable and args.require_all:
        print(f"--require-all: {len(plan.unavailable)} of {len(plan.providers)} providers cannot run here; "
              "nothing timed")  # fmt: skip
        return 2
    result = run_and_write(plan, args)
    print_spreads(result, args.out)
    return 0 if result["rows"] else 1


if __name__ == "__main__":
    sys.exit(main())
