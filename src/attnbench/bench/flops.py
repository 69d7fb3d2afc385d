"""Exact attention FLOPs per mask, TFLOP/s and MFU.

Allowed pairs come from the mask object (masks.py REGISTRY: each mask counts its own pairs in closed
form; tests check every count against the dense mask). E.g. causal is bottom-right aligned (query i sees
key j when j <= i + (Sk - Sq)), a sliding window counts the query's own position (window=1 is the
diagonal), documents sum over documents (varlen full: sum(len_d^2)).

Forward FLOPs = 4 * head_dim * heads_q * batch * pairs (QK^T and PV, 2 FLOPs per multiply-add each);
GQA counts query heads. Backward = 2.5x forward, forward+backward = 3.5x (the usual convention:
5 matmuls in the backward vs 2 in the forward). Softmax/exp work is not counted.
"""

from __future__ import annotations

import re
from typing import ClassVar

from attnbench import masks
from attnbench.rows import Pass, Result, Workload

PASS_MULTIPLIER = {p.value: p.flop_multiplier for p in Pass}  # defined once, on Pass

# Dense (non-sparse) bf16/fp16 tensor-core peaks from the vendors' datasheets, TFLOP/s.
# Ordered: the first pattern that matches the lower-cased device name wins.
DATASHEET_PEAK_TFLOPS: dict[str, float] = {
    "gh200": 989.5,
    "h200": 989.5,
    "h100 pcie": 756.5,
    "h100 nvl": 835.5,
    "h100": 989.5,  # SXM ("NVIDIA H100 80GB HBM3")
    "h800": 989.5,
    "h20": 148.0,
    "b200": 2250.0,
    "a100": 312.0,
    "a800": 312.0,
    "l40s": 362.05,
    "l40": 181.05,
    "l4": 121.0,
    "a10g": 70.0,
    "a10": 125.0,
    "rtx 4090": 165.2,
    "mi300x": 1307.4,
}


def allowed_pairs(workload: Workload) -> int:
    """Number of allowed (query, key) pairs in one [Sq, Sk] mask (one batch element, one head):
    the mask's own exact count (masks.py)."""
    return masks.allowed_pairs(workload)


def density(workload: Workload) -> float:
    """Fraction of the Sq x Sk rectangle that is allowed."""
    return allowed_pairs(workload) / (workload.seqlen_q * workload.seqlen_k)


def attention_flops(workload: Workload, pass_: str = "fwd") -> float:
    """FLOPs of one call of `pass_` (fwd | bwd | fwd_bwd) on the whole batch."""
    multiplier = Pass.parse(pass_).flop_multiplier  # a ValueError naming the known passes
    forward = 4 * workload.head_dim * workload.heads_q * workload.batch * allowed_pairs(workload)
    return forward * multiplier


def tflops(flops: float, ms: float | None) -> float | None:
    """TFLOP/s of `flops` done in `ms` milliseconds (None when there is no time)."""
    if ms is None or ms <= 0:
        return None
    return flops / (ms * 1e-3) / 1e12


def mfu(achieved_tflops: float | None, peak_tflops: float | None) -> float | None:
    """Model FLOPs utilisation as a fraction (0.61 = 61 %)."""
    if achieved_tflops is None or not peak_tflops:
        return None
    return achieved_tflops / peak_tflops


def datasheet_peak(gpu_name: str | None) -> float | None:
    """Datasheet dense bf16 peak TFLOP/s for a device name, or None when unknown."""
    if not gpu_name:
        return None
    name = re.sub(r"\s+", " ", gpu_name.lower())
    for pattern, peak in DATASHEET_PEAK_TFLOPS.items():
        if re.search(rf"(^|[^a-z0-9]){re.escape(pattern)}([^a-z0-9]|$)", name):
            return peak
    return None


# Dense FLOP per SM clock cycle per SM, by compute capability and math: the peak at the clock a row ran
# at is SMs x this x its median SM clock. Hopper: 989.4 TFLOP/s bf16 (datasheet) = 132 SMs x 4096 x
# 1.83 GHz; fp8 doubles it, tf32 halves it; fp32 without tensor cores is 128 FMA lanes x 2 = 256
# (66.9 TFLOP/s = 132 x 256 x 1.98 GHz). Ampere (A100): 312 TFLOP/s bf16 = 108 x 2048 x 1.41 GHz.
FLOP_PER_CLOCK_PER_SM: dict[tuple[int, int], dict[str, int]] = {
    (9, 0): {"bf16": 4096, "fp16": 4096, "fp8": 8192, "tf32": 2048, "fp32": 256},
    (8, 0): {"bf16": 2048, "fp16": 2048, "tf32": 1024, "fp32": 128},
}
MATHS = ("bf16", "fp16", "fp8", "tf32", "fp32")
MATMUL_PEAK_SHAPES = ((8192, 8192, 8192), (16384, 16384, 8192))  # (m, n, k): large enough to saturate


