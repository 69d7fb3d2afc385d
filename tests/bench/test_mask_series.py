"""The masks report's series driver on a CPU: checks carried to timed rows, and the stop rules (OOM,
per-row limit, time budget, stand-in variants) that keep the default profile inside its GPU time."""

from __future__ import annotations

import json

import pytest
import torch

from attnbench import masks
from attnbench.bench import providers
from attnbench.bench.providers import get
from attnbench.bench.providers.sdpa import SdpaProvider
from attnbench.rows import Result, Workload, read_jsonl, read_rows_document
from attnbench.studies.attention_masks import measure, profiles, series

CONFIG = {**profiles.configure("smoke"), "seq_lens": [64, 128, 256]}


class OomAt(SdpaProvider):
    """sdpa_math that runs out of memory from `limit` tokens on."""

    def __init__(self, name: str, limit: int):
        super().__init__(name, "MATH")
        self.limit = limit

    def prepare(self, q, k, v, workload, backward=False):
        if workload.seqlen_q >= self.limit:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 1 TiB")
        return super().prepare(q, k, v, workload, backward)


class RefusesAll(SdpaProvider):
    """sdpa_math whose library refuses every input at run time (as torch refuses EFFICIENT_ATTENTION)."""

    def __init__(self, name: str):
        super().__init__(name, "MATH")

    def prepare(self, q, k, v, workload, backward=False):
        from attnbench.bench.providers.base import Unsupported

        raise Unsupported("refused by the library")


def _run(tiers, budget=None, checks=(), masks=("causal",)):
    plan = {m: ws for m, ws in profiles.plan(CONFIG).items() if m in masks}
    return series.run_series(tiers, plan, device="cpu", timing_options=CONFIG["timing"],
                             budget=budget or series.Budget(), checks=list(checks), env_id="test",
                             progress=None)  # fmt: skip


def _by(rows, provider, pass_="fwd"):
    return {r.workload.seqlen_q: r for r in rows if r.provider == provider and r.pass_ == pass_}


def test_an_oom_stops_the_series_and_says_so():
    rows = _by(_run([([OomAt("oom_at_128", 128)], ["fwd"])]), "oom_at_128")
    assert rows[64].status == "ok" and rows[128].status == "oom"
    assert rows[256].status == "oom" and rows[256].reason.startswith(
        "not attempted: out of memory at seqlen 128"
    )


def test_a_spent_budget_skips_rows_but_not_the_free_ones():
    rows = _run([([get("sdpa_math"), get("flash_attn3")], ["fwd"])], budget=series.Budget(seconds=0.0))
    math, fa3 = _by(rows, "sdpa_math"), _by(rows, "flash_attn3")
    assert all(r.status == "skipped" and "budget" in r.reason for r in math.values())
    assert all(r.status in ("unavailable", "unsupported") for r in fa3.values())  # cost nothing: still rows


def test_the_per_row_limit_stops_a_series_at_its_first_long_row(monkeypatch):
    monkeypatch.setitem(profiles.ASSUMED_TFLOPS, "sdpa_math", 1e-12)  # predicted: forever
    rows = _by(_run([([get("sdpa_math")], ["fwd"])], budget=series.Budget(row_limit_s=5.0)), "sdpa_math")
    assert [r.status for r in rows.values()] == ["skipped"] * 3
    assert all("per-row limit of 5 s" in r.reason for r in rows.values())
    assert rows[256].reason != rows[64].reason  # each length carries its own prediction, not the first's


def test_a_stopped_series_predicts_each_length_from_the_nearest_measured_one():
    state = series._Series(last=(series.flops.attention_flops(Workload(1, 64, 64, 4, 2, 16), "fwd"), 2.0))
    state.last_seqlen = 64  # 2 s per call at 64 tokens: 128 costs 4x, 256 costs 16x
    budget = series.Budget(row_limit_s=10.0)
    reasons = [
        series._one(get("sdpa_math"), Workload(1, n, n, 4, 2, 16), "fwd", None, state, None, budget,
                    {"min_reps": 1, "warmup_reps": 0, "min_time_ms": 0.0}, "t", None, None).reason
        for n in (128, 256)
    ]  # fmt: skip
    # setup call + 1 s warm-up floor (a call is longer: the warm-up is one call) + one timed call
    assert "predicted 24 s for this row (from the measured row at seqlen 64)" in reasons[0]
    assert "predicted 96 s for this row (from the measured row at seqlen 64)" in reasons[1]


