"""report.answers: each notebook's question answered from its rows; baselines apart; smoke targets moot."""

from __future__ import annotations

import json

from attnbench.notebook.site import headline as page
from attnbench.report.answers import LEADERBOARD_BEST_MS, answer_for
from attnbench.report.headline import headline, targets_from
from attnbench.report.headline_data import Artifacts, headline_of, page_headline


def row(provider: str, seq: int, ms: float, pass_: str = "fwd", **changes) -> dict:
    base = {
        "provider": provider,
        "family": "x",
        "status": "ok",
        "reason": "",
        "batch": 1,
        "seqlen_q": seq,
        "seqlen_k": seq,
        "heads_q": 8,
        "heads_kv": 8,
        "head_dim": 64,
        "dtype": "bfloat16",
        "mask": "causal",
        "pass": pass_,
        "ms_median": ms,
        "tflops": 100.0 / ms,
        "timer": "cuda_event",
        "ok": True,
        "extra": {},
    }
    return {**base, **changes}  # fmt: skip


def sparse(provider, seq, ms, pass_="fwd"):
    return row(provider, seq, ms, pass_, extra={"pattern": "dilated"})


def numbers(answer) -> dict:
    return {n.key: n.value for n in answer.numbers}


def test_dilated_speedup_crossover_longest():
    rows = [row("fa3", 1024, 1.0), sparse("dil", 1024, 2.0), row("fa3", 4096, 8.0), sparse("dil", 4096, 4.0),
            sparse("dil", 16384, 9.0)]  # fmt: skip
    a = answer_for("dilated_attention", Artifacts(rows=rows), "figures/tflops.svg")
    n = numbers(a)
    assert n == {"fwd|speedup": 2.0, "fwd|crossover": 4096, "fwd|longest": 16384}
    assert (
        "dil is 2.00× the speed of dense fa3 at S 4096" in a.answer[0] and "wins from S 4096" in a.answer[0]
    )
    assert a.key_figure == "figures/tflops.svg" and a.question
    assert a.answer[0].endswith("dense S 4096.")


def test_dilated_says_when_a_time_budget_not_a_kernel_ended_dense():
    skipped = row(
        "fa3",
        16384,
        1.0,
        status="skipped",
        ms_median=None,
        tflops=None,
        reason="not run: predicted 6.8 s per call (from 1.70 s at 4096 tokens), over 2x the budget",
    )
    # another dense kernel's prediction (slower, at the same length) is not the compared kernel's
    cudnn = {
        **skipped,
        "provider": "cudnn",
        "reason": "not run: predicted 8.7 s per call (from 2.2 s), over 2x",
    }
    rows = [row("fa3", 4096, 8.0), row("cudnn", 4096, 9.0), sparse("dil", 4096, 4.0), sparse("dil", 16384, 9.0),
            cudnn, skipped]  # fmt: skip
    a = answer_for("dilated_attention", Artifacts(rows=rows))
    assert a.answer[0].endswith(
        "dense S 4096 (longer dense runs skipped for time: predicted 6.8 s per call at S 16384)."
    )


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


def test_context_parallel_efficiency_is_per_gpu_and_single_gpu_is_a_baseline():
    two = {"world_size": 2}
    rows = [row("single_gpu_cudnn", 4096, 1.0, "fwd_bwd", tflops=600.0),
            row("single_gpu_cudnn", 8192, 1.0, "fwd_bwd", tflops=700.0),  # same tokens in all, not per GPU
            row("cp_ring", 8192, 1.1, "fwd_bwd", tflops=540.0, extra=two),
            row("cp_ulysses", 8192, 1.2, "fwd_bwd", tflops=500.0, extra=two)]  # fmt: skip
    a = answer_for("context_parallel", Artifacts(rows=rows))
    (n,) = a.numbers
    assert (
        n.value == 90.0
        and n.per == "per GPU"
        and "cp_ring keeps 90% (540 of single_gpu_cudnn's 600" in a.answer[0]
    )
    assert "S 8192 (4096 per GPU)" in a.answer[0] and len(a.answer) == 1
    assert ", the slowest of 2 on that kernel 83% (cp_ulysses)" in a.answer[0]  # the other end
    assert a.answer[0].startswith(
        "Forward + backward, TFLOP/s per GPU on 2 GPUs against one GPU at the same per-GPU tokens"
    )
    (best,) = [b for b in headline(rows).bests if b.shape.startswith("S 8192") or "8192" in b.shape]
    assert best.provider == "cp_ring" and not best.baseline  # the faster single-GPU reference never wins


