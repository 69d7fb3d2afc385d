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

from attnbench.notebook.site.artifacts import TAIL_LINES
from attnbench.notebook.site.render import build_site
from attnbench.notebook.site.tables import MAX_TABLE_ROWS, shown

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
    for cell in ("boom", "after"):
        _cell(h200, cell, "ok", stdout=f"{cell} on h200\n")
    _cell(
        h200,
        "make",
        "ok",
        stdout="".join(f"line {i}\n" for i in range(1, 101)) + "make on h200\n",
        files={
            "results.jsonl": _results_jsonl(),
            "summary.csv": "provider,ms\nsdpa,0.3424319922924042\n",
            "summary.md": "| provider | ms |\n|---|---|\n| sdpa | 0.3424 |\n",
            "env.json": json.dumps({f"key{i}": i for i in range(40)}, indent=2),
            "short.txt": "one line\n",
        },
    )
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
        site_dir / "bench" / "compare.html",  # two labels: a comparison page, even with nothing to pair
        site_dir / "other" / "cpu.html",
    }
    assert all(p.exists() for p in pages)


def test_index_lists_every_notebook_and_label(site):
    index = (site[0] / "index.html").read_text()
    assert 'href="bench/cpu.html"' in index and 'href="bench/nvidia-h200.html"' in index
    # the notebook's own finish (its last cell's result, 10:00:05), not the whole run's (10:01)
    assert "NVIDIA H200 ×2" in index and "2025-05-01 10:00 UTC" in index and "10:01" not in index
    assert "1 cell ok" in index and "1 cell failed" in index and "1 cell skipped" in index
    assert "3 cells ok" in index
    assert "Bench &lt;demo&gt;" in index  # the title is escaped
    other = index[index.index("Other") :]
    assert "Not run on nvidia-h200." in other  # other.md has no nvidia-h200 run


def test_artifacts_embedded(site):
    page = (site[0] / "bench" / "cpu.html").read_text()
    svg = re.search(r'<img src="data:image/svg\+xml;base64,([^"]+)"', page)
    assert svg and base64.b64decode(svg.group(1)).decode() == SVG  # shown as an image: its script never runs
    png = re.search(r'<img src="data:image/png;base64,([^"]+)"', page)
    assert png and base64.b64decode(png.group(1)) == _png()
    assert '<td>sdpa</td><td class="num">3.5</td>' in page  # a CSV row; numbers right-aligned
    assert '<th class="num">ms</th>' in page  # ...and their header
    assert f"first {MAX_TABLE_ROWS} of {MAX_TABLE_ROWS + 50} rows" in page
    assert '<th class="num">correctness.max_abs</th>' in page and "<td>not installed</td>" in page
    assert '<td class="num">0.001</td><td>true</td>' in page  # a JSONL that is not result rows: a plain table
    assert 'class="artifact results"' not in page
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
    assert "NVIDIA H200 ×2" in page and "<dt>driver</dt><dd>570.1</dd>" in page
    assert '<dt>profile</dt><dd><code>"smoke"</code></dd>' in page  # params shown, not folded
    env = page[page.index('id="environment"') : page.index('class="env-details"')]
    assert "torch 2.7.0 · CUDA 12.8 · driver 570.1 · Python 3.12.3" in env and "Xeon" in env
    # the cells' own time (3 × 1.25 s), not the whole `attnbench run`'s minute
    assert "cells took 3.75 s in all" in env and "<strong>nvidia-h200</strong>" in env
    assert 'href="cpu.html"' in page  # switch to the same notebook on the other machine
    assert 'href="../index.html#nb-bench"' in page  # back to this notebook on the index
    index = (site[0] / "index.html").read_text()
    assert 'id="nb-bench"' in index and "3.75 s" in index and "torch 2.7.0" in index


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


