"""A report's headline.json (the engine's schema, attnbench.notebook.site.headline) from its cells' artifacts.

Reads what the site used to read itself, recognised by content, not by cell name:
- result rows: a *.jsonl whose records all carry provider, status, pass and ms_median (README);
- correctness checks of a separate cell: a *.jsonl of records with strategy/provider, mask and status;
- targets: a *.json with {"targets": [{"target", "verdict", ...}]}; a single check: a *.json with a
  top-level "verdict" (the trust check);
- peaks: a *.json beside the rows with measured_matmul_peak_tflops / datasheet_peak_tflops (sweep.json).

A report cell calls `write_headline_of("bench", "correctness", ...)` with the cells it needs: their
artifacts become headline.json in its working directory, which the site shows first.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from attnbench.notebook.site import headline as page
from attnbench.report.check_words import NOT_CHECKED, checked_only_at
from attnbench.report.headline import (
    PASS_NAMES,
    Headline,
    Target,
    headline,
    targets_from,
    tflops_text,
)
from attnbench.report.peak_share import peak_short, peak_words
from attnbench.report.repeatability import noise_p95, protocol_of, repeatability_of, source_words

RESULT_KEYS = {"provider", "status", "pass", "ms_median"}
MAX_READ_BYTES = 64 * 2**20  # larger artifacts are not read for the headline
CPU_WARNING = "CPU smoke run: not a GPU measurement"
PER_GPU = "per GPU"  # every row's TFLOP/s is per GPU (README); on one GPU that is also the total


@dataclass
class Artifacts:
    rows: list[dict] = field(default_factory=list)
    result_files: list[str] = field(default_factory=list)  # "<cell>/<file>"
    checks: dict[tuple[str, str], str] = field(default_factory=dict)
    targets: list[Target] = field(default_factory=list)
    peaks: dict[str, float | None] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    records: dict[str, list[dict]] = field(default_factory=dict)  # every .jsonl's records, by cell
    documents: dict[str, dict] = field(default_factory=dict)  # every .json object, by cell and by stem


def read_artifacts(folders: dict[str, Path]) -> Artifacts:
    """Rows, checks, targets and peaks of the cells' artifact folders ({cell: folder}), in order."""
    data = Artifacts()
    for cell, folder in folders.items():
        for path in sorted(p for p in Path(folder).rglob("*") if p.is_file()):
            suffix = path.suffix.lower()
            if suffix not in (".jsonl", ".json") or path.stat().st_size > MAX_READ_BYTES:
                continue
            rel = f"{cell}/{path.relative_to(folder).as_posix()}"
            if suffix == ".jsonl":
                _read_records(data, path, rel)
            elif path.name != page.HEADLINE_FILE:
                _read_document(data, path, cell, rel)
    return data


def _read_records(data: Artifacts, path: Path, rel: str) -> None:
    records = []
    for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        if line.strip():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as err:
                data.problems.append(f"{path}:{number}: not JSON ({err.msg}); left out of the headline")
    dicts = [r for r in records if isinstance(r, dict)]
    data.records.setdefault(rel.split("/", 1)[0], []).extend(dicts)
    if dicts and len(dicts) == len(records) and all(RESULT_KEYS <= r.keys() for r in dicts):
        data.rows += dicts
        data.result_files.append(rel)
        return
    for record in dicts:  # a separate correctness cell's verdicts (context parallel)
        name = record.get("strategy") or record.get("provider")
        if name and "mask" in record and "status" in record:
            key = (str(name), str(record["mask"]))
            # several checks of one strategy and mask (kernels, options): the worst one counts
            if data.checks.get(key, "ok") == "ok":
                data.checks[key] = str(record["status"])


def _read_document(data: Artifacts, path: Path, cell: str, rel: str) -> None:
    try:
        document = json.loads(path.read_text(encoding="utf-8", errors="replace"))
    except ValueError:
        return
    if not isinstance(document, dict):
        return
    data.documents.setdefault(cell, document)
    data.documents.setdefault(path.stem, document)
    source = rel if isinstance(document.get("targets"), list) else cell
    data.targets += targets_from(document, source)
    for key, name in (("measured_matmul_peak_tflops", "measured"), ("datasheet_peak_tflops", "datasheet")):
        if isinstance(document.get(key), (int, float)) and name not in data.peaks:
            data.peaks[name] = float(document[key])


