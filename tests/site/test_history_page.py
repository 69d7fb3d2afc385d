"""history.py: every committed run of a notebook and label, from a temporary git repo with two runs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from attnbench.notebook.site import headline as page
from attnbench.notebook.site.history import DEFAULT_SPREAD, history_view, run_history

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


def commit_run(repo: Path, value: float, code: str, message: str) -> None:
    run = repo / "outputs" / "nb" / "gpu-a"
    art = run / "report" / "artifacts"
    art.mkdir(parents=True, exist_ok=True)
    head = page.Headline(question="q?", answer=["a"], numbers=[page.Number("fwd|speedup", "speed-up", value, "×",
                         "wall time")])  # fmt: skip
    page.write_headline(head, art)
    (run / "report" / "result.json").write_text(json.dumps({"code": {"commit": code}}))
    (run / "run.json").write_text("{}")
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", message)


def commit_code(repo: Path, text: str, date: str) -> str:
    """A commit of code (not of outputs) dated `date`; its sha. History orders code commits by date."""
    (repo / "code.py").write_text(text)
    git(repo, "add", "-A")
    env = {**os.environ, "GIT_COMMITTER_DATE": date, "GIT_AUTHOR_DATE": date}
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", text],
                   check=True, capture_output=True, env=env)  # fmt: skip
    return subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()  # fmt: skip


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    git(tmp_path, "init", "-q")
    commit_run(tmp_path, 2.0, "aaaaaaa", "results: run of commit aaaaaaa")
    commit_run(tmp_path, 2.5, "bbbbbbb", "results: run of commit bbbbbbb")
    commit_run(tmp_path, 2.51, "", "results: re-run of commit ccccccc")
    return tmp_path


def test_every_committed_run_with_its_code_commit_and_flags(repo: Path):
    h = run_history(repo, repo / "outputs" / "nb" / "gpu-a")
    assert h is not None and (h.notebook, h.label) == ("nb", "gpu-a")
    assert [r.numbers["fwd|speedup"] for r in h.runs] == [2.0, 2.5, 2.51]  # oldest first
    assert [r.code for r in h.runs] == ["aaaaaaa", "bbbbbbb", "ccccccc"]  # result.json, else the subject
    # +25% is over the default 2% spread; +0.4% is not
    assert [bool(r.flagged) for r in h.runs] == [False, True, False] and h.spread == DEFAULT_SPREAD
    view = history_view(h)
    assert view["numbers"][0]["svg"].startswith("<svg") and view["numbers"][0]["moves"] == 1
    assert view["runs"][1]["cells"][0][1] is True  # newest first: the flagged run is the second row


def test_a_commit_that_removed_the_label_folder_is_no_run(repo: Path):
    git(repo, "rm", "-rq", "outputs")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "outputs/ removed by mistake")
    commit_run(repo, 2.6, "ddddddd", "results: run of commit ddddddd")
    h = run_history(repo, repo / "outputs" / "nb" / "gpu-a")
    assert [r.code for r in h.runs] == ["aaaaaaa", "bbbbbbb", "ccccccc", "ddddddd"]
    assert not any("removed" in r.subject for r in h.runs)


def test_without_git_or_outside_a_repository_there_is_no_history(tmp_path: Path):
    assert run_history(None, tmp_path) is None
    assert run_history(tmp_path, tmp_path / "outputs" / "nb" / "x") is None  # not a repository


def test_site_links_the_history_page(repo: Path):
    from attnbench.notebook.site.render import build_site

    build_site(repo / "outputs", repo / "site")
    history = repo / "site" / "nb" / "gpu-a.history.html"
    assert history.exists()
    text = history.read_text()
    assert "aaaaaaa" in text and "bbbbbbb" in text and "⚑" in text
    assert "gpu-a.history.html" in (repo / "site" / "index.html").read_text()


def test_a_number_is_flagged_only_beyond_its_measured_spread(tmp_path: Path):
    """With the report's measured spread (10 %) the +25 % move is flagged and a +4 % move is not, though
    +4 % is over the 2 % default."""
    git(tmp_path, "init", "-q")
    for value, code in ((2.0, "aaaaaaa"), (2.5, "bbbbbbb"), (2.6, "ccccccc")):
        run = tmp_path / "outputs" / "nb" / "gpu-a" / "report"
        (run / "artifacts").mkdir(parents=True, exist_ok=True)
        number = page.Number("fwd|speedup", "speed-up", value, "×", "wall time", spread=0.1)
        page.write_headline(page.Headline(numbers=[number]), run / "artifacts")
        (run / "result.json").write_text(json.dumps({"code": {"commit": code}}))
        git(tmp_path, "add", "-A")
        git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", f"results of {code}")
    h = run_history(tmp_path, tmp_path / "outputs" / "nb" / "gpu-a")
    assert [bool(r.flagged) for r in h.runs] == [False, True, False]
    (number,) = history_view(h)["numbers"]
    assert number["spread"] == "10.0%" and number["measured"] is True


def test_the_history_page_opens_with_its_summary(repo: Path):
    from attnbench.notebook.site.render import build_site

    build_site(repo / "outputs", repo / "site")
    text = (repo / "site" / "nb" / "gpu-a.history.html").read_text()
    lead = text[text.index('id="headline"') :]
    assert "3 measurements in 3 commits of outputs/nb/gpu-a/ from git" in lead
    assert (
        'speed-up (×, wall time): <strong>now 2.51, first 2</strong> <span class="muted">· spread 2.0% (default)'
        in lead
    )


def _commit_entries(repo: Path, code: str, entries: list[page.Entry], message: str) -> None:
    art = repo / "outputs" / "nb" / "gpu-a" / "bench" / "artifacts"
    art.mkdir(parents=True, exist_ok=True)
    page.write_headline(page.Headline(entries=entries), art)
    (art.parent / "result.json").write_text(json.dumps({"code": {"commit": code}}))
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", message)


def test_a_commit_that_only_presents_a_measurement_again_is_one_point(tmp_path: Path):
    """Three commits, two measurements: the re-presentation (same code commit, same numbers, the entry's
    key renamed by newer presenting code) folds into the run it presents; the series keeps one name
    (not the winner's) across the rename; a new measurement with another winner continues it."""
    git(tmp_path, "init", "-q")
    old_key = page.Entry("fwd|causal", "fa3", 600.0, "TFLOP/s", group="forward", label="causal")
    _commit_entries(tmp_path, "aaaaaaa", [old_key], "measured at aaaaaaa")
    renamed = page.Entry("fwd|S 16384 · causal", "fa3", 600.0, "TFLOP/s", group="forward", label="causal")
    _commit_entries(tmp_path, "aaaaaaa", [renamed], "presented again")
    _commit_entries(tmp_path, "bbbbbbb", [page.Entry("fwd|S 16384 · causal", "cudnn", 660.0, "TFLOP/s",
                                                     group="forward", label="causal")], "measured at bbbbbbb")  # fmt: skip
    h = run_history(tmp_path, tmp_path / "outputs" / "nb" / "gpu-a")
    assert [r.code for r in h.runs] == ["aaaaaaa", "bbbbbbb"] and len(h.runs[0].presented_again) == 1
    assert list(h.names.values()) == ["bench: forward causal, fastest (TFLOP/s)"]
    (key,) = h.names
    assert [r.numbers[key] for r in h.runs] == [600.0, 660.0] and [r.winners[key] for r in h.runs] == [
        "fa3",
        "cudnn",
    ]
    view = history_view(h)
    assert view["commits"] == 3 and view["runs"][1]["again"] and view["numbers"][0]["moves"] == 1
    assert view["numbers"][0]["seen"] == "now 660, first 600"
    assert view["runs"][0]["cells"][0] == ("660", True, "+10.0% against the run before; fastest: cudnn")


def test_a_new_measurement_of_the_same_code_is_a_point_of_its_own(tmp_path: Path):
    """Re-measured at the same code commit with another result: not a re-presentation."""
    git(tmp_path, "init", "-q")
    for value in (600.0, 610.0):
        entry = page.Entry("fwd|causal", "fa3", value, "TFLOP/s", group="forward", label="causal")
        _commit_entries(tmp_path, "aaaaaaa", [entry], f"measured {value}")
    h = run_history(tmp_path, tmp_path / "outputs" / "nb" / "gpu-a")
    assert len(h.runs) == 2 and not h.runs[0].presented_again


def test_an_entry_moves_against_its_measured_spread_also_before_it_was_measured(tmp_path: Path):
    """The newest run's entry says its machine's spread (10 %): a 6 % move is noise at every run, the
    runs committed before the spread was measured included; a 15 % move is flagged."""
    git(tmp_path, "init", "-q")
    for code, value, spread in (("aaaaaaa", 600.0, None), ("bbbbbbb", 636.0, None), ("ccccccc", 731.0, 0.1)):
        entry = page.Entry(
            "fwd|causal", "fa3", value, "TFLOP/s", group="forward", label="causal", spread=spread
        )
        _commit_entries(tmp_path, code, [entry], f"measured at {code}")
    h = run_history(tmp_path, tmp_path / "outputs" / "nb" / "gpu-a")
    assert [bool(r.flagged) for r in h.runs] == [False, False, True]
    (number,) = history_view(h)["numbers"]
    assert number["spread"] == "10.0%" and number["measured"] is True


def test_folding_needs_the_same_numbers_and_survives_a_series_folded_away(tmp_path: Path):
    """A run that adds a number is a measurement of its own (nothing is lost); two keys of one name seen
    only in presentations a newer one replaced do not break the page."""
    git(tmp_path, "init", "-q")
    a = page.Entry("a", "k", 1.0, "ms", group="g", label="x")
    b = page.Entry("b", "k", 2.0, "ms", group="g", label="y")
    _commit_entries(tmp_path, "aaaaaaa", [a, b], "first")
    _commit_entries(
        tmp_path, "aaaaaaa", [a, page.Entry("new", "k", 3.0, "ms", group="g", label="z")], "second"
    )
    h = run_history(tmp_path, tmp_path / "outputs" / "nb" / "gpu-a")
    assert len(h.runs) == 2 and set(h.runs[0].numbers) == {"entry|a", "entry|b"}

    other = tmp_path / "other"
    other.mkdir()
    git(other, "init", "-q")
    # k1 and k2 share a name, k3 has its own; one value: each presentation folds into the first, and
    # k1's and k2's series is in no run that is left
    entries = [page.Entry(k, "k", 1.0, "ms", group="g", label=label) for k, label in (("k1", "x"), ("k2", "x"),
                                                                                      ("k3", "y"))]  # fmt: skip
    for entry in entries:
        _commit_entries(other, "aaaaaaa", [entry], f"presented {entry.key}")
    h = run_history(other, other / "outputs" / "nb" / "gpu-a")
    assert len(h.runs) == 1 and list(h.runs[0].numbers) == ["entry|k3"] and len(h.names) == 1
    history_view(h)


def test_whole_numbers_that_are_not_finite_are_shown_not_raised():
    from attnbench.notebook.site.history import _shown
    from attnbench.notebook.site.summary import key_number_text

    assert _shown(float("nan")) == "nan" and _shown(float("inf")) == "inf"
    assert key_number_text(float("inf")) == "inf"


def commit_cells(repo: Path, codes: dict[str, str]) -> Path:
    """Commit a label folder whose cells ran at the code commits `codes` (cell -> commit), the headline
    (one number) written by its `report` cell; returns the folder."""
    run = repo / "outputs" / "nb" / "gpu-a"
    for cell, code in codes.items():
        (run / cell / "artifacts").mkdir(parents=True, exist_ok=True)
        (run / cell / "result.json").write_text(json.dumps({"code": {"commit": code}}))
    page.write_headline(
        page.Headline(numbers=[page.Number("n", "n", 1.0, "ms")]), run / "report" / "artifacts"
    )
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "results")
    return run


