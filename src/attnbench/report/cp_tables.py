"""Tables and verdicts of the context-parallel report, from result rows alone (no torch; pandas lazily).

bench_table      one line per (strategy, length, mask, pass): slowest-rank ms, TFLOP/s per GPU, its
                 share of the single-GPU reference at the same per-GPU tokens, peak memory, status, and
                 (given the checks) each row's correctness, the single-GPU baselines' included.
overlap_table    per rank: total, kernel, communication-alone and exchange ms, work share, SM clock.
overlap_findings one sentence per (strategy, length): what sets the slowest rank's time, from numbers.
targets          the report's two targets: pass/fail, measured value, shortfall and the measured why
                 (target_text: one line of it for stdout).
published_table  our TFLOP/s per GPU beside the write-up's published 32x A800 figures.
A row above 100 % of a peak (cp_rows.over_peak) is a measurement error: no table shows its TFLOP/s.
markdown, text   a table as Markdown (for the site) or as aligned text (stdout), numbers formatted.
"""

from __future__ import annotations

from collections.abc import Iterable

from attnbench.report.check_words import INCORRECT, NOT_CHECKED, OK
from attnbench.report.cp_published import A800_BF16_PEAK_TFLOPS, FIGURES, WORLD_SIZE
from attnbench.report.cp_rows import base_strategy, is_reference, over_peak, reference_for, strategy_of
from attnbench.report.tables import formatted, markdown_table, tflops_text
from attnbench.rows import Result

GIB = 2**30
RATIO_TARGET = 0.90  # zigzag and Ulysses forward+backward vs single-GPU cuDNN at equal per-GPU tokens
TFLOPS_TARGET = 400.0  # every strategy, forward+backward, causal, at the target length (256k)
# higher bars for strategies over a faster local kernel (zigzag+fa3: 560, its own target on 2x H200)
STRATEGY_TFLOPS_TARGETS = {"zigzag+fa3": 560.0}
RATIO_STRATEGIES = ("zigzag", "ulysses")


FORMATS = {
    "ms": lambda v: f"{v:.4g}",
    "tflops_per_gpu": tflops_text,
    "peak_gib": lambda v: f"{v:.1f}",
    "work_share": lambda v: f"{v:.2f}",
    "kernel_ms": lambda v: f"{v:.4g}",
    "comm_ms": lambda v: f"{v:.4g}",
    "total_ms": lambda v: f"{v:.4g}",
    "exchange_GBps": lambda v: f"{v:.3g}",
    "exchange_ms": lambda v: f"{v:.3g}",
    "sm_clock_mhz": lambda v: f"{v:.0f}",
    "measured": lambda v: f"{v:.3g}",
    "needed": lambda v: f"{v:.3g}",
    "lse err": lambda v: f"{v:.1e}",
}


def _formats(frame) -> dict:
    percent = {c: (lambda v: f"{v:.1%}") for c in frame.columns if "%" in str(c) or c == "vs_single_gpu"}
    tflops = {c: tflops_text for c in frame.columns if "TFLOP/s" in str(c)}
    return {**FORMATS, **tflops, **percent}


def markdown(frame) -> str:
    return markdown_table(frame, _formats(frame))


def text(frame) -> str:
    return formatted(frame, _formats(frame)).to_string(index=False) if len(frame) else "(no rows)"


def verdicts(correctness: Iterable[dict]) -> dict[tuple[str, str], dict]:
    """(strategy, mask) -> the correctness cell's result for it."""
    return {(c["strategy"], c["mask"]): c for c in correctness}


def _check_text(row: Result, checks: dict | None) -> str:
    """The verdict of the check that vouches for the row: the one attached when it was measured
    (checks.attach_checks: a strategy's own check, a baseline's kernel run alone), else, for a strategy
    row measured before rows carried it, the correctness cell's result for its strategy and mask."""
    found = row.extra.get("checked_by")
    if found is None and checks is not None and not is_reference(row):
        check = checks.get((strategy_of(row), row.workload.mask))
        if check is None:
            return NOT_CHECKED
        if check["status"] == OK:
            return OK
        return check["status"] + (f": {check['reason']}" if check.get("reason") else "")
    found = found or {}
    if found.get("ok") is True:
        return OK
    if found.get("ok") is False:
        return f"{INCORRECT}: {found.get('reason', '')}"
    why = found.get("reason") or (
        "a baseline measured before baselines were checked"
        if is_reference(row)
        else "measured before rows carried their check (see the correctness table)"
    )
    return f"{NOT_CHECKED}: {why}"


