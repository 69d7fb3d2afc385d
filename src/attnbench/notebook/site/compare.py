"""One notebook on several machines: the machines side by side, and the headline's numbers paired.

A comparison page (site/<notebook>/compare.html) is made for every notebook with two or more machine
labels. It always sets the machines' facts side by side (GPU, count, driver, CUDA, torch, ...). Then it
pairs what the runs' headline.json files (headline.py) say, comparing only like with like:

- key numbers (`numbers`) pair by key, and only where unit and basis (`per`: per GPU, total, wall
  time) agree; a pair that differs is listed as not compared, with both bases named;
- ranking entries (`entries`) pair by key on two bases, each named: the winner's wall time
  (`ms`: base time / time there, so 1.7× is 1.7 times as fast there, whatever the GPU count) and
  the entry's own value where unit and `per` agree (per-GPU throughput beside per-GPU throughput);
  where each winner ran on the same GPU count on both labels the two are one number, shown once.

A quantity that is itself a share or a ratio (unit % or ×) is compared by its difference (percentage
points, or the ratio's own difference), never by a ratio of the two.

Every ratio reads "above 1 is better there" (inverted where lower is better). The first comparable
label (by GPU count, then name) is the base. A CPU smoke label (headline not_gpu, or a cpu profile) is
not a GPU measurement: it is listed with its machine but never compared with a GPU label; a label
without headline.json is named as predating headline data.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from attnbench.notebook.site import artifacts as show
from attnbench.notebook.site.headline import Entry, Headline, Number
from attnbench.notebook.site.statuses import stale_cells
from attnbench.notebook.site.summary import key_number_text, number_text

PAGE = "compare.html"
NOT_GPU = "a CPU smoke run: not a GPU measurement, so never compared with a GPU run"
NO_HEADLINE = "no headline.json: the run predates headline data (re-run its report cell)"
NO_NUMBERS = "its headline holds no numbers to compare"
# Units that are a share or a ratio already: two of them are compared by their difference, not a ratio.
RELATIVE_UNITS = {"%", "×", "x"}
FACTS = ("gpu", "gpu_count", "driver", "cuda", "torch", "python", "cpu", "platform")


def _ratio(there: float | None, base: float | None, higher_is_better: bool) -> float | None:
    """Better there over the base: above 1 is better there, either way round."""
    if there is None or base is None or there <= 0 or base <= 0:
        return None
    return there / base if higher_is_better else base / there


def _ratio_cell(value: float | None, why: str = "") -> dict[str, str]:
    if value is None:
        return {"text": "", "css": "", "title": why}
    css = "up" if value >= 1.03 else "down" if value <= 0.97 else ""
    return {"text": f"{value:.2f}×", "css": css, "title": why}


def _difference_cell(there: float | None, here: float | None, unit: str, higher_is_better: bool,
                     label: str) -> dict[str, str]:  # fmt: skip
    """There minus the base, for a quantity that is itself a share or a ratio: 7.76 % against 9.08 %
    is 1.3 points less, and "1.17×" of it would read as a speed-up that nobody measured."""
    if there is None or here is None:
        return _ratio_cell(None, "not measured on both")
    delta = there - here
    text = (f"{delta:+.2f}" if round(delta, 2) else "0.00").replace("-", "−") + (" pp" if unit == "%" else "")
    better = delta > 0 if higher_is_better else delta < 0
    # coloured as a ratio cell is, from 3 % of the base, and never for a change the text rounds away or a
    # fraction of a point (a base near 0 would colour any change)
    moved = round(delta, 2) != 0 and abs(delta) >= max(0.03 * abs(here), 0.5 if unit == "%" else 0.01)
    css = ("up" if better else "down") if moved and delta else ""
    points = "percentage points" if unit == "%" else f"the {unit} itself"
    way = "higher" if higher_is_better else "lower"
    why = (
        f"difference in {points}: {label} minus the base ({way} is better); a ratio of a {unit} means nothing"
    )
    return {"text": text, "css": css, "title": why}


def _versus(there: float | None, here: float | None, unit: str, higher_is_better: bool,
            label: str, why: str) -> tuple[dict[str, str], float | None]:  # fmt: skip
    """The cell comparing two values of one unit, and the ratio if the cell is one (None for a
    difference: it has no place in a median of ratios)."""
    if unit in RELATIVE_UNITS:
        return _difference_cell(there, here, unit, higher_is_better, label), None
    ratio = _ratio(there, here, higher_is_better)
    return _ratio_cell(ratio, why), ratio


def _basis(unit: str, per: str) -> str:
    return ", ".join(x for x in (unit, per) if x) or "no unit"


def _gpus(view: Mapping[str, Any]) -> int:
    count = (view.get("machine") or {}).get("gpu_count")
    return count if isinstance(count, int) and count > 0 else 1


def _sorted_labels(views: Mapping[str, Mapping[str, Any]]) -> list[str]:
    return sorted(views, key=lambda label: (_gpus(views[label]), label))


def comparison(name: str, title: str, views: Mapping[str, Mapping[str, Any]]) -> dict[str, Any] | None:
    """The comparison page's view; None with fewer than two labels."""
    if len(views) < 2:
        return None
    heads: dict[str, Headline] = {}
    left_out: list[dict[str, str]] = []
    for label in _sorted_labels(views):
        view, headline = views[label], views[label]["data"].headline
        if view.get("not_gpu") or (headline is not None and headline.not_gpu):
            left_out.append({"label": label, "why": NOT_GPU})
        elif headline is None:
            left_out.append({"label": label, "why": _no_headline(view)})
        elif not (headline.numbers or headline.entries):
            left_out.append({"label": label, "why": NO_NUMBERS})
        else:
            heads[label] = headline
    labels = list(heads)
    base, others = (labels[0], labels[1:]) if labels else ("", [])
    numbers = _numbers(heads, base, others) if len(labels) > 1 else []
    entries, columns, medians = _entries(heads, base, others, views) if len(labels) > 1 else ([], [], {})
    return {
        "name": name,
        "title": title,
        "labels": labels,
        "all_labels": _sorted_labels(views),
        "base": base,
        "others": others,
        "left_out": left_out,
        "machines": [_machine(label, views[label]) for label in _sorted_labels(views)],
        "older_code": _older_code(labels, views) if len(labels) > 1 else [],
        "facts": _facts(views),
        "numbers": numbers,
        "table": entries,
        "columns": columns,
        "sentences": _sentences(base, columns, medians, views, numbers),
    }