def test_a_series_refused_at_run_time_stays_a_refusal_whatever_the_budget(monkeypatch):
    # the model predicts 0.1 s at 64 tokens, 0.4 s at 128 and 1.6 s at 256, over the 1 s per-row limit
    monkeypatch.setattr(
        series, "model_seconds", lambda provider, w, pass_, timing: 0.1 * (w.seqlen_q / 64) ** 2
    )
    rows = _by(_run([([RefusesAll("refuses")], ["fwd"])], budget=series.Budget(row_limit_s=1.0)), "refuses")
    # a refusal costs no time, so the longer rows are tried (and refused), not skipped for time
    assert [r.status for r in rows.values()] == ["unsupported"] * 3
    assert rows[256].reason == "refused by the library"


class DeclinesShortRows(SdpaProvider):
    """sdpa_math that declares (statically) it cannot run 64 tokens: not a refusal by the library."""

    def __init__(self, name: str):
        super().__init__(name, "MATH")

    def unsupported(self, workload, pass_):
        return "not at 64 tokens" if workload.seqlen_q == 64 else super().unsupported(workload, pass_)


def test_a_declared_unsupported_row_does_not_let_the_next_length_past_the_budget():
    rows = _by(
        _run([([DeclinesShortRows("declines")], ["fwd"])], budget=series.Budget(seconds=0.0)), "declines"
    )
    assert rows[64].status == "unsupported" and rows[64].reason == "not at 64 tokens"
    assert rows[128].status == "skipped" and "budget" in rows[128].reason  # spent: not run as if free


def test_a_later_row_is_predicted_from_the_measured_time_per_call():
    state = series._Series(last=(1.0, 2.0))  # 2 s per call at 1 FLOP: this row would take ages
    w = Workload(1, 64, 64, 4, 2, 16, "float32", "full")
    budget = series.Budget(row_limit_s=1.0)
    row = series._one(
        get("sdpa_math"), w, "fwd", None, state, None, budget, CONFIG["timing"], "t", None, None
    )
    assert row.status == "skipped" and "per-row limit" in row.reason and state.stopped


def _check(provider: str, mask: str, pass_: str, status="ok", ok=True, reason=""):
    w = profiles.check_workloads(CONFIG)[CONFIG["masks"].index(mask)]
    return Result(provider, "sdpa", status, w, pass_, reason=reason, ok=ok, rel_l2=1e-3, max_abs=1e-2,
                  mean_abs=1e-4, extra={"check": True})  # fmt: skip


def test_timed_rows_carry_their_check_and_a_failed_check_makes_them_incorrect():
    checks = [_check("sdpa_math", "causal", "fwd", "incorrect", False, "out: rel_l2 0.5 > 0.002"),
              _check("sdpa_math", "causal", "bwd")]  # fmt: skip
    rows = _run([([get("sdpa_math")], ["fwd", "bwd", "fwd_bwd"])], checks=checks)
    fwd, bwd, both = (_by(rows, "sdpa_math", p) for p in ("fwd", "bwd", "fwd_bwd"))
    assert all(r.status == "incorrect" and "check length 128" in r.reason for r in fwd.values())
    assert all(r.status == "ok" and r.ok and r.extra["checked_at_seqlen"] == 128 for r in bwd.values())
    assert all(r.status == "incorrect" for r in both.values())  # forward+backward takes the worse check


def test_a_row_without_a_passing_check_is_never_called_correct():
    checks = [_check("sdpa_math", "causal", "fwd", "error", None, "RuntimeError: boom")]
    rows = _by(_run([([get("sdpa_math")], ["fwd", "bwd"])], checks=checks), "sdpa_math")
    assert all(r.status == "ok" and r.ok is None and "this was error" in r.reason for r in rows.values())
    bwd = _by(_run([([get("sdpa_math")], ["bwd"])]), "sdpa_math", "bwd")
    assert all(r.ok is None and "no check row" in r.reason for r in bwd.values())


