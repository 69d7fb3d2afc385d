"""The context-parallel report's rows that are not kernel Results: correctness checks against one
device, and the per-rank overlap breakdown (its benchmark rows are Results)."""

from __future__ import annotations

from dataclasses import dataclass, field

from attnbench.rows.base import OMIT_IF_NONE, Row
from attnbench.rows.vocab import Pass, Status


@dataclass
class CpCheckRow(Row):
    """One strategy's output and gradients against the single-device run (correctness.jsonl)."""

    strategy: str
    kernel: str | None
    mask: str
    seq_len: int
    heads: int
    head_dim: int
    dtype: str
    world_size: int
    options: dict = field(default_factory=dict)
    # per tensor (out, dq, dk, dv): {"cp": error, "single": error, "bound": tolerance}
    errors: dict[str, dict[str, float]] = field(default_factory=dict)
    # the same per rank, in rank order (errors holds each metric's worst rank); absent in older results
    rank_errors: list[dict[str, dict[str, float]]] | None = field(default=None, metadata=OMIT_IF_NONE)
    lse_err: float | None = None
    reason: str = ""
    ok: bool | None = None  # None: not checked (status says why)
    status: Status = Status.OK


@dataclass
class OverlapRow(Row):
    """One rank's time split of one strategy: total, attention kernels, communication (overlap.jsonl)."""

    strategy: str
    seq_len: int
    mask: str
    pass_: Pass
    world_size: int
    heads: int
    head_dim: int
    dtype: str
    rank: int
    status: Status
    reason: str = ""
    options: dict | None = field(default=None, metadata=OMIT_IF_NONE)
    work_pairs: int | None = field(
        default=None, metadata=OMIT_IF_NONE
    )  # attention block pairs this rank computed in one forward
    total_ms: float | None = field(default=None, metadata=OMIT_IF_NONE)
    kernel_ms: float | None = field(default=None, metadata=OMIT_IF_NONE)
    comm_ms: float | None = field(
        default=None, metadata=OMIT_IF_NONE
    )  # the same call with a kernel that does nothing
    exchange_ms: float | None = field(
        default=None, metadata=OMIT_IF_NONE
    )  # ring strategies: one K/V exchange alone
    exchange_bytes: int | None = field(default=None, metadata=OMIT_IF_NONE)
    work_share: float | None = field(
        default=None, metadata=OMIT_IF_NONE
    )  # work_pairs over the mean of all ranks
    # The timing protocol (studies/context_parallel/overlap.py): seconds of steady-state warm-up before the
    # real call's timed calls, and this rank's SM clock (MHz) and power (W) during them; the clock of the
    # no-op and exchange timings apart. Absent in rows measured before the protocol (one warm-up call).
    warmup_s: float | None = field(default=None, metadata=OMIT_IF_NONE)
    sm_clock_mhz: float | None = field(default=None, metadata=OMIT_IF_NONE)
    power_w: float | None = field(default=None, metadata=OMIT_IF_NONE)
    clock_source: str | None = field(default=None, metadata=OMIT_IF_NONE)
    comm_sm_clock_mhz: float | None = field(default=None, metadata=OMIT_IF_NONE)
