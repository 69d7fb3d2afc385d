"""The words every table and figure uses for a row's check against its reference.

One vocabulary, the rows' own (`Status.INCORRECT` is "incorrect"), so a reader meets one word for a
wrong result on every page rather than INCORRECT in one table, WRONG in another and NO in a third.
"""

from __future__ import annotations

from collections.abc import Callable

from attnbench.rows import Status

OK = Status.OK.value  # checked and within its dtype's tolerance
INCORRECT = Status.INCORRECT.value  # checked, and it disagrees with the reference
NOT_CHECKED = "not checked"  # nothing compared its result


def checked_only_at(where: str) -> str:
    """A row not checked at its length whose kernel passed at the shorter `where` ("S 32768"; check_scope)."""
    return f"checked at {where} only"


def check_word(ok: bool | None) -> str:
    """ok / incorrect / not checked for a row's `ok` (None: nothing checked it)."""
    return {True: OK, False: INCORRECT, None: NOT_CHECKED}[ok]


# A report's targets, each {"target", "met": True | False | None, "detail", ...}: the words targets.json
# and the printed lines say them in (the site's headline reads the same words).
VERDICTS = {True: "met", False: "missed", None: NOT_CHECKED}


def _detail(check: dict) -> str:
    return check["detail"]


def target_lines(checks: list[dict], why: Callable[[dict], str] = _detail) -> list[str]:
    """'<verdict>: <target>: <why>', one per target (`why`: the detail, or what a report adds to it)."""
    return [f"{VERDICTS[c['met']]}: {c['target']}: {why(c)}" for c in checks]


def targets_document(checks: list[dict], provider: str, why: Callable[[dict], str] = _detail) -> dict:
    """targets.json for the page's headline: met, missed or not checked, with why."""
    return {"targets": [{"target": c["target"], "provider": provider, "why": why(c),
                         "verdict": VERDICTS[c["met"]]} for c in checks]}  # fmt: skip
