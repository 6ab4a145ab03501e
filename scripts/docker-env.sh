#!/usr/bin/env bash
# The Docker engine and the test images for `make check` and .ci/run.
#
#   scripts/docker-env.sh up       install docker.io if missing, start dockerd if no engine
#                                  answers, build the base image and the test image(s)
#   scripts/docker-env.sh status   say whether an engine answers, list the cae images, and
#                                  check that --network none and --network host both run
#   scripts/docker-env.sh down     stop the dockerd this script started (and nothing else)
#   scripts/docker-env.sh maven    build the cae-test-maven image (not part of `up`; see
#                                  cmd_maven)
#
# The engine is started as `dockerd --iptables=false --bridge=none`: no bridge, no NAT, no
# firewall rules. Containers can then use only `--network none` or `--network host`; the
# default bridge network does not exist. Images are cached between runs (see
# scripts/build-images.sh), so `up` takes about a second when everything is in place.
#
# Environment: CAE_TEST_IMAGES (default "python go": the go image for the real-project corpus,
# ~40 s on the shared base) names the language images the tests need (with python, the
# small cae-test-node image is built on it: node and npm for the tests);
# CAE_DOCKERD_LOG overrides the engine's log file; CAE_DOCKERD_ROOT=DIR runs a private engine
# beside the system one, its data, exec root, pid files and log under DIR (use it with
# DOCKER_HOST=unix://DIR/docker.sock).
set -euo pipefail
cd "$(dirname "$0")/.."

SOCK=/var/run/docker.sock
case "${DOCKER_HOST:-}" in
  unix://*) SOCK=${DOCKER_HOST#unix://} ;;
esac
PIDFILE=/run/cae-dockerd.pid
DROOT=${CAE_DOCKERD_ROOT:-}
dockerd_args=(--iptables=false --bridge=none --host "unix://$SOCK")
if [ -n "$DROOT" ]; then
  mkdir -p "$DROOT"
  PIDFILE=$DROOT/cae-dockerd.pid
  dockerd_args+=(--data-root "$DROOT/data" --exec-root "$DROOT/exec" --pidfile "$DROOT/docker.pid")
fi
LOCK=/run/lock/cae-docker-env.lock
[ -d /run/lock ] && [ -w /run/lock ] || LOCK=${TMPDIR:-/tmp}/cae-docker-env.lock
if [ -n "${CAE_DOCKERD_LOG:-}" ]; then
  LOG=$CAE_DOCKERD_LOG
elif [ -n "$DROOT" ]; then
  LOG=$DROOT/dockerd.log
elif [ -w /var/log ]; then
  LOG=/var/log/cae-dockerd.log
else
  LOG=${TMPDIR:-/tmp}/cae-dockerd.log
fi
IMAGES=${CAE_TEST_IMAGES:-python go}

say() { echo "docker-env: $*" >&2; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1fs", b - a }'; }

# True when an engine answers on the socket (or on DOCKER_HOST when it is tcp://).
engine_answers() {
  case "${DOCKER_HOST:-}" in
    tcp://*)
      [ "$(curl -sf --max-time 2 "http://${DOCKER_HOST#tcp://}/_ping" 2>/dev/null)" = OK ] ;;
    *)
      [ -S "$SOCK" ] &&
        [ "$(curl -sf --max-time 2 --unix-socket "$SOCK" http://localhost/_ping 2>/dev/null)" = OK ] ;;
  esac
}

# True while process $1 runs (a zombie waiting for its new parent to reap it does not).
alive() {
  local st
  st=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1) || return 1
  [ -n "$st" ] && [ "$st" != Z ]
}

wait_engine() {
  local deadline=$(( $(date +%s) + $1 ))
  while [ "$(date +%s)" -lt "$deadline" ]; do
    engine_answers && return 0
    sleep 0.2
  done
  return 1
}