def _percent(value: float | None) -> str:
    return "" if value is None else f"{value:.1%}" if value < 0.1 else f"{value:.0%}"


def page_headline(
    h: Headline, result_files: list[str] = (), spread: float | None = None, spread_source: str = ""
) -> page.Headline:
    """The engine's headline of an attention report's headline (report.headline). `spread`: the machine's
    run-to-run spread of one timed row (report.repeatability); a lead below it is not a measured lead."""
    if h.cpu:  # a CPU smoke run cannot meet or miss a GPU target: not applicable, never red
        for t in h.targets:
            if t.verdict != "not applicable":
                t.said, t.verdict = t.said or t.verdict, "not applicable"
    entries = []
    for b in h.bests:
        # a reference has a key of its own: compare and history pair it only with a reference, never with a
        # ranking's winner at the same workload (a split run's one-GPU reference against a one-GPU page's)
        key = f"{b.pass_}|{b.workload or b.shape}" + ("|baseline" if b.baseline else "")
        notes = [] if b.checked else [checked_only_at(b.checked_at) if b.checked_at else NOT_CHECKED]
        if b.quantised:
            notes.append(f"faster quantised (ranked apart): {b.quantised}")
        if b.unchecked_faster:
            notes.append(f"faster but not checked: {b.unchecked_faster}")
        if _within(b, spread):
            notes.append("lead within spread")
        if b.band is not None and b.band > UNSTEADY_BAND:
            notes.append(f"unsteady: p20–p80 {_percent(b.band)} of its median")
        entries.append(page.Entry(
            key=key, group=PASS_NAMES.get(b.pass_, b.pass_), label=b.shape,
            winner=b.provider, value=b.tflops if b.tflops is not None else b.ms,
            unit="TFLOP/s" if b.tflops is not None else "ms", higher_is_better=b.tflops is not None,
            detail=_detail(b),
            runner_up=b.runner_up, runner_up_value=b.runner_up_tflops,
            margin=f"+{_percent(b.runner_up_slower - 1)}" if b.runner_up_slower else "", notes=notes,
            baseline=b.baseline, per=PER_GPU if b.tflops is not None else "wall time", ms=b.ms, gpus=b.gpus,
        ))  # fmt: skip
    entries.sort(key=lambda e: e.baseline)  # references last, apart (stable: the order within each)
    note = ""
    if result_files:
        note = (f"From {', '.join(result_files)}. Correct: within its dtype's tolerance of the fp32 reference"
                + (', or vouched for by the correctness cell; "not checked": nothing checked it'
                   if any(not b.checked for b in h.bests) else "")
                + (f'; "{checked_only_at("S N")}": its kernel passed its check on this workload at that shorter '
                   "length, not at this one (what the report derives from the length, such as the dilated "
                   "pattern's branches, may differ there)" if any(b.checked_at for b in h.bests) else "")
                + ". Quantised kernels are ranked apart; margin: how much longer the runner-up takes."
        + (" Baselines (single-GPU references, dense rows of a sparse report, eager/reference runs) are"
           " listed apart below the ranking and never win." if any(b.baseline for b in h.bests) else ""))  # fmt: skip
    note = (note + _definitions(h, spread, spread_source)).strip()
    return page.Headline(
        sentences=h.sentences,
        index_lines=index_lines(h, spread),
        badges=verdict_badges(h),
        not_gpu=h.cpu,
        failures=h.incorrect,
        targets=[
            page.Target(t.name, page.Verdict(t.verdict), t.subject, t.detail, t.said) for t in h.targets
        ],
        entries_title=_entries_title(h) if entries else "",
        entries_note=note,
        entries=entries,
    )


