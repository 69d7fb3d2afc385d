"""The Flux report's profiles: Flux at 1024x1024 is batch 1, 24 heads of dimension 128, bf16,
non-causal, 4096 image tokens plus 128..512 text tokens."""

from __future__ import annotations

from attnbench.bench.profiles import NOT_GPU, resolve_name

PROFILES = {
    # CPU, tiny: proves the pipeline end to end in seconds. Not a GPU measurement.
    "smoke": {"device": "any", "seq_lens": [288, 320], "heads": 2, "head_dim": 64, "dtype": "bfloat16",
              "timing": {"min_reps": 5, "min_time_ms": 20.0, "warmup_reps": 1, "max_reps": 50}},
    # one GPU, a few minutes: >= 20 repetitions and >= 200 ms of timed GPU time per measurement;
    # its seq_lens are the notebook's params.seq_lens
    "default": {"device": "cuda", "seq_lens": None, "heads": 24, "head_dim": 128, "dtype": "bfloat16",
                "timing": {"min_reps": 20, "min_time_ms": 200.0, "warmup_reps": 3, "max_reps": 2000}},
    "full": {"device": "cuda", "seq_lens": list(range(4096, 5121, 64)), "heads": 24, "head_dim": 128,
             "dtype": "bfloat16",
             "timing": {"min_reps": 50, "min_time_ms": 1000.0, "warmup_reps": 10, "max_reps": 10000}},
}  # fmt: skip


def resolve(profile: str, cuda: bool, seq_lens: list[int], provider_filter: list[str]) -> dict:
    """The config the gpu cell writes to profile.json; auto = default with CUDA, else smoke."""
    name = resolve_name(profile, PROFILES, cuda)
    settings = {k: v for k, v in PROFILES[name].items() if k != "device"}
    if settings["seq_lens"] is None:
        settings["seq_lens"] = list(seq_lens)
    config = {"profile": name, "requested": profile, "device": "cuda" if cuda else "cpu",
              "batch": 1, "mask": "full", "passes": ["fwd", "fwd_bwd"], "provider_filter": list(provider_filter),
              **settings}  # fmt: skip
    if name == "smoke":
        config["label"] = NOT_GPU
    return config
