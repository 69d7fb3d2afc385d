"""Where a training step's GPU time goes, from torch.profiler (nsys does not run on our GPU machine).

Each profiled step is split into three ranges (record_function "phase:forward", "phase:backward",
"phase:optimizer"). Module hooks add ranges for every attention and MLP block, in the forward (forward
pre-hook / hook) and in the backward (full backward pre-hook / hook, which run on the autograd thread
around that module's gradient computation). Every kernel is attributed through the CPU operator that
launched it: to the phase whose range contains the launch, and to the innermost attention or MLP range
that does. Kernels are then classed by name: matmul (cuBLAS/CUTLASS GEMMs), softmax, other.

Attribution by launch time is exact for the forward; in the backward the autograd engine may interleave
a residual branch's few operators between a block's hooks, a small error stated with the result.
On a CPU run the "kernels" are the CPU operators themselves (self CPU time of each): the same tables,
not a GPU measurement.

The profiled steps follow a few unprofiled ones (the write-up's design: a profile, not a timing), and a
bench.clocks sampler reads the SM clock and power while they run, as steps.py does for the timed steps:
the summary keeps the medians over the profiled steps (`sm_clock_mhz`, `power_w`, `clock_source`;
None on a CPU), so the report says at what clock the kernel times were taken.
"""

from __future__ import annotations

import bisect
import re
from collections import defaultdict

import torch
from torch.autograd.profiler import record_function
from torch.profiler import ProfilerActivity, profile

from attnbench.bench import clock_windows, clocks, timing
from attnbench.bench.timing import release_memory
from attnbench.models.transformer import CausalSelfAttention, SwiGLU
from attnbench.studies.cs336_systems.steps import PHASES, model_size, train_step, training_setup

MATMUL = re.compile(r"gemm|nvjet|xmma|cutlass|wgmma|matmul|aten::mm|aten::bmm|aten::addmm", re.IGNORECASE)
SOFTMAX = re.compile(r"softmax", re.IGNORECASE)
BLOCKS = {CausalSelfAttention: "attention", SwiGLU: "mlp"}


def kernel_class(name: str) -> str:
    if SOFTMAX.search(name):
        return "softmax"
    if MATMUL.search(name):
        return "matmul"
    return "other"


def _hook_ranges(model) -> list:
    """record_function ranges around every attention and MLP block, forward and backward."""
    handles = []
    for module in model.modules():
        block = BLOCKS.get(type(module))
        if block is None:
            continue
        open_fwd: list = []  # this module's open ranges (a stack per direction)
        open_bwd: list = []
        handles += [
            module.register_forward_pre_hook(_enter(open_fwd, block)),
            module.register_forward_hook(_leave(open_fwd)),
            module.register_full_backward_pre_hook(_enter(open_bwd, block)),
            module.register_full_backward_hook(_leave(open_bwd)),
        ]
    return handles


def _enter(stack: list, name: str):
    def hook(*_):
        r = record_function(f"block:{name}")
        r.__enter__()
        stack.append(r)

    return hook


def _leave(stack: list):
    def hook(*_):
        if stack:
            stack.pop().__exit__(None, None, None)

    return hook


def _ranges(events, prefix: str) -> list[tuple[float, float, str]]:
    """The CPU-side ranges named prefix...: the profiler also shows each annotation on the GPU timeline,
    later than the launches it contains, which must not be used to attribute them."""
    from torch.autograd import DeviceType

    found = [
        (e.time_range.start, e.time_range.end, e.name.removeprefix(prefix))
        for e in events
        if e.name.startswith(prefix) and e.device_type == DeviceType.CPU
    ]
    return sorted(found)


def _innermost(ranges: list[tuple[float, float, str]], starts: list[float], t: float) -> str | None:
    """Name of the range containing t. Ranges of one kind follow each other without overlapping (blocks
    run one after another, forward and backward alike), so only the last one starting before t can."""
    i = bisect.bisect_right(starts, t)
    if i and ranges[i - 1][0] <= t <= ranges[i - 1][1]:
        return ranges[i - 1][2]
    return None


