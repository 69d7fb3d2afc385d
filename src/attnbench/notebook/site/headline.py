"""headline.json: what a report wants at the top of its page, written by one of its cells as data.

The engine knows nothing of what a notebook measures; a report cell that has a verdict writes it into
its artifacts as `headline.json` and the site shows it first (every cell's file, in cell order,
merged), and the comparison page sets the `entries` of several machines side by side. Schema,
version 1 (every field optional except `entries[].key`, `entries[].winner`, `targets[].name` and
`targets[].verdict`):

    {"schema": "attnbench.headline", "version": 1,
     "sentences": ["forward: fastest sdpa_cudnn at 6 of 6 shapes; ..."],   # the page's lead lines
     "index_lines": ["forward: sdpa_cudnn (6/6 shapes), up to 566.2 TFLOP/s"],  # the index's lines
     "badges": [{"text": "no correctness failure", "tone": "good|bad|quiet", "title": "hover text"}],
     "not_gpu": false,                      # true: "not a GPU measurement" banner
     "failures": ["flash bwd: outside its tolerance (at S 4352)"],   # never ranked, shown in red
     "targets": [{"name": ">= 400 TFLOP/s", "subject": "ring · 262144", "verdict": "met|missed|not checked",
                  "detail": "412 TFLOP/s", "said": "the file's own word"}],
     "entries_title": "fastest correct provider per shape and pass",
     "entries_note": "how the entries were chosen",
     "entries": [{"key": "fwd|S 4352", "group": "forward", "label": "S 4352", "winner": "sdpa_cudnn",
                  "value": 566.2, "unit": "TFLOP/s", "higher_is_better": true, "detail": "76% of peak",
                  "runner_up": "fa3", "runner_up_value": 540.1, "margin": "+5%",
                  "notes": ["not checked"]}]}

Version 2 adds what answers the notebook's question, shown on the page's first lines, the key figure
directly under them, and baselines kept apart from the ranking (a version-1 file reads unchanged):

     "question": "How much faster is dilated attention than dense causal attention?",
     "answer": ["forward: dilated_flex is 3.10× the speed of dense sdpa_cudnn at S 131072 ..."],
     "numbers": [{"key": "fwd|speedup", "name": "forward speed-up at S 131072", "value": 3.1,
                  "unit": "×", "per": "per GPU|total|wall time", "higher_is_better": true, "detail": "..."}],
     "caveats": ["tied within the 3.2% run-to-run noise: ..."],   # what qualifies the answer: under it, smaller
     "key_figure": "figures/tflops.svg",    # "<cell>/<artifact path>", shown under the answer
     entries[].baseline: true               # a reference (single GPU, dense, eager): listed apart, never the winner
     entries[].per: "per GPU"               # what `value` is of: "per GPU", "total", "wall time"
     entries[].ms: 1.23                     # the winner's wall time per call (ms): compared across machines
     entries[].gpus: 2                      # GPUs the winner ran on (1 when absent)
     numbers[].spread: 0.054                # its measured run-to-run spread (relative): history flags moves over it
     entries[].spread: 0.054                # the same for a ranked entry's value
     targets[].verdict: "not applicable"   # e.g. a GPU target on a CPU smoke run: never scored red

`numbers[].key` names the same number on every run and machine: the comparison and history pages
pair numbers by key, and compare a number only with one of the same unit and `per`.

An entry's `key` names the same measurement on every machine: the comparison page pairs entries by
key and shows value / base value (base / value where lower is better). A file of a newer version,
or one whose fields do not fit, is reported by file and field and left off the page.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from attnbench.notebook.document.validate import FieldError, from_json

HEADLINE_FILE = "headline.json"
SCHEMA = "attnbench.headline"
VERSION = 2


class Tone(StrEnum):
    good = "good"
    bad = "bad"
    quiet = "quiet"


class Verdict(StrEnum):
    met = "met"
    missed = "missed"
    not_checked = "not checked"
    not_applicable = "not applicable"


@dataclass
class Badge:
    text: str
    tone: Tone = Tone.quiet
    title: str = ""


@dataclass
class Entry:
    """One headline number: who wins `label` of `group`, with what value."""

    key: str  # the same measurement on every machine
    winner: str
    value: float | None = None
    unit: str = ""
    higher_is_better: bool = True
    group: str = ""
    label: str = ""
    detail: str = ""
    runner_up: str = ""
    runner_up_value: float | None = None
    margin: str = ""
    notes: list[str] = field(default_factory=list)
    baseline: bool = False  # a reference row: shown apart, never the winner (version 2)
    per: str = ""  # what `value` is of: "per GPU", "total", "wall time" (version 2)
    ms: float | None = None  # the winner's wall time per call, for a like-with-like comparison
    gpus: int | None = None  # GPUs the winner ran on (None: one, or not recorded)
    spread: float | None = (
        None  # measured run-to-run spread of `value` (relative); history flags moves over it
    )


@dataclass
class Number:
    """One number that answers the question (version 2), e.g. a speed-up or a scaling efficiency."""

    key: str  # the same number on every run and machine
    name: str
    value: float | None = None
    unit: str = ""
    per: str = ""  # what the unit is of: "per GPU", "total", "wall time"
    higher_is_better: bool = True
    detail: str = ""
    spread: float | None = (
        None  # measured run-to-run spread (relative, 0.054 = 5.4 %); history flags moves over it
    )


@dataclass
class Answer:
    """The question a notebook asks and what its rows answer (version 2 fields of Headline)."""

    question: str = ""
    answer: list[str] = field(default_factory=list)  # the conclusion, first on the page
    numbers: list[Number] = field(default_factory=list)
    key_figure: str = ""
    # ties, method, noise: under the answer, never instead of it
    caveats: list[str] = field(default_factory=list)


@dataclass
class Target:
    name: str
    verdict: Verdict
    subject: str = ""
    detail: str = ""
    said: str = ""


@dataclass
class Headline:
    schema: str = SCHEMA
    version: int = VERSION
    sentences: list[str] = field(default_factory=list)
    index_lines: list[str] = field(default_factory=list)
    badges: list[Badge] = field(default_factory=list)
    not_gpu: bool = False
    failures: list[str] = field(default_factory=list)
    targets: list[Target] = field(default_factory=list)
    entries_title: str = ""
    entries_note: str = ""
    entries: list[Entry] = field(default_factory=list)
    question: str = ""
    answer: list[str] = field(default_factory=list)
    numbers: list[Number] = field(default_factory=list)
    key_figure: str = ""
    caveats: list[str] = field(default_factory=list)

    def with_answer(self, answer: Answer) -> Headline:
        self.question, self.answer = answer.question, list(answer.answer)
        self.numbers, self.key_figure = list(answer.numbers), answer.key_figure
        self.caveats = list(answer.caveats)
        return self

    @property
    def missed(self) -> list[Target]:
        return [t for t in self.targets if t.verdict == Verdict.missed]

    def merged(self, other: Headline) -> Headline:
        """Two cells' headlines as one page shows them: lists joined in order (a badge both say, once),
        flags or'ed."""
        return Headline(
            sentences=self.sentences + other.sentences,
            index_lines=self.index_lines + other.index_lines,
            badges=self.badges
            + [b for b in other.badges if b.text not in {mine.text for mine in self.badges}],
            not_gpu=self.not_gpu or other.not_gpu,
            failures=self.failures + other.failures,
            targets=self.targets + other.targets,
            entries_title=self.entries_title or other.entries_title,
            entries_note=" ".join(n for n in (self.entries_note, other.entries_note) if n),
            entries=self.entries + other.entries,
            question=self.question or other.question,
            answer=self.answer + other.answer,
            numbers=self.numbers + other.numbers,
            key_figure=self.key_figure or other.key_figure,
            caveats=self.caveats + other.caveats,
        )


