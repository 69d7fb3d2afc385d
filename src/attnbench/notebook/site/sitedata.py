"""What the site reads out of one run's artifacts, beyond showing them: the headline, the "as run"
parameters and the page's raw-data download.

- headline: every cell's artifacts/headline.json (schema: headline.py), merged in cell order; a run
  without one (it predates headline data) gets a plain note, a bad one a problem naming file and field;
- the profile as it ran: a profile.json with a "profile" key (a setup cell resolves `auto`).
"""

from __future__ import annotations

import json
import zipfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from attnbench.notebook.run.store import file_kind
from attnbench.notebook.site.artifacts import image_size, svg_title
from attnbench.notebook.site.headline import HEADLINE_FILE, Headline, HeadlineError, load_headline

MAX_READ_BYTES = 64 * 2**20  # larger artifacts are not parsed (they are linked)
RAW_SUFFIXES = {".jsonl", ".json", ".csv", ".tsv"}
MAX_RAW_BYTES = 32 * 2**20  # raw data beyond this, in total, is left out of the page's zip (and listed)


@dataclass
class RunData:
    headline: Headline | None = None  # None: no cell wrote headline.json
    headline_files: list[str] = field(default_factory=list)  # "<cell>/artifacts/headline.json"
    profile: dict[str, Any] | None = None
    profile_source: str = ""
    raw: list[Path] = field(default_factory=list)  # files for the raw-data download
    key_figure_title: str = ""  # the key figure's own title (an SVG's), for its alt text and caption
    problems: list[str] = field(default_factory=list)


def _artifacts(cell_dir: Path) -> list[Path]:
    folder = cell_dir / "artifacts"
    if not folder.is_dir():
        return []
    root = folder.resolve()
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.resolve().is_relative_to(root))


def read_run(run_dir: Path, cells: list[str], left_out: set[str] | frozenset[str] = frozenset()) -> RunData:
    """Everything under `run_dir` the page's top needs, cells in the order given (folders not named in
    `cells` follow, sorted), but those in `left_out` (cells the label's machine cannot run: what is
    stored for them is not theirs to show)."""
    data = RunData()
    present = [
        d.name
        for d in sorted(run_dir.iterdir())
        if d.is_dir() and not d.name.startswith(".") and d.name not in left_out
    ]
    order = [c for c in cells if c in present] + [c for c in present if c not in cells]
    for cell in order:
        cell_dir = run_dir / cell
        for path in _artifacts(cell_dir):
            rel = str(PurePosixPath(cell, "artifacts", path.relative_to(cell_dir / "artifacts").as_posix()))
            if path.suffix.lower() in RAW_SUFFIXES:
                data.raw.append(path)
            if path.stat().st_size > MAX_READ_BYTES:
                continue
            if path.name == HEADLINE_FILE and path.parent == cell_dir / "artifacts":
                _read_headline(data, path, rel)
            elif path.name == "profile.json" and data.profile is None:
                _read_profile(data, path, rel)
    for path in (run_dir / "run.json", *(run_dir / c / "result.json" for c in order)):
        if file_kind(path) == "file":  # never a link to elsewhere
            data.raw.append(path)
    if data.headline is not None and data.headline.key_figure:
        data.key_figure_title = _figure_title(run_dir, data.headline.key_figure)
    return data


def _figure_title(run_dir: Path, key_figure: str) -> str:
    """The title an SVG key figure ("<cell>/<artifact>") carries, "" for another image, none, or a path
    outside its cell's artifacts (headline.json is data: it is not trusted to name any file)."""
    cell, _, name = key_figure.partition("/")
    folder = run_dir / cell / "artifacts"
    path = folder / name
    if path.suffix.lower() != ".svg" or file_kind(path) != "file" or path.stat().st_size > MAX_READ_BYTES:
        return ""
    if not path.resolve().is_relative_to(folder.resolve()):
        return ""
    raw = path.read_bytes()
    size = image_size(raw, ".svg")
    return svg_title(raw, size[1] if size else None)


def _read_headline(data: RunData, path: Path, rel: str) -> None:
    try:
        found = load_headline(path)
    except HeadlineError as e:
        data.problems.append(f"{e}; left off the page")
        return
    data.headline = found if data.headline is None else data.headline.merged(found)
    data.headline_files.append(rel)


def _read_profile(data: RunData, path: Path, rel: str) -> None:
    try:
        document = json.loads(path.read_text(encoding="utf-8", errors="replace"))
    except ValueError:
        return
    if isinstance(document, dict) and "profile" in document:
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
