"""The CS336 systems report's tables, from rows alone (no torch; pandas imported lazily).

Rows are what systems/ wrote: training-step rows (steps.py), the profiler summary (breakdown.py), scan
rows (attention_scan.py) and bench Result rows for the kernels (kernels.py). Statistics are computed here
(mean and sample standard deviation over the measured steps after a warm-up), so changing how a table
reads never re-runs a GPU cell.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable

from attnbench.report.check_words import INCORRECT, NOT_CHECKED, OK
from attnbench.report.kernel_names import short_kernel_name

PHASES = ("forward", "backward", "optimizer")
GIB, MIB = 2**30, 2**20


# --- the write-up's tables ---------------------------------------------------------------------------------


def parse_markdown_table(text: str):
    """A pipe table (the write-up's) as a DataFrame of strings; the unnamed index column is dropped."""
    import pandas as pd

    lines = [line.strip() for line in text.strip().splitlines() if line.strip().startswith("|")]
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in lines]
    header, body = cells[0], [row for row in cells[2:]]
    frame = pd.DataFrame(body, columns=header)
    return frame.drop(columns=[""]) if "" in frame.columns else frame


def parse_scan_text(text: str):
    """The write-up's whitespace table of the attention scan: d_model, seq_len, fwd, bwd, mem (OOM kept as text)."""
    import pandas as pd

    lines = [line.split() for line in text.strip().splitlines()]
    return pd.DataFrame(lines[1:], columns=lines[0])


# --- training steps ---------------------------------------------------------------------------------------


def step_times(row: dict) -> list[float]:
    """Whole-step ms of every step: forward + backward + optimizer."""
    t = row["times_ms"]
    return [sum(parts) for parts in zip(*(t[p] for p in PHASES))]


def window(values: list[float], warmup: int, measured: int) -> list[float]:
    return values[warmup : warmup + measured]


def mean_std(values: list[float]) -> tuple[float, float] | None:
    if not values:
        return None
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


def pm(stats: tuple[float, float] | None, digits: int = 2) -> str:
    return "" if stats is None else f"{stats[0]:.{digits}f} ± {stats[1]:.{digits}f}"


def _gib(value) -> str:
    return "" if value is None else f"{value / GIB:.2f}"


def step_table(rows: Iterable[dict], precision: str, warmup: int, measured: int, attention: str = "eager"):
    """Per size and context: ms per phase (mean ± std), tokens/s, MFU (against the matmul peak at the
    steps' clock where both clocks are known; above 100 %: an error, not a share), the steps' SM clock,
    peak GiB per phase; OOM rows say where."""
    import pandas as pd

    out = []
    for row in rows:
        if row["precision"] != precision or row["attention"] != attention:
            continue
        entry = {
            "size": row["size"],
            "context": row["context"],
            "params (M)": row["params"] / 1e6,
            "status": row["status"],
        }
        if row["status"] == "ok":
            step = mean_std(window(step_times(row), warmup, measured))
            for phase in PHASES:
                entry[f"{phase} ms"] = pm(mean_std(window(row["times_ms"][phase], warmup, measured)))
            entry["step ms"] = pm(step)
            seconds = step[0] / 1e3 if step else None
            entry["tokens/s"] = f"{row['batch'] * row['context'] / seconds:,.0f}" if seconds else ""
            clock = _median_clock(window(row.get("sm_clock_mhz") or [], warmup, measured))
            entry.update(_mfu(row, seconds, clock))
            entry["SM clock MHz"] = "" if clock is None else f"{clock:.0f}"
            entry["checked"] = NOT_CHECKED
            for phase in PHASES:
                entry[f"peak GiB {phase}"] = _gib(row["peak_mem_bytes"].get(phase))
        else:
            entry["reason"] = row["reason"]
        out.append(entry)
    return pd.DataFrame(out).fillna("")


# A model step's outputs are compared with nothing (random weights and tokens, timed for its phases); the
# attention kernels inside it are checked in the kernel table. Each timed row says so (NOT_CHECKED).

