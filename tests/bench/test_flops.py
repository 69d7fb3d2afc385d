"""FLOP formulas against brute-force counts on dense masks."""

import itertools
import random

import pytest

from attnbench import masks
from attnbench.bench import flops
from attnbench.rows import Workload


def brute_pairs(w: Workload) -> int:
    """Direct count from the written definitions (independent of masks.py and flops.py)."""
    offset = w.seqlen_k - w.seqlen_q
    doc = []
    for index, n in enumerate(w.doc_lens or ()):
        doc += [index] * n
    count = 0
    for i, j in itertools.product(range(w.seqlen_q), range(w.seqlen_k)):
        allowed = {
            "full": True,
            "causal": j <= i + offset,
            "sliding_window": 0 <= i + offset - j < (w.window or 0),
            "document": bool(doc) and doc[i] == doc[j],
            "block_causal": bool(doc) and doc[j] <= doc[i],
        }[w.mask]
        count += allowed
    return count


def random_docs(rng, total):
    lens, left = [], total
    while left:
        n = rng.randint(1, left)
        lens.append(n)
        left -= n
    return tuple(lens)


def workloads():
    rng = random.Random(0)
    shapes = [(1, 1), (1, 7), (7, 1), (5, 5), (8, 13), (13, 8), (16, 16), (3, 40), (40, 3), (33, 31)]
    for sq, sk in shapes:
        yield Workload(1, sq, sk, 2, 1, 8, mask="full")
        yield Workload(1, sq, sk, 2, 1, 8, mask="causal")
        for window in (1, 2, 5, sk, sk + 7):
            yield Workload(1, sq, sk, 2, 2, 8, mask="sliding_window", window=window)
        if sq == sk:
            for _ in range(3):
                docs = random_docs(rng, sq)
                yield Workload(1, sq, sk, 4, 2, 8, mask="document", doc_lens=docs)
                yield Workload(1, sq, sk, 4, 2, 8, mask="block_causal", doc_lens=docs)


@pytest.mark.parametrize("w", list(workloads()), ids=lambda w: w.label())
def test_allowed_pairs_match_brute_force_and_dense_mask(w):
    expected = brute_pairs(w)
    assert flops.allowed_pairs(w) == expected
    assert int(masks.dense_mask(w).sum()) == expected


def test_causal_with_more_queries_than_keys_has_empty_rows():
    w = Workload(1, 10, 4, 1, 1, 8, mask="causal")
    assert flops.allowed_pairs(w) == 1 + 2 + 3 + 4  # rows 0..5 see nothing, rows 6..9 see 1..4 keys


def test_large_closed_forms():
    s = 131072
    assert flops.allowed_pairs(Workload(1, s, s, 1, 1, 64, mask="causal")) == s * (s + 1) // 2
    w = Workload(1, s, s, 1, 1, 64, mask="sliding_window", window=4096)
    assert flops.allowed_pairs(w) == 4096 * 4097 // 2 + (s - 4096) * 4096


def test_forward_flops_count_query_heads_and_batch():
    w = Workload(3, 12, 20, 8, 2, 64, mask="causal")
    pairs = brute_pairs(w)
    assert flops.attention_flops(w, "fwd") == 4 * 64 * 8 * 3 * pairs
    assert flops.attention_flops(w, "bwd") == 2.5 * 4 * 64 * 8 * 3 * pairs
    assert flops.attention_flops(w, "fwd_bwd") == 3.5 * 4 * 64 * 8 * 3 * pairs
    with pytest.raises(ValueError, match="pass"):
        flops.attention_flops(w, "forward")


def test_flux_shape_flops_and_tflops():
    w = Workload(1, 4352, 4352, 24, 24, 128)
    assert flops.attention_flops(w) == 4 * 128 * 24 * 4352**2
    # 232.7 GFLOP in 0.384 ms is ~606 TFLOP/s
    assert flops.tflops(flops.attention_flops(w), 0.384) == pytest.approx(605.9, rel=1e-3)
    assert flops.tflops(1e12, None) is None and flops.tflops(1e12, 0.0) is None


def test_mfu_and_datasheet_peaks():
    assert flops.mfu(500.0, 1000.0) == 0.5
    assert flops.mfu(None, 1000.0) is None and flops.mfu(500.0, None) is None
    assert flops.datasheet_peak("NVIDIA H200") == 989.5
    assert flops.datasheet_peak("NVIDIA H100 80GB HBM3") == 989.5
    assert flops.datasheet_peak("NVIDIA H100 PCIe") == 756.5
    assert flops.datasheet_peak("NVIDIA A100-SXM4-80GB") == 312.0
    assert flops.datasheet_peak("NVIDIA A10G") == 70.0
    assert flops.datasheet_peak("NVIDIA L40S") == 362.05
    assert flops.datasheet_peak("Mystery Accelerator") is None and flops.datasheet_peak(None) is None


def test_density():
    assert flops.density(Workload(1, 100, 100, 1, 1, 8, mask="causal")) == pytest.approx(0.505)
