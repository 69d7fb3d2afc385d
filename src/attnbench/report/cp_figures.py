"""The context-parallel figure: TFLOP/s per GPU against total sequence length, one panel per (pass, mask).

One colour per strategy, one line style per local kernel (`zigzag` solid, `zigzag+fa3` dashed); the
single-GPU reference at the same per-GPU tokens is a thick mid-grey dashed line. A mask timed at one or
two lengths (the default profile: causal at two, full at one) gets a panel per length with a bar per
strategy, fastest on top, the reference a vertical line: twenty markers at one x would hide each other,
and twenty lines between two points are a tangle. Strategies that failed the
correctness check are grey and labelled "(incorrect)"; oom/unsupported/error rows are crosses where
they fall, and every row that did not run is returned for a table under the figure
(attnbench.report.figures.not_run_markdown), not drawn inside it. Transparent background, mid-tone
text: readable on light and dark pages.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from pathlib import Path

from attnbench.report.cp_rows import is_reference, strategy_of
from attnbench.report.cp_tables import verdicts
from attnbench.report.figures import (
    CPU_NOTE,
    DID_NOT_RUN,
    INCORRECT_COLOR,
    MID,
    PASS_TITLES,
    legend_handles,
    not_run,
    save_svg,
    style_rc,
    styles,
)
from attnbench.rows import Result

MASKS = ("causal", "full")
BAR_LENGTHS = 2  # a mask timed at this many lengths or fewer is drawn as bars, one panel per length
MAX_COLUMNS = 3  # ... while the figure keeps at most this many columns of panels
PANEL_WIDTH_IN = 4.1  # three columns and the legend stay >= 8 px text on a 1400 px page (sitecheck)


# the peers' strategies share their library's hue (as their kernels do in the other reports)
PEER_FAMILIES = {"te_": "te", "magi": "magi_ffa"}


def _strategy(name: str) -> str:
    return name.split("+")[0]  # "zigzag+fa3" is zigzag with FA3 as its local kernel


def _family(name: str) -> str:
    strategy = _strategy(name)
    return next((fam for prefix, fam in PEER_FAMILIES.items() if strategy.startswith(prefix)), strategy)


def _incorrect(strategy: str, mask: str, checks: dict) -> bool:
    check = checks.get((_strategy(strategy), mask))
    return check is not None and check["status"] != "ok"


def _measured(rows: list[Result]) -> dict[str, list[Result]]:
    lines: dict[str, list[Result]] = {}
    for r in sorted(rows, key=lambda r: r.workload.seqlen_q):
        if not is_reference(r) and r.status == "ok" and r.tflops:
            lines.setdefault(strategy_of(r), []).append(r)
    return lines


def _references(rows: list[Result]) -> dict[str, list[Result]]:
    refs: dict[str, list[Result]] = {}
    for r in sorted(rows, key=lambda r: r.workload.seqlen_q):
        if is_reference(r) and r.status == "ok" and r.tflops:
            refs.setdefault(r.provider, []).append(r)
    return refs


def _ref_label(provider: str, world: int) -> str:
    return f"single GPU ({provider.removeprefix('single_gpu_')}) at seq/{world} tokens"


def _draw_lines(ax, rows: list[Result], world: int, checks: dict, looks: dict, mask: str) -> None:
    for strategy, mine in _measured(rows).items():
        bad = _incorrect(strategy, mask, checks)
        look = {"color": INCORRECT_COLOR, "linestyle": (0, (2, 2)), "marker": "x"} if bad else looks[strategy]
        ax.plot([r.workload.seqlen_q for r in mine], [r.tflops for r in mine], markersize=4,
                linewidth=1.0 if bad else 1.7, label=strategy + (" (incorrect)" if bad else ""),
                gid=f"series-{strategy}", **look)  # fmt: skip
    for i, (provider, refs) in enumerate(_references(rows).items()):
        ax.plot([r.workload.seqlen_q * world for r in refs], [r.tflops for r in refs], color=MID, linewidth=2.4,
                linestyle=(0, (4, 2)) if i == 0 else (0, (1, 1)), marker="s", markersize=4,
                gid=f"series-reference-{provider}", label=_ref_label(provider, world))  # fmt: skip
    from matplotlib.transforms import blended_transform_factory

    at_bottom = blended_transform_factory(ax.transData, ax.transAxes)
    for status in DID_NOT_RUN:
        mine = [r for r in rows if r.status == status and not is_reference(r)]
        if mine:
            ax.scatter([r.workload.seqlen_q for r in mine], [0.03] * len(mine), transform=at_bottom, marker="x",
                       s=36, c=[looks[strategy_of(r)]["color"] for r in mine], clip_on=False,
                       label=f"✕ {status} (see the table)", gid=f"not-run-{status}")  # fmt: skip


def _draw_bars(ax, rows: list[Result], world: int, checks: dict, looks: dict, mask: str) -> None:
    """One sequence length: a horizontal bar per strategy, fastest on top; the reference a line."""
    lines = _measured(rows)
    ranked = sorted(lines, key=lambda s: lines[s][0].tflops)
    for y, strategy in enumerate(ranked):
        bad = _incorrect(strategy, mask, checks)
        color = INCORRECT_COLOR if bad else looks[strategy]["color"]
        hatch = "//" if looks[strategy]["linestyle"] != "-" else None
        ax.barh(y, lines[strategy][0].tflops, color=color, alpha=0.85, hatch=hatch, edgecolor=MID, linewidth=0.5,
                label=strategy + (" (incorrect)" if bad else ""), gid=f"series-{strategy}")  # fmt: skip
    ax.set_yticks(range(len(ranked)), ranked, fontsize=9)
    for container in ax.containers:  # the value inside each bar, dark on a light shade
        red, green, blue, _ = container.patches[0].get_facecolor()
        ink = (
            "#222222" if 0.299 * red + 0.587 * green + 0.114 * blue > 0.6 else "white"
        )  # perceived brightness
        ax.bar_label(container, fmt="%.0f", fontsize=9, label_type="center", color=ink)
    references = _references(rows)
    for i, (provider, refs) in enumerate(references.items()):
        ax.axvline(refs[0].tflops, color=MID, linewidth=2.0, linestyle=(0, (4, 2)) if i == 0 else (0, (1, 1)),
                   label=_ref_label(provider, world), gid=f"series-reference-{provider}")  # fmt: skip
    missing = [r for r in rows if r.status in DID_NOT_RUN and not is_reference(r)]
    if missing:
        ax.text(0.99, 0.01, "not run: " + ", ".join(sorted({f"{strategy_of(r)} ({r.status})" for r in missing})),
                transform=ax.transAxes, ha="right", va="bottom", fontsize=9)  # fmt: skip
    values = [mine[0].tflops for mine in lines.values()] + [refs[0].tflops for refs in references.values()]
    ax.set_xlim(0, max(values, default=1.0) * 1.06)  # the reference lines inside the frame, not on its edge


def plot_tflops(
    rows: Iterable[Result],
    path: Path | str,
    *,
    title: str = "",
    note: str = "",
    correctness: Iterable[dict] = (),
) -> list[str]:
    """Write the SVG; return the 'did not run' lines (for the table under the figure)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    rows = list(rows)
    checks = verdicts(correctness)
    worlds = [r.extra.get("world_size") for r in rows if not is_reference(r) and r.extra.get("world_size")]
    world = worlds[0] if worlds else 1
    passes = [p for p in PASS_TITLES if any(r.pass_ == p for r in rows)] or ["fwd"]
    masks = [m for m in MASKS if any(r.workload.mask == m for r in rows)] or ["causal"]
    strategies = sorted({strategy_of(r) for r in rows if not is_reference(r)})
    looks = styles(strategies, _family)
    for name, look in looks.items():  # the line style says the local kernel (solid: the default one)
        look["linestyle"] = "-" if "+" not in name else (0, (5, 2))
    cpu = any(r.timer == "perf_counter" for r in rows) and "not a GPU measurement" not in note
    notes = [n for n in (note, CPU_NOTE if cpu else "") if n]
    speed = {s: statistics.median(r.tflops for r in mine) for s, mine in _measured(rows).items()}
    with plt.style.context("default"), matplotlib.rc_context(style_rc()):
        columns = _columns(rows, masks, world)
        fig, axes = plt.subplots(len(passes), len(columns), figsize=(PANEL_WIDTH_IN * len(columns), 4.0 * len(passes)),
                                 squeeze=False, layout="constrained")  # fmt: skip
        for i, pass_ in enumerate(passes):
            for j, (mask, keep) in enumerate(columns):
                ax = axes[i][j]
                panel = [r for r in rows if r.pass_ == pass_ and r.workload.mask == mask and keep(r)]
                seqs = sorted({r.workload.seqlen_q for r in panel if not is_reference(r)})
                name = f"{PASS_TITLES.get(pass_, pass_)}, {mask} mask"
                if len(seqs) == 1:
                    _draw_bars(ax, panel, world, checks, looks, mask)
                    ax.set_title(f"{name},\n{seqs[0]} tokens")  # two lines: side by side, one line overlaps
                    ax.set_xlabel("TFLOP/s per GPU")
                    ax.xaxis.set_major_locator(MaxNLocator(nbins=8))
                    ax.grid(True, axis="x")
                else:
                    _draw_lines(ax, panel, world, checks, looks, mask)
                    ax.set_title(name)
                    ax.set_xlabel("total sequence length (tokens)")
                    ax.set_ylabel("TFLOP/s per GPU")
                    ax.grid(True)
                    if seqs:
                        ax.set_xscale("log", base=2)
                        ax.set_xticks(seqs, [str(s) for s in seqs], fontsize=10)
                    ax.set_ylim(bottom=0)
                    ax.yaxis.set_major_locator(MaxNLocator(nbins=9, min_n_ticks=5))
                if not _measured(panel):
                    ax.text(0.5, 0.5, "nothing measured", ha="center", va="center", transform=ax.transAxes)
        _legend(fig, axes, speed)
        save_svg(fig, path, title, notes)
    return not_run(rows)


