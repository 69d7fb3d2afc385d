"""What the CS336 systems notebook measures, per profile, declared once; and what that costs on an H200.

smoke    CPU, seconds: a tiny model, a tiny attention scan, the Triton interpreter. Not a GPU measurement.
default  one H200: the five model sizes x 4 contexts x fp32/bf16, the attention scan eager and compiled,
         the kernel table (seq 128..64k x head dim 16..128 x bf16/fp32), the leaderboard row, the
         speed targets and a tile audit. Sized for ~13 minutes of GPU time, every cell under 10 minutes.
full     the same with the scan to 32k tokens, every size in the profiler, more repetitions.
"""

from __future__ import annotations

import copy

from attnbench.bench.profiles import NOT_GPU, resolve_name

SIZES = ["small", "medium", "large", "xl", "2.7B"]
K = 1024

# the CS336 leaderboard row: batch 1, 16 heads x 16,384 tokens x head dim 64, bf16, causal, forward+backward
LEADERBOARD = {"batch": 1, "heads": 16, "seq": 16 * K, "head_dim": 64, "dtype": "bfloat16", "mask": "causal"}
BEST_PUBLIC_MS = 5.364  # the best public CS336 leaderboard entry, on an H100 (forward + backward)
LEADERBOARD_TARGET_MS = 5.0  # our kernel's target there: clearly under the best public entry, on our GPU
# the forward speed target: causal, head dim 128, 16k tokens, at least 0.85x FlashAttention-3 in the same run
TARGET_FORWARD = {
    "batch": 1,
    "heads": 16,
    "seq": 16 * K,
    "head_dim": 128,
    "dtype": "bfloat16",
    "mask": "causal",
}
TARGET_RATIO_TO_FA3 = 0.85


def steps(sizes: list[str], *, contexts: list[int], warmups: list[int], measured: int) -> dict:
    """The training-step table's settings: both precisions, batch 4, eager attention."""
    return {
        "sizes": sizes,
        "contexts": contexts,
        "precisions": ["fp32", "bf16"],
        "batch": 4,
        "warmups": warmups,
        "measured": measured,
        "attention": "eager",
    }


def attention_variants(sizes: list[str], *, context: int, precision: str, warmup: int, measured: int) -> dict:
    """The attention-variant comparison's settings: eager, SDPA and our Triton kernel."""
    return {
        "sizes": sizes,
        "context": context,
        "precision": precision,
        "kernels": ["eager", "sdpa", "triton"],
        "warmup": warmup,
        "measured": measured,
    }


