"""The source index: the indexed package split into parts, and the hash of the parts a cell's code uses.

A cell's cache key hashes the syntax trees of the parts of the project's package it imports,
transitively (docs/architecture.md, "Cache keys"): editing one report's measuring code leaves the other
reports' GPU results cached, and reformatting or editing comments stales nothing.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from attnbench.notebook.run.provenance import git_output as _git_text


# `pkg.<part>[.<sub>]`, `from pkg import <part>, ...` or `from pkg.<part> import <sub>`: how code names
# the parts of the indexed package `pkg` it uses (a grouping folder's parts are "<folder>.<sub>").
@functools.cache
def _part_ref(package: str) -> re.Pattern[str]:
    name = re.escape(package)
    return re.compile(
        rf"\b{name}\.(\w+)(?:\.(\w+))?"
        rf"|\bfrom[ \t]+{name}(?:\.(\w+))?[ \t]+import[ \t]+(\([^)]*\)|[\w \t,]+)"
    )


def _referenced_parts(text: str, package: str = "attnbench") -> set[str]:
    """Every name a part could be known by: `attnbench.studies.x` gives "studies/" and "studies.x";
    `from attnbench.rows import Result` gives "rows/" and "rows.Result"; `from attnbench import rows` or
    `import attnbench.rows` gives "rows"; any other `attnbench.rows` (prose) "rows/". A trailing "/" marks a package named only on the way to one of
    its members (SourceIndex.closure: the whole package, unless it is a re-export folder, whose members
    are parts of their own). SourceIndex keeps those that are parts."""
    found = set()
    for match in _part_ref(package).finditer(text):
        dotted, sub, subpackage, imported = match.groups(default="")
        if dotted:
            # `import attnbench.rows` names the whole package; a mention in prose ("the vocabulary of
            # attnbench.rows.") names it only on the way, like `attnbench.rows.Result` does
            line = text[text.rfind("\n", 0, match.start()) + 1 : match.start()]
            whole = not sub and re.search(r"\bimport[ \t]+$", line) is not None
            found.add(dotted if whole else f"{dotted}/")
            if sub:
                found.add(f"{dotted}.{sub}")
        else:  # "a, b as c" or "(a,\n b)"
            names = [name.split()[0] for name in imported.strip("()").split(",") if name.strip()]
            if subpackage:
                found.add(f"{subpackage}/")
                found.update(f"{subpackage}.{name}" for name in names)
            else:
                found.update(names)
    return found


def _reexports(folder: str, rels: list[PurePosixPath], read: Callable[[PurePosixPath], str], package: str):
    """A re-export folder (e.g. rows/: one module per report's rows and an __init__.py that only gathers
    their names): {exported name: module} when its __init__.py holds nothing but a docstring, `__all__`
    and `from <package>.<folder>.<module> import ...` of its own modules, and it has no subpackage; else
    None. Each module is then a part of its own, so a change to one report's row schema leaves the
    results of reports that never name it cached."""
    init = PurePosixPath(folder, "__init__.py")
    modules = {r.stem for r in rels if len(r.parts) == 2 and r.parts[0] == folder and r.name != "__init__.py"}
    if init not in rels or any(len(r.parts) > 2 and r.parts[0] == folder for r in rels):
        return None
    names: dict[str, str] = {}
    for node in ast.parse(read(init)).body:
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["__all__"]:
            continue
        module = getattr(node, "module", None) or ""
        prefix = f"{package}.{folder}."
        if not (isinstance(node, ast.ImportFrom) and node.level == 0 and module.startswith(prefix)):
            return None
        if module[len(prefix) :] not in modules:
            return None
        names.update({alias.asname or alias.name: module[len(prefix) :] for alias in node.names})
    return names or None  # an empty __init__.py is a plain package


def _is_grouping(folder: str, rels: list[PurePosixPath], read: Callable[[PurePosixPath], str]) -> bool:
    """A folder of independent packages (e.g. studies/: one per report): its __init__.py holds no code,
    only a docstring, so each subpackage is a part of its own and editing one report's measuring code
    leaves the others' results cached. `rels`: every .py path of the package; `read` reads one."""
    init = PurePosixPath(folder, "__init__.py")
    subpackage = any(len(r.parts) == 3 and r.parts[0] == folder and r.name == "__init__.py" for r in rels)
    if init not in rels or not subpackage:
        return False
    body = ast.parse(read(init)).body
    return all(isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) for node in body)


@functools.lru_cache(maxsize=8192)  # a file's text recurs at every commit it did not change (stale reasons)
def _canonical(text: str) -> str:
    """The code's syntax tree: reformatting or editing comments does not invalidate hours of GPU results;
    any change to what runs (docstrings included) does. Written the same on every Python version
    (ast.dump's text is not: 3.12 adds empty `type_params` to every def and class, 3.13 drops empty
    fields), so fields that are None or empty are left out. Unparsable text counts as itself."""
    try:
        return _dump(ast.parse(text))
    except SyntaxError:
        return text


def _dump(node: Any) -> str:
    if isinstance(node, ast.AST):
        fields = []
        for name in node._fields:
            value = getattr(node, name, None)
            if value is None or value == []:
                continue
            fields.append(f"{name}={_dump(value)}")
        return f"{type(node).__name__}({', '.join(fields)})"
    if isinstance(node, list):
        return "[" + ", ".join(_dump(v) for v in node) + "]"
    return repr(node)


@dataclass
class SourceIndex:
    """The project's indexed package (project.py: src/attnbench here) split into parts (each subpackage,
    each top-level module), EXCLUDING the engine's folder where the package ships it (notebook/):
    the engine never runs inside a cell, so editing it must not invalidate results (the script
    template's own changes are covered by SCRIPT_FORMAT).

    A cell's `attnbench` key part hashes only the parts its code imports and, transitively, the parts
    those import: editing cp/ leaves the Flux results cached, editing bench/ (which cp/ uses) does
    not. Parts are whole subpackages, so imports inside a subpackage, dynamic ones included, are covered.

    A part is read and hashed (its syntax trees: most of an engine start's work when done for every
    part) the first time a cell needs it: a cell that imports nothing from attnbench costs one file.
    """

    files: dict[
        str, list[PurePosixPath]
    ]  # part -> its files (relative), read when a cell first needs the part
    read: Callable[[PurePosixPath], str]  # a file's text (from the working tree, or from a commit)
    package: str = "attnbench"  # the name cells import it by
    package_dir: Path | None = None  # where it is in the working tree (as_of reads it at a commit)
    engine_part: str | None = "notebook"
    # a re-export folder's exported names -> the module part defining them ("rows.Result" -> "rows.kernel")
    aliases: dict[str, str] = field(default_factory=dict)
    reexported: dict[str, tuple[str, ...]] = field(
        default_factory=dict
    )  # re-export folder -> its module parts
    _texts: dict[str, list[tuple[str, str]]] = field(default_factory=dict)  # part -> [(rel, text)]
    _refs: dict[str, frozenset[str]] = field(default_factory=dict)
    _hashes: dict[str, str] = field(default_factory=dict)
    _at: dict[str, SourceIndex | None] = field(default_factory=dict)  # as_of's indexes, per commit

    @classmethod
    def of(
        cls, package_dir: Path, package: str | None = None, engine_part: str | None = "notebook"
    ) -> SourceIndex:
        """The package as it is in the working tree; `package` defaults to the folder's name;
        `engine_part` is left out of the index."""
        rels = [PurePosixPath(p.relative_to(package_dir).as_posix()) for p in package_dir.rglob("*.py")]

        def read(rel: PurePosixPath) -> str:
            return (package_dir / rel).read_text(encoding="utf-8", errors="replace")

        return cls.over(rels, read, package or package_dir.name, engine_part, package_dir)

    @classmethod
    def at_commit(
        cls, package_dir: Path, commit: str, package: str | None = None, engine_part: str | None = "notebook"
    ) -> SourceIndex | None:
        """The package as it was at git `commit` (None: no git, or the commit is unknown here)."""
        listed = _git_text(package_dir, "ls-tree", "-r", "--name-only", commit, ".")
        if listed is None:
            return None
        rels = [PurePosixPath(line) for line in listed.splitlines() if line.endswith(".py")]

        def read(rel: PurePosixPath) -> str:
            return _git_text(package_dir, "show", f"{commit}:./{rel}") or ""

        return cls.over(rels, read, package or package_dir.name, engine_part, package_dir)

    @classmethod
    def over(
        cls,
        rels: list[PurePosixPath],
        read: Callable[[PurePosixPath], str],
        package: str,
        engine_part: str | None,
        package_dir: Path | None = None,
    ) -> SourceIndex:
        files: dict[str, list[PurePosixPath]] = {}
        tops = {r.parts[0] for r in rels if len(r.parts) > 1} - {engine_part}
        groups = {top for top in tops if _is_grouping(top, rels, read)}
        exports = {
            top: names for top in tops - groups if (names := _reexports(top, rels, read, package)) is not None
        }
        for rel in sorted(rels):
            part = rel.parts[0] if len(rel.parts) > 1 else rel.stem
            if part in groups and rel.name == "__init__.py" and len(rel.parts) == 2:
                continue  # a grouping folder's own __init__.py: only a docstring, nothing runs
            if part in exports and rel.name == "__init__.py":
                continue  # a re-export folder's __init__.py: hashed with each of its modules (below)
            if part in groups or part in exports:  # its subpackage or module: a part of its own
                part = f"{rel.parts[0]}.{PurePosixPath(rel.parts[1]).stem}"
            # the engine's folder as a whole, also where it groups subpackages (notebook/run, ...)
            if rel.parts[0] != engine_part:
                files.setdefault(part, []).append(rel)
        members = {top: tuple(p for p in files if p.startswith(f"{top}.")) for top in exports}
        for top, parts in members.items():  # what the __init__.py gathers decides what a name means
            for part in parts:
                files[part] = [PurePosixPath(top, "__init__.py"), *files[part]]
        aliases = {
            f"{top}.{name}": f"{top}.{module}"
            for top, names in exports.items()
            for name, module in names.items()
        }
        return cls(files, read, package, package_dir, engine_part, aliases=aliases, reexported=members)

    def as_of(self, commit: str) -> SourceIndex | None:
        """The same package read at git `commit` (None: unknown there, or no git); one per commit."""
        if commit not in self._at and self.package_dir is not None:
            self._at[commit] = SourceIndex.at_commit(self.package_dir, commit, self.package, self.engine_part)
        return self._at.get(commit)

    def texts(self, part: str) -> list[tuple[str, str]]:
        if part not in self._texts:
            self._texts[part] = [(rel.as_posix(), self.read(rel)) for rel in self.files[part]]
        return self._texts[part]

    def refs(self, part: str) -> frozenset[str]:
        """The parts the code of `part` names."""
        if part not in self._refs:
            # a re-export folder's __init__.py names every module: a member's own code says what it uses
            gathered = f"{part.split('.')[0]}/__init__.py" if "." in part else None
            self._refs[part] = frozenset(
                ref
                for rel, text in self.texts(part)
                if rel != gathered
                for ref in _referenced_parts(text, self.package)
            )
        return self._refs[part]

    def part_hash(self, part: str) -> str:
        """sha256 of the part's files: relative path and syntax tree of each."""
        if part not in self._hashes:
            digest = hashlib.sha256()
            for rel, text in self.texts(part):
                digest.update(rel.encode() + b"\0" + _canonical(text).encode() + b"\0")
            self._hashes[part] = digest.hexdigest()
        return self._hashes[part]

    def closure(self, source: str) -> list[str]:
        """The parts `source` uses: the package's __init__.py always, plus what it imports, transitively."""
        todo, seen = ["__init__", *_referenced_parts(source, self.package)], set()
        while todo:
            name = todo.pop()
            part = self._resolve(name)
            if isinstance(part, list):
                todo.extend(part)
                continue
            if part is None or part in seen or part not in self.files:
                continue
            seen.add(part)
            todo.extend(self.refs(part))
        return sorted(seen)

    def _resolve(self, name: str) -> str | list[str] | None:
        """The part a referenced name stands for: "x/" is package x (nothing for a re-export folder,
        whose members are named beside it), a re-export folder named alone is all of its modules, an
        exported name is the module defining it."""
        folder = name.rstrip("/")
        if name.endswith("/"):
            return None if folder in self.reexported else folder
        if folder in self.reexported:
            return list(self.reexported[folder])
        return self.aliases.get(name, name)

    def changed_parts(self, then: SourceIndex, source: str) -> list[str]:
        """The parts `source` uses, now or in `then` (the package at an earlier commit), whose code differs
        between the two: what made a result measured at that commit stale."""
        parts = set(self.closure(source)) | set(then.closure(source))
        return sorted(
            part for part in parts
            if part not in self.files or part not in then.files or self.part_hash(part) != then.part_hash(part)
        )  # fmt: skip

    def hash_for(self, source: str) -> str:
        digest = hashlib.sha256()
        for part in self.closure(source):
            digest.update(f"{part}={self.part_hash(part)}\0".encode())
        return digest.hexdigest()
