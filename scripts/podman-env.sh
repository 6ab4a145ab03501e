#!/usr/bin/env bash
# Podman's Docker-compatible API for `make check` (the conformance-podman test): the docker
# backend run against Podman instead of dockerd.
#
#   scripts/podman-env.sh up       start `podman system service` on its own unix socket (when
#                                  none answers there) and copy the test images from the
#                                  Docker engine into Podman's storage (cached)
#   scripts/podman-env.sh status   say whether the service answers, list the cae images in
#                                  Podman's storage, check that --network none and host run
#   scripts/podman-env.sh down     stop the service this script started (images are kept)
#
# Installs nothing: podman comes from scripts/install-deps.sh test. The images come from the
# Docker engine (scripts/docker-env.sh up first): there is no registry, so each is copied with
# `docker save | podman load`, and again only when its Docker image ID changed (the ID is
# the same in both stores), so a second `up` takes about a second.
#
# Podman reads a containers.conf of ours (CONTAINERS_CONF; the host's /etc/containers is not
# touched), written at each `up`:
#   - default_ulimits: Podman's open-file limit for a root container (1048576) exceeds the
#     hard limit of hosts like these (20000), and runc then starts no container at all
#     ("error setting rlimit type 7: operation not permitted"); with nofile alone set, nproc
#     becomes 1048576 and fails the same way (type 6: Podman lowers its own nproc to
#     kernel.pid_max, 32768 here). Containers get the limits a Docker container gets: our
#     hard limits (nproc at most kernel.pid_max), soft = hard, as dockerd gives them.
#   - pids_limit = 0: no limit of Podman's own (its default is 2048; Docker has none), so
#     cae's configured pids_limit is the only one.
#   - network: netns = "none" (a container that names no network gets none, never a
#     bridge) and network_config_dir = an empty directory of ours, so the bridge network
#     Debian's package declares (/etc/cni/net.d/87-podman-bridge.conflist) is not known to
#     this service. Containers use --network none or host only: no bridge, no veth, no
#     iptables rule is ever made (`status` checks that no cni-podman0 link exists).
#   - seccomp_profile: Podman's default profile (/usr/share/containers/seccomp.json) allows
#     keyctl, add_key and request_key, which Docker's refuses: a command could reach the
#     kernel's key store. Ours is Podman's with those three refused (EPERM, as Docker does).
#   - cgroup_manager = "cgroupfs", events_logger = "file": no systemd or journald needed.
#
# Environment: CAE_PODMAN_DIR (default /run/cae-podman: socket, containers.conf, pid file),
# CAE_PODMAN_IMAGES (default "coding-agent-executor-python:latest", the conformance suite's
# image), CAE_PODMAN_LOG (the service's log; default /var/log/cae-podman.log),
# CAE_PODMAN_SECCOMP_BASE (the profile ours is made from).
set -euo pipefail
cd "$(dirname "$0")/.."

DIR=${CAE_PODMAN_DIR:-/run/cae-podman}
SOCK=$DIR/podman.sock
CONF=$DIR/containers.conf
SECCOMP=$DIR/seccomp.json
PODMAN_SECCOMP=${CAE_PODMAN_SECCOMP_BASE:-/usr/share/containers/seccomp.json}
PIDFILE=$DIR/service.pid
IMAGES=${CAE_PODMAN_IMAGES:-coding-agent-executor-python:latest}
if [ -n "${CAE_PODMAN_LOG:-}" ]; then
  LOG=$CAE_PODMAN_LOG
elif [ -w /var/log ]; then
  LOG=/var/log/cae-podman.log
else
  LOG=$DIR/service.log
fi
LOCK=/run/lock/cae-podman-env.lock
[ -d /run/lock ] && [ -w /run/lock ] || LOCK=${TMPDIR:-/tmp}/cae-podman-env.lock
export CONTAINERS_CONF=$CONF

say() { echo "podman-env: $*" >&2; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1fs", b - a }'; }

answers() {
  [ -S "$SOCK" ] &&
    [ "$(curl -sf --max-time 2 --unix-socket "$SOCK" http://localhost/_ping 2>/dev/null)" = OK ]
}

# True while process $1 runs (a zombie does not).
alive() {
  local st
  st=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1) || return 1
  [ -n "$st" ] && [ "$st" != Z ]
}

our_service() {
  [ -f "$PIDFILE" ] && alive "$(cat "$PIDFILE")" &&
    [ "$(cat "/proc/$(cat "$PIDFILE")/comm" 2>/dev/null)" = podman ]
}

# "unlimited" is -1 in containers.conf.
lim() { local v; v=$(ulimit "$1"); [ "$v" = unlimited ] && echo -1 || echo "$v"; }

# The containers.conf of this host (see the header); prints it.
make_conf() {
  local nofile nproc pidmax
  nofile=$(lim -Hn)
  nproc=$(lim -Hu)
  pidmax=$(cat /proc/sys/kernel/pid_max 2>/dev/null || echo -1)
  if [ "$pidmax" != -1 ] && { [ "$nproc" = -1 ] || [ "$nproc" -gt "$pidmax" ]; }; then
    nproc=$pidmax
  fi
  cat <<EOF
# Written by scripts/podman-env.sh (read through CONTAINERS_CONF); see its header.
[containers]
default_ulimits = ["nofile=$nofile:$nofile", "nproc=$nproc:$nproc"]
pids_limit = 0
netns = "none"
seccomp_profile = "$SECCOMP"

[network]
network_config_dir = "$DIR/net.d"

[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
EOF
}

# Podman's default seccomp profile with the kernel's key store refused (see the header).
make_seccomp() {
  [ -f "$PODMAN_SECCOMP" ] || { say "no $PODMAN_SECCOMP (package golang-github-containers-common)"; return 1; }
  jq '.syscalls |= map(if .action == "SCMP_ACT_ALLOW"
                       then .names -= ["add_key", "keyctl", "request_key"] else . end
                       | select(.names | length > 0))
      | .syscalls += [{"names": ["add_key", "keyctl", "request_key"],
                       "action": "SCMP_ACT_ERRNO", "errnoRet": 1}]' "$PODMAN_SECCOMP"
}

