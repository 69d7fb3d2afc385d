"""The one row schema: every committed results file reads through attnbench.rows and writes back the
same objects, the Status and Pass vocabularies keep their committed spellings, and bad rows are named."""

import json
from pathlib import Path

import pytest

from attnbench.rows import (
    CpCheckRow,
    OverlapRow,
    Pass,
    Result,
    ScanRow,
    Status,
    StepRow,
    TileAuditRow,
    read_jsonl,
    status_of_severity,
    write_jsonl,
)

OUTPUTS = Path(__file__).resolve().parents[2] / "outputs"

# which row type each committed JSONL file holds, by file name; anything else is a kernel Result
KIND_BY_NAME = {
    "correctness.jsonl": CpCheckRow,
    "overlap.jsonl": OverlapRow,
    "steps_fp32.jsonl": StepRow,
    "steps_bf16.jsonl": StepRow,
    "variants.jsonl": StepRow,
    "scan_eager.jsonl": ScanRow,
    "scan_compiled.jsonl": ScanRow,
    "audit.jsonl": TileAuditRow,
}
COMMITTED = sorted(OUTPUTS.glob("**/*.jsonl"))


def test_committed_outputs_exist():
    assert len(COMMITTED) >= 20, f"expected the committed results under {OUTPUTS}"


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: str(p.relative_to(OUTPUTS)))
def test_committed_rows_read_and_write_back_the_same_values(path, tmp_path):
    kind = KIND_BY_NAME.get(path.name, Result)
    rows = read_jsonl(path, kind)
    label = path.relative_to(OUTPUTS).parts[1]
    if label == "cpu" and not rows:
        return  # a GPU-only cell on the CPU smoke run writes an empty file and says why in its stdout
    assert rows, f"{path} holds no rows"
    assert all(isinstance(r.status, Status) for r in rows)
    write_jsonl(tmp_path / path.name, rows)
    original = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    again = [json.loads(line) for line in (tmp_path / path.name).read_text().splitlines()]
    for lineno, (before, after) in enumerate(zip(original, again, strict=True), 1):
        # rows written before a field existed (e.g. `block`) gain it as null; nothing else changes
        added = {k: v for k, v in after.items() if k not in before}
        assert set(added.values()) <= {None}, f"{path}:{lineno}: new non-null fields {added}"
        assert {k: after[k] for k in before} == before, f"{path}:{lineno}"


def test_status_and_pass_keep_their_committed_spellings():
    assert [s.value for s in Status] == [
        "ok", "oom", "unsupported", "unavailable", "incorrect", "error", "skipped"
    ]  # fmt: skip
    assert Status.OK == "ok" and json.dumps(Status.OOM) == '"oom"' and f"{Status.ERROR}" == "error"
    assert str([Status.OK, Pass.FWD_BWD]) == "['ok', 'fwd_bwd']"  # printed as the strings they replace
    assert {p.value: (p.title, p.flop_multiplier) for p in Pass} == {
        "fwd": ("forward", 1.0),
        "bwd": ("backward", 2.5),
        "fwd_bwd": ("forward + backward", 3.5),
    }


def test_unknown_status_and_pass_are_named():
    with pytest.raises(ValueError, match="'fine' is not one of"):
        Status.parse("fine")
    with pytest.raises(ValueError, match="'forward' is not one of"):
        Pass.parse("forward")


def test_agreed_severity_maps_back_to_the_worst_status():
    worst = max(s.severity for s in (Status.OK, Status.UNSUPPORTED, Status.OOM))
    assert status_of_severity(worst) is Status.UNSUPPORTED
    assert status_of_severity(Status.OK.severity) is Status.OK


def test_bad_typed_row_names_file_line_and_field(tmp_path):
    path = tmp_path / "overlap.jsonl"
    good = {"strategy": "ring", "seq_len": 128, "mask": "causal", "pass": "fwd", "world_size": 2,
            "heads": 4, "head_dim": 16, "dtype": "bfloat16", "rank": 0, "status": "ok"}  # fmt: skip
    path.write_text(json.dumps(good) + "\n\n" + json.dumps({**good, "colour": "red"}) + "\n")
    with pytest.raises(ValueError, match=r"overlap\.jsonl:3: bad OverlapRow row: .*colour"):
        read_jsonl(path, OverlapRow)
    path.write_text(json.dumps({**good, "status": "fine"}) + "\n")
    with pytest.raises(ValueError, match=r"overlap\.jsonl:1: .*'fine'"):
        read_jsonl(path, OverlapRow)


def test_unmeasured_optional_fields_are_left_out():
    row = ScanRow("eager", 16, 256, 8, 100, "oom", reason="forward: OOM", failed_phase="forward")
    written = row.to_dict()
    assert "forward_ms" not in written and written["failed_phase"] == "forward"
    assert written["status"] == "oom" and type(written["status"]) is str


def test_a_tile_audit_row_keeps_the_clock_its_gpu_timing_recorded(tmp_path):
    # On a GPU every Timing carries its conditions (clock, power, warm-up); the CS336 tile audit puts them
    # in its rows, so its schema must take them: the leaderboard cell failed on an H100 when it did not.
    from attnbench.bench.timing import summarize
    from attnbench.rows import write_jsonl_dicts

    gpu_timing = summarize([2.0, 2.1, 2.2], "cuda_event", timing_method="cuda_event_per_call", warmup_s=1.2,
                           warmup_settled=True, sm_clock_mhz=1650.0, power_w=690.0, temperature_c=61.0,
                           clock_source="nvml")  # fmt: skip
    row = {"kernel": "forward", "tile": "fwd 128x128 w8 s3", "block_m": 128, "block_n": 128, "status": "ok",
           "ms": gpu_timing.ms_median, **gpu_timing.conditions()}  # fmt: skip
    write_jsonl_dicts(tmp_path / "audit.jsonl", [row], TileAuditRow)
    (back,) = read_jsonl(tmp_path / "audit.jsonl", TileAuditRow)
    assert (back.sm_clock_mhz, back.power_w, back.warmup_settled) == (1650.0, 690.0, True)


def test_every_candidate_tile_of_the_audit_fits_the_schema(tmp_path):
    # The audit writes each tile's own fields (tile.to_dict()); the backward tiles carry the dQ kernel's
    # warps and stages, which the schema refused on an H100 (leaderboard cell, 2026-11-26). Built here the
    # way studies/cs336_systems/kernels.py builds them, from every real candidate.
    from attnbench.kernels.flash_attention2 import configs
    from attnbench.rows import write_jsonl_dicts

    rows = [{"kernel": "forward", "tile": t.label(), **t.to_dict(), "status": "ok"}
            for causal in (True, False) for t in configs.forward_candidates(2, 64, causal)]  # fmt: skip
    rows += [{"kernel": f"backward ({mode} dQ)", "tile": t.label(), "dq_mode": mode, **t.to_dict(), "status": "ok"}
             for mode in ("recompute", "atomic") for t in configs.backward_candidates(2, 64)]  # fmt: skip
    assert any(r.get("dq_warps") is not None for r in rows)  # the backward tiles' own dQ fields
    write_jsonl_dicts(tmp_path / "audit.jsonl", rows, TileAuditRow)
    back = read_jsonl(tmp_path / "audit.jsonl", TileAuditRow)
    # every field of every tile comes back as written (a field dropped on the way would show here)
    assert [r.to_dict() for r in back] == [
        {**{k: v for k, v in r.items() if v is not None}, "reason": ""} for r in rows
    ]
