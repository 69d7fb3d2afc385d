"""Timing statistics and the stopping rule, on CPU with a controllable clock."""

import time

import numpy as np
import pytest
import torch

from attnbench.bench import timing


class FakeClock:
    """A clock that only moves when the timed function says so."""

    def __init__(self, durations_ms):
        self.now = 0.0
        self.durations = list(durations_ms)
        self.calls = 0

    def __call__(self):
        return self.now

    def fn(self):
        self.now += self.durations[self.calls % len(self.durations)] / 1e3
        self.calls += 1


def test_quantile_matches_numpy_linear():
    values = sorted(np.random.default_rng(0).random(37).tolist())
    for q in (0.0, 0.2, 0.5, 0.8, 1.0):
        assert timing.quantile(values, q) == pytest.approx(np.quantile(values, q))
    assert timing.quantile([3.0], 0.8) == 3.0
    with pytest.raises(ValueError):
        timing.quantile([], 0.5)


def test_summarize_reports_median_p20_p80():
    t = timing.summarize([5.0, 1.0, 4.0, 2.0, 3.0], "perf_counter")
    assert (t.ms_median, t.ms_p20, t.ms_p80, t.reps) == (3.0, 1.8, 4.2, 5)
    assert t.total_ms == 15.0 and t.timer == "perf_counter"


@pytest.mark.parametrize(
    "reps,total,expected", [(4, 1000.0, False), (5, 49.0, False), (5, 50.0, True), (10, 0.0, True)]
)
def test_enough_needs_count_and_time_or_cap(reps, total, expected):
    assert timing.enough(reps, total, min_reps=5, min_time_ms=50.0, max_reps=10) is expected


def test_next_batch_sizes_from_estimate():
    rule = {"min_reps": 5, "min_time_ms": 100.0, "max_reps": 1000}
    assert timing.next_batch(0, 0.0, 2.0, **rule) == 50  # 100 ms at 2 ms each
    assert timing.next_batch(0, 0.0, 50.0, **rule) == 5  # the count dominates
    assert timing.next_batch(40, 80.0, 2.0, **rule) == 10
    assert timing.next_batch(990, 0.0, 0.001, **rule) == 10  # capped at max_reps


def test_measure_cpu_stops_when_min_time_reached():
    clock = FakeClock([2.0])
    t = timing.measure(clock.fn, device="cpu", min_reps=5, min_time_ms=50.0, warmup_reps=3, clock=clock)
    assert t.reps == 25 and t.total_ms == pytest.approx(50.0)
    assert clock.calls == 28  # warm-up calls are made but not counted
    assert t.timer == "perf_counter" and t.peak_mem_bytes is None


def test_measure_cpu_stops_at_min_reps_or_cap():
    clock = FakeClock([2.0])
    assert (
        timing.measure(clock.fn, device="cpu", min_reps=7, min_time_ms=0.0, warmup_reps=0, clock=clock).reps
        == 7
    )
    clock = FakeClock([2.0])
    assert (
        timing.measure(
            clock.fn, device="cpu", min_reps=2, min_time_ms=1e9, warmup_reps=0, max_reps=12, clock=clock
        ).reps
        == 12
    )


def test_measure_cpu_quantiles_of_varying_durations():
    clock = FakeClock([1.0, 2.0, 3.0, 4.0, 5.0])
    t = timing.measure(clock.fn, device="cpu", min_reps=5, min_time_ms=0.0, warmup_reps=0, clock=clock)
    assert (t.ms_median, t.ms_p20, t.ms_p80) == pytest.approx((3.0, 1.8, 4.2))


def test_measure_real_clock_sees_sleep():
    t = timing.measure(lambda: time.sleep(0.002), device="cpu", min_reps=3, min_time_ms=0.0, warmup_reps=1)
    assert t.reps == 3 and t.ms_median >= 2.0


@pytest.mark.parametrize(
    "kwargs", [{"min_reps": 0}, {"min_reps": 5, "max_reps": 4}, {"warmup_reps": -1}, {"min_time_ms": -1.0}]
)
def test_measure_rejects_bad_arguments(kwargs):
    with pytest.raises(ValueError, match="bad timing arguments"):
        timing.measure(lambda: None, device="cpu", **kwargs)


def test_setup_times_the_first_call_and_returns_its_result():
    result, ms = timing.setup(lambda: time.sleep(0.02) or "done", device="cpu")
    assert result == "done" and ms >= 20.0