def attribute(events, device_kernels: bool) -> list[dict]:
    """One record per kernel (or, on a CPU run, per operator): name, µs, phase, block, class."""
    phases, blocks = _ranges(events, "phase:"), _ranges(events, "block:")
    phase_starts, block_starts = [r[0] for r in phases], [r[0] for r in blocks]
    records = []
    for event in events:
        if event.name.startswith(("phase:", "block:", "ProfilerStep")):
            continue
        t = event.time_range.start
        phase = _innermost(phases, phase_starts, t)
        if phase is None:
            continue
        block = _innermost(blocks, block_starts, t) or "rest"
        if device_kernels:
            items = [(k.name, k.duration) for k in event.kernels]
        else:  # CPU: each operator's self time (its children's time is theirs: nothing is counted twice)
            items = [(event.name, event.self_cpu_time_total)]
        records += [
            {"name": n, "us": float(us), "phase": phase, "block": block, "class": kernel_class(n)}
            for n, us in items
        ]
    return records


def summarise(records: list[dict], steps: int, top: int = 12) -> dict:
    """Per phase: total µs per step, the top kernels, and µs per (block, class)."""
    out = {}
    for phase in PHASES:
        mine = [r for r in records if r["phase"] == phase]
        total = sum(r["us"] for r in mine)
        by_name: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
        by_block: dict[str, float] = defaultdict(float)
        for r in mine:
            by_name[r["name"]][0] += r["us"]
            by_name[r["name"]][1] += 1
            by_block[f"{r['block']}/{r['class']}"] += r["us"]
        ranked = sorted(by_name.items(), key=lambda kv: -kv[1][0])[:top]
        out[phase] = {
            "us_per_step": total / steps,
            "top": [
                {
                    "kernel": n,
                    "us_per_step": us / steps,
                    "calls_per_step": c / steps,
                    "share": us / total if total else 0.0,
                }
                for n, (us, c) in ranked
            ],
            "blocks_us_per_step": {k: v / steps for k, v in sorted(by_block.items())},
        }
    return out


def profile_breakdown(size_name: str, context: int, precision: str, *, batch: int, warmup: int, steps: int,
                      device: torch.device, custom_sizes: dict | None = None, trace_path: str | None = None) -> dict:  # fmt: skip
    """Profile `steps` training steps after `warmup` unprofiled ones; the summary with the SM clock they
    ran at (and optionally a Chrome trace of the profiled steps)."""
    size = model_size(size_name, custom_sizes)
    model, optimizer, inputs, targets = training_setup(size, context, batch, device=device)
    where = [""]
    for _ in range(warmup):
        train_step(model, optimizer, inputs, targets, precision, device, where)
    cuda = device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    handles = _hook_ranges(model)
    source = clock_windows.device_source(device)[0]
    try:
        with clocks.ClockSampler(source) as sampler, profile(activities=activities) as prof:
            clock = clock_windows.ClockWindows(sampler)
            with clock.window():  # the profiled steps alone: the profiler's start-up is no step
                for _ in range(steps):
                    _profiled_step(model, optimizer, inputs, targets, precision, device)
                timing.synchronize(device)
            during = clock.summary()
    finally:
        for handle in handles:
            handle.remove()
    if trace_path:
        prof.export_chrome_trace(trace_path)
    records = attribute(prof.events(), device_kernels=cuda)
    summary = summarise(records, steps)
    del model, optimizer
    release_memory(device)
    return {"size": size_name, "context": context, "precision": precision, "batch": batch, "steps": steps,
            "warmup": warmup, "timer": "cuda_kernels" if cuda else "cpu_operators",
            "sm_clock_mhz": during["sm_clock_mhz"], "power_w": during["power_w"],
            "clock_samples": during["clock_samples"], "clock_source": getattr(source, "name", None),
            "phases": summary}  # fmt: skip


def _profiled_step(model, optimizer, inputs, targets, precision: str, device: torch.device) -> None:
    from attnbench.studies.cs336_systems.steps import phased_step

    phased_step(
        model, optimizer, inputs, targets, precision, device, lambda name: record_function(f"phase:{name}")
    )
    if device.type == "cuda":
        torch.cuda.synchronize(device)
