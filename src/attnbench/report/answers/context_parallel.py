"""Context parallel: each strategy's per-GPU share of one GPU at the same per-GPU tokens."""

from __future__ import annotations

from attnbench.notebook.site import headline as page
from attnbench.report.answers.common import _first_of, _good, _num, _number, _pct
from attnbench.report.cp_rows import is_reference, reference_for
from attnbench.report.repeatability import noise_p95
from attnbench.rows import Result


def context_parallel(data, noise: dict | None = None) -> page.Answer:
    """Per mask and total length: the best strategy's per-GPU share of the single-GPU reference at the
    same per-GPU tokens, mask and pass (its scaling efficiency), as the results table pairs them."""
    answer = page.Answer(question="How much of one GPU's throughput does each GPU keep when attention is "
                                  "split across GPUs?")  # fmt: skip
    good = [r for r in data.rows if _good(r) and _num(r.get("tflops"))]
    rows = [Result.from_dict(r) for r in ([r for r in good if r.get("pass") == "fwd_bwd"] or good)]
    passes = {r.pass_ for r in rows}
    word = "Forward + backward" if passes == {"fwd_bwd"} else "Forward" if passes == {"fwd"} else "All passes"
    parts, ties, above, worlds = [], [], False, set()
    for mask in dict.fromkeys(r.workload.mask for r in rows):
        multi = [r for r in rows if not is_reference(r) and r.workload.mask == mask]
        for L in sorted({r.workload.seqlen_q for r in multi}):
            best = max((r for r in multi if r.workload.seqlen_q == L), key=lambda r: r.tflops)  # per GPU
            ref = reference_for(best, rows)  # the table's pairing: per-GPU tokens, mask, pass, local kernel
            if ref is None:
                continue
            world = best.extra.get("world_size", 1)
            share = best.tflops / ref.tflops
            above |= share > 1
            worlds.add(world)
            text = (f"{mask}, S {L} ({L // world} per GPU): {best.provider} keeps {_pct(share)} "
                    f"({best.tflops:.0f} of {ref.provider}'s {ref.tflops:.0f} TFLOP/s)")  # fmt: skip
            parts.append(text + _slowest(multi, L, rows, best) + ".")
            tied = _tied(multi, L, rows, best, noise_p95(noise) if noise else None)
            if tied:  # a lead no run can reproduce qualifies the answer: said under it (page.Answer.caveats)
                ties.append(f"{mask}, S {L}: {best.provider} {tied}")
            answer.numbers.append(_number(f"{mask}|{L}|efficiency",
                                          f"{mask} S {L} scaling efficiency ({best.provider})",
                                          share * 100, "%", "per GPU", "of the single-GPU reference"))  # fmt: skip
    on = f" on {min(worlds)} GPUs" if len(worlds) == 1 else ""
    if parts:  # what is compared, then one line a mask and length: a reader finds a point without parsing a paragraph
        answer.answer += [f"{word}, TFLOP/s per GPU{on} against one GPU at the same per-GPU tokens:", *parts]
    else:
        answer.answer.append(
            "No single-GPU reference and multi-GPU strategy at one per-GPU length to compare."
        )
    answer.caveats += [f"{tie}." for tie in ties]
    if above:
        answer.caveats.append("A share above 100% is not a timing error: a rank's part of a causal problem holds "
                              "more full (off-diagonal) blocks than one GPU's causal problem of the same tokens, "
                              "and full blocks run faster.")  # fmt: skip
    return answer


def _tied(multi: list[Result], L: int, rows: list[Result], best: Result, noise: float | None) -> str:
    """ "tied within the 9.2% run-to-run noise with cp_ulysses+fa3, …": the strategies on the best's
    kernel whose throughput is within `noise` of it, so a lead no run can reproduce is not read as one."""
    if not noise:
        return ""
    ref = reference_for(best, rows)
    close = sorted((r for r in multi if r.workload.seqlen_q == L and r is not best
                    and reference_for(r, rows) is ref and r.tflops >= best.tflops * (1 - noise)),
                   key=lambda r: -r.tflops)  # fmt: skip
    if not close:
        return ""
    return f"tied within the {_pct(noise)} run-to-run noise with {_first_of([r.provider for r in close])}"


def _slowest(multi: list[Result], L: int, rows: list[Result], best: Result) -> str:
    """ ", the slowest of N on that kernel M% (X)": the other end of the strategies
    at one length, against the best's own single-GPU reference (strategies on another local kernel have
    another reference, so their shares are not compared with the best's)."""
    ref = reference_for(best, rows)
    shares = [(r.tflops / ref.tflops, r.provider) for r in multi
              if r.workload.seqlen_q == L and r is not best and reference_for(r, rows) is ref]  # fmt: skip
    if not shares:
        return ""
    share, provider = min(shares)
    return f", the slowest of {len(shares) + 1} on that kernel {_pct(share)} ({provider})"
