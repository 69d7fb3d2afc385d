#!/usr/bin/env bash
# Travel light: the tree travels with every device call and outputs/ is most of it. Hold outputs/ aside
# for the lease, keeping only the label folders its commands build on: a command that runs some cells of
# a label finds the label's current cells there and reuses them, where an empty outputs/ would run every
# cell they need again (and a re-measured upstream cell, such as a peak, stales every cell after it).
#   scripts/carry/hold_outputs.sh hold [NOTEBOOK/LABEL ...]   # before scripts/carry/prepare.sh
#   scripts/carry/hold_outputs.sh restore                     # after the lease, before `attnbench merge`
# The held tree waits in $HOLD (default /tmp/outputs_hold); outputs/ must not change while it is held
# (the lease's results come back through `attnbench merge`, after restore).
set -euo pipefail
hold=${HOLD:-/tmp/outputs_hold}
cd "$(dirname "$0")/../.."
action=${1:-}; shift || true
case "$action" in
  hold)
    [ -e "$hold" ] && { echo "error: $hold exists: a lease is already holding outputs/ (run restore first)" >&2; exit 2; }
    [ -d outputs ] || { echo "error: $PWD/outputs: no such folder: nothing to hold" >&2; exit 2; }
    for folder in "$@"; do
      # plain names (the project's labels): no '..', and nothing the restore loop would split or expand
      [[ "$folder" =~ ^[A-Za-z0-9_][A-Za-z0-9._-]*/[A-Za-z0-9_][A-Za-z0-9._+-]*$ ]] \
        || { echo "error: $folder: give NOTEBOOK/LABEL (one label folder)" >&2; exit 2; }
      [ -d "outputs/$folder" ] || { echo "error: outputs/$folder: no such label folder (NOTEBOOK/LABEL)" >&2; exit 2; }
    done
    [ "$(printf '%s\n' "$@" | sort | uniq -d)" ] && { echo "error: a label folder named twice: $*" >&2; exit 2; }
    mv outputs "$hold" && mkdir outputs && printf '%s\n' "$@" > "$hold.kept"
    for folder in "$@"; do
      mkdir -p "outputs/$(dirname "$folder")" && cp -a "$hold/$folder" "outputs/$folder"
    done
    echo "outputs/ held in $hold; travelling: ${*:-nothing} ($(du -sh outputs | cut -f1))"
    # while held, git sees outputs/ deleted: a `git commit -a` now would commit the deletion
    echo "commit nothing with -a until restore: git sees the held results as deleted"
    ;;
  restore)
    [ -d "$hold" ] || { echo "error: nothing held: $hold does not exist" >&2; exit 2; }
    kept=$(cat "$hold.kept" 2>/dev/null || true)
    # outputs/ holds only the copies made by hold; anything else would be lost by the restore
    while IFS= read -r path; do
      known=0
      for folder in $kept; do
        case "$path" in "$folder" | "$folder"/* | "$(dirname "$folder")") known=1 ;; esac
      done
      [ "$known" = 1 ] || { echo "error: outputs/$path appeared while held (merge after restore): left as it is" >&2; exit 2; }
    done < <([ -d outputs ] && cd outputs && find . -mindepth 1 | sed 's,^\./,,')
    for folder in $kept; do
      diff -rq "outputs/$folder" "$hold/$folder" > /dev/null 2>&1 \
        || { echo "error: outputs/$folder changed while held (merge after restore): left as it is" >&2; exit 2; }
    done
    rm -rf outputs && mv "$hold" outputs && rm -f "$hold.kept"
    echo "outputs/ restored from $hold"
    ;;
  *)
    echo "usage: $0 hold [NOTEBOOK/LABEL ...] | restore" >&2; exit 2
    ;;
esac
