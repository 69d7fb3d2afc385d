"""Launch commands (uv, python, torchrun incl. multi-node and Slurm), env vars, deps check."""

from __future__ import annotations

from pathlib import Path

import pytest

from attnbench.notebook.document.model import Cell, Need
from attnbench.notebook.run.launchers import (
    DistOptions,
    EnvSpec,
    LaunchError,
    cell_command,
    cell_environment,
    input_vars,
    missing_deps,
    setup_command,
)
from attnbench.notebook.run.machine import Interpreter

PY = EnvSpec("python", "python3")
NO_ENV: dict[str, str] = {}


def test_env_spec_parsing():
    assert EnvSpec.parse("uv") == EnvSpec("uv")
    assert EnvSpec.parse("python") == EnvSpec("python", None)
    assert EnvSpec.parse("python=/opt/conda/bin/python") == EnvSpec("python", "/opt/conda/bin/python")
    assert EnvSpec.parse("python=/opt/conda/bin/python").shown() == "python"  # never an absolute path
    for bad in ("conda", "uv=x", "python="):
        with pytest.raises(LaunchError):
            EnvSpec.parse(bad)


def test_plain_commands():
    assert cell_command(PY, "cells/n/a.py", None, DistOptions(), NO_ENV, "py") == (
        ["py", "cells/n/a.py"],
        "python",
    )
    assert cell_command(EnvSpec("uv"), "cells/n/a.py", None, DistOptions(), NO_ENV) == (
        ["uv", "run", "--script", "cells/n/a.py"],
        "uv",
    )


def test_gpus_single_node_uses_standalone_torchrun():
    argv, launcher = cell_command(PY, "a.py", 2, DistOptions(), NO_ENV, "py")
    assert launcher == "torchrun"
    assert argv == [
        "py",
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nnodes",
        "1",
        "--nproc-per-node",
        "2",
        "a.py",
    ]


def test_gpus_multi_node_from_the_command_line():
    dist = DistOptions(nnodes="2", node_rank="1", rdzv_endpoint="head:29400")
    argv, _ = cell_command(PY, "a.py", 8, dist, NO_ENV, "py")
    assert argv == [
        "py",
        "-m",
        "torch.distributed.run",
        "--nnodes",
        "2",
        "--nproc-per-node",
        "8",
        "--rdzv-backend",
        "static",
        "--rdzv-endpoint",
        "head:29400",
        "--node-rank",
        "1",
        "a.py",
    ]


def test_gpus_multi_node_from_slurm_variables():
    slurm = {
        "SLURM_NNODES": "4",
        "SLURM_NODEID": "3",
        "MASTER_ADDR": "node-0",
        "MASTER_PORT": "12345",
        "SLURM_JOB_ID": "77",
    }
    argv, _ = cell_command(PY, "a.py", 8, DistOptions(), slurm, "py")
    assert argv[3:] == [
        "--nnodes",
        "4",
        "--nproc-per-node",
        "8",
        "--rdzv-backend",
        "static",
        "--rdzv-endpoint",
        "node-0:12345",
        "--node-rank",
        "3",
        "a.py",
    ]
    # the command line wins over Slurm; c10d gets a rendezvous id from the job
    argv, _ = cell_command(
        PY, "a.py", 8, DistOptions(rdzv_backend="c10d"), {**slurm, "MASTER_PORT": ""}, "py"
    )
    assert argv[3:] == [
        "--nnodes",
        "4",
        "--nproc-per-node",
        "8",
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        "node-0:29500",
        "--rdzv-id",
        "77",
        "a.py",
    ]
    # one Slurm node: standalone, MASTER_ADDR is not needed
    argv, _ = cell_command(PY, "a.py", 2, DistOptions(), {"SLURM_NNODES": "1", "MASTER_ADDR": "x"}, "py")
    assert "--standalone" in argv


def test_multi_node_needs_an_endpoint():
    with pytest.raises(LaunchError, match="rendezvous"):
        cell_command(PY, "a.py", 2, DistOptions(nnodes="2"), NO_ENV, "py")
    with pytest.raises(LaunchError, match="node-rank"):
        cell_command(
            PY, "a.py", 2, DistOptions(nnodes="2", rdzv_endpoint="h:1", rdzv_backend="static"), NO_ENV, "py"
        )


def test_setup_command_prepares_the_uv_environment_only():
    assert setup_command(EnvSpec("uv"), "cells/n/a.py") == [
        "uv",
        "sync",
        "--quiet",
        "--script",
        "cells/n/a.py",
    ]
    assert setup_command(PY, "cells/n/a.py") is None


