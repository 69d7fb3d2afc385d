"""Published figures of the write-up: BurstAttention's kernel benchmark on 32x A800 (other hardware).

Source: the BurstEngine repository (github.com/thunlp/BurstEngine, commit 698f798), file
evaluation/kernel_bench/README.md, "BurstAttention performance benchmarking": hidden 5120 = 40 heads
x 128, batch 1, bf16, 32 GPUs (4 nodes x 8 A800), FlashAttention kernels, TFLOP/s per GPU. The
methods are BurstAttention (arXiv 2403.09347; BurstEngine, arXiv 2509.19836), Transformer Engine's
P2P ring ("RingAttention + FlashAttention"), USP and LoongTrain's double ring. That table gives one
TFLOP/s per length without naming the pass or mask; the raw logs beside it (bench.md, bench_fb.md)
are causal forward+backward, and their TFLOP/s reproduce with the causal FLOP count used here
(LoongTrain double ring, 131072 tokens: 180.39 ms forward+backward -> 106.66 TFLOP/s per GPU on 32
GPUs), so we read the table as causal forward+backward TFLOP/s per GPU. None means the source gives
no number at that length ("x" or no row).
"""

from __future__ import annotations

SOURCE = (
    "thunlp/BurstEngine, evaluation/kernel_bench/README.md (commit 698f798): BurstAttention "
    "kernel benchmark, 32x A800 (4 nodes x 8), hidden 5120 (40 heads x 128), batch 1, bf16"
)
HARDWARE = "32x NVIDIA A800 (4 nodes x 8)"
WORLD_SIZE = 32
A800_BF16_PEAK_TFLOPS = 312.0  # A800 = A100 compute: dense bf16 datasheet peak

# published method -> (our closest strategy, {seq_len: TFLOP/s per GPU or None})
FIGURES: dict[str, tuple[str, dict[int, float | None]]] = {
    "TE ring (P2P)": ("zigzag", {131072: 53.10, 262144: 104.59, 524288: None, 1048576: None}),
    "USP": ("usp", {131072: 140.41, 262144: 166.84, 524288: 174.46, 1048576: 181.70}),
    "LoongTrain double ring": ("double_ring", {131072: 160.25, 262144: None, 524288: None, 1048576: 140.69}),
    "BurstAttention": ("burst", {131072: 128.76, 262144: 163.28, 524288: 178.56, 1048576: 187.74}),
}
MAPPING_NOTE = (
    "TE's P2P ring splits a causal sequence into 2P chunks with the same head-tail balance as "
    "our zigzag ring, so it sits beside `zigzag`; USP, double ring and BurstAttention beside "
    "their namesakes."
)