install_docker() {
  command -v dockerd >/dev/null && command -v docker >/dev/null && return 0
  if [ "$(id -u)" -ne 0 ]; then
    say "docker.io is not installed and this is not root: apt-get install docker.io"
    return 1
  fi
  say "installing docker.io"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq --no-install-recommends docker.io >&2
}

start_engine() {
  if engine_answers; then
    return 0
  fi
  case "${DOCKER_HOST:-}" in
    tcp://*) say "no engine answers at DOCKER_HOST=$DOCKER_HOST"; return 1 ;;
  esac
  local running=
  if [ -z "$DROOT" ]; then
    running=$(pidof dockerd || true)
  elif [ -f "$PIDFILE" ] && alive "$(cat "$PIDFILE")"; then
    running=$(cat "$PIDFILE")
  fi
  if [ -n "$running" ]; then
    say "dockerd is running (pid $running) but does not answer yet; waiting"
    wait_engine 60 && return 0
    say "dockerd (pid $running) does not answer on $SOCK after 60 s; see its log"
    return 1
  fi
  if [ "$(id -u)" -ne 0 ]; then
    say "no Docker engine answers on $SOCK and starting one needs root"
    return 1
  fi
  local t0; t0=$(now)
  say "starting dockerd --iptables=false --bridge=none (log: $LOG)"
  # setsid: the engine outlives this script and the terminal or CI step that ran it.
  # 9>&-: the engine must not inherit (and hold forever) the lock of this script.
  setsid dockerd "${dockerd_args[@]}" </dev/null >>"$LOG" 2>&1 9>&- &
  echo $! >"$PIDFILE"
  if ! wait_engine 60; then
    say "dockerd did not answer within 60 s; last lines of $LOG:"
    tail -n 20 "$LOG" >&2 || true
    return 1
  fi
  say "engine up in $(since "$t0")"
}

# A minimal image that is not Debian: Debian's static busybox and nothing else (no libc, no
# git), for the test that cae-helper runs in any image. Cached until busybox changes.
build_busybox_image() {
  local img=cae-test-busybox:latest bb=/bin/busybox
  if [ ! -x "$bb" ] || ! file -b "$bb" 2>/dev/null | grep -q static; then
    bb=$(command -v busybox || true)
  fi
  [ -n "$bb" ] || { say "no busybox (apt-get install busybox-static)"; return 1; }
  local key; key=$(sha256sum "$bb" | cut -c1-16)
  if [ "$(docker image inspect -f '{{index .Config.Labels "org.cae.build-hash"}}' "$img" 2>/dev/null)" = "$key" ]; then
    say "$img is cached"
    return 0
  fi
  local tmp; tmp=$(mktemp -d)
  mkdir -p "$tmp/bin" "$tmp/tmp" "$tmp/workspace"
  cp "$bb" "$tmp/bin/busybox"
  local a
  for a in $("$tmp/bin/busybox" --list); do
    [ "$a" = busybox ] || ln -s busybox "$tmp/bin/$a"
  done
  chmod 1777 "$tmp/tmp" "$tmp/workspace"
  tar --numeric-owner -C "$tmp" -c . | docker import --change 'ENV PATH=/bin' \
    --change "LABEL org.cae.build-hash=$key" - "$img" >/dev/null
  rm -rf "$tmp"
  say "$img built"
}

# An image for the tests on the python test image, built from the Dockerfile $2 as $1:
# cached while that Dockerfile and the python image's ID are unchanged.
build_test_image() {
  local img=$1 df=$2 base=coding-agent-executor-python:latest baseid key
  baseid=$(docker image inspect -f '{{.Id}}' "$base" 2>/dev/null) || {
    say "$img needs $base (CAE_TEST_IMAGES)"; return 0; }
  key=$( { cat "$df"; echo "$baseid"; } | sha256sum | cut -c1-16)
  if [ "$(docker image inspect -f '{{index .Config.Labels "org.cae.build-hash"}}' "$img" 2>/dev/null)" = "$key" ]; then
    say "$img is cached"
    return 0
  fi
  local t0 old; t0=$(now)
  old=$(docker image inspect -f '{{.Id}}' "$img" 2>/dev/null || true)
  docker build -q --network host --force-rm --build-arg "BASE_IMAGE=$base" \
    --label "org.cae.build-hash=$key" -t "$img" - <"$df" >/dev/null
  if [ -n "$old" ] && [ "$(docker image inspect -f '{{len .RepoTags}}' "$old" 2>/dev/null)" = 0 ]; then
    docker image rm "$old" >/dev/null 2>&1 || true
  fi
  say "$img built in $(since "$t0")"
}

