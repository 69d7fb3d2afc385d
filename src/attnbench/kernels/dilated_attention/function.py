"""The autograd Function and the public call."""

from __future__ import annotations

import torch

from attnbench.kernels.dilated_attention import launch


class DilatedAttentionFunction(torch.autograd.Function):
    """out, lse = DilatedAttentionFunction.apply(q, k, v, branches, causal, scale); lse is not
    differentiable. q, k, v contiguous; branches checked ((w, r), ...)."""

    @staticmethod
    def forward(ctx, q, k, v, branches, causal: bool, scale: float):
        out, lse = launch.forward(q, k, v, branches, causal, scale)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.branches, ctx.causal, ctx.scale = branches, causal, scale
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, dout, _dlse):
        q, k, v, out, lse = ctx.saved_tensors
        dout = dout.to(q.dtype).contiguous()
        dq, dk, dv = launch.backward(dout, q, k, v, out, lse, ctx.branches, ctx.causal, ctx.scale)
        return dq, dk, dv, None, None, None


def dilated_attention(q, k, v, branches, *, causal: bool, scale: float | None = None):
    """(out [B, H, N, D] in q's dtype, lse [B, H, N] fp32, natural log) of LongNet's dilated attention.

    q, k, v: one shape [batch, heads, N, head_dim], bf16/fp16/fp32, head_dim 16..128 (made contiguous,
    a copy when they are not). branches: (w, r) pairs or objects with .w and .r; every w divides N.
    Rows no branch keeps get out 0 and lse -inf. Differentiable in q, k, v.
    """
    launch.check_inputs(q, k, v)
    pairs = [(b.w, b.r) if hasattr(b, "w") else tuple(b) for b in branches]
    pairs = launch.check_branches(pairs, q.shape[2])
    scale = q.shape[-1] ** -0.5 if scale is None else float(scale)
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    return DilatedAttentionFunction.apply(q, k, v, pairs, bool(causal), scale)