def test_context_parallel_share_above_one_is_explained_per_mask():
    two = {"world_size": 2}
    rows = [row("single_gpu_cudnn", 4096, 1.0, "fwd_bwd", tflops=500.0),
            row("single_gpu_cudnn", 4096, 1.0, "fwd_bwd", tflops=600.0, mask="full"),
            row("cp_zigzag", 8192, 1.1, "fwd_bwd", tflops=510.0, extra=two),
            row("cp_zigzag", 8192, 1.1, "fwd_bwd", tflops=540.0, extra=two, mask="full")]  # fmt: skip
    a = answer_for("context_parallel", Artifacts(rows=rows))
    assert sorted(n.key for n in a.numbers) == ["causal|8192|efficiency", "full|8192|efficiency"]
    assert "causal, S 8192" in a.answer[0] and "full, S 8192" in a.answer[0]
    assert "not a timing error" in a.answer[1]  # causal 102%: why it can exceed one GPU
    assert "slowest" not in a.answer[0]  # one strategy a length: no other end to name


def test_cs336_leaderboard_fa3_mfu_and_time_sink():
    board = [row("triton_fa2", 16384, 6.0, "fwd_bwd"), row("flash_attn3", 16384, 4.0, "fwd_bwd")]
    # the whole step (optimizer included) over the measured steps after the profile's warm-up, as the table
    times = {"forward": [900.0, 400.0], "backward": [900.0, 500.0], "optimizer": [900.0, 100.0]}
    step = {"status": "ok", "size": "xl", "context": 1024, "precision": "bf16", "attention": "sdpa",
            "peak_tflops": 1000.0, "flops": {"train": 5e14}, "times_ms": times}  # fmt: skip
    breakdown = {"size": "large", "context": 1024, "precision": "bf16",
                 "phases": {"forward": {"us_per_step": 1.0}, "backward": {"us_per_step": 3.0,
                 "top": [{"kernel": "gemm", "share": 0.4}]}}}  # fmt: skip
    profile = {"steps": {"warmups": [0, 1], "measured": 10}}
    data = Artifacts(rows=board, records={"leaderboard": board, "steps_bf16": [step]},
                     documents={"breakdown": breakdown, "profile": profile})  # fmt: skip
    a = answer_for("cs336_systems", data)
    n = numbers(a)
    assert n["leaderboard|ms"] == 6.0 and n["leaderboard|vs_fa3"] == 1.5 and n["model|step_mfu"] == 50.0
    # the same card first, then the leaderboard's entry of another card
    assert a.answer[0].startswith(
        "Leaderboard shape (fwd+bwd, wall time): triton_fa2 6.000 ms, 1.50× FA3's time"
    )
    assert f"best public entry's {LEADERBOARD_BEST_MS} ms, which ran on an H100 (another card)" in a.answer[0]
    assert "best bf16 MFU 50% (xl, context 1024, sdpa attention; the whole step" in a.answer[1]
    # the time sink is another model run: a sentence of its own
    assert a.answer[2].startswith(
        "Biggest time sink: the backward phase, 75% of the step (large, context 1024"
    )
    assert "gemm: 40%" in a.answer[2] and "time sink" not in a.answer[1]


def test_cs336_time_sink_is_the_block_and_kind_of_kernel_that_takes_the_most():
    phases = {"forward": {"us_per_step": 40.0, "blocks_us_per_step": {"attention/other": 20.0, "mlp/matmul": 20.0}},
              "backward": {"us_per_step": 60.0, "blocks_us_per_step": {"attention/other": 30.0, "attention/matmul": 10.0,
                                                                        "mlp/matmul": 20.0}}}  # fmt: skip
    breakdown = {"size": "large", "context": 1024, "precision": "bf16", "phases": phases}
    sink = answer_for("cs336_systems", Artifacts(documents={"breakdown": breakdown})).answer[-1]
    assert "attention's other kernels (elementwise, masking, copies), 50% of the profiled step" in sink
    assert "(large, context 1024, bf16, eager attention; 60% for attention in all)" in sink


