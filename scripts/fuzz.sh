#!/usr/bin/env bash
# Runs every built libFuzzer target for a bounded time on a copy of its corpus.
# usage: scripts/fuzz.sh BUILD_DIR SECONDS
set -euo pipefail
cd "$(dirname "$0")/.."
build=$1; secs=$2
status=0
for bin in "$build"/fuzz/fuzz-*; do
  [ -f "$bin" ] && [ -x "$bin" ] || continue
  name=${bin##*/fuzz-}
  work=$(mktemp -d)
  cp -r "fuzz/corpus/$name/." "$work/" 2>/dev/null || true
  echo "fuzz: $name for ${secs}s" >&2
  if ! ASAN_OPTIONS=detect_leaks=1 "$bin" -max_total_time="$secs" -rss_limit_mb=2048 \
       -max_len=65536 -artifact_prefix="$build/fuzz/$name-" "$work" >"$build/fuzz/$name.log" 2>&1; then
    echo "fuzz: $name FAILED; see $build/fuzz/$name.log" >&2
    tail -30 "$build/fuzz/$name.log" >&2
    status=1
  fi
  rm -rf "$work"
done
exit $status