# MFU's column names say which peak it is a share of: the measured matmul peak scaled to the clock the
# measured steps ran at (bench.flops.MeasuredPeak.at_clock, as kernel rows are scored), or, where the
# row lacks either clock, that peak as measured, at the GEMM's own (power-limited) clock
MFU_AT_STEPS_CLOCK = "MFU (matmul peak at the steps' SM clock)"
MFU_AT_PEAKS_CLOCK = "MFU (matmul peak as measured, its own clock)"


def _mfu(row: dict, seconds: float | None, steps_clock: float | None) -> dict:
    """The row's MFU cell, under the column naming its peak; a share above 100 % is a measurement error
    (the step's FLOPs, its time or the peak is wrong), never a result: the cell says so and the row's
    status becomes error with bench.flops's reason."""
    found = _mfu_share(row, seconds, steps_clock)
    if found is None:
        return {}
    share, column, over = found
    if over:
        return {column: "ERROR: above 100% (measurement error)", "status": "error", "reason": over}
    return {column: f"{share:.1%}"}


def _mfu_share(row: dict, seconds: float | None, steps_clock: float | None) -> tuple[float, str, str] | None:
    """(MFU, the column naming its peak, why it is above 100 % or ""); None without a time or a peak."""
    from attnbench.bench import flops

    peak = flops.restore_peak(row.get("peak_tflops"), row.get("peak_sm_clock_mhz"))
    if not seconds or not peak:
        return None
    scaled = bool(peak.sm_clock_mhz and steps_clock)
    denominator = peak.at_clock(steps_clock)
    achieved = row["flops"]["train"] / seconds / 1e12
    name = f"measured matmul peak {f'scaled to {steps_clock:.0f} MHz' if scaled else 'as measured'}"
    over = flops.over_peak(achieved, {name: denominator}) or ""
    return achieved / denominator, MFU_AT_STEPS_CLOCK if scaled else MFU_AT_PEAKS_CLOCK, over


def step_mfu(row: dict, warmup: int, measured: int) -> float | None:
    """The row's MFU as the step table shows it: the training FLOPs over the mean whole step (forward +
    backward + optimizer) of the measured window, against the matmul peak at the steps' SM clock; None
    for a row not ok, without a time or a peak, or above 100 % (a measurement error, never a result)."""
    if row.get("status") != "ok":
        return None
    step = mean_std(window(step_times(row), warmup, measured))
    clock = _median_clock(window(row.get("sm_clock_mhz") or [], warmup, measured))
    found = _mfu_share(row, step[0] / 1e3 if step else None, clock)
    return None if found is None or found[2] else found[0]


def _median_clock(per_step: list) -> float | None:
    """The measured steps' SM clock: the median of their per-step medians (None where none was sampled:
    a CPU run, or rows measured before steps sampled the clock)."""
    known = [mhz for mhz in per_step if mhz is not None]
    return statistics.median(known) if known else None


def _clock(per_step: list) -> str:
    clock = _median_clock(per_step)
    return "" if clock is None else f"{clock:.0f}"


def warmup_table(rows: Iterable[dict], precision: str, warmups: list[int], measured: int):
    """Whole-step ms (mean ± std over `measured` steps) after each number of warm-up steps, and step 0."""
    import pandas as pd

    out = []
    for row in rows:
        if row["precision"] != precision or row["attention"] != "eager" or row["status"] != "ok":
            continue
        steps = step_times(row)
        entry = {"size": row["size"], "context": row["context"], "first step ms": f"{steps[0]:.2f}"}
        for w in warmups:
            entry[f"warm-up {w}: step ms"] = pm(mean_std(window(steps, w, measured)))
        out.append(entry)
    return pd.DataFrame(out)


