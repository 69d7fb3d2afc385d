#!/usr/bin/env bash
# Run notebooks on an air-gapped GPU machine with its own python3 (torch preinstalled) and pack the
# results into one archive under $OUT (or ./device-out), ready to unpack into outputs/ and commit.
#   scripts/device_run.sh notebooks/flux_attention.md [more notebooks] [-- extra attnbench run args]
# The carried wheels (.whl/, from scripts/fetch_wheels.sh) are installed first: scripts/device_env.sh.
set -uo pipefail
out=${OUT:-device-out}; mkdir -p "$out"
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
nvidia-smi -L || true
# ATTNBENCH_RUN_TIMEOUT (seconds; 0 = none): stop the run in time to pack what finished (a device call ends at 600 s)
timeout "${ATTNBENCH_RUN_TIMEOUT:-0}" python3 -m attnbench run "${notebooks[@]}" --env python "${extra[@]}" 2>&1 | tee "$out/run.log"
rc=${PIPESTATUS[0]}
names=(); for nb in "${notebooks[@]}"; do n=$(basename "$nb" .md); [ -d "outputs/$n" ] && names+=("outputs/$n"); done
[ ${#names[@]} -gt 0 ] && tar czf "$out/outputs.tgz" "${names[@]}"
echo "attnbench exit code: $rc"
exit "$rc"
