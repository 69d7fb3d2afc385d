"""Dilated attention (LongNet), exact, in four implementations and across ranks.

  pattern.py      the definition (segments, dilation, head offsets, causal, LSE merge), the paper's
                  configuration and its scaling to a length, exact pair counts, masks, a text picture
  reference.py    (a) dense masks from the definition: per-branch softmax + LSE merge (autograd), and
                  the equal single softmax with log-multiplicity scores (chunked, for GPU checks)
  gathered.py     (b) per branch, kept positions gathered into one dense batch for a fused kernel that
                  returns the LSE (kernels.py: math, sdpa_flash, cudnn, sdpa_efficient, fa3, xformers),
                  scattered back and merged by LSE in float32; differentiable
  flex.py         (c) one FlexAttention call: union mask_mod + log-multiplicity score_mod
  (fused)         (d) our fused Triton kernel (attnbench.kernels.dilated_attention): each branch read in
                  place through strided descriptors, merged by LSE into one fp32 accumulator
  distributed.py  the sequence split over ranks: local segments need no communication, spanning ones
                  all-gather only the kept K/V of their segment

`dilated_attention(q, k, v, branches, causal=..., implementation=..., backend=...)` returns (out, lse)
for q, k, v [batch, heads, seq, head_dim].
"""

from __future__ import annotations

from attnbench.dilated.pattern import PAPER_BRANCHES, Branch, for_length

IMPLEMENTATIONS = ("reference", "gather", "flex", "fused")


def dilated_attention(q, k, v, branches, *, causal: bool, implementation: str = "gather", backend=None,
                      scale: float | None = None):  # fmt: skip
    """(out, lse) of LongNet's dilated attention. implementation: reference | gather | flex | fused;
    backend (gather only): math | sdpa_flash | cudnn | sdpa_efficient | fa3 | xformers (None: cudnn on
    CUDA, math elsewhere)."""
    if implementation == "reference":
        from attnbench.dilated.reference import reference_attention

        return reference_attention(q, k, v, branches, causal=causal, scale=scale)
    if implementation == "gather":
        from attnbench.dilated.gathered import gathered_attention

        return gathered_attention(q, k, v, branches, causal=causal, backend=backend, scale=scale)
    if implementation == "flex":
        from attnbench.dilated.flex import flex_attention_dilated

        return flex_attention_dilated(q, k, v, branches, causal=causal, scale=scale)
    if implementation == "fused":
        from attnbench.dilated import pattern
        from attnbench.kernels.dilated_attention import dilated_attention as fused

        branches = pattern.branches_from(branches)
        pattern.check(branches, q.shape[2])
        return fused(q, k, v, branches, causal=causal, scale=scale)
    raise ValueError(f"unknown implementation {implementation!r}; choose one of {', '.join(IMPLEMENTATIONS)}")


__all__ = ["IMPLEMENTATIONS", "PAPER_BRANCHES", "Branch", "dilated_attention", "for_length"]
