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
per call below the call's time: `timed_by_gpu`, which the probe's own flags use too); otherwise the events
timed the host. The NVML clock of a mode is its median over the mode, lulls included. A file is matched to rows by its
machine_id (host and GPU model, as the repeatability files): another card's power management differs.
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path

from attnbench.report import measurements
from attnbench.report.headline import PASS_NAMES, value_range
from attnbench.report.method_gap import counted
from attnbench.report.peak_share import number

DUTY_CYCLE = "measurements/duty_cycle*.json"  # scripts/probe_duty_cycle.py --out
MADE_BY = "scripts/probe_duty_cycle.py"
MODES = {  # the probe's modes and what the page calls them
    "sustained": "back to back",
    "queued_spin": "queued behind an idle GPU",
    "queued_matmul": "queued behind GEMMs",
}
PASSES = ("fwd", "fwd_bwd")  # the passes the probe times (--pass)
HEADING = "The timing method, measured on purpose (scripts/probe_duty_cycle.py)"
FORMATS = {
    **{f"{name} (ms)": (lambda v: f"{v:.4f}") for name in MODES.values()},
    **{f"{name} (MHz, lulls included)": (lambda v: f"{v:.0f}") for name in MODES.values()},
    "host ms per call": lambda v: f"{v:.3f}",
}


def timed_by_gpu(host_ms: float | None, ms: float | None) -> bool:
    """Whether back-to-back events timed the GPU: the host enqueued each call in less time than the GPU
    ran it, so the GPU never waited for the next one."""
    return host_ms is not None and ms is not None and host_ms < ms


def problem(doc: Mapping) -> str:
    """Why a probe file cannot be used ("" when it can): its shape is four positive integers, its lines a
    list of objects each naming a provider, with either why it was not measured or its modes, each a list of
    repetition objects."""
    shape = doc.get("shape")
    if not (isinstance(shape, list) and len(shape) == 4 and all(isinstance(n, int) and n > 0 for n in shape)):
        return f"shape {shape!r} (batch, heads, tokens, head dim)"
    lines = doc.get("lines")
    if not isinstance(lines, list):
        return f"lines {type(lines).__name__} (a list)"
    for i, line in enumerate(lines):
        modes = line.get("modes") if isinstance(line, Mapping) else None
        if not isinstance(line, Mapping) or not isinstance(line.get("provider"), str):
            return f"lines[{i}] names no provider"
        if "not_measured" in line:
            continue
        if not isinstance(modes, Mapping) or not all(
            isinstance(reps, list) and all(isinstance(r, Mapping) for r in reps) for reps in modes.values()
        ):
            return f"lines[{i}] ({line['provider']}): modes are not lists of repetitions"
    return ""


@lru_cache(maxsize=64)
def _read(path: Path, mtime_ns: int) -> dict:
    """The file if it can be used, else {} after one warning naming it and why (once per process: every
    report of a build reads it)."""
    doc = measurements.load(path, MADE_BY)
    why = problem(doc) if doc else ""
    if why:
        print(f"warning: {path}: {why}; {MADE_BY} writes that, so this file is not used", file=sys.stderr)
        return {}
    return doc


_warned: set[tuple[str, ...]] = set()


def probe_of(env_ids: set[str], pass_: str, start: Path | None = None) -> dict | None:
    """The nearest duty-cycle file made on the machine of `env_ids` for `pass_` (a file that names no
    pass is a forward's: the probe timed only forwards then), with its file name under "file"; None where
    that machine has none. Of several, the last by name, and a warning names them (keep one: git keeps
    the earlier runs)."""
    found = [(path, doc) for path in measurements.nearest(DUTY_CYCLE, start)
             if (doc := _read(path, path.stat().st_mtime_ns)) and doc.get("machine_id") in env_ids
             and doc.get("pass", "fwd") == pass_]  # fmt: skip
    if len(found) > 1 and (names := tuple(str(path) for path, _ in found)) not in _warned:
        _warned.add(names)
        print(f"warning: {', '.join(names)}: one machine and pass ({pass_}) in several files; the last is used",
              file=sys.stderr)  # fmt: skip
    return {**found[-1][1], "file": f"measurements/{found[-1][0].name}"} if found else None


