"""Helpers of the report.answers tests: a result row, a sparse (dilated) row, an answer's numbers."""

from __future__ import annotations


def row(provider: str, seq: int, ms: float, pass_: str = "fwd", **changes) -> dict:
    base = {
        "provider": provider,
        "family": "x",
        "status": "ok",
        "reason": "",
        "batch": 1,
        "seqlen_q": seq,
        "seqlen_k": seq,
        "heads_q": 8,
        "heads_kv": 8,
        "head_dim": 64,
        "dtype": "bfloat16",
        "mask": "causal",
        "pass": pass_,
        "ms_median": ms,
        "tflops": 100.0 / ms,
        "timer": "cuda_event",
        "ok": True,
        "extra": {},
    }
    return {**base, **changes}  # fmt: skip


def sparse(provider, seq, ms, pass_="fwd"):
    return row(provider, seq, ms, pass_, extra={"pattern": "dilated"})


def numbers(answer) -> dict:
    return {n.key: n.value for n in answer.numbers}
