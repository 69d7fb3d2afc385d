"""End-to-end training steps of the CS336 model, timed per phase: forward (with the loss), backward,
optimizer step (AdamW, then zero_grad).

Every step is timed, warm-up steps included, so a report can show the statistics after 0, 1 or 5 warm-up
steps from the same run. On CUDA each phase lies between two CUDA events recorded on the stream (one sync
per step, after the optimizer); on a CPU, perf_counter. Peak memory per phase is the allocator's peak
during that phase (reset at its start), parameters, gradients and optimizer state included. An
out-of-memory anywhere (building the model, a phase of any step) makes the row `oom`, names the phase,
frees everything and lets the run go on.

A bench.clocks sampler reads the SM clock and power while the steps run: each step records the
median of the readings taken during it and one right after it (bench.clock_windows; `sm_clock_mhz`,
`power_w`, one entry a step; None without a source), so the report states the clock the measured
steps ran at.

A row is a plain dict (JSON): the report (report/systems.py) computes means, std, tokens/s and MFU.
"""

from __future__ import annotations

import contextlib
import time
import traceback

import torch

from attnbench.bench import clock_windows, clocks
from attnbench.bench.timing import is_oom, release_memory
from attnbench.models.transformer import SIZES as NAMED_SIZES
from attnbench.models.transformer import VOCAB_SIZE, ModelSize, build, flops_per_step, parameter_count

PHASES = ("forward", "backward", "optimizer")
PRECISIONS = ("fp32", "bf16")


def model_size(name: str, custom: dict | None = None) -> ModelSize:
    """A named CS336 size, or one of the profile's own (`custom_sizes`)."""
    if custom and name in custom:
        return ModelSize(**custom[name])
    if name not in NAMED_SIZES:
        raise ValueError(f"unknown model size {name!r}; choose from {[*NAMED_SIZES, *(custom or {})]}")
    return NAMED_SIZES[name]


