"""Where the engine comes from and which package a project's cells import (the source index's).

The engine ships inside a host package (cells import `inputs()` from it, so a source checkout's src/
goes on their PYTHONPATH). The package whose sources key the cells' results is a project setting:

    [tool.attnbench]
    package = "mypackage"      # a folder under src/ or beside pyproject.toml

in the project's pyproject.toml; without it, the one importable package under src/ (a folder with
an __init__.py), else none: a cell's key then covers its own code only.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

HOST_NAME, ENGINE_NAME = __name__.split(".")[0], ".".join(__name__.split(".")[:2])  # attnbench(.notebook)
HOST_DIR = Path(__file__).resolve().parents[len(__name__.split(".")) - 2]  # the package the engine ships in
ENGINE_DIR = HOST_DIR / ENGINE_NAME.split(".")[1]


class ProjectError(ValueError):
    """A project setting that cannot be used; the message names the file and the setting."""


def host_checkout() -> Path | None:
    """The source checkout the engine's host package is imported from (the folder with its
    pyproject.toml naming it), if any; None for an installed package."""
    candidate = HOST_DIR.parents[1]
    try:
        if f'name = "{HOST_NAME}"' in (candidate / "pyproject.toml").read_text():
            return candidate
    except OSError:
        pass
    return None


@dataclass(frozen=True)
class IndexedPackage:
    name: str  # how cells import it
    folder: Path
    engine_part: str | None  # the engine's folder inside it, if it ships the engine: never indexed


def indexed_package(root: Path) -> IndexedPackage | None:
    """The package whose sources key the cells of the project at `root` (module docstring)."""
    pyproject = root / "pyproject.toml"
    name = None
    if pyproject.is_file():
        try:
            settings = tomllib.loads(pyproject.read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError) as e:
            raise ProjectError(f"{pyproject}: cannot be read as TOML ({e})") from None
        name = settings.get("tool", {}).get("attnbench", {}).get("package")
        if name is not None and (not isinstance(name, str) or not name.isidentifier()):
            raise ProjectError(f"{pyproject}: [tool.attnbench] package = {name!r} is not a package name")
    if name is None:
        found = sorted(p for p in (root / "src").glob("*/__init__.py")) if (root / "src").is_dir() else []
        if len(found) != 1:
            return None
        folder = found[0].parent
    else:
        folder = next((f for f in (root / "src" / name, root / name) if (f / "__init__.py").is_file()), None)
        if folder is None:
            raise ProjectError(
                f"{pyproject}: [tool.attnbench] package = {name!r}: no {name}/__init__.py under "
                f"{root / 'src'} or {root}"
            )
    engine = ENGINE_DIR.relative_to(folder.resolve()).parts[0] if ENGINE_DIR.is_relative_to(
        folder.resolve()) else None  # fmt: skip
    return IndexedPackage(folder.name, folder, engine)
