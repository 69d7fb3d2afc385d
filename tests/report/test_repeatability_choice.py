"""report.repeatability: which repeatability file answers for a run's rows, and what the page says of it.

Each test writes repeatability files (scripts/flux_repeatability.py's shape) into a project folder of its
own and reads them back the way the answers and the headline do."""

from __future__ import annotations

import json

from attnbench.report.answers import answer_for
from attnbench.report.repeatability import noise_p95, protocol_of, repeatability_of, source_words


def write(tmp_path, name: str, **doc) -> None:
    """A repeatability file `measurements/<name>` of machine h200-a (unless `doc` names another)."""
    (tmp_path / "measurements").mkdir(exist_ok=True)
    (tmp_path / "pyproject.toml").write_text("")
    doc = {"machine_id": "h200-a", "median_spread": 0.002, "pairs": [], **doc}
    (tmp_path / "measurements" / name).write_text(json.dumps(doc))


def test_the_spread_comes_from_a_run_timed_as_the_rows_were(tmp_path, monkeypatch):
    """One machine, three repeatability runs: one round (p95 9.2 %), one round preheated (5.5 %), two
    rounds (1.7 %). Rows timed in two rounds get the two-round spread; rows of one round the plain one;
    rows of a protocol no file measured get the first file, named in the answer."""
    import json

    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "measurements").mkdir()
    files = {"flux_repeatability-h200.json": (0.092, {}),
             "flux_repeatability-preheat-h200.json": (0.055, {"preheat": {"seconds": 39.0}}),
             "flux_repeatability-rounds-h200.json": (0.017, {"rounds": 2})}  # fmt: skip
    for name, (p95, extra) in files.items():
        doc = {"machine_id": "h200-a", "median_spread": 0.003, "p95_spread": p95, "pairs": [], **extra}
        (tmp_path / "measurements" / name).write_text(json.dumps(doc))
    monkeypatch.chdir(tmp_path)
    two_rounds = [{"extra": {"rounds": 2, "round_ms": [1.0, 1.1]}}, {"extra": {}}]
    assert protocol_of(two_rounds) == {"rounds": 2, "preheat": False, "row_warmup": False}
    assert repeatability_of({"h200-a"}, protocol=protocol_of(two_rounds))["p95"] == 0.017
    assert repeatability_of({"h200-a"}, protocol=protocol_of([{"extra": {}}]))["p95"] == 0.092
    preheated = [{"extra": {"preheat_s": 1.5}}]
    assert repeatability_of({"h200-a"}, protocol=protocol_of(preheated))["p95"] == 0.055
    unmeasured = protocol_of([{"extra": {"rounds": 3}}])
    assert (
        repeatability_of({"h200-a"}, protocol=unmeasured)["file"]
        == "measurements/flux_repeatability-h200.json"
    )
    # rows warmed to steady state one by one: matched as before, and the page says the file was timed otherwise
    warmed = protocol_of([{"warmup_s": 1.2, "extra": {}}])
    view = repeatability_of({"h200-a"}, protocol=warmed)
    assert view["p95"] == 0.092 and source_words(view, warmed) == (
        "measurements/flux_repeatability-h200.json: Flux rows on one GPU of this machine, timed twice; these rows differ in how they were timed "
        "(a steady-state warm-up per row), and no repeatability run of their protocol has been made yet"
    )
    assert (
        source_words(view, protocol_of([{"extra": {}}]))
        == "measurements/flux_repeatability-h200.json: Flux rows on one GPU of this machine, timed twice"
    )
    # a repeatability run of today's protocol records its row warm-up (scripts/flux_repeatability.py)
    doc = {
        "machine_id": "h200-b",
        "median_spread": 0.002,
        "p95_spread": 0.01,
        "pairs": [],
        "row_warmup": True,
    }
    (tmp_path / "measurements" / "flux_repeatability-warm-h200.json").write_text(json.dumps(doc))
    view = repeatability_of({"h200-b"}, protocol=warmed)
    assert view["row_warmup"] and "differ" not in source_words(view, warmed)


def test_a_fastest_of_k_summary_answers_for_rows_of_k_rounds(tmp_path, monkeypatch):
    """A one-round file of 4 runs holds the fastest of runs 1-2 against the fastest of runs 3-4: that is
    the spread of rows timed in 2 rounds (a round is a pass over the grid, as a run is), so two-round rows
    get it, named as such, and one-round rows still get the file's own runs 1 against 2."""
    import json

    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "measurements").mkdir()
    doc = {"machine_id": "h200-a", "median_spread": 0.003, "p95_spread": 0.092, "pairs": [{"spread": 0.09}] * 36,
           "summaries": {"fastest_of_2": {"rows": 36, "median_spread": 0.002, "p95_spread": 0.061},
                         "mean_of_2": {"rows": 36, "median_spread": 0.003, "p95_spread": 0.050}}}  # fmt: skip
    (tmp_path / "measurements" / "flux_repeatability-h200.json").write_text(json.dumps(doc))
    monkeypatch.chdir(tmp_path)
    two_rounds = repeatability_of({"h200-a"}, protocol=protocol_of([{"extra": {"rounds": 2}}]))
    assert (two_rounds["p95"], two_rounds["median"], two_rounds["rounds"]) == (0.061, 0.002, 2)
    assert two_rounds["compared"] == "the fastest of 2 runs against the fastest of 2 others"
    assert two_rounds["widest"] is None  # the summary keeps no pairs
    one_round = repeatability_of({"h200-a"}, protocol=protocol_of([{"extra": {}}]))
    assert (one_round["p95"], one_round["compared"], one_round["rows"]) == (0.092, "timed twice", 36)


