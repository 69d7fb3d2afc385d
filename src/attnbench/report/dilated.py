"""Tables and sentences of the dilated-attention report, from Result rows alone (pandas; no torch).

Dilated rows carry extra["pattern"] == "dilated" and the exact FLOPs of the sparse pattern; dense rows
are bench/ provider rows (causal). Cost per token = median time / (batch * length), in nanoseconds.
Rows whose reason starts with "not run:" were never started (a series stopped); they show as the
reason, never as a measurement.
"""

from __future__ import annotations

from collections.abc import Iterable

from attnbench.report import check_words
from attnbench.report.check_words import INCORRECT, NOT_CHECKED, OK, check_word
from attnbench.rows import Result, usable

GIB = 2**30
PASS_NAMES = {"fwd": "forward", "fwd_bwd": "forward+backward", "bwd": "backward"}

# The dilated-attention suite's only published figure: its README's "Example output" (benchmarks/README.md).
SUITE_EXAMPLE = {
    "implementation": "RingDilatedAttentionV2Collective",
    "tokens_per_s": 1_429_956,
    "latency_ms": 2.86,
    "latency_sd_ms": 0.20,
    "memory_mb": 1578.0,
    "backend": "xformers",
    "dtype": "float32",
    "shape": "the suite's defaults: batch 2, sequence 8192, 8 heads, head_dim 64 (segment lengths not stated)",
}
SUITE_CAVEATS = (
    "The suite's example output is internally inconsistent: 1,429,956 tokens/s x 2.86 ms = 4,090 tokens per "
    "call, not the 16,384 of its default shape (batch 2 x 8192) nor 8,192; its GPU, segment lengths and "
    "dilation rates are not stated, and it reports mean +- sd, not median and quantiles. Set beside ours "
    "only as a scale."
)


def is_dilated(row: Result) -> bool:
    return row.extra.get("pattern") == "dilated"


def not_run(row: Result) -> bool:
    return bool(row.extra.get("not_run")) or row.reason.startswith("not run:")


def ns_per_token(row: Result) -> float | None:
    if row.ms_median is None:
        return None
    return row.ms_median * 1e6 / (row.workload.batch * row.workload.seqlen_q)


def tokens_per_s(row: Result) -> float | None:
    if row.ms_median is None:
        return None
    return row.workload.batch * row.workload.seqlen_q / (row.ms_median * 1e-3)


def status_text(row: Result) -> str:
    if row.status == "ok":
        return OK if row.ok is not False else INCORRECT
    return f"{row.status}: {row.reason}"


def correctness_table(rows: Iterable[Result]):
    """One line per checked (implementation, backend, mask, pass); rows that could not run say why."""
    import pandas as pd

    lines = []
    for r in rows:
        checks = r.extra.get("correctness")
        worst = ""
        if isinstance(checks, dict) and checks:
            worst = max(checks, key=lambda n: (not checks[n]["ok"], checks[n]["rel_l2"] or 0.0))
        lines.append({
            "implementation": r.extra.get("implementation", ""),
            "backend": r.extra.get("backend") or "",
            "mask": r.workload.mask,
            "pass": r.pass_,
            "tokens": r.workload.seqlen_q,
            "dtype": r.workload.dtype,
            "status": "ok" if r.status == "ok" and r.ok else r.status,
            "worst check": worst,
            "rel_l2": r.rel_l2,
            "max_abs": r.max_abs,
            "tolerance": (r.extra.get("tolerance") or {}).get("name", ""),
            "reason": r.reason,
        })  # fmt: skip
    return pd.DataFrame(lines)


def scaling_table(rows: Iterable[Result]):
    """Every sweep row: time, tokens/s, cost per token, memory, FLOPs, TFLOP/s, or why it did not run."""
    import pandas as pd

    lines = []
    for r in rows:
        measured = r.ms_median is not None
        band = f"{r.ms_p20:.4g}-{r.ms_p80:.4g}" if measured and r.ms_p20 is not None else ""
        lines.append({
            "provider": r.provider,
            "kind": "dilated" if is_dilated(r) else "dense",
            "pass": r.pass_,
            "tokens": r.workload.seqlen_q,
            "ms": r.ms_median,
            "ms p20-p80": band,
            "Mtokens/s": tokens_per_s(r) / 1e6 if measured else None,
            "ns/token": ns_per_token(r),
            "peak GiB": r.peak_mem_bytes / GIB if measured and r.peak_mem_bytes else None,
            "pairs/query/head": _pairs_per_query(r),
            "TFLOP/s": r.tflops,
            "checked": _checked(r) if measured else "",
            "status": "ok" if r.status == "ok" else status_text(r),
        })  # fmt: skip
    return pd.DataFrame(lines)