def at_point(doc: Mapping, row: Mapping) -> bool:
    """Whether the probe timed the workload of `row`: batch, tokens, heads (as many for keys and values)
    and head dim, bf16 and no mask, as the probe does."""
    batch, heads, tokens, dim = doc["shape"]
    return (row.get("batch"), row.get("heads_q"), row.get("heads_kv", row.get("heads_q")), row.get("seqlen_q"),
            row.get("seqlen_k"), row.get("head_dim"), row.get("dtype", "bfloat16"), row.get("mask", "full")) == (
        batch, heads, heads, tokens, tokens, dim, "bfloat16", "full")  # fmt: skip


def times(doc: Mapping) -> dict[str, dict[str, float]]:
    """provider → mode → ms per call (the mean of the mode's repetitions), for the providers measured. A
    back-to-back time the host set (not `timed_by_gpu`) is left out."""
    out: dict[str, dict[str, float]] = {}
    for line in doc["lines"]:
        if "not_measured" in line:
            continue
        modes = {}
        for mode, reps in line["modes"].items():
            ms = [m for m in (number(r.get("ms_median")) for r in reps) if m]
            if mode in MODES and ms:
                modes[mode] = statistics.fmean(ms)
        if "sustained" in modes and not timed_by_gpu(
            number(line.get("host_ms_per_call")), modes["sustained"]
        ):
            del modes["sustained"]
        out[line["provider"]] = modes
    return out


def leads(timed: Mapping, best: str, other: str) -> dict[str, float]:
    """mode → how many times faster `best` ran than `other` there (other's ms over best's), in every mode
    where `timed` (`times`) holds both."""
    fast, slow = timed.get(best) or {}, timed.get(other) or {}
    return {mode: slow[mode] / fast[mode] for mode in MODES if mode in fast and mode in slow}


def lull_sentence(timed: Mapping) -> str:
    """'took 7.3%–7.7% less time than back to back (4 providers)': how much less time a call took queued
    behind the idle spin, over the providers timed both ways; "" without one."""
    saved = [
        1 - m["queued_spin"] / m["sustained"]
        for m in timed.values()
        if "queued_spin" in m and "sustained" in m
    ]
    if not saved:
        return ""
    return (f"took {value_range(saved, lambda v: f'{v:.1%}')} less time than back to back "
            f"({counted(len(saved), 'provider')})")  # fmt: skip


def lull_words(doc: Mapping) -> str:
    """What the lull is worth on this machine, measured on purpose: a clause for the answer's caveat of a
    lead that crossed the two methods ("" without a provider timed both ways)."""
    said = lull_sentence(times(doc))
    return (f"measured on purpose at S {doc['shape'][2]} ({doc['file']}, {MADE_BY}), the same call queued behind "
            f"an idle GPU {said}") if said else ""  # fmt: skip


def table(doc: Mapping) -> list[dict]:
    """The probe's file as rows for the summary: per provider, ms in each mode and the mode's SM clock."""
    timed, rows = times(doc), []
    for line in doc["lines"]:
        if "not_measured" in line:
            rows.append({"provider": line["provider"], "not measured": line["not_measured"]})
            continue
        row = {"provider": line["provider"]}
        for mode, name in MODES.items():
            clocks = [c for c in (number(r.get("sm_clock_mhz")) for r in line["modes"].get(mode) or []) if c]
            row[f"{name} (ms)"] = timed[line["provider"]].get(mode)
            row[f"{name} (MHz, lulls included)"] = (
                statistics.median(clocks) if clocks and mode in timed[line["provider"]] else None
            )
        row["host ms per call"] = number(line.get("host_ms_per_call"))
        rows.append(row)
    return rows


def sections(env_ids: set[str], start: Path | None = None) -> list[tuple[str, list[dict]]]:
    """The summary's section (after HEADING), per pass the probe timed on this machine: the words (what,
    where, the lull's worth) and the table's rows (`table`, formatted with FORMATS); [] where none. The
    notebook lays them out, so that a table module's edit re-keys no answer (report.answers imports this)."""
    parts = []
    for pass_ in PASSES:
        doc = probe_of(env_ids, pass_, start)
        if doc is None:
            continue
        batch, heads, tokens, dim = doc["shape"]
        said = lull_sentence(times(doc))
        worth = f" Queued behind the idle GPU, a call {said}." if said else ""
        words = (f"**{PASS_NAMES[pass_]}**, B{batch} S{tokens} H{heads} D{dim} bf16, each mode twice in one process "
                 f"({doc['file']}).{worth} A back-to-back time is left out where the host enqueued calls slower "
                 "than the GPU ran them.")  # fmt: skip
        parts.append((words, table(doc)))
    return parts
