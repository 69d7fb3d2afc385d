"""Environment: the machine the reports ran on."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from attnbench.notebook.site import headline as page
from attnbench.report.answers.common import _num, _number


def _cudnn_version(value: Any) -> str | None:
    """torch's cuDNN version number (91900) as cuDNN writes it (9.19.0)."""
    if not isinstance(value, int) or value < 1000:
        return None if value is None else str(value)
    major, rest = divmod(value, 10000) if value >= 10000 else divmod(value, 1000)
    minor, patch = divmod(rest, 100)
    return f"{major}.{minor}.{patch}"


def environment(data, noise: dict | None = None) -> page.Answer:
    """The machine the reports ran on: the GPU and what bounds its speed (SMs, memory, the clock it may
    reach and the power it may draw), then the software that decides which kernels exist."""
    answer = page.Answer(question="What machine did these reports run on?")
    env = data.documents.get("environment")
    if not isinstance(env, Mapping):
        answer.answer.append("No environment.json to read: the versions cell has not run here.")
        return answer
    reasons = env.get("reasons") if isinstance(env.get("reasons"), Mapping) else {}
    gpus = env.get("gpus") if isinstance(env.get("gpus"), list) else []
    facts = [
        # a count has no unit: its name says what is counted (not "SMs 132 SMs")
        (_num(env.get("sm_count")), "{:.0f} SMs", "sm_count", "SMs", ""),
        (_num(env.get("memory_bytes")), "{:.1f} GiB of GPU memory", "memory", "GPU memory", "GiB"),
        (
            _num(env.get("max_sm_clock_mhz")),
            "SM clock up to {:.0f} MHz",
            "max_sm_clock",
            "max SM clock",
            "MHz",
        ),
        (_num(env.get("power_limit_w")), "power limit {:.0f} W", "power_limit", "power limit", "W"),
    ]
    if env.get("gpu"):
        # each fact is of one GPU (env.json describes one), on one GPU and on several alike, so that
        # the comparison page pairs them across labels
        said, per = [], "per GPU"
        for value, form, key, name, unit in facts:
            if value is None:
                continue
            value = value / 2**30 if unit == "GiB" else value
            said.append(form.format(value))
            answer.numbers.append(_number(f"gpu|{key}", name, round(value, 1), unit, per))
        # several GPUs: the facts are of each one (env.json describes one GPU), not their sum
        count, each = (f"{len(gpus)}× ", ", each") if len(gpus) > 1 else ("", "")
        answer.answer.append(f"{count}{env['gpu']}" + (f"{each}: {', '.join(said)}." if said else "."))
    else:
        why = reasons.get("gpu") or "no CUDA device was found"
        answer.answer.append(
            f"No NVIDIA GPU ({why}): the benchmark notebooks run their CPU smoke profile here."
        )
    packages = env.get("packages") if isinstance(env.get("packages"), Mapping) else {}
    software = [("driver", env.get("driver")), ("CUDA", env.get("cuda")), ("cuDNN", _cudnn_version(env.get("cudnn"))),
                ("torch", packages.get("torch") or env.get("torch")), ("triton", packages.get("triton")),
                ("Python", env.get("python"))]  # fmt: skip
    known = [f"{name} {value}" for name, value in software if value]
    cores = f" ({env['cpu_count']} cores)" if isinstance(env.get("cpu_count"), int) else ""
    host = f"{env.get('cpu')}{cores}" if env.get("cpu") else ""
    if known or host:
        answer.answer.append(
            "; ".join(filter(None, [", ".join(known), f"host {host}" if host else ""])) + "."
        )
    return answer
