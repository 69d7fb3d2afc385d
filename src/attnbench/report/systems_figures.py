"""The CS336 systems report's figures (SVG, matplotlib), from rows alone. Each takes a `note` that is
stamped under the title (the smoke profile's "not a GPU measurement")."""

from __future__ import annotations

from collections import defaultdict

from attnbench.report.figures import save_svg
from attnbench.report.systems import GIB, MIB, PHASES, mean_std, step_times, window
from attnbench.rows import Result, usable

PHASE_COLORS = {
    "forward": "#4C72B0",
    "backward": "#DD8452",
    "optimizer": "#55A868",
    "build": "#8C8C8C",
    "setup": "#8C8C8C",
}
PROVIDER_STYLE = {"torch_eager": ("#8C8C8C", "torch eager"), "triton_fa2": ("#C44E52", "ours (Triton FA2)"),
                  "sdpa_cudnn": ("#4C72B0", "SDPA cuDNN"), "flash_attn3": ("#55A868", "FlashAttention-3")}  # fmt: skip


def _figure(ncols: int, title: str, note: str, width: float = 5.5, height: float = 4.0, nrows: int = 1):
    """A figure of nrows x ncols panels under one title, and its axes row by row."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(nrows, ncols, figsize=(width * ncols, height * nrows), squeeze=False)
    fig.suptitle(title + (f"\n{note}" if note else ""), fontsize=11)
    return fig, [ax for row in axes for ax in row]


def _save(fig, path) -> None:
    import matplotlib

    fig.tight_layout()
    # text kept as text, as every other report's figures (figures.style_rc): smaller files, and the site
    # reads the title for the figure's alt text
    with matplotlib.rc_context({"svg.fonttype": "none"}):
        save_svg(fig, path, bbox_inches=None)


def plot_steps(rows: list[dict], path, *, warmup: int, measured: int, note: str = "") -> None:
    """Stacked forward / backward / optimizer ms per step: one panel per (precision, size), one bar per
    context (linear axes: the sizes differ by 100x, so each has its own)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    mine = [r for r in rows if r["attention"] == "eager"]
    precisions = sorted({r["precision"] for r in mine})
    sizes = list(dict.fromkeys(r["size"] for r in mine))
    fig, axes = plt.subplots(
        len(precisions),
        len(sizes),
        figsize=(max(2.6 * len(sizes), 7.0), 2.6 * len(precisions)),
        squeeze=False,
    )
    fig.suptitle(
        f"Training step time per phase (mean after {warmup} warm-up steps, batch 4)"
        + (f"\n{note}" if note else "")
    )
    for i, precision in enumerate(precisions):
        for j, size in enumerate(sizes):
            ax = axes[i][j]
            these = sorted(
                (r for r in mine if r["precision"] == precision and r["size"] == size),
                key=lambda r: r["context"],
            )
            for x, row in enumerate(these):
                if row["status"] != "ok":
                    ax.text(
                        x,
                        0,
                        row["status"].upper(),
                        rotation=90,
                        ha="center",
                        va="bottom",
                        fontsize=8,
                        color="red",
                    )
                    continue
                bottom = 0.0
                for phase in PHASES:
                    value = mean_std(window(row["times_ms"][phase], warmup, measured))[0]
                    ax.bar(
                        x,
                        value,
                        0.7,
                        bottom=bottom,
                        color=PHASE_COLORS[phase],
                        label=phase if x == 0 else None,
                    )
                    bottom += value
            ax.set_xticks(range(len(these)), [r["context"] for r in these], fontsize=8)
            ax.set_title(f"{size}, {precision}", fontsize=9)
            ax.tick_params(axis="y", labelsize=8)
            if j == 0:
                ax.set_ylabel("ms per step")
            if i == len(precisions) - 1:
                ax.set_xlabel("context", fontsize=8)
    axes[0][-1].legend(fontsize=8)
    _save(fig, path)


