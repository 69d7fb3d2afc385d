"""The attention-masks notebook's three measuring cells, one function each calls.

The sweep is measured in three stages, each a cell of its own so that none outlives a 10-minute GPU
session, a figure edit re-runs none, and the checks (minutes of first-call compiles: FlexAttention per
mask, FlashAttention-4's and FlashInfer's JIT) leave the timed rows their whole budget:

  checks    the correctness checks (forward and backward at the check length) and the matmul peak;
  separate  the forward and the backward rows of every tier, in tier order;
  fwd_bwd   the forward + backward rows, which cost about as much as both others and add least: they
            run last, with their own budget.

The timed stages take their checks and peak from the checks stage (`first_stage`). Each stage writes
sweep.json (its budget, time and counts) into the working directory; the checks stage writes
checks.json, the timed stages results.jsonl (their timed rows).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from attnbench.bench import env, flops, providers
from attnbench.bench.sweep import print_progress
from attnbench.rows import Result, read_rows_document, write_jsonl, write_rows_document
from attnbench.studies.attention_masks import profiles, series

STAGES = {"checks": (), "separate": tuple(profiles.SEPARATE), "fwd_bwd": tuple(profiles.BOTH)}


def stage_tiers(config: dict, stage: str) -> list[list]:
    """The profile's tiers whose passes belong to `stage` (each keeps only those passes)."""
    if stage not in STAGES:
        raise ValueError(f"stage must be one of {', '.join(STAGES)}; got {stage!r}")
    out = []
    for names, passes in config["tiers"]:
        mine = [p for p in passes if p in STAGES[stage]]
        if mine and names:  # a tier left without providers (a --providers filter) is no tier
            out.append([list(names), mine])
    return out


def stage_budget(config: dict, stage: str) -> float | None:
    return config["budget_s"] if stage == "separate" else config["fwd_bwd_budget_s"]


def stage_budget_of(config: dict, budget_s: float | None) -> series.Budget:
    """A timed stage's budget, with the share its first tier leaves to the later ones (the peers)."""
    return series.Budget(budget_s, config["row_limit_s"], later_share=config.get("later_tiers_share", 0.0))


class _Progress:
    """Every row except repeats of an unavailable provider (its reason is the same everywhere)."""

    def __init__(self):
        self.reported: set[str] = set()

    def __call__(self, row: Result) -> None:
        if row.status == "unavailable":
            if row.provider in self.reported:
                return
            self.reported.add(row.provider)
        print_progress(row)


def _print_plan(tiers, plan, config: dict, budget_s: float | None) -> float:
    """Print the time estimate of the stage and the planned schedule; return the estimate (seconds)."""
    estimate = series.estimate(tiers, plan, config["timing"])
    schedule = series.simulate(tiers, plan, config["timing"], stage_budget_of(config, budget_s))
    print(f"every supported row of this stage at assumed rates would take {sum(estimate.values()):.0f} s:")
    for name, seconds in estimate.items():
        print(f"  {name:<28} {seconds:7.1f} s")
    share = config.get("later_tiers_share", 0.0)
    held = f" ({share:.0%} held for the later tiers while the first runs)" if share and budget_s else ""
    print(f"budget {budget_s or 'none'} s{held}, per-row limit {config['row_limit_s'] or 'none'} s; expected "
          f"{schedule['measured']} timed rows in about {schedule['seconds']:.0f} s plus compiles, skipped for "
          f"time: {schedule['skipped'] or 'none'}")  # fmt: skip
    print("tiers, in order (the budget runs out in the last): "
          + "; ".join(f"{', '.join(p.name for p in ps)}: {'/'.join(passes)}" for ps, passes in tiers))  # fmt: skip
    return sum(estimate.values())


def run_stage(config: dict, stage: str, *, first_stage: Path | None = None) -> dict:
    """Measure one stage of the sweep under a resolved profile config (profile.json of the gpu cell);
    `first_stage` is the checks stage's artifacts folder (the timed stages take its checks and peak).
    Returns the summary it writes to sweep.json."""
    import torch

    device = config["device"]
    if torch.cuda.is_available() != (device == "cuda"):
        raise SystemExit(f"profile.json was resolved for {device}; rerun the gpu cell on this machine")
    if stage != "checks" and first_stage is None:
        raise ValueError(f"the {stage} stage needs the checks stage's folder (first_stage) for its checks")
    if config.get("label"):
        print(f"*** {config['label']} ***")
    gpu_name = torch.cuda.get_device_name(0) if device == "cuda" else None
    machine = {
        "gpu": gpu_name,
        "datasheet_peak_tflops": flops.datasheet_peak(gpu_name),
        "env_id": env.machine_id(),
    }
    if stage == "checks":
        return _run_checks(config, machine)
    return _run_timed(config, stage, machine, first_stage)


