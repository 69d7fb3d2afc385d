"""Worker side of the CP tests: one rank of a gloo group running many cases, writing JSON records.

Correctness: every strategy (and option set) x {causal, full} x {float64, bfloat16} against
single-process attention on the gathered tensors, computed here in float64 with autograd (no
attnbench code). Checked: out, lse, dq, dk, dv of this rank's shard.
Tolerance: |ours - reference|_max <= tol * max(1, |reference|_max), with
  float64: tol 1e-10 for everything (the algorithm is exact; only rounding remains);
  bfloat16: out 1e-2, dq/dk/dv 2e-2 (a few bf16 ulps: block outputs and gradients are bf16, as on
  GPU; measured worst cases at 2, 4 and 8 ranks are 2-4x below these), lse 1e-5 (float32 from the
  same bf16 inputs).
"""

from __future__ import annotations

import json
import traceback
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

BATCH, HEADS, SEQ, HEAD_DIM = 1, 8, 64, 16
TOLERANCES = {
    "float64": {"out": 1e-10, "lse": 1e-10, "dq": 1e-10, "dk": 1e-10, "dv": 1e-10},
    "bfloat16": {"out": 1e-2, "lse": 1e-5, "dq": 2e-2, "dk": 2e-2, "dv": 2e-2},
}


@dataclass(frozen=True)
class Case:
    strategy: str
    causal: bool
    dtype: str
    options: dict = field(default_factory=dict)
    group: str = "world"  # world | single (a 1-rank group) | pairs (2-rank subgroups)

    @property
    def id(self) -> str:
        opts = ",".join(f"{k}={v}" for k, v in self.options.items())
        mask = "causal" if self.causal else "full"
        prefix = "" if self.group == "world" else f"{self.group}-"
        return f"{prefix}{self.strategy}{'[' + opts + ']' if opts else ''}-{mask}-{self.dtype}"