def plot_warmup(rows: list[dict], path, *, precision: str, note: str = "") -> None:
    """Whole-step ms of every step, warm-up included, per size at its longest context."""
    fig, (ax,) = _figure(1, f"Every step's time, {precision}: why warm-up steps are dropped", note, 7.0)
    mine = [
        r for r in rows if r["precision"] == precision and r["attention"] == "eager" and r["status"] == "ok"
    ]
    for size in dict.fromkeys(r["size"] for r in mine):
        row = max((r for r in mine if r["size"] == size), key=lambda r: r["context"])
        steps = step_times(row)
        ax.plot(
            range(len(steps)), steps, marker="o", markersize=3, label=f"{size} (context {row['context']})"
        )
    ax.set_xlabel("step")
    ax.set_ylabel("ms")
    ax.set_yscale("log")
    ax.legend(fontsize=8)
    _save(fig, path)


def plot_memory_timeline(record: dict, path, note: str = "") -> None:
    """Allocated GiB after every allocation and free, coloured by the phase it happened in."""
    line = record["timeline"]
    title = (f"Allocated memory, {record['size']} model, context {record['context']}, {record['precision']}, "
             f"batch {record['batch']}, {record['steps']} steps")  # fmt: skip
    fig, (ax,) = _figure(1, title, note, 9.0)
    gib = [b / GIB for b in line["allocated_bytes"]]
    ax.plot(line["t_ms"], gib, color="#8C8C8C", linewidth=0.6)
    points: dict[str, tuple[list, list]] = defaultdict(lambda: ([], []))
    for t, y, phase in zip(line["t_ms"], gib, line["phase"]):
        points[phase.split()[-1]][0].append(t)
        points[phase.split()[-1]][1].append(y)
    for phase, (times, values) in points.items():
        ax.scatter(times, values, color=PHASE_COLORS.get(phase, "#8C8C8C"), s=3, label=phase, zorder=3)
    ax.set_xlabel("ms since recording started")
    ax.set_ylabel("GiB allocated")
    ax.legend(fontsize=8, title="phase", markerscale=3)
    _save(fig, path)


def plot_scan(
    eager: list[dict], compiled: list[dict], path, *, device_bytes: int | None, note: str = ""
) -> None:
    """Left: forward + backward ms vs seq per d_model, eager and compiled (rows that failed their check
    are no result and are left out). Right: memory before the backward, measured against the memory
    model, with the GPU's memory as a line."""
    fig, (ax_t, ax_m) = _figure(2, "Attention scan: batch 8, one head, fp32", note)
    for rows, style, name in ((eager, "-", "eager"), (compiled, "--", "compiled")):
        for d in sorted({r["d_model"] for r in rows}):
            mine = [r for r in rows if r["d_model"] == d and r["status"] == "ok" and r.get("forward_ms")
                    and r.get("backward_ms")]  # fmt: skip
            ax_t.plot([r["seq"] for r in mine], [r["forward_ms"]["mean"] + r["backward_ms"]["mean"] for r in mine],
                      style, marker="o", markersize=3, label=f"{name} d={d}")  # fmt: skip
    ax_t.set(xscale="log", yscale="log", xlabel="sequence length", ylabel="forward + backward ms")
    ax_t.legend(fontsize=8, ncol=2)
    d_max = max((r["d_model"] for r in eager), default=0)
    widest = sorted((r for r in eager if r["d_model"] == d_max), key=lambda r: r["seq"])
    ax_m.plot(
        [r["seq"] for r in widest],
        [r["model"]["before_backward"] / MIB for r in widest],
        "k:",
        label="model: B·S²·4 + 5·B·S·d·4",
    )
    ax_m.plot(
        [r["seq"] for r in widest],
        [r["model"]["peak_backward"] / MIB for r in widest],
        "k-.",
        label="model: backward peak",
    )
    for d in sorted({r["d_model"] for r in eager}):
        mine = [r for r in eager if r["d_model"] == d and r.get("mem_before_backward_bytes")]
        ax_m.plot(
            [r["seq"] for r in mine],
            [r["mem_before_backward_bytes"] / MIB for r in mine],
            "o",
            markersize=4,
            label=f"measured d={d}",
        )
    for r in eager:
        if r["status"] == "oom":
            ax_m.annotate("OOM", (r["seq"], r["model"]["before_backward"] / MIB), fontsize=8, color="red")
    if device_bytes:
        ax_m.axhline(device_bytes / MIB, color="red", linewidth=0.8, label="GPU memory")
    ax_m.set(xscale="log", yscale="log", xlabel="sequence length", ylabel="MiB before the backward")
    ax_m.legend(fontsize=8)
    _save(fig, path)


