"""Join a torch.distributed job for context-parallel attention: torchrun, srun, or one process alone.

rank, world, device = init_distributed()   # NCCL on GPUs (gloo on CPU), device = cuda:LOCAL_RANK
"""

from __future__ import annotations

import atexit
import os
from datetime import timedelta

import torch
import torch.distributed as dist

from attnbench.cp import comm


def _env_from_slurm() -> None:
    """srun with one task per GPU (no torchrun): take rank and sizes from SLURM's variables.
    MASTER_ADDR/MASTER_PORT must still be exported (README: the first node of the allocation)."""
    if "RANK" in os.environ or "SLURM_PROCID" not in os.environ:
        return
    os.environ["RANK"] = os.environ["SLURM_PROCID"]
    os.environ["WORLD_SIZE"] = os.environ["SLURM_NTASKS"]
    os.environ.setdefault("LOCAL_RANK", os.environ.get("SLURM_LOCALID", "0"))
    per_node = os.environ.get("SLURM_NTASKS_PER_NODE", "").split("(")[0]
    if per_node.isdigit():
        os.environ.setdefault("LOCAL_WORLD_SIZE", per_node)


def _env_for_one_process() -> None:
    """Started without torchrun or srun (e.g. `uv run cells/context_parallel/bench.py`): a group of one
    process on this machine, so the code runs (world size 1) instead of failing on missing variables."""
    if "RANK" in os.environ or "WORLD_SIZE" in os.environ:
        return
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(port))


def init_distributed(backend: str | None = None, timeout_s: float = 900) -> tuple[int, int, torch.device]:
    """Join the torchrun (or srun) job, or form a one-process group when started alone; returns (rank,
    world, device). Device: cuda:LOCAL_RANK, the only single-node assumption (LOCAL_WORLD_SIZE also
    sets the default double-ring window and USP degree)."""
    if not dist.is_initialized():
        _env_from_slurm()
        _env_for_one_process()
        backend = backend or ("nccl" if torch.cuda.is_available() else "gloo")
        if backend == "nccl":
            local = int(os.environ.get("LOCAL_RANK", "0"))
            # A launcher that binds one GPU per task shows it as device 0.
            torch.cuda.set_device(local if local < torch.cuda.device_count() else 0)
        dist.init_process_group(backend, timeout=timedelta(seconds=timeout_s))
        if dist.get_world_size() == 1:  # torchrun's ranks exit as they always have (untested here on NCCL)
            atexit.register(_leave)
    return dist.get_rank(), dist.get_world_size(), comm.comm_device(None)


def _leave() -> None:
    """Destroy a one-process group before the interpreter exits: left to the interpreter's teardown it
    aborted a process after its work was done ("terminate called without an active exception", once in
    CI, gloo, the output already complete)."""
    if dist.is_initialized():
        dist.destroy_process_group()
