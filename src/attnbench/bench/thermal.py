"""Thermal steady state before a GPU row is timed (`timing.measure(..., preheat=True)`; the Flux profiles set it).

Why. The protocol's warm-up (timing.py) settles the SM clock and the per-call time against the power
limit, within seconds. Temperature settles over tens of seconds, and a row's temperature follows the rows
before it (a light row lets the GPU cool, a heavy one heats it). On an H100 and an H200 FlashAttention-3's
forward at Flux's shapes ran at ~1965 MHz or at 1575-1755 MHz (the 700 W limit) from run to run, and the
first runs suggested the temperature decided which. A first preheated run on an H200 (one round, code
7275c93) narrowed the spread (p95 9.2 -> 5.5 %), but the two states remained at the same temperature
(54-58 °C both ways): temperature is not what decides the state. Measured with the rounds of
bench/rounds.py (two passes, each row its fastest) on an H200: without preheat a row repeated with p95
6.1 %; preheated, 0.8 % between two runs and 3.2 % between the fastest of runs 1-2 and of runs 3-4
(measurements/flux_repeatability-preheat-nvidia-h200.json). Why it helps is not established (every row
starts from the same state, as in a training job); that it does is measured, so the Flux profiles use it.

What. Once per process and GPU, `settle` runs a bf16 matmul filler (it sits at the power limit, the
heaviest load there is) until the temperature stops rising: at most PLATEAU_RISE_C over PLATEAU_WINDOW_S.
That is the temperature a sustained workload reaches. Before each row, `reheat` runs the filler until
the GPU is back within REHEAT_TOLERANCE_C of it. Every row then starts hot, at one temperature, as a
training job runs; the row keeps the seconds it took (`preheat_s`) and the equilibrium (`equilibrium_c`).

Each notebook cell is a process of its own, and a plateau takes PLATEAU_WINDOW_S to see even on a hot GPU,
so the equilibrium is kept in a file (EQUILIBRIUM_FILE, per GPU) for CACHE_MAX_AGE_S: a later process
reads it and only reheats, for up to SETTLE_MAX_S the first time (its GPU may have cooled between cells).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from attnbench.bench.matmul_load import MATMUL_SIZE as LOAD_SIZES

PLATEAU_WINDOW_S = 10.0  # the temperature rose at most PLATEAU_RISE_C over this long: settled (a shorter
# window stops early: with a 20 s time constant, "no 1 °C step in 5 s" comes ~4 °C below the equilibrium)
PLATEAU_RISE_C = 0.5  # one NVML step is 1 °C: less than a step over the window
SETTLE_MAX_S = 90.0  # a GPU still heating after this long is taken as it is (reached=False)
REHEAT_TOLERANCE_C = 1.0  # a row starts within this of the equilibrium
REHEAT_MAX_S = 15.0
FILLER_BATCH_S = 0.1  # the filler runs in batches this long between readings
# bench.matmul_load's GPU size (~1.5 ms per bf16 matmul on an H200; 384 MB with the output), halved while
# it does not fit beside the row
MATMUL_SIZE = LOAD_SIZES["cuda"]
# where a process leaves the equilibrium for the next cells ({gpu} is the NVML index); ATTNBENCH_THERMAL_FILE
EQUILIBRIUM_FILE = "/tmp/attnbench-thermal-gpu{gpu}.json"
CACHE_MAX_AGE_S = 900.0  # a room and a fan curve do not change faster: older equilibria are measured again


@dataclass(frozen=True)
class Equilibrium:
    temperature_c: float | None  # None: no thermometer (no NVML or nvidia-smi), nothing to settle
    seconds: float
    reached: bool  # the plateau was seen (False: SETTLE_MAX_S ran out, or no thermometer)


class Conditioner:
    """Brings one GPU to its thermal equilibrium and back to it before each row."""

    def __init__(
        self,
        read_temperature: Callable[[], float | None],
        run_filler: Callable[[float], bool | None],  # False: it could not run (no memory for it)
        clock: Callable[[], float] = time.perf_counter,
        cache: Path | None = None,
        wall: Callable[[], float] = time.time,
    ):
        self.read_temperature, self.run_filler, self.clock = read_temperature, run_filler, clock
        self.cache, self.wall = cache, wall
        self.equilibrium: Equilibrium | None = None
        self._cooled = False  # the equilibrium came from the file: the GPU may have cooled since

    def _cached(self) -> Equilibrium | None:
        """A plateau another process saw on this GPU less than CACHE_MAX_AGE_S ago (a bad file: none)."""
        try:
            data = json.loads(self.cache.read_text()) if self.cache is not None else None
            if data and self.wall() - float(data["at"]) <= CACHE_MAX_AGE_S and data["reached"]:
                return Equilibrium(float(data["temperature_c"]), 0.0, True)
        except (OSError, ValueError, KeyError, TypeError):
            pass
        return None

    def _remember(self, eq: Equilibrium) -> None:
        if self.cache is None or not eq.reached:
            return
        try:
            self.cache.write_text(json.dumps({**asdict(eq), "at": self.wall()}))
        except OSError:
            pass  # a read-only /tmp costs the next process a plateau check, nothing else

    def settle(self) -> Equilibrium:
        """The equilibrium under the filler, measured on the first call and kept."""
        if self.equilibrium is not None:
            return self.equilibrium
        self.equilibrium = self._cached()
        if self.equilibrium is not None:
            self._cooled = True
            return self.equilibrium
        start, history = self.clock(), []  # (seconds, °C)
        while True:
            ran = self.run_filler(FILLER_BATCH_S) is not False
            now, temperature = self.clock() - start, self.read_temperature()
            if temperature is None or not ran:  # nothing to read, or nothing to heat with: no equilibrium
                self.equilibrium = Equilibrium(None, now, False)
                break
            history.append((now, temperature))
            earlier = [t for s, t in history if s <= now - PLATEAU_WINDOW_S]
            if earlier and temperature - earlier[-1] <= PLATEAU_RISE_C:
                self.equilibrium = Equilibrium(
                    max(t for s, t in history if s > now - PLATEAU_WINDOW_S), now, True
                )
                break
            if now >= SETTLE_MAX_S:
                self.equilibrium = Equilibrium(temperature, now, False)
                break
        self._remember(self.equilibrium)
        return self.equilibrium

    def reheat(self) -> float:
        """Seconds of filler (the first settle included) until the GPU is within REHEAT_TOLERANCE_C of its
        equilibrium; 0.0 when it already is, or without a thermometer."""
        start = self.clock()
        target = self.settle().temperature_c
        if target is None:
            return self.clock() - start
        # the first row of a process that read the equilibrium from the file starts from however cool the
        # GPU got between cells: it may heat as long as a settle would
        limit = SETTLE_MAX_S if self._cooled else REHEAT_MAX_S
        self._cooled = False
        while self.clock() - start < limit:
            temperature = self.read_temperature()
            if temperature is None or temperature >= target - REHEAT_TOLERANCE_C:
                break
            if self.run_filler(FILLER_BATCH_S) is False:  # no memory for the filler beside this row
                break
        return self.clock() - start


_CONDITIONERS: dict = {}


def conditioner_for(device) -> Conditioner:
    """One conditioner per GPU for the process, reading the GPU's temperature where the clock sampler does."""
    import torch

    from attnbench.bench import clocks

    device = torch.device(device)
    key = clocks.nvml_index(device)
    if key not in _CONDITIONERS:
        source, _ = clocks.source_for(device)

        def read() -> float | None:
            return source.read().temperature_c if source is not None else None

        cache = _cache_path(os.environ.get("ATTNBENCH_THERMAL_FILE", EQUILIBRIUM_FILE), key)
        _CONDITIONERS[key] = Conditioner(read, _matmul_filler(device), cache=cache)
    return _CONDITIONERS[key]


def _cache_path(template: str, gpu: int) -> Path:
    """The equilibrium file of GPU `gpu`: `{gpu}` in the template is its index; a template without it gets
    the index appended (one GPU's equilibrium is not another's)."""
    if "{gpu}" in template:
        return Path(template.replace("{gpu}", str(gpu)))
    return Path(f"{template}.gpu{gpu}")


def _matmul_filler(device) -> Callable[[float], bool]:
    """Runs bench.matmul_load's matmul load on `device` for about the given seconds. Its operands (384 MB at
    MATMUL_SIZE) are made per call and dropped after it, and halved while they do not fit beside the row
    being measured; False when not even the smallest fits (the row itself will say so)."""
    import torch

    from attnbench.bench.matmul_load import matmul_operands, run_matmuls

    def run(seconds: float) -> bool:
        for size in (MATMUL_SIZE, MATMUL_SIZE // 2, MATMUL_SIZE // 4):
            try:
                a, b, out, _ = matmul_operands(device, size)
            except torch.OutOfMemoryError:
                torch.cuda.empty_cache()
                continue
            run_matmuls(a, b, out, seconds, device)
            return True
        return False

    return run
