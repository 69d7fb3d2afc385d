#!/usr/bin/env python3
"""Engine speed: prints a table of medians against their budgets.

    uv run python scripts/bench_engine.py [--env python] [--repeats 5] [--scratch] [notebooks/*.md]

1. fully cached `attnbench run notebooks/*.md` (a first run fills the cache; the timed runs must
   be all hits, else the row says how many cells ran)                               budget 2 s
2. `attnbench build` of the whole site from outputs/ (into a temporary folder)      budget 2 s
3. a trivial cell under `--env python --force` versus its script run directly     budget +0.5 s
Exit code 1 if a budget is missed or the cached run was not fully cached.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ROOT = REPO  # the project whose notebooks/ and outputs/ are used (--scratch: a temporary copy)
ENGINE = [sys.executable, "-m", "attnbench"]


def timed(cmd: list[str], repeats: int, **kwargs) -> tuple[float, subprocess.CompletedProcess]:
    times, done = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        done = subprocess.run(cmd, capture_output=True, text=True, check=False, **kwargs)
        times.append(time.perf_counter() - start)
    return statistics.median(times), done


def cached_run(notebooks: list[str], env: str, repeats: int) -> tuple[float, str]:
    cmd = [*ENGINE, "run", *notebooks, "--env", env, "--plain"]
    warm = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, check=False)
    print(f"warm-up run (exit {warm.returncode}): {warm.stdout.strip()}")
    seconds, done = timed(cmd, repeats, cwd=ROOT)
    summary = done.stdout.strip()
    counts = {state: int(n) for n, state in re.findall(r"(\d+) ([a-z-]+)", summary.split(":", 1)[-1])}
    total = int(re.match(r"(\d+) cells", summary).group(1)) if re.match(r"(\d+) cells", summary) else -1
    note = "all hits" if counts.get("hit") == total else f"NOT fully cached: {summary}"
    return seconds, note


def build(repeats: int) -> tuple[float, str]:
    with tempfile.TemporaryDirectory() as tmp:
        seconds, done = timed(
            [*ENGINE, "build", "--outputs", str(ROOT / "outputs"), "--site", f"{tmp}/site"], repeats, cwd=ROOT
        )
    return seconds, done.stdout.strip() if done.returncode == 0 else f"FAILED: {done.stderr.strip()[-200:]}"


def trivial_cell(repeats: int) -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "notebooks").mkdir()
        nb = root / "notebooks" / "trivial.md"
        nb.write_text("---\ntitle: trivial\n---\n\n```python id=a\nprint('hi')\n```\n")
        engine, done = timed(
            [*ENGINE, "run", str(nb), "--env", "python", "--force", "--plain"], repeats, cwd=root
        )
        if done.returncode != 0:
            raise SystemExit(f"trivial notebook failed: {done.stdout}{done.stderr}")
        env = dict(os.environ, PYTHONPATH=str(REPO / "src"))
        direct, _ = timed(
            [sys.executable, str(root / "cells" / "trivial" / "a.py")], repeats, cwd=root, env=env
        )
    return engine, direct


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("notebooks", nargs="*", help="default: notebooks/*.md")
    parser.add_argument("--env", default="python", help="--env for the cached run (default: python)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--scratch",
        action="store_true",
        help="work on a temporary copy of notebooks/ and outputs/ (leaves the repo untouched)",
    )
    args = parser.parse_args()
    global ROOT
    if args.scratch:
        ROOT = Path(tempfile.mkdtemp(prefix="attnbench-bench-"))
        (ROOT / "pyproject.toml").write_text("# marks the project root for attnbench\n")
        for folder in ("notebooks", "outputs"):
            if (REPO / folder).is_dir():
                shutil.copytree(REPO / folder, ROOT / folder, ignore=shutil.ignore_patterns(".tmp-*"))
    notebooks = args.notebooks or sorted(str(p.relative_to(ROOT)) for p in (ROOT / "notebooks").glob("*.md"))

    rows = []
    seconds, note = cached_run(notebooks, args.env, args.repeats)
    rows.append((f"cached run of {len(notebooks)} notebooks (--env {args.env})", seconds, 2.0, note))
    seconds, note = build(args.repeats)
    rows.append(("attnbench build (all notebooks)", seconds, 2.0, note))
    engine, direct = trivial_cell(args.repeats)
    rows.append(
        (
            "trivial cell overhead (--env python)",
            engine - direct,
            0.5,
            f"engine {engine:.3f} s vs script alone {direct:.3f} s",
        )
    )

    print(f"\n{'measurement':<48} {'median s':>9} {'budget s':>9}  ok   note")
    ok = True
    for name, value, budget, note in rows:
        passed = value < budget and "NOT" not in note and "FAILED" not in note
        ok &= passed
        print(f"{name:<48} {value:>9.3f} {budget:>9.1f}  {'yes' if passed else 'NO '}  {note}")
    print(
        f"\n(median of {args.repeats} runs; python {sys.version.split()[0]}; {os.cpu_count()} CPUs; project {ROOT})"
    )
    if args.scratch:
        shutil.rmtree(ROOT, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
