"""One gloo rank of the distributed dilated-attention tests: runs every case, writes JSON records.

Each case builds the same global q, k, v, dout on every rank (seeded), runs distributed_attention on
this rank's contiguous shard and compares out, lse, dq, dk, dv with the single-process definition
(reference.reference_grads, float64, autograd) on the whole sequence.
Tolerances: float64 1e-10 (the algorithm is exact; rounding only); bfloat16 out 1e-2, grads 2e-2,
lse 1e-5 (bf16 block outputs as on a GPU), all relative to max(1, max|reference|).
"""

from __future__ import annotations

import json
import traceback
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

BATCH, HEADS, HEAD_DIM = 2, 13, 8
TOLERANCES = {
    "float64": {"out": 1e-10, "lse": 1e-10, "dq": 1e-10, "dk": 1e-10, "dv": 1e-10},
    "bfloat16": {"out": 1e-2, "lse": 1e-5, "dq": 2e-2, "dk": 2e-2, "dv": 2e-2},
}
# (name, branches, sequence length): every w divides the per-rank shard or is a multiple of it
CONFIGS = {
    "paper/256": ([(8, 1), (16, 2), (32, 4), (64, 6), (128, 12)], 128),
    "no-r1": ([(16, 2), (64, 3), (128, 5)], 128),  # uncovered positions: lse -inf rows on some ranks
    "whole": ([(32, 1), (128, 4)], 128),
}


def cases(world: int) -> list[tuple[str, bool, str]]:
    dtypes = ("float64", "bfloat16") if world == 2 else ("float64",)  # bf16 rounding paths: once is enough
    plain = [(name, causal, dtype) for name in CONFIGS for causal in (True, False) for dtype in dtypes]
    return plain + [("paper/256", causal, "float64-bshd") for causal in (True, False)]


def case_id(name, causal, dtype) -> str:
    return f"{name}-{'causal' if causal else 'full'}-{dtype}"


def bshd_math():
    """The math kernel behind FA3's and xFormers' [batch, seq, heads, dim] interface."""
    from attnbench.cp.local import MathKernel
    from attnbench.dilated.kernels import BranchKernel

    class BshdMath(BranchKernel):
        name, layout, needs_cuda = "bshd_math", "bshd", False
        math = MathKernel()

        def forward(self, q, k, v, *, causal, scale):
            out, lse = self.math.forward(*(t.transpose(1, 2) for t in (q, k, v)), causal=causal, scale=scale)
            return out.transpose(1, 2).contiguous(), lse

        def backward(self, dout, q, k, v, out, lse, *, causal, scale):
            t = [x.transpose(1, 2) for x in (dout, q, k, v, out)]
            grads = self.math.backward(*t, lse, causal=causal, scale=scale)
            return tuple(g.transpose(1, 2).contiguous() for g in grads)

    return BshdMath()


def run_case(name: str, causal: bool, dtype: str, rank: int, world: int) -> dict:
    from attnbench.dilated.distributed import distributed_attention
    from attnbench.dilated.reference import reference_grads

    backend = bshd_math() if dtype.endswith("-bshd") else "math"
    tolerance = TOLERANCES[dtype.removesuffix("-bshd")]

    branches, seq = CONFIGS[name]
    gen = torch.Generator().manual_seed(7)
    q, k, v, dout = (
        torch.randn(BATCH, HEADS, seq, HEAD_DIM, generator=gen, dtype=torch.float64) for _ in range(4)
    )
    torch_dtype = getattr(torch, dtype.removesuffix("-bshd"))
    q, k, v, dout = (t.to(torch_dtype) for t in (q, k, v, dout))
    ref = reference_grads(q, k, v, dout, branches, causal=causal)
    shard = seq // world
    rows = slice(rank * shard, (rank + 1) * shard)
    leaves = [t[:, :, rows].detach().clone().requires_grad_(True) for t in (q, k, v)]
    out, lse = distributed_attention(*leaves, branches, causal=causal, backend=backend)
    grads = torch.autograd.grad(out, leaves, dout[:, :, rows])
    ours = {"out": out, "lse": lse, "dq": grads[0], "dk": grads[1], "dv": grads[2]}
    errors = {}
    for (key, mine), theirs in zip(ours.items(), ref):
        expected = theirs[:, :, rows].to(torch.float64)
        got = mine.detach().to(torch.float64)
        finite = torch.isfinite(expected)
        same_inf = bool(torch.equal(torch.isfinite(got), finite)) and bool(
            (got[~finite] == expected[~finite]).all()
        )
        diff = float((got[finite] - expected[finite]).abs().max()) if finite.any() else 0.0
        scale = max(1.0, float(expected[finite].abs().max()) if finite.any() else 1.0)
        errors[key] = {"error": diff / scale, "same_infinities": same_inf, "infinite": int((~finite).sum())}
    return {
        "case": case_id(name, causal, dtype),
        "rank": rank,
        "errors": errors,
        "tolerance": tolerance,
    }


def main(rank: int, world: int, port: int, out_dir: str) -> None:
    records = []
    try:
        dist.init_process_group(
            "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
            timeout=timedelta(seconds=120),
        )  # fmt: skip
        torch.set_num_threads(1)
        for name, causal, dtype in cases(world):
            records.append(run_case(name, causal, dtype, rank, world))
        records.append(bad_input_case(rank, world))
        dist.destroy_process_group()
    except Exception:
        records.append({"kind": "crash", "rank": rank, "traceback": traceback.format_exc()})
        Path(out_dir, f"rank{rank}.json").write_text(json.dumps(records))
        raise
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps(records))


def bad_input_case(rank: int, world: int) -> dict:
    """A segment length that neither divides the shard nor is a multiple of it: the same error everywhere."""
    from attnbench.dilated.distributed import distributed_attention

    x = torch.randn(1, 2, 24, 4, dtype=torch.float64)
    try:
        distributed_attention(x, x, x, [(16, 1)], causal=True, backend="math")
    except ValueError as exc:
        return {"case": "bad-segment", "rank": rank, "error": str(exc)}
    return {"case": "bad-segment", "rank": rank, "error": None}
