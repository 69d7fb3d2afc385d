"""Kernel measurements of the CS336 report, through the benchmark sweep (bench/sweep.py: correctness
against the fp32 reference, CUDA events on a cold L2, exact causal FLOPs):

- the comparison table: PyTorch eager attention (the CS336 reference implementation) against our Triton
  FlashAttention-2, with SDPA cuDNN and FlashAttention-3 beside them, causal, batch 1, one head;
- the leaderboard row and the forward speed target (profiles.py has both shapes), our kernel in both dQ
  modes beside FlashAttention-3, cuDNN and PyTorch's FlashAttention-2 backend;
- the tile audit: every candidate tile of our kernel at those shapes, launched explicitly (no
  autotuning): time, correctness, registers, spills, shared memory; and a profiler listing of the
  device kernels one call launches, after bench.timing's steady-state warm-up and with the SM clock
  sampled while the profiled calls ran (a kernel's time follows the clock it ran at).
"""

from __future__ import annotations

import torch

from attnbench.bench import clock_windows, clocks, correctness, flops, providers, timing
from attnbench.bench.inputs import make_dout, make_inputs
from attnbench.bench.providers.base import Prepared, Provider, describe_exception, leaf
from attnbench.bench.providers.triton_fa2 import TritonFlashAttention2
from attnbench.bench.sweep import run_sweep
from attnbench.models.attention import eager_attention
from attnbench.rows import PASSES, Workload

COMPARED = ("sdpa_cudnn", "flash_attn3")  # the kernels a reader compares ours against, from the registry


class EagerTorchAttention(Provider):
    """softmax(q kᵀ/√d + mask) v in plain PyTorch ops (models/attention.py), in the inputs' dtype."""

    family = "torch"
    layout = "bhsd"
    dtypes = ("bfloat16", "float16", "float32")
    mask_features = ("causal",)
    backward = True
    needs_cuda = False
    causal_any_lengths = False  # the eager mask is top-left aligned when the lengths differ

    def __init__(self, name: str = "torch_eager"):
        self.name = name

    def version(self) -> str:
        return torch.__version__

    def prepare(self, q, k, v, workload: Workload, backward: bool = False) -> Prepared:
        q, k, v = (leaf(t, backward) for t in (q, k, v))
        causal = workload.mask == "causal"
        return Prepared(run=lambda: eager_attention(q, k, v, causal=causal), to_canonical=lambda out: out,
                        inputs=(q, k, v), note="CS336 reference implementation (materialises the scores)")  # fmt: skip


def table_providers() -> list:
    return [EagerTorchAttention(), providers.get("triton_fa2"), *(providers.get(name) for name in COMPARED)]


def kernel_providers() -> list:
    """Ours in both dQ modes and the kernels it is compared with (PyTorch's FA2 backend as a baseline)."""
    return [providers.get("triton_fa2"), TritonFlashAttention2("triton_fa2_atomic_dq", dq_mode="atomic"),
            *(providers.get(name) for name in (*COMPARED, "sdpa_flash"))]  # fmt: skip


def table_workloads(config: dict, dtype: str) -> list[Workload]:
    return [
        Workload(config["batch"], seq, seq, config["heads"], config["heads"], head_dim, dtype, "causal")
        for seq in config["seq_lens"]
        for head_dim in config["head_dims"]
    ]


def shape_workload(shape: dict) -> Workload:
    return Workload(shape["batch"], shape["seq"], shape["seq"], shape["heads"], shape["heads"], shape["head_dim"],
                    shape["dtype"], shape["mask"])  # fmt: skip


def run_table(config: dict, dtype: str, device, peak_tflops, datasheet_tflops, progress) -> list:
    """The table's rows (of one cell: profiles.table_slice). fp32 adds our kernel in true fp32 (triton_fa2
    multiplies fp32 as TF32); each row is compared with the measured peak of the math it ran: the given
    peak is the dtype's own (bf16, or true fp32), a tf32 one is measured when a row first needs it."""
    chosen = table_providers() + ([providers.get("triton_fa2_ieee")] if dtype == "float32" else [])
    if peak_tflops is not None and torch.device(device).type == "cuda":
        peaks = flops.MeasuredPeaks(device)
        peaks["bf16" if dtype == "bfloat16" else "fp32"] = peak_tflops
        peak_tflops = peaks
    return run_sweep(chosen, table_workloads(config, dtype), list(PASSES), device=device,
                     peak_tflops=peak_tflops, datasheet_tflops=datasheet_tflops, progress=progress,
                     timing_options=config["timing"])  # fmt: skip


