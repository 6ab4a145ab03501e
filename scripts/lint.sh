#!/usr/bin/env bash
# Project rules a compiler does not check:
#   - every .c under src/ includes base/banned.h (last);
#   - library code does not print to stdout;
#   - every C file is formatted as .clang-format says (clang-format -i FILE fixes it);
#   - no code, build file or script cites a document outside the repository (the product
#     specification by section, the design documents it came from, the style guide): a
#     comment states the rule itself, or points at a file in the repository;
#   - the shared library exports only what include/cae/ declares (the library is built with
#     hidden visibility and the public API marked CAE_EXPORT): no internal function, no
#     cae__ name, nothing without the cae_ prefix;
#   - every git argv in src/ starts with CAE_GIT_ARGV (base/gitsafe.h);
#   - docs/config.md is what the build's `cae config reference` prints (the reference is
#     generated from the schema; checked with the library, when the build has a cae);
#   - a test program that meson.build runs one case at a time (CK_RUN_CASE) has each of its
#     cases in that meson.build's list: a case left out would never run.
# usage: scripts/lint.sh [--lib LIBRARY.so] [FILE...]
#   default: every tracked file, and the build tree's libcae.so ($CAE_BUILD or build/; it is
#   brought up to date first). With FILEs, the library is checked only when --lib names one.
set -euo pipefail
lib=
if [ "${1:-}" = --lib ]; then
  lib=$(realpath -- "$2"); shift 2
fi
cd "$(dirname "$0")/.."
bad=0
if [ -z "$lib" ] && [ $# -eq 0 ]; then
  build=${CAE_BUILD:-build}
  if [ -f "$build/build.ninja" ]; then
    ninja -C "$build" libcae.so >/dev/null || bad=1
  fi
  lib=$build/libcae.so
  if [ ! -f "$lib" ]; then
    echo "lint: $lib: no library to check (meson setup $build && ninja -C $build)" >&2
    bad=1; lib=
  fi
fi
if [ $# -gt 0 ]; then
  files=("$@")
  cite_files=("$@")
else
  mapfile -t files < <(git ls-files '*.c' '*.h')
  mapfile -t cite_files < <(git ls-files src include tests scripts fuzz bench meson.build \
    '*/meson.build')
fi
for f in "${files[@]}"; do
  case "$f" in
  src/*.c|*/src/*.c)
    last=$(grep -n '^#include' "$f" | tail -1 | cut -d: -f2-)
    if [ "$last" != '#include "base/banned.h"' ]; then
      echo "lint: $f: base/banned.h must be the last include" >&2; bad=1
    fi
    case "$f" in
    src/cli/*|*/src/cli/*|src/helper/main.c|*/src/helper/main.c) ;;
    *)
      if grep -nE '\b(printf|puts|putchar)\(' "$f" |
         grep -v -E '(snprintf|vsnprintf|dprintf|fprintf|cae_buf_printf)' >/dev/null; then
        echo "lint: $f: library code must not print to stdout" >&2; bad=1
      fi
      ;;
    esac
    # git started by cae in a workspace begins with CAE_GIT_ARGV (src/base/gitsafe.h): an
    # argv that starts with a bare "git" (an array, an argv slot, a shell line) would read
    # hooks, fsmonitor, credential helpers from the repository an agent wrote
    if hits=$(grep -nE '(\{[[:space:]]*"git"[[:space:]]*,|\][[:space:]]*=[[:space:]]*"git"[[:space:]]*;|\bgit (clone|fetch|add|commit|push|config|diff|reset|checkout|bundle|rev-parse|merge-base|status) [^"]*\\"\$)' "$f"); then
      while IFS= read -r h; do
        echo "lint: $f:${h%%:*}: a git argv without CAE_GIT_ARGV (base/gitsafe.h)" >&2
      done <<<"$hits"
      bad=1
    fi
    ;;
  esac
done
# Citations of documents outside the repository: "SPEC §2", "SPEC.md", "seed 002", "the
# seed's", "STYLE.md", or a bare section sign. Data (golden files, fuzz corpora) and this
# lint with its own test (which name the patterns) are not checked.
cite_re='\bSPEC\b|SPEC\.md|STYLE\.md|\b[Ss]eeds?\b|§'
for f in "${cite_files[@]}"; do
  case "$f" in
  tests/data/*|fuzz/corpus/*|scripts/lint.sh|tests/lint/test-lint.sh) continue ;;
  src/*|include/*|tests/*|scripts/*|fuzz/*|bench/*|meson.build|*/meson.build) ;;
  *) continue ;;
  esac
  [ -f "$f" ] || continue
  if hits=$(grep -InE "$cite_re" "$f"); then
    while IFS= read -r h; do
      echo "lint: $f:${h%%:*}: cites a document outside the repository (state the rule itself)" >&2
    done <<<"$hits"
    bad=1
  fi
