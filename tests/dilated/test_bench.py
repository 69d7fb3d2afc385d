"""The measuring and presenting side of the dilated report, on CPU: rows, stop rules, tables."""

from __future__ import annotations

import pytest
import torch

from attnbench.dilated import pattern
from attnbench.report import dilated as report
from attnbench.report import dilated_distributed
from attnbench.rows import Result, Workload
from attnbench.studies.dilated_attention import checks, measure, profiles, scaling

SMOKE = profiles.resolve("smoke", cuda=False)


def workload(n, mask="causal", dtype="bfloat16"):
    return Workload(1, n, n, 4, 4, 16, dtype, mask)


def test_profiles_resolve_and_refuse_clearly():
    assert profiles.resolve("auto", cuda=False)["profile"] == "smoke"
    assert profiles.resolve("auto", cuda=True)["profile"] == "default"
    with pytest.raises(ValueError, match="needs CUDA"):
        profiles.resolve("default", cuda=False)
    with pytest.raises(ValueError, match="got 'huge'"):
        profiles.resolve("huge", cuda=False)
    branches = profiles.branches_for(profiles.PROFILES["default"], 1 << 20)
    assert (branches[-1].w, branches[-1].r) == (1 << 20, 384)


def test_a_dilated_row_is_checked_timed_and_counts_the_sparse_flops():
    w = workload(256)
    branches = profiles.branches_for(SMOKE, 256)
    refs = measure.References(lambda n: branches, "cpu")
    row = measure.measure_dilated("gather", "math", w, "fwd_bwd", branches, device="cpu",
                                  timing_options=SMOKE["timing"], reference=refs.get(w))  # fmt: skip
    assert row.status == "ok" and row.ok and row.ms_median > 0 and row.reps >= 2
    assert row.extra["pairs"] == pattern.pairs(branches, 256, 4, True)
    assert row.extra["flops_fwd"] == 4 * 16 * row.extra["pairs"]
    assert row.tflops == pytest.approx(row.extra["flops_fwd"] * 3.5 / (row.ms_median * 1e-3) / 1e12)
    assert row.extra["tokens_per_s"] == pytest.approx(256 / (row.ms_median * 1e-3))


def test_a_wrong_result_is_an_incorrect_row_not_a_measurement_to_trust():
    w = workload(256)
    branches = profiles.branches_for(SMOKE, 256)
    good = measure.References(lambda n: branches, "cpu").get(w)()
    wrong = (good[0] * 1.1, *good[1:])  # a 10 % scale error
    row = measure.measure_dilated("gather", "math", w, "fwd", branches, device="cpu", timing_options=SMOKE["timing"],
                                  reference=lambda: wrong)  # fmt: skip
    assert row.status == "incorrect" and row.ok is False and "rel_l2" in row.reason


def test_backends_that_cannot_run_are_rows_with_reasons():
    w = workload(256)
    row = measure.measure_dilated("gather", "cudnn", w, "fwd", profiles.branches_for(SMOKE, 256), device="cpu",
                                  timing_options={})  # fmt: skip
    assert row.status == "unavailable" and "CUDA" in row.reason
    row = measure.measure_dilated("flex", None, w, "fwd_bwd", profiles.branches_for(SMOKE, 256), device="cpu",
                                  timing_options={})  # fmt: skip
    assert row.status == "unsupported" and "no backward on CPU" in row.reason


def test_prediction_is_quadratic_for_dense_and_measured_for_dilated():
    assert scaling.predict([(1000, 1.0)], 2000, "dense") == pytest.approx(4.0)
    assert scaling.predict([(1000, 1.0)], 2000, "dilated") == pytest.approx(2.0)
    assert scaling.predict([(1000, 1.0), (2000, 3.0)], 4000, "dilated") == pytest.approx(
        3.0 * 2**1.585, rel=1e-2
    )
    assert scaling.predict([(1000, 1.0), (2000, 1.2)], 4000, "dilated") == pytest.approx(
        2.4
    )  # at least linear
    assert scaling.predict([], 4000, "dense") is None