def table_cell(cell: str, progress=None) -> list:
    """One kernel-table cell of the notebook (profiles.TABLE_CELLS names its dtype and head dims): this
    machine's profile (the gpu cell's profile.json), every row of those head dims measured and written to
    table_<dtype>.jsonl in the working directory. fp32 MFU is against the fp32 peak: TF32 tensor cores
    are what our kernel and SDPA use for fp32 inputs."""
    from attnbench.bench.profiles import gpu_profile, measured_peak
    from attnbench.bench.sweep import print_progress
    from attnbench.rows import write_jsonl
    from attnbench.studies.cs336_systems.profiles import table_slice

    config = gpu_profile()
    dtype, table = table_slice(config["table"], cell)
    if config.get("label"):
        print(f"*** {config['label']} ***")
    if not table["head_dims"]:
        print(f"{cell}: the {config.get('profile', '?')} profile's table has none of this cell's head dims "
              f"({dtype}, head dims {config['table']['head_dims']}): nothing to measure")  # fmt: skip
        write_jsonl(f"table_{dtype}.jsonl", [])
        return []
    print(f"{dtype}, head dims {table['head_dims']}", flush=True)
    short = "bf16" if dtype == "bfloat16" else "fp32"
    datasheet = config["datasheet_tflops"] if dtype == "bfloat16" else None
    rows = run_table(table, dtype, config["device"], measured_peak(config, short), datasheet,
                     progress or print_progress)  # fmt: skip
    write_jsonl(f"table_{dtype}.jsonl", rows)
    return rows


# --- the tile audit ----------------------------------------------------------------------------------


def _kernel_resources(kernel) -> dict:
    if kernel is None:  # the interpreter compiles nothing
        return {}
    return {"regs": getattr(kernel, "n_regs", None), "spills": getattr(kernel, "n_spills", None),
            "shared_bytes": getattr(kernel.metadata, "shared", None)}  # fmt: skip


def _audit_tile(row: dict, workload: Workload, pass_: str, device, trial) -> dict:
    """`row` filled from `trial() -> (check, timing result, compiled kernel)`; a tile that cannot compile
    or run is a row too. Frees the memory after it."""
    from attnbench.bench.flops import attention_flops, tflops

    try:
        check, result, kernel = trial()
        row.update(status="ok" if check.ok else "incorrect", reason=check.reason, rel_l2=check.rel_l2,
                   ms=result.ms_median, tflops=tflops(attention_flops(workload, pass_), result.ms_median),
                   **_kernel_resources(kernel), **result.conditions())  # fmt: skip
    except Exception as exc:  # noqa: BLE001 - a tile that cannot compile or run is a row
        row.update(status="oom" if timing.is_oom(exc) else "error", reason=describe_exception(exc))
    timing.release_memory(device, collect=row["status"] != "ok")
    return row


def audit_forward(shape: dict, device, timing_options: dict, tiles: list | None = None) -> list[dict]:
    """Every forward candidate tile at `shape` (or the given `tiles`): ms, TFLOP/s (exact causal FLOPs),
    correctness, resources."""
    from attnbench.kernels.flash_attention2 import attention_forward, configs, launch

    workload = shape_workload(shape)
    q, k, v = make_inputs(workload, device)
    ref = correctness.reference_attention(q, k, v, workload)
    causal = workload.mask == "causal"
    d_pad = launch.padded_head_dim(workload.head_dim)
    rows = []
    for tile in tiles if tiles is not None else configs.forward_candidates(q.element_size(), d_pad, causal):

        def trial(t=tile):
            out, _, kernel = attention_forward(q, k, v, causal, tile=t, return_kernel=True)
            check = correctness.compare(out, ref, workload.dtype)
            result = timing.measure(
                lambda: attention_forward(q, k, v, causal, tile=t), device=device, **timing_options
            )
            return check, result, kernel

        row = {"kernel": "forward", "tile": tile.label(), **tile.to_dict()}
        rows.append(_audit_tile(row, workload, "fwd", device, trial))
    return rows


