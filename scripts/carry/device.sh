#!/usr/bin/env bash
# Device side, FIRST in every carry call, from the repository root:  bash scripts/carry/device.sh [WAIT_S]
# 1. Stash: the carried .carry/ holds only what THIS call carried (earlier calls' folders are gone), so
#    copy the arrivals to /tmp/carry/parts, which survives between calls while the machine stays warm.
# 2. Install every group whose pieces are all there now (once; /tmp/carry/done.<group> marks it).
# 3. Once FlashInfer and MagiAttention are installed, JIT-compile FlashInfer's single-prefill modules and
#    the FFA variants of MagiAttention's distributed attention (magi_jit.py) in the background (setsid:
#    they outlive this call), so that the notebooks find them cached. CARRY_FI_JIT=0 / CARRY_MAGI_JIT=0
#    skip either (a run that needs neither should not be timed while they compile).
# WAIT_S (default 0): wait up to that long for those background JITs before returning (the last call).
# Exit 0 when nothing failed (missing groups are reported, not failures); 2 on a checksum or install error.
set -u
C=${CARRY_DIR:-/tmp/carry}; P=$C/parts; mkdir -p "$P"
REPO=$(pwd)
PIP=${CARRY_PIP:-"python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade"}
echo "--- arrived ($(date +%T)):"; ls -la .carry/c*/ 2>/dev/null | grep -v MANIFEST || echo "(nothing under .carry/)"
# Every call folder holds a MANIFEST, and folders of earlier calls can still lie under .carry/ here (an
# ignored path stays on a warm machine): a second prepare.sh inside one lease (another group) cuts a new
# MANIFEST, so the groups are the union of every MANIFEST seen, not the last one copied
for f in .carry/c*/*; do
  [ -f "$f" ] || continue
  if [ "$(basename "$f")" = MANIFEST ]; then cat "$f" >> "$P/MANIFEST.seen"; else cp "$f" "$P/"; fi
done
[ -f "$P/MANIFEST.seen" ] || { echo "no MANIFEST yet: carry a .carry/cNN folder"; exit 2; }
sort -u "$P/MANIFEST.seen" -o "$P/MANIFEST.seen" && cp "$P/MANIFEST.seen" "$P/MANIFEST"
# one group cut twice (prepare.sh re-run for it within the lease): its pieces may mix, and which cut is the
# newer cannot be told here; say so before the checksum fails
for group in $(cut -d' ' -f1 "$P/MANIFEST" | uniq -d); do
  echo "$group: two cuts seen (prepare.sh ran twice for it in this lease); if its sha256 fails, give the machine back and carry one cut"
done
source "$REPO/scripts/carry/env.sh"

install_small() {
  local d=$1
  # MagiAttention: source tree + debugpy stub in /tmp/magi; the prebuilt .so files hold absolute paths
  # under /tmp/magi (the helper extension inside the source tree, the 4 JIT kernels in the JIT cache)
  mkdir -p /tmp/magi && tar -xJf "$d/magi/magi_src.tar.xz" -C /tmp/magi || return 1
  for built in "$d"/magi/*.tgz; do tar -xzf "$built" -C / || return 1; done  # ffa_built.tgz (+ magi_dist_built.tgz)
  $PIP --target /tmp/common "$d"/common/*.whl || return 1
  mkdir -p /tmp/fi && tar -xzf "$d/fi/flashinfer_stripped.tgz" -C /tmp/fi || return 1
  mkdir -p /tmp/te_small && cp "$d"/te/*.whl /tmp/te_small/ || return 1
  # CARRY_FI_JIT=0 (e.g. a context-parallel run, which needs no FlashInfer): no FlashInfer compile competing
  # with the timed run for the CPUs
  if [ "${CARRY_FI_JIT:-1}" = 0 ]; then
    echo "skipped (CARRY_FI_JIT=0)" > $C/fi_jit.skipped; touch $C/fi_jit.done
    echo "FlashInfer JIT skipped (CARRY_FI_JIT=0)"
  else
    bash "$REPO/scripts/carry/start_fi_jit.sh"
  fi
  # CARRY_MAGI_JIT=0 (e.g. a Flux or mask run, which needs no distributed FFA variant): no compile competing
  # with the timed run for the CPUs
  if [ "${CARRY_MAGI_JIT:-1}" = 0 ]; then
    echo "rc=skipped (CARRY_MAGI_JIT=0)" > $C/magi_jit.log; touch $C/magi_jit.done
    echo "MagiAttention JIT skipped (CARRY_MAGI_JIT=0)"
  else
    # nice: a timed cell that starts while it compiles (the context-parallel gpu cell) keeps the CPUs first;
    # --pack keeps the variants for the next machine (copy $C/magi_dist_built.tgz to $OUT, then .whl/)
    ( setsid nohup bash -c "(nice -n 19 python3 $REPO/scripts/carry/magi_jit.py --pack $C/magi_dist_built.tgz; \
        echo rc=\$?) > $C/magi_jit.log 2>&1; \
        touch $C/magi_jit.done" >/dev/null 2>&1 & )
    echo "MagiAttention distributed FFA variants: JIT started in the background (log: $C/magi_jit.log)"
  fi
}
install_base() { mkdir -p "$ATTNBENCH_WHEELS" && cp "$1"/*.whl "$ATTNBENCH_WHEELS/"; }
# all CuTe DSL wheels in ONE pip call: they share nvidia_cutlass_dsl/, a second --target call replaces it
install_fa4() { rm -rf /tmp/fa4 && $PIP --target /tmp/fa4 "$1"/*.whl; }
install_tecore() {
  [ -f $C/done.small ] || { echo "tecore waits for group small (TE metapackage, torch extension)"; return 3; }
  $PIP --target /tmp/te "$1"/*.whl /tmp/te_small/*.whl
}

status=0
while read -r group count sha; do
  [ -f "$C/done.$group" ] && { echo "$group: installed"; continue; }
  have=$(ls "$P/$group".p* 2>/dev/null | wc -l)
  if [ "$have" -lt "$count" ]; then echo "$group: $have of $count pieces"; continue; fi
  cat "$P/$group".p* > "$C/$group.tar"
  echo "$sha  $C/$group.tar" | sha256sum -c --quiet - || { echo "$group: sha256 mismatch"; status=2; continue; }
  # unpacked apart from $C/base (ATTNBENCH_WHEELS, where install_base puts the wheels to stay)
  U=$C/unpacked/$group
  rm -rf "$U" && mkdir -p "$U" && tar -xf "$C/$group.tar" -C "$U" && rm -f "$C/$group.tar"
  install_"$group" "$U"; rc=$?
  if [ $rc -eq 0 ]; then
    touch "$C/done.$group"; rm -rf "$P/$group".p* "$U"; echo "$group: installed now"
  elif [ $rc -eq 3 ]; then :  # waits for another group: tried again below or next call
  else echo "$group: install failed (rc $rc)"; status=2; fi
done < "$P/MANIFEST"
# tecore may have completed before small: one more try
[ -f $C/done.small ] && [ ! -f $C/done.tecore ] && [ -d $C/unpacked/tecore ] && install_tecore $C/unpacked/tecore \
  && touch $C/done.tecore && rm -rf $C/unpacked/tecore && echo "tecore: installed now"

wait_s=${1:-0}; t0=$(date +%s)
jits_done() { [ -f $C/fi_jit.done ] && [ -f $C/magi_jit.done ]; }
while [ -f $C/done.small ] && ! jits_done && [ $(( $(date +%s) - t0 )) -lt "$wait_s" ]; do sleep 3; done
if [ -f $C/fi_jit.skipped ]; then echo "FlashInfer JIT: skipped (CARRY_FI_JIT=0)"
elif [ -f $C/fi_jit.done ]; then
  grep -q '^rc=0' $C/fi_jit_0.log && grep -q '^rc=0' $C/fi_jit_1.log && echo "FlashInfer JIT: done" \
    || { echo "FlashInfer JIT failed (the report's first FlashInfer call compiles instead):"; tail -n 4 $C/fi_jit_*.log; }
elif [ -f $C/done.small ]; then echo "FlashInfer JIT: still compiling"; fi
if [ -f $C/magi_jit.done ]; then
  if grep -q '^rc=skipped' $C/magi_jit.log; then echo "MagiAttention JIT: skipped (CARRY_MAGI_JIT=0)"
  elif grep -q '^rc=0' $C/magi_jit.log; then sed 's/^/MagiAttention JIT: /' $C/magi_jit.log | tail -n 6
  else echo "MagiAttention JIT failed (its first distributed call compiles instead, inside the timed cell):"
    tail -n 6 $C/magi_jit.log; fi
elif [ -f $C/done.small ]; then echo "MagiAttention JIT: still compiling (a timed run now competes with it for the CPUs)"; fi
[ "$wait_s" -gt 0 ] && PYTHONPATH=$REPO/src:$PYTHONPATH python3 "$REPO/scripts/carry/check_imports.py"
du -sh /tmp/te /tmp/fa4 /tmp/fi /tmp/magi /tmp/common 2>/dev/null
exit $status
