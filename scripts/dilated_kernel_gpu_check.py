"""GPU check of the fused dilated-attention kernel (kernels/dilated_attention), in under 3 minutes on one
H100/H200, at the dilated report's default shape (batch 1, 16 heads x 128, bf16, the paper's branches
scaled to each length):

1. correctness at a medium length (default 32k: its kept lengths L = 2048 and 2731 are those of every
   longer length, so the tiles the autotuner picks here serve 1M and 2M untuned), causal and full, out and
   dq, dk, dv against the fp32 chunked reference, with bench.correctness's bf16 tolerance;
2. timing with the project's protocol (bench.timing.measure through the report's measure_dilated):
   fused vs the gather path, forward at 1M tokens, forward + backward at 1M, and the fused forward +
   backward at 2M where its memory model says it fits. TFLOP/s on the sparse pattern's FLOPs, peak memory;
3. with --profile: where one fused forward at the first length spends its time, launch by launch (each
   branch's TFLOP/s on its own FLOPs, and whether the GPU waits between launches), beside FlashAttention-3
   and our FlashAttention-2 running the r = 1 branch alone as dense attention over a batch of segments
   (the kernel the fused one must match); with --forward-tiles, first the whole forward at one tile at a
   time. Whole calls are timed with bench.timing's protocol and print the SM clock they ran at.

    PYTHONPATH=src python3 scripts/dilated_kernel_gpu_check.py
    PYTHONPATH=src python3 scripts/dilated_kernel_gpu_check.py --check-len 16384 --gather cudnn --lengths 1048576
    PYTHONPATH=src python3 scripts/dilated_kernel_gpu_check.py --profile --lengths 1048576 --gather fa3

Without a GPU it says so and exits 0. Exits 1 if a checked case is incorrect or fails.
"""

from __future__ import annotations

import argparse
import functools
import sys
import time

try:
    import torch
except ImportError as exc:  # a machine without torch has no GPU to check either
    print(f"torch does not import ({exc}): nothing to check here")
    sys.exit(0)

M = 1 << 20
GATHER_FWD_BWD_GIB_PER_M = (
    84.0  # the gather path's forward + backward peak at 1M tokens (measured on an H200)
)


def show(row, started: float) -> None:
    ms = f"{row.ms_median:9.2f} ms" if row.ms_median is not None else " " * 12
    tf = f"{row.tflops:6.1f} TFLOP/s" if row.tflops else " " * 14
    mem = f"{row.peak_mem_bytes / 2**30:6.1f} GiB" if row.peak_mem_bytes else " " * 10
    err = f"rel_l2 {row.rel_l2:.2e} max_abs {row.max_abs or 0:.2e}" if row.rel_l2 is not None else ""
    print(f"[{time.perf_counter() - started:5.0f} s] {row.provider:<22} {row.workload.mask:<6} {row.pass_:<7} "
          f"{row.workload.seqlen_q:>8} {row.status:<10} {ms} {tf} {mem} {err} {row.reason[:110]}", flush=True)  # fmt: skip


def fits_on_paper(config: dict, seq_len: int, backward: bool) -> tuple[bool, str]:
    from attnbench.kernels.dilated_attention import predicted_peak_bytes

    s = config["shape"]
    need = predicted_peak_bytes(s["batch"], s["heads"], seq_len, s["head_dim"], 2, backward)
    free, _ = torch.cuda.mem_get_info()
    return need <= 0.95 * free, f"predicted peak {need / 2**30:.1f} GiB, {free / 2**30:.1f} GiB free"


def check(config: dict, seq_len: int, started: float) -> int:
    from attnbench.studies.dilated_attention import measure, scaling
    from attnbench.studies.dilated_attention.profiles import branches_for

    references = measure.References(lambda n: branches_for(config, n), "cuda")
    bad = 0
    for mask in ("causal", "full"):
        w = scaling.workload({**config, "sweep": {**config["sweep"], "mask": mask}}, seq_len)
        row = measure.measure_dilated("fused", None, w, "fwd_bwd", branches_for(config, seq_len), device="cuda",
                                      timing_options={}, reference=references.get(w), timed=False)  # fmt: skip
        show(row, started)
        for name, c in (row.extra.get("correctness") or {}).items():
            print(f"      {name:<3} rel_l2 {c['rel_l2']:.2e}  max_abs {c['max_abs']:.2e}  ok {c['ok']}")
        bad += not (row.status == "ok" and row.ok)
        references.clear()
    return bad


