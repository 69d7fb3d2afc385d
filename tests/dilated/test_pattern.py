"""The definition: a hand-drawn pattern, exact pair counts, scaling the paper's configuration, errors."""

import pytest
import torch

from attnbench.dilated import pattern

# N = 8, branches (w=4, r=1) and (w=8, r=2), head 0 (offset 0), causal; worked out by hand from the
# definition: a digit is the number of branches keeping the pair.
HAND_DRAWN = """\
2 . . . . . . .
1 1 . . . . . .
2 1 2 . . . . .
1 1 1 1 . . . .
1 . 1 . 2 . . .
. . . . 1 1 . .
1 . 1 . 2 1 2 .
. . . . 1 1 1 1"""


def test_picture_matches_the_pattern_worked_out_by_hand():
    text = pattern.picture([(4, 1), (8, 2)], 8, head=0, causal=True)
    assert text.splitlines()[1:] == HAND_DRAWN.splitlines()


def test_head_offsets_shift_the_dilated_positions():
    """Head 1 keeps the odd positions of the r = 2 branch (offset 1 mod 2)."""
    count = pattern.dense_multiplicity([(8, 2)], 8, heads=2, causal=False)
    assert count[0].any(dim=0).nonzero().flatten().tolist() == [0, 2, 4, 6]
    assert count[1].any(dim=0).nonzero().flatten().tolist() == [1, 3, 5, 7]


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize(
    "branches,seq,heads",
    [
        (pattern.scaled(pattern.PAPER_BRANCHES, 256), 256, 13),  # r does not divide w (w=64, r=6)
        ([(16, 3), (32, 5)], 64, 2),  # fewer heads than offsets
        ([(24, 7)], 48, 9),
    ],
)
def test_pair_count_is_the_sum_of_multiplicities(branches, seq, heads, causal):
    dense = int(pattern.dense_multiplicity(branches, seq, heads, causal).sum())
    assert pattern.pairs(branches, seq, heads, causal) == dense


def test_kept_positions_when_r_does_not_divide_w():
    branch = pattern.Branch(16384, 6)
    assert [branch.kept(o) for o in range(6)] == [2731, 2731, 2731, 2731, 2730, 2730]


def test_paper_configuration_scaled_to_the_length():
    short = pattern.for_length(pattern.PAPER_BRANCHES, 8192)
    assert [(b.w, b.r) for b in short] == [(2048, 1), (4096, 2), (8192, 4), (8192, 6), (8192, 12)]
    long = pattern.for_length(pattern.PAPER_BRANCHES, 1 << 18, extend=True)
    assert [(b.w, b.r) for b in long[5:]] == [(65536, 24), (131072, 48), (262144, 96)]
    # the work per token stays bounded once the sequence outgrows the paper's widest segment
    per_token = [pattern.pairs_per_token(pattern.for_length(pattern.PAPER_BRANCHES, n, extend=True), n, 16, True)
                 for n in (1 << 15, 1 << 18, 1 << 21)]  # fmt: skip
    assert per_token[0] < per_token[1] < per_token[2] < 1.06 * per_token[0]


def test_coverage_without_a_dense_branch_leaves_holes():
    assert pattern.coverage(pattern.scaled(pattern.PAPER_BRANCHES, 256), 128, 4).all()
    holes = ~pattern.coverage([(16, 2), (64, 3)], 64, 1)
    assert holes.any() and not holes[0, 0]


def test_a_length_that_is_not_a_multiple_of_a_segment_is_a_clear_error():
    with pytest.raises(
        ValueError, match=r"sequence length 1000 is not a multiple of segment length 512 \(branch 1"
    ):
        pattern.pairs([(8, 1), (512, 2)], 1000, 1, True)
    with pytest.raises(ValueError, match="w=0"):
        pattern.branches_from([(0, 1)])


def test_branch_allowed_broadcasts_over_tensors_like_flex():
    head, q, k = pattern.grid(32, 3)
    allowed = pattern.branch_allowed(pattern.Branch(16, 4), head, q, k, causal=True)
    assert allowed.shape == (3, 32, 32) and allowed.dtype == torch.bool