def test_a_missing_run_json_is_named_and_a_missing_result_json_is_not(outputs, tmp_path, caplog):
    """A cell that never stored a result (cpu's skipped `after`) is no problem; a run folder without
    its run.json is one, named on the page and in the log."""
    (outputs / "other" / "cpu" / "run.json").unlink()
    with caplog.at_level("WARNING", logger="attnbench.notebook.site.render"):
        build_site(outputs, tmp_path / "site")
    warnings = [r.getMessage() for r in caplog.records]
    missing = f"{outputs / 'other' / 'cpu' / 'run.json'} is missing"
    assert warnings == [f"other/cpu: {missing}"]
    assert missing in (tmp_path / "site" / "other" / "cpu.html").read_text()


def _between(page: str, start: str, end: str) -> str:
    return page[page.index(start) : page.index(end, page.index(start))]


def test_results_jsonl_curated_view(site):
    page = (site[0] / "bench" / "nvidia-h200.html").read_text()
    view = _between(page, 'class="artifact results"', "</figure>")
    constants = _between(view, 'class="constants"', "</p>")
    for fact in ("batch 1", "heads_q 24", "head_dim 128", "dtype bfloat16", "mask full", "timer cuda_event"):
        assert f"<code>{fact}</code>" in constants  # the same in every measured row: said once
    measured = _between(view, "<table", "</table>")
    header = _between(measured, "<thead>", "</thead>")
    assert ">seqlen</th>" in header and ">seqlen_k</th>" not in header and "batch" not in header
    assert 'title="median time per call' in header  # each metric says what it is
    assert measured.count("<tr>") == 1 + 5  # header + 4 sdpa_cudnn rows + the incorrect one
    assert '<td class="num" title="0.6221279799938202">0.6221</td>' in measured  # ms, rounded; exact on hover
    assert ">52.4%</td>" in measured and ">99.4 MiB</td>" in measured and ">2.3e-03</td>" in measured
    assert '<td class="num" title="p20 0.6093 ms, p80 0.6244 ms">2.4%</td>' in measured  # timing spread
    assert 'title="tolerance bfloat16: rel_l2 ≤ 0.02, max_abs ≤ 0.04">✓</td>' in measured
    bad = _between(measured, "<td>bad_kernel</td>", "</tr>")
    assert '<td class="bad">incorrect</td>' in bad and ">✗ no</td>" in bad and "rel_l2 0.5 &gt; 0.02" in bad
    assert "flash_attn3" not in measured and "sage" not in measured  # not measured: grouped below
    grouped = _between(view, 'class="not-measured"', "</details>")
    assert grouped.count("<tr>") == 1 + 2  # one line per provider and reason, never silently dropped
    assert "<td>flash_attn3</td>" in grouped and "<td>not installed</td>" in grouped
    assert '<td>fwd, fwd_bwd</td><td class="num">4</td>' in grouped
    assert "<td>sage</td>" in grouped and "no backward" in grouped
    full = _between(view, 'class="full-table"', "</details>")  # every column, folded
    assert '<details class="full-table">' in view and "every column" in full
    assert ">extra.tolerance</th>" in full and ">seqlen_k</th>" in full and full.count("<tr>") == 1 + 10
    assert "not a GPU measurement" not in view


def test_results_from_a_cpu_smoke_run_say_so(outputs: Path, tmp_path: Path):
    rows = "".join(json.dumps(_result_row("sdpa_math", s, timer="perf_counter")) + "\n" for s in (288, 320))
    (outputs / "bench" / "nvidia-h200" / "make" / "artifacts" / "results.jsonl").write_text(rows)
    build_site(outputs, tmp_path / "site")
    page = (tmp_path / "site" / "bench" / "nvidia-h200.html").read_text()
    view = _between(page, 'class="artifact results"', "</figure>")
    assert "not a GPU measurement" in view and "<code>timer perf_counter</code>" in view