# node and npm for the docker tests of the shared node_modules trees, on the python test
# image (tests/docker/Dockerfile-test-node: Debian's nodejs, npm's tarball from the npm
# registry; ~10 s).
build_test_node_image() {
  build_test_image cae-test-node:latest tests/docker/Dockerfile-test-node
}

cmd_up() {
  local t0; t0=$(now)
  install_docker
  exec 9>"$LOCK"
  flock 9
  start_engine
  local t1; t1=$(now)
  # shellcheck disable=SC2086
  scripts/build-images.sh $IMAGES
  build_busybox_image
  build_test_node_image
  say "images ready in $(since "$t1") (total $(since "$t0"))"
}

# Debian's maven and a headless JDK on the python test image (tests/docker/Dockerfile-test-maven;
# ~2 min to build, cached after), for tests/backend/test-maven-images.c: not part of `up`,
# which is on `make check`'s critical path; the kubernetes lane of scripts/check.sh builds it
# at its start, beside the other lane's tests. Needs the engine and the python image (`up`).
cmd_maven() {
  exec 9>"$LOCK"
  flock 9
  engine_answers || { say "no engine answers: scripts/docker-env.sh up first"; return 1; }
  build_test_image cae-test-maven:latest tests/docker/Dockerfile-test-maven
  docker image inspect cae-test-maven:latest >/dev/null
}

cmd_down() {
  exec 9>"$LOCK"
  flock 9
  if [ ! -f "$PIDFILE" ]; then
    say "no dockerd started by this script (no $PIDFILE)"
    return 0
  fi
  local pid; pid=$(cat "$PIDFILE")
  if ! alive "$pid" || [ "$(cat "/proc/$pid/comm" 2>/dev/null)" != dockerd ]; then
    say "pid $pid from $PIDFILE is not a dockerd; nothing to stop"
    rm -f "$PIDFILE"
    return 0
  fi
  say "stopping dockerd (pid $pid)"
  kill -TERM "$pid"
  for _ in $(seq 1 150); do
    alive "$pid" || break
    sleep 0.2
  done
  if alive "$pid"; then
    say "dockerd (pid $pid) still running after 30 s"
    return 1
  fi
  rm -f "$PIDFILE"
}

cmd_status() {
  if ! engine_answers; then
    say "no engine answers on ${DOCKER_HOST:-unix://$SOCK}"
    return 1
  fi
  docker version --format 'engine {{.Server.Version}} (API {{.Server.APIVersion}}), client {{.Client.Version}}'
  docker image ls --format '{{.Repository}}:{{.Tag}}  {{.Size}}  {{.CreatedSince}}' \
    --filter 'reference=coding-agent-executor-*'
  local img=coding-agent-executor-base:latest rc=0 net
  if docker image inspect "$img" >/dev/null 2>&1; then
    for net in none host; do
      if docker run --rm --network "$net" "$img" true; then
        echo "docker run --network $net: ok"
      else
        echo "docker run --network $net: FAILED"; rc=1
      fi
    done
  fi
  return $rc
}

case "${1:-}" in
  up) cmd_up ;;
  down) cmd_down ;;
  status) cmd_status ;;
  maven) cmd_maven ;;
  *) echo "usage: $0 up|down|status|maven" >&2; exit 2 ;;
esac
