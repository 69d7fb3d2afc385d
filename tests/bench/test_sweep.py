"""The sweep on CPU with inline fake providers: every row present, with its reason."""

import collections

import pytest
import torch
import torch.nn.functional as F

from attnbench.bench import inputs, sweep
from attnbench.bench.providers.base import Prepared, Provider, Unsupported
from attnbench.masks import dense_mask
from attnbench.rows import (
    Result,
    Workload,
    best_by_workload,
    is_quantized,
    read_jsonl,
    speedup_over,
    write_jsonl,
)

FAST = {"min_reps": 2, "min_time_ms": 0.0, "warmup_reps": 0}


def attend(q, k, v, w):
    mask = None if w.mask == "full" else dense_mask(w, q.device)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=w.gqa)


class Fake(Provider):
    family = "fake"
    needs_cuda = False
    backward = True
    gqa = True
    dtypes = ("bfloat16", "float32")
    mask_features = ("causal",)

    def __init__(self, name, **attrs):
        self.name = name
        for key, value in attrs.items():
            setattr(self, key, value)

    def prepare(self, q, k, v, workload, backward=False):
        q, k, v = (t.detach().requires_grad_(backward) for t in (q, k, v))
        return Prepared(run=lambda: attend(q, k, v, workload), to_canonical=lambda o: o, inputs=(q, k, v))


class FakeBshd(Fake):
    """Native [b, s, h, d]: checks the dout and gradient layout mapping."""

    layout = "bshd"

    def prepare(self, q, k, v, workload, backward=False):
        q, k, v = (t.detach().transpose(1, 2).contiguous().requires_grad_(backward) for t in (q, k, v))

        def run():
            return attend(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), workload).transpose(1, 2)

        return Prepared(run=run, to_canonical=lambda o: o.transpose(1, 2), inputs=(q, k, v), note="bshd")


class Raising(Fake):
    def prepare(self, q, k, v, workload, backward=False):
        def run():
            raise RuntimeError("kernel exploded\nstack details")

        return Prepared(run=run, to_canonical=lambda o: o)


class Wrong(Fake):
    def prepare(self, q, k, v, workload, backward=False):
        prepared = super().prepare(q, k, v, workload, backward)
        run = prepared.run
        prepared.run = lambda: run() * 1.1
        return prepared


class _ScaleGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        return grad * 3.0


class WrongGrad(Fake):
    """Correct forward, wrong dq."""

    def prepare(self, q, k, v, workload, backward=False):
        q, k, v = (t.detach().requires_grad_(backward) for t in (q, k, v))
        return Prepared(
            run=lambda: attend(_ScaleGrad.apply(q), k, v, workload),
            to_canonical=lambda o: o,
            inputs=(q, k, v),
        )


class Oom(Fake):
    def prepare(self, q, k, v, workload, backward=False):
        def run():
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 80.00 GiB")

        return Prepared(run=run, to_canonical=lambda o: o)


class LateUnsupported(Fake):
    def prepare(self, q, k, v, workload, backward=False):
        raise Unsupported("the library refuses head_dim 16 here")


class BrokenAvailability(Fake):
    def unavailable(self):
        raise ImportError("libcuda.so.1: cannot open shared object file")


PROVIDERS = [
    Fake("good"),
    FakeBshd("good_bshd"),
    Fake("int8ish", quantized=True),
    Fake("missing", unavailable=lambda: "not installed (no module 'x')"),
    Fake("full_only", mask_features=()),  # declares no mask feature: full attention only
    Fake("fwd_only", backward=False),
    Raising("raises"),
    Wrong("wrong"),
    WrongGrad("wrong_grad"),
    Oom("oom"),
    LateUnsupported("late_unsupported"),
    BrokenAvailability("broken"),
    Fake("gpu_only", needs_cuda=True, unavailable=lambda: None),
]
WORKLOADS = [Workload(1, 24, 24, 4, 2, 16, dtype="float32"), Workload(2, 16, 32, 2, 2, 16, mask="causal")]
PASSES = ("fwd", "fwd_bwd", "bwd")


