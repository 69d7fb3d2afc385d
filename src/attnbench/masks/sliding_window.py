"""sliding_window: causal, and only the last `window` keys including the query's own position."""

from attnbench.masks.base import Mask, Native
from attnbench.masks.mods import clamped_ramp_sum, sliding_window


def _count(w) -> int:
    offset = w.seqlen_k - w.seqlen_q
    return clamped_ramp_sum(offset + 1, w.seqlen_q, w.seqlen_k) - clamped_ramp_sum(
        offset + 1 - w.window, w.seqlen_q, w.seqlen_k
    )


MASK = Mask(
    "sliding_window",
    "causal, and only the last `window` keys including the query's own position",
    build=lambda w, device: sliding_window(w.window, w.seqlen_k - w.seqlen_q),
    count=_count,
    native=lambda w: Native(causal=True, window=w.window),
    needs=("window",),
    requires=("causal", "window"),
    label="sliding-window causal",
)
