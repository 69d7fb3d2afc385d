"""What the Flux report's measuring cells run: each function writes the cell's files into the working
directory and prints what the cell shows, exactly as the cells did inline."""

from __future__ import annotations

import json
import statistics
import time

import torch

from attnbench.bench import env, flops, providers, timing, timing_methods
from attnbench.bench.inputs import make_inputs
from attnbench.bench.profiles import write_profile
from attnbench.bench.sweep import print_progress, run_sweep
from attnbench.rows import PASSES, Result, Status, Workload, write_jsonl

# NVIDIA's published cuDNN 9.19 SDPA configuration on H200: batch 1, 64 query / 8 KV heads, head dim
# 128, bf16, 16k tokens
H200_PUBLISHED = {"seq_len": 16384, "heads_q": 64, "heads_kv": 8, "head_dim": 128, "dtype": "bfloat16"}
H200_PROVIDERS = ["sdpa_cudnn", "cudnn_frontend", "cudnn_frontend_fp8", "flash_attn3", "flash_attn3_fp8"]
TIMING_METHOD_PROVIDERS = ["sdpa_cudnn", "cudnn_frontend"]  # the calls timed as NVIDIA's script times them
TRUST_WORKLOAD = Workload(1, 4352, 4352, 24, 24, 128, "bfloat16")  # Flux with 256 text tokens
TRUST_LIMIT = 0.03  # the harness and the bare loop must agree within 3 %
# the trust check compares two timers of one call; that call's output is checked where the sweep times it
TRUST_CHECK = "not checked here: two timers of one call; sdpa_cudnn's forward is checked in the sweep (correctness cell)"
# what the timing-method records time is the sweep's call of the same provider, shape and pass
METHODS_CHECK = (
    "not checked here: the call of the results.jsonl row of the same provider, mask and pass (checked)"
)


def write_environment(config: dict) -> None:
    """env.json and profile.json, and the machine, shapes and providers on stdout (the gpu cell)."""
    smi, why = env.nvidia_smi()
    print(smi if smi is not None else f"nvidia-smi: {why}")
    info = env.collect_env(providers.select(config["provider_filter"]))
    write_profile(config, info)

    print(f"profile: {config['profile']}" + (f"  ({config['label']})" if "label" in config else ""))
    print(f"GPU: {info.get('gpu') or 'none'}  SMs: {info.get('sm_count')}  driver: {info.get('driver')}  "
          f"CUDA: {info.get('cuda')}  cuDNN: {info.get('cudnn')}  torch: {info.get('torch')}")  # fmt: skip
    print(f"shapes: batch 1, heads {config['heads']}, head_dim {config['head_dim']}, {config['dtype']}, "
          f"non-causal, seq {config['seq_lens']}")  # fmt: skip
    print("\nproviders:")
    for name, entry in (info.get("providers") or {}).items():
        state = entry["unavailable"] or f"available {entry['version'] or ''}".rstrip()
        print(f"  {name:<30} {state}")


def workloads(config: dict) -> list[Workload]:
    return [
        Workload(config["batch"], s, s, config["heads"], config["heads"], config["head_dim"], config["dtype"],
                 config["mask"])
        for s in config["seq_lens"]
    ]  # fmt: skip


def lengths_part(seq_lens: list[int], part: tuple[int, int] | None) -> list[int]:
    """Part `i` of `n` (1-based) of the lengths, consecutive and as even as they come; None: all."""
    if part is None:
        return list(seq_lens)
    i, n = part
    if not 1 <= i <= n:
        raise ValueError(f"part {i} of {n}: give 1 <= part <= parts")
    size, extra = divmod(len(seq_lens), n)
    start = (i - 1) * size + min(i - 1, extra)
    return list(seq_lens[start : start + size + (i <= extra)])


