"""report.answers and headline beside the run-to-run spread: repeatability files, ties within noise."""

from __future__ import annotations

from answers_helpers import row

from attnbench.report.answers import answer_for
from attnbench.report.headline import headline
from attnbench.report.headline_data import Artifacts, page_headline


def test_timed_numbers_carry_the_spread_measured_on_their_machine(tmp_path):
    """A repeatability file's p95 spread, for rows of the machine it was measured on: a time takes it, a
    ratio of two times twice it, a length none; a machine without a repeatability run gets none."""
    import json

    from attnbench.notebook.site import headline as page
    from attnbench.report.answers import with_spreads
    from attnbench.report.repeatability import spread_for

    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "measurements").mkdir()
    doc = {"machine_id": "h100-a", "p95_spread": 0.05, "median_spread": 0.01, "pairs": []}
    (tmp_path / "measurements" / "flux_repeatability-x.json").write_text(json.dumps(doc))
    (tmp_path / "outputs" / "nb").mkdir(parents=True)
    assert spread_for({"h100-a"}, tmp_path / "outputs" / "nb") == 0.05
    assert spread_for({"h200-b"}, tmp_path / "outputs" / "nb") is None  # never lent across GPUs
    answer = page.Answer(numbers=[page.Number("t", "time", 1.0, "ms"), page.Number("r", "ratio", 2.0, "×"),
                                  page.Number("L", "longest", 4096, "tokens")])  # fmt: skip
    assert [n.spread for n in with_spreads(answer, 0.05).numbers] == [0.05, 0.1, None]


def test_ranked_entries_carry_the_spread_of_their_machine(tmp_path, monkeypatch):
    import json

    from attnbench.report.headline_data import headline_of

    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "measurements").mkdir()
    doc = {"machine_id": "h100-a", "p95_spread": 0.1, "median_spread": 0.01, "pairs": []}
    (tmp_path / "measurements" / "flux_repeatability-h100.json").write_text(json.dumps(doc))
    cell = tmp_path / "bench"
    cell.mkdir()
    rows = [{"provider": p, "family": p, "status": "ok", "pass": "fwd", "ms_median": ms, "tflops": tf, "ok": True,
             "seqlen_q": 64, "seqlen_k": 64, "batch": 1, "heads_q": 1, "heads_kv": 1, "head_dim": 8,
             "dtype": "bfloat16", "mask": "full", "env": env}
            for p, ms, tf in (("fa", 1.0, 100.0), ("fb", 2.0, 50.0)) for env in ("h100-a",)]  # fmt: skip
    (cell / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    monkeypatch.chdir(tmp_path)
    head, problems = headline_of({"bench": cell})
    assert problems == [] and head.entries and all(e.spread == 0.1 for e in head.entries)
    for r in rows:
        r["env"] = "h200-b"
    (cell / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    head, _ = headline_of({"bench": cell})
    assert all(e.spread is None for e in head.entries)


def test_the_flux_answer_states_the_run_to_run_spread_of_its_own_machine(tmp_path, monkeypatch):
    """The Flux page says how repeatable a row is on the GPU it ran on (issue: repeatability on the page);
    a run on a machine with no repeatability file says nothing of it."""
    import json
    from typing import ClassVar

    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "measurements").mkdir()
    widest = {"provider": "flash_attn3", "pass": "fwd", "spread": 0.114, "sm_clock_mhz_a": 1965.0,
              "sm_clock_mhz_b": 1635.0}  # fmt: skip
    doc = {"machine_id": "h100-a", "median_spread": 0.0048, "p95_spread": 0.0943,
           "pairs": [{"spread": 0.01}] * 35 + [widest]}  # fmt: skip
    (tmp_path / "measurements" / "flux_repeatability-h100.json").write_text(json.dumps(doc))
    monkeypatch.chdir(tmp_path)
    row = {"status": "ok", "ok": True, "pass": "fwd", "seqlen_q": 4608, "provider": "flash_attn3",
           "ms_median": 0.37, "env": "h100-a"}  # fmt: skip

    class Data:
        rows: ClassVar[list[dict]] = [row, {**row, "provider": "sdpa_flash", "ms_median": 0.8}]

    said = " ".join(answer_for("flux_attention", Data).caveats)  # the noise qualifies the answer: under it
    assert "36 rows timed twice, measurements/flux_repeatability-h100.json" in said
    assert "the median spread is 0.5% and the 95th percentile 9.4%" in said
    assert "Widest: flash_attn3 fwd, 11.4% apart, at 1965 MHz in one run and 1635 MHz in the other." in said
    Data.rows = [{**r, "env": "h200-b"} for r in Data.rows]
    other = answer_for("flux_attention", Data)  # another machine's file is never lent
    assert other.answer and not any("is noise on this GPU" in line for line in other.answer + other.caveats)


def test_a_bad_repeatability_file_is_named_and_counts_as_none(tmp_path, capsys):
    import json

    from attnbench.report.repeatability import spread_for

    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "measurements").mkdir()
    (tmp_path / "measurements" / "flux_repeatability-a.json").write_text("{not json")
    (tmp_path / "measurements" / "flux_repeatability-b.json").write_text(
        json.dumps({"machine_id": ["h100-a"]})
    )
    assert spread_for({"h100-a"}, tmp_path) is None
    err = capsys.readouterr().err
    assert "flux_repeatability-a.json" in err and "flux_repeatability-b.json: machine_id ['h100-a']" in err