class FakeSweep(scaling.Sweep):
    """Rows from a table of (length -> ms or status) instead of measuring."""

    def __init__(self, config, plan, free=None):
        super().__init__(config, device="cpu")
        self.plan, self.free, self.measured = plan, free, []

    def measure_point(self, series, seq_len, pass_):
        self.measured.append(seq_len)
        outcome = self.plan[seq_len]
        row = Result(series.name, "dilated", "ok", scaling.workload(self.config, seq_len), pass_)
        if isinstance(outcome, str):
            row.status, row.reason = outcome, f"{outcome} here"
        elif isinstance(outcome, tuple):
            row.ms_median, row.peak_mem_bytes = outcome
        else:
            row.ms_median = outcome
        return row

    def free_bytes(self):
        return self.free


def config_with(lengths, budget=1.0):
    config = profiles.resolve("smoke", cuda=False)
    config["sweep"].update(seq_lens=lengths, passes=["fwd"], call_budget_s=budget, cell_budget_s=100)
    return config


SERIES = scaling.Series("dilated_gather_math", "dilated", "gather", "math")


def test_a_series_stops_after_a_point_over_the_budget_and_says_why():
    sweep = FakeSweep(config_with([128, 256, 512, 1024]), {128: 100.0, 256: 1500.0})
    sweep.run(SERIES, "fwd")
    rows = sweep.rows
    assert [r.status for r in rows] == ["ok", "ok", "skipped", "skipped"]
    assert rows[2].reason.startswith("not run: 256 tokens took 1.50 s per call, over the 1 s budget")
    assert "predicted 6.0 s per call here" in rows[2].reason and "24.0 s per call here" in rows[3].reason
    assert rows[3].extra["not_run"] and rows[3].extra["pattern"] == "dilated"


def test_a_series_does_not_start_a_point_predicted_far_over_the_budget():
    sweep = FakeSweep(config_with([128, 256, 512]), {128: 600.0, 256: 900.0})
    sweep.run(scaling.Series("sdpa_math", "dense", None, "sdpa_math"), "fwd")
    assert [r.status for r in sweep.rows] == ["ok", "skipped", "skipped"]
    assert "predicted 2.4 s per call" in sweep.rows[1].reason  # 0.6 s x (256/128)^2 > 2 x the 1 s budget
    assert "predicted 9.6 s per call" in sweep.rows[2].reason  # its own length, not 256's number again
    assert sweep.rows[1].family == "sdpa"


def test_out_of_memory_stops_with_oom_rows_and_unavailable_is_one_row():
    sweep = FakeSweep(config_with([128, 256, 512]), {128: 10.0, 256: "oom"})
    sweep.run(SERIES, "fwd")
    assert [r.status for r in sweep.rows] == ["ok", "oom", "oom"]
    assert sweep.rows[2].reason == "not run: out of memory at 256 tokens, a shorter length"
    sweep = FakeSweep(config_with([128, 256, 512]), {128: "unavailable"})
    sweep.run(SERIES, "fwd")
    assert [r.status for r in sweep.rows] == ["unavailable"]


def test_a_point_predicted_out_of_memory_is_never_started():
    gib = 2**30
    plan = {128: (1.0, 10 * gib), 256: (2.0, 20 * gib), 512: (4.0, 40 * gib), 1024: (8.0, 80 * gib)}
    sweep = FakeSweep(config_with([128, 256, 512, 1024]), plan, free=60 * gib)
    sweep.run(SERIES, "fwd")
    assert sweep.measured == [128, 256, 512]  # 1024 would need 80 GiB (linear) of the 60 free
    assert [r.status for r in sweep.rows] == ["ok", "ok", "ok", "oom"]
    assert sweep.rows[3].reason.startswith("not run: predicted out of memory, 80.0 GiB (from 40.0 GiB at 512")
    assert scaling.predict_memory(None, 1024) is None


def test_a_series_budget_ends_the_series():
    sweep = FakeSweep(config_with([128, 256]), {128: 10.0, 256: 10.0})
    sweep.run(scaling.Series("dilated_flex", "dilated", "flex", None, budget_s=0.0), "fwd")
    assert sweep.rows[0].status == "skipped" and "this series' time budget" in sweep.rows[0].reason


def test_breakdown_measures_the_kernel_share():
    config = profiles.resolve("smoke", cuda=False)
    config["breakdown"].update(seq_lens=[128], passes=["fwd"])
    (entry,) = checks.breakdown(config, device="cpu", timing_options=config["timing"])
    assert entry["status"] == "ok" and 0 < entry["kernels_ms"] and entry["kernel_calls"] == 6
    assert entry["total_ms"] > 0 and entry["other_ms"] >= 0