def test_uv_gpus_syncs_the_script_env_then_runs_torchrun_with_its_python():
    argv, launcher = cell_command(EnvSpec("uv"), "cells/n/a.py", 2, DistOptions(), NO_ENV)
    assert launcher == "torchrun"
    assert argv[:2] == ["sh", "-c"]
    assert 'uv sync --quiet --script "$s"' in argv[2] and 'uv python find --script "$s"' in argv[2]
    assert "-m torch.distributed.run" in argv[2]
    assert argv[3:] == [
        "sh",
        "cells/n/a.py",
        "--standalone",
        "--nnodes",
        "1",
        "--nproc-per-node",
        "2",
        "cells/n/a.py",
    ]


def test_input_vars_for_local_and_other_notebook_cells():
    ups = [
        (Need("make-data"), Path("/o/nb/t/make-data/artifacts")),
        (Need("gpu", "environment"), Path("/o/environment/t/gpu/artifacts")),
    ]
    assert input_vars(ups, "nb") == {
        "ATTNBENCH_INPUT_MAKE_DATA": "/o/nb/t/make-data/artifacts",
        "UVNOTE_INPUT_MAKE_DATA": "/o/nb/t/make-data/artifacts",
        "ATTNBENCH_INPUT_ENVIRONMENT__GPU": "/o/environment/t/gpu/artifacts",
        "ATTNBENCH_INPUT_GPU": "/o/environment/t/gpu/artifacts",
        "UVNOTE_INPUT_GPU": "/o/environment/t/gpu/artifacts",
        "UVNOTE_FILE_ENVIRONMENT_GPU": "/o/environment/t/gpu/artifacts",  # uvnote's cross-file name
        "UVNOTE_INPUTS": "UVNOTE_INPUT_MAKE_DATA,UVNOTE_INPUT_GPU",  # in needs= order
    }
    clash = [(Need("gpu", "environment"), Path("/other")), (Need("gpu"), Path("/local"))]
    assert input_vars(clash, "nb")["ATTNBENCH_INPUT_GPU"] == "/local"  # the local cell owns the short name


def test_input_var_of_a_notebook_in_a_subfolder_is_what_inputs_reads(monkeypatch):
    import attnbench

    folder = input_vars([(Need("x", "sub/other"), Path("/o/other/t/x/artifacts"))], "nb")
    assert "ATTNBENCH_INPUT_OTHER__X" in folder  # the notebook's name is its stem, as in outputs/
    monkeypatch.setenv("ATTNBENCH_NOTEBOOK", "nb")
    for name, value in folder.items():
        monkeypatch.setenv(name, value)
    assert attnbench.inputs("sub/other.md:x") == Path("/o/other/t/x/artifacts")  # via the long name


def test_cell_environment(tmp_path):
    base = {"PATH": "/bin", "PYTHONPATH": "/x", "VIRTUAL_ENV": "/venv", "ATTNBENCH_INPUT_OLD": "/stale"}
    cell = Cell(id="a", source="", line=1, env={"NCCL_DEBUG": "WARN"})
    kwargs = {
        "root": tmp_path,
        "notebook": "nb",
        "label": "cpu",
        "params": {"n": 1},
        "inputs": [],
        "cell": cell,
        "src_dir": Path("/repo/src"),
    }
    env = cell_environment(base, env=PY, **kwargs)
    assert env["PYTHONPATH"] == "/repo/src:/x"
    assert env["ATTNBENCH_PARAMS"] == '{"n": 1}' and env["PYTHONUNBUFFERED"] == "1"
    assert env["ATTNBENCH_ROOT"] == str(tmp_path) and env["ATTNBENCH_LABEL"] == "cpu"
    assert env["NCCL_DEBUG"] == "WARN" and "ATTNBENCH_INPUT_OLD" not in env
    uv_env = cell_environment(base, env=EnvSpec("uv"), **kwargs)
    assert "VIRTUAL_ENV" not in uv_env and uv_env["PYTHONPATH"] == "/x"


def test_missing_deps_checks_presence_versions_and_markers():
    interp = Interpreter(
        "3.11.7",
        markers={"python_version": "3.11", "sys_platform": "linux"},
        dists={"numpy": "1.26.0", "pandas": None, "torch": "2.5.1"},
    )
    cell = Cell(
        id="a",
        source="",
        line=1,
        deps=["numpy>=2", "pandas", "torch>=2.4", "attnbench", "pywin32; sys_platform == 'win32'"],
    )
    assert missing_deps(cell, interp) == ["numpy>=2 (found 1.26.0)", "pandas"]