def timing_rows(config: dict, gather: list[str], lengths: list[int], started: float) -> list:
    from attnbench.studies.dilated_attention import measure, scaling
    from attnbench.studies.dilated_attention.profiles import branches_for

    rows = []
    for seq_len in lengths:
        w = scaling.workload(config, seq_len)
        for pass_ in ("fwd", "fwd_bwd"):
            candidates = [("fused", None)] + ([("gather", b) for b in gather] if seq_len <= M else [])
            for implementation, backend in candidates:
                if implementation == "fused":
                    fits, why = fits_on_paper(config, seq_len, pass_ != "fwd")
                    if not fits:
                        print(f"           dilated_fused {pass_} {seq_len}: skipped, {why}")
                        continue
                elif pass_ != "fwd" and backend == "fa3":  # FA3 cannot report an OOM: it ends the process
                    free = torch.cuda.mem_get_info()[0] / 2**30
                    if GATHER_FWD_BWD_GIB_PER_M * seq_len / M > 0.9 * free:
                        print(
                            f"           dilated_gather_fa3 {pass_} {seq_len}: skipped, ~84 GiB per 1M > {free:.0f} free"
                        )
                        continue
                row = measure.measure_dilated(implementation, backend, w, pass_, branches_for(config, seq_len),
                                              device="cuda", timing_options=config["timing"])  # fmt: skip
                rows.append(row)
                show(row, started)
    return rows


def _flops(config: dict, branches, seq_len: int) -> float:
    """The forward FLOPs of `branches` (pattern.forward_flops: 4 · head_dim · pairs) at the profile's shape."""
    from attnbench.dilated import pattern

    s, causal = config["shape"], _causal(config)
    return pattern.forward_flops(branches, seq_len, s["heads"], s["head_dim"], s["batch"], causal)


def _causal(config: dict) -> bool:
    return config["sweep"].get("mask", "causal") == "causal"


def _timed(fn, what: str, flops: float) -> float:
    """ms of fn() under the project's timing protocol (steady-state warm-up, >= 5 calls and 300 ms),
    printed with its TFLOP/s and the SM clock it ran at."""
    from attnbench.bench import timing

    t = timing.measure(fn, device="cuda", min_reps=5, min_time_ms=300.0)
    clock = f" @{t.sm_clock_mhz:.0f} MHz" if t.sm_clock_mhz else ""
    print(f"  {what}: {t.ms_median:8.2f} ms {flops / t.ms_median / 1e9:6.1f} TFLOP/s{clock}", flush=True)
    return t.ms_median


def parse_tiles(text: str, causal: bool) -> list[tuple[int, ...]]:
    """'BM,BN,warps,stages;...' as tuples; ValueError naming the tile that is not four integers or that a
    causal forward cannot take (BLOCK_M a multiple of BLOCK_N: the diagonal stage is whole key blocks)."""
    tiles = []
    for item in text.split(";"):
        try:
            tile = tuple(int(x) for x in item.split(","))
        except ValueError:
            tile = ()
        if len(tile) != 4 or min(tile) < 1:
            raise ValueError(
                f"--forward-tiles: {item!r} is not BLOCK_M,BLOCK_N,warps,stages (four positive integers)"
            )
        if causal and tile[0] % tile[1]:
            raise ValueError(f"--forward-tiles: {item!r}: a causal tile needs BLOCK_M % BLOCK_N == 0")
        tiles.append(tile)
    return tiles


