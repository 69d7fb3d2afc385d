"""causal: query i sees keys j <= i + (Sk - Sq), bottom-right aligned (flash-attn's and SDPA's
causal_lower_right convention)."""

from attnbench.masks.base import Mask, Native
from attnbench.masks.mods import causal, causal_offset, clamped_ramp_sum


def _build(w, device):
    offset = w.seqlen_k - w.seqlen_q
    return causal if offset == 0 else causal_offset(offset)


def _count(w) -> int:
    return clamped_ramp_sum(w.seqlen_k - w.seqlen_q + 1, w.seqlen_q, w.seqlen_k)


MASK = Mask(
    "causal",
    "query i sees keys j <= i + (Sk - Sq) (bottom-right aligned)",
    build=_build,
    count=_count,
    native=lambda w: Native(causal=True),
    requires=("causal",),
)
