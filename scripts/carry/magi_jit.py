"""python3 scripts/carry/magi_jit.py — device side, in the background (scripts/carry/device.sh): compile the
FFA kernel variants MagiAttention's distributed attention (`magi` in the context-parallel report) calls
that the prebuilt archive (../shared/wheels/magi_flashinfer/built/ffa_built.tgz) lacks, into FFA's JIT cache.

The archive holds the variants `flex_flash_attn_func` uses (bf16 out without atomics, fp32 out with them;
backward with fp32 atomics). The distributed forward writes fp32 partial outputs and, on its first stage,
without atomic reduction; its backward may skip the dK/dV atomics. A first call of an uncompiled variant
compiles inline for minutes (the context-parallel check at world size 1 ran out of its 170 s doing so),
so they are built here, in parallel, while the other libraries arrive. A variant already in the cache is
not rebuilt. Writes one line per variant; exit 1 if any failed.

    python3 scripts/carry/magi_jit.py [--pack ARCHIVE]

--pack writes the variants' .so files (absolute paths under the JIT cache) to ARCHIVE, e.g. under $OUT:
prepare.sh's MAGI_DIST_BUILT=ARCHIVE carries them to the next machine, which then builds nothing."""

import argparse
import sys
import tarfile
import time
from concurrent.futures import ThreadPoolExecutor

import torch
from magi_attention.common.jit import env as jit_env
from magi_attention.functional._flex_flash_attn_jit import get_ffa_jit_spec

F32 = torch.float32
COMMON = {
    "arch": (9, 0),
    "head_dim": 128,
    "compute_dtype": torch.bfloat16,
    "softcap": False,
    "deterministic": False,
}
VARIANTS = {  # what dist_attn.py passes: out_type / dq_type / dk_type = fp32 ("high precision" partials)
    "fwd fp32 first stage": {"direction": "fwd", "output_dtype": F32, "disable_atomic_reduction": True},
    "fwd fp32 accumulate": {"direction": "fwd", "output_dtype": F32, "disable_atomic_reduction": False},
    "bwd fp32 dkv no atomics": {"direction": "bwd", "output_dtype": None, "disable_atomic_reduction": True,
                                "dq_dtype": F32, "dkv_dtype": F32},
    "bwd fp32 atomics": {"direction": "bwd", "output_dtype": None, "disable_atomic_reduction": False,
                         "dq_dtype": F32, "dkv_dtype": F32},
}  # fmt: skip


def shared_object(name: str):
    _spec, uri = get_ffa_jit_spec(**COMMON, **VARIANTS[name])
    return jit_env.MAGI_ATTENTION_JIT_DIR / uri / f"{uri}.so"


def build(name: str) -> str:
    t0 = time.time()
    spec, uri = get_ffa_jit_spec(**COMMON, **VARIANTS[name])
    so = shared_object(name)
    if so.exists() and so.stat().st_size >= 1 << 20:  # prebuilt: a ninja run would rebuild it all
        return f"{name}: cached ({uri})"
    spec.build()
    return f"{name}: built in {time.time() - t0:.0f} s ({uri})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pack", default=None, help="write the variants' .so files to this .tgz")
    args = parser.parse_args()
    failed = 0
    with ThreadPoolExecutor(max_workers=len(VARIANTS)) as pool:
        futures = {name: pool.submit(build, name) for name in VARIANTS}
        for name, future in futures.items():
            try:
                print(future.result(), flush=True)
            except Exception as exc:  # noqa: BLE001 - report every variant
                failed += 1
                print(f"{name}: FAILED {type(exc).__name__}: {exc}", flush=True)
    if args.pack:
        with tarfile.open(args.pack, "w:gz") as archive:
            for name in VARIANTS:
                so = shared_object(name)
                if so.exists():
                    archive.add(so, arcname=str(so).lstrip("/"))  # untarred at / on the next machine
        print(f"packed into {args.pack}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