def _checked(r: Result) -> str:
    """ok / incorrect where the row was checked, else what the sweep said (the correctness cell checks
    each implementation at one length), else "not checked"."""
    if r.ok is not None:
        return check_word(r.ok)
    said = r.extra.get("correctness")  # the sweep's own words, where it wrote them
    return said if isinstance(said, str) and said else NOT_CHECKED


def _pairs_per_query(r: Result) -> float:
    w = r.workload
    if is_dilated(r):
        return r.extra["pairs"] / (w.batch * w.seqlen_q * w.heads_q)
    if w.mask == "causal":
        return (w.seqlen_q + 1) / 2
    return float(w.seqlen_k)


def cost_pivot(rows: Iterable[Result]):
    """(pass, provider) x tokens: ns per token, or the status of a point that did not run."""
    import pandas as pd

    cells: dict[tuple[str, str], dict[int, str]] = {}
    for r in rows:
        key = (PASS_NAMES.get(r.pass_, r.pass_), r.provider)
        if r.ms_median is not None:
            text = f"{ns_per_token(r):.4g}" + ("" if r.ok is not False else " (incorrect)")
        else:
            text = "stopped" if not_run(r) else r.status
        cells.setdefault(key, {})[r.workload.seqlen_q] = text
    if not cells:
        return pd.DataFrame()
    frame = pd.DataFrame.from_dict(cells, orient="index").sort_index()
    frame = frame.reindex(sorted(frame.columns), axis=1).fillna("")
    frame.index = pd.MultiIndex.from_tuples(frame.index, names=["pass", "provider"])
    return frame


def stops(rows: Iterable[Result]) -> list[str]:
    """Per provider and pass: the longest measured length and why the series ended there."""
    series: dict[tuple[str, str], list[Result]] = {}
    for r in rows:
        series.setdefault((r.provider, r.pass_), []).append(r)
    lines = []
    for (provider, pass_), group in sorted(series.items()):
        group.sort(key=lambda r: r.workload.seqlen_q)
        measured = [r for r in group if r.ms_median is not None]
        longest = f"up to {measured[-1].workload.seqlen_q} tokens" if measured else "nothing measured"
        first_bad = next((r for r in group if r.ms_median is None), None)
        why = (
            "ran every length"
            if first_bad is None
            else f"{first_bad.workload.seqlen_q}: {first_bad.status}: {first_bad.reason}"
        )
        lines.append(f"{provider} [{PASS_NAMES.get(pass_, pass_)}]: {longest}; {why}")
    return lines


def headline(rows: list[Result]) -> list[str]:
    """Sentences computed from the rows: reach, flatness of the dilated cost per token, the crossing."""
    sentences = []
    for pass_ in ("fwd", "fwd_bwd"):
        ok = [r for r in rows if r.pass_ == pass_ and usable(r, require_checked=False)]
        dilated = [r for r in ok if is_dilated(r)]
        dense = [r for r in ok if not is_dilated(r)]
        if not dilated:
            continue
        best = _fastest_by_length(dilated)
        longest = max(best)
        r = best[longest]
        sentences.append(
            f"{PASS_NAMES[pass_]}: dilated attention reached {longest:,} tokens ({r.provider}: {r.ms_median:.4g} ms, "
            f"{tokens_per_s(r) / 1e6:.3g} M tokens/s, {(r.peak_mem_bytes or 0) / GIB:.1f} GiB)."
        )
        costs = {n: ns_per_token(x) for n, x in best.items()}
        if len(costs) >= 2:
            lo, hi = min(costs.values()), max(costs.values())
            sentences.append(
                f"{PASS_NAMES[pass_]}: the fastest dilated cost per token stays within {lo:.3g}-{hi:.3g} ns "
                f"(x{hi / lo:.2f}) from {min(costs):,} to {max(costs):,} tokens."
            )
        if dense:
            fast_dense = _fastest_by_length(dense)
            reach = max(fast_dense)
            d = fast_dense[reach]
            common = sorted(set(best) & set(fast_dense))
            text = f"{PASS_NAMES[pass_]}: dense causal reached {reach:,} tokens ({d.provider}: {d.ms_median:.4g} ms"
            text += f", {ns_per_token(d):.3g} ns/token)"
            if common:
                n = common[-1]
                ratio = fast_dense[n].ms_median / best[n].ms_median
                speed = f"{ratio:.3g}x faster" if ratio >= 1 else f"{1 / ratio:.3g}x slower"
                text += f"; at {n:,} tokens dilated is {speed} than dense ({best[n].tflops or 0:.0f} vs "
                text += f"{fast_dense[n].tflops or 0:.0f} TFLOP/s of useful work)"
            sentences.append(text + ".")
    return sentences


