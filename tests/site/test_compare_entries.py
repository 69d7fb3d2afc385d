"""The comparison page pairs like with like: entries by key on wall time and on their own unit and basis,
key numbers only where unit and basis agree; a CPU smoke label is never compared; "better there" is
above 1 either way."""

from types import SimpleNamespace

from attnbench.notebook.site.compare import NO_HEADLINE, NO_NUMBERS, NOT_GPU, comparison
from attnbench.notebook.site.headline import Entry, Headline, Number


def _view(*entries: Entry, numbers=(), gpus: int = 1, not_gpu: bool = False) -> dict:
    headline = Headline(entries=list(entries), numbers=list(numbers), not_gpu=not_gpu)
    return {"data": SimpleNamespace(headline=headline), "machine": {"gpu": "G", "gpu_count": gpus},
            "not_gpu": not_gpu}  # fmt: skip


def test_entries_pair_by_key_and_lower_is_better_inverts_the_ratio():
    views = {
        "a": _view(
            Entry("fwd|S 1", "k1", 100.0, "TFLOP/s", group="forward", label="S 1", per="per GPU", ms=2.0),
            Entry("step", "m", 2.0, "ms", higher_is_better=False, per="wall time", ms=2.0),
        ),
        "b": _view(
            Entry("fwd|S 1", "k2", 150.0, "TFLOP/s", group="forward", label="S 1", per="per GPU", ms=1.0),
            Entry("step", "m", 1.0, "ms", higher_is_better=False, per="wall time", ms=1.0),
        ),
        "cpu": _view(Entry("fwd|S 1", "k1", 0.1, "TFLOP/s"), not_gpu=True),
        "old": {"data": SimpleNamespace(headline=None), "machine": {}},  # predates headline.json
        "plain": _view(),  # a headline with nothing to pair (a machine without a GPU's environment)
        "stopped": {
            "data": SimpleNamespace(headline=None),
            "machine": {},  # stopped before its report cell
            "counts": [("ok", 3, "ok"), ("interrupted", 1, "interrupted"), ("not run", 9, "not-run")],
        },
    }
    page = comparison("nb", "Title", views)
    assert page["labels"] == ["a", "b"] and page["all_labels"] == ["a", "b", "cpu", "old", "plain", "stopped"]
    assert page["left_out"] == [{"label": "cpu", "why": NOT_GPU}, {"label": "old", "why": NO_HEADLINE},
                                {"label": "plain", "why": NO_NUMBERS},
                                {"label": "stopped", "why": "no headline.json: its run did not reach the cell that "
                                                            "writes it (1 interrupted, 9 not run)"}]  # fmt: skip
    got = [(line["label"], [c["winner"] for c in line["cells"]], line["ratios"][0]["wall"]["text"],
            line["ratios"][0]["value"]["text"]) for line in page["table"]]  # fmt: skip
    assert got == [("S 1", ["k1", "k2"], "2.00×", "1.50×"), ("step", ["m", "m"], "2.00×", "2.00×")]


def test_two_gpus_are_compared_on_wall_time_and_per_gpu_apart():
    """The issue's case: a 2-GPU kernel has lower per-GPU TFLOP/s but is faster in wall time."""
    one = _view(Entry("fwd|S 1M", "single", 187.0, "TFLOP/s", group="forward", per="per GPU", ms=103.0))
    two = _view(Entry("fwd|S 1M", "dist", 172.0, "TFLOP/s", group="forward", per="per GPU", ms=56.0, gpus=2),
                gpus=2)  # fmt: skip
    page = comparison("nb", "T", {"x2": two, "x1": one})  # the one-GPU label is the base
    assert page["base"] == "x1"
    (line,) = page["table"]
    assert line["ratios"][0]["wall"]["text"] == "1.84×" and line["ratios"][0]["wall"]["css"] == "up"
    assert line["ratios"][0]["value"]["text"] == "0.92×"
    assert line["cells"][1]["wall"] == "56.0 ms wall on 2 GPUs"
    sentence = page["sentences"][0]
    assert sentence.startswith("x2 (2 GPUs) against x1 (1 GPU)")
    assert "wall time forward: 1.84×" in sentence and "TFLOP/s, per GPU forward: 0.92×" in sentence


