"""LongNet's dilated attention: the definition, the paper's configuration, exact pair counts, masks.

Definition (Ding et al. 2023, "LongNet: Scaling Transformers to 1,000,000,000 Tokens", eqs. 4-11), for a
sequence of N positions, one head h and a set of branches (w_i, r_i):

- Branch (w, r) cuts the sequence into segments [s*w, (s+1)*w) (N must be a multiple of w).
- Inside a segment it keeps every r-th position, starting at the head's offset o = h mod r (LongNet's
  multi-head variant: "for the j-th head, the offset is j mod r"): the positions s*w + o + t*r with
  o + t*r < w, i.e. L = ceil((w - o) / r) of them (w need not be a multiple of r: w = 16384, r = 6 keeps
  2731 positions for o <= 3 and 2730 for o = 4, 5).
- Attention runs inside each sparsified segment: every kept query attends to the kept keys of its
  segment. **Causal**: a kept query at position p sees a kept key at position p' of its segment iff
  p' <= p. The sparsified segment keeps positions in order, so this is the lower triangle (diagonal
  included) of the L x L gathered block: every kept query sees at least itself.
- A position that a branch does not keep gets nothing from that branch: output 0 and softmax
  denominator 0 (LSE = -inf) for that branch.
- Branches combine weighted by their softmax denominators s_i (LongNet eq. 10-11):
  O = sum_i s_i O_i / sum_i s_i, which is the log-sum-exp merge O = sum_i exp(lse_i - L) O_i with
  L = log sum_i exp(lse_i). A position that no branch keeps (possible only without an r = 1 branch, or
  with fewer heads than offsets) has O = 0 and L = -inf: defined, never NaN.

**One softmax with multiplicities.** Since s_i O_i = sum_{k in K_i(q)} exp(x_qk) v_k, the merge equals one
softmax over the union of the branches' (query, key) pairs where pair (q, k) is counted m(q, k) times,
m = the number of branches that contain it: O_q = sum_k m e^x v_k / sum_k m e^x, i.e. scores x + log m.
A key kept by two branches counts twice. One softmax over the union *without* multiplicities is a
different operator wherever branches overlap, and they do in the paper's configuration (every pair of
an r = 1 segment that another branch also keeps). `multiplicity` gives m; tests check both forms agree.

Work (what every implementation computes and what FLOPs count): per head, branch and segment, the L x L
block (causal: L(L+1)/2 pairs), summed over branches, so a pair kept by two branches is computed twice.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

# LongNet's configuration (paper section 4.1: segment lengths 2048 ... 32768, dilation rates 1 ... 12)
PAPER_BRANCHES: tuple[tuple[int, int], ...] = ((2048, 1), (4096, 2), (8192, 4), (16384, 6), (32768, 12))


@dataclass(frozen=True)
class Branch:
    """One (segment length w, dilation rate r)."""

    w: int
    r: int

    def __post_init__(self):
        if self.w < 1 or self.r < 1:
            raise ValueError(f"branch (w={self.w}, r={self.r}): segment length and dilation must be >= 1")

    def offset(self, head: int) -> int:
        """The head's first kept position inside each segment (LongNet: head mod r)."""
        return head % self.r

    def kept(self, offset: int) -> int:
        """L: positions kept per segment for this offset (0 when the offset is past the segment)."""
        return max(0, -(-(self.w - offset) // self.r))


def branches_from(spec) -> tuple[Branch, ...]:
    """Branches from [(w, r), ...] or Branch objects; at least one, each validated."""
    result = tuple(b if isinstance(b, Branch) else Branch(int(b[0]), int(b[1])) for b in spec)
    if not result:
        raise ValueError("dilated attention needs at least one branch (w, r)")
    return result


def for_length(spec, seq_len: int, extend: bool = False) -> tuple[Branch, ...]:
    """The configuration scaled to a sequence of seq_len positions, then checked.

    Shorter than the longest segment: every w is clipped to seq_len (a segment is at most the whole
    sequence, as LongNet does). Longer, with `extend`: the longest branch (w, r) is continued
    geometrically, (2w, 2r), (4w, 4r), ... while 2^k w <= seq_len, so the widest segment reaches the
    whole sequence (global, ever sparser context, LongNet's exponentially decreasing attention
    allocation) while every branch keeps w/r positions per segment: the work per token stays bounded
    (it grows by sum_k w / (2^k r^2), less than w / r^2 in all)."""
    branches = [Branch(min(b.w, seq_len), b.r) for b in branches_from(spec)]
    if extend:
        widest = max(branches, key=lambda b: b.w)
        w, r = widest.w * 2, widest.r * 2
        while w <= seq_len:
            branches.append(Branch(w, r))
            w, r = w * 2, r * 2
    branches = tuple(branches)
    check(branches, seq_len)
    return branches


def scaled(spec, factor: int) -> tuple[Branch, ...]:
    """The configuration with every segment length divided by `factor` (tiny CPU profiles)."""
    branches = branches_from(spec)
    bad = [b for b in branches if b.w % factor]
    if bad:
        raise ValueError(f"segment lengths {[b.w for b in bad]} are not multiples of {factor}")
    return tuple(Branch(b.w // factor, b.r) for b in branches)


def check(branches, seq_len: int) -> None:
    """Every segment length must divide the sequence (LongNet pads the sequence to make it so)."""
    for i, b in enumerate(branches_from(branches)):
        if seq_len % b.w:
            raise ValueError(
                f"sequence length {seq_len} is not a multiple of segment length {b.w} (branch {i}: "
                f"w={b.w}, r={b.r}); pad the sequence or choose segment lengths that divide it"
            )


def describe(branches) -> str:
    return ", ".join(f"(w={b.w}, r={b.r})" for b in branches_from(branches))


# --- exact work ----------------------------------------------------------------------------------


def _block_pairs(length: int, causal: bool) -> int:
    return length * (length + 1) // 2 if causal else length * length


def branch_pairs(branch: Branch, seq_len: int, heads: int, causal: bool) -> int:
    """(query, key) pairs one branch computes, summed over heads (one batch element)."""
    segments = seq_len // branch.w
    return sum(segments * _block_pairs(branch.kept(branch.offset(h)), causal) for h in range(heads))


def pairs(branches, seq_len: int, heads: int, causal: bool) -> int:
    """Pairs computed by the whole pattern, summed over branches and heads (duplicates count: each
    branch computes its own softmax)."""
    branches = branches_from(branches)
    check(branches, seq_len)
    return sum(branch_pairs(b, seq_len, heads, causal) for b in branches)


def forward_flops(branches, seq_len: int, heads: int, head_dim: int, batch: int, causal: bool) -> int:
    """4 * head_dim * pairs (Q K^T and P V, 2 FLOPs per multiply-add), the convention of bench/flops.py."""
    return 4 * head_dim * batch * pairs(branches, seq_len, heads, causal)


def dense_pairs(seq_len: int, heads: int, causal: bool) -> int:
    return heads * _block_pairs(seq_len, causal)


# --- masks from the definition (the reference, FlexAttention's mods, the picture) ------------------


def branch_allowed(branch: Branch, head, q_idx, kv_idx, causal: bool):
    """Bool tensor: may query q_idx see key kv_idx in this branch for `head`? Broadcasts (tensors only:
    FlexAttention traces it). Same segment, both kept (segment-relative index = head's offset mod r),
    and, if causal, the key not after the query."""
    w, r = branch.w, branch.r
    offset = head % r
    allowed = (q_idx // w == kv_idx // w) & ((q_idx % w) % r == offset) & ((kv_idx % w) % r == offset)
    if causal:
        allowed = allowed & (kv_idx <= q_idx)
    return allowed


def multiplicity(branches, head, q_idx, kv_idx, causal: bool):
    """Int32 tensor: how many branches contain the pair (0 = masked)."""
    count = None
    for branch in branches_from(branches):
        term = branch_allowed(branch, head, q_idx, kv_idx, causal).to(torch.int32)
        count = term if count is None else count + term
    return count


def grid(seq_len: int, heads: int, device=None, rows: tuple[int, int] | None = None):
    """(head [H,1,1], q_idx [1,R,1], kv_idx [1,1,N]) index tensors for dense masks over query rows."""
    lo, hi = rows if rows is not None else (0, seq_len)
    head = torch.arange(heads, device=device).view(heads, 1, 1)
    q_idx = torch.arange(lo, hi, device=device).view(1, hi - lo, 1)
    kv_idx = torch.arange(seq_len, device=device).view(1, 1, seq_len)
    return head, q_idx, kv_idx


def dense_multiplicity(branches, seq_len: int, heads: int, causal: bool, device=None, rows=None):
    """[heads, rows, seq_len] int32 multiplicities (small sizes or a row range)."""
    head, q_idx, kv_idx = grid(seq_len, heads, device, rows)
    count = multiplicity(branches, head, q_idx, kv_idx, causal)
    return count.expand(heads, q_idx.shape[1], seq_len)


def coverage(branches, seq_len: int, heads: int) -> torch.Tensor:
    """[heads, seq_len] bool: positions some branch keeps (the others get output 0, LSE -inf)."""
    pos = torch.arange(seq_len).view(1, seq_len)
    head = torch.arange(heads).view(heads, 1)
    kept = torch.zeros(heads, seq_len, dtype=torch.bool)
    for b in branches_from(branches):
        kept |= (pos % b.w) % b.r == head % b.r
    return kept


def picture(branches, seq_len: int, head: int = 0, causal: bool = True) -> str:
    """The pattern of one head as text: rows are queries, columns keys; a digit is the number of
    branches that contain the pair, '.' none."""
    count = dense_multiplicity(branches, seq_len, head + 1, causal)[head]
    lines = [f"head {head}, {describe(branches)}, {'causal' if causal else 'non-causal'}, N = {seq_len}"]
    for row in count.tolist():
        lines.append(" ".join("." if c == 0 else str(c) for c in row))
    return "\n".join(lines)


def density(branches, seq_len: int, heads: int, causal: bool) -> float:
    """Computed pairs over the dense pairs of the same mask (causal or full)."""
    return pairs(branches, seq_len, heads, causal) / dense_pairs(seq_len, heads, causal)


def pairs_per_token(branches, seq_len: int, heads: int, causal: bool) -> float:
    """Pairs per query per head: flat once every w <= seq_len (the paper's linear cost)."""
    return pairs(branches, seq_len, heads, causal) / (seq_len * heads)


def default_scale(head_dim: int) -> float:
    return 1.0 / math.sqrt(head_dim)
