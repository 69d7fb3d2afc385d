"""bench.thermal on a CPU: a simulated GPU that heats under the filler toward its equilibrium."""

from __future__ import annotations

import math

import pytest

from attnbench.bench import thermal, timing


class SimulatedGpu:
    """Temperature rises under load toward `hot` with time constant `tau` (seconds); time moves only when
    the filler runs (or `cool` is called), so the tests are exact and instant."""

    def __init__(self, start: float = 40.0, hot: float = 70.0, tau: float = 20.0, thermometer: bool = True):
        self.now, self.temperature, self.hot, self.tau, self.thermometer = 0.0, start, hot, tau, thermometer
        self.filler_s = 0.0

    def clock(self) -> float:
        return self.now

    def read(self) -> float | None:
        return float(math.floor(self.temperature)) if self.thermometer else None  # NVML reports whole °C

    def fill(self, seconds: float) -> None:
        self.now += seconds
        self.filler_s += seconds
        self.temperature = self.hot - (self.hot - self.temperature) * math.exp(-seconds / self.tau)

    def cool(self, degrees: float) -> None:
        self.temperature -= degrees


def test_settle_runs_the_filler_until_the_temperature_stops_rising():
    gpu = SimulatedGpu()
    conditioner = thermal.Conditioner(gpu.read, gpu.fill, gpu.clock)
    eq = conditioner.settle()
    assert eq.reached and eq.temperature_c is not None
    assert gpu.hot - 3 <= eq.temperature_c <= gpu.hot  # within a few degrees of where the load settles
    assert eq.seconds == pytest.approx(gpu.filler_s)
    assert conditioner.settle() is eq  # measured once per process and GPU
    assert gpu.filler_s == pytest.approx(eq.seconds)


def test_an_already_hot_gpu_settles_in_one_window():
    gpu = SimulatedGpu(start=70.0)
    eq = thermal.Conditioner(gpu.read, gpu.fill, gpu.clock).settle()
    assert eq.reached and eq.temperature_c == 70.0
    assert eq.seconds <= thermal.PLATEAU_WINDOW_S + 2 * thermal.FILLER_BATCH_S


def test_reheat_brings_a_cooled_gpu_back_and_leaves_a_hot_one_alone():
    gpu = SimulatedGpu(tau=5.0)
    conditioner = thermal.Conditioner(gpu.read, gpu.fill, gpu.clock)
    first = conditioner.reheat()  # the first row pays for the settle
    assert first == pytest.approx(conditioner.settle().seconds, abs=thermal.FILLER_BATCH_S)
    assert conditioner.reheat() == 0.0  # hot already: no filler
    gpu.cool(6.0)  # a light row let it cool
    again = conditioner.reheat()
    assert 0.0 < again < thermal.REHEAT_MAX_S
    assert gpu.read() >= conditioner.settle().temperature_c - thermal.REHEAT_TOLERANCE_C


def test_reheat_gives_up_after_its_limit():
    gpu = SimulatedGpu()
    conditioner = thermal.Conditioner(gpu.read, gpu.fill, gpu.clock)
    conditioner.settle()
    gpu.hot, gpu.temperature = 30.0, 20.0  # the room changed: the old equilibrium is out of reach
    assert conditioner.reheat() == pytest.approx(thermal.REHEAT_MAX_S, abs=thermal.FILLER_BATCH_S)


def test_a_gpu_still_heating_at_the_limit_is_taken_as_it_is():
    gpu = SimulatedGpu(tau=10_000.0)  # heats ~0.3 °C a minute: never a plateau within SETTLE_MAX_S... almost
    gpu.hot = 1e6  # keeps rising ~3.6 °C per 10 s window
    eq = thermal.Conditioner(gpu.read, gpu.fill, gpu.clock).settle()
    assert not eq.reached and eq.seconds == pytest.approx(thermal.SETTLE_MAX_S, abs=thermal.FILLER_BATCH_S)


def test_without_a_thermometer_nothing_is_heated_for_long():
    gpu = SimulatedGpu(thermometer=False)
    conditioner = thermal.Conditioner(gpu.read, gpu.fill, gpu.clock)
    assert conditioner.settle() == thermal.Equilibrium(None, thermal.FILLER_BATCH_S, False)
    assert conditioner.reheat() == 0.0


def test_preheat_is_a_gpu_step_the_cpu_path_ignores():
    result = timing.measure(lambda: sum(range(100)), device="cpu", min_reps=2, min_time_ms=0.0,
                            warmup_reps=0, preheat=True)  # fmt: skip
    assert result.reps >= 2 and result.preheat_s is None and result.equilibrium_c is None