def verdict_badges(h: Headline) -> list[page.Badge]:
    """Badges that summarise the verdicts: a missed target or a wrong result is red, never green."""
    badges = []
    targets = [t for t in h.targets if t.source.endswith(".json")]  # a targets file's lines
    checks = [t for t in h.targets if not t.source.endswith(".json")]  # single verdicts (trust check)
    if targets:
        missed = sum(t.verdict == "missed" for t in targets)
        unchecked = sum(t.verdict == "not checked" for t in targets)
        moot = sum(t.verdict == "not applicable" for t in targets)
        met = len(targets) - missed - unchecked - moot
        text = f"targets: {met} of {len(targets)} met"
        if moot == len(targets):
            text = f"targets: not applicable ({CPU_WARNING})" if h.cpu else "targets: not applicable"
        text += f", {missed} missed" if missed else ""
        text += f", {unchecked} not checked" if unchecked else ""
        text += f", {moot} not applicable" if moot and moot < len(targets) else ""
        tone = page.Tone.bad if missed else page.Tone.quiet if unchecked or moot else page.Tone.good
        title = "on a CPU smoke run the GPU targets cannot be met" if h.cpu and missed else ""
        badges.append(page.Badge(text, tone, title))
    for check in checks:
        tone = {"met": page.Tone.good, "missed": page.Tone.bad}.get(check.verdict, page.Tone.quiet)
        word = {"met": "holds", "missed": "FAILS", "not applicable": "not applicable"}.get(
            check.verdict, check.said or "not checked"
        )
        badges.append(page.Badge(f"{check.name} check {word}", tone, check.detail))
    if h.incorrect:
        n = len(h.incorrect)
        badges.append(page.Badge(f"{n} correctness failure{'s' if n > 1 else ''}", page.Tone.bad))
    elif h.bests and not any(b.checked for b in h.winners):  # nothing failed because nothing was checked
        # of the winners, not the page: a check at another length does not cover them (the entries say where)
        scoped = all(b.checked_at for b in h.winners)
        badges.append(page.Badge("winners checked only at a shorter length" if scoped else
                                 "winners not correctness-checked", page.Tone.quiet,
                                 "no correctness check covers the ranked rows at their lengths"))  # fmt: skip
    elif h.bests:  # said with how many winners nothing checked: "no failure" is not "all checked"
        unchecked = sum(not b.checked for b in h.bests)
        badges.append(page.Badge(f"no correctness failure{_unchecked_words(h)}",
                                 page.Tone.quiet if unchecked else page.Tone.good))  # fmt: skip
    if (
        h.errored
    ):  # not a correctness failure, but a number missing: said beside the verdict, each in the title
        n = len(h.errored)
        badges.append(page.Badge(f"{n} provider/pass{'es' if n > 1 else ''} errored", page.Tone.quiet,
                                 "; ".join(h.errored)))  # fmt: skip
    if h.cpu and h.bests:
        badges.append(page.Badge(CPU_WARNING, page.Tone.quiet, "timed with perf_counter"))
    return badges


def _unchecked_words(h: Headline) -> str:
    """ " (22 of 34 winners not checked at their length, 20 of them at a shorter one)": how many winners
    nothing checked at their own length, and how many of those passed at a shorter one (check_scope)."""
    ranked = h.winners
    unchecked = [b for b in ranked if not b.checked]
    if not unchecked:
        return ""
    scoped = sum(bool(b.checked_at) for b in unchecked)
    of = f"{len(unchecked)} of {len(ranked)} winners"
    if scoped == len(unchecked):
        return f" ({of} checked only at a shorter length)"
    if scoped:
        return f" ({of} not checked at their length, {scoped} of them at a shorter one)"
    return f" ({of} not checked)"


# A winner whose own calls spread this much (p20-p80 over the median) did not time steadily: its rank
# rests on a median of calls that disagree (the protocol's rows sit near 1 %; a gather path's at 90 %)
UNSTEADY_BAND = 0.10