def test_key_numbers_compare_only_the_same_unit_and_basis():
    a = _view(numbers=[Number("eff", "efficiency", 80.0, "%", "per GPU"), Number("t", "time", 2.0, "ms",
                       "wall time", higher_is_better=False)])  # fmt: skip
    b = _view(numbers=[Number("eff", "efficiency", 150.0, "%", "total"), Number("t", "time", 1.0, "ms",
                       "wall time", higher_is_better=False)])  # fmt: skip
    page = comparison("nb", "T", {"a": a, "b": b})
    eff, time = page["numbers"]
    assert eff["ratios"][0]["text"] == "not like with like"
    assert eff["ratios"][0]["title"] == "not compared: %, total against %, per GPU"
    assert time["ratios"][0]["text"] == "2.00×" and time["basis"] == "ms, wall time"


def test_two_labels_without_headlines_still_get_a_page_of_their_machines():
    """The environment notebook: no headline, two GPU labels: the machines side by side, differences marked."""
    views = {label: {"data": SimpleNamespace(headline=None), "machine": {"gpu": gpu, "driver": "580"}}
             for label, gpu in (("h100", "NVIDIA H100"), ("h200", "NVIDIA H200"))}  # fmt: skip
    page = comparison("environment", "Environment", views)
    assert page["labels"] == [] and page["table"] == [] and len(page["left_out"]) == 2
    facts = {f["fact"]: (f["cells"], f["differs"]) for f in page["facts"]}
    assert facts["gpu"] == (["NVIDIA H100", "NVIDIA H200"], True) and facts["driver"] == (
        ["580", "580"],
        False,
    )
    assert comparison("environment", "Environment", {"h100": views["h100"]}) is None


def test_a_reference_pairs_only_with_a_reference_and_goes_last():
    """A split run's one-GPU reference is an entry of its own key (report.headline_data.page_headline adds
    "|baseline"): two 2-GPU labels pair their references, listed last; the one-GPU page's winner at the
    same workload pairs with neither, so no ratio and no median sets a reference beside a winner."""
    one = _view(Entry("fwd|S 1", "fused", 180.0, "TFLOP/s", group="forward", per="per GPU", ms=50.0),
                Entry("fwd|S 2", "fused", 181.0, "TFLOP/s", group="forward", per="per GPU", ms=100.0))  # fmt: skip

    def split(ms: float) -> dict:
        return _view(Entry("fwd|S 1|baseline", "gather_ref", 150.0, "TFLOP/s", group="forward", per="per GPU",
                           ms=60.0, baseline=True),
                     Entry("fwd|S 2", "split", 170.0, "TFLOP/s", group="forward", per="per GPU", ms=ms, gpus=2),
                     gpus=2)  # fmt: skip

    page = comparison("nb", "T", {"x1": one, "x2a": split(55.0), "x2b": split(50.0)})
    assert [(line["label"], line["baseline"]) for line in page["table"]] == [
        ("fwd|S 2", False),
        ("fwd|S 1|baseline", True),
    ]
    reference = page["table"][1]["ratios"]  # against the base (x1), which has no such reference
    assert all((r["wall_x"], r["value_x"]) == (None, None) for r in reference)
    assert "wall time forward: 1.82× (median of 1;" in page["sentences"][0]  # x2a: the split line alone


def test_shares_and_ratios_are_compared_by_their_difference_not_a_ratio():
    """9.08 % against 7.76 % is 1.32 points less (better, lower being better), never "1.17×"; a lead of
    1.18× against 1.17× is a difference of 0.01 in the lead."""
    a = _view(numbers=[Number("behind", "behind the best", 9.08, "%", "wall time", higher_is_better=False),
                       Number("lead", "lead over SDPA", 1.18, "×", "wall time")])  # fmt: skip
    b = _view(numbers=[Number("behind", "behind the best", 7.76, "%", "wall time", higher_is_better=False),
                       Number("lead", "lead over SDPA", 1.17, "×", "wall time")])  # fmt: skip
    behind, lead = comparison("nb", "T", {"a": a, "b": b})["numbers"]
    assert behind["ratios"][0]["text"] == "−1.32 pp" and behind["ratios"][0]["css"] == "up"
    assert "percentage points" in behind["ratios"][0]["title"]
    assert lead["ratios"][0]["text"] == "−0.01" and lead["ratios"][0]["css"] == ""
    assert "×" not in lead["ratios"][0]["text"]


