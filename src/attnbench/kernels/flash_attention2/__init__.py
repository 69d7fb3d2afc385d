"""FlashAttention-2 in Triton: forward, backward, an autograd Function.

    out, lse = flash_attention(q, k, v, causal=True, return_lse=True)   # q [B, H, Sq, D], k/v [B, Hkv, Sk, D]

The math (per batch element and query head h; key/value head h // (H / Hkv), so GQA needs no copies):

    S = scale · Q Kᵀ                     scale = 1/sqrt(D) unless given; causal: S_ij = -inf for j > i
    P = softmax(S) (row-wise),   O = P V,   lse_i = log Σ_j exp(S_ij)      (natural log, fp32)

Forward (one program per block of BLOCK_M query rows). Stream key/value blocks of BLOCK_N rows keeping a
running row maximum m, a running sum l and an unnormalised fp32 accumulator A:

    m' = max(m, rowmax(S_blk))      P_blk = exp(S_blk - m')      α = exp(m - m')
    l' = α l + rowsum(P_blk)        A' = α A + P_blk V_blk
    finally O = A / l,  lse = m + log l

In the kernel, exponentials are exp2 with log2(e) folded into the scale (one FMA per score: s·c - m with
c = scale·log2 e), and P is rounded to the input dtype before P·V (fp32 accumulation), as FA2 does.
With a causal mask a query block's key blocks split in two stages: the blocks strictly left of the
diagonal need no mask at all (most of the work), the diagonal blocks apply it. Query blocks are launched
heaviest first, so the short causal tiles fill the tail of the schedule. The score matrix is never
stored: memory is O(S·D), and only lse (one float per row) is kept for the backward.

Backward (recomputes P from Q, K and lse instead of storing it; Δ_i = Σ_d dO_id O_id):

    P = exp(scale·Q Kᵀ - lse)      dV = Pᵀ dO      dP = dO Vᵀ      dS = P ∘ (dP - Δ)
    dQ = scale · dS K              dK = scale · dSᵀ Q

The dK/dV kernel: one program owns key/value block j, loops over the query blocks that see it (causal:
from the diagonal on; only the diagonal blocks are masked) and accumulates dK_j, dV_j in fp32 registers
(no atomics; for GQA it also loops over the group's query heads). dQ needs a sum over key blocks instead.
Two ways exist: (a) FA2's original, the dK/dV program adds its dS K share into an fp32 dQ buffer with
atomic adds (5 matmuls per tile, but Sq·D·(Sk/BLOCK_N) atomic adds: ~1e9 fp32 atomics for the CS336
leaderboard shape, plus zeroing and casting the buffer); (b) a second kernel, one program per query
block i and query head, loops over the key blocks block i sees (left of the diagonal unmasked, then the
diagonal masked), recomputing P and dP (7 matmuls per tile in all, no atomics, deterministic, dQ written
once in the input dtype). We default to (b), `dq_mode="recompute"`: on Hopper the two extra tensor-core
matmuls cost less than a billion atomic round trips through L2, and the result is bit-reproducible.
`dq_mode="atomic"` keeps (a) so the notebook can measure both (the CS336 report's leaderboard cell does).
On a GPU its adds are TMA bulk reductions, as FlashAttention-3 issues them: one `cp.reduce.async.bulk`
per 128-byte column chunk of a [BLOCK_M1, D] tile (the copy engine adds it in L2) instead of one fp32
atomic per element; under the interpreter, which has no descriptor reductions, per-element atomics.
The two kernels are separate launches, each autotuned at its own tile, warps and pipeline depth.

Tiles (BLOCK_M, BLOCK_N, warps, pipeline stages, Hopper warp specialisation, and for the forward a
persistent grid of k programs per SM taking query blocks heaviest first) are autotuned per kernel,
head dimension, dtype, mask and sequence lengths from a short list in `configs.py`; a candidate is kept
only if its first launch matched PyTorch's attention on the same inputs (`checked_tuning.py`: a fast,
wrong tile is never picked, and `launch.best_tiles()` names the rejected ones). Loads and stores use
Triton tensor descriptors (TMA on Hopper) built per head with the head's true length, so rows past the
end read as zeros and are never written: any length works, not only multiples of the block.

Without a CUDA device the kernels run under the Triton interpreter (TRITON_INTERPRET=1 is set on import
when no GPU is visible): slow, for tests on tiny shapes only. Triton reads that variable when it is
first imported, so this package must be imported before anything else imports triton; if that did not
happen, the import fails and says so rather than failing later inside a kernel.
"""

from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():  # the interpreter is the only way Triton runs without a GPU
    os.environ.setdefault("TRITON_INTERPRET", "1")
    import triton.language
    from triton.runtime.interpreter import InterpretedFunction

    if os.environ["TRITON_INTERPRET"] == "1" and not isinstance(triton.language.zeros, InterpretedFunction):
        raise ImportError(
            "no CUDA device, and triton was imported before TRITON_INTERPRET=1 was set, so its interpreter "
            "cannot run these kernels: set TRITON_INTERPRET=1 in the environment, or import "
            "attnbench.kernels.flash_attention2 before triton"
        )

from attnbench.kernels.flash_attention2.function import (
    DQ_MODES,
    FlashAttention2Function,
    flash_attention,
)
from attnbench.kernels.flash_attention2.launch import (
    attention_backward,
    attention_forward,
    interpreting,
)

__all__ = [
    "DQ_MODES",
    "FlashAttention2Function",
    "attention_backward",
    "attention_forward",
    "flash_attention",
    "interpreting",
]
