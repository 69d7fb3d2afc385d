"""The attention-masks report from rows alone: letters where a kernel did not run, the best correct
kernel per mask and length, and published figures beside ours."""

from __future__ import annotations

from attnbench.report.masks import best_table, plot_mask, published_table
from attnbench.rows import Result, Workload


def _w(seqlen, mask="causal"):
    return Workload(1, seqlen, seqlen, 64, 8, 128, "bfloat16", mask)


def _row(provider, seqlen, status="ok", tflops=500.0, ok=True, pass_="fwd", mask="causal", **extra):
    ms = 1.0 if status in ("ok", "incorrect") else None
    return Result(provider, provider.split("_")[0], status, _w(seqlen, mask), pass_, reason="" if ok else "why",
                  ms_median=ms and 1000.0 / tflops, ms_p20=ms and 900.0 / tflops, ms_p80=ms and 1100.0 / tflops,
                  tflops=tflops if ms else None, ok=ok if ms else None, rel_l2=1e-3 if ms else None,
                  extra={"checked_at_seqlen": 4096, **extra})  # fmt: skip


def test_plot_marks_oom_unsupported_and_skipped_with_letters(tmp_path):
    rows = [_row("flash_attn3", 4096), _row("flash_attn3", 8192), _row("sdpa_math", 4096, tflops=20.0),
            _row("sdpa_math", 8192, "oom"), _row("cudnn_frontend", 4096, "unsupported"),
            _row("flex", 8192, "skipped"), _row("sdpa_flash", 4096, "incorrect", ok=False),
            _row("flash_attn3", 4096, pass_="bwd")]  # fmt: skip
    drawn = plot_mask(rows, tmp_path / "causal.svg", title="causal", note="a note")
    svg = (tmp_path / "causal.svg").read_text()
    assert drawn == {"fwd": ["flash_attn3", "sdpa_flash", "sdpa_math"], "bwd": ["flash_attn3"]}
    for status, letter in (("oom", "E"), ("unsupported", "X"), ("skipped", "S")):
        assert f'id="not-run-{status}"' in svg and f">{letter}<" in svg, status
    assert "sdpa_flash (incorrect)" in svg and "a note" in svg


def test_best_table_ranks_only_checked_correct_timed_rows():
    rows = [_row("flash_attn3", 4096, tflops=600.0), _row("sdpa_flash", 4096, "incorrect", tflops=900.0, ok=False),
            _row("flex", 4096, tflops=700.0, ok=None), _row("sdpa_cudnn", 4096, tflops=650.0, check=True),
            _row("sdpa_cudnn", 8192, tflops=640.0)]  # fmt: skip
    best = best_table(rows)
    assert best[["seqlen", "provider"]].values.tolist() == [[4096, "flash_attn3"], [8192, "sdpa_cudnn"]]
    assert best["checked at"].tolist() == [4096, 4096]


def test_published_figures_sit_beside_ours_at_their_length():
    rows = [_row("flash_attn3", 32768, tflops=610.0, mask="full"), _row("sdpa_cudnn", 16384, tflops=650.0,
            mask="full"), _row("cudnn_frontend", 16384, "incorrect", ok=False, mask="full"),
            _row("magi_ffa", 32768, tflops=657.0, mask="full")]  # fmt: skip
    rows[-1].sm_clock_mhz = 1725.0  # the clock it ran at goes beside ours: another report's may differ
    table = published_table(rows)
    ffa = table[(table["kernel"] == "FFA (MagiAttention)") & (table["mask"] == "full")].iloc[0]
    assert ffa["published TFLOP/s"] == 633 and ffa["ours TFLOP/s"] == "657 (magi_ffa, 1725 MHz)"
    fa3 = table[(table["kernel"] == "FA3") & (table["mask"] == "full")].iloc[0]
    assert fa3["published TFLOP/s"] == 700 and fa3["ours TFLOP/s"] == "610 (flash_attn3)"
    nvidia = table[
        (table["source"].str.startswith("NVIDIA")) & (table["mask"] == "full") & (table["pass"] == "fwd")
    ]
    assert (
        nvidia.iloc[0]["ours TFLOP/s"] == "650 (sdpa_cudnn)"
    )  # the incorrect cudnn_frontend row is not shown
    assert (table["ours TFLOP/s"] == "not measured").sum() == len(table) - 3
    assert all("read from their charts" in s for s in table["source"] if s.startswith("MagiAttention"))
