"""report.answers: each notebook's question answered from its rows (dilated, CP, CS336, Flux, masks, env)."""

from __future__ import annotations

from answers_helpers import numbers, row, sparse

from attnbench.report.answers import LEADERBOARD_BEST_MS, answer_for
from attnbench.report.headline import headline
from attnbench.report.headline_data import Artifacts


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


def test_context_parallel_efficiency_is_per_gpu_and_single_gpu_is_a_baseline():
    two = {"world_size": 2}
    rows = [row("single_gpu_cudnn", 4096, 1.0, "fwd_bwd", tflops=600.0),
            row("single_gpu_cudnn", 8192, 1.0, "fwd_bwd", tflops=700.0),  # same tokens in all, not per GPU
            row("cp_ring", 8192, 1.1, "fwd_bwd", tflops=540.0, extra=two),
            row("cp_ulysses", 8192, 1.2, "fwd_bwd", tflops=500.0, extra=two)]  # fmt: skip
    a = answer_for("context_parallel", Artifacts(rows=rows))
    (n,) = a.numbers
    assert n.value == 90.0 and n.per == "per GPU"
    assert a.answer == [  # what is compared, then one line a mask and length; the other end named
        "Forward + backward, TFLOP/s per GPU on 2 GPUs against one GPU at the same per-GPU tokens:",
        (
            "causal, S 8192 (4096 per GPU): cp_ring keeps 90% (540 of single_gpu_cudnn's 600 TFLOP/s), the slowest "
            "of 2 on that kernel 83% (cp_ulysses)."
        ),
    ]
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
    assert a.answer[1].startswith("causal, S 8192") and a.answer[2].startswith("full, S 8192")
    assert "not a timing error" in a.caveats[0] and len(a.answer) == 3  # causal 102%: why, under the answer
    assert not any("slowest" in line for line in a.answer)  # one strategy a length: no other end to name


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
    said = answer_for("flux_attention", Artifacts(rows=rows))
    assert said.answer[0] == ("forward at S 4608: fastest exact kernel te_flash (1.000 ms wall; Transformer Engine "
                              "ran flash (3.0.0)), 1.20× the speed of PyTorch's SDPA (sdpa_cudnn, 1.200 ms).")  # fmt: skip
    (text,) = said.caveats  # what qualifies the lead: under the answer, never in it
    assert text.startswith(
        "forward: timed differently: te_flash in bursts queued behind an idle GPU (launch-bound: 0.73 ms of host"
    )
    assert "sdpa_cudnn back to back at the power limit" in text
    alike = [row("flash_attn3", 4608, 1.0, **queued), row("sdpa_cudnn", 4608, 1.2, **queued)]
    assert not answer_for("flux_attention", Artifacts(rows=alike)).caveats


def test_masks_best_and_gaps_of_ffa_and_flex():
    rows = [row("flash_attn3", 4096, 1.0), row("magi_ffa", 4096, 1.5), row("flex", 4096, 2.0)]
    a = answer_for("attention_masks", Artifacts(rows=rows))
    assert numbers(a) == {"causal|4096|magi_ffa": 50.0, "causal|4096|flex": 100.0}  # the length keys it
    assert (
        a.answer[1] == "causal at 4k: flash_attn3, magi_ffa +50%, flex +100%."
    )  # a line a mask, under the header
    assert a.answer[0].startswith("Fastest per mask (forward, at the longest length FFA and Flex both ran")
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
    assert "causal at 32k: flash_attn3, magi_ffa +10%, flex +100%" in a.answer[1]
    only_ffa = answer_for("attention_masks", Artifacts(rows=rows[3:]))
    assert "causal at 64k: flash_attn3, magi_ffa +5.0%, flex did not run" in only_ffa.answer[1]
    alone = answer_for("attention_masks", Artifacts(rows=rows[5:]))
    assert "causal at 128k: sdpa_flash, magi_ffa did not run" in alone.answer[1]


