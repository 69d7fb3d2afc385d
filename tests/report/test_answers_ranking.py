"""report.headline: ranked entries, badges and index lines; baselines apart; smoke targets moot."""

from __future__ import annotations

import json

from answers_helpers import row, sparse

from attnbench.notebook.site import headline as page
from attnbench.report.headline import headline, targets_from
from attnbench.report.headline_data import headline_of, page_headline


def test_dense_rows_of_a_sparse_report_are_baselines_never_winners():
    h = headline([row("fa3", 1024, 0.5), sparse("dil", 1024, 2.0), sparse("dil2", 1024, 3.0)])
    assert {b.provider: b.baseline for b in h.bests} == {"fa3": True, "dil": False}
    entries = page_headline(h).entries
    assert [e.baseline for e in entries] == [False, True]  # references listed last, apart


def test_one_gpu_rows_of_a_multi_gpu_run_are_baselines_never_winners():
    """The dilated report across GPUs times each implementation on one GPU too (world_size 1): those are
    references beside the split run, never its winner, however fast per GPU."""
    one = {"world_size": 1, "pattern": "dilated"}
    two = {"world_size": 2, "pattern": "dilated"}
    rows = [row("dilated_gather_cudnn", 1 << 20, 106.1, tflops=177.0, extra=one),
            row("dilated_distributed_cudnn", 1 << 20, 55.9, tflops=172.4, extra=two),
            row("dilated_gather_cudnn", 1 << 17, 14.8, tflops=160.7, extra=one)]  # fmt: skip
    bests = [(b.shape, b.provider, b.baseline) for b in headline(rows).bests]
    # the split run wins its shape; the one-GPU row it is measured against there is listed apart beside it
    assert sorted(bests) == [("S 1048576 · dilated", "dilated_distributed_cudnn", False),
                             ("S 1048576 · dilated", "dilated_gather_cudnn", True),
                             ("S 131072 · dilated", "dilated_gather_cudnn", True)]  # fmt: skip
    (solo,) = headline([rows[0], rows[2]]).bests[:1]  # a one-GPU run alone: ranked as usual
    assert not solo.baseline


def test_smoke_run_targets_are_not_applicable_never_red(tmp_path):
    cell = tmp_path / "bench"
    cell.mkdir()
    (cell / "results.jsonl").write_text(json.dumps(row("sdpa_flash", 64, 1.0, timer="perf_counter")) + "\n")
    (cell / "targets.json").write_text(
        json.dumps({"targets": [{"target": ">= 400 TFLOP/s", "verdict": "missed"}]})
    )
    h, problems = headline_of({"bench": cell}, "flux_attention", "plot/tflops.svg")
    assert not problems and h.not_gpu and h.version == page.VERSION
    assert [t.verdict for t in h.targets] == [page.Verdict.not_applicable] and not h.missed
    assert all(b.tone != page.Tone.bad for b in h.badges)
    assert h.answer[-1].startswith("CPU smoke run") and h.key_figure == "plot/tflops.svg"
    # the file round-trips through the engine's schema
    again = page.parse_headline(json.loads(page.headline_json(h)), tmp_path / "headline.json")
    assert again.question == h.question and again.numbers == h.numbers and again.targets == h.targets


def test_unchecked_rows_rank_only_alone_and_are_badged():
    rows = [row("a", 64, 1.0, ok=None), row("b", 64, 2.0, ok=True)]
    (best,) = headline(rows).bests
    assert best.provider == "b" and best.checked
    (alone,) = headline([row("a", 64, 1.0, ok=None)]).bests
    assert not alone.checked and page_headline(headline([row("a", 64, 1.0, ok=None)])).entries[0].notes == [
        "not checked"
    ]
    assert targets_from({"verdict": "holds"}, "trust.json")[0].verdict == "met"
    # the ranking's title says "correct" only when every winner was checked
    assert page_headline(headline(rows)).entries_title == "fastest correct provider per shape and pass"
    assert "unchecked ones marked" in page_headline(headline([row("a", 64, 1.0, ok=None)])).entries_title


def test_index_line_never_leads_with_a_baseline_only_shape():
    two = {"world_size": 2}
    rows = [row("single_gpu_cudnn", 4096, 1.0, "fwd_bwd", tflops=900.0),  # a shape only the reference ran
            row("single_gpu_cudnn", 2048, 1.0, "fwd_bwd", tflops=900.0),
            row("cp_ring", 8192, 1.1, "fwd_bwd", tflops=540.0, extra=two)]  # fmt: skip
    (line,) = page_headline(headline(rows)).index_lines
    assert "cp_ring" in line and "single_gpu" not in line


