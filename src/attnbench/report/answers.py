"""Each notebook's question and the one or two numbers that answer it, computed from its rows.

`answer_for(name, data)` returns a `page.Answer` (question, answer sentences, key numbers) for the
notebook `name` from the artifacts a report cell read (headline_data.Artifacts); headline.json
carries it (schema version 2) and the site shows it on the page's first lines. Every function takes
what it finds: a number whose rows did not run is left out, and the sentence says so.

Units are always labelled: "per GPU" or "total" for context-parallel throughput, "wall" for times.
Baselines (single-GPU references, dense kernels on sparse reports, eager/reference runs) are never
the answer's winner.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from attnbench.notebook.site import headline as page
from attnbench.report.kernel_names import short_kernel_name
from attnbench.report.repeatability import protocol_of, repeatability_of, spread_for, widest_text

FA3 = "flash_attn3"
LEADERBOARD_BEST_MS = 5.364  # best public entry of the CS336 leaderboard (fwd+bwd, causal, S 16384, D 64)
LEADERBOARD_BEST_GPU = "H100"  # the card that entry ran on: a ratio on another card is across cards
SDPA_DEFAULT = "sdpa"  # PyTorch's default scaled_dot_product_attention dispatch


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _good(row: Mapping) -> bool:
    from attnbench.report.headline import above_peak

    return (row.get("status") == "ok" and row.get("ok") is not False and _num(row.get("ms_median")) is not None
            and not above_peak(row))  # fmt: skip


def _pct(x: float) -> str:
    return f"{x:.1%}" if abs(x) < 0.1 else f"{x:.0%}"


def _x(ratio: float) -> str:
    return f"{ratio:.2f}×"


def _fastest(rows: list[Mapping]) -> Mapping | None:
    return min(rows, key=lambda r: r["ms_median"]) if rows else None


def _number(key, name, value, unit, per="", detail="", higher=True) -> page.Number:
    return page.Number(key=key, name=name, value=value, unit=unit, per=per, detail=detail,
                       higher_is_better=higher)  # fmt: skip


# ---- dilated attention ----


def dilated(data) -> page.Answer:
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


# ---- context parallel ----


def context_parallel(data) -> page.Answer:
    """Per mask and total length: the best strategy's per-GPU share of the single-GPU reference at the
    same per-GPU tokens, mask and pass (its scaling efficiency), as the results table pairs them."""
    answer = page.Answer(question="How much of one GPU's throughput does each GPU keep when attention is "
                                  "split across GPUs?")  # fmt: skip
    rows = [r for r in data.rows if _good(r) and r.get("pass") == "fwd_bwd"] or [
        r for r in data.rows if _good(r)]  # fmt: skip
    rows = [r for r in rows if _num(r.get("tflops"))]
    single = [r for r in rows if _is_single_gpu(r)]
    passes = {r.get("pass") for r in rows}
    word = "Forward + backward" if passes == {"fwd_bwd"} else "Forward" if passes == {"fwd"} else "All passes"
    parts, above = [], False
    for mask in dict.fromkeys(str(r.get("mask")) for r in rows):
        multi = [r for r in rows if not _is_single_gpu(r) and str(r.get("mask")) == mask]
        for L in sorted({r.get("seqlen_q") for r in multi}):
            best = max((r for r in multi if r.get("seqlen_q") == L), key=lambda r: r["tflops"])  # per GPU
            world = (best.get("extra") or {}).get("world_size") or 1
            refs = [r for r in single if str(r.get("mask")) == mask and r.get("seqlen_q") == L // world
                    and r.get("pass") == best.get("pass")]  # fmt: skip
            same_kernel = [r for r in refs if (r.get("extra") or {}).get("kernel") ==
                           (best.get("extra") or {}).get("kernel")]  # fmt: skip
            ref = max(same_kernel or refs, key=lambda r: r["tflops"], default=None)
            if ref is None:
                continue
            share = best["tflops"] / ref["tflops"]
            above |= share > 1
            parts.append(f"{mask}, S {L} ({L // world} per GPU): {best['provider']} keeps {_pct(share)} per GPU "
                         f"of {ref['provider']}'s {ref['tflops']:.0f} TFLOP/s ({best['tflops']:.0f} TFLOP/s "
                         f"per GPU on {world} GPUs)")  # fmt: skip
            answer.numbers.append(_number(f"{mask}|{L}|efficiency",
                                          f"{mask} S {L} scaling efficiency ({best['provider']})",
                                          share * 100, "%", "per GPU", "of the single-GPU reference"))  # fmt: skip
    answer.answer.append(f"{word}, TFLOP/s per GPU against one GPU at the same per-GPU tokens: " + "; ".join(parts)
                         + "." if parts else
                         "No single-GPU reference and multi-GPU strategy at one per-GPU length to compare.")  # fmt: skip
    if above:
        answer.answer.append("A share above 100% is not a timing error: a rank's part of a causal problem holds "
                             "more full (off-diagonal) blocks than one GPU's causal problem of the same tokens, "
                             "and full blocks run faster.")  # fmt: skip
    return answer


def _is_single_gpu(row: Mapping) -> bool:
    return str(row.get("provider", "")).startswith("single_gpu")


# ---- CS336 systems ----


def cs336(data) -> page.Answer:
    answer = page.Answer(question="How fast is our Triton FlashAttention-2 against FA3 and the leaderboard, "
                                  "and where does the model's time go?")  # fmt: skip
    board = [r for r in _records(data, "leaderboard") if _good(r) and r.get("pass") == "fwd_bwd"
             and r.get("head_dim", 64) == 64]  # fmt: skip
    ours = _fastest([r for r in board if str(r.get("provider", "")).startswith("triton_fa2")])
    fa3 = _fastest([r for r in board if r.get("provider") == FA3])
    if ours:
        text = (
            f"Leaderboard (fwd+bwd, wall time): {ours['provider']} {ours['ms_median']:.3f} ms against the "
            f"best public entry's {LEADERBOARD_BEST_MS} ms ({_x(ours['ms_median'] / LEADERBOARD_BEST_MS)}; that "
            f"entry ran on an {LEADERBOARD_BEST_GPU})"
        )
        answer.numbers.append(_number("leaderboard|ms", "leaderboard time", ours["ms_median"], "ms", "wall time",
                                      f"best public {LEADERBOARD_BEST_MS} ms", higher=False))  # fmt: skip
        if fa3:
            ratio = ours["ms_median"] / fa3["ms_median"]
            text += f"; {_x(ratio)} FA3's time ({fa3['ms_median']:.3f} ms)"
            answer.numbers.append(_number("leaderboard|vs_fa3", "our time / FA3's", ratio, "×", "wall time",
                                          higher=False))  # fmt: skip
        answer.answer.append(text + ".")
    steps = [
        r for r in _records(data, "steps") if r.get("status") == "ok" and isinstance(r.get("times_ms"), dict)
    ]
    best_mfu = None
    for r in steps:
        t = r["times_ms"]
        ms = sum(sum(v) / len(v) for k, v in t.items() if k in ("forward", "backward") and v)
        flops, peak = (r.get("flops") or {}).get("train"), _num(r.get("peak_tflops"))
        if ms and flops and peak:
            mfu = flops / (ms / 1e3) / (peak * 1e12)
            if best_mfu is None or mfu > best_mfu[0]:
                best_mfu = (mfu, r)
    sink = _time_sink(data.documents.get("breakdown"))
    if best_mfu or sink:
        text = ""
        if best_mfu:
            mfu, r = best_mfu
            text = (f"Model: best MFU {_pct(mfu)} ({r.get('size')}, context {r.get('context')}, "
                    f"{r.get('precision')}, forward + backward against the measured matmul peak)")  # fmt: skip
            answer.numbers.append(_number("model|mfu", "model MFU", mfu * 100, "%", "",
                                          f"{r.get('size')} · {r.get('context')}"))  # fmt: skip
        if sink:
            text += ("; " if text else "") + f"biggest time sink: {sink}"
        answer.answer.append(text + ".")
    if not answer.answer:
        answer.answer.append("No leaderboard or model rows to answer from.")
    return answer


def _records(data, prefix: str) -> list[Mapping]:
    return [r for cell, records in data.records.items() if cell.startswith(prefix) for r in records]


def _time_sink(breakdown: Any) -> str:
    phases = (breakdown or {}).get("phases") if isinstance(breakdown, Mapping) else None
    if not isinstance(phases, Mapping):
        return ""
    timed = {k: v for k, v in phases.items() if isinstance(v, Mapping) and _num(v.get("us_per_step"))}
    if not timed:
        return ""
    total = sum(v["us_per_step"] for v in timed.values())
    name, phase = max(timed.items(), key=lambda kv: kv[1]["us_per_step"])
    text = f"the {name} phase, {_pct(phase['us_per_step'] / total)} of the step"
    top = (phase.get("top") or [None])[0]
    if isinstance(top, Mapping) and _num(top.get("share")) is not None:
        text += f" (top kernel {short_kernel_name(str(top.get('kernel')))}: {_pct(top['share'])} of it)"
    return text


# ---- Flux ----


def flux(data) -> page.Answer:
    answer = page.Answer(question="Which exact attention kernel is fastest for Flux's shapes, and by how much "
                                  "does it beat PyTorch's default SDPA?")  # fmt: skip
    from attnbench.report.headline import is_baseline, is_quantised

    for pass_, word in (("fwd", "forward"), ("fwd_bwd", "forward + backward")):
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
        text = f"{word} at S {L}: fastest exact kernel {best['provider']} ({best['ms_median']:.3f} ms wall)"
        if default and default is not best:
            lead = default["ms_median"] / best["ms_median"]
            text += f", {_x(lead)} the speed of PyTorch's SDPA ({default['provider']}, {default['ms_median']:.3f} ms)"
            answer.numbers.append(_number(f"{pass_}|lead", f"{word} lead over SDPA", lead, "×", "wall time",
                                          best["provider"]))  # fmt: skip
        answer.answer.append(text + ".")
    if not answer.answer:
        answer.answer.append("No exact kernel rows to rank.")
    noise = repeatability_of(
        {str(r.get("env")) for r in data.rows if r.get("env")}, protocol=protocol_of(data.rows)
    )
    if noise:
        answer.answer.append(
            f"Run to run on this GPU ({noise['rows']} rows {noise['compared']}, {noise['file']}): median spread "
            f"{noise['median']:.1%}, 95th percentile {noise['p95']:.1%}; a lead smaller than that is noise."
            + widest_text(noise.get("widest"))
        )
    return answer


# ---- masks ----


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


def masks(data) -> page.Answer:
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
                answer.numbers.append(_number(f"{mask}|{L}|{name}", f"{where}: {name} behind the best", gap * 100,
                                              "%", "wall time", higher=False))  # fmt: skip
        parts.append(text)
        if best["provider"] == "magi_ffa":
            wins.append(mask)
        elif any(r.get("provider") == "magi_ffa" for r in at):
            behind.append(
                _fastest([r for r in at if r.get("provider") == "magi_ffa"])["ms_median"] / best["ms_median"]
                - 1
            )
    if parts:
        answer.answer.append(f"Fastest per mask ({'forward + backward' if pass_ == 'fwd_bwd' else 'forward'}, "
                             "at the longest length FFA and Flex both ran, wall time; + is how much longer): "
                             + "; ".join(parts) + ".")  # fmt: skip
    else:
        answer.answer.append("No mask rows to rank.")
    ffa = _ffa_flexibility(rows, wins, behind)
    if ffa:
        answer.answer.append(ffa)
    return answer


def _span(values: list[float]) -> str:
    low, high = _pct(min(values)), _pct(max(values))
    return low if low == high else f"{low}–{high}"


def _ffa_flexibility(rows: list[Mapping], wins: list[str], behind: list[float]) -> str:
    """Where FFA's flexibility wins (masks it is the fastest at) and costs (how far behind it is
    elsewhere), and what its default forward costs: MagiAttention's atomic reduction (`magi_ffa_default`)
    against disable_fwd_atomic_reduction=True (`magi_ffa`), over every mask and length both ran."""
    said = []
    if wins:
        said.append(f"FFA is the fastest at {', '.join(wins)}")
    if behind:
        said.append(f"{'elsewhere it' if wins else 'FFA'} is {_span(behind)} behind the best")
    plain = {(r.get("mask"), r.get("seqlen_q")): r["ms_median"] for r in rows
             if r.get("provider") == "magi_ffa" and r.get("pass") == "fwd"}  # fmt: skip
    costs = [r["ms_median"] / plain[key] - 1 for r in rows
             if r.get("provider") == "magi_ffa_default" and r.get("pass") == "fwd"
             and (key := (r.get("mask"), r.get("seqlen_q"))) in plain]  # fmt: skip
    if costs:
        said.append(f"its default forward (atomic reduction, magi_ffa_default) is {_span(costs)} slower than with disable_fwd_atomic_reduction=True (magi_ffa), over "
                    f"{len(costs)} mask × length points")  # fmt: skip
    return ("; ".join(said) + ".") if said else ""


def dilated_distributed(data) -> page.Answer:
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
            text += (f" {L} tokens split over {world} GPUs run {_x(speedup)} as fast as one GPU running "
                     f"{one[L]['provider']} on all of them (wall time {at['ms_median']:.1f} vs "
                     f"{one[L]['ms_median']:.1f} ms; strong-scaling efficiency {speedup / world:.0%});")  # fmt: skip
            answer.numbers.append(_number(f"{pass_}|split_speedup", f"{word} speed-up on {world} GPUs at S {L}",
                                          speedup, "×", "wall time", f"{at['provider']} against "
                                          f"{one[L]['provider']} on one GPU"))  # fmt: skip
        text += f" the split run reaches {longest['seqlen_q']} tokens ({longest['ms_median']:.1f} ms)."
        answer.numbers.append(_number(f"{pass_}|split_longest", f"{word} longest length on {world} GPUs",
                                      longest["seqlen_q"], "tokens"))  # fmt: skip
        answer.answer.append(text)
    return answer


# ---- environment ----


def _cudnn_version(value: Any) -> str | None:
    """torch's cuDNN version number (91900) as cuDNN writes it (9.19.0)."""
    if not isinstance(value, int) or value < 1000:
        return None if value is None else str(value)
    major, rest = divmod(value, 10000) if value >= 10000 else divmod(value, 1000)
    minor, patch = divmod(rest, 100)
    return f"{major}.{minor}.{patch}"


