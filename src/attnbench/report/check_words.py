"""The words every table and figure uses for a row's check against its reference.

One vocabulary, the rows' own (`Status.INCORRECT` is "incorrect"), so a reader meets one word for a
wrong result on every page rather than INCORRECT in one table, WRONG in another and NO in a third.
"""

from __future__ import annotations

from attnbench.rows import Status

OK = Status.OK.value  # checked and within its dtype's tolerance
INCORRECT = Status.INCORRECT.value  # checked, and it disagrees with the reference
NOT_CHECKED = "not checked"  # nothing compared its result


def check_word(ok: bool | None) -> str:
    """ok / incorrect / not checked for a row's `ok` (None: nothing checked it)."""
    return {True: OK, False: INCORRECT, None: NOT_CHECKED}[ok]
