"""The SM clock a piece of work ran at, for timings that are not bench.timing.measure rows (model steps,
profiler listings, the cuDNN timing-method comparison): a bench.clocks.ClockSampler polls while it
runs, and `ClockWindows` keeps the readings inside the windows the work itself occupied, so the gaps
between (a profiler's start-up, an idle sleep, bookkeeping between steps) never count.

Kept apart from bench.clocks so that the timing protocol's own module, which every report imports,
stays as it is measured.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from attnbench.bench import clocks, timing


def device_source(device) -> tuple[object | None, str | None]:
    """(the GPU's clock source, None), or (None, why): a CPU has no GPU clock; tests replace this."""
    if not timing.is_cuda(device):
        return None, "CPU run: no GPU clock"
    return clocks.source_for(device)


class ClockWindows:
    """The readings of `sampler` inside the windows opened with `window()`. Each window ends with one
    reading forced as it closes, so work shorter than the sampling interval still has its clock."""

    def __init__(self, sampler: clocks.ClockSampler):
        self.sampler, self.windows = sampler, []

    @contextmanager
    def window(self) -> Iterator[None]:
        start = self.sampler.mark()
        yield
        self.sampler.sample()
        self.windows.append((start, self.sampler.mark()))

    def summary(self) -> dict[str, Any]:
        """Medians over the windows' readings: sm_clock_mhz, power_w, temperature_c (None without a
        reading: no source) and clock_samples."""
        readings = [r for a, b in self.windows for r in self.sampler.samples[a:b]]

        def median(name):
            values = [getattr(r, name) for r in readings if getattr(r, name) is not None]
            return statistics.median(values) if values else None

        return {"sm_clock_mhz": median("sm_mhz"), "power_w": median("power_w"),
                "temperature_c": median("temperature_c"), "clock_samples": len(readings)}  # fmt: skip