def _tflops(row: Result | None) -> float | None:
    """The row's TFLOP/s per GPU, or None when it is above a peak: a measurement error, never a result."""
    return None if row is None or over_peak(row) else row.tflops


def bench_table(rows: list[Result], correctness: Iterable[dict] | None = None):
    """One line per row, with the verdict of the check that vouches for it where the rows carry theirs
    (every row measured since they do) or `correctness` (the correctness cell's results) is given; never
    a claim of "not checked" for rows that could not say. A row above a peak shows no TFLOP/s: its
    status and reason say why."""
    import pandas as pd

    checks = verdicts(correctness) if correctness is not None else None
    show_checks = checks is not None or any("checked_by" in r.extra for r in rows)
    lines = []
    for r in rows:
        over, reference = over_peak(r), is_reference(r)
        ref = None if reference else reference_for(r, rows)
        mine, theirs = _tflops(r), _tflops(ref)
        lines.append(
            {
                "strategy": r.provider if reference else strategy_of(r),
                "seq_len": r.workload.seqlen_q,
                "per_gpu": r.extra.get("seq_per_gpu", r.workload.seqlen_q),
                "mask": r.workload.mask,
                "pass": r.pass_,
                "status": "error" if over else r.status,
                "ms": r.ms_median,
                "tflops_per_gpu": mine,
                "vs_single_gpu": mine / theirs if mine and theirs else None,
                "sm_clock_mhz": r.sm_clock_mhz,  # a share above 100 % may be a reference run at a lower clock
                "peak_gib": r.peak_mem_bytes / GIB if r.peak_mem_bytes else None,
                **({"correctness": _check_text(r, checks)} if show_checks else {}),
                "reason": r.reason or over or "",
            }
        )
    return pd.DataFrame(lines)


def correctness_table(results: Iterable[dict]):
    import pandas as pd

    lines = []
    for c in results:
        line = {"strategy": c["strategy"], "mask": c["mask"], "status": c["status"]}
        for m, e in (c.get("errors") or {}).items():
            line[f"{m} err (cp / single)"] = f"{e['cp']:.2e} / {e['single']:.2e}"
        line["lse err"] = c.get("lse_err")
        line["reason"] = c.get("reason", "")
        lines.append(line)
    return pd.DataFrame(lines)


def overlap_table(rows: Iterable[dict]):
    """Per rank; exchange_GBps = bytes of one K/V block / its send/recv time (ring strategies)."""
    import pandas as pd

    keep = (
        "strategy",
        "seq_len",
        "mask",
        "pass",
        "rank",
        "status",
        "work_share",
        "kernel_ms",
        "comm_ms",
        "total_ms",
        "exchange_ms",
        "sm_clock_mhz",  # this rank's clock during the real call's timed calls (None: not recorded)
    )
    lines = []
    for r in rows:
        line = {k: r.get(k) for k in keep}
        line["exchange_GBps"] = r["exchange_bytes"] / r["exchange_ms"] / 1e6 if r.get("exchange_ms") else None
        line["reason"] = r.get("reason", "")
        lines.append(line)
    return pd.DataFrame(lines)


def _groups(rows: Iterable[dict]) -> dict[tuple, list[dict]]:
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["strategy"], r["seq_len"], r["mask"], r["pass"]), []).append(r)
    return groups


def explain(ranks: list[dict]) -> dict:
    """Numbers behind one (strategy, length) breakdown: slowest total, busiest kernels, comm alone."""
    total = max(r["total_ms"] for r in ranks)
    kernels = [r["kernel_ms"] for r in ranks]
    busiest = max(kernels)
    comm = max(r["comm_ms"] for r in ranks)
    shares = [r["work_share"] for r in ranks if r.get("work_share")]
    imbalance = max(shares) if shares else 1.0
    balanced = sum(kernels) / len(kernels)
    if imbalance > 1.1 and busiest >= 0.8 * total:
        cause = "work imbalance"
    elif comm >= 0.3 * total and busiest < 0.85 * total:
        cause = "communication"
    else:
        cause = "kernel speed"
    return {
        "total_ms": total,
        "busiest_kernel_ms": busiest,
        "comm_ms": comm,
        "imbalance": imbalance,
        "balanced_kernel_ms": balanced,
        "cause": cause,
        "exposed_ms": total - busiest,
    }


