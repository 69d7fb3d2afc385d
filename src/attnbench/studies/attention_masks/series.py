"""The masks report's measuring driver: a correctness check at a short length, then every (provider,
mask, pass) series over the sequence lengths, ascending, with stop rules that keep a profile in its time.

Checks: `run_checks` runs every provider x mask x pass (forward and backward: forward + backward
takes the worse of the two) once at the check length against the fp32 reference (bench.sweep.run_one,
one timed repetition that nobody reads). Timed rows (`run_series`) run
without a reference; each `ok` row takes the correctness numbers of its check row (`attach_check`):
a failed check makes it `incorrect`, a check that could not run leaves it unchecked (never ranked).

A labelled variant that stands in for a provider (`stands_in_for`: SDPA with K/V repeated for GQA) runs
only where that provider did not measure the row (it refused native GQA, or failed), else `skipped`.

Stop rules (each becomes a row with the reason, never a silent gap):
  - after an OOM, the longer lengths of that series are not attempted (they need more memory): `oom`
    rows whose reason starts "not attempted" (the write-up's E at every longer length);
  - (the rules below make `skipped` rows)
  - a row whose predicted time exceeds `row_limit_s` stops its series (the next length costs ~4x more);
  - a row whose predicted time exceeds what is left of `budget_s` is skipped (cheaper rows still run);
    while a stage's first tier runs, `later_share` of the budget is held for the tiers after it.
A row's prediction is what bench.timing's protocol spends on it (the setup call, a warm-up of at least
timing.WARMUP_MIN_S on a GPU, the timed calls: min_reps and min_time_ms) at the time per call of the
nearest measured (longest shorter) row of its series scaled by the FLOP ratio (setup and compile
excluded), or, for a series' first row, at the profile's assumed TFLOP/s. Each skipped row carries its
own prediction and says what it was predicted from.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from attnbench.bench import flops, timing
from attnbench.bench.inputs import Workspace
from attnbench.bench.providers.base import describe_exception
from attnbench.bench.sweep import print_progress, run_one
from attnbench.rows import Result, Workload
from attnbench.studies.attention_masks import profiles

CHECK_TIMING = {"min_reps": 1, "min_time_ms": 0.0, "warmup_reps": 0, "max_reps": 1}

Key = tuple[str, str, str]  # (provider, mask, pass)


def availability(providers) -> dict[str, str | None]:
    """provider name -> why it cannot run on this machine (None: it can); never raises."""
    out = {}
    for p in providers:
        try:
            out[p.name] = p.unavailable()
        except Exception as exc:  # noqa: BLE001 - a provider that raises is still a row
            out[p.name] = f"unavailable() raised {describe_exception(exc)}"
    return out


def protocol_seconds(call_s: float, timing_options: dict, gpu: bool = True) -> float:
    """Seconds one row costs at `call_s` per call under bench.timing's protocol: the setup call, the
    warm-up (at least timing.WARMUP_MIN_S on a GPU, and warmup_reps calls), the timed calls (min_reps,
    and at least min_time_ms)."""
    warm_calls = max(timing_options.get("warmup_reps", 0), 1 if gpu else 0)  # a GPU warms up >= 1 call
    warm = max(timing.WARMUP_MIN_S if gpu else 0.0, warm_calls * call_s)
    timed = max(timing_options.get("min_reps", 1) * call_s, timing_options.get("min_time_ms", 0.0) / 1e3)
    return call_s + warm + timed


def model_seconds(provider: str, workload: Workload, pass_: str, timing_options: dict) -> float:
    """A row's time on a GPU at the assumed TFLOP/s of its provider (profiles.ASSUMED_TFLOPS)."""
    rate = profiles.ASSUMED_TFLOPS.get(provider, profiles.FALLBACK_TFLOPS) * 1e12
    forward = flops.attention_flops(workload, "fwd")
    backward = 2.5 * forward / (rate * profiles.BACKWARD_RATE)
    call_s = {"fwd": forward / rate, "bwd": backward, "fwd_bwd": forward / rate + backward}[pass_]
    return protocol_seconds(call_s, timing_options)


