"""The attention-masks report from its rows alone (no torch): per-mask TFLOP/s figures, the best correct
kernel per mask and length, published figures beside ours, the document lengths and the mask pictures.

Figures: one per mask, one panel per pass side by side (forward, backward, forward + backward), TFLOP/s
against sequence length, one line per provider (colours by family as in every report). Where a provider
did not run, a letter at the bottom of the panel in its colour, as MagiAttention's figures mark them:
E out of memory (or not attempted after a shorter length ran out), X unsupported, S skipped (not
attempted: over the profile's time budget or per-row limit),
! error. `unavailable` providers (not installed here) are in the table under the figures, not drawn.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

from attnbench.report.figures import INCORRECT_COLOR, PASS_TITLES, right_legend, save_svg, style_rc, styles
from attnbench.rows import Result, best_by_workload, usable

LETTERS = {"oom": "E", "unsupported": "X", "skipped": "S", "error": "!"}
LETTER_TEXT = {"E": "out of memory", "X": "unsupported", "S": "skipped", "!": "error"}

# MagiAttention's kernel benchmark on H100 (batch 1, 64:8 GQA, head dim 128, bf16), forward TFLOP/s at
# 32k, READ FROM THEIR CHARTS by eye (approximate, +-10): (mask, kernel) -> TFLOP/s.
MAGI_H100_FWD_32K = {
    ("full", "FA3"): 700,
    ("full", "FFA (MagiAttention)"): 633,
    ("full", "cuDNN"): 585,
    ("causal", "FA3"): 680,
    ("causal", "cuDNN"): 567,
    ("sliding_window", "FA3"): 525,
    ("sliding_window", "cuDNN"): 393,
    ("varlen_causal", "FA3"): 583,
    ("varlen_causal", "cuDNN"): 492,
}
# NVIDIA's cuDNN 9.19 SDPA on H200, the same configuration at 16k: (mask, pass) -> TFLOP/s.
NVIDIA_CUDNN_H200_16K = {
    ("full", "fwd"): 702,
    ("full", "bwd"): 612,
    ("causal", "fwd"): 673,
    ("causal", "bwd"): 579,
}
# which of our providers stands for a published kernel name
OURS_FOR = {
    "FA3": ("flash_attn3",),
    "cuDNN": ("sdpa_cudnn", "cudnn_frontend"),
    "FFA (MagiAttention)": ("magi_ffa", "magi_ffa_default"),
}


def _seq(row: Result) -> int:
    return row.workload.seqlen_q


def mask_rows(rows: Iterable[Result], mask: str) -> list[Result]:
    return [r for r in rows if r.workload.mask == mask]


def plot_mask(
    rows: Iterable[Result], path: Path | str, *, title: str = "", note: str = ""
) -> dict[str, list[str]]:
    """One mask's figure (SVG): a panel per pass; returns {pass: providers drawn}."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows, path = list(rows), Path(path)
    passes = sorted({r.pass_ for r in rows}, key=list(PASS_TITLES).index) or ["fwd"]
    families = {r.provider: r.family or r.provider for r in rows}
    looks = styles(families, families.get)
    drawn: dict[str, list[str]] = {}
    with plt.style.context("default"), matplotlib.rc_context(style_rc()):
        fig, axes = plt.subplots(1, len(passes), figsize=(4.6 * len(passes), 4.0), squeeze=False,
                                 layout="constrained")  # fmt: skip
        for ax, pass_ in zip(axes[0], passes):
            mine = [r for r in rows if r.pass_ == pass_]
            drawn[pass_] = _lines(ax, mine, looks, pass_)
            _letters(ax, mine, looks)
            ax.set_title(PASS_TITLES.get(pass_, pass_))
            ax.set_xscale("log", base=2)
            seqs = sorted({_seq(r) for r in rows})
            ax.set_xticks(seqs)
            ax.set_xticklabels([f"{s // 1024}k" if s >= 1024 else str(s) for s in seqs], fontsize=10)
            ax.set_xlabel("sequence length")
            ax.set_ylabel("TFLOP/s")
            ax.set_ylim(bottom=0)
            ax.grid(True)
        right_legend(fig, axes[0])
        if title or note:
            fig.suptitle(title + (f"\n{note}" if note else ""), fontsize=11)
        shown = sorted({LETTERS[r.status] for r in rows if r.status in LETTERS}, key=list(LETTER_TEXT).index)
        if shown:
            key = " · ".join(f"{letter} {LETTER_TEXT[letter]}" for letter in shown)
            fig.supxlabel(
                f"letters at the bottom of a panel: {key} (every reason in the table below)", fontsize=10
            )
        save_svg(fig, path)
    return drawn


def _lines(ax, rows: list[Result], looks: dict, pass_: str) -> list[str]:
    by_line: dict[tuple[str, str], list[Result]] = defaultdict(list)
    for r in rows:
        if r.status in ("ok", "incorrect") and r.tflops is not None:
            by_line[(r.provider, r.status)].append(r)
    labels = []
    for (provider, status), group in sorted(by_line.items()):
        group.sort(key=_seq)
        look = dict(looks[provider])
        label = provider
        if status != "ok" or not all(r.ok for r in group):
            look = {"color": INCORRECT_COLOR, "linestyle": (0, (2, 2)), "marker": "x"}
            label = f"{provider} ({'incorrect' if status != 'ok' else 'not checked'})"
        ax.plot([_seq(r) for r in group], [r.tflops for r in group], markersize=4, linewidth=1.6, label=label,
                gid=f"series-{pass_}-{provider}-{status}", **look)  # fmt: skip
        labels.append(provider)
    return labels


