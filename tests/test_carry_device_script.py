"""scripts/carry/device.sh's bookkeeping on a CPU: which groups a call sees, from the MANIFESTs carried."""

import shutil
import subprocess
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts" / "carry"


def test_a_second_prepare_inside_one_lease_is_not_hidden_by_an_earlier_calls_folder(tmp_path):
    """An ignored folder stays on a warm machine: c02 of the lease's first prepare (base, fa4) is still
    there when the second prepare's c01 (small) arrives. The groups are the union of every MANIFEST seen."""
    repo, carry = tmp_path / "repo", tmp_path / "carry"
    shutil.copytree(SCRIPTS, repo / "scripts" / "carry")
    (repo / ".carry" / "c01").mkdir(parents=True)
    (repo / ".carry" / "c02").mkdir()
    (repo / ".carry" / "c01" / "MANIFEST").write_text("small 2 aa\n")  # the second prepare
    (repo / ".carry" / "c01" / "small.p00").write_bytes(b"x")
    (repo / ".carry" / "c02" / "MANIFEST").write_text("base 1 bb\nfa4 3 cc\n")  # left from the first
    carry.mkdir()
    for group in ("base", "fa4"):  # installed by the first prepare's calls: nothing is installed again here
        (carry / f"done.{group}").touch()
    done = subprocess.run(["bash", "scripts/carry/device.sh"], check=False, cwd=repo, env={"PATH": "/usr/bin:/bin",
                          "CARRY_DIR": str(carry)}, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert {"base: installed", "fa4: installed", "small: 1 of 2 pieces"} <= set(lines)
    assert (carry / "parts" / "MANIFEST").read_text().splitlines() == ["base 1 bb", "fa4 3 cc", "small 2 aa"]
    assert (carry / "parts" / "small.p00").exists() and not (carry / "parts" / "c02").exists()
