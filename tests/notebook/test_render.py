"""render.build_site: outputs/ → site/ from a fake outputs tree (two labels, every artifact kind)."""

from __future__ import annotations

import base64
import json
import re
import struct
import time
import zlib
from pathlib import Path

import pytest

from attnbench.notebook.artifacts import MAX_TABLE_ROWS
from attnbench.notebook.render import build_site

NOTEBOOK_MD = """\
#!/usr/bin/env -S uv run attnbench run
---
title: Bench <demo>
description: A fake benchmark
params:
  profile: smoke
---
# Heading

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


@pytest.fixture
def outputs(tmp_path: Path) -> Path:
    out = tmp_path / "outputs"
    csv_rows = "provider,ms\n" + "".join(f"sdpa,{i}.5\n" for i in range(MAX_TABLE_ROWS + 50))
    jsonl = (
        json.dumps({"provider": "flex", "status": "ok", "correctness": {"max_abs": 0.001, "ok": True}})
        + "\n"
        + json.dumps({"provider": "fa3", "status": "unavailable", "reason": "not installed"})
        + "\n"
    )
    cpu = out / "bench" / "cpu"
    _run_json(
        cpu,
        "cpu",
        None,
        0,
        {
            "make": {"state": "ran", "reason": ""},
            "boom": {"state": "failed", "reason": "exit code 1"},
            "after": {"state": "skipped", "reason": "upstream cell boom failed"},
        },
    )
    _cell(
        cpu,
        "make",
        "ok",
        stdout="<b>bold</b> & <script>alert(1)</script>\n",
        files={
            "plots/fig.svg": SVG,
            "img.png": _png(),
            "table.csv": csv_rows,
            "results.jsonl": jsonl,
            "blob.bin": b"\0\1\2",
        },
    )
    _cell(cpu, "boom", "failed", reason="exit code 1", stderr="Traceback: SystemExit(1)\n")
    h200 = out / "bench" / "nvidia-h200"
    _run_json(h200, "nvidia-h200", "NVIDIA H200", 2, {c: {"state": "hit"} for c in ("make", "boom", "after")})
    for cell in ("make", "boom", "after"):
        _cell(h200, cell, "ok", stdout=f"{cell} on h200\n")
    # A cell folder being written right now must be ignored.
    (h200 / ".tmp-later-xyz").mkdir()
    # A second notebook that ran only on cpu: the index says it did not run on the H200.
    other = out / "other" / "cpu"
    other.mkdir(parents=True)
    (other / "notebook.md").write_text("---\ntitle: Other\n---\nJust prose.\n")
    (other / "run.json").write_text(
        json.dumps(
            {"title": "Other", "finished": "2025-05-02T00:00:00Z", "machine": {"gpu": None}, "cells": {}}
        )
    )
    return out


@pytest.fixture
def site(outputs: Path, tmp_path: Path) -> tuple[Path, list[Path]]:
    site_dir = tmp_path / "site"
    return site_dir, build_site(outputs, site_dir)


def test_pages_written(site):
    site_dir, pages = site
    assert pages[0] == site_dir / "index.html"
    assert set(pages) == {
        site_dir / "index.html",
        site_dir / "bench" / "cpu.html",
        site_dir / "bench" / "nvidia-h200.html",
        site_dir / "other" / "cpu.html",
    }
    assert all(p.exists() for p in pages)


def test_index_lists_every_notebook_and_label(site):
    index = (site[0] / "index.html").read_text()
    assert 'href="bench/cpu.html"' in index and 'href="bench/nvidia-h200.html"' in index
    assert "NVIDIA H200 ×2" in index and "2025-05-01 10:01 UTC" in index
    assert "1 ok" in index and "1 failed" in index and "1 skipped" in index and "3 ok" in index
    assert "Bench &lt;demo&gt;" in index  # the title is escaped
    other = index[index.index("Other") :]
    assert "not run on this machine" in other  # other.md has no nvidia-h200 run


def test_artifacts_embedded(site):
    page = (site[0] / "bench" / "cpu.html").read_text()
    svg = re.search(r'<img src="data:image/svg\+xml;base64,([^"]+)"', page)
    assert svg and base64.b64decode(svg.group(1)).decode() == SVG  # shown as an image: its script never runs
    png = re.search(r'<img src="data:image/png;base64,([^"]+)"', page)
    assert png and base64.b64decode(png.group(1)) == _png()
    assert "<td>sdpa</td><td>3.5</td>" in page  # a CSV row
    assert f"first {MAX_TABLE_ROWS} of {MAX_TABLE_ROWS + 50} rows" in page
    assert "<th>correctness.max_abs</th>" in page and "<td>not installed</td>" in page
    assert "<td>0.001</td><td>true</td>" in page  # JSONL table
    for rel in ("plots/fig.svg", "img.png", "table.csv", "results.jsonl", "blob.bin"):
        assert f'href="cpu/files/make/{rel}"' in page
        assert (site[0] / "bench" / "cpu" / "files" / "make" / rel).is_file()  # the link works from file://


def test_failed_and_skipped_cells(site):
    page = (site[0] / "bench" / "cpu.html").read_text()
    boom = page[page.index('id="cell-boom"') : page.index('id="cell-after"')]
    assert 'class="reason bad"><strong>failed</strong>: exit code 1' in boom
    assert "Traceback: SystemExit(1)" in boom
    after = page[page.index('id="cell-after"') : page.index('id="cell-later"')]
    assert "<strong>skipped</strong>: upstream cell boom failed" in after
    later = page[page.index('id="cell-later"') :]
    assert "not run on this machine" in later
    assert '<span class="badge ran"' in page and "1.25 s" in page


def test_cache_badges_and_environment(site):
    page = (site[0] / "bench" / "nvidia-h200.html").read_text()
    assert page.count('class="badge cache"') == 3
    assert "NVIDIA H200" in page and "570.1" in page and '<th>profile</th><td><code>"smoke"</code>' in page
    assert 'href="cpu.html"' in page  # switch to the same notebook on the other machine


def test_escaping_and_collapsing(site):
    page = (site[0] / "bench" / "cpu.html").read_text()
    assert "&lt;b&gt;bold&lt;/b&gt; &amp; &lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<script" not in page  # nothing executable anywhere on the page
    assert "Raw &lt;b&gt;html&lt;/b&gt; stays text." in page
    assert "<table>" in page and "<td>sdpa</td>" in page  # Markdown table in the prose
    make = page[page.index('id="cell-make"') : page.index('id="cell-boom"')]
    assert '<details class="code">' in make  # collapse-code: closed
    assert '<details class="output stdout" open>' in make
    after = page[page.index('id="cell-after"') :]
    assert '<details class="code" open>' in after
    assert '<span class="nb">print</span>' in make or 'class="nb">print' in make  # pygments highlighted
    assert "shown-only" in page and 'class="shown-code"' in page


def test_no_network_assets(site):
    site_dir, pages = site
    for page in pages:
        html = page.read_text()
        assert not re.search(
            r"""(src|href)\s*=\s*["']?(https?:)?//""", html.replace('href="https://example.com/x.png"', "")
        ), page  # the remote Markdown image became a plain link
        assert "<link" not in html and "@import" not in html and "url(" not in html
    page = (site_dir / "bench" / "cpu.html").read_text()
    assert '<a href="https://example.com/x.png">image: remote</a>' in page
    assert "prefers-color-scheme: dark" in page  # light and dark


