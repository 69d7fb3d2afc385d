"""report.py: the correctness and summary tables a reader sees, built from rows alone."""

from __future__ import annotations

import subprocess
import sys

import pytest

from attnbench.report.tables import correctness_table, markdown_table, summary_table, tflops_pivot
from attnbench.rows import Result, Workload

SEQS = (4224, 4352)


def row(provider, seq, ms, pass_="fwd", status="ok", ok=True, rel_l2=2.3e-3, **extra):
    w = Workload(1, seq, seq, 24, 24, 128)
    tol = "quantized (int8/fp8)" if extra.get("quantized") else "bfloat16"
    return Result(
        provider,
        provider.split("_")[0],
        status,
        w,
        pass_,
        ms_median=ms,
        tflops=100.0 / ms,
        mfu=0.1 / ms,
        ok=ok,
        rel_l2=rel_l2,
        max_abs=1e-3,
        mean_abs=1e-4,
        reason="" if ok else "out: rel_l2 0.5 > 0.02",
        extra={"tolerance": {"name": tol}, "mfu_datasheet": 0.08 / ms, **extra},
    )


def sweep_rows():
    rows = []
    for s in SEQS:
        rows += [
            row("sdpa_flash", s, 0.75),
            row("sdpa_cudnn", s, 0.41),
            row("sdpa_cudnn", s, 1.60, "fwd_bwd"),
            row("sdpa_flash", s, 3.00, "fwd_bwd"),
            row("sage_sageattn", s, 0.30 if s == 4224 else 0.50, rel_l2=1.3e-2, quantized=True),
            row("fast_but_wrong", s, 0.05, status="incorrect", ok=False, rel_l2=0.5),
            Result(
                "xformers",
                "xformers",
                "unavailable",
                Workload(1, s, s, 24, 24, 128),
                reason="not installed (no module 'xformers')",
            ),
        ]
    # a NaN-producing kernel: its rel_l2 is not finite, so the row holds None
    rows.append(row("nan_kernel", 4224, 0.2, status="incorrect", ok=False, rel_l2=None))
    return rows


def test_summary_ranks_exact_and_quantised_apart_and_never_an_incorrect_row():
    summary = summary_table(sweep_rows())
    picked = {(r["pass"], r["seq"], r["kind"]): r["best provider"] for _, r in summary.iterrows()}
    assert picked == {
        ("fwd", 4224, "exact"): "sdpa_cudnn",
        ("fwd", 4224, "quantised"): "sage_sageattn",
        ("fwd", 4352, "exact"): "sdpa_cudnn",  # sage is slower there: no quantised row
        ("fwd_bwd", 4224, "exact"): "sdpa_cudnn",
        ("fwd_bwd", 4352, "exact"): "sdpa_cudnn",
    }
    assert "fast_but_wrong" not in set(summary["best provider"]) and "nan_kernel" not in set(
        summary["best provider"]
    )
    first = summary.iloc[0]
    assert first["speedup vs sdpa_flash"] == pytest.approx(0.75 / 0.41)
    assert first["MFU (measured peak at its clock)"] == pytest.approx(0.1 / 0.41)
    assert first["MFU (datasheet)"] == pytest.approx(0.08 / 0.41)
    assert list(summary["pass"]) == ["fwd"] * 3 + ["fwd_bwd"] * 2  # sorted by pass, then sequence
    # over PyTorch's SDPA as the Flux answer takes it: the faster of its flash and cuDNN backends per shape
    both = summary_table(sweep_rows(), baseline=("sdpa_flash", "sdpa_cudnn")).iloc[0]
    assert (
        both["best provider"] == "sdpa_cudnn" and both["speedup vs fastest of sdpa_flash, sdpa_cudnn"] == 1.0
    )


def test_summary_of_nothing_correct_is_empty_with_columns():
    summary = summary_table([row("fast_but_wrong", 4224, 0.05, status="incorrect", ok=False)])
    assert summary.empty and "best provider" in summary.columns