PROFILES: dict[str, dict] = {
    "smoke": {
        "device": "cpu",
        "label": NOT_GPU,
        "custom_sizes": {
            "tiny": {"d_model": 64, "d_ff": 128, "num_layers": 2, "num_heads": 4},
            "tiny-wide": {"d_model": 96, "d_ff": 192, "num_layers": 2, "num_heads": 4},
        },
        "steps": steps(["tiny", "tiny-wide"], contexts=[32], warmups=[0, 1, 2], measured=2),
        "attention_variants": attention_variants(
            ["tiny"], context=16, precision="fp32", warmup=1, measured=1
        ),
        "breakdown": {"size": "tiny", "context": 32, "precision": "bf16", "warmup": 1, "steps": 1},
        "memory": {"sizes": ["tiny-wide", "tiny"], "context": 32, "precision": "bf16", "steps": 2},
        "scan": {
            "batch": 8,
            "d_models": [16, 32],
            "seq_lens": [64],
            "iterations": 2,
            "compile_backend": "aot_eager",
        },
        "table": {
            "seq_lens": [64],
            "head_dims": [16, 32, 64, 128],  # one for each kernel-table cell's head dims
            "dtypes": ["bfloat16", "float32"],
            "batch": 1,
            "heads": 1,
            "timing": {"min_reps": 1, "min_time_ms": 0.0, "warmup_reps": 0, "max_reps": 1},
        },
        "kernel_shapes": {
            "leaderboard": {**LEADERBOARD, "heads": 2, "seq": 128, "head_dim": 16},
            "target": {**TARGET_FORWARD, "heads": 2, "seq": 128, "head_dim": 32},
        },
        "kernel_timing": {"min_reps": 1, "min_time_ms": 0.0, "warmup_reps": 0, "max_reps": 1},
        "audit": False,
    },
    "default": {
        "device": "cuda",
        "custom_sizes": {},
        "steps": steps(SIZES, contexts=[128, 256, 512, 1024], warmups=[0, 1, 5], measured=10),
        "attention_variants": attention_variants(
            SIZES, context=1024, precision="bf16", warmup=5, measured=10
        ),
        "breakdown": {"size": "large", "context": 1024, "precision": "bf16", "warmup": 3, "steps": 3},
        "memory": {"sizes": list(reversed(SIZES)), "context": 512, "precision": "bf16", "steps": 2},
        "scan": {
            "batch": 8,
            "d_models": [16, 32, 64, 128],
            # 64k: the memory model says eager attention cannot fit it (P alone is 137 GB): an OOM row
            # that checks the prediction, at no cost (the first S^2 allocation fails)
            "seq_lens": [256, 1 * K, 4 * K, 8 * K, 16 * K, 64 * K],
            "iterations": 100,
            "compile_backend": "inductor",
        },
        "table": {
            "seq_lens": [128 << i for i in range(10)],  # 128 ... 65,536
            "head_dims": [16, 32, 64, 128],
            "dtypes": ["bfloat16", "float32"],
            "batch": 1,
            "heads": 1,
            "timing": {"min_reps": 5, "min_time_ms": 25.0, "warmup_reps": 2, "max_reps": 200},
        },
        "kernel_shapes": {"leaderboard": LEADERBOARD, "target": TARGET_FORWARD},
        "kernel_timing": {"min_reps": 20, "min_time_ms": 300.0, "warmup_reps": 5, "max_reps": 2000},
        "audit": True,
    },
}
PROFILES["full"] = copy.deepcopy(PROFILES["default"])
PROFILES["full"]["steps"]["measured"] = 20
PROFILES["full"]["breakdown"]["size"] = "2.7B"
PROFILES["full"]["scan"]["seq_lens"].insert(-1, 32 * K)
PROFILES["full"]["table"]["timing"] = {
    "min_reps": 20,
    "min_time_ms": 200.0,
    "warmup_reps": 5,
    "max_reps": 2000,
}


def resolve(profile: str, cuda: bool) -> dict:
    """The profile's settings (a deep copy) with its name; auto = default with CUDA, else smoke."""
    name = resolve_name(profile, PROFILES, cuda)
    return {"profile": name, "requested": profile, **copy.deepcopy(PROFILES[name])}


# --- cost model (H200 estimates, seconds; refine from the first run's measured cell durations) -----------
# Training-step time at sustained TFLOP/s: fp32 without TF32 ~50, bf16 autocast ~250 at these small
# batches. Eager attention scan: ~6 memory passes over batch*seq^2 fp32 per forward+backward at ~3 TB/s.
# Triton compiles ~1.5 s per (tile, head dim, dtype); kernel-table rows ~0.15 s each plus the big shapes.
STEP_TFLOPS = {"fp32": 50.0, "bf16": 250.0}
CELL_START_S = 15.0  # python, torch, CUDA context per cell
ROW_WARMUP_S = 1.2  # bench.timing's steady-state warm-up: >= 1 s of load, until clock and time settle
# What a kernel-table cell spends beyond its rows' warm-up floor: once per cell, and per unit of head dim
# (calls at the long sequences grow with it, fp32's true-fp32 kernel most). Fitted to the cells' times at
# 3303ff0 (TABLE_CELLS below).
TABLE_CELL_EXTRA_S = 40.0
TABLE_S_PER_HEAD_DIM = {"bfloat16": 0.7, "float32": 1.7}


# The notebook's kernel-table cells: cell id -> (dtype, head dims). One cell of the whole default table, every
# row under the steady-state warm-up, would outlast a 10-minute GPU command. Measured on an H200 (code
# 3303ff0): head dims 16 + 32 took 6.2 min (bf16) and 6.3 (fp32), 64 + 128 7.8 (bf16) and over 9.7 (fp32,
# stopped on its last shape), hence one cell per wide head dim.
TABLE_CELLS: dict[str, tuple[str, tuple[int, ...]]] = {
    "kernels_bf16": ("bfloat16", (16, 32)),
    "kernels_bf16_d64": ("bfloat16", (64,)),
    "kernels_bf16_d128": ("bfloat16", (128,)),
    "kernels_fp32": ("float32", (16, 32)),
    "kernels_fp32_d64": ("float32", (64,)),
    "kernels_fp32_d128": ("float32", (128,)),
}