def strategy_configs(world: int) -> list[tuple[str, dict]]:
    configs = [("ring", {}), ("zigzag", {}), ("ulysses", {}), ("allgather", {})]
    usp = [(u, world // u) for u in range(1, world + 1) if world % u == 0]
    if world > 2:  # keep the 2-D ones; degenerate 1 x P and P x 1 are covered at world 2
        usp = [(u, r) for u, r in usp if u > 1 and r > 1]
    configs += [("usp", {"ulysses_degree": u, "ring_degree": r}) for u, r in usp]
    windows = {2: [1, 2], 4: [1, 2, 4], 8: [2, 4]}.get(world, sorted({1, world}))
    for name in ("double_ring", "burst"):
        configs += [(name, {"window": w}) for w in windows]
    return configs


def correctness_cases(world: int) -> list[Case]:
    cases = [
        Case(name, causal, dtype, opts)
        for name, opts in strategy_configs(world)
        for dtype in ("float64", "bfloat16")
        for causal in (True, False)
    ]
    if world == 2:  # world size 1 through a one-rank group: the degenerate path of every strategy
        cases += [Case(name, True, "float64", opts, "single") for name, opts in strategy_configs(1)]
    if world == 4:  # 2-rank subgroups: global ranks differ from group ranks (what P2P peers must use)
        cases += [Case(name, True, "float64", opts, "pairs") for name, opts in strategy_configs(2)]
    return cases


def reference(q, k, v, dout, causal: bool):
    """Single-process float64 attention with autograd: out, lse, dq, dk, dv."""
    q, k, v = (t.detach().to(torch.float64).requires_grad_() for t in (q, k, v))
    logits = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    if causal:
        n = logits.shape[-1]
        logits = logits.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    lse = torch.logsumexp(logits, -1)
    out = torch.softmax(logits, -1) @ v
    out.backward(dout.to(torch.float64))
    return {"out": out.detach(), "lse": lse.detach(), "dq": q.grad, "dk": k.grad, "dv": v.grad}


def global_inputs(dtype: str, heads: int = HEADS, seq: int = SEQ, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    return [
        torch.randn(BATCH, heads, seq, HEAD_DIM, generator=gen, dtype=torch.float64).to(getattr(torch, dtype))
        for _ in range(4)
    ]


class Recorder:
    def __init__(self):
        self.records: list[dict] = []

    def add(self, **record) -> None:
        self.records.append(record)

    def exception(self, case_id: str, exc: BaseException) -> None:
        self.add(
            case=case_id,
            kind="exception",
            type=type(exc).__name__,
            message=str(exc)[:2000],
            traceback=traceback.format_exc()[-3000:],
        )


def check_case(case: Case, rec: Recorder, groups: dict, case_id: str | None = None) -> None:
    from attnbench import cp

    group = groups[case.group]
    world = dist.get_world_size(group)
    rank = dist.get_rank(group)
    q_all, k_all, v_all, dout_all = global_inputs(case.dtype)
    layout = cp.layout_for(case.strategy, world, heads=HEADS, **case.options)
    q, k, v, dout = (layout.shard(t, rank) for t in (q_all, k_all, v_all, dout_all))
    for t in (q, k, v):
        t.requires_grad_()
    out, lse = cp.attention(q, k, v, strategy=case.strategy, causal=case.causal, group=group, **case.options)
    out.backward(dout)
    ref = reference(q_all, k_all, v_all, dout_all, case.causal)
    ours = {"out": out, "lse": lse, "dq": q.grad, "dk": k.grad, "dv": v.grad}
    case_id = case_id or case.id
    for metric, tol in TOLERANCES[case.dtype].items():
        expected = layout.shard(ref[metric], rank)
        got = ours[metric]
        if got is None or got.shape != expected.shape:
            rec.add(
                case=case_id,
                kind="check",
                metric=metric,
                ok=False,
                err=None,
                bound=tol,
                note=f"shape {None if got is None else tuple(got.shape)} vs {tuple(expected.shape)}",
            )
            continue
        err = (got.detach().to(torch.float64) - expected).abs().max().item()
        bound = tol * max(1.0, expected.abs().max().item())
        rec.add(case=case_id, kind="check", metric=metric, err=err, bound=bound, ok=err <= bound)


def _expect_error(rec: Recorder, case_id: str, fn) -> None:
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - the test asserts on type and message
        rec.add(case=case_id, kind="raised", type=type(exc).__name__, message=str(exc)[:2000])
        return
    rec.add(case=case_id, kind="no_error")


def error_cases(world: int, rank: int) -> list[tuple[str, object]]:
    """(case id, callable) pairs; each must raise the same ValueError on every rank."""
    from attnbench import cp

    def shard(seq_local: int, heads: int = HEADS, dtype=torch.float64, dim: int = 4):
        shape = (BATCH, heads, seq_local, HEAD_DIM)[:dim] if dim == 4 else (heads, seq_local, HEAD_DIM)
        return [torch.randn(shape, dtype=dtype) for _ in range(3)]

    def run(strategy, tensors, **kw):
        return lambda: cp.attention(*tensors, strategy=strategy, causal=True, **kw)

    cases = [
        ("err-zigzag-odd-seq", run("zigzag", shard(7))),
        ("err-allgather-odd-seq", run("allgather", shard(5))),
        ("err-ulysses-heads", run("ulysses", shard(8, heads=world + 1))),
        ("err-usp-degrees", run("usp", shard(8), ulysses_degree=world, ring_degree=2)),
        ("err-shape-mismatch", run("zigzag", shard(8 if rank == 0 else 6))),
        ("err-dtype-mismatch", run("ring", shard(8, dtype=torch.float64 if rank == 0 else torch.float32))),
        ("err-option-mismatch", run("double_ring", shard(8), window=1 if rank == 0 else world)),
        ("err-local-rank1", run("ring", shard(8, dim=4 if rank != 1 else 3))),
        ("err-window", run("double_ring", shard(8), window=3)),
        ("err-torch-cp-cpu", run("torch_cp", shard(8))),
        ("err-unknown-kernel", run("ring", shard(8), kernel="nope")),
        ("err-unknown-option", run("ring", shard(8), window=2)),
    ]
    if world >= 4:
        cases.append(("err-usp-heads", run("usp", shard(8, heads=3), ulysses_degree=2)))
    return cases


PEAKS = {"huge": {"fp32": 1e9, "tf32": 1e9}, "tiny": {"fp32": 1e-9, "tf32": 1e-9}}  # TFLOP/s


def run_bench_suite(rec: Recorder) -> None:
    from attnbench.cp.local import MathKernel
    from attnbench.studies.context_parallel import sweep as bench

    small = {
        "seq_len": 32,
        "heads": 4,
        "head_dim": 16,
        "dtype": "float32",
        "min_reps": 2,
        "max_reps": 3,
        "min_time_s": 0.0,
    }
    cases = {
        "bench-zigzag": lambda: bench.measure("zigzag", mask="causal", pass_="fwd_bwd", **small),
        "bench-ring-fwd": lambda: bench.measure("ring", mask="full", pass_="fwd", **small),
        "bench-burst-bwd": lambda: bench.measure("burst", mask="causal", pass_="bwd", **small),
        "bench-torch-cp": lambda: bench.measure("torch_cp", mask="causal", **small),
        "bench-ulysses-heads": lambda: bench.measure("ulysses", mask="causal", **{**small, "heads": 3}),
        "bench-reference": lambda: bench.measure_reference(
            16, mask="causal", heads=4, head_dim=16, dtype="float32", min_reps=2, max_reps=3, min_time_s=0.0
        ),
        # scored against a given measured peak (a CPU has no datasheet or clock peak): far above any CPU's
        # TFLOP/s, a share; far below, an error row on every rank (PEAKS: float32 here runs fp32 or tf32)
        "bench-scored": lambda: bench.measure(
            "zigzag", mask="causal", pass_="fwd", peak_tflops=PEAKS["huge"], **small
        ),
        "bench-over-peak": lambda: bench.measure(
            "zigzag", mask="causal", pass_="fwd", peak_tflops=PEAKS["tiny"], **small
        ),
        "bench-reference-over-peak": lambda: bench.measure_reference(
            16,
            heads=4,
            head_dim=16,
            dtype="float32",
            min_reps=2,
            max_reps=3,
            min_time_s=0.0,
            peak_tflops=PEAKS["tiny"],
        ),
    }
    for case_id, fn in cases.items():
        try:
            rec.add(case=case_id, kind="row", row=fn().to_dict())
        except Exception as exc:  # noqa: BLE001
            rec.exception(case_id, exc)
    # An out-of-memory on rank 1 only: every rank must report the oom row, none may hang.
    original = MathKernel.forward

    def failing_forward(self, *args, **kwargs):
        if dist.get_rank() == 1:
            raise torch.OutOfMemoryError("CUDA out of memory (injected by the test)")
        return original(self, *args, **kwargs)

    MathKernel.forward = failing_forward
    try:
        rec.add(case="bench-oom", kind="row", row=bench.measure("zigzag", mask="causal", **small).to_dict())
    except Exception as exc:  # noqa: BLE001
        rec.exception("bench-oom", exc)
    finally:
        MathKernel.forward = original
    run_reference_oom_cases(rec)


# (case, pass, which SDPA call fails on rank 1, where): call 1 is the checked first call, call 2 the
# steady-state warm-up's (no warm-up floor on a CPU: one call), calls 3-5 the timed repetitions
REFERENCE_OOM_CASES = (
    ("bench-reference-oom-warmup", "fwd_bwd", 2),
    ("bench-reference-oom", "fwd_bwd", 4),
    ("bench-reference-oom-bwd", "bwd", 4),
)


def run_reference_oom_cases(rec: Recorder) -> None:
    """An out-of-memory on rank 1 only, after the reference's first call passed: in the steady-state
    warm-up, in a timed call (fwd_bwd) or in the untimed forward before a timed backward (bwd). Every
    rank must report it."""
    from attnbench.studies.context_parallel import sweep as bench

    original = torch.nn.functional.scaled_dot_product_attention
    for case_id, pass_, failing in REFERENCE_OOM_CASES:
        calls = []

        def failing_sdpa(*args, _calls=calls, _failing=failing, **kwargs):
            _calls.append(1)
            if dist.get_rank() == 1 and len(_calls) == _failing:
                raise torch.OutOfMemoryError("CUDA out of memory (injected by the test)")
            return original(*args, **kwargs)

        torch.nn.functional.scaled_dot_product_attention = failing_sdpa
        try:
            row = bench.measure_reference(
                16, pass_=pass_, heads=4, head_dim=16, dtype="float32", min_reps=3, max_reps=3, min_time_s=0.0
            )
            rec.add(case=case_id, kind="row", row=row.to_dict())
        except Exception as exc:  # noqa: BLE001
            rec.exception(case_id, exc)
        finally:
            torch.nn.functional.scaled_dot_product_attention = original


def main(rank: int, world: int, port: int, suites: list[str], outdir: str) -> None:
    torch.set_num_threads(1)  # many ranks share few cores
    rec = Recorder()
    try:
        dist.init_process_group(
            "gloo",
            init_method=f"tcp://127.0.0.1:{port}",
            rank=rank,
            world_size=world,
            timeout=timedelta(seconds=90),
        )
        groups = {"world": None}
        if "correctness" in suites:
            if world == 2:
                singles = [dist.new_group([r]) for r in range(world)]
                groups["single"] = singles[rank]
            if world == 4:
                pairs = [dist.new_group([0, 1]), dist.new_group([2, 3])]
                groups["pairs"] = pairs[rank // 2]
            for case in correctness_cases(world):
                try:
                    check_case(case, rec, groups)
                except Exception as exc:  # noqa: BLE001
                    rec.exception(case.id, exc)
        if "errors" in suites:
            for case_id, fn in error_cases(world, rank):
                _expect_error(rec, case_id, fn)
            try:  # the group still works after every error above (nothing left half-sent)
                check_case(Case("zigzag", True, "float64"), rec, groups, case_id="after-errors")
            except Exception as exc:  # noqa: BLE001
                rec.exception("after-errors", exc)
        if "bench" in suites:
            run_bench_suite(rec)
        if "sweep" in suites:
            from cp_worker_sweep import run_sweep_suite

            run_sweep_suite(rec)
        dist.barrier()
        dist.destroy_process_group()
    except Exception as exc:
        rec.add(
            case="*",
            kind="crash",
            type=type(exc).__name__,
            message=str(exc)[:2000],
            traceback=traceback.format_exc()[-3000:],
        )
        Path(outdir, f"rank{rank}.json").write_text(json.dumps(rec.records))
        raise
    Path(outdir, f"rank{rank}.json").write_text(json.dumps(rec.records))
