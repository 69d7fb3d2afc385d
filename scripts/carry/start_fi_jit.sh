#!/usr/bin/env bash
# Device side: start FlashInfer's JIT (its two bf16 head-dim-128 single-prefill modules, scripts/carry/fi_jit.py)
# in the background (setsid: it outlives the call); /tmp/carry/fi_jit.done marks its end. scripts/carry/device.sh
# calls it once FlashInfer is installed; a lease whose first calls ran timed work with CARRY_FI_JIT=0 starts it
# here, in a later call that times nothing:  bash scripts/carry/start_fi_jit.sh && bash scripts/carry/device.sh
# Started once per machine: a second start (by hand, or device.sh after one) says so and leaves the first alone.
set -u
C=${CARRY_DIR:-/tmp/carry}
REPO=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$C"
[ -d /tmp/fi ] || { echo "FlashInfer is not installed yet (group small): nothing to compile"; exit 0; }
if [ -f "$C/fi_jit.started" ]; then
  if [ -f "$C/fi_jit.done" ]; then echo "FlashInfer JIT: already ran"; else echo "FlashInfer JIT: already compiling"; fi
  exit 0
fi
rm -f "$C/fi_jit.skipped" "$C/fi_jit.done"
touch "$C/fi_jit.started"
( setsid nohup bash -c 'source "$0/scripts/carry/env.sh"; for sw in 0 1; do (python3 "$0/scripts/carry/fi_jit.py" $sw; echo rc=$?) \
    > "$1/fi_jit_$sw.log" 2>&1 & done; wait; touch "$1/fi_jit.done"' "$REPO" "$C" >/dev/null 2>&1 & )
echo "FlashInfer JIT started in the background (logs: $C/fi_jit_*.log)"