def _columns(rows: list[Result], masks: list[str], world: int) -> list[tuple[str, object]]:
    """(mask, which rows) per column: a mask timed at up to BAR_LENGTHS lengths gets a bar panel per
    length (its references at the per-GPU tokens with it), since a line between two points over twenty
    strategies is a tangle; a mask timed at more lengths gets one panel of lines. Past MAX_COLUMNS
    columns the split is not made (the figure would be drawn too small to read on a page)."""
    timed = {m: sorted({r.workload.seqlen_q for r in rows if r.workload.mask == m and not is_reference(r)})
             for m in masks}  # fmt: skip
    split = sum(len(seqs) if len(seqs) <= BAR_LENGTHS else 1 for seqs in timed.values()) <= MAX_COLUMNS
    columns = []
    for mask in masks:
        seqs = timed[mask]
        if split and 1 < len(seqs) <= BAR_LENGTHS:
            for seq in seqs:
                columns.append((mask, lambda r, seq=seq: r.workload.seqlen_q == (seq // world if is_reference(r)
                                                                               else seq)))  # fmt: skip
        else:
            columns.append((mask, lambda r: True))
    return columns


def _legend(fig, axes, speed: dict[str, float]) -> None:
    """One legend for every panel: strategies fastest first (median TFLOP/s), then references, marks."""
    handles = legend_handles(axes.flat)

    def key(label: str) -> tuple:
        base = label.split(" (")[0]
        kind = 2 if label.startswith("✕") else 1 if label.startswith("single GPU") else 0
        return (kind, -speed.get(base, 0.0), label)

    labels = sorted(handles, key=key)
    if labels:
        fig.legend([handles[label] for label in labels], labels, loc="upper left", bbox_to_anchor=(1.0, 0.95),
                   fontsize=10, frameon=False, title="fastest first", title_fontsize=10)  # fmt: skip
