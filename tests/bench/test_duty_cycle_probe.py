"""The duty-cycle probe's arithmetic on the CPU: the lull before a queued batch is the protocol's, and each
mode's time is set against the batch that starts at the power limit (queued_matmul)."""

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "probe_duty_cycle.py"
spec = importlib.util.spec_from_file_location("probe_duty_cycle", SCRIPT)
probe = importlib.util.module_from_spec(spec)
spec.loader.exec_module(probe)


def test_the_lull_is_one_and_a_half_times_the_batch_enqueue_time_plus_a_millisecond():
    # te_flash on the H200: 0.73 ms of host time per call, a batch of 32 waits behind ~36 ms
    assert probe.lull_ms(32, 0.73) == pytest.approx(36.04)
    assert probe.lull_ms(1, 0.0) == 1.0


def test_each_repetition_is_set_against_the_batch_that_starts_at_the_power_limit():
    modes = {"sustained": [{"ms_median": 0.35}, {"ms_median": 0.36}],
             "queued_spin": [{"ms_median": 0.329}, {"ms_median": 0.33}],
             "queued_matmul": [{"ms_median": 0.35}, {"ms_median": 0.33}]}  # fmt: skip
    line = probe.summarize("sdpa_cudnn", modes)
    spin = line["modes"]["queued_spin"]
    assert spin[0]["over_queued_matmul"] == pytest.approx(0.94) and spin[1][
        "over_queued_matmul"
    ] == pytest.approx(1.0)
    assert line["modes"]["sustained"][0]["over_queued_matmul"] == pytest.approx(1.0)
    assert spin[0]["ms_median"] == 0.329  # the repetition's own figures are kept
    alone = probe.summarize("flash_attn3", {"sustained": [{"ms_median": 0.29}]})  # no base: no ratio
    assert alone["modes"]["sustained"][0]["over_queued_matmul"] is None


def test_a_back_to_back_repetition_the_host_set_is_marked_and_gets_no_ratio():
    """Back to back, a call the host enqueues no faster than the GPU runs it is timed by the host: marked,
    no ratio. One the host keeps ahead of is the GPU's time, launch-bound by the protocol's rule or not."""
    modes = {"sustained": [{"ms_median": 0.73}, {"ms_median": 0.80}], "queued_spin": [{"ms_median": 0.29}],
             "queued_matmul": [{"ms_median": 0.30}, {"ms_median": 0.5}]}  # fmt: skip
    line = probe.summarize("te_flash", modes, host_ms=0.75)
    assert line["modes"]["sustained"][1] == {
        "ms_median": 0.80,
        "host_bound": False,
        "over_queued_matmul": 1.6,
    }
    assert line["modes"]["sustained"][0] == {
        "ms_median": 0.73,
        "host_bound": True,
        "over_queued_matmul": None,
    }
    assert line["modes"]["queued_spin"][0]["host_bound"] is False
    assert line["modes"]["queued_spin"][0]["over_queued_matmul"] == pytest.approx(0.29 / 0.30)
    assert probe.summarize("te_flash", modes)["modes"]["sustained"][0]["host_bound"] is False  # host unknown


def test_smoke_runs_on_a_cpu_and_an_unknown_provider_is_refused_by_name(capsys):
    assert probe.main(["--smoke"]) == 0
    assert '"provider": "sdpa_cudnn"' in capsys.readouterr().out
    with pytest.raises(SystemExit):
        probe.main(["--seconds", "0"])
    with pytest.raises(SystemExit):
        probe.main(["--smoke", "--providers", "sdpa_cudnn", "flash_atn3"])
    assert "no provider named flash_atn3" in capsys.readouterr().err


class _Event:
    """A CUDA event stand-in on the host clock: record() notes the time, elapsed_time() the ms between."""

    def __init__(self, enable_timing=True):
        self.at = None

    def record(self, stream=None):
        import time

        self.at = time.perf_counter()

    def elapsed_time(self, end):
        return (end.at - self.at) * 1e3


