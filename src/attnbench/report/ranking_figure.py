"""The answer's figure: at one shape per pass, every provider's TFLOP/s as a horizontal bar, fastest on
top, coloured as in the sweep figures (figures.styles: one hue per family, a shade per variant).

A line chart over a handful of close sequence lengths with thirty providers is a tangle; the question a
report answers ("which kernel is fastest, and by how much") reads off bars at one shape. The shape is
the longest sequence length at which the pass has an ok row (the one the headline answers at), named
in each panel's title. Quantised kernels (fp8/int8, judged with the looser tolerance) get a panel of
their own under their pass's, so they never top the exact kernels; rows no correctness check covered
say "(not checked)"; incorrect rows and rows above a peak (measurement errors) are left out, and listed
with every other row that did not run in the table under the figures (figures.not_run_markdown).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from attnbench.report.figures import CPU_NOTE, MID, families_of, save_svg, style_rc, styles
from attnbench.rows import PASS_TITLES, Result, is_quantized

BAR_HEIGHT_IN = 0.26  # inches per bar: 9-pt labels stay apart


def ranked_at_longest(rows: Iterable[Result], pass_: str) -> tuple[int | None, list[Result]]:
    """(the longest key length with an ok row of `pass_`, its ok rows fastest first)."""
    mine = [r for r in rows if r.pass_ == pass_ and r.status == "ok" and r.tflops and r.ok is not False
            and not r.over_peak]  # fmt: skip
    if not mine:
        return None, []
    seq = max(r.workload.seqlen_k for r in mine)
    at = [r for r in mine if r.workload.seqlen_k == seq]
    best = {}
    for r in at:  # one bar per provider: its fastest row at that shape
        if r.provider not in best or r.tflops > best[r.provider].tflops:
            best[r.provider] = r
    return seq, sorted(best.values(), key=lambda r: r.tflops, reverse=True)


def plot_ranking(rows: Iterable[Result], path: Path | str, *, title: str = "", note: str = "") -> Path:
    """One column per pass: exact kernels' bars, and under them the quantised ones' (where any ran)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows, path = list(rows), Path(path)
    passes = sorted({r.pass_ for r in rows}, key=list(PASS_TITLES).index) or ["fwd"]
    families = families_of(rows)
    looks = styles(families, families.get)
    panels = []
    for pass_ in passes:
        seq, ranked = ranked_at_longest(rows, pass_)
        exact = [r for r in ranked if not is_quantized(r)]
        quantised = [r for r in ranked if is_quantized(r)]
        panels.append((pass_, seq, exact, quantised))
    cpu = any(r.timer == "perf_counter" for r in rows) and "not a GPU measurement" not in note
    notes = [n for n in (note, CPU_NOTE if cpu else "") if n]
    tallest = max((len(e) + len(q) + (2 if q else 0) for _, _, e, q in panels), default=1)
    with plt.style.context("default"), matplotlib.rc_context(style_rc()):
        fig = plt.figure(
            figsize=(5.6 * len(panels), 1.4 + BAR_HEIGHT_IN * max(tallest, 4)), layout="constrained"
        )
        columns = fig.subfigures(1, len(panels), squeeze=False)[0]
        for column, (pass_, seq, exact, quantised) in zip(columns, panels):
            heights = [max(len(exact), 1)] + ([len(quantised) + 1] if quantised else [])
            axes = column.subplots(len(heights), 1, height_ratios=heights, squeeze=False)[:, 0]
            name = PASS_TITLES.get(pass_, pass_)
            _bars(axes[0], exact, looks, f"{name}, S {seq}" if seq else f"{name}: nothing ran")
            if quantised:
                _bars(axes[1], quantised, looks, f"{name}, S {seq}: quantised (fp8/int8), own tolerance")
        save_svg(fig, path, title, notes)
    return path


def _bars(ax, ranked: list[Result], looks: dict, title: str) -> None:
    ax.set_title(title, fontsize=10)
    ax.grid(axis="x")
    ax.set_axisbelow(True)
    ax.set_xlabel("TFLOP/s")
    if not ranked:
        ax.text(0.5, 0.5, "no measured provider", transform=ax.transAxes, ha="center", va="center")
        ax.set_yticks([])
        return
    names = [r.provider + ("" if r.ok else " (not checked)") for r in ranked]
    y = list(range(len(ranked)))[::-1]  # fastest on top
    for yi, r in zip(y, ranked):
        container = ax.barh(yi, r.tflops, color=looks[r.provider]["color"], alpha=0.9, edgecolor=MID,
                            linewidth=0.4, gid=f"bar-{r.provider}")  # fmt: skip
        ax.bar_label(container, fmt="%.0f", fontsize=8, padding=2)  # the value past the bar's end
    ax.set_yticks(y, names, fontsize=9)
    ax.set_ylim(-0.6, len(ranked) - 0.4)
    ax.set_xlim(0, max(r.tflops for r in ranked) * 1.1)