def _detail(b) -> str:
    """A ranked entry's share of its peak and the SM clock its calls ran at: kernels compared at one shape
    run at different clocks under the power limit (1575-1980 MHz on an H200), which a reader must see."""
    share = f"{_percent(b.peak_share)} {peak_short(b.peak)}" if b.peak_share is not None else ""
    clock = f"{b.clock_mhz:.0f} MHz" if b.clock_mhz else ""
    return ", ".join(x for x in (share, clock) if x)


def _definitions(h: Headline, spread: float | None, source: str = "") -> str:
    """The entries' note: what the short words in their cells mean, said once."""
    text = ""
    if any(b.peak == "measured at clock" and b.peak_share is not None for b in h.bests):
        text += (' "Of peak at its clock": of the matmul peak of the row\'s own math (bf16, tf32, fp32) measured on'
                 " this machine, scaled to the SM clock the row ran at.")  # fmt: skip
    if any(b.clock_mhz for b in h.bests):
        text += " MHz: the median SM clock NVML reported over the winner's timed calls."
    if any(_within(b, spread) for b in h.bests):
        text += (f' "Lead within spread": the runner-up is less than {_percent(spread)} slower, the 95th percentile'
                 " of how much one row moves from run to run on this machine, so the two are not told apart"
                 + (f" ({source})." if source else "."))  # fmt: skip
    return text


def _within(b, spread: float | None) -> bool:
    """Does the winner lead its runner-up by less than the run-to-run spread of one row? That spread is the
    95th percentile of |a - b| / mean for one row timed in two runs: the gap two equally fast rows show,
    each with its own noise, which is what two kernels timed in one run are (a ratio compared across runs,
    as history does, moves by twice it: four timings, not two)."""
    return bool(spread and b.runner_up_slower and b.runner_up_slower - 1 < spread)


def index_lines(h: Headline, spread: float | None = None) -> list[str]:
    """Per pass: the provider that wins most shapes and its best TFLOP/s (share of the peak); with the
    machine's run-to-run `spread`, how many of its wins lead by more. Baselines (single-GPU references,
    dense rows of a sparse report) never lead it while anything else ran."""
    lines = []
    ranked = h.winners
    for pass_ in dict.fromkeys(b.pass_ for b in ranked):
        bests = [b for b in ranked if b.pass_ == pass_]
        contested = [b for b in bests if b.candidates > 1] or bests
        contest = any(b.candidates > 1 for b in contested)  # else one provider ran at each shape
        wins = Counter(b.provider for b in contested)
        leader, n = wins.most_common(1)[0]
        text = f"{PASS_NAMES.get(pass_, pass_)}: {leader}"
        counts = [k for _, k in wins.most_common(2)]
        if len(counts) > 1 and counts[0] == counts[1]:  # a tied lead: no provider is the answer
            names = ", ".join(p for p, _ in wins.most_common(3)) + (", …" if len(wins) > 3 else "")
            text = f"{PASS_NAMES.get(pass_, pass_)}: no one leads ({names} split {len(contested)} shapes)"
            mine = contested
        else:
            mine = [b for b in contested if b.provider == leader]
            if not contest:  # nothing ran beside it
                text += f" (the only provider, {len(contested)} shape{'s' if len(contested) > 1 else ''})"
            elif len(contested) > 1:
                text += f" ({n}/{len(contested)} shapes"
                led = [b for b in mine if b.runner_up_slower]
                if spread and led:
                    clear = sum(not _within(b, spread) for b in led)
                    text += f", {clear or 'none'} by more than the {_percent(spread)} run-to-run spread"
                text += ")"
        top = max(mine, key=lambda b: b.tflops or 0)
        if top.tflops is not None:
            per = " per GPU" if any((b.gpus or 1) > 1 for b in contested) else ""
            shared = mine is contested  # no leader: the pass's best, with who ran it
            text += f", {'best' if shared else 'its best'} {tflops_text(top.tflops)} TFLOP/s{per}"
            said = [top.provider] if shared else []
            if top.peak_share is not None:
                said.append(f"{_percent(top.peak_share)} of {peak_words([top.peak])}")
            if said:
                text += f" ({', '.join(said)})"
            fastest = max(contested, key=lambda b: b.tflops or 0)
            if contest and not shared and fastest.provider != leader and (fastest.tflops or 0) > top.tflops:
                # the leader wins most shapes, another kernel holds the pass's fastest row: both are the answer
                text += f"; fastest row: {fastest.provider} at {tflops_text(fastest.tflops)} TFLOP/s{per} ({fastest.shape})"
        lines.append(text)
    return lines


