"""Which correctness check vouches for which timed row, and at what length the check runs.

The check length (`check_plan`). The check runs at the timed head count and head dim, at the longest
timed length whose check fits one GPU, because every rank holds the whole check on its own GPU:
    global q, k, v, dO                              4 n e
    the fp32 reference's out, dq, dk, dv and LSE     16 n + 4 H S
    then the larger of
      single-device attention (3 input clones, out, 3 grads; fp32 dq accumulator and LSE)
                                                     7 n e + 4 n + 4 H S
      its kept out, dq, dk, dv + one strategy call (inputs, clones, out, grads, blocks in flight)
                                                     4 n e + 16 n e / world
    plus the reference's working set (one head in fp32, one chunk of logits: verify.REF_CHUNK_BYTES x 4)
with n = batch x heads x S x head_dim elements and e bytes per element. The longest timed length whose
total is at most CHECK_MEMORY_FRACTION of the GPU's memory is checked; if none fits, the shortest timed
length halved until it fits. On a CPU (no device limit) the longest timed length.

Vouching (`attach_checks`). A timed row is vouched for only by a check of the same strategy label
(strategy + local kernel), mask, world size, heads, head dim and dtype: at its own length ("same
shape") or at another length ("same heads, checked at N tokens"). A check at another head count, or
none, leaves the row "not checked" (ok None) with the reason; a failed check makes the row incorrect.

Baselines (`vouch_baseline`). The correctness cell also runs single-device attention with each local
kernel on the whole check sequence and records its error against the fp32 reference, rank by rank
(`rank_errors[r][m]["single"]`, each rank's shard of the whole tensor). A single-GPU baseline row is
vouched for by that run of its own kernel (SDPA's math backend on a CPU is the cpu_math kernel), mask,
heads, head dim and dtype: for out, dq, dk, dv, the worst rank's max |error| must be within
bench.correctness's max_abs bound for the dtype (x2 for gradients) times max |reference|; rel_l2 is not
recorded by the cell, so this is the max-abs half of that rule. Without such a record the baseline is
"not checked", with the reason.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from attnbench.rows import Result

CHECK_MEMORY_FRACTION = 0.75  # the model leaves out NCCL's buffers: at 0.9 the all-gather of a 65 GiB check ran out on an 80 GB H100
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4, "float64": 8}


def check_bytes(seq_len: int, *, heads: int, head_dim: int, dtype: str, world: int, batch: int = 1) -> int:
    """Predicted peak bytes on one GPU of a correctness check at `seq_len` tokens (the module's rule)."""
    from attnbench.studies.context_parallel.verify import REF_CHUNK_BYTES

    e = DTYPE_BYTES[dtype]
    n = batch * heads * seq_len * head_dim
    lse = 4 * batch * heads * seq_len
    single = 7 * n * e + 4 * n + lse
    strategy = 4 * n * e + 16 * n * e // max(world, 1)
    workspace = 8 * seq_len * head_dim * 4 + 4 * REF_CHUNK_BYTES
    return 4 * n * e + 16 * n + lse + max(single, strategy) + workspace


def check_plan(config: dict, world: int, device_bytes: int | None) -> dict:
    """The correctness check's shape: the timed heads and head dim at the rule's length (module doc)."""
    shape = config["shape"]
    timed = sorted({int(seq) for seq, _mask in config["points"]})
    if not timed:
        raise ValueError("check_plan: the profile has no timed points (config['points'] is empty)")
    size = {k: shape[k] for k in ("heads", "head_dim", "dtype", "batch")}

    def fits(seq: int) -> bool:
        return (
            device_bytes is None
            or check_bytes(seq, world=world, **size) <= CHECK_MEMORY_FRACTION * device_bytes
        )

    fitting = [s for s in timed if fits(s)]
    seq = fitting[-1] if fitting else timed[0]
    while not fits(seq) and seq % (4 * world) == 0:
        seq //= 2
    gib = 2**30
    limit = (
        f"{CHECK_MEMORY_FRACTION:.0%} of {device_bytes / gib:.0f} GiB" if device_bytes else "no device limit"
    )
    return {
        "seq_len": seq,
        "heads": shape["heads"],
        "head_dim": shape["head_dim"],
        "predicted_gib": round(check_bytes(seq, world=world, **size) / gib, 1),
        "rule": (
            f"the longest timed length whose check fits one GPU ({limit}; predicted "
            f"{check_bytes(seq, world=world, **size) / gib:.1f} GiB at {seq} tokens, timed lengths {timed})"
        ),
        "fits": fits(seq),
    }


def _key(label: str, mask: str) -> tuple[str, str]:
    return label, mask


def vouch(row: Result, checks: Iterable[dict]) -> dict:
    """The check that vouches for `row` (module doc): {"by", "scope", "status", ...} or "not checked"."""
    label = row.provider.removeprefix("cp_")
    w = row.workload
    mine = [c for c in checks if (c["strategy"], c["mask"]) == _key(label, w.mask)]
    if not mine:
        return {
            "by": None,
            "scope": "not checked",
            "reason": "no correctness check of this strategy and mask",
        }
    same = [
        c
        for c in mine
        if c["heads"] == w.heads_q
        and c["head_dim"] == w.head_dim
        and c["dtype"] == w.dtype
        and c["world_size"] == row.extra.get("world_size")
    ]
    if not same:
        c = mine[0]
        return {
            "by": None,
            "scope": "not checked",
            "reason": (
                f"the check ran at {c['heads']} heads x {c['head_dim']}, {c['dtype']}, world {c['world_size']}; "
                f"this row is {w.heads_q} x {w.head_dim}, {w.dtype}, world {row.extra.get('world_size')}"
            ),
        }
    exact = [c for c in same if c["seq_len"] == w.seqlen_q]
    check = (exact or sorted(same, key=lambda c: -c["seq_len"]))[0]
    scope = "same shape" if exact else f"same heads, checked at {check['seq_len']} tokens"
    if check.get("ok") is None:  # the check could not run (unavailable, error, oom): it vouches for nothing
        return {
            "by": None,
            "scope": "not checked",
            "status": check["status"],
            "reason": f"the check ({scope}) was {check['status']}: {check.get('reason', '')}",
        }
    return {
        "by": f"correctness {check['strategy']} {check['mask']} {check['seq_len']} tokens x {check['heads']} heads",
        "scope": scope,
        "status": check["status"],
        "ok": check.get("ok"),
        "seq_len": check["seq_len"],
        "reason": check.get("reason", ""),
    }


SINGLE_KERNELS = {"math": "cpu_math"}  # a baseline's kernel -> the check's name for the same kernel
BASELINE_METRICS = ("out", "dq", "dk", "dv")


def _worst(values) -> float:
    """The largest value, NaN before everything (a NaN error fails every bound)."""
    return max(values, key=lambda v: (math.isnan(v), v))


def _reference_max(error: dict) -> float:
    """max |fp32 reference| of one rank's shard: recorded as ref_max, or (older records) recovered from
    the strategy's bound, which verify.check_strategy builds as SINGLE_FACTOR x single + RELATIVE_TOLERANCE
    x max |reference|."""
    if error.get("ref_max") is not None:
        return error["ref_max"]
    from attnbench.studies.context_parallel.verify import RELATIVE_TOLERANCE, SINGLE_FACTOR

    return (error["bound"] - SINGLE_FACTOR * error["single"]) / RELATIVE_TOLERANCE


def vouch_baseline(row: Result, checks: Iterable[dict]) -> dict:
    """The correctness cell's single-device run that vouches for a baseline row (module doc)."""
    from attnbench.bench.correctness import tolerance_for

    w, kernel = row.workload, row.extra.get("kernel")
    kernel = SINGLE_KERNELS.get(kernel, kernel)
    shape = (kernel, w.mask, w.heads_q, w.head_dim, w.dtype)
    mine = [
        c
        for c in checks
        if (c.get("kernel"), c["mask"], c["heads"], c["head_dim"], c["dtype"]) == shape
        and c.get("rank_errors")
    ]
    if not mine:
        what = f"{kernel} run" if kernel else "run of its kernel (the row names none)"
        return {
            "by": None,
            "scope": "not checked",
            "reason": f"the correctness cell has no single-device {what} at {w.heads_q} heads x "
            f"{w.head_dim}, {w.dtype}, {w.mask}, with per-rank errors",
        }
    check = ([c for c in mine if c["seq_len"] == w.seqlen_q] or sorted(mine, key=lambda c: -c["seq_len"]))[0]
    errors = {}
    for m in BASELINE_METRICS:
        per_rank = [r[m] for r in check["rank_errors"]]
        bound = tolerance_for(w.dtype, grad=m != "out").max_abs * _worst(map(_reference_max, per_rank))
        errors[m] = {"single": _worst(e["single"] for e in per_rank), "bound": bound}
    failed = [m for m, e in errors.items() if not e["single"] <= e["bound"]]
    n = check["seq_len"]
    return {
        "by": f"correctness: single-device {kernel} {w.mask} {n} tokens x {w.heads_q} heads vs fp32",
        "scope": "same shape" if n == w.seqlen_q else f"same heads, checked at {n} tokens",
        "ok": not failed,
        "seq_len": n,
        "errors": errors,
        "reason": f"max |error| beyond the {w.dtype} bound: {', '.join(failed)}" if failed else "",
    }


def attach_checks(rows: Iterable[Result], checks: Iterable[dict]) -> list[Result]:
    """Every timed row with `extra["checked_by"]` and `ok` from the check that vouches for it (module doc):
    a strategy's own check, a single-GPU baseline's kernel run alone. Returns the rows (changed in place)."""
    checks = list(checks)
    rows = list(rows)
    for row in rows:
        baseline = row.provider.startswith("single_gpu_")
        found = vouch_baseline(row, checks) if baseline else vouch(row, checks)
        row.extra["checked_by"] = found
        if row.status != "ok":
            continue
        if found["scope"] == "not checked" or found.get("ok") is None:
            row.ok = None
            continue
        row.ok = bool(found["ok"])
        if not row.ok:
            row.status = "incorrect"
            row.reason = f"incorrect at the check ({found['scope']}): {found['reason']}"
    return rows
