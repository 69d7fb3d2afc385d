"""`attnbench clean`: generated cell scripts, what killed runs left in outputs/, and (asked for) results,
never a folder a live run holds and never a path that leads out of outputs/."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from attnbench.notebook.run import store
from attnbench.notebook.run.materialise import is_generated
from attnbench.notebook.run.session import SetupError


def clean(root: Path, names: list[str], *, results: bool = False, label: str | None = None) -> int:
    """Remove the generated cell scripts of the notebooks `names` (every notebook when empty) and what
    killed runs left in outputs/; with `results`, their results too (one `label`'s, or all). A run in
    progress keeps its folders (exit 1, naming its holder); a path leading out of outputs/ is refused."""
    if label and not results:
        raise SetupError("--label only applies with --outputs")
    if label:
        try:
            store.check_label(label)
        except ValueError as e:
            raise SetupError(str(e)) from None
    for name in names:
        try:
            store.check_notebook_name(name)
        except ValueError as e:
            raise SetupError(str(e)) from None
    outputs = root / "outputs"
    removed: list[Path] = []
    cells = root / "cells"
    for folder in [cells / n for n in names] if names else sorted(p for p in cells.glob("*") if p.is_dir()):
        for script in sorted(folder.glob("*.py")):
            if is_generated(script):
                script.unlink()
                removed.append(script)
        if folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()
    busy: dict[Path, str] = {}
    for leftover in [p for n in (names or [None]) for p in store.leftovers(outputs, n)]:
        if _in_use(leftover.parent, busy):
            continue  # a live run's cell folder under construction
        _remove(leftover)
        removed.append(leftover)
    if results:
        targets = (
            [outputs / n for n in names] if names else sorted(p for p in outputs.glob("*") if p.is_dir())
        )
        for target in targets:
            target = target / label if label else target
            if not _inside(target, outputs):  # a link (or a name) leading out of outputs/<notebook>/
                raise SetupError(
                    f"clean: {store.shown(target, root)} is not a folder inside {outputs}: not removed"
                )
            run_folders = [target] if label else sorted(p for p in target.glob("*") if p.is_dir())
            if target.exists() and not any(_in_use(folder, busy) for folder in run_folders):
                _remove(target)
                removed.append(target)
    for folder, holder in busy.items():
        print(f"kept {store.shown(folder, root)}: in use by {holder}", file=sys.stderr)
    for path in removed:
        print(f"removed {store.shown(path, root)}")
    if not removed:
        print("nothing to clean")
    return 1 if busy else 0


def _in_use(run_folder: Path, busy: dict[Path, str]) -> bool:
    """Is a run of this notebook and label going on (its lock is held)? Remembered in `busy`."""
    from attnbench.notebook.run import runlock

    if run_folder in busy:
        return True
    try:
        lock = runlock.try_lock(run_folder)
    except OSError as e:
        raise SetupError(f"cannot check whether {run_folder} is in use: {e.strerror}") from None
    if lock is None:
        busy[run_folder] = runlock.describe_holder(run_folder)
        return True
    lock.release()
    return False


def _inside(path: Path, outputs: Path) -> bool:
    """Is `path` a real folder (no link on the way) inside `outputs`, or absent?"""
    if not path.exists() and not path.is_symlink():
        return True
    rel = path.relative_to(outputs)
    step = outputs
    for part in rel.parts:
        step = step / part
        if step.is_symlink():
            return False
    return path.resolve().is_relative_to(outputs.resolve()) and path.resolve() != outputs.resolve()


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)