def overlap_findings(rows: Iterable[dict]) -> list[str]:
    """One sentence per (strategy, length, mask, pass), computed from the measured breakdown."""
    sentences = []
    for (strategy, seq, mask, pass_), ranks in _groups(rows).items():
        if any(r["status"] != "ok" for r in ranks):
            sentences.append(f"{strategy} {seq} {mask} {pass_}: not measured ({ranks[0].get('reason')})")
            continue
        e = explain(ranks)
        what = {
            "work imbalance": (
                f"set by its work imbalance: the busiest rank computes {e['imbalance']:.2f}x "
                f"the mean rank's (query, key) pairs; balanced, the same kernels would take "
                f"about {e['balanced_kernel_ms']:.0f} ms per rank"
            ),
            "communication": "set by communication that the kernels do not hide",
            "kernel speed": "set by the attention kernels themselves (work balanced, communication hidden)",
        }
        sentences.append(
            f"{strategy}, {seq} tokens, {mask}, {pass_}: the slowest rank takes {e['total_ms']:.1f} ms; the busiest "
            f"rank's kernels alone {e['busiest_kernel_ms']:.1f} ms ({e['busiest_kernel_ms'] / e['total_ms']:.0%}), "
            f"communication alone (no-op kernels) {e['comm_ms']:.1f} ms ({e['comm_ms'] / e['total_ms']:.0%}); "
            f"the time is {what[e['cause']]}."
        )
    return sentences


def _cp_rows(rows, strategy: str, mask: str, pass_: str, seq_len: int | None = None) -> list[Result]:
    return [
        r
        for r in rows
        if strategy_of(r) == strategy
        and r.workload.mask == mask
        and r.pass_ == pass_
        and (seq_len is None or r.workload.seqlen_q == seq_len)
        and not is_reference(r)
    ]


def targets(
    rows: list[Result],
    overlap: Iterable[dict] = (),
    correctness: Iterable[dict] = (),
    target_seq: int = 262144,
) -> list[dict]:
    """The report's two targets, one line per (target, strategy, length): measured, needed, verdict, why."""
    checks, findings = verdicts(correctness), _groups(overlap)
    lines = []
    strategies = list(dict.fromkeys(strategy_of(r) for r in rows if not is_reference(r)))
    for strategy in [s for s in strategies if base_strategy(s) in RATIO_STRATEGIES]:
        for r in _cp_rows(rows, strategy, "causal", "fwd_bwd") + _cp_rows(rows, strategy, "full", "fwd_bwd"):
            ref = reference_for(r, rows)
            kernel = r.extra.get("kernel", "cudnn")
            line = {
                "target": f">= {RATIO_TARGET:.0%} of single-GPU {kernel} TFLOP/s, fwd+bwd",
                "strategy": strategy,
                "seq_len": r.workload.seqlen_q,
                "mask": r.workload.mask,
                "needed": RATIO_TARGET,
            }
            if r.status != "ok" or not ref or ref.status != "ok":
                lines.append(
                    {
                        **line,
                        "measured": None,
                        "verdict": "not applicable" if not_offered(strategy, rows) else "not measured",
                        "why": r.reason or (ref.reason if ref else "no reference row"),
                    }
                )
                continue
            ratio = r.tflops / ref.tflops
            lines.append(
                _verdict(
                    line,
                    ratio,
                    RATIO_TARGET,
                    f"{ratio:.1%} of single GPU ({tflops_text(r.tflops)} vs {tflops_text(ref.tflops)} TFLOP/s)",
                    checks.get((strategy, r.workload.mask)),
                    findings,
                    r,
                )
            )
    for strategy in strategies:
        needed = STRATEGY_TFLOPS_TARGETS.get(strategy, TFLOPS_TARGET)
        line = {
            "target": f">= {needed:.0f} TFLOP/s per GPU, fwd+bwd, causal",
            "strategy": strategy,
            "seq_len": target_seq,
            "mask": "causal",
            "needed": needed,
        }
        found = _cp_rows(rows, strategy, "causal", "fwd_bwd", target_seq)
        if not found or found[0].status != "ok":
            why = found[0].reason if found else f"not measured at {target_seq} in this profile"
            verdict = "not applicable" if not_offered(strategy, rows) else "not measured"
            lines.append({**line, "measured": None, "verdict": verdict, "why": why})
            continue
        r = found[0]
        lines.append(
            _verdict(
                line,
                r.tflops,
                needed,
                f"{tflops_text(r.tflops)} TFLOP/s",
                checks.get((strategy, "causal")),
                findings,
                r,
            )
        )
    return lines


