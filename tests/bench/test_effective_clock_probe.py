"""The effective-clock probe's arithmetic on the CPU: a probe's cycles per GPU-timer nanosecond is the SM
clock, and a load's share of the per-clock peak is taken at the reported and at the effective clock."""

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "probe_effective_clock.py"
spec = importlib.util.spec_from_file_location("probe_effective_clock", SCRIPT)
probe = importlib.util.module_from_spec(spec)
spec.loader.exec_module(probe)


def test_cycles_per_nanosecond_is_the_clock_and_an_empty_probe_has_none():
    assert probe.effective_mhz(3_000_000, 2_000_000) == pytest.approx(1500.0)
    assert probe.effective_mhz(0, 2_000_000) is None and probe.effective_mhz(10, 0) is None


def test_a_load_line_gives_both_clocks_and_the_share_of_the_peak_at_each():
    # an H100's bf16 per-clock peak: 132 SMs x 4096 FLOP per clock = 0.5407 TFLOP/s per MHz
    probes = [(2_900_000, 2_000_000), (3_000_000, 2_000_000), (3_100_000, 2_000_000)]
    line = probe.summarize("matmul", probes, [1620.0, 1650.0, 1680.0], 700.0, 0.5407)
    assert line["effective_mhz"] == pytest.approx(1500.0) and line["reported_mhz"] == 1650.0
    assert line["effective_range_mhz"] == pytest.approx([1450.0, 1550.0])
    assert line["reported_over_effective"] == pytest.approx(1.1)
    assert line["share_at_reported"] == pytest.approx(700.0 / (0.5407 * 1650.0))
    assert line["share_at_effective"] == pytest.approx(700.0 / (0.5407 * 1500.0))
    idle = probe.summarize("idle", probes, [], None, 0.5407)  # no NVML, no load: clocks only, no share
    assert idle["reported_mhz"] is None and idle["share_at_effective"] is None and idle["probes"] == 3


def test_without_cuda_the_probe_says_why_and_the_smoke_run_passes(capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA machine runs the probe itself")
    assert probe.main([]) == 2
    assert "no CUDA device" in capsys.readouterr().err
    assert probe.main(["--smoke"]) == 0


def test_the_probe_kernel_compiles_for_hopper_and_reads_both_counters(monkeypatch):
    """Compiled for sm_90 here (no GPU needed): the spin reads the GPU timer and the SM cycle counter, each
    read kept (the asm is not pure, so none is merged or hoisted out of its loop)."""
    triton = pytest.importorskip("triton")
    # the suite may run Triton interpreted (TRITON_INTERPRET=1); inline PTX only means something compiled
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    source = ASTSource(fn=probe._probe_kernel(), signature={"out_ptr": "*i64", "delay_ns": "i32", "spin_ns": "i32"},
                       constexprs={})  # fmt: skip
    ptx = triton.compile(source, target=GPUTarget("cuda", 90, 32)).asm["ptx"]
    assert ptx.count("%clock64") == 2  # one read at each end of the measured spin
    assert ptx.count("%globaltimer") == 3  # the start, the delay loop's reads, the spin loop's reads


def test_a_window_of_no_time_is_refused_with_its_value(capsys):
    with pytest.raises(SystemExit) as stop:
        probe.main(["--seconds", "0"])
    assert stop.value.code == 2 and "--seconds 0.0: give a positive number" in capsys.readouterr().err