def run_bench(config: dict, passes: list[str] | None = None, part: tuple[int, int] | None = None) -> list:
    """Every chosen provider at every Flux shape and pass: results.jsonl and sweep.json (a bench cell).

    passes: the subset of the profile's passes this cell measures (default: all of them); part (i, n):
    the i-th of n consecutive parts of the lengths (default: all). The report splits the sweep into
    cells by pass and part so that each, with the profile's rounds, fits one ten-minute GPU command."""
    config = {**config, "seq_lens": lengths_part(config["seq_lens"], part)}
    passes = list(passes or config["passes"])
    unknown = [p for p in passes if p not in config["passes"]]
    if unknown:
        raise ValueError(f"passes {unknown} are not in the profile's passes {config['passes']}")
    if "label" in config:
        print(f"*** {config['label']} ***")
    chosen = providers.select(config["provider_filter"])
    cuda = config["device"] == "cuda"
    gpu_name = torch.cuda.get_device_name(0) if cuda else None
    datasheet = flops.datasheet_peak(gpu_name)
    reported: set[str] = set()

    def progress(row):
        """Every measured row; an unavailable provider once (its reason is the same everywhere)."""
        if row.status == Status.UNAVAILABLE:
            if row.provider in reported:
                return
            reported.add(row.provider)
        print_progress(row)

    clocks_before = env.clock_snapshot()
    # the MFU denominator, measured now on this GPU (CUDA only); again after the sweep to show any drift
    peak_before = flops.measure_matmul_peak("cuda") if cuda else None
    if peak_before:
        print(
            f"bf16 matmul peak before the sweep: {peak_before:.1f} TFLOP/s (datasheet: {datasheet or 'unknown'})"
        )
    started = time.perf_counter()
    rounds = config.get("rounds", 1)
    rows = run_sweep(chosen, workloads(config), passes, device=config["device"], progress=progress, rounds=rounds,
                     timing_options=config["timing"], peak_tflops=peak_before, datasheet_tflops=datasheet)  # fmt: skip
    elapsed = time.perf_counter() - started
    peak_after = flops.measure_matmul_peak("cuda") if cuda else None
    clocks_after = env.clock_snapshot()

    write_jsonl("results.jsonl", rows)
    summary = {"profile": config["profile"], "label": config.get("label"), "gpu": gpu_name,
               "measured_matmul_peak_tflops": peak_before, "matmul_peak_after_tflops": peak_after,
               # the GEMM ran power-limited: rows are scored against it scaled to their own clock
               "matmul_peak_sm_clock_mhz": flops.clock_of(peak_before),
               "datasheet_peak_tflops": datasheet, "timing": config["timing"], "passes": passes,
               "seq_lens": config["seq_lens"], "rounds": rounds,
               "sweep_seconds": round(elapsed, 1),
               "clocks_before": clocks_before, "clocks_after": clocks_after,
               "clock_report": env.clock_report(clocks_before, clocks_after),
               "status_counts": {str(s): sum(r.status == s for r in rows) for s in sorted({r.status for r in rows})}}  # fmt: skip
    with open("sweep.json", "w") as f:
        json.dump(summary, f, indent=2)
    print(f"\n{len(rows)} rows in {elapsed:.1f} s: {summary['status_counts']}")
    print(summary["clock_report"])
    notes = {r.provider: r.extra["note"] for r in rows if r.extra.get("note")}
    if notes:
        print("\nprovider notes (what the timed call is, where it is more than one kernel call):")
        for provider, note in notes.items():
            print(f"  {provider}: {note}")
    if peak_before and peak_after:
        drift = peak_after / peak_before - 1
        print(f"bf16 matmul peak after the sweep: {peak_after:.1f} TFLOP/s ({drift:+.1%} against before)"
              + ("  <- the GPU sustained less by the end (clocks, power, temperature)" if drift < -0.05 else ""))  # fmt: skip
    return rows


def trust_check(config: dict) -> dict:
    """The harness against a bare CUDA-event loop on SDPA cuDNN forward, three rounds each,
    interleaved: trust.json and its verdict on stdout (the trust cell, which reads `config` through
    bench.profiles.gpu_profile: refused on a machine other than the profile's, so a GPU label never gets
    a skip)."""
    result = {"verdict": "skipped", "label": config.get("label")}
    if not torch.cuda.is_available():
        result["reason"] = "needs CUDA: the trust check compares two CUDA-event timers"
    else:
        provider, workload = providers.get("sdpa_cudnn"), TRUST_WORKLOAD
        why = provider.why_not(workload, "fwd")
        if why:
            result["reason"] = f"sdpa_cudnn {why[0]}: {why[1]}"
        else:
            with torch.no_grad():
                q, k, v = make_inputs(workload, "cuda")
                prepared = provider.prepare(q, k, v, workload)
                prepared.run()
                result = trust_rounds(prepared.run, config["timing"], device="cuda")
            result.update(
                workload=workload.label(), gpu=torch.cuda.get_device_name(0), correctness=TRUST_CHECK
            )
    with open("trust.json", "w") as f:
        json.dump(result, f, indent=2)
    print_trust(result)
    return result