def estimate(tiers, plan: dict[str, list[Workload]], timing_options) -> dict[str, float]:
    """{provider: seconds} for every row its unavailable()/unsupported() lets run (no budget applied)."""
    why = availability([p for providers, _ in tiers for p in providers])
    out: dict[str, float] = {}
    for providers, passes in tiers:
        for p in providers:
            if why[p.name]:
                continue
            for works in plan.values():
                for w in works:
                    for pass_ in passes:
                        if not p.unsupported(w, pass_):
                            seconds = model_seconds(p.name, w, pass_, timing_options)
                            out[p.name] = out.get(p.name, 0.0) + seconds
    return out


def attach_check(row: Result, check: Result | None) -> None:
    """Give an `ok` timed row the correctness of its check row (same provider, mask and pass)."""
    if row.status != "ok":
        return
    if row.reason.startswith("not checked"):  # the timed run had no reference: the check row speaks
        row.reason = ""
    if check is None:
        row.reason = "not checked: no check row for this provider, mask and pass"
        return
    length = check.workload.seqlen_q
    row.extra["checked_at_seqlen"] = length
    row.extra["check_doc_lens"] = list(check.workload.doc_lens) if check.workload.doc_lens else None
    if check.status in ("ok", "incorrect") and check.ok is not None:
        row.max_abs, row.mean_abs, row.rel_l2, row.ok = check.max_abs, check.mean_abs, check.rel_l2, check.ok
        for key in ("tolerance", "correctness"):
            if key in check.extra:
                row.extra[key] = check.extra[key]
        if not check.ok:
            row.status, row.reason = "incorrect", f"incorrect at the check length {length}: {check.reason}"
        return
    row.ok = None
    row.reason = f"not checked: at the check length {length} this was {check.status}: {check.reason}"


def run_checks(
    providers, workloads, passes, *, device, env_id: str, budget=None, progress=print_progress
) -> list[Result]:
    """Every provider x workload x pass once against the fp32 reference (rows marked extra['check']).
    A row found with the budget spent is `skipped` (then its timed rows are not checked, never ranked)."""
    why = availability(providers)
    rows = []
    for w in workloads:
        ws = Workspace(w, device, 0, reference=True)
        for p in providers:
            for pass_ in passes:
                left = budget.left() if budget is not None else None
                if left is not None and left <= 0 and not why[p.name]:
                    row = _skip(p, w, pass_, f"not attempted: the profile's {budget.seconds:.0f} s budget "
                                "was spent", env_id)  # fmt: skip
                else:
                    row = run_one(
                        p,
                        w,
                        pass_,
                        ws,
                        unavailable=why[p.name],
                        timing_options=CHECK_TIMING,
                        peak_tflops=None,
                        datasheet_tflops=None,
                        env_id=env_id,
                    )
                row.extra["check"] = True
                rows.append(row)
                if progress:
                    progress(row)
        del ws
    return rows


@dataclass
class Budget:
    """What a profile may spend (seconds; None: unlimited), from the moment it is made.

    later_share: the share of `seconds` held back, while the first tier runs, for the tiers after it,
    shrinking evenly tier by tier (all of it is free in the last): without it the first tier's long
    rows spend the whole budget and the peers of a later tier get no row at all."""

    seconds: float | None = None
    row_limit_s: float | None = None
    later_share: float = 0.0
    started: float = field(default_factory=time.perf_counter)
    held: float = 0.0  # seconds reserved for the tiers after the current one

    def __post_init__(self):
        if not 0.0 <= self.later_share < 1.0:
            raise ValueError(f"Budget.later_share must be in [0, 1); got {self.later_share!r}")

    def enter_tier(self, index: int, count: int) -> None:
        """The tier `index` of `count` starts: hold back its share for those after it."""
        later = (count - 1 - index) / (count - 1) if count > 1 else 0.0
        self.held = (self.seconds or 0.0) * self.later_share * later

    def left(self) -> float | None:
        if self.seconds is None:
            return None
        return self.seconds - self.held - (time.perf_counter() - self.started)

    def spent_note(self) -> str:
        """How a skip reason names the budget (and what is held for later tiers)."""
        held = f", {self.held:.0f} s of it held for the later tiers" if self.held else ""
        return f"the profile's {self.seconds:.0f} s budget{held}"


