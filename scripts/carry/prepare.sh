#!/usr/bin/env bash
# Host side, on a machine WITH network, from the repository root:  bash scripts/carry/prepare.sh
# Gathers everything the peer providers need on our air-gapped GPU machine and cuts it into call
# folders .carry/c01, .carry/c02, ... (git-ignored), each small enough to travel in ONE device call
# together with the project's own tree (a call carries at most 64 MiB in all). The lead then issues
# one call per folder, back to back, each `bash scripts/carry/device.sh` (see scripts/carry/README.md).
#
# Groups (each a tar, cut into pieces; a group is installed on the device once all its pieces arrived):
#   small   TE 2.20.2 metapackage + pydantic deps + the prebuilt transformer_engine_torch wheel (torch
#           2.11.0+cu130, py3.12), MagiAttention FFA source + prebuilt kernels, FlashInfer 0.7.2.post1
#           (stripped: no data/csrc/*/ kernel sources of other ops), apache-tvm-ffi + torch-c-dlpack-ext.
#           First, so that FlashInfer's JIT can compile in the background while the rest travels.
#   base    .whl/ of scripts/fetch_wheels.sh (FA3, xFormers, cuDNN frontend, ...: device_env.sh's wheels)
#   fa4     flash-attn-4 4.0.0b36 + CuTe DSL 4.8.1 wheels (libs-cu13 only) + quack-kernels
#   tecore  transformer-engine-cu13 2.20.2 (276 MB)
# CARRY_GROUPS (default "small base fa4 tecore"): the groups to cut, in the order they travel. "base small"
# carries FA3, xFormers, ... first and then FFA and FlashInfer, in 2 calls with the tree at 22 MB: what the
# mask report needs without TE and FA4, and what a notebook needing no peer can ride along with from call 1.
# Sizes: CALL_MIB (default 64) minus the tree that travels with every call (measured here) minus
# MARGIN_MIB (default 3) is what each call folder may hold.
set -euo pipefail
CARRY_GROUPS=${CARRY_GROUPS:-small base fa4 tecore}
for g in $CARRY_GROUPS; do  # checked before any download
  case $g in small|base|fa4|tecore) ;; *) echo "CARRY_GROUPS: unknown group '$g' (small, base, fa4, tecore)" >&2; exit 2;; esac
done
cd "$(dirname "$0")/../.."
SHARED=${SHARED_WHEELS:-../shared/wheels}
DL=${DL:-/tmp/attnbench_carry_dl}
STAGE=.carry
TE_VER=2.20.2; FA4_VER=4.0.0b36; DSL_VER=4.8.1; FI_VER=0.7.2.post1
PLAT="--only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64
  --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64
  --platform manylinux2014_x86_64 --platform any"
PIPDL="python3 -m pip download -q --no-deps $PLAT"
mkdir -p "$DL"/{small/te,small/magi,small/fi,small/common,fa4,tecore}

# --- small ---------------------------------------------------------------------------------------
# TE's import check wants the metapackage's dist-info at the core's version; TE imports pydantic.
$PIPDL -d "$DL/small/te" "transformer-engine==$TE_VER" "pydantic==2.14.4" "pydantic-core==2.50.5" \
  "annotated-types==0.8.0" "typing-inspection==0.4.5"
cp "$SHARED"/transformer_engine_torch-$TE_VER-cp312-cp312-linux_x86_64.whl "$DL/small/te/"
cp "$SHARED"/magi_flashinfer/src/magi_src.tar.xz "$SHARED"/magi_flashinfer/built/ffa_built.tgz "$DL/small/magi/"
# MAGI_DIST_BUILT: an archive of the distributed-attention FFA variants that an earlier device call built and
# packed (scripts/carry/magi_jit.py --pack); unpacked beside ffa_built.tgz, it spares the next machine the JIT
# (default: .whl/magi_dist_built.tgz where an earlier lease's archive was kept; on 2x H200 the JIT took ~6 min)
rm -f "$DL"/small/magi/magi_dist_built.tgz
MAGI_DIST_BUILT=${MAGI_DIST_BUILT-$( [ -s .whl/magi_dist_built.tgz ] && echo .whl/magi_dist_built.tgz || true )}
if [ -n "${MAGI_DIST_BUILT:-}" ]; then cp "$MAGI_DIST_BUILT" "$DL/small/magi/magi_dist_built.tgz"; fi
# import flashinfer needs tvm_ffi; FA4's CuTe DSL needs both: one copy in common/
$PIPDL -d "$DL/small/common" "apache-tvm-ffi==0.1.15.post2" "torch-c-dlpack-ext==0.1.5"
if [ ! -s "$DL/small/fi/flashinfer_stripped.tgz" ]; then
  $PIPDL -d "$DL/fi_whl" "flashinfer-python==$FI_VER"
  X=$(mktemp -d)
  (cd "$X" && unzip -q "$DL"/fi_whl/flashinfer_python-$FI_VER-py3-none-any.whl 'flashinfer/*' \
     "flashinfer_python-$FI_VER.dist-info/*")
  # the single-prefill JIT needs only csrc's top-level files (+ data/include, cutlass, cccl, spdlog);
  # flashinfer/experimental must stay (flashinfer.gemm imports it at `import flashinfer`)
  find "$X/flashinfer/data/csrc" -mindepth 1 -maxdepth 1 -type d -exec rm -rf {} +
  tar -C "$X" -czf "$DL/small/fi/flashinfer_stripped.tgz" flashinfer "flashinfer_python-$FI_VER.dist-info"
  rm -rf "$X"
fi

# --- fa4 (libs-base needs libs-core, the python `cutlass.cute`; take libs-cu13, not the plain cu12) --
$PIPDL --pre -d "$DL/fa4" "flash-attn-4==$FA4_VER" "nvidia-cutlass-dsl==$DSL_VER" \
  "nvidia-cutlass-dsl-libs-base==$DSL_VER" "nvidia-cutlass-dsl-libs-core==$DSL_VER" \
  "nvidia-cutlass-dsl-libs-cu13==$DSL_VER" "quack-kernels==0.6.5"

# --- tecore ----------------------------------------------------------------------------------------
$PIPDL -d "$DL/tecore" "transformer-engine-cu13==$TE_VER"

# --- base: what scripts/fetch_wheels.sh gathers ----------------------------------------------------
[ -n "$(ls .whl/*.whl 2>/dev/null)" ] || bash scripts/fetch_wheels.sh
rm -rf "$DL/base" && mkdir -p "$DL/base" && cp .whl/*.whl "$DL/base/"

# --- tars, pieces, call folders --------------------------------------------------------------------
for g in $CARRY_GROUPS; do (cd "$DL/$g" && tar cf "$DL/$g.tar" .); done
# tracked files missing from the working tree (outputs/ moved aside so that more travels per call) do not
# travel: du skips them (and xargs then exits 123, hence the `|| true`)
tree=$( (git ls-files -z; git ls-files -z --others --exclude-standard) | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1) || true
budget=$(( ${CALL_MIB:-64} * 1048576 - tree - ${MARGIN_MIB:-3} * 1048576 ))
echo "tree that travels with every call: $tree B; each call folder holds at most $budget B"
rm -rf "$STAGE" && mkdir -p "$STAGE"
tars=(); for g in $CARRY_GROUPS; do tars+=("$DL/$g.tar"); done
python3 scripts/carry/cut.py "$STAGE" "$budget" "${tars[@]}"
du -sb "$STAGE"/c* ; du -sh "$STAGE"