def training_setup(size: ModelSize, context: int, batch: int, *, device: torch.device, attention: str = "eager",
                   seed: int = 0):  # fmt: skip
    """(model, optimizer, inputs, targets) of one training run: the one setup every CS336 measurement
    (steps, profiler breakdown, memory timeline) uses. Weights and tokens both come from `seed`, without
    touching the global RNG: the weights under a forked RNG, the tokens from their own generator."""
    devices = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        model = build(size, context, attention=attention, device=device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
    gen = torch.Generator(device=device).manual_seed(seed)
    data = torch.randint(0, VOCAB_SIZE, (batch, context + 1), generator=gen, device=device)
    return model, optimizer, data[:, :-1], data[:, 1:]


def autocast_for(precision: str, device: torch.device):
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    if precision == "bf16":
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


class PhaseClock:
    """Marks the start and end of each phase of one step (`mark()` twice per phase, so bookkeeping
    between phases is in no phase); `times_ms()` after the step's synchronisation."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.device = device
        self.marks: list = []

    def mark(self) -> None:
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self.marks.append(event)
        else:
            self.marks.append(time.perf_counter())

    def times_ms(self) -> list[float]:
        starts, ends = self.marks[0::2], self.marks[1::2]
        if self.cuda:
            torch.cuda.synchronize(self.device)
            return [a.elapsed_time(b) for a, b in zip(starts, ends)]
        return [(b - a) * 1e3 for a, b in zip(starts, ends)]


def _peak(device: torch.device) -> int | None:
    return torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None


def _reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def phased_step(model, optimizer, inputs, targets, precision: str, device: torch.device, phase) -> None:
    """One training step: forward (under autocast_for), backward, optimizer, each inside the context
    manager `phase(name)` (train_step's clock, or the profiler's record_function)."""
    with phase("forward"), autocast_for(precision, device):
        logits = model(inputs)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
    with phase("backward"):
        loss.backward()
    with phase("optimizer"):
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)


def train_step(
    model, optimizer, inputs, targets, precision: str, device: torch.device, where: list[str], on_phase=None
):
    """One step; returns ([forward, backward, optimizer] ms, [peak bytes per phase]). `where[0]` names
    the phase running (so an out-of-memory can say where it happened); `on_phase(name)`, if given, is
    called as each phase starts (the memory timeline marks them)."""
    clock, peaks = PhaseClock(device), []
    on_phase = on_phase or (lambda _: None)

    @contextlib.contextmanager
    def phase(name: str):
        where[0] = name
        on_phase(name)
        _reset_peak(device)
        clock.mark()
        yield
        clock.mark()
        peaks.append(_peak(device))

    phased_step(model, optimizer, inputs, targets, precision, device, phase)
    return clock.times_ms(), peaks


def profile_model(
    size_name: str,
    context: int,
    precision: str,
    *,
    steps: int,
    batch: int,
    device: torch.device,
    attention: str = "eager",
    custom_sizes: dict | None = None,
    seed: int = 0,
) -> dict:
    """Build the model, run `steps` training steps, return the row (never raises but KeyboardInterrupt)."""
    size = model_size(size_name, custom_sizes)
    row = {
        "size": size_name,
        **{f"model_{k}": v for k, v in vars(size).items()},
        "context": context,
        "batch": batch,
        "precision": precision,
        "attention": attention,
        "params": parameter_count(size)["total"],
        "flops": flops_per_step(size, batch, context),
        "status": "ok",
        "reason": "",
        "timer": "cuda_event" if device.type == "cuda" else "perf_counter",
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "times_ms": {phase: [] for phase in PHASES},
        "peak_mem_bytes": dict.fromkeys(PHASES),
        "sm_clock_mhz": [],
        "power_w": [],
    }
    where = ["building the model"]
    model = optimizer = None
    source = clock_windows.device_source(device)[0]
    row["clock_source"] = getattr(source, "name", None)
    try:
        model, optimizer, inputs, targets = training_setup(
            size, context, batch, device=device, attention=attention, seed=seed
        )
        with clocks.ClockSampler(source) as sampler:
            for step in range(steps):
                clock = clock_windows.ClockWindows(sampler)
                with clock.window():  # train_step synchronises at its end
                    times, peaks = train_step(model, optimizer, inputs, targets, precision, device, where)
                during = clock.summary()
                row["sm_clock_mhz"].append(during["sm_clock_mhz"])
                row["power_w"].append(during["power_w"])
                for phase, ms, peak in zip(PHASES, times, peaks):
                    row["times_ms"][phase].append(ms)
                    if peak is not None:
                        row["peak_mem_bytes"][phase] = max(peak, row["peak_mem_bytes"][phase] or 0)
                where[0] = f"after step {step}"
    except Exception as exc:  # noqa: BLE001 - every failure is a row; the run goes on
        steps_done = len(row["times_ms"]["optimizer"])
        row["status"] = "oom" if is_oom(exc) else "error"
        first = (str(exc).strip().splitlines() or [""])[0]
        row["reason"] = f"{type(exc).__name__} in {where[0]} (step {steps_done}): {first[:300]}"
        if row["status"] == "error":
            row["traceback"] = traceback.format_exc(limit=6)
    finally:
        del model, optimizer
        release_memory(device)
    return row


def _progress_line(row: dict) -> str:
    if row["status"] != "ok":
        return f"[steps] {row['size']:<9} ctx {row['context']:<5} {row['precision']} {row['attention']:<6} {row['status']}: {row['reason']}"
    step = [sum(parts) for parts in zip(*(row["times_ms"][p] for p in PHASES))]
    return (f"[steps] {row['size']:<9} ctx {row['context']:<5} {row['precision']} {row['attention']:<6} ok   "
            f"first step {step[0]:9.2f} ms, last {step[-1]:9.2f} ms")  # fmt: skip


def _keep_peak(row: dict, config: dict, precision: str) -> None:
    """The gpu cell's measured matmul peak of `precision` and the SM clock it ran at, kept in the row: the
    report scales the peak to the clock the steps ran at (bench.flops.MeasuredPeak), so MFU compares two
    numbers at one clock (a GEMM at its power limit runs slower than a lighter load may)."""
    row["peak_tflops"] = (config.get("peak_tflops") or {}).get(precision)
    row["peak_sm_clock_mhz"] = (config.get("peak_sm_clock_mhz") or {}).get(precision)


def run_grid(config: dict, precision: str, device: torch.device, progress=print) -> list[dict]:
    """Every size x context of the profile's `steps` at one precision (the measured matmul peak of that
    precision and its clock are kept in each row, for MFU)."""
    spec = config["steps"]
    n_steps = max(spec["warmups"]) + spec["measured"]
    rows = []
    for size in spec["sizes"]:
        for context in spec["contexts"]:
            row = profile_model(size, context, precision, steps=n_steps, batch=spec["batch"], device=device,
                                attention=spec["attention"], custom_sizes=config["custom_sizes"])  # fmt: skip
            _keep_peak(row, config, precision)
            rows.append(row)
            if progress:
                progress(_progress_line(row))
    return rows


def run_attention_variants(config: dict, device: torch.device, progress=print) -> list[dict]:
    """The profile's sizes at one context and precision with each attention kernel (eager, sdpa, triton)."""
    spec, steps_spec = config["attention_variants"], config["steps"]
    n_steps = spec["warmup"] + spec["measured"]
    rows = []
    for size in spec["sizes"]:
        for kernel in spec["kernels"]:
            row = profile_model(size, spec["context"], spec["precision"], steps=n_steps, batch=steps_spec["batch"],
                                device=device, attention=kernel, custom_sizes=config["custom_sizes"])  # fmt: skip
            _keep_peak(row, config, spec["precision"])
            rows.append(row)
            if progress:
                progress(_progress_line(row))
    return rows