def _fastest_by_length(rows: list[Result]) -> dict[int, Result]:
    best: dict[int, Result] = {}
    for r in rows:
        n = r.workload.seqlen_q
        if n not in best or r.ms_median < best[n].ms_median:
            best[n] = r
    return best


def suite_defaults_table(rows: Iterable[Result]):
    """Our rows at the suite's default shape beside the suite's example output."""
    import pandas as pd

    lines = [{
        "source": "the suite (published example output)", "implementation": SUITE_EXAMPLE["implementation"],
        "backend": SUITE_EXAMPLE["backend"], "dtype": SUITE_EXAMPLE["dtype"], "ms": SUITE_EXAMPLE["latency_ms"],
        "Mtokens/s": SUITE_EXAMPLE["tokens_per_s"] / 1e6, "memory MiB": SUITE_EXAMPLE["memory_mb"], "status": "as published",
    }]  # fmt: skip
    for r in rows:
        measured = r.ms_median is not None
        lines.append({
            "source": "this run", "implementation": r.provider, "backend": r.extra.get("backend") or "",
            "dtype": r.workload.dtype, "ms": r.ms_median, "Mtokens/s": tokens_per_s(r) / 1e6 if measured else None,
            "memory MiB": r.peak_mem_bytes / 2**20 if measured and r.peak_mem_bytes else None,
            "status": status_text(r),
        })  # fmt: skip
    return pd.DataFrame(lines)


BREAKDOWN_CLOCK = "SM clock MHz (whole / kernels)"


def breakdown_clock(e: dict) -> str:
    """'1755 / 1980': the SM clock the whole call and the kernels alone ran at (two measurements: a share
    across two clocks shows); why there is none (a CPU run, breakdown.json of older code)."""
    clocks = [e.get("total_sm_clock_mhz"), e.get("kernels_sm_clock_mhz")]
    if any(c is not None for c in clocks):
        return " / ".join("?" if c is None else f"{c:.0f}" for c in clocks)
    if e.get("total_timing_method") == "perf_counter":
        return "none (CPU run: not a GPU measurement)"
    return f"not read ({e['total_clock_reason']})" if e.get("total_clock_reason") else "not recorded"


def breakdown_table(entries: Iterable[dict]):
    """One line per backend, length and pass: the medians, the clock each ran at, the check's label
    (the timing conditions themselves stay in breakdown.json)."""
    import pandas as pd

    lines = []
    for e in entries:
        line = {
            k: v
            for k, v in e.items()
            if k in ("total_ms", "kernels_ms") or not k.startswith(("total_", "kernels_"))
        }
        line.pop("correctness", None)  # last: a long label
        line[BREAKDOWN_CLOCK] = breakdown_clock(e) if e.get("status") == "ok" else ""
        lines.append({**line, "check": e.get("correctness") or NOT_CHECKED})
    return pd.DataFrame(lines)


def breakdown_sentences(entries: Iterable[dict]) -> list[str]:
    """What a fused kernel could save: the time outside the kernels, from the measured breakdown."""
    sentences = []
    for e in entries:
        if e.get("status") != "ok":
            sentences.append(
                f"{e['backend']} {e['seq_len']:,} {e['pass']}: {e['status']}: {e.get('reason', '')}"
            )
            continue
        sentences.append(
            f"{e['backend']} at {e['seq_len']:,} tokens, {PASS_NAMES.get(e['pass'], e['pass'])}: the kernels take "
            f"{e['kernel_share']:.0%} of {e['total_ms']:.4g} ms ({e['kernel_calls']} calls over {e['branches']} "
            f"branches); gathering, merging and scattering take {e['other_ms']:.3g} ms, the most a fused dilated "
            f"kernel could save (SM clock MHz, whole / kernels: {breakdown_clock(e)})."
        )
    return sentences


# The fused kernel's targets: its forward at 1M tokens at least twice the gather path's TFLOP/s on the
# sparse pattern's FLOPs, correct; its forward + backward measured at 2M.
FUSED = "dilated_fused"
FUSED_SPEEDUP_GOAL = 2.0
FUSED_SPEEDUP_AT = 1 << 20
FUSED_FWD_BWD_AT = 2 << 20


def _measured(row: Result) -> bool:
    """Timed ok; a scaling row is not checked itself (the correctness cell checks each implementation)."""
    return usable(row, require_checked=False)


def _row_at(rows: list[Result], provider: str, pass_: str, length: int) -> Result | None:
    found = [r for r in rows if r.provider == provider and r.pass_ == pass_ and r.workload.seqlen_q == length]
    return next((r for r in found if _measured(r)), found[0] if found else None)


