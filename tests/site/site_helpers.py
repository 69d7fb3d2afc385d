"""Helpers of the site tests (conftest.py builds the fixture site with them)."""

from __future__ import annotations

import contextlib
import io

from attnbench.notebook.cli import main


def run_engine(*argv: str) -> str:
    """`attnbench <argv>` in this process; its output, and a failed assertion if it did not exit 0."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = main([str(a) for a in argv])
    assert code == 0, out.getvalue()
    return out.getvalue()
