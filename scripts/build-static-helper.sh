#!/bin/sh
# Builds cae-helper as one static executable with musl (Debian's musl-tools), so that it runs
# unmodified in any container image (it is copied in, not installed there).
#   build-static-helper.sh MUSL_GCC OUTPUT SOURCE_ROOT VERSION SOURCE...
# musl-gcc sees only musl's headers: the kernel's (linux/, asm/, asm-generic/) and jansson's
# declarations are linked into
# a directory of their own beside OUTPUT, so that glibc's headers never mix in.
set -eu
cc=$1 out=$2 root=$3 version=$4
shift 4
inc=$out.kernel-headers
mkdir -p "$inc"
arch=$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
ln -sfn /usr/include/linux "$inc/linux"
ln -sfn "/usr/include/$arch/asm" "$inc/asm"
ln -sfn /usr/include/asm-generic "$inc/asm-generic"
# The editor's public header names jansson's types; the helper calls none of its functions
# (it runs requests the manager checked), so the declarations are all it needs.
ln -sfn /usr/include/jansson.h "$inc/jansson.h"
ln -sfn /usr/include/jansson_config.h "$inc/jansson_config.h"
exec "$cc" -static -Os -s -std=c17 -Wall -Wextra -Werror -Wno-unused-parameter \
	-Wno-missing-field-initializers -D_GNU_SOURCE -DCAE_VERSION="\"$version\"" \
	-DCAE_HELPER_STATIC=1 -I"$root/include" -I"$root/src" -isystem "$inc" -o "$out" "$@" -lpthread
