"""The scaling sweep: each series (an implementation on a backend, or a dense provider) over growing
lengths, forward and forward+backward, until it stops, with the reason it stopped as rows.

A series stops at the first point that is out of memory, fails, or whose median call exceeds
`call_budget_s`; before a point, when its time predicted from the previous ones (dense: quadratic in
the length; dilated: the growth measured between its last two points, between linear and quadratic)
exceeds twice the budget, or when its peak memory predicted from the previous point (linear in the
length: every kernel here keeps O(N) state) exceeds what the GPU has free, because FlashAttention-3
cannot report an out-of-memory: its C++ error ends the process (a segfault on torch 2.11), so such a
point must never be started; when its own wall budget (FlexAttention: compile and BlockMask included)
or the cell's is spent. The fused kernel's lengths are first checked against its memory model
(kernels/dilated_attention/memory.py, exact arithmetic, not an extrapolation): a length it would not fit
is a `skipped` row saying the predicted peak and the free memory. Every point after a stop is a row (status `oom` after an out-of-memory, else
`unsupported`) whose reason starts with "not run:" and says why; extra["not_run"] is True. A series
that cannot run at all (unavailable, unsupported) has one row with the reason, not one per length.

Dense series are bench/ providers (bench.providers.get) measured by bench.sweep.run_sweep, so their
rows are exactly those of the Flux report; checked against the fp32 reference up to `check_max_len`.
Dilated rows are measured by measure.measure_dilated, checked against the chunked fp32 reference of
the pattern up to `check_max_len` (the correctness cell checks every implementation separately).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from attnbench.rows import Result, Workload, write_jsonl
from attnbench.studies.dilated_attention import measure
from attnbench.studies.dilated_attention.profiles import branches_for

PREDICT_FACTOR = 2.0  # a point predicted beyond this many budgets is not started
MEMORY_MARGIN = 0.95  # a point predicted to need more than this share of the free memory is not started


@dataclass(frozen=True)
class Series:
    name: str  # the provider name of its rows
    kind: str  # dilated | dense
    implementation: str | None = None  # dilated: gather | flex
    backend: str | None = None  # gather: the kernel; dense: the bench provider name
    budget_s: float | None = None  # wall budget of the whole series (None: only the cell's)


def dilated_series(config: dict) -> list[Series]:
    """Our fused kernel first (on a CPU its interpreter must load before Flex imports triton), then the
    gather path on each backend, then FlexAttention."""
    sweep = config["sweep"]
    series = [Series(measure.provider_name("fused"), "dilated", "fused")] if sweep.get("fused") else []
    series += [Series(measure.provider_name("gather", b), "dilated", "gather", b) for b in sweep["backends"]]
    if sweep.get("flex"):
        series.append(Series(measure.provider_name("flex"), "dilated", "flex", None, sweep["flex_budget_s"]))
    return series


def dense_series(config: dict) -> list[Series]:
    return [Series(name, "dense", None, name) for name in config["sweep"]["dense"]]


def predict(history: list[tuple[int, float]], seq_len: int, kind: str) -> float | None:
    """Seconds per call at seq_len from the measured (length, seconds) of the series."""
    if not history:
        return None
    n1, t1 = history[-1]
    exponent = 2.0
    if kind == "dilated":
        exponent = 1.0
        if len(history) >= 2 and history[-2][1] > 0 and t1 > 0:
            n0, t0 = history[-2]
            exponent = min(2.0, max(1.0, math.log(t1 / t0) / math.log(n1 / n0)))
    return t1 * (seq_len / n1) ** exponent


def predict_memory(last: tuple[int, int] | None, seq_len: int) -> int | None:
    """Peak bytes at seq_len from the (length, peak bytes) of the series' last measured point: linear."""
    if last is None:
        return None
    n, peak = last
    return int(peak * seq_len / n)


def workload(config: dict, seq_len: int) -> Workload:
    s = config["shape"]
    return Workload(s["batch"], seq_len, seq_len, s["heads"], s["heads"], s["head_dim"], s["dtype"],
                    config["sweep"]["mask"])  # fmt: skip