def test_flux_fastest_exact_kernel_and_lead_over_sdpa():
    rows = [
        row("flash_attn3", 4608, 1.0),
        row("sdpa_cudnn", 4608, 1.2),
        row("sdpa_math", 4608, 0.9),
        row("sage", 4608, 0.5, extra={"quantized": True}),
    ]  # fmt: skip  (the reference is never the answer)
    a = answer_for("flux_attention", Artifacts(rows=rows))
    assert "fastest exact kernel flash_attn3" in a.answer[0] and numbers(a)["fwd|lead"] == 1.2


def test_the_flux_lead_says_when_the_two_rows_were_timed_in_different_ways():
    """A launch-bound call is timed in bursts queued behind a spin (the GPU idles before each burst), a
    call the host keeps ahead of back to back at the power limit: a lead across the two says so."""
    queued = {"timing_method": "cuda_event_per_call_queued", "extra": {"host_ms_per_call": 0.73}}
    rows = [
        row("te_flash", 4608, 1.0, **queued),
        row("sdpa_cudnn", 4608, 1.2, timing_method="cuda_event_per_call"),
    ]
    rows[0]["extra"] = {**rows[0]["extra"], "note": "TE picked: flash (3.0.0)"}  # the kernel TE dispatched to
    text = answer_for("flux_attention", Artifacts(rows=rows)).answer[0]
    assert "fastest exact kernel te_flash (1.000 ms wall; Transformer Engine ran flash (3.0.0))" in text
    assert (
        "timed differently: te_flash in bursts queued behind an idle GPU (launch-bound: 0.73 ms of host"
        in text
    )
    assert "sdpa_cudnn back to back at the power limit" in text
    alike = [row("flash_attn3", 4608, 1.0, **queued), row("sdpa_cudnn", 4608, 1.2, **queued)]
    assert "timed differently" not in answer_for("flux_attention", Artifacts(rows=alike)).answer[0]


def test_masks_best_and_gaps_of_ffa_and_flex():
    rows = [row("flash_attn3", 4096, 1.0), row("magi_ffa", 4096, 1.5), row("flex", 4096, 2.0)]
    a = answer_for("attention_masks", Artifacts(rows=rows))
    assert numbers(a) == {"causal|4096|magi_ffa": 50.0, "causal|4096|flex": 100.0}  # the length keys it
    assert "causal at 4k: flash_attn3, magi_ffa +50%, flex +100%" in a.answer[0]
    assert [n.detail for n in a.numbers] == [
        "magi_ffa takes 1.50× flash_attn3's time",
        "flex takes 2.00× flash_attn3's time",
    ]


def test_masks_are_answered_where_the_peers_ran_not_where_one_kernel_reached():
    """The budget skips rows at long lengths: on an H200 only sdpa_flash reached causal 128k, and the
    answer named it the best with "magi_ffa did not run". The length is the longest both peers ran."""
    rows = [row("flash_attn3", 32768, 1.0), row("magi_ffa", 32768, 1.1), row("flex", 32768, 2.0),
            row("flash_attn3", 65536, 4.0), row("magi_ffa", 65536, 4.2),
            row("sdpa_flash", 131072, 30.0)]  # fmt: skip
    a = answer_for("attention_masks", Artifacts(rows=rows))
    assert "causal at 32k: flash_attn3, magi_ffa +10%, flex +100%" in a.answer[0]
    only_ffa = answer_for("attention_masks", Artifacts(rows=rows[3:]))
    assert "causal at 64k: flash_attn3, magi_ffa +5.0%, flex did not run" in only_ffa.answer[0]
    alone = answer_for("attention_masks", Artifacts(rows=rows[5:]))
    assert "causal at 128k: sdpa_flash, magi_ffa did not run" in alone.answer[0]