def test_long_output_shows_the_tail(site):
    page = (site[0] / "bench" / "nvidia-h200.html").read_text()
    out = _between(page, '<details class="output stdout" open>', "</pre>\n</details>")
    assert "101 lines" in out
    earlier = _between(out, '<details class="earlier">', "</details>")  # folded, above the tail
    assert f"show the {101 - TAIL_LINES} earlier lines" in earlier
    assert "line 1\n" in earlier and f"line {101 - TAIL_LINES}\n" in earlier
    tail = out[out.index("</details>") :]
    assert f"line {101 - TAIL_LINES + 1}\n" in tail and "make on h200" in tail and "line 1\n" not in tail
    short = (site[0] / "bench" / "cpu.html").read_text()
    assert "earlier line" not in _between(short, 'id="cell-make"', 'id="cell-boom"')  # short: shown whole


def test_contents_and_heading_ids(site):
    page = (site[0] / "bench" / "cpu.html").read_text()
    toc = _between(page, '<nav class="toc"', "</nav>")
    assert '<h1 id="heading">Heading</h1>' in page
    assert '<h2 id="cell-make-2">Cell make</h2>' in page  # a heading never takes a cell's id
    assert '<h2 id="results">' in page and '<h2 id="results-2">' in page  # unique on the page
    for href in ("#environment", "#heading", "#results-2", "#cell-make", "#cell-boom", "#cell-later"):
        assert f'href="{href}"' in toc
    assert '<span class="dot st-ok" title="ok"></span>make</a>' in toc
    assert '<span class="toc-status st-failed">failed</span>' in toc  # a failure shows in the contents
    assert 'id="hide-code"' in page and "body:has(#hide-code:checked) details.code" in page


def test_markdown_artifact_and_folding(site):
    page = (site[0] / "bench" / "nvidia-h200.html").read_text()
    md = _between(page, 'class="artifact markdown"', "</figure>")
    assert '<div class="table-box"><table class="data">' in md  # rendered, in a scroll box
    assert '<td class="num">0.3424</td>' in md
    csv_view = _between(page, 'class="artifact table"', "</figure>")
    assert '<details class="folded">' in csv_view and "summary.csv" in csv_view  # same data: folded
    long_text = _between(page, 'href="nvidia-h200/files/make/env.json"', "</figure>")
    assert "42 lines" in long_text and page.index('<details class="folded">') < page.index("&#34;key39&#34;")
    short_text = _between(page, 'href="nvidia-h200/files/make/short.txt"', "</figure>")
    assert "folded" not in short_text and "one line" in short_text
    order = [page.index(f'class="artifact {kind}"') for kind in ("results", "markdown", "table", "text")]
    assert order == sorted(order)  # the curated table first, raw data and text last


def test_shown_rounds_for_reading_and_keeps_the_exact_value():
    assert shown("0.000508725643157959") == ("0.0005087", "0.000508725643157959", "num")
    assert shown(16.996173030802183).text == "17.00"  # significant digits kept: a column lines up
    assert shown("104215552") == ("104215552", "", "num")  # integers are never rounded
    assert shown("2.11.0").css == "" and shown("13.0") == ("13.0", "", "num")
    assert shown(True).text == "true" and shown(None).text == ""
    long = "x" * 100
    assert shown(long) == (long, long, "long")  # cut by CSS, whole in the tooltip
    steps = [472.96, 22.99, 23.97, 12.73, 12.02, 11.83]  # per-step times: a series, summarised
    assert shown(steps) == (
        "6 values: median 17.86 (11.83–473)",
        "[472.96,22.99,23.97,12.73,12.02,11.83]",
        "",
    )
    assert shown([1980.0, 1965.0]).text == "[1980.0,1965.0]"  # a short list stays as written
    assert shown([True, False, True, True, False]).text.startswith("[true")  # not numbers: as JSON
    peak = {
        "tflops": 701.4643256201565,
        "sm_clock_mhz": 1530.0,
        "reason": None,
    }  # a small record: read as words
    assert shown(peak) == ("tflops 701.5, sm_clock_mhz 1530.0", json.dumps(peak, separators=(",", ":")), "")
    assert shown([None, None]).text == ""  # nothing recorded
    assert shown({"a": [1, 2]}).text == '{"a":[1,2]}'  # nested: as JSON


