"""One notebook on several machines: the same provider, shape and pass side by side, with ratios.

A comparison page (site/<notebook>/compare.html) is made when at least two machine labels measured
a (provider, shape, pass) in common. The first of them (sorted by name) is the base; every other
label gets a ratio column: its TFLOP/s over the base's at the same shape (>1: faster there). A
CPU smoke run shares no shape with a GPU run, so it drops out by itself (and is named).
Rows are compared when their status is ok and no check found them wrong.
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from attnbench.notebook import artifacts as show
from attnbench.report.headline import PASS_NAMES, PASS_ORDER, SHAPE_FIELDS, shape_label, tflops_text

PAGE = "compare.html"

Key = tuple[str, str, str]  # (pass, shape json, provider)


def _key(row: Mapping) -> Key:
    shape = json.dumps([row.get(f) for f in SHAPE_FIELDS])
    return (str(row.get("pass")), shape, str(row.get("provider")))


def _comparable(row: Mapping) -> bool:
    ms = row.get("ms_median")
    return (
        row.get("status") == "ok" and row.get("ok") is not False and isinstance(ms, (int, float)) and ms > 0
    )


def _ratio(row: Mapping, base: Mapping) -> float:
    """Throughput there over throughput on the base: TFLOP/s when both have it, else inverse time."""
    a, b = row.get("tflops"), base.get("tflops")
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b > 0:
        return a / b
    return base["ms_median"] / row["ms_median"]


def _ratio_text(value: float | None) -> str:
    return "" if value is None else f"{value:.2f}×"


def comparison(name: str, title: str, views: Mapping[str, Mapping[str, Any]]) -> dict[str, Any] | None:
    """The comparison page's view, or None when fewer than two labels share a measurement."""
    measured: dict[str, dict[Key, Mapping]] = {}
    for label, view in views.items():
        rows = view["data"].rows
        measured[label] = {_key(r): r for r in rows if _comparable(r)}
    labels = [
        label
        for label in sorted(measured)
        if any(measured[label].keys() & measured[other].keys() for other in measured if other != label)
    ]
    if len(labels) < 2:
        return None
    base, others = labels[0], labels[1:]
    keys = sorted(
        {k for label in labels for k in measured[label]},
        key=lambda k: (PASS_ORDER.index(k[0]) if k[0] in PASS_ORDER else 9, json.loads(k[1]), k[2]),
    )
    union = [r for label in labels for r in measured[label].values()]
    fields = [f for f in SHAPE_FIELDS if len({json.dumps(r.get(f)) for r in union}) > 1]
    table, ratios = [], defaultdict(list)
    for key in keys:
        rows = {label: measured[label].get(key) for label in labels}
        if sum(r is not None for r in rows.values()) < 2:
            continue
        any_row = next(r for r in rows.values() if r is not None)
        line = {
            "pass": PASS_NAMES.get(key[0], key[0]),
            "shape": shape_label(any_row, fields),
            "provider": key[2],
            "cells": [_cell(rows[label]) for label in labels],
            "ratios": [],
        }
        for label in others:
            value = _ratio(rows[label], rows[base]) if rows[label] and rows[base] else None
            line["ratios"].append({"text": _ratio_text(value), "css": _ratio_css(value)})
            if value is not None:
                ratios[(label, key[0])].append(value)
        table.append(line)
    return {
        "name": name,
        "title": title,
        "labels": labels,
        "base": base,
        "others": others,
        "left_out": sorted(set(views) - set(labels)),
        "machines": [_machine(label, views[label]) for label in labels],
        "table": table,
        "bests": _bests(labels, base, others, measured, fields),
        "sentences": _sentences(base, others, ratios),
        "only_on": _only_on(labels, measured, views),
    }


def _cell(row: Mapping | None) -> dict[str, str]:
    if row is None:
        return {"text": "—", "title": "not measured here"}
    tflops = row.get("tflops")
    text = tflops_text(tflops) if isinstance(tflops, (int, float)) else f"{row['ms_median']:.4g} ms"
    return {"text": text, "title": f"{row['ms_median']:.4g} ms"}


