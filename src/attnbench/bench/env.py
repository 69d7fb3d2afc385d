"""The measuring environment: GPU, driver, CUDA, library versions, clocks.

Works without torch and without nvidia-smi: a field that cannot be known is None and `reasons[field]`
says why. Nothing here raises for a missing tool.
"""

from __future__ import annotations

import datetime
import hashlib
import importlib.metadata
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterable
from typing import Any

CLOCK_FIELDS = ("clocks.sm", "clocks.max.sm", "temperature.gpu", "power.draw")
VERSION_PACKAGES = (
    "torch",
    "triton",
    "numpy",
    "flash_attn",
    "flash_attn_3",
    "xformers",
    "sageattention",
    "transformer_engine",
    "kernels",
)


def nvidia_smi(args: Iterable[str] = (), timeout: float = 20.0) -> tuple[str | None, str | None]:
    """(stdout of `nvidia-smi *args`, None) or (None, why it could not be run)."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None, "nvidia-smi not found on PATH"
    try:
        proc = subprocess.run([exe, *args], check=False, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"nvidia-smi failed: {type(exc).__name__}: {exc}"
    if proc.returncode != 0:
        first = (proc.stderr or proc.stdout).strip().splitlines()
        return None, f"nvidia-smi exited {proc.returncode}: {first[0] if first else 'no output'}"
    return proc.stdout, None


def _query(fields: Iterable[str]) -> tuple[list[dict[str, str]] | None, str | None]:
    """One dict per GPU for `nvidia-smi --query-gpu=fields --format=csv,noheader,nounits`."""
    fields = list(fields)
    text, reason = nvidia_smi([f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"])
    if text is None:
        return None, reason
    rows = []
    for line in text.strip().splitlines():
        values = [v.strip() for v in line.split(",")]
        if len(values) == len(fields):
            rows.append(dict(zip(fields, values)))
    return (rows, None) if rows else (None, f"nvidia-smi returned no rows for {fields}")


def _number(text: str | None) -> float | None:
    try:
        return float(text)
    except (TypeError, ValueError):  # "[N/A]", "[Not Supported]"
        return None


def clock_snapshot() -> dict[str, Any]:
    """SM clock (current and max, MHz), temperature (C) and power (W) per GPU, with a timestamp."""
    snap: dict[str, Any] = {"time": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")}
    rows, reason = _query(CLOCK_FIELDS)
    if rows is None:
        return {
            **snap,
            "sm_mhz": None,
            "max_sm_mhz": None,
            "temperature_c": None,
            "power_w": None,
            "reason": reason,
        }
    return {
        **snap,
        "sm_mhz": [_number(r["clocks.sm"]) for r in rows],
        "max_sm_mhz": [_number(r["clocks.max.sm"]) for r in rows],
        "temperature_c": [_number(r["temperature.gpu"]) for r in rows],
        "power_w": [_number(r["power.draw"]) for r in rows],
        "reason": None,
    }


def clock_report(before: dict[str, Any], after: dict[str, Any]) -> str:
    """One line comparing two snapshots (GPU 0), e.g. 'SM clock 1980 -> 1755 MHz (max 1980)'."""

    def first(snap, key):
        values = snap.get(key)
        return values[0] if values else None

    b, a, m = first(before, "sm_mhz"), first(after, "sm_mhz"), first(before, "max_sm_mhz")
    if b is None or a is None:
        return f"SM clock unknown ({before.get('reason') or after.get('reason') or 'no data'})"
    return (
        f"SM clock {b:.0f} -> {a:.0f} MHz (max {m if m is None else f'{m:.0f}'}), "
        f"temperature {first(before, 'temperature_c')} -> {first(after, 'temperature_c')} C"
    )


def gpu_limits(index: int = 0) -> dict[str, Any]:
    """The power limit the driver enforces (W) and the maximum SM clock (MHz) of GPU `index`, with the
    source that gave them (nvml, else nvidia-smi) or the reason neither could: a row's clock and power
    mean little without the ceiling they ran under."""
    limits: dict[str, Any] = {"power_limit_w": None, "max_sm_clock_mhz": None, "source": None, "reason": None}
    try:
        from attnbench.bench.clocks import NvmlSource

        return {**limits, **NvmlSource(index).limits(), "source": "nvml"}
    except Exception as exc:  # noqa: BLE001 - pynvml missing or failing: ask nvidia-smi instead
        nvml_problem = f"nvml: {type(exc).__name__}: {exc}"
    rows, reason = _query(("enforced.power.limit", "clocks.max.sm"))
    if rows is None or index >= len(rows):
        return {**limits, "reason": f"{nvml_problem}; nvidia-smi: {reason or 'no such GPU'}"}
    row = rows[index]
    return {
        **limits,
        "power_limit_w": _number(row["enforced.power.limit"]),
        "max_sm_clock_mhz": _number(row["clocks.max.sm"]),
        "source": "nvidia-smi",
    }


def _package_version(name: str) -> str | None:
    for candidate in (name, name.replace("_", "-")):
        try:
            return importlib.metadata.version(candidate)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _torch_info(info: dict[str, Any], reasons: dict[str, str]) -> None:
    try:
        import torch
    except Exception as exc:  # noqa: BLE001 - not installed or broken install: say so, keep going
        for key in ("torch", "cuda", "cudnn", "gpu", "gpus", "sm_count", "l2_bytes", "memory_bytes"):
            info[key] = None
            reasons[key] = f"torch not importable: {type(exc).__name__}: {exc}"
        return
    info["torch"] = torch.__version__
    info["cuda"] = torch.version.cuda
    if info["cuda"] is None:
        reasons["cuda"] = "torch built without CUDA"
    try:
        info["cudnn"] = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    except Exception as exc:  # noqa: BLE001 - a broken cuDNN is a reason, not a crash
        info["cudnn"], reasons["cudnn"] = None, f"{type(exc).__name__}: {exc}"
    if info["cudnn"] is None and "cudnn" not in reasons:
        reasons["cudnn"] = "cuDNN not available"
    if not torch.cuda.is_available():
        for key in ("gpu", "gpus", "sm_count", "l2_bytes", "memory_bytes"):
            info[key], reasons[key] = None, "torch.cuda.is_available() is False"
        return
    gpus = []
    for index in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(index)
        gpus.append(
            {
                "index": index,
                "name": p.name,
                "sm_count": p.multi_processor_count,
                "l2_bytes": getattr(p, "L2_cache_size", None),
                "memory_bytes": p.total_memory,
                "capability": f"{p.major}.{p.minor}",
            }
        )
    info["gpus"] = gpus
    info["gpu"], info["sm_count"] = gpus[0]["name"], gpus[0]["sm_count"]
    info["l2_bytes"], info["memory_bytes"] = gpus[0]["l2_bytes"], gpus[0]["memory_bytes"]


def collect_env(providers: Iterable[Any] | None = None) -> dict[str, Any]:
    """Everything a reader needs to judge a measurement; `reasons` explains every None."""
    reasons: dict[str, str] = {}
    info: dict[str, Any] = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpu": _cpu_name(),
        "cpu_count": os.cpu_count(),
    }
    _torch_info(info, reasons)
    rows, reason = _query(("driver_version", "name"))
    info["driver"] = rows[0]["driver_version"] if rows else None
    if rows is None:
        reasons["driver"] = reason
    if info.get("gpu") is None and rows:
        info["gpu"] = rows[0]["name"]  # nvidia-smi sees a GPU that torch cannot use
    clocks = clock_snapshot()
    info["sm_clock_mhz"] = clocks["sm_mhz"][0] if clocks["sm_mhz"] else None
    info["max_sm_clock_mhz"] = clocks["max_sm_mhz"][0] if clocks["max_sm_mhz"] else None
    if clocks["reason"]:
        reasons["sm_clock_mhz"] = reasons["max_sm_clock_mhz"] = clocks["reason"]
    limits = gpu_limits()
    info["power_limit_w"] = limits["power_limit_w"]
    info["max_sm_clock_mhz"] = limits["max_sm_clock_mhz"] or info["max_sm_clock_mhz"]
    info["limits_source"] = limits["source"]
    if limits["reason"]:
        reasons["power_limit_w"] = limits["reason"]
    info["packages"] = {name: _package_version(name) for name in VERSION_PACKAGES}
    info["providers"] = _provider_versions(providers) if providers is not None else None
    info["machine_id"] = machine_id(info.get("gpu"))
    info["reasons"] = reasons
    return info


def _provider_versions(providers: Iterable[Any]) -> dict[str, dict[str, str | None]]:
    """{name: {version, unavailable}}; a provider whose hooks raise is reported, not fatal."""
    out = {}
    for provider in providers:
        entry: dict[str, str | None] = {}
        for key, method in (("unavailable", "unavailable"), ("version", "version")):
            try:
                entry[key] = getattr(provider, method)() or None
            except Exception as exc:  # noqa: BLE001 - a broken provider is reported, not fatal
                entry[key] = f"{method}() raised {type(exc).__name__}: {exc}"
        out[getattr(provider, "name", repr(provider))] = entry
    return out


def slug(text: str) -> str:
    text = re.sub(r"^nvidia\s+", "", text.strip().lower())
    return re.sub(r"[^a-z0-9]+", "-", text).strip("-") or "unknown"


def _gpu_name_quick() -> str | None:
    try:
        import torch

        if torch.cuda.is_available():
            return torch.cuda.get_device_name(0)
    except Exception:  # noqa: BLE001, S110 - no torch or a broken one: ask nvidia-smi instead
        pass
    rows, _ = _query(("name",))
    return rows[0]["name"] if rows else None


def machine_id(gpu_name: str | None = None) -> str:
    """Short id: GPU slug (or 'cpu') plus a hash of host and GPU name, e.g. 'h200-3fa2c1d0'.

    The host name is hashed, never written out.
    """
    gpu_name = gpu_name if gpu_name is not None else _gpu_name_quick()
    digest = hashlib.sha256(f"{socket.gethostname()}|{gpu_name}".encode()).hexdigest()[:8]
    return f"{slug(gpu_name) if gpu_name else 'cpu'}-{digest}"
