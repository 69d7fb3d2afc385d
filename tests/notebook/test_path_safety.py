"""Every path the engine writes, deletes or reads into the site stays inside outputs/ (or site/):
notebook names are validated like labels, `clean` removes nothing outside outputs/<notebook>/, and
FIFOs, sockets, devices and links out of artifacts/ are a named error for their cell, never a hang."""

from __future__ import annotations

import os
import socket

import pytest
from engine_helpers import cell, notebook

from attnbench.notebook.run import store

pytestmark = pytest.mark.timeout(60)  # a FIFO opened for reading would hang: fail instead


def test_a_cell_that_leaves_a_fifo_fails_by_name_and_does_not_hang(project):
    body = """
    import os
    os.mkfifo("pipe")
    open("ok.txt", "w").write("x")
    """
    path = project.write("f.md", notebook(cell("id=a", body), cell("id=b needs=a", "print(1)")))
    assert project.run(path).code == 1
    result = project.result("f", "a")
    assert result["status"] == "failed"
    assert "artifacts/pipe: a FIFO (named pipe)" in result["reason"]
    assert not (project.cell_dir("f", "a") / "artifacts" / "pipe").exists()


def test_a_link_out_of_artifacts_is_a_named_failure(project, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("secret")
    body = f"""
    import os
    os.symlink({str(secret)!r}, "leak.txt")
    os.symlink("inner.txt", "inner-link.txt")
    open("inner.txt", "w").write("x")
    """
    path = project.write("l.md", notebook(cell("id=a", body)))
    assert project.run(path).code == 1
    result = project.result("l", "a")
    assert "artifacts/leak.txt: a link to" in result["reason"]
    assert "inner-link" not in result["reason"]  # a link inside artifacts/ is fine
    assert secret.read_text() == "secret"


def test_a_fifo_placed_in_stored_artifacts_is_named_not_read(project):
    path = project.write("s.md", notebook(cell("id=a", "print(1)"), cell("id=b needs=a", "print(2)")))
    assert project.run(path).code == 0
    os.mkfifo(project.cell_dir("s", "a") / "artifacts" / "pipe")
    store._DIGESTS.clear()  # as in a new process
    path.write_text(notebook(cell("id=a", "print(1)"), cell("id=b needs=a", "print(3)")))
    outcome = project.run(path)
    assert outcome.code == 2
    assert "pipe" in outcome.err and "FIFO" in outcome.err


def test_result_json_as_a_fifo_or_socket_is_a_named_error(project, tmp_path):
    path = project.write("r.md", notebook(cell("id=a", "print(1)")))
    assert project.run(path).code == 0
    result = project.cell_dir("r", "a") / "result.json"
    result.unlink()
    os.mkfifo(result)
    outcome = project.status(path)
    assert outcome.code == 2 and "FIFO" in outcome.err
    result.unlink()
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(result))
        outcome = project.status(path)
    assert outcome.code == 2 and "socket" in outcome.err


@pytest.mark.parametrize("name", ["..md", ".hidden.md"])
def test_a_notebook_file_name_is_validated_like_a_label(project, name):
    path = project.write(name, notebook(cell("id=a", "print(1)")))
    outcome = project.run(path)
    assert outcome.code == 2
    assert "notebook file name" in outcome.err
    assert not (project.root / "outputs").exists() or not any((project.root / "outputs").rglob("result.json"))
    assert project.cli("clean", path, "--outputs").code == 2


def test_clean_never_removes_anything_outside_outputs(project, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "t").mkdir(parents=True)
    (elsewhere / "t" / "keep.txt").write_text("keep")
    path = project.write("c.md", notebook(cell("id=a", "print(1)")))
    (project.root / "outputs").mkdir()
    (project.root / "outputs" / "c").symlink_to(elsewhere)
    outcome = project.cli("clean", path, "--outputs", "--label", "t")
    assert outcome.code == 2
    assert (elsewhere / "t" / "keep.txt").read_text() == "keep"
    outcome = project.cli("clean", path, "--outputs")
    assert outcome.code == 2
    assert (elsewhere / "t" / "keep.txt").read_text() == "keep"


def test_the_site_never_follows_stored_links_or_fifos(project, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET-TEXT")
    path = project.write("w.md", notebook(cell("id=a", "print('hello')"), cell("id=b", "print('x')")))
    assert project.run(path).code == 0
    stdout = project.cell_dir("w", "a") / "stdout.txt"
    stdout.unlink()
    stdout.symlink_to(secret)
    fifo = project.cell_dir("w", "b") / "stdout.txt"
    fifo.unlink()
    os.mkfifo(fifo)
    (project.root / "outputs" / "w" / "t" / "run.json").rename(tmp_path / "run.json")
    (project.root / "outputs" / "w" / "t" / "run.json").symlink_to(tmp_path / "run.json")
    site = tmp_path / "site"
    outcome = project.cli("build", "--outputs", project.root / "outputs", "--site", site)
    assert outcome.code in (0, 1, 2)
    for page in site.rglob("*"):
        if page.is_file() and not page.is_symlink():
            assert b"TOP-SECRET-TEXT" not in page.read_bytes(), page