def test_rebuild_replaces_and_refuses_foreign_dir(outputs: Path, tmp_path: Path):
    site_dir = tmp_path / "site"
    build_site(outputs, site_dir)
    import shutil

    shutil.rmtree(outputs / "other")
    build_site(outputs, site_dir)
    assert not (site_dir / "other").exists()  # a removed notebook's page is gone
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "keep.txt").write_text("x")
    with pytest.raises(FileExistsError, match="mine"):
        build_site(outputs, foreign)
    assert (foreign / "keep.txt").exists()
    with pytest.raises(FileNotFoundError, match="nowhere"):
        build_site(tmp_path / "nowhere", site_dir)


def test_build_is_fast(outputs: Path, tmp_path: Path):
    start = time.perf_counter()
    build_site(outputs, tmp_path / "site")
    assert time.perf_counter() - start < 2.0


def test_stale_and_earlier_results(outputs: Path, tmp_path: Path):
    h200 = outputs / "bench" / "nvidia-h200"
    run = json.loads((h200 / "run.json").read_text())
    run["started"] = "2025-06-01T00:00:00Z"  # this run is newer than the stored results
    run["cells"]["make"] = {"state": "hit", "stale": "attnbench sources changed"}
    run["cells"]["after"] = {"state": "skipped", "reason": "upstream cell boom failed"}
    (h200 / "run.json").write_text(json.dumps(run))
    build_site(outputs, tmp_path / "site")
    page = (tmp_path / "site" / "bench" / "nvidia-h200.html").read_text()
    make = page[page.index('id="cell-make"') : page.index('id="cell-boom"')]
    assert 'class="badge stale" title="attnbench sources changed"' in make
    boom = page[page.index('id="cell-boom"') : page.index('id="cell-after"')]
    assert "stale" not in boom  # only where run.json says so
    after = page[page.index('id="cell-after"') : page.index('id="cell-later"')]
    assert "output below is from an earlier run (finished 2025-05-01 10:00 UTC)" in after
    assert "after on h200" in after
