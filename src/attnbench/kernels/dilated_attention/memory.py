"""Peak device memory of the fused kernel, on paper (the scaling sweep skips a length it would not fit).

With X = batch·heads·N·head_dim elements in the input dtype (one tensor like q), F the same count in
fp32 (the accumulators) and R = batch·heads·N fp32 (one per-row vector):

forward (no autograd)   q, k, v (3X), the fp32 running output (F) and LSE (R), the output (X: written
                        by the last, r = 1 launch, or converted from the accumulator):   4X + F + R
forward + backward      q, k, v, dout (4X), the saved out (X), lse and Δ (2R), then
                        dK/dV pass: the fp32 dK, dV accumulators (2F) + one converted copy (X)
                        dQ pass:    dk, dv (2X), the fp32 dQ accumulator (F) + its copy (X)
                        peak = 5X + 2R + max(2F + X, F + 3X)

At the report's default shape (batch 1, 16 heads x 128, bf16): X = 4 MiB per 1k tokens, so at 2M
tokens X = 8 GiB, F = 16 GiB, R = 128 MiB: forward 48.1 GiB, forward + backward 80.25 GiB (86.2 GB:
fits one H200's 141 GB, not one H100's 80 GB), of which the bf16 inputs, dout and out are 40 GiB and
the fp32 gradient accumulators 32 GiB. Nothing grows faster than N: the score tiles live in registers
and shared memory, and no branch is ever copied (the gather path holds gathered copies of q, k, v,
dout and out per branch group and its own fp32 accumulators: 84 GiB at 1M tokens, where this is 40.1).
"""

from __future__ import annotations

GIB = 2**30


def predicted_peak_bytes(batch: int, heads: int, seq_len: int, head_dim: int, element_size: int,
                         backward: bool) -> int:  # fmt: skip
    """Bytes allocated at the peak of one call (forward, or forward + backward), inputs included."""
    x = batch * heads * seq_len * head_dim * element_size
    f = batch * heads * seq_len * head_dim * 4
    r = batch * heads * seq_len * 4
    if element_size == 4:  # fp32 inputs: the accumulators are the results, nothing is converted
        return 4 * x + r if not backward else 5 * x + 2 * r + 3 * f
    if not backward:
        return 4 * x + f + r
    return 5 * x + 2 * r + max(2 * f + x, f + 3 * x)