def trust_rounds(run, timing_options: dict, *, device, rounds: int = 3, reps: int = 200) -> dict:
    """`rounds` interleaved rounds of the harness and of the bare loop, each from the protocol's steady
    state and with the SM clock its timed calls ran at (the verdict compares times taken at one clock)."""
    harness, bare = [], []
    for _ in range(rounds):
        t = timing.measure(run, device=device, **timing_options)
        harness.append({"ms": t.ms_median, **t.conditions(), "warmup_calls": t.warmup_calls,
                        "clock_samples": t.clock_samples, "clock_reason": t.clock_reason})  # fmt: skip
        bare.append(timing_methods.steady_bare_loop(run, device=device, reps=reps))
    h, b = (statistics.median(r["ms"] for r in side) for side in (harness, bare))
    diff = abs(h - b) / b
    return {"verdict": "holds" if diff <= TRUST_LIMIT else "FAILS", "limit": TRUST_LIMIT, "harness_ms": h, "bare_ms": b,
            "relative_difference": diff, "harness_rounds_ms": [r["ms"] for r in harness],
            "bare_rounds_ms": [r["ms"] for r in bare], "harness_sm_clock_mhz": _median_clock(harness),
            "bare_sm_clock_mhz": _median_clock(bare), "harness_rounds": harness, "bare_rounds": bare}  # fmt: skip


def _median_clock(rounds: list[dict]) -> float | None:
    clocks = [r["sm_clock_mhz"] for r in rounds if r.get("sm_clock_mhz") is not None]
    return statistics.median(clocks) if clocks else None


def clock_text(rounds: list[dict] | None) -> str:
    """'SM clock 1980 MHz (rounds 1980, 1965, 1980; warm-up 1.0-1.1 s, settled)' or why there is none."""
    if not rounds:
        return "SM clock not recorded (trust.json of older code)"
    clocks = [r.get("sm_clock_mhz") for r in rounds]
    if all(c is None for c in clocks):
        return f"SM clock not read ({rounds[0].get('clock_reason') or 'no clock source'})"
    shown = ", ".join("?" if c is None else f"{c:.0f}" for c in clocks)
    warm = [r["warmup_s"] for r in rounds if r.get("warmup_s") is not None]
    settled = "settled" if all(r.get("warmup_settled") for r in rounds) else "not settled in every round"
    span = f"{min(warm):.1f}-{max(warm):.1f} s" if warm else "none"
    return f"SM clock {_median_clock(rounds):.0f} MHz (rounds {shown}; warm-up {span}, {settled})"


def print_trust(result: dict) -> None:
    """What the trust cell shows of trust.json: times, the clock each side ran at, the verdict."""
    if result["verdict"] == "skipped":
        print(
            f"trust check skipped: {result['reason']}"
            + (f" ({result['label']})" if result.get("label") else "")
        )
        return
    print(f"SDPA cuDNN forward, {result['workload']} on {result['gpu']}")
    for name, side in (
        ("harness (timing.measure):    ", "harness"),
        ("bare CUDA-event loop + flush:", "bare"),
    ):
        print(f"  {name}  {result[f'{side}_ms']:.4f} ms  rounds {result[f'{side}_rounds_ms']}")
        print(f"  {' ' * len(name)}  {clock_text(result.get(f'{side}_rounds'))}")
    print(
        f"  difference {result['relative_difference']:.2%} (limit {result['limit']:.0%}): the trust check "
        f"{result['verdict']}"
    )
    print(f"  correctness: {result.get('correctness') or TRUST_CHECK}")


