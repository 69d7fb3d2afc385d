"""render.build_site: outputs/ → site/ pages (index, cells, environment, escaping, rebuilds), fake tree."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
from render_helpers import _between

from attnbench.notebook.site.artifacts import TAIL_LINES
from attnbench.notebook.site.render import build_site


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


def test_a_need_in_another_folder_links_to_that_notebooks_page():
    from attnbench.notebook.document.model import Need
    from attnbench.notebook.site.render import _need_link

    # site pages live at site/<notebook name>/<label>.html whatever folder the notebook sits in
    link = _need_link(Need("gpu", notebook="sub/other"), "nvidia-h200")
    assert link == {"text": "sub/other.md:gpu", "href": "../other/nvidia-h200.html#cell-gpu"}
    assert _need_link(Need("bench"), "cpu")["href"] == "#cell-bench"
