"""Worker of test_cp_reference.py: a 2-rank gloo group whose timeout (GROUP_TIMEOUT_S) is far shorter
than the single-GPU reference's warm-up and timing, and rank 0 slower per call than rank 1. A reference
timed by one rank while its peers waited at a barrier would time out here; one timed by every rank at
once, meeting after every call, cannot."""

from __future__ import annotations

import json
import time
import traceback
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

GROUP_TIMEOUT_S = 3.0
WARMUP_S = 6.5  # twice the group's timeout
RANK0_DELAY_S = 0.2  # per call on rank 0 only: its peer waits this long at every meeting


def main(rank: int, world: int, port: int, outdir: str) -> None:
    torch.set_num_threads(1)
    out = Path(outdir, f"rank{rank}.json")
    try:
        # imported before the group exists: under a loaded test machine one rank's import can outlast
        # the short group timeout, which is not what this test is about
        from attnbench.studies.context_parallel.measure import measure_reference

        dist.init_process_group(
            "gloo",
            init_method=f"tcp://127.0.0.1:{port}",
            rank=rank,
            world_size=world,
            timeout=timedelta(seconds=GROUP_TIMEOUT_S),
        )
        original = torch.nn.functional.scaled_dot_product_attention

        def slow_on_rank0(*args, **kwargs):
            if rank == 0:
                time.sleep(RANK0_DELAY_S)
            return original(*args, **kwargs)

        torch.nn.functional.scaled_dot_product_attention = slow_on_rank0
        began = time.perf_counter()
        row = measure_reference(
            16, heads=2, head_dim=8, dtype="float32", min_reps=3, max_reps=20, min_time_s=1.0,
            warmup_min_s=WARMUP_S,
        )  # fmt: skip
        seconds = time.perf_counter() - began
        torch.nn.functional.scaled_dot_product_attention = original
        dist.destroy_process_group()
        out.write_text(json.dumps({"row": row.to_dict(), "seconds": seconds}))
    except Exception as exc:  # noqa: BLE001 - the parent asserts on it
        out.write_text(json.dumps({"error": f"{type(exc).__name__}: {exc}", "tb": traceback.format_exc()}))
