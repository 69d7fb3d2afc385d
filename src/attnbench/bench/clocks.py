"""The GPU's SM clock, power and temperature while a row is timed.

A kernel's speed follows its SM clock, and the clock follows power and temperature: an H100 ran FA3 at
741 TFLOP/s right after idle (1980 MHz, 120 W) and at 668 after 4 s of load (1380-1515 MHz at its 691 W
limit). So every timed row says at what clock it ran: a `ClockSampler` thread polls a `ClockSource`
every few milliseconds while the timed calls run, and the row keeps the medians.

Sources, best first (`open_source`):
  nvml        pynvml (the nvidia-ml-py package) in this process: cheap calls, polled every 5 ms.
  nvidia-smi  one `nvidia-smi --query-gpu=... -lms 20` process streaming lines, read by a thread; used
              when pynvml is not installed (torch's own torch.cuda.clock_rate needs pynvml too).
The row records which source gave the clock (`clock_source`); with neither, the clock fields stay None
and the row says why.
"""

from __future__ import annotations

import atexit
import shutil
import statistics
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Self

SMI_FIELDS = ("clocks.sm", "power.draw", "temperature.gpu")


@dataclass(frozen=True)
class ClockReading:
    sm_mhz: float | None
    power_w: float | None
    temperature_c: float | None


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:  # "[N/A]"
        return None


class NvmlSource:
    """SM clock, power and temperature of one GPU through pynvml."""

    name = "nvml"

    def __init__(self, nvml_index: int):
        import pynvml

        pynvml.nvmlInit()
        self._nvml = pynvml
        self._handle = pynvml.nvmlDeviceGetHandleByIndex(nvml_index)

    def read(self) -> ClockReading:
        n, h = self._nvml, self._handle
        return ClockReading(
            sm_mhz=float(n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM)),
            power_w=n.nvmlDeviceGetPowerUsage(h) / 1e3,  # milliwatts
            temperature_c=float(n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU)),
        )

    def limits(self) -> dict[str, float | None]:
        """The power limit (W) the driver enforces now and the maximum SM clock (MHz)."""
        n, h = self._nvml, self._handle
        return {
            "power_limit_w": n.nvmlDeviceGetEnforcedPowerLimit(h) / 1e3,
            "max_sm_clock_mhz": float(n.nvmlDeviceGetMaxClockInfo(h, n.NVML_CLOCK_SM)),
        }

    def close(self) -> None:
        pass  # nvmlShutdown would break other users of NVML in this process


class SmiStreamSource:
    """The newest line of a streaming `nvidia-smi --query-gpu ... -lms` process (no pynvml needed)."""

    name = "nvidia-smi"

    def __init__(self, nvml_index: int, interval_ms: int = 20):
        exe = shutil.which("nvidia-smi")
        if exe is None:
            raise FileNotFoundError("nvidia-smi not found on PATH")
        args = [exe, f"--query-gpu={','.join(SMI_FIELDS)}", "--format=csv,noheader,nounits"]
        args += ["-i", str(nvml_index), "-lms", str(interval_ms)]
        self._proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self._latest: ClockReading | None = None
        self._reader = threading.Thread(target=self._read_lines, daemon=True)
        self._reader.start()
        deadline = time.monotonic() + 5.0
        while self._latest is None and time.monotonic() < deadline and self._proc.poll() is None:
            time.sleep(0.01)
        if self._latest is None:
            self.close()
            raise RuntimeError("nvidia-smi streamed no clock line within 5 s")

    def _read_lines(self) -> None:
        for line in self._proc.stdout:
            values = [_number(v.strip()) for v in line.split(",")]
            if len(values) == len(SMI_FIELDS):
                self._latest = ClockReading(*values)

    def read(self) -> ClockReading:
        return self._latest

    def close(self) -> None:
        if self._proc.poll() is None:
            self._proc.terminate()
            self._proc.wait(timeout=5)


def nvml_index(device) -> int:
    """NVML's index of a torch CUDA device (they differ under CUDA_VISIBLE_DEVICES)."""
    import torch

    device = torch.device(device)
    index = device.index if device.index is not None else torch.cuda.current_device()
    to_nvml = getattr(torch.cuda, "_get_nvml_device_index", None)  # maps through CUDA_VISIBLE_DEVICES
    return to_nvml(index) if to_nvml is not None else index


def open_source(device) -> tuple[object | None, str | None]:
    """(a source for `device`, None) or (None, why no source could be opened)."""
    index = nvml_index(device)
    problems = []
    for kind in (NvmlSource, SmiStreamSource):
        try:
            return kind(index), None
        except Exception as exc:  # noqa: BLE001 - try the next source, keep the reason
            problems.append(f"{kind.name}: {type(exc).__name__}: {exc}")
    return None, "; ".join(problems)


_SOURCES: dict[int, tuple[object | None, str | None]] = {}


def source_for(device) -> tuple[object | None, str | None]:
    """One source per GPU for the whole process (opening nvidia-smi costs ~0.1 s)."""
    index = nvml_index(device)
    if index not in _SOURCES:
        _SOURCES[index] = open_source(device)
        if _SOURCES[index][0] is not None:
            atexit.register(_SOURCES[index][0].close)  # a streaming nvidia-smi must not outlive us
    return _SOURCES[index]


class ClockSampler:
    """A thread that reads `source` every `interval_s` while running; medians over a window of samples.

    `mark()` returns a position; `summary(since=mark)` the medians of the samples taken after it, so the
    warm-up can judge whether the clock settled and the timed calls get the clock they ran at.
    """

    def __init__(self, source, interval_s: float = 0.005, sleep: Callable[[float], None] = time.sleep):
        self.source, self.interval_s, self._sleep = source, interval_s, sleep
        self.samples: list[ClockReading] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _poll(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._sleep(self.interval_s)

    def sample(self) -> None:
        reading = self.source.read() if self.source is not None else None
        if reading is not None:
            self.samples.append(reading)

    def __enter__(self) -> Self:
        if self.source is not None:
            self._thread = threading.Thread(target=self._poll, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.sample()  # at least one sample, also for a window shorter than one interval

    def mark(self) -> int:
        return len(self.samples)

    def summary(self, since: int = 0) -> dict[str, float | int | None]:
        window = self.samples[since:] or self.samples[-1:]  # a window with no sample: the latest one

        def median(name):
            values = [getattr(s, name) for s in window if getattr(s, name) is not None]
            return statistics.median(values) if values else None

        return {
            "sm_clock_mhz": median("sm_mhz"),
            "power_w": median("power_w"),
            "temperature_c": median("temperature_c"),
            "clock_samples": len(window),
        }