def test_a_run_names_its_oldest_code_and_the_newest_it_was_presented_with(tmp_path: Path):
    """The measuring cell ran at an older code commit than the report cell that presented it later: the
    run's code commit is the older one, `presented_with` the newer (commits this clone holds)."""
    git(tmp_path, "init", "-q")
    old, new = (
        commit_code(tmp_path, "1", "2026-01-01T00:00:00"),
        commit_code(tmp_path, "2", "2026-02-01T00:00:00"),
    )
    run = commit_cells(tmp_path, {"bench": new, "report": old})  # the listing order does not decide
    (measured,) = run_history(tmp_path, run).runs
    assert (measured.code, measured.presented_with) == (old, new)


def test_the_code_commit_is_that_of_the_cells_the_headline_reads(tmp_path: Path):
    """A label folder also holds cells of an older run that the headline does not read (a placeholder an
    older engine left, with a report of it that has no numbers): the run's code is that of the headline's
    writer and what it reads, however far upstream, never the older cells'."""
    git(tmp_path, "init", "-q")
    old, mid, new = (commit_code(tmp_path, str(i), f"2026-0{i}-01T00:00:00") for i in (1, 2, 3))
    run = tmp_path / "outputs" / "nb" / "gpu-a"

    def record(cell: str, code: str, reads: list[str]) -> None:
        (run / cell / "artifacts").mkdir(parents=True, exist_ok=True)
        parts = {"upstream": {name: "k" for name in reads}}
        (run / cell / "result.json").write_text(json.dumps({"code": {"commit": code}, "key_parts": parts}))

    record("bench", mid, [])
    record("table", new, ["bench"])  # presented later, with newer code
    record("report", new, ["table"])
    record("placeholder", old, [])
    record("placeholder_report", old, ["placeholder"])
    number = page.Number("fwd|speedup", "speed-up", 2.0, "×", "wall time")
    page.write_headline(page.Headline(numbers=[number]), run / "report" / "artifacts")
    page.write_headline(page.Headline(), run / "placeholder_report" / "artifacts")  # no numbers
    failed = run / "placeholder" / "last-failure" / "artifacts"  # a failed try's numbers are not the run's
    failed.mkdir(parents=True)
    page.write_headline(page.Headline(numbers=[page.Number("failed|n", "n", 9.0, "ms")]), failed)
    git(tmp_path, "add", "-A")
    git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "results")
    (measured,) = run_history(tmp_path, run).runs
    assert (measured.code, measured.presented_with) == (mid, new)
    assert list(measured.numbers) == ["fwd|speedup"]


