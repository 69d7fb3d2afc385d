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


def commit_date(root: Path, commit: str) -> str | None:
    return git_output(root, "show", "-s", "--format=%cI", commit)


def last_commit_of(root: Path, path: Path) -> dict | None:
    """The commit that last changed `path` in the repository: {"commit", "date", "subject"} or None."""
    line = git_output(root, "log", "-1", "--format=%H%x00%cI%x00%s", "--", str(path))
    if not line:
        return None
    commit, date, subject = (line.split("\0") + ["", ""])[:3]
    return {"commit": commit, "date": date, "subject": subject}


def git_toplevel(path: Path) -> str | None:
    return git_output(path, "rev-parse", "--show-toplevel")
