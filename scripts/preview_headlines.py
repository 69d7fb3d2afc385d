"""Preview the site as it will look after a GPU re-run: headline.json for committed runs that predate it.

Copies outputs/ to a scratch folder and, for every notebook × label whose report cell has no
headline.json, writes one there from the committed artifacts, with the same call the report cell makes
(report.headline_data.headline_of). Never writes into outputs/: the committed results stay what ran.

    uv run python scripts/preview_headlines.py /tmp/preview     # then: attnbench build --outputs
        /tmp/preview/outputs --site /tmp/preview/site
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from attnbench.notebook.site.headline import HEADLINE_FILE, write_headline
from attnbench.report.headline_data import headline_of

# notebook -> [(report cell, cells it reads, notebook answer or "", key figure)], as the report cells call it
REPORTS = {
    "flux_attention": [("summary", ("gpu", "bench", "trust"), "flux_attention", "plot/tflops.svg")],
    "attention_masks": [("summary", ("bench", "bench_fwd_bwd"), "attention_masks", "figures/causal.svg")],
    "context_parallel": [
        ("targets", ("correctness", "bench", "bench_fa3", "targets"), "context_parallel", "plot/tflops.svg")
    ],
    "cs336_systems": [
        (
            "leaderboard_report",
            ("gpu", "leaderboard", "steps_bf16", "breakdown", "leaderboard_report"),
            "cs336_systems",
            "leaderboard_report/leaderboard.svg",
        )
    ],
    "dilated_attention": [
        (
            "report",
            ("gpu", "correctness", "scaling", "extras"),
            "dilated_attention",
            "figures/tokens_per_s.svg",
        ),
        ("distributed_report", ("distributed",), "", ""),
    ],
}


def preview(outputs: Path, dest: Path) -> list[str]:
    """Copy `outputs` to dest/outputs and write the missing headlines there; the files written."""
    target = dest / "outputs"
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(outputs, target, symlinks=True)
    written = []
    for notebook, reports in REPORTS.items():
        for run in sorted(p for p in (target / notebook).glob("*") if p.is_dir()):
            for cell, reads, answer, figure in reports:
                out = run / cell / "artifacts"
                folders = {c: run / c / "artifacts" for c in reads if (run / c / "artifacts").is_dir()}
                if (out / HEADLINE_FILE).exists() or not folders:
                    continue
                out.mkdir(parents=True, exist_ok=True)
                headline, problems = headline_of(folders, answer, figure)
                for problem in problems:
                    print(f"warning: {run.name}/{cell}: {problem}", file=sys.stderr)
                written.append(str(write_headline(headline, out).relative_to(dest)))
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dest", type=Path, help="scratch folder (gets outputs/ inside)")
    parser.add_argument("--outputs", type=Path, default=Path("outputs"))
    args = parser.parse_args(argv)
    for path in preview(args.outputs, args.dest):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