def _letters(ax, rows: list[Result], looks: dict) -> None:
    """A letter at the bottom of the panel, in the provider's colour, where it did not run."""
    from matplotlib.transforms import blended_transform_factory

    at_bottom = blended_transform_factory(ax.transData, ax.transAxes)
    stacked: dict[int, int] = defaultdict(int)  # several providers at one length stack upwards
    for r in sorted(rows, key=lambda r: r.provider):
        letter = LETTERS.get(r.status)
        if letter is None:
            continue
        level = stacked[_seq(r)]
        stacked[_seq(r)] += 1
        ax.text(_seq(r), 0.03 + 0.045 * level, letter, transform=at_bottom, ha="center", va="bottom",
                fontsize=10, fontweight="bold", color=looks[r.provider]["color"], gid=f"not-run-{r.status}")  # fmt: skip


def best_table(rows: Iterable[Result]):
    """The fastest correct (checked, passing) row per mask, length and pass: a pandas DataFrame."""
    import pandas as pd

    best = best_by_workload(
        [r for r in rows if not r.extra.get("check")], require_checked=True, quantized=False
    )
    records = [
        {
            "mask": r.workload.mask,
            "seqlen": r.workload.seqlen_q,
            "pass": r.pass_,
            "provider": r.provider,
            "TFLOP/s": r.tflops,
            "ms": r.ms_median,
            "checked at": r.extra.get("checked_at_seqlen"),
            "rel_l2": r.rel_l2,
        }
        for r in best
    ]
    frame = pd.DataFrame(records, columns=["mask", "seqlen", "pass", "provider", "TFLOP/s", "ms", "checked at",
                                           "rel_l2"])  # fmt: skip
    return frame.sort_values(["mask", "pass", "seqlen"]).reset_index(drop=True) if records else frame


def _ours(rows: list[Result], providers: tuple[str, ...], mask: str, pass_: str, seqlen: int) -> str:
    found = [  # with the clock it ran at: another report's figure for the same call may differ by it
        f"{r.tflops:.0f} ({r.provider}" + (f", {r.sm_clock_mhz:.0f} MHz)" if r.sm_clock_mhz else ")")
        for r in rows
        if r.provider in providers
        and r.workload.mask == mask
        and r.pass_ == pass_
        and r.workload.seqlen_q == seqlen
        and usable(r)
    ]
    return ", ".join(found) or "not measured"


def published_table(rows: Iterable[Result]):
    """MagiAttention's H100 readings (32k forward) and NVIDIA's cuDNN H200 figures (16k) beside ours."""
    import pandas as pd

    rows = [r for r in rows if not r.extra.get("check")]
    records = []
    for (mask, kernel), value in MAGI_H100_FWD_32K.items():
        records.append({"source": "MagiAttention, H100 (read from their charts, approx.)", "mask": mask,
                        "pass": "fwd", "seqlen": 32768, "kernel": kernel, "published TFLOP/s": value,
                        "ours TFLOP/s": _ours(rows, OURS_FOR[kernel], mask, "fwd", 32768)})  # fmt: skip
    for (mask, pass_), value in NVIDIA_CUDNN_H200_16K.items():
        records.append({"source": "NVIDIA cuDNN 9.19, H200", "mask": mask, "pass": pass_, "seqlen": 16384,
                        "kernel": "cuDNN", "published TFLOP/s": value,
                        "ours TFLOP/s": _ours(rows, OURS_FOR["cuDNN"], mask, pass_, 16384)})  # fmt: skip
    return pd.DataFrame(records)


def plot_documents(packs: dict[int, list[int]], path: Path | str, *, note: str = "") -> None:
    """The documents at each sequence length: one horizontal bar per length, split at document ends."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    lengths = sorted(packs)
    with plt.style.context("default"), matplotlib.rc_context(style_rc()):
        fig, ax = plt.subplots(figsize=(8, 0.45 * len(lengths) + 1.2), layout="constrained")
        for y, length in enumerate(lengths):
            start = 0
            for i, n in enumerate(packs[length]):
                share = n / length
                ax.barh(y, share, left=start / length, color=("#1f77b4", "#ff7f0e", "#2ca02c")[i % 3],
                        edgecolor="white", linewidth=0.8)  # fmt: skip
                if share > 0.08:
                    ax.text(
                        (start + n / 2) / length,
                        y,
                        f"{n}",
                        ha="center",
                        va="center",
                        fontsize=9,
                        color="white",
                    )
                start += n
        ax.set_yticks(range(len(lengths)))
        ax.set_yticklabels([f"{s // 1024}k ({len(packs[s])} docs)" for s in lengths], fontsize=9)
        ax.set_xlim(0, 1)
        ax.set_xlabel("share of the sequence (each segment one document; its length in tokens)")
        ax.set_title(
            "Documents packed at each sequence length (varlen masks)" + (f"\n{note}" if note else "")
        )
        save_svg(fig, path)


def plot_mask_pictures(pictures: dict[str, dict], path: Path | str) -> None:
    """Each mask drawn small: pictures {mask: {"rows": [[0/1, ...], ...], "caption": str}}."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    names = list(pictures)
    with plt.style.context("default"), matplotlib.rc_context(style_rc()):
        fig, axes = plt.subplots(
            1, len(names), figsize=(2.3 * len(names), 2.9), squeeze=False, layout="constrained"
        )
        for ax, name in zip(axes[0], names):
            ax.imshow(pictures[name]["rows"], cmap="Blues", vmin=0, vmax=1.4, interpolation="nearest")
            ax.set_title(name.replace("_", " "), fontsize=9)
            ax.set_xlabel(pictures[name].get("caption", ""), fontsize=9)
            ax.set_xticks([])
            ax.set_yticks([])
        fig.suptitle("query rows (down) x key columns (right): blue = attended", fontsize=9)
        save_svg(fig, path)
