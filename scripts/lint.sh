#!/usr/bin/env bash
# Project rules a compiler does not check:
#   - every .c under src/ includes base/banned.h (last);
#   - library code does not print to stdout;
#   - every C file is formatted as .clang-format says (clang-format -i FILE fixes it).
# usage: scripts/lint.sh [FILE...]   (default: every tracked file)
set -euo pipefail
cd "$(dirname "$0")/.."
bad=0
if [ $# -gt 0 ]; then
  files=("$@")
else
  mapfile -t files < <(git ls-files '*.c' '*.h')
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
    ;;
  esac
done
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
