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


def test_each_mode_is_set_against_the_batch_that_starts_at_the_power_limit():
    modes = {
        "sustained": {"ms_median": 0.35},
        "queued_spin": {"ms_median": 0.329},
        "queued_matmul": {"ms_median": 0.35},
    }
    line = probe.summarize("sdpa_cudnn", modes)
    assert line["modes"]["queued_spin"]["over_queued_matmul"] == pytest.approx(0.94)
    assert line["modes"]["sustained"]["over_queued_matmul"] == pytest.approx(1.0)
    assert line["modes"]["queued_spin"]["ms_median"] == 0.329  # the mode's own figures are kept
    alone = probe.summarize("flash_attn3", {"sustained": {"ms_median": 0.29}})  # no base: no ratio
    assert alone["modes"]["sustained"]["over_queued_matmul"] is None


def test_smoke_runs_on_a_cpu(capsys):
    assert probe.main(["--smoke"]) == 0
    assert '"provider": "sdpa_cudnn"' in capsys.readouterr().out
    with pytest.raises(SystemExit):
        probe.main(["--seconds", "0"])