@pytest.fixture(scope="module")
def swept():
    seen = []
    rows = sweep.run_sweep(
        PROVIDERS,
        WORKLOADS,
        PASSES,
        device="cpu",
        env_id="test-machine",
        progress=seen.append,
        timing_options=FAST,
    )
    return rows, seen


def table(rows):
    return {(r.provider, r.workload, r.pass_): r for r in rows}


def test_every_combination_is_a_row_with_progress(swept):
    rows, seen = swept
    assert len(rows) == len(PROVIDERS) * len(WORKLOADS) * len(PASSES)
    assert seen == rows
    assert all(r.env == "test-machine" for r in rows)
    assert all(r.reason for r in rows if r.status != "ok")


def test_good_providers_are_measured_and_checked(swept):
    rows, _ = swept
    for row in rows:
        if row.provider in ("good", "good_bshd"):
            assert row.status == "ok" and row.ok is True, row
            assert row.timer == "perf_counter" and row.reps == 2 and row.ms_median > 0
            assert row.tflops > 0 and row.mfu is None  # no measured peak on CPU
            assert row.setup_ms > 0
            checks = set(row.extra["correctness"])
            assert (
                checks
                == {"fwd": {"out"}, "bwd": {"dq", "dk", "dv"}, "fwd_bwd": {"out", "dq", "dk", "dv"}}[
                    row.pass_
                ]
            )
    assert table(rows)[("good_bshd", WORKLOADS[0], "fwd")].extra["note"] == "bshd"


def test_failure_rows_say_why(swept):
    t = table(swept[0])
    w = WORKLOADS[0]
    assert t[("missing", w, "fwd")].status == "unavailable"
    assert "not installed" in t[("missing", w, "fwd")].reason
    assert t[("full_only", w, "fwd")].status == "ok"
    no_causal = t[("full_only", WORKLOADS[1], "fwd")]
    assert no_causal.status == "unsupported" and "causal" in no_causal.reason
    assert t[("fwd_only", w, "fwd_bwd")].reason == "no backward"
    err = t[("raises", w, "fwd")]
    assert (err.status, err.reason, err.extra["stage"]) == (
        "error",
        "RuntimeError: kernel exploded",
        "first call",
    )
    oom = t[("oom", w, "fwd")]
    assert oom.status == "oom" and oom.reason.startswith("OutOfMemoryError: CUDA out of memory")
    assert t[("late_unsupported", w, "fwd")].status == "unsupported"
    assert "head_dim 16" in t[("late_unsupported", w, "fwd")].reason
    assert t[("broken", w, "fwd")].status == "unavailable" and "libcuda" in t[("broken", w, "fwd")].reason
    assert t[("gpu_only", w, "fwd")].status == "unsupported" and "CUDA" in t[("gpu_only", w, "fwd")].reason


def test_wrong_results_are_incorrect_but_timed(swept):
    t = table(swept[0])
    for w in WORKLOADS:
        row = t[("wrong", w, "fwd")]
        assert row.status == "incorrect" and row.ok is False and row.ms_median is not None
        assert row.reason.startswith("out: rel_l2")
        assert t[("wrong_grad", w, "fwd")].status == "ok"
        for pass_ in ("fwd_bwd", "bwd"):
            bad = t[("wrong_grad", w, pass_)]
            assert bad.status == "incorrect" and bad.reason.startswith("dq:"), bad
            assert bad.extra["correctness"]["dk"]["ok"] and not bad.extra["correctness"]["dq"]["ok"]


def test_best_never_picks_incorrect_rows(swept):
    rows, _ = swept
    # make the wrong provider look fastest: it must still not win
    rigged = [Result(**{**r.__dict__, "ms_median": 1e-9}) if r.provider == "wrong" else r for r in rows]
    best = best_by_workload(rigged)
    assert {(b.workload, b.pass_) for b in best} == {(w, p) for w in WORKLOADS for p in PASSES}
    assert all(b.status == "ok" and b.ok for b in best)
    assert not any(b.provider == "wrong" for b in best)


