"""report.headline: the fastest correct provider per shape and pass, from rows alone."""

from __future__ import annotations

from attnbench.report.headline import headline, targets_from, verdict_of


def row(provider: str, seq: int, ms: float, pass_: str = "fwd", **changes) -> dict:
    base = {
        "provider": provider, "family": provider.split("_")[0], "status": "ok", "reason": "", "batch": 1,
        "seqlen_q": seq, "seqlen_k": seq, "heads_q": 24, "heads_kv": 24, "head_dim": 128, "dtype": "bfloat16",
        "mask": "full", "window": None, "doc_lens": None, "pass": pass_, "ms_median": ms,
        "tflops": 100.0 / ms, "mfu": 0.1 / ms, "timer": "cuda_event", "ok": True, "extra": {},
    }  # fmt: skip
    return {**base, **changes}


def test_fastest_correct_with_runner_up_and_peak():
    rows = [row("cudnn", 4224, 1.0), row("flash", 4224, 1.25), row("wrong", 4224, 0.5, status="incorrect",
            ok=False, reason="rel_l2 0.5 > 0.02"), row("cudnn", 4352, 1.1), row("flash", 4352, 1.0)]  # fmt: skip
    h = headline(rows)
    by_shape = {b.shape: b for b in h.bests}
    assert set(by_shape) == {"S 4224", "S 4352"}
    first = by_shape["S 4224"]
    # the incorrect kernel is faster but never the best; it is named as a failure instead
    assert first.provider == "cudnn" and first.runner_up == "flash" and first.runner_up_slower == 1.25
    assert first.tflops == 100.0 and first.peak_share == 0.1 and first.peak == "measured"
    assert by_shape["S 4352"].provider == "flash"
    assert h.incorrect == ["wrong forward: rel_l2 0.5 > 0.02 (at S 4224)"]
    sentence = (
        "forward: fastest cudnn at 1 of 2 shapes, flash at 1 of 2 shapes; 100.0 TFLOP/s "
        "(10% of the measured peak); the runner-up is 10%–25% slower."
    )
    assert h.sentences == [sentence]


def test_quantised_ranked_apart_and_datasheet_peak():
    rows = [row("sdpa", 4224, 1.0, mfu=None, extra={"mfu_datasheet": 0.05}),
            row("sage", 4224, 0.5, extra={"quantized": True})]  # fmt: skip
    (best,) = headline(rows).bests
    assert best.provider == "sdpa" and best.quantised == "sage (200 TFLOP/s)"
    assert best.peak == "datasheet" and best.peak_share == 0.05
    from attnbench.report.headline_data import page_headline

    # an int8 kernel is no fp8 one: the note says quantised, whatever the format
    assert page_headline(headline(rows)).entries[0].notes == [
        "faster quantised (ranked apart): sage (200 TFLOP/s)"
    ]


def test_separate_check_vouches_for_rows_without_ok():
    """Context parallel: rows carry no `ok`; the correctness cell checks each strategy per mask."""
    rows = [row("cp_ring", 128, 1.0, family="cp", ok=None, mfu=None),
            row("cp_zigzag", 128, 0.8, family="cp", ok=None, mfu=None),
            row("single_gpu_math", 64, 0.5, family="cp", ok=None, mfu=None)]  # fmt: skip
    h = headline(rows, checks={("ring", "full"): "ok", ("zigzag", "full"): "incorrect"},
                 peaks={"datasheet": 1000.0})  # fmt: skip
    by_shape = {b.shape: b for b in h.bests}
    assert by_shape["S 128"].provider == "cp_ring" and by_shape["S 128"].checked
    assert by_shape["S 128"].peak == "datasheet" and by_shape["S 128"].peak_share == 0.1
    # the reference nobody checked is ranked where nothing checked ran, and says so
    assert by_shape["S 64"].provider == "single_gpu_math" and not by_shape["S 64"].checked
    assert h.incorrect == ["zigzag (full): correctness check incorrect"]
    # an unavailable check is "not checked", not a failure
    h = headline(rows, checks={("ring", "full"): "unavailable"})
    assert h.incorrect == [] and not {b.shape: b for b in h.bests}["S 128"].checked