def test_masks_say_how_many_rows_the_time_budget_left_out():
    skipped = {"status": "skipped", "ms_median": None, "reason": "not attempted: predicted 9 s"}
    rows = [row("flash_attn3", 4096, 1.0), row("flex", 4096, 2.0),
            row("flash_attn4", 4096, 1.0, **skipped), row("flash_attn4", 4096, 1.0, "bwd", **skipped)]  # fmt: skip
    said = answer_for("attention_masks", Artifacts(rows=rows)).answer
    assert said[-1] == ("2 kernel × length rows were not attempted within the profile's time budget (forward 1, "
                        "backward 1); a winner is the fastest of the kernels that ran at that length.")  # fmt: skip
    assert not any(
        "not attempted" in s for s in answer_for("attention_masks", Artifacts(rows=rows[:2])).answer
    )


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

    said = " ".join(answer_for("flux_attention", Data).answer)
    assert "36 rows timed twice, measurements/flux_repeatability-h100.json" in said
    assert "the median spread is 0.5% and the 95th percentile 9.4%" in said
    assert "Widest: flash_attn3 fwd, 11.4% apart, at 1965 MHz in one run and 1635 MHz in the other." in said
    Data.rows = [{**r, "env": "h200-b"} for r in Data.rows]
    assert "is noise on this GPU" not in " ".join(answer_for("flux_attention", Data).answer)


def test_quantised_kernels_get_their_own_panels(tmp_path):
    """fp8/int8 rows are drawn on a second row of panels with their own axis, never on the exact chart."""
    from attnbench.report.figures import plot_sweep
    from attnbench.rows import Result, Workload

    work = Workload(1, 256, 256, 4, 4, 64, "bfloat16", "full")
    rows = [Result(p, p.split("_")[0], "ok", work, "fwd", ms_median=ms, tflops=t, timer="cuda_event",
                   extra={"quantized": True} if "fp8" in p else {})
            for p, ms, t in (("flash_exact", 1.0, 100.0), ("flash_fp8", 0.5, 200.0))]  # fmt: skip
    info = plot_sweep(rows, tmp_path / "t.svg", metric="tflops")
    svg = (tmp_path / "t.svg").read_text()
    assert "forward: quantised (fp8/int8), own tolerance" in svg and info.lines["fwd"] == ["flash_exact",
                                                                                          "flash_fp8 (quantised)"]  # fmt: skip
    exact_panel, quantised_panel = svg.split('<g id="axes_2">')
    assert "series-fwd-flash_exact-ok" in exact_panel and "series-fwd-flash_fp8-ok" in quantised_panel


def test_the_distributed_dilated_answer_compares_wall_time_with_one_gpu():
    """Split over GPUs vs one GPU on all tokens, in wall time (never per-GPU TFLOP/s against one GPU's)."""
    from typing import ClassVar

    from attnbench.report.answers import dilated_distributed

    def row(world, L, ms, pass_="fwd"):
        return {"status": "ok", "ok": None, "pass": pass_, "seqlen_q": L, "ms_median": ms,
                "provider": "dilated_distributed_cudnn" if world > 1 else "dilated_gather_cudnn",
                "extra": {"world_size": world, "pattern": "dilated"}}  # fmt: skip

    class Data:
        rows: ClassVar[list[dict]] = [row(1, 1 << 18, 30.0), row(2, 1 << 18, 33.3), row(1, 1 << 20, 106.1),
                                      row(1, 1 << 21, 209.9), row(2, 1 << 21, 108.6), row(2, 1 << 22, 212.9)]  # fmt: skip

    answer = dilated_distributed(Data)
    said = (
        "forward: 2097152 tokens split over 2 GPUs run 1.93× as fast as the same path on one GPU "
        "(dilated_gather_cudnn on all of them; wall time 108.6 vs 209.9 ms; strong-scaling efficiency 97%); "
        "at 262144 tokens the split run is slower than one GPU (0.90×); the split run reaches 4194304 "
        "tokens (212.9 ms), the same path on one GPU 2097152."
    )
    assert answer.answer[0] == said  # the one-GPU run is named: it is the same path, not the fastest kernel
    assert (
        "the one-GPU page's fastest kernel (the fused one where it ran) is another path" in answer.answer[1]
    )
    # keys of their own: the compare page never pairs them with the one-GPU report's speed-up over dense
    assert [(n.key, n.unit, n.per) for n in answer.numbers] == [("fwd|split_speedup", "×", "wall time"),
                                                                ("fwd|split_longest", "tokens", "")]  # fmt: skip
    # the index shows the name alone: it says what the speed-up is over
    assert answer.numbers[0].name == "forward speed-up on 2 GPUs over the same path on one, at S 2097152"

    class OneGpu:  # a one-GPU machine: the cell ran nothing split; the page leads with the report's question
        rows: ClassVar[list[dict]] = [row(1, 1 << 20, 106.1)]

    from attnbench.notebook.site import headline as page

    nothing = dilated_distributed(OneGpu)
    assert (nothing.question, nothing.answer, nothing.numbers) == ("", [], [])

    class FailedSplit:  # a split run happened but every row of it failed: said, not hidden
        rows: ClassVar[list[dict]] = [row(1, 1 << 20, 106.1), {**row(2, 1 << 21, 0.0), "status": "oom"}]

    failed = dilated_distributed(FailedSplit)
    assert failed.question and failed.answer == [
        "The run split over GPUs gave no usable row (oom): see its table."
    ]
    merged = (
        page.Headline().with_answer(nothing).merged(page.Headline().with_answer(page.Answer("Q?", ["A."])))
    )
    assert (merged.question, merged.answer) == ("Q?", ["A."])


