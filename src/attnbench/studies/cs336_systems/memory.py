"""Memory over time of training steps, from the CUDA caching allocator's history.

`record_largest` tries the sizes largest first and keeps the first one whose steps all fit: it records
`torch.cuda.memory._record_memory_history` during the steps, saves the snapshot (a pickle that
https://pytorch.org/memory_viz opens) and returns a compact timeline: allocated bytes after every
allocation or free, with the phase it happened in. The timeline is what the report plots; the pickle is
kept as an artifact for a closer look. Stack traces are off by default (with them a 2.7B-parameter step
makes a snapshot of tens of MB; `with_stacks=True` records Python frames). Needs CUDA.
"""

from __future__ import annotations

import pickle

import torch

from attnbench.bench.timing import is_oom, release_memory
from attnbench.studies.cs336_systems.steps import PHASES, model_size, train_step, training_setup

MAX_ENTRIES = 200_000  # allocator events kept (a 2.7B-parameter step makes ~20k)
MAX_POINTS = 20_000  # timeline points kept for the plot (evenly thinned beyond that)


def timeline(
    snapshot: dict, phase_marks: list[tuple[int, str]], device: int = 0, baseline_bytes: int = 0
) -> dict:
    """Allocated bytes after each alloc/free event of `device`, and each event's phase.

    phase_marks: (time_us, phase) when each phase started, from the same clock as the trace
    (`time_us` of the allocator's events). Memory allocated before recording started (the model's
    parameters when built earlier) is not in the trace: `baseline_bytes` adds it back.
    """
    traces = snapshot.get("device_traces") or []
    events = traces[device] if device < len(traces) else []
    allocated, points = baseline_bytes, []
    marks = sorted(phase_marks)
    for event in events:
        action = event.get("action")
        if action == "alloc":
            allocated += event["size"]
        elif action == "free_completed":
            allocated -= event["size"]
        else:
            continue
        t = event.get("time_us", 0)
        phase = next((name for start, name in reversed(marks) if start <= t), "setup")
        points.append((t, allocated, phase))
    if len(points) > MAX_POINTS:
        stride = len(points) / MAX_POINTS
        points = [points[int(i * stride)] for i in range(MAX_POINTS)] + [points[-1]]
    start = points[0][0] if points else 0
    # the phases are matched by time: if the trace's clock and ours do not overlap, say so, not guess
    clocks_agree = not points or not marks or (marks[0][0] - 60e6 <= start <= marks[-1][0] + 60e6)
    return {
        "t_ms": [(t - start) / 1e3 for t, _, _ in points],
        "allocated_bytes": [a for _, a, _ in points],
        "phase": [p if clocks_agree else "unknown" for _, _, p in points],
        "phase_clock": "agrees"
        if clocks_agree
        else "the allocator's clock did not match wall time: phases unknown",
    }


def _now_us() -> int:
    import time

    return int(time.time() * 1e6)  # the allocator stamps its trace with wall-clock microseconds


def record_largest(sizes: list[str], context: int, precision: str, *, batch: int, steps: int,
                   device: torch.device, snapshot_path: str, custom_sizes: dict | None = None,
                   with_stacks: bool = False) -> dict:  # fmt: skip
    """Record `steps` training steps of the first size in `sizes` that fits; the tried sizes and the timeline."""
    if device.type != "cuda":
        return {
            "status": "skipped",
            "reason": "needs CUDA: the allocator history exists only on a GPU",
            "tried": [],
        }
    tried = []
    for name in sizes:
        result = _record(
            name, context, precision, batch, steps, device, snapshot_path, custom_sizes, with_stacks
        )
        tried.append({"size": name, "status": result["status"], "reason": result.get("reason", "")})
        if result["status"] == "ok":
            return {**result, "tried": tried}
    return {"status": "oom", "reason": "no size fits", "tried": tried}


def _record(name, context, precision, batch, steps, device, snapshot_path, custom_sizes, with_stacks) -> dict:
    where, model, optimizer, marks = [""], None, None, []
    release_memory(device)
    torch.cuda.reset_peak_memory_stats(device)
    base = torch.cuda.memory_allocated(device)
    if with_stacks:
        torch.cuda.memory._record_memory_history(max_entries=MAX_ENTRIES, stacks="python")
    else:
        torch.cuda.memory._record_memory_history(max_entries=MAX_ENTRIES, context=None)
    try:
        marks.append((_now_us(), "build"))
        model, optimizer, inputs, targets = training_setup(model_size(name, custom_sizes), context, batch,
                                                           device=device)  # fmt: skip
        for step in range(steps):
            torch.cuda.synchronize(device)

            def mark(phase, step=step):
                marks.append((_now_us(), f"step {step} {phase}"))

            train_step(model, optimizer, inputs, targets, precision, device, where, on_phase=mark)
        torch.cuda.synchronize(device)
        snapshot = torch.cuda.memory._snapshot()
        with open(snapshot_path, "wb") as f:
            pickle.dump(snapshot, f)
        peak = torch.cuda.max_memory_allocated(device) - base
        return {"status": "ok", "size": name, "context": context, "precision": precision, "batch": batch,
                "steps": steps, "peak_bytes": peak, "phases": list(PHASES), "baseline_bytes": base,
                "timeline": timeline(snapshot, marks, device.index or 0, base)}  # fmt: skip
    except Exception as exc:
        if not is_oom(exc):
            raise
        return {"status": "oom", "reason": f"out of memory in {where[0] or 'setup'}"}
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)
        del model, optimizer
        release_memory(device)
