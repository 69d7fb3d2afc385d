#!/usr/bin/env bash
# Run notebooks on an air-gapped GPU machine with its own python3 (torch preinstalled) and pack the
# results into one archive under $OUT (or ./device-out), ready for `attnbench merge` into outputs/ and a commit.
#   scripts/device_run.sh notebooks/flux_attention.md [more notebooks] [-- extra attnbench run args]
# The carried wheels (.whl/, from scripts/fetch_wheels.sh) are installed first: scripts/device_env.sh.
#
# Calls of one lease chain: every call sends the tree as committed here, without what earlier calls
# measured, so each call keeps the label folders it wrote in ATTNBENCH_DEVICE_STORE (default
# /tmp/attnbench-outputs, which lives as long as the machine stays warm) and the next call puts them
# back before it runs. A cell that needs one measured by an earlier call then finds it cached, and the
# archive of the last call holds every label folder the lease wrote, with no unpacking between calls.
# The archive is packed again whenever a run.json changes (the engine writes it after every finished
# cell), so a call cut without warning still returns the cells it finished.
set -uo pipefail
out=${OUT:-device-out}; mkdir -p "$out"
store=${ATTNBENCH_DEVICE_STORE:-/tmp/attnbench-outputs}
every=${ATTNBENCH_PACK_EVERY:-20}  # seconds between packs while the run goes (below)
case "$every" in ''|*[!0-9]*) echo "ATTNBENCH_PACK_EVERY=$every: expected whole seconds (0: no packing while the run goes)" >&2; exit 2;; esac
source "$(dirname "$0")/device_env.sh" || exit 3
# The commit the results come from (result.json "code"): a copy without .git names it through
# ATTNBENCH_CODE_COMMIT, or a .code-commit file made before copying (git rev-parse HEAD > .code-commit).
if [ -z "${ATTNBENCH_CODE_COMMIT:-}" ] && [ ! -d .git ] && [ -f .code-commit ]; then
  ATTNBENCH_CODE_COMMIT=$(cat .code-commit); export ATTNBENCH_CODE_COMMIT
fi
notebooks=(); extra=()
while [ $# -gt 0 ]; do
  if [ "$1" = "--" ]; then shift; extra=("$@"); break; fi
  notebooks+=("$1"); shift
done
# label folders (outputs/<notebook>/<label>) that earlier calls of this lease wrote
stored() { [ -d "$store" ] && (cd "$store" && find . -mindepth 2 -maxdepth 2 -type d | sed 's,^\./,,' | sort); }
for folder in $(stored); do
  rm -rf "outputs/$folder" && mkdir -p "outputs/$(dirname "$folder")" && cp -a "$store/$folder" "outputs/$folder" \
    && echo "restored outputs/$folder (written by an earlier call on this machine)" \
    || echo "could not restore outputs/$folder from $store: its cells run again"
done
nvidia-smi -L || true
marker=$(mktemp); sleep 1  # run.json files newer than this: the label folders this run wrote
# the label folders whose run.json is newer than file $1 (this run's: newer than $marker)
newer() { find outputs -mindepth 3 -maxdepth 3 -name run.json -newer "$1" 2>/dev/null | sed 's,^outputs/,,; s,/run.json$,,' | sort; }
written() { newer "$marker"; }
# what this run wrote and what earlier calls kept, once each, from outputs/ (where both are now), into
# $out/outputs.tgz; through a .part file so that a call cut mid-pack still returns the last whole archive.
# A running cell's staging folder and a lock are left out: they change while tar reads them (merge
# ignores dot entries anyway). Non-zero (tar's message on stderr) when nothing whole was packed.
pack() {
  local folders=() folder
  for folder in $( (written; stored) | sort -u); do [ -d "outputs/$folder" ] && folders+=("outputs/$folder"); done
  [ ${#folders[@]} -gt 0 ] || return 0
  tar czf "$out/outputs.tgz.part" --exclude='.tmp-*' --exclude='.run.lock' "${folders[@]}" \
    && mv -f "$out/outputs.tgz.part" "$out/outputs.tgz" && echo "${folders[*]}"
}
# The engine writes run.json after every finished cell; packing whenever one changed means a call cut
# without warning (the lease's device time spent, the machine taken back) still returns the cells it
# finished: what is under $OUT comes back however a call ends. ATTNBENCH_PACK_EVERY seconds (0: off).
packer=
if [ "$every" -gt 0 ]; then
  packed=$(mktemp); touch -r "$marker" "$packed"  # before the run starts: its first run.json is newer
  (nap=; trap '[ -n "$nap" ] && kill "$nap" 2>/dev/null; exit 0' TERM
   while :; do
     sleep "$every" & nap=$!; wait "$nap"
     [ -n "$(newer "$packed")" ] || continue
     touch "$packed"; pack || touch -d @0 "$packed"  # a failed pack is tried again next turn
   done) > /dev/null 2>&1 &
  packer=$!
  trap 'kill "$packer" 2>/dev/null' EXIT  # never an orphan packer, however this script ends
fi
# ATTNBENCH_RUN_TIMEOUT (seconds; 0 = none): stop the run in time to pack what finished (a device call ends at 600 s)
timeout "${ATTNBENCH_RUN_TIMEOUT:-0}" python3 -m attnbench run "${notebooks[@]}" --env python "${extra[@]}" 2>&1 | tee "$out/run.log"
rc=${PIPESTATUS[0]}
[ -n "$packer" ] && { kill "$packer" 2>/dev/null; wait "$packer" 2>/dev/null; rm -f "$packed"; }
for folder in $(written); do
  rm -rf "$store/$folder" && mkdir -p "$store/$(dirname "$folder")" && cp -a "outputs/$folder" "$store/$folder" \
    || echo "could not keep outputs/$folder in $store (the next call will not find it; this archive has it)"
done
if folders=$(pack); then
  [ -n "$folders" ] && echo "packed: $folders"
else
  echo "could not pack the label folders into $out/outputs.tgz (tar's message above); an outputs.tgz there is an earlier pack of this call, without its last cells"
fi
rm -f "$marker"
echo "attnbench exit code: $rc"
exit "$rc"