def fused_targets(scaling: list[Result], checks: list[Result], breakdown: Iterable[dict]) -> list[dict]:
    """The fused kernel's two targets, each {"target", "value", "goal", "met", "detail"}: met None where a
    side did not run or the times are not CUDA-event times (a CPU smoke run judges nothing). A missed
    speed-up says by how much and what the gather path's breakdown shows at that length."""
    speed_name = (f"fused forward at {FUSED_SPEEDUP_AT:,} tokens >= {FUSED_SPEEDUP_GOAL:g}x the gather path's "
                  "TFLOP/s (the sparse pattern's FLOPs), correct")  # fmt: skip
    names = (speed_name, f"fused forward + backward measured at {FUSED_FWD_BWD_AT:,} tokens")
    if any(r.timer not in (None, "cuda_event") for r in scaling):
        why = "CPU timing (perf_counter): not a GPU measurement, not judged"
        return [{"target": name, "value": None, "goal": None, "met": None, "detail": why} for name in names]
    fused = _row_at(scaling, FUSED, "fwd", FUSED_SPEEDUP_AT)
    gathers = [r for r in scaling if r.provider.startswith("dilated_gather") and r.pass_ == "fwd"
               and r.workload.seqlen_q == FUSED_SPEEDUP_AT and _measured(r) and r.tflops]  # fmt: skip
    gather = max(gathers, key=lambda r: r.tflops, default=None)
    fused_checks = [r for r in checks if r.provider == FUSED]
    # correct: every check of the fused kernel passed; False: one failed or could not run; None: no check
    # compared its result (none ran, or those that ran say ok=None)
    if any(r.status != "ok" or r.ok is False for r in fused_checks):
        correct = False
    else:
        correct = True if fused_checks and all(r.ok is True for r in fused_checks) else None
    lengths = sorted({r.workload.seqlen_q for r in fused_checks})
    checked = (f"correctness: {check_word(correct)} ({len(fused_checks)} checks at "
               f"{', '.join(f'{n:,}' for n in lengths)} tokens)" if fused_checks else f"correctness: {NOT_CHECKED}")  # fmt: skip
    if fused is None or not _measured(fused) or not fused.tflops or gather is None:
        if fused is None:
            why = "no fused row"
        elif not _measured(fused) or not fused.tflops:
            why = f"fused {fused.status}: {fused.reason or 'no TFLOP/s'}"
        else:
            why = "no gather row"
        speed = {"target": names[0], "value": None, "goal": FUSED_SPEEDUP_GOAL, "met": None,
                 "detail": f"not measured at {FUSED_SPEEDUP_AT:,} tokens: {why}"}  # fmt: skip
    else:
        ratio = fused.tflops / gather.tflops
        detail = f"{fused.tflops:.1f} against {gather.provider} {gather.tflops:.1f} TFLOP/s: {ratio:.2f}x; {checked}"
        if ratio < FUSED_SPEEDUP_GOAL:
            need = fused.ms_median * ratio / FUSED_SPEEDUP_GOAL
            detail += f"; the goal needs {need:.1f} ms, the fused kernel takes {fused.ms_median:.1f}"
            backend = gather.provider.removeprefix("dilated_gather_")
            for e in breakdown:
                if (e.get("backend"), e.get("seq_len"), e.get("pass"), e.get("status")) == (
                    backend, FUSED_SPEEDUP_AT, "fwd", "ok"):  # fmt: skip
                    detail += (f"; the gather path's own attention kernels take {e['kernels_ms']:.1f} ms of its "
                               f"{e['total_ms']:.1f} (breakdown), so the fused kernel's attention runs at "
                               f"{e['kernels_ms'] / fused.ms_median:.0%} of {backend}'s speed on this pattern")  # fmt: skip
        met = (
            False if ratio < FUSED_SPEEDUP_GOAL or correct is False else correct
        )  # None: fast, never checked
        speed = {"target": names[0], "value": ratio, "goal": FUSED_SPEEDUP_GOAL, "met": met, "detail": detail}
    both = _row_at(scaling, FUSED, "fwd_bwd", FUSED_FWD_BWD_AT)
    if both is not None and _measured(both):
        peak = f", peak {both.peak_mem_bytes / GIB:.1f} GiB" if both.peak_mem_bytes else ""
        reach = {"target": names[1], "value": float(FUSED_FWD_BWD_AT), "goal": float(FUSED_FWD_BWD_AT),
                 "met": True, "detail": f"{both.ms_median:.1f} ms{peak}"}  # fmt: skip
    else:
        why = "no row" if both is None else f"{both.status}: {both.reason}"
        reach = {"target": names[1], "value": None, "goal": float(FUSED_FWD_BWD_AT),
                 "met": False if both is not None else None, "detail": why}  # fmt: skip
    return [speed, reach]


def targets_document(checks: list[dict], provider: str = FUSED) -> dict:
    """targets.json for the page's headline (check_words.targets_document, for the fused kernel)."""
    return check_words.targets_document(checks, provider)


target_lines = check_words.target_lines
