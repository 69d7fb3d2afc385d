"""The comparison page pairs headline entries by key and says "better there" above 1 either way."""

from types import SimpleNamespace

from attnbench.notebook.site.compare import comparison
from attnbench.notebook.site.headline import Entry, Headline


def _view(*entries: Entry) -> dict:
    return {"data": SimpleNamespace(headline=Headline(entries=list(entries))), "machine": {}}


def test_entries_pair_by_key_and_lower_is_better_inverts_the_ratio():
    views = {
        "a": _view(
            Entry("fwd|S 1", "k1", 100.0, "TFLOP/s", group="forward", label="S 1"),
            Entry("step", "m", 2.0, "ms", higher_is_better=False),
        ),
        "b": _view(
            Entry("fwd|S 1", "k2", 150.0, "TFLOP/s", group="forward", label="S 1"),
            Entry("step", "m", 1.0, "ms", higher_is_better=False),
        ),
        "cpu": _view(Entry("fwd|S 64", "k1", 0.1, "TFLOP/s")),
        "old": {"data": SimpleNamespace(headline=None), "machine": {}},  # predates headline.json
    }
    page = comparison("nb", "Title", views)
    assert page["labels"] == ["a", "b"] and page["left_out"] == ["cpu", "old"]
    assert [(line["label"], [c["winner"] for c in line["cells"]], line["ratios"][0]["text"])
            for line in page["table"]] == [("S 1", ["k1", "k2"], "1.50×"), ("step", ["m", "m"], "2.00×")]  # fmt: skip


def test_no_comparison_without_a_shared_key():
    views = {"a": _view(Entry("x", "k", 1.0)), "b": _view(Entry("y", "k", 1.0))}
    assert comparison("nb", "Title", views) is None
