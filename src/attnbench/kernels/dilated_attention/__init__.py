"""Fused dilated attention (LongNet) in Triton: forward, backward, an autograd Function.

    out, lse = dilated_attention(q, k, v, [(2048, 1), (4096, 2), (8192, 4)], causal=True)  # q [B, H, N, D]

The pattern (as attnbench.dilated.pattern defines it): branch i = (w, r) cuts the sequence into
segments of w positions; head h keeps the positions s·w + o + t·r of segment s, o = h mod r, t < L =
ceil((w - o) / r); inside a segment every kept query attends to the kept keys (causal: t' <= t). A
branch gives each row it keeps (O_i, lse_i) and nothing (lse_i = -inf) to the others; the branches
merge by log-sum-exp:

    lse = log Σ_i exp(lse_i)            O = Σ_i exp(lse_i - lse) O_i          (0 and -inf if no branch)

**Why one running accumulator is exact.** exp(lse_i) O_i = Σ_{k ∈ K_i(q)} exp(s_qk) v_k, so
O = Σ_i Σ_{k ∈ K_i(q)} exp(s_qk - lse) v_k: one softmax over the union of the branches' (query, key)
pairs, a pair counted once per branch that keeps it. The merge is associative and commutative, so it
can be applied one branch at a time to a running (O, lse) in fp32 — the online softmax of
FlashAttention with branches as the outer blocks:

    lse' = log(e^lse + e^lse_i)         O' = e^(lse - lse') O + e^(lse_i - lse') O_i

**Forward** (forward.py): one launch per branch; a program takes BLOCK_M kept query rows of one segment
of one head and runs FlashAttention-2's forward over that segment's kept keys, addressing them in place
through a tensor descriptor with row stride r·D starting at row s·w + o (no gather, no copy); its
epilogue merges (O_i, lse_i) into the running (O, lse) of the same rows. Branches are separate launches
and a row belongs to one program per branch, so the read-merge-write needs no atomics. An r = 1 branch
(it keeps every row) is launched last and writes O in the input dtype; without one, O is converted once.

**Backward** (backward.py): with the merged O and lse (P is the union softmax's), per branch i

    P = exp(scale · Q_i K_iᵀ - lse)      dV_i += Pᵀ dO      dP = dO V_iᵀ      dS = P ∘ (dP - Δ)
    dQ_i += scale · dS K_i               dK_i += scale · dSᵀ Q_i              Δ = rowsum(dO ∘ O)

where Q_i, K_i, V_i, dO are the kept rows of a segment (the same strided descriptors) and lse, Δ are
read at stride r. This is FlashAttention-2's backward with the total lse in place of the branch's:
∂O_q/∂s_qk = P_qk (v_k - O_q) for every copy of a pair, so each branch's share is exact and the shares
add. Δ is computed once. dK/dV (one program per kept key block) and dQ (one per kept query block) are
separate launches per branch adding into fp32 accumulators, converted to the input dtype at the end.

**Memory** (memory.py): O(N) — inputs, output, fp32 accumulators and per-row vectors; at 2M tokens of
the report's default shape, forward + backward peaks at 80.25 GiB (fits one H200).

Tiles are autotuned per kept length L (launch.py). Without a CUDA device the kernels run under the
Triton interpreter (flash_attention2 sets TRITON_INTERPRET=1 on import when no GPU is visible, so it is
imported before triton here).
"""

from __future__ import annotations

from attnbench.kernels import flash_attention2  # noqa: F401 - sets TRITON_INTERPRET=1 before triton loads
from attnbench.kernels.dilated_attention.function import DilatedAttentionFunction, dilated_attention
from attnbench.kernels.dilated_attention.launch import best_tiles, interpreting
from attnbench.kernels.dilated_attention.memory import predicted_peak_bytes

__all__ = [
    "DilatedAttentionFunction",
    "best_tiles",
    "dilated_attention",
    "interpreting",
    "predicted_peak_bytes",
]
