"""The single-GPU reference row on the timing protocol, at 2 gloo ranks with a short group timeout: a
warm-up and timing longer than the timeout must not time out (every rank measures at once and the
ranks meet after every call), and the row records its warm-up and clock fields like the strategies'."""

import json
import multiprocessing as mp
import tempfile
import time
from pathlib import Path

import cp_worker_reference as worker
import pytest
from cp_harness import free_port


@pytest.mark.timeout(120)
def test_a_reference_longer_than_the_group_timeout_does_not_time_out():
    ctx = mp.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="cp_ref_") as tmp:
        port = free_port()
        procs = [ctx.Process(target=worker.main, args=(r, 2, port, tmp), daemon=True) for r in range(2)]
        for p in procs:
            p.start()
        deadline = time.monotonic() + 90
        for p in procs:
            p.join(max(deadline - time.monotonic(), 0.1))
        for p in procs:
            if p.is_alive():
                p.kill()
        results = [json.loads((Path(tmp) / f"rank{r}.json").read_text()) for r in range(2)]
    for rank, res in enumerate(results):
        assert "error" not in res, f"rank {rank}: {res.get('error')}\n{res.get('tb')}"
    rank0, rank1 = (res["row"] for res in results)
    assert rank0 == rank1  # agreed: the same row on every rank
    assert rank0["status"] == "ok", rank0
    # the warm-up alone outlasted the group's timeout twice over, and nothing timed out
    assert rank0["warmup_s"] >= worker.WARMUP_S > 2 * worker.GROUP_TIMEOUT_S - 1e-9
    assert results[1]["seconds"] > 2 * worker.GROUP_TIMEOUT_S
    # the slowest rank is the sample: rank 0 sleeps RANK0_DELAY_S per call
    assert rank0["ms_median"] >= worker.RANK0_DELAY_S * 1e3
    assert rank0["timing_method"] == "perf_counter" and rank0["reps"] >= 3
