"""All-gather K/V context parallelism (Llama 3 style): every rank gathers the whole K and V, computes
its own queries against the keys they may see, and the backward reduce-scatters dK/dV.

Zigzag layout (rank r holds chunks r and 2P-1-r) for causal balance. Each query chunk g sees keys
[0, g*c) fully and chunk g causally (c = chunk length): two kernel calls merged by LSE. K/V are
gathered again in the backward instead of being kept (memory over one more all-gather).
"""

from __future__ import annotations

import torch

from attnbench.cp import comm
from attnbench.cp.function import prepare, run_core
from attnbench.cp.local import accumulator_dtype
from attnbench.cp.merge import LseAccumulator
from attnbench.cp.ring import ring_requirements


def _chunk_slot(g: int, p: int) -> tuple[int, int]:
    """(rank, half) holding global chunk g in the zigzag layout."""
    return (g, 0) if g < p else (2 * p - 1 - g, 1)


class AllGatherCore:
    def __init__(self, group, kernel, causal: bool, scale: float):
        self.group, self.kernel, self.causal, self.scale = group, kernel, causal, scale
        self.p, self.rank = comm.group_size(group), comm.group_rank(group)

    def _gather_kv(self, k, v):
        p, c = self.p, k.shape[2] // 2
        gathered = comm.all_gather_stacked(torch.stack([k, v]), self.group)  # [P, 2, B, H, 2c, D]
        parts = []
        for g in range(2 * p):
            r, half = _chunk_slot(g, p)
            parts.append(gathered[r, :, :, :, half * c : (half + 1) * c])
        return torch.cat(parts, dim=-2)  # [2, B, H, S, D] in sequence order

    def _blocks(self, local_len: int):
        """(query rows, global key slice, causal) for my queries."""
        c = local_len // 2
        if not self.causal:
            return [(slice(None), slice(None), False)]
        blocks = []
        for half, g in ((0, self.rank), (1, 2 * self.p - 1 - self.rank)):
            rows = slice(half * c, (half + 1) * c)
            if g > 0:
                blocks.append((rows, slice(0, g * c), False))
            blocks.append((rows, slice(g * c, (g + 1) * c), True))
        return blocks

    def forward(self, q, k, v):
        kv = self._gather_kv(k, v)
        acc = LseAccumulator(q)
        for rows, keys, causal in self._blocks(q.shape[2]):
            out, lse = self.kernel.forward(
                q[:, :, rows], kv[0][:, :, keys], kv[1][:, :, keys], causal=causal, scale=self.scale
            )
            acc.add(rows, out, lse)
        out, lse = acc.result()
        return out, lse, (q, k, v, out, lse)

    def backward(self, dout, saved):
        q, k, v, out, lse = saved
        kv = self._gather_kv(k, v)
        acc = accumulator_dtype(q.dtype)
        dq = torch.zeros(q.shape, dtype=acc, device=q.device)
        dkv = torch.zeros(kv.shape, dtype=acc, device=q.device)
        for rows, keys, causal in self._blocks(q.shape[2]):
            dq_b, dk_b, dv_b = self.kernel.backward(
                dout[:, :, rows],
                q[:, :, rows],
                kv[0][:, :, keys],
                kv[1][:, :, keys],
                out[:, :, rows],
                lse[:, :, rows],
                causal=causal,
                scale=self.scale,
            )
            dq[:, :, rows] += dq_b
            dkv[0][:, :, keys] += dk_b
            dkv[1][:, :, keys] += dv_b
        del kv
        p, c = self.p, k.shape[2] // 2
        ranked = torch.empty((p, *dkv.shape[:3], 2 * c, dkv.shape[-1]), dtype=acc, device=q.device)
        for g in range(2 * p):
            r, half = _chunk_slot(g, p)
            ranked[r, :, :, :, half * c : (half + 1) * c] = dkv[:, :, :, g * c : (g + 1) * c]
        del dkv
        mine = comm.reduce_scatter_stacked(ranked, self.group)  # [2, B, H, 2c, D]
        return dq.to(q.dtype), mine[0].to(k.dtype), mine[1].to(v.dtype)


def allgather_attention(q, k, v, **common):
    """All-gather K/V attention. q/k/v: [batch, heads, seq_local, head_dim], zigzag layout.
    `common`: causal, group, kernel, scale, check_ranks, as cp.attention passes them."""
    call = prepare("allgather", q, k, v, requirements=ring_requirements("zigzag"), **common)
    return run_core(AllGatherCore(call.group, call.kernel, call.causal, call.scale), q, k, v)