def test_a_kv_repeated_variant_runs_only_where_the_native_provider_did_not():
    stand_in = SdpaProvider("sdpa_math_kv_repeated", "MATH", repeat_kv=True)
    assert stand_in.stands_in_for == "sdpa_math"
    rows = _run([([OomAt("sdpa_math", 128), stand_in], ["fwd"])])
    native, repeated = _by(rows, "sdpa_math"), _by(rows, "sdpa_math_kv_repeated")
    assert (
        native[64].status == "ok" and repeated[64].status == "skipped" and "native GQA" in repeated[64].reason
    )
    assert native[128].status == "oom" and repeated[128].status == "ok"
    assert "K/V repeated 2x" in repeated[128].extra["note"]


def test_the_kv_repeated_variant_is_correct_forward_and_backward_on_cpu():
    from attnbench.bench.sweep import run_sweep

    w = Workload(1, 48, 48, 4, 2, 16, "float32", "causal")
    rows = run_sweep([SdpaProvider("sdpa_math_kv_repeated", "MATH", repeat_kv=True)], [w], ["fwd", "fwd_bwd"],
                     device="cpu", peak_tflops=None, progress=None, env_id="t",
                     timing_options={"min_reps": 1, "warmup_reps": 0, "min_time_ms": 0.0, "max_reps": 1})  # fmt: skip
    assert [r.status for r in rows] == ["ok", "ok"] and all(r.ok for r in rows)


def test_the_estimate_counts_only_rows_a_provider_supports(monkeypatch):
    math = get("sdpa_math")
    plan = profiles.plan(CONFIG)
    est = series.estimate([([math], ["fwd"])], plan, CONFIG["timing"])
    rows = sum(len(ws) for ws in plan.values())
    per_row = [
        series.model_seconds("sdpa_math", w, "fwd", CONFIG["timing"]) for ws in plan.values() for w in ws
    ]
    assert est == {"sdpa_math": pytest.approx(sum(per_row))}
    assert rows == len(CONFIG["masks"]) * len(CONFIG["seq_lens"])
    assert series.estimate([([get("flash_attn3")], ["fwd"])], plan, CONFIG["timing"]) == {}  # not here


def test_the_planned_schedule_keeps_to_the_budget_and_the_row_limit(monkeypatch):
    monkeypatch.setattr(series, "availability", lambda ps: {p.name: None for p in ps})  # as on the GPU
    config = profiles.configure("default")
    tiers = [([get(n) for n in names], passes) for names, passes in config["tiers"]]
    plan = profiles.plan(config)
    free = series.simulate(tiers, plan, config["timing"], series.Budget())
    assert free["skipped"] == {} and free["measured"] > 300
    tight = series.simulate(tiers, plan, config["timing"], series.Budget(60.0, 40.0))
    assert tight["seconds"] <= 60.0 and tight["measured"] < free["measured"]
    assert tight["skipped"].get("sdpa_math") and "sdpa_cudnn_kv_repeated" not in tight["skipped"]  # stand-in


def test_profiles_resolve_and_filter():
    assert (
        profiles.resolve("auto", cuda=False) == "smoke" and profiles.resolve("auto", cuda=True) == "default"
    )
    with pytest.raises(ValueError, match="needs CUDA; this machine has no CUDA device"):
        profiles.resolve("default", cuda=False)
    with pytest.raises(ValueError, match="profile must be"):
        profiles.resolve("huge", cuda=True)
    config = profiles.configure("default", ["flash_attn3", "flex"])
    assert config["providers"] == ["flash_attn3", "flex"]
    assert [names for names, _ in config["tiers"]] == [
        ["flash_attn3", "flex"],
        [],
        ["flash_attn3", "flex"],
        [],
    ]
    assert profiles.PROFILES["default"]["providers"][0] == "flash_attn3"  # the profile itself is untouched
    with pytest.raises(KeyError, match="no provider or family"):
        profiles.configure("default", ["flash_attn9"])


