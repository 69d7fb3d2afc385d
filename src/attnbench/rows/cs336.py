"""The CS336 systems report's rows that are not kernel Results: training steps, the attention scan and
the Triton tile audit (its kernel tables are Results)."""

from __future__ import annotations

from dataclasses import dataclass, field

from attnbench.rows.base import OMIT_IF_NONE, Row
from attnbench.rows.vocab import Status


@dataclass
class StepRow(Row):
    """One model size at one context and precision: `steps` timed training steps (steps_*.jsonl,
    variants.jsonl)."""

    size: str
    model_d_model: int
    model_d_ff: int
    model_num_layers: int
    model_num_heads: int
    context: int
    batch: int
    precision: str
    attention: str
    params: int
    flops: dict[str, float]  # per step: forward, backward, train
    status: Status
    reason: str = ""
    timer: str = ""
    float32_matmul_precision: str = ""
    times_ms: dict[str, list[float]] = field(default_factory=dict)  # per phase, one entry a step
    peak_mem_bytes: dict[str, int | None] = field(default_factory=dict)  # per phase
    # per step: the median SM clock and power sampled during it (bench.clocks); None: no sample or source.
    # The lists are absent (None) in rows written before steps sampled the clock, which read back as written
    sm_clock_mhz: list[float | None] | None = field(default=None, metadata=OMIT_IF_NONE)
    power_w: list[float | None] | None = field(default=None, metadata=OMIT_IF_NONE)
    clock_source: str | None = field(default=None, metadata=OMIT_IF_NONE)
    peak_tflops: float | None = field(
        default=None, metadata=OMIT_IF_NONE
    )  # the device's, added by the cell for MFU
    # the SM clock that matmul peak ran at (the profile's peak_sm_clock_mhz): MFU scales the peak to the
    # steps' own clock (bench.flops.MeasuredPeak); None in rows written before it was kept
    peak_sm_clock_mhz: float | None = field(default=None, metadata=OMIT_IF_NONE)
    traceback: str | None = field(default=None, metadata=OMIT_IF_NONE)  # status error only


@dataclass
class ScanRow(Row):
    """Attention alone at one (d_model, seq): forward and backward times and memory (scan_*.jsonl)."""

    variant: str  # eager | compiled
    d_model: int
    seq: int
    batch: int
    iterations: int
    status: Status
    reason: str = ""
    timer: str = ""
    model: dict[str, int] = field(default_factory=dict)  # the memory model's bytes, to compare with
    first_call_ms: float | None = field(default=None, metadata=OMIT_IF_NONE)
    forward_ms: dict | None = field(default=None, metadata=OMIT_IF_NONE)  # mean, median, n
    mem_before_backward_bytes: int | None = field(default=None, metadata=OMIT_IF_NONE)
    peak_forward_bytes: int | None = field(default=None, metadata=OMIT_IF_NONE)
    inputs_bytes: int | None = field(default=None, metadata=OMIT_IF_NONE)
    peak_backward_bytes: int | None = field(default=None, metadata=OMIT_IF_NONE)
    backward_ms: dict | None = field(default=None, metadata=OMIT_IF_NONE)
    failed_phase: str | None = field(default=None, metadata=OMIT_IF_NONE)
    # the check of this variant's output and q, k, v gradients against bench.correctness's fp32 reference
    # at the row's inputs: ok True/False, None = not checked (check_reason says why; rows written before
    # the check have neither); rel_l2 and name (out, dq, dk, dv) of the worst of the four
    ok: bool | None = field(default=None, metadata=OMIT_IF_NONE)
    rel_l2: float | None = field(default=None, metadata=OMIT_IF_NONE)
    check_worst: str | None = field(default=None, metadata=OMIT_IF_NONE)
    check_reason: str | None = field(default=None, metadata=OMIT_IF_NONE)


@dataclass
class TileAuditRow(Row):
    """One candidate tile of the Triton FlashAttention-2 kernel (audit.jsonl): forward tiles have
    block_m/block_n, backward tiles the two (m, n) pairs of the dK/dV and dQ loops."""

    kernel: str
    tile: str
    dq_mode: str | None = field(default=None, metadata=OMIT_IF_NONE)
    block_m: int | None = field(default=None, metadata=OMIT_IF_NONE)
    block_n: int | None = field(default=None, metadata=OMIT_IF_NONE)
    block_m1: int | None = field(default=None, metadata=OMIT_IF_NONE)
    block_n1: int | None = field(default=None, metadata=OMIT_IF_NONE)
    block_m2: int | None = field(default=None, metadata=OMIT_IF_NONE)
    block_n2: int | None = field(default=None, metadata=OMIT_IF_NONE)
    warps: int | None = field(default=None, metadata=OMIT_IF_NONE)
    stages: int | None = field(default=None, metadata=OMIT_IF_NONE)
    dq_warps: int | None = field(default=None, metadata=OMIT_IF_NONE)  # the dQ kernel's own (0: as dK/dV's)
    dq_stages: int | None = field(default=None, metadata=OMIT_IF_NONE)
    warp_specialize: bool | None = field(default=None, metadata=OMIT_IF_NONE)
    persistent: int | None = field(default=None, metadata=OMIT_IF_NONE)
    status: Status = Status.OK
    reason: str = ""
    rel_l2: float | None = field(default=None, metadata=OMIT_IF_NONE)
    ms: float | None = field(default=None, metadata=OMIT_IF_NONE)
    tflops: float | None = field(default=None, metadata=OMIT_IF_NONE)
    regs: int | None = field(default=None, metadata=OMIT_IF_NONE)
    spills: int | None = field(default=None, metadata=OMIT_IF_NONE)
    shared_bytes: int | None = field(default=None, metadata=OMIT_IF_NONE)
    # how the tile was timed and at what clock (bench.timing.Timing.conditions(), as every GPU row keeps)
    timing_method: str | None = field(default=None, metadata=OMIT_IF_NONE)
    warmup_s: float | None = field(default=None, metadata=OMIT_IF_NONE)
    warmup_settled: bool | None = field(default=None, metadata=OMIT_IF_NONE)
    sm_clock_mhz: float | None = field(default=None, metadata=OMIT_IF_NONE)
    power_w: float | None = field(default=None, metadata=OMIT_IF_NONE)
    temperature_c: float | None = field(default=None, metadata=OMIT_IF_NONE)
    clock_source: str | None = field(default=None, metadata=OMIT_IF_NONE)