def test_a_line_without_a_ratio_does_not_split_the_one_ratio_column():
    """Three one-GPU labels, one of which lacks a shape: that line has no ratio for it, so it cannot make
    its column two (wall time and per GPU) when every line that has a ratio agrees."""

    def entries(*ms: float) -> list[Entry]:
        return [Entry(f"fwd|S {i}", "k", 200.0 / t, "TFLOP/s", group="forward", label=f"S {i}", per="per GPU",
                      ms=t) for i, t in enumerate(ms, 1)]  # fmt: skip

    page = comparison("nb", "T", {"a": _view(*entries(2.0, 4.0)), "b": _view(*entries(1.0, 2.0)),
                                  "c": _view(*entries(1.0))})  # fmt: skip
    assert page["columns"] == [
        {"label": label, "one": True, "value": "TFLOP/s, per GPU"} for label in ("b", "c")
    ]
    assert (
        "c (1 GPU) against a (1 GPU)" in page["sentences"][-1]
        and "forward: 2.00× (median of 1;" in page["sentences"][-1]
    )


def test_one_gpu_pairs_get_one_ratio_column_and_one_summary_part_per_group():
    """On one GPU each, per-GPU throughput there / base is base time / time there: one column, one median."""
    one = _view(
        Entry("fwd|S 1", "k", 100.0, "TFLOP/s", group="forward", label="S 1", per="per GPU", ms=2.0),
        Entry("fwd|S 2", "k", 100.0, "TFLOP/s", group="forward", label="S 2", per="per GPU", ms=4.0),
    )
    other = _view(Entry("fwd|S 1", "k", 110.0, "TFLOP/s", group="forward", label="S 1", per="per GPU",
                        ms=2.0 / 1.1),
                  Entry("fwd|S 2", "k", 120.0, "TFLOP/s", group="forward", label="S 2", per="per GPU",
                        ms=4.0 / 1.2))  # fmt: skip
    page = comparison("nb", "T", {"h100": one, "h200": other})
    assert page["columns"] == [{"label": "h200", "one": True, "value": "TFLOP/s, per GPU"}]
    # one column, because each line's two ratios are the same number (the page shows it once)
    assert all(
        line["ratios"][0]["wall"]["text"] == line["ratios"][0]["value"]["text"] for line in page["table"]
    )
    (sentence,) = page["sentences"]
    assert "give the same ratio" in sentence and sentence.count("forward: ") == 1
    assert "wall time forward" not in sentence and "TFLOP/s, per GPU forward" not in sentence


def test_multi_gpu_pairs_keep_the_wall_time_and_per_gpu_columns_apart():
    one = _view(Entry("fwd|S 1M", "single", 187.0, "TFLOP/s", group="forward", per="per GPU", ms=103.0))
    two = _view(Entry("fwd|S 1M", "dist", 172.0, "TFLOP/s", group="forward", per="per GPU", ms=56.0, gpus=2),
                gpus=2)  # fmt: skip
    page = comparison("nb", "T", {"x2": two, "x1": one})
    assert page["columns"] == [{"label": "x2", "one": False, "value": "TFLOP/s, per GPU"}]
    assert "give the same ratio" not in page["sentences"][0]


def test_a_difference_is_coloured_only_when_it_moved_more_than_a_fraction_of_a_point():
    from attnbench.notebook.site.compare import _difference_cell

    small = _difference_cell(0.3, 0.1, "%", False, "x")  # 0.2 pp on a base of 0.1 %: 200 % of it, yet noise
    assert small["text"] == "+0.20 pp" and small["css"] == ""
    assert _difference_cell(10.0, 8.0, "%", False, "x")["css"] == "down"  # 2 pp more behind: worse
    same = _difference_cell(1.0, 1.0, "×", True, "x")
    assert same["text"] == "0.00" and same["css"] == ""