def _entries_title(h) -> str:
    """The ranking's title: "correct" only when every winner was checked (an unchecked one is marked)."""
    if all(b.checked for b in h.bests):
        return "fastest correct provider per shape and pass"
    return "fastest provider per shape and pass (unchecked ones marked)"


def _scoped(result: page.Headline, h: Headline, scope: str) -> None:
    """A second headline on a page (one configuration beside the report's own sweep): its index lines and
    entries say which configuration they are of, with the workload every one of its rows shares."""
    shared = [part for part in (h.bests[0].workload or "").split(" · ")
              if part and all(part in (b.workload or "").split(" · ") for b in h.bests)] if h.bests else []  # fmt: skip
    words = f"{scope} ({' · '.join(shared)})" if shared else scope
    result.index_lines = [f"{words}: {line}" for line in result.index_lines]
    for entry in result.entries:
        entry.label = f"{scope} · {entry.label}" if entry.label else scope
        # a group of its own: the compare page's medians never pool another configuration with the sweep's
        entry.group = f"{entry.group} · {scope}" if entry.group else scope


def headline_of(
    folders: dict[str, Path], notebook: str = "", key_figure: str = "", scope: str = ""
) -> tuple[page.Headline, list[str]]:
    """The page headline of the cells' artifact folders, and the problems met reading them; with
    `notebook` (a name in answers.ANSWERS) its question, answer and key numbers, and `key_figure`
    ("<cell>/<artifact>") the figure shown under them; with `scope`, the configuration its rows are of
    (a page's second headline: "cuDNN's published configuration")."""
    data = read_artifacts(folders)
    h = headline(data.rows, checks=data.checks, peaks=data.peaks, targets=data.targets)
    protocol = protocol_of(data.rows)
    view = repeatability_of({str(r.get("env")) for r in data.rows if r.get("env")}, protocol=protocol)
    spread = noise_p95(view) if view else None
    result = page_headline(h, data.result_files, spread, source_words(view, protocol))
    for entry in result.entries:  # a timed value moves run to run by the machine's measured spread
        if spread and entry.unit in ("TFLOP/s", "ms"):
            entry.spread = spread
    if notebook:
        from attnbench.report.answers import answer_for

        result.with_answer(answer_for(notebook, data, key_figure, spread, view))
    elif key_figure:
        result.key_figure = key_figure
    if scope:
        _scoped(result, h, scope)
    return result, data.problems


def write_headline_of(
    *cells: str,
    here: str = "",
    out: Path | None = None,
    notebook: str = "",
    key_figure: str = "",
    scope: str = "",
) -> Path:
    """In a report cell: headline.json (in `out`, default the working directory) of the named upstream
    cells' artifacts (`attnbench.inputs(cell)` finds each; a cell that did not run on this machine is
    left out, with a warning) plus, with `here` (this cell's id), the files this cell wrote so far;
    `scope` names the configuration of a page's second headline (headline_of)."""
    from attnbench import inputs

    out = Path(out or Path.cwd())
    folders: dict[str, Path] = {}
    for cell in cells:
        try:
            folders[cell] = inputs(cell)
        except FileNotFoundError as e:
            print(f"warning: {cell} left out of the headline: {e}")
    if here:
        folders[here] = out
    result, problems = headline_of(
        {c: f for c, f in folders.items() if f.is_dir()}, notebook, key_figure, scope
    )
    for problem in problems:
        print(f"warning: {problem}")
    path = page.write_headline(result, out)
    print(f"{path.name}: {len(result.entries)} entries, {len(result.targets)} targets, "
          f"{len(result.failures)} failures")  # fmt: skip
    return path
