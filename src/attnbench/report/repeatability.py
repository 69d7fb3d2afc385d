"""The Flux sweep's run-to-run spread on each GPU, read from `measurements/` (scripts/flux_repeatability.py).

A repeatability file holds the same rows timed in two runs on one machine; its 95th-percentile spread is
how far apart two runs of one row fall. A file of 2K runs also compares the fastest of runs 1..K with that
of runs K+1..2K, minutes later: runs drift over minutes more than from one run to the next, and the rows
of one report are timed minutes apart, so the larger of the two is the noise (`noise_p95`). The Flux
answer states it beside its lead (a smaller lead is noise), and every timed headline number and ranked
entry of a run on that machine carries it, so the history page flags only moves beyond it.
"""

from __future__ import annotations

from pathlib import Path

from attnbench.report import measurements
from attnbench.report.peak_share import number as _num

REPEATABILITY = "measurements/*repeatability*.json"  # scripts/flux_repeatability.py: the same rows run twice


MATCHED = ("rounds", "preheat")  # what picks a repeatability file for rows first
ALSO_MATCHED = ("row_warmup",)  # then this; a file differing only here is still chosen, and the page says so


def protocol_of(rows) -> dict:
    """How rows were timed, as a repeatability file states it: the sweep's rounds (bench/rounds.py; 1
    where the rows do not say), whether each row was preheated (bench/thermal.py) and whether each was
    warmed to steady state before its timed calls (bench/warmup.py: the row's `warmup_s`)."""
    rows = [r for r in rows if isinstance(r, dict)]
    extras = [r.get("extra") or {} for r in rows]
    return {"rounds": max((e.get("rounds") or 1 for e in extras), default=1),
            "preheat": any(e.get("preheat_s") is not None for e in extras),
            "row_warmup": any(_num(r.get("warmup_s")) is not None for r in rows)}  # fmt: skip


def _protocol_of_file(doc: dict) -> dict:
    timing = doc.get("timing") if isinstance(doc.get("timing"), dict) else {}
    # row_warmup: scripts/flux_repeatability.py records it; files made before it did predate the warm-up
    return {"rounds": doc.get("rounds") or 1, "preheat": bool(doc.get("preheat") or timing.get("preheat")),
            "row_warmup": bool(doc.get("row_warmup"))}  # fmt: skip


def source_words(view: dict | None, protocol: dict | None = None) -> str:
    """Where a spread comes from, for a page's note: the file and what it compared, and, where the rows
    were timed another way, how (no repeatability run of their own protocol stands behind it then)."""
    if not view:
        return ""
    # every repeatability file is the Flux sweep on one GPU of the machine (scripts/flux_repeatability.py)
    drift = drift_words(view) if (view.get("drift_p95") or 0) > (view["p95"] or 0) else ""  # the noise is it
    return (
        f"{view['file']}: Flux rows on one GPU of this machine, {view['compared']}"
        + caveats(view, protocol)
        + drift
    )


def caveats(view: dict, protocol: dict | None) -> str:
    """What a page says beside the file it takes a spread from: how the rows were timed otherwise, and
    which providers the file's runs did not pair (protocol_difference, coverage_words)."""
    return protocol_difference(view, protocol) + coverage_words(view)


def drift_words(view: dict) -> str:
    """ "; over minutes, the fastest of runs 1-2 against that of runs 3-4 (…): 95th percentile 3.2%", or ""
    where the view has no drift (_with_drift)."""
    if view.get("drift_p95") is None:
        return ""
    return f"; over minutes, {view['drift']}: 95th percentile {view['drift_p95']:.1%}"


