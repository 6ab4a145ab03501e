#!/usr/bin/env bash
# Runs every benchmark that was built; each prints its figure next to its baseline.
# usage: bench/run.sh [BUILD_DIR]   (make bench)
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
status=0
# the helper that goes into containers, from this build (as the tests find it)
[ -x "$build/cae-helper-static" ] && export CAE_HELPER_STATIC="$PWD/$build/cae-helper-static"
[ -x "$build/cae-helper" ] && export CAE_HELPER="$PWD/$build/cae-helper"
for b in runner exec editor mcp docker helper many prepare sessions clone k8s diskfs net pkgcache snapshot; do
  bin="$build/bench/bench-$b"
  [ -x "$bin" ] || continue
  echo "== bench-$b" >&2
  "$bin" "$build" || status=1
done
# the docker backend's snapshots, restores and forks (without an engine it says so)
if [ -x "$build/bench/bench-snapshot" ]; then
  echo "== bench-snapshot docker" >&2
  "$build/bench/bench-snapshot" docker || status=1
  # and the kubernetes backend's (without KUBECONFIG it says so)
  echo "== bench-snapshot kubernetes" >&2
  "$build/bench/bench-snapshot" kubernetes "$build" || status=1
fi
exit $status
