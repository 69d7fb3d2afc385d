"""Figures of the dilated-attention report (SVG, matplotlib; no torch), from Result rows alone.

`plot_scaling`: one panel per pass, x = tokens (log2), y = a metric per series: one hue per provider
family (a shade and a marker per provider, as in every sweep figure), dilated series solid, dense dashed,
incorrect rows marked. The cost-per-token view is the report's point: flat for dilated
attention (linear total work), growing linearly for dense causal attention (quadratic work). Under the
figure, wrapped and never cut: where each series stopped and why (the rows that were not run), and what never ran.
`plot_pattern`: the multiplicity matrix of one head as an image (the definition's picture).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

from attnbench.report.check_words import INCORRECT
from attnbench.report.dilated import GIB, PASS_NAMES, is_dilated, ns_per_token, stops, tokens_per_s
from attnbench.report.figures import CPU_NOTE, right_legend, save_svg, styles
from attnbench.rows import Result

METRICS = {  # metric -> (axis label, value of a row, log scale)
    "ns_per_token": ("cost per token (ns, median; band p20-p80)", ns_per_token, True),
    "tokens_per_s": ("tokens/s (median)", tokens_per_s, True),
    "peak_gib": ("peak memory (GiB, inputs included)", lambda r: (r.peak_mem_bytes or 0) / GIB or None, True),
    "tflops": ("TFLOP/s of the pattern's exact FLOPs", lambda r: r.tflops, False),
}


def _band(row: Result, metric: str):
    if metric != "ns_per_token" or row.ms_p20 is None or row.ms_p80 is None:
        return None
    per = 1e6 / (row.workload.batch * row.workload.seqlen_q)
    return row.ms_p20 * per, row.ms_p80 * per


def plot_scaling(rows: Iterable[Result], path: Path | str, *, metric: str = "ns_per_token", title: str = "",
                 note: str = "") -> list[str]:  # fmt: skip
    """Write the figure; returns the footer lines (where each series stopped and why)."""
    if metric not in METRICS:
        raise ValueError(f"metric {metric!r} is not one of {tuple(METRICS)}")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = list(rows)
    label, value, log = METRICS[metric]
    passes = [p for p in PASS_NAMES if any(r.pass_ == p for r in rows)] or ["fwd"]
    drawn = [r for r in rows if r.ms_median is not None and value(r)]
    providers = sorted({r.provider for r in drawn}, key=lambda p: (not p.startswith("dilated"), p))
    family = {r.provider: r.family or r.provider.split("_")[0] for r in drawn}
    looks = styles(providers, family.get)  # one hue per family, a shade and a marker per provider
    footer = stops(rows)
    notes = [
        n for n in (note, CPU_NOTE if any(r.timer == "perf_counter" for r in rows) and not note else "") if n
    ]
    with plt.style.context("default"), matplotlib.rc_context({"svg.fonttype": "none", "font.size": 10}):
        fig, axes = plt.subplots(1, len(passes), figsize=(5.6 * len(passes), 4.4), squeeze=False,
                                 facecolor="white", layout="constrained")  # fmt: skip
        for ax, pass_ in zip(axes[0], passes):
            _panel(ax, [r for r in drawn if r.pass_ == pass_], metric, value, looks, pass_)
            ax.set_title(PASS_NAMES[pass_])
            ax.set_xscale("log", base=2)
            if log:
                ax.set_yscale("log")
            ax.set_xlabel("sequence length (tokens)")
            ax.set_ylabel(label)
            ax.grid(True, which="both", color="#e0e0e0", linewidth=0.5)
        right_legend(fig, axes[0])
        text = "\n".join(["where each series ended:"] + [_wrapped(line, 70 * len(passes)) for line in footer])
        fig.text(0.01, -0.02, text, ha="left", va="top", fontsize=9, color="#333333")
        save_svg(fig, path, title, notes, facecolor="white")
    return footer


def _panel(ax, rows, metric, value, looks, pass_) -> None:
    lines: dict[str, list[Result]] = defaultdict(list)
    for r in rows:
        lines[r.provider].append(r)
    for provider, group in sorted(lines.items()):
        group.sort(key=lambda r: r.workload.seqlen_q)
        xs = [r.workload.seqlen_q for r in group]
        bad = any(r.ok is False for r in group)
        style = "-" if is_dilated(group[0]) else "--"
        name = (
            provider
            + (f" ({INCORRECT})" if bad else "")
            + ("" if is_dilated(group[0]) else " (dense causal)")
        )
        ax.plot(xs, [value(r) for r in group], linestyle=style, marker=looks[provider]["marker"], markersize=4,
                linewidth=1.6, color=looks[provider]["color"], label=name, gid=f"series-{pass_}-{provider}")  # fmt: skip
        bands = [_band(r, metric) for r in group]
        if all(bands):
            ax.fill_between(xs, [b[0] for b in bands], [b[1] for b in bands], color=looks[provider]["color"], alpha=0.15,
                            linewidth=0)  # fmt: skip
    if not rows:
        ax.text(
            0.5, 0.5, "nothing measured", ha="center", va="center", transform=ax.transAxes, color="#666666"
        )


def _wrapped(line: str, width: int) -> str:
    """A footer line wrapped at `width` characters, never cut: the reader gets every word."""
    import textwrap

    return "\n".join(textwrap.wrap(line, width, initial_indent="  ", subsequent_indent="      "))


def plot_pattern(matrix: list[list[int]], path: Path | str, *, title: str = "") -> None:
    """The multiplicity matrix (queries x keys; 0 = masked) of one head as an image."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap

    top = max(max(row) for row in matrix) if matrix else 1
    colors = ["#ffffff", "#c6dbef", "#6baed6", "#2171b5", "#08306b", "#000000"][: top + 1]
    with plt.style.context("default"), matplotlib.rc_context({"svg.fonttype": "none", "font.size": 9}):
        fig, ax = plt.subplots(figsize=(4.6, 4.2), facecolor="white", layout="constrained")
        image = ax.imshow(
            matrix, cmap=ListedColormap(colors), vmin=-0.5, vmax=top + 0.5, interpolation="nearest"
        )
        bar = fig.colorbar(image, ax=ax, ticks=list(range(top + 1)), shrink=0.8)
        bar.set_label("branches keeping the pair (0: masked)")
        ax.set_xlabel("key position")
        ax.set_ylabel("query position")
        ax.set_title(title, fontsize=9)
        save_svg(fig, path, facecolor="white")