def test_nothing_checked_is_never_a_green_no_failure_badge():
    rows = [row("dil", 4096, 1.0, ok=None, extra={"pattern": "dilated"})]
    badges = [b.text for b in page_headline(headline(rows)).badges]
    assert "winners not correctness-checked" in badges and "no correctness failure" not in badges
    checked = [b.text for b in page_headline(headline([row("dil", 4096, 1.0)])).badges]
    assert "no correctness failure" in checked


def test_no_failure_badge_counts_the_winners_nothing_checked():
    rows = [row("a", 4096, 1.0), row("a", 8192, 2.0, ok=None), row("b", 16384, 3.0, ok=None)]
    (badge,) = [b for b in page_headline(headline(rows)).badges if "correctness" in b.text]
    # a at 8k passed at 4k; b passed nowhere
    assert (
        badge.text
        == "no correctness failure (2 of 3 winners not checked at their length, 1 of them at a shorter one)"
    )
    assert badge.tone.value != "good"


def test_a_winner_checked_only_at_a_shorter_length_says_where_and_is_not_called_checked():
    rows = [row("a", 4096, 1.0), row("a", 8192, 2.0, ok=None), row("a", 16384, 4.0, ok=None),
            row("c", 16384, 5.0, ok=None)]  # fmt: skip
    h = headline(rows)
    (long,) = [b for b in h.bests if b.shape == "S 16384"]
    assert (long.checked, long.checked_at, long.provider) == (False, "S 4096", "a")  # ranked as unchecked
    page = page_headline(h, ["bench/results.jsonl"])
    notes = {e.label: e.notes for e in page.entries}
    assert notes["S 8192"] == ["checked at S 4096 only"] and notes["S 4096"] == []
    assert '"checked at S N only": its kernel passed its check on this workload' in page.entries_note
    (badge,) = [b for b in page.badges if "correctness" in b.text]
    assert badge.text == "no correctness failure (2 of 3 winners checked only at a shorter length)"
    assert "some checked only at a shorter length" in h.sentences[0]
    untimed = [row("a", 4096, 1.0, ms_median=None, tflops=None)] + rows[
        1:3
    ]  # a correctness cell's check at 4k
    (badge,) = [b for b in page_headline(headline(untimed)).badges if "winners" in b.text]
    assert badge.text == "winners checked only at a shorter length"  # none checked at its own length


def test_a_failed_check_at_any_length_leaves_no_shorter_check_to_cite():
    rows = [row("a", 2048, 0.5, ok=False, status="incorrect"), row("a", 4096, 1.0),
            row("a", 8192, 2.0, ok=None)]  # fmt: skip
    (long,) = [b for b in headline(rows).bests if b.shape == "S 8192"]
    assert long.checked_at == ""
    # another workload (mask) or pass is another check: it does not vouch
    rows = [row("a", 4096, 1.0, mask="full"), row("a", 8192, 2.0, ok=None), row("a", 4096, 1.0, "bwd")]
    (long,) = [b for b in headline(rows).bests if b.shape.startswith("S 8192")]
    assert long.checked_at == ""


def test_a_winner_whose_calls_spread_widely_is_marked_unsteady():
    steady = row("a", 4096, 1.0, ms_p20=0.99, ms_p80=1.01)
    shaky = row("a", 8192, 1.0, ms_p20=0.6, ms_p80=1.5)
    notes = {e.label: e.notes for e in page_headline(headline([steady, shaky])).entries}
    assert notes == {"S 4096": [], "S 8192": ["unsteady: p20–p80 90% of its median"]}


def test_a_faster_unchecked_row_is_named_beside_the_checked_winner():
    rows = [row("fused", 4096, 2.0), row("gather", 4096, 1.0, ok=None)]  # only fused was checked here
    (entry,) = page_headline(headline(rows)).entries
    assert entry.winner == "fused" and entry.notes == ["faster but not checked: gather (1 ms)"]


def test_a_ranked_entry_shows_the_clock_its_winner_ran_at():
    shown = page_headline(headline([row("a", 4096, 1.0, sm_clock_mhz=1830.0), row("b", 4096, 1.2)]))
    assert shown.entries[0].detail.endswith("1830 MHz") and "MHz: the median SM clock" in shown.entries_note


