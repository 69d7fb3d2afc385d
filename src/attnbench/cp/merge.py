"""fp32 log-sum-exp merge of partial attention results, and the row-wise helpers the backward needs.

Tensors are [batch, heads, seq, head_dim] (LSE: [batch, heads, seq]); row slices index dim 2.
"""

from __future__ import annotations

import torch

from attnbench.cp.local import accumulator_dtype

ROW_CHUNK = 8192  # rows per chunk for row-wise reductions: bounds fp32 temporaries at long sequences


def merge_(out: torch.Tensor, lse: torch.Tensor, block_out: torch.Tensor, block_lse: torch.Tensor) -> None:
    """In place: (out, lse) <- softmax-weighted combination of (out, lse) and (block_out, block_lse).

    `out`/`lse` are the accumulators (float32/float64, lse starts at -inf); the block may be bfloat16.
    Every row must have at least one allowed key over the whole merge, so lse never stays -inf.
    """
    block_lse = block_lse.to(lse.dtype)
    new_lse = torch.logaddexp(lse, block_lse)
    out.mul_(torch.exp(lse - new_lse).unsqueeze(-1))
    out.addcmul_(block_out, torch.exp(block_lse - new_lse).unsqueeze(-1))
    lse.copy_(new_lse)


class LseAccumulator:
    """Running (out, lse) for one rank's queries; blocks may cover a slice of the rows."""

    def __init__(self, like: torch.Tensor):
        acc = accumulator_dtype(like.dtype)
        self.dtype = like.dtype
        self.out = torch.zeros(like.shape, dtype=acc, device=like.device)
        self.lse = torch.full(like.shape[:-1], float("-inf"), dtype=acc, device=like.device)

    def add(self, rows: slice, block_out: torch.Tensor, block_lse: torch.Tensor) -> None:
        merge_(self.out[:, :, rows], self.lse[:, :, rows], block_out, block_lse)

    def result(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.out.to(self.dtype), self.lse


def rowdot(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """rowsum(a * b) over the last dim in float32 (float64 for float64), chunked over rows."""
    acc = accumulator_dtype(a.dtype)
    result = torch.empty(a.shape[:-1], dtype=acc, device=a.device)
    for start in range(0, a.shape[2], ROW_CHUNK):
        rows = slice(start, start + ROW_CHUNK)
        result[:, :, rows] = (a[:, :, rows].to(acc) * b[:, :, rows].to(acc)).sum(-1)
    return result


def surrogate_out_(dest: torch.Tensor, dout: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
    """Write into `dest` an O' with rowsum(dout * O') == delta: O' = dout * delta / rowsum(dout^2).

    The flash/cuDNN backward ops read `out` only to form delta = rowsum(dout * out), so O' stands in
    for the real output when only delta travelled (burst backward). |O'| <= |O| row-wise, and the
    rounding error of rowsum(dout * O') is at most one unit of O's dtype relative to |delta|. Rows
    with dout == 0 have delta == 0 and get O' = 0.
    """
    acc = accumulator_dtype(dout.dtype)
    for start in range(0, dout.shape[2], ROW_CHUNK):
        rows = slice(start, start + ROW_CHUNK)
        d = dout[:, :, rows].to(acc)
        norm2 = (d * d).sum(-1)
        factor = torch.where(norm2 > 0, delta[:, :, rows].to(acc) / norm2, torch.zeros_like(norm2))
        dest[:, :, rows] = d * factor.unsqueeze(-1)
    return dest
