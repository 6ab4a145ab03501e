#!/usr/bin/env bash
# Installs the Debian packages cae needs that are missing. `build`: what building needs;
# `test`: also what the test suite needs (bubblewrap and e2fsprogs, for the local sandbox and its
# workspace file system, are in both; git, clang for fuzzing, valgrind,
# Docker, Podman (its Docker-compatible API, scripts/podman-env.sh), the loopback git server,
# Node for the MCP clients, Go for the corpus's Go project (tests/mcp/corpus.mjs); the Kubernetes cluster's own
# packages are installed by k8s-local.sh start; python3-venv and maven for the local
# environments' virtual environment and /etc-configured toolchains, a JDK for the Maven tests'
# plugin; xfsprogs for bench-snapshot's
# state directory on a file system that shares extents). Needs root to install; as
# another user it only names what is missing.
set -euo pipefail
what=${1:-build}
pkgs=(build-essential meson ninja-build pkg-config libjansson-dev libyaml-dev libcurl4-openssl-dev
      libwebsockets-dev libseccomp-dev libarchive-dev check git musl-tools bubblewrap e2fsprogs)
if [ "$what" = test ]; then
  pkgs+=(clang clang-format libclang-rt-14-dev valgrind procps python3 jq
         debootstrap nginx fcgiwrap busybox-static keyutils strace gdb openssh-server
         openssh-client podman python3-venv maven golang-go xfsprogs)
fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ "$what" = test ]; then
  # Programs that may come from other packagings (Node.js from NodeSource ships npm; Docker
  # from docker-ce): only install Debian's when the program is missing.
  command -v dockerd >/dev/null || missing+=(docker.io)
  command -v node >/dev/null || missing+=(nodejs)
  command -v npm >/dev/null || missing+=(npm)
  # javac and jar build the Maven tests' plugin (tests/data/maven/make.sh); maven itself
  # brings only a Java runtime
  { command -v javac && command -v jar; } >/dev/null || missing+=(default-jdk-headless)
fi
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps: missing packages: ${missing[*]} (run as root, or apt-get install them)" >&2
  exit 1
fi
echo "install-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >&2
# RUNLEVEL=1: packages with services (nginx) must not start them on the host.
RUNLEVEL=1 apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
