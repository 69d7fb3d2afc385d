"""A small fixture run for the site tests: tests/site/fixtures/site_demo.md run by the engine on three
"machine" labels (two that differ in speed, one CPU smoke run), then `attnbench build`."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from site_helpers import run_engine

FIXTURES = Path(__file__).with_name("fixtures")
RUNS = {  # label -> params
    "gpu-a": [],
    "gpu-b": ["-p", "scale=1.5"],  # 1.5x the throughput of gpu-a, so its target is met
    "cpu": ["-p", "timer=perf_counter", "-p", "seq_lens=[64]"],  # no shape in common with the others
}


@pytest.fixture(scope="session")
def demo_project(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("site-demo")
    (root / "pyproject.toml").write_text("[project]\nname = 'demo'\n")
    (root / "notebooks").mkdir()
    notebook = root / "notebooks" / "site_demo.md"
    shutil.copy(FIXTURES / "site_demo.md", notebook)
    for label, params in RUNS.items():
        run_engine("run", notebook, "--env", "python", "--label", label, "--plain", *params)
    return root


@pytest.fixture(scope="session")
def demo_site(demo_project: Path) -> Path:
    site = demo_project / "site"
    run_engine("build", "--outputs", demo_project / "outputs", "--site", site)
    return site
