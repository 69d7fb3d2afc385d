"""Rounds: a sweep measured K times over its whole grid, each row kept as its fastest round.

Why. Some kernels run in one of two power states at the same shape: on an H200, FlashAttention-3's
forward at Flux's shapes draws ~660 W at 1965 MHz, just under the 700 W limit, and from one run of the
sweep to the next it lands either there or power-limited at 1575-1710 MHz, 9-13 % slower, at the same
temperature (measurements/flux_repeatability-preheat-nvidia-h200.json: 54-58 °C both ways). No warm-up
or preheat removes that: one sweep against another repeated with a 95th-percentile spread of 5.5 % (9.2 %
without the preheat), the fastest of two sweeps against the fastest of two others with 1.7 % (median
0.2 %). So a report that must repeat within 5 % times its grid `rounds` times, each round a full pass over
the grid (a row's rounds are as far apart as the whole sweep, as in that measurement), and keeps per row:

- a row that failed in any round (`error`, `incorrect`): that round's row. A kernel that is wrong or
  crashes once is reported so, never hidden behind a good round;
- else the ok round with the smallest median time: the kernel's speed in the better power state, which
  is what it reaches when the GPU lets it (the others stay in `round_ms`);
- else (no ok round: unsupported, unavailable, oom, skipped) the first round's row.

The kept row says so: `extra["rounds"]` (K), `extra["round_ms"]` (each round's median, None where a
round was not ok) and `extra["round_spread"]` ((slowest - fastest) / fastest over the ok rounds).

    rows = fastest_of_rounds([run_1_rows, run_2_rows])   # what run_sweep(..., rounds=2) returns
"""

from __future__ import annotations

from attnbench.rows import Result
from attnbench.rows.vocab import Status

FAILED = (Status.ERROR, Status.INCORRECT)


def _key(row: Result) -> tuple[str, str, str]:
    return (row.provider, row.workload.label(), row.pass_)


def _usable(row: Result) -> bool:
    return row.status == Status.OK and row.ms_median is not None


def fastest_of_rounds(rounds: list[list[Result]]) -> list[Result]:
    """One row per (provider, workload, pass) of the first round, in its order, chosen as the module says.

    Every round must hold the same grid (run_sweep's rounds do): a row missing from a later round is a
    ValueError naming it, since a silent gap would make its 'fastest' a single measurement."""
    if not rounds:
        raise ValueError("fastest_of_rounds needs at least one round of rows")
    if len(rounds) == 1:
        return list(rounds[0])
    by_round = [{_key(r): r for r in rows} for rows in rounds]
    kept = []
    for first in rounds[0]:
        key = _key(first)
        missing = [i + 1 for i, rows in enumerate(by_round) if key not in rows]
        if missing:
            raise ValueError(f"row {' / '.join(key)} is missing from round(s) {missing} of {len(rounds)}")
        candidates = [rows[key] for rows in by_round]
        failed = [r for r in candidates if r.status in FAILED]
        usable = [r for r in candidates if _usable(r)]
        if failed:
            row = failed[0]
        elif usable:
            row = min(usable, key=lambda r: r.ms_median)
        else:
            row = first
        times = [r.ms_median if _usable(r) else None for r in candidates]
        measured = [t for t in times if t is not None]
        row.extra["rounds"] = len(rounds)
        row.extra["round_ms"] = times
        if len(measured) >= 2:
            row.extra["round_spread"] = (max(measured) - min(measured)) / min(measured)
        kept.append(row)
    return kept
