"""Helpers of the site-rendering tests: a fake outputs tree (two labels, every artifact kind), page slices."""

from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path

NOTEBOOK_MD = """\
#!/usr/bin/env -S uv run attnbench run
---
title: Bench <demo>
description: A fake benchmark
params:
  profile: smoke
---
# Heading

## Cell make

## Results

## Results

| provider | ms |
|---|---|
| sdpa | 1.5 |

Raw <b>html</b> stays text. ![remote](https://example.com/x.png)

```python id=make collapse-code
print("making")
```

```bash
echo shown-only
```

```python id=boom needs=make
raise SystemExit(1)
```

```python id=after needs=boom collapse-output
print("never")
```

```python id=later
print("later")
```
"""


SVG = (
    '<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"><script>alert(1)</script>'
    '<rect width="10" height="10" onclick="alert(2)"/></svg>'
)


def _png() -> bytes:
    """A valid 1x1 PNG, built with the standard library."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", ihdr)
        + chunk(b"IDAT", zlib.compress(b"\0\xff\0\0"))
        + chunk(b"IEND", b"")
    )


def _cell(
    label_dir: Path,
    cell: str,
    status: str,
    *,
    reason: str = "",
    stdout: str = "",
    stderr: str = "",
    files: dict[str, bytes | str] | None = None,
    finished: str = "2025-05-01T10:00:05Z",
) -> None:
    cell_dir = label_dir / cell
    (cell_dir / "artifacts").mkdir(parents=True)
    for rel, data in (files or {}).items():
        path = cell_dir / "artifacts" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data if isinstance(data, bytes) else data.encode())
    (cell_dir / "stdout.txt").write_text(stdout)
    (cell_dir / "stderr.txt").write_text(stderr)
    (cell_dir / "result.json").write_text(
        json.dumps(
            {
                "cell": cell,
                "status": status,
                "reason": reason,
                "key": "k",
                "key_parts": {},
                "started": "2025-05-01T10:00:00Z",
                "finished": finished,
                "duration_s": 1.25,
                "returncode": 0,
                "command": ["python", f"cells/bench/{cell}.py"],
                "env": {"kind": "python"},
                "artifacts": sorted(files or {}),
            }
        )
    )


def _run_json(label_dir: Path, label: str, gpu: str | None, count: int, cells: dict) -> None:
    label_dir.mkdir(parents=True, exist_ok=True)
    (label_dir / "run.json").write_text(
        json.dumps(
            {
                "notebook": "bench",
                "title": "Bench <demo>",
                "label": label,
                "started": "2025-05-01T10:00:00Z",
                "finished": "2025-05-01T10:01:00Z",
                "params": {"profile": "smoke"},
                "machine": {
                    "gpu": gpu,
                    "gpu_count": count,
                    "driver": "570.1",
                    "cuda": "12.8",
                    "torch": "2.7.0",
                    "python": "3.12.3",
                    "platform": "Linux",
                    "cpu": "Xeon",
                    "fingerprint": "abc",
                },
                "env": {"kind": "python", "python": "3.12.3", "interpreter": "python3"},
                "cells": cells,
            }
        )
    )
    (label_dir / "notebook.md").write_text(NOTEBOOK_MD)


def _result_row(provider: str, seq: int, pass_: str = "fwd", **changes) -> dict:
    """A row of results.jsonl as bench/results.py writes it (README: the result row)."""
    row = {
        "provider": provider, "family": provider.split("_")[0], "status": "ok", "reason": "",
        "batch": 1, "seqlen_q": seq, "seqlen_k": seq, "heads_q": 24, "heads_kv": 24, "head_dim": 128,
        "dtype": "bfloat16", "mask": "full", "window": None, "doc_lens": None, "pass": pass_,
        "ms_median": 0.6221279799938202, "ms_p20": 0.6092544198036194, "ms_p80": 0.6243903875350952,
        "reps": 328, "tflops": 352.41086358176307, "mfu": 0.5237587368113341, "peak_mem_bytes": 104215552,
        "setup_ms": 4.477492999996002, "timer": "cuda_event", "max_abs": 0.00056, "mean_abs": 4.4e-05,
        "rel_l2": 0.002280087079271202, "ok": True, "env": "h200-abc",
        "extra": {"tolerance": {"name": "bfloat16", "rel_l2": 0.02, "max_abs": 0.04}, "mfu_datasheet": 0.356},
    }  # fmt: skip
    row.update(changes)
    return row


def _results_jsonl() -> str:
    rows = [_result_row("sdpa_cudnn", seq, p) for seq in (4224, 4352) for p in ("fwd", "fwd_bwd")]
    rows.append(
        _result_row("bad_kernel", 4224, status="incorrect", ok=False, rel_l2=0.5, reason="rel_l2 0.5 > 0.02")
    )
    for seq in (4224, 4352):
        for p in ("fwd", "fwd_bwd"):
            rows.append(_result_row("flash_attn3", seq, p, status="unavailable", reason="not installed",
                                    ms_median=None, timer=None, ok=None))  # fmt: skip
    rows.append(_result_row("sage", 4224, "fwd_bwd", status="unsupported", reason="no backward", timer=None))
    return "".join(json.dumps(r) + "\n" for r in rows)


def _between(page: str, start: str, end: str) -> str:
    return page[page.index(start) : page.index(end, page.index(start))]
