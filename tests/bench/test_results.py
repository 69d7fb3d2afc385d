"""Result rows: JSONL round trip and validation."""

import json

import pytest

from attnbench.rows import (
    Result,
    Workload,
    best_by_workload,
    is_quantized,
    read_jsonl,
    speedup_over,
    to_frame,
    usable,
    write_jsonl,
)


def rows():
    docs = Workload(2, 96, 96, 8, 2, 64, mask="document", doc_lens=(32, 64))
    flux = Workload(1, 4352, 4352, 24, 24, 128)
    return [
        Result(
            "sdpa_cudnn",
            "sdpa",
            "ok",
            flux,
            "fwd",
            ms_median=0.38,
            ms_p20=0.37,
            ms_p80=0.39,
            reps=120,
            tflops=606.0,
            mfu=0.78,
            peak_mem_bytes=123,
            setup_ms=5.5,
            timer="cuda_event",
            max_abs=1e-3,
            mean_abs=1e-5,
            rel_l2=2e-3,
            ok=True,
            env="h200-abc",
            extra={"correctness": {"out": {"ok": True}}},
        ),
        Result(
            "flex",
            "flex",
            "incorrect",
            docs,
            "fwd_bwd",
            reason="dq: rel_l2 0.3 > 0.04",
            ms_median=1.0,
            ok=False,
        ),
        Result("xformers", "xformers", "unavailable", flux, reason="not installed (no module 'xformers')"),
    ]


def test_jsonl_round_trip(tmp_path):
    path = tmp_path / "results.jsonl"
    write_jsonl(path, rows()[:2])
    write_jsonl(path, rows()[2:], append=True)
    back = read_jsonl(path)
    assert back == rows()
    assert back[1].workload.doc_lens == (32, 64)
    assert back[2].ms_median is None and back[2].ok is None


def test_jsonl_schema_is_flat_with_pass(tmp_path):
    path = tmp_path / "results.jsonl"
    write_jsonl(path, rows())
    first = json.loads(path.read_text().splitlines()[0])
    for key in (
        "provider",
        "family",
        "status",
        "reason",
        "batch",
        "seqlen_q",
        "seqlen_k",
        "heads_q",
        "heads_kv",
        "head_dim",
        "dtype",
        "mask",
        "window",
        "doc_lens",
        "pass",
        "ms_median",
        "ms_p20",
        "ms_p80",
        "reps",
        "tflops",
        "mfu",
        "peak_mem_bytes",
        "setup_ms",
        "max_abs",
        "mean_abs",
        "rel_l2",
        "ok",
        "env",
    ):
        assert key in first
    assert "pass_" not in first and "workload" not in first
    assert json.loads(path.read_text().splitlines()[1])["doc_lens"] == [32, 64]


def test_unknown_field_names_file_and_line(tmp_path):
    path = tmp_path / "results.jsonl"
    write_jsonl(path, rows())
    lines = path.read_text().splitlines()
    bad = json.loads(lines[1])
    bad["latency"] = 3
    lines[1] = json.dumps(bad)
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=r"results.jsonl:2: .*unknown result fields: \['latency'\]"):
        read_jsonl(path)


def test_bad_values_are_rejected():
    flux = Workload(1, 16, 16, 2, 2, 8)
    with pytest.raises(ValueError, match="status"):
        Result("p", "f", "fast", flux)
    with pytest.raises(ValueError, match="pass"):
        Result("p", "f", "ok", flux, "forward")
    with pytest.raises(ValueError, match="mask"):
        Workload(1, 16, 16, 2, 2, 8, mask="diagonal")
    with pytest.raises(ValueError, match="multiple"):
        Workload(1, 16, 16, 3, 2, 8)
    with pytest.raises(ValueError, match="window"):
        Workload(1, 16, 16, 2, 2, 8, mask="sliding_window")
    with pytest.raises(ValueError, match="doc_lens"):
        Workload(1, 16, 16, 2, 2, 8, mask="document", doc_lens=(8, 4))
    with pytest.raises(ValueError, match="block_causal"):
        Workload(1, 16, 16, 2, 2, 8, mask="block_causal")


def test_to_frame_has_one_row_per_result():
    frame = to_frame(rows())
    assert list(frame["provider"]) == ["sdpa_cudnn", "flex", "xformers"]
    assert list(frame["pass"]) == ["fwd", "fwd_bwd", "fwd"]


def _timed(provider, ms, status="ok", ok=True, seq=4352, pass_="fwd", **extra):
    w = Workload(1, seq, seq, 24, 24, 128)
    return Result(
        provider,
        provider.split("_")[0],
        status,
        w,
        pass_,
        ms_median=ms,
        ok=ok,
        extra=extra,
        rel_l2=None if ok is None else 2e-3,
    )


def test_best_skips_incorrect_unchecked_and_unmeasured_rows():
    rows = [
        _timed("sdpa_flash", 0.75),
        _timed("sdpa_cudnn", 0.41),
        _timed("broken", 0.01, status="incorrect", ok=False),  # fastest, wrong
        _timed("unchecked", 0.02, ok=None),  # reference failed: not known to be right
        Result("oom", "x", "oom", _timed("x", 1.0).workload, reason="OutOfMemoryError"),
    ]
    assert [r.provider for r in best_by_workload(rows)] == ["sdpa_cudnn"]
    assert [r.provider for r in best_by_workload(rows, require_checked=False)] == ["unchecked"]
    assert not usable(rows[2]) and not usable(rows[2], require_checked=False)


def test_quantised_rows_rank_apart():
    sage = _timed("sage_sageattn", 0.30, quantized=True)
    legacy = _timed("sage_old", 0.20, tolerance={"name": "quantized (int8/fp8)"})  # a row from before the tag
    rows = [_timed("sdpa_cudnn", 0.41), sage, legacy]
    assert is_quantized(sage) and is_quantized(legacy) and not is_quantized(rows[0])
    assert [r.provider for r in best_by_workload(rows, quantized=False)] == ["sdpa_cudnn"]
    assert [r.provider for r in best_by_workload(rows, quantized=True)] == ["sage_old"]
    assert [r.provider for r in best_by_workload(rows)] == ["sage_old"]


def test_best_is_per_workload_and_pass_and_speedup_needs_a_usable_baseline():
    rows = [
        _timed("sdpa_flash", 0.80),
        _timed("sdpa_cudnn", 0.40),
        _timed("sdpa_cudnn", 1.6, pass_="fwd_bwd"),
        _timed("sdpa_flash", 0.70, seq=4224),
        _timed("sdpa_cudnn", 0.35, seq=4224, status="incorrect", ok=False),
    ]
    best = {(r.workload.seqlen_k, r.pass_): r.provider for r in best_by_workload(rows)}
    assert best == {(4352, "fwd"): "sdpa_cudnn", (4352, "fwd_bwd"): "sdpa_cudnn", (4224, "fwd"): "sdpa_flash"}
    speedups = speedup_over(rows, "sdpa_flash")
    assert speedups[("sdpa_cudnn", rows[0].workload, "fwd")] == pytest.approx(2.0)
    assert ("sdpa_cudnn", rows[0].workload, "fwd_bwd") not in speedups  # no sdpa_flash fwd_bwd row
    assert ("sdpa_cudnn", rows[3].workload, "fwd") not in speedups  # incorrect
    assert speedups[("sdpa_flash", rows[3].workload, "fwd")] == 1.0
