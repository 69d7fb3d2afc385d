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


def test_a_later_process_reads_the_equilibrium_and_only_reheats(tmp_path):
    cache = tmp_path / "thermal.json"
    first_gpu = SimulatedGpu()
    first = thermal.Conditioner(
        first_gpu.read, first_gpu.fill, first_gpu.clock, cache=cache, wall=lambda: 1000.0
    )
    eq = first.settle()
    assert eq.reached and cache.exists()

    gpu = SimulatedGpu(start=40.0, tau=8.0)  # the next cell's process: the GPU cooled between cells
    later = thermal.Conditioner(gpu.read, gpu.fill, gpu.clock, cache=cache, wall=lambda: 1000.0 + 60)
    seconds = later.reheat()
    assert later.settle().temperature_c == eq.temperature_c  # read, not measured again
    assert thermal.REHEAT_MAX_S < seconds < thermal.SETTLE_MAX_S  # from cold it may heat past the usual limit
    assert gpu.read() >= eq.temperature_c - thermal.REHEAT_TOLERANCE_C
    assert later.reheat() == 0.0


@pytest.mark.parametrize("content", ["", "{not json", '{"temperature_c": 70, "reached": true}', None])
def test_a_stale_or_bad_equilibrium_file_is_measured_again(tmp_path, content):
    cache = tmp_path / "thermal.json"
    if content is None:  # a good file, but older than CACHE_MAX_AGE_S
        cache.write_text('{"temperature_c": 70.0, "seconds": 12.0, "reached": true, "at": 0}')
    else:
        cache.write_text(content)
    gpu = SimulatedGpu()
    conditioner = thermal.Conditioner(gpu.read, gpu.fill, gpu.clock, cache=cache, wall=lambda: 10_000.0)
    eq = conditioner.settle()
    assert eq.seconds > 0 and gpu.filler_s > 0  # measured here
    assert '"at": 10000.0' in cache.read_text()  # and left for the next process


def test_a_filler_without_memory_heats_nothing_and_waits_for_nothing():
    gpu = SimulatedGpu()
    conditioner = thermal.Conditioner(gpu.read, lambda seconds: False, gpu.clock)
    assert conditioner.settle().temperature_c is None and conditioner.reheat() == 0.0

    gpu = SimulatedGpu()
    conditioner = thermal.Conditioner(gpu.read, gpu.fill, gpu.clock)
    conditioner.settle()
    gpu.cool(10.0)
    conditioner.run_filler = lambda seconds: False  # the next row left no room for the filler
    assert conditioner.reheat() == 0.0


def test_every_gpu_has_its_own_equilibrium_file():
    assert str(thermal._cache_path("/tmp/t-{gpu}.json", 3)) == "/tmp/t-3.json"
    assert str(thermal._cache_path("/tmp/t.json", 3)) == "/tmp/t.json.gpu3"
    assert str(thermal._cache_path("/tmp/{odd}.json", 1)) == "/tmp/{odd}.json.gpu1"  # no format() surprises


def test_the_filler_is_warmups_matmul_load_and_shrinks_to_fit(monkeypatch):
    import torch

    from attnbench.bench import matmul_load as warmup

    monkeypatch.setattr(thermal, "MATMUL_SIZE", 64)
    sizes = []
    real = warmup.matmul_operands

    def tight(device, n=None):  # only the smallest size fits beside the row
        sizes.append(n)
        if n > 16:
            raise torch.OutOfMemoryError("CUDA out of memory")
        return real(device, n)

    monkeypatch.setattr(warmup, "matmul_operands", tight)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    fill = thermal._matmul_filler(torch.device("cpu"))
    assert fill(0.01) is True and sizes == [64, 32, 16]
    monkeypatch.setattr(thermal, "MATMUL_SIZE", 128)  # now nothing fits
    sizes.clear()
    assert fill(0.01) is False and sizes == [128, 64, 32]
