"""What a page leads with, computed from the rows: who is fastest, how close to the peak, what failed.

From result rows (README: results.jsonl) as plain dicts, so the site needs neither torch nor pandas:

- per shape and pass, the fastest *correct* provider with its TFLOP/s and its share of the peak
  (the matmul peak measured in the same run where the rows carry it, else the datasheet's), the
  runner-up and how much slower it is; quantised kernels (judged with the looser tolerance) are ranked
  apart and named only where they are faster than the best exact one;
- per pass, one sentence: who wins how many shapes, the TFLOP/s range, the share of the peak;
- correctness failures by name (rows `incorrect`, or checks of a separate correctness cell);
- targets met or missed (a targets file: {"targets": [{"target", "verdict", ...}]}) and single
  verdicts (a file with a top-level "verdict", e.g. the trust check). A missed target is never "ok".

A row with `ok` unset is correct only if a separate check vouches for it: `checks` maps
(provider, mask) to that check's status (the context-parallel correctness cell checks each strategy
once per mask at a smaller length). Rows nobody checked are ranked only where nothing checked ran,
and marked "not checked", or "checked at S N only" where their kernel passed at that shorter length on
the same workload (check_scope.py).
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from attnbench.report.check_scope import checked_at, passed_lengths, untimed_checks
from attnbench.report.peak_share import above_peak, peak_of, peak_words
from attnbench.report.peak_share import number as _number
from attnbench.report.workload import SHAPE_FIELDS, workload_key

PASS_NAMES = {"fwd": "forward", "bwd": "backward", "fwd_bwd": "forward + backward"}
PASS_ORDER = tuple(PASS_NAMES)
MET = {"pass", "passed", "met", "holds", "ok", "true"}
MISSED = {"fail", "failed", "fails", "missed", "false"}
NOT_APPLICABLE = {"not applicable"}  # a target that cannot apply (a combination not offered); "n/a" is not it
CHECK_OK = {"ok"}  # a separate correctness check's status that vouches for a row...
CHECK_WRONG = {"incorrect", "fail", "failed"}  # ...and those that say it is wrong; others: not checked


@dataclass
class Best:
    """The fastest correct provider at one shape and pass."""

    pass_: str
    shape: str  # the workload fields that vary across the rows, e.g. "S 4352" or "S 131072 · causal"
    provider: str
    ms: float
    tflops: float | None
    peak_share: float | None  # of `peak` (below)
    peak: str  # "measured" (matmul peak of the same run) | "datasheet" | ""
    checked: bool  # False: no correctness check covers this row (see module doc)
    checked_at: str = ""  # not checked at its length, but its kernel passed at this shorter one (check_scope)
    runner_up: str = ""
    runner_up_tflops: float | None = None
    runner_up_slower: float | None = None  # runner-up ms / best ms (1.08 = 8% slower)
    quantised: str = ""  # a quantised kernel faster than `provider`: "sage (612 TFLOP/s)"
    candidates: int = 1
    baseline: bool = False  # only references ran here (single GPU, dense on a sparse report, eager)
    gpus: int | None = None  # the GPUs the winner ran on (extra.world_size); its TFLOP/s are per GPU
    workload: str = ""  # every workload field: the same on every machine, whatever varies in one run
    band: float | None = None  # the winner's own p20-p80 band over its median: how steady its calls timed
    unchecked_faster: str = ""  # a faster row nothing checked, left out because checked rows ran here
    clock_mhz: float | None = None  # the winner's median SM clock over its timed calls (the row records it)


@dataclass
class Target:
    name: str  # what is required, e.g. ">= 400 TFLOP/s per GPU, fwd+bwd, causal"
    subject: str  # what was measured, e.g. "ring · 262144 · causal"
    verdict: str  # "met" | "missed" | "not checked"
    detail: str  # measured value and why, as the targets file says it
    source: str  # the file it came from
    said: str = ""  # the verdict in the file's own word ("skipped", "holds")


@dataclass
class Headline:
    bests: list[Best] = field(default_factory=list)
    sentences: list[str] = field(default_factory=list)  # one per pass
    incorrect: list[str] = field(default_factory=list)  # "provider pass: why (where)"
    errored: list[str] = field(default_factory=list)  # "provider pass: why": rows that ran and failed
    targets: list[Target] = field(default_factory=list)
    cpu: bool = False  # timed with perf_counter: not a GPU measurement
    rows: int = 0

    @property
    def missed(self) -> list[Target]:
        return [t for t in self.targets if t.verdict == "missed"]

    @property
    def met(self) -> list[Target]:
        return [t for t in self.targets if t.verdict == "met"]

    @property
    def winners(self) -> list[Best]:
        """The ranked bests: baselines never win (all of them where only baselines ran)."""
        return [b for b in self.bests if not b.baseline] or self.bests

    @property
    def unchecked_targets(self) -> list[Target]:
        return [t for t in self.targets if t.verdict == "not checked"]

    @property
    def empty(self) -> bool:
        return not (self.bests or self.incorrect or self.targets)


# ---- rows ----

BASELINE_PREFIXES = ("single_gpu",)  # context parallel's one-GPU references
BASELINE_PROVIDERS = {"torch_eager", "sdpa_math", "eager", "reference"}  # reference implementations


def is_baseline(row: Mapping, sparse_report: bool = False, multi_gpu_report: bool = False) -> bool:
    """A reference, never the winner: a single-GPU run on a multi-GPU report (a `single_gpu*` provider,
    or with `multi_gpu_report` a row that ran on one GPU: world_size 1), an eager/reference
    implementation, or (`sparse_report`) a dense row beside sparse-pattern rows."""
    provider = str(row.get("provider", ""))
    if provider.startswith(BASELINE_PREFIXES) or provider in BASELINE_PROVIDERS:
        return True
    if multi_gpu_report and _world(row) == 1:
        return True
    return sparse_report and not (row.get("extra") or {}).get("pattern")


def is_quantised(row: Mapping) -> bool:
    extra = row.get("extra") or {}
    if extra.get("quantized"):
        return True
    return str((extra.get("tolerance") or {}).get("name", "")).startswith("quantized")


def _verdict(
    row: Mapping,
    checks: Mapping[tuple[str, str], str],
    untimed: Mapping[tuple[str, str, str], bool] | None = None,
) -> bool | None:
    """True: checked and correct; False: known wrong; None: nobody checked."""
    if row.get("status") == "incorrect" or row.get("ok") is False:
        return False
    if row.get("ok") is True:
        return True
    checked = (untimed or {}).get((str(row.get("provider")), str(row.get("pass")), workload_key(row)))
    if checked is not None:
        return checked
    provider, mask = str(row.get("provider")), str(row.get("mask"))
    # A check may name the provider without its family prefix (strategy "ring" for row "cp_ring").
    bare = provider.removeprefix(f"{row.get('family')}_")
    status = checks.get((provider, mask), checks.get((bare, mask)))
    if status is None or status.lower() not in CHECK_OK | CHECK_WRONG:
        return None  # no check, or it could not run (unavailable, error, oom): nobody checked
    return status.lower() in CHECK_OK


def _shape_fields(rows: list[Mapping]) -> list[str]:
    varying = [f for f in SHAPE_FIELDS if len({json.dumps(r.get(f)) for r in rows}) > 1]
    return varying


def shape_label(row: Mapping, fields: list[str]) -> str:
    """The varying workload fields of one row, shortest first: 'S 4352', 'S 131072 · causal'."""
    parts = []
    if "seqlen_q" in fields or "seqlen_k" in fields:
        q, k = row.get("seqlen_q"), row.get("seqlen_k")
        parts.append(f"S {k}" if q == k else f"Sq {q} Sk {k}")
    for name in fields:
        if name in ("seqlen_q", "seqlen_k"):
            continue
        value = row.get(name)
        if value is None:  # a field that varies across rows but this row does not use (no window)
            continue
        if name == "doc_lens":
            parts.append(f"{len(value)} docs" if isinstance(value, list) else f"docs {value}")
            continue
        short = {"batch": "B", "heads_q": "H", "heads_kv": "KV heads", "head_dim": "D", "window": "window",
                 "block": "block"}  # fmt: skip
        parts.append(f"{short[name]} {value}" if name in short else str(value))
    # a sparse pattern over the same base mask (dilated attention rows) is another workload: never ranked
    # against dense rows of the same shape
    pattern = (row.get("extra") or {}).get("pattern")
    if pattern:
        parts.append(str(pattern))
    return " · ".join(parts) or "one shape"


def headline(
    rows: Iterable[Mapping],
    *,
    checks: Mapping[tuple[str, str], str] | None = None,
    peaks: Mapping[str, float | None] | None = None,
    targets: Iterable[Target] = (),
) -> Headline:
    """The headline of one set of result rows (plus the run's checks and targets)."""
    rows = [r for r in rows if isinstance(r, Mapping)]
    checks, peaks = checks or {}, peaks or {}
    measured = [r for r in rows if r.get("status") in ("ok", "incorrect") and _number(r.get("ms_median"))
                and not above_peak(r)]  # fmt: skip
    fields = _shape_fields(measured)
    groups: dict[tuple[str, str], list[Mapping]] = defaultdict(list)
    for row in measured:
        groups[(str(row.get("pass")), shape_label(row, fields))].append(row)
    result = Headline(rows=len(rows), targets=list(targets))
    result.cpu = any(r.get("timer") == "perf_counter" for r in measured)
    sparse = any((r.get("extra") or {}).get("pattern") for r in measured)
    multi_gpu = any((_world(r) or 1) > 1 for r in measured)
    untimed, passed = untimed_checks(rows), passed_lengths(rows)
    for (pass_, shape), group in groups.items():
        best = _best(pass_, shape, group, checks, peaks, sparse, multi_gpu, untimed, passed)
        if best is not None:
            result.bests.append(best)
        # the one-GPU reference that the split runs beside it are measured against: listed too
        refs = [r for r in group if multi_gpu and _world(r) == 1]
        if refs and len(refs) < len(group):
            ref = _best(pass_, shape, refs, checks, peaks, sparse, multi_gpu, untimed, passed)
            if ref is not None:
                result.bests.append(ref)  # a baseline: listed apart, never ranked
    order = {s: i for i, s in enumerate(dict.fromkeys(shape_label(r, fields) for r in _by_shape(measured)))}
    result.bests.sort(key=lambda b: (_pass_index(b.pass_), order.get(b.shape, 0)))
    result.sentences = [_sentence(pass_, [b for b in result.bests if b.pass_ == pass_]) for pass_ in
                        dict.fromkeys(b.pass_ for b in result.bests)]  # fmt: skip
    result.incorrect = _incorrect(rows, checks, fields)
    # a row that ran and failed (not unavailable, unsupported, skipped or out of memory): no number, a bug;
    # one line per provider and pass, with its first reason
    failed = {
        (r.get("provider"), r.get("pass")): r.get("reason")
        for r in reversed(rows)
        if r.get("status") == "error"
    }
    result.errored = [f"{p} {PASS_NAMES.get(str(pass_), pass_)}: {str(why or 'no reason recorded')[:200]}"
                      for (p, pass_), why in reversed(failed.items())]  # fmt: skip
    return result


def _pass_index(pass_: str) -> int:
    return PASS_ORDER.index(pass_) if pass_ in PASS_ORDER else len(PASS_ORDER)


def _by_shape(rows: list[Mapping]) -> list[Mapping]:
    return sorted(rows, key=lambda r: tuple(json.dumps(r.get(f)) if not isinstance(r.get(f), (int, float))
                                            else f"{r.get(f):020}" for f in SHAPE_FIELDS))  # fmt: skip


def _best(
    pass_, shape, group, checks, peaks, sparse=False, multi_gpu=False, untimed=None, passed=None
) -> Best | None:
    contenders = [r for r in group if not is_baseline(r, sparse, multi_gpu)]
    verdicts = [(r, _verdict(r, checks, untimed)) for r in contenders or group]
    correct = [r for r, v in verdicts if v is True]
    checked = bool(correct)
    pool = correct or [r for r, v in verdicts if v is None]  # nothing checked ran: rank the unchecked
    exact = sorted((r for r in pool if not is_quantised(r)), key=lambda r: r["ms_median"])
    quantised = sorted((r for r in pool if is_quantised(r)), key=lambda r: r["ms_median"])
    ranked = exact or quantised
    if not ranked:
        return None
    top = ranked[0]
    share, peak = peak_of(top, peaks)
    best = Best(pass_=pass_, shape=shape, provider=str(top.get("provider")), ms=top["ms_median"],
                tflops=_number(top.get("tflops")), peak_share=share, peak=peak, checked=checked,
                candidates=len(ranked), baseline=not contenders, gpus=_world(top),
                workload=shape_label(top, list(SHAPE_FIELDS)), band=_band(top),
                clock_mhz=_number(top.get("sm_clock_mhz")))  # fmt: skip
    if not checked:  # where its kernel passed at a shorter length, the page says so (check_scope)
        best.checked_at = checked_at(top, passed or {})
    if len(ranked) > 1:
        second = ranked[1]
        best.runner_up = str(second.get("provider"))
        best.runner_up_tflops = _number(second.get("tflops"))
        best.runner_up_slower = second["ms_median"] / top["ms_median"]
    faster = [r for r, v in verdicts if v is None and checked and r["ms_median"] < top["ms_median"]]
    if faster:  # ranked only among the checked: the faster unchecked row is named, not dropped silently
        fast = min(faster, key=lambda r: r["ms_median"])
        best.unchecked_faster = f"{fast.get('provider')} ({fast['ms_median']:.4g} ms)"
    if exact and quantised and quantised[0]["ms_median"] < top["ms_median"]:
        fast = quantised[0]
        tflops = _number(fast.get("tflops"))
        best.quantised = f"{fast.get('provider')}" + (f" ({tflops:.4g} TFLOP/s)" if tflops else "")
    return best


def _band(row: Mapping) -> float | None:
    low, high, median = (_number(row.get(k)) for k in ("ms_p20", "ms_p80", "ms_median"))
    return (high - low) / median if low is not None and high is not None and median else None


def _world(row: Mapping) -> int | None:
    world = (row.get("extra") or {}).get("world_size")
    return world if isinstance(world, int) and not isinstance(world, bool) and world > 0 else None


def _sentence(pass_: str, all_bests: list[Best]) -> str:
    """'forward: fastest sdpa_cudnn at 6 of 6 shapes; 521–566 TFLOP/s (76–83% of the measured peak)...'

    Shapes where one provider alone ran (a single-GPU reference) are not a contest: left out here.
    """
    bests = (
        [b for b in all_bests if b.candidates > 1 and not b.baseline]
        or [b for b in all_bests if not b.baseline]
        or all_bests
    )
    wins = Counter(b.provider for b in bests)
    leaders = ", ".join(
        f"{name} at {n} of {len(bests)} shape{'s' if len(bests) > 1 else ''}"
        for name, n in wins.most_common(3)
    )
    if len(wins) > 3:
        leaders += f", {len(wins) - 3} other provider{'s' if len(wins) > 4 else ''} elsewhere"
    text = f"{PASS_NAMES.get(pass_, pass_)}: fastest {leaders}"
    tflops = [b.tflops for b in bests if b.tflops is not None]
    if tflops:
        text += f"; {value_range(tflops, tflops_text)} TFLOP/s"
        shares = [b.peak_share for b in bests if b.peak_share is not None]
        kinds = {b.peak for b in bests if b.peak_share is not None}
        if shares and len(kinds) == 1:
            text += f" ({value_range(shares, _percent)} of {peak_words(kinds)})"
        elif shares:  # one range over two denominators reads as one: each its own
            text += " (" + "; ".join(
                f"{value_range([b.peak_share for b in bests if b.peak == k and b.peak_share is not None], _percent)} "
                f"of {peak_words([k])}" for k in sorted(kinds)) + ")"  # fmt: skip
    gaps = [b.runner_up_slower for b in bests if b.runner_up_slower]
    if gaps:  # past twice the time a percentage misleads ("642% slower"): the times as a ratio
        text += (f"; the runner-up takes {value_range(gaps, lambda g: f'{g:.2f}×')} the time" if max(gaps) >= 2
                 else f"; the runner-up is {value_range([g - 1 for g in gaps], _percent)} slower")  # fmt: skip
    alone = [b for b in all_bests if b.candidates == 1 and not b.baseline and b not in bests]
    if alone:  # left out of the contest above, not out of the sentence
        text += f"; {len(alone)} more shape{'s' if len(alone) > 1 else ''} where one provider ran alone"
    named = bests + alone  # every winner the sentence counts
    if not all(b.checked or b.checked_at for b in named):
        text += "; some not correctness-checked"
    elif not any(b.checked for b in named):
        text += "; all checked only at a shorter length"
    elif not all(b.checked for b in named):
        text += "; some checked only at a shorter length"
    return text + "."


def _percent(value: float) -> str:
    return f"{value:.1%}" if abs(value) < 0.1 else f"{value:.0%}"


def value_range(values: list[float], fmt) -> str:
    """'7.3%–7.7%': the least and the most of `values` as `fmt` writes them, once where both read the same."""
    low, high = fmt(min(values)), fmt(max(values))
    return low if low == high else f"{low}–{high}"


def tflops_text(value: float) -> str:
    """One decimal from 10 up; three significant digits below (a CPU smoke run's tiny numbers)."""
    return f"{value:.1f}" if value >= 10 else f"{value:.3g}"


def _incorrect(rows: list[Mapping], checks: Mapping[tuple[str, str], str], fields: list[str]) -> list[str]:
    """'provider pass: why (at S 4352, S 4416)', one line per provider, pass and reason."""
    wrong: dict[tuple[str, str, str], list[str]] = defaultdict(list)
    for row in rows:
        over = above_peak(row) if row.get("status") == "ok" else None
        if row.get("status") == "incorrect" or row.get("ok") is False or over:
            reason = over or str(row.get("reason") or "outside its tolerance")
            wrong[(str(row.get("provider")), str(row.get("pass")), reason)].append(shape_label(row, fields))
    lines = [
        f"{provider} {PASS_NAMES.get(pass_, pass_)}: {reason} (at {', '.join(dict.fromkeys(shapes))})"
        for (provider, pass_, reason), shapes in wrong.items()
    ]
    lines += [f"{provider} ({mask}): correctness check {status}" for (provider, mask), status in checks.items()
              if status.lower() in CHECK_WRONG]  # fmt: skip
    return lines


# ---- targets and checks ----


def verdict_of(value: Any) -> str:
    text = str(value).strip().lower()
    return ("met" if text in MET else "missed" if text in MISSED
            else "not applicable" if text in NOT_APPLICABLE else "not checked")  # fmt: skip


def targets_from(document: Mapping, source: str) -> list[Target]:
    """Targets of a targets file ({"targets": [...]}) or the one verdict of a check file ({"verdict"})."""
    if isinstance(document.get("targets"), list):
        found = []
        for item in document["targets"]:
            if not isinstance(item, Mapping) or "verdict" not in item:
                continue
            subject = " · ".join(
                str(item[k]) for k in ("strategy", "provider", "seq_len", "mask") if item.get(k) is not None
            )
            detail = str(item.get("why") or "")
            found.append(Target(str(item.get("target", "target")), subject, verdict_of(item["verdict"]),
                                detail, source))  # fmt: skip
        return found
    if "verdict" in document:
        detail = str(document.get("reason") or "")
        if not detail and _number(document.get("relative_difference")) is not None:
            detail = f"difference {document['relative_difference']:.2%}"
            if _number(document.get("limit")) is not None:  # trust.json of newer code says its limit
                detail += f" (limit {document['limit']:.0%})"
        return [Target(source, str(document.get("workload") or ""), verdict_of(document["verdict"]), detail,
                       source, said=str(document["verdict"]))]  # fmt: skip
    return []