def test_cpu_rows_are_flagged():
    assert headline([row("math", 288, 5.0, timer="perf_counter")]).cpu
    assert not headline([row("math", 288, 5.0)]).cpu


def test_targets_met_missed_and_single_verdicts():
    document = {"targets": [
        {"target": ">= 400 TFLOP/s", "strategy": "ring", "seq_len": 262144, "mask": "causal",
         "verdict": "FAIL", "why": "362.9 TFLOP/s: short by 9.3%"},
        {"target": ">= 400 TFLOP/s", "strategy": "zigzag", "seq_len": 262144, "verdict": "pass"},
        {"target": "x", "verdict": "n/a"},
    ]}  # fmt: skip
    targets = targets_from(document, "targets/artifacts/targets.json")
    assert [t.verdict for t in targets] == ["missed", "met", "not checked"]
    assert targets[0].subject == "ring · 262144 · causal" and "short by 9.3%" in targets[0].detail
    h = headline([], targets=targets)
    assert [t.subject for t in h.missed] == ["ring · 262144 · causal"] and len(h.met) == 1
    (trust,) = targets_from({"verdict": "holds", "relative_difference": 0.0156}, "trust")
    assert trust.verdict == "met" and trust.detail == "difference 1.56%"
    (trust,) = targets_from({"verdict": "FAILS", "relative_difference": 0.045, "limit": 0.03}, "trust")
    assert trust.verdict == "missed" and trust.detail == "difference 4.50% (limit 3%)"
    assert targets_from({"verdict": "skipped", "reason": "needs CUDA"}, "trust")[0].verdict == "not checked"
    assert targets_from({"something": 1}, "x") == []
    assert verdict_of("FAILS") == "missed" and verdict_of("holds") == "met"


def test_shape_labels_leave_out_fields_a_row_does_not_use():
    from attnbench.report.headline import shape_label

    fields = ["seqlen_q", "mask", "window", "doc_lens"]
    causal = {"seqlen_q": 4096, "seqlen_k": 4096, "mask": "causal", "window": None, "doc_lens": None}
    varlen = {
        "seqlen_q": 4096,
        "seqlen_k": 4096,
        "mask": "varlen_full",
        "window": None,
        "doc_lens": [1722, 2374],
    }
    window = {"seqlen_q": 4096, "seqlen_k": 4096, "mask": "sliding_window", "window": 1024, "doc_lens": None}
    assert shape_label(causal, fields) == "S 4096 · causal"
    assert shape_label(varlen, fields) == "S 4096 · varlen_full · 2 docs"
    assert shape_label(window, fields) == "S 4096 · sliding_window · window 1024"


def test_a_sparse_pattern_is_ranked_apart_from_dense_rows_of_the_same_shape():
    from attnbench.report.headline import headline

    base = {"status": "ok", "pass": "fwd", "seqlen_q": 65536, "seqlen_k": 65536, "mask": "causal", "ok": True}
    dense = {**base, "provider": "flash_attn3", "ms_median": 100.0, "tflops": 600.0}
    dilated = {
        **base,
        "provider": "dilated_gather",
        "ms_median": 5.0,
        "tflops": 300.0,
        "extra": {"pattern": "dilated"},
    }
    bests = headline([dense, dilated]).bests
    # without the pattern in the label, the dilated row (20x faster per call) would be "fastest" at this shape
    assert sorted((b.shape, b.provider) for b in bests) == [
        ("dilated", "dilated_gather"),
        ("one shape", "flash_attn3"),
    ]


