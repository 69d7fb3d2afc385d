"""Document lengths of the varlen masks: the normalised buckets, packing to an exact length."""

import pytest

from attnbench.studies.attention_masks import documents


def test_bucket_weights_are_normalised_by_their_sum_of_1_31():
    weights = [w for _, _, w in documents.BUCKETS]
    assert sum(weights) == pytest.approx(1.31)
    probs = documents.probabilities()
    assert sum(probs) == pytest.approx(1.0)
    assert probs[6] == pytest.approx(0.40 / 1.31)  # 64k-128k
    with pytest.raises(ValueError, match="weights"):
        documents.probabilities(((0, 10, 0.0),))


def test_draws_fall_in_the_buckets_with_their_probabilities():
    stream = documents.draws(seed=3)
    lengths = [next(stream) for _ in range(20000)]
    assert all(1 <= n <= 4096 * 1024 for n in lengths)
    short = sum(n <= 2048 for n in lengths) / len(lengths)
    assert short == pytest.approx(0.16 / 1.31, abs=0.01)


@pytest.mark.parametrize("seqlen", [1, 4096, 65536, 131072])
def test_pack_fills_the_length_exactly_and_is_fixed_by_the_seed(seqlen):
    docs = documents.pack(seqlen)
    assert sum(docs) == seqlen and all(n >= 1 for n in docs)
    assert documents.pack(seqlen) == docs  # the same documents for every provider at a length
    assert documents.pack(seqlen, seed=documents.SEED + 1) != docs or len(docs) == 1


def test_a_shorter_pack_is_a_prefix_of_a_longer_one():
    short, long = documents.pack(8192), documents.pack(131072)
    assert list(long[: len(short) - 1]) == list(short[:-1]) and short[-1] <= long[len(short) - 1]


def test_shrinking_packs_the_same_draws_into_a_short_check():
    check = documents.pack(4096, shrink=32)
    assert sum(check) == 4096 and len(check) >= 2
    assert check[0] == max(1, documents.pack(131072)[0] // 32)
    with pytest.raises(ValueError, match="shrink"):
        documents.pack(10, shrink=0)
