"""Kernel rows: the Workload (one attention problem) and the Result (one row per provider, workload and
pass), as every kernel sweep writes them (attention masks, Flux, context parallel, dilated attention,
the CS336 kernel tables).

Schema (README "Result rows" documents it for readers):
  provider, family, status (a Status), reason,
  workload fields (batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim, dtype, mask, window, doc_lens,
  block), the mask a name from the mask registry,
  pass (a Pass), ms_median, ms_p20, ms_p80, reps, tflops, mfu, peak_mem_bytes, setup_ms,
  timer (cuda_event | perf_counter), timing_method, warmup_s, warmup_settled, sm_clock_mhz, power_w,
  temperature_c, clock_source, math, mfu_datasheet, mfu_at_clock, over_peak,
  correctness (max_abs, mean_abs, rel_l2, ok), env (machine id), extra.

Ranking helpers (`best_by_workload`, `speedup_over`) live here so a report cell can rank rows from a
results file without importing torch.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, fields
from typing import Any

# the mask registry imports no torch, and names Workload only for type checking: no cycle at run time
from attnbench import masks
from attnbench.rows.vocab import Pass, Status


@dataclass(frozen=True)
class Workload:
    """One attention problem. Sequence lengths are per batch element; `doc_lens` splits it into documents."""

    batch: int
    seqlen_q: int
    seqlen_k: int
    heads_q: int
    heads_kv: int
    head_dim: int
    dtype: str = "bfloat16"
    mask: str = "full"
    window: int | None = (
        None  # sliding window: key j allowed for query i when 0 <= i + (Sk - Sq) - j < window
    )
    doc_lens: tuple[int, ...] | None = None  # document masks: lengths summing to seqlen_q (== seqlen_k)
    block: int | None = None  # block-causal masks inside documents: the block size

    def __post_init__(self):
        mask = masks.get(self.mask)  # a ValueError naming the known masks
        if self.heads_q % self.heads_kv:
            raise ValueError(f"heads_q={self.heads_q} is not a multiple of heads_kv={self.heads_kv}")
        problem = mask.check(self)
        if problem:
            raise ValueError(problem)

    @property
    def gqa(self) -> bool:
        return self.heads_q != self.heads_kv

    def label(self) -> str:
        extra = f" w={self.window}" if self.window else ""
        extra += f" docs={len(self.doc_lens)}" if self.doc_lens else ""
        extra += f" block={self.block}" if self.block else ""
        return (
            f"B{self.batch} Sq{self.seqlen_q} Sk{self.seqlen_k} H{self.heads_q}/{self.heads_kv} "
            f"D{self.head_dim} {self.dtype} {self.mask}{extra}"
        )


@dataclass
class Result:
    provider: str
    family: str
    status: Status
    workload: Workload
    pass_: Pass = Pass.FWD  # serialised as "pass"
    reason: str = ""
    ms_median: float | None = None
    ms_p20: float | None = None
    ms_p80: float | None = None
    reps: int | None = None
    tflops: float | None = None
    mfu: float | None = None
    peak_mem_bytes: int | None = None
    setup_ms: float | None = None
    timer: str | None = None
    # How the row was timed and at what clock (bench/timing.py protocol, bench/clocks.py), and its share of
    # the peaks that match its math: mfu above is of the measured matmul peak, mfu_datasheet of the
    # datasheet, mfu_at_clock of SMs x FLOP/clk/SM x sm_clock_mhz. over_peak: the reason a row above 100 %
    # of any peak is a measurement error (such a row has status error and is never shown as a result).
    timing_method: str | None = None
    warmup_s: float | None = None
    warmup_settled: bool | None = None
    sm_clock_mhz: float | None = None
    power_w: float | None = None
    temperature_c: float | None = None
    clock_source: str | None = None
    math: str | None = None
    mfu_datasheet: float | None = None
    mfu_at_clock: float | None = None
    over_peak: str | None = None
    max_abs: float | None = None
    mean_abs: float | None = None
    rel_l2: float | None = None
    ok: bool | None = None
    env: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        self.status = Status.parse(self.status)
        self.pass_ = Pass.parse(self.pass_)

    def to_dict(self) -> dict[str, Any]:
        row = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("workload", "pass_")}
        work = asdict(self.workload)
        work["doc_lens"] = list(work["doc_lens"]) if work["doc_lens"] else None
        return {
            "provider": self.provider,
            "family": self.family,
            "status": Status.parse(self.status).value,  # also when set after construction
            "reason": self.reason,
            **work,
            "pass": Pass.parse(self.pass_).value,
            **{k: v for k, v in row.items() if k not in ("provider", "family", "status", "reason")},
        }

    @classmethod
    def from_dict(cls, row: dict[str, Any]) -> Result:
        row = dict(row)
        work_names = {f.name for f in fields(Workload)}
        work = {k: row.pop(k) for k in list(row) if k in work_names}
        if work.get("doc_lens") is not None:
            work["doc_lens"] = tuple(work["doc_lens"])
        row["pass_"] = row.pop("pass", "fwd")
        known = {f.name for f in fields(cls)}
        unknown = set(row) - known
        if unknown:
            raise ValueError(f"unknown result fields: {sorted(unknown)}")
        return cls(workload=Workload(**work), **row)


def to_frame(rows: Iterable[Result]):
    """A pandas DataFrame with one column per field (pandas is imported lazily)."""
    import pandas as pd

    return pd.DataFrame([r.to_dict() for r in rows])


def is_quantized(row: Result) -> bool:
    """Quantised on purpose (int8/fp8): judged with the quantised tolerance and ranked apart from exact kernels.

    The sweep sets extra["quantized"]; older rows are recognised by the tolerance they were judged with.
    """
    if row.extra.get("quantized"):
        return True
    return str((row.extra.get("tolerance") or {}).get("name", "")).startswith("quantized")


def usable(row: Result, require_checked: bool = True) -> bool:
    """Measured and not known to be wrong: status ok and (by default) correctness-checked and passing."""
    return (
        row.status == "ok"
        and row.ms_median is not None
        and (row.ok is True or (not require_checked and row.ok is None))
    )


def best_by_workload(
    rows: Iterable[Result], require_checked: bool = True, quantized: bool | None = None
) -> list[Result]:
    """The fastest usable row per (workload, pass). An incorrect row is never usable, so never the best.

    quantized: None ranks every row; False only exact kernels; True only quantised ones.
    """
    best: dict[tuple[Workload, str], Result] = {}
    for row in rows:
        if not usable(row, require_checked) or (quantized is not None and is_quantized(row) != quantized):
            continue
        key = (row.workload, row.pass_)
        if key not in best or row.ms_median < best[key].ms_median:
            best[key] = row
    return list(best.values())


def speedup_over(
    rows: Iterable[Result], baseline: str = "sdpa_flash", require_checked: bool = True
) -> dict[tuple[str, Workload, str], float]:
    """{(provider, workload, pass): baseline ms / provider ms} where both rows are usable."""
    rows = list(rows)
    base = {
        (r.workload, r.pass_): r.ms_median
        for r in rows
        if r.provider == baseline and usable(r, require_checked)
    }
    return {
        (r.provider, r.workload, r.pass_): base[(r.workload, r.pass_)] / r.ms_median
        for r in rows
        if usable(r, require_checked) and (r.workload, r.pass_) in base
    }
