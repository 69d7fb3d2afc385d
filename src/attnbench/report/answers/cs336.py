"""CS336 systems: our FlashAttention-2 against FA3 and the leaderboard, the model's MFU and time sink."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from attnbench.notebook.site import headline as page
from attnbench.report.answers.common import _fastest, _good, _num, _number, _pct, _x
from attnbench.report.kernel_names import short_kernel_name
from attnbench.report.systems import step_mfu

FA3 = "flash_attn3"
LEADERBOARD_BEST_MS = 5.364  # best public entry of the CS336 leaderboard (fwd+bwd, causal, S 16384, D 64)
LEADERBOARD_BEST_GPU = "H100"  # the card that entry ran on: a ratio on another card is across cards


def cs336(data, noise: dict | None = None) -> page.Answer:
    answer = page.Answer(question="How fast is our Triton FlashAttention-2 against FA3 and the leaderboard, "
                                  "and where does the model's time go?")  # fmt: skip
    board = [r for r in _records(data, "leaderboard") if _good(r) and r.get("pass") == "fwd_bwd"
             and r.get("head_dim", 64) == 64]  # fmt: skip
    ours = _fastest([r for r in board if str(r.get("provider", "")).startswith("triton_fa2")])
    fa3 = _fastest([r for r in board if r.get("provider") == FA3])
    if ours:
        # the same card first (FA3 beside it), then the leaderboard's best entry, which ran on another card
        text = f"Leaderboard shape (fwd+bwd, wall time): {ours['provider']} {ours['ms_median']:.3f} ms"
        if fa3:
            ratio = ours["ms_median"] / fa3["ms_median"]
            text += f", {_x(ratio)} FA3's time on this GPU ({fa3['ms_median']:.3f} ms)"
            answer.numbers.append(_number("leaderboard|vs_fa3", "our time / FA3's", ratio, "×", "wall time",
                                          higher=False))  # fmt: skip
        text += (f"; against the best public entry's {LEADERBOARD_BEST_MS} ms, which ran on an "
                 f"{LEADERBOARD_BEST_GPU} (another card): {_x(ours['ms_median'] / LEADERBOARD_BEST_MS)} its time, "
                 "below 1 is faster")  # fmt: skip
        answer.numbers.append(_number("leaderboard|ms", "leaderboard time", ours["ms_median"], "ms", "wall time",
                                      f"best public {LEADERBOARD_BEST_MS} ms", higher=False))  # fmt: skip
        answer.answer.append(text + ".")
    best_mfu = _best_step_mfu(data)
    sink = _time_sink(data.documents.get("breakdown"))
    if best_mfu or sink:
        text = ""
        if best_mfu:
            mfu, r = best_mfu
            text = (f"Model: best {r.get('precision')} MFU {_pct(mfu)} ({r.get('size')}, context {r.get('context')}, "
                    f"{r.get('attention')} attention; the whole step against the measured matmul peak at the steps' "
                    "SM clock, as the step and attention-variant tables give it)")  # fmt: skip
            # a key of its own: until 2026-11 "model|mfu" counted forward + backward only, at the peak's clock
            answer.numbers.append(_number("model|step_mfu", f"{r.get('precision')} model MFU (whole step)", mfu * 100, "%", "",
                                          f"{r.get('size')} · {r.get('context')} · {r.get('precision')} · {r.get('attention')} attention"))  # fmt: skip
        if text:
            answer.answer.append(text + ".")
        if sink:  # its own sentence: the profiled step is another model run than the best MFU's
            answer.answer.append(f"Biggest time sink: {sink}.")
    if not answer.answer:
        answer.answer.append("No leaderboard or model rows to answer from.")
    return answer


def _records(data, prefix: str) -> list[Mapping]:
    return [r for cell, records in data.records.items() if cell.startswith(prefix) for r in records]


def _best_step_mfu(data) -> tuple[float, Mapping] | None:
    """The highest whole-step MFU of the model rows (the eager steps and the attention variants), computed
    as their tables compute it (the profile's warm-up and measured steps: the gpu cell's profile.json)."""
    spec = (data.documents.get("profile") or {}).get("steps") or {}
    # without a profile: every step after none of warm-up (the tables' window cannot be known)
    warmup, measured = max(spec.get("warmups") or [0]), spec.get("measured") or 10**6
    found = [(step_mfu(r, warmup, measured), r) for r in _records(data, "steps")
             if isinstance(r.get("times_ms"), dict)]  # fmt: skip
    found = [(mfu, r) for mfu, r in found if mfu is not None]
    return max(found, key=lambda pair: pair[0]) if found else None


# what a profiler block's kernels are, in words ("attention/other": masking, copies, casts)
KIND_WORDS = {
    "matmul": "matmuls",
    "softmax": "softmax",
    "other": "other kernels (elementwise, masking, copies)",
}


def _time_sink(breakdown: Any) -> str:
    """The block and kind of kernel that takes the most of the profiled step ("attention's other kernels
    (elementwise, masking, copies), 42 % of the step"), else the biggest phase with its top kernel."""
    phases = (breakdown or {}).get("phases") if isinstance(breakdown, Mapping) else None
    if not isinstance(phases, Mapping):
        return ""
    timed = {k: v for k, v in phases.items() if isinstance(v, Mapping) and _num(v.get("us_per_step"))}
    if not timed:
        return ""
    total = sum(v["us_per_step"] for v in timed.values())
    attention = breakdown.get("attention") or "eager"  # the profiled model's attention (the steps' default)
    where = (f"{breakdown.get('size')}, context {breakdown.get('context')}, {breakdown.get('precision')}, "
             f"{attention} attention")  # fmt: skip
    blocks: dict[str, float] = {}
    for phase in timed.values():
        for name, us in (phase.get("blocks_us_per_step") or {}).items():
            if _num(us) is not None:
                blocks[name] = blocks.get(name, 0.0) + us
    if blocks:
        name, us = max(blocks.items(), key=lambda kv: kv[1])
        block, _, kind = name.partition("/")
        return (f"{block}'s {KIND_WORDS.get(kind, kind)}, {_pct(us / total)} of the profiled step "
                f"({where}; {_pct(sum(us for n, us in blocks.items() if n.startswith(block + '/')) / total)} "
                f"for {block} in all)")  # fmt: skip
    name, phase = max(timed.items(), key=lambda kv: kv[1]["us_per_step"])
    text = f"the {name} phase, {_pct(phase['us_per_step'] / total)} of the step ({where})"
    top = (phase.get("top") or [None])[0]
    if isinstance(top, Mapping) and _num(top.get("share")) is not None:
        kernel = str(top.get("kernel"))
        text += f" (top kernel {short_kernel_name(kernel)}: {_pct(top['share'])} of it"
        if (
            "copy" in kernel.lower()
        ):  # memory traffic a fused kernel or a dtype-consistent model would not pay
            text += "; a copy kernel: dtype casts or .contiguous() copies, not math"
        text += ")"
    return text
