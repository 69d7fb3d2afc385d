"""The attention-masks notebook's profiles and the workloads they make.

smoke    CPU, tiny shapes (float32, 4/2 heads of 16, 128 and 256 tokens, window 32, block 64): every mask
         in the registry (those registered at run time included),
         reference against sdpa_math and FlexAttention (eager); every other provider is a row with its
         reason. Seconds. Not a GPU measurement.
default  MagiAttention's kernel benchmark on one H200: batch 1, GQA 64:8, head dim 128, bf16, window
         1024, block 2048, sequence 4k..128k; forward, backward, forward+backward; each row timed for
         at least 100 ms (and 3 calls) after the timing protocol's warm-up, and a time budget per timed
         cell (forward and backward: 480 s; forward + backward: 480 s; the checks are a cell of their
         own) so that each cell fits a 10-minute GPU session: a (provider, mask, pass) series stops at
         its first OOM, and a row whose predicted time does not fit what is left of its cell's budget is
         `skipped` with that reason. Providers are in priority order (the budget runs out at the end of
         the list first), but 30 % of each budget is held for the later tier (the peers and the PyTorch
         baselines) while the first runs, so every provider measures its shorter lengths.
full     the same sweep with more providers and repetitions, no budget.

Correctness is checked once per (provider, mask, pass) at `check.seqlen` with the same mask types; its
documents are the same draws shrunk (documents.pack(shrink=...)), so the short check holds several
documents as the long sequences do. Every timed row carries the check's numbers and its length.
"""

from __future__ import annotations

from attnbench import masks
from attnbench.bench.profiles import NOT_GPU, resolve_name
from attnbench.rows import Workload
from attnbench.studies.attention_masks import documents

K = 1024
# The masks the GPU profiles publish: MagiAttention's benchmark set (the notebook's six masks). The smoke
# profile sweeps every mask in the registry instead (EVERY_REGISTERED_MASK, resolved by `configure`), so a
# mask registered with attnbench.masks.register runs on CPU before anyone spends GPU time on it.
PUBLISHED_MASKS = ("full", "causal", "sliding_window", "varlen_full", "varlen_causal", "varlen_block_causal")
EVERY_REGISTERED_MASK = "every registered mask"

# The kernels the report is about first: the budget runs out in the last tier.
# MagiAttention's kernel is measured both ways the peers issue asks for: tuned (magi_ffa:
# disable_fwd_atomic_reduction) and with its defaults (magi_ffa_default), side by side in the first tier.
FIRST = ["flash_attn3", "magi_ffa", "magi_ffa_default", "cudnn_frontend", "sdpa_cudnn", "flex"]
# the peers (FlashAttention-4, FlashInfer's forward, TE's cuDNN backend) before the PyTorch baselines
THEN = ["flash_attn4", "flashinfer", "te_fused", "xformers", "sdpa_flash", "sdpa_efficient", "sdpa_cudnn_kv_repeated", "sdpa_efficient_kv_repeated",
        "sdpa_math"]  # fmt: skip
DEFAULT_PROVIDERS = FIRST + THEN
# (providers, passes) in the order they run: forward and backward of every kernel before any
# forward + backward (which costs as much as both and adds least, and is measured by a cell of its own:
# measure.STAGES).
SEPARATE, BOTH = ["fwd", "bwd"], ["fwd_bwd"]
DEFAULT_TIERS = [(FIRST, SEPARATE), (THEN, SEPARATE), (FIRST, BOTH), (THEN, BOTH)]

