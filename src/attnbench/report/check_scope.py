"""Which correctness checks vouch for which timed rows: at exactly their workload (`untimed_checks`, a
correctness cell's untimed rows), or, where none did, at a shorter length (`passed_lengths`, `checked_at`).

A correctness check runs where the fp32 reference fits (the dilated report checks each implementation at
32k tokens); a timed row at 4M tokens of the same kernel, pass and workload is then not checked at its
length. Saying only "not checked" hides that the kernel passed at 32k; calling it checked hides that
nothing compared its 4M result (an int32 index that overflows only at long lengths is a classic bug). So
such a row is "checked at S 32768", never "checked": the page says both what passed and where.

The workload is compared without its lengths and without what the report derives from the length (the
dilated branches: a segment length is clipped to the sequence below it). A check of the same provider
covers the passes it ran (CHECK_COVERS); one failed check of a workload at any length
leaves the workload with no shorter-length check to cite.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from attnbench.report.peak_share import number as _number
from attnbench.report.workload import workload_key

# A check covers the passes it ran: forward + backward compares the output and the gradients
CHECK_COVERS = {"fwd": {"fwd"}, "bwd": {"bwd"}, "fwd_bwd": {"fwd", "bwd", "fwd_bwd"}}
# the lengths, and what the report derives from them (the dilated branches: segments clipped to the length)
NOT_COMPARED = ("seqlen_q", "seqlen_k", "branches")


def _passes(row: Mapping) -> set[str]:
    """The passes a check of `row` covers."""
    return CHECK_COVERS.get(str(row.get("pass")), {str(row.get("pass"))})


def _key(row: Mapping, pass_: str) -> tuple[str, str, str]:
    return str(row.get("provider")), pass_, workload_key(row, NOT_COMPARED)


def untimed_checks(rows: Iterable[Mapping]) -> dict[tuple[str, str, str], bool]:
    """(provider, pass, workload) -> verdict of correctness rows that were checked but not timed (a
    correctness cell's rows: ms_median null). They vouch for the timed rows of that provider at exactly
    that workload, in every pass the checked pass covers; one wrong check makes it wrong."""
    found: dict[tuple[str, str, str], bool] = {}
    for row in rows:
        if _number(row.get("ms_median")) is not None or not isinstance(row.get("ok"), bool):
            continue
        good = row["ok"] and row.get("status") != "incorrect"
        for pass_ in _passes(row):
            key = (str(row.get("provider")), pass_, workload_key(row))
            found[key] = found.get(key, True) and good
    return found


def passed_lengths(rows: Iterable[Mapping]) -> dict[tuple[str, str, str], set[int]]:
    """{workload key without its lengths: the lengths where a check of it passed}; a workload with a
    failed check anywhere has none."""
    passed: dict[tuple[str, str, str], set[int]] = {}
    failed: set[tuple[str, str, str]] = set()
    for row in rows:
        ok = row.get("ok")
        if not isinstance(ok, bool):
            continue
        length = row.get("seqlen_q")
        for pass_ in _passes(row):
            key = _key(row, pass_)
            if ok and row.get("status") != "incorrect" and isinstance(length, int):
                passed.setdefault(key, set()).add(length)
            else:
                failed.add(key)
    return {key: lengths for key, lengths in passed.items() if key not in failed}


def checked_at(row: Mapping, passed: Mapping[tuple[str, str, str], set[int]]) -> str:
    """ "S 32768": the longest shorter length where the row's kernel passed its check on the row's
    workload; "" where none did."""
    length = row.get("seqlen_q")
    if not isinstance(length, int):
        return ""
    shorter = [n for n in passed.get(_key(row, str(row.get("pass"))), ()) if n < length]
    return f"S {max(shorter)}" if shorter else ""
