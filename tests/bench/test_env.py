"""Environment collection with and without torch and nvidia-smi (a fake one on PATH)."""

import json
import os
import re
import socket
import stat
import sys
import time

import pytest

from attnbench.bench import env

FAKE_SMI = """#!/bin/sh
case "$*" in
  *-lms*) echo "1500, 690.10, 61"; echo "1485, 691.00, 62"; sleep 5 ;;
  *clocks.sm*) echo "1980, 1980, 41, 120.50"; echo "1755, 1980, 45, [N/A]" ;;
  *enforced.power.limit*) echo "700.00, 1980"; echo "700.00, 1980" ;;
  *driver_version*) echo "570.86.15, NVIDIA H200" ;;
  *name*) echo "NVIDIA H200" ;;
  *) echo "fake nvidia-smi table" ;;
esac
"""


@pytest.fixture
def fake_smi(tmp_path, monkeypatch):
    script = tmp_path / "nvidia-smi"
    script.write_text(FAKE_SMI)
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    return script


@pytest.fixture
def no_smi(monkeypatch):
    monkeypatch.setattr(env.shutil, "which", lambda name: None)


@pytest.mark.timeout(60)
def test_nvidia_smi_text_and_clocks(fake_smi):
    text, reason = env.nvidia_smi()
    assert text.strip() == "fake nvidia-smi table" and reason is None
    snap = env.clock_snapshot()
    assert snap["sm_mhz"] == [1980.0, 1755.0] and snap["max_sm_mhz"] == [1980.0, 1980.0]
    assert snap["power_w"] == [120.5, None]  # "[N/A]" becomes None
    info = env.collect_env()
    assert info["driver"] == "570.86.15" and info["sm_clock_mhz"] == 1980.0


@pytest.mark.timeout(60)
def test_failing_nvidia_smi_gives_a_reason(tmp_path, monkeypatch):
    script = tmp_path / "nvidia-smi"
    script.write_text(
        "#!/bin/sh\necho 'NVIDIA-SMI has failed because it could not communicate' >&2\nexit 9\n"
    )
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    text, reason = env.nvidia_smi()
    assert text is None and "exited 9" in reason and "could not communicate" in reason


def test_without_nvidia_smi(no_smi):
    assert env.nvidia_smi() == (None, "nvidia-smi not found on PATH")
    info = env.collect_env()
    assert info["driver"] is None and "not found" in info["reasons"]["driver"]
    assert info["sm_clock_mhz"] is None and info["reasons"]["sm_clock_mhz"]
    assert info["python"] == sys.version.split()[0] and info["cpu"]
    json.dumps(info)  # serialisable as the environment block
    assert env.clock_report(env.clock_snapshot(), env.clock_snapshot()).startswith("SM clock unknown")


def test_without_torch(no_smi, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # makes `import torch` raise ImportError
    info = env.collect_env()
    for key in ("torch", "cuda", "gpu", "sm_count"):
        assert info[key] is None and "torch not importable" in info["reasons"][key]
    assert info["machine_id"].startswith("cpu-")


def test_torch_fields_on_this_machine(no_smi):
    import torch

    info = env.collect_env()
    assert info["torch"] == torch.__version__
    if not torch.cuda.is_available():
        assert info["gpu"] is None and "is_available() is False" in info["reasons"]["gpu"]
    else:
        assert info["sm_count"] > 0 and info["l2_bytes"] > 0


def test_provider_versions_never_raise(no_smi):
    class Good:
        name = "good"

        def unavailable(self):
            return None

        def version(self):
            return "1.2.3"

    class Broken:
        name = "broken"

        def unavailable(self):
            return "not installed"

        def version(self):
            raise RuntimeError("no version")

    info = env.collect_env([Good(), Broken()])
    assert info["providers"]["good"] == {"unavailable": None, "version": "1.2.3"}
    assert info["providers"]["broken"]["unavailable"] == "not installed"
    assert "RuntimeError" in info["providers"]["broken"]["version"]


def test_machine_id_is_short_stable_and_hides_the_host():
    a = env.machine_id("NVIDIA H200")
    assert re.fullmatch(r"h200-[0-9a-f]{8}", a) and a == env.machine_id("NVIDIA H200")
    assert socket.gethostname() not in a
    assert env.machine_id("NVIDIA H100 80GB HBM3").startswith("h100-80gb-hbm3-")


def test_clock_report():
    before = {"sm_mhz": [1980.0], "max_sm_mhz": [1980.0], "temperature_c": [40.0]}
    after = {"sm_mhz": [1755.0], "max_sm_mhz": [1980.0], "temperature_c": [61.0]}
    assert (
        env.clock_report(before, after) == "SM clock 1980 -> 1755 MHz (max 1980), temperature 40.0 -> 61.0 C"
    )


@pytest.mark.timeout(60)
def test_power_limit_and_max_clock_are_run_facts(fake_smi, monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # no pynvml: nvidia-smi gives them, and says so
    limits = env.gpu_limits()
    assert limits == {
        "power_limit_w": 700.0,
        "max_sm_clock_mhz": 1980.0,
        "source": "nvidia-smi",
        "reason": None,
    }
    info = env.collect_env()
    assert info["power_limit_w"] == 700.0 and info["limits_source"] == "nvidia-smi"


def test_without_any_source_the_limits_say_why(no_smi, monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    limits = env.gpu_limits()
    assert limits["power_limit_w"] is None and "nvml" in limits["reason"] and "nvidia-smi" in limits["reason"]


@pytest.mark.timeout(60)
def test_streaming_nvidia_smi_source_gives_the_clock_while_timing(fake_smi):
    from attnbench.bench.clocks import ClockReading, SmiStreamSource

    source = SmiStreamSource(0)
    try:
        assert source.name == "nvidia-smi"
        deadline = time.monotonic() + 5
        while source.read() != ClockReading(1485.0, 691.0, 62.0) and time.monotonic() < deadline:
            pass
        assert source.read() == ClockReading(1485.0, 691.0, 62.0)  # the newest line
    finally:
        source.close()