def test_is_oom_recognises_torch_and_library_errors():
    assert timing.is_oom(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert timing.is_oom(RuntimeError("CUDA error: out of memory"))
    assert not timing.is_oom(RuntimeError("shape mismatch"))
    assert not timing.is_oom(ValueError("out of memory"))


def test_exceptions_propagate_from_measure():
    def boom():
        raise torch.OutOfMemoryError("CUDA out of memory")

    with pytest.raises(torch.OutOfMemoryError):
        timing.measure(boom, device="cpu", min_reps=1, warmup_reps=0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_measure_and_bare_loop_agree():
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    t = timing.measure(lambda: a @ a, device="cuda", min_reps=20, min_time_ms=50.0)
    bare = timing.bare_event_loop(lambda: a @ a, reps=50)
    assert t.timer == "cuda_event" and t.flush_bytes > 2 * torch.cuda.get_device_properties(0).L2_cache_size
    assert t.peak_mem_bytes >= a.numel() * a.element_size()  # the product is allocated by the timed call
    assert abs(t.ms_median - bare) / bare < 0.05


def test_pass_callables_time_what_the_sweep_times():
    from attnbench.bench import providers
    from attnbench.bench.inputs import make_inputs
    from attnbench.bench.timing_methods import pass_callable
    from attnbench.rows import Workload

    w = Workload(1, 32, 32, 2, 2, 16, "float32", "causal")
    q, k, v = make_inputs(w, "cpu")
    math = providers.get("sdpa_math")
    forward = math.prepare(q, k, v, w)
    assert pass_callable(forward, "fwd") is forward.run  # nothing around the call inside the timed region
    for pass_ in ("bwd", "fwd_bwd"):
        grads = pass_callable(math.prepare(q, k, v, w, backward=True), pass_)()
        assert len(grads) == 3 and all(g.shape == t.shape for g, t in zip(grads, (q, k, v)))


class FakeGpu:
    """A backend whose per-call time and clock follow a script of the fake clock's time (seconds)."""

    def __init__(self, ms_at, mhz_at=None):
        self.t, self.ms_at, self.mhz_at = 0.0, ms_at, mhz_at
        self.host_ms_per_call = None
        self.batches: list[tuple[int, bool]] = []

    def now(self):
        return self.t

    def batch(self, n, queued=False):
        self.batches.append((n, queued))
        samples = []
        for _ in range(n):
            ms = self.ms_at(self.t)
            self.t += ms / 1e3
            samples.append(ms)
        return samples


class FakeSampler:
    """Samples the fake GPU's clock at each mark and summary (one sample per batch boundary)."""

    def __init__(self, gpu):
        self.gpu, self.samples = gpu, []

    def mark(self):
        return len(self.samples)

    def summary(self, since=0):
        self.samples.append(self.gpu.mhz_at(self.gpu.t))
        window = self.samples[since:]
        return {"sm_clock_mhz": sorted(window)[len(window) // 2]}


def test_warm_up_lasts_the_floor_even_when_settled_at_once():
    gpu = FakeGpu(lambda t: 2.0)
    warm = timing.warm_up(gpu, None, min_calls=3, min_s=1.0)
    assert warm["warmup_settled"] is True and warm["warmup_s"] >= 1.0
    assert warm["warmup_s"] < 1.0 + 2 * timing.WARMUP_BATCH_S  # and stops soon after it


def test_warm_up_runs_until_time_and_clock_settle():
    # boosted at first, the clock sinks ~8 %/s for 3 s (each 100 ms batch only ~1 % slower than the
    # last), then holds at the power limit: 1.3 ms per call at 1500 MHz
    def ms_at(t):
        return 1.0 + 0.1 * min(t, 3.0)

    def mhz_at(t):
        return 1980.0 - 160.0 * min(t, 3.0)

    gpu = FakeGpu(ms_at, mhz_at)
    warm = timing.warm_up(gpu, FakeSampler(gpu), min_calls=1, min_s=1.0)
    assert warm["warmup_settled"] is True and warm["warmup_s"] > 3.0  # not fooled by the slow drift
    assert warm["estimate_ms"] == pytest.approx(1.3)


def test_warm_up_waits_for_the_clock_even_when_time_looks_settled():
    gpu = FakeGpu(lambda t: 1.0, lambda t: 1980.0 - 200.0 * min(t, 2.0))  # memory-bound: time flat
    warm = timing.warm_up(gpu, FakeSampler(gpu), min_calls=1, min_s=1.0)
    assert warm["warmup_settled"] is True and warm["warmup_s"] > 2.0


def test_warm_up_gives_up_unsettled_at_the_cap():
    gpu = FakeGpu(lambda t: 1.0 + 0.2 * t)  # keeps slowing down: never settles
    warm = timing.warm_up(gpu, None, min_calls=1, min_s=1.0, max_s=3.0)
    assert warm["warmup_settled"] is False and 3.0 <= warm["warmup_s"] < 3.0 + 2 * timing.WARMUP_BATCH_S


def test_default_counts_reach_100_ms_of_timed_work():
    clock = FakeClock([0.5])
    t = timing.measure(clock.fn, device="cpu", clock=clock)
    assert t.total_ms >= 100.0 and t.reps == 200
    clock = FakeClock([250.0])  # a long call: three calls are enough
    assert timing.measure(clock.fn, device="cpu", clock=clock).reps == 3


def test_cpu_measure_with_a_warm_up_floor_runs_it_and_reports_it():
    clock = FakeClock([2.0])
    t = timing.measure(clock.fn, device="cpu", warmup_min_s=1.0, clock=clock)
    assert t.warmup_s >= 1.0 and t.warmup_calls >= 500 and t.warmup_settled is True
    assert t.timing_method == "perf_counter" and t.reps == 50


def test_a_profile_cannot_lower_the_gpu_warm_up():
    with pytest.raises(ValueError, match="floor"):
        timing.measure(lambda: None, device="cuda", warmup_min_s=0.1)


def test_median_of_an_even_count_is_the_mean_of_the_middle_two():
    assert timing.summarize([4.0, 1.0, 3.0, 2.0], "perf_counter").ms_median == 2.5


def test_launch_bound_calls_are_timed_queued_in_capped_batches():
    assert timing.launch_bound(host_ms_per_call=0.02, gpu_ms_per_call=0.03)
    assert not timing.launch_bound(host_ms_per_call=0.02, gpu_ms_per_call=5.0)
    assert not timing.launch_bound(None, 0.03)
    gpu = FakeGpu(lambda t: 0.01)
    rule = {"min_reps": 3, "min_time_ms": 100.0, "max_reps": 100000}
    samples = timing.timed_samples(gpu, rule, estimate=0.01, queued=True)
    assert sum(samples) >= 100.0
    assert all(queued and n <= timing.QUEUED_BATCH_MAX for n, queued in gpu.batches)


def test_clock_sampler_medians_over_a_window():
    from attnbench.bench.clocks import ClockReading, ClockSampler

    readings = iter(
        [ClockReading(1980.0, 120.0, 40.0)] + [ClockReading(1500.0 + i, 690.0, 60.0) for i in range(4)]
    )

    class Source:
        name = "fake"

        def read(self):
            return next(readings)

    sampler = ClockSampler(Source())
    sampler.sample()
    mark = sampler.mark()
    for _ in range(4):
        sampler.sample()
    assert sampler.summary(mark) == {
        "sm_clock_mhz": 1501.5,
        "power_w": 690.0,
        "temperature_c": 60.0,
        "clock_samples": 4,
    }
    with ClockSampler(None) as empty:  # no source: no thread, no samples, None fields
        pass
    assert empty.summary()["sm_clock_mhz"] is None


def test_before_runs_untimed_ahead_of_each_call_and_feeds_it():
    clock = FakeClock([2.0])
    made = []

    def before():
        clock.now += 1.0  # a slow untimed forward: must not show in the samples
        made.append(len(made))
        return (made[-1],)

    seen = []
    t = timing.measure(lambda i: (seen.append(i), clock.fn()), device="cpu", min_reps=4, min_time_ms=0.0,
                       warmup_reps=1, before=before, clock=clock)  # fmt: skip
    assert t.reps == 4 and t.ms_median == pytest.approx(2.0) and seen == made == [0, 1, 2, 3, 4]


def test_the_median_of_an_even_count_is_the_mean_of_the_two_middle_samples():
    t = timing.summarize([10.0, 1.0, 3.0, 2.0], "perf_counter")
    assert t.ms_median == 2.5 and t.reps == 4
