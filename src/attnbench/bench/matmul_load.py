"""A matmul load that keeps a GPU busy at its power limit: the warm-up of a multi-rank sweep (warmup.py)
and the thermal preheat (thermal.py) both run it."""

from __future__ import annotations

import time

import torch

MATMUL_SIZE = {"cuda": 8192, "cpu": 256}  # about 1.5 ms per bf16 matmul on an H200; tiny on a CPU


def matmul_operands(device: torch.device, n: int | None = None):
    """(a, b, out, flops per matmul): random n x n operands (a matmul of zeros draws less power), bf16 on
    a GPU, fp32 on a CPU; n defaults to MATMUL_SIZE."""
    n = n or MATMUL_SIZE["cuda" if device.type == "cuda" else "cpu"]
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    gen = torch.Generator(device=device).manual_seed(0)
    a, b = (torch.randn(n, n, generator=gen, device=device, dtype=dtype) for _ in range(2))
    return a, b, torch.empty_like(a), 2.0 * n**3


def run_matmuls(a, b, out, seconds: float, device: torch.device) -> tuple[int, float]:
    """Matmuls for about `seconds` of wall clock, synchronised: (how many, seconds they took)."""
    count, start = 0, time.perf_counter()
    while True:
        for _ in range(8):  # a few launches per check keeps the queue full without running far ahead
            torch.mm(a, b, out=out)
        count += 8
        synchronize(device)
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return count, elapsed


def synchronize(device: torch.device) -> None:
    """Wait for `device` (a no-op on a CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
