"""What the timing method alone is worth on a page: one kernel, reached through several providers, timed
both ways at one workload.

Why. bench.timing times a launch-bound call in queued bursts, each behind a one-warp spin during which
the GPU idles, and every other call back to back at the power limit. A call is launch-bound when its
host time per call is at least half the GPU time its own warm-up measured (`timing.launch_bound`), so
one kernel's rows can land on either side: on the H100's Flux page `flash_attn3` (0.14 ms of host time
per ~0.39 ms forward) was timed back to back at 7 of its 12 points, while `xformers_fa3`, xFormers' op
around the same kernel, was queued at all 12. Where one kernel was timed both ways at one workload, the
ratio of its fastest row of each way is the method's effect with the kernel held fixed; where its
wrappers were timed the same way, their agreement is the control. Neither needs a GPU: the page's own
rows hold both.

Caveat. The split is not random: a row whose warm-up ran slow is less likely to count as launch-bound,
so back-to-back rows may be the slower starts. The control bounds how far the kernel's own speed moves
when the method does not; scripts/probe_duty_cycle.py times one call each way on purpose.

Each group below lists providers that run one device kernel for Flux's bf16 dense attention (xFormers'
fa3F/fa3B call the flash_attn_3 package's ops; torch.compile around them leaves the custom op as it is).
The gap is measured on that kernel: for another provider it is an estimate, not a measurement.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass

from attnbench.report.peak_share import above_peak, number
from attnbench.report.workload import workload_key

QUEUED = "cuda_event_per_call_queued"  # bench.timing: a launch-bound call, timed in bursts behind a spin
STEADY = "cuda_event_per_call"  # bench.timing: timed back to back (rows of other timers say nothing here)
SAME_KERNEL = {
    "FlashAttention-3": ("flash_attn3", "flash_attn3_compiled", "xformers_fa3", "xformers_fa3_compiled")
}


@dataclass(frozen=True)
class Point:
    """One kernel at one pass and length: its fastest row timed back to back and its fastest timed queued
    (`steady`/`burst`), or, where every row was timed one way, its fastest and slowest (the control)."""

    kernel: str
    pass_: str
    seqlen: int
    steady: Mapping  # back to back (the control: the fastest row)
    burst: Mapping  # queued (the control: the slowest row)
    both_ways: bool

    @property
    def gap(self) -> float:
        """How much slower `steady` ran than `burst` (the control: the slowest over the fastest), as a share."""
        return self.steady["ms_median"] / self.burst["ms_median"] - 1 if self.both_ways else (
            self.burst["ms_median"] / self.steady["ms_median"] - 1)  # fmt: skip


def _usable(row: Mapping) -> bool:
    """A correct row with a finite positive time, timed one of the two ways (a wrong row, one above a peak
    or one of another timer says nothing of the method)."""
    ms = number(row.get("ms_median"))
    return (row.get("status") == "ok" and row.get("ok") is not False and ms is not None and math.isfinite(ms)
            and ms > 0 and row.get("timing_method") in (QUEUED, STEADY) and not above_peak(row))  # fmt: skip


def _fastest(rows: list[Mapping]) -> Mapping:
    return min(rows, key=lambda r: r["ms_median"])


def points(rows: list[Mapping]) -> list[Point]:
    """Every (kernel, pass, length) with correct rows of at least two of its providers (a wrong or failed
    row says nothing of timing)."""
    rows = [r for r in rows if _usable(r)]
    found = []
    for kernel, providers in SAME_KERNEL.items():
        mine: dict[tuple[str, int, str], list[Mapping]] = {}  # one problem: pass, length, the whole workload
        for r in rows:
            if r.get("provider") in providers:
                mine.setdefault((str(r.get("pass")), r.get("seqlen_q") or 0, workload_key(r)), []).append(r)
        for (pass_, seqlen, _), group in sorted(mine.items()):
            if len({r["provider"] for r in group}) < 2:
                continue
            burst = [r for r in group if r["timing_method"] == QUEUED]
            steady = [r for r in group if r["timing_method"] == STEADY]
            if burst and steady:
                found.append(Point(kernel, pass_, seqlen, _fastest(steady), _fastest(burst), True))
            else:
                slowest = max(group, key=lambda r: r["ms_median"])
                found.append(Point(kernel, pass_, seqlen, _fastest(group), slowest, False))
    return found


def words(rows: list[Mapping]) -> str:
    """The page's measured method effect, conclusion first ("Part of a lead across the two timing methods
    is the method: timed back to back, FlashAttention-3's kernel ran 6.6% to 9.3% slower …"), or "" where
    no kernel was timed both ways."""
    found = points(rows)
    both = [p for p in found if p.both_ways]
    if not both:
        return ""
    kernel = both[0].kernel  # one group today (SAME_KERNEL); the first timed both ways speaks
    mine = [p for p in found if p.kernel == kernel]
    both = [p for p in mine if p.both_ways]
    gaps = sorted(p.gap for p in both)
    steady_names = ", ".join(sorted({p.steady["provider"] for p in both}))
    burst_names = ", ".join(sorted({p.burst["provider"] for p in both}))
    text = (f"Part of a lead across the two timing methods is the method: timed back to back ({steady_names}), "
            f"{kernel}'s kernel {_compared(gaps)} the same kernel queued behind an idle GPU ({burst_names}) at "
            f"{len(both)} of its {counted(len(mine), 'pass-length point')}")  # fmt: skip
    control = sorted(p.gap for p in mine if not p.both_ways)
    if control:
        text += f"; timed alike, its wrappers agree within {control[-1]:.1%} ({counted(len(control))})"
    return text + f"; measured on {kernel}'s kernel, an estimate for other providers."


def counted(n: int, word: str = "point") -> str:
    """'1 point', '4 providers': a count with its noun."""
    return f"{n} {word}" + ("" if n == 1 else "s")


def _compared(gaps: list[float]) -> str:
    """ "ran 6.6% to 9.3% slower (median 8.2%) than" for sorted gaps; "faster" where every gap is negative;
    the signed range where they straddle zero."""
    low, high, median = gaps[0], gaps[-1], statistics.median(gaps)
    if low > 0 or high < 0:
        a, b = sorted((abs(low), abs(high)))
        span = f"{a:.1%}" if a == b else f"{a:.1%} to {b:.1%}"
        middle = f" (median {abs(median):.1%})" if len(gaps) > 2 else ""
        return f"ran {span} {'slower' if low > 0 else 'faster'}{middle} than"
    return f"ran {low:+.1%} to {high:+.1%} (median {median:+.1%}) against"


def table(rows: list[Mapping]):
    """The points timed both ways, one line each (a pandas DataFrame; empty where there are none)."""
    import pandas as pd

    lines = [{"kernel": p.kernel, "pass": p.pass_, "seq": p.seqlen,
              "back to back": p.steady["provider"], "ms (back to back)": p.steady["ms_median"],
              "MHz (back to back)": p.steady.get("sm_clock_mhz"), "W (back to back)": p.steady.get("power_w"),
              "queued": p.burst["provider"], "ms (queued)": p.burst["ms_median"],
              "MHz (queued)": p.burst.get("sm_clock_mhz"), "W (queued)": p.burst.get("power_w"),
              "back to back slower by": p.gap}
             for p in points(rows) if p.both_ways]  # fmt: skip
    return pd.DataFrame(lines)


HEADING = (
    "The same kernel timed both ways"  # a summary's section: HEADING, `words`, then `table` with FORMATS
)
FORMATS = {**{f"ms ({m})": (lambda v: f"{v:.4f}") for m in ("back to back", "queued")},
           **{f"{unit} ({m})": (lambda v: f"{v:.0f}") for unit in ("MHz", "W") for m in ("back to back", "queued")},
           "back to back slower by": lambda v: f"{v:+.1%}"}  # fmt: skip
