"""CS336 systems: our FlashAttention-2 against FA3 and the leaderboard, the model's MFU and time sink."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from attnbench.notebook.site import headline as page
from attnbench.report.answers.common import _fastest, _good, _num, _number, _pct, _x
from attnbench.report.kernel_names import short_kernel_name

FA3 = "flash_attn3"
LEADERBOARD_BEST_MS = 5.364  # best public entry of the CS336 leaderboard (fwd+bwd, causal, S 16384, D 64)
LEADERBOARD_BEST_GPU = "H100"  # the card that entry ran on: a ratio on another card is across cards


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
            f"best public entry's {LEADERBOARD_BEST_MS} ms (our time {_x(ours['ms_median'] / LEADERBOARD_BEST_MS)} "
            f"its time, below 1 is faster; that entry ran on an {LEADERBOARD_BEST_GPU}, so the cards differ)"
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
        kernel = str(top.get("kernel"))
        text += f" (top kernel {short_kernel_name(kernel)}: {_pct(top['share'])} of it"
        if (
            "copy" in kernel.lower()
        ):  # memory traffic a fused kernel or a dtype-consistent model would not pay
            text += "; a copy kernel: dtype casts or .contiguous() copies, not math"
        text += ")"
    return text
