"""The dilated-attention notebook's profiles.

smoke    CPU, tiny shapes (the paper's configuration with every w divided by 128), the math kernel,
         the fused kernel under the Triton interpreter (correctness only), eager FlexAttention (forward only), SDPA math as the dense baseline, 2 gloo ranks: proves the
         pipeline in seconds; not a GPU measurement.
default  one H200 (and 2x H200 for the distributed cells): batch 1, 16 heads x 128, bf16, the paper's
         configuration scaled to each length; correctness at 32k for every implementation and
         backend; the scaling sweep 8k -> 4M (causal, forward and forward+backward) for the gather path
         on cuDNN, FA3 and SDPA-flash, FlexAttention, and dense causal cuDNN and FA3 until a call
         exceeds the time budget. Cell budgets keep every cell under ~8 minutes of wall time.
full     the same with every backend in the sweep, lengths to 8M and longer timing.

Every series stops at the first point whose median call exceeds `call_budget_s`, or whose predicted
time (from the previous points: quadratic for dense, the measured growth for dilated) exceeds twice
it, at an out-of-memory, when its own budget (`flex_budget_s` for FlexAttention) or its sweep's
(`cell_budget_s` for the dilated series, `dense_budget_s` for the dense ones) is spent; the points
after a stop are rows that say why they were not run. The budgets are checked between points, so a
cell can overrun them by about one point (the budget per call x the calls of one point).
"""

from __future__ import annotations

import copy

from attnbench.bench.profiles import NOT_GPU, resolve_name
from attnbench.dilated import pattern

K = 1024
M = K * K
SUITE_BRANCHES = [[2048, 1], [4096, 2], [8192, 4]]  # the paper's first three branches: all fit in 8192

PROFILES: dict[str, dict] = {
    "smoke": {
        "device": "cpu",
        "label": NOT_GPU,
        "shape": {"batch": 1, "heads": 4, "head_dim": 16, "dtype": "bfloat16"},
        "branches": [[b.w, b.r] for b in pattern.scaled(pattern.PAPER_BRANCHES, 128)],
        "branches_note": "the paper's configuration with every segment length divided by 128",
        "extend": True,
        "correctness": {
            "seq_len": 256,
            "masks": ["causal", "full"],
            "backends": "all",
            "fused": True,
            "flex": True,
            "reference_seq_len": 128,
        },
        "sweep": {
            "seq_lens": [128, 256, 512],
            "mask": "causal",
            "passes": ["fwd", "fwd_bwd"],
            "backends": ["math"],
            # the fused kernel runs here under the Triton interpreter (seconds per call at 128 tokens): the
            # correctness cell checks it; timing it would spend the sweep's budget and measure nothing
            "fused": False,
            "flex": True,
            "dense": ["sdpa_math"],
            "call_budget_s": 1.0,
            "flex_budget_s": 10,
            "cell_budget_s": 60,
            "dense_budget_s": 30,
            "check_max_len": 256,
        },
        "timing": {"min_reps": 2, "min_time_ms": 1.0, "warmup_reps": 1, "max_reps": 5},
        "suite_defaults": {
            "batch": 2,
            "seq_len": 256,
            "heads": 8,
            "head_dim": 16,
            "dtypes": ["float32", "bfloat16"],
            "branches": [[64, 1], [128, 2], [256, 4]],
            "backends": ["math"],
        },
        "breakdown": {"seq_lens": [256], "backends": ["math"], "passes": ["fwd", "fwd_bwd"]},
        "distributed": {
            "backend": "math",
            "correctness_seq_len": 256,
            "seq_lens": [256, 512],
            "passes": ["fwd", "fwd_bwd"],
            "warmup_s": 0.05,
            "timing": {"min_reps": 2, "max_reps": 3, "min_time_s": 0.0, "max_time_s": 2.0},
        },
    },
    "default": {
        "device": "cuda",
        "shape": {"batch": 1, "heads": 16, "head_dim": 128, "dtype": "bfloat16"},
        "branches": [list(b) for b in pattern.PAPER_BRANCHES],
        "branches_note": "the paper's configuration",
        "extend": True,
        "correctness": {
            "seq_len": 32 * K,
            "masks": ["causal", "full"],
            "backends": "all",
            "fused": True,
            "flex": True,
            "reference_seq_len": 4 * K,
        },
        "sweep": {
            "seq_lens": [8 * K * 2**i for i in range(10)],
            "mask": "causal",
            "passes": ["fwd", "fwd_bwd"],
            "backends": ["cudnn", "fa3", "sdpa_flash"],
            "fused": True,
            "flex": True,
            "dense": ["sdpa_cudnn", "flash_attn3"],
            "call_budget_s": 2.5,
            "flex_budget_s": 120,
            "cell_budget_s": 330,
            "dense_budget_s": 150,
            "check_max_len": 16 * K,
        },
        "timing": {"min_reps": 5, "min_time_ms": 300.0, "warmup_reps": 1, "max_reps": 100},
        "suite_defaults": {
            "batch": 2,
            "seq_len": 8 * K,
            "heads": 8,
            "head_dim": 64,
            "dtypes": ["float32", "bfloat16"],
            "branches": SUITE_BRANCHES,
            "backends": ["sdpa_efficient", "xformers", "math", "cudnn", "fa3", "sdpa_flash"],
        },
        "breakdown": {"seq_lens": [M], "backends": ["cudnn", "fa3"], "passes": ["fwd", "fwd_bwd"]},
        "distributed": {
            "backend": "cudnn",
            "correctness_seq_len": 64 * K,
            "seq_lens": [256 * K, M, 2 * M, 4 * M],
            "passes": ["fwd", "fwd_bwd"],
            "warmup_s": 1.0,
            "timing": {"min_reps": 3, "max_reps": 10, "min_time_s": 1.0, "max_time_s": 10.0},
        },
    },
}
PROFILES["full"] = copy.deepcopy(PROFILES["default"])
PROFILES["full"]["sweep"].update(
    seq_lens=[8 * K * 2**i for i in range(11)],
    backends=["cudnn", "fa3", "sdpa_flash", "sdpa_efficient", "xformers"],
    call_budget_s=10.0,
    flex_budget_s=600,
    cell_budget_s=3000,
    dense_budget_s=1500,
)
PROFILES["full"]["timing"] = {"min_reps": 10, "min_time_ms": 1000.0, "warmup_reps": 3, "max_reps": 1000}


def resolve(profile: str, cuda: bool) -> dict:
    """The profile's settings (a copy) with its name; auto = default with CUDA, else smoke."""
    name = resolve_name(profile, PROFILES, cuda)
    config = copy.deepcopy(PROFILES[name])
    config["profile"], config["requested"] = name, profile
    return config


def branches_for(config: dict, seq_len: int) -> tuple[pattern.Branch, ...]:
    """The profile's configuration scaled to `seq_len` (clipped, and extended when config["extend"])."""
    return pattern.for_length(config["branches"], seq_len, extend=config["extend"])