def coverage_words(view: dict) -> str:
    """ "; no row of flash_attn3, … was ok in both of its runs (unavailable there: flash_attn3), so its
    spread does not speak for them" where the file's run asked for providers that gave no pair, else ""."""
    if not view.get("missing"):
        return ""
    recorded = view.get("unavailable")
    unavailable = [name for name in view["missing"] if name in (recorded or {})]
    there = (f" (unavailable there: {', '.join(unavailable)})" if unavailable else
             " (the file predates recording why)" if recorded is None else "")  # fmt: skip
    return (f"; no row of {', '.join(view['missing'])} was ok in both of its runs{there}, so its spread does "
            "not speak for them")  # fmt: skip


def protocol_difference(view: dict, protocol: dict | None) -> str:
    """ "; these rows differ in how they were timed (…), and no repeatability run of their protocol has
    been made yet", or "" where the rows were timed as the file's runs were."""
    if protocol is None:
        return ""
    other = [what for key, what in (("preheat", "preheated"), ("row_warmup", "a steady-state warm-up per row"))
             if bool(protocol.get(key)) != bool(view.get(key))]  # fmt: skip
    if protocol.get("rounds", 1) != view.get("rounds", 1):
        other.append(f"{protocol.get('rounds', 1)} round(s) against its {view.get('rounds', 1)}")
    if not other:
        return ""
    return (f"; these rows differ in how they were timed ({', '.join(other)}), and no repeatability run of "
            "their protocol has been made yet")  # fmt: skip


def _views(path: Path, doc: dict) -> list[dict]:
    """What one repeatability file measured, one entry per protocol: its runs against each other (its
    own rounds) and each `fastest_of_K` summary (runs 1..K against K+1..2K, each row its fastest run),
    which is the protocol of K rounds: a round is one pass over the whole grid, as a run is."""
    own = _protocol_of_file(doc)
    rounds = f", each the fastest of {own['rounds']} rounds" if own["rounds"] > 1 else ""
    pairs = [p for p in doc.get("pairs") or [] if isinstance(p, dict)]
    paired = {p.get("provider") for p in pairs}
    asked = doc.get("providers") if isinstance(doc.get("providers"), list) else []
    # None: a file written before the script recorded why a provider could not run there
    unavailable = doc.get("unavailable") if isinstance(doc.get("unavailable"), dict) else None
    views = [{"file": f"measurements/{path.name}", "rows": len(pairs), "run_rounds": own["rounds"],
              "machine_id": doc.get("machine_id"), "unavailable": unavailable,
              "compared": "timed twice" + rounds, "median": _num(doc.get("median_spread")),
              "p95": _num(doc.get("p95_spread")), "widest": _widest_pair(pairs),
              "missing": [str(name) for name in asked if name not in paired], **own}]  # fmt: skip
    for name, summary in (doc.get("summaries") or {}).items():
        k = name.removeprefix("fastest_of_")
        if not (name.startswith("fastest_of_") and k.isdigit() and isinstance(summary, dict)):
            continue
        k = int(k)
        if _num(summary.get("p95_spread")) is not None:
            views.append({**views[0], "rows": summary.get("rows") or views[0]["rows"],
                          "compared": f"the fastest of {k} runs against the fastest of {k} others",
                          "median": _num(summary.get("median_spread")), "p95": _num(summary.get("p95_spread")),
                          "widest": None, "rounds": own["rounds"] * k,
                          "later": f"the fastest of runs 1-{k} against that of runs {k + 1}-{2 * k}"})  # fmt: skip
    return views


def _with_drift(chosen: dict, views: list[dict]) -> dict:
    """The chosen view, with the widest K-run summary beside it (`drift_p95`, `drift`) when the chosen one
    compares single runs: run 1 against run 2 is back to back, runs 1-K against K+1-2K minutes apart, and
    the rows of one report are timed minutes apart too. The summary comes from the chosen file, or, where
    it ran too few runs to have one, from a file of the machine whose runs had the same rounds and preheat
    (named, with how its rows were timed otherwise)."""
    if chosen.get("later"):  # a summary itself
        return chosen
    later = [v for v in views if v.get("later") and v["p95"] is not None]
    own = [v for v in later if v["file"] == chosen["file"]]
    lent = [
        v for v in later if all(v.get(k) == chosen.get(k) for k in ("machine_id", "run_rounds", "preheat"))
    ]
    if not (own or lent):
        return chosen
    widest = max(own or lent, key=lambda v: v["p95"])
    drift = widest["later"]
    if widest["file"] != chosen["file"]:
        otherwise = (
            ""
            if widest["row_warmup"] == chosen["row_warmup"]
            else (", without" if chosen["row_warmup"] else ", with") + " the per-row warm-up"
        )
        drift += f" ({widest['file']}{otherwise})"
    return {**chosen, "drift_p95": widest["p95"], "drift": drift}


