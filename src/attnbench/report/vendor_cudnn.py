"""NVIDIA's published cuDNN SDPA figures for H200, set beside ours measured three ways.

Source: NVIDIA/cudnn-frontend, benchmark/sdpa_benchmark_training/results/h200_919_only_cudnn/
llama3.1_20260227_034703.csv (commit df73764, frontend 1.19.0, cuDNN 9.19.0.1, NVIDIA H200): batch 1,
64 query / 8 KV heads, head dim 128, bf16, 16384 tokens; TFLOP/s as published (forward 4·d·h·pairs,
backward 2.5x, causal pairs S(S+1)/2 — the same counts as ours). Their timing: kernel time from
torch.profiler (CUPTI), a 256 MiB L2 flush before each call, a sleep of min(t/100, 1) s after each
call, the median of iterations 6-10 of 10. Ours: see bench/timing_methods.py.
"""

from __future__ import annotations

SOURCE = (
    "NVIDIA cudnn-frontend sdpa_benchmark_training, results/h200_919_only_cudnn (cuDNN 9.19.0.1, "
    "frontend 1.19.0, H200); kernel time via torch.profiler, L2 flushed, GPU idle between calls"
)
# (precision, mask, pass) -> TFLOP/s published for the config above (fp8: e4m3 Q, K, V, all scales 1)
PUBLISHED = {
    ("bf16", "full", "fwd"): 702.0,
    ("bf16", "full", "bwd"): 612.0,
    ("bf16", "causal", "fwd"): 673.0,
    ("bf16", "causal", "bwd"): 579.0,
    ("fp8", "full", "fwd"): 1055.0,
    ("fp8", "causal", "fwd"): 1010.0,
}


def _published(m: dict) -> float | None:
    precision = "fp8" if m["provider"].endswith("_fp8") else "bf16"
    return PUBLISHED.get((precision, m["mask"], m["pass"]))


METHODS = {
    "events": "ours: CUDA events, back to back, L2 flushed",
    "kernels": "kernel time only (CUPTI), L2 flushed",
    "events_idle": "CUDA events, GPU idle 0.1 s before each call",
}


def comparison_table(methods: list[dict]):
    """One line per (provider, mask, pass): TFLOP/s by each timing method beside NVIDIA's figure.

    `methods`: records {provider, mask, pass, flops, ms: {method: ms}} (the measuring cell's JSON).
    """
    import pandas as pd

    lines = []
    for m in methods:
        published = _published(m)
        line = {
            "provider": m["provider"],
            "mask": m["mask"],
            "pass": m["pass"],
            "NVIDIA published": published,
        }
        for method in METHODS:
            ms = m["ms"].get(method)
            line[f"{method} TFLOP/s"] = m["flops"] / ms / 1e9 if ms else None
        events = line["events TFLOP/s"]
        line["published / events"] = published / events if published and events else None
        lines.append(line)
    return pd.DataFrame(lines)


def gap_sentences(methods: list[dict]) -> list[str]:
    """Where the gap to the published figure goes, per row, from the measured numbers."""
    out = []
    for m in methods:
        published = _published(m)
        ms = m["ms"]
        if not published or not ms.get("events"):
            continue
        tf = {k: m["flops"] / v / 1e9 for k, v in ms.items() if v}
        gap = published / tf["events"] - 1
        head = f"{m['provider']} {m['mask']} {m['pass']}: published {published:.0f}, ours {tf['events']:.0f}"
        parts = [f"{head} TFLOP/s ({gap:+.1%} to close)"]
        if "kernels" in tf:
            parts.append(
                f"kernel-only time gives {tf['kernels']:.0f} ({tf['kernels'] / tf['events'] - 1:+.1%})"
            )
        if "events_idle" in tf:
            parts.append(
                f"an idle GPU before each call gives {tf['events_idle']:.0f} "
                f"({tf['events_idle'] / tf['events'] - 1:+.1%})"
            )
        out.append("; ".join(parts))
    return out
