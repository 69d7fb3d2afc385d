"""render.build_site: artifacts on a page (figures, results view, tables, text) and table-cell rounding."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

from render_helpers import SVG, _between, _png, _result_row

from attnbench.notebook.site.render import build_site
from attnbench.notebook.site.tables import MAX_TABLE_ROWS, shown


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
