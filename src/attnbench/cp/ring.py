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
    topo, plan, kernel = core.topo, core.plan, core.kernel
    dq = torch.zeros(q.shape, dtype=accumulator_dtype(q.dtype), device=q.device)

    def step(source: int, data):
        k_src, v_src = data
        contributions = []
        for rows, keys, causal in plan(topo.position, source):
            dq_b, dk_b, dv_b = kernel.backward(
                dout[:, :, rows],
                q[:, :, rows],
                k_src[:, :, keys],
                v_src[:, :, keys],
                out[:, :, rows],
                lse[:, :, rows],
                causal=causal,
                scale=core.scale,
            )
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
    causal: bool,
    group,
    kernel,
    scale,
    check_ranks: bool,
    window: int | None = None,
    backward: Callable = kv_backward,
):
    """The shared entry of ring, zigzag, double ring and burst."""
    options = {"causal": int(causal)} | ({"window": window} if window is not None else {})
    kernel_obj, scale = prepare(
        strategy,
        q,
        k,
        v,
        group=group,
        kernel=kernel,
        scale=scale,
        check_ranks=check_ranks,
        requirements=ring_requirements(layout, window),
        options=options,
    )
    topo = make_topology(group, window)
    core = RingCore(topo, PLANS[layout](causal, q.shape[2]), kernel_obj, scale, backward)
    return run_core(core, q, k, v)


def ring_attention(
    q, k, v, *, causal: bool = False, group=None, kernel=None, scale=None, check_ranks: bool = True
):
    """Ring attention, contiguous layout. q/k/v: [batch, heads, seq_local, head_dim]. -> (out, lse)."""
    return kv_ring_attention(
        q,
        k,
        v,
        strategy="ring",
        layout="contiguous",
        causal=causal,
        group=group,
        kernel=kernel,
        scale=scale,
        check_ranks=check_ranks,
    )
