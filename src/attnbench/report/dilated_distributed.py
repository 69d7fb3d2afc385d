"""The dilated-attention report's tables across GPUs, from the distributed cell's rows alone (pandas; no
torch): the split version against one GPU (strong and weak scaling) and its correctness check."""

from __future__ import annotations

from collections.abc import Iterable

from attnbench.report.check_words import NOT_CHECKED, OK
from attnbench.report.dilated import GIB, PASS_NAMES, status_text, tokens_per_s
from attnbench.report.workload import SHAPE_FIELDS
from attnbench.rows import Result


def distributed_table(rows: Iterable[Result], checks: dict[tuple[str, int], str] | None = None):
    """Per pass and length: one GPU alone vs the sequence split over the GPUs; strong and weak scaling.
    `checks` (check_verdicts): the split version's correctness verdict per (mask, length); a timed row's
    `checked` column gives its verdict, or says it was not checked at its length and where it was (the
    check runs at a length the fp32 reference fits)."""
    import pandas as pd

    rows, checks = list(rows), checks or {}
    single = {(r.pass_, r.workload.seqlen_q): r for r in rows if r.extra.get("world_size") == 1}
    lines = []
    for r in rows:
        world = r.extra.get("world_size", 1)
        if world == 1:
            continue
        n, pass_ = r.workload.seqlen_q, r.pass_
        one, part = single.get((pass_, n)), single.get((pass_, n // world))
        ok = r.ms_median is not None
        strong = one.ms_median / (world * r.ms_median) if ok and one and one.ms_median else None
        weak = part.ms_median / r.ms_median if ok and part and part.ms_median else None
        lines.append({
            "pass": PASS_NAMES.get(pass_, pass_), "tokens": n, "GPUs": world,
            "ms (1 GPU, all tokens)": one.ms_median if one else None,
            "ms (1 GPU, tokens/GPUs)": part.ms_median if part else None,
            "ms (split)": r.ms_median,
            "Mtokens/s (split)": tokens_per_s(r) / 1e6 if ok else None,
            "peak GiB/GPU": r.peak_mem_bytes / GIB if ok and r.peak_mem_bytes else None,
            "speedup": one.ms_median / r.ms_median if ok and one and one.ms_median else None,
            "strong-scaling efficiency": strong, "weak-scaling efficiency": weak,
            "status": "ok" if r.status == "ok" else status_text(r),
            "checked": _checked(r.workload.mask, n, checks) if ok else "",
            "note": _over_one(strong, weak),
        })  # fmt: skip
    return pd.DataFrame(lines)


def _checked(mask: str, tokens: int, checks: dict[tuple[str, int], str]) -> str:
    verdict = checks.get((mask, tokens))
    if verdict is not None:
        return OK if verdict == OK else f"{verdict} (table above)"
    where = ", ".join(f"{n:,}" for m, n in sorted(checks) if m == mask)
    return f"{NOT_CHECKED} at this length (checked at {where} tokens: table above)" if where else NOT_CHECKED


# the check's versions and the world size of the timed rows each vouches for (None: the check's own)
CHECK_VERSIONS = {"distributed": None, "single": 1}
EXTRA_KEPT = ("pattern", "world_size", "backend")  # what the check shares with the rows; not their branches


def check_rows(records: Iterable[dict], rows: Iterable[dict]) -> list[dict]:
    """The distributed check's verdicts as untimed rows (`ms_median` null, `ok` set) for the headline: per
    mask, one for the split version and one for one GPU on the same inputs, each a copy of a timed row of
    that provider and mask at the check's length without its timing. So the headline finds the timed rows
    of the same kernel and workload and says "checked at S 65536 only" where it said "not checked"
    (report.check_scope); a failed check is a correctness failure. A version the check could not run
    (status error, no errors measured) gives no row: nothing checked it."""
    rows, found = list(rows), []
    for rec in records:
        for version, world in CHECK_VERSIONS.items():
            errors = (rec.get("errors") or {}).get(version)
            template = next((r for r in rows if r.get("mask") == rec.get("mask")
                             and (r.get("extra") or {}).get("world_size") == (world or rec.get("world"))
                             and (r.get("extra") or {}).get("backend") == rec.get("backend")), None)  # fmt: skip
            if not errors or template is None:
                continue
            ok = all(e.get("ok") is True for e in errors.values())
            # the check's workload (the timed row's, at the check's length), no timing: an untimed check row
            found.append({"provider": template.get("provider"), "family": template.get("family"),
                          "env": template.get("env"),  # the machine the check ran on: the timed rows' own
                          **{f: template.get(f) for f in SHAPE_FIELDS}, "seqlen_q": rec["seq_len"],
                          "seqlen_k": rec["seq_len"], "pass": "fwd_bwd", "ms_median": None, "ok": ok,
                          "status": OK if ok else "incorrect",
                          "extra": {k: v for k, v in (template.get("extra") or {}).items() if k in EXTRA_KEPT},
                          "reason": f"the distributed cell's check ({version}): output and gradients against fp32"})  # fmt: skip
    return found


def check_verdicts(records: Iterable[dict]) -> dict[tuple[str, int], str]:
    """The split version's correctness records as {(mask, length): status} ("ok", or how it failed)."""
    return {(rec["mask"], rec["seq_len"]): rec.get("status") or "error" for rec in records}


def _over_one(strong: float | None, weak: float | None) -> str:
    """An efficiency above 1 says the split run beat one GPU alone on its share, communication and all:
    a measurement error to look into (the rows' SM clocks), never a result."""
    over = [name for name, e in (("strong", strong), ("weak", weak)) if e is not None and e > 1.0]
    if not over:
        return ""
    return (f"{' and '.join(over)}-scaling efficiency above 1: a measurement error, not a result (one GPU "
            "alone ran slower than the split run's share; compare the rows' SM clocks)")  # fmt: skip


def distributed_correctness_table(records: Iterable[dict]):
    import pandas as pd

    lines = []
    for rec in records:
        line = {"mask": rec["mask"], "tokens": rec["seq_len"], "GPUs": rec["world"], "backend": rec["backend"],
                "status": rec["status"], "reason": rec.get("reason", "")}  # fmt: skip
        for version in ("distributed", "single"):
            for name, c in rec.get("errors", {}).get(version, {}).items():
                line[f"{name} rel_l2 ({version})"] = c["rel_l2"]
        line["lse max abs"] = rec.get("lse_max_abs")
        lines.append(line)
    return pd.DataFrame(lines)
