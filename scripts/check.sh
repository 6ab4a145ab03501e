#!/usr/bin/env bash
# The README's test command (`make check`) after install-deps: every suite in the normal
# build and in the ASan+UBSan build, the fuzz-corpus replays, a bounded run of every fuzz
# target, and the engine-backed suites with a real Docker engine (the docker conformance suite
# also against Podman's Docker-compatible API, scripts/podman-env.sh). Ends with one line
# "N passed, N failed" counted over every Check test and every other test program.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
ASAN_BUILD=${ASAN_BUILD:-build-asan}
FUZZ_SECONDS=${FUZZ_SECONDS:-15}
status=0
logs=()

check_start=$SECONDS
step() { echo "== [$((SECONDS - check_start))s] $*" >&2; }

# Engine-backed tests need a Docker engine and the test images; the script starts and
# builds what is missing (and caches images between runs).
if [ -x scripts/docker-env.sh ]; then
  step "docker engine and test images"
  if ! scripts/docker-env.sh up; then
    echo "check: the Docker engine could not be started (see above)" >&2
    status=1
  fi
  export CAE_TEST_DOCKER=1
fi
# The docker backend against Podman's Docker-compatible API (conformance-podman): the
# service on its own socket, the test image copied from the Docker engine (cached).
if [ -x scripts/podman-env.sh ]; then
  step "podman service and test image"
  if scripts/podman-env.sh up; then
    export CAE_TEST_PODMAN=1
  else
    echo "check: the Podman service could not be started (see above)" >&2
    status=1
  fi
fi
if [ -x scripts/npm-deps.sh ]; then
  step "npm test clients"
  scripts/npm-deps.sh || status=1
fi

# Another cae instance's environments (local, docker, kubernetes when enabled) live while
# every suite runs: no test may remove or replace them (scripts/bystander.sh). Made once the
# first build has a cae, checked after each test run, removed at the end.
bystander=
bystander_check() {
  [ -n "$bystander" ] || return 0
  step "bystander environments of another instance"
  scripts/bystander.sh check "$BUILD/cae" "$bystander" || status=1
}

# The sanitizer build and the fuzz build compile at low priority while the normal build's
# tests run (most of those wait on an engine, a cluster or a client): the run is shorter by
# most of their compile time. The sanitizer build's status goes to a file the test lanes
# wait for; the fuzz build is built again (a no-op when done) before it is used.
fuzzing=
[ -x scripts/fuzz.sh ] && command -v clang >/dev/null && fuzzing=1
FUZZ_BUILD=${FUZZ_BUILD:-build-fuzz}
for b in "$BUILD" "$ASAN_BUILD"; do
  [ -f "$b/build.ninja" ] && continue
  if [ "$b" = "$ASAN_BUILD" ]; then
    meson setup "$b" --werror -Db_sanitize=address,undefined -Db_lundef=false -Dbuildtype=debug >/dev/null || status=1
  else
    meson setup "$b" --werror >/dev/null || status=1
  fi
done
step "build $BUILD"
if ! ninja -C "$BUILD"; then
  echo "check: the build failed: no test runs" >&2
  exit 1
fi
asan_rc=$ASAN_BUILD/.check-build-status
rm -f "$asan_rc"
(
  nice -n 10 ninja -C "$ASAN_BUILD" -j2 >"$ASAN_BUILD/background-build.log" 2>&1
  echo $? >"$asan_rc.tmp" && mv "$asan_rc.tmp" "$asan_rc"
  if [ -n "$fuzzing" ]; then
    make --no-print-directory "$FUZZ_BUILD/build.ninja" FUZZ_BUILD="$FUZZ_BUILD" >/dev/null 2>&1 &&
      nice -n 10 ninja -C "$FUZZ_BUILD" -j1 >/dev/null 2>&1 || true
  fi
) &
background=$!

if [ -x "$BUILD/cae" ]; then
  step "bystander environments of another instance"
  bystander=$(mktemp -d "${TMPDIR:-/tmp}/cae-bystander.XXXXXX")
  scripts/bystander.sh up "$BUILD/cae" "$bystander" || status=1
fi

