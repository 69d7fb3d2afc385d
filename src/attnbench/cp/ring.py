"""Ring attention: K/V blocks circulate (P2P, double-buffered, next block in flight while the current
one computes); queries stay. Backward circulates K/V again with their dK/dV accumulators.

`ring_attention` uses the contiguous layout (rank r holds tokens [r*S/P, (r+1)*S/P)); the zigzag,
double-ring and burst strategies reuse this core with another block plan and topology.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from attnbench.cp.blocks import PLANS
from attnbench.cp.circulate import RingTopology, circulate, make_topology
from attnbench.cp.function import prepare, run_core
from attnbench.cp.local import LocalKernel, accumulator_dtype
from attnbench.cp.merge import LseAccumulator


def ring_forward(core: RingCore, q, k, v):
    """(out, lse) of my queries against every position's K/V."""
    topo, plan, kernel = core.topo, core.plan, core.kernel
    acc = LseAccumulator(q)

    def step(source: int, data):
        k_src, v_src = data
        for rows, keys, causal in plan(topo.position, source):
            out, lse = kernel.forward(
                q[:, :, rows], k_src[:, :, keys], v_src[:, :, keys], causal=causal, scale=core.scale
            )
            acc.add(rows, out, lse)
        return []

    circulate(topo, [k, v], step)
    return acc.result()


def kv_backward(core: RingCore, dout, q, k, v, out, lse):
    """dQ stays; K/V travel again and carry their dK/dV accumulators home."""
    topo, plan = core.topo, core.plan
    dq = torch.zeros(q.shape, dtype=accumulator_dtype(q.dtype), device=q.device)

    def step(source: int, data):
        k_src, v_src = data
        contributions = []
        for rows, keys, causal in plan(topo.position, source):
            dq_b, dk_b, dv_b = core.block_backward(rows, keys, causal, dout, q, k_src, v_src, out, lse)
            dq[:, :, rows] += dq_b
            contributions.append((keys, (dk_b, dv_b)))
        return contributions

    dk, dv = circulate(topo, [k, v], step, grad_like=[k, v])
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)


class RingCore:
    def __init__(
        self, topo: RingTopology, plan, kernel: LocalKernel, scale: float, backward: Callable = kv_backward
    ):
        self.topo, self.plan, self.kernel, self.scale, self._backward = topo, plan, kernel, scale, backward

    def forward(self, q, k, v):
        out, lse = ring_forward(self, q, k, v)
        return out, lse, (q, k, v, out, lse)

    def backward(self, dout, saved):
        return self._backward(self, dout, *saved)

    def block_backward(self, rows, keys, causal, dout, q, k, v, out, lse):
        """The kernel's backward of one planned block: query-side tensors at `rows`, K/V at `keys`."""
        r, c = (slice(None), slice(None), rows), (slice(None), slice(None), keys)
        return self.kernel.backward(
            dout[r], q[r], k[c], v[c], out[r], lse[r], causal=causal, scale=self.scale
        )


def ring_requirements(layout: str, window: int | None = None):
    def check(shape, world):
        unmet = []
        if layout == "zigzag" and shape[2] % 2:
            unmet.append(
                f"the zigzag layout needs an even seq_local (total divisible by 2*world = "
                f"{2 * world}), got seq_local={shape[2]}"
            )
        if window is not None and (window < 1 or world % window):
            unmet.append(f"window={window} must divide the world size {world}")
        return unmet

    return check


def kv_ring_attention(
    q,
    k,
    v,
    *,
    strategy: str,
    layout: str,
    window: int | None = None,
    backward: Callable = kv_backward,
    **common,
):
    """The shared entry of ring, zigzag, double ring and burst; `common`: the keywords of cp.attention."""
    options = {"window": window} if window is not None else {}
    call = prepare(
        strategy, q, k, v, requirements=ring_requirements(layout, window), options=options, **common
    )
    topo = make_topology(call.group, window)
    core = RingCore(topo, PLANS[layout](call.causal, q.shape[2]), call.kernel, call.scale, backward)
    return run_core(core, q, k, v)


def ring_attention(q, k, v, **common):
    """Ring attention, contiguous layout. q/k/v: [batch, heads, seq_local, head_dim]. -> (out, lse).
    `common`: causal, group, kernel, scale, check_ranks, as cp.attention passes them."""
    return kv_ring_attention(q, k, v, strategy="ring", layout="contiguous", **common)