stop_service() {
  our_service || { rm -f "$PIDFILE"; return 0; }
  local pid; pid=$(cat "$PIDFILE")
  say "stopping podman system service (pid $pid)"
  kill -TERM "$pid"
  for _ in $(seq 1 150); do
    alive "$pid" || break
    sleep 0.2
  done
  if alive "$pid"; then
    say "podman system service (pid $pid) still running after 30 s"
    return 1
  fi
  rm -f "$PIDFILE"
}

start_service() {
  mkdir -p "$DIR/net.d"
  local prof; prof=$(make_seccomp)
  if [ ! -f "$SECCOMP" ] || [ "$(cat "$SECCOMP")" != "$prof" ]; then
    printf '%s\n' "$prof" >"$SECCOMP.tmp" && mv "$SECCOMP.tmp" "$SECCOMP"
  fi
  local want; want=$(make_conf)
  if [ ! -f "$CONF" ] || [ "$(cat "$CONF")" != "$want" ]; then
    printf '%s\n' "$want" >"$CONF.tmp" && mv "$CONF.tmp" "$CONF"
    # a service of ours that read an older file is restarted
    stop_service
  fi
  # conmon starts no container for a service whose working directory was removed (a
  # checkout it was started from): such a service is restarted, and one is started in /
  if our_service && case "$(readlink "/proc/$(cat "$PIDFILE")/cwd")" in *" (deleted)") true ;; *) false ;; esac; then
    say "podman system service's working directory is gone; restarting"
    stop_service
  fi
  answers && return 0
  if our_service; then
    say "podman system service is running (pid $(cat "$PIDFILE")) but does not answer; restarting"
    stop_service
  fi
  rm -f "$SOCK"
  local t0; t0=$(now)
  say "starting podman system service on unix://$SOCK (log: $LOG)"
  # setsid: the service outlives this script; 9>&-: it must not hold this script's lock.
  (cd / && exec setsid podman system service --time=0 "unix://$SOCK" </dev/null >>"$LOG" 2>&1 9>&-) &
  echo $! >"$PIDFILE"
  local deadline=$(( $(date +%s) + 60 ))
  while ! answers; do
    if [ "$(date +%s)" -ge "$deadline" ] || ! alive "$(cat "$PIDFILE")"; then
      say "podman system service does not answer on $SOCK; last lines of $LOG:"
      tail -n 20 "$LOG" >&2 || true
      return 1
    fi
    sleep 0.2
  done
  say "service up in $(since "$t0")"
}

# Copies image $1 from the Docker engine into Podman's storage unless Podman has it with the
# same ID already (docker save | podman load keeps the ID).
copy_image() {
  local img=$1 did pid
  did=$(docker image inspect -f '{{.Id}}' "$img" 2>/dev/null) || {
    say "the Docker engine has no $img (scripts/docker-env.sh up builds it)"
    return 1
  }
  did=${did#sha256:}
  pid=$(podman image inspect --format '{{.Id}}' "$img" 2>/dev/null || true)
  if [ "$pid" = "$did" ]; then
    say "$img is cached"
    return 0
  fi
  local t0; t0=$(now)
  docker save "$img" | podman load -q >/dev/null
  # the copy it replaces, now without a name (kept when a container still uses it)
  [ -z "$pid" ] || podman image rm "$pid" >/dev/null 2>&1 || true
  say "$img copied in $(since "$t0")"
}

cmd_up() {
  command -v podman >/dev/null || {
    say "podman is not installed (scripts/install-deps.sh test, or apt-get install podman)"
    return 1
  }
  exec 9>"$LOCK"
  flock 9
  local t0; t0=$(now)
  start_service
  local img
  for img in $IMAGES; do
    copy_image "$img"
  done
  say "ready in $(since "$t0") (DOCKER_HOST=unix://$SOCK)"
}

cmd_down() {
  exec 9>"$LOCK"
  flock 9
  if [ ! -f "$PIDFILE" ]; then
    say "no service started by this script (no $PIDFILE)"
    return 0
  fi
  stop_service
}

cmd_status() {
  if ! answers; then
    say "no service answers on unix://$SOCK"
    return 1
  fi
  curl -sf --unix-socket "$SOCK" http://localhost/version |
    jq -r '"podman \(.Version) (API \(.ApiVersion))"'
  podman image ls --format '{{.Repository}}:{{.Tag}}  {{.Size}}  {{.CreatedSince}}' \
    --filter 'reference=*coding-agent-executor-*'
  local rc=0 net img
  img=${IMAGES%% *}
  for net in none host; do
    if podman run --rm --network "$net" "$img" true; then
      echo "podman run --network $net: ok"
    else
      echo "podman run --network $net: FAILED"; rc=1
    fi
  done
  if ip link show cni-podman0 >/dev/null 2>&1; then
    echo "a cni-podman0 bridge exists: some container used a bridge network"; rc=1
  fi
  return $rc
}

case "${1:-}" in
  up) cmd_up ;;
  down) cmd_down ;;
  status) cmd_status ;;
  *) echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac
