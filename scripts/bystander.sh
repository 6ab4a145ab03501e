#!/usr/bin/env bash
# A bystander for `make check`: environments of another cae instance, living on the same
# Docker engine (and cluster) while every suite runs, that no test may remove or replace.
# A machine that serves real tasks runs the test suite next to them: the suites are each
# their own instance (every test's state directory gives it one), and this proves they
# never touch another's.
#
#   scripts/bystander.sh up CAE DIR     prepare one environment per backend (local; docker
#                                       with CAE_TEST_DOCKER; kubernetes with CAE_TEST_K8S)
#                                       as instance "bystander-..." with state under DIR,
#                                       and leave an uncommitted file in each
#   scripts/bystander.sh check CAE DIR  each is still listed by its instance, runs a
#                                       command, and still has that file (never prepared
#                                       again); exit 1 otherwise
#   scripts/bystander.sh down CAE DIR   remove them, then DIR
#
# CAE is the built cae program. Containers use network none (a local repository reaches
# them as a bundle); pods use the host network and clone from a loopback git server
# (scripts/git-server.sh) that runs only during `up`.
set -uo pipefail
cmd=${1:-} cae=${2:-} dir=${3:-}
if [ -z "$cmd" ] || [ -z "$cae" ] || [ -z "$dir" ]; then
  echo "usage: $0 up|check|down CAE DIR" >&2
  exit 2
fi
say() { echo "bystander: $*" >&2; }

backends=local
[ -n "${CAE_TEST_DOCKER:-}" ] && backends="$backends docker"
[ -n "${CAE_TEST_K8S:-}" ] && backends="$backends kubernetes"
tag=$(basename "$dir" | tr -cd 'a-z0-9' | tail -c 12)
export CAE_INSTANCE="bystander-$tag"
uuid_of() { echo "bystander-$1-$tag"; }

config_of() {
  local b=$1 f=$dir/$1.yaml
  {
    echo "command_executor:"
    echo "  backend: $b"
    echo "  state_dir: $dir/state"
    echo "  clone: {auto_install_deps: false}"
    echo "  cleanup: {on_session_end: false}"
    case $b in
    docker)
      echo "  docker: {network: {mode: none}, resources: {memory_limit: 512m, cpu_limit: 1}}" ;;
    kubernetes)
      echo "  docker: {network: {mode: host}, resources: {memory_limit: 512m, cpu_limit: 1}}"
      echo "  kubernetes: {namespace: default, node_name: localhost, image_pull_policy: Never}" ;;
    esac
  } >"$f"
  echo "$f"
}

run() { # backend, subcommand, its arguments...
  local b=$1 sub=$2
  shift 2
  "$cae" "$sub" --config "$(config_of "$b")" "$@"
}

up() {
  mkdir -p "$dir/state" || return 1
  git -c init.defaultBranch=main init -q "$dir/repo" &&
    echo "bystander" >"$dir/repo/hello.txt" &&
    git -C "$dir/repo" add hello.txt &&
    git -C "$dir/repo" -c user.name=b -c user.email=b@example.com commit -qm bystander || return 1
  local b repo lines
  for b in $backends; do
    repo=$dir/repo
    if [ "$b" = kubernetes ]; then
      git clone -q --bare "$dir/repo" "$dir/srv/repo.git" || return 1
      lines=$(scripts/git-server.sh start "$dir/srv") || return 1
      repo=$(echo "$lines" | sed -n 's/^GIT_DAEMON_URL=//p')repo.git
    fi
    run "$b" prepare --repo "$repo" --uuid "$(uuid_of "$b")" >/dev/null
    local r=$?
    [ "$b" = kubernetes ] && scripts/git-server.sh stop "$dir/srv" >/dev/null
    [ $r -eq 0 ] || { say "$b: prepare failed"; return 1; }
    run "$b" exec --uuid "$(uuid_of "$b")" -- 'echo alive > .bystander' >/dev/null ||
      { say "$b: exec failed"; return 1; }
    say "$b: $(uuid_of "$b") ready (instance $CAE_INSTANCE)"
  done
}

check() {
  local b u bad=0 out
  for b in $backends; do
    u=$(uuid_of "$b")
    if ! run "$b" env list | grep -q "\"task_uuid\": *\"$u\""; then
      say "$b: $u is no longer listed"
      bad=1
      continue
    fi
    out=$(run "$b" exec --uuid "$u" -- 'cat hello.txt .bystander' 2>&1)
    if ! grep -qF '"stdout": "bystander\nalive\n"' <<<"$out"; then
      say "$b: $u does not answer as it did: $out"
      bad=1
    fi
  done
  [ $bad -eq 0 ] && say "every bystander environment is untouched ($backends)"
  return $bad
}

down() {
  local b
  for b in $backends; do
    run "$b" cleanup --uuid "$(uuid_of "$b")" >/dev/null || say "$b: cleanup failed"
  done
  rm -rf "$dir"
}

case $cmd in
up) up ;;
check) check ;;
down) down ;;
*) echo "usage: $0 up|check|down CAE DIR" >&2; exit 2 ;;
esac
