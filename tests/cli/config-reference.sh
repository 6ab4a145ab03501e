#!/bin/sh
# docs/config.md is what `cae config reference` prints: the reference of every configuration
# key is generated from the schema (src/config/schema.c, src/config/schema-doc.c) and cannot
# drift from it. A key without a reference text makes the generator itself fail.
# usage: config-reference.sh CAE DOCS/CONFIG.MD
# Fix a difference with: build/cae config reference > docs/config.md
set -eu
out=$("$1" config reference) || { echo "cae config reference failed" >&2; exit 1; }
if ! printf '%s\n' "$out" | diff -u "$2" -; then
	echo "docs/config.md differs from \`cae config reference\`: run" >&2
	echo "  build/cae config reference > docs/config.md" >&2
	exit 1
fi
echo "docs/config.md is the generated reference"