def environment(data) -> page.Answer:
    """The machine the reports ran on: the GPU and what bounds its speed (SMs, memory, the clock it may
    reach and the power it may draw), then the software that decides which kernels exist."""
    answer = page.Answer(question="What machine did these reports run on?")
    env = data.documents.get("environment")
    if not isinstance(env, Mapping):
        answer.answer.append("No environment.json to read: the versions cell has not run here.")
        return answer
    reasons = env.get("reasons") if isinstance(env.get("reasons"), Mapping) else {}
    gpus = env.get("gpus") if isinstance(env.get("gpus"), list) else []
    facts = [
        (_num(env.get("sm_count")), "{:.0f} SMs", "sm_count", "SMs", "SMs"),
        (_num(env.get("memory_bytes")), "{:.1f} GiB of GPU memory", "memory", "GPU memory", "GiB"),
        (
            _num(env.get("max_sm_clock_mhz")),
            "SM clock up to {:.0f} MHz",
            "max_sm_clock",
            "max SM clock",
            "MHz",
        ),
        (_num(env.get("power_limit_w")), "power limit {:.0f} W", "power_limit", "power limit", "W"),
    ]
    if env.get("gpu"):
        said = []
        for value, form, key, name, unit in facts:
            if value is None:
                continue
            value = value / 2**30 if unit == "GiB" else value
            said.append(form.format(value))
            answer.numbers.append(_number(f"gpu|{key}", name, round(value, 1), unit))
        count = f"{len(gpus)}× " if len(gpus) > 1 else ""
        answer.answer.append(f"{count}{env['gpu']}" + (f": {', '.join(said)}." if said else "."))
    else:
        why = reasons.get("gpu") or "no CUDA device was found"
        answer.answer.append(
            f"No NVIDIA GPU ({why}): the benchmark notebooks run their CPU smoke profile here."
        )
    packages = env.get("packages") if isinstance(env.get("packages"), Mapping) else {}
    software = [("driver", env.get("driver")), ("CUDA", env.get("cuda")), ("cuDNN", _cudnn_version(env.get("cudnn"))),
                ("torch", packages.get("torch") or env.get("torch")), ("triton", packages.get("triton")),
                ("Python", env.get("python"))]  # fmt: skip
    known = [f"{name} {value}" for name, value in software if value]
    cores = f" ({env['cpu_count']} cores)" if isinstance(env.get("cpu_count"), int) else ""
    host = f"{env.get('cpu')}{cores}" if env.get("cpu") else ""
    if known or host:
        answer.answer.append(
            "; ".join(filter(None, [", ".join(known), f"host {host}" if host else ""])) + "."
        )
    return answer


ANSWERS: dict[str, Callable[[Any], page.Answer]] = {
    "environment": environment,
    "dilated_attention": dilated,
    "dilated_distributed": dilated_distributed,
    "context_parallel": context_parallel,
    "cs336_systems": cs336,
    "flux_attention": flux,
    "attention_masks": masks,
}


def with_spreads(answer: page.Answer, spread: float | None) -> page.Answer:
    """Each timed number's spread: a time takes `spread`, a ratio of two times (×, %) twice it (both rows
    move); lengths and counts are exact (none)."""
    if spread:
        for n in answer.numbers:
            if n.unit in ("ms", "TFLOP/s"):
                n.spread = spread
            elif n.unit in ("×", "%"):
                n.spread = 2 * spread
    return answer


def answer_for(name: str, data, key_figure: str = "", spread: float | None = None) -> page.Answer:
    """The answer of notebook `name` (ANSWERS) from `data`; on a CPU smoke run it says so. Its timed numbers
    carry `spread` (default: the run-to-run spread measured on the rows' machine) for the history page's
    flags."""
    if spread is None:
        spread = spread_for(
            {str(r.get("env")) for r in data.rows if r.get("env")}, protocol=protocol_of(data.rows)
        )
    answer = with_spreads(ANSWERS[name](data), spread)
    answer.key_figure = key_figure
    if any(r.get("timer") == "perf_counter" for r in data.rows):
        answer.answer.append("CPU smoke run: not a GPU measurement; the numbers only show the report works.")
    return answer