def attention_variants_table(rows: Iterable[dict], warmup: int, measured: int):
    """Step ms per model size with each attention kernel, its MFU (as the step table's) and the speedup
    over eager."""
    import pandas as pd

    by_size: dict[str, dict] = {}
    for row in rows:
        entry = by_size.setdefault(row["size"], {"size": row["size"], "context": row["context"]})
        if row["status"] != "ok":
            entry[f"{row['attention']} step ms"] = f"{row['status']}: {row['reason'][:60]}"
            continue
        step = mean_std(window(step_times(row), warmup, measured))
        entry[f"{row['attention']} step ms"] = pm(step)
        entry[f"{row['attention']} SM clock MHz"] = _clock(
            window(row.get("sm_clock_mhz") or [], warmup, measured)
        )
        mfu = step_mfu(row, warmup, measured)  # as the step table's MFU column, so the answer's is found here
        entry[f"{row['attention']} MFU"] = "" if mfu is None else f"{mfu:.1%}"
        entry[f"_{row['attention']}"] = step[0]
        entry["checked"] = NOT_CHECKED
    for entry in by_size.values():
        for kernel in ("sdpa", "triton"):
            if f"_{kernel}" in entry and "_eager" in entry:
                entry[f"{kernel} speedup"] = f"{entry['_eager'] / entry[f'_{kernel}']:.2f}x"
    frame = pd.DataFrame(list(by_size.values()))
    return frame[[c for c in frame.columns if not c.startswith("_")]]


# --- where the time goes -------------------------------------------------------------------------------


def breakdown_clock(summary: dict) -> str:
    """The SM clock the profiled steps ran at (breakdown.json), for the breakdown's heading."""
    if "sm_clock_mhz" not in summary:
        return "SM clock not recorded (profiled before the breakdown sampled it)"
    if summary["sm_clock_mhz"] is not None:
        return f"SM clock {summary['sm_clock_mhz']:.0f} MHz while profiled ({summary.get('clock_source')})"
    if summary.get("timer") == "cpu_operators":
        return "CPU operators: no GPU clock"
    return "SM clock not sampled (no clock source)"


def top_kernels_table(summary: dict, phase: str):
    import pandas as pd

    top = summary["phases"][phase]["top"]
    return pd.DataFrame(
        [
            {
                "kernel": short_kernel_name(t["kernel"], width=90),
                "µs per step": f"{t['us_per_step']:.0f}",
                "calls per step": f"{t['calls_per_step']:.0f}",
                "share of phase": f"{t['share']:.1%}",
            }
            for t in top
        ]
    )


def block_share_table(summary: dict):
    """Per phase: the share of attention (matmul, softmax, other), MLP (matmul, other) and the rest."""
    import pandas as pd

    out = []
    for phase, data in summary["phases"].items():
        parts = data["blocks_us_per_step"]
        total = sum(parts.values()) or 1.0
        entry = {"phase": phase, "µs per step": f"{total:.0f}"}
        for block in ("attention", "mlp"):
            for cls in ("matmul", "softmax", "other"):
                if block == "mlp" and cls == "softmax":
                    continue
                entry[f"{block} {cls}"] = f"{parts.get(f'{block}/{cls}', 0.0) / total:.1%}"
        rest = sum(v for k, v in parts.items() if k.startswith("rest/"))
        entry["rest (norms, embedding, loss, optimizer)"] = f"{rest / total:.1%}"
        out.append(entry)
    return pd.DataFrame(out)


# --- the attention scan -----------------------------------------------------------------------------------


def _ms(row: dict, key: str) -> str:
    if row["status"] == INCORRECT:  # a time of a wrong result is no result (as the kernel tables show)
        return INCORRECT
    if row.get(key):
        return f"{row[key]['mean']:.3f}"
    return "OOM" if row["status"] == "oom" else ("error" if row["status"] == "error" else "")


def _mhz(row: dict) -> str:
    """ "1755 / 1740": the SM clock the forward and the backward were timed at (NVML's median)."""
    clocks = [(row.get(key) or {}).get("sm_clock_mhz") for key in ("forward_ms", "backward_ms")]
    return " / ".join("?" if mhz is None else f"{mhz:.0f}" for mhz in clocks) if any(clocks) else ""


