"""Cross-rank agreement for the benchmark: every rank learns the worst outcome of a step, so no rank
runs ahead into a collective that a failed peer will never join."""

from __future__ import annotations

import gc

import torch
import torch.distributed as dist

from attnbench.bench.timing import is_oom
from attnbench.cp import comm

OK, OOM, BAD_INPUT, ERROR = 0, 1, 2, 3
STATUS_NAMES = {OOM: "oom", BAD_INPUT: "unsupported", ERROR: "error"}


def agree_max(value: float, group) -> float:
    t = torch.tensor([float(value)], dtype=torch.float64, device=comm.comm_device(group))
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    return float(t.item())


def align(group, device) -> None:
    """All ranks reach this point, and this rank's device has finished its queued work."""
    agree_max(0.0, group)
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def classify(exc: BaseException) -> int:
    if is_oom(exc):
        return OOM
    return BAD_INPUT if isinstance(exc, ValueError) else ERROR


class AgreedFailure(Exception):
    """A step failed on some rank and every rank knows it (status, message): raised on every rank."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


def outcome(exc: BaseException) -> tuple[int, str]:
    """(status, "Type: first line") of an exception, for agreement."""
    text = str(exc).splitlines()[0] if str(exc) else ""
    return classify(exc), f"{type(exc).__name__}: {text}"


def agree_status(status: int, message: str, group) -> tuple[int, str]:
    """Worst status over ranks and, if not ok, the messages of the ranks that failed."""
    worst = int(agree_max(status, group))
    return worst, (_failed_messages(worst, status, message, group) if worst != OK else "")


def agree_sample(status: int, message: str, value: float, group) -> tuple[int, str, float]:
    """Worst status and max of `value` over ranks in one all_reduce (the messages only if one failed)."""
    t = torch.tensor([float(status), float(value)], dtype=torch.float64, device=comm.comm_device(group))
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    worst, value = int(t[0].item()), float(t[1].item())
    return worst, (_failed_messages(worst, status, message, group) if worst != OK else ""), value


def _failed_messages(worst: int, status: int, message: str, group) -> str:
    messages = [None] * comm.group_size(group)
    dist.all_gather_object(messages, (status, message), group=group)
    failed = [f"rank {r}: {m}" for r, (s, m) in enumerate(messages) if s == worst]
    return "; ".join(failed)[:1000]


def attempt(step, group) -> tuple[int, str]:
    """Run `step()` on every rank, then agree on the worst outcome (one all_reduce, more if it failed).

    Safe for failures that happen on every rank alike or before any communication (bad inputs, an
    unsupported option, the communication-free rehearsal). A failure on one rank while its peers wait
    in a collective cannot be agreed on; the benchmark avoids that case with the rehearsal.
    """
    status, message = OK, ""
    try:
        step()
    except Exception as exc:  # noqa: BLE001 - classified, agreed across ranks, reported as a row
        status, message = outcome(exc)
    return agree_status(status, message, group)


def release(device) -> None:
    """Return a finished row's device memory before the next row allocates (CUDA only: gc.collect
    costs ~0.1 s with torch loaded, more than a whole CPU smoke row)."""
    if device.type == "cuda":
        gc.collect()
        torch.cuda.empty_cache()