def row(provider, n, pass_, ms, world=None, dilated=True, status="ok", reason=""):
    extra = {"pattern": "dilated", "pairs": 2000 * n * 4, "flops_fwd": 1.0} if dilated else {}
    if world is not None:
        extra["world_size"] = world
    return Result(provider, "dilated" if dilated else "sdpa", status, workload(n), pass_, reason=reason,
                  ms_median=ms, ms_p20=ms, ms_p80=ms, ok=True if ms else None, extra=extra)  # fmt: skip


def test_distributed_table_computes_strong_and_weak_scaling():
    rows = [row("one", 512, "fwd", 10.0, world=1), row("one", 1024, "fwd", 20.0, world=1),
            row("split", 1024, "fwd", 12.5, world=2)]  # fmt: skip
    (line,) = dilated_distributed.distributed_table(rows).to_dict("records")
    assert line["speedup"] == pytest.approx(1.6)
    assert line["strong-scaling efficiency"] == pytest.approx(0.8)
    assert line["weak-scaling efficiency"] == pytest.approx(0.8) and line["note"] == ""
    # one GPU alone on half the tokens slower than the split run on all of them: flagged, never a result
    rows[0] = row("one", 512, "fwd", 14.0, world=1)
    (line,) = dilated_distributed.distributed_table(rows).to_dict("records")
    assert line["weak-scaling efficiency"] == pytest.approx(1.12)
    assert line["note"].startswith("weak-scaling efficiency above 1: a measurement error, not a result")


def test_a_split_call_is_scored_per_gpu_against_one_gpus_peak():
    """The split version's row: each GPU's share of the pattern's FLOPs against one GPU's datasheet peak.
    Scored on the whole call's FLOPs, this row (60 % of the peak per GPU) would claim 120 %: an error."""

    def timed(gpus):
        r = Result("split", "dilated", "ok", workload(1024), "fwd", ms_median=1.0, timer="perf_counter",
                   extra={"pattern": "dilated", "flops_fwd": 1.2e12})  # fmt: skip
        return measure.finish(r, None, datasheet_tflops=1000.0, gpus=gpus)

    one, split = timed(1), timed(2)
    assert one.status == "error" and "above" in one.reason  # the whole call's FLOPs on one GPU: 120 %
    assert split.status == "ok" and split.tflops == pytest.approx(600.0)
    assert split.mfu_datasheet == pytest.approx(0.6) and split.extra["tokens_per_s"] == pytest.approx(1024e3)


def test_distributed_table_says_which_timed_lengths_were_checked():
    rows = [row("one", 512, "fwd", 10.0, world=1), row("split", 512, "fwd", 6.0, world=2),
            row("one", 1024, "fwd", 20.0, world=1), row("split", 1024, "fwd", 12.5, world=2)]  # fmt: skip
    mask = rows[0].workload.mask
    records = [
        {"mask": mask, "seq_len": 512, "status": "ok"},
        {"mask": "other", "seq_len": 1024, "status": "ok"},
    ]
    checks = dilated_distributed.check_verdicts(records)
    lines = dilated_distributed.distributed_table(rows, checks).to_dict("records")
    # another mask's check at 1024 vouches for nothing here
    assert [line["checked"] for line in lines] == [
        "ok", "not checked at this length (checked at 512 tokens: table above)"]  # fmt: skip
    failed = dilated_distributed.check_verdicts([{"mask": mask, "seq_len": 1024, "status": "incorrect"}])
    (line,) = dilated_distributed.distributed_table(rows[2:], failed).to_dict("records")
    assert line["checked"] == "incorrect (table above)"  # a failed check is never "not checked"
    (unlabelled,) = dilated_distributed.distributed_table(rows[2:]).to_dict("records")
    assert unlabelled["checked"] == "not checked"