def test_the_noise_a_lead_must_beat_includes_the_drift_between_runs_minutes_apart(tmp_path, monkeypatch):
    """A file timed as the rows were (two rounds, preheated), 4 runs: run 1 against run 2 repeated within
    0.8 %, the fastest of runs 1-2 against that of runs 3-4 within 3.2 %. The rows of one report are timed
    minutes apart too, so the answer states both and calls a lead under 3.2 % noise; spread_for (the
    history page's flags) says 3.2 %."""
    import json
    from typing import ClassVar

    from attnbench.report.repeatability import spread_for

    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "measurements").mkdir()
    doc = {"machine_id": "h200-a", "median_spread": 0.0024, "p95_spread": 0.0079, "rounds": 2,
           "preheat": {"seconds": 17.8}, "pairs": [{"spread": 0.002}] * 36,
           "summaries": {"fastest_of_2": {"rows": 36, "median_spread": 0.0029, "p95_spread": 0.0323},
                         "mean_of_2": {"rows": 36, "median_spread": 0.0027, "p95_spread": 0.0574}}}  # fmt: skip
    (tmp_path / "measurements" / "flux_repeatability-preheat-h200.json").write_text(json.dumps(doc))
    monkeypatch.chdir(tmp_path)
    timed = {"rounds": 2, "round_ms": [0.37, 0.38], "preheat_s": 0.4}
    row = {"status": "ok", "ok": True, "pass": "fwd", "seqlen_q": 4608, "provider": "flash_attn3",
           "ms_median": 0.37, "env": "h200-a", "extra": timed}  # fmt: skip

    class Data:
        rows: ClassVar[list[dict]] = [row, {**row, "provider": "sdpa_flash", "ms_median": 0.8}]

    said = " ".join(answer_for("flux_attention", Data).caveats)
    assert "each the fastest of 2 rounds" in said and "95th percentile 0.8%" in said
    assert "the fastest of runs 1-2 against that of runs 3-4: 95th percentile 3.2%" in said
    assert "A lead smaller than 3.2% is noise on this GPU" in said
    assert spread_for({"h200-a"}, protocol={"rounds": 2, "preheat": True}) == 0.0323


WARMED = {"rounds": 2, "preheat": True, "row_warmup": True}


def test_a_run_of_the_rows_own_warm_up_comes_before_one_without(tmp_path, monkeypatch):
    """Two files timed in two preheated rounds, one with the per-row warm-up: rows warmed one by one get
    that one, and rows without get the other, whatever the names' order."""
    write(tmp_path, "flux_repeatability-a-h200.json", p95_spread=0.008, rounds=2, preheat={"seconds": 9})
    write(tmp_path, "flux_repeatability-b-h200.json", p95_spread=0.025, rounds=2, preheat={"seconds": 6},
          row_warmup=True)  # fmt: skip
    monkeypatch.chdir(tmp_path)
    assert repeatability_of({"h200-a"}, protocol=WARMED)["p95"] == 0.025
    assert repeatability_of({"h200-a"}, protocol={**WARMED, "row_warmup": False})["p95"] == 0.008
    # rounds and preheat still pick first: a one-round file with the warm-up loses to them
    write(tmp_path, "flux_repeatability-0-h200.json", p95_spread=0.09, row_warmup=True)
    assert repeatability_of({"h200-a"}, protocol=WARMED)["p95"] == 0.025


