"""The site built from the fixture run (conftest.py): headline, comparison, raw data, hygiene."""

from __future__ import annotations

import json
import re
import shutil
import zipfile
from pathlib import Path

from site_helpers import run_engine

from attnbench.notebook.site.artifacts import image_size, terminal_text


def page(site: Path, rel: str) -> str:
    return (site / rel).read_text()


def before_first_figure(html: str) -> str:
    """The page above its first cell figure (the key figure sits under the answer, above the ranking)."""
    return html[: html.index('<figure class="artifact')]


def test_headline_on_each_page_before_the_first_figure(demo_site):
    a = page(demo_site, "site_demo/gpu-a.html")
    top = before_first_figure(a)
    assert 'id="headline"' in top
    # fastest correct provider (wrong_kernel is faster but incorrect), its TFLOP/s, share of peak, runner-up
    assert (
        "forward: fastest fast_kernel at 2 of 2 shapes; 0.0671–0.134 TFLOP/s (22%–45% of the measured peak)"
        in top
    )
    assert "<strong>fast_kernel</strong>" in top and "slow_kernel" in top and "+25%" in top
    # the missed target is red and spelled out; the correctness failures are named
    assert re.search(r'<span class="badge verdict bad"[^>]*>targets: 0 of 1 met, 1 missed</span>', top)
    assert '&gt;= 0.15 TFLOP/s forward</span> — fast_kernel: <span class="why">0.134 TFLOP/s' in top
    assert "wrong_kernel forward: rel_l2 0.5 &gt; 0.02 (at S 256, S 512)" in top
    b = before_first_figure(page(demo_site, "site_demo/gpu-b.html"))
    assert re.search(r'<span class="badge verdict good"[^>]*>targets: 1 of 1 met</span>', b)


def test_a_missed_target_is_never_green_in_the_index(demo_site):
    index = page(demo_site, "index.html")
    card_a = index[index.index('href="site_demo/gpu-a.html"') : index.index('href="site_demo/gpu-b.html"')]
    assert "targets: 0 of 1 met, 1 missed" in card_a and "verdict bad" in card_a
    assert 'verdict good">targets' not in card_a
    # the index shows each machine's headline numbers
    assert "forward: fast_kernel (2/2 shapes), its best 0.134 TFLOP/s (45% of the measured peak)" in index
    assert "forward: fast_kernel (2/2 shapes), its best 0.201 TFLOP/s (67% of the measured peak)" in index
    # a CPU smoke run's key numbers measure nothing: its card leaves them to its page
    start = index.index('href="site_demo/cpu.html"')
    card_cpu = index[start : index.index("</article>", start)]
    assert "Not a GPU measurement" in card_cpu and "card-numbers" not in card_cpu
    assert 'class="card-numbers"' in card_a


def test_comparison_page_ratios(demo_site):
    compare = page(demo_site, "site_demo/compare.html")
    # the ranking entries of the two GPU labels, paired by key, on wall time and on per-GPU TFLOP/s apart
    assert "gpu-b (1 GPU) against gpu-a (1 GPU)" in compare
    # both labels one GPU: wall time and per-GPU TFLOP/s are one ratio, one column, said once
    one_ratio = (
        "how many times as fast each ranking entry is on gpu-b (above 1: faster there; each winner ran on the same "
        "GPU count on both, so wall time and TFLOP/s, per GPU give the same ratio): forward: 1.50× (median"
    )
    assert one_ratio + " of 2; all 1.50×); forward + backward: 1.50×" in compare
    assert "TFLOP/s, per GPU forward:" not in compare and "same unit" not in compare
    assert "speed-up (wall time = TFLOP/s, per GPU)" in compare
    assert compare.count('<td class="num up" title="wall time: base time / time there">1.50×</td>') == 4
    assert compare.count('title="the entry&#39;s own value') == 0 and "<th></th>" not in compare
    assert "<strong>cpu</strong> not compared: a CPU smoke run: not a GPU measurement" in compare
    # key numbers: like with like only (gpu-b's throughput number is a total, gpu-a's per GPU)
    assert '<td>forward time at S 512</td><td class="muted">ms, wall time</td>' in compare
    assert 'title="not compared: TFLOP/s, total against TFLOP/s, per GPU">not like with like' in compare
    for label in ("gpu-a", "gpu-b", "cpu"):  # every label links it; the cpu page finds why it is left out
        assert 'href="compare.html"' in page(demo_site, f"site_demo/{label}.html")
    assert 'href="site_demo/compare.html"' in page(demo_site, "index.html")