def test_one_provider_is_measured_in_every_mode_twice_with_the_cuda_calls_stood_in(monkeypatch):
    """The probe's GPU path run on the host: CUDA events, the spin and the syncs stood in, a matmul for
    the call. Every mode runs twice (in order, then reversed), each with its lull and per-position times."""
    import torch

    from attnbench.bench.clocks import ClockReading

    monkeypatch.setattr(torch.cuda, "Event", _Event)
    monkeypatch.setattr(torch.cuda, "_sleep", lambda cycles: None)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: None)
    a, grad_enabled = torch.randn(64, 64), []  # whether autograd was on at each timed call

    def call():
        grad_enabled.append(torch.is_grad_enabled())
        return a @ a

    monkeypatch.setattr(
        probe, "_prepared", lambda name, device, pass_: (call, "TE picked: flash (3.0.0)", "")
    )

    class Sampler:
        samples = [ClockReading(sm_mhz=1755.0, power_w=600.0, temperature_c=60.0)] * 3

        def mark(self):
            return 0

    class Conditioner:
        def reheat(self):
            return 0.5

    flush = torch.zeros(16)
    line = probe._measure(
        "flash_attn3", "cpu", flush, (lambda: a @ a, 0.01), Conditioner(), Sampler(), 0.05, 1980.0
    )
    assert line["note"] == "TE picked: flash (3.0.0)" and line["host_ms_per_call"] > 0
    assert set(line["modes"]) == set(probe.MODES)
    for reps in line["modes"].values():
        assert len(reps) == 2 and all(r["calls"] >= 32 and r["ms_median"] > 0 for r in reps)
        assert len(reps[0]["ms_by_position"]) == 32 and reps[0]["sm_clock_mhz"] == 1755.0
        assert reps[0]["reheat_s"] == 0.5 and reps[0]["lull_ms_measured"] is not None
    assert (
        line["modes"]["queued_matmul"][0]["gemms"] >= 1
        and line["modes"]["sustained"][0]["lull_ms_target"] == 0.0
    )
    assert line["modes"]["queued_matmul"][0]["over_queued_matmul"] == 1.0
    assert grad_enabled and not any(grad_enabled)  # a forward is timed under no_grad, as the sweep does
    grad_enabled.clear()  # forward + backward needs autograd on for every call
    probe._measure("flash_attn3", "cpu", flush, (lambda: a @ a, 0.01), Conditioner(), Sampler(), 0.02, 1980.0,
                   "fwd_bwd")  # fmt: skip
    assert grad_enabled and all(grad_enabled)
    # a provider that cannot run here is its line, with why, and nothing is timed
    monkeypatch.setattr(
        probe, "_prepared", lambda name, device, pass_: (None, "", "not installed (no module 'x')")
    )
    assert probe._measure("x", "cpu", flush, None, None, None, 0.05, 1980.0) == {
        "provider": "x", "not_measured": "not installed (no module 'x')"}  # fmt: skip


def test_the_forward_backward_step_is_the_sweeps_gradients_of_q_k_and_v(monkeypatch):
    """--pass fwd_bwd times autograd.grad of the provider's output from one upstream gradient: each call
    gives dq, dk and dv of the inputs' shape, and repeats them (the same inputs, the same gradient)."""
    import torch

    monkeypatch.setattr(probe, "FLUX_SHAPE", (1, 2, 16, 8))
    call, _, why = probe._prepared("sdpa_math", "cpu", "fwd_bwd")
    assert why == "" and call is not None
    first, again = call(), call()
    assert [tuple(g.shape) for g in first] == [(1, 2, 16, 8)] * 3
    assert all(torch.equal(a, b) and a.abs().sum() > 0 for a, b in zip(first, again))
    forward, _, _ = probe._prepared("sdpa_math", "cpu", "fwd")
    assert tuple(forward().shape) == (1, 2, 16, 8)
