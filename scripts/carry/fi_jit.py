"""python3 scripts/carry/fi_jit.py SW — device side, in the background (scripts/carry/device.sh): compile
FlashInfer's single-prefill module for the sm90 (FA3) backend, bf16, head dim 128, no RoPE / softcap, into
its JIT cache. SW=1: the sliding-window module, SW=0: the other (full and causal share it; the mask mode is
a run-time switch). These are the modules single_prefill_with_kv_cache picks for the bf16 head-dim-128
workloads of the Flux and mask reports, so the reports find them cached instead of compiling (~96 s each)."""

import sys
import time

import torch

t0 = time.time()
import flashinfer
from flashinfer.jit.attention.modules import gen_single_prefill_module

window = sys.argv[1] == "1"
spec = gen_single_prefill_module(
    "fa3", torch.bfloat16, torch.bfloat16, torch.bfloat16, 128, 128, 0, window, False, False
)
spec.build_and_load()
print(
    f"flashinfer {flashinfer.__version__}: {spec.name} built and loaded in {time.time() - t0:.0f} s",
    flush=True,
)