def test_the_environment_answer_names_the_gpu_and_what_bounds_its_speed():
    """The environment page's first lines: the GPU with its SMs, memory, clock and power limit as numbers
    the comparison page can pair (keys the same on every machine), then the software."""
    from typing import ClassVar

    from attnbench.report.answers import answer_for

    env = {"gpu": "NVIDIA H100 80GB HBM3", "gpus": [{}], "sm_count": 132, "memory_bytes": 85017493504,
           "max_sm_clock_mhz": 1980.0, "power_limit_w": 700.0, "driver": "580.159.04", "cuda": "13.0",
           "cudnn": 91900, "packages": {"torch": "2.11.0", "triton": "3.6.0"}, "python": "3.12.3",
           "cpu": "Xeon", "cpu_count": 16, "reasons": {}}  # fmt: skip

    class Data:
        rows: ClassVar[list] = []
        documents: ClassVar[dict] = {"environment": env}

    answer = answer_for("environment", Data, spread=0.1)
    assert answer.answer[0] == ("NVIDIA H100 80GB HBM3: 132 SMs, 79.2 GiB of GPU memory, SM clock up to 1980 MHz, "
                                "power limit 700 W.")  # fmt: skip
    assert "cuDNN 9.19.0" in answer.answer[1] and "torch 2.11.0" in answer.answer[1]
    numbers = {n.key: (n.value, n.unit, n.spread) for n in answer.numbers}
    # a count has no unit beside its name (not "SMs 132 SMs"); each number is of one GPU
    assert numbers == {"gpu|sm_count": (132, "", None), "gpu|memory": (79.2, "GiB", None),
                       "gpu|max_sm_clock": (1980, "MHz", None), "gpu|power_limit": (700, "W", None)}  # fmt: skip
    assert {n.per for n in answer.numbers} == {"per GPU"}
    Data.documents = {"environment": {**env, "gpus": [{}, {}]}}
    assert answer_for("environment", Data).answer[0].startswith("2× NVIDIA H100 80GB HBM3, each: 132 SMs,")

    Data.documents = {"environment": {**env, "gpu": None, "gpus": [], "reasons": {"gpu": "no CUDA device"}}}
    answer = answer_for("environment", Data)
    assert answer.answer[0].startswith("No NVIDIA GPU (no CUDA device)") and not answer.numbers
    Data.documents = {"environment": {**env, "cpu_count": None}}
    assert answer_for("environment", Data).answer[1].endswith("host Xeon.")  # no "(None cores)"
    Data.documents = {}
    assert "has not run here" in answer_for("environment", Data).answer[0]


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


