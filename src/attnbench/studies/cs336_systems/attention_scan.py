"""The attention scan (CS336's benchmark_attn): eager attention at batch 8, one head (q, k, v [batch,
seq, d_model], no mask, fp32), over d_model x seq: `iterations` forward passes, the memory in use before
the backward, `iterations` backward passes; then the same function under torch.compile.

Per row: forward and backward ms per pass (mean and median of per-pass CUDA events; perf_counter on a
CPU; each timed backward runs on the graph of an untimed forward just before it; fewer than `iterations`
passes when they would take more than 15 s, with the count in the row), memory allocated
before the backward and the peak of one forward and of one backward (CUDA only),
and the memory model's prediction for the same shape. Out-of-memory in a phase is an `oom` row naming
that phase (what was measured before it is kept); the scan goes on.

Every row that ran is checked (`check`): the variant's output and q, k, v gradients at the row's own
inputs against bench.correctness's fp32 reference (float64 on a CPU; computed in query chunks, so it
needs far less memory than eager attention), under the fp32 tolerance. A row outside it is `incorrect`
(the reason names the worst tensor); a check that cannot run (its own out-of-memory) leaves the row `ok`
with `ok: None` and `check_reason` saying why it was not checked.

Memory model (fp32, 4 bytes, B = batch, S = seq, d = d_model; eager autograd):
  before backward   B·S²·4 (the softmax output P, saved for P·V and the softmax backward)
                    + 5·B·S·d·4 (q, k, v and dO, made up front, and the output)
  forward peak      2·B·S²·4 + 5·B·S·d·4 (scores and their scaled copy, or scaled scores and P, at once)
  backward peak     3·B·S²·4 + 8·B·S·d·4 (P, dP = dO·Vᵀ and dS alive together; + dq, dk, dv)
so eager attention runs out of memory near S = sqrt(M / (3·B·4)) for a GPU with M bytes free: the
S² term is everything, d_model barely matters.
"""

from __future__ import annotations

import math
import time

import torch

from attnbench.bench import correctness, timing
from attnbench.bench.timing import is_oom, release_memory
from attnbench.models.attention import eager_attention
from attnbench.rows import Workload

BYTES = 4  # fp32


def memory_model(batch: int, seq: int, d_model: int, bytes_per: int = BYTES) -> dict[str, int]:
    square, vectors = batch * seq * seq * bytes_per, batch * seq * d_model * bytes_per
    return {
        "before_backward": square + 5 * vectors,
        "peak_forward": 2 * square + 5 * vectors,
        "peak_backward": 3 * square + 8 * vectors,
    }


def oom_seq_len(free_bytes: int, batch: int, d_model: int) -> int:
    """The longest sequence whose predicted backward peak fits in `free_bytes`."""
    seq = int(math.sqrt(free_bytes / (3 * batch * BYTES)))
    while seq > 1 and memory_model(batch, seq, d_model)["peak_backward"] > free_bytes:
        seq -= 1
    return seq


def _noncausal_eager(q, k, v):
    return eager_attention(q, k, v, causal=False)


def compiled_attention(backend: str):
    """Eager attention under torch.compile; the sequence dimension is marked dynamic at each call site."""
    import torch._dynamo

    torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 64)
    return torch.compile(_noncausal_eager, backend=backend)


def _timed(fn, n: int, device: torch.device, before=None) -> dict:
    """Mean, median and count of n calls of fn under bench.timing's protocol (steady-state warm-up, L2
    flushed before each call), with the SM clock they ran at; `before()` (untimed) runs ahead of each call."""
    t = timing.measure(fn, device=device, min_reps=n, max_reps=n, min_time_ms=0.0, before=before)
    return {"mean": t.total_ms / t.reps, "median": t.ms_median, "n": t.reps, "timing_method": t.timing_method,
            "sm_clock_mhz": t.sm_clock_mhz, "power_w": t.power_w, "warmup_s": t.warmup_s}  # fmt: skip