def forward_tile_sweep(config: dict, seq_len: int, tiles: list[tuple[int, ...]]) -> None:
    """The whole fused forward at seq_len with the autotuner held to one tile at a time (launch.py's
    FORWARD_TILES are the candidates it picks from): which tile a new candidate list should hold. Timing
    only: a tile's results are checked by the correctness run once it is a candidate."""
    from attnbench.kernels.dilated_attention import dilated_attention, launch
    from attnbench.kernels.dilated_attention.forward import dilated_fwd_kernel
    from attnbench.studies.dilated_attention.profiles import branches_for

    s = config["shape"]
    branches = branches_for(config, seq_len)
    flops = _flops(config, branches, seq_len)
    shape = (s["batch"], s["heads"], seq_len, s["head_dim"])
    q, k, v = [torch.randn(shape, device="cuda", dtype=torch.bfloat16) for _ in range(3)]
    call = functools.partial(
        dilated_attention, q, k, v, [(b.w, b.r) for b in branches], causal=_causal(config)
    )
    held = launch._forward_tuned
    print(f"\nfused forward, S {seq_len}, one tile at a time (BLOCK_M, BLOCK_N, warps, stages):")
    try:
        for tile in tiles:
            launch._forward_tuned = launch._tuned(dilated_fwd_kernel, [tile], launch.BLOCK_NAMES["forward"],
                                                  ["ACC", "OUT", "LSE"])  # fmt: skip
            try:
                _timed(call, str(tile), flops)
            except Exception as exc:  # noqa: BLE001 - a tile that fails to compile or launch is a result
                print(f"  {tile}: {type(exc).__name__}: {str(exc).splitlines()[0][:120]}", flush=True)
    finally:
        launch._forward_tuned = held


