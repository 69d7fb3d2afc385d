"""What the site reads out of one run's artifacts, beyond showing them: the data behind the headline,
the comparison across machines, the "as run" parameters and the page's raw-data download.

Recognised by content, not by cell name:
- result rows: a *.jsonl whose records all carry provider, status, pass and ms_median (README);
- correctness checks of a separate cell: a *.jsonl of records with strategy/provider, mask and status;
- targets: a *.json with {"targets": [{"target", "verdict", ...}]}; a single check: a *.json with a
  top-level "verdict" (the trust check);
- peaks: a *.json beside the rows with measured_matmul_peak_tflops / datasheet_peak_tflops (sweep.json);
- the profile as it ran: a profile.json with a "profile" key (the gpu cell resolves `auto`).
"""

from __future__ import annotations

import json
import zipfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from attnbench.report.headline import Headline, Target, headline, targets_from

RESULT_KEYS = {"provider", "status", "pass", "ms_median"}
MAX_READ_BYTES = 64 * 2**20  # larger artifacts are not parsed for the headline (they are linked)
RAW_SUFFIXES = {".jsonl", ".json", ".csv", ".tsv"}
MAX_RAW_BYTES = 32 * 2**20  # raw data beyond this, in total, is left out of the page's zip (and listed)


@dataclass
class RunData:
    rows: list[dict] = field(default_factory=list)  # every result row of the run, in cell order
    result_files: list[str] = field(default_factory=list)  # "<cell>/artifacts/<file>"
    checks: dict[tuple[str, str], str] = field(default_factory=dict)
    targets: list[Target] = field(default_factory=list)
    peaks: dict[str, float | None] = field(default_factory=dict)
    profile: dict[str, Any] | None = None
    profile_source: str = ""
    raw: list[Path] = field(default_factory=list)  # files for the raw-data download
    problems: list[str] = field(default_factory=list)
    headline: Headline = field(default_factory=Headline)


def _artifacts(cell_dir: Path) -> list[Path]:
    folder = cell_dir / "artifacts"
    if not folder.is_dir():
        return []
    root = folder.resolve()
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.resolve().is_relative_to(root))


def _records(path: Path, problems: list[str]) -> list[Any]:
    records = []
    with path.open(encoding="utf-8", errors="replace") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as err:
                problems.append(
                    f"{path}:{number}: not JSON ({err.msg}); the line is left out of the headline"
                )
    return records


def _document(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8", errors="replace"))
    except ValueError:
        return None


def read_run(run_dir: Path, cells: list[str]) -> RunData:
    """Everything under `run_dir` the headline and comparison need, cells in the order given
    (folders not named in `cells` follow, sorted)."""
    data = RunData()
    present = [d.name for d in sorted(run_dir.iterdir()) if d.is_dir() and not d.name.startswith(".")]
    order = [c for c in cells if c in present] + [c for c in present if c not in cells]
    for cell in order:
        cell_dir = run_dir / cell
        for path in _artifacts(cell_dir):
            rel = str(PurePosixPath(cell, "artifacts", path.relative_to(cell_dir / "artifacts").as_posix()))
            if path.suffix.lower() in RAW_SUFFIXES:
                data.raw.append(path)
            if path.stat().st_size > MAX_READ_BYTES or path.suffix.lower() not in (".jsonl", ".json"):
                continue
            if path.suffix.lower() == ".jsonl":
                _read_records(data, path, rel)
            else:
                _read_document(data, path, cell, rel)
    for path in (run_dir / "run.json", *(run_dir / c / "result.json" for c in order)):
        if path.is_file():
            data.raw.append(path)
    data.headline = headline(data.rows, checks=data.checks, peaks=data.peaks, targets=data.targets)
    return data


def _read_records(data: RunData, path: Path, rel: str) -> None:
    records = _records(path, data.problems)
    dicts = [r for r in records if isinstance(r, dict)]
    if dicts and len(dicts) == len(records) and all(RESULT_KEYS <= r.keys() for r in dicts):
        data.rows += dicts
        data.result_files.append(rel)
        return
    for record in dicts:  # a separate correctness cell's verdicts (context parallel)
        name = record.get("strategy") or record.get("provider")
        if name and "mask" in record and "status" in record:
            key = (str(name), str(record["mask"]))
            # several checks of one strategy and mask (kernels, options): the worst one counts
            if data.checks.get(key, "ok") == "ok":
                data.checks[key] = str(record["status"])


def _read_document(data: RunData, path: Path, cell: str, rel: str) -> None:
    document = _document(path)
    if not isinstance(document, dict):
        return
    source = rel if isinstance(document.get("targets"), list) else cell
    data.targets += targets_from(document, source)
    for key, name in (("measured_matmul_peak_tflops", "measured"), ("datasheet_peak_tflops", "datasheet")):
        if isinstance(document.get(key), (int, float)) and name not in data.peaks:
            data.peaks[name] = float(document[key])
    if path.name == "profile.json" and "profile" in document and data.profile is None:
        data.profile, data.profile_source = document, rel


def write_raw_zip(data: RunData, run_dir: Path, dest: Path) -> tuple[int, list[str]]:
    """A zip of the run's machine-readable files (paths relative to the run folder); returns its file
    count and the files left out because the zip would pass MAX_RAW_BYTES."""
    left_out, total, count = [], 0, 0
    dest.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(dest, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for path in data.raw:
            rel = path.relative_to(run_dir).as_posix()
            size = path.stat().st_size
            if total + size > MAX_RAW_BYTES:
                left_out.append(rel)
                continue
            total += size
            count += 1
            info = zipfile.ZipInfo(
                f"{run_dir.parent.name}/{run_dir.name}/{rel}", date_time=(1980, 1, 1, 0, 0, 0)
            )
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, path.read_bytes())
    return count, left_out