# Forward TFLOP/s assumed for the time estimate (and for a row's first prediction, before the series
# has a measured row): roughly what each reached at 4k tokens on the H200 in the Flux report.
ASSUMED_TFLOPS = {
    "flash_attn3": 600.0,
    "flash_attn3_compiled": 600.0,
    "cudnn_frontend": 550.0,
    "sdpa_cudnn": 550.0,
    "sdpa_cudnn_kv_repeated": 550.0,
    "flex": 330.0,
    "xformers": 600.0,
    "sdpa_flash": 320.0,
    "sdpa_efficient": 160.0,
    "sdpa_efficient_kv_repeated": 160.0,
    "sdpa_math": 25.0,
    # the peers: the H100 numbers of ../shared/wheels (FFA at 16k GQA 64:8; FA4, TE at Flux S=4352)
    "magi_ffa": 600.0,
    "magi_ffa_default": 450.0,
    "flash_attn4": 600.0,
    "flash_attn4_compiled": 600.0,
    "flashinfer": 550.0,
    "te_flash": 550.0,
    "te_fused": 450.0,
    "te_unfused": 80.0,
}
FALLBACK_TFLOPS = 200.0
BACKWARD_RATE = 0.85  # backward TFLOP/s as a fraction of forward (FA3 and cuDNN: ~0.85)

FULL_PROVIDERS = [*DEFAULT_PROVIDERS, "flash_attn3_compiled", "xformers_fa3", "xformers_fa2", "flash_attn2",
                  "flash_attn4_compiled", "te_flash", "te_unfused"]  # fmt: skip


def gpu_workload() -> dict:
    """The GPU profiles' workload (GQA 64:8, head_dim 128, 4k to 128k tokens), fresh for each profile."""
    return {
        "device": "cuda",
        "shape": {"batch": 1, "heads_q": 64, "heads_kv": 8, "head_dim": 128, "dtype": "bfloat16"},
        "seq_lens": [4 * K, 8 * K, 16 * K, 32 * K, 64 * K, 128 * K],
        "window": 1024,
        "block": 2048,
        "doc_shrink": 1,
        "check": {"seqlen": 4 * K, "doc_shrink": 32},
    }


PROFILES: dict[str, dict] = {
    "smoke": {
        "device": "cpu",
        "label": NOT_GPU,
        # float32: CPU bf16 matmuls are slow, and the smoke proves the pipeline, not bf16 numerics
        "shape": {"batch": 1, "heads_q": 4, "heads_kv": 2, "head_dim": 16, "dtype": "float32"},
        "seq_lens": [128, 256],
        "window": 32,
        "block": 64,
        "doc_shrink": 512,  # 256 tokens hold a few documents, like 128k does
        "check": {"seqlen": 128, "doc_shrink": 1024},
        "masks": EVERY_REGISTERED_MASK,
        "providers": ["sdpa_math", "flex_eager", *[p for p in DEFAULT_PROVIDERS if p != "sdpa_math"]],
        "tiers": [
            (["sdpa_math", "flex_eager", *FIRST], SEPARATE),
            (THEN[:-1], SEPARATE),
            (["sdpa_math", "flex_eager", *DEFAULT_PROVIDERS[:-1]], BOTH),
        ],
        "timing": {"min_reps": 2, "min_time_ms": 0.0, "warmup_reps": 0, "max_reps": 2},
        "budget_s": None,
        "fwd_bwd_budget_s": None,
        "row_limit_s": None,
    },
    "default": {
        **gpu_workload(),
        "providers": DEFAULT_PROVIDERS,
        "tiers": DEFAULT_TIERS,
        # >= 100 ms of timed work per row after the protocol's warm-up (bench.timing), as every report
        "timing": {"min_reps": 3, "min_time_ms": 100.0, "warmup_reps": 0, "max_reps": 1000},
        # each timed cell inside a 10-minute GPU session (process start, compiles and one row past the
        # budget, up to row_limit_s, included); the checks (~4 min on an H100 with every peer) run apart
        "budget_s": 480.0,
        "fwd_bwd_budget_s": 480.0,
        # held for the peers' tier while the first runs: on an H100 the first tier alone spent all 480 s
        # (248 rows, up to 128k), and FlashAttention-4, FlashInfer and TE got no row on any mask
        "later_tiers_share": 0.3,
        "row_limit_s": 40.0,
    },
    "full": {
        **gpu_workload(),
        "providers": FULL_PROVIDERS,
        "tiers": [(FULL_PROVIDERS, SEPARATE), (FULL_PROVIDERS, BOTH)],
        "timing": {"min_reps": 10, "min_time_ms": 500.0, "warmup_reps": 2, "max_reps": 200},
        "budget_s": None,
        "fwd_bwd_budget_s": None,
        "row_limit_s": None,
    },
}