def test_masks_set_ffas_gap_beside_the_machines_run_to_run_spread(tmp_path, monkeypatch):
    """A gap below one row's run-to-run spread on that machine is, on its own, not told apart from a tie:
    the answer says how many of FFA's gaps are below it (none said where the machine has no spread)."""
    import json

    (tmp_path / "measurements").mkdir()
    doc = {"machine_id": "h100-a", "median_spread": 0.003, "p95_spread": 0.10, "pairs": []}
    (tmp_path / "measurements" / "flux_repeatability-h100.json").write_text(json.dumps(doc))
    monkeypatch.chdir(tmp_path)
    rows = [row("flash_attn3", 4096, 1.0, env="h100-a"), row("magi_ffa", 4096, 1.08, env="h100-a"),
            row("flash_attn3", 4096, 1.0, mask="full", env="h100-a"),
            row("magi_ffa", 4096, 1.2, mask="full", env="h100-a")]  # fmt: skip
    said = answer_for("attention_masks", Artifacts(rows=rows)).answer
    source = "run-to-run spread of one row on this machine, 10%: measurements/flux_repeatability-h100.json)"
    assert said[-1] == f"FFA is 8.0%–20% behind the best (1 of 2 below the 95th-percentile {source}."
    close = answer_for("attention_masks", Artifacts(rows=rows[:2])).answer
    assert close[-1] == f"FFA is 8.0% behind the best (below the 95th-percentile {source}."
    third = [
        row("flash_attn3", 4096, 1.0, mask="x", env="h100-a"),
        row("magi_ffa", 4096, 1.05, mask="x", env="h100-a"),
    ]
    both = answer_for("attention_masks", Artifacts(rows=rows[:2] + third)).answer
    assert both[-1].startswith("FFA is 5.0%–8.0% behind the best (each below the 95th-percentile")
    elsewhere = [{**r, "env": "h200-b"} for r in rows]  # no repeatability run on that machine: nothing said
    assert (
        answer_for("attention_masks", Artifacts(rows=elsewhere)).answer[-1]
        == "FFA is 8.0%–20% behind the best."
    )


def test_a_lead_within_the_run_to_run_spread_is_said_to_be_one():
    """Two kernels 0.5 % apart on a machine whose rows repeat within 6 %: the entry says the lead is within
    the spread, and the index line counts how many wins lead by more (none here, one at the long shape)."""
    rows = [row("a", 4096, 1.000), row("b", 4096, 1.005), row("a", 8192, 1.0), row("b", 8192, 1.2)]
    page = page_headline(headline(rows), spread=0.061)
    notes = {e.label: e.notes for e in page.entries}
    assert [n for n in notes.values() if "lead within spread" in n] == [["lead within spread"]]
    assert "runner-up is less than 6.1% slower" in page.entries_note  # the words defined once
    (line,) = page.index_lines
    assert "a (2/2 shapes, 1 by more than the 6.1% run-to-run spread)" in line
    (line,) = page_headline(headline(rows)).index_lines  # no spread known: no claim either way
    assert "a (2/2 shapes)" in line


def test_the_flux_answer_names_the_rows_tied_with_the_fastest_within_the_noise():
    """A lead smaller than the run-to-run noise is no lead: the answer names the rows that close (up to
    three, then a count), and none without a measured noise."""
    from attnbench.report.answers.flux import tie_words

    best = row("te_flash", 4608, 1.0)
    rows = [best, row("xformers_fa3", 4608, 1.002), row("flash_attn3", 4608, 1.006), row("a", 4608, 1.01),
            row("b", 4608, 1.02), row("sdpa_cudnn", 4608, 1.16)]  # fmt: skip
    assert tie_words(best, rows, 0.032) == (
        "; tied within the 3.2% run-to-run noise: xformers_fa3 (+0.2%), flash_attn3 (+0.6%), a (+1.0%) and 1 more"
    )
    assert tie_words(best, rows, 0.001) == "" and tie_words(best, rows, None) == ""


def test_context_parallel_names_the_strategies_tied_with_the_best_within_the_noise():
    """Strategies on the best's kernel within the run-to-run noise of it are named as tied; one further
    off is not, and without a measured noise nothing is said."""
    two = {"world_size": 2}
    rows = [row("single_gpu_fa3", 4096, 1.0, "fwd_bwd", tflops=600.0),
            row("cp_usp", 8192, 1.0, "fwd_bwd", tflops=580.0, extra=two),
            row("cp_ulysses", 8192, 1.0, "fwd_bwd", tflops=578.0, extra=two),
            row("cp_ring", 8192, 1.6, "fwd_bwd", tflops=370.0, extra=two)]  # fmt: skip
    noise = {"p95": 0.032, "median": 0.002, "rows": 20, "compared": "timed twice", "file": "f.json"}
    said = answer_for("context_parallel", Artifacts(rows=rows), noise=noise)
    assert "cp_usp keeps 97% (580 of single_gpu_fa3's 600 TFLOP/s), the slowest of 3 on that kernel 62% (cp_ring)" in (
        said.answer[1])  # fmt: skip
    assert not any("tied" in line for line in said.answer)  # the tie qualifies the answer: under it
    assert said.caveats == ["causal, S 8192: cp_usp tied within the 3.2% run-to-run noise with cp_ulysses."]
    alone = answer_for("context_parallel", Artifacts(rows=rows), noise={})
    assert not any("tied" in line for line in alone.answer + alone.caveats)
