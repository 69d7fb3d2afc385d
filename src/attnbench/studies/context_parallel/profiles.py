"""The context-parallel notebook's profiles, and what a profile costs on 2x H200 (an estimate).

smoke    CPU, gloo, tiny shapes, kernel cpu_math: proves the pipeline in seconds; not a GPU measurement.
default  the write-up's shape (batch 1, 40 heads x 128, bf16): 128k for every strategy, both masks, forward
         and forward+backward; 256k causal (the target length); light repetition; once with the cuDNN
         local kernel and once with FlashAttention-3's (`extra_kernels`, its own cell). Each cell fits
         one device call of under 10 minutes on 2 GPUs.
full     128k..1M, both masks (out-of-memory rows are expected at 1M on 2 GPUs).
"""

from __future__ import annotations

import math

from attnbench.bench.profiles import NOT_GPU, resolve_name

K = 1024
PUBLISHED_SHAPE = {"batch": 1, "heads": 40, "head_dim": 128, "dtype": "bfloat16"}
# The correctness check runs at the timed shape's heads and head dim, at the longest timed length whose
# check fits one GPU (checks.check_plan states the memory rule); the correctness cell resolves it.
CHECK_RULE = {"heads": "timed", "seq_len": "longest timed length that fits one GPU (checks.check_plan)"}


def overlap(seq_lens: list[int], reps: int) -> dict:
    """The overlap breakdown's settings: ring, zigzag and Ulysses, causal forward+backward."""
    return {
        "strategies": ["ring", "zigzag", "ulysses"],
        "seq_lens": seq_lens,
        "mask": "causal",
        "pass": "fwd_bwd",
        "reps": reps,
    }


def gpu_profile(
    *,
    points: list,
    timing: dict,
    overlap_seq_lens: list[int],
    overlap_reps: int,
    target_seq: int,
) -> dict:
    """A GPU profile: the write-up's shape with the cuDNN local kernel (and FlashAttention-3's), both passes."""
    return {
        "device": "cuda",
        "kernel": "cudnn",
        "extra_kernels": ["flash_attn3"],
        "shape": PUBLISHED_SHAPE,
        "points": points,
        "passes": ["fwd", "fwd_bwd"],
        "timing": timing,
        "warmup_s": 1.0,
        "correctness": CHECK_RULE,
        "overlap": overlap(overlap_seq_lens, overlap_reps),
        "target_seq": target_seq,
    }


PROFILES: dict[str, dict] = {
    "smoke": {
        "device": "cpu",
        "kernel": "cpu_math",
        "extra_kernels": ["flash_attn3"],  # its rows say why it cannot run on a CPU
        "label": NOT_GPU,
        "shape": {"batch": 1, "heads": 4, "head_dim": 16, "dtype": "bfloat16"},
        "points": [[64, "causal"], [64, "full"], [128, "causal"], [128, "full"]],
        "passes": ["fwd", "fwd_bwd"],
        "timing": {"warmup": 1, "min_reps": 2, "max_reps": 3, "min_time_s": 0.0, "max_time_s": 2.0},
        "warmup_s": 0.05,
        "correctness": CHECK_RULE,
        "overlap": overlap([128], reps=2),
        "target_seq": 128,
    },
    "default": gpu_profile(
        points=[[128 * K, "causal"], [128 * K, "full"], [256 * K, "causal"]],
        timing={"warmup": 1, "min_reps": 3, "max_reps": 10, "min_time_s": 1.0, "max_time_s": 20.0},
        overlap_seq_lens=[128 * K, 256 * K],
        overlap_reps=2,
        target_seq=256 * K,
    ),
    "full": gpu_profile(
        points=[[s * K, m] for s in (128, 256, 512, 1024) for m in ("causal", "full")],
        timing={"warmup": 1, "min_reps": 3, "max_reps": 20, "min_time_s": 2.0, "max_time_s": 60.0},
        overlap_seq_lens=[128 * K, 256 * K, 512 * K],
        overlap_reps=3,
        target_seq=256 * K,
    ),
}


def resolve(profile: str, cuda: bool) -> dict:
    """The profile's settings (a copy) with its name; auto = default with CUDA, else smoke."""
    name = resolve_name(profile, PROFILES, cuda)
    config = {"profile": name, "requested": profile, **PROFILES[name]}
    return config


# --- cost model -----------------------------------------------------------------------------------
# Slowest-rank milliseconds per call measured in the first 2x H200 validation run (NVLink, 40 heads x
# 128, bf16, cuDNN) at 128k tokens, causal: every balanced strategy ~150 ms forward / ~580 ms
# forward+backward; the plain ring 224 / 854 ms (its causal work is unbalanced). A full mask costs
# about 2x causal, time grows with seq^2 and shrinks with 1/world (the same work per GPU). A single-GPU
# reference at seq/world tokens does 1/world of a CP rank's work.
BASE_MS = {"fwd": 150.0, "fwd_bwd": 580.0, "bwd": 430.0}
RING_CAUSAL_FACTOR = {"fwd": 224.0 / 150.0, "fwd_bwd": 854.0 / 580.0, "bwd": 630.0 / 430.0}
FULL_FACTOR = 2.0
ROW_OVERHEAD_S = 0.5  # inputs, agreements, allocator release per row
CELL_START_S = 20.0  # torchrun, torch import, NCCL and CUDA start-up per gpus=N cell
OTHER_CELLS_S = 30.0  # gpu, plot, targets, published (pandas/matplotlib imports)
CORRECTNESS_S = 15.0  # start-up, inputs, the strategies' calls at a short length
PEER_PREFIXES = ("te_", "magi")  # other libraries' strategies (attnbench.cp.te_cp, magi_cp)
FP32_TFLOPS = 40.0  # true-fp32 matmul rate assumed for the check's reference (H100/H200, no TF32)


