"""What the timing method is worth, measured on purpose: scripts/probe_duty_cycle.py's files in measurements/.

Why. bench.timing times a launch-bound call in queued batches behind a one-warp spin, so the GPU idles
before each batch and starts it below its power limit, and every other call back to back, at the limit.
A page that ranks a queued row against a back-to-back one mixes the two. The probe times one call all
three ways in one process, on the same inputs (a file per pass and machine):
- sustained: back to back, at the power limit;
- queued_spin: the protocol's queued batches behind the idle spin;
- queued_matmul: the same batches behind bf16 GEMMs (the batch starts at the power limit).
So the lead of one provider over another *timed alike* is read off one mode, and the Flux answer gives it
beside the lead its page measured across the two methods.

A back-to-back time counts only where the host enqueued each call faster than the GPU ran it (host time
per call below the call's time): otherwise the events timed the host. A file is matched to rows by its
machine_id (host and GPU model, as the repeatability files): another card's power management differs.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from pathlib import Path

from attnbench.report import measurements
from attnbench.report.peak_share import number

DUTY_CYCLE = "measurements/duty_cycle*.json"  # scripts/probe_duty_cycle.py --out
MODES = {  # the probe's modes and what the page calls them
    "sustained": "back to back",
    "queued_spin": "queued behind an idle GPU",
    "queued_matmul": "queued behind GEMMs",
}
HEADING = "The timing method, measured on purpose (scripts/probe_duty_cycle.py)"


def probe_of(env_ids: set[str], pass_: str, start: Path | None = None) -> dict | None:
    """The nearest duty-cycle file made on the machine of `env_ids` for `pass_` (a file that names no
    pass is a forward's: the probe timed only forwards then), with its file name under "file"; None where
    that machine has none. Of several, the last by name."""
    found = None
    for path in measurements.nearest(DUTY_CYCLE, start):
        doc = measurements.load(path, "scripts/probe_duty_cycle.py")
        if doc.get("machine_id") in env_ids and doc.get("pass", "fwd") == pass_:
            found = {**doc, "file": f"measurements/{path.name}"}
    return found


def at_point(doc: Mapping, row: Mapping) -> bool:
    """Whether the probe timed the workload of `row`: its batch, tokens, heads and head dim (bf16, full)."""
    batch, heads, tokens, dim = (doc.get("shape") or (None,) * 4)[:4]
    return (row.get("batch"), row.get("heads_q"), row.get("seqlen_q"), row.get("seqlen_k"), row.get("head_dim")) == (
        batch, heads, tokens, tokens, dim) and row.get("mask", "full") == "full"  # fmt: skip


def times(doc: Mapping) -> dict[str, dict[str, float]]:
    """provider → mode → ms per call (the mean of the mode's repetitions). A back-to-back time whose host
    enqueue time per call is not below it is left out: the GPU waited for the host."""
    out: dict[str, dict[str, float]] = {}
    for line in doc.get("lines") or []:
        if not isinstance(line, Mapping) or not isinstance(line.get("modes"), Mapping):
            continue  # a provider the probe could not run (`not_measured`) has no times
        host = number(line.get("host_ms_per_call"))
        modes = {}
        for mode, reps in line["modes"].items():
            ms = [number(r.get("ms_median")) for r in reps if isinstance(r, Mapping)]
            ms = [m for m in ms if m]
            if mode in MODES and ms:
                modes[mode] = statistics.fmean(ms)
        if "sustained" in modes and (host is None or host >= modes["sustained"]):
            del modes["sustained"]
        out[str(line.get("provider"))] = modes
    return out


def leads(doc: Mapping, best: str, other: str) -> dict[str, float]:
    """mode → how many times faster `best` ran than `other` there (other's ms over best's), in every mode
    the probe timed both."""
    timed = times(doc)
    a, b = timed.get(best) or {}, timed.get(other) or {}
    return {mode: b[mode] / a[mode] for mode in MODES if mode in a and mode in b}


def lull_range(doc: Mapping) -> tuple[float, float, int] | None:
    """(least, most, providers): how much less time a call took queued behind the idle spin than back to
    back, over the providers timed both ways; None without one."""
    saved = [1 - m["queued_spin"] / m["sustained"] for m in times(doc).values()
             if "queued_spin" in m and "sustained" in m]  # fmt: skip
    return (min(saved), max(saved), len(saved)) if saved else None


def lead_words(doc: Mapping, best: str, other: str) -> str:
    """ "timed alike, 1.08× back to back and 1.08× queued behind an idle GPU (measurements/…)", or "" where
    the probe did not time both; the GEMM mode is left to the table (its lull differs per provider)."""
    found = leads(doc, best, other)
    said = [f"{ratio:.2f}× {MODES[mode]}" for mode, ratio in found.items() if mode != "queued_matmul"]
    if not said:
        return ""
    return f"timed alike, {' and '.join(said)} ({doc['file']})"


def lull_words(doc: Mapping) -> str:
    """What the lull is worth on this machine, measured on purpose: a clause for the answer's caveat of a
    lead that crossed the two methods ("" without a provider timed both ways)."""
    span = lull_range(doc)
    if not span:
        return ""
    shape = doc.get("shape") or ()
    at = f" at S {shape[2]}" if len(shape) > 2 else ""
    return (f"measured on purpose{at} ({doc['file']}, scripts/probe_duty_cycle.py), the same call queued behind an "
            f"idle GPU took {_span(span)} less time than back to back ({span[2]} providers)")  # fmt: skip


def table(doc: Mapping) -> list[dict]:
    """The probe's file as rows for the summary: per provider, ms in each mode and its SM clock."""
    rows = []
    for line in doc.get("lines") or []:
        if not isinstance(line, Mapping):
            continue
        if not isinstance(line.get("modes"), Mapping):
            rows.append({"provider": line.get("provider"), "not measured": line.get("not_measured", "")})
            continue
        timed, row = times(doc).get(str(line.get("provider")), {}), {"provider": line.get("provider")}
        for mode, name in MODES.items():
            clocks = [number(r.get("sm_clock_mhz")) for r in line["modes"].get(mode) or []]
            clocks = [c for c in clocks if c]
            row[f"{name} (ms)"] = timed.get(mode)
            row[f"{name} (MHz)"] = statistics.median(clocks) if clocks and mode in timed else None
        row["host ms per call"] = number(line.get("host_ms_per_call"))
        rows.append(row)
    return rows


FORMATS = {
    **{f"{name} (ms)": (lambda v: f"{v:.4f}") for name in MODES.values()},
    **{f"{name} (MHz)": (lambda v: f"{v:.0f}") for name in MODES.values()},
    "host ms per call": lambda v: f"{v:.3f}",
}
PASS_WORDS = {"fwd": "forward", "fwd_bwd": "forward + backward"}


def sections(env_ids: set[str], start: Path | None = None) -> list[tuple[str, list[dict]]]:
    """The summary's section (after HEADING), per pass the probe timed on this machine: the words (what,
    where, the lull's worth) and the table's rows (`table`, formatted with FORMATS); [] where none. The
    notebook lays them out, so that a table module's edit re-keys no answer (report.answers imports this)."""
    parts = []
    for pass_, word in PASS_WORDS.items():
        doc = probe_of(env_ids, pass_, start)
        if doc is None:
            continue
        shape = doc.get("shape") or ()
        what = f"B{shape[0]} S{shape[2]} H{shape[1]} D{shape[3]} bf16" if len(shape) == 4 else "its shape"
        span = lull_range(doc)
        worth = (f" Queued behind the idle GPU, a call took {_span(span)} less time than back to back "
                 f"({span[2]} providers)." if span else "")  # fmt: skip
        words = (f"**{word}**, {what}, each mode twice in one process ({doc['file']}).{worth} A back-to-back time "
                 "is left out where the host enqueued calls slower than the GPU ran them.")  # fmt: skip
        parts.append((words, table(doc)))
    return parts


def _span(span: tuple[float, float, int]) -> str:
    """'7.3%–7.7%', or '7.4%' where both ends read the same."""
    low, high = f"{span[0]:.1%}", f"{span[1]:.1%}"
    return low if low == high else f"{low}–{high}"