def test_index_line_says_no_one_leads_a_split_pass_and_gives_the_pass_best_per_gpu():
    two = {"world_size": 2}
    rows = [row(p, n, ms, tflops=t, extra=two) for p, n, ms, t in (
        ("a", 4096, 1.0, 600.0), ("b", 4096, 1.01, 590.0), ("b", 8192, 1.0, 650.0), ("c", 8192, 1.01, 640.0),
        ("c", 16384, 1.0, 620.0), ("a", 16384, 1.01, 610.0))]  # fmt: skip
    (line,) = page_headline(headline(rows)).index_lines
    assert line.startswith("forward: no one leads (a, b, c split 3 shapes), best 650.0 TFLOP/s per GPU (b")
    rows = [row("a", 4096, 1.0, tflops=600.0), row("b", 4096, 1.1, tflops=540.0),
            row("a", 8192, 1.0, tflops=700.0), row("b", 8192, 1.1, tflops=630.0)]  # fmt: skip
    (line,) = page_headline(headline(rows)).index_lines
    assert line.startswith("forward: a (2/2 shapes), its best 700.0 TFLOP/s") and "per GPU" not in line
    assert "fastest row" not in line  # the leader holds it
    # the leader wins most shapes, another kernel the fastest row: the line gives both
    rows += [row("a", 16384, 1.0, tflops=650.0), row("c", 16384, 0.9, tflops=720.0)]
    (line,) = page_headline(headline(rows)).index_lines
    assert line.startswith("forward: a (2/3 shapes), its best 700.0 TFLOP/s")
    assert line.endswith("; fastest row: c at 720.0 TFLOP/s (S 16384)")


def test_a_split_runs_one_gpu_reference_is_an_entry_of_its_own_key():
    one, two = {"world_size": 1}, {"world_size": 2}
    rows = [
        row("single_gpu_cudnn", 8192, 2.0, tflops=500.0, extra=one),
        row("cp_ring", 8192, 1.1, tflops=450.0, extra=two),
    ]
    entries = page_headline(headline(rows)).entries
    assert [(e.winner, e.baseline) for e in entries] == [("cp_ring", False), ("single_gpu_cudnn", True)]
    assert len({e.key for e in entries}) == 2 and entries[1].key.endswith("|baseline")
    # alone at its length (no split run there) it keeps that key: a one-GPU page's winner at the same
    # workload has the key without it, so compare never pairs the two
    alone = page_headline(headline([*rows, row("single_gpu_cudnn", 4096, 1.0, tflops=500.0, extra=one),
                                    row("cp_ring", 16384, 2.0, tflops=450.0, extra=two)])).entries  # fmt: skip
    assert [e.key.endswith("|baseline") for e in alone if "S 4096" in e.key] == [True]


def test_index_line_names_a_provider_that_ran_alone_as_the_only_one():
    rows = [row("a", 4096, 1.0, tflops=600.0), row("a", 8192, 2.0, tflops=650.0)]
    (line,) = page_headline(headline(rows)).index_lines
    assert line.startswith("forward: a (the only provider, 2 shapes), its best 650.0 TFLOP/s")
    # nothing contested: no "fastest row" of a kernel that raced no one
    (line,) = page_headline(headline(rows + [row("c", 16384, 1.0, tflops=720.0)])).index_lines
    assert "fastest row" not in line


def test_targets_that_cannot_apply_are_counted_apart_never_as_met():
    from attnbench.report.headline import Target

    h = headline([row("a", 4096, 1.0)], targets=[Target("t", "a", "met", "", "x/targets.json"),
                                                 Target("t", "b", "not applicable", "", "x/targets.json")])  # fmt: skip
    (badge,) = [b for b in page_headline(h).badges if b.text.startswith("targets")]
    assert badge.text == "targets: 1 of 2 met, 1 not applicable"


def test_the_sentence_keeps_two_peaks_apart_and_counts_shapes_one_provider_ran_alone():
    rows = [row("a", 4096, 1.0, tflops=500.0, mfu=0.5), row("b", 4096, 1.2, tflops=420.0),
            row("a", 8192, 1.0, tflops=600.0, mfu_at_clock=0.7, extra={"matmul_peak_measured": {"tflops": 900.0}}),
            row("b", 8192, 1.3, tflops=460.0), row("a", 16384, 1.0, tflops=650.0)]  # fmt: skip
    (sentence,) = headline(rows, peaks={"measured": 1000.0}).sentences
    assert "1 more shape where one provider ran alone" in sentence
    assert " / " not in sentence  # never one range over two denominators
