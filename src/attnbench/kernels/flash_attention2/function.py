"""The autograd Function and the public call."""

from __future__ import annotations

import torch

from attnbench.kernels.flash_attention2.launch import INPUT_PRECISIONS, attention_backward, attention_forward

DQ_MODES = ("recompute", "atomic")


class FlashAttention2Function(torch.autograd.Function):
    """out, lse = FlashAttention2Function.apply(q, k, v, causal, sm_scale, dq_mode, input_precision); lse is
    not differentiable."""

    @staticmethod
    def forward(ctx, q, k, v, causal: bool, sm_scale: float | None, dq_mode: str, input_precision: str):
        out, lse = attention_forward(q, k, v, causal, sm_scale, input_precision=input_precision)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.causal, ctx.sm_scale, ctx.dq_mode = causal, sm_scale, dq_mode
        ctx.input_precision = input_precision
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, dout, _dlse):
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = attention_backward(
            dout,
            q,
            k,
            v,
            out,
            lse,
            ctx.causal,
            ctx.sm_scale,
            ctx.dq_mode,
            input_precision=ctx.input_precision,
        )
        return dq, dk, dv, None, None, None, None


def flash_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool = False,
    sm_scale: float | None = None,
    *,
    return_lse: bool = False,
    dq_mode: str = "recompute",
    input_precision: str = "tf32",
):
    """softmax(scale · q kᵀ [+ causal mask]) v with q [B, H, Sq, D], k and v [B, Hkv, Sk, D] (H % Hkv == 0).

    Returns out (shaped and strided like q) or (out, lse) with lse [B, H, Sq] in fp32 (natural log).
    dq_mode chooses how the backward forms dQ (see the package docstring). input_precision: how fp32
    inputs are multiplied, "tf32" (tl.dot's default: TF32 tensor cores, ~1e-3 relative error) or "ieee"
    (true fp32); 16-bit inputs ignore it.
    """
    if dq_mode not in DQ_MODES:
        raise ValueError(f"dq_mode must be one of {DQ_MODES}, got {dq_mode!r}")
    if input_precision not in INPUT_PRECISIONS:
        raise ValueError(f"input_precision must be one of {INPUT_PRECISIONS}, got {input_precision!r}")
    out, lse = FlashAttention2Function.apply(q, k, v, bool(causal), sm_scale, dq_mode, input_precision)
    return (out, lse) if return_lse else out
