"""attnbench run | build | status | export | merge | clean.

Exit codes: 0 ok; 1 a cell failed (or timed out, lacked deps, was skipped); 2 a bad notebook, bad
settings, a broken result.json/run.json, an outputs folder that cannot be written or a run lock not
got within --lock-timeout (printed as `path:line: message` or naming the file, before any cell
starts; `merge`: a source it cannot merge, named), or an OSError of the engine itself (a full disk); 130
interrupted (Ctrl-C).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

from attnbench.notebook.arguments import build_parser
from attnbench.notebook.document.model import Notebook, NotebookError
from attnbench.notebook.run.launchers import DistOptions, EnvSpec, LaunchError
from attnbench.notebook.run.records import RecordError
from attnbench.notebook.run.session import Options, SetupError


def _options(args: argparse.Namespace) -> Options:
    return Options(
        env=args.env,
        label=args.label,
        outputs=args.outputs,
        params=dict(args.params),
        cells=getattr(args, "cell", []),
        force=getattr(args, "force", False),
        reuse="stale"
        if getattr(args, "reuse_stale", False)
        else "elsewhere"
        if getattr(args, "reuse_elsewhere", False)
        else "",
        jobs=getattr(args, "jobs", 1),
        dist=DistOptions(
            *(
                getattr(args, k, None)
                for k in ("nnodes", "node_rank", "rdzv_endpoint", "rdzv_backend", "rdzv_id")
            )
        ),
        kill_grace=getattr(args, "kill_grace", None),
        lock_timeout=getattr(args, "lock_timeout", None),
    )


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "run":
            return cmd_run(args)
        if args.command == "status":
            return cmd_status(args)
        if args.command == "build":
            return cmd_build(args)
        if args.command == "export":
            return cmd_export(args)
        if args.command == "merge":
            return cmd_merge(args)
        return cmd_clean(args)
    except NotebookError as e:
        print(e, file=sys.stderr)
        return 2
    except (SetupError, LaunchError, RecordError) as e:
        print(f"attnbench {args.command}: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `attnbench status ... | head`: stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except OSError as e:  # a folder that cannot be written, a full disk: said, not a traceback
        print(f"attnbench {args.command}: {e}", file=sys.stderr)
        return 2


def cmd_run(args: argparse.Namespace) -> int:
    from attnbench.notebook.run.progress import make_progress
    from attnbench.notebook.run.runner import Runner
    from attnbench.notebook.run.session import prepare

    if not (notebooks := _runnable(args.notebooks)):
        return 0
    session = prepare(notebooks, _options(args))
    return Runner(session, make_progress(args.live)).run()


def _runnable(paths: list[Path]) -> list[Notebook]:
    """The named notebooks with cells to run here, parsed; a line on stderr for each left out
    (uvnote's platforms, no ```python cell)."""
    from attnbench.notebook.document.parse import runnable_notebooks

    keep, notes = runnable_notebooks(paths)
    for note in notes:
        print(note, file=sys.stderr)
    return keep


def cmd_status(args: argparse.Namespace) -> int:
    from attnbench.notebook.run.session import prepare
    from attnbench.notebook.run.status import cell_statuses

    if args.batches is not None and not args.batches > 0:
        raise SetupError(f"--batches {args.batches:g}: a command's time limit must be more than 0 seconds")
    if not (notebooks := _runnable(args.notebooks)):
        return 0
    if args.all_labels:
        if args.label or args.batches or args.params:
            raise SetupError("--all-labels judges every label folder with its own params: give it without "
                             "--label, --batches and -p")  # fmt: skip
        return _status_of_every_label(notebooks, args)
    session = prepare(notebooks, _options(args))
    env = session.env_summary()
    states = {}
    for name in session.graph.named:
        notebook = session.graph.notebooks[name]
        print(f"{notebook.path} (label {session.label}, env {env['interpreter']}, python {env['python']})")
        for cell_id, state, why in cell_statuses(session, name):
            states[(name, cell_id)] = state
            print(f"  {cell_id:<24} {state.value}{': ' + why if why else ''}")
        _say_if_label_is_new(session, name)
        _say_if_cells_left_behind(session, name)
    if args.batches:
        from attnbench.notebook.run.batches import plan_lines, rerun_plan

        loaded = session.graph.notebooks  # the named ones and those they need cells of
        paths = {name: str(nb.path) for name, nb in loaded.items()}
        declared = {name: set(nb.params) for name, nb in loaded.items()}
        plan = rerun_plan(session, states, args.batches)
        print("\n".join(plan_lines(plan, paths, session.label, args.batches, dict(args.params), declared)))
    return 0


def _status_of_every_label(notebooks: list[Notebook], args: argparse.Namespace) -> int:
    """`status --all-labels`: per notebook and label, its cells counted by state, the stale and failed ones
    named; 1 where a label no `not_rerun` note keeps holds a cell stale for a code reason or a failed one
    (what a full re-run must leave at none), or a label cannot be judged, else 0. Cells not run, or left
    to a label with more GPUs, are information: a label may hold a part of a report by design."""
    from collections import Counter

    from attnbench.notebook.run.records import Status
    from attnbench.notebook.run.status import stored_states
    from attnbench.notebook.run.store import find_root

    outputs = args.outputs or find_root(notebooks[0].path) / "outputs"
    states, problems = stored_states(notebooks, outputs, _options(args).env)
    unkept = 0
    for nb in notebooks:
        kept = nb.front_matter.get("not_rerun") or {}
        for label, cells in sorted(states.get(nb.name, {}).items()):
            counts = Counter(state for state, _ in cells.values())
            stale = [cell for cell, (state, _) in cells.items() if state == Status.STALE]
            failed = [cell for cell, (state, _) in cells.items() if Status(state).bad]
            words = ", ".join(f"{n} {state}" for state, n in counts.most_common())
            line = f"{nb.name:<20} {label:<28} {len(cells)} cells: {words}"
            line += "".join(
                f"; {what}: {', '.join(names)}"
                for what, names in (("stale", stale), ("failed", failed))
                if names
            )
            if stale or failed:
                if label in kept:
                    line += " (kept by its not_rerun note)"
                else:
                    unkept += 1
            print(line)
    for problem in problems:
        print(f"problem: {problem}", file=sys.stderr)
    if unkept:
        print(f"{unkept} label(s) hold stale or failed cells that no not_rerun note keeps: re-run them "
              "(`attnbench status NOTEBOOK --label LABEL --batches 570` packs the commands)")  # fmt: skip
    return 1 if unkept or problems else 0


def _say_if_label_is_new(session, name: str) -> None:
    """A label that holds no results of `name` yet: every cell reads "not run", which a mistyped
    --label also gives, so the labels that hold results are named (the label may be meant: a first run)."""
    from attnbench.notebook.run import store

    folder = session.run_dir(name)
    if _holds_results(folder):
        return
    others = sorted(p.name for p in folder.parent.iterdir() if p != folder and _holds_results(p)) if folder.parent.is_dir() else []  # fmt: skip
    held = f"labels with results: {', '.join(others)}" if others else "no label holds results of it yet"
    print(f"  note: {store.shown(folder, session.root)} holds no results ({held})")


def _say_if_cells_left_behind(session, name: str) -> None:
    """Results of cells the notebook no longer has (renamed or split): the engine neither reads nor
    judges them, so they would sit in outputs/ unnoticed; named here, for the user to remove."""
    from attnbench.notebook.run import store

    folder = session.run_dir(name)
    ids = {cell.id for cell in session.graph.notebooks[name].cells}
    left = sorted(c.name for c in folder.glob("[!.]*") if c.is_dir() and c.name not in ids and (c / "result.json").is_file())  # fmt: skip
    if left:
        shown = store.shown(folder, session.root)
        remove = f"`git rm -r {' '.join(f'{shown}/{c}' for c in left)}`"
        kept = session.label in (session.graph.notebooks[name].front_matter.get("not_rerun") or {})
        # a label kept by a not_rerun note shows its last results, these among them, until its re-run
        when = (
            "once the label's re-run replaces them, as its not_rerun note keeps them until then"
            if kept
            else "now"
        )
        print(f"  note: {shown} holds results of cells the notebook no longer has: {', '.join(left)} "
              f"(no longer run or judged; the label's page shows them while its last run lists them; remove "
              f"them {when}: {remove})")  # fmt: skip


def _holds_results(folder: Path) -> bool:
    """A run's record or a cell's result in it; a folder a stopped or killed run left holds neither
    (an empty one, a lock, a cell's staging folder)."""
    return (folder / "run.json").is_file() or any(
        (cell / "result.json").is_file() for cell in folder.glob("[!.]*") if cell.is_dir()
    )


def _project_root() -> Path:
    from attnbench.notebook.run.store import find_root

    return find_root(Path.cwd() / "_")


def _stored_states(outputs: Path) -> tuple[dict | None, dict]:
    """Every stored result judged against the code of now, for the site (run/status.py), by the
    notebooks/ beside `outputs` (None where there is none to judge by); and their front matter's
    `not_rerun` notes, {notebook: {label: why}}."""
    from attnbench.notebook.document.model import NotebookError
    from attnbench.notebook.run.status import stored_states

    folder = Path(outputs).resolve().parent / "notebooks"
    if not folder.is_dir() or not Path(outputs).is_dir():
        return None, {}
    notebooks = []
    for path in sorted(folder.glob("*.md")):  # a broken notebook costs its own staleness, not the site
        try:
            notebooks += _runnable([path])
        except NotebookError as e:
            print(f"warning: {e}; the staleness of its results is not shown", file=sys.stderr)
    # the code verdicts are the same under either kind of environment: without uv, judge with this one
    env = EnvSpec("uv") if shutil.which("uv") else EnvSpec("python")
    states, problems = stored_states(notebooks, outputs, env)
    for problem in problems:
        print(f"warning: {problem}", file=sys.stderr)
    notes = {
        nb.path.stem: nb.front_matter["not_rerun"] for nb in notebooks if nb.front_matter.get("not_rerun")
    }
    for name, labels in notes.items():  # a mistyped label would say nothing on any page: name it
        for label in sorted(set(labels) - {d.name for d in (Path(outputs) / name).glob("*") if d.is_dir()}):
            print(f"warning: notebooks/{name}.md: not_rerun names label {label!r}, which has no results in "
                  f"{Path(outputs) / name}", file=sys.stderr)  # fmt: skip
    return states, notes


def cmd_build(args: argparse.Namespace) -> int:
    from attnbench.notebook.site.render import build_site  # written separately; imported only when building

    root = _project_root()
    outputs = args.outputs or root / "outputs"
    site = args.site or root / "site"
    states, notes = _stored_states(outputs) if args.status else (None, {})
    try:
        pages = build_site(outputs, site, states, notes)
    except (FileNotFoundError, FileExistsError) as e:
        raise SetupError(str(e)) from None
    print(f"site: {len(pages)} pages in {site}")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from attnbench.notebook.export import export_notebook

    try:
        out = export_notebook(args.notebook, args.output, to=args.to)
    except ValueError as e:
        raise SetupError(str(e)) from None
    print(out)
    return 0


def cmd_merge(args: argparse.Namespace) -> int:
    from attnbench.notebook.run.merge import MergeError, merge, summary

    outputs = args.outputs or _project_root() / "outputs"
    try:
        steps = merge(args.source, outputs, dry_run=args.dry_run)
    except MergeError as exc:
        print(f"attnbench merge: {exc}; nothing more was changed", file=sys.stderr)
        return 2
    for step in steps:
        print(f"  {step.folder:<48} {step.status:<11} {step.finished}  {step.action}")
    verb = "would merge" if args.dry_run else "merged"
    print(f"{verb} into {outputs}: {summary(steps)}")
    return 0


def cmd_clean(args: argparse.Namespace) -> int:
    from attnbench.notebook.run import store
    from attnbench.notebook.run.clean import clean

    root = store.find_root(args.notebooks[0]) if args.notebooks else _project_root()
    return clean(root, [p.stem for p in args.notebooks], results=args.outputs, label=args.label)


if __name__ == "__main__":
    sys.exit(main())
