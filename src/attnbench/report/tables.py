"""The tables of a benchmark report, built from Result rows alone (pandas imported lazily; no torch).

correctness_table  per provider and pass: the worst check over every shape it ran, or why it never ran.
summary_table      per shape and pass: the fastest correct exact kernel and, where it is faster, the fastest
                   correct quantised one (judged with the looser quantised tolerance, so never in place of
                   the exact one); speedup over a baseline; MFU against the measured and the datasheet peak.
tflops_pivot       TFLOP/s of every correct provider: (pass, provider) by sequence length.
markdown_table     a DataFrame as a Markdown table with per-column number formats (for the site).

Incorrect, unchecked and unmeasured rows never appear as a best provider (results.best_by_workload).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

from attnbench.report.check_words import NOT_CHECKED, check_word
from attnbench.rows import PASSES, Result, best_by_workload, is_quantized, speedup_over, usable


def _rel_l2_key(row: Result) -> tuple[bool, float]:
    """Failing rows first, then the largest error; a non-finite result (rel_l2 None) counts as infinite."""
    return (row.ok is False, math.inf if row.rel_l2 is None else row.rel_l2)


def _tensor_of(row: Result) -> str:
    """ ", dq": which of a row's checked tensors its figures are (the one nearest its bound, as
    bench.correctness.worst picks), where it checked more than its output."""
    checked = row.extra.get("correctness") or {}
    if len(checked) < 2 or row.rel_l2 is None:  # a non-finite error: no figure to match a tensor by
        return ""
    named = [name for name, c in checked.items() if c.get("rel_l2") == row.rel_l2]
    return f", {named[0]}" if named else ""


def _check_reason(worst: Result, these: list[Result]) -> str:
    """Why the check failed, and any row whose values were checked but whose timing then failed (an
    error after a passed check is not a pass of the row)."""
    said = [worst.reason] if worst.status == "incorrect" else []
    failed = [r for r in these if r.status not in ("ok", "incorrect")]
    if failed:
        said.append(
            f"{failed[0].status} after the check in {len(failed)} of {len(these)} shapes: "
            f"{failed[0].reason or 'no reason recorded'}"
        )
    return " | ".join(said)


def correctness_table(rows: Iterable[Result]):
    """One row per (provider, pass) that was checked; one row per provider that never was, with why."""
    import pandas as pd

    rows = list(rows)
    table = []
    for provider in dict.fromkeys(r.provider for r in rows):
        mine = [r for r in rows if r.provider == provider]
        checked = [r for r in mine if r.ok is not None]
        for pass_ in PASSES:
            these = [r for r in checked if r.pass_ == pass_]
            if not these:
                continue
            worst = max(these, key=_rel_l2_key)
            table.append(
                {
                    "provider": provider,
                    "pass": pass_,
                    "shapes": len(these),
                    "max_abs": worst.max_abs,
                    "mean_abs": worst.mean_abs,
                    "rel_l2": worst.rel_l2,
                    "check": check_word(all(r.ok for r in these)),
                    "worst at": f"S={worst.workload.seqlen_k}" + _tensor_of(worst),
                    "tolerance": (worst.extra.get("tolerance") or {}).get("name", ""),
                    "reason": _check_reason(worst, these),
                }
            )
        if not checked:
            reasons = list(dict.fromkeys(f"{r.status}: {r.reason}" for r in mine))
            table.append(
                {
                    "provider": provider,
                    "pass": "-",
                    "shapes": 0,
                    "max_abs": None,
                    "mean_abs": None,
                    "rel_l2": None,
                    "check": NOT_CHECKED,
                    "worst at": "",
                    "tolerance": "",
                    "reason": " | ".join(reasons),
                }
            )
    return pd.DataFrame(
        table,
        columns=[
            "provider",
            "pass",
            "shapes",
            "max_abs",
            "mean_abs",
            "rel_l2",
            "check",
            "worst at",
            "tolerance",
            "reason",
        ],
    )


def summary_table(rows: Iterable[Result], baseline: str | tuple[str, ...] = "sdpa_flash"):
    """Best correct provider per (shape, pass): an `exact` row and, where faster, a `quantised` row. The
    speed-up is over `baseline`, or over the fastest of several per shape and pass (PyTorch's SDPA as
    the Flux answer takes it: the faster of its flash and cuDNN backends)."""
    import pandas as pd

    rows = list(rows)
    names = (baseline,) if isinstance(baseline, str) else tuple(baseline)
    speedups: dict = {}
    for name in names:  # the fastest baseline's speed-up is the smallest
        for key, value in speedup_over(rows, name).items():
            speedups[key] = min(value, speedups.get(key, value))
    baseline = names[0] if len(names) == 1 else f"fastest of {', '.join(names)}"
    exact = {(r.workload, r.pass_): r for r in best_by_workload(rows, quantized=False)}
    quantised = {(r.workload, r.pass_): r for r in best_by_workload(rows, quantized=True)}
    best = [("exact", r) for r in exact.values()]
    best += [
        ("quantised", r)
        for key, r in quantised.items()
        if key not in exact or r.ms_median < exact[key].ms_median
    ]
    best.sort(key=lambda item: (PASSES.index(item[1].pass_), item[1].workload.seqlen_k, item[0]))
    columns = [
        "pass",
        "seq",
        "kind",
        "best provider",
        "ms",
        "TFLOP/s",
        "MFU (measured peak at its clock)",
        "MFU (datasheet)",
        f"speedup vs {baseline}",
        "rel_l2",
    ]
    return pd.DataFrame(
        [
            [
                r.pass_,
                r.workload.seqlen_k,
                kind,
                r.provider,
                r.ms_median,
                r.tflops,
                r.mfu,
                r.extra.get("mfu_datasheet"),
                speedups.get((r.provider, r.workload, r.pass_)),
                r.rel_l2,
            ]
            for kind, r in best
        ],
        columns=columns,
    )


def tflops_pivot(rows: Iterable[Result]):
    """TFLOP/s of every correct (checked, passing) measurement; quantised providers are marked."""
    import pandas as pd

    measured = [r for r in rows if usable(r) and r.tflops is not None]
    frame = pd.DataFrame(
        [
            {
                "pass": r.pass_,
                "provider": r.provider + (" (quantised)" if is_quantized(r) else ""),
                "seq": r.workload.seqlen_k,
                "TFLOP/s": r.tflops,
            }
            for r in measured
        ],
        columns=["pass", "provider", "seq", "TFLOP/s"],
    )
    if frame.empty:
        return frame
    return frame.pivot_table(index=["pass", "provider"], columns="seq", values="TFLOP/s")


def tflops_text(value: float) -> str:
    """One decimal on a GPU; significant digits for the tiny numbers of a CPU smoke run."""
    return f"{value:.1f}" if value >= 10 else f"{value:.3g}"


FORMATS: dict[str, Callable[[float], str]] = {  # column -> text of a number
    "ms": lambda v: f"{v:.4f}",
    "TFLOP/s": tflops_text,
    "MFU (measured peak at its clock)": lambda v: f"{v:.1%}",
    "MFU (datasheet)": lambda v: f"{v:.1%}",
    "rel_l2": lambda v: f"{v:.1e}",
    "max_abs": lambda v: f"{v:.3g}",
    "mean_abs": lambda v: f"{v:.3g}",
}


def _missing(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


Format = Callable[[float], str]


def format_cell(
    column: str, value, formats: dict[str, Format] | None = None, default: Format | None = None
) -> str:
    """Text of one value: '' when missing; `formats[column]` (else `default`) for numbers; speedups '1.82x'."""
    formats = FORMATS if formats is None else formats
    if _missing(value):
        return ""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if column in formats:
        return formats[column](value)
    if column.startswith("speedup"):
        return f"{value:.2f}x"
    if default is not None:
        return default(value)
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def formatted(frame, formats: dict[str, Format] | None = None, default: Format | None = None):
    """A copy of `frame` with every value as display text (index kept)."""
    out = frame.copy().astype(object)
    for column in out.columns:
        out[column] = [format_cell(str(column), v, formats, default) for v in frame[column]]
    return out


def markdown_table(frame, formats: dict[str, Format] | None = None, default: Format | None = None) -> str:
    """A Markdown table of `frame` (a non-trivial index becomes leading columns); '|' in text is escaped."""
    if frame.index.name is not None or frame.index.nlevels > 1:
        frame = frame.reset_index()
    shown = formatted(frame, formats, default)
    header = [str(c) for c in shown.columns]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += [
        "| " + " | ".join(str(v).replace("|", "\\|") for v in row) + " |"
        for row in shown.itertuples(index=False)
    ]
    return "\n".join(lines) + "\n"