CHECK_PASSES = ["fwd", "bwd"]  # forward + backward rows take the worse of the two checks
for _config in PROFILES.values():
    _config.setdefault("masks", list(PUBLISHED_MASKS))
    _config["check_passes"] = CHECK_PASSES
    _config["tiers"] = [[list(providers), list(passes)] for providers, passes in _config["tiers"]]


def resolve(profile: str, cuda: bool) -> str:
    """auto -> default with CUDA, smoke without; a bad name or a GPU profile without CUDA is an error."""
    resolved = resolve_name(profile, PROFILES, cuda)
    return resolved


def configure(profile: str, provider_filter=()) -> dict:
    """A resolved profile's config (a copy); `provider_filter` (names or families) keeps only those
    providers, in every tier; an unknown entry is an error naming it."""
    import copy

    from attnbench.bench import providers

    config = copy.deepcopy(PROFILES[profile])
    config["profile"] = profile
    if config["masks"] == EVERY_REGISTERED_MASK:  # resolved now: masks registered after import count
        config["masks"] = list(masks.REGISTRY)
    unknown = [name for name in config["masks"] if name not in masks.REGISTRY]
    if unknown:
        raise ValueError(
            f"profile {profile!r} names masks {unknown} that are not registered: {masks.names()}"
        )
    if provider_filter:
        keep = {p.name for p in providers.select(list(provider_filter))}
        config["providers"] = [p for p in config["providers"] if p in keep]
        config["tiers"] = [[[p for p in names if p in keep], passes] for names, passes in config["tiers"]]
    return config


def workload(config: dict, mask: str, seqlen: int, doc_shrink: int = 1) -> Workload:
    """The workload of one mask at one length under a resolved profile config."""
    shape, needs = config["shape"], masks.get(mask).needs
    extra = {}
    if "window" in needs:
        extra["window"] = config["window"]
    if "block" in needs:
        extra["block"] = config["block"]
    if "doc_lens" in needs:
        extra["doc_lens"] = documents.pack(seqlen, shrink=doc_shrink)
    return Workload(
        shape["batch"],
        seqlen,
        seqlen,
        shape["heads_q"],
        shape["heads_kv"],
        shape["head_dim"],
        shape["dtype"],
        mask,
        **extra,
    )


def plan(config: dict) -> dict[str, list[Workload]]:
    """{mask: its workloads, ascending in length} for the timed series."""
    return {
        mask: [workload(config, mask, s, config["doc_shrink"]) for s in sorted(config["seq_lens"])]
        for mask in config["masks"]
    }


def check_workloads(config: dict) -> list[Workload]:
    """One workload per mask at the check length (documents shrunk as the profile says)."""
    check = config["check"]
    return [workload(config, mask, check["seqlen"], check["doc_shrink"]) for mask in config["masks"]]


PICTURE = {"tokens": 96, "window": 12, "block": 16, "doc_lens": (30, 50, 16)}


def picture_workload(mask: str) -> Workload:
    """A small workload to draw a mask: 96 tokens, window 12, block 16, documents of 30, 50 and 16."""
    needs, n = masks.get(mask).needs, PICTURE["tokens"]
    extra = {key: PICTURE[key] for key in ("window", "block", "doc_lens") if key in needs}
    return Workload(1, n, n, 1, 1, 8, "float32", mask, **extra)
