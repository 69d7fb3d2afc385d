"""Which blocks a ring step computes: (query rows, key rows, causal) for a pair of ring positions.

`contiguous`: position p holds sequence chunk p. Causal: the diagonal block is causal, earlier key
chunks are full, later ones are skipped (rank P-1 does P times the work of rank 0: the imbalance
zigzag fixes).
`zigzag`: position p holds chunks p and 2P-1-p (each half of the local rows). Causal: the diagonal
is one causal block over both halves (their order is preserved); keys from an earlier position give
all queries x the keys' first half; keys from a later position give the queries' second half x all
keys. Every off-diagonal step is exactly half a block, so the work is balanced.
"""

from __future__ import annotations

from collections.abc import Callable

ALL = slice(None)
Plan = Callable[[int, int], list[tuple[slice, slice, bool]]]


def contiguous_plan(causal: bool, local_len: int) -> Plan:
    def plan(q_pos: int, kv_pos: int):
        if not causal:
            return [(ALL, ALL, False)]
        if kv_pos == q_pos:
            return [(ALL, ALL, True)]
        return [(ALL, ALL, False)] if kv_pos < q_pos else []

    return plan


def zigzag_plan(causal: bool, local_len: int) -> Plan:
    if local_len % 2:
        raise ValueError(f"zigzag layout needs an even local sequence length, got {local_len}")
    half = local_len // 2

    def plan(q_pos: int, kv_pos: int):
        if not causal:
            return [(ALL, ALL, False)]
        if kv_pos == q_pos:
            return [(ALL, ALL, True)]
        if kv_pos < q_pos:
            return [(ALL, slice(0, half), False)]
        return [(slice(half, local_len), ALL, False)]

    return plan


PLANS = {"contiguous": contiguous_plan, "zigzag": zigzag_plan}
