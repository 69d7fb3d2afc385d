"""The context-parallel report's targets, findings, tables and figures, from hand-made rows."""

import pandas as pd
import pytest
from cp_report_helpers import GIB

from attnbench.report.cp_figures import plot_tflops
from attnbench.report.cp_tables import (
    bench_table,
    not_offered,
    overlap_findings,
    overlap_table,
    published_table,
    targets,
    text,
)
from attnbench.rows import Result, Workload


def cp_row(strategy, seq, mask, pass_, tflops, status="ok", world=2, ms=100.0, reason=""):
    return Result(
        provider=f"cp_{strategy}",
        family="cp",
        status=status,
        reason=reason,
        pass_=pass_,
        workload=Workload(1, seq, seq, 40, 40, 128, "bfloat16", mask),
        tflops=tflops,
        ms_median=ms if status == "ok" else None,
        peak_mem_bytes=10 * GIB,
        extra={"world_size": world, "seq_per_gpu": seq // world},
    )


def ref_row(seq, mask, pass_, tflops):
    return Result(
        provider="single_gpu_cudnn",
        family="cp",
        status="ok",
        pass_=pass_,
        tflops=tflops,
        ms_median=50.0,
        workload=Workload(1, seq, seq, 40, 40, 128, "bfloat16", mask),
        extra={"world_size": 1},
    )


def ranks(strategy, seq, totals, kernels, comms, shares):
    return [
        {
            "strategy": strategy,
            "seq_len": seq,
            "mask": "causal",
            "pass": "fwd_bwd",
            "rank": r,
            "status": "ok",
            "total_ms": t,
            "kernel_ms": k,
            "comm_ms": c,
            "work_share": s,
        }
        for r, (t, k, c, s) in enumerate(zip(totals, kernels, comms, shares))
    ]


# --- targets, findings, tables --------------------------------------------------------------------


def sample_rows():
    rows = [ref_row(65536, "causal", "fwd_bwd", 560.0), ref_row(131072, "causal", "fwd_bwd", 600.0)]
    for seq in (131072, 262144):
        rows += [
            cp_row("zigzag", seq, "causal", "fwd_bwd", 530.0 if seq == 131072 else 500.0),
            cp_row("ulysses", seq, "causal", "fwd_bwd", 480.0),
            cp_row("ring", seq, "causal", "fwd_bwd", 360.0),
        ]
    return rows


def test_targets_pass_fail_and_the_measured_why():
    overlap = ranks("ring", 262144, [3400.0, 3390.0], [1100.0, 3300.0], [40.0, 41.0], [0.5, 1.5])
    lines = targets(sample_rows(), overlap, target_seq=262144)
    by = {(line["target"][:4], line["strategy"], line["seq_len"]): line for line in lines}
    zig = by[(">= 9", "zigzag", 131072)]
    assert zig["verdict"] == "pass" and zig["measured"] == pytest.approx(530 / 560)
    uly = by[(">= 9", "ulysses", 131072)]
    assert uly["verdict"] == "FAIL" and "short by" in uly["why"] and "no comm/compute breakdown" in uly["why"]
    ring = by[(">= 4", "ring", 262144)]
    assert ring["verdict"] == "FAIL" and ring["measured"] == 360.0
    assert "short by 10.0%" in ring["why"] and "work imbalance" in ring["why"] and "1.50x" in ring["why"]
    # kernels 1100 and 3300 ms: balanced 2200 each, so 3400 - 1100 ms: 360 x 3400 / 2300 TFLOP/s
    assert "balanced, about 532 TFLOP/s per GPU (estimate)" in ring["why"]
    assert by[(">= 4", "zigzag", 262144)]["verdict"] == "pass"


def test_targets_compare_each_kernel_with_its_own_reference_and_its_own_bar():
    fa3 = [
        cp_row("zigzag+fa3", 131072, "causal", "fwd_bwd", 600.0),
        cp_row("zigzag+fa3", 262144, "causal", "fwd_bwd", 550.0),
        Result(
            provider="single_gpu_flash_attn3",
            family="cp",
            status="ok",
            pass_="fwd_bwd",
            tflops=640.0,
            ms_median=50.0,
            workload=Workload(1, 65536, 65536, 40, 40, 128, "bfloat16", "causal"),
            extra={"world_size": 1, "kernel": "flash_attn3"},
        ),
    ]
    for r in fa3[:2]:
        r.extra["kernel"] = "flash_attn3"
    rows = [*sample_rows(), *fa3]
    for r in rows:
        r.extra.setdefault("kernel", "cudnn")
    lines = targets(rows, [], target_seq=262144)
    by = {(line["target"][:4], line["strategy"], line["seq_len"]): line for line in lines}
    ratio = by[(">= 9", "zigzag+fa3", 131072)]
    assert ratio["measured"] == pytest.approx(600 / 640) and "single-GPU flash_attn3" in ratio["target"]
    assert by[(">= 9", "zigzag", 131072)]["measured"] == pytest.approx(530 / 560)  # still vs cuDNN
    bar = by[(">= 5", "zigzag+fa3", 262144)]
    assert bar["needed"] == 560.0 and bar["verdict"] == "FAIL" and "short by 1.8%" in bar["why"]


def test_strategy_labels_name_non_default_kernels():
    from attnbench.studies.context_parallel.measure import strategy_label

    assert strategy_label("zigzag", None) == strategy_label("zigzag", "cudnn") == "zigzag"
    assert strategy_label("zigzag", "cpu_math") == "zigzag"
    assert strategy_label("ring", "flash_attn3") == "ring+fa3"


def test_targets_fail_an_incorrect_strategy_and_name_missing_lengths():
    checks = [
        {"strategy": "zigzag", "mask": "causal", "status": "incorrect", "reason": "beyond tolerance: dq"}
    ]
    lines = targets(sample_rows(), [], checks, target_seq=524288)
    assert all(
        line["verdict"] == "FAIL" and "correctness" in line["why"]
        for line in lines
        if line["strategy"] == "zigzag" and line["measured"] is not None
    )
    assert {line["verdict"] for line in lines if line["target"].startswith(">= 400")} == {"not measured"}


def test_a_kernel_a_strategy_does_not_take_is_not_applicable_a_missing_library_not_measured():
    own = "kernel 'flash_attn3': TE picks its own local backend"
    rows = [*sample_rows(), cp_row("zigzag+fa3", 262144, "causal", "fwd_bwd", 600.0),
            cp_row("te_p2p", 262144, "causal", "fwd_bwd", 450.0),
            cp_row("te_p2p+fa3", 262144, "causal", "fwd_bwd", None, status="unavailable", reason=own),
            cp_row("magi+fa3", 262144, "causal", "fwd_bwd", None, status="unavailable", reason="not installed")]  # fmt: skip
    verdicts = {line["strategy"]: line["verdict"] for line in targets(rows, [], target_seq=262144)
                if line["target"].startswith(">= 4") or line["target"].startswith(">= 5")}  # fmt: skip
    # TE ran, FA3 ran (zigzag+fa3): TE over FA3 is a combination not offered
    assert verdicts["te_p2p+fa3"] == "not applicable" and not_offered("te_p2p+fa3", rows)
    # magi ran nowhere: its library is missing, which a user can install
    assert verdicts["magi+fa3"] == "not measured" and not not_offered("magi+fa3", rows)
    assert not not_offered("zigzag+fa3", rows) and not not_offered("te_p2p", rows)


def test_overlap_findings_name_the_cause_from_the_numbers():
    imbalance = ranks("ring", 131072, [850.0, 845.0], [280.0, 820.0], [20.0, 20.0], [0.5, 1.5])
    balanced = ranks("zigzag", 131072, [580.0, 578.0], [560.0, 556.0], [20.0, 21.0], [1.0, 1.0])
    comm_bound = ranks("ulysses", 131072, [100.0, 100.0], [40.0, 40.0], [55.0, 55.0], [1.0, 1.0])
    ring, zigzag, ulysses = overlap_findings(imbalance + balanced + comm_bound)
    assert "work imbalance" in ring and "1.50x" in ring and "about 550 ms" in ring
    assert "kernels themselves" in zigzag and "(97%)" in zigzag
    assert "communication that the kernels do not hide" in ulysses


def test_overlap_table_bandwidth_of_one_exchange():
    rows = ranks("ring", 131072, [850.0, 845.0], [280.0, 820.0], [20.0, 20.0], [0.5, 1.5])
    rows[0].update(exchange_ms=4.0, exchange_bytes=1_342_177_280)
    table = overlap_table(rows)
    assert table.exchange_GBps[0] == pytest.approx(335.5, rel=1e-3) and pd.isna(table.exchange_GBps[1])
    assert list(table.work_share) == [0.5, 1.5]


def test_bench_table_ratio_to_the_reference_and_correctness_column():
    checks = [{"strategy": "ring", "mask": "causal", "status": "incorrect", "reason": "beyond tolerance: dk"}]
    table = bench_table(sample_rows(), checks)
    ring = table[(table.strategy == "ring") & (table.seq_len == 131072)].iloc[0]
    assert ring.vs_single_gpu == pytest.approx(360 / 560) and ring.peak_gib == 10.0
    assert ring.correctness == "incorrect: beyond tolerance: dk"
    assert "64.3%" in text(table)
    assert "correctness" not in bench_table(sample_rows()).columns  # not claimed "not checked" when not given
    # rows measured since they carry the check that vouches for them: the column needs no correctness
    rows = sample_rows()
    for r in rows:
        r.extra["checked_by"] = {
            "scope": "exact",
            "ok": r.provider != "cp_ring",
            "reason": "beyond tolerance: dq",
        }
    own = bench_table(rows)
    assert list(own[own.seq_len == 262144].correctness) == ["ok", "ok", "incorrect: beyond tolerance: dq"]


def test_published_table_sets_ours_beside_theirs():
    table = published_table(sample_rows(), our_peak_tflops=989.0, world=2)
    burst = table[(table["published method"] == "BurstAttention") & (table.seq_len == 131072)].iloc[0]
    assert burst["published TFLOP/s/GPU"] == 128.76 and burst["published % peak"] == pytest.approx(
        128.76 / 312
    )
    assert burst["our status"] == "not in this profile" and burst["published tokens/GPU"] == 4096
    zig = table[(table["published method"] == "TE ring (P2P)") & (table.seq_len == 262144)].iloc[0]
    assert zig["our TFLOP/s/GPU"] == 500.0 and zig["our % peak"] == pytest.approx(500 / 989)
    assert zig["our strategy"] == "zigzag" and zig["our tokens/GPU"] == 131072
    te_1m = table[(table["published method"] == "TE ring (P2P)") & (table.seq_len == 1048576)].iloc[0]
    assert pd.isna(te_1m["published TFLOP/s/GPU"])  # "x" in the source: no number


def test_figure_draws_strategies_and_the_reference(tmp_path):
    rows = sample_rows() + [
        cp_row(
            "torch_cp",
            262144,
            "causal",
            "fwd_bwd",
            None,
            status="oom",
            reason="not run: predicted peak 160 GiB",
        )
    ]
    checks = [{"strategy": "ring", "mask": "causal", "status": "incorrect", "reason": "x"}]
    missing = plot_tflops(rows, tmp_path / "t.svg", title="test", correctness=checks)
    svg = (tmp_path / "t.svg").read_text()
    for gid in ("series-zigzag", "series-ulysses", "series-ring", "series-reference"):
        assert f'id="{gid}' in svg
    assert "ring (incorrect)" in svg and "single GPU (cudnn) at seq/2 tokens" in svg
    assert missing == ["cp_torch_cp: oom: not run: predicted peak 160 GiB (S=262144)"]
    # two causal lengths: a bar panel each (lines between two points over every strategy were a tangle)
    assert "causal mask," in svg and "131072 tokens" in svg and "262144 tokens" in svg  # titles on two lines
    assert "total sequence length (tokens)" not in svg


def test_figure_draws_lines_past_two_lengths(tmp_path):
    rows = sample_rows() + [cp_row("zigzag", 524288, "causal", "fwd_bwd", 520.0)]
    plot_tflops(rows, tmp_path / "t.svg", title="test")
    svg = (tmp_path / "t.svg").read_text()
    assert "total sequence length (tokens)" in svg and "131072 tokens" not in svg


def test_cp_figure_colours_peers_by_library_and_styles_lines_by_local_kernel():
    from attnbench.bench import providers
    from attnbench.report.cp_figures import _family
    from attnbench.report.figures import styles

    names = ["te_p2p", "te_a2a", "te_all_gather", "magi", "zigzag", "zigzag+fa3", "usp"]
    assert {_family(n) for n in names} == {"te", "magi_ffa", "zigzag", "usp"}
    looks = styles(names, _family)
    hues = providers.family_hues()
    assert looks["magi"]["color"] == hues["magi_ffa"]
    assert len({looks[n]["color"] for n in ("te_p2p", "te_a2a", "te_all_gather")}) == 3  # shades of TE's hue
    assert len({look["color"] for look in looks.values()}) == len(names)
