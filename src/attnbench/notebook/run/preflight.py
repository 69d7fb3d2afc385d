"""What `attnbench run` checks before any cell starts; each failure is a SetupError (exit 2, nothing run)
that names the cell, flag or file at fault.

- check_reusable: under --reuse-elsewhere / --reuse-stale, every cell the named ones need can be read as
  it is stored;
- check_launchers: a multi-GPU cell's launcher settings (torchrun rendezvous) are usable;
- check_machine: a label holds one kind of machine's results, so a run never measures over those of a
  machine with other GPUs.
"""

from __future__ import annotations

import os
import sys

from attnbench.notebook.run import machine as machine_mod
from attnbench.notebook.run import store
from attnbench.notebook.run.graph import NodeId
from attnbench.notebook.run.launchers import LaunchError, cell_command
from attnbench.notebook.run.records import RunRecord
from attnbench.notebook.run.session import Session, SetupError


def reusable(session: Session, node: NodeId) -> bool:
    return session.judge(node).reusable(session.options.reuse)


def left_out_for_gpus(session: Session, node: NodeId, forced: set[NodeId]) -> str:
    """Why a cell this run would start cannot run on this machine: too few GPUs for it, or it reads a
    cell this run starts and leaves out for that (Session.too_few_gpus); "" when it can run. The
    runner and check_machine ask the same question, so a run is judged the same before and during it."""
    return session.too_few_gpus(node, session.machine.gpu_count, lambda cell: _starts(session, cell, forced))


def _starts(session: Session, node: NodeId, forced: set[NodeId]) -> bool:
    """As the runner decides: a stored result it may take first, then the GPU rule."""
    return node in forced or not reusable(session, node)


def check_reusable(session: Session, order: list[NodeId], forced: set[NodeId]) -> None:
    """--reuse-elsewhere / --reuse-stale run only the named cells: every cell they need must be stored
    and good (and, for --reuse-elsewhere, of the code of now)."""
    flag = f"--reuse-{session.options.reuse}"
    if not forced:
        raise SetupError(f"{flag} needs --cell: name the cells to run here")
    for node in order:
        if node in forced or reusable(session, node):
            continue
        judged = session.judge(node)
        why = "; ".join(judged.code_reasons) or (
            f"its stored result is {judged.stored.status}" if judged.stored else "never run"
        )
        raise SetupError(
            f"{flag}: cell {node[1]} of {node[0]}.md is needed by the named cells but cannot be reused "
            f"({why}); run it where it is measured, or name it with --cell"
        )


def check_launchers(session: Session, order: list[NodeId], name_of) -> None:
    """A bad torchrun setting (several nodes, no rendezvous) for a multi-GPU cell. `name_of(node)`: the
    cell as the run's progress names it."""
    opts = session.options
    for node in order:
        cell = session.graph.cell(node)
        if cell.gpus:
            try:
                cell_command(opts.env, "x.py", cell.gpus, opts.dist, os.environ, python="python")
            except LaunchError as e:
                raise SetupError(f"cell {name_of(node)} (gpus={cell.gpus}): {e}") from None


def check_machine(
    session: Session, order: list[NodeId], forced: set[NodeId], previous: dict[str, RunRecord | None]
) -> None:
    """A run that would start a cell under a label whose run.json (`previous`, per notebook) names other
    GPUs, model or count (a GPU label on a laptop, one GPU under an -x2 label), so that the measurements
    it holds are never replaced by this machine's. Not asked under --reuse-*: naming the cells to run
    over another machine's results is the request; nor under a label named for this machine (its own
    results, whatever machine wrote run.json last). A cell this machine leaves out for its GPU count
    starts nothing and is not counted. A label not run yet is not judged: its name is the user's."""
    machine, label = session.machine, session.label
    own = machine_mod.label_of(machine)
    if label.partition("+")[0] == own:  # the label's name says this machine: its results are this one's
        return
    for name in dict.fromkeys(n[0] for n in order):
        record = previous.get(name)
        stored = record.machine if record else {}
        if "gpu_count" not in stored or (stored.get("gpu"), stored["gpu_count"]) == (
            machine.gpu,
            machine.gpu_count,
        ):
            continue
        starting = [
            node[1]
            for node in order
            if node[0] == name
            and _starts(session, node, forced)
            and not left_out_for_gpus(session, node, forced)
        ]
        if not starting:
            continue
        shown = ", ".join(starting[:6]) + (f" and {len(starting) - 6} more" if len(starting) > 6 else "")
        fewer = stored.get("gpu") == machine.gpu and 0 < stored["gpu_count"] < machine.gpu_count
        visible = ",".join(str(i) for i in range(stored["gpu_count"]))
        hint = (
            f" (CUDA_VISIBLE_DEVICES={visible} gives it the label's {stored['gpu_count']})" if fewer else ""
        )
        raise SetupError(
            f"label {label} of {name}.md holds results measured on a machine with "
            f"{_gpus(stored.get('gpu'), stored['gpu_count'])} ({store.shown(session.run_dir(name) / 'run.json')}); "
            f"this machine has {_gpus(machine.gpu, machine.gpu_count)}: running {shown} here would replace "
            f"them with this machine's. Run them on that machine{hint}, refresh presenting cells over its results "
            f"with --reuse-elsewhere --cell ID, or run under another --label (this machine's own: "
            f"{own}). Nothing was run."
        )


def _gpus(gpu: str | None, count: int) -> str:
    if not count:
        return "no GPU"
    return f"{count} x {gpu}" if gpu else f"{count} GPU(s) of an unnamed model"


def note_upstream_runs(
    session: Session, order: list[NodeId], named: set[NodeId], forced: set[NodeId], previous
) -> None:
    """With --cell, the cells the named ones read that are not current here run first: say so before
    anything starts, naming them with their time by their last runs (on a GPU lease they may be minutes
    of a command's limit, and a re-measured upstream cell stales the label's other results). A label with
    no results here (no run.json: a first run, or a copy of the tree that left outputs/ behind) runs every
    cell the named ones read."""
    from attnbench.notebook.run.batches import estimate

    if session.options.reuse or session.options.force:  # reused as stored, or run again as asked
        return
    starting: set[NodeId] = set()
    for node in order:  # graph order: a cell whose upstream starts is stale by the time it is reached
        ups = {up for _, up in session.graph.upstream[node]}
        if left_out_for_gpus(session, node, forced):
            continue  # this machine leaves it out (the run says so): it starts nothing
        if _starts(session, node, forced) or ups & starting:
            starting.add(node)
    for name in dict.fromkeys(n[0] for n in order):
        upstream = [node for node in order if node[0] == name and node not in named]
        first = upstream if previous.get(name) is None else [n for n in upstream if n in starting]
        if not first:
            continue
        guesses = [estimate(session, node) for node in first]
        cells = ", ".join(g.text() if g.seconds is not None else g.cell for g in guesses)
        if previous.get(name) is None:
            print(f"note: {store.shown(session.run_dir(name))} holds no results: {cells} "
                  f"run first, for the cells named (bring the label folder along to reuse them)",
                  file=sys.stderr, flush=True)  # fmt: skip
        else:
            print(f"note: the cells named read cells of {name}.md that are not current under label "
                  f"{session.label}, so these run first: {cells} (name only current cells' readers, or "
                  f"run these in a command of their own: `attnbench status --batches SECONDS` plans them)",
                  file=sys.stderr, flush=True)  # fmt: skip
