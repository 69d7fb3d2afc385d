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


def ulysses_attention(
    q, k, v, *, causal: bool = False, group=None, kernel=None, scale=None, check_ranks: bool = True
):
    """Ulysses attention. q/k/v: [batch, heads, seq_local, head_dim], contiguous layout."""
    kernel_obj, scale = prepare(
        "ulysses",
        q,
        k,
        v,
        group=group,
        kernel=kernel,
        scale=scale,
        check_ranks=check_ranks,
        options={"causal": int(causal)},
        requirements=lambda shape, world: heads_requirement(shape[1], world),
    )
    inner = LocalCore(kernel_obj, causal, scale)
    core = UlyssesCore(group, inner) if comm.group_size(group) > 1 else inner
    return run_core(core, q, k, v)
