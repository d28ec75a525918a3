#!/usr/bin/env bash
# Make the working tree small enough to travel with the device kit, and put it back.
#
# The device tool sends the tracked and untracked-not-ignored files plus the carried
# paths, 64 MiB in all. The committed results (~46 MB) leave no room for the kit's halves
# (~57 and ~52 MiB), and the GPU results alone (~9 MiB on 2026-11-26, most of it the
# growing measurement file) no longer fit beside the first half. `slim` takes every file
# under benchmarks/results/ out of git's index and ignores it, so ~2 MiB travels, and
# copies the two files a `session.sh history` call reads (the H100 history export and
# measurement file) gzipped (7 MB to 0.34 MB) into the ignored `.gpucarry/`, to carry
# beside the kit's second half:
#   carry [".devkit/b", ".gpucarry"], with HISTORY_DB=.gpucarry/history_guided_cuda_history.json.gz
#   MEASUREMENTS=.gpucarry/history_guided_cuda_measurements.jsonl.gz
# `restore` puts the index and the exclude file back and removes `.gpucarry/`. The
# committed files themselves are never touched. Commit nothing in between (slim refuses
# to start with staged changes, since restore resets the index).
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
  git ls-files -z benchmarks/results | xargs -0 -r git rm -q --cached
  mkdir -p "$(dirname "$exclude")" .gpucarry
  printf '%s\n/benchmarks/results/\n/.gpucarry/\n' "$mark" >> "$exclude"
  for f in history_guided_cuda_history.json history_guided_cuda_measurements.jsonl; do
    if [ -e "benchmarks/results/gpu_h100/$f" ]; then gzip -c "benchmarks/results/gpu_h100/$f" > ".gpucarry/$f.gz"; fi
  done
  echo "slim: $(( $(size) / 1048576 )) MiB travels, .gpucarry holds $(du -sh .gpucarry | cut -f1) to carry; 'bash $0 restore' when the GPU calls are done"
  ;;
restore)
  grep -qxF "$mark" "$exclude" 2>/dev/null || { echo "travel.sh: not slim" >&2; exit 2; }
  git reset -q
  sed -i "\\|^$mark\$|,+2d" "$exclude"
  rm -rf .gpucarry
  echo "restored: $(( $(size) / 1048576 )) MiB tracked and untracked"
  ;;
*) echo "usage: bash $0 slim | restore" >&2; exit 2 ;;
esac