def row_math(dtype: str, *, tf32: bool | None = None, quantized: bool = False) -> str | None:
    """The tensor math a row ran: bf16 | fp16 | fp8 | tf32 | fp32 (None: mixed/quantised, no peak).

    fp32 rows ran tf32 when `tf32` (the kernel's input_precision, or torch's allow_tf32 for torch-built
    kernels; None reads torch's flag): they are compared with the tf32 peak, true fp32 with the fp32 one.
    """
    if quantized:
        return None
    if dtype in ("bfloat16", "float16"):
        return "bf16" if dtype == "bfloat16" else "fp16"
    if dtype.startswith("float8"):
        return "fp8"
    if dtype == "float32":
        if tf32 is None:
            import torch

            tf32 = bool(torch.backends.cuda.matmul.allow_tf32)
        return "tf32" if tf32 else "fp32"
    return None


def math_ratio(math: str, capability: tuple[int, int] | None = (9, 0)) -> float | None:
    """FLOP/clk of `math` relative to bf16 on this architecture (tf32 0.5 on Hopper)."""
    table = FLOP_PER_CLOCK_PER_SM.get(tuple(capability) if capability else None)
    return table[math] / table["bf16"] if table and math in table else None


def peak_at_clock(math: str, sm_count: int | None, capability, sm_clock_mhz: float | None) -> float | None:
    """TFLOP/s the GPU could do in `math` at the SM clock it ran at (None when not known)."""
    table = FLOP_PER_CLOCK_PER_SM.get(tuple(capability) if capability else None)
    if not table or math not in table or not sm_count or not sm_clock_mhz:
        return None
    return sm_count * table[math] * sm_clock_mhz * 1e6 / 1e12


def over_peak(achieved_tflops: float | None, peaks: dict[str, float | None]) -> str | None:
    """A reason when a row is above 100 % of any of its peaks (a measurement error), else None."""
    if achieved_tflops is None:
        return None
    over = [(name, peak) for name, peak in peaks.items() if peak and achieved_tflops > peak]
    if not over:
        return None
    return "above peak, a measurement error: " + "; ".join(
        f"{achieved_tflops:.1f} TFLOP/s is {achieved_tflops / peak:.0%} of the {name} {peak:.1f} TFLOP/s"
        for name, peak in over
    )


class MeasuredPeak(float):
    """A measured matmul TFLOP/s that knows the median SM clock it ran at (None: not known).

    Under sustained load a GEMM runs at the power limit's clock (an H100: ~1.4-1.75 GHz), while an
    attention kernel that draws less power keeps a higher clock (up to 1.98 GHz): divided by the GEMM's
    TFLOP/s as measured, FA3 at 1965 MHz came out at 106 % of the "peak". What the measured peak stands
    for is the tensor-core efficiency a well-tuned GEMM reaches; `at_clock` scales it to the clock a row
    ran at (TFLOP/s of a compute-bound kernel are proportional to the SM clock), so a row's share
    compares like with like. It is a float, so JSON and arithmetic see the measured number.
    """

    sm_clock_mhz: float | None

    def __new__(cls, tflops: float, sm_clock_mhz: float | None = None):
        peak = super().__new__(cls, tflops)
        peak.sm_clock_mhz = sm_clock_mhz
        return peak

    def at_clock(self, sm_clock_mhz: float | None) -> float:
        """The measured peak scaled to `sm_clock_mhz` (unscaled when either clock is unknown)."""
        if not sm_clock_mhz or not self.sm_clock_mhz:
            return float(self)
        return float(self) * sm_clock_mhz / self.sm_clock_mhz


def clock_of(peak) -> float | None:
    """The SM clock a measured peak ran at (None: a plain number, or not known)."""
    return getattr(peak, "sm_clock_mhz", None)


def restore_peak(tflops: float | None, sm_clock_mhz: float | None) -> MeasuredPeak | None:
    """A measured peak read back from JSON with its clock (JSON keeps the number, not the attribute):
    without the clock a row's share is taken against the GEMM's own clock, the 101 % error of a row that
    ran faster than the power-limited GEMM."""
    return None if tflops is None else MeasuredPeak(float(tflops), sm_clock_mhz)


def measure_matmul_peak(
    device="cuda",
    dtype="bfloat16",
    shapes: tuple[tuple[int, int, int], ...] = MATMUL_PEAK_SHAPES,
    *,
    tf32: bool = False,
    sizes: tuple[int, ...] | None = None,
) -> float:
    """Achieved TFLOP/s of torch.mm in `dtype` (float32: tf32 or true fp32): the best median over `shapes`.

    The realistic ceiling on this machine, the MFU denominator: timed with the same steady-state protocol
    as every row (timing.measure: >= 1 s of load until the clock settles, then >= 100 ms timed), so a
    row's share compares two sustained numbers, never a burst with a sustained one. `sizes` (n, ...)
    asks for n x n x n shapes instead.
    """
    import torch

    if sizes is not None:
        shapes = tuple((n, n, n) for n in sizes)

    previous = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    try:
        return max((_matmul_tflops(shape, device, dtype) for shape in shapes), key=float)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous


def _matmul_tflops(shape: tuple[int, int, int], device, dtype) -> MeasuredPeak:
    """Median TFLOP/s of an [m, k] x [k, n] torch.mm with the SM clock it ran at (no L2 flush: the
    operands are far larger than L2 and are reused by design)."""
    import torch

    from attnbench.bench.timing import measure

    m, n, k = shape
    torch_dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    gen = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(m, k, generator=gen, device=device).to(torch_dtype)
    b = torch.randn(k, n, generator=gen, device=device).to(torch_dtype)
    out = torch.empty(m, n, device=device, dtype=torch_dtype)
    timing = measure(lambda: torch.mm(a, b, out=out), device=device, flush_l2=False)
    return MeasuredPeak(tflops(2.0 * m * n * k, timing.ms_median) or 0.0, timing.sm_clock_mhz)


class MeasuredPeaks(dict):
    """{math: measured matmul TFLOP/s}, each measured on first use (bf16, fp16, tf32, fp32; fp8: None)."""

    DTYPES: ClassVar[dict[str, tuple[str, bool]]] = {
        "bf16": ("bfloat16", False),
        "fp16": ("float16", False),
        "tf32": ("float32", True),
        "fp32": ("float32", False),
    }

    def __init__(self, device, progress: bool = True):
        super().__init__()
        self.device, self.progress = device, progress

    def __missing__(self, math: str) -> float | None:
        if math not in self.DTYPES:
            self[math] = None
            return None
        dtype, tf32 = self.DTYPES[math]
        self[math] = measure_matmul_peak(self.device, dtype, tf32=tf32)
        if self.progress:
            print(f"[sweep] measured {math} matmul peak: {self[math]:.1f} TFLOP/s", flush=True)
        return self[math]

    def get(self, math, default=None):
        return self[math]


def matching_peak(peak_tflops, math: str | None) -> float | None:
    """The measured peak for a row's math: a {math: TFLOP/s} mapping, or one number that is a bf16 peak
    (never used for tf32/fp32/fp8 rows: a mismatched denominator is how a 279 % share happened)."""
    if math is None or not peak_tflops:
        return None
    if isinstance(peak_tflops, dict):
        return peak_tflops.get(math)
    return peak_tflops if math in ("bf16", "fp16") else None


def _gpu_shape(device) -> tuple[int | None, tuple[int, int] | None]:
    import torch

    if torch.device(device).type != "cuda":
        return None, None
    props = torch.cuda.get_device_properties(torch.device(device))
    return props.multi_processor_count, (props.major, props.minor)


def score(
    row: Result,
    provider,
    peak_tflops,
    datasheet_tflops: float | None,
    device,
    work_flops: float | None = None,
) -> None:
    """TFLOP/s and its share of each peak matching the row's math; a row above any peak becomes an error.

    work_flops: the FLOPs of one call when not the dense-mask count (a dilated pattern's own)."""
    w = row.workload
    row.tflops = tflops(
        work_flops if work_flops is not None else attention_flops(w, row.pass_), row.ms_median
    )
    tf32 = getattr(provider, "tf32", None)
    row.math = row_math(w.dtype, tf32=tf32, quantized=bool(getattr(provider, "quantized", False)))
    if row.math is None or row.tflops is None:
        return
    sm_count, capability = _gpu_shape(device)
    ratio = math_ratio(row.math, capability or (9, 0)) if datasheet_tflops else None
    measured, measured_name = matching_peak(peak_tflops, row.math), f"measured {row.math} matmul peak"
    if isinstance(measured, MeasuredPeak) and measured.sm_clock_mhz and row.sm_clock_mhz:
        row.extra["matmul_peak_measured"] = {"tflops": float(measured), "sm_clock_mhz": measured.sm_clock_mhz}
        measured = measured.at_clock(row.sm_clock_mhz)
        measured_name += f" scaled to {row.sm_clock_mhz} MHz"
    peaks = {
        measured_name: measured,
        f"datasheet {row.math} peak": datasheet_tflops * ratio if ratio else None,
        f"{row.math} peak at {row.sm_clock_mhz} MHz": peak_at_clock(
            row.math, sm_count, capability, row.sm_clock_mhz
        ),
    }
    measured, sheet, at_clock = peaks.values()
    row.mfu, row.mfu_datasheet, row.mfu_at_clock = (mfu(row.tflops, p) for p in (measured, sheet, at_clock))
    if measured:
        row.extra["peak_tflops"] = measured
    if row.mfu_datasheet is not None:
        row.extra["mfu_datasheet"] = row.mfu_datasheet  # where reports read it before the field existed
    row.over_peak = over_peak(row.tflops, peaks)
    if row.over_peak and row.status == "ok":
        row.status, row.reason = "error", row.over_peak