def test_the_distributed_check_tells_the_headline_where_the_timed_kernels_were_checked():
    from attnbench.report.headline import headline

    def timed(provider, n, world, ms):
        return {"provider": provider, "family": "dilated", "status": "ok", "reason": "", "batch": 1, "seqlen_q": n,
                "seqlen_k": n, "heads_q": 4, "heads_kv": 4, "head_dim": 16, "dtype": "bfloat16", "mask": "causal",
                "pass": "fwd", "ms_median": ms, "tflops": 1.0, "timer": "cuda_event", "ok": None,
                "extra": {"pattern": "dilated", "branches": [[n, 1]], "world_size": world, "backend": "cudnn"}}  # fmt: skip

    rows = [timed("gather", 2048, 1, 2.0), timed("split", 4096, 2, 2.1)]
    good = {"out": {"ok": True}, "dq": {"ok": True}}
    records = [{"mask": "causal", "seq_len": 1024, "world": 2, "backend": "cudnn", "status": "ok",
                "errors": {"distributed": good, "single": good}},
               {"mask": "full", "seq_len": 1024, "world": 2, "backend": "cudnn", "status": "ok",
                "errors": {"distributed": good}}]  # fmt: skip
    checks = dilated_distributed.check_rows(records, rows)
    assert [(c["provider"], c["seqlen_q"], c["ok"], c["ms_median"]) for c in checks] == [
        ("split", 1024, True, None),
        ("gather", 1024, True, None),
    ]  # no timed full rows: no template
    assert "tflops" not in checks[1] and "branches" not in checks[1]["extra"]  # what, not how fast
    bests = {b.provider: b for b in headline(rows + checks).bests}
    assert (bests["split"].checked, bests["split"].checked_at) == (False, "S 1024")
    # a failed check is a failure, never a shorter-length check to cite
    records[0]["errors"]["distributed"] = {"out": {"ok": False}}
    h = headline(rows + dilated_distributed.check_rows(records, rows))
    assert h.incorrect and not {b.provider: b for b in h.bests}["split"].checked_at
    # a check that could not run (no errors measured) says nothing
    assert dilated_distributed.check_rows([{**records[0], "status": "error", "errors": {}}], rows) == []


def test_headline_stops_and_pivot_from_rows():
    rows = [row("dilated_gather_math", 1024, "fwd", 1.0), row("dilated_gather_math", 2048, "fwd", 2.0),
            row("sdpa_math", 1024, "fwd", 4.0, dilated=False),
            row("sdpa_math", 2048, "fwd", None, dilated=False, status="unsupported",
                reason="not run: predicted 9 s per call")]  # fmt: skip
    text = " ".join(report.headline(rows))
    assert "dilated attention reached 2,048 tokens" in text and "(x1.00)" in text
    assert "at 1,024 tokens dilated is 4x faster than dense" in text
    ends = report.stops(rows)
    assert (
        "sdpa_math [forward]: up to 1024 tokens; 2048: unsupported: not run: predicted 9 s per call" in ends
    )
    pivot = report.cost_pivot(rows)
    assert pivot.loc[("forward", "sdpa_math"), 2048] == "stopped"
    assert pivot.loc[("forward", "dilated_gather_math"), 1024] == f"{1.0 * 1e6 / 1024:.4g}"


def test_reference_rows_check_the_definition_against_the_union_form():
    config = profiles.resolve("smoke", cuda=False)
    rows = checks.reference_rows(config, device="cpu")
    assert [r.workload.mask for r in rows] == ["causal", "full"]
    assert all(r.status == "ok" and r.ok and r.rel_l2 < 1e-12 for r in rows)
    assert all(torch.isfinite(torch.tensor(r.extra["lse_max_abs"])) for r in rows)


def test_scaling_table_labels_every_timed_row_checked_or_not():
    checked, failed, unchecked = (
        row("a", 512, "fwd", 1.0),
        row("a", 512, "fwd", 1.0),
        row("a", 1024, "fwd", 2.0),
    )
    failed.ok = False
    unchecked.ok, unchecked.extra["correctness"] = (
        None,
        "not checked at this length (see the correctness rows)",
    )
    bare = row("a", 2048, "fwd", 4.0)
    bare.ok = None
    stopped = row("a", 4096, "fwd", None, status="oom", reason="out of memory")
    table = report.scaling_table([checked, failed, unchecked, bare, stopped])
    assert list(table["checked"]) == [
        "ok", "incorrect", "not checked at this length (see the correctness rows)", "not checked", ""]  # fmt: skip


def test_tables_of_no_rows_are_empty_not_errors():
    assert report.cost_pivot([]).empty and report.scaling_table([]).empty
    assert report.headline([]) == [] and report.stops([]) == []
