# Source this on the air-gapped GPU machine, from the repository root: installs the wheels gathered by
# scripts/fetch_wheels.sh into .whl/ (carry it) as ../shared/wheels/README.md says, and exports the
# environment every GPU run uses (scripts/device_run.sh sources it; so can a one-off probe).
# Everything goes into /tmp/site (on PYTHONPATH) except CUDA 12's runtime, which gets its own target so
# that its nvidia/ package cannot shadow torch's CUDA 13 libraries; its lib folder goes on
# LD_LIBRARY_PATH, where xFormers' CUDA-12 _C.so finds libcudart.so.12.
# ATTNBENCH_WHEELS: where the wheels are (default .whl; scripts/carry/env.sh points it at /tmp/carry/base)
W=${ATTNBENCH_WHEELS:-.whl}
pip_install() { python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$@"; }
shopt -s nullglob
cuda12=("$W"/nvidia_cuda_runtime_cu12-*.whl)
others=(); for w in "$W"/*.whl; do [[ $w == "$W"/nvidia_cuda_runtime_cu12-* ]] || others+=("$w"); done
if [ ${#others[@]} -gt 0 ]; then
  pip_install /tmp/site "${others[@]}" || { echo "wheel install failed"; return 3; }
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
if [ ${#cuda12[@]} -gt 0 ]; then
  pip_install /tmp/cu12 "${cuda12[@]}" || { echo "CUDA 12 runtime install failed"; return 3; }
  export LD_LIBRARY_PATH=/tmp/cu12/nvidia/cuda_runtime/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
shopt -u nullglob
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
export ATTNBENCH_PROVIDER_NOTES=$PWD/scripts/gpu_machine_notes.yaml
