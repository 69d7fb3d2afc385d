"""Matplotlib figures of a sweep (SVG): latency and TFLOP/s against sequence length, one line per provider.

How a reader tells the lines apart: one hue per provider *family* (sdpa, flash_attn3, xformers, ...; each
family declares it in the provider registry), and within a family a shade of it and one line style and
marker per variant (sdpa_cudnn solid circles, sdpa_flash dashed squares, ...). The shared legend (10 pt) lists
providers fastest first. Quantised kernels (int8/fp8, judged with the looser quantised tolerance) get their
own row of panels with their own y axis, labelled "(quantised)", so they never top the exact kernels'
chart; `incorrect` rows are drawn thin and grey with crosses, labelled "(incorrect)", so a wrong-but-fast kernel is visible but never mistaken for
a result. A provider that could not run at some shapes (oom, unsupported, error) gets a cross at the
bottom of the panel at those shapes, in its colour. Everything that did not run is returned as rows
for a table under the figure (`not_run_markdown`), not drawn inside it.

The figures have a transparent background and mid-tone text, so they read on a light and a dark page.
CPU timings (perf_counter) are stamped "not a GPU measurement".
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from attnbench.rows import PASS_TITLES, Result, is_quantized

METRICS = {  # metric -> (axis label, higher is better)
    "ms_median": ("latency (ms, median; band p20-p80)", False),
    "tflops": ("TFLOP/s (band p20-p80)", True),
}
LEGEND_SIZE = 10  # pt: about 11 px on a 1400 px page, where a two-panel figure is drawn at ~80 %
CPU_NOTE = "CPU timing (perf_counter): not a GPU measurement"
MID = "#768390"  # text, axes and grid: readable on white and on a dark page
INCORRECT_COLOR = "#9a9a9a"
# A panel draws at most this many providers in their colours, the fastest (a sweep of every Flux provider
# has 30+: their shades became indistinguishable); the others are thin grey lines behind them under one
# legend entry, and the table lists them all.
MAX_COLOURED = 10
OTHERS = "#b4b9bf"
OTHERS_LABEL = "slower providers (in the results table)"
# variant styles within a family: (line style, marker)
VARIANTS = [("-", "o"), ((0, (5, 2)), "s"), ((0, (1, 1.5)), "^"), ((0, (5, 2, 1, 2)), "D"),
            ((0, (8, 2)), "v"), ((0, (3, 1, 1, 1, 1, 1)), "P"), ((0, (2, 2)), "X"), ((0, (10, 2, 2, 2)), "*")]  # fmt: skip
DID_NOT_RUN = ("oom", "unsupported", "error")  # marked where they fall; `unavailable` is everywhere


def style_rc() -> dict:
    """rcParams of every figure: transparent, mid-tone text, SVG text kept as text."""
    return {
        "svg.fonttype": "none",
        "font.size": 10,
        "figure.facecolor": "none",
        "axes.facecolor": "none",
        "savefig.facecolor": "none",
        "savefig.transparent": True,
        "text.color": MID,
        "axes.labelcolor": MID,
        "axes.edgecolor": MID,
        "axes.titlecolor": MID,
        "xtick.color": MID,
        "ytick.color": MID,
        "legend.labelcolor": MID,
        "grid.color": MID,
        "grid.alpha": 0.35,
        "grid.linewidth": 0.6,
    }


# Colours by family come from the provider registry (each provider family declares its hue), so a family
# looks the same in every figure and on every machine's page. A family no provider declares (a
# context-parallel strategy, a study's own eager baseline) takes a colour from FALLBACK chosen by a hash of
# its name: stable across figures and machines, though two such families may share one.
FALLBACK = ("#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02", "#a6761d", "#1f78b4", "#b2df8a",
            "#fb9a99", "#cab2d6", "#6a3d9a")  # fmt: skip


def family_hue(family: str) -> str:
    """The registered hue of a provider family, else a stable FALLBACK colour for the name."""
    import zlib

    from attnbench.bench import providers

    return providers.family_hues().get(family) or FALLBACK[zlib.crc32(family.encode()) % len(FALLBACK)]


def _distinct_hues(families: list[str]) -> dict[str, str]:
    """family_hue per family, except that an unregistered family whose FALLBACK colour another family of
    the same figure already took gets the next free one (two hashed names must not look alike in one
    figure; they repeat only past len(FALLBACK) unregistered families)."""
    from attnbench.bench import providers

    registered = providers.family_hues()
    taken = {registered[f] for f in families if f in registered}
    hues = {}
    for family in families:
        hue = family_hue(family)
        if family not in registered:
            start = FALLBACK.index(hue)
            free = [FALLBACK[(start + i) % len(FALLBACK)] for i in range(len(FALLBACK))]
            hue = next((h for h in free if h not in taken), hue)
        taken.add(hue)
        hues[family] = hue
    return hues


def shade(hue: str, index: int, count: int) -> str:
    """Member `index` of `count` in a family: the hue itself for one member, else lightness spread from
    darker to lighter around it (so variants stay recognisably the family's colour)."""
    import colorsys

    if count <= 1:
        return hue
    r, g, b = (int(hue[i : i + 2], 16) / 255 for i in (1, 3, 5))
    h, lightness, s = colorsys.rgb_to_hls(r, g, b)
    step = min(0.5 / (count - 1), 0.14)  # at most +-0.25 around the hue: never white or black
    lightness = min(max(lightness + (index - (count - 1) / 2) * step, 0.15), 0.85)
    return "#" + "".join(f"{round(c * 255):02x}" for c in colorsys.hls_to_rgb(h, lightness, s))


def styles(names: Iterable[str], family_of) -> dict[str, dict]:
    """One hue per family (family_hue), a shade of it and a (line style, marker) per provider within it:
    {name: plot kwargs}."""
    names = sorted(set(names))
    families = sorted({family_of(n) for n in names})
    hues = _distinct_hues(families)
    out = {}
    for family in families:
        members = [n for n in names if family_of(n) == family]
        hue = hues[family]
        for v_index, name in enumerate(members):
            line, marker = VARIANTS[v_index % len(VARIANTS)]
            out[name] = {"color": shade(hue, v_index, len(members)), "linestyle": line, "marker": marker}
    return out


@dataclass
class PlotInfo:
    path: Path
    lines: dict[str, list[str]] = field(default_factory=dict)  # pass -> each line's provider label, its panel
    not_run: list[str] = field(default_factory=list)  # "provider [pass]: status: reason (shapes)"


def _seq(row: Result) -> int:
    return row.workload.seqlen_k


def _not_run_groups(rows: list[Result]) -> list[dict]:
    all_seqs = sorted({_seq(r) for r in rows})
    all_passes = sorted({r.pass_ for r in rows}, key=list(PASS_TITLES).index)
    grouped: dict[tuple[str, str, str], list[Result]] = defaultdict(list)
    for row in rows:
        if row.status not in ("ok", "incorrect"):
            grouped[(row.provider, row.status, row.reason or "no reason given")].append(row)
    groups = []
    for (provider, status, reason), group in sorted(grouped.items()):
        passes = sorted({r.pass_ for r in group}, key=list(PASS_TITLES).index)
        seqs = sorted({_seq(r) for r in group})
        where = []
        if passes != all_passes:
            where.append("/".join(passes))
        if seqs != all_seqs:
            where.append("S=" + ",".join(map(str, seqs)))
        groups.append({"provider": provider, "status": status, "reason": reason, "where": "; ".join(where)})
    return groups


def not_run(rows: Iterable[Result]) -> list[str]:
    """One line per (provider, status, reason): who did not run, why, and where (if not everywhere)."""
    return [
        f"{g['provider']}: {g['status']}: {g['reason']}" + (f" ({g['where']})" if g["where"] else "")
        for g in _not_run_groups(list(rows))
    ]


def not_run_markdown(rows: Iterable[Result]) -> str:
    """The same as a Markdown table (for the page, under the figure): provider, status, reason, where."""
    groups = _not_run_groups(list(rows))
    if not groups:
        return "Every provider ran at every shape.\n"
    lines = ["| provider | status | reason | where |", "|---|---|---|---|"]
    for g in groups:
        cells = [g["provider"], g["status"], g["reason"], g["where"] or "everywhere"]
        lines.append("| " + " | ".join(c.replace("|", "\\|").replace("\n", " ") for c in cells) + " |")
    return "\n".join(lines) + "\n"


def _band(row: Result, metric: str) -> tuple[float, float] | None:
    if row.ms_p20 is None or row.ms_p80 is None or row.ms_median is None:
        return None
    if metric == "ms_median":
        return row.ms_p20, row.ms_p80
    if row.tflops is None or not row.ms_p20 or not row.ms_p80:
        return None
    work = row.tflops * row.ms_median  # TFLOP/s x ms: the same FLOPs at the quantile times
    return work / row.ms_p80, work / row.ms_p20


def families_of(rows: list[Result]) -> dict[str, str]:
    """{provider: its family} (the family field, else the name's first part)."""
    return {r.provider: r.family or r.provider.split("_")[0] for r in rows}


def _speed_order(rows: list[Result], metric: str) -> list[str]:
    """Providers fastest first: by the median, over the shapes and passes each measured, of its speed
    as a share of the fastest provider's at that shape and pass. A share, not the raw metric, so that a
    provider that ran only the short lengths is not ranked by their smaller times, and latency and
    TFLOP/s give one order."""
    import statistics

    higher = METRICS[metric][1]
    by_point: dict[tuple, dict[str, float]] = defaultdict(dict)
    for r in rows:
        value = getattr(r, metric)
        if r.status == "ok" and value:
            by_point[(r.pass_, _seq(r))][r.provider] = value
    shares: dict[str, list[float]] = defaultdict(list)
    for values in by_point.values():
        best = max(values.values()) if higher else min(values.values())
        for provider, value in values.items():
            shares[provider].append(value / best if higher else best / value)
    ranked = sorted(shares, key=lambda p: (-statistics.median(shares[p]), p))
    return ranked + sorted({r.provider for r in rows} - set(ranked))


def plot_sweep(
    rows: Iterable[Result], path: Path | str, *, metric: str = "ms_median", title: str = "", note: str = ""
) -> PlotInfo:
    """One panel per pass present; x = key sequence length; writes an SVG (transparent background)."""
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
    quantised = [r for r in drawn if r.status == "ok" and is_quantized(r)]  # their own panels, own axis
    exact = [r for r in drawn if r not in quantised]
    families = families_of(rows)
    looks = styles(families, families.get)
    cpu_timed = any(r.timer == "perf_counter" for r in rows) and "not a GPU measurement" not in note
    notes = [n for n in (note, CPU_NOTE if cpu_timed else "") if n]

    with plt.style.context("default"), matplotlib.rc_context(style_rc()):
        grid = (2 if quantised else 1, len(passes))
        fig, axes = plt.subplots(*grid, figsize=(5.4 * len(passes), 4.4 * grid[0]), squeeze=False,
                                 layout="constrained")  # fmt: skip
        for ax, pass_ in zip(axes[0], passes):
            info.lines[pass_] = _draw_panel(ax, [r for r in exact if r.pass_ == pass_], metric, looks, pass_)
            _mark_not_run(ax, [r for r in rows if r.pass_ == pass_ and r.status in DID_NOT_RUN], looks)
            _frame(ax, PASS_TITLES.get(pass_, pass_), metric, bool(info.lines[pass_]))
        for ax, pass_ in zip(axes[1] if quantised else (), passes):
            mine = [r for r in quantised if r.pass_ == pass_]
            if not mine:  # a pass no quantised kernel runs (fp8 kernels are forward-only): no empty frame
                ax.set_visible(False)
                continue
            info.lines[pass_] += _draw_panel(ax, mine, metric, looks, pass_)
            _frame(ax, f"{PASS_TITLES.get(pass_, pass_)}: quantised (fp8/int8), own tolerance", metric, True)
        _shared_legend(fig, list(axes.flat), _speed_order(drawn, metric))
        save_svg(fig, path, title, notes)
    return info


def save_svg(fig, path: Path | str, title: str = "", notes: Iterable[str] = (), **savefig) -> None:
    """Every figure's ending: the title over its notes (the label, "not a GPU measurement"), the SVG
    written (its folder made), the figure closed. The same figure writes the same bytes: a fixed salt
    for the SVG's element ids and no date, so re-presenting unchanged numbers leaves outputs/ unchanged."""
    import matplotlib
    import matplotlib.pyplot as plt

    notes = [n for n in notes if n]
    heading = title + (f"\n{' | '.join(notes)}" if notes else "")
    if heading:
        fig.suptitle(heading, fontsize=11)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    savefig.setdefault("bbox_inches", "tight")
    metadata = {"Date": None, **(savefig.pop("metadata", None) or {})}
    with matplotlib.rc_context({"svg.hashsalt": "attnbench"}):
        fig.savefig(path, format="svg", metadata=metadata, **savefig)
    plt.close(fig)


def _frame(ax, title: str, metric: str, drawn: bool, empty: str = "no measured provider") -> None:
    ax.set_title(title)
    ax.set_xlabel("sequence length (keys)")
    ax.set_ylabel(METRICS[metric][0])
    ax.grid(True)
    if not drawn:
        ax.text(0.5, 0.5, empty, ha="center", va="center", transform=ax.transAxes)


def _label(provider: str, status: str, quantised: bool) -> str:
    if status != "ok":
        return f"{provider} (incorrect)"
    return f"{provider} (quantised)" if quantised else provider


def _draw_panel(ax, rows: list[Result], metric: str, looks: dict, pass_: str) -> list[str]:
    by_line: dict[tuple[str, str], list[Result]] = defaultdict(list)
    for row in rows:
        by_line[(row.provider, row.status)].append(row)
    coloured = set(_speed_order([r for r in rows if r.status == "ok"], metric)[:MAX_COLOURED])
    labels = []
    for (provider, status), group in sorted(by_line.items()):
        group.sort(key=_seq)
        xs = [_seq(r) for r in group]
        ys = [getattr(r, metric) for r in group]
        name = _label(provider, status, any(is_quantized(r) for r in group))
        measured = status == "ok" and provider in coloured  # in its colour, with its band
        look, label = dict(looks[provider]), name
        if status != "ok":  # a wrong result: thin, grey, crosses; never looks like a measurement
            look = {"color": INCORRECT_COLOR, "linestyle": (0, (2, 2)), "marker": "x"}
        elif not measured:  # behind the leaders (above the grid's 1.5, under their 2), one legend entry
            look, label = {"color": OTHERS, "linestyle": "-", "marker": ".", "zorder": 1.6}, OTHERS_LABEL
        elif any(is_quantized(r) for r in group):
            look["linestyle"] = (0, (5, 2, 1, 2))
        # gid: the SVG group id, so a reader (or a test) can find each provider's line in the file
        ax.plot(xs, ys, markersize=4, linewidth=1.7 if measured else 1.0, label=label,
                gid=f"series-{pass_}-{provider}-{status}", **look)  # fmt: skip
        bands = [_band(r, metric) for r in group]
        if measured and all(bands):
            ax.fill_between(xs, [b[0] for b in bands], [b[1] for b in bands], color=look["color"], alpha=0.15,
                            linewidth=0)  # fmt: skip
        labels.append(name)
    _axes(ax, rows, metric)
    return labels


def _axes(ax, rows: list[Result], metric: str) -> None:
    """Sequence lengths as the x ticks; a linear y axis from 0 with enough ticks (latency spanning more
    than 30x: a log axis labelled at 1, 2 and 5 of each decade)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator

    seqs = sorted({_seq(r) for r in rows})
    if seqs:
        ax.set_xticks(seqs)
        ax.set_xticklabels([str(s) for s in seqs], rotation=45 if len(seqs) > 5 else 0, fontsize=9)
    values = [getattr(r, metric) for r in rows if getattr(r, metric)]
    if metric == "ms_median" and values and max(values) / min(values) > 30:
        ax.set_yscale("log")  # math/eager paths can be 100x slower than fused kernels
        ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
    else:
        ax.set_ylim(bottom=0)
        ax.yaxis.set_major_locator(MaxNLocator(nbins=9, min_n_ticks=5))


def _mark_not_run(ax, rows: list[Result], looks: dict) -> None:
    """A cross at the bottom of the panel where a provider could not run (oom, unsupported, error)."""
    from matplotlib.transforms import blended_transform_factory

    if not rows:
        return
    at_bottom = blended_transform_factory(ax.transData, ax.transAxes)
    for status in DID_NOT_RUN:
        mine = [r for r in rows if r.status == status]
        if not mine:
            continue
        ax.scatter([_seq(r) for r in mine], [0.03] * len(mine), transform=at_bottom, marker="x", s=36,
                   c=[looks[r.provider]["color"] for r in mine], linewidths=1.5, clip_on=False,
                   label=f"✕ {status} (see the table)", gid=f"not-run-{status}")  # fmt: skip


def legend_handles(axes) -> dict[str, object]:
    """Each label's first handle over the panels `axes`, in the order the labels first appear."""
    handles: dict[str, object] = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, handle)
    return handles


def right_legend(fig, axes) -> None:
    """One legend for the panels `axes`, to the right of the figure, labels in first-seen order."""
    handles = legend_handles(axes)
    if handles:
        fig.legend(list(handles.values()), list(handles), loc="upper left", bbox_to_anchor=(1.0, 0.92),
                   fontsize=LEGEND_SIZE, frameon=False)  # fmt: skip


def _shared_legend(fig, axes, order: list[str]) -> None:
    """One legend to the right of all panels, fastest provider first (a provider keeps its look)."""
    handles = legend_handles(axes)
    rank = {p: i for i, p in enumerate(order)}

    def key(label: str) -> tuple:
        base = label.split(" (")[0]
        return (label.startswith("✕"), label == OTHERS_LABEL, rank.get(base, len(rank)), label)

    labels = sorted(handles, key=key)
    if labels:
        fig.legend([handles[label] for label in labels], labels, loc="upper left", bbox_to_anchor=(1.0, 0.92),
                   fontsize=LEGEND_SIZE, frameon=False, title="fastest first", title_fontsize=LEGEND_SIZE)  # fmt: skip
