"""Units of the CS336 report on CPU: out-of-memory rows, the memory model, the memory timeline, the
profiler attribution's bookkeeping, and the report tables and targets from synthetic rows."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import attnbench.kernels.flash_attention2  # noqa: F401 - first: without a GPU, Triton must start in interpreter mode
from attnbench.bench import clock_windows
from attnbench.report import cs336_published
from attnbench.report import systems as tables
from attnbench.report import systems_kernels as kernel_tables
from attnbench.rows import Result, Workload
from attnbench.studies.cs336_systems import attention_scan, breakdown, memory, profiles, steps


def test_out_of_memory_is_a_row_naming_the_phase(monkeypatch):
    def explode(*args, **kwargs):
        args[-1][0] = "backward"  # the phase train_step would be in
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")

    monkeypatch.setattr(steps, "train_step", lambda *a, **k: explode(*a))
    row = steps.profile_model("tiny", 8, "fp32", steps=2, batch=1, device=torch.device("cpu"),
                              custom_sizes=profiles.PROFILES["smoke"]["custom_sizes"])  # fmt: skip
    assert row["status"] == "oom"
    assert row["reason"].startswith("OutOfMemoryError in backward (step 0): CUDA out of memory")
    assert row["times_ms"]["forward"] == []


def test_a_real_step_on_cpu_fills_every_phase():
    row = steps.profile_model("tiny", 8, "bf16", steps=2, batch=1, device=torch.device("cpu"),
                              custom_sizes=profiles.PROFILES["smoke"]["custom_sizes"])  # fmt: skip
    assert row["status"] == "ok" and all(len(v) == 2 and min(v) > 0 for v in row["times_ms"].values())
    assert row["sm_clock_mhz"] == [None, None] and row["clock_source"] is None  # no clock on a CPU


def test_every_step_records_the_clock_sampled_while_it_ran(monkeypatch):
    from attnbench.bench.clocks import ClockReading

    class Source:
        name = "test source"

        def read(self):
            return ClockReading(sm_mhz=1980.0, power_w=500.0, temperature_c=50.0)

    monkeypatch.setattr(clock_windows, "device_source", lambda device: (Source(), None))
    row = steps.profile_model("tiny", 8, "fp32", steps=3, batch=1, device=torch.device("cpu"),
                              custom_sizes=profiles.PROFILES["smoke"]["custom_sizes"])  # fmt: skip
    assert row["status"] == "ok" and row["clock_source"] == "test source"
    assert row["sm_clock_mhz"] == [1980.0] * 3 and row["power_w"] == [500.0] * 3
    row["peak_tflops"] = 1.0
    assert tables.step_table([row], "fp32", warmup=1, measured=2).iloc[0]["SM clock MHz"] == "1980"


def test_memory_model_and_where_eager_runs_out():
    model = attention_scan.memory_model(batch=8, seq=8192, d_model=16)
    assert model["before_backward"] == 8 * 8192**2 * 4 + 5 * 8 * 8192 * 16 * 4
    # the write-up measured 2182 "MB" (10^6 bytes, it seems) before the backward at this shape
    assert abs(model["before_backward"] / 1e6 - 2182) / 2182 < 0.01
    seq = attention_scan.oom_seq_len(141 * 2**30, batch=8, d_model=128)
    fits, over = attention_scan.memory_model(8, seq, 128), attention_scan.memory_model(8, seq + 1, 128)
    assert fits["peak_backward"] <= 141 * 2**30 < over["peak_backward"] and 39_000 < seq < 41_000


def test_memory_timeline_counts_allocations_and_phases():
    snapshot = {"device_traces": [[
        {"action": "alloc", "size": 100, "time_us": 10}, {"action": "alloc", "size": 50, "time_us": 20},
        {"action": "free_requested", "size": 100, "time_us": 25}, {"action": "free_completed", "size": 100, "time_us": 30},
    ]]}  # fmt: skip
    line = memory.timeline(snapshot, [(0, "step 0 forward"), (25, "step 0 backward")], baseline_bytes=7)
    assert line["allocated_bytes"] == [107, 157, 57]
    assert line["phase"] == ["step 0 forward", "step 0 forward", "step 0 backward"]
    assert line["t_ms"] == [0.0, 0.01, 0.02]


def test_kernel_classes_and_summary():
    assert breakdown.kernel_class("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n") == "matmul"
    assert breakdown.kernel_class("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NTN") == "matmul"
    assert (
        breakdown.kernel_class("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4>") == "softmax"
    )
    assert breakdown.kernel_class("void at::native::vectorized_elementwise_kernel<4>") == "other"
    records = [
        {"name": "gemm_a", "us": 30.0, "phase": "forward", "block": "attention", "class": "matmul"},
        {"name": "softmax", "us": 10.0, "phase": "forward", "block": "attention", "class": "softmax"},
        {"name": "gemm_a", "us": 50.0, "phase": "forward", "block": "mlp", "class": "matmul"},
        {"name": "adam", "us": 20.0, "phase": "optimizer", "block": "rest", "class": "other"},
    ]
    summary = breakdown.summarise(records, steps=2)
    forward = summary["forward"]
    assert forward["us_per_step"] == 45.0 and forward["top"][0] == {
        "kernel": "gemm_a", "us_per_step": 40.0, "calls_per_step": 1.0, "share": 80 / 90}  # fmt: skip
    shares = tables.block_share_table({"phases": summary}).set_index("phase")
    assert (
        shares.loc["forward", "attention matmul"] == "33.3%"
        and shares.loc["forward", "mlp matmul"] == "55.6%"
    )
    assert shares.loc["optimizer", "rest (norms, embedding, loss, optimizer)"] == "100.0%"


def _step_row(size, precision, steps_ms, status="ok", reason=""):
    return {"size": size, "context": 128, "batch": 4, "precision": precision, "attention": "eager", "params": 10**8,
            "status": status, "reason": reason, "flops": {"train": 6e12}, "peak_tflops": 600.0,
            "times_ms": {"forward": [s / 4 for s in steps_ms], "backward": [s / 2 for s in steps_ms],
                         "optimizer": [s / 4 for s in steps_ms]},
            "peak_mem_bytes": {"forward": 2**30, "backward": 2 * 2**30, "optimizer": 2**30}}  # fmt: skip


def test_step_tables_warmup_and_oom():
    rows = [
        _step_row("small", "bf16", [100.0, 12.0, 10.0, 10.0]),
        _step_row("2.7B", "bf16", [], "oom", "OOM in forward"),
    ]
    table = tables.step_table(rows, "bf16", warmup=2, measured=2)
    small = table.iloc[0]
    assert (
        small["step ms"] == "10.00 ± 0.00"
        and small["tokens/s"] == "51,200"
        and small[tables.MFU_AT_PEAKS_CLOCK] == "100.0%"
    )
    assert small["peak GiB backward"] == "2.00" and small["SM clock MHz"] == ""  # rows sampled no clock
    assert table.iloc[1]["status"] == "oom" and table.iloc[1]["reason"] == "OOM in forward"
    # a timed step is compared with nothing, and says so; a step that never ran says nothing
    assert small["checked"] == "not checked" and table.iloc[1]["checked"] == ""
    variants = tables.attention_variants_table(rows[:1], warmup=2, measured=2).iloc[0]
    assert variants["checked"] == "not checked" and variants["eager step ms"] == "10.00 ± 0.00"
    assert variants["eager MFU"] == small[tables.MFU_AT_PEAKS_CLOCK]  # the step table's MFU, in both tables
    warm = tables.warmup_table(rows, "bf16", [0, 2], measured=2).iloc[0]
    assert warm["first step ms"] == "100.00" and warm["warm-up 0: step ms"].startswith("56.00 ±")
    assert warm["warm-up 2: step ms"] == "10.00 ± 0.00"


def _result(provider, pass_, ms, timer="cuda_event", status="ok", head_dim=64, seq=16384):
    workload = Workload(1, seq, seq, 16, 16, head_dim, "bfloat16", "causal")
    return Result(provider, "f", status, workload, pass_, ms_median=ms if status == "ok" else None, timer=timer,
                  ok=True if status == "ok" else None, rel_l2=1e-3 if status == "ok" else None,
                  reason="" if status == "ok" else "why")  # fmt: skip


@pytest.mark.parametrize(
    ("ours_fwd", "ours_fb", "met"), [(1.0, 5.0, [True, True]), (2.0, 6.0, [False, False])]
)
def test_targets_met_or_missed_with_the_gap(ours_fwd, ours_fb, met):
    target = [
        _result("triton_fa2", "fwd", ours_fwd, head_dim=128),
        _result("flash_attn3", "fwd", 1.2, head_dim=128),
    ]
    leaderboard = [_result("triton_fa2", "fwd_bwd", ours_fb)]
    checks = kernel_tables.target_checks(leaderboard, target, best_public_ms=5.364, ratio=0.8)
    assert [c["met"] for c in checks] == met
    lines = kernel_tables.target_lines(checks)
    assert lines[0].startswith("met: " if met[0] else "missed: ") and "%" in lines[0]
    document = kernel_tables.targets_document(checks)["targets"]
    assert [t["verdict"] for t in document] == ["met" if m else "missed" for m in met]
    assert document[0]["why"].startswith(f"{1.2 / ours_fwd:.3f} against 0.8 (")  # the page shows the gap too


def test_the_leaderboard_target_takes_the_faster_dq_mode_and_names_it():
    leaderboard = [_result("triton_fa2", "fwd_bwd", 6.2), _result("triton_fa2_atomic_dq", "fwd_bwd", 5.2)]
    checks = kernel_tables.target_checks(leaderboard, [], best_public_ms=5.364, ratio=0.8)
    assert (
        checks[1]["met"] is True
        and checks[1]["value"] == 5.2
        and "(triton_fa2_atomic_dq)" in checks[1]["detail"]
    )


def test_a_leaderboard_target_of_its_own_is_judged_at_most_and_says_by_how_much():
    """On an H200 our kernel ran the leaderboard shape in 5.323 ms: under the best public 5.364 ms, over
    the 5.0 ms target, 6.5 % over."""
    leaderboard = [_result("triton_fa2", "fwd_bwd", 5.323)]
    checks = kernel_tables.target_checks(leaderboard, [], best_public_ms=5.364, ratio=0.85, target_ms=5.0)
    assert checks[1]["met"] is False and checks[1]["target"] == "leaderboard forward+backward <= 5.0 ms"
    assert "against 5.0 (+6.5%)" in kernel_tables.target_lines(checks)[1]
    at_target = kernel_tables.target_checks([_result("triton_fa2", "fwd_bwd", 5.0)], [], best_public_ms=5.364,
                                     ratio=0.85, target_ms=5.0)  # fmt: skip
    assert at_target[1]["met"] is True


def test_the_gap_to_fa3_is_split_by_phase_from_the_kernel_listing():
    profile = {
        "ours": [{"kernel": "flash_bwd_kernel", "us_per_call": 4800.0, "launches_per_call": 1.0},
                 {"kernel": "flash_fwd_kernel", "us_per_call": 1300.0, "launches_per_call": 1.0},
                 {"kernel": "flash_bwd_preprocess", "us_per_call": 20.0, "launches_per_call": 1.0}],
        "flash_attn3": [{"kernel": "flash::FlashAttnBwdSm90<...>", "us_per_call": 2200.0},
                        {"kernel": "flash::FlashAttnFwdSm90<...>", "us_per_call": 1000.0},
                        {"kernel": "flash::FlashAttnBwdPostprocessConvertdQ", "us_per_call": 20.0}],
    }  # fmt: skip
    assert kernel_tables.kernel_split(profile["ours"]) == pytest.approx(
        {"forward": 1.3, "backward": 4.8, "other": 0.02}
    )
    lines = kernel_tables.gap_lines(profile)
    assert lines[0] == "device time of one forward + backward: ours 6.120 ms, FA3 3.220 ms (gap +2.900 ms)"
    assert lines[2] == "backward kernels: ours 4.800 ms, FA3 2.200 ms (2.18x), 90% of the gap"
    assert lines[-1].startswith(
        "SM clock while profiled: ours SM clock not recorded"
    )  # bare lists: old files
    assert kernel_tables.gap_lines({"ours": profile["ours"], "flash_attn3_reason": "not installed"}) == [
        "not profiled: not installed"
    ]


def test_targets_are_not_judged_on_cpu_timings_or_missing_rows():
    cpu = [_result("triton_fa2", "fwd_bwd", 300.0, timer="perf_counter")]
    assert all(
        c["met"] is None and "not judged" in c["detail"]
        for c in kernel_tables.target_checks(cpu, [], best_public_ms=5.364, ratio=0.8)
    )
    missing = kernel_tables.target_checks(
        [], [_result("flash_attn3", "fwd", 1.0, status="unavailable")], best_public_ms=5.364, ratio=0.8
    )
    assert [c["met"] for c in missing] == [None, None]
    assert kernel_tables.target_lines(missing)[0].startswith("not checked: ")


def test_kernel_table_in_the_seed_layout():
    rows = [
        _result("torch_eager", p, ms, seq=4096) for p, ms in (("fwd", 4.0), ("bwd", 8.0), ("fwd_bwd", 12.0))
    ]
    rows += [
        _result("triton_fa2", p, ms, seq=4096) for p, ms in (("fwd", 1.0), ("bwd", 2.0), ("fwd_bwd", 3.0))
    ]
    rows += [_result("flash_attn3", "fwd", None, status="unsupported", seq=4096)]
    entry = kernel_tables.kernel_table(rows).iloc[0]
    assert (entry["ft_torch"], entry["fbt_triton"], entry["speedup_fwd_bwd"]) == ("4.000", "3.000", "4.0x")
    assert entry["triton correct"] == "ok (1.0e-03)" and entry["ft_FA3"] == "—"
    assert kernel_tables.not_run_reasons(rows) == ["flash_attn3: unsupported: why (1 rows)"]


def test_the_write_ups_tables_parse():
    flash = tables.parse_markdown_table(cs336_published.FLASH_TABLE)
    assert len(flash) == 54 and list(flash.columns)[:3] == ["seq_len", "d_model", "precision"]
    scan = tables.parse_scan_text(cs336_published.ATTENTION_SCAN)
    assert len(scan) == 20 and (scan["fwd(ms)"] == "OOM").sum() == 4
    assert len(tables.parse_markdown_table(cs336_published.PROFILE_FORWARD_BACKWARD)) == 2


def test_profiles_resolve_and_estimate():
    assert profiles.resolve("auto", cuda=False)["profile"] == "smoke"
    with pytest.raises(ValueError, match="needs CUDA"):
        profiles.resolve("default", cuda=False)
    with pytest.raises(ValueError, match="params.profile must be"):
        profiles.resolve("huge", cuda=True)
    estimate = profiles.estimate_seconds(profiles.resolve("default", cuda=True))
    # every timed row pays the steady-state warm-up (>= 1 s): the default profile is ~40 minutes of cells,
    # each well inside one 10-minute command (the kernel table is cut into six cells for it)
    assert 1800 < estimate["total"] < 3000  # 3303ff0 on an H200: ~42 min (fp32 64 + 128 past 9.7 alone)
    assert all(v < 480 for k, v in estimate.items() if k != "total"), estimate
    whole = {**profiles.TABLE_CELLS, "kernels_bf16": ("bfloat16", (16, 32, 64, 128))}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(profiles, "TABLE_CELLS", whole)
        assert (
            profiles.estimate_seconds(profiles.resolve("default", cuda=True))["kernels_bf16"] > 540
        )  # would not fit


def test_the_kernel_table_is_cut_by_head_dim_into_its_cells():
    for name, config in profiles.PROFILES.items():  # every (dtype, head dim) of a table in exactly one cell
        table = config["table"]
        pairs = [(dtype, d) for cell in profiles.TABLE_CELLS for dtype, part in [profiles.table_slice(table, cell)]
                 for d in part["head_dims"]]  # fmt: skip
        assert sorted(pairs) == sorted((dtype, d) for dtype in table["dtypes"] for d in table["head_dims"]), (
            name
        )
    table = profiles.resolve("default", cuda=True)["table"]
    cut = {cell: profiles.table_slice(table, cell) for cell in profiles.TABLE_CELLS}
    assert cut["kernels_fp32_d128"] == ("float32", {**table, "head_dims": [128]})
    # a profile without a cell's head dims (or dtype) leaves that cell nothing to measure
    assert profiles.table_slice({**table, "head_dims": [16, 32]}, "kernels_bf16_d64")[1]["head_dims"] == []
    assert profiles.table_slice({**table, "dtypes": ["bfloat16"]}, "kernels_fp32")[1]["head_dims"] == []
    with pytest.raises(
        ValueError, match="kernel-table cell 'kernels_bf16_wide': the notebook's are kernels_bf16, "
    ):
        profiles.table_slice(table, "kernels_bf16_wide")


def test_the_notebook_has_one_cell_per_kernel_table_cell():
    from attnbench.notebook.document.parse import parse_notebook

    notebook = parse_notebook(Path(__file__).resolve().parents[2] / "notebooks" / "cs336_systems.md")
    calls = {c.id: c.source for c in notebook.cells if "table_cell(" in c.source}
    assert {cell: f'table_cell("{cell}")' in source for cell, source in calls.items()} == dict.fromkeys(
        profiles.TABLE_CELLS, True
    )
    report = next(c for c in notebook.cells if c.id == "kernels_report")
    assert {need.cell for need in report.needs} == {"gpu", *profiles.TABLE_CELLS}
    assert "for cell in TABLE_CELLS" in report.source  # it reads every cell's table


def test_training_setup_is_seeded_and_leaves_the_global_rng_alone():
    size = steps.ModelSize(32, 64, 1, 2)
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    model_a, _, inputs_a, targets_a = steps.training_setup(size, 16, 2, device=torch.device("cpu"), seed=5)
    after = torch.rand(1)
    model_b, optimizer_b, inputs_b, _ = steps.training_setup(size, 16, 2, device=torch.device("cpu"), seed=5)
    _, _, inputs_c, _ = steps.training_setup(size, 16, 2, device=torch.device("cpu"), seed=6)
    assert torch.equal(before, after)  # the global RNG did not move
    assert all(
        torch.equal(a, b) for a, b in zip(model_a.state_dict().values(), model_b.state_dict().values())
    )
    assert torch.equal(inputs_a, inputs_b) and not torch.equal(inputs_a, inputs_c)
    assert torch.equal(inputs_a[:, 1:], targets_a[:, :-1])  # targets are the inputs shifted by one
    assert optimizer_b.param_groups[0]["weight_decay"] == 0.01