def audit_backward(
    shape: dict, device, timing_options: dict, tiles: list | None = None, dq_modes=("recompute", "atomic")
) -> list[dict]:
    """Every backward candidate tile at `shape` (or the given `tiles`), in each dQ mode (the forward is
    run once, autotuned)."""
    from attnbench.kernels.flash_attention2 import attention_backward, attention_forward, configs, launch

    workload = shape_workload(shape)
    q, k, v = make_inputs(workload, device)
    dout = make_dout(workload, device)
    causal = workload.mask == "causal"
    out, lse = attention_forward(q, k, v, causal)
    refs = correctness.reference_grads(q, k, v, dout, workload)
    d_pad = launch.padded_head_dim(workload.head_dim)
    rows = []
    for dq_mode in dq_modes:
        for tile in tiles if tiles is not None else configs.backward_candidates(q.element_size(), d_pad):
            row = {
                "kernel": f"backward ({dq_mode} dQ)",
                "tile": tile.label(),
                "dq_mode": dq_mode,
                **tile.to_dict(),
            }

            def call(t=tile, mode=dq_mode, **kw):
                return attention_backward(dout, q, k, v, out, lse, causal, dq_mode=mode, tile=t, **kw)

            def trial(call=call):
                *grads, kernel = call(return_kernel=True)
                checks = [correctness.compare(g, r, workload.dtype, grad=True, what=n)
                          for n, g, r in zip(("dq", "dk", "dv"), grads, refs)]  # fmt: skip
                worst = correctness.worst(dict(zip(("dq", "dk", "dv"), checks)))
                return worst, timing.measure(call, device=device, **timing_options), kernel

            rows.append(_audit_tile(row, workload, "bwd", device, trial))
    return rows


def device_kernels(fn, device, calls: int = 3, *, warmup_min_s: float = timing.WARMUP_MIN_S) -> dict:
    """The device kernels `calls` calls of fn launch (torch.profiler), µs per call, largest first, after
    bench.timing's steady-state warm-up, with the SM clock sampled during the profiled calls (see
    profile_kernels). A CPU has no device kernels: an empty listing that says so."""
    device = torch.device(device)
    if device.type != "cuda":
        return {"kernels": [], "calls": 0, "reason": "no CUDA device: no device kernels to list"}
    backend = timing.CudaBackend(fn, device, flush_l2=False, max_mhz=None)  # flushing L2 is no part of fn
    source = clock_windows.device_source(device)[0]
    return profile_kernels(fn, device, backend, source, calls=calls, warmup_min_s=warmup_min_s)


def profile_kernels(fn, device, backend, source, *, calls: int, warmup_min_s: float) -> dict:
    """Warm up (timing.warm_up on `backend`: at least `warmup_min_s` of calls, until the per-call time and
    the SM clock settle, as every timed row), then profile `calls` calls: {"kernels": [{kernel,
    us_per_call, launches_per_call}], "calls", the warm-up's seconds, calls and settled, and the SM
    clock, power and samples read from `source` during the profiled calls (None without a source)}.
    On a CPU device (tests) the listing is of CPU operators."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    cuda = device.type == "cuda"
    with clocks.ClockSampler(source) as sampler:
        warm = timing.warm_up(backend, sampler, min_calls=1, min_s=warmup_min_s)
        with profile(activities=[ProfilerActivity.CUDA if cuda else ProfilerActivity.CPU]) as prof:
            clock = clock_windows.ClockWindows(sampler)
            with clock.window():  # the calls alone: the profiler's start-up and tear-down leave the GPU idle
                for _ in range(calls):
                    fn()
                timing.synchronize(device)
            during = clock.summary()
    totals: dict[str, list[float]] = {}
    for event in prof.events():
        if event.device_type == (DeviceType.CUDA if cuda else DeviceType.CPU):
            entry = totals.setdefault(event.name, [0.0, 0])
            entry[0] += event.time_range.elapsed_us()
            entry[1] += 1
    ranked = sorted(totals.items(), key=lambda kv: -kv[1][0])
    kernels = [{"kernel": name[:120], "us_per_call": us / calls, "launches_per_call": n / calls}
               for name, (us, n) in ranked]  # fmt: skip
    return {"kernels": kernels, "calls": calls, "warmup_s": warm["warmup_s"], "warmup_calls": warm["warmup_calls"],
            "warmup_settled": warm["warmup_settled"], "sm_clock_mhz": during.get("sm_clock_mhz"),
            "power_w": during.get("power_w"), "clock_samples": during.get("clock_samples", 0),
            "clock_source": getattr(source, "name", None)}  # fmt: skip
