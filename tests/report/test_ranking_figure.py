"""report/ranking_figure.py: the answer's bars at the longest length a pass ran, fastest on top, the
quantised kernels in a panel of their own, wrong and above-peak rows left out, unchecked ones named."""

from __future__ import annotations

import re

from attnbench.report.ranking_figure import plot_ranking, ranked_at_longest
from attnbench.rows import Result, Workload


def _row(provider, seq, tflops, pass_="fwd", status="ok", ok=True, **extra):
    family = provider.split("_")[0]
    w = Workload(1, seq, seq, 2, 2, 64)
    return Result(provider, family, status, w, pass_, ms_median=1.0, tflops=tflops, ok=ok, timer="cuda_event",
                  **extra)  # fmt: skip


def _rows():
    return [
        _row("sdpa_cudnn", 256, 900.0),  # a shorter length: not the one ranked
        _row("sdpa_cudnn", 512, 400.0),
        _row("flash_attn3", 512, 600.0),
        _row("flex", 512, 300.0, ok=None),  # nobody checked it
        _row("xformers", 512, 999.0, status="incorrect", ok=False),  # wrong: never a bar
        _row("triton_fa2", 512, 990.0, over_peak="above the measured peak"),  # a measurement error
        _row("sage_sageattn", 512, 800.0, extra={"quantized": True}),  # fp8/int8: its own panel
        _row("sdpa_cudnn", 512, 350.0, pass_="fwd_bwd"),
    ]


def test_the_longest_length_fastest_first_without_wrong_or_above_peak_rows():
    seq, ranked = ranked_at_longest(_rows(), "fwd")
    assert seq == 512
    assert [r.provider for r in ranked] == ["sage_sageattn", "flash_attn3", "sdpa_cudnn", "flex"]


def test_svg_has_a_bar_per_provider_quantised_apart_and_unchecked_named(tmp_path):
    path = plot_ranking(_rows(), tmp_path / "ranking.svg", title="T")
    svg = path.read_text()
    bars = re.findall(r'id="bar-([a-z0-9_]+)', svg)
    assert bars == ["flash_attn3", "sdpa_cudnn", "flex", "sage_sageattn", "sdpa_cudnn"]  # fwd, then fwd_bwd
    assert "flex (not checked)" in svg and "quantised (fp8/int8)" in svg
    assert "forward, S 512" in svg and "forward + backward, S 512" in svg
    assert "xformers" not in svg and "triton_fa2" not in svg


def test_the_same_figure_writes_the_same_bytes(tmp_path):
    """Re-presenting unchanged numbers must leave outputs/ unchanged: no date, no random element ids."""
    first, second = tmp_path / "a.svg", tmp_path / "b.svg"
    plot_ranking(_rows(), first, title="ranking")
    plot_ranking(_rows(), second, title="ranking")
    text = first.read_text()
    assert "<dc:date>" not in text and first.read_bytes() == second.read_bytes()