done
# Exported symbols: the dynamic symbols the library defines, against the names the public
# headers declare (functions and variables, read from the preprocessed headers). The linker's
# own symbols and AddressSanitizer's markers of exported variables (__odr_asan.NAME) are not
# the library's.
if [ -n "$lib" ]; then
  declared=$(for h in include/cae/*.h; do echo "#include \"${h#include/}\""; done |
    ${CC:-cc} -E -P -Iinclude $(pkg-config --cflags jansson 2>/dev/null) -x c - |
    grep -oE '\bcae_[A-Za-z0-9_]+[[:space:]]*[(\[]' | sed -E 's/[[:space:]]*[(\[]$//' | sort -u)
  exported=$(nm -D --defined-only "$lib" | awk 'NF == 3 && $2 ~ /^[A-Z]$/ { print $3 }' |
    grep -vxE '_init|_fini|_edata|_end|__bss_start|__odr_asan\..*' | sort -u || true)
  if [ -z "$declared" ]; then
    echo "lint: include/cae/*.h: could not read the declared names" >&2; bad=1
  fi
  while IFS= read -r sym; do
    [ -n "$sym" ] || continue
    case "$sym" in
    cae__*) why="has the internal prefix cae__" ;;
    cae_*) why="is not declared in include/cae/" ;;
    *) why="lacks the cae_ prefix" ;;
    esac
    echo "lint: $lib: exports $sym, which $why (only the public API is exported)" >&2
    bad=1
  done < <(comm -23 <(echo "$exported") <(echo "$declared"))
  while IFS= read -r sym; do
    [ -n "$sym" ] || continue
    echo "lint: $lib: exports $sym, which has the internal prefix cae__" >&2; bad=1
  done < <(echo "$exported" | grep -E '^cae__' | comm -12 - <(echo "$declared") || true)
fi
# Test programs split by case: meson.build's foreach list names every tcase_create of the
# source (the list is the line "foreach c : [...]" just above the source's executable or
# test that sets CK_RUN_CASE; the test's source names its cases literally).
if [ $# -eq 0 ]; then
  while IFS= read -r mb; do
    dir=$(dirname "$mb")
    for src in $(grep -o "'test-[a-z0-9-]*\.c'" "$mb" | tr -d "'" | sort -u); do
      list=$(awk -v src="'$src'" 'index($0, src) { found = 1; next } found && /^test\(/ { exit } found && /^foreach c : \[/ { print; exit }' "$mb")
      [ -n "$list" ] || continue
      for c in $(grep -o 'tcase_create("[^"]*")' "$dir/$src" | sed 's/tcase_create("\(.*\)")/\1/'); do
        if ! grep -q "'$c'" <<<"$list"; then
          echo "lint: $mb: case $c of $src is in no CK_RUN_CASE test: it would never run" >&2; bad=1
        fi
      done
    done
  done < <(git ls-files '*/meson.build' | xargs grep -l CK_RUN_CASE)
fi
# The configuration reference, generated from the schema (src/config/schema.c and
# schema-doc.c): the committed docs/config.md must be the build's output.
if [ -n "$lib" ] && [ -x "$(dirname "$lib")/cae" ] && [ -f docs/config.md ]; then
  if [ -f "$(dirname "$lib")/build.ninja" ]; then
    ninja -C "$(dirname "$lib")" cae >/dev/null || bad=1
  fi
  if ! "$(dirname "$lib")/cae" config reference | cmp -s - docs/config.md; then
    echo "lint: docs/config.md differs from \`cae config reference\` ($(dirname "$lib")/cae config reference > docs/config.md)" >&2
    bad=1
  fi
fi
if ! command -v clang-format >/dev/null; then
  echo "lint: clang-format is not installed (Debian package clang-format)" >&2; bad=1
else
  for f in "${files[@]}"; do
    case "$f" in
    *.c|*.h)
      if ! clang-format --dry-run --Werror "$f" >/dev/null 2>&1; then
        echo "lint: $f: not formatted as .clang-format says (clang-format -i $f)" >&2; bad=1
      fi
      ;;
    esac
  done
fi
[ $bad -eq 0 ] && echo "lint: ok" >&2
exit $bad
