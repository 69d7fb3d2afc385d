"""What machine and interpreter a run is on: GPUs (nvidia-smi), the label slug, an interpreter probe.

Everything here runs once per engine invocation and must stay fast (a fully cached run of every
notebook has a 2 s budget), so GPUs come from one `nvidia-smi` query and interpreters are probed in
one subprocess that reads package metadata without importing torch.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

NVIDIA_SMI_TIMEOUT_S = 20


@dataclass(frozen=True)
class Gpus:
    """The GPUs this process may use (CUDA_VISIBLE_DEVICES applied)."""

    names: tuple[str, ...] = ()
    driver: str | None = None

    @property
    def count(self) -> int:
        return len(self.names)

    @property
    def name(self) -> str | None:
        """The model name ("NVIDIA H200"); mixed models are joined with ' + '."""
        return " + ".join(dict.fromkeys(self.names)) or None


@dataclass(frozen=True)
class Machine:
    """The machine part of run.json and of the cache key."""

    gpu: str | None
    gpu_count: int
    driver: str | None
    platform: str
    cpu: str
    fingerprint: str  # sha256 over GPU names, driver, platform and CPU model (not the host name)


def parse_nvidia_smi(output: str, visible: str | None) -> Gpus:
    """Parse `nvidia-smi --query-gpu=name,driver_version --format=csv,noheader` output.

    `visible` is CUDA_VISIBLE_DEVICES: None = all GPUs; "" or "-1" = none; a list of indices selects
    those; UUIDs or MIG ids (not resolvable from this query) keep their count.
    """
    rows = [[part.strip() for part in line.split(",")] for line in output.splitlines() if line.strip()]
    names = [row[0] for row in rows]
    driver = rows[0][1] if rows and len(rows[0]) > 1 else None
    if visible is not None:
        wanted = [item.strip() for item in visible.split(",") if item.strip()]
        chosen: list[str] = []
        for item in wanted:
            if item.lstrip("-").isdigit():
                index = int(item)
                if index < 0 or index >= len(names):
                    break  # CUDA stops at the first invalid index
                chosen.append(names[index])
            else:  # GPU-/MIG- uuid: assume it names one of the listed devices
                chosen.append(names[0] if names else item)
        names = chosen
    return Gpus(tuple(names), driver if names else None)


@cache
def detect_gpus() -> Gpus:
    """NVIDIA GPUs visible to this process; none when nvidia-smi is absent or fails."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return Gpus()
    try:
        done = subprocess.run(
            [exe, "--query-gpu=name,driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=NVIDIA_SMI_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return Gpus()
    if done.returncode != 0:
        return Gpus()
    return parse_nvidia_smi(done.stdout, os.environ.get("CUDA_VISIBLE_DEVICES"))


def slug(text: str) -> str:
    """'NVIDIA H200' -> 'nvidia-h200'; anything but [a-z0-9.] becomes one '-'."""
    return re.sub(r"[^a-z0-9.]+", "-", text.lower()).strip("-.") or "unknown"


def label_for(gpus: Gpus) -> str:
    """The default machine label: GPU model slug, '-x<N>' for N > 1 GPUs, 'cpu' without a GPU."""
    if gpus.count == 0:
        return "cpu"
    base = slug(gpus.name or "gpu")
    return f"{base}-x{gpus.count}" if gpus.count > 1 else base


def label_of(machine: Machine) -> str:
    """The default label of the machine a run is on (label_for of its GPUs)."""
    return label_for(Gpus((machine.gpu,) * machine.gpu_count if machine.gpu else ()))


def label_gpus(label: str) -> int:
    """The GPU count a label names, read back as label_for and session.override_label write it:
    `nvidia-h200` 1, `nvidia-h200-x2` 2, `cpu` 0; a `+key-value` suffix (a -p run) does not change it. A
    label given with --label that follows neither counts as one GPU."""
    base = label.partition("+")[0]
    if base == "cpu":
        return 0
    found = re.search(r"-x(\d+)$", base)
    return int(found.group(1)) if found else 1


def too_few_gpus(cell_gpus: int | None, have: int, label: str) -> str:
    """Why a cell that runs `cell_gpus` processes, one per GPU, cannot be measured on label `label`'s
    machine with `have` GPUs, or "" when it can. A CPU machine (0 GPUs) runs every cell: multi-rank cells
    run there on gloo. Where the label follows label_for's form for `have` GPUs, the reason names the
    label such a run lands under (`-x<N>`, a `+key-value` suffix kept)."""
    need = cell_gpus or 1
    if have == 0 or need <= have:
        return ""
    said = f"runs {need} processes, one per GPU; label {label}'s machine has {have}"
    if label_gpus(label) != have:  # a label of its own naming: no other label can be inferred
        return f"{said}: run it on a machine with {need} GPUs"
    base, plus, params = label.partition("+")
    stem = re.sub(r"-x\d+$", "", base)
    return f"{said}: measured under label {stem}-x{need}{plus}{params}"


def label_overrides(label: str) -> str:
    """The `-p` suffix of a label made by session.override_label (`cpu+profile-smoke` -> `profile-smoke`)."""
    return label.partition("+")[2]


def detect_label() -> str:
    return label_for(detect_gpus())


@cache
def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


@cache
def detect_machine() -> Machine:
    gpus = detect_gpus()
    plat = f"{platform.system()}-{platform.machine()}"
    identity = {"gpus": list(gpus.names), "driver": gpus.driver, "platform": plat, "cpu": cpu_model()}
    fingerprint = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]
    return Machine(gpus.name, gpus.count, gpus.driver, plat, cpu_model(), fingerprint)


# --- interpreter probe ----------------------------------------------------------------------------

_PROBE_MAIN = "\nimport json, sys\nprint(json.dumps(probe(json.loads(sys.argv[1]))))\n"


@dataclass(frozen=True)
class Interpreter:
    """The result of probing one interpreter."""

    python: str
    torch: str | None = None
    cuda: str | None = None
    markers: dict = field(default_factory=dict, compare=False)
    dists: dict = field(default_factory=dict, compare=False)  # dist name -> version or None


class ProbeError(RuntimeError):
    pass


def probe_interpreter(python: str, dists=(), env: dict[str, str] | None = None) -> Interpreter:
    """Run the probe in `python` (one subprocess): versions of python, torch (+ its CUDA) and `dists`.

    `env` should be the environment cells get (PYTHONPATH included), so that what the probe finds is
    what a cell can import. The interpreter running attnbench itself (the default of --env python)
    is probed in this process: its packages are the cells' (attnbench's src/ is on its path too), and
    a second interpreter start is most of a trivial cell's overhead.
    """
    names = sorted(set(dists))
    if _is_this_interpreter(python, env):
        from attnbench.notebook.run.probe import probe

        data = probe(names)
        return Interpreter(data["python"], data["torch"], data["cuda"], data["markers"], data["dists"])
    code = Path(__file__).with_name("probe.py").read_text() + _PROBE_MAIN
    try:
        done = subprocess.run(
            [python, "-c", code, json.dumps(names)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            env=env,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ProbeError(f"cannot run interpreter {python!r}: {e}") from None
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise ProbeError(f"interpreter {python!r} failed to report its versions: {tail}")
    try:  # the report is the last line; a sitecustomize may print before it
        data = json.loads(done.stdout.strip().splitlines()[-1])
        return Interpreter(data["python"], data["torch"], data["cuda"], data["markers"], data["dists"])
    except (IndexError, ValueError, KeyError, TypeError):
        shown = done.stdout.strip()[-200:] or "nothing"
        raise ProbeError(f"interpreter {python!r} did not report its versions; it printed: {shown}") from None


def _is_this_interpreter(python: str, env: dict[str, str] | None) -> bool:
    """Would `python` with `env` see what this process sees? The same executable, and every
    PYTHONPATH entry of `env` already on this process's path."""
    if os.path.abspath(python) != os.path.abspath(sys.executable):
        return False
    entries = (env or {}).get("PYTHONPATH", "").split(os.pathsep)
    here = {os.path.abspath(p or ".") for p in sys.path}
    return all(os.path.abspath(p) in here for p in entries if p)


def uv_python_version(requires_python: str) -> str:
    """The Python version `uv run --script` picks for `requires_python` (one `uv python find`)."""
    uv = shutil.which("uv")
    if uv is None:
        raise ProbeError("uv is not on PATH: install it (python3 -m pip install uv) or use --env python")
    try:
        done = subprocess.run(
            [uv, "python", "find", "--no-project", "--show-version", requires_python],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ProbeError(f"`uv python find` failed: {e}") from None
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise ProbeError(f"uv finds no Python for requires-python {requires_python!r}: {tail}")
    return done.stdout.strip()