def _numbers(heads: Mapping[str, Headline], base: str, others: list[str]) -> list[dict[str, Any]]:
    """One line per key number present on two labels or more: its value on each, ratios where the
    unit and basis agree with the base's, else why not."""
    by_label: dict[str, dict[str, Number]] = {
        label: {n.key: n for n in h.numbers} for label, h in heads.items()
    }
    keys = list(dict.fromkeys(k for label in heads for k in by_label[label]))
    lines = []
    for key in keys:
        found = {label: by_label[label].get(key) for label in heads}
        if sum(n is not None for n in found.values()) < 2:
            continue
        first = next(n for n in found.values() if n is not None)
        here = found[base]
        ratios = []
        for label in others:
            there = found[label]
            if there is None or here is None:
                ratios.append(_ratio_cell(None, "not measured on both"))
            elif (there.unit, there.per) != (here.unit, here.per):
                why = f"not compared: {_basis(there.unit, there.per)} against {_basis(here.unit, here.per)}"
                ratios.append({"text": "not like with like", "css": "muted", "title": why})
            else:
                why = f"{_basis(here.unit, here.per)}: above 1 is better on {label}"
                ratios.append(
                    _versus(there.value, here.value, here.unit, here.higher_is_better, label, why)[0]
                )
        cells = [{"text": "—" if n is None else f"{key_number_text(n.value)} {n.unit}".strip(),
                  "per": "" if n is None else n.per, "title": "" if n is None else n.detail}
                 for n in found.values()]  # fmt: skip
        lines.append(
            {"name": first.name, "basis": _basis(first.unit, first.per), "cells": cells, "ratios": ratios}
        )
    return lines


