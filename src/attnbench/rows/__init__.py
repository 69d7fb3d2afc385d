"""Every report's rows, in one torch-free package: the shared vocabularies (Status, Pass), the kernel
rows (Workload, Result, and how to rank them), the rows of the CS336 and context-parallel reports that
are not kernel rows, and the one JSON Lines reader/writer. Measuring code writes rows through it and
report code reads them through it; nothing here imports torch (tests/test_layering.py checks)."""

from attnbench.rows.context_parallel import CpCheckRow, OverlapRow
from attnbench.rows.cs336 import ScanRow, StepRow, TileAuditRow
from attnbench.rows.jsonl import (
    read_jsonl,
    read_jsonl_dicts,
    read_rows_document,
    write_jsonl,
    write_jsonl_dicts,
    write_rows_document,
)
from attnbench.rows.kernel import (
    Result,
    Workload,
    best_by_workload,
    is_quantized,
    speedup_over,
    to_frame,
    usable,
)
from attnbench.rows.vocab import PASS_TITLES, PASSES, STATUSES, Pass, Status, status_of_severity

__all__ = [
    "PASSES",
    "PASS_TITLES",
    "STATUSES",
    "CpCheckRow",
    "OverlapRow",
    "Pass",
    "Result",
    "ScanRow",
    "Status",
    "StepRow",
    "TileAuditRow",
    "Workload",
    "best_by_workload",
    "is_quantized",
    "read_jsonl",
    "read_jsonl_dicts",
    "read_rows_document",
    "speedup_over",
    "status_of_severity",
    "to_frame",
    "usable",
    "write_jsonl",
    "write_jsonl_dicts",
    "write_rows_document",
]
