"""The Flux report's profiles: Flux at 1024x1024 is batch 1, 24 heads of dimension 128, bf16,
non-causal, 4096 image tokens plus 128..512 text tokens."""

from __future__ import annotations

from attnbench.bench.profiles import NOT_GPU, resolve_name

# rounds: passes over the whole grid, each row its fastest (bench/rounds.py): FA3's forward at these shapes
# lands in one of two power states from run to run, 9-13 % apart; one sweep against another repeated
# with a 95th-percentile spread of 9.2 % (H200), the fastest of two against the fastest of two others 6.1 %.
# preheat: each row timed after a matmul filler brought the GPU back to the temperature a sustained load
# settles at (bench/thermal.py). With two rounds it repeated with p95 0.8 % run against run, 3.2 % between
# the fastest of runs 1-2 and of runs 3-4 (measurements/flux_repeatability-preheat-nvidia-h200.json;
# 17.8 s of filler over four runs, and ~30 s to find the equilibrium in the first)
PROFILES = {
    # CPU, tiny: proves the pipeline end to end in seconds (two rounds, as on the GPU). Not a GPU measurement.
    "smoke": {"device": "any", "seq_lens": [288, 320], "heads": 2, "head_dim": 64, "dtype": "bfloat16",
              "rounds": 2, "timing": {"min_reps": 5, "min_time_ms": 20.0, "warmup_reps": 1, "max_reps": 50}},
    # one GPU, a few minutes a cell: two rounds of >= 20 repetitions and >= 100 ms of timed GPU time per
    # measurement (200 ms a row in all, as one round of 200 ms before); its seq_lens are the notebook's
    "default": {"device": "cuda", "seq_lens": None, "heads": 24, "head_dim": 128, "dtype": "bfloat16",
                "rounds": 2, "timing": {"min_reps": 20, "min_time_ms": 100.0, "warmup_reps": 3, "max_reps": 2000,
                                        "preheat": True}},
    "full": {"device": "cuda", "seq_lens": list(range(4096, 5121, 64)), "heads": 24, "head_dim": 128,
             "dtype": "bfloat16", "rounds": 2,
             "timing": {"min_reps": 50, "min_time_ms": 1000.0, "warmup_reps": 10, "max_reps": 10000, "preheat": True}},
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