def _entries(heads, base: str, others: list[str], views) -> tuple[list[dict], list[dict], dict]:
    """Ranking entries paired by key: the winner and value on each label, and two comparisons per other
    label, each on its own basis: wall time (the winners' `ms`) and the entry's value (same unit and per
    only). Then the columns (one per other label where the two agree by construction) and the medians."""
    by_label = {label: {e.key: e for e in h.entries} for label, h in heads.items()}
    keys = list(dict.fromkeys(k for label in heads for k in by_label[label]))
    table = []
    for key in keys:
        found = {label: by_label[label].get(key) for label in heads}
        if sum(e is not None for e in found.values()) < 2:
            continue
        first = next(e for e in found.values() if e is not None)
        here = found[base]
        baseline = any(e is not None and e.baseline for e in found.values())  # a reference won on some label
        line = {"group": first.group, "label": first.label or key, "baseline": baseline,
                "cells": [_cell(found[label], _gpus(views[label])) for label in heads], "ratios": []}  # fmt: skip
        for label in others:
            there = found[label]
            wall = _ratio(there.ms, here.ms, False) if there and here else None
            value, value_cell = None, _ratio_cell(None)
            basis = _basis(here.unit, here.per) if here else ""
            if there and here and (there.unit, there.per) == (here.unit, here.per):
                why = f"{basis}: above 1 is better there"
                value_cell, value = _versus(
                    there.value, here.value, here.unit, here.higher_is_better, label, why
                )
            gpus = [(e.gpus or _gpus(views[x])) if e else None for x, e in ((base, here), (label, there))]
            line["ratios"].append({"wall": _ratio_cell(wall, "wall time: base time / time there"),
                                   "value": value_cell, "wall_x": wall, "value_x": value, "basis": basis,
                                   "same_gpus": gpus[0] == gpus[1]})  # fmt: skip
        table.append(line)
    table.sort(key=lambda line: line["baseline"])  # references last
    _drop_common_parts(table)
    columns = _columns(table, others)
    return table, columns, _medians(table, columns)


def _columns(table: list[dict], others: list[str]) -> list[dict]:
    """One ratio column per other label where every winner ran on the same GPU count on both labels and
    the value is a throughput of the same work: then value there / base value is base time / time there,
    the same number twice. Two columns, each named by its basis, where the GPU counts differ."""
    columns = []
    for i, label in enumerate(others):
        # lines with no ratio (an entry this label lacks) decide nothing
        ratios = [
            r for line in table if (r := line["ratios"][i])["wall_x"] is not None or r["value_x"] is not None
        ]
        one = bool(ratios) and all(r["same_gpus"] and r["wall"]["text"] == r["value"]["text"] for r in ratios)
        bases = {r["basis"] for r in ratios if r["value_x"] is not None} or {"own unit"}
        value = bases.pop() if len(bases) == 1 else "own unit"
        columns.append({"label": label, "one": one, "value": value})
    return columns


def _medians(table: list[dict], columns: list[dict]) -> dict:
    """The ratios of each other label by basis and group ("" basis: the one column of both)."""
    medians = defaultdict(list)
    for i, column in enumerate(columns):
        for line in table:
            r, group = line["ratios"][i], line["group"] or "all"
            if r["wall_x"] is not None:
                medians[(column["label"], "" if column["one"] else "wall time", group)].append(r["wall_x"])
            if r["value_x"] is not None and not column["one"]:
                medians[(column["label"], r["basis"], group)].append(r["value_x"])
    return medians


def _drop_common_parts(table: list[dict]) -> None:
    """Labels without the " · " parts every line shares (the same batch, heads, dtype on every line)."""
    if len(table) < 2:
        return
    split = [line["label"].split(" · ") for line in table]
    common = set(split[0]).intersection(*split[1:])
    for line, parts in zip(table, split):
        kept = [p for p in parts if p not in common]
        line["label"] = " · ".join(kept) or line["label"]


def _cell(entry: Entry | None, gpus: int) -> dict[str, str]:
    if entry is None:
        return {"winner": "—", "text": "", "wall": "", "title": "not measured here"}
    per = f" {entry.per}" if entry.per and entry.per != "wall time" else ""
    text = f"{number_text(entry.value)} {entry.unit}{per}".strip()
    on = entry.gpus or gpus
    wall = f"{number_text(entry.ms)} ms wall" + (f" on {on} GPUs" if on > 1 else "") if entry.ms else ""
    return {"winner": entry.winner, "text": text, "wall": wall, "title": entry.detail}


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
        "currency": _currency(view),
    }


