"""Every timing path outside the sweep's rows, once on tiny shapes: does each record its warm-up and the SM
clock it ran at? Run it first on a lease (about a minute on a GPU), before the long cells that use these
paths; it prints one line per check and exits 1 on a failure.

1. CS336 model steps: a clock per step;
2. CS336 device-kernel profile (the leaderboard's gap): the steady-state warm-up, then the clock;
3. CS336 breakdown: the clock of the profiled steps;
4. CS336 attention scan: the row checked against the fp32 reference;
5. Flux timing-method comparison: each method's clock, and the warm-up of `events` and `kernels`;
6. Flux trust check: both sides' clocks (on a GPU only: its bare side is a CUDA-event loop);
7. dilated gather breakdown: whole call and kernels, each with its clock.

On a CPU (`--device cpu`, what the test suite runs) there is no clock: every path must say why instead.

  PYTHONPATH=src python scripts/check_clock_paths.py [--device cpu]
"""

from __future__ import annotations

import argparse
import sys


def clocked(record: dict, cuda: bool) -> bool:
    """A clock on a GPU; on a CPU, none (the path ran and did not invent one)."""
    return (record.get("sm_clock_mhz") is not None) if cuda else record.get("sm_clock_mhz") is None


def cs336_checks(device, cuda: bool, check) -> None:
    import torch

    from attnbench.studies.cs336_systems import attention_scan, breakdown, kernels, profiles, steps

    sizes = profiles.resolve("smoke", False)["custom_sizes"]
    row = steps.profile_model("tiny", 8, "fp32", steps=3, batch=1, device=device, custom_sizes=sizes)
    per_step = row["sm_clock_mhz"]
    ok = (
        row["status"] == "ok"
        and len(per_step) == 3
        and all(clocked({"sm_clock_mhz": c}, cuda) for c in per_step)
    )
    check(ok, f"CS336 steps: {row['status']}, clock per step {per_step} ({row['clock_source']})")

    a = torch.randn(512, 512, device=device)
    listing = kernels.device_kernels(lambda: a @ a, device, calls=2)
    warmed = listing.get("warmup_s") is not None and listing["warmup_s"] >= 1.0
    ok = (
        (listing.get("kernels") and warmed and clocked(listing, True))
        if cuda
        else bool(listing.get("reason"))
    )
    check(ok, f"CS336 device kernels: {len(listing.get('kernels', []))} kernels, warm-up {listing.get('warmup_s')} s, "
              f"clock {listing.get('sm_clock_mhz')} {listing.get('reason', '')}")  # fmt: skip

    summary = breakdown.profile_breakdown("tiny", 8, "fp32", batch=1, warmup=1, steps=1, device=device,
                                          custom_sizes=sizes)  # fmt: skip
    check(
        clocked(summary, cuda),
        f"CS336 breakdown: clock {summary['sm_clock_mhz']} ({summary['clock_source']})",
    )

    scan = attention_scan.scan_one(16, 64, batch=1, iterations=2, device=device)
    check(scan["status"] == "ok" and scan.get("ok") is True,
          f"CS336 scan: {scan['status']}, checked {scan.get('ok')} (rel_l2 {scan.get('rel_l2')})")  # fmt: skip


def flux_checks(device, cuda: bool, check) -> None:
    import torch
    import torch.nn.functional as F

    from attnbench.bench import timing_methods
    from attnbench.studies.flux_attention import measure

    q = torch.randn(1, 4, 256, 64, device=device)

    def attention():
        return F.scaled_dot_product_attention(q, q, q)

    options = {"min_reps": 5, "min_time_ms": 5.0, "warmup_reps": 1, "max_reps": 50}
    methods = timing_methods.compare(attention, timing_options=options, grad=False, reps=3, idle_s=0.01,
                                     device=device.type)  # fmt: skip
    for name, record in methods.items():
        warm = record.get("warmup")
        check(clocked(record, cuda) and bool(warm),
              f"Flux timing method {name}: {record['ms']:.4f} ms, clock {record.get('sm_clock_mhz')}, warm-up {warm}")  # fmt: skip
    if not cuda:  # the bare side is a CUDA-event loop: the trust check is a GPU's alone
        return
    trust = measure.trust_rounds(attention, options, device=device.type, rounds=1, reps=20)
    sides = [{"sm_clock_mhz": trust[f"{side}_sm_clock_mhz"]} for side in ("harness", "bare")]
    check(all(clocked(s, cuda) for s in sides),
          f"Flux trust: harness {trust['harness_ms']:.4f} ms at {trust['harness_sm_clock_mhz']}, "
          f"bare {trust['bare_ms']:.4f} ms at {trust['bare_sm_clock_mhz']}")  # fmt: skip


def dilated_checks(device, cuda: bool, check) -> None:
    from attnbench.studies.dilated_attention import checks, profiles

    config = profiles.resolve("smoke", False)
    config["breakdown"] = {**config["breakdown"], "passes": ["fwd"]}
    if cuda:  # the gather path on cuDNN, as the report's breakdown (an unavailable backend says why)
        config["breakdown"]["backends"] = ["cudnn"]
    (entry,) = checks.breakdown(config, device=device.type, timing_options=config["timing"])
    clocks = [entry.get(f"{part}_sm_clock_mhz") for part in ("total", "kernels")]
    ok = entry.get("status") == "ok" and all(clocked({"sm_clock_mhz": c}, cuda) for c in clocks)
    check(
        ok,
        f"dilated breakdown ({entry['backend']}): {entry.get('status')}, clocks {clocks} {entry.get('reason', '')}",
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    args = parser.parse_args(argv)
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print("needs a CUDA device (or --device cpu)")
        return 2
    device, cuda = torch.device(args.device), args.device == "cuda"
    failures: list[str] = []

    def check(ok: bool, text: str) -> None:
        print(("ok   " if ok else "FAIL ") + text, flush=True)
        if not ok:
            failures.append(text)

    for group in (cs336_checks, flux_checks, dilated_checks):
        try:
            group(device, cuda, check)
        except Exception as exc:  # noqa: BLE001 - one path's crash is its failure; the others still run
            check(False, f"{group.__name__}: {type(exc).__name__}: {exc}")
    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