class Sweep:
    """Shared state of one sweep: the config, device, its time budget, where rows go. budget_s: wall
    seconds for all its series (None: the profile's sweep.cell_budget_s)."""

    def __init__(self, config, *, device, peak_tflops=None, datasheet_tflops=None, env="", out_path=None,
                 progress: Callable[[Result], None] | None = None, budget_s: float | None = None):  # fmt: skip
        self.config, self.device, self.env = config, device, env
        self.peak, self.datasheet = peak_tflops, datasheet_tflops
        self.out_path, self.progress = out_path, progress
        self.started = time.perf_counter()
        self.budget_s = config["sweep"]["cell_budget_s"] if budget_s is None else budget_s
        self.rows: list[Result] = []
        self.references = measure.References(lambda n: branches_for(config, n), device)

    def emit(self, row: Result) -> None:
        self.rows.append(row)
        if self.out_path:
            write_jsonl(self.out_path, [row], append=True)
        if self.progress:
            self.progress(row)

    def measure_point(self, series: Series, seq_len: int, pass_: str) -> Result:
        w, sweep = workload(self.config, seq_len), self.config["sweep"]
        check = seq_len <= sweep["check_max_len"]
        if series.kind == "dense":
            from attnbench.bench import providers
            from attnbench.bench.sweep import run_sweep

            row = run_sweep([providers.get(series.backend)], [w], [pass_], device=self.device, reference=check,
                            peak_tflops=self.peak, datasheet_tflops=self.datasheet, env_id=self.env,
                            progress=None, timing_options=self.config["timing"])[0]  # fmt: skip
            return measure.finish(row, self.peak, self.datasheet)
        return measure.measure_dilated(
            series.implementation, series.backend, w, pass_, branches_for(self.config, seq_len),
            device=self.device, timing_options=self.config["timing"],
            reference=self.references.get(w) if check else None,
            peak_tflops=self.peak, datasheet_tflops=self.datasheet, env=self.env,
        )  # fmt: skip

    def not_run(self, series: Series, seq_len: int, pass_: str, reason: str, oom: bool) -> Result:
        w = workload(self.config, seq_len)
        extra = {"not_run": True}
        if series.kind == "dilated":
            extra.update(measure.pattern_extra(branches_for(self.config, seq_len), w))
            extra.update(implementation=series.implementation, backend=series.backend)
        family = "dilated" if series.kind == "dilated" else _family(series.backend)
        # not attempted for time, budget or an earlier failure: skipped; an OOM (measured or predicted
        # from the memory of a shorter length) marks the lengths beyond memory
        return Result(series.name, family, "oom" if oom else "skipped", w, pass_, reason=reason,
                      env=self.env, extra=extra)  # fmt: skip

    def run(self, series: Series, pass_: str) -> None:
        """Every length of the sweep for one series and pass (rows are emitted as they come)."""
        sweep = self.config["sweep"]
        budget, cell_budget = sweep["call_budget_s"], self.budget_s
        began = time.perf_counter()
        history: list[tuple[int, float]] = []
        memory: tuple[int, int] | None = None  # (length, peak bytes) of the last measured point
        stop, oom = None, False
        timed_stop = ""  # set once a call was measured or predicted over the budget: re-predict each length
        for seq_len in sweep["seq_lens"]:
            if stop is None:
                stop = self._budget_stop(series, began, cell_budget)
            if stop is None or timed_stop:
                guess = predict(history, seq_len, series.kind)
                if guess is not None and (timed_stop or guess > PREDICT_FACTOR * budget):
                    n, t = history[-1]
                    if timed_stop.startswith("measured"):
                        stop = (f"not run: {timed_stop.removeprefix('measured ')}; predicted {guess:.1f} s per "
                                f"call here (from {t:.2f} s at {n} tokens)")  # fmt: skip
                    else:
                        stop = (f"not run: predicted {guess:.1f} s per call (from {t:.2f} s at {n} tokens), over "
                                f"{PREDICT_FACTOR:g}x the {budget:g} s budget per call of this profile")  # fmt: skip
                        timed_stop = "predicted"
            if stop is None and series.implementation == "fused":
                paper = self._paper_memory_stop(seq_len, pass_)
                if paper:  # skipped, not oom: nothing ran out of memory, the arithmetic says it would
                    self.emit(self.not_run(series, seq_len, pass_, paper, False))
                    continue
            if stop is None:
                stop = self._memory_stop(memory, seq_len)
                oom = oom or stop is not None
            if stop is not None:
                self.emit(self.not_run(series, seq_len, pass_, stop, oom))
                continue
            if seq_len > sweep["check_max_len"]:
                self.references.clear()  # no check at this length: free the reference tensors
            row = self.measure_point(series, seq_len, pass_)
            self.emit(row)
            if row.status in ("unavailable", "unsupported"):
                return  # the same for every length: one row says why
            if row.status == "oom":
                stop, oom = f"not run: out of memory at {seq_len} tokens, a shorter length", True
            elif row.status == "error":
                stop = f"not run: {seq_len} tokens failed ({row.reason[:120]})"
            elif row.ms_median is not None:
                seconds = row.ms_median / 1e3
                history.append((seq_len, seconds))
                if row.peak_mem_bytes:
                    memory = (seq_len, row.peak_mem_bytes)
                if seconds > budget:  # the next lengths are skipped, each with its own prediction
                    stop = f"over the {budget:g} s budget per call"
                    timed_stop = (f"measured {seq_len} tokens took {seconds:.2f} s per call, over the {budget:g} s "
                                  f"budget per call of this profile")  # fmt: skip

    def free_bytes(self) -> int | None:
        """Bytes a point may allocate: free on the device plus what torch's cache holds unused (None on CPU)."""
        import torch

        if torch.device(self.device).type != "cuda":
            return None
        free, _ = torch.cuda.mem_get_info(self.device)
        return free + torch.cuda.memory_reserved(self.device) - torch.cuda.memory_allocated(self.device)

    def _memory_stop(self, memory: tuple[int, int] | None, seq_len: int) -> str | None:
        need, free = predict_memory(memory, seq_len), self.free_bytes()
        if need is None or free is None or need <= MEMORY_MARGIN * free:
            return None
        n, peak = memory
        return (f"not run: predicted out of memory, {need / 2**30:.1f} GiB (from {peak / 2**30:.1f} GiB at {n} "
                f"tokens, linear in the length) against {free / 2**30:.1f} GiB free")  # fmt: skip

    def _paper_memory_stop(self, seq_len: int, pass_: str) -> str | None:
        """The fused kernel's peak from its memory model (kernels/dilated_attention/memory.py) over what is
        free: this length is skipped (a longer one would need more still; the series goes on to say so)."""
        import torch

        from attnbench.kernels.dilated_attention.memory import predicted_peak_bytes

        free, s = self.free_bytes(), self.config["shape"]
        size = torch.empty(0, dtype=getattr(torch, s["dtype"])).element_size()
        need = predicted_peak_bytes(s["batch"], s["heads"], seq_len, s["head_dim"], size, pass_ != "fwd")
        if free is None or need <= MEMORY_MARGIN * free:
            return None
        return (f"not run: predicted peak {need / 2**30:.1f} GiB (the fused kernel's memory model: inputs, output, "
                f"fp32 accumulators) against {free / 2**30:.1f} GiB free")  # fmt: skip

    def _budget_stop(self, series: Series, began: float, cell_budget: float) -> str | None:
        now = time.perf_counter()
        if now - self.started > cell_budget:
            return f"not run: the sweep's time budget ({cell_budget:g} s) was spent"
        if series.budget_s is not None and now - began > series.budget_s:
            return f"not run: this series' time budget ({series.budget_s:g} s, setup and compile included) was spent"
        return None

    def run_all(self, series: list[Series]) -> list[Result]:
        for s in series:
            for pass_ in self.config["sweep"]["passes"]:
                self.run(s, pass_)
        return self.rows


def _family(provider_name: str) -> str:
    from attnbench.bench import providers

    return providers.get(provider_name).family
