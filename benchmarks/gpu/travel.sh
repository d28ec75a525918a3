#!/usr/bin/env bash
# Make the working tree small enough to travel with the device kit, and put it back.
#
# The device tool sends the tracked and untracked-not-ignored files plus the carried
# paths, 64 MiB in all. The committed llvm results (~43 MB) leave no room for the kit's
# halves (~56 and ~54 MB). `slim` takes every file under benchmarks/results/ except
# gpu_h100/ out of git's index and ignores it, so ~3.5 MB travels; `restore` puts the
# index and the exclude file back. The files themselves are never touched. Commit nothing
# in between (slim refuses to start with staged changes, since restore resets the index).
#   bash benchmarks/gpu/travel.sh slim      # before the GPU calls
#   bash benchmarks/gpu/travel.sh restore   # after them
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
exclude=$(git rev-parse --git-path info/exclude)
mark='# benchmarks/gpu/travel.sh slim'
size() { (git ls-files -z; git ls-files -z --others --exclude-standard) | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1; }
case "${1:-}" in
slim)
  if grep -qxF "$mark" "$exclude" 2>/dev/null; then echo "travel.sh: already slim" >&2; exit 2; fi
  git diff --cached --quiet || { echo "travel.sh: the index has staged changes; commit or unstage them first" >&2; exit 2; }
  git ls-files -z benchmarks/results | grep -zv '^benchmarks/results/gpu_h100/' | xargs -0 -r git rm -q --cached
  mkdir -p "$(dirname "$exclude")"
  printf '%s\n/benchmarks/results/*\n!/benchmarks/results/gpu_h100/\n' "$mark" >> "$exclude"
  echo "slim: $(( $(size) / 1048576 )) MiB travels; 'bash $0 restore' when the GPU calls are done"
  ;;
restore)
  grep -qxF "$mark" "$exclude" 2>/dev/null || { echo "travel.sh: not slim" >&2; exit 2; }
  git reset -q
  sed -i "\\|^$mark\$|,+2d" "$exclude"
  echo "restored: $(( $(size) / 1048576 )) MiB tracked and untracked"
  ;;
*) echo "usage: bash $0 slim | restore" >&2; exit 2 ;;
esac
