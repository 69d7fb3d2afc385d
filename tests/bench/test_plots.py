"""plots.py: one SVG line per measured provider, incorrect ones dashed, the rest listed with reasons."""

from __future__ import annotations

import re

import pytest

from attnbench.bench.results import Result, Workload
from attnbench.report.figures import CPU_NOTE, not_run, plot_sweep

SEQS = (256, 288, 320)


def _rows(timer="cuda_event"):
    rows = []
    for s in SEQS:
        w = Workload(1, s, s, 2, 2, 64)
        for provider, ms, status in (
            ("sdpa_flash", 1.0, "ok"),
            ("sdpa_cudnn", 0.8, "ok"),
            ("sage_sageattn", 0.4, "incorrect"),
        ):
            for pass_ in ("fwd", "fwd_bwd"):
                if provider.startswith("sage") and pass_ == "fwd_bwd":
                    rows.append(Result(provider, "sage", "unsupported", w, pass_, reason="no backward"))
                    continue
                t = ms * s / 256
                rows.append(
                    Result(
                        provider,
                        provider.split("_")[0],
                        status,
                        w,
                        pass_,
                        ms_median=t,
                        ms_p20=0.98 * t,
                        ms_p80=1.05 * t,
                        tflops=1e-9 * s * s * 512 / t,
                        timer=timer,
                    )
                )
        rows.append(
            Result(
                "flash_attn2",
                "flash_attn",
                "unavailable",
                w,
                "fwd",
                reason="not installed (no module 'flash_attn')",
            )
        )
    rows.append(
        Result(
            "sdpa_efficient",
            "sdpa",
            "oom",
            Workload(1, 320, 320, 2, 2, 64),
            "fwd_bwd",
            reason="OutOfMemoryError: CUDA out of memory",
        )
    )
    return rows


@pytest.mark.parametrize("metric", ["ms_median", "tflops"])
def test_svg_has_one_line_per_measured_provider(tmp_path, metric):
    info = plot_sweep(_rows(), tmp_path / "plot.svg", metric=metric, title="test sweep")
    svg = (tmp_path / "plot.svg").read_text()
    assert svg.lstrip().startswith("<?xml") and "<svg" in svg
    series = sorted(re.findall(r'id="series-([^"]+)"', svg))
    assert series == [
        "fwd-sage_sageattn-incorrect",
        "fwd-sdpa_cudnn-ok",
        "fwd-sdpa_flash-ok",
        "fwd_bwd-sdpa_cudnn-ok",
        "fwd_bwd-sdpa_flash-ok",
    ]
    assert info.lines == {
        "fwd": ["sage_sageattn (incorrect)", "sdpa_cudnn", "sdpa_flash"],
        "fwd_bwd": ["sdpa_cudnn", "sdpa_flash"],
    }
    # the incorrect line is dashed; the legend and the did-not-run list are text in the SVG
    incorrect_group = svg[svg.index('id="series-fwd-sage_sageattn-incorrect"') :]
    assert "stroke-dasharray" in incorrect_group[:600]
    assert "sage_sageattn (incorrect)" in svg
    assert "did not run:" in svg and "flash_attn2: unavailable: not installed" in svg
    assert CPU_NOTE not in svg


def test_not_run_lists_reason_and_where():
    lines = not_run(_rows())
    assert "flash_attn2: unavailable: not installed (no module 'flash_attn') (fwd)" in lines
    assert "sage_sageattn: unsupported: no backward (fwd_bwd)" in lines
    assert "sdpa_efficient: oom: OutOfMemoryError: CUDA out of memory (fwd_bwd; S=320)" in lines
    assert not any(line.startswith(("sdpa_flash", "sdpa_cudnn")) for line in lines)


def test_cpu_timings_are_labelled_not_gpu(tmp_path):
    plot_sweep(_rows(timer="perf_counter"), tmp_path / "cpu.svg", note="smoke profile")
    svg = (tmp_path / "cpu.svg").read_text()
    assert CPU_NOTE in svg and "smoke profile" in svg


def test_nothing_measured_still_draws_and_lists(tmp_path):
    rows = [r for r in _rows() if r.status not in ("ok", "incorrect")]
    info = plot_sweep(rows, tmp_path / "empty.svg")
    assert "no measured provider" in (tmp_path / "empty.svg").read_text()
    assert info.lines == {"fwd": [], "fwd_bwd": []} and len(info.not_run) == 3


def test_bad_metric_is_refused(tmp_path):
    with pytest.raises(ValueError, match="metric 'speed'"):
        plot_sweep(_rows(), tmp_path / "x.svg", metric="speed")


def test_quantised_lines_are_dash_dotted_and_labelled(tmp_path):
    rows = [r for r in _rows() if not r.provider.startswith("sage")]
    for s in SEQS:
        rows.append(
            Result(
                "sage_sageattn",
                "sage",
                "ok",
                Workload(1, s, s, 2, 2, 64),
                "fwd",
                ms_median=0.3,
                ms_p20=0.29,
                ms_p80=0.31,
                tflops=1.0,
                timer="cuda_event",
                extra={"quantized": True},
            )
        )
    info = plot_sweep(rows, tmp_path / "q.svg")
    svg = (tmp_path / "q.svg").read_text()
    assert "sage_sageattn (quantised)" in info.lines["fwd"] and "sage_sageattn (quantised)" in svg
    group = svg[svg.index('id="series-fwd-sage_sageattn-ok"') :][:600]
    exact = svg[svg.index('id="series-fwd-sdpa_cudnn-ok"') :][:600]
    assert "stroke-dasharray" in group and "stroke-dasharray" not in exact