def table_slice(config: dict, cell: str) -> tuple[str, dict]:
    """The dtype and the table settings of one kernel-table cell (TABLE_CELLS): of the profile's dtypes and
    head dims, those the cell names, in the profile's order; none where the profile has none of them."""
    if cell not in TABLE_CELLS:
        raise ValueError(f"kernel-table cell {cell!r}: the notebook's are {', '.join(TABLE_CELLS)}")
    dtype, dims = TABLE_CELLS[cell]
    kept = [d for d in config["head_dims"] if d in dims] if dtype in config["dtypes"] else []
    return dtype, {**config, "head_dims": kept}


def estimate_seconds(config: dict) -> dict[str, float]:
    """Rough seconds per GPU cell of the notebook for a resolved profile (printed by the first cell)."""
    from attnbench.models.transformer import SIZES as NAMED
    from attnbench.models.transformer import ModelSize, flops_per_step

    sizes = {**NAMED, **{k: ModelSize(**v) for k, v in config["custom_sizes"].items()}}
    steps = config["steps"]
    n_steps = max(steps["warmups"]) + steps["measured"]
    out = {}
    for precision in steps["precisions"]:
        flops = sum(
            flops_per_step(sizes[s], steps["batch"], c)["train"]
            for s in steps["sizes"]
            for c in steps["contexts"]
        )
        out[f"steps_{precision}"] = (
            CELL_START_S
            + n_steps * flops / (STEP_TFLOPS[precision] * 1e12)
            + 2 * len(steps["sizes"]) * len(steps["contexts"])
        )
    variants = config["attention_variants"]
    flops = sum(
        flops_per_step(sizes[s], steps["batch"], variants["context"])["train"] for s in variants["sizes"]
    )
    n_variant = variants["warmup"] + variants["measured"]
    out["steps_bf16"] += len(variants["kernels"]) * n_variant * flops / (STEP_TFLOPS["bf16"] * 1e12) + 20
    out["breakdown"] = CELL_START_S + 60  # three profiled steps, then the memory history of the largest size
    scan = config["scan"]
    # per iteration: a forward (~6 passes over B*S^2 fp32) and a forward + backward (~20 passes), ~3 TB/s
    fits = [
        s for s in scan["seq_lens"] if 3 * scan["batch"] * s * s * 4 < 140 * 2**30
    ]  # the rest fail at once
    passes = sum(26 * scan["batch"] * s * s * 4 for s in fits) * len(scan["d_models"])
    eager = scan["iterations"] * passes / 3e12
    out["scan"] = (
        CELL_START_S + eager * 1.8 + 40
    )  # the compiled run: similar, plus compiling once per d_model
    table = config["table"]
    # (tile, head dim) pairs our kernel compiles, forward + backward; timed providers per dtype (fp32: eager,
    # ours as TF32 and as true fp32; bf16: eager, ours, cuDNN, FA3 on half the head dims)
    compiles, timed = {"bfloat16": 40, "float32": 22}, {"bfloat16": 3.5, "float32": 3}
    # a timed row: the steady-state warm-up (>= 1 s of load) and then its timed work
    per_row = ROW_WARMUP_S + table["timing"].get("min_time_ms", 0.0) / 1e3
    for name in TABLE_CELLS:
        dtype, part = table_slice(table, name)
        dims = len(part["head_dims"])
        rows = len(table["seq_lens"]) * dims * timed.get(dtype, 3) * 3
        slow = TABLE_CELL_EXTRA_S + TABLE_S_PER_HEAD_DIM.get(dtype, 1.0) * sum(part["head_dims"])
        out[name] = (
            CELL_START_S + rows * per_row + slow * bool(dims) + 1.5 * compiles.get(dtype, 30) * dims / 4
        )
    # + the steady-state warm-up before each of the two device-kernel listings (ours, FA3)
    out["leaderboard"] = CELL_START_S + (90 if config["audit"] else 10) + 2 * ROW_WARMUP_S
    out["total"] = sum(out.values())
    return {k: round(v) for k, v in out.items()}
