"""Causal tile skipping in our Triton FlashAttention-2: a block whose every (query, key) pair is masked
is never loaded, in the forward, the dQ kernel and the dK/dV kernel (both dQ modes).

The proof is by poison: the rows such blocks would bring in are NaN, and one NaN loaded into a tile's
scores or products makes the result NaN (a mask applied after the load cannot clean it: NaN + -1e6 is
NaN, NaN * 0 is NaN). So the outputs that must not depend on those rows are finite and right only if
the kernel skipped them. Runs under the Triton interpreter on CPU, at explicit tiles of both ratios.
"""

from __future__ import annotations

import pytest
import torch

from attnbench.bench.correctness import compare, reference_attention, reference_grads
from attnbench.kernels.flash_attention2 import attention_backward, attention_forward
from attnbench.kernels.flash_attention2.configs import BackwardTile, ForwardTile
from attnbench.rows import Workload

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
SEQ, CUT = 64, 32  # rows >= CUT (keys) or < CUT (queries) are poisoned; CUT is a multiple of every block
TILES = [
    (ForwardTile(16, 16, 4, 1), BackwardTile(16, 32, 32, 16, 4, 1, 4, 1)),  # BLOCK_M1 < BLOCK_N1
    (ForwardTile(32, 16, 4, 1), BackwardTile(32, 16, 32, 16, 4, 1)),  # BLOCK_M1 > BLOCK_N1
]


def _poisoned(x: torch.Tensor, rows: slice) -> torch.Tensor:
    x = x.clone()
    x[:, :, rows] = float("nan")
    return x


@pytest.mark.parametrize("tiles", TILES, ids=["m1<n1", "m1>n1"])
@pytest.mark.parametrize("dq_mode", ["recompute", "atomic"])
def test_fully_masked_blocks_are_never_loaded(tiles, dq_mode):
    fwd, bwd = tiles
    gen = torch.Generator().manual_seed(7)
    q, k, v, dout = (torch.randn(1, 2, SEQ, 32, generator=gen).to(DEVICE) for _ in range(4))
    workload = Workload(1, SEQ, SEQ, 2, 2, 32, "float32", "causal")
    ref_out = reference_attention(q, k, v, workload)
    ref_dq, ref_dk, ref_dv = reference_grads(q, k, v, dout, workload)
    early, late = slice(None, CUT), slice(CUT, None)

    # queries before CUT never see keys from CUT on: forward and dQ must not load those key blocks
    k_bad, v_bad = _poisoned(k, late), _poisoned(v, late)
    out, _ = attention_forward(q, k_bad, v_bad, causal=True, tile=fwd)
    assert compare(out[:, :, early], ref_out[:, :, early], "float32").ok
    out, lse = attention_forward(q, k, v, causal=True, tile=fwd)  # clean, for the backward
    dq, _, _ = attention_backward(dout, q, k_bad, v_bad, out, lse, causal=True, dq_mode=dq_mode, tile=bwd)
    if dq_mode == "recompute":  # the atomic dQ comes from the dK/dV kernel, whose late keys are NaN here
        assert compare(dq[:, :, early], ref_dq[:, :, early], "float32", grad=True).ok

    # keys from CUT on are never seen by queries before CUT: the dK/dV kernel must not load those
    q_bad, dout_bad = _poisoned(q, early), _poisoned(dout, early)
    _, dk, dv = attention_backward(dout_bad, q_bad, k, v, out, lse, causal=True, dq_mode=dq_mode, tile=bwd)
    assert compare(dk[:, :, late], ref_dk[:, :, late], "float32", grad=True).ok
    assert compare(dv[:, :, late], ref_dv[:, :, late], "float32", grad=True).ok


def test_the_poison_would_show():
    """Control: without skipping (a non-causal call loads every block) the poison reaches every row."""
    gen = torch.Generator().manual_seed(8)
    q, k, v = (torch.randn(1, 1, SEQ, 16, generator=gen).to(DEVICE) for _ in range(3))
    out, _ = attention_forward(q, _poisoned(k, slice(CUT, None)), v, causal=False, tile=TILES[0][0])
    assert torch.isnan(out[:, :, :CUT]).all()
