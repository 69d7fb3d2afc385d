"""The command line of attnbench: one parser per command (run, status, build, export, merge, clean),
each argument's help the user's documentation. cli.py carries the commands out."""

from __future__ import annotations

import argparse
from pathlib import Path

import yaml

from attnbench.notebook.run.launchers import EnvSpec, LaunchError


def _param(text: str) -> tuple[str, object]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"-p {text!r}: expected KEY=VALUE")
    try:
        return key, yaml.safe_load(value) if value else ""
    except yaml.YAMLError as e:
        raise argparse.ArgumentTypeError(f"-p {text!r}: the value is not YAML: {e}") from None


def _env(text: str) -> EnvSpec:
    try:
        return EnvSpec.parse(text)
    except LaunchError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _add_session_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("notebooks", nargs="+", type=Path, metavar="NOTEBOOK", help="notebook .md files")
    p.add_argument(
        "-p",
        "--param",
        dest="params",
        action="append",
        type=_param,
        default=[],
        metavar="KEY=VALUE",
        help="override a front-matter param (VALUE is YAML: 3, [1, 2], smoke)",
    )
    p.add_argument(
        "--env",
        type=_env,
        default=EnvSpec("uv"),
        metavar="uv|python[=PATH]",
        help="uv: each cell in its own `uv run --script` env (default); python[=PATH]: an existing "
        "interpreter (default: the one running attnbench), deps checked first",
    )
    p.add_argument(
        "--label", help="machine label for outputs/<notebook>/<label>/ (default: GPU name slug or cpu)"
    )
    p.add_argument("--outputs", type=Path, metavar="DIR", help="outputs folder (default: <project>/outputs)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="attnbench", description="Run Markdown benchmark notebooks.")
    sub = parser.add_subparsers(dest="command", required=True)
    for add in (_add_run, _add_status, _add_build, _add_export, _add_merge, _add_clean):
        add(sub)
    return parser


def _add_run(sub) -> None:
    """`attnbench run`: the notebooks, the cells to run, reuse, scheduling, torchrun and progress."""
    run = sub.add_parser("run", help="run notebooks (cached cells are not re-run)")
    _add_session_options(run)
    run.add_argument(
        "--cell",
        action="append",
        default=[],
        metavar="ID",
        help="run only this cell (id or other.md:id), re-running it; its upstream from cache "
        "or run first when stale",
    )
    run.add_argument("--force", action="store_true", help="re-run cells even when cached")
    run.add_argument(
        "--reuse-elsewhere",
        action="store_true",
        help="with --cell: use the results the named cells need as they are when only measured on "
        "another machine or environment (same code), e.g. to refresh a report's presenting cells "
        "away from the GPU machine that measured what they present",
    )
    run.add_argument(
        "--reuse-stale",
        action="store_true",
        help="with --cell: as --reuse-elsewhere, and also use results measured by older code: the named "
        "cells present them with the code of now and stay stale until those are measured again",
    )
    run.add_argument(
        "-j",
        "--jobs",
        type=int,
        default=1,
        metavar="N",
        help="run up to N cells at once (only without a GPU: with one, cells run one at a time)",
    )
    run.add_argument(
        "--kill-grace",
        type=float,
        default=None,
        metavar="S",
        help="seconds between SIGTERM and SIGKILL when a cell times out or is interrupted",
    )
    run.add_argument(
        "--lock-timeout",
        type=float,
        default=None,
        metavar="S",
        help="while another run of the same notebook and label goes on, wait at most S seconds "
        "(default: wait until it ends)",
    )
    dist = run.add_argument_group("torch.distributed.run (cells with gpus=N; Slurm variables are honoured)")
    dist.add_argument("--nnodes")
    dist.add_argument("--node-rank")
    dist.add_argument("--rdzv-endpoint")
    dist.add_argument("--rdzv-backend")
    dist.add_argument("--rdzv-id")
    live = run.add_mutually_exclusive_group()
    live.add_argument("--live", dest="live", action="store_true", default=None, help="rich live progress")
    live.add_argument("--plain", dest="live", action="store_false", help="plain progress lines")


def _add_status(sub) -> None:
    """`attnbench status`: the session options and the re-run commands (--batches)."""
    status = sub.add_parser("status", help="per cell: cached, stale (and why), failed, not run")
    _add_session_options(status)
    status.add_argument(
        "--batches",
        type=float,
        metavar="SECONDS",
        help="also print the `attnbench run` commands that bring the label current, packed by each "
        "cell's last measured time into commands of at most SECONDS (a job's wall-clock limit)",
    )
    status.add_argument(
        "--all-labels",
        action="store_true",
        help="one line per notebook and label folder in outputs/: its cells by state, the stale ones "
        "named, a label kept by a not_rerun note marked (exit 1 where a cell is stale and no note keeps it)",
    )


def _add_build(sub) -> None:
    """`attnbench build`: where outputs/ and site/ are, and whether results are judged."""
    build = sub.add_parser("build", help="build site/ from outputs/ (no cell runs)")
    build.add_argument("--outputs", type=Path, metavar="DIR", help="default: <project>/outputs")
    build.add_argument("--site", type=Path, metavar="DIR", help="default: <project>/site")
    build.add_argument(
        "--no-status",
        dest="status",
        action="store_false",
        help="do not judge the stored results against the code of now (pages then show only the stale "
        "notes a run left in run.json)",
    )


def _add_export(sub) -> None:
    """`attnbench export`: a notebook for Jupyter and papermill."""
    export = sub.add_parser("export", help="export a notebook for Jupyter/papermill")
    export.add_argument("notebook", type=Path, metavar="NOTEBOOK")
    export.add_argument("--to", default="ipynb", help="ipynb (default) or py:percent")
    export.add_argument("-o", "--output", type=Path, help="output file (default: beside the notebook)")


def _add_merge(sub) -> None:
    """`attnbench merge`: results measured elsewhere into outputs/."""
    merge = sub.add_parser(
        "merge",
        help="bring results measured elsewhere (an archive or an outputs folder) into outputs/, cell by cell",
    )
    merge.add_argument(
        "source", type=Path, metavar="SOURCE", help="outputs.tgz, a folder holding outputs/, or one"
    )
    merge.add_argument(
        "--outputs", type=Path, metavar="DIR", help="outputs folder (default: <project>/outputs)"
    )
    merge.add_argument("--dry-run", action="store_true", help="say what would change, change nothing")


def _add_clean(sub) -> None:
    """`attnbench clean`: scripts and leftovers, outputs only when asked."""
    clean = sub.add_parser(
        "clean", help="remove cells/ scripts and .tmp- leftovers (outputs only with --outputs)"
    )
    clean.add_argument("notebooks", nargs="*", type=Path, metavar="NOTEBOOK")
    clean.add_argument(
        "--outputs", action="store_true", help="also delete outputs/<notebook>/ (committed results!)"
    )
    clean.add_argument("--label", help="with --outputs: only outputs/<notebook>/<label>/")
