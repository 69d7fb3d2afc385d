"""full: every query sees every key (no mask_mod at all)."""

from attnbench.masks.base import Mask, Native

MASK = Mask(
    "full",
    "every query sees every key",
    build=lambda w, device: None,
    count=lambda w: w.seqlen_q * w.seqlen_k,
    native=lambda w: Native(),
)
