"""A row's workload: the fields that make two rows the same problem (README: results.jsonl)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping

SHAPE_FIELDS = ("batch", "seqlen_q", "seqlen_k", "heads_q", "heads_kv", "head_dim", "dtype", "mask",
                "window", "block", "doc_lens")  # fmt: skip
EXTRA_FIELDS = ("pattern", "branches")  # a sparse report's pattern (dilated attention) and its branches


def workload_key(row: Mapping, leave_out: Iterable[str] = ()) -> str:
    """The row's workload as one string; `leave_out` names fields not compared (e.g. the lengths)."""
    left = set(leave_out)
    extra = row.get("extra") or {}
    fields = [row.get(f) for f in SHAPE_FIELDS if f not in left]
    fields += [extra.get(f) for f in EXTRA_FIELDS if f not in left]
    return json.dumps(fields, default=str)
