"""Ulysses (DeepSpeed-Ulysses): all-to-all from sequence-sharded to head-sharded, full-sequence
attention on H/P heads, all-to-all back. Contiguous layout; heads must divide by the degree.
`UlyssesCore` wraps any inner core: a local kernel here, a zigzag ring in USP."""

from __future__ import annotations

from attnbench.cp import comm
from attnbench.cp.function import LocalCore, prepare, run_core


class UlyssesCore:
    def __init__(self, group, inner):
        self.group, self.inner = group, inner

    def forward(self, q, k, v):
        q_h, k_h, v_h = comm.seq_to_heads([q, k, v], self.group)
        out_h, lse_h, saved = self.inner.forward(q_h, k_h, v_h)
        (out,) = comm.heads_to_seq([out_h], self.group)
        (lse,) = comm.heads_to_seq([lse_h], self.group)
        return out, lse, saved

    def backward(self, dout, saved):
        (dout_h,) = comm.seq_to_heads([dout], self.group)
        dq_h, dk_h, dv_h = self.inner.backward(dout_h, saved)
        return tuple(comm.heads_to_seq([dq_h, dk_h, dv_h], self.group))


def heads_requirement(heads: int, degree: int, what: str = "world size") -> list[str]:
    if heads % degree:
        return [f"heads={heads} is not divisible by the Ulysses degree ({what} {degree})"]
    return []


def ulysses_attention(q, k, v, **common):
    """Ulysses attention. q/k/v: [batch, heads, seq_local, head_dim], contiguous layout.
    `common`: causal, group, kernel, scale, check_ranks, as cp.attention passes them."""
    call = prepare(
        "ulysses", q, k, v, requirements=lambda shape, world: heads_requirement(shape[1], world), **common
    )
    inner = LocalCore(call.kernel, call.causal, call.scale)
    return run_core(UlyssesCore(call.group, inner) if comm.group_size(call.group) > 1 else inner, q, k, v)
