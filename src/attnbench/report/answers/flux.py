"""Flux: the fastest exact kernel at Flux's shapes and its lead over PyTorch's default SDPA."""

from __future__ import annotations

from attnbench.notebook.site import headline as page
from attnbench.report import duty_cycle, method_gap
from attnbench.report.answers.common import _fastest, _first_of, _good, _number, _pct, _x
from attnbench.report.method_gap import QUEUED
from attnbench.report.repeatability import caveats, drift_words, noise_p95, protocol_of, widest_text

SDPA_DEFAULT = "sdpa"  # PyTorch's default scaled_dot_product_attention dispatch


def method_words(best: dict, other: dict) -> str:
    """ "; timed differently: …" where one of two compared rows was timed in queued bursts and the other
    back to back, else "". A burst waits behind a one-warp spin, so the GPU idles before it and starts
    it below its power limit; a call run back to back runs at the limit. An idle GPU before each call
    made cuDNN's forward ~11 % faster on an H200 (the Flux report's cuDNN section), so a lead across
    the two methods may be partly the lull; report.method_gap measures how much on the page itself."""
    queued = [r for r in (best, other) if r.get("timing_method") == QUEUED]
    if len(queued) != 1:
        return ""
    burst, steady = queued[0], other if queued[0] is best else best
    host = (burst.get("extra") or {}).get("host_ms_per_call")
    why = f": {host:.2f} ms of host time per {burst['ms_median']:.3f} ms call" if host else ""
    return (f"; timed differently: {burst['provider']} in bursts queued behind an idle GPU (launch-bound{why}), "
            f"{steady['provider']} back to back at the power limit, so part of this gap may be the idle lull "
            "rather than the kernel")  # fmt: skip


def tie_words(best: dict, rows: list[dict], noise: float | None, shown: int = 3) -> str:
    """ "; tied within the 3.2% run-to-run noise: xformers_fa3 (+0.2%), …" naming the rows of other
    providers whose time is within `noise` of the fastest, so a lead no run can reproduce is not read as
    one; "" without a measured noise or a row that close."""
    if not noise:
        return ""
    close = sorted((r for r in rows if r.get("provider") != best.get("provider")
                    and r["ms_median"] <= best["ms_median"] * (1 + noise)), key=lambda r: r["ms_median"])  # fmt: skip
    if not close:
        return ""
    names = [f"{r['provider']} (+{_pct(r['ms_median'] / best['ms_median'] - 1)})" for r in close]
    return f"; tied within the {_pct(noise)} run-to-run noise: {_first_of(names, shown)}"


def timed_alike(best: dict, default: dict, pass_: str, word: str, answer: page.Answer) -> tuple[str, str]:
    """(answer clause, caveat clause) where this machine's duty-cycle probe (report.duty_cycle) timed the
    winner and SDPA at the answer's workload: "; timed alike, 1.08× back to back and 1.08× queued …" and
    what the lull is worth there, the number added to the answer (back to back, at the power limit, where
    the host kept ahead of both calls, else both queued); ("", "") where it did not."""
    envs = {str(r["env"]) for r in (best, default) if r.get("env")}
    probe = duty_cycle.probe_of(envs, pass_)
    if not probe or not (duty_cycle.at_point(probe, best) and duty_cycle.at_point(probe, default)):
        return "", ""
    found = duty_cycle.leads(duty_cycle.times(probe), best["provider"], default["provider"])
    # behind GEMMs the lull grows with host time, so that mode does not time the two alike
    shown = {mode: found[mode] for mode in ("sustained", "queued_spin") if mode in found}
    if not shown:
        return "", ""
    mode = next(iter(shown))
    answer.numbers.append(_number(f"{pass_}|lead_alike", f"{word} lead over SDPA, timed alike", shown[mode], "×",
                                  f"wall time, {duty_cycle.MODES[mode]}", best["provider"]))  # fmt: skip
    said = " and ".join(f"{ratio:.2f}× {duty_cycle.MODES[m]}" for m, ratio in shown.items())
    return f"; timed alike, {said} ({probe['file']})", duty_cycle.lull_words(probe)


def flux(data, noise: dict | None = None) -> page.Answer:
    answer = page.Answer(question="Which exact attention kernel is fastest for Flux's shapes, and by how much "
                                  "does it beat PyTorch's default SDPA?")  # fmt: skip
    from attnbench.report.headline import PASS_NAMES, is_baseline, is_quantised

    crossed = False  # a lead compared rows timed the two ways
    for pass_ in ("fwd", "fwd_bwd"):
        word = PASS_NAMES[pass_]
        # reference implementations (sdpa_math) are baselines, never the answer, as in the ranking table
        rows = [r for r in data.rows if r.get("pass") == pass_ and _good(r) and not is_quantised(r)
                and not is_baseline(r)]  # fmt: skip
        if not rows:
            continue
        L = max(r.get("seqlen_q") or 0 for r in rows)
        at = [r for r in rows if (r.get("seqlen_q") or 0) == L]
        best = _fastest(at)
        default = _fastest(
            [r for r in at if r.get("provider") in (SDPA_DEFAULT, "sdpa_default")]
        ) or _fastest([r for r in at if r.get("provider") in ("sdpa_flash", "sdpa_cudnn")])
        picked = str(
            (best.get("extra") or {}).get("note") or ""
        )  # a dispatcher's choice: the kernel that ran
        ran = (
            f"; Transformer Engine ran {picked.removeprefix('TE picked: ')}"
            if picked.startswith("TE picked:")
            else ""
        )
        text = (
            f"{word} at S {L}: fastest exact kernel {best['provider']} ({best['ms_median']:.3f} ms wall{ran})"
        )
        method = lull = ""
        if default and default is not best:
            lead = default["ms_median"] / best["ms_median"]
            method = method_words(best, default)
            text += f", {_x(lead)} the speed of PyTorch's SDPA ({default['provider']}, {default['ms_median']:.3f} ms)"
            answer.numbers.append(_number(f"{pass_}|lead", f"{word} lead over SDPA", lead, "×", "wall time",
                                          best["provider"]))  # fmt: skip
            if method:  # the lead crossed the two timing methods: the probe's, timed alike, beside it
                alike, lull = timed_alike(best, default, pass_, word, answer)
                text += alike
        answer.answer.append(text + ".")
        # what qualifies the lead goes under the answer (page.Answer.caveats), one line a pass
        qualified = tie_words(best, at, noise_p95(noise) if noise else None) + method
        if lull:  # what the lull is worth where the answer's lead timed alike was measured
            qualified += f"; {lull}"
        if qualified:
            answer.caveats.append(f"{word}: {qualified.removeprefix('; ')}.")
        crossed = crossed or bool(method)
    if not answer.answer:
        answer.answer.append("No exact kernel rows to rank.")
    measured = method_gap.words([r for r in data.rows if _good(r)]) if crossed else ""
    if measured:
        answer.caveats.append(measured)
    protocol = protocol_of(data.rows)
    if noise:
        answer.caveats.append(
            f"A lead smaller than {noise_p95(noise):.1%} is noise on this GPU: run to run, the median spread is "
            f"{noise['median']:.1%} and the 95th percentile {noise['p95']:.1%}{drift_words(noise)} "
            f"({noise['rows']} rows {noise['compared']}, {noise['file']}{caveats(noise, protocol)})."
            + widest_text(noise.get("widest"))
        )
    return answer
