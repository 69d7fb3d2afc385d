#!/usr/bin/env bash
# Gather, on a machine WITH network, the wheels our air-gapped GPU machine lacks, into .whl/ (git-ignored;
# scripts/device_run.sh installs them there). Pinned to what was measured.
#   FlashAttention-3 (sm90 build) and CUDA 12's runtime: ../shared/wheels (no PyPI wheel for FA3)
#   xFormers 0.0.35, nvidia-cudnn-frontend 1.32.0, kernels 0.17.2, SageAttention 1.0.6 (pure Triton),
#   nvidia-ml-py 13.615.71 (pynvml, pure Python: bench/clocks.py samples the SM clock through it):
#   PyPI, for CPython 3.12 manylinux x86-64
# Deliberately --no-deps: torch, numpy and huggingface_hub are already on the GPU machine, and
# cudnn-frontend's declared nvidia-cutlass-dsl/apache-tvm-ffi serve only its CuTe-DSL engines (not
# needed for cuDNN's own SDPA on Hopper). flash-attn 2 is NOT fetched (scripts/gpu_machine_notes.yaml says
# why); Transformer Engine, flash-attn-4, MagiAttention's FFA and FlashInfer travel by scripts/carry/.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .whl
shared=${SHARED_WHEELS:-../shared/wheels}
cp "$shared"/flash_attn_3-*.whl "$shared"/nvidia_cuda_runtime_cu12-*.whl .whl/
python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 -d .whl \
  xformers==0.0.35 nvidia-cudnn-frontend==1.32.0 kernels==0.17.2 sageattention==1.0.6 nvidia-ml-py==13.615.71
ls -la .whl
du -sh .whl