def _mib(value) -> str:
    return "" if value is None else f"{value / MIB:,.0f}"


def scan_check(row: dict) -> str:
    """A scan row's check against the fp32 reference: ok or incorrect with the worst rel_l2 and tensor, or
    "not checked" and why (a row that stopped early; rows written before the check existed)."""
    if not row.get("status"):
        return ""  # no such row (a compiled shape the scan did not reach)
    if row.get("ok") is not None:
        worst = f"{row['rel_l2']:.1e} {row.get('check_worst') or ''}".strip()
        return f"{OK if row['ok'] else INCORRECT} ({worst})"
    if row["status"] in ("oom", "error"):
        return f"not checked ({row['status']})"
    return row.get("check_reason") or "not checked (measured before the scan checked its rows)"


def scan_table(eager: list[dict], compiled: list[dict]):
    """Eager and compiled side by side, with the memory model's prediction and measured/predicted, and
    each variant's check against the fp32 reference."""
    import pandas as pd

    compiled_by = {(r["d_model"], r["seq"]): r for r in compiled}
    out = []
    for row in eager:
        other = compiled_by.get((row["d_model"], row["seq"]), {"status": ""})
        measured = row.get("mem_before_backward_bytes")
        predicted = row["model"]["before_backward"]
        out.append({
            "d_model": row["d_model"], "seq": row["seq"],
            "eager fwd ms": _ms(row, "forward_ms"), "eager bwd ms": _ms(row, "backward_ms"),
            "eager fwd / bwd MHz": _mhz(row),
            "eager MiB before bwd": _mib(measured), "model MiB": _mib(predicted),
            "measured / model": _ratio(measured, predicted),
            "eager bwd peak MiB": _mib(row.get("peak_backward_bytes")),
            "model bwd peak MiB": _mib(row["model"]["peak_backward"]),
            "bwd measured / model": _ratio(row.get("peak_backward_bytes"), row["model"]["peak_backward"]),
            "compiled fwd ms": _ms(other, "forward_ms") if other.get("status") else "",
            "compiled bwd ms": _ms(other, "backward_ms") if other.get("status") else "",
            "compiled fwd / bwd MHz": _mhz(other),
            "compiled MiB before bwd": _mib(other.get("mem_before_backward_bytes")),
            "eager check": scan_check(row), "compiled check": scan_check(other),
        })  # fmt: skip
    return pd.DataFrame(out)


def _ratio(measured, predicted) -> str:
    return "" if measured is None or not predicted else f"{measured / predicted:.3f}"


def measured_limit(eager: list[dict], d_model, model_seq: int) -> tuple[float, int] | None:
    """(the measured / model ratio of the eager backward peak at the longest length that measured one, at
    this d_model; the length the model's limit moves to under it). The S² term dominates there (at short
    lengths the allocator's fixed megabytes do, and the ratio says nothing of the limit), so a peak r
    times the model's runs out at the model's length over √r. None where no row measured its peak."""
    measured = [r for r in eager if str(r["d_model"]) == str(d_model) and r.get("peak_backward_bytes")
                and r["model"].get("peak_backward")]  # fmt: skip
    if not measured:
        return None
    longest = max(measured, key=lambda r: r["seq"])
    ratio = longest["peak_backward_bytes"] / longest["model"]["peak_backward"]
    return ratio, int(model_seq / ratio**0.5)


def scan_failures(rows: Iterable[dict]) -> list[str]:
    return [
        f"{r['variant']} d_model={r['d_model']} seq={r['seq']}: {r['status']}: {r['reason']}"
        for r in rows
        if r["status"] != "ok"
    ]


def read_json_lines(path) -> list[dict]:
    """Rows written by systems/ (one JSON object per line); a bad line names the file and line."""
    import json

    rows = []
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise ValueError(f"{path}:{lineno}: not a JSON row: {exc}") from exc
    return rows