def noise_p95(view: dict) -> float:
    """The spread a lead must exceed: the larger of run against run and the drift over a K-run summary."""
    return max(view["p95"], view.get("drift_p95") or 0.0)


def spread_for(env_ids: set[str], start: Path | None = None, protocol: dict | None = None) -> float | None:
    """The run-to-run spread of one timed row on the machine of `env_ids`: the 95th-percentile spread
    (|a-b|/mean of two runs' ms_median) its repeatability run measured; None where that machine has none
    (the history page then flags at its default, and says so). A machine is its host and GPU model
    (bench.env.machine_id): the 2-GPU runs of a host share the spread its one-GPU run measured there;
    another host's or another GPU model's is never lent (power management differs from card to card)."""
    found = repeatability_of(env_ids, start, protocol)
    return noise_p95(found) if found else None


def repeatability_of(
    env_ids: set[str], start: Path | None = None, protocol: dict | None = None
) -> dict | None:
    """The repeatability run (scripts/flux_repeatability.py) made on the machine of `env_ids` (its
    machine_id), from the nearest repeatability files: rows, median and 95th-percentile spread and the
    file's name; None when that machine has none (a smoke run has none). With `protocol` (protocol_of the
    rows) a measurement made the same way comes first: by rounds and preheat (MATCHED), a file's K-run
    summary counting as K rounds (_views), since one round repeats worse than two; then, among those
    alike there, by the per-row warm-up (ALSO_MATCHED); ties keep the order of the file names. A machine
    with no such measurement gets the nearest in that order, and the answer says how it differs."""
    docs = [(path, _load(path)) for path in measurements.nearest(REPEATABILITY, start)]
    views = [view for path, doc in docs
             if doc.get("machine_id") in env_ids and not doc.get("smoke") and _num(doc.get("p95_spread"))
             for view in _views(path, doc)]  # fmt: skip
    if protocol is not None:  # the same protocol first, then the order of the names (stable)
        views.sort(key=lambda view: tuple(any(view[k] != protocol.get(k) for k in keys)
                                          for keys in (MATCHED, ALSO_MATCHED)))  # fmt: skip
    return _with_drift(views[0], views) if views else None


def _widest_pair(pairs: list) -> dict | None:
    """The pair of runs furthest apart, with both runs' SM clocks (None without a spread)."""
    spread = [p for p in pairs if isinstance(p, dict) and _num(p.get("spread"))]
    return max(spread, key=lambda p: p["spread"]) if spread else None


def widest_text(pair: dict | None) -> str:
    """' Widest: flash_attn3 fwd, 11.4% apart, at 1965 MHz in one run and 1635 MHz in the other.' (the clocks where both are known)."""
    if not pair:
        return ""
    text = f" Widest: {pair.get('provider')} {pair.get('pass')}, {pair['spread']:.1%} apart"
    clocks = [_num(pair.get(k)) for k in ("sm_clock_mhz_a", "sm_clock_mhz_b")]
    if all(clocks) and clocks[0] != clocks[1]:
        text += f", at {clocks[0]:.0f} MHz in one run and {clocks[1]:.0f} MHz in the other"
    return text + "."


def _load(path: Path) -> dict:
    """The repeatability file (report.measurements.load); a bad one counts as none and the report goes on
    without its spread."""
    return measurements.load(path, "scripts/flux_repeatability.py")