def test_answer_and_key_figure_first_and_units_labelled(demo_site):
    a = page(demo_site, "site_demo/gpu-a.html")
    top = a[: a.index('id="headline"')]
    assert "Question:</span> Which made-up kernel is fastest, and by how much?" in top
    assert "forward time at S 512</span> <strong>" in top and "(wall time)" in top
    assert '<figure class="key-figure"><img src="gpu-a/files/plot/tflops.svg"' in top
    assert 'alt="key figure: Site demo (made-up rows)"' in top  # the figure's own title, not its path
    assert "key figure: Site demo (made-up rows) (plot/tflops.svg)</figcaption>" in top
    assert (demo_site / "site_demo" / "gpu-a" / "files" / "plot" / "tflops.svg").is_file()
    ranking = a[a.index('id="headline"') : a.index('<figure class="artifact')]
    assert '<th class="num">TFLOP/s per GPU</th>' in ranking and "wall time per call" in ranking
    assert "<th></th>" not in ranking and "<th>group</th><th>workload</th>" in ranking  # every column named


def test_a_run_without_headline_data_gets_a_note(demo_project, tmp_path):
    outputs = tmp_path / "outputs"
    shutil.copytree(demo_project / "outputs", outputs)
    for path in outputs.glob("site_demo/gpu-a/headline/artifacts/headline.json"):
        path.unlink()
    for path in outputs.glob("site_demo/gpu-b/headline/artifacts/headline.json"):
        path.write_text('{"version": 1, "entries": [{"key": "x", "winner": 3}]}')
    run_engine("build", "--outputs", outputs, "--site", tmp_path / "site")
    a = page(tmp_path / "site", "site_demo/gpu-a.html")
    assert "No headline: this run predates headline data; re-run the report cell." in a
    assert 'id="headline"' in a and "fastest" not in before_first_figure(a)
    b = page(tmp_path / "site", "site_demo/gpu-b.html")
    assert "headline.json: entries[0].winner is 3: expected a string" in b


def test_cpu_smoke_page_says_so_and_shows_what_ran(demo_site):
    cpu = page(demo_site, "site_demo/cpu.html")
    assert "CPU smoke run: not a GPU measurement" in before_first_figure(cpu)
    assert "<dt>seq_lens</dt><dd><code>[64]</code>" in cpu  # the value that ran (-p), not the default


def test_output_without_terminal_escapes(demo_site):
    a = page(demo_site, "site_demo/gpu-a.html")
    assert "\x1b" not in a and "16 rows written ok" in a


def test_images_have_their_size(demo_site):
    a = page(demo_site, "site_demo/gpu-a.html")
    img = re.search(r'<img src="data:image/svg\+xml;base64,[^"]+" alt="tflops.svg: Site demo \(made-up rows\)" loading="lazy" '
                    r'width="(\d+)" height="(\d+)">', a)  # fmt: skip
    assert img and int(img.group(1)) > 300 and int(img.group(2)) > 200


def test_one_download_of_all_raw_data(demo_site):
    a = page(demo_site, "site_demo/gpu-a.html")
    assert '<a href="gpu-a/raw-data.zip" download>all raw data</a>' in a
    with zipfile.ZipFile(demo_site / "site_demo" / "gpu-a" / "raw-data.zip") as z:
        names = set(z.namelist())
        rows = z.read("site_demo/gpu-a/bench/artifacts/results.jsonl").decode().splitlines()
    assert {"site_demo/gpu-a/run.json", "site_demo/gpu-a/bench/result.json",
            "site_demo/gpu-a/targets/artifacts/targets.json"} <= names  # fmt: skip
    assert len(rows) == 16 and json.loads(rows[0])["provider"] == "fast_kernel"


def test_notebook_time_is_its_cells(demo_project, demo_site):
    results = [
        json.loads(p.read_text()) for p in (demo_project / "outputs/site_demo/gpu-a").glob("*/result.json")
    ]
    total = sum(r["duration_s"] for r in results)
    a = page(demo_site, "site_demo/gpu-a.html")
    took = re.search(r"cells took ([\d.]+) s in all", a)
    assert took and abs(float(took.group(1)) - total) < 0.06


def test_terminal_text():
    assert terminal_text("a\x1b[4mGPU0\x1b[0m b \x1b[1;31mred\x1b[0m") == "aGPU0 b red"
    assert terminal_text("q \x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\ z") == "q link z"  # hyperlink (OSC 8)
    assert terminal_text("t \x1b]0;title\x07after") == "t after"  # window title ended by BEL
    assert terminal_text("progress 10%\rprogress 100%\nnext") == "progress 100%\nnext"
    assert terminal_text("a\r\nb") == "a\nb" and terminal_text("x\x1b[2K\x1b[1A\x1b(By") == "xy"
    assert terminal_text("tab\tkept [4m not an escape") == "tab\tkept [4m not an escape"


