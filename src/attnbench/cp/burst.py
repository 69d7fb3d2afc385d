"""Burst-style attention (BurstAttention): the double ring forward (K/V circulate), and a backward
that keeps K, V, dK, dV at home and circulates the query side instead: Q, dO, LSE and
delta = rowsum(dO * O), with the dQ accumulator travelling along. Per hop that moves Q + dO (input
dtype) + dQ (float32) instead of K + V (input dtype) + dK + dV (float32).

The flash/cuDNN backward ops take O rather than delta; O is rebuilt per hop as a surrogate with the
same row sums (merge.surrogate_out_), which is all those ops read O for.
"""

from __future__ import annotations

import torch

from attnbench.cp.circulate import circulate
from attnbench.cp.double_ring import defaults as double_ring_defaults
from attnbench.cp.double_ring import windowed_ring_attention
from attnbench.cp.local import accumulator_dtype
from attnbench.cp.merge import rowdot, surrogate_out_


def defaults(world: int, heads: int, given: dict) -> dict:
    """Burst's inner window defaults as double ring's does (GPUs per node)."""
    return double_ring_defaults(world, heads, given)


def q_backward(core, dout, q, k, v, out, lse):
    topo, plan = core.topo, core.plan
    acc = accumulator_dtype(q.dtype)
    dk = torch.zeros(k.shape, dtype=acc, device=k.device)
    dv = torch.zeros(v.shape, dtype=acc, device=v.device)
    delta = rowdot(dout, out)
    surrogate = torch.empty_like(q)

    def step(source: int, data):
        q_src, dout_src, lse_src, delta_src = data
        blocks = plan(source, topo.position)  # queries from `source`, keys are mine
        if blocks:
            surrogate_out_(surrogate, dout_src, delta_src)
        contributions = []
        for rows, keys, causal in blocks:
            dq_b, dk_b, dv_b = core.block_backward(
                rows, keys, causal, dout_src, q_src, k, v, surrogate, lse_src
            )
            dk[:, :, keys] += dk_b
            dv[:, :, keys] += dv_b
            contributions.append((rows, (dq_b,)))
        return contributions

    (dq,) = circulate(topo, [q, dout, lse.contiguous(), delta], step, grad_like=[q])
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)


def burst_attention(q, k, v, **options):
    """Burst-style attention. options: cp.attention's keywords and window (inner ring size)."""
    return windowed_ring_attention(q, k, v, strategy="burst", backward=q_backward, **options)