def test_masks_say_where_ffa_wins_costs_and_what_its_default_forward_costs():
    """On an H200: FFA fastest at varlen_block_causal (FA3 cannot express it), 7.6-13 % behind FA3
    elsewhere, and its default forward (atomic reduction) 0.6-37 % slower than without it."""
    rows = [row("flash_attn3", 4096, 1.0), row("magi_ffa", 4096, 1.1), row("flex", 4096, 2.0),
            row("magi_ffa", 4096, 1.0, mask="varlen_block_causal"), row("flex", 4096, 1.7, mask="varlen_block_causal"),
            row("magi_ffa_default", 4096, 1.232), row("magi_ffa_default", 4096, 1.05, mask="varlen_block_causal")]  # fmt: skip
    said = answer_for("attention_masks", Artifacts(rows=rows)).answer
    assert "varlen_block_causal at 4k: magi_ffa, flex +70%" in said[0]
    assert said[1].startswith(
        "FFA is the fastest at varlen_block_causal; elsewhere it is 10% behind the best"
    )
    assert (
        "(atomic reduction, magi_ffa_default) is 5.0%–12% slower than with disable_fwd_atomic_reduction=True"
        in said[1]
    )
    assert "over 2 mask × length points" in said[1]
    no_ffa = answer_for("attention_masks", Artifacts(rows=rows[:1] + rows[2:3])).answer
    assert len(no_ffa) == 1  # nothing to say of FFA where it did not run


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
    assert said[1] == f"FFA is 8.0%–20% behind the best (1 of 2 below the 95th-percentile {source}."
    close = answer_for("attention_masks", Artifacts(rows=rows[:2])).answer
    assert close[1] == f"FFA is 8.0% behind the best (below the 95th-percentile {source}."
    third = [
        row("flash_attn3", 4096, 1.0, mask="x", env="h100-a"),
        row("magi_ffa", 4096, 1.05, mask="x", env="h100-a"),
    ]
    both = answer_for("attention_masks", Artifacts(rows=rows[:2] + third)).answer
    assert both[1].startswith("FFA is 5.0%–8.0% behind the best (each below the 95th-percentile")
    elsewhere = [{**r, "env": "h200-b"} for r in rows]  # no repeatability run on that machine: nothing said
    assert (
        answer_for("attention_masks", Artifacts(rows=elsewhere)).answer[1]
        == "FFA is 8.0%–20% behind the best."
    )


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


def test_cs336_names_a_copy_kernel_as_a_copy_not_math():
    step = {"status": "ok", "size": "xl", "context": 1024, "precision": "bf16", "peak_tflops": 1000.0,
            "flops": {"train": 5e14}, "times_ms": {"forward": [400.0], "backward": [600.0], "optimizer": [0.0]}}  # fmt: skip
    breakdown = {"phases": {"forward": {"us_per_step": 1.0}, "backward": {"us_per_step": 3.0,
                 "top": [{"kernel": "unrolled_elementwise_kernel<direct_copy_kernel_cuda>", "share": 0.13}]}}}  # fmt: skip
    data = Artifacts(rows=[], records={"steps_bf16": [step]}, documents={"breakdown": breakdown})
    sink = answer_for("cs336_systems", data).answer[-1]
    assert "13% of it; a copy kernel: dtype casts or .contiguous() copies, not math)" in sink


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


def test_masks_budget_count_leaves_out_stand_ins_that_gave_way():
    budget = {"status": "skipped", "ms_median": None, "reason": "not attempted: predicted 9 s, 1 s left"}
    gave_way = {
        "status": "skipped",
        "ms_median": None,
        "reason": "not attempted: sdpa_cudnn measured this row",
    }
    rows = [row("flash_attn3", 4096, 1.0), row("flex", 4096, 2.0),
            row("flash_attn4", 4096, 1.0, **budget), row("sdpa_cudnn_kv_repeated", 4096, 1.0, **gave_way)]  # fmt: skip
    said = answer_for("attention_masks", Artifacts(rows=rows)).answer
    assert said[-1].startswith("1 kernel × length rows were not attempted within the profile's time budget")


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
    said = answer_for("context_parallel", Artifacts(rows=rows), noise=noise).answer[0]
    assert (
        "cp_usp keeps 97% (580 of single_gpu_fa3's 600 TFLOP/s), tied within the 3.2% run-to-run noise with "
        "cp_ulysses, the slowest of 3 on that kernel 62% (cp_ring)" in said
    )
    alone = answer_for("context_parallel", Artifacts(rows=rows), noise={}).answer[0]
    assert "tied" not in alone
