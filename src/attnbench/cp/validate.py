"""Input checks that run before any communication and fail the same way on every rank.

One small all_gather of each rank's shapes, dtype and integer options (skipped with
check_ranks=False, e.g. inside a timed loop after a checked first call). A problem found on one rank
is announced to all through that gather, so every rank raises the same ValueError instead of some
ranks waiting forever in a collective.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch
import torch.distributed as dist

from attnbench.cp import comm
from attnbench.cp.local import LocalKernel

DTYPES = (torch.float64, torch.float32, torch.float16, torch.bfloat16)
Requirements = Callable[[tuple[int, int, int, int], int], list[str]]


def _shape(t) -> tuple[int, ...]:
    return tuple(t.shape) if isinstance(t, torch.Tensor) else ()


def _local_problems(q, k, v, kernel: LocalKernel, backend: str) -> list[str]:
    tensors = {"q": q, "k": k, "v": v}
    for name, t in tensors.items():
        if not isinstance(t, torch.Tensor):
            return [f"{name} is {type(t).__name__}, not a tensor"]
        if t.dim() != 4:
            return [f"{name} must be [batch, heads, seq_local, head_dim], got shape {tuple(t.shape)}"]
    problems = []
    if not (q.shape == k.shape == v.shape):
        problems.append(
            f"q, k and v must have the same shape (no GQA), got q {tuple(q.shape)} "
            f"k {tuple(k.shape)} v {tuple(v.shape)}"
        )
    if not (q.dtype == k.dtype == v.dtype) or q.dtype not in DTYPES:
        problems.append(
            f"q, k and v must share one floating dtype of {DTYPES}, got {q.dtype}/{k.dtype}/{v.dtype}"
        )
    if not (q.device == k.device == v.device):
        problems.append(f"q, k and v are on different devices: {q.device}/{k.device}/{v.device}")
    want = "cuda" if backend == "nccl" else "cpu" if backend == "gloo" else None
    if want and q.device.type != want:
        problems.append(f"the {backend} backend needs {want} tensors, got {q.device}")
    if not problems:
        reason = kernel.unavailable(q.device, q.dtype, q.shape[-1])
        if reason:
            problems.append(f"local kernel {kernel.name!r} cannot run: {reason}")
    return problems


def _summary(shapes: list[int], options: Mapping[str, int]) -> str:
    q, k, v = (tuple(x for x in shapes[i : i + 4] if x >= 0) for i in (1, 5, 9))
    dtype = DTYPES[shapes[13]] if 0 <= shapes[13] < len(DTYPES) else "?"
    opts = "".join(f" {name}={val}" for name, val in zip(options, shapes[14:]))
    return f"q {q} k {k} v {v} {str(dtype).replace('torch.', '')}{opts}"


def validate(
    q,
    k,
    v,
    group,
    *,
    strategy: str,
    kernel: LocalKernel,
    requirements: Requirements,
    options: Mapping[str, int] | None = None,
    check_ranks: bool = True,
) -> None:
    """Raise the same ValueError on every rank for bad or inconsistent inputs; return None if fine."""
    options = dict(options or {})
    world = comm.group_size(group)
    backend = dist.get_backend(group)
    problems = _local_problems(q, k, v, kernel, backend)
    if check_ranks and world > 1 and not comm.in_rehearsal():
        pads = [list(_shape(t)[:4]) + [-1] * (4 - len(_shape(t)[:4])) for t in (q, k, v)]
        dtype = DTYPES.index(q.dtype) if isinstance(q, torch.Tensor) and q.dtype in DTYPES else -1
        row = [1 if problems else 0, *pads[0], *pads[1], *pads[2], dtype, *[int(x) for x in options.values()]]
        mine = torch.tensor(row, dtype=torch.int64, device=comm.comm_device(group))
        rows = comm.all_gather_stacked(mine, group).tolist()
        if any(r[0] for r in rows):
            messages = [None] * world
            dist.all_gather_object(messages, problems, group=group)
            detail = "; ".join(f"rank {r}: {', '.join(m)}" for r, m in enumerate(messages) if m)
            raise ValueError(f"{strategy}: bad inputs on {detail}")
        if any(r[1:] != rows[0][1:] for r in rows):
            detail = "; ".join(f"rank {r}: {_summary(row, options)}" for r, row in enumerate(rows))
            raise ValueError(
                f"{strategy}: inputs differ across ranks (every rank needs the same "
                f"[batch, heads, seq_local, head_dim], dtype and options): {detail}"
            )
    elif problems:
        raise ValueError(f"{strategy}: bad inputs: {'; '.join(problems)}")
    unmet = requirements(tuple(q.shape), world)
    if unmet:
        raise ValueError(
            f"{strategy}: {'; '.join(unmet)} (layout [batch, heads, seq_local, head_dim], "
            f"shape {tuple(q.shape)}, world {world})"
        )
