"""Compile every FlashAttention-2 tile candidate for Hopper (sm_90) on this machine, no GPU needed.

For each dtype, head dim, mask and candidate tile it runs Triton's full compiler (TTIR -> TTGIR -> PTX ->
ptxas cubin) for `cuda:90` and prints registers per thread, spilled bytes, shared memory and whether the
loop was warp-specialised, so a tile that cannot compile or does not fit shows up before a GPU run.

    uv run python scripts/check_triton_fa2_sm90.py                # every candidate
    uv run python scripts/check_triton_fa2_sm90.py --head-dims 64 --dtypes bfloat16 --quick

Exit code 1 if any candidate fails to compile or exceeds the 227 KB of shared memory a block may use.
It checks compilation and resources only; speed and correctness are measured on the GPU by the CS336
notebook's tile audit.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "0"  # compile for real: the package would pick the interpreter without a GPU

import triton
from triton.backends.compiler import GPUTarget

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from attnbench.kernels.flash_attention2 import configs
from attnbench.kernels.flash_attention2.backward import (
    DQ_BULK_REDUCE,
    DQ_OWN_KERNEL,
    flash_bwd_dkdv_kernel,
    flash_bwd_dq_kernel,
)
from attnbench.kernels.flash_attention2.forward import flash_fwd_kernel

HOPPER = GPUTarget("cuda", 90, 32)
SHARED_LIMIT = 232448  # bytes of shared memory one block may use on sm_90
TYPE = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}
SIZE = {"bfloat16": 2, "float16": 2, "float32": 4}


def signature(kernel, pointer_type: str, constexprs: dict) -> tuple[dict, dict]:
    """Triton signature and the divisibility hints the runtime gives aligned pointers and strides."""
    sig, attrs = {}, {}
    for i, name in enumerate(kernel.arg_names):
        if name in constexprs:
            sig[name] = "constexpr"
        elif name.isupper() and name not in ("DQ_ACC", "LSE", "DELTA"):
            sig[name] = "*" + pointer_type
            attrs[(i,)] = [["tt.divisibility", 16]]
        elif name in ("LSE", "DELTA", "DQ_ACC"):
            sig[name] = "*fp32"
            attrs[(i,)] = [["tt.divisibility", 16]]
        elif name == "sm_scale":
            sig[name] = "fp32"
        else:
            sig[name] = "i32"
            if name.startswith("stride"):
                attrs[(i,)] = [["tt.divisibility", 16]]
    return sig, attrs


def resources(ptx: str) -> dict:
    """Registers per thread and spilled bytes, from `ptxas -v` on the kernel's PTX (Triton ships ptxas;
    newer Triton versions ship a second one for newer PTX, so each is tried)."""
    tools = sorted((Path(triton.__file__).parent / "backends" / "nvidia" / "bin").glob("ptxas*"))
    with tempfile.TemporaryDirectory() as folder:
        source = Path(folder) / "kernel.ptx"
        source.write_text(ptx)
        for tool in tools:
            proc = subprocess.run(
                [str(tool), "-v", "-arch=sm_90a", str(source), "-o", str(Path(folder) / "kernel.cubin")],
                capture_output=True, text=True, check=False,
            )  # fmt: skip
            if proc.returncode == 0:
                regs = re.search(r"Used (\d+) registers", proc.stderr)
                spill = re.search(r"(\d+) bytes spill stores", proc.stderr)
                return {"regs": int(regs[1]) if regs else "?", "spill": int(spill[1]) if spill else "?"}
    return {"regs": "?", "spill": "?"}


def compile_one(kernel, dtype: str, constexprs: dict, warps: int, stages: int) -> dict:
    sig, attrs = signature(kernel, TYPE[dtype], constexprs)
    source = triton.compiler.ASTSource(fn=kernel, signature=sig, constexprs=constexprs, attrs=attrs)
    compiled = triton.compile(source, target=HOPPER, options={"num_warps": warps, "num_stages": stages})
    ttgir = compiled.asm["ttgir"]
    return {
        "shared": compiled.metadata.shared,
        "warp_specialized": "ttg.warp_specialize" in ttgir,
        **resources(compiled.asm["ptx"]),
    }


def report_compile(what: str, kernel, dtype: str, constexprs: dict, warps: int, stages: int) -> bool:
    """Compile one kernel for sm_90 and print a line: registers, spills, shared memory (FAIL when it does
    not compile or needs more shared memory than a block may use). True when it fits."""
    try:
        r = compile_one(kernel, dtype, constexprs, warps, stages)
    except Exception as exc:  # noqa: BLE001 - report every failure, keep going
        print(f"FAIL {what}: {type(exc).__name__}: {str(exc).strip().splitlines()[0][:200]}")
        return False
    fits = r["shared"] <= SHARED_LIMIT
    print(
        f"{'ok  ' if fits else 'FAIL'} {what:<62} regs {r.get('regs', '?'):>3} "
        f"spill {r.get('spill', '?'):>5} B  smem {r['shared'] / 1024:6.1f} KB"
        f"{'  warp-specialised' if r['warp_specialized'] else ''}",
        flush=True,
    )
    return fits


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtypes", nargs="+", default=list(TYPE))
    parser.add_argument("--head-dims", nargs="+", type=int, default=[64, 128])
    parser.add_argument("--quick", action="store_true", help="causal only, forward and backward")
    parser.add_argument(
        "--first",
        action="store_true",
        help="only the first tile of each kind (forward, warp-specialised, persistent, backward)",
    )
    args = parser.parse_args()
    print(f"triton {triton.__version__}, target {HOPPER}")
    failures = 0
    for dtype in args.dtypes:
        for head_dim in args.head_dims:
            d_pad = 1 << (head_dim - 1).bit_length()
            for causal in (True,) if args.quick else (False, True):
                base = {"HEAD_DIM": head_dim, "D_PAD": d_pad, "CAUSAL": causal, "MMA_MODE": 0}
                forward = configs.forward_candidates(SIZE[dtype], d_pad, causal)
                backward = configs.backward_candidates(SIZE[dtype], d_pad)
                if args.first:  # the first plain, warp-specialised and persistent forward tile
                    forward = (
                        [t for t in forward if not (t.warp_specialize or t.persistent)][:1]
                        + [t for t in forward if t.warp_specialize][:1]
                        + [t for t in forward if t.persistent][:1]
                    )
                    backward = backward[:1]
                jobs = [
                    (flash_fwd_kernel, tile, {**base, **tile.meta()}, tile.warps, tile.stages)
                    for tile in forward
                ]
                for accumulate in (
                    DQ_OWN_KERNEL,
                    DQ_BULK_REDUCE,
                ):  # what a GPU runs for dq_mode recompute, atomic
                    jobs += [
                        (flash_bwd_dkdv_kernel, tile, {**base, **tile.dkdv_meta(), "DQ_ACCUMULATE": accumulate.value},
                         tile.warps, tile.stages)
                        for tile in backward
                    ]  # fmt: skip
                jobs += [
                    (flash_bwd_dq_kernel, tile, {**base, **tile.dq_meta()}, *tile.dq_launch)
                    for tile in backward
                ]
                for kernel, tile, constexprs, warps, stages in jobs:
                    what = f"{dtype:<9} d{head_dim:<4} {'causal' if causal else 'full':<7} {tile.label()}"
                    what += {flash_bwd_dq_kernel: " dq-kernel", flash_bwd_dkdv_kernel: " dkdv-kernel"}.get(
                        kernel, ""
                    )
                    what += " atomic-dq (bulk reduce)" if constexprs.get("DQ_ACCUMULATE") else ""
                    failures += not report_compile(what, kernel, dtype, constexprs, warps, stages)
    print(f"{failures} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