def not_offered(strategy: str, rows: list[Result]) -> bool:
    """A strategy over a local kernel ("te_p2p+fa3") that no row of it ran, while the strategy ran with
    its own kernel and other strategies ran that kernel: the combination itself is not offered (TE and
    MagiAttention pick their own local kernels), so its targets do not apply; nothing a user installs
    would run it. Where the strategy or the kernel ran nowhere, a library is missing: "not measured"."""
    base, _, kernel = strategy.partition("+")
    if not kernel or any(strategy_of(r) == strategy and r.status == "ok" for r in rows):
        return False
    ran = {strategy_of(r) for r in rows if r.status == "ok" and not is_reference(r)}
    return base in ran and any(s.endswith(f"+{kernel}") for s in ran)


def _verdict(line, measured, needed, shown, check, findings, r) -> dict:
    if check is not None and check["status"] != "ok":
        return {
            **line,
            "measured": measured,
            "verdict": "FAIL",
            "why": f"failed the correctness check ({check['status']}: {check.get('reason')})",
        }
    if measured >= needed:
        return {**line, "measured": measured, "verdict": "pass", "why": shown}
    shortfall = f"{shown}: short by {1 - measured / needed:.1%}"
    ranks = findings.get((line["strategy"], r.workload.seqlen_q, r.workload.mask, r.pass_))
    if ranks and all(x["status"] == "ok" for x in ranks):
        e = explain(ranks)
        why = (
            f"{shortfall}; measured breakdown: slowest rank {e['total_ms']:.4g} ms, busiest rank's kernels "
            f"{e['busiest_kernel_ms']:.4g} ms, communication alone {e['comm_ms']:.4g} ms, busiest rank's work "
            f"{e['imbalance']:.2f}x the mean: {e['cause']}"
        )
        if e["cause"] == "work imbalance" and r.tflops:
            # the same kernels spread evenly: the busiest rank's excess kernel time disappears
            balanced_ms = e["total_ms"] - (e["busiest_kernel_ms"] - e["balanced_kernel_ms"])
            why += (
                f"; balanced, about {r.tflops * e['total_ms'] / balanced_ms:.0f} TFLOP/s per GPU (estimate)"
            )
    else:
        why = f"{shortfall}; no comm/compute breakdown measured at this length"
    return {**line, "measured": measured, "verdict": "FAIL", "why": why}


def target_text(line: dict) -> str:
    """One target line for stdout: verdict, where, what was needed, and the measured why."""
    return (
        f"{line['verdict']:<12} {line['strategy']:<12} {line['seq_len']:>8} {line['mask']:<6} "
        f"{line['target']}: {line['why']}"
    )


def _our_status(mine: Result | None, over: str | None) -> str:
    if mine is None:
        return "not in this profile"
    return f"error: {over}" if over else str(mine.status)


def published_table(rows: list[Result], our_peak_tflops: float | None, world: int):
    """Per published method and length: their TFLOP/s per GPU (published.HARDWARE) and ours (fwd+bwd,
    causal), each also as a share of its GPU's dense bf16 datasheet peak ("% peak"). Ours above 100 % of
    a peak is a measurement error (cp_rows.over_peak): no number, the status says why."""
    import pandas as pd

    lines = []
    for method, (ours, figures) in FIGURES.items():
        for seq, theirs in figures.items():
            found = _cp_rows(rows, ours, "causal", "fwd_bwd", seq)
            mine = found[0] if found else None
            over = over_peak(mine, our_peak_tflops) if mine is not None else None
            ok = mine is not None and mine.status == "ok" and not over
            lines.append(
                {
                    "published method": method,
                    "seq_len": seq,
                    "published TFLOP/s/GPU": theirs,
                    "published tokens/GPU": seq // WORLD_SIZE,
                    "published % peak": theirs / A800_BF16_PEAK_TFLOPS if theirs else None,
                    "our strategy": ours,
                    "our TFLOP/s/GPU": mine.tflops if ok else None,
                    "our tokens/GPU": seq // world,
                    "our % peak": mine.tflops / our_peak_tflops if ok and our_peak_tflops else None,
                    "our status": _our_status(mine, over),
                }
            )
    return pd.DataFrame(lines)