class HeadlineError(ValueError):
    def __init__(self, path: Path, problem: str):
        super().__init__(f"{path}: {problem}")
        self.path, self.problem = path, problem


_NESTED = {"badges": Badge, "targets": Target, "entries": Entry, "numbers": Number}


def parse_headline(data: Any, path: Path) -> Headline:
    """A Headline from a decoded headline.json; HeadlineError naming `path` and the field otherwise."""
    if not isinstance(data, dict):
        raise HeadlineError(path, f"is {type(data).__name__}: expected a JSON object")
    if data.get("schema", SCHEMA) != SCHEMA:
        raise HeadlineError(path, f"schema is {data['schema']!r}: expected {SCHEMA!r}")
    version = data.get("version", VERSION)
    if not isinstance(version, int) or isinstance(version, bool) or version > VERSION:
        raise HeadlineError(path, f"version is {version!r}: this engine reads version {VERSION} and older")
    top = dict(data)
    try:
        for name, cls in _NESTED.items():
            items = top.pop(name, [])
            if not isinstance(items, list):
                raise FieldError(f"{name} is {type(items).__name__}: expected a list")
            top[name] = [from_json(cls, item, where=f"{name}[{i}].") for i, item in enumerate(items)]
        nested = {name: top.pop(name) for name in _NESTED}
        headline = from_json(Headline, top)
    except FieldError as e:
        raise HeadlineError(path, str(e)) from None
    for name, values in nested.items():
        setattr(headline, name, values)
    for name, items in (("entries", headline.entries), ("numbers", headline.numbers)):
        for i, item in enumerate(items):
            if item.value is not None and not isinstance(item.value, (int, float)):
                raise HeadlineError(path, f"{name}[{i}].value is {item.value!r}: expected a number or null")
    return headline


def load_headline(path: Path) -> Headline:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise HeadlineError(path, f"cannot be read: {e.strerror}") from None
    except ValueError as e:
        raise HeadlineError(path, f"is not valid JSON ({e})") from None
    return parse_headline(data, path)


def headline_json(headline: Headline) -> str:
    return json.dumps(asdict(headline), indent=1, ensure_ascii=False) + "\n"


def write_headline(headline: Headline, folder: Path) -> Path:
    """Write `folder`/headline.json (a cell passes its working directory) and return its path."""
    path = Path(folder) / HEADLINE_FILE
    path.write_text(headline_json(headline), encoding="utf-8")
    return path
