"""Where a row nothing checked at its own length was checked at a shorter one.

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

from attnbench.report.workload import workload_key

# A check covers the passes it ran: forward + backward compares the output and the gradients
CHECK_COVERS = {"fwd": {"fwd"}, "bwd": {"bwd"}, "fwd_bwd": {"fwd", "bwd", "fwd_bwd"}}
# the lengths, and what the report derives from them (the dilated branches: segments clipped to the length)
NOT_COMPARED = ("seqlen_q", "seqlen_k", "branches")


def _key(row: Mapping, pass_: str) -> tuple[str, str, str]:
    return str(row.get("provider")), pass_, workload_key(row, NOT_COMPARED)


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
        for pass_ in CHECK_COVERS.get(str(row.get("pass")), {str(row.get("pass"))}):
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
