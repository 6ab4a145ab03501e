#!/usr/bin/env bash
# Runs every built libFuzzer target for a bounded time on a copy of its corpus, FUZZ_JOBS
# targets at once (default: the number of processors).
# usage: scripts/fuzz.sh BUILD_DIR SECONDS
set -euo pipefail
cd "$(dirname "$0")/.."
build=$1; secs=$2
jobs=${FUZZ_JOBS:-$(nproc)}

fuzz_one() {
  local bin=$1 name=${1##*/fuzz-} work
  work=$(mktemp -d)
  cp -r "fuzz/corpus/$name/." "$work/" 2>/dev/null || true
  echo "fuzz: $name for ${secs}s" >&2
  local rc=0
  ASAN_OPTIONS=detect_leaks=1 "$bin" -max_total_time="$secs" -rss_limit_mb=2048 \
    -max_len=65536 -artifact_prefix="$build/fuzz/$name-" "$work" >"$build/fuzz/$name.log" 2>&1 || rc=1
  if [ $rc -ne 0 ]; then
    echo "fuzz: $name FAILED; see $build/fuzz/$name.log" >&2
    tail -30 "$build/fuzz/$name.log" >&2
  fi
  rm -rf "$work"
  return $rc
}

status=0
running=0
for bin in "$build"/fuzz/fuzz-*; do
  [ -f "$bin" ] && [ -x "$bin" ] || continue
  if [ "$running" -ge "$jobs" ]; then
    wait -n || status=1
    running=$((running - 1))
  fi
  fuzz_one "$bin" &
  running=$((running + 1))
done
while [ "$running" -gt 0 ]; do
  wait -n || status=1
  running=$((running - 1))
done
exit $status