def _no_headline(view: Mapping[str, Any]) -> str:
    """Why a label has no headline: its run stopped before the cell that writes one (it says how its
    cells ended), else the run predates headline data."""
    unfinished = [f"{n} {status}" for status, n, _ in view.get("counts") or () if status != "ok"]
    if unfinished:
        return f"no headline.json: its run did not reach the cell that writes it ({', '.join(unfinished)})"
    return NO_HEADLINE


def _stale_cells(view: Mapping[str, Any]) -> str:
    """The label's cells the site judged stale, counted ("" when none)."""
    cells = len(stale_cells(view.get("stale") or []))
    return f"{cells} cell{'s' if cells != 1 else ''}" if cells else ""


def _currency(view: Mapping[str, Any]) -> str:
    """Whether the label's results are those the code of now would measure: its stale cells counted;
    a site built without the engine's judgement says so rather than calling them current."""
    if stale := _stale_cells(view):
        return f"{stale} stale"
    return "current" if view.get("judged") else "not judged (built with --no-status)"


def _older_code(labels: list[str], views: Mapping[str, Mapping[str, Any]]) -> list[dict[str, str]]:
    """The compared labels whose results the code of now would not measure the same way (the stale cells
    the site judged) and why they were kept (the front matter's not_rerun): a ratio against such a label
    sets results of older code beside the others, which the reader must see before the ratios."""
    older = []
    for label in labels:
        stale, kept = _stale_cells(views[label]), (views[label].get("not_rerun") or "").strip()
        if stale or kept:
            said = f"{stale} measured by code that has changed since" if stale else ""
            ends = "" if kept.endswith((".", "!", "?")) or not kept else "."
            older.append({"label": label, "stale": said, "kept": kept + ends})
    return older


def _facts(views: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Machine facts as rows (one column per label): the first fact of each that differs is marked."""
    labels = _sorted_labels(views)
    machines = {label: views[label].get("machine") or {} for label in labels}
    keys = [k for k in FACTS if any(k in m for m in machines.values())]
    keys += sorted({k for m in machines.values() for k in m} - set(FACTS) - {"fingerprint"})
    rows = []
    for key in keys:
        values = [
            "—" if machines[label].get(key) in (None, "") else str(machines[label][key]) for label in labels
        ]
        rows.append({"fact": key.replace("_", " "), "cells": values, "differs": len(set(values)) > 1})
    return rows


def _sentences(base, columns, medians, views, numbers) -> list[str]:
    """One line per other label: the median ratio per basis and group, the basis named first (once, in
    the lead, where wall time and the value give one ratio)."""
    sentences = []
    gpus = lambda x: f"{_gpus(views[x])} GPU{'s' if _gpus(views[x]) > 1 else ''}"
    for column in columns:
        label, parts = column["label"], []
        for (there, basis, group), values in medians.items():
            if there != label:
                continue
            low, high = f"{min(values):.2f}", f"{max(values):.2f}"
            spread = f"all {low}×" if low == high else f"{low}–{high}×"
            name = f"{basis} {group}" if basis else group
            parts.append(f"{name}: {statistics.median(values):.2f}× (median of {len(values)}; {spread})")
        if parts:
            one = (f"; each winner ran on the same GPU count on both, so wall time and {column['value']} give "
                   "the same ratio") if column["one"] else ""  # fmt: skip
            sentences.append(f"{label} ({gpus(label)}) against {base} ({gpus(base)}): how many times as fast "
                             f"each ranking entry is on {label} (above 1: faster there{one}): " + "; ".join(parts)
                             + ".")  # fmt: skip
    if numbers:
        sentences.insert(0, f"{len(numbers)} key number{'s' if len(numbers) > 1 else ''} of the answer paired by "
                            "name below, each compared only on its own basis (per GPU, total or wall time).")  # fmt: skip
    return sentences
