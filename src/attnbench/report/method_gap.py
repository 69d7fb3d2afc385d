"""What the timing method alone is worth on a page: one kernel, reached through several providers, timed
both ways at one shape.

Why. bench.timing times a launch-bound call (host time at least half its GPU time) in queued bursts, each
behind a one-warp spin during which the GPU idles, and every other call back to back at the power limit.
Whether a provider is launch-bound depends on its wrapper and on the host, not on its kernel: on the
H100's Flux page FlashAttention-3's own wrapper (`flash_attn3`, 0.14 ms of host time per 0.39 ms call)
ran back to back while xFormers' op around the same kernel (`xformers_fa3`) ran queued. Where one kernel
was timed both ways at one shape, the ratio of the two is the method's effect with the kernel held fixed;
where its wrappers were timed the same way, their agreement is the control. Neither needs a GPU: the
page's own rows hold both.

Each group below lists providers that run one device kernel for Flux's bf16 dense attention (xFormers'
fa3F/fa3B call the flash_attn_3 package's ops; torch.compile around them leaves the custom op as it is).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import dataclass

from attnbench.report.workload import workload_key

QUEUED = "cuda_event_per_call_queued"  # bench.timing: a launch-bound call, timed in bursts behind a spin
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


def _queued(row: Mapping) -> bool:
    return row.get("timing_method") == QUEUED


def _fastest(rows: list[Mapping]) -> Mapping:
    return min(rows, key=lambda r: r["ms_median"])


def points(rows: list[Mapping]) -> list[Point]:
    """Every (kernel, pass, length) with correct rows of at least two of its providers (a wrong or failed
    row says nothing of timing)."""
    rows = [r for r in rows if r.get("status") == "ok" and r.get("ok") is not False]
    found = []
    for kernel, providers in SAME_KERNEL.items():
        mine: dict[tuple[str, int, str], list[Mapping]] = {}  # one problem: pass, length, the whole workload
        for r in rows:
            if r.get("provider") in providers and r.get("ms_median"):
                mine.setdefault((str(r.get("pass")), r.get("seqlen_q") or 0, workload_key(r)), []).append(r)
        for (pass_, seqlen, _), group in sorted(mine.items()):
            if len({r["provider"] for r in group}) < 2:
                continue
            burst = [r for r in group if _queued(r)]
            steady = [r for r in group if not _queued(r)]
            if burst and steady:
                found.append(Point(kernel, pass_, seqlen, _fastest(steady), _fastest(burst), True))
            else:
                slowest = max(group, key=lambda r: r["ms_median"])
                found.append(Point(kernel, pass_, seqlen, _fastest(group), slowest, False))
    return found


def words(rows: list[Mapping]) -> str:
    """The page's measured method effect, conclusion first ("The timing method alone is worth about 8% on
    this page: …"), or "" where no kernel was timed both ways."""
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
    text = (f"The timing method alone is worth about {statistics.median(gaps):.0%} on this page: {kernel}'s "
            f"kernel {_range(gaps)} ({steady_names}) than queued behind an idle GPU ({burst_names}) at "
            f"{len(both)} of its {_points(len(mine), 'pass-length point')}")  # fmt: skip
    control = sorted(p.gap for p in mine if not p.both_ways)
    if control:
        text += f"; timed the same way, its wrappers agree within {control[-1]:.1%} ({_points(len(control))})"
    return text + "."


def _points(n: int, word: str = "point") -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _range(gaps: list[float]) -> str:
    """ "ran 6.6% to 9.3% slower back to back" (sorted gaps), "faster" where every gap is negative, the
    signed range where they straddle zero."""
    low, high = gaps[0], gaps[-1]
    if low > 0 or high < 0:
        a, b = sorted((abs(low), abs(high)))
        span = f"{a:.1%}" if a == b else f"{a:.1%} to {b:.1%}"
        return f"ran {span} {'slower' if low > 0 else 'faster'} back to back"
    return f"ran {low:+.1%} to {high:+.1%} back to back against queued"


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
