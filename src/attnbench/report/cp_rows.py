"""Context-parallel rows: a strategy's label, the single-GPU references, and which reference a strategy's
row is measured against (the pairing the results table, the figure and the answer share). No pandas, no
tables: the answer imports it without depending on how tables are drawn."""

from __future__ import annotations

from collections.abc import Iterable

from attnbench.report.peak_share import above_peak
from attnbench.rows import Result


def strategy_of(row: Result) -> str:
    """The strategy label: `zigzag`, or `zigzag+fa3` over a non-default local kernel."""
    return row.provider.removeprefix("cp_")


def base_strategy(label: str) -> str:
    return label.split("+", 1)[0]


def is_reference(row: Result) -> bool:
    return row.provider.startswith("single_gpu_")


def reference_for(row: Result, rows: Iterable[Result]) -> Result | None:
    """The single-GPU row at this CP row's per-GPU tokens, mask and pass, with the same local kernel
    when there is one (results of one kernel only, or from before kernels were named: any reference)."""
    per_gpu = row.workload.seqlen_q // row.extra.get("world_size", 1)
    candidates = [
        ref
        for ref in rows
        if is_reference(ref)
        and ref.workload.seqlen_q == per_gpu
        and ref.workload.mask == row.workload.mask
        and ref.pass_ == row.pass_
    ]
    same_kernel = [ref for ref in candidates if ref.extra.get("kernel") == row.extra.get("kernel")]
    return (same_kernel or candidates or [None])[0]


def over_peak(row: Result, datasheet_tflops: float | None = None) -> str | None:
    """Why the row's TFLOP/s per GPU is a measurement error, not a result: above 100 % of a peak. Rows
    scored when measured carry the reason (`over_peak`, status error); rows measured before CP rows were
    scored are judged here on what they carry (report.peak_share.above_peak) and against one GPU's
    `datasheet_tflops` when the caller has it (sweep.json), so old rows obey the same rule."""
    reason = above_peak(row.to_dict())
    if reason or not datasheet_tflops or not row.tflops or row.tflops <= datasheet_tflops:
        return reason
    return (
        f"above peak, a measurement error: {row.tflops:.1f} TFLOP/s per GPU is "
        f"{row.tflops / datasheet_tflops:.0%} of the datasheet peak {datasheet_tflops:.1f} TFLOP/s"
    )
