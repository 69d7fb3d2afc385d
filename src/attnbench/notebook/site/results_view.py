"""The curated view of a JSONL of benchmark result rows (README: results.jsonl), recognised by content:
the measured rows with the columns a kernel engineer compares, the providers that did not run grouped
with their reason. artifacts.py shows every column of every row folded below it."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from attnbench.notebook.site.tables import MAX_RECORDS, MAX_TABLE_ROWS, Shown, human_size, shown, table

RESULT_KEYS = {"provider", "status", "pass", "ms_median"}
NOT_MEASURED = ("unavailable", "unsupported")  # grouped by provider and reason instead of one row per shape
# A row's keys that say what was measured and how it went; every other top-level key describes the
# workload (shape columns where they vary, constants where they do not), in the order rows give them.
NOT_WORKLOAD = {"provider", "family", "status", "pass", "reason", "ms_median", "ms_p20", "ms_p80", "reps",
                "tflops", "mfu", "peak_mem_bytes", "setup_ms", "timer", "max_abs", "mean_abs", "rel_l2",
                "ok", "env", "extra"}  # fmt: skip


def _workload_columns(records: list[dict]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(k for r in records for k in r if k not in NOT_WORKLOAD))


def results(records: list[dict], total: int) -> dict[str, Any]:
    measured = [r for r in records if r.get("status") not in NOT_MEASURED]
    WORKLOAD = _workload_columns(records)
    varying = [c for c in WORKLOAD if len({json.dumps(r.get(c)) for r in measured}) > 1]
    constants = [
        f"{c} {_plain(measured[0][c])}"
        for c in (*WORKLOAD, "timer")
        if c not in varying and measured and measured[0].get(c) is not None
    ]
    # Self-attention sweeps have seqlen_q = seqlen_k in every row: one column says both.
    one_seq = {"seqlen_q", "seqlen_k"} <= set(varying) and all(
        r["seqlen_q"] == r["seqlen_k"] for r in measured
    )
    shape = [
        ("seqlen", "seqlen_q = seqlen_k", lambda r: shown(r.get("seqlen_q")))
        if one_seq and c == "seqlen_q"
        else (c, "", lambda r, c=c: shown(r.get(c)))
        for c in varying
        if not (one_seq and c == "seqlen_k")
    ]
    columns = [
        ("provider", "", lambda r: shown(r.get("provider"))),
        ("pass", "", lambda r: shown(r.get("pass"))),
        *shape,
        *METRICS,
    ]
    rows = [[get(r) for _, _, get in columns] for r in measured[:MAX_TABLE_ROWS]]
    groups: dict[tuple, dict[str, Any]] = {}
    for r in records:
        if r.get("status") in NOT_MEASURED:
            key = (r.get("provider"), r.get("status"), r.get("reason") or "")
            group = groups.setdefault(
                key, {"provider": key[0], "status": key[1], "reason": key[2], "rows": 0, "passes": {}}
            )
            group["rows"] += 1
            group["passes"][r.get("pass")] = None
    for group in groups.values():
        group["passes"] = ", ".join(str(p) for p in group["passes"])
    note = f"Read the first {MAX_RECORDS} of {total} lines." if total > MAX_RECORDS else ""
    cpu_timer = any(r.get("timer") == "perf_counter" for r in measured)
    measured_table = table([n for n, _, _ in columns], rows, len(measured), note, [t for _, t, _ in columns])
    return {
        "measured": measured_table,
        "constants": constants,
        "not_measured": list(groups.values()),
        "cpu_timer": cpu_timer,
    }


def _plain(value: Any) -> str:
    return json.dumps(value) if isinstance(value, (dict, list, bool)) else str(value)


def _number(key: str, fmt: Callable[[float], str], css: str = "num") -> Callable[[dict], Shown]:
    def get(record: dict) -> Shown:
        value = record.get(key) if not key.startswith("extra.") else (record.get("extra") or {}).get(key[6:])
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            return shown(value)
        return Shown(fmt(value), repr(value), css)

    return get


def _spread(record: dict) -> Shown:
    """(p80 - p20) / median: the run-to-run noise of the timing, as a percentage."""
    p20, p80, median = record.get("ms_p20"), record.get("ms_p80"), record.get("ms_median")
    if not all(isinstance(v, (int, float)) for v in (p20, p80, median)) or not median:
        return Shown("")
    return Shown(f"{(p80 - p20) / median:.1%}", f"p20 {p20:.4g} ms, p80 {p80:.4g} ms", "num")


def _ok(record: dict) -> Shown:
    ok = record.get("ok")
    tolerance = (record.get("extra") or {}).get("tolerance") or {}
    limits = ", ".join(f"{k} ≤ {v}" for k, v in tolerance.items() if k != "name")
    title = f"tolerance {tolerance.get('name', '?')}: {limits}" if tolerance else ""
    if ok is None:
        return Shown("", title)
    return Shown("✓" if ok else "✗ no", title, "good" if ok else "bad")


def _status(record: dict) -> Shown:
    status = str(record.get("status"))
    return Shown(status, "", "good" if status == "ok" else "bad")


def _reason(record: dict) -> Shown:
    text = record.get("reason") or (record.get("extra") or {}).get("note") or ""
    return shown(text)


def _ms(v: float) -> str:
    return f"{v:.4f}" if v < 100 else f"{v:.1f}"


METRICS: list[tuple[str, str, Callable[[dict], Shown]]] = [
    ("status", "", _status),
    ("ms", "median time per call (CUDA events, cold L2)", _number("ms_median", _ms)),
    ("spread", "(p80 − p20) / median of the repetitions", _spread),
    (
        "TFLOP/s",
        "exact FLOPs / median time",
        _number("tflops", lambda v: f"{v:.1f}" if v >= 10 else f"{v:.3g}"),
    ),
    ("MFU", "against the bf16 matmul peak measured in the same run", _number("mfu", lambda v: f"{v:.1%}")),
    (
        "peak mem",
        "peak device memory of the timed calls, inputs included",
        _number("peak_mem_bytes", lambda v: human_size(int(v))),
    ),
    (
        "setup ms",
        "compile, autotune, mask construction and first call: never timed",
        _number("setup_ms", lambda v: f"{v:.1f}" if v < 100 else f"{v:,.0f}"),
    ),
    (
        "rel_l2",
        "relative L2 error against the fp32 reference (backward: worst of out, dq, dk, dv)",
        _number("rel_l2", lambda v: f"{v:.1e}"),
    ),
    ("ok", "within the tolerance (hover a cell for it)", _ok),
    ("reps", "timed repetitions", _number("reps", str)),
    ("reason / note", "", _reason),
]
