"""One notebook on several machines: the same headline entries side by side, with ratios.

A comparison page (site/<notebook>/compare.html) is made when at least two machine labels have a
headline entry (headline.json, see headline.py) with the same key. The first of them (sorted by
name) is the base; every other label gets a ratio column: its value over the base's for the same key
(base over it where lower is better), so above 1 is always better there. A label sharing no key with
the others (a CPU smoke run beside GPU runs) drops out by itself and is named.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from attnbench.notebook.site import artifacts as show
from attnbench.notebook.site.headline import Entry
from attnbench.notebook.site.summary import number_text

PAGE = "compare.html"


def _ratio(entry: Entry, base: Entry) -> float | None:
    """Better there over the base: value / base value, inverted where lower is better."""
    a, b = entry.value, base.value
    if a is None or b is None or a <= 0 or b <= 0 or entry.unit != base.unit:
        return None
    return a / b if entry.higher_is_better else b / a


def _ratio_text(value: float | None) -> str:
    return "" if value is None else f"{value:.2f}×"


def _ratio_css(value: float | None) -> str:
    if value is None:
        return ""
    return "up" if value >= 1.03 else "down" if value <= 0.97 else ""


def comparison(name: str, title: str, views: Mapping[str, Mapping[str, Any]]) -> dict[str, Any] | None:
    """The comparison page's view, or None when fewer than two labels share a headline entry."""
    entries: dict[str, dict[str, Entry]] = {}
    for label, view in views.items():
        headline = view["data"].headline
        entries[label] = {e.key: e for e in headline.entries} if headline is not None else {}
    labels = [label for label in sorted(entries)
              if any(entries[label].keys() & entries[other].keys() for other in entries if other != label)]  # fmt: skip
    if len(labels) < 2:
        return None
    base, others = labels[0], labels[1:]
    keys = list(dict.fromkeys(k for label in labels for k in entries[label]))
    table, ratios = [], defaultdict(list)
    for key in keys:
        by_label = {label: entries[label].get(key) for label in labels}
        if sum(e is not None for e in by_label.values()) < 2:
            continue
        first = next(e for e in by_label.values() if e is not None)
        line = {"group": first.group, "label": first.label or key, "unit": first.unit,
                "cells": [_cell(by_label[label]) for label in labels], "ratios": []}  # fmt: skip
        for label in others:
            there, here = by_label[label], by_label[base]
            value = _ratio(there, here) if there and here else None
            line["ratios"].append({"text": _ratio_text(value), "css": _ratio_css(value)})
            if value is not None:
                ratios[(label, first.group)].append(value)
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
        "sentences": _sentences(base, others, ratios),
    }


def _cell(entry: Entry | None) -> dict[str, str]:
    if entry is None:
        return {"winner": "—", "text": "", "title": "not measured here"}
    text = f"{number_text(entry.value)} {entry.unit}".strip()
    return {"winner": entry.winner, "text": text, "title": entry.detail}


def _machine(label: str, view: Mapping[str, Any]) -> dict[str, str]:
    machine = view.get("machine") or {}
    commits = ", ".join(c["short"] for c in (view.get("provenance") or {}).get("commits", []))
    return {
        "label": label,
        "href": f"{label}.html",
        "gpu": show.gpu_text(machine),
        "software": show.software(machine),
        "finished": view.get("finished") or "",
        "commit": commits or "not recorded",
    }


def _sentences(base: str, others: list[str], ratios: dict[tuple[str, str], list[float]]) -> list[str]:
    sentences = []
    for label in others:
        parts = []
        for (there, group), values in ratios.items():
            if there != label:
                continue
            median = statistics.median(values)
            low, high = f"{min(values):.2f}", f"{max(values):.2f}"
            spread = f"all {low}×" if low == high else f"{low}–{high}×"
            parts.append(f"{group or 'all'} {median:.2f}× (median of {len(values)}; {spread})")
        if parts:
            sentences.append(f"{label} against {base}, the same headline entries: " + "; ".join(parts))
    return sentences
