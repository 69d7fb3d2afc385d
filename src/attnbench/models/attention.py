"""Causal self-attention kernels the Transformer can use, by name. Each takes q, k, v shaped
[..., seq, head_dim] (the model passes [batch, heads, seq, head_dim]) and returns softmax(q kᵀ/√d + causal
mask) v in the same shape.

eager   the CS336 reference: materialises the [seq, seq] scores, masks, softmax, multiplies by v. Autograd
        keeps the softmax output (batch · heads · seq² values) for the backward: this is what runs out of
        memory at long sequences (systems/attention_scan.py has the formula).
sdpa    torch.nn.functional.scaled_dot_product_attention(is_causal=True): PyTorch picks a fused kernel.
triton  our FlashAttention-2 (attnbench.kernels.flash_attention2): fused, O(seq) memory.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch


def eager_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = True) -> torch.Tensor:
    seq_q, seq_k = q.shape[-2], k.shape[-2]
    scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    if causal:
        allowed = torch.ones(seq_q, seq_k, dtype=torch.bool, device=q.device).tril(seq_k - seq_q)
        scores = scores.masked_fill(~allowed, float("-inf"))
    return torch.matmul(torch.softmax(scores, dim=-1), v)


def sdpa_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = True) -> torch.Tensor:
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)


def triton_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = True) -> torch.Tensor:
    from attnbench.kernels.flash_attention2 import flash_attention

    return flash_attention(q, k, v, causal=causal)


ATTENTION: dict[str, Callable[..., torch.Tensor]] = {
    "eager": eager_attention,
    "sdpa": sdpa_attention,
    "triton": triton_attention,
}


def get(name: str) -> Callable[..., torch.Tensor]:
    if name not in ATTENTION:
        raise ValueError(f"unknown attention {name!r}; choose from {sorted(ATTENTION)}")
    return ATTENTION[name]