def test_correctness_table_worst_check_failures_and_reasons():
    table = correctness_table(sweep_rows())
    by = {(r["provider"], r["pass"]): r for _, r in table.iterrows()}
    assert by[("sdpa_cudnn", "fwd")]["check"] == "ok" and by[("sdpa_cudnn", "fwd")]["shapes"] == 2
    assert by[("sage_sageattn", "fwd")]["tolerance"].startswith("quantized")
    wrong = by[("fast_but_wrong", "fwd")]
    assert wrong["check"] == "incorrect" and wrong["reason"].startswith("out: rel_l2")
    nan = by[("nan_kernel", "fwd")]  # checked and failed, not "never ran", even without a finite rel_l2
    assert nan["check"] == "incorrect" and nan["shapes"] == 1 and nan["reason"]
    never = by[("xformers", "-")]
    assert (
        never["check"] == "not checked"
        and never["shapes"] == 0
        and never["reason"] == "unavailable: not installed (no module 'xformers')"
    )


def test_tflops_pivot_marks_quantised_and_drops_incorrect():
    pivot = tflops_pivot(sweep_rows())
    assert ("fwd", "sage_sageattn (quantised)") in pivot.index
    assert not any("wrong" in p or "nan" in p for _, p in pivot.index)
    assert list(pivot.columns) == list(SEQS)
    assert pivot.loc[("fwd", "sdpa_cudnn"), 4352] == pytest.approx(100.0 / 0.41)


def test_markdown_table_formats_numbers_blanks_and_escapes():
    text = markdown_table(summary_table(sweep_rows()))
    lines = text.splitlines()
    assert lines[0].startswith("| pass | seq | kind | best provider | ms |") and lines[1].startswith("|---|")
    assert "| fwd | 4224 | exact | sdpa_cudnn | 0.4100 | 243.9 | 24.4% | 19.5% | 1.83x | 2.3e-03 |" in lines
    table = correctness_table(sweep_rows())
    table.loc[0, "reason"] = "a | b"
    md = markdown_table(table)
    assert "a \\| b" in md and "nan" not in md.lower().replace("nan_kernel", "")
    assert "| xformers | - | 0 |  |  |  | not checked |" in md  # missing values are blank, not "None"/"nan"
    pivot_md = markdown_table(tflops_pivot(sweep_rows()), default=lambda v: f"{v:.1f}")
    assert pivot_md.startswith("| pass | provider | 4224 | 4352 |") and "| 243.9 |" in pivot_md


@pytest.mark.timeout(60)
def test_report_and_results_import_without_torch():
    """The summary and correctness cells declare only pandas: these modules must not need torch."""
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "import attnbench.report.tables, attnbench.rows, attnbench.report.figures\n"
        "print('ok')"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr


def test_correctness_table_names_the_checked_tensor_and_an_error_after_a_passed_check():
    """A forward + backward row's figures are its tensor nearest the bound (out, dq, dk or dv): the table
    names it. A row whose values passed but whose timing then failed (TE's backward on a second call)
    keeps "ok" for the values and says the error beside it."""
    grads = {name: {"rel_l2": r, "max_abs": 1e-3, "mean_abs": 1e-4, "ok": True}
             for name, r in (("out", 2.0e-3), ("dq", 2.4e-3), ("dk", 2.3e-3), ("dv", 2.2e-3))}  # fmt: skip
    both = row("sdpa_flash", 4224, 3.0, "fwd_bwd", rel_l2=2.4e-3)
    both.extra["correctness"] = grads
    failed = row("te_fused", 4224, 1.0, "bwd", rel_l2=2.9e-3)
    failed.status, failed.ms_median = "error", None
    failed.reason = "AttributeError: 'NoneType' object has no attribute 'grad_output'"
    table = correctness_table([both, failed, row("te_fused", 4352, 1.0, "bwd", rel_l2=2.8e-3)])
    by = {(r["provider"], r["pass"]): r for _, r in table.iterrows()}
    assert by[("sdpa_flash", "fwd_bwd")]["worst at"] == "S=4224, dq"
    te = by[("te_fused", "bwd")]
    assert te["check"] == "ok" and te["worst at"] == "S=4224"
    assert (
        te["reason"]
        == "error after the check in 1 of 2 shapes: AttributeError: 'NoneType' object has no attribute 'grad_output'"
    )
