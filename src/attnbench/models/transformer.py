"""The CS336 decoder-only Transformer language model.

    tokens -> embedding -> num_layers x [x + attn(RMSNorm(x)); x + SwiGLU(RMSNorm(x))] -> RMSNorm -> lm_head

- RMSNorm(x) = x / sqrt(mean(x²) + eps) · g, computed in fp32 (eps 1e-5).
- Attention: causal multi-head self-attention, separate q/k/v/output projections without bias, RoPE
  (theta 10,000, rotating pairs of dimensions (2i, 2i+1)) on q and k; the kernel is pluggable
  (models/attention.py: eager, sdpa, triton).
- SwiGLU(x) = W2 (SiLU(W1 x) ⊙ W3 x) with the given d_ff.
- Linear weights ~ truncated normal (std sqrt(2 / (d_in + d_out)), cut at ±3 std), embeddings ~ N(0, 1)
  cut at ±3, norms' gains 1: the CS336 initialisation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from attnbench.models import attention as attention_kernels

VOCAB_SIZE = 10_000
BATCH_SIZE = 4
ROPE_THETA = 10_000.0


@dataclass(frozen=True)
class ModelSize:
    d_model: int
    d_ff: int
    num_layers: int
    num_heads: int


SIZES: dict[str, ModelSize] = {
    "small": ModelSize(768, 3072, 12, 12),
    "medium": ModelSize(1024, 4096, 24, 16),
    "large": ModelSize(1280, 5120, 36, 20),
    "xl": ModelSize(1600, 6400, 48, 25),
    "2.7B": ModelSize(2560, 10240, 32, 32),
}


def _linear(d_in: int, d_out: int) -> nn.Linear:
    layer = nn.Linear(d_in, d_out, bias=False)
    std = math.sqrt(2.0 / (d_in + d_out))
    nn.init.trunc_normal_(layer.weight, std=std, a=-3 * std, b=3 * std)
    return layer


class RMSNorm(nn.Module):
    def __init__(self, d_model: int, eps: float = 1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d_model))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        normed = x32 * torch.rsqrt(x32.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return (normed * self.weight).to(x.dtype)


class SwiGLU(nn.Module):
    def __init__(self, d_model: int, d_ff: int):
        super().__init__()
        self.w1, self.w2, self.w3 = _linear(d_model, d_ff), _linear(d_ff, d_model), _linear(d_model, d_ff)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(nn.functional.silu(self.w1(x)) * self.w3(x))


class RotaryEmbedding(nn.Module):
    """Rotates each pair (x_2i, x_2i+1) of a head vector at position p by the angle p · theta^(-2i/d)."""

    def __init__(self, head_dim: int, context_length: int, theta: float = ROPE_THETA):
        super().__init__()
        inv_freq = theta ** (-torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
        angles = torch.outer(torch.arange(context_length, dtype=torch.float32), inv_freq)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x [..., seq, head_dim]
        seq = x.shape[-2]
        cos, sin = self.cos[:seq].to(x.dtype), self.sin[:seq].to(x.dtype)
        even, odd = x[..., 0::2], x[..., 1::2]
        return torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1).flatten(-2)


class CausalSelfAttention(nn.Module):
    def __init__(self, d_model: int, num_heads: int, context_length: int, kernel: str = "eager"):
        super().__init__()
        if d_model % num_heads:
            raise ValueError(f"d_model {d_model} is not a multiple of num_heads {num_heads}")
        self.num_heads, self.head_dim = num_heads, d_model // num_heads
        self.q_proj, self.k_proj, self.v_proj = (_linear(d_model, d_model) for _ in range(3))
        self.output_proj = _linear(d_model, d_model)
        self.rope = RotaryEmbedding(self.head_dim, context_length)
        self.kernel_name = kernel
        self.kernel = attention_kernels.get(kernel)

    def _heads(self, x: torch.Tensor) -> torch.Tensor:  # [B, S, d_model] -> [B, H, S, head_dim]
        batch, seq, _ = x.shape
        return x.view(batch, seq, self.num_heads, self.head_dim).transpose(1, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q = self.rope(self._heads(self.q_proj(x)))
        k = self.rope(self._heads(self.k_proj(x)))
        v = self._heads(self.v_proj(x))
        out = self.kernel(q, k, v, causal=True)
        batch, _, seq, _ = out.shape
        return self.output_proj(out.transpose(1, 2).reshape(batch, seq, -1))


class TransformerBlock(nn.Module):
    def __init__(self, size: ModelSize, context_length: int, kernel: str):
        super().__init__()
        self.ln1, self.ln2 = RMSNorm(size.d_model), RMSNorm(size.d_model)
        self.attn = CausalSelfAttention(size.d_model, size.num_heads, context_length, kernel)
        self.ffn = SwiGLU(size.d_model, size.d_ff)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.ffn(self.ln2(x))


class TransformerLM(nn.Module):
    def __init__(
        self, size: ModelSize, context_length: int, vocab_size: int = VOCAB_SIZE, attention: str = "eager"
    ):
        super().__init__()
        self.size, self.context_length, self.vocab_size = size, context_length, vocab_size
        self.token_embeddings = nn.Embedding(vocab_size, size.d_model)
        nn.init.trunc_normal_(self.token_embeddings.weight, std=1.0, a=-3.0, b=3.0)
        self.layers = nn.ModuleList(
            TransformerBlock(size, context_length, attention) for _ in range(size.num_layers)
        )
        self.ln_final = RMSNorm(size.d_model)
        self.lm_head = _linear(size.d_model, vocab_size)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:  # [B, S] int64 -> logits [B, S, vocab]
        if tokens.shape[-1] > self.context_length:
            raise ValueError(f"{tokens.shape[-1]} tokens exceed the context length {self.context_length}")
        x = self.token_embeddings(tokens)
        for layer in self.layers:
            x = layer(x)
        return self.lm_head(self.ln_final(x))


def parameter_count(size: ModelSize, vocab_size: int = VOCAB_SIZE) -> dict[str, int]:
    """Parameters: total, and the matmul weights that FLOPs count (every Linear, the lm_head included)."""
    d, f, layers = size.d_model, size.d_ff, size.num_layers
    per_layer_matmul = 4 * d * d + 3 * d * f
    matmul = layers * per_layer_matmul + vocab_size * d
    total = matmul + vocab_size * d + layers * 2 * d + d  # + token embeddings and RMSNorm gains
    return {"total": total, "matmul": matmul}


def flops_per_step(size: ModelSize, batch: int, seq: int, vocab_size: int = VOCAB_SIZE) -> dict[str, float]:
    """Model FLOPs of one training step: forward = 2 · tokens · matmul weights + the attention matmuls
    (4 · batch · seq² · d_model per layer: QKᵀ and PV over the whole square, as the eager kernel computes
    them); backward = 2 x forward. Elementwise work (norms, softmax, RoPE, SwiGLU gate) is not counted."""
    tokens = batch * seq
    forward = 2.0 * tokens * parameter_count(size, vocab_size)["matmul"]
    forward += 4.0 * size.num_layers * batch * seq * seq * size.d_model
    return {"forward": forward, "backward": 2 * forward, "train": 3 * forward}


def build(
    name: str | ModelSize,
    context_length: int,
    attention: str = "eager",
    device: torch.device | str = "cpu",
    vocab_size: int = VOCAB_SIZE,
) -> TransformerLM:
    """A model of a named size (or a ModelSize), its weights made directly on `device`."""
    if isinstance(name, str) and name not in SIZES:
        raise ValueError(f"unknown model size {name!r}; choose from {list(SIZES)}")
    size = SIZES[name] if isinstance(name, str) else name
    with torch.device(device):
        return TransformerLM(size, context_length, vocab_size, attention)
