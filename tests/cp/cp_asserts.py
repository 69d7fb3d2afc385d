"""Assertions over the records the spawned ranks wrote (shared by the world-size test modules)."""

from cp_harness import by_case

EXPECTED_ERRORS = {
    "err-zigzag-odd-seq": "even seq_local",
    "err-allgather-odd-seq": "even seq_local",
    "err-ulysses-heads": "not divisible by the Ulysses degree",
    "err-usp-degrees": "must equal the world size",
    "err-usp-heads": "not divisible by the Ulysses degree",
    "err-shape-mismatch": "inputs differ across ranks",
    "err-dtype-mismatch": "inputs differ across ranks",
    "err-option-mismatch": "inputs differ across ranks",
    "err-local-rank1": "bad inputs on rank 1",
    "err-window": "must divide the world size",
    "err-torch-cp-cpu": "context_parallel dispatches only the CUDA SDPA ops",
    "err-unknown-kernel": "unknown local kernel",
    "err-unknown-option": "unknown options",
}
METRICS = ("out", "lse", "dq", "dk", "dv")


def assert_matches_reference(group: dict, case_id: str) -> None:
    per_rank = by_case(group, case_id)
    problems = []
    for rank, recs in enumerate(per_rank):
        errors = [r for r in recs if r["kind"] == "exception"]
        if errors:
            first = errors[0]
            problems.append(f"rank {rank}: {first['type']}: {first['message']}\n{first['traceback']}")
            continue
        checks = {r["metric"]: r for r in recs if r["kind"] == "check"}
        if set(checks) != set(METRICS):
            problems.append(f"rank {rank}: checked {sorted(checks)}, expected {METRICS}")
        problems += [
            f"rank {rank} {m}: max err {c['err']} > {c['bound']:.3g} {c.get('note', '')}"
            for m, c in checks.items()
            if not c["ok"]
        ]
    assert not problems, f"{case_id}:\n" + "\n".join(problems)


def assert_same_error_everywhere(group: dict, case_id: str) -> None:
    expected = EXPECTED_ERRORS[case_id]
    per_rank = by_case(group, case_id)
    assert all(per_rank), f"{case_id}: some rank recorded nothing: {per_rank}"
    for rank, (rec,) in enumerate(per_rank):
        assert rec["kind"] == "raised", f"{case_id}: rank {rank} raised nothing"
        assert rec["type"] == "ValueError", f"{case_id}: rank {rank} raised {rec['type']}: {rec['message']}"
        assert expected in rec["message"], f"{case_id}: rank {rank} message: {rec['message']}"


def rows(group: dict, case_id: str) -> list[dict]:
    per_rank = by_case(group, case_id)
    out = []
    for rank, recs in enumerate(per_rank):
        assert len(recs) == 1, f"{case_id}: rank {rank} recorded {recs}"
        assert recs[0]["kind"] == "row", f"{case_id}: rank {rank}: {recs[0]}"
        out.append(recs[0]["row"])
    return out