def test_the_timed_cells_split_the_tiers_by_pass_and_keep_their_order():
    from attnbench.studies.attention_masks import measure

    config = profiles.configure("default")
    separate, both = measure.stage_tiers(config, "separate"), measure.stage_tiers(config, "fwd_bwd")
    assert [passes for _, passes in separate] == [["fwd", "bwd"]] * 2 and separate[0][0][0] == "flash_attn3"
    assert [passes for _, passes in both] == [["fwd_bwd"]] * 2 and both[0][0] == profiles.FIRST
    assert (
        measure.stage_budget(config, "separate") == 480.0 and measure.stage_budget(config, "fwd_bwd") == 480.0
    )
    full = profiles.configure("full")
    assert {p for _, ps in measure.stage_tiers(full, "separate") for p in ps} == {"fwd", "bwd"}
    with pytest.raises(ValueError, match="stage must be one of checks, separate, fwd_bwd; got 'both'"):
        measure.stage_tiers(config, "both")
    assert measure.stage_tiers(config, "checks") == []  # the checks stage times nothing
    assert profiles.FIRST[:3] == ["flash_attn3", "magi_ffa", "magi_ffa_default"]  # FFA both ways, first
    with pytest.raises(ValueError, match="the fwd_bwd stage needs the checks stage's folder"):
        measure.run_stage({**profiles.configure("smoke"), "device": "cpu"}, "fwd_bwd")


def test_the_report_reads_both_cells_as_one_sweep(tmp_path):
    import json

    from attnbench.report.stages import read_stages
    from attnbench.rows import Result, write_jsonl

    w = profiles.workload(profiles.configure("default"), "causal", 4096)
    for name, pass_, counts, seconds in (
        ("a", "fwd", {"ok": 2}, 10.0),
        ("b", "fwd_bwd", {"ok": 1, "skipped": 3}, 5.5),
    ):
        (tmp_path / name).mkdir()
        write_jsonl(tmp_path / name / "results.jsonl", [Result("flash_attn3", "flash_attn3", "ok", w, pass_)])
        summary = {"gpu": "H200", "status_counts": counts, "sweep_seconds": seconds, "estimate_s": 1.0,
                   "check_seconds": 2.0 if name == "a" else 0.0, "passes": [pass_]}  # fmt: skip
        (tmp_path / name / "sweep.json").write_text(json.dumps(summary))
    rows, sweep = read_stages(tmp_path / "a", tmp_path / "b")
    assert [r.pass_ for r in rows] == ["fwd", "fwd_bwd"]
    assert sweep["status_counts"] == {"ok": 3, "skipped": 3} and sweep["sweep_seconds"] == 15.5
    assert sweep["gpu"] == "H200" and [s["passes"] for s in sweep["stages"]] == [["fwd"], ["fwd_bwd"]]


PREFIX = 16  # the prefix-LM mask below: the first PREFIX tokens see each other both ways


def _prefix_lm_mod(w, device):
    """Prefix-LM: bidirectional inside the prefix, causal after it (attention-gym's prefix_lm_causal)."""
    from attnbench.masks import mods

    def in_prefix(b, h, q_idx, kv_idx):
        return kv_idx < PREFIX

    return mods.or_masks(mods.causal, in_prefix)


def _prefix_lm_pairs(w) -> int:
    n, p = w.seqlen_q, min(PREFIX, w.seqlen_q)
    return p * p + sum(max(i + 1, p) for i in range(p, n))  # prefix rows see the prefix; then causal


@pytest.fixture
def prefix_lm():
    mask = masks.register(masks.Mask("prefix_lm", "bidirectional prefix, causal after it", build=_prefix_lm_mod,
                                     count=_prefix_lm_pairs, requires=(masks.ANY_MASK,)))  # fmt: skip
    yield mask
    masks.unregister(mask.name)


def test_a_registered_mask_counts_its_pairs_like_its_dense_form(prefix_lm):
    w = Workload(1, 40, 40, 1, 1, 8, "float32", "prefix_lm")
    assert masks.allowed_pairs(w) == int(masks.dense_mask(w).sum()) == 16 * 16 + sum(range(17, 41))


