"""Dilated attention: its speed-up over dense causal attention, the crossover, the longest length; and
the same run split over GPUs."""

from __future__ import annotations

from attnbench.notebook.site import headline as page
from attnbench.report.answers.common import _fastest, _good, _number, _x


def dilated(data, noise: dict | None = None) -> page.Answer:
    """Speed-up of the best dilated kernel over dense causal at the longest length both ran, the
    crossover (first length where dilated wins), and the longest length each reached."""
    answer = page.Answer(question="How much faster is dilated attention than dense causal attention, "
                                  "from what length, and how long can it go?")  # fmt: skip
    rows = [r for r in data.rows if r.get("mask") == "causal"]
    for pass_, word in (("fwd", "forward"), ("fwd_bwd", "forward + backward")):
        mine = [r for r in rows if r.get("pass") == pass_]
        sparse = [r for r in mine if (r.get("extra") or {}).get("pattern") and _good(r)]
        dense = [r for r in mine if not (r.get("extra") or {}).get("pattern") and _good(r)]
        if not sparse or not dense:
            continue
        by_len = lambda rs: {L: _fastest([r for r in rs if r.get("seqlen_q") == L])
                             for L in {r.get("seqlen_q") for r in rs}}  # fmt: skip
        s, d = by_len(sparse), by_len(dense)
        common = sorted(set(s) & set(d))
        longest_s, longest_d = max(s), max(d)
        text = f"{word}:"
        if common:
            L = common[-1]
            speedup = d[L]["ms_median"] / s[L]["ms_median"]
            cross = next((n for n in common if d[n]["ms_median"] > s[n]["ms_median"]), None)
            text += (f" {s[L]['provider']} is {_x(speedup)} the speed of dense {d[L]['provider']} at S {L} "
                     f"(wall time); dilated wins from S {cross}" if cross else
                     f" {s[L]['provider']} is {_x(speedup)} the speed of dense {d[L]['provider']} at S {L} "
                     "(wall time); dilated never wins at the lengths run")  # fmt: skip
            answer.numbers.append(_number(f"{pass_}|speedup", f"{word} speed-up over dense causal at S {L}",
                                          speedup, "×", "wall time", s[L]["provider"]))  # fmt: skip
            if cross:
                answer.numbers.append(_number(f"{pass_}|crossover", f"{word} crossover length", cross,
                                              "tokens", "", higher=False))  # fmt: skip
        text += f"; longest length reached: dilated S {longest_s}, dense S {longest_d}"
        stopped = [r for r in mine if not (r.get("extra") or {}).get("pattern") and r.get("status") == "skipped"
                   and (r.get("seqlen_q") or 0) > longest_d]  # fmt: skip
        if stopped:  # a budget, not a kernel, ended dense: say so with the prediction it was skipped on
            # the prediction of the dense kernel the sentence compares against, where it has one
            compared = d[common[-1] if common else longest_d].get("provider")
            stopped = [r for r in stopped if r.get("provider") == compared] or stopped
            first = min(stopped, key=lambda r: r.get("seqlen_q") or 0)
            why = str(first.get("reason") or "").removeprefix("not run: ").split(" (from")[0]
            text += (
                f" (longer dense runs skipped for time{': ' + why if why else ''} at S {first['seqlen_q']})"
            )
        text += "."
        answer.numbers.append(
            _number(f"{pass_}|longest", f"{word} longest dilated length", longest_s, "tokens")
        )
        answer.answer.append(text)
    if not answer.answer:
        answer.answer.append("No dilated and dense causal rows of one pass to compare.")
    return answer


def dilated_distributed(data, noise: dict | None = None) -> page.Answer:
    """The dilated report's cells across GPUs: at the longest length one GPU also ran whole, how much
    faster the split run is (wall time) and its strong-scaling efficiency; the longest split length.
    Without a split run (a one-GPU machine) it asks and answers nothing, so that the page leads with
    the one-GPU report's question and answer (a page merges its cells' headlines in cell order)."""
    split_any = [r for r in data.rows if ((r.get("extra") or {}).get("world_size") or 1) > 1]
    if not split_any:
        return page.Answer()
    answer = page.Answer(question="How much faster is dilated attention with the sequence split over GPUs, "
                                  "and how long can it go?")  # fmt: skip
    rows = [r for r in data.rows if _good(r) and (r.get("extra") or {}).get("world_size")]
    if not any(r["extra"]["world_size"] > 1 for r in rows):
        statuses = sorted({str(r.get("status")) for r in split_any})
        answer.answer.append(
            f"The run split over GPUs gave no usable row ({', '.join(statuses)}): see its table."
        )
        return answer
    for pass_, word in (("fwd", "forward"), ("fwd_bwd", "forward + backward")):
        mine = [r for r in rows if r.get("pass") == pass_]
        one = {r.get("seqlen_q"): r for r in mine if r["extra"]["world_size"] == 1}
        split = [r for r in mine if r["extra"]["world_size"] > 1]
        if not split:
            continue
        world = split[0]["extra"]["world_size"]
        longest = max(split, key=lambda r: r.get("seqlen_q") or 0)
        both = [r for r in split if r.get("seqlen_q") in one]
        text = f"{word}:"
        if both:
            at = max(both, key=lambda r: r.get("seqlen_q") or 0)
            L, speedup = at["seqlen_q"], one[at["seqlen_q"]]["ms_median"] / at["ms_median"]
            # strong scaling of one kernel path: the one-GPU row is the same path on all the tokens (the
            # one-GPU page's fastest kernel may be another one, which its compare page pairs instead)
            text += (f" {L} tokens split over {world} GPUs run {_x(speedup)} as fast as the same path on one "
                     f"GPU ({one[L]['provider']} on all of them; wall time {at['ms_median']:.1f} vs "
                     f"{one[L]['ms_median']:.1f} ms; strong-scaling efficiency {speedup / world:.0%});")  # fmt: skip
            answer.numbers.append(_number(f"{pass_}|split_speedup", f"{word} speed-up on {world} GPUs over the same path on one, at S {L}",
                                          speedup, "×", "wall time", f"{at['provider']} against "
                                          f"{one[L]['provider']} on one GPU"))  # fmt: skip
            slower = sorted((r["seqlen_q"], one[r["seqlen_q"]]["ms_median"] / r["ms_median"]) for r in both
                            if one[r["seqlen_q"]]["ms_median"] < r["ms_median"])  # fmt: skip
            if slower:  # where splitting costs more than it saves (communication, launch): said, not hidden
                text += (f" at {', '.join(str(n) for n, _ in slower)} tokens the split run is slower than one "
                         f"GPU ({', '.join(_x(x) for _, x in slower)});")  # fmt: skip
        reach = max(one) if one else None
        text += f" the split run reaches {longest['seqlen_q']} tokens ({longest['ms_median']:.1f} ms)"
        text += f", the same path on one GPU {reach}." if reach else "."
        answer.numbers.append(_number(f"{pass_}|split_longest", f"{word} longest length on {world} GPUs",
                                      longest["seqlen_q"], "tokens"))  # fmt: skip
        answer.answer.append(text)
    if answer.answer:  # the split path against one GPU is not the split path against the best one GPU
        answer.caveats.append("The split run's speed-up is of one path (the gather path) against itself on one GPU; the one-GPU "
                              "page's fastest kernel (the fused one where it ran) is another path, which the compare "
                              "page sets beside the split run.")  # fmt: skip
    return answer