def cudnn_h200(config: dict) -> tuple[list, list[dict]]:
    """Every provider at NVIDIA's published H200 configuration, and each cuDNN call timed the ways
    NVIDIA's benchmark times it: results.jsonl and timing_methods.json (the cudnn_h200 cell). Refused
    off the machine the profile was resolved on, as the trust check (the cell reads it through gpu_profile)."""
    records, rows = [], []
    if not torch.cuda.is_available():
        print("skipped: this compares GPU timing methods at a 16k-token configuration (needs CUDA)")
    else:
        p = H200_PUBLISHED
        shapes = [Workload(1, p["seq_len"], p["seq_len"], p["heads_q"], p["heads_kv"], p["head_dim"], p["dtype"],
                           mask) for mask in ("full", "causal")]  # fmt: skip
        rows = run_sweep(providers.select(H200_PROVIDERS), shapes, PASSES, peak_tflops=None,
                         timing_options=config["timing"])  # fmt: skip
        for w in shapes:
            records += _timing_methods(w, config["timing"])
            torch.cuda.empty_cache()
    write_jsonl("results.jsonl", rows)
    with open("timing_methods.json", "w") as f:
        json.dump(records, f, indent=2)
    return rows, records


def method_record(
    provider: str, w: Workload, pass_: str, timed: dict[str, dict], over_peak: dict | None = None
) -> dict:
    """One line of timing_methods.json: ms by method (what vendor_cudnn reads), and beside it how each
    method was warmed up and the SM clock its calls ran at (`conditions`), what checks the call, and
    `over_peak`: {method: why} for each method whose TFLOP/s is above a peak (`over_peaks`; None: no
    peak judged them)."""
    return {"provider": provider, "mask": w.mask, "pass": pass_, "flops": flops.attention_flops(w, pass_),
            "ms": {m: t["ms"] for m, t in timed.items()},
            "conditions": {m: {k: v for k, v in t.items() if k != "ms"} for m, t in timed.items()},
            "over_peak": over_peak, "correctness": METHODS_CHECK, "workload": w.label()}  # fmt: skip


def over_peaks(
    provider, w: Workload, pass_: str, timed: dict[str, dict], device, datasheet_tflops
) -> dict | None:
    """{method: why} for each timing method whose TFLOP/s is above a peak, a measurement error and never
    a result: each method is scored as a row is (bench.flops.score: the datasheet's peak of its math and
    SMs x FLOP/clk at the SM clock that method's calls ran at). None where no peak judged any method (a
    quantised kernel, an unknown GPU, no clock): nothing checked, never "below every peak"."""
    verdicts, judged = {}, False
    for method, t in timed.items():
        row = Result(provider.name, provider.family, Status.OK, w, pass_, ms_median=t["ms"],
                     sm_clock_mhz=t.get("sm_clock_mhz"))  # fmt: skip
        flops.score(row, provider, None, datasheet_tflops, device)
        judged = judged or row.mfu_datasheet is not None or row.mfu_at_clock is not None
        if row.over_peak:
            verdicts[method] = row.over_peak
    return verdicts if judged else None


def method_line(record: dict) -> str:
    """'sdpa_cudnn full fwd  events 641.6 @1545 MHz  kernels ...  TFLOP/s' (the cell's progress line)."""
    conditions = record.get("conditions", {})

    def clock(method):
        mhz = conditions.get(method, {}).get("sm_clock_mhz")
        return f" @{mhz:.0f} MHz" if mhz is not None else " @? MHz"

    parts = [f"{m} {record['flops'] / t / 1e9:6.1f}{clock(m)}" for m, t in record["ms"].items()]
    return (
        f"{record['provider']:<16} {record['mask']:<6} {record['pass']:<4} " + "  ".join(parts) + "  TFLOP/s"
    )


def _timing_methods(w: Workload, timing_options: dict) -> list[dict]:
    records = []
    datasheet = flops.datasheet_peak(torch.cuda.get_device_name(0))
    q, k, v = make_inputs(w, "cuda")
    for provider in providers.select(TIMING_METHOD_PROVIDERS):
        for pass_ in ("fwd", "bwd"):
            if provider.why_not(w, pass_):
                continue
            prepared = provider.prepare(q, k, v, w, backward=pass_ != "fwd")
            fn = timing_methods.pass_callable(prepared, pass_)
            timed = timing_methods.compare(fn, timing_options=timing_options, grad=pass_ != "fwd")
            over = over_peaks(provider, w, pass_, timed, "cuda", datasheet)
            records.append(method_record(provider.name, w, pass_, timed, over))
            print(method_line(records[-1]), flush=True)
            del prepared, fn
    return records
