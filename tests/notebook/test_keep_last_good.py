"""A failed or interrupted re-run keeps the last good result, with the failure stored beside it; a
failed cell's reason is the exception that failed it, also under torchrun."""

from __future__ import annotations

import json

from engine_helpers import cell, notebook

from attnbench.notebook.run.execute import failure_reason

GOOD = """
from pathlib import Path
Path("results.jsonl").write_text('{"row": 1}\\n')
print("good")
"""
BAD = """
raise RuntimeError("Numpy is not available")
"""


def test_a_failed_rerun_keeps_the_artifacts_and_result_of_the_last_good_run(project):
    path = project.write("k.md", notebook(cell("id=bench outputs=results.jsonl", GOOD)))
    assert project.run(path).code == 0
    folder = project.cell_dir("k", "bench")
    good = project.result("k", "bench")

    path.write_text(notebook(cell("id=bench outputs=results.jsonl", BAD)))  # the code changed: it re-runs
    outcome = project.run(path)
    assert outcome.code == 1
    assert (folder / "artifacts" / "results.jsonl").read_text() == '{"row": 1}\n'
    assert project.result("k", "bench") == good  # the stored result is still the good one
    failure = json.loads((folder / "last-failure" / "result.json").read_text())
    assert failure["status"] == "failed"
    assert failure["reason"] == "exit code 1: RuntimeError: Numpy is not available"
    entry = project.run_json("k")["cells"]["bench"]
    assert entry["state"] == "failed" and "last good result" in entry["reason"]

    status = project.status(path)
    assert "stale" in status.out and "Numpy is not available" in status.out

    path.write_text(notebook(cell("id=bench outputs=results.jsonl", GOOD + "\nprint('again')")))
    assert project.run(path).code == 0
    assert not (folder / "last-failure").exists()  # a good run replaces the whole folder
    assert project.result("k", "bench")["status"] == "ok"


def test_a_forced_failing_rerun_keeps_the_good_result_and_its_cache(project):
    body = """
    import os
    from pathlib import Path
    if Path(os.environ["FLAG"]).exists():
        raise ValueError("flag set")
    Path("out.txt").write_text("x")
    """
    flag = project.root / "flag"
    path = project.write("f.md", notebook(cell(f"id=a env=FLAG={flag}", body)))
    assert project.run(path).code == 0
    flag.write_text("")
    assert project.run(path, "--force").code == 1
    assert (project.cell_dir("f", "a") / "artifacts" / "out.txt").read_text() == "x"
    assert project.result("f", "a")["status"] == "ok"


def test_a_first_failure_is_stored_in_place(project):
    path = project.write("n.md", notebook(cell("id=a", BAD)))
    assert project.run(path).code == 1
    assert project.result("n", "a")["status"] == "failed"
    assert not (project.cell_dir("n", "a") / "last-failure").exists()


TORCHRUN_STDERR = """\
W1125 10:00:00.000000 1 torch/distributed/run.py:793] Setting OMP_NUM_THREADS environment variable
[rank1]: Traceback (most recent call last):
[rank1]:   File "/w/cells/context_parallel/bench.py", line 40, in <module>
[rank1]:     dist.all_gather_object(out, row)
[rank1]: RuntimeError: Numpy is not available
E1125 10:00:01.000000 1 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: 1)
Traceback (most recent call last):
  File "/venv/bin/torchrun", line 10, in <module>
    sys.exit(main())
  File "/venv/lib/python3.12/site-packages/torch/distributed/run.py", line 892, in main
    run(args)
torch.distributed.elastic.multiprocessing.errors.ChildFailedError: 
============================================================
cells/context_parallel/bench.py FAILED
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  rank      : 1 (local_rank: 1)
  exitcode  : 1 (pid: 12)
============================================================
"""


def test_a_torchrun_failure_names_the_ranks_exception_not_the_banner(tmp_path):
    stderr = tmp_path / "stderr.txt"
    stderr.write_text(TORCHRUN_STDERR)
    assert failure_reason(1, stderr) == "exit code 1: RuntimeError: Numpy is not available"
    stderr.write_text(
        "Traceback (most recent call last):\n  File 'x'\nModuleNotFoundError: No module named 'numpy'\nbye\n"
    )
    assert failure_reason(1, stderr) == "exit code 1: ModuleNotFoundError: No module named 'numpy'"
    stderr.write_text("plain failure\n")
    assert failure_reason(2, stderr) == "exit code 2: plain failure"


def test_a_timed_out_rerun_keeps_the_last_good_result(project):
    path = project.write("t.md", notebook(cell("id=a outputs=results.jsonl timeout=5", GOOD)))
    assert project.run(path).code == 0
    path.write_text(notebook(cell("id=a outputs=results.jsonl timeout=1", "import time\ntime.sleep(30)")))
    assert project.run(path).code == 1
    folder = project.cell_dir("t", "a")
    assert (folder / "artifacts" / "results.jsonl").exists()
    assert project.result("t", "a")["status"] == "ok"
    assert project.run_json("t")["cells"]["a"]["state"] == "timeout"
    assert (folder / "last-failure" / "result.json").exists()