def test_rows_of_different_block_sizes_are_different_shapes():
    from attnbench.report.headline import headline

    base = {
        "status": "ok",
        "pass": "fwd",
        "seqlen_q": 4096,
        "seqlen_k": 4096,
        "mask": "varlen_block_causal",
        "ok": True,
    }
    rows = [
        {**base, "provider": "a", "block": 1024, "ms_median": 1.0},
        {**base, "provider": "b", "block": 2048, "ms_median": 2.0},
    ]
    assert sorted((b.shape, b.provider) for b in headline(rows).bests) == [
        ("block 1024", "a"),
        ("block 2048", "b"),
    ]


def test_a_group_whose_only_rows_are_incorrect_has_no_winner():
    """An `incorrect` row without an `ok` field (older rows) is still wrong: never the fastest, even alone."""
    lone = {
        k: v for k, v in row("wrong", 4224, 0.5, status="incorrect", reason="rel_l2 0.5").items() if k != "ok"
    }
    h = headline([lone, row("cudnn", 4352, 1.0)])
    assert [b.shape for b in h.bests] == ["S 4352"]
    assert all(b.provider != "wrong" for b in h.bests)


def test_a_row_above_a_peak_is_never_ranked_and_is_named_as_a_measurement_error():
    """Committed rows from before the timing protocol carry only their shares (e.g. mfu 1.03 against a
    matmul peak measured power-limited): read now, they are measurement errors, never results."""
    over = row("flash_attn3", 8192, 0.5, mfu=1.03)
    h = headline([over, row("cudnn", 8192, 1.0)])
    assert [b.provider for b in h.bests] == ["cudnn"]
    assert len(h.incorrect) == 1 and h.incorrect[0].startswith(
        "flash_attn3 forward: above peak, a measurement error: 103% of the peak (mfu)"
    )
    flagged = row("fa", 8192, 0.4, over_peak="763.5 TFLOP/s is 112% of the measured bf16 matmul peak")
    assert [b.provider for b in headline([flagged, row("cudnn", 8192, 1.0)]).bests] == ["cudnn"]


def test_share_of_peak_only_against_a_peak_of_the_rows_math():
    """An fp32 row without its own share has none: the run's single measured peak is a bf16 one."""
    fp32 = row("gather_eff", 8192, 4.0, mfu=None, dtype="float32", math="fp32", mfu_at_clock=0.446)
    (best,) = headline([fp32], peaks={"measured": 694.0, "datasheet": 989.5}).bests
    assert best.peak_share is None and best.peak == ""
    bf16 = row("gather_cudnn", 8192, 0.5, mfu=None, math="bf16")
    (best,) = headline([bf16], peaks={"measured": 400.0}).bests
    assert best.peak_share == 0.5 and best.peak == "measured"


def test_a_share_scaled_to_the_rows_clock_says_so():
    """Rows scored at their own SM clock are shares of the matmul peak scaled to it, not of the peak
    as measured: the sentence and the ranking's detail name that denominator."""
    from attnbench.report.headline_data import index_lines, page_headline

    scaled = {"peak_tflops": 883.5, "matmul_peak_measured": {"tflops": 700.0, "sm_clock_mhz": 1545.0}}
    h = headline([row("te", 4224, 0.131, mfu=0.86, extra=scaled)], peaks={"measured": 663.2})
    assert h.bests[0].peak == "measured at clock"
    assert "(86% of the measured matmul peak at the row's SM clock)" in h.sentences[0]
    shown = page_headline(h)
    assert shown.entries[0].detail == "86% of peak at its clock"
    assert "scaled to the SM clock the row ran at" in shown.entries_note
    # with a clock beside it, the note says whose reading it is (scripts/probe_effective_clock.py sets it
    # beside the clock the SMs ran at)
    clocked = page_headline(headline([row("te", 4224, 0.131, mfu=0.86, extra=scaled, sm_clock_mhz=1700.0)],
                                     peaks={"measured": 663.2}))  # fmt: skip
    assert "MHz: the median SM clock NVML reported over the winner's timed calls" in clocked.entries_note
    assert "MHz:" not in shown.entries_note  # no clock shown, nothing to say of it
    assert index_lines(h)[0].endswith("(86% of the measured matmul peak at the row's SM clock)")


