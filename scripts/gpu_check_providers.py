"""Exercise every provider's code path on a GPU in about a minute: masks, GQA, Sq != Sk, backward.

    PYTHONPATH=src python scripts/gpu_check_providers.py [--providers sdpa flex ...] [--jsonl out.jsonl]

Each (provider, workload, pass) is one line: ok / incorrect / unsupported / unavailable / error with the
reason. Timing is minimal (a handful of repetitions): this checks behaviour, not speed. The process exits
1 if any row is `error` or `incorrect`, so a GPU run can be judged from its exit status.
"""

from __future__ import annotations

import argparse
import sys
import time

from attnbench.bench import providers
from attnbench.bench.results import Workload, write_jsonl
from attnbench.bench.sweep import run_sweep

WORKLOADS = [
    Workload(1, 4352, 4352, 24, 24, 128, "bfloat16", "full"),  # the Flux shape
    Workload(2, 512, 1024, 16, 4, 128, "bfloat16", "causal"),  # bottom-right causal, GQA 4:1
    Workload(1, 1024, 1024, 8, 8, 64, "float16", "sliding_window", window=200),
    Workload(1, 1024, 1024, 8, 2, 128, "bfloat16", "document", doc_lens=(300, 500, 224)),
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--providers", nargs="*", default=[], help="names or families (default: all)")
    parser.add_argument("--jsonl", help="also write the rows here")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    rows = run_sweep(providers.select(args.providers), WORKLOADS, ("fwd", "fwd_bwd"), peak_tflops=None,
                     timing_options={"min_reps": 3, "min_time_ms": 0.0, "warmup_reps": 1, "max_reps": 3})
    if args.jsonl:
        write_jsonl(args.jsonl, rows)
    counts = {s: sum(r.status == s for r in rows) for s in sorted({r.status for r in rows})}
    print(f"\n{len(rows)} rows in {time.perf_counter() - started:.0f} s: {counts}")
    bad = [r for r in rows if r.status in ("error", "incorrect")]
    for row in bad:
        print(f"  {row.status}: {row.provider} {row.pass_} {row.workload.label()}: {row.reason}"
              f" (stage {row.extra.get('stage', '-')})")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
