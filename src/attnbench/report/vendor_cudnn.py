"""NVIDIA's published cuDNN SDPA figures for H200, set beside ours measured three ways.

Source: NVIDIA/cudnn-frontend, benchmark/sdpa_benchmark_training/results/h200_919_only_cudnn/
llama3.1_20260227_034703.csv (commit df73764, frontend 1.19.0, cuDNN 9.19.0.1, NVIDIA H200): batch 1,
64 query / 8 KV heads, head dim 128, bf16, 16384 tokens; TFLOP/s as published (forward 4·d·h·pairs,
backward 2.5x, causal pairs S(S+1)/2 — the same counts as ours). Their timing: kernel time from
torch.profiler (CUPTI), a 256 MiB L2 flush before each call, a sleep of min(t/100, 1) s after each
call, the median of iterations 6-10 of 10. Ours: see bench/timing_methods.py. Each method's line
shows the SM clock its timed calls ran at (a rested GPU's clock is most of what separates them) and
the check of the timed call: the sweep row of the same provider, mask and pass.
"""

from __future__ import annotations

SOURCE = (
    "NVIDIA cudnn-frontend sdpa_benchmark_training, results/h200_919_only_cudnn (cuDNN 9.19.0.1, "
    "frontend 1.19.0, H200); kernel time via torch.profiler, L2 flushed, GPU idle between calls"
)
# (precision, mask, pass) -> TFLOP/s published for the config above (fp8: e4m3 Q, K, V, all scales 1)
PUBLISHED = {
    ("bf16", "full", "fwd"): 702.0,
    ("bf16", "full", "bwd"): 612.0,
    ("bf16", "causal", "fwd"): 673.0,
    ("bf16", "causal", "bwd"): 579.0,
    ("fp8", "full", "fwd"): 1055.0,
    ("fp8", "causal", "fwd"): 1010.0,
}


def _published(m: dict) -> float | None:
    precision = "fp8" if m["provider"].endswith("_fp8") else "bf16"
    return PUBLISHED.get((precision, m["mask"], m["pass"]))


METHODS = {
    "events": "ours: CUDA events, back to back, L2 flushed",
    "kernels": "kernel time only (CUPTI), L2 flushed",
    "events_idle": "CUDA events, GPU idle 0.1 s before each call",
}
CLOCK_COLUMN = "SM clock MHz (" + " / ".join(METHODS) + ")"
NOT_RECORDED = "not recorded"  # records of older code kept no clock


def _clock(m: dict, method: str) -> float | None:
    return (m.get("conditions") or {}).get(method, {}).get("sm_clock_mhz")


def clock_cell(m: dict) -> str:
    """'1545 / 1710 / 1980': the median SM clock each method's timed calls ran at ('?' where unread)."""
    if not m.get("conditions"):
        return NOT_RECORDED
    return " / ".join("?" if _clock(m, k) is None else f"{_clock(m, k):.0f}" for k in METHODS)


def _tflops(m: dict) -> dict[str, float | None]:
    """TFLOP/s by method, None where not timed or above a peak (a measurement error is never a number)."""
    over = m.get("over_peak") or {}
    # report code stays free of bench/ (report cells run without torch): FLOPs / ms, in TFLOP/s
    return {k: m["flops"] / ms / 1e9 if (ms := m["ms"].get(k)) and k not in over else None for k in METHODS}


def peak_cell(m: dict) -> str:
    """Each method's TFLOP/s against the peaks of its clock: 'below every peak', or the methods above one."""
    if "over_peak" not in m:
        return "not checked (records of older code)"
    if m["over_peak"] is None:
        return "not checked (no peak known for this GPU, clock or precision)"
    over = m["over_peak"]
    return f"{', '.join(over)} above peak: a measurement error" if over else "below every peak"