def test_masks_say_how_many_rows_the_time_budget_left_out():
    skipped = {"status": "skipped", "ms_median": None, "reason": "not attempted: predicted 9 s"}
    rows = [row("flash_attn3", 4096, 1.0), row("flex", 4096, 2.0),
            row("flash_attn4", 4096, 1.0, **skipped), row("flash_attn4", 4096, 1.0, "bwd", **skipped)]  # fmt: skip
    said = answer_for("attention_masks", Artifacts(rows=rows)).caveats
    assert said[-1] == ("2 kernel × length rows were not attempted within the profile's time budget (forward 1, "
                        "backward 1); a winner is the fastest of the kernels that ran at that length.")  # fmt: skip
    none = answer_for("attention_masks", Artifacts(rows=rows[:2]))
    assert not any("not attempted" in s for s in none.answer + none.caveats)


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
        "the one-GPU page's fastest kernel (the fused one where it ran) is another path" in answer.caveats[0]
    ) and len(answer.answer) == 1
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


def test_masks_say_where_ffa_wins_costs_and_what_its_default_forward_costs():
    """On an H200: FFA fastest at varlen_block_causal (FA3 cannot express it), 7.6-13 % behind FA3
    elsewhere, and its default forward (atomic reduction) 0.6-37 % slower than without it."""
    rows = [row("flash_attn3", 4096, 1.0), row("magi_ffa", 4096, 1.1), row("flex", 4096, 2.0),
            row("magi_ffa", 4096, 1.0, mask="varlen_block_causal"), row("flex", 4096, 1.7, mask="varlen_block_causal"),
            row("magi_ffa_default", 4096, 1.232), row("magi_ffa_default", 4096, 1.05, mask="varlen_block_causal")]  # fmt: skip
    said = answer_for("attention_masks", Artifacts(rows=rows)).answer
    assert "varlen_block_causal at 4k: magi_ffa, flex +70%." in said  # its own line, under the header
    assert said[-1].startswith(
        "FFA is the fastest at varlen_block_causal; elsewhere it is 10% behind the best"
    )
    assert (
        "(atomic reduction, magi_ffa_default) is 5.0%–12% slower than with disable_fwd_atomic_reduction=True"
        in said[-1]
    )
    assert "over 2 mask × length points" in said[-1]
    no_ffa = answer_for("attention_masks", Artifacts(rows=rows[:1] + rows[2:3])).answer
    assert len(no_ffa) == 2 and "FFA" not in no_ffa[-1]  # the header and one mask: nothing to say of FFA


def test_cs336_names_a_copy_kernel_as_a_copy_not_math():
    step = {"status": "ok", "size": "xl", "context": 1024, "precision": "bf16", "peak_tflops": 1000.0,
            "flops": {"train": 5e14}, "times_ms": {"forward": [400.0], "backward": [600.0], "optimizer": [0.0]}}  # fmt: skip
    breakdown = {"phases": {"forward": {"us_per_step": 1.0}, "backward": {"us_per_step": 3.0,
                 "top": [{"kernel": "unrolled_elementwise_kernel<direct_copy_kernel_cuda>", "share": 0.13}]}}}  # fmt: skip
    data = Artifacts(rows=[], records={"steps_bf16": [step]}, documents={"breakdown": breakdown})
    sink = answer_for("cs336_systems", data).answer[-1]
    assert "13% of it; a copy kernel: dtype casts or .contiguous() copies, not math)" in sink


def test_masks_budget_count_leaves_out_stand_ins_that_gave_way():
    budget = {"status": "skipped", "ms_median": None, "reason": "not attempted: predicted 9 s, 1 s left"}
    gave_way = {
        "status": "skipped",
        "ms_median": None,
        "reason": "not attempted: sdpa_cudnn measured this row",
    }
    rows = [row("flash_attn3", 4096, 1.0), row("flex", 4096, 2.0),
            row("flash_attn4", 4096, 1.0, **budget), row("sdpa_cudnn_kv_repeated", 4096, 1.0, **gave_way)]  # fmt: skip
    said = answer_for("attention_masks", Artifacts(rows=rows)).caveats
    assert said[-1].startswith("1 kernel × length rows were not attempted within the profile's time budget")
