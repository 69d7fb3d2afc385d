"""What every study's profiles share: which profile `auto` means, the label that marks a smoke run as
not a GPU measurement, and reading the profile the gpu cell resolved (its profile.json).

A study keeps its own profiles as data ({name: settings}, each with a "device": "cuda" | "any"); this
module only picks one and reads it back. No torch is imported at module level.
"""

from __future__ import annotations

import json
from pathlib import Path

NOT_GPU = "smoke profile: not a GPU measurement"  # the label of every smoke profile
PROFILE_FILE = "profile.json"  # what a notebook's gpu cell writes: the resolved profile


def resolve_name(profile: str, profiles: dict[str, dict], cuda: bool) -> str:
    """The profile `profile` names: auto is default with CUDA, smoke without. A name not in `profiles`,
    or a GPU profile on a machine without CUDA, is a ValueError saying what to use instead."""
    name = profile if profile != "auto" else ("default" if cuda else "smoke")
    if name not in profiles:
        raise ValueError(f"params.profile must be auto, {', '.join(profiles)}; got {profile!r}")
    if profiles[name].get("device") == "cuda" and not cuda:
        raise ValueError(f"profile {name!r} needs CUDA; this machine has no CUDA device (use profile=smoke)")
    return name


def write_profile(config: dict, env_info: dict) -> None:
    """The gpu cell's two files: profile.json (the resolved profile every later cell reads) and env.json
    (the machine and providers it was resolved on)."""
    with open("env.json", "w") as f:
        json.dump(env_info, f, indent=2, default=str)
    with open(PROFILE_FILE, "w") as f:
        json.dump(config, f, indent=2)


def read_profile(folder: Path | str) -> dict:
    """The resolved profile the gpu cell wrote into `folder`; a missing or unreadable file is an error
    naming it."""
    path = Path(folder) / PROFILE_FILE
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: no resolved profile; run the notebook's gpu cell first") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}:{exc.lineno}: not JSON: {exc.msg}") from exc


def gpu_profile(*, same_device: bool = True) -> dict:
    """The profile the notebook's gpu cell resolved, for a measuring cell.

    same_device: refuse (SystemExit) a profile resolved for another kind of machine, so a GPU profile
    never runs on a CPU nor a smoke profile's numbers pass for a GPU's.
    """
    import attnbench

    config = read_profile(attnbench.inputs("gpu"))
    if same_device:
        import torch

        require_same_device(config, torch.cuda.is_available())
    return config


def measured_peak(config: dict, math: str):
    """The gpu cell's measured matmul peak for `math` ("bf16", "fp32"), with the SM clock it ran at
    (`peak_sm_clock_mhz`), as bench.flops.MeasuredPeak; None where none was measured (a CPU run)."""
    from attnbench.bench import flops

    clocks = config.get("peak_sm_clock_mhz") or {}
    return flops.restore_peak((config.get("peak_tflops") or {}).get(math), clocks.get(math))


def require_same_device(config: dict, cuda: bool) -> None:
    """SystemExit when `config` was resolved for another kind of machine than this one (`cuda`): a GPU
    profile must not run on a CPU, nor a smoke profile's numbers pass for a GPU's."""
    if cuda != (config.get("device") == "cuda"):
        raise SystemExit(
            f"{PROFILE_FILE} was resolved for {config.get('device')}; rerun the gpu cell on this machine"
        )