def test_a_measurement_repeated_by_new_code_is_a_run_of_its_own_though_its_numbers_agree(tmp_path: Path):
    """An environment's numbers (SMs, memory) agree to the last bit when measured again: a commit whose
    measuring code differs is a new measurement, not a re-presentation of the one before."""
    git(tmp_path, "init", "-q")
    commit_run(tmp_path, 132.0, "aaaaaaa", "results: measured at aaaaaaa")
    commit_run(tmp_path, 132.0, "bbbbbbb", "results: measured again at bbbbbbb")
    commit_run(tmp_path, 132.0, "", "results: presented again (no code recorded)")
    h = run_history(tmp_path, tmp_path / "outputs" / "nb" / "gpu-a")
    assert [r.code for r in h.runs] == ["aaaaaaa", "bbbbbbb"]
    assert len(h.runs[1].presented_again) == 1


def test_a_label_measured_in_parts_names_every_code_commit(tmp_path: Path):
    """Forward cells at one code commit, forward + backward cells at a later one, the report presented at
    a third: the run names the oldest, the one between and the newest it was presented with, in order."""
    git(tmp_path, "init", "-q")
    first, second, third = (commit_code(tmp_path, str(i), f"2026-0{i}-01T00:00:00") for i in (1, 2, 3))
    run = commit_cells(tmp_path, {"report": third, "bench_fwd_bwd": second, "bench": first})
    history = run_history(tmp_path, run)
    (measured,) = history.runs
    assert (measured.code, measured.also_code, measured.presented_with) == (first, [second], third)
    from attnbench.notebook.site.history import history_view

    (shown,) = history_view(history)["runs"]
    assert shown["also_code"] == [second[:9]]
    from attnbench.notebook.site.history import write_history_page
    from attnbench.notebook.site.render import _Renderer

    env = _Renderer(tmp_path / "outputs", tmp_path / "site").env  # the site's own templates and settings
    name = write_history_page(env, tmp_path / "site", tmp_path, run, "T")
    html = (tmp_path / "site" / "nb" / name).read_text()
    assert f"<code>{first[:9]}</code>, <code>{second[:9]}</code>" in html
    assert f"(presented with <code>{third[:9]}</code>)" in html


