#!/usr/bin/env bash
# Device side: start FlashInfer's JIT (its two bf16 head-dim-128 single-prefill modules, scripts/carry/fi_jit.py)
# in the background (setsid: it outlives the call); /tmp/carry/fi_jit.done marks its end. scripts/carry/device.sh
# calls it once FlashInfer is installed; a lease whose first calls ran timed work with CARRY_FI_JIT=0 starts it
# here, in a later call that times nothing:  bash scripts/carry/start_fi_jit.sh && bash scripts/carry/device.sh
set -u
C=${CARRY_DIR:-/tmp/carry}
REPO=$(pwd)
[ -d /tmp/fi ] || { echo "FlashInfer is not installed yet (group small): nothing to compile"; exit 0; }
rm -f "$C/fi_jit.skipped" "$C/fi_jit.done"
( setsid nohup bash -c "source $REPO/scripts/carry/env.sh; for sw in 0 1; do (python3 $REPO/scripts/carry/fi_jit.py \$sw; echo rc=\$?) \
    > $C/fi_jit_\$sw.log 2>&1 & done; wait; touch $C/fi_jit.done" >/dev/null 2>&1 & )
echo "FlashInfer JIT started in the background (logs: $C/fi_jit_*.log)"