def test_image_size_from_headers():
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 640, 480, 8, 2, 0, 0, 0))
    assert image_size(png, ".png") == (640, 480)
    assert image_size(b"GIF89a" + struct.pack("<HH", 7, 9), ".gif") == (7, 9)
    assert image_size(b'<svg xmlns="x" width="72pt" height="36pt">', ".svg") == (96, 48)
    assert image_size(b'<svg viewBox="0 0 200 100" width="400">', ".svg") == (400, 200)
    assert image_size(b"<svg>", ".svg") is None and image_size(b"junk", ".webp") is None


def test_no_headline_says_which_report_cell_did_not_run():
    """A run whose report cell never ran (a measuring cell before it was interrupted) says so; only a run
    whose report cell ran without writing headline.json predates headline data."""
    from attnbench.notebook.site.summary import NO_HEADLINE, missing_headline

    said = missing_headline([{"id": "targets", "status": "not run", "reason": ""},
                             {"id": "bench", "status": "interrupted", "reason": "interrupted (SIGTERM)"}])  # fmt: skip
    assert said == ("No headline: the cells that write it did not finish on this machine: targets not run; "
                    "bench interrupted (interrupted (SIGTERM)).")  # fmt: skip
    assert missing_headline(
        [{"id": "targets", "status": "not run", "reason": "not run on this machine"}]
    ) == (
        "No headline: the cell that writes it has not run on this machine: targets not run."
    )  # a reason that only repeats the status is left out
    assert missing_headline([{"id": "targets", "status": "ok", "reason": ""}]) == NO_HEADLINE
    assert missing_headline([]) == NO_HEADLINE
    # a report cell that ran and failed did not finish; it did run
    assert missing_headline([{"id": "targets", "status": "failed", "reason": "KeyError: 'bench'"}]) == (
        "No headline: the cell that writes it did not finish on this machine: targets failed (KeyError: 'bench')."
    )


def test_no_headline_names_where_the_report_cells_chain_stopped():
    """A report cell not run because a measuring cell it needs (through another) was interrupted names that
    cell and its reason, not the cells between that merely did not run after it."""
    from attnbench.notebook.document.parse import parse_text
    from attnbench.notebook.site.summary import headline_writers, missing_headline

    fence = "`" * 3
    text = "\n".join(
        f"{fence}python id={cid}{' needs=' + needs if needs else ''}{' outputs=headline.json' if cid == 'targets' else ''}"
        f"\nprint(1)\n{fence}\n"
        for cid, needs in (("gpu", ""), ("correctness", "gpu"), ("bench", "gpu,correctness"),
                           ("bench_table", "bench"), ("targets", "gpu,bench_table,correctness"))
    )  # fmt: skip
    notebook = parse_text(text, "cp.md")
    views = [{"id": "gpu", "status": "ok"}, {"id": "correctness", "status": "ok"},
             {"id": "bench", "status": "interrupted", "reason": "interrupted (SIGTERM)"},
             {"id": "bench_table", "status": "not run", "reason": ""},
             {"id": "targets", "status": "not run", "reason": ""}]  # fmt: skip
    writers = headline_writers(notebook, views)
    assert [w["id"] for w in writers] == ["targets"]
    assert [b["id"] for b in writers[0]["blocked_by"]] == ["bench"]
    assert missing_headline(writers) == (
        "No headline: the cell that writes it has not run on this machine: targets not run, as what it needs "
        "did not finish: bench interrupted (interrupted (SIGTERM))."
    )
    views[2] = {"id": "bench", "status": "ok"}
    views[3] = {"id": "bench_table", "status": "ok"}
    assert headline_writers(notebook, views)[0]["blocked_by"] == []


def test_key_numbers_show_whole_values_as_integers():
    """A key number that is whole (a length, an SM count, a clock, a power limit) reads as an integer;
    a measured ratio or time keeps its decimals."""
    from attnbench.notebook.site.headline import Headline, Number
    from attnbench.notebook.site.summary import answer_view

    head = Headline(numbers=[Number("a", "SMs", 132.0, "SMs"), Number("b", "longest", 4194304.0, "tokens"),
                             Number("c", "lead", 1.18, "×"), Number("d", "time", 6.041, "ms"),
                             Number("e", "MFU", 42.7, "%")])  # fmt: skip
    assert [n["value"] for n in answer_view(head)["numbers"]] == ["132", "4,194,304", "1.18", "6.04", "42.7"]


