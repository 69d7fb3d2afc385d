"""Rows whose output matches the winner's to the bit: one kernel reached through another wrapper.

Every provider of a shape is checked against one fp32 reference on the same inputs (bench.correctness),
and each row keeps the error statistics of its output (and gradients): max_abs, mean_abs and rel_l2 at
full float precision. Kernels that tile or accumulate in another order round differently, and their
statistics differ in the last digits; equal statistics mean an equal output, which in our sweeps is one
kernel called through two wrappers (FlashAttention-3 through its own interface, Transformer Engine and
xFormers; cuDNN through SDPA, the cuDNN frontend and Transformer Engine). A ranking measures its margin
against the next *other* output, so that the margin compares kernels, not wrappers, and names the
wrappers that tie with the winner instead.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence


def output_fingerprint(row: Mapping) -> str | None:
    """The row's correctness statistics, every number at full precision, as one comparable string; None
    where the row records none (nothing to tell its output apart by)."""
    checks = (row.get("extra") or {}).get("correctness")
    if not isinstance(checks, Mapping):
        return None
    numbers = {
        str(tensor): {
            str(k): v for k, v in stats.items() if isinstance(v, (int, float)) and not isinstance(v, bool)
        }
        for tensor, stats in checks.items()
        if isinstance(stats, Mapping)
    }
    return json.dumps(numbers, sort_keys=True) if any(numbers.values()) else None


def twins_and_rival(top: Mapping, others: Sequence[Mapping]) -> tuple[list[Mapping], Mapping | None]:
    """Of `others` (fastest first): those with `top`'s output to the bit, and the fastest of the rest (None
    where every other row is a twin). A row without statistics is never a twin."""
    mine = output_fingerprint(top)
    twins = [r for r in others if mine is not None and output_fingerprint(r) == mine]
    rival = next((r for r in others if not any(r is t for t in twins)), None)
    return twins, rival