def peak_lines(methods: list[dict]) -> list[str]:
    """Why each method above a peak was, one line each (the table leaves its TFLOP/s out)."""
    return [f"{m['provider']} {m['mask']} {m['pass']}, {method}: {why}"
            for m in methods for method, why in (m.get("over_peak") or {}).items()]  # fmt: skip


def _check_cell(m: dict, rows) -> str:
    """The sweep row of the same provider, mask and pass checks the timed call: its verdict here."""
    for r in rows or ():
        if (r.provider, r.workload.mask, r.pass_) == (m["provider"], m["mask"], m["pass"]):
            if r.status != "ok":
                return f"sweep row {r.status}"
            verdict = "ok" if r.ok else "not checked" if r.ok is None else "incorrect"
            return f"{verdict} (sweep row, rel_l2 {r.rel_l2:.1e})" if r.rel_l2 is not None else verdict
    return m.get("correctness") or "not checked"


def comparison_table(methods: list[dict], rows=None):
    """One line per (provider, mask, pass): TFLOP/s by each timing method beside NVIDIA's figure, the SM
    clock each method ran at, and the check of the timed call (`rows`: the sweep's rows of the cell).

    `methods`: records {provider, mask, pass, flops, ms: {method: ms}, conditions: {method: {...}}}
    (the measuring cell's JSON; `conditions` absent in records of older code: clock "not recorded").
    """
    import pandas as pd

    lines = []
    for m in methods:
        published = _published(m)
        line = {
            "provider": m["provider"],
            "mask": m["mask"],
            "pass": m["pass"],
            "NVIDIA published": published,
        }
        for method, tflops in _tflops(m).items():
            line[f"{method} TFLOP/s"] = tflops
        events = line["events TFLOP/s"]
        line["published / events"] = published / events if published and events else None
        line[CLOCK_COLUMN] = clock_cell(m)
        line["check"] = _check_cell(m, rows)
        line["peak check"] = peak_cell(m)
        lines.append(line)
    return pd.DataFrame(lines)


def conditions_lines(methods: list[dict]) -> list[str]:
    """How each method was warmed up and where its clock came from, once per method (from the records)."""
    out = []
    for method in METHODS:
        seen = [(m.get("conditions") or {}).get(method) for m in methods]
        seen = [c for c in seen if c]
        if not seen:
            out.append(f"{method}: warm-up and SM clock {NOT_RECORDED} (records of older code)")
            continue
        sources = sorted({c.get("clock_source") or f"none ({c.get('clock_reason')})" for c in seen})
        out.append(f"{method}: warm-up {seen[0].get('warmup')}; SM clock from {', '.join(sources)}, "
                   "the median over its timed calls")  # fmt: skip
    return out


def _at(m: dict, method: str) -> str:
    mhz = _clock(m, method)
    return f" at {mhz:.0f} MHz" if mhz is not None else ""


def gap_sentences(methods: list[dict]) -> list[str]:
    """Where the gap to the published figure goes, per row, from the measured numbers and clocks."""
    out = []
    for m in methods:
        published = _published(m)
        tf = {k: v for k, v in _tflops(m).items() if v}
        if not published or "events" not in tf:
            continue
        gap = published / tf["events"] - 1
        head = (
            f"{m['provider']} {m['mask']} {m['pass']}: published {published:.0f} TFLOP/s, "
            f"ours {tf['events']:.0f}{_at(m, 'events')} ({gap:+.1%} to reach it)"
        )
        parts = [head]
        for method, words in (
            ("kernels", "kernel-only time"),
            ("events_idle", "an idle GPU before each call"),
        ):
            if method in tf:
                parts.append(
                    f"{words} gives {tf[method]:.0f}{_at(m, method)} ({tf[method] / tf['events'] - 1:+.1%} on "
                    f"ours, {published / tf[method] - 1:+.1%} to reach published)"
                )
        if not m.get("conditions"):
            parts.append(f"clocks {NOT_RECORDED}")
        out.append("; ".join(parts))
    return out