def test_untimed_correctness_rows_vouch_for_the_same_workload():
    """A correctness cell's rows (checked, not timed) vouch for the timed rows of their provider at the
    same workload, in every pass a forward + backward check covers; not at another length."""
    check = {"ms_median": None, "tflops": None, "mfu": None, "ok": True}
    rows = [row("fused", 32768, 1.0, ok=None), row("gather", 32768, 2.0, ok=None),
            row("fused", 65536, 2.0, ok=None), row("fused", 32768, 1.0, "fwd_bwd", **check),
            row("gather", 32768, 1.0, "fwd_bwd", **{**check, "ok": False, "status": "incorrect"})]  # fmt: skip
    by_shape = {b.shape: b for b in headline(rows).bests}
    assert by_shape["S 32768"].provider == "fused" and by_shape["S 32768"].checked
    assert by_shape["S 32768"].runner_up == ""  # the wrong one is never ranked
    assert not by_shape["S 65536"].checked


def test_a_scoped_headline_names_its_configuration_on_the_index_and_in_its_entries(tmp_path):
    """A page's second headline (cuDNN's published configuration beside the Flux sweep) says which
    configuration its lines are of, with the workload all its rows share; the varying part stays last."""
    import json

    from attnbench.report.headline_data import headline_of

    rows = [row("cudnn", 16384, 1.0, mask=m) for m in ("full", "causal")]
    rows += [row("flash", 16384, 1.2, mask=m) for m in ("full", "causal")]
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    plain, _ = headline_of({"bench": tmp_path})
    scoped, _ = headline_of({"bench": tmp_path}, scope="cuDNN's published configuration")
    (line,) = scoped.index_lines
    assert (
        line
        == "cuDNN's published configuration (S 16384 · B 1 · H 24 · KV heads 24 · D 128 · bfloat16): "
        + plain.index_lines[0]
    )
    assert [e.label for e in scoped.entries] == [
        f"cuDNN's published configuration · {e.label}" for e in plain.entries
    ]
    assert {e.label for e in plain.entries} == {"full", "causal"}
    # a group of its own, so that a compare page's medians never pool it with the sweep's entries
    assert [e.group for e in scoped.entries] == [
        f"{e.group} · cuDNN's published configuration" for e in plain.entries
    ]


def test_rows_that_ran_and_failed_are_a_badge_of_their_own_never_a_correctness_verdict():
    """An `error` row (torch.compile failing in its fake-tensor pass) is a missing number, not a wrong one:
    the page says how many provider/pass pairs errored, each with its first reason in the title."""
    from attnbench.report.headline_data import verdict_badges

    rows = [row("flash", 4096, 1.0), row("cudnn", 4096, 1.2),
            row("compiled", 4096, 1.0, status="error", ms_median=None, reason="TorchRuntimeError: fake tensor"),
            row("compiled", 8192, 1.0, status="error", ms_median=None, reason="TorchRuntimeError: again"),
            row("missing", 4096, 1.0, status="unavailable", ms_median=None, reason="not installed")]  # fmt: skip
    h = headline(rows)
    assert h.errored == ["compiled forward: TorchRuntimeError: fake tensor"]
    badges = {b.text: b for b in verdict_badges(h)}
    assert badges["1 provider/pass errored"].title == "compiled forward: TorchRuntimeError: fake tensor"
    assert "no correctness failure" in badges


def test_a_runner_up_more_than_twice_as_slow_is_said_as_a_ratio_of_times():
    """ "642% slower" reads as nonsense; past twice the time the sentence gives the times' ratio."""
    rows = [
        row("fused", 4096, 1.0),
        row("gather", 4096, 7.42),
        row("fused", 8192, 2.0),
        row("gather", 8192, 2.002),
    ]
    (sentence,) = headline(rows).sentences
    assert sentence.endswith("; the runner-up takes 1.00×–7.42× the time.")