def test_speedup_over_baseline(swept):
    rows, _ = swept
    speedups = speedup_over(rows, baseline="good")
    assert all(v == 1.0 for (p, _, _), v in speedups.items() if p == "good")
    key = ("good_bshd", WORKLOADS[0], "fwd")
    t = table(rows)
    assert speedups[key] == pytest.approx(t[("good", WORKLOADS[0], "fwd")].ms_median / t[key].ms_median)
    assert not any(p in ("wrong", "oom", "missing") for (p, _, _) in speedups)


def test_quantised_rows_are_tagged_judged_loosely_and_ranked_apart(swept):
    rows, _ = swept
    t = table(rows)
    row = t[("int8ish", WORKLOADS[0], "fwd")]
    assert row.status == "ok" and row.extra["quantized"] is True and is_quantized(row)
    assert row.extra["tolerance"]["name"].startswith("quantized")
    assert not is_quantized(t[("good", WORKLOADS[0], "fwd")])
    assert "quantized" not in t[("good", WORKLOADS[0], "fwd")].extra
    assert all(not is_quantized(b) for b in best_by_workload(rows, quantized=False))
    assert {b.provider for b in best_by_workload(rows, quantized=True)} == {"int8ish"}


def test_rows_survive_jsonl(swept, tmp_path):
    rows, _ = swept
    write_jsonl(tmp_path / "r.jsonl", rows)
    back = read_jsonl(tmp_path / "r.jsonl")
    assert [(r.provider, r.status, r.reason) for r in back] == [
        (r.provider, r.status, r.reason) for r in rows
    ]
    assert [is_quantized(r) for r in back] == [is_quantized(r) for r in rows]
    assert back == rows  # every field, extra included
    # "wrong": every pass of both workloads (its gradients are 1.1x too); "wrong_grad": the two backward passes
    assert collections.Counter(r.status for r in back)["incorrect"] == 6 + 4


def test_without_reference_rows_are_marked_unchecked_and_not_best():
    rows = sweep.run_sweep(
        [Fake("good")],
        WORKLOADS[:1],
        ("fwd",),
        device="cpu",
        reference=False,
        env_id="x",
        progress=None,
        timing_options=FAST,
        peak_tflops={"tf32": 1.0, "fp32": 1.0},  # the peak of the row's math (a CPU fp32 row)
    )
    assert rows[0].status == "ok" and rows[0].ok is None and rows[0].reason.startswith("not checked")
    assert rows[0].mfu == pytest.approx(rows[0].tflops / 1.0)
    assert best_by_workload(rows) == [] and best_by_workload(rows, require_checked=False) == rows


def test_unknown_pass_is_an_error():
    with pytest.raises(ValueError, match="unknown passes"):
        sweep.run_sweep([Fake("good")], WORKLOADS, ("forward",), device="cpu", progress=None)


def test_progress_line_is_printed(capsys):
    sweep.run_sweep(
        [Fake("missing", unavailable=lambda: "nope")], WORKLOADS[:1], ("fwd",), device="cpu", env_id="x"
    )
    out = capsys.readouterr().out
    assert "missing" in out and "unavailable" in out and "nope" in out


def test_canonical_inputs_are_seeded_and_shaped():
    w = Workload(1, 8, 12, 4, 2, 16)
    q, k, v = inputs.make_inputs(w, "cpu", seed=3)
    assert q.shape == (1, 4, 8, 16) and k.shape == v.shape == (1, 2, 12, 16) and q.dtype == torch.bfloat16
    assert torch.equal(q, inputs.make_inputs(w, "cpu", seed=3)[0])
    assert not torch.equal(q, inputs.make_inputs(w, "cpu", seed=4)[0])