def test_a_mask_registered_here_runs_in_the_smoke_sweep_with_reasons_for_the_rest(
    prefix_lm, tmp_path, monkeypatch
):
    config = profiles.configure("smoke")
    assert config["masks"] == [*masks.REGISTRY]  # the smoke profile sweeps the registry, prefix_lm included
    config = {**config, "masks": ["prefix_lm"], "seq_lens": [64]}  # this mask alone, to stay quick
    monkeypatch.chdir(tmp_path)  # the stage writes its artifacts into the working directory
    measure.run_stage(config, "checks")
    measure.run_stage(config, "separate", first_stage=tmp_path)  # the checks' folder is the working one
    assert json.loads((tmp_path / "sweep.json").read_text())["stage"] == "separate"
    rows = read_jsonl(tmp_path / "results.jsonl")
    checks = read_rows_document(tmp_path / "checks.json")
    assert {r.workload.mask for r in rows} == {"prefix_lm"}
    ran = {r.provider for r in rows if r.status == "ok"}
    assert ran == {"sdpa_math", "flex_eager"}  # the providers with the mask_mod feature that run on CPU
    assert {(r.provider, r.pass_) for r in checks if r.ok} >= {("sdpa_math", "fwd"), ("sdpa_math", "bwd"),
                                                               ("flex_eager", "fwd")}  # fmt: skip
    refused = {r.provider: r.reason for r in rows if r.status == "unsupported"}
    assert all(r.status == "ok" or r.reason for r in rows)
    # a provider without the mask_mod feature refuses it by name (on CPU most are `unavailable` first)
    assert providers.get("flash_attn3").mask_gap("prefix_lm").startswith("mask prefix_lm not supported")
    assert all(
        "prefix_lm" in reason or "backward" in reason or "CUDA" in reason for reason in refused.values()
    )


def test_a_held_share_of_the_budget_leaves_the_later_tier_rows(monkeypatch):
    monkeypatch.setattr(series, "availability", lambda ps: {p.name: None for p in ps})  # as on the GPU
    config = profiles.configure("default")
    tiers = [([get(n) for n in names], passes) for names, passes in measure.stage_tiers(config, "separate")]
    plan = profiles.plan(config)
    later = {p.name for p in tiers[1][0]}

    def later_rows(share: float) -> int:
        schedule = series.simulate(
            tiers, plan, config["timing"], series.Budget(480.0, 40.0, later_share=share)
        )
        assert schedule["seconds"] <= 480.0
        supported = sum(1 for p in tiers[1][0] for ws in plan.values() for w in ws for pass_ in tiers[1][1]
                        if not p.unsupported(w, pass_) and not series._native_covers(p, w, pass_, {}))  # fmt: skip
        return supported - sum(n for name, n in schedule["skipped"].items() if name in later)

    assert later_rows(0.0) < later_rows(config["later_tiers_share"])
    assert later_rows(config["later_tiers_share"]) > 20


def test_a_held_share_is_named_in_the_skip_reason_and_freed_for_the_last_tier():
    budget = series.Budget(seconds=0.001, later_share=0.5)
    rows = _run([([get("sdpa_math")], ["fwd"]), ([get("sdpa_math")], ["bwd"])], budget=budget)
    first = _by(rows, "sdpa_math", "fwd")
    assert all(r.status == "skipped" and "held for the later tiers" in r.reason for r in first.values())
    assert budget.held == 0.0  # the last tier may spend all that is left
    with pytest.raises(ValueError, match="later_share must be in"):
        series.Budget(480.0, later_share=1.0)


def test_no_budget_is_held_for_a_tier_that_cannot_run(monkeypatch):
    """A later tier whose providers are all unavailable here (or a --providers filter that empties it)
    costs nothing: the first tier may spend the whole budget."""
    config = profiles.configure("default", ["flash_attn3"])
    assert [names for names, _ in measure.stage_tiers(config, "separate")] == [["flash_attn3"]]
    monkeypatch.setattr(series, "availability", lambda ps: {p.name: None if p.name == "flash_attn3" else "absent"
                                                            for p in ps})  # fmt: skip
    tiers = [([get("flash_attn3")], ["fwd"]), ([get("sdpa_math")], ["fwd"])]
    held = []

    class Recording(series.Budget):
        def enter_tier(self, index, count):
            super().enter_tier(index, count)
            held.append(self.held)

    plan = profiles.plan(config)
    series.simulate(tiers, plan, config["timing"], Recording(480.0, 40.0, later_share=0.3))
    assert held == [0.0, 0.0]
    monkeypatch.setattr(series, "availability", lambda ps: {p.name: None for p in ps})  # both run: 30 % held
    held.clear()
    series.simulate(tiers, plan, config["timing"], Recording(480.0, 40.0, later_share=0.3))
    assert held == [pytest.approx(144.0), 0.0]