def test_providers_a_run_asked_for_but_never_paired_are_named(tmp_path, monkeypatch):
    """A repeatability run where flash_attn3 was not installed: its spread comes from the other rows, and
    the page names what it does not speak for (the Flux answer and the headline's source both)."""
    pairs = [{"provider": "sdpa_cudnn", "pass": "fwd", "spread": 0.02}, {"provider": "flex", "spread": 0.001}]
    write(tmp_path, "flux_repeatability-h200.json", p95_spread=0.02, rounds=2, preheat={"seconds": 6},
          row_warmup=True, pairs=pairs, providers=["flash_attn3", "sdpa_cudnn", "flex", "cudnn_frontend"],
          unavailable={"flash_attn3": "not installed"})  # fmt: skip
    monkeypatch.chdir(tmp_path)
    view = repeatability_of({"h200-a"}, protocol=WARMED)
    assert view["missing"] == ["flash_attn3", "cudnn_frontend"] and view["rows"] == 2
    said = source_words(view, WARMED)
    assert said.endswith("no row of flash_attn3, cudnn_frontend was ok in both of its runs (unavailable there: "
                         "flash_attn3), so its spread does not speak for them")  # fmt: skip
    row = {"status": "ok", "ok": True, "pass": "fwd", "seqlen_q": 4608, "provider": "sdpa_cudnn",
           "ms_median": 0.4, "env": "h200-a", "warmup_s": 1.0, "extra": {"rounds": 2, "preheat_s": 0.4}}  # fmt: skip

    class Data:
        rows = (row, {**row, "provider": "sdpa_flash", "ms_median": 0.8})

    answer = " ".join(answer_for("flux_attention", Data).caveats)
    assert (
        "no row of flash_attn3, cudnn_frontend was ok" in answer
        and "A lead smaller than 2.0% is noise" in answer
    )
    # a file from before the script recorded why says so, rather than nothing
    write(tmp_path, "flux_repeatability-h200.json", p95_spread=0.02, rounds=2, preheat={"seconds": 6},
          row_warmup=True, pairs=pairs, providers=["flash_attn3", "sdpa_cudnn", "flex"])  # fmt: skip
    older = source_words(repeatability_of({"h200-a"}, protocol=WARMED), WARMED)
    assert older.endswith("no row of flash_attn3 was ok in both of its runs (the file predates recording why), "
                          "so its spread does not speak for them")  # fmt: skip


def test_a_two_run_file_borrows_the_drift_of_a_file_run_the_same_way(tmp_path, monkeypatch):
    """The chosen file ran twice (back to back: no drift over minutes); a file of the same machine, rounds
    and preheat ran four times. Its runs 1-2 against 3-4 are the drift, named with its file and with how
    its rows were timed otherwise; a file of other rounds (or preheat) lends nothing."""
    write(tmp_path, "flux_repeatability-one-round-h200.json", p95_spread=0.09, summaries={
        "fastest_of_2": {"rows": 36, "median_spread": 0.003, "p95_spread": 0.061}})  # fmt: skip
    write(tmp_path, "flux_repeatability-warm-h200.json", p95_spread=0.025, rounds=2, preheat={"seconds": 6},
          row_warmup=True)  # fmt: skip
    monkeypatch.chdir(tmp_path)
    assert "drift" not in repeatability_of({"h200-a"}, protocol=WARMED)  # one round lends no drift
    summary = {"fastest_of_2": {"rows": 36, "median_spread": 0.003, "p95_spread": 0.032}}
    write(tmp_path, "flux_repeatability-old-h200.json", p95_spread=0.008, rounds=2, preheat={"seconds": 9},
          summaries=summary)  # fmt: skip
    view = repeatability_of({"h200-a"}, protocol=WARMED)
    assert view["file"] == "measurements/flux_repeatability-warm-h200.json"
    assert view["drift_p95"] == 0.032 and noise_p95(view) == 0.032
    assert view["drift"] == ("the fastest of runs 1-2 against that of runs 3-4 "
                             "(measurements/flux_repeatability-old-h200.json, without the per-row warm-up)")  # fmt: skip
    # the page's source names the drift, which is the noise here, with its file
    assert source_words(view, WARMED).endswith(
        "; over minutes, the fastest of runs 1-2 against that of runs 3-4 (measurements/flux_repeatability-"
        "old-h200.json, without the per-row warm-up): 95th percentile 3.2%"
    )
    # a wider summary of another file, run alike: the old file keeps its own all the same
    write(tmp_path, "flux_repeatability-wide-h200.json", p95_spread=0.008, rounds=2, preheat={"seconds": 9},
          summaries={"fastest_of_2": {"rows": 36, "median_spread": 0.003, "p95_spread": 0.05}})  # fmt: skip
    old = repeatability_of({"h200-a"}, protocol={**WARMED, "row_warmup": False})
    assert old["file"] == "measurements/flux_repeatability-old-h200.json"
    assert old["drift"] == "the fastest of runs 1-2 against that of runs 3-4" and old["drift_p95"] == 0.032
    assert repeatability_of({"h200-a"}, protocol=WARMED)["drift_p95"] == 0.05  # the widest lent one


def test_no_drift_is_lent_across_preheat_or_machines(tmp_path, monkeypatch):
    """Four-run files that differ from the chosen one in preheat, or ran on another host of the rows'
    (a label's rows from two leases), lend it no drift."""
    summary = {"fastest_of_2": {"rows": 36, "median_spread": 0.003, "p95_spread": 0.06}}
    write(tmp_path, "flux_repeatability-cold-h200.json", p95_spread=0.01, rounds=2, summaries=summary)
    write(tmp_path, "flux_repeatability-other-host.json", machine_id="h200-b", p95_spread=0.01, rounds=2,
          preheat={"seconds": 9}, summaries=summary)  # fmt: skip
    write(tmp_path, "flux_repeatability-warm-h200.json", p95_spread=0.025, rounds=2, preheat={"seconds": 6},
          row_warmup=True)  # fmt: skip
    monkeypatch.chdir(tmp_path)
    view = repeatability_of({"h200-a", "h200-b"}, protocol=WARMED)
    assert view["file"] == "measurements/flux_repeatability-warm-h200.json"
    assert "drift" not in view and noise_p95(view) == 0.025
