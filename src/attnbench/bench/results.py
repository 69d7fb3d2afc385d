"""Moved to `attnbench.rows` (every report's row types, the Status and Pass vocabularies, the JSONL
reader/writer). This re-export remains only for modules owned elsewhere that still import from here
(bench/providers, bench/masks, bench/correctness, cp/local); new code imports `attnbench.rows`."""

from attnbench.rows import (  # noqa: F401 - re-exported
    PASSES,
    STATUSES,
    Result,
    Workload,
    best_by_workload,
    is_quantized,
    read_jsonl,
    read_rows_document,
    speedup_over,
    to_frame,
    usable,
    write_jsonl,
    write_rows_document,
)
