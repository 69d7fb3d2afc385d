"""Each notebook's question and the one or two numbers that answer it, computed from its rows.

`answer_for(name, data)` returns a `page.Answer` (question, answer sentences, key numbers) for the
notebook `name` from the artifacts a report cell read (headline_data.Artifacts); headline.json
carries it (schema version 2) and the site shows it on the page's first lines. Every function takes
what it finds: a number whose rows did not run is left out, and the sentence says so.

Units are always labelled: "per GPU" or "total" for context-parallel throughput, "wall" for times.
Baselines (single-GPU references, dense kernels on sparse reports, eager/reference runs) are never
the answer's winner.

One module per notebook (dilated.py also answers the dilated report's cells across GPUs); common.py
holds what they share. ANSWERS maps a notebook to its function.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from attnbench.notebook.site import headline as page
from attnbench.report.answers.context_parallel import context_parallel
from attnbench.report.answers.cs336 import LEADERBOARD_BEST_GPU, LEADERBOARD_BEST_MS, cs336
from attnbench.report.answers.dilated import dilated, dilated_distributed
from attnbench.report.answers.environment import environment
from attnbench.report.answers.flux import SDPA_DEFAULT, flux
from attnbench.report.answers.masks import masks
from attnbench.report.repeatability import noise_p95, protocol_of, repeatability_of

__all__ = [
    "ANSWERS", "LEADERBOARD_BEST_GPU", "LEADERBOARD_BEST_MS", "SDPA_DEFAULT", "answer_for", "context_parallel",
    "cs336", "dilated", "dilated_distributed", "environment", "flux", "masks", "with_spreads",
]  # fmt: skip


# each takes the artifacts and the machine's repeatability view (report.repeatability; None: none there),
# which an answer that weighs a gap against the run-to-run noise uses
ANSWERS: dict[str, Callable[[Any, dict | None], page.Answer]] = {
    "environment": environment,
    "dilated_attention": dilated,
    "dilated_distributed": dilated_distributed,
    "context_parallel": context_parallel,
    "cs336_systems": cs336,
    "flux_attention": flux,
    "attention_masks": masks,
}


def with_spreads(answer: page.Answer, spread: float | None) -> page.Answer:
    """Each timed number's spread: a time takes `spread`, a ratio of two times (×, %) twice it (both rows
    move); lengths and counts are exact (none)."""
    if spread:
        for n in answer.numbers:
            if n.unit in ("ms", "TFLOP/s"):
                n.spread = spread
            elif n.unit in ("×", "%"):
                n.spread = 2 * spread
    return answer


def answer_for(
    name: str, data, key_figure: str = "", spread: float | None = None, noise: dict | None = None
) -> page.Answer:
    """The answer of notebook `name` (ANSWERS) from `data`; on a CPU smoke run it says so. `noise`: the
    repeatability run of the rows' machine (report.repeatability.repeatability_of; looked up when not
    given); its timed numbers carry `spread` (default: that run's 95th percentile) for the history page's
    flags."""
    if noise is None:
        noise = repeatability_of(
            {str(r.get("env")) for r in data.rows if r.get("env")}, protocol=protocol_of(data.rows)
        )
    if spread is None and noise:
        spread = noise_p95(noise)
    answer = with_spreads(ANSWERS[name](data, noise), spread)
    answer.key_figure = key_figure
    if any(r.get("timer") == "perf_counter" for r in data.rows):
        answer.answer.append("CPU smoke run: not a GPU measurement; the numbers only show the report works.")
    return answer