def test_git_objects_list_a_folder_and_read_each_blob_once(tmp_path: Path, monkeypatch):
    """The history's git reader: a folder's files with their blob shas at a commit, each blob's text read
    once through one cat-file process (the same blob at two commits is one read), undecodable bytes
    replaced, a sha git does not hold None; outside a repository the tree is None."""
    from attnbench.notebook.run import provenance

    git(tmp_path, "init", "-q")
    folder = tmp_path / "outputs" / "nb"
    folder.mkdir(parents=True)
    (folder / "a.json").write_text('{"v": 1}')
    (folder / "b.bin").write_bytes(b"ok \xff")
    first = commit_code(tmp_path, "1", "2026-01-01T00:00:00")
    (tmp_path / "outputs" / "nb" / "c.json").write_text("{}")
    second = commit_code(tmp_path, "2", "2026-02-01T00:00:00")
    reads = []
    with provenance.GitObjects(tmp_path) as objects:
        real = objects._read
        monkeypatch.setattr(objects, "_read", lambda sha: reads.append(sha) or real(sha))
        then, now = objects.tree(first, "outputs/nb"), objects.tree(second, "outputs/nb")
        assert [path for _, path in then] == ["outputs/nb/a.json", "outputs/nb/b.bin"]
        assert [path for _, path in now] == ["outputs/nb/a.json", "outputs/nb/b.bin", "outputs/nb/c.json"]
        assert then[0][0] == now[0][0]  # a.json did not change: one blob
        texts = [objects.text(sha) for sha, _ in then + now]
        assert texts == ['{"v": 1}', "ok \ufffd", '{"v": 1}', "ok \ufffd", "{}"]
        assert len(reads) == 3  # three distinct blobs
        assert objects.text("0" * 40) is None
    assert provenance.GitObjects(tmp_path / "outputs").tree(first, "x") == []
    assert provenance.GitObjects(tmp_path.parent).tree(first, "outputs") is None


def test_git_objects_survive_a_cat_file_process_that_died(tmp_path: Path):
    """A cat-file process that ends between two reads (killed, or git gone): the read in flight gives
    None, nothing raises, and the next read starts a fresh process; closing twice is harmless."""
    from attnbench.notebook.run import provenance

    git(tmp_path, "init", "-q")
    (tmp_path / "a.json").write_text("{}")
    commit = commit_code(tmp_path, "1", "2026-01-01T00:00:00")
    objects = provenance.GitObjects(tmp_path)
    (sha, _), *_ = objects.tree(commit, "a.json")
    assert objects.text(sha) == "{}"
    objects._batch.kill()
    objects._batch.wait()
    objects._texts.clear()
    assert objects.text(sha) is None  # the dead process: no answer, no exception
    objects._texts.clear()
    assert objects.text(sha) == "{}"  # a fresh process
    objects.close()
    objects.close()
    outside = provenance.GitObjects(tmp_path / "no-such-folder")
    assert outside.text(sha) is None and outside.text(sha) is None
    outside.close()
