"""A row's share of a peak, and how pages word which peak: the headline's ranking and the index line
read a row's own scored shares first (bench.flops.score: its math's peak, the measured matmul peak scaled
to the row's SM clock), then the run's single peaks for bf16/fp16 rows only. A share above 100 % is a
measurement error wherever it is read (`above_peak`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def number(value: Any) -> float | None:
    """A JSON value as a float where it is a number (a bool is not one), else None: how every report
    module reads a measured field that may be missing or null."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


SHARE_FIELDS = ("mfu", "mfu_datasheet", "mfu_at_clock")


def above_peak(row: Mapping) -> str | None:
    """Why a row is a measurement error for claiming more than 100 % of a peak, else None. Rows measured
    since the timing protocol carry `over_peak` and status error; older committed rows only carry their
    shares, so the same rule is applied here when they are read: such a row is never ranked or shown as
    a result, whenever it was measured."""
    if row.get("over_peak"):
        return str(row["over_peak"])
    extra = row.get("extra") or {}
    over = [(name, value) for name in SHARE_FIELDS
            for value in (number(row.get(name)), number(extra.get(name))) if value is not None and value > 1.0]  # fmt: skip
    if not over:
        return None
    name, value = max(over, key=lambda item: item[1])
    return f"above peak, a measurement error: {value:.0%} of the peak ({name})"


# One number without a math (sweep.json's measured_matmul_peak_tflops, a bf16 datasheet peak) is a bf16
# peak: never the denominator of an fp32/tf32/fp8 row (bench.flops.matching_peak)
SCALAR_PEAK_MATHS = {"bf16", "fp16"}
SCALAR_PEAK_DTYPES = {"bfloat16", "float16", "bf16", "fp16"}
# What each kind of peak is, as pages word it: rows scored since the clock protocol are shares of the
# measured matmul peak scaled to the row's own SM clock, so that peak as stated elsewhere is not theirs
# (in a sentence, in a table cell, where the entries' note defines the short form once)
PEAK_WORDS = {
    "measured at clock": ("the measured matmul peak at the row's SM clock", "of peak at its clock"),
    "measured": ("the measured peak", "of measured peak"),
    "datasheet": ("the datasheet peak", "of datasheet peak"),
}


def peak_words(kinds: Iterable[str]) -> str:
    """'the measured matmul peak at the row's SM clock' (kinds joined with ' / ' where several)."""
    return " / ".join(PEAK_WORDS.get(k, (f"the {k} peak",))[0] for k in sorted(set(kinds)))


def peak_short(kind: str) -> str:
    """'of peak at its clock': a share's peak in a table cell."""
    return PEAK_WORDS.get(kind, ("", f"of {kind} peak"))[1]


def _scalar_peak_fits(row: Mapping) -> bool:
    math = row.get("math")
    if math:
        return str(math) in SCALAR_PEAK_MATHS
    dtype = row.get("dtype")
    return dtype is None or str(dtype) in SCALAR_PEAK_DTYPES


def peak_of(row: Mapping, peaks: Mapping[str, float | None]) -> tuple[float | None, str]:
    """The row's share of a peak of its own math, and which peak: its own shares first (scored against
    its math's peak), then the run's single peaks only for a bf16/fp16 row; else none."""
    extra = row.get("extra") or {}
    tflops = number(row.get("tflops"))
    # scored at the row's clock: bench.flops.score records the peak as measured beside the scaled one
    measured_kind = (
        "measured at clock" if isinstance(extra.get("matmul_peak_measured"), Mapping) else "measured"
    )
    mfu = number(row.get("mfu"))
    if mfu is not None:
        return mfu, measured_kind
    if tflops is not None and number(extra.get("peak_tflops")):
        return tflops / number(extra.get("peak_tflops")), measured_kind
    fits = tflops is not None and _scalar_peak_fits(row)
    measured = number(peaks.get("measured"))
    if fits and measured:
        return tflops / measured, "measured"
    datasheet_share = number(row.get("mfu_datasheet"))
    datasheet_share = datasheet_share if datasheet_share is not None else number(extra.get("mfu_datasheet"))
    if datasheet_share is not None:
        return datasheet_share, "datasheet"
    datasheet = number(peaks.get("datasheet"))
    if fits and datasheet:
        return tflops / datasheet, "datasheet"
    return None, ""
