"""The context-parallel figure: TFLOP/s per GPU against total sequence length, one line per strategy,
one panel per (pass, mask), the single-GPU reference at the same per-GPU tokens drawn as a black line.

Strategies that failed the correctness check are drawn dashed and labelled "(incorrect)"; rows that
did not run (oom, unavailable, error) are listed under the figure with their reasons
(attnbench.report.figures.not_run).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from attnbench.bench.results import Result
from attnbench.report.cp_tables import is_reference, strategy_of, verdicts
from attnbench.report.figures import CPU_NOTE, PASS_TITLES, not_run

MASKS = ("causal", "full")


def _draw(ax, rows: list[Result], world: int, checks: dict, colors: dict) -> None:
    for strategy in dict.fromkeys(strategy_of(r) for r in rows if not is_reference(r)):
        mine = sorted(
            (r for r in rows if strategy_of(r) == strategy and r.status == "ok" and r.tflops),
            key=lambda r: r.workload.seqlen_q,
        )
        if not mine:
            continue
        check = checks.get((strategy, mine[0].workload.mask))
        bad = check is not None and check["status"] != "ok"
        ax.plot(
            [r.workload.seqlen_q for r in mine],
            [r.tflops for r in mine],
            "--" if bad else "-",
            marker="o",
            markersize=4,
            linewidth=1.6,
            color=colors[strategy],
            label=strategy + (" (incorrect)" if bad else ""),
            gid=f"series-{strategy}",
        )
    refs = sorted(
        (r for r in rows if is_reference(r) and r.status == "ok" and r.tflops),
        key=lambda r: r.workload.seqlen_q,
    )
    if refs:
        ax.plot(
            [r.workload.seqlen_q * world for r in refs],
            [r.tflops for r in refs],
            color="black",
            linewidth=2.2,
            linestyle=(0, (4, 2)),
            marker="s",
            markersize=4,
            gid="series-reference",
            label=f"single GPU ({refs[0].provider.removeprefix('single_gpu_')}) at seq/{world} tokens",
        )


def plot_tflops(
    rows: Iterable[Result],
    path: Path | str,
    *,
    title: str = "",
    note: str = "",
    correctness: Iterable[dict] = (),
) -> list[str]:
    """Write the SVG; return the 'did not run' lines (also printed under the figure)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = list(rows)
    checks = verdicts(correctness)
    worlds = [r.extra.get("world_size") for r in rows if not is_reference(r) and r.extra.get("world_size")]
    world = worlds[0] if worlds else 1
    passes = [p for p in PASS_TITLES if any(r.pass_ == p for r in rows)] or ["fwd"]
    masks = [m for m in MASKS if any(r.workload.mask == m for r in rows)] or ["causal"]
    strategies = list(dict.fromkeys(strategy_of(r) for r in rows if not is_reference(r)))
    cmap = matplotlib.colormaps["tab10"]
    colors = {s: cmap(i % cmap.N) for i, s in enumerate(strategies)}
    missing = not_run(rows)
    notes = [
        n
        for n in (
            note,
            CPU_NOTE
            if any(r.timer == "perf_counter" for r in rows) and "not a GPU measurement" not in note
            else "",
        )
        if n
    ]
    seqs = sorted({r.workload.seqlen_q for r in rows if not is_reference(r)})
    with plt.style.context("default"), matplotlib.rc_context({"svg.fonttype": "none", "font.size": 10}):
        fig, axes = plt.subplots(
            len(passes),
            len(masks),
            figsize=(5.2 * len(masks), 3.9 * len(passes)),
            squeeze=False,
            facecolor="white",
            layout="constrained",
        )
        for i, pass_ in enumerate(passes):
            for j, mask in enumerate(masks):
                ax = axes[i][j]
                panel = [r for r in rows if r.pass_ == pass_ and r.workload.mask == mask]
                _draw(ax, panel, world, checks, colors)
                ax.set_title(f"{PASS_TITLES.get(pass_, pass_)}, {mask} mask")
                ax.set_xlabel("total sequence length (tokens)")
                ax.set_ylabel("TFLOP/s per GPU")
                ax.grid(True, color="#d0d0d0", linewidth=0.6)
                if len(seqs) > 1:
                    ax.set_xscale("log", base=2)
                ax.set_xticks(seqs, [str(s) for s in seqs], fontsize=8)
                ax.set_ylim(bottom=0)
                if not ax.get_lines():
                    ax.text(
                        0.5,
                        0.5,
                        "nothing measured",
                        ha="center",
                        va="center",
                        transform=ax.transAxes,
                        color="#666666",
                    )
        handles = {}
        for ax in axes.flat:
            for handle, label in zip(*ax.get_legend_handles_labels()):
                handles.setdefault(label, handle)
        if handles:
            fig.legend(
                list(handles.values()),
                list(handles),
                loc="upper left",
                bbox_to_anchor=(1.0, 0.95),
                fontsize=8,
                frameon=False,
            )
        fig.suptitle(title + (f"\n{' | '.join(notes)}" if notes else ""), fontsize=11)
        if missing:
            fig.text(
                0.01,
                -0.02,
                "\n".join(["did not run:"] + [f"  {m[:140]}" for m in missing]),
                ha="left",
                va="top",
                fontsize=8,
                family="monospace",
                color="#333333",
            )
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, format="svg", bbox_inches="tight", facecolor="white")
        plt.close(fig)
    return missing