# Two lanes run side by side, each the normal build's tests and then the sanitizer build's:
# the kubernetes suites one at a time (the cluster's API server and kubelet are one small
# node), every other suite three at a time (most wait on an engine, a client or a child),
# the longest of each started first (their priority in meson.build).
# Every test makes and removes only its own environments, so the lanes share the engine.
# LeakSanitizer is part of ASan; UBSan must abort so that a finding fails the test.
# Sanitized code runs several times slower, and CI's machine may be busy with other work:
# the sanitizer build gets a timeout multiplier (no test depends on timing to pass), and the
# normal build a smaller one since two lanes share the machine.
lane_tests() { # BUILD LOGBASE PROCESSES MESON-TEST-ARGS...
  local b=$1 base=$2 procs=$3 mult=${NORMAL_TIMEOUT_MULTIPLIER:-2}
  shift 3
  [ "$b" = "$ASAN_BUILD" ] && mult=${ASAN_TIMEOUT_MULTIPLIER:-4}
  echo "== [$((SECONDS - check_start))s] test $b ($base)"
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    meson test -C "$b" --print-errorlogs --logbase "$base" --num-processes "$procs" \
    --timeout-multiplier "$mult" "$@"
}
lane() { # NAME PROCESSES MESON-TEST-ARGS...
  local name=$1 procs=$2 rc=0
  shift 2
  lane_tests "$BUILD" "testlog-$name" "$procs" "$@" || rc=1
  while [ ! -e "$asan_rc" ]; do sleep 2; done
  if [ "$(cat "$asan_rc")" != 0 ]; then
    echo "check: the $ASAN_BUILD build failed (its log: $ASAN_BUILD/background-build.log)"
    return 1
  fi
  lane_tests "$ASAN_BUILD" "testlog-$name" "$procs" "$@" || rc=1
  echo "== [$((SECONDS - check_start))s] lane $name done"
  return $rc
}
# The images only the kubernetes suites use (node's, go's) are imported into the cluster at
# the start of their lane, beside the other lane's tests, rather than before every test: the
# cluster came up with the images of every suite (Makefile: k8s-env.sh up).
K8S_LANE_IMAGES=${K8S_LANE_IMAGES-cae-test-node coding-agent-executor-go}
# The cae-test-maven image (only the kubernetes lane's maven-images uses it, in a container
# and in a pod) is built here, beside the other lane's tests, not by `docker-env.sh up`.
kubernetes_lane() {
  local images=$K8S_LANE_IMAGES
  if [ -n "${CAE_TEST_DOCKER:-}" ]; then
    echo "== [$((SECONDS - check_start))s] build cae-test-maven"
    scripts/docker-env.sh maven || { echo "check: cae-test-maven could not be built"; return 1; }
    images="$images cae-test-maven"
  fi
  if [ -n "${CAE_TEST_K8S:-}" ] && [ -n "${images# }" ]; then
    echo "== [$((SECONDS - check_start))s] import $images into the cluster"
    CAE_TEST_K8S_IMAGES="$images" scripts/k8s-env.sh up >/dev/null ||
      { echo "check: the kubernetes lane's images could not be imported"; return 1; }
  fi
  lane kubernetes 1 --suite kubernetes
}
lanes=(kubernetes rest)
for b in "$BUILD" "$ASAN_BUILD"; do
  for l in "${lanes[@]}"; do
    rm -f "$b/meson-logs/testlog-$l.json"
    logs+=("$b/meson-logs/testlog-$l.json")
  done
done
step "tests: lanes ${lanes[*]} (output at each lane's end)"
kubernetes_lane >"$BUILD/check-lane-kubernetes.log" 2>&1 &
lane_k=$!
lane rest 3 --no-suite kubernetes >"$BUILD/check-lane-rest.log" 2>&1 &
lane_r=$!
wait "$lane_r" || status=1
step "lane rest"
cat "$BUILD/check-lane-rest.log"
wait "$lane_k" || status=1
step "lane kubernetes"
cat "$BUILD/check-lane-kubernetes.log"
wait "$background"
if [ "$(cat "$asan_rc" 2>/dev/null)" != 0 ]; then
  step "build $ASAN_BUILD (failed)"
  tail -50 "$ASAN_BUILD/background-build.log"
  status=1
fi
bystander_check

if [ -n "$fuzzing" ]; then
  step "fuzz targets, ${FUZZ_SECONDS}s each"
  make --no-print-directory fuzz FUZZ_SECONDS="$FUZZ_SECONDS" FUZZ_BUILD="$FUZZ_BUILD" || status=1
fi

if [ -x scripts/lint.sh ]; then
  step "lint"
  scripts/lint.sh || status=1
fi

if [ -n "$bystander" ]; then
  bystander_check
  scripts/bystander.sh down "$BUILD/cae" "$bystander"
fi

python3 - "${logs[@]}" <<'PY'
import json, re, sys
passed = failed = 0
pat = re.compile(r'(\d+)%: Checks: (\d+), Failures: (\d+), Errors: (\d+)')
plain = re.compile(r'^(\d+) passed, (\d+) failed$', re.M)
# What failed is repeated here, at the very end, so that the last lines of
# the output (all a CI summary may keep) say which test and why.
why = []
check_fail = re.compile(r'^[^:\n]+:\d+:[EF]:.*$', re.M)
for path in sys.argv[1:]:
    try:
        lines = open(path).read().splitlines()
    except OSError:
        failed += 1
        why.append(f"{path}: missing (its lane did not run)")
        continue
    for line in lines:
        t = json.loads(line)
        out = t.get('stdout') or ''
        m = pat.findall(out)
        p = plain.findall(out)
        ok = t.get('result') in ('OK', 'EXPECTEDFAIL')
        before = failed
        if p and not m:
            # a script that counts its own checks (the attack suite, the MCP clients)
            good, bad = (int(x) for x in p[-1])
            passed += good
            failed += bad + (0 if ok or bad else 1)
        elif m:
            for _, checks, fails, errs in m:
                bad = int(fails) + int(errs)
                passed += int(checks) - bad
                failed += bad
            if not ok and sum(int(f) + int(e) for _, _, f, e in m) == 0:
                failed += 1  # crashed or timed out outside Check's accounting
        elif ok:
            passed += 1
        else:
            failed += 1
        if failed != before:
            build = path.split('/meson-logs/')[0]
            why.append(f"{build}: {t.get('name')}: {t.get('result')}")
            err = t.get('stderr') or ''
            found = check_fail.findall(out) + check_fail.findall(err)
            tail = found[:8] + err.strip().splitlines()[-4:] if found else \
                (err + out).strip().splitlines()[-8:]
            why.extend('    ' + l[:400] for l in tail)
for w in why:
    print("failed:", w) if not w.startswith('    ') else print(w)
print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
PY
[ $? -eq 0 ] || status=1
exit $status
