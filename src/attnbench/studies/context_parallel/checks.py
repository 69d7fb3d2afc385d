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
"""

from __future__ import annotations

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


def attach_checks(rows: Iterable[Result], checks: Iterable[dict]) -> list[Result]:
    """Every timed strategy row with `extra["checked_by"]` and `ok` from the check that vouches for it
    (module doc); single-GPU baselines say they are baselines. Returns the rows (changed in place)."""
    checks = list(checks)
    rows = list(rows)
    for row in rows:
        if row.provider.startswith("single_gpu_"):
            row.extra["checked_by"] = {"by": None, "scope": "baseline (not a strategy)"}
            continue
        found = vouch(row, checks)
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