def _run_checks(config: dict, machine: dict) -> dict:
    started = time.perf_counter()
    device = config["device"]
    peak = flops.measure_matmul_peak("cuda") if device == "cuda" else None
    if peak:
        print(
            f"bf16 matmul peak: {peak:.1f} TFLOP/s at {flops.clock_of(peak) or '?'} MHz "
            f"(datasheet {machine['datasheet_peak_tflops'] or 'unknown'})"
        )
    print(f"\n--- correctness at {config['check']['seqlen']} tokens ---")
    chosen = [providers.get(name) for name in config["providers"]]
    budget = series.Budget(None, config["row_limit_s"])  # every check runs: a timed row needs its check
    checks = series.run_checks(chosen, profiles.check_workloads(config), config["check_passes"], device=device,
                               env_id=machine["env_id"], budget=budget, progress=_Progress())  # fmt: skip
    # a JSON document, not rows: checks at another length must never be ranked beside the timed rows
    write_rows_document("checks.json", checks, checked_at_seqlen=config["check"]["seqlen"])
    elapsed = time.perf_counter() - started
    print(f"\n{len(checks)} check rows in {elapsed:.0f} s: {_counts(checks)}")
    return _write_summary(config, "checks", {"gpu": machine["gpu"], "measured_matmul_peak_tflops": peak,
                                             "matmul_peak_sm_clock_mhz": flops.clock_of(peak),
                                             "datasheet_peak_tflops": machine["datasheet_peak_tflops"],
                                             "check_seqlen": config["check"]["seqlen"],
                                             "check_seconds": round(elapsed, 1),
                                             "status_counts": _counts(checks)})  # fmt: skip


def _run_timed(config: dict, stage: str, machine: dict, first_stage: Path) -> dict:
    tiers = [
        ([providers.get(name) for name in names], passes) for names, passes in stage_tiers(config, stage)
    ]
    plan = profiles.plan(config)
    budget_s = stage_budget(config, stage)
    estimate = _print_plan(tiers, plan, config, budget_s)
    checks = read_rows_document(first_stage / "checks.json")
    first = json.loads((first_stage / "sweep.json").read_text())
    # with its clock, so that each row's share is taken at the row's own clock (flops.MeasuredPeak)
    peak = flops.restore_peak(first["measured_matmul_peak_tflops"], first.get("matmul_peak_sm_clock_mhz"))
    budget = stage_budget_of(config, budget_s)
    started = time.perf_counter()
    rows = series.run_series(tiers, plan, device=config["device"], timing_options=config["timing"], budget=budget,
                             checks=checks, env_id=machine["env_id"], peak_tflops=peak,
                             datasheet_tflops=machine["datasheet_peak_tflops"], progress=_Progress())  # fmt: skip
    elapsed = time.perf_counter() - started
    write_jsonl("results.jsonl", rows)
    counts = _counts(rows)
    summary = _write_summary(config, stage, {"gpu": machine["gpu"], "measured_matmul_peak_tflops": peak,
                                             "matmul_peak_sm_clock_mhz": flops.clock_of(peak),
                                             "datasheet_peak_tflops": machine["datasheet_peak_tflops"],
                                             "timing": config["timing"], "budget_s": budget_s,
                                             "check_seqlen": config["check"]["seqlen"],
                                             "estimate_s": round(estimate, 1), "sweep_seconds": round(elapsed, 1),
                                             "status_counts": counts})  # fmt: skip
    print(f"\n{len(rows)} timed rows in {elapsed:.0f} s (estimate {estimate:.0f} s): {counts}")
    return summary


def _counts(rows: list[Result]) -> dict[str, int]:
    return {s: sum(r.status == s for r in rows) for s in sorted({r.status for r in rows})}


def _write_summary(config: dict, stage: str, fields: dict) -> dict:
    summary = {"profile": config["profile"], "stage": stage, "passes": list(STAGES[stage]),
               "label": config.get("label"), **fields}  # fmt: skip
    with open("sweep.json", "w") as f:
        json.dump(summary, f, indent=2)
    return summary
