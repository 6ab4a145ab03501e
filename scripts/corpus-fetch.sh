#!/usr/bin/env bash
# The upstream sources of the corpus tests (tests/mcp/corpus.mjs), fetched from Debian's
# mirror and cached, never kept in this tree.
#
#   scripts/corpus-fetch.sh PACKAGE...
#
# For each Debian source package, prints "PACKAGE VERSION DIR": DIR holds the upstream
# source (the package's .orig tarball, unpacked, without Debian's changes). A package in the
# cache (${CAE_CORPUS_CACHE:-~/.cache/cae-corpus}) is not downloaded again. A missing one is
# fetched with `apt-get source --download-only` through a private sources list (a deb-src
# line for the mirror and suite of /etc/apt/sources.list.d/debian.sources) and private lists
# under the cache: the host's apt configuration and state are read, never written. Runs as
# any user; callers at the same time wait for each other (flock).
set -euo pipefail

say() { echo "corpus-fetch: $*" >&2; }
die() { say "$*"; exit 1; }
[ $# -ge 1 ] || { echo "usage: $0 PACKAGE..." >&2; exit 2; }

cache=${CAE_CORPUS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/cae-corpus}
mkdir -p "$cache/src"
exec 9>"$cache/.lock"
flock 9

apt_opts=()
updated=
# The private apt configuration, and the mirror's Sources index (once per run that fetches).
apt_update() {
  [ -n "$updated" ] && return 0
  local srcs=/etc/apt/sources.list.d/debian.sources uri suite key
  [ -r "$srcs" ] || die "no $srcs to find the mirror in"
  uri=$(awk '/^URIs:/ { print $2; exit }' "$srcs")
  suite=$(awk '/^Suites:/ { print $2; exit }' "$srcs")
  key=$(awk '/^Signed-By:/ { print $2; exit }' "$srcs")
  [ -n "$uri" ] && [ -n "$suite" ] || die "no URIs/Suites in $srcs"
  mkdir -p "$cache/apt/lists/partial" "$cache/apt/cache/archives/partial"
  printf 'deb-src %s %s %s main\n' "${key:+[signed-by=$key]}" "$uri" "$suite" >"$cache/apt/sources.list"
  apt_opts=(-q -o "Dir::Etc::SourceList=$cache/apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
    -o "Dir::State::Lists=$cache/apt/lists" -o "Dir::Cache=$cache/apt/cache"
    -o Dir::State::status=/dev/null -o APT::Sandbox::User="$(id -un)")
  say "apt-get update ($uri $suite, deb-src)"
  apt-get "${apt_opts[@]}" update >&2 || die "apt-get update failed"
  updated=1
}

for pkg in "$@"; do
  case "$pkg" in *[!a-z0-9.+-]*|"") die "bad package name: $pkg" ;; esac
  dir=$cache/src/$pkg
  if [ ! -f "$dir/.corpus-version" ]; then
    apt_update
    tmp=$(mktemp -d "$cache/dl.XXXXXX")
    trap 'rm -rf -- "$tmp"' EXIT
    say "apt-get source --download-only $pkg"
    # Only the upstream tarball is used: a mirror that lacks the Debian part still does.
    (cd "$tmp" && apt-get "${apt_opts[@]}" source --download-only "$pkg" >&2) || true
    orig=$(find "$tmp" -maxdepth 1 -name "${pkg}_*.orig.tar.*" | head -n 1)
    [ -n "$orig" ] || die "$pkg: the mirror gave no upstream tarball"
    version=${orig##*/"${pkg}"_}
    version=${version%.orig.tar.*}
    mkdir "$tmp/x"
    tar -xf "$orig" -C "$tmp/x"
    # One top directory (name-version/) in the tarball: its contents are the source.
    src=$tmp/x
    if [ "$(find "$tmp/x" -mindepth 1 -maxdepth 1 | wc -l)" -eq 1 ] &&
      [ -d "$(find "$tmp/x" -mindepth 1 -maxdepth 1)" ]; then
      src=$(find "$tmp/x" -mindepth 1 -maxdepth 1)
    fi
    echo "$version" >"$src/.corpus-version"
    rm -rf -- "$dir"
    mv -- "$src" "$dir"
    rm -rf -- "$tmp"
    trap - EXIT
  fi
  echo "$pkg $(cat "$dir/.corpus-version") $dir"
done