def profile_forward(config: dict, seq_len: int) -> None:
    """Each launch of one fused forward (torch.profiler), the branch it runs and its TFLOP/s; then the
    r = 1 branch as dense attention over [N / w segments, w, heads, head_dim] with FA3 and our FA2."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    from attnbench.kernels.dilated_attention import dilated_attention
    from attnbench.kernels.dilated_attention.launch import forward_order
    from attnbench.kernels.flash_attention2 import flash_attention
    from attnbench.studies.dilated_attention.profiles import branches_for

    s, causal = config["shape"], _causal(config)
    branches = {(b.w, b.r): b for b in branches_for(config, seq_len)}
    shape = (s["batch"], s["heads"], seq_len, s["head_dim"])
    q, k, v = [torch.randn(shape, device="cuda", dtype=torch.bfloat16) for _ in range(3)]
    call = functools.partial(dilated_attention, q, k, v, list(branches), causal=causal)
    print(f"\nfused forward, S {seq_len}, {'causal' if causal else 'full'}:")
    _timed(call, "the whole forward", _flops(config, list(branches.values()), seq_len))
    calls = 3  # the first call's launches are printed; all three say whether the GPU waits between them
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            call()
        torch.cuda.synchronize()
    every = sorted(
        (e for e in prof.events() if e.device_type == DeviceType.CUDA), key=lambda e: e.time_range.start
    )
    per_call = len(every) // calls  # every call launches the same kernels (its branches, one fill)
    for i in range(calls):  # kernel time against the span from its first kernel's start to its last's end
        mine = every[i * per_call : (i + 1) * per_call]
        busy = sum(getattr(e, "device_time", None) or e.cuda_time for e in mine) / 1e3
        span = (mine[-1].time_range.end - mine[0].time_range.start) / 1e3
        print(f"call {i + 1} of {calls} under the profiler: kernels {busy:.2f} ms, first start to last end "
              f"{span:.2f} ms (the GPU idles {span - busy:.2f} ms between launches)")  # fmt: skip
    order = iter(forward_order(list(branches)))
    print("launch by launch (the first profiled call):")
    for e in every[:per_call]:
        us = getattr(e, "device_time", None) or e.cuda_time
        line = f"  {us / 1e3:8.3f} ms  {e.name[:60]}"
        if "dilated_fwd" in e.name:
            w, r = next(order)
            line += f"  (w={w}, r={r}) {_flops(config, [branches[w, r]], seq_len) / (us * 1e6):6.1f} TFLOP/s"
        print(line, flush=True)
    del q, k, v, call
    w = next((w for w, r in branches if r == 1), None)
    if w is None:
        print("  no r = 1 branch: no dense comparison")
        return
    n = s["batch"] * seq_len // w
    dense = [
        torch.randn(n, w, s["heads"], s["head_dim"], device="cuda", dtype=torch.bfloat16) for _ in range(3)
    ]
    flops = _flops(config, [branches[w, 1]], seq_len)
    runs = {"our FA2 (triton)": lambda: flash_attention(*(t.transpose(1, 2) for t in dense), causal=causal)}
    try:
        from flash_attn_interface import flash_attn_func

        runs["FA3"] = lambda: flash_attn_func(*dense, causal=causal)
    except ImportError as exc:
        print(f"  FA3 not importable ({exc}): carry its wheel (scripts/carry) to compare")
    for name, fn in runs.items():
        _timed(fn, f"dense r = 1 branch ({n} segments x {w}), {name}", flops)


def summary(rows: list) -> None:
    """The issue's target: the fused forward at 1M tokens >= 2x the gather path's TFLOP/s."""
    by = {(r.provider, r.pass_, r.workload.seqlen_q): r for r in rows if r.tflops}
    for pass_ in ("fwd", "fwd_bwd"):
        fused = by.get(("dilated_fused", pass_, M))
        for (provider, p, n), row in sorted(by.items()):
            if fused and p == pass_ and n == M and provider.startswith("dilated_gather"):
                print(f"{pass_} 1M: fused {fused.tflops:.1f} TFLOP/s vs {provider} {row.tflops:.1f}: "
                      f"{fused.tflops / row.tflops:.2f}x ({fused.ms_median:.1f} vs {row.ms_median:.1f} ms)")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check-len", type=int, default=32768)
    parser.add_argument(
        "--gather", default="fa3,cudnn", help="gather-path backends to time beside the fused kernel"
    )
    parser.add_argument("--lengths", default=f"{M},{2 * M}")
    parser.add_argument("--profile", action="store_true", help="only the launch-by-launch forward profile")
    parser.add_argument(
        "--forward-tiles",
        default="",
        help="with --profile, first time the forward at each tile: 'BM,BN,warps,stages;...'",
    )
    args = parser.parse_args()
    if args.forward_tiles and not args.profile:
        parser.error("--forward-tiles goes with --profile")
    try:  # the default profile's mask decides what a tile must satisfy; checked before any GPU work
        from attnbench.studies.dilated_attention import profiles as dilated_profiles

        causal = _causal(dilated_profiles.resolve("default", cuda=True))
        tiles = parse_tiles(args.forward_tiles, causal) if args.forward_tiles else []
    except ValueError as exc:
        parser.error(str(exc))
    if not torch.cuda.is_available():
        print(
            "no CUDA device: this check times the fused kernel on a GPU (the CPU tests are tests/test_dilated_kernel.py)"
        )
        return 0
    from attnbench.kernels import dilated_attention
    from attnbench.studies.dilated_attention import profiles

    config = profiles.resolve("default", cuda=True)
    started = time.perf_counter()
    print(f"{torch.cuda.get_device_name()}  torch {torch.__version__}  shape {config['shape']}", flush=True)
    if args.profile:
        length = int(args.lengths.split(",")[0])
        if args.forward_tiles:
            forward_tile_sweep(config, length, tiles)
        profile_forward(config, length)
        print("tiles:", dilated_attention.best_tiles())
        return 0
    bad = check(config, args.check_len, started)
    rows = timing_rows(config, [b for b in args.gather.split(",") if b], [int(n) for n in args.lengths.split(",")],
                       started)  # fmt: skip
    summary(rows)
    print("tiles:", dilated_attention.best_tiles())
    bad += sum(r.status in ("error", "incorrect") and r.provider == "dilated_fused" for r in rows)
    print(
        "all correct" if not bad else f"{bad} failing fused cases", f"({time.perf_counter() - started:.0f} s)"
    )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
