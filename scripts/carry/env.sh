# source scripts/carry/env.sh — device side, from the repository root, BEFORE python starts (the loader
# reads LD_LIBRARY_PATH at exec): where scripts/carry/device.sh installed the peer libraries.
#   /tmp/te      Transformer Engine 2.20.2 (core cu13 + metapackage + torch extension + pydantic)
#   /tmp/fa4     FlashAttention-4 + CuTe DSL;  /tmp/fi  FlashInfer;  /tmp/common  apache-tvm-ffi, c-dlpack
#   /tmp/magi    MagiAttention source tree (FFA) + debugpy stub; its JIT cache in /tmp/magi/ws
#   /tmp/carry/base  the .whl/ wheels that scripts/device_env.sh installs (FA3, xFormers, ...)
NV=$(python3 -c 'import nvidia; print(list(nvidia.__path__)[0])' 2>/dev/null)  # torch's pip CUDA libraries
# libtransformer_engine.so NEEDs libcudnn_*.so.9 without a RUNPATH: without torch's pip cuDNN first on the
# path the loader takes the image's system cuDNN, which clashes ("undefined symbol ... libcudnn_graph.so.9")
if [ -n "$NV" ]; then
  export CUDNN_HOME=$NV/cudnn
  export LD_LIBRARY_PATH=$NV/cudnn/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export PATH=$CUDA_HOME/bin:$PATH
export MAGI_ATTENTION_WORKSPACE_BASE=/tmp/magi/ws   # FFA's JIT cache (the prebuilt kernels are there)
# names FFA's JIT cache folder (.cache/magi_attention/90/...) as when the prebuilt kernels were made (sm90 only)
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0}
export FLASHINFER_WORKSPACE_BASE=/tmp/fi_ws TVM_FFI_CACHE_DIR=/tmp/tvm_ffi_cache
export MAX_JOBS=${MAX_JOBS:-16}
# nvidia_cutlass_dsl adds dsl_packages to sys.path through a .pth file, which python does not read from a
# PYTHONPATH folder: that path goes on PYTHONPATH by hand
export PYTHONPATH=/tmp/te:/tmp/fa4:/tmp/fa4/nvidia_cutlass_dsl/dsl_packages:/tmp/fi:/tmp/common:/tmp/magi/MagiAttention:/tmp/magi/stubs${PYTHONPATH:+:$PYTHONPATH}
export ATTNBENCH_WHEELS=/tmp/carry/base   # scripts/device_env.sh installs these
export PYTHONUNBUFFERED=1