def test_past_four_key_numbers_the_rest_fold_under_the_answer():
    """The answer's lines come first; four key numbers show, the rest (what compare and history pair) fold."""
    from pathlib import Path

    import jinja2

    from attnbench.notebook.site import render
    from attnbench.notebook.site.headline import Headline, Number
    from attnbench.notebook.site.summary import answer_view

    templates = jinja2.Environment(
        loader=jinja2.FileSystemLoader(Path(render.__file__).with_name("templates"))
    )
    numbers = [Number(f"k{i}", f"number {i}", float(i), "ms") for i in range(6)]
    head = answer_view(Headline(question="Q?", answer=["A."], numbers=numbers))
    page = templates.get_template("answer.html.j2").render(head=head, label="gpu-a")
    shown, folded = page.split("<details", 1)
    assert [f"number {i}" in shown for i in range(6)] == [True] * 4 + [False] * 2
    assert "2 more key numbers" in folded and "number 4" in folded and "number 5" in folded
    few = templates.get_template("answer.html.j2").render(
        head=answer_view(Headline(answer=["A."], numbers=numbers[:4])), label="gpu-a"
    )
    assert "<details" not in few and "number 3" in few


def test_caveats_come_under_the_answer_lines_plain_and_a_headline_json_keeps_them(tmp_path):
    """What qualifies the answer (ties, the timing method, the noise) is listed under its bold lines, in
    the order given; headline.json carries it, merged headlines join it, and a file without it reads."""
    from pathlib import Path

    import jinja2

    from attnbench.notebook.site import render
    from attnbench.notebook.site.headline import Answer, Headline, load_headline, write_headline
    from attnbench.notebook.site.summary import answer_view

    templates = jinja2.Environment(
        loader=jinja2.FileSystemLoader(Path(render.__file__).with_name("templates"))
    )
    head = Headline().with_answer(
        Answer(question="Q?", answer=["A is 1.2× B."], caveats=["tied: C.", "noise 3%."])
    )
    html = templates.get_template("answer.html.j2").render(head=answer_view(head), label="gpu-a")
    answer_at, first, second = (html.index(s) for s in ("<strong>A is 1.2× B.</strong>", "<li>tied: C.</li>",
                                                          "<li>noise 3%.</li>"))  # fmt: skip
    assert answer_at < first < second and "<strong>tied" not in html
    assert load_headline(write_headline(head, tmp_path)).caveats == ["tied: C.", "noise 3%."]
    assert head.merged(Headline(caveats=["more."])).caveats == ["tied: C.", "noise 3%.", "more."]
    (tmp_path / "headline.json").write_text('{"version": 2, "answer": ["A."]}')  # written before caveats
    assert load_headline(tmp_path / "headline.json").caveats == []
    plain = templates.get_template("answer.html.j2").render(
        head=answer_view(Headline(answer=["A."])), label="a"
    )
    assert 'class="caveats' not in plain


def test_comparison_page_says_which_side_older_code_measured(demo_project, tmp_path):
    """A label measured by code that has changed since, or kept without a re-run, is named above the
    ratios: they set results of older code beside current ones. A label current with the code is not."""
    from attnbench.notebook.site.render import build_site

    states = {
        "site_demo": {
            "gpu-a": {"bench": ("stale", "code changed"), "headline": ("cached", "")},
            "gpu-b": {"bench": ("cached", "")},
        }
    }
    kept = {"site_demo": {"gpu-b": "no such machine was lent"}}  # a full stop added, one only
    build_site(demo_project / "outputs", tmp_path / "site", states, kept)
    compare = page(tmp_path / "site", "site_demo/compare.html")
    top = compare[: compare.index('id="machines"')]
    assert (
        '<strong><a href="gpu-a.html">gpu-a</a></strong>: 1 cell measured by code that has changed since.'
        in top
    )
    assert (
        '<strong><a href="gpu-b.html">gpu-b</a></strong>: kept, not re-run: no such machine was lent.' in top
    )
    assert top.count("measured by older code</span>") == 2 and "lent.." not in top
    assert top.count("Read its ratios as results of older code beside current ones.") == 2

    machines = compare[compare.index('id="machines"') :]
    assert '<th scope="row">with the code of now</th>' in machines
    assert '<td class="stale-cell">1 cell stale</td><td>current</td></tr>' in machines  # gpu-a, gpu-b

    build_site(
        demo_project / "outputs", tmp_path / "site2", {"site_demo": {"gpu-a": {"bench": ("cached", "")}}}
    )
    assert "measured by older code" not in page(tmp_path / "site2", "site_demo/compare.html")
    build_site(demo_project / "outputs", tmp_path / "site3")  # no judgement handed in: none claimed
    assert "<td>not judged (built with --no-status)</td>" in page(
        tmp_path / "site3", "site_demo/compare.html"
    )
