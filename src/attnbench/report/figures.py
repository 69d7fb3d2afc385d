"""Matplotlib figures of a sweep (SVG): latency and TFLOP/s against sequence length, one line per provider.

Only measured rows are drawn: `ok` as solid lines, quantised kernels (int8/fp8, judged with the looser
quantised tolerance) dash-dotted and labelled "(quantised)", `incorrect` dashed and labelled "(incorrect)"
so a wrong-but-fast kernel is visible but never mistaken for a result. Everything that did not run
(unavailable, unsupported, oom, error) is listed under the figure with its reason, and returned so a
notebook can print the same list. CPU timings (perf_counter) are stamped "not a GPU measurement".
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from attnbench.bench.results import Result, is_quantized

METRICS = {  # metric -> (axis label, higher is better)
    "ms_median": ("latency (ms, median; band p20-p80)", False),
    "tflops": ("TFLOP/s (band p20-p80)", True),
}
PASS_TITLES = {"fwd": "forward", "bwd": "backward", "fwd_bwd": "forward + backward"}
CPU_NOTE = "CPU timing (perf_counter): not a GPU measurement"


@dataclass
class PlotInfo:
    path: Path
    lines: dict[str, list[str]] = field(default_factory=dict)  # pass -> legend labels drawn in its panel
    not_run: list[str] = field(default_factory=list)  # "provider [pass]: status: reason (shapes)"


def _seq(row: Result) -> int:
    return row.workload.seqlen_k


def not_run(rows: Iterable[Result]) -> list[str]:
    """One line per (provider, status, reason): who did not run, why, and where (if not everywhere)."""
    rows = list(rows)
    all_seqs = sorted({_seq(r) for r in rows})
    all_passes = sorted({r.pass_ for r in rows}, key=list(PASS_TITLES).index)
    grouped: dict[tuple[str, str, str], list[Result]] = defaultdict(list)
    for row in rows:
        if row.status not in ("ok", "incorrect"):
            grouped[(row.provider, row.status, row.reason or "no reason given")].append(row)
    lines = []
    for (provider, status, reason), group in grouped.items():
        passes = sorted({r.pass_ for r in group}, key=list(PASS_TITLES).index)
        seqs = sorted({_seq(r) for r in group})
        where = []
        if passes != all_passes:
            where.append("/".join(passes))
        if seqs != all_seqs:
            where.append("S=" + ",".join(map(str, seqs)))
        where_text = f" ({'; '.join(where)})" if where else ""
        lines.append((provider, status, f"{provider}: {status}: {reason}{where_text}"))
    return [line for *_, line in sorted(lines)]


def _band(row: Result, metric: str) -> tuple[float, float] | None:
    if row.ms_p20 is None or row.ms_p80 is None or row.ms_median is None:
        return None
    if metric == "ms_median":
        return row.ms_p20, row.ms_p80
    if row.tflops is None or not row.ms_p20 or not row.ms_p80:
        return None
    work = row.tflops * row.ms_median  # TFLOP/s x ms: the same FLOPs at the quantile times
    return work / row.ms_p80, work / row.ms_p20


def _colors(providers: list[str]) -> dict[str, tuple]:
    import matplotlib

    cmap = matplotlib.colormaps["tab20"] if len(providers) > 10 else matplotlib.colormaps["tab10"]
    return {name: cmap(i % cmap.N) for i, name in enumerate(providers)}


def plot_sweep(
    rows: Iterable[Result], path: Path | str, *, metric: str = "ms_median", title: str = "", note: str = ""
) -> PlotInfo:
    """One panel per pass present; x = key sequence length; writes an SVG (white background)."""
    if metric not in METRICS:
        raise ValueError(f"metric {metric!r} is not one of {tuple(METRICS)}")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = list(rows)
    path = Path(path)
    info = PlotInfo(path=path, not_run=not_run(rows))
    passes = sorted({r.pass_ for r in rows}, key=list(PASS_TITLES).index) or ["fwd"]
    drawn = [r for r in rows if r.status in ("ok", "incorrect") and getattr(r, metric) is not None]
    colors = _colors(sorted({r.provider for r in drawn}))
    cpu_timed = any(r.timer == "perf_counter" for r in rows) and "not a GPU measurement" not in note
    notes = [n for n in (note, CPU_NOTE if cpu_timed else "") if n]

    with plt.style.context("default"), matplotlib.rc_context({"svg.fonttype": "none", "font.size": 10}):
        fig, axes = plt.subplots(
            1,
            len(passes),
            figsize=(5.4 * len(passes), 4.4),
            squeeze=False,
            facecolor="white",
            layout="constrained",
        )
        for ax, pass_ in zip(axes[0], passes):
            info.lines[pass_] = _draw_panel(ax, [r for r in drawn if r.pass_ == pass_], metric, colors, pass_)
            ax.set_title(PASS_TITLES.get(pass_, pass_))
            ax.set_xlabel("sequence length (keys)")
            ax.set_ylabel(METRICS[metric][0])
            ax.grid(True, color="#d0d0d0", linewidth=0.6)
            if not info.lines[pass_]:
                ax.text(
                    0.5,
                    0.5,
                    "no measured provider",
                    ha="center",
                    va="center",
                    transform=ax.transAxes,
                    color="#666666",
                )
        _shared_legend(fig, axes[0])
        heading = title + (f"\n{' | '.join(notes)}" if notes else "")
        if heading:
            fig.suptitle(heading, fontsize=11)
        footer = ["did not run:"] + [f"  {_shorten(line)}" for line in info.not_run] if info.not_run else []
        _place_footer(fig, footer)
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, format="svg", bbox_inches="tight", facecolor="white")
        plt.close(fig)
    return info


def _draw_panel(ax, rows: list[Result], metric: str, colors: dict, pass_: str) -> list[str]:
    by_line: dict[tuple[str, str], list[Result]] = defaultdict(list)
    for row in rows:
        by_line[(row.provider, row.status)].append(row)
    labels = []
    for (provider, status), group in sorted(by_line.items()):
        group.sort(key=_seq)
        xs = [_seq(r) for r in group]
        ys = [getattr(r, metric) for r in group]
        if status != "ok":
            label, style = f"{provider} (incorrect)", "--"
        elif any(is_quantized(r) for r in group):
            label, style = f"{provider} (quantised)", "-."
        else:
            label, style = provider, "-"
        # gid: the SVG group id, so a reader (or a test) can find each provider's line in the file
        ax.plot(
            xs,
            ys,
            style,
            marker="o",
            markersize=3.5,
            linewidth=1.6,
            color=colors[provider],
            label=label,
            gid=f"series-{pass_}-{provider}-{status}",
        )
        bands = [_band(r, metric) for r in group]
        if status == "ok" and all(bands):
            ax.fill_between(
                xs,
                [b[0] for b in bands],
                [b[1] for b in bands],
                color=colors[provider],
                alpha=0.15,
                linewidth=0,
            )
        labels.append(label)
    seqs = sorted({_seq(r) for r in rows})
    if seqs:
        ax.set_xticks(seqs)
        ax.set_xticklabels([str(s) for s in seqs], rotation=45 if len(seqs) > 5 else 0, fontsize=8)
    values = [getattr(r, metric) for r in rows if getattr(r, metric)]
    if metric == "ms_median" and values and max(values) / min(values) > 30:
        ax.set_yscale("log")  # math/eager paths can be 100x slower than fused kernels
    else:
        ax.set_ylim(bottom=0)
    return labels


def _shared_legend(fig, axes) -> None:
    """One legend to the right of all panels (a provider keeps its colour in every panel)."""
    handles: dict[str, object] = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, handle)
    if handles:
        fig.legend(
            list(handles.values()),
            list(handles),
            loc="upper left",
            bbox_to_anchor=(1.0, 0.92),
            fontsize=8,
            frameon=False,
        )


def _shorten(line: str, limit: int = 120) -> str:
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _place_footer(fig, lines: list[str]) -> None:
    if not lines:
        return
    fig.text(
        0.01,
        -0.02,
        "\n".join(lines),
        ha="left",
        va="top",
        fontsize=8,
        family="monospace",
        color="#333333",
        wrap=True,
    )