def call_ms(strategy: str, seq_len: int, mask: str, pass_: str, world: int) -> float:
    ms = BASE_MS[pass_] * (seq_len / (128 * K)) ** 2 * 2 / world
    if mask == "full":
        ms *= FULL_FACTOR
    elif strategy == "ring":
        ms *= RING_CAUSAL_FACTOR[pass_]
    return ms


def _reps(ms: float, timing: dict) -> int:
    wanted = max(timing["min_reps"], math.ceil(timing["min_time_s"] * 1e3 / ms))
    return max(1, min(wanted, timing["max_reps"], math.ceil(timing["max_time_s"] * 1e3 / ms)))


def reference_seconds(config: dict, world: int = 2) -> float:
    """The check's fp32 reference at the longest timed length (an upper bound: the check may run
    shorter): 3x the forward FLOPs of both masks (verify.reference_fp32 computes its backward in the same
    pass) at FP32_TFLOPS, its heads split over the ranks (verify.shared_reference)."""
    shape, seq = config["shape"], max(s for s, _ in config["points"])
    forward_full = 4 * shape["batch"] * shape["heads"] * shape["head_dim"] * seq * seq
    return 3 * forward_full * 1.5 / (FP32_TFLOPS * 1e12) / world


def ours(strategies) -> list[str]:
    """Our strategies (the `bench` cells): every name but the other libraries'."""
    return [name for name in strategies if not name.startswith(PEER_PREFIXES)]


def peers(strategies) -> list[str]:
    """Transformer Engine's and MagiAttention's strategies (the `bench_peers` cell, default kernel only)."""
    return [name for name in strategies if name.startswith(PEER_PREFIXES)]


def sweep_seconds(config: dict, strategies, world: int = 2, reference: bool = True) -> float:
    """Seconds one sweep cell spends on `strategies` (and on the single-GPU reference, if it runs one)."""
    timing = config["timing"]
    seconds = config.get("warmup_s", 0.0)
    for seq_len, mask in config["points"]:
        for pass_ in config["passes"]:
            if reference:
                ref = call_ms("zigzag", seq_len, mask, pass_, world) / world
                seconds += ROW_OVERHEAD_S + (1 + _reps(ref, timing)) * ref / 1e3
            for name in strategies:
                ms = call_ms(name, seq_len, mask, pass_, world)
                calls = 1 + timing["warmup"] + _reps(ms, timing)  # rehearsal, warm-up, timed
                seconds += ROW_OVERHEAD_S + calls * ms / 1e3
    return seconds


def overlap_seconds(strategy: str, seq_len: int, spec: dict, world: int = 2) -> float:
    """One breakdown (overlap.py): the checked first call, the real call's steady-state warm-up (whole
    calls until bench.timing.WARMUP_MIN_S has passed), its `reps` timed calls, and the no-op calls' and
    (ring strategies) the exchange's warm-ups of WARMUP_MIN_S each (their calls are short)."""
    from attnbench.bench.timing import WARMUP_MIN_S  # torch: only where a GPU estimate is made

    call_s = call_ms(strategy, seq_len, spec["mask"], spec["pass"], world) / 1e3
    steady = math.ceil(WARMUP_MIN_S / call_s) * call_s
    # overlap.RING_STRATEGIES also time one exchange alone (overlap imports torch, this module does not)
    phases = 2 if strategy in ("ring", "zigzag", "double_ring", "burst") else 1
    return (1 + spec["reps"]) * call_s + steady + phases * WARMUP_MIN_S + ROW_OVERHEAD_S


def estimate_seconds(config: dict, strategies, world: int = 2) -> dict:
    """Seconds the bench cells, overlap and whole notebook should take (2x H200 model; see above). Our
    strategies are timed per local kernel (`bench`, `bench_fa3`); the peers, which run their own kernels,
    once in `bench_peers`: so each cell fits one 10-minute device command."""
    bench = sweep_seconds(config, ours(strategies), world)
    bench_peers = (
        sweep_seconds(config, peers(strategies), world, reference=False) if peers(strategies) else 0.0
    )
    spec = config["overlap"]
    overlap = config.get("warmup_s", 0.0) + sum(
        overlap_seconds(name, seq, spec, world) for name in spec["strategies"] for seq in spec["seq_lens"]
    )
    # each extra local kernel repeats the sweep and the correctness checks in cells of its own
    kernels = 1 + len(config.get("extra_kernels", []))
    # the peers (TE, MagiAttention) run their own kernels: checked and timed with the default kernel only
    check = reference_seconds(config, world) + sum(
        (1 if name.startswith(PEER_PREFIXES) else kernels)
        * 3
        * call_ms(name, max(s for s, _ in config["points"]), m, "fwd_bwd", world)
        / 1e3
        for name in strategies
        for m in ("causal", "full")
    )
    total = (
        kernels * (bench + CELL_START_S)
        + (bench_peers + CELL_START_S if bench_peers else 0.0)
        + CORRECTNESS_S
        + check
        + overlap
        + 2 * CELL_START_S
        + OTHER_CELLS_S
    )
    return {
        "bench_s": round(bench),  # per kernel, our strategies
        "bench_peers_s": round(bench_peers),
        "kernels": kernels,
        "overlap_s": round(overlap),
        "correctness_s": round(CORRECTNESS_S + check),
        "notebook_s": round(total),
        "world": world,
        "model": "2x H200 cost model from the first validation run (profiles.py)",
    }
