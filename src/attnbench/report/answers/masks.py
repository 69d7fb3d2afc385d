"""Masks: per mask the fastest kernel, and how far FFA and FlexAttention are from it."""

from __future__ import annotations

from collections.abc import Mapping

from attnbench.notebook.site import headline as page
from attnbench.report.answers.common import _fastest, _good, _number, _pct
from attnbench.report.headline import PASS_NAMES, value_range
from attnbench.report.repeatability import noise_p95

MASK_PEERS = ("magi_ffa", "flex")  # the kernels the mask report's question asks about


def _mask_length(at: list[Mapping]) -> int:
    """The length a mask is answered at: the longest where both peers ran, else where one did, else the
    longest measured (a length only one kernel reached, as the budget skips rows, answers nothing)."""
    lengths = sorted({r.get("seqlen_q") or 0 for r in at}, reverse=True)
    ran = {L: {r.get("provider") for r in at if (r.get("seqlen_q") or 0) == L} for L in lengths}
    for wanted in (len(MASK_PEERS), 1):
        for L in lengths:
            if len(ran[L] & set(MASK_PEERS)) >= wanted and len(ran[L]) > 1:
                return L
    return lengths[0]


def _tokens(n: int) -> str:
    return f"{n // 1024}k" if n >= 1024 and n % 1024 == 0 else str(n)


def masks(data, noise: dict | None = None) -> page.Answer:
    answer = page.Answer(question="Per mask, which kernel is fastest, and how far are FFA (magi_ffa) and "
                                  "FlexAttention from it?")  # fmt: skip
    rows = [r for r in data.rows if _good(r)]
    pass_ = "fwd_bwd" if any(r.get("pass") == "fwd_bwd" for r in rows) else "fwd"
    parts, wins, behind = [], [], []
    for mask in dict.fromkeys(str(r.get("mask")) for r in rows if r.get("pass") == pass_):
        at = [r for r in rows if r.get("pass") == pass_ and str(r.get("mask")) == mask]
        L = _mask_length(at)
        at = [r for r in at if (r.get("seqlen_q") or 0) == L]
        best = _fastest(at)
        where = f"{mask} at {_tokens(L)}"
        text = f"{where}: {best['provider']}"
        for name in MASK_PEERS:
            other = _fastest([r for r in at if r.get("provider") == name])
            if other is None:
                text += f", {name} did not run"
            elif other is not best:
                gap = other["ms_median"] / best["ms_median"] - 1
                text += f", {name} +{_pct(gap)}"
                # the name pairs labels (compare, history); the detail says what the share means
                answer.numbers.append(_number(f"{mask}|{L}|{name}", f"{where}: {name} slower than the best by", gap * 100,
                                              "%", "wall time", f"{name} takes {1 + gap:.2f}× {best['provider']}'s time",
                                              higher=False))  # fmt: skip
        parts.append(text)
        if best["provider"] == "magi_ffa":
            wins.append(mask)
        elif any(r.get("provider") == "magi_ffa" for r in at):
            behind.append(
                _fastest([r for r in at if r.get("provider") == "magi_ffa"])["ms_median"] / best["ms_median"]
                - 1
            )
    if parts:  # what is compared, then one line a mask
        which = "forward + backward" if pass_ == "fwd_bwd" else "forward"
        header = f"Fastest per mask ({which}, at the longest length FFA and Flex both ran, wall time; + is how much longer):"
        answer.answer += [header, *(f"{part}." for part in parts)]
    else:
        answer.answer.append("No mask rows to rank.")
    ffa = _ffa_flexibility(rows, wins, behind, noise)
    if ffa:
        answer.answer.append(ffa)
    budget = _not_attempted(data.rows)
    if budget:  # it qualifies every winner: under the answer (page.Answer.caveats)
        answer.caveats.append(budget)
    return answer


def _not_attempted(rows: list[Mapping]) -> str:
    """The rows the profile's time budget left out, per pass: a kernel not timed at a length cannot win
    there, so a winner is the fastest of those that ran (the tables list each skipped row's reason)."""
    # only the budget's skips: a stand-in variant that gave way to a provider measuring the row natively
    # ("not attempted: sdpa_cudnn measured this row …") was not left out for time
    skipped = [r for r in rows if r.get("status") == "skipped"
               and str(r.get("reason", "")).startswith("not attempted: predicted")]  # fmt: skip
    if not skipped:
        return ""
    per_pass = {p: sum(r.get("pass") == p for r in skipped) for p in ("fwd", "bwd", "fwd_bwd")}
    said = ", ".join(f"{PASS_NAMES[p]} {n}" for p, n in per_pass.items() if n)
    return (f"{len(skipped)} kernel × length rows were not attempted within the profile's time budget ({said}); "
            "a winner is the fastest of the kernels that ran at that length.")  # fmt: skip


def _ffa_flexibility(
    rows: list[Mapping], wins: list[str], behind: list[float], noise: dict | None = None
) -> str:
    """Where FFA's flexibility wins (masks it is the fastest at) and costs (how far behind it is
    elsewhere, against `noise`, the machine's repeatability run (report.repeatability), as a lead is), and
    what its default forward costs: MagiAttention's atomic reduction (`magi_ffa_default`) against
    disable_fwd_atomic_reduction=True (`magi_ffa`), over every mask and length both ran."""
    said = []
    if wins:
        said.append(f"FFA is the fastest at {', '.join(wins)}")
    if behind:
        p95 = noise_p95(noise) if noise else None
        within = sum(gap < p95 for gap in behind) if p95 else 0
        spread = ""
        if within:  # a gap below one row's spread is, on its own, not told apart from a tie
            which = (
                ""
                if len(behind) == 1
                else "each "
                if within == len(behind)
                else f"{within} of {len(behind)} "
            )
            spread = (f" ({which}below the 95th-percentile run-to-run spread of one row on this machine, "
                      f"{_pct(p95)}: {noise['file']})")  # fmt: skip
        said.append(
            f"{'elsewhere it' if wins else 'FFA'} is {value_range(behind, _pct)} behind the best{spread}"
        )
    plain = {(r.get("mask"), r.get("seqlen_q")): r["ms_median"] for r in rows
             if r.get("provider") == "magi_ffa" and r.get("pass") == "fwd"}  # fmt: skip
    costs = [r["ms_median"] / plain[key] - 1 for r in rows
             if r.get("provider") == "magi_ffa_default" and r.get("pass") == "fwd"
             and (key := (r.get("mask"), r.get("seqlen_q"))) in plain]  # fmt: skip
    if costs:
        said.append(f"its default forward (atomic reduction, magi_ffa_default) is {value_range(costs, _pct)} slower than with disable_fwd_atomic_reduction=True (magi_ffa), over "
                    f"{len(costs)} mask × length points")  # fmt: skip
    return ("; ".join(said) + ".") if said else ""
