"""report/figures.py: one SVG line per measured provider, a colour per family and a style per variant,
legend fastest first, incorrect lines grey, did-not-run marked where it falls and listed as a table."""

from __future__ import annotations

import re

import pytest

from attnbench.bench import providers
from attnbench.report.figures import CPU_NOTE, MID, family_hue, not_run, not_run_markdown, plot_sweep, styles
from attnbench.rows import Result, Workload

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
    # the incorrect line is grey and dashed; the did-not-run list is a table under the figure, not in it
    incorrect_group = svg[svg.index('id="series-fwd-sage_sageattn-incorrect"') :][:600]
    assert "stroke-dasharray" in incorrect_group and "#9a9a9a" in incorrect_group
    assert "sage_sageattn (incorrect)" in svg
    assert "did not run:" not in svg and "not installed" not in svg
    assert CPU_NOTE not in svg
    # the OOM of sdpa_efficient at S=320 (fwd_bwd) is a cross where it falls
    assert 'id="not-run-oom"' in svg and "✕ oom (see the table)" in svg
    # transparent, mid-tone text: readable on a dark page
    assert "fill: #ffffff" not in svg and MID in svg
    # legend fastest first: sdpa_cudnn (0.8) before sdpa_flash (1.0); marks after the providers
    legend = svg[svg.index("fastest first") :]
    assert legend.index("sdpa_cudnn") < legend.index("sdpa_flash") < legend.index("✕ oom")


def test_one_hue_per_family_from_the_registry_and_a_shade_and_style_per_variant():
    family = {
        "sdpa_flash": "sdpa",
        "sdpa_cudnn": "sdpa",
        "flash_attn3": "flash_attn3",
        "triton_fa2": "attnbench_triton",
    }
    looks = styles(family, family.get)
    hues = providers.family_hues()
    assert looks["flash_attn3"]["color"] == hues["flash_attn3"]  # a lone member is the family's hue
    assert looks["triton_fa2"]["color"] == hues["attnbench_triton"] != hues["sdpa"]
    flash, cudnn = looks["sdpa_flash"], looks["sdpa_cudnn"]
    assert flash["color"] != cudnn["color"]  # distinguishable shades ...
    for look in (flash, cudnn):  # ... of the family's hue
        assert _hue_angle(look["color"]) == pytest.approx(_hue_angle(hues["sdpa"]), abs=0.02)
    assert (flash["linestyle"], flash["marker"]) != (cudnn["linestyle"], cudnn["marker"])


def test_every_registered_family_has_its_own_hue_and_unregistered_ones_a_stable_colour():
    hues = providers.family_hues()
    assert set(hues) == set(providers.families()) and len(set(hues.values())) == len(hues)
    assert family_hue("zigzag") == family_hue("zigzag") and family_hue("zigzag").startswith("#")


def test_unregistered_families_of_one_figure_never_share_a_colour():
    names = ["ring", "zigzag", "ulysses", "usp", "double_ring", "burst", "allgather", "torch_cp"]
    looks = styles(names, lambda n: n)
    assert len({look["color"] for look in looks.values()}) == len(names)  # hashing alone gave pairs
    assert looks == styles(list(reversed(names)), lambda n: n)  # the same colours in any order


def _hue_angle(colour: str) -> float:
    import colorsys

    return colorsys.rgb_to_hls(*(int(colour[i : i + 2], 16) / 255 for i in (1, 3, 5)))[0]


def test_did_not_run_table():
    table = not_run_markdown(_rows())
    assert table.startswith("| provider | status | reason | where |")
    assert "| sdpa_efficient | oom | OutOfMemoryError: CUDA out of memory | fwd_bwd; S=320 |" in table
    assert "| flash_attn2 | unavailable | not installed (no module 'flash_attn') | fwd |" in table
    assert (
        not_run_markdown([r for r in _rows() if r.status == "ok"]) == "Every provider ran at every shape.\n"
    )


def test_wide_latency_range_gets_labelled_log_ticks(tmp_path):
    rows = _rows()
    for r in rows:
        if r.provider == "sdpa_flash" and r.ms_median:
            r.ms_median, r.ms_p20, r.ms_p80 = r.ms_median * 100, r.ms_p20 * 100, r.ms_p80 * 100
    plot_sweep(rows, tmp_path / "wide.svg", metric="ms_median")
    svg = (tmp_path / "wide.svg").read_text()
    labels = set(re.findall(r"text-anchor: end[^>]*>([0-9.]+)</text>", svg))  # the y tick labels
    assert {"1", "2", "5", "10", "20", "50", "100"} <= labels  # not only 10^0 and 10^1


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
    # the rows have a forward + backward pass, but no quantised kernel ran it: no empty quantised frame there
    assert "forward: quantised" in svg and "forward + backward: quantised" not in svg


def test_a_crowded_panel_colours_only_the_fastest(tmp_path):
    """Past MAX_COLOURED providers, the slower ones are grey lines under one legend entry; every provider
    still has its line (gid) and stays in PlotInfo.lines."""
    from attnbench.report.figures import MAX_COLOURED, OTHERS, OTHERS_LABEL

    count = MAX_COLOURED + 3
    rows = [Result(f"prov{i:02d}", f"family{i}", "ok", Workload(1, s, s, 2, 2, 64), "fwd", ms_median=1.0 + i,
                   tflops=100.0 / (1.0 + i), timer="cuda_event") for i in range(count) for s in SEQS]  # fmt: skip
    info = plot_sweep(rows, tmp_path / "crowd.svg", metric="tflops")
    svg = (tmp_path / "crowd.svg").read_text()
    assert len(re.findall(r'id="series-fwd-prov\d\d-ok"', svg)) == count
    assert len(info.lines["fwd"]) == count
    assert svg.count(OTHERS_LABEL) == 1  # one legend entry for the three slowest
    legend = set(re.findall(r">(prov\d\d)</text>", svg))
    assert legend == {f"prov{i:02d}" for i in range(MAX_COLOURED)}  # the fastest ten, by name

    def stroke_of(provider: str) -> str:
        group = svg.split(f'id="series-fwd-{provider}-ok"')[1].split("</g>")[0]
        return re.search(r"stroke: (#[0-9a-f]{6})", group)[1]

    assert stroke_of(f"prov{count - 1:02d}") == OTHERS  # the slowest: grey
    assert stroke_of("prov00") != OTHERS  # the fastest: its family's colour


def test_the_speed_order_compares_providers_at_the_same_shapes():
    """A provider that ran only the shortest length (smaller times there) is not ranked ahead of one
    that is faster at every length it shares; latency and TFLOP/s give the same order."""
    from attnbench.report.figures import _speed_order

    def row(provider, seq, ms):
        return Result(provider, provider, "ok", Workload(1, seq, seq, 2, 2, 64), "fwd", ms_median=ms,
                      tflops=seq * seq / ms, timer="cuda_event")  # fmt: skip

    rows = [row("fast", s, 1.0 * s) for s in (256, 1024, 4096)] + [row("short_only", 256, 1.5 * 256)]
    assert _speed_order(rows, "ms_median") == _speed_order(rows, "tflops") == ["fast", "short_only"]