def _affordable(call, iterations: int, budget_s: float, device: torch.device) -> int:
    """How many of `iterations` calls fit in `budget_s` seconds, from one timed call (at least 3)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    call()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return max(min(3, iterations), min(iterations, int(budget_s / max(time.perf_counter() - t0, 1e-6))))


def check(fn, q, k, v, dout) -> dict:
    """`fn`'s output and q, k, v gradients at these inputs ([batch, seq, d_model], one head) against the
    fp32 reference: the row's ok, rel_l2 and check_worst (the tensor closest to, or past, its bound), and
    check_reason (why it failed; "" when ok). Exceptions propagate (`_check_row` turns them into why not)."""
    batch, seq, d_model = q.shape
    workload = Workload(batch, seq, seq, 1, 1, d_model, "float32", "full")
    out = fn(q, k, v)
    grads = torch.autograd.grad(out, (q, k, v), dout)

    def one_head(t):  # [batch, seq, d] -> [batch, 1, seq, d], the reference's layout
        return t.detach().unsqueeze(1)

    qh, kh, vh = one_head(q), one_head(k), one_head(v)
    ref = correctness.reference_attention(qh, kh, vh, workload)
    found = {"out": correctness.compare(one_head(out), ref, "float32")}
    out = ref = None  # the reference gradients come next: hold only what is still compared
    refs = correctness.reference_grads(qh, kh, vh, one_head(dout), workload)
    for name, grad, reference in zip(("dq", "dk", "dv"), grads, refs):
        found[name] = correctness.compare(one_head(grad), reference, "float32", grad=True, what=name)
    worst = correctness.worst(found)
    name = next(n for n, c in found.items() if c is worst)
    return {"ok": worst.ok, "rel_l2": worst.rel_l2, "check_worst": name, "check_reason": worst.reason}


def _check_row(row: dict, fn, q, k, v, dout, device: torch.device) -> None:
    """Fill the row's check; a failed check makes the row `incorrect`, a check that cannot run leaves it
    `ok` and says why it was not checked."""
    release_memory(device, collect=False)  # the timed passes' graphs: the check needs the room
    try:
        row.update(check(fn, q, k, v, dout))
    except Exception as exc:  # noqa: BLE001 - a check that cannot run is a label, not a failed row
        what = "ran out of memory" if is_oom(exc) else f"failed: {type(exc).__name__}"
        first = (str(exc).strip().splitlines() or [""])[0][:160]
        row.update(ok=None, check_reason=f"not checked: the check {what} ({first})")
        return
    if row["ok"] is False:
        row["status"], row["reason"] = "incorrect", f"check: {row['check_reason']}"


def scan_one(d_model: int, seq: int, *, batch: int, iterations: int, device: torch.device, variant: str = "eager",
             fn=None, warmup: int = 2, budget_s: float = 15.0) -> dict:  # fmt: skip
    """One (d_model, seq) row of the scan for `fn` (default: eager attention). Each phase times
    `iterations` calls, or fewer if they would take more than `budget_s` (the row's `n` says how many)."""
    fn = fn or _noncausal_eager
    cuda = device.type == "cuda"
    row = {"variant": variant, "d_model": d_model, "seq": seq, "batch": batch, "iterations": iterations,
           "status": "ok", "reason": "", "timer": "cuda_event" if cuda else "perf_counter",
           "model": memory_model(batch, seq, d_model)}  # fmt: skip
    stage = "inputs"
    q = k = v = out = dout = None
    try:
        gen = torch.Generator(device=device).manual_seed(0)
        q, k, v = (
            torch.randn(batch, seq, d_model, generator=gen, device=device, requires_grad=True)
            for _ in range(3)
        )
        dout = torch.randn(batch, seq, d_model, generator=gen, device=device)
        if variant != "eager":
            for t in (q, k, v):
                torch._dynamo.mark_dynamic(t, 1)
        stage = "forward"
        t0 = time.perf_counter()
        out = fn(q, k, v)  # the first call compiles (compiled variant)
        if cuda:
            torch.cuda.synchronize(device)
        row["first_call_ms"] = (time.perf_counter() - t0) * 1e3
        out = None
        for _ in range(warmup):
            fn(q, k, v)
        n = _affordable(lambda: fn(q, k, v), iterations, budget_s, device)
        row["forward_ms"] = _timed(lambda: fn(q, k, v), n, device)
        if cuda:
            release_memory(device, collect=False)
            torch.cuda.reset_peak_memory_stats(device)
            base = torch.cuda.memory_allocated(device)
        out = fn(q, k, v)
        if cuda:
            torch.cuda.synchronize(device)
            row["mem_before_backward_bytes"] = torch.cuda.memory_allocated(device)
            row["peak_forward_bytes"] = torch.cuda.max_memory_allocated(device)
            row["inputs_bytes"] = base
        stage = "backward"
        if cuda:
            torch.cuda.reset_peak_memory_stats(device)
        torch.autograd.grad(out, (q, k, v), dout)
        if cuda:
            row["peak_backward_bytes"] = torch.cuda.max_memory_allocated(device)
        out = None
        n = _affordable(
            lambda: torch.autograd.grad(fn(q, k, v), (q, k, v), dout), iterations, budget_s, device
        )
        # each backward gets a fresh graph from an untimed forward (a compiled backward may not be re-run)
        row["backward_ms"] = _timed(
            lambda o: torch.autograd.grad(o, (q, k, v), dout), n, device, before=lambda: (fn(q, k, v),)
        )
        stage = "check"
        _check_row(row, fn, q, k, v, dout, device)
    except Exception as exc:  # noqa: BLE001 - an out-of-memory (or any failure) is a row; the scan goes on
        row["status"] = "oom" if is_oom(exc) else "error"
        row["reason"] = f"{stage}: {type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:200]}"
        row["failed_phase"] = stage
        row["check_reason"] = f"not checked: the row stopped in {stage}"
    finally:
        q = k = v = out = dout = None  # drop the references before releasing memory
        release_memory(device)
    return row


def run_scan(config: dict, device: torch.device, variant: str = "eager", progress=print) -> list[dict]:
    """Every (d_model, seq) of the profile's scan, for eager attention or its compiled version."""
    fn = None if variant == "eager" else compiled_attention(config["compile_backend"])
    rows = []
    for d_model in config["d_models"]:
        for seq in config["seq_lens"]:
            row = scan_one(d_model, seq, batch=config["batch"], iterations=config["iterations"], device=device,
                           variant=variant, fn=fn)  # fmt: skip
            rows.append(row)
            if progress:
                fwd, bwd = row.get("forward_ms", {}).get("mean"), row.get("backward_ms", {}).get("mean")
                mem = row.get("mem_before_backward_bytes")
                checked = {True: f"checked ok ({row.get('rel_l2') or 0:.1e})", False: "WRONG"}.get(
                    row.get("ok"), "not checked"
                )
                progress(f"[scan {variant}] d={d_model:<4} seq={seq:<6} {row['status']:<9} "
                         f"fwd {'-' if fwd is None else f'{fwd:.3f}'} ms  bwd {'-' if bwd is None else f'{bwd:.3f}'} ms  "
                         f"mem before bwd {'-' if mem is None else f'{mem / 2**20:.0f} MiB'}  {checked}  {row['reason']}")  # fmt: skip
    return rows
