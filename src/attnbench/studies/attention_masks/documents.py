"""Document lengths for the varlen masks: sampled from a bucketed length distribution, packed to a length.

MagiAttention samples its documents from the length distribution of a public dataset (ChatQA's), which
we cannot download; their benchmark code states that distribution as buckets (token range: weight).
The weights sum to 1.31, so they are normalised (each divided by 1.31) before sampling. A bucket is
chosen by weight and a length drawn uniformly from its range (k = 1024 tokens; ranges are half-open
(lo, hi], the first starts at 1).

Packing: documents are drawn one after another from a generator with a fixed seed and appended until
they fill the sequence; the last one is cut to fit, so the pack sums to the sequence length exactly
(no padding token is left over, and every token belongs to a document). With the same seed the pack
of a shorter length is a prefix of a longer one: every provider at a length sees the same documents,
and the lengths share their documents as far as they go.
"""

from __future__ import annotations

import random

K = 1024
# (lo, hi] in tokens, weight; as stated in MagiAttention's benchmark code (sum 1.31, normalised here)
BUCKETS: tuple[tuple[int, int, float], ...] = (
    (0, 2 * K, 0.16),
    (2 * K, 4 * K, 0.05),
    (4 * K, 8 * K, 0.04),
    (8 * K, 16 * K, 0.06),
    (16 * K, 32 * K, 0.08),
    (32 * K, 64 * K, 0.21),
    (64 * K, 128 * K, 0.40),
    (128 * K, 256 * K, 0.20),
    (256 * K, 512 * K, 0.05),
    (512 * K, 1024 * K, 0.04),
    (1024 * K, 2048 * K, 0.01),
    (2048 * K, 4096 * K, 0.01),
)
SEED = 20240601


def probabilities(buckets=BUCKETS) -> list[float]:
    """The bucket weights divided by their sum (1.31 for BUCKETS), so that they sum to 1."""
    total = sum(w for _, _, w in buckets)
    if total <= 0 or any(w < 0 for _, _, w in buckets):
        raise ValueError(f"bucket weights must be non-negative with a positive sum, got {buckets}")
    return [w / total for _, _, w in buckets]


def draws(seed: int = SEED, buckets=BUCKETS):
    """An endless stream of document lengths (tokens) drawn from the normalised buckets."""
    rng = random.Random(seed)
    weights = probabilities(buckets)
    while True:
        lo, hi, _ = rng.choices(buckets, weights=weights)[0]
        yield rng.randint(lo + 1, hi)


def pack(seqlen: int, seed: int = SEED, shrink: int = 1, buckets=BUCKETS) -> tuple[int, ...]:
    """Document lengths filling `seqlen` tokens exactly: draws in order, the last one cut to fit.

    shrink: divide every drawn length by this (at least 1 token), to pack the same draws into a
    shorter sequence (the correctness check holds several documents the way a long sequence does).
    """
    if seqlen < 1 or shrink < 1:
        raise ValueError(f"pack needs seqlen >= 1 and shrink >= 1, got seqlen={seqlen}, shrink={shrink}")
    docs: list[int] = []
    total = 0
    for n in draws(seed, buckets):
        n = min(max(1, n // shrink), seqlen - total)
        docs.append(n)
        total += n
        if total == seqlen:
            return tuple(docs)
    raise AssertionError("unreachable: draws() is endless")


def describe(doc_lens: tuple[int, ...]) -> str:
    """`5 documents: 65536, 40000, ... (longest 65536)`, for logs."""
    shown = ", ".join(str(n) for n in doc_lens[:8]) + (", ..." if len(doc_lens) > 8 else "")
    return f"{len(doc_lens)} documents: {shown} (longest {max(doc_lens)})"