def _ratio_css(value: float | None) -> str:
    if value is None:
        return ""
    return "up" if value >= 1.03 else "down" if value <= 0.97 else ""


def _machine(label: str, view: Mapping[str, Any]) -> dict[str, str]:
    machine, data = view.get("machine") or {}, view["data"]
    measured, datasheet = data.peaks.get("measured"), data.peaks.get("datasheet")
    commits = ", ".join(c["short"] for c in (view.get("provenance") or {}).get("commits", []))
    return {
        "label": label,
        "href": f"{label}.html",
        "gpu": show.gpu_text(machine),
        "software": show.software(machine),
        "peak": tflops_text(measured) if measured else "—",
        "datasheet": tflops_text(datasheet) if datasheet else "—",
        "finished": view.get("finished") or "",
        "commit": commits or "not recorded",
    }


def _bests(labels, base, others, measured, fields) -> list[dict[str, Any]]:
    """Per (pass, shape): each label's fastest comparable exact provider, and the ratio of the bests.

    Quantised rows (int8/fp8, judged with a looser tolerance) are never the fastest here, as in the
    headline: they are compared row by row in the full table."""
    groups: dict[tuple[str, str], dict[str, Mapping]] = defaultdict(dict)
    for label in labels:
        for (pass_, shape, _), row in measured[label].items():
            if (row.get("extra") or {}).get("quantized"):
                continue
            best = groups[(pass_, shape)].get(label)
            if best is None or row["ms_median"] < best["ms_median"]:
                groups[(pass_, shape)][label] = row
    lines = []

    def order(item):
        (pass_, shape), _ = item
        return (PASS_ORDER.index(pass_) if pass_ in PASS_ORDER else 9, json.loads(shape))

    for (pass_, shape), by_label in sorted(groups.items(), key=order):
        if len(by_label) < 2:
            continue
        any_row = next(iter(by_label.values()))
        line = {"pass": PASS_NAMES.get(pass_, pass_), "shape": shape_label(any_row, fields), "cells": [],
                "ratios": []}  # fmt: skip
        for label in labels:
            row = by_label.get(label)
            line["cells"].append({"provider": row.get("provider") if row else "—", **_cell(row)})
        for label in others:
            value = (
                _ratio(by_label[label], by_label[base]) if label in by_label and base in by_label else None
            )
            line["ratios"].append({"text": _ratio_text(value), "css": _ratio_css(value)})
        lines.append(line)
    return lines


def _sentences(base: str, others: list[str], ratios: dict[tuple[str, str], list[float]]) -> list[str]:
    sentences = []
    for label in others:
        parts = []
        for pass_ in PASS_ORDER:
            values = ratios.get((label, pass_))
            if not values:
                continue
            median = statistics.median(values)
            low, high = f"{min(values):.2f}", f"{max(values):.2f}"
            spread = f"all {low}×" if low == high else f"{low}–{high}×"
            parts.append(f"{PASS_NAMES[pass_]} {median:.2f}× (median of {len(values)}; {spread})")
        if parts:
            sentences.append(
                f"{label} against {base}, TFLOP/s at the same provider and shape: " + "; ".join(parts)
            )
    return sentences


def _only_on(labels, measured, views) -> list[dict[str, str]]:
    """Providers measured on some labels but not others, with why not there (its row's reason)."""
    lines = []
    providers = {(k[0], k[2]) for label in labels for k in measured[label]}
    for pass_, provider in sorted(providers, key=lambda p: (p[1], p[0])):
        on = [label for label in labels if any(k[0] == pass_ and k[2] == provider for k in measured[label])]
        if len(on) == len(labels):
            continue
        missing = []
        for label in labels:
            if label in on:
                continue
            why = next((f"{r.get('status')}: {r.get('reason') or 'no reason given'}" for r in views[label]["data"].rows
                        if r.get("provider") == provider and r.get("pass") == pass_), "no row")  # fmt: skip
            missing.append(f"{label} ({why})")
        lines.append({"provider": provider, "pass": PASS_NAMES.get(pass_, pass_), "on": ", ".join(on),
                      "missing": "; ".join(missing)})  # fmt: skip
    return lines