def plot_kernels(
    rows: list[Result], path, *, dtype: str = "bfloat16", pass_: str = "fwd_bwd", note: str = ""
) -> None:
    """TFLOP/s (exact causal FLOPs) against sequence length, one panel per head dim."""
    mine = [r for r in rows if r.workload.dtype == dtype and r.pass_ == pass_]
    dims = sorted({r.workload.head_dim for r in mine})
    # two panels a row: four head dims side by side shrank the text below what a page can show
    cols = min(max(len(dims), 1), 2)
    title = f"Causal attention, batch 1, one head, {dtype}, {pass_}: TFLOP/s"
    fig, axes = _figure(cols, title, note, 4.8, 3.4, nrows=-(-max(len(dims), 1) // cols))
    for ax in axes[len(dims) :]:
        ax.set_visible(False)
    for ax, d in zip(axes, dims):
        for provider, (color, label) in PROVIDER_STYLE.items():
            points = sorted(
                (r.workload.seqlen_q, r.tflops)
                for r in mine
                if r.workload.head_dim == d and r.provider == provider and usable(r)
            )
            if points:
                ax.plot(*zip(*points), marker="o", markersize=3, color=color, label=label)
        ax.set(xscale="log", xlabel="sequence length", ylabel="TFLOP/s", title=f"head dim {d}")
        ax.legend(fontsize=8)
    _save(fig, path)


def plot_leaderboard(
    rows: list[Result], path, *, best_public_ms: float, target_ms: float | None = None, note: str = ""
) -> None:
    """The leaderboard shape's forward + backward wall time per kernel (forward part shaded), beside the
    best public entry and our target: the page's answer as a picture."""
    whole = {r.provider: r.ms_median for r in rows if r.pass_ == "fwd_bwd" and usable(r)}
    forward = {r.provider: r.ms_median for r in rows if r.pass_ == "fwd" and usable(r)}
    order = sorted(whole, key=whole.get, reverse=True)  # fastest at the top
    fig, (ax,) = _figure(1, "CS336 leaderboard shape, forward + backward: wall time (ms)", note, 8.0,
                         1.2 + 0.45 * max(len(order), 1))  # fmt: skip
    for y, provider in enumerate(order):
        color = PROVIDER_STYLE.get(provider.removesuffix("_atomic_dq"), ("#8C8C8C", provider))[0]
        ax.barh(y, whole[provider], color=color, alpha=0.45)
        if provider in forward:
            ax.barh(y, forward[provider], color=color, alpha=0.9)
        ax.text(whole[provider], y, f" {whole[provider]:.2f} ms", va="center", fontsize=9)
    ax.set_yticks(range(len(order)), order, fontsize=9)
    ax.axvline(best_public_ms, color="black", linestyle="--", linewidth=1)
    ax.text(best_public_ms, len(order) - 0.4, f" best public {best_public_ms} ms (H100)", fontsize=8)
    if target_ms:
        ax.axvline(target_ms, color="#C44E52", linestyle=":", linewidth=1)
        ax.text(target_ms, -0.9, f"target {target_ms:.2f} ms ", fontsize=8, ha="right", color="#C44E52")
    ax.set(xlabel="ms (dark: forward; light: the backward on top of it)", ylim=(-1.2, len(order)))
    ax.set_xlim(0, max([*whole.values(), best_public_ms]) * 1.25)
    _save(fig, path)