@dataclass
class _Series:
    stopped: str = ""  # why the rest of the series is not attempted
    stopped_status: str = "skipped"  # the status of those rows: `oom` after an out-of-memory
    last: tuple[float, float] | None = None  # (flops, seconds per timed call) of its last measured row
    last_seqlen: int | None = None  # the length of that row (what a prediction is made from)
    refused: bool = False  # the kernel refused a shorter row at run time: the next costs no time either


def _skip(
    provider, workload: Workload, pass_: str, reason: str, env_id: str, status: str = "skipped"
) -> Result:
    return Result(provider.name, provider.family, status, workload, pass_, reason=reason, env=env_id)


def check_for(check_of: dict[Key, Result], provider: str, mask: str, pass_: str) -> Result | None:
    """The check row of a timed row; forward + backward, when not checked itself, takes the worse of
    the forward (output) and backward (gradients) checks."""
    if (provider, mask, pass_) in check_of or pass_ != "fwd_bwd":
        return check_of.get((provider, mask, pass_))
    parts = [check_of.get((provider, mask, p)) for p in ("fwd", "bwd")]
    if any(c is None for c in parts):
        return None
    for c in parts:  # a failed check first, then one that could not run
        if c.status == "incorrect":
            return c
    for c in parts:
        if c.status != "ok" or c.ok is not True:
            return c
    return parts[1]


def run_series(
    tiers: list[tuple[list, list[str]]],
    plan: dict[str, list[Workload]],
    *,
    device,
    timing_options: dict,
    budget: Budget,
    checks: list[Result],
    env_id: str,
    peak_tflops: float | None = None,
    datasheet_tflops: float | None = None,
    progress: Callable[[Result], None] | None = print_progress,
) -> list[Result]:
    """Timed rows, tier by tier ([(providers, passes)], most wanted first: the budget runs out in the last
    tier); inside a tier lengths ascending, and at each length every mask, provider (in order) and pass."""
    why = availability([p for providers, _ in tiers for p in providers])
    check_of = {(r.provider, r.workload.mask, r.pass_): r for r in checks}
    series: dict[Key, _Series] = {}
    rows: list[Result] = []
    measured: set[tuple[str, Workload, str]] = set()  # (provider, workload, pass) with a timing
    lengths = sorted({w.seqlen_q for works in plan.values() for w in works})
    live = _live_tiers(tiers, why)
    for index, (providers, passes) in enumerate(tiers):
        budget.enter_tier(live.get(index, len(live) - 1), len(live))
        for length in lengths:
            for mask, works in plan.items():
                for w in (w for w in works if w.seqlen_q == length):
                    ws = Workspace(w, device, 0, reference=False)
                    for p in providers:
                        for pass_ in passes:
                            state = series.setdefault((p.name, mask, pass_), _Series())
                            native = getattr(p, "stands_in_for", "")
                            if native and (native, w, pass_) in measured:
                                row = _skip(p, w, pass_, f"not attempted: {native} measured this row with "
                                            "native GQA (this variant runs where it does not)", env_id)  # fmt: skip
                            else:
                                row = _one(p, w, pass_, ws, state, why[p.name], budget, timing_options, env_id,
                                           peak_tflops, datasheet_tflops)  # fmt: skip
                            if row.ms_median is not None:
                                measured.add((p.name, w, pass_))
                            attach_check(row, check_for(check_of, p.name, mask, pass_))
                            rows.append(row)
                            if progress:
                                progress(row)
                    del ws
    return rows


def predict(
    provider: str, w: Workload, pass_: str, state: _Series, timing_options: dict, gpu: bool = True
) -> float:
    """Seconds a row is expected to take: the protocol's cost at the series' last (nearest shorter)
    measured time per call scaled by FLOPs, or the model before the series has a measurement."""
    if state.last:
        call_s = state.last[1] * flops.attention_flops(w, pass_) / state.last[0]
        return protocol_seconds(call_s, timing_options, gpu)
    return model_seconds(provider, w, pass_, timing_options)


def _basis(state: _Series) -> str:
    if state.last and state.last_seqlen:
        return f"from the measured row at seqlen {state.last_seqlen}"
    if state.last:
        return "from the series' last measured row"
    return "from the profile's assumed TFLOP/s"


