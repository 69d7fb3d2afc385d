"""Zigzag ring attention: rank r holds sequence chunks r and 2P-1-r (of 2P), so causal work is
balanced: after the diagonal step every step is exactly half a block (blocks.zigzag_plan)."""

from __future__ import annotations

from attnbench.cp.ring import kv_ring_attention


def zigzag_attention(q, k, v, **common):
    """Zigzag ring attention. q/k/v: [batch, heads, seq_local, head_dim] in the zigzag layout.
    `common`: causal, group, kernel, scale, check_ranks, as cp.attention passes them."""
    return kv_ring_attention(q, k, v, strategy="zigzag", layout="zigzag", **common)