def test_a_need_in_another_folder_links_to_that_notebooks_page():
    from attnbench.notebook.document.model import Need
    from attnbench.notebook.site.render import _need_link

    # site pages live at site/<notebook name>/<label>.html whatever folder the notebook sits in
    link = _need_link(Need("gpu", notebook="sub/other"), "nvidia-h200")
    assert link == {"text": "sub/other.md:gpu", "href": "../other/nvidia-h200.html#cell-gpu"}
    assert _need_link(Need("bench"), "cpu")["href"] == "#cell-bench"


def test_columns_empty_in_every_row_are_left_out_and_named():
    from attnbench.notebook.site.tables import shown, table

    rows = [[shown("a"), shown(None), shown(1)], [shown("b"), shown(""), shown(2)]]
    got = table(["provider", "window", "ms"], rows, total=2)
    assert [c["name"] for c in got["columns"]] == ["provider", "ms"]
    assert [[c.text for c in row] for row in got["rows"]] == [["a", "1"], ["b", "2"]]
    assert got["empty"] == ["window"] and got["columns"][1]["css"] == "num"


def test_a_long_value_repeated_down_a_column_is_said_once_as_a_note():
    from attnbench.notebook.site.tables import REPEATED, shown, table

    why = "not installed: flash-attn 2 builds from source for hours; pip install flash-attn on a CUDA machine"
    rows = [[shown(f"p{i}"), shown(why)] for i in range(REPEATED)] + [[shown("q"), shown("x" * 70)]]
    got = table(["provider", "reason"], rows, total=len(rows))
    assert got["repeated"] == [why]
    cells = [row[1] for row in got["rows"]]
    assert [c.text for c in cells[:REPEATED]] == ["note 1"] * REPEATED and cells[0].title == why
    assert cells[-1].text == "x" * 70 and cells[-1].css == "long"  # once: shown where it stands
    fewer = table(["provider", "reason"], rows[: REPEATED - 1], total=REPEATED - 1)
    assert fewer["repeated"] == [] and fewer["rows"][0][1].text == why
    across = [
        [shown(why), shown("p")],
        [shown("q"), shown(why)],
        [shown(why), shown("r")],
    ]  # 2 + 1: no column has 3
    assert table(["a", "b"], across, total=3)["repeated"] == []


def test_svg_figure_title_becomes_its_alt_text():
    from attnbench.notebook.site.artifacts import svg_title

    def text(size, y, words, anchor="middle", turn="-0"):
        return (f'<text style="font-size: {size}px; text-anchor: {anchor}" x="1" y="{y}" '
                f'transform="rotate({turn} 1 {y})">{words}</text>')  # fmt: skip

    ticks = text(9, 280, "0") + text(9, 280, "100") + text(10, 290, "TFLOP/s per GPU")
    svg = (
        f'<svg height="300pt"><metadata><dc:title>Matplotlib v3</dc:title></metadata>{ticks}'
        f"{text(10, 150, 'seconds', turn='-90')}{text(12, 33, 'forward')}{text(11, 15.5, 'Flux &amp; co')}</svg>"
    )
    assert svg_title(svg.encode(), 300) == "Flux & co"
    assert svg_title(f"<svg>{ticks}</svg>".encode(), 300) == ""  # only ticks and an axis label: no title
    assert svg_title(b"<svg><title>Latency by length</title></svg>", None) == "Latency by length"


def test_key_figure_title_is_read_only_inside_its_cell_artifacts(tmp_path):
    from attnbench.notebook.site.sitedata import _figure_title

    svg = b'<svg height="100pt"><title>Latency by length</title></svg>'
    (tmp_path / "plot" / "artifacts").mkdir(parents=True)
    (tmp_path / "plot" / "artifacts" / "fig.svg").write_bytes(svg)
    (tmp_path / "outside.svg").write_bytes(svg)
    assert _figure_title(tmp_path, "plot/fig.svg") == "Latency by length"
    assert _figure_title(tmp_path, "plot/../../outside.svg") == ""  # headline.json may not name any file
    assert _figure_title(tmp_path, "plot/missing.svg") == ""
