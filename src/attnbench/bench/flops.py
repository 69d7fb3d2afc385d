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

from attnbench.bench import masks
from attnbench.rows import Pass, Workload

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


def measure_matmul_peak(
    device="cuda",
    dtype="bfloat16",
    sizes: tuple[int, ...] = (8192, 16384),
    reps: int = 20,
    warmup_s: float = 0.5,
) -> float:
    """Achieved TFLOP/s of square torch.mm in `dtype`: the best median over `sizes`.

    This is the realistic ceiling on this machine now (clocks, power), the MFU denominator. The GPU
    idles at a low SM clock and needs a few hundred ms of load to reach its boost clock, so each size is
    first run untimed for `warmup_s` seconds; without that the "peak" is measured partly at idle clocks
    (a first H200 run measured 673 TFLOP/s that way, against ~790 once warm).
    """
    return max(_matmul_tflops(n, device, dtype, reps, warmup_s) for n in sizes)


def _matmul_tflops(n: int, device, dtype, reps: int, warmup_s: float) -> float:
    """Median TFLOP/s of an n x n x n torch.mm after `warmup_s` seconds of untimed load (no L2 flush:
    the operands are far larger than L2 and are reused by design)."""
    import time

    import torch

    from attnbench.bench.timing import measure, synchronize

    torch_dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    gen = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(n, n, generator=gen, device=device).to(torch_dtype)
    b = torch.randn(n, n, generator=gen, device=device).to(torch_dtype)
    out = torch.empty(n, n, device=device, dtype=torch_dtype)
    start = time.perf_counter()
    while time.perf_counter() - start < warmup_s:
        torch.mm(a, b, out=out)
        synchronize(device)
    timing = measure(
        lambda: torch.mm(a, b, out=out),
        device=device,
        min_reps=reps,
        min_time_ms=200.0,
        warmup_reps=3,
        max_reps=max(reps, 500),
        flush_l2=False,
    )
    return tflops(2.0 * n**3, timing.ms_median) or 0.0
