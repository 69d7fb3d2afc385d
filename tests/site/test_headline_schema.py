"""headline.json, the data a report cell writes for the top of its page: round trip and clear refusals."""

import json

import pytest

from attnbench.notebook.site.headline import (
    Badge,
    Entry,
    Headline,
    HeadlineError,
    Target,
    Tone,
    Verdict,
    load_headline,
    write_headline,
)


def test_a_written_headline_loads_back_the_same(tmp_path):
    headline = Headline(
        sentences=["forward: fastest k at 2 of 2 shapes."],
        badges=[Badge("targets: 1 of 1 met", Tone.good)],
        targets=[Target(">= 1 TFLOP/s", Verdict.met, "k", "1.5 TFLOP/s")],
        entries=[Entry("fwd|S 1", "k", 1.5, "TFLOP/s", notes=["not checked"])],
    )
    assert load_headline(write_headline(headline, tmp_path)) == headline


@pytest.mark.parametrize(
    ("document", "problem"),
    [
        ([], "is list: expected a JSON object"),
        ({"version": 3}, "version is 3: this engine reads version 2 and older"),
        ({"schema": "other"}, "schema is 'other': expected 'attnbench.headline'"),
        ({"entries": {}}, "entries is dict: expected a list"),
        ({"targets": [{"name": "t", "verdict": "ok"}]}, "targets[0].verdict is 'ok': expected one of"),
        ({"entries": [{"key": "k", "winner": "w", "value": "fast"}]}, "entries[0].value is 'fast'"),
    ],
)
def test_a_bad_headline_is_refused_naming_file_and_field(tmp_path, document, problem):
    path = tmp_path / "headline.json"
    path.write_text(json.dumps(document))
    with pytest.raises(HeadlineError) as caught:
        load_headline(path)
    assert str(caught.value).startswith(f"{path}: {problem}")


def test_two_cells_headlines_merge_in_order():
    first = Headline(sentences=["a"], entries=[Entry("x", "k")], not_gpu=True)
    second = Headline(sentences=["b"], entries=[Entry("y", "k")], entries_title="t")
    merged = first.merged(second)
    assert merged.sentences == ["a", "b"] and [e.key for e in merged.entries] == ["x", "y"]
    assert merged.not_gpu and merged.entries_title == "t"


def test_a_badge_both_cells_give_shows_once():
    smoke = Badge("CPU smoke run: not a GPU measurement", Tone.quiet)
    first = Headline(badges=[Badge("no correctness failure", Tone.good), smoke])
    second = Headline(badges=[Badge("not correctness-checked", Tone.quiet), smoke])
    assert [b.text for b in first.merged(second).badges] == [
        "no correctness failure",
        "CPU smoke run: not a GPU measurement",
        "not correctness-checked",
    ]
