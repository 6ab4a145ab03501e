#!/usr/bin/env bash
# Project rules a compiler does not check: every .c under src/ includes base/banned.h
# (last), and library code does not print to stdout.
set -euo pipefail
cd "$(dirname "$0")/.."
bad=0
for f in $(git ls-files 'src/*.c'); do
  last=$(grep -n '^#include' "$f" | tail -1 | cut -d: -f2-)
  if [ "$last" != '#include "base/banned.h"' ]; then
    echo "lint: $f: base/banned.h must be the last include" >&2; bad=1
  fi
done
for f in $(git ls-files 'src/*.c' | grep -v -E '^src/cli/|^src/helper/main\.c$'); do
  if grep -nE '\b(printf|puts|putchar)\(' "$f" | grep -v -E '(snprintf|vsnprintf|dprintf|fprintf|cae_buf_printf)' >/dev/null; then
    echo "lint: $f: library code must not print to stdout" >&2; bad=1
  fi
done
[ $bad -eq 0 ] && echo "lint: ok" >&2
exit $bad