def simulate(tiers, plan: dict[str, list[Workload]], timing_options: dict, budget: Budget) -> dict:
    """The schedule run_series would follow if every row took its model time (no OOM, no compile):
    {"seconds": spent, "measured": rows, "skipped": {provider: rows}} for the printed estimate."""
    why = availability([p for providers, _ in tiers for p in providers])
    spent, measured, skipped, stopped = 0.0, 0, {}, set()
    lengths = sorted({w.seqlen_q for works in plan.values() for w in works})
    live = _live_tiers(tiers, why)
    for index, (providers, passes) in enumerate(tiers):
        budget.enter_tier(live.get(index, len(live) - 1), len(live))
        for length in lengths:
            for works in plan.values():
                for w in (w for w in works if w.seqlen_q == length):
                    for p in providers:
                        for pass_ in passes:
                            if why[p.name] or p.unsupported(w, pass_) or _native_covers(p, w, pass_, why):
                                continue
                            seconds = model_seconds(p.name, w, pass_, timing_options)
                            key = (p.name, w.mask, pass_)
                            too_long = budget.row_limit_s is not None and seconds > budget.row_limit_s
                            if key in stopped or too_long:
                                stopped.add(key)
                            elif budget.seconds is None or seconds <= budget.seconds - budget.held - spent:
                                spent, measured = spent + seconds, measured + 1
                                continue
                            skipped[p.name] = skipped.get(p.name, 0) + 1
    return {"seconds": spent, "measured": measured, "skipped": skipped}


def _live_tiers(tiers, why: dict) -> dict[int, int]:
    """{tier index: its rank among the tiers with a provider that can run here}: a tier of unavailable
    providers costs nothing, so no budget is held for it (it would be lost to the tiers that run)."""
    live = [i for i, (providers, _) in enumerate(tiers) if any(not why[p.name] for p in providers)]
    return {index: rank for rank, index in enumerate(live)}


def _native_covers(p, w: Workload, pass_: str, why: dict) -> bool:
    """For the plan: a stand-in variant is expected to be skipped where its native provider can run."""
    native = getattr(p, "stands_in_for", "")
    if not native:
        return False
    from attnbench.bench.providers import get

    return native in why and not why[native] and not get(native).unsupported(w, pass_)


def _one(p, w, pass_, ws, state: _Series, unavailable, budget: Budget, timing_options, env_id, peak, sheet):
    """One row of a series, or the `skipped` (or, after an out-of-memory, `oom`) row that says why it
    was not attempted."""
    gpu = ws is None or timing.is_cuda(ws.device)
    if state.stopped and state.stopped_status != "skipped":  # after an OOM: the same reason at every length
        return _skip(p, w, pass_, state.stopped, env_id, state.stopped_status)
    # rows that cost nothing run whatever the budget (a refusal is found before any kernel runs)
    declared = bool(unavailable or p.unsupported(w, pass_))
    cheap = declared or state.refused
    work = flops.attention_flops(w, pass_)
    if state.stopped or not cheap:
        predicted = predict(p.name, w, pass_, state, timing_options, gpu)
        if state.stopped or (budget.row_limit_s is not None and predicted > budget.row_limit_s):
            state.stopped = (
                f"not attempted: predicted {predicted:.0f} s for this row ({_basis(state)}), over the "
                f"profile's per-row limit of {budget.row_limit_s:.0f} s (the series stops at its first such length)"
            )
            return _skip(p, w, pass_, state.stopped, env_id)
        left = budget.left()
        if left is not None and predicted > left:
            return _skip(
                p, w, pass_,
                f"not attempted: predicted {predicted:.0f} s ({_basis(state)}), {max(left, 0):.0f} s left "
                f"of {budget.spent_note()}",
                env_id,
            )  # fmt: skip
    started = time.perf_counter()
    row = run_one(p, w, pass_, ws, unavailable=unavailable, timing_options=timing_options,
                  peak_tflops=peak, datasheet_tflops=sheet, env_id=env_id)  # fmt: skip
    wall = time.perf_counter() - started
    row.extra["row_seconds"] = round(wall, 3)
    if row.status == "oom":
        state.stopped = f"not attempted: out of memory at seqlen {w.seqlen_q} (longer sequences need more)"
        state.stopped_status = "oom"  # the write-up's E at every longer length, as the figures mark it
    elif row.ms_median is not None:
        state.last, state.last_seqlen = (work, row.ms_median / 1e3), w.seqlen_q
    state.refused = row.status == "unsupported" and not declared  # refused by the library itself
    return row
