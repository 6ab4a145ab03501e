#!/usr/bin/env bash
# The single-node Kubernetes cluster for `make check` and the kubernetes backend's tests, over
# the shared k8s-local.sh (etcd, kube-apiserver, kubelet and a private containerd on
# loopback; see its README).
#
#   scripts/k8s-env.sh up       start the cluster if it is not running (~35 s) and import the
#                               test images from the local Docker engine (idempotent)
#   scripts/k8s-env.sh status   say what runs
#   scripts/k8s-env.sh down     stop the cluster if this script started it: no pod, process or
#                               mount is left; a cluster started by someone else stays
#
# `up` prints `export KUBECONFIG=...` on stdout (eval it). Environment: CAE_K8S_LOCAL (the
# k8s-local.sh to use, default ../shared/k8s/k8s-local.sh beside the checkout, then
# /work/shared/k8s/k8s-local.sh), CAE_K8S_DIR (its state, default /tmp/cae-k8s),
# CAE_TEST_K8S_IMAGES (default "coding-agent-executor-python cae-test-busybox").
set -euo pipefail
cd "$(dirname "$0")/.."

K=${CAE_K8S_DIR:-/tmp/cae-k8s}
export CAE_K8S_DIR=$K
MARK=$K/started-by-k8s-env
IMAGES=${CAE_TEST_K8S_IMAGES:-coding-agent-executor-python cae-test-busybox}
LOCK=/run/lock/cae-k8s-env.lock
[ -d /run/lock ] && [ -w /run/lock ] || LOCK=${TMPDIR:-/tmp}/cae-k8s-env.lock
say() { echo "k8s-env: $*" >&2; }

find_local() {
  local c
  for c in "${CAE_K8S_LOCAL:-}" ../shared/k8s/k8s-local.sh /work/shared/k8s/k8s-local.sh; do
    [ -n "$c" ] && [ -x "$c" ] && { echo "$c"; return 0; }
  done
  say "k8s-local.sh not found (set CAE_K8S_LOCAL)"
  return 1
}

running() { # the API server answers and the node is Ready
  [ -f "$K/pki/admin.kubeconfig" ] || return 1
  curl -sf --max-time 2 --cacert "$K/pki/ca.crt" --cert "$K/pki/admin.crt" --key "$K/pki/admin.key" \
    https://127.0.0.1:6443/api/v1/nodes/localhost 2>/dev/null |
    python3 -c 'import json, sys
c = json.load(sys.stdin)["status"].get("conditions", [])
sys.exit(0 if any(x["type"] == "Ready" and x["status"] == "True" for x in c) else 1)' 2>/dev/null
}

# Imports img unless the cluster has this very build of it (the Docker image id, recorded
# at the last import into this cluster's state).
import_image() {
  local kl=$1 img=$2 id rec
  id=$(docker image inspect -f '{{.Id}}' "$img" 2>/dev/null) || { say "no Docker image $img"; return 1; }
  rec=$K/imported/$(echo "$img" | tr '/:' '__')
  if [ -f "$rec" ] && [ "$(cat "$rec")" = "$id" ]; then
    say "$img is imported"
    return 0
  fi
  "$kl" import "$img" >&2 9>&-
  mkdir -p "$K/imported"
  echo "$id" >"$rec"
}

cmd_up() {
  local kl; kl=$(find_local)
  exec 9>"$LOCK"
  flock 9
  if running; then
    say "cluster already running"
  else
    say "starting the cluster"
    # 9>&-: the cluster's daemons must not inherit (and hold) this script's lock
    rm -rf "$K/imported" # a new cluster has a new containerd store
    mkdir -p "$K"
    touch "$MARK"
    "$kl" start >&2 9>&-
  fi
  local img
  for img in $IMAGES; do
    import_image "$kl" "$img"
  done
  echo "export KUBECONFIG=$K/pki/admin.kubeconfig"
}

cmd_down() {
  exec 9>"$LOCK"
  flock 9
  if [ ! -f "$MARK" ]; then
    say "no cluster started by this script (no $MARK): nothing to stop"
    return 0
  fi
  local kl; kl=$(find_local)
  "$kl" stop >&2 9>&-
  rm -f "$MARK"
}

case "${1:-}" in
  up) cmd_up ;;
  down) cmd_down ;;
  status) "$(find_local)" status ;;
  *) echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac
