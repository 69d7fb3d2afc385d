"""Which code produced a result: the git commit of the project (and whether its sources were edited).

Recorded in each cell's result.json as `code` when the cell runs. On a machine that has the files but
no git history (a GPU box the working tree was copied to), set ATTNBENCH_CODE_COMMIT to the commit the
copy was made from; the site then looks its date up in the repository it is built in.
"""

from __future__ import annotations

import functools
import os
import subprocess
from pathlib import Path
from typing import Self

COMMIT_VARIABLE = "ATTNBENCH_CODE_COMMIT"
WATCHED = ("src", "notebooks")  # an edit here, uncommitted, makes the result's commit "dirty"


def git_output(root: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", "-C", str(root), *args], capture_output=True, text=True, timeout=20, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


@functools.cache
def code_version(root: Path) -> dict | None:
    """{"commit": sha, "dirty": bool | None, "date": ISO commit date | None}, or None if unknown."""
    given = os.environ.get(COMMIT_VARIABLE, "").strip()
    if given:
        return {"commit": given, "dirty": None, "date": None, "from": COMMIT_VARIABLE}
    commit = git_output(root, "rev-parse", "HEAD")
    if not commit:
        return None
    status = git_output(root, "status", "--porcelain", "--", *WATCHED)
    return {
        "commit": commit,
        "dirty": None if status is None else bool(status),
        "date": git_output(root, "show", "-s", "--format=%cI", commit),
        "from": "git",
    }


@functools.cache
def commit_date(root: Path, commit: str) -> str | None:
    """The commit's ISO date (a commit's date never changes: asked once per build, not once per cell)."""
    return git_output(root, "show", "-s", "--format=%cI", commit)


class GitObjects:
    """A repository's trees and blobs through one `git cat-file --batch` process, each blob read once.

    A history page reads every result.json and headline.json of a label at every commit that touched it
    (thousands of files); most are the same blob from commit to commit, and one `git show` each cost a
    process apiece (40 of a site build's 47 s). Use as a context manager; a blob git cannot give reads
    as None."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self._batch: subprocess.Popen | None = None
        self._texts: dict[str, str | None] = {}

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """End the cat-file process: EOF on its stdin ends it; one that does not end (or died with input
        unwritten, whose stdin would raise on close) is killed. Never raises."""
        batch, self._batch = self._batch, None
        if batch is None:
            return
        try:
            batch.stdin.close()
            batch.wait(timeout=20)
        except (OSError, subprocess.TimeoutExpired):
            batch.kill()
            batch.wait()
        finally:
            batch.stdout.close()

    def tree(self, commit: str, folder: str) -> list[tuple[str, str]] | None:
        """[(blob sha, path)] of every file under `folder` at `commit`; None where git cannot list it."""
        listing = git_output(self.root, "ls-tree", "-r", commit, "--", folder)
        if listing is None:
            return None
        files = []
        for line in listing.splitlines():
            meta, _, path = line.partition("\t")
            parts = meta.split()
            if len(parts) == 3 and parts[1] == "blob":
                files.append((parts[2], path))
        return files

    def text(self, sha: str) -> str | None:
        """The blob's text (UTF-8, undecodable bytes replaced), read once per sha."""
        if sha not in self._texts:
            self._texts[sha] = self._read(sha)
        return self._texts[sha]

    def _read(self, sha: str) -> str | None:
        try:
            if self._batch is None:
                self._batch = subprocess.Popen(["git", "-C", str(self.root), "cat-file", "--batch"],
                                               stdin=subprocess.PIPE, stdout=subprocess.PIPE)  # fmt: skip
            self._batch.stdin.write(f"{sha}\n".encode())
            self._batch.stdin.flush()
            header = self._batch.stdout.readline().decode().split()
            if len(header) == 2 and header[1] == "missing":
                return None  # the process lives on: the next object can still be read
            size = int(header[2]) if len(header) == 3 else -1
            data = self._batch.stdout.read(size) if size >= 0 else b""
            if len(data) != size or self._batch.stdout.read(1) != b"\n":  # the process ended mid-answer
                raise OSError(f"git cat-file answered {' '.join(header) or 'nothing'} for {sha}")
        except (OSError, ValueError):
            self.close()  # a later read starts a fresh process
            return None
        return data.decode("utf-8", errors="replace")


def last_commit_of(root: Path, path: Path) -> dict | None:
    """The commit that last changed `path` in the repository: {"commit", "date", "subject"} or None."""
    line = git_output(root, "log", "-1", "--format=%H%x00%cI%x00%s", "--", str(path))
    if not line:
        return None
    commit, date, subject = (line.split("\0") + ["", ""])[:3]
    return {"commit": commit, "date": date, "subject": subject}


def git_toplevel(path: Path) -> str | None:
    return git_output(path, "rev-parse", "--show-toplevel")
