#!/usr/bin/env bash
# The lint itself (scripts/lint.sh): it must fail on a mis-formatted file, on a source file
# that does not include base/banned.h last, on library code that prints to stdout, on a git
# argv that does not start with CAE_GIT_ARGV, and on a
# comment or build file that cites a document outside the repository (a section of the
# product specification, a design document), and on a shared library that exports an internal
# symbol; and pass on a file that keeps the rules and on a library that exports only the public
# API. usage: test-lint.sh [LIBCAE.so] (the build's shared library, checked too when given) Ends with "N passed, N failed".
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
lint=$root/scripts/lint.sh
tmp=$(mktemp -d "$root/src/.lint-test-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
rel=${tmp#"$root"/}
passed=0 failed=0
expect() { # name, expected status (0 or 1), file[, text the complaint must hold]
	if "$lint" "$3" >/dev/null 2>"$tmp/err"; then got=0; else got=1; fi
	if [ "$got" = "$2" ] && { [ $# -lt 4 ] || grep -qF -- "$4" "$tmp/err"; }; then
		passed=$((passed + 1)); echo "ok - $1"
	else
		failed=$((failed + 1)); echo "not ok - $1"; sed 's/^/#   /' "$tmp/err"
	fi
}
printf '#include <stdio.h>\n\n#include "base/banned.h"\n\nint lint_ok(void);\nint lint_ok(void)\n{\n\treturn 0;\n}\n' > "$tmp/good.c"
expect "a file that keeps the rules passes" 0 "$rel/good.c"
printf '#include <stdio.h>\n\n#include "base/banned.h"\n\nint lint_bad(void);\nint lint_bad(void) {  return 0; }\n' > "$tmp/format.c"
expect "a mis-formatted file fails" 1 "$rel/format.c"
printf '#include "base/banned.h"\n#include <stdio.h>\n\nint lint_order(void);\nint lint_order(void)\n{\n\treturn 0;\n}\n' > "$tmp/order.c"
expect "banned.h not included last fails" 1 "$rel/order.c"
printf '#include <stdio.h>\n\n#include "base/banned.h"\n\nvoid lint_print(void);\nvoid lint_print(void)\n{\n\tputs("x");\n}\n' > "$tmp/print.c"
expect "library code printing to stdout fails" 1 "$rel/print.c"
printf '#include "base/banned.h"\n\nconst char *const *lint_git(void);\nconst char *const *lint_git(void)\n{\n\tstatic const char *const a[] = {"git", "add", "-A", 0};\n\treturn a;\n}\n' > "$tmp/git.c"
expect "a git argv without CAE_GIT_ARGV fails" 1 "$rel/git.c" "CAE_GIT_ARGV"
printf '#include "base/banned.h"\n\nvoid lint_git2(const char **a);\nvoid lint_git2(const char **a)\n{\n\ta[0] = "git";\n}\n' > "$tmp/git2.c"
expect "an argv slot set to a bare git fails" 1 "$rel/git2.c" "CAE_GIT_ARGV"
# a citation is built from parts, so that this file does not hold one itself
sect=$(printf '\302\247')
printf '#include <stdio.h>\n\n#include "base/banned.h"\n\n/* as SP%s %s2 says */\nint lint_spec(void);\n' EC "$sect" > "$tmp/spec.c"
expect "a comment citing the specification fails" 1 "$rel/spec.c" "spec.c:5: cites a document"
printf '#include <stdio.h>\n\n#include "base/banned.h"\n\n/* the se%s 002 form */\nint lint_seed(void);\n' ed > "$tmp/seed.c"
expect "a comment citing a design document fails" 1 "$rel/seed.c" "seed.c:5: cites a document"
printf "# the se%s's keys\nfoo = 1\n" ed > "$tmp/meson.build"
expect "a build file citing a design document fails" 1 "$rel/meson.build" \
	"meson.build:1: cites a document"
printf '#include <stdio.h>\n\n#include "base/banned.h"\n\nvoid seed_workspace(void);\n' > "$tmp/ident.c"
expect "an identifier starting with seed_ passes" 0 "$rel/ident.c"
# Exported symbols. The lint reads the shared library named by --lib (with one file that
# keeps the rules, so that nothing else is checked).
expect_lib() { # name, expected status, library[, text the complaint must hold]
	if "$lint" --lib "$3" "$rel/good.c" >/dev/null 2>"$tmp/err"; then got=0; else got=1; fi
	if [ "$got" = "$2" ] && { [ $# -lt 4 ] || grep -qF -- "$4" "$tmp/err"; }; then
		passed=$((passed + 1)); echo "ok - $1"
	else
		failed=$((failed + 1)); echo "not ok - $1"; sed 's/^/#   /' "$tmp/err"
	fi
}
cc=${CC:-cc}
printf '#include "cae/export.h"\n\nint cae__lint_internal(void);\nint cae__lint_internal(void)\n{\n\treturn 1;\n}\n' > "$tmp/hidden.c"
printf '#include "cae/export.h"\n\nCAE_EXPORT int cae__lint_internal(void);\nint cae__lint_internal(void)\n{\n\treturn 1;\n}\n' > "$tmp/exported.c"
printf '#include "cae/export.h"\n\nCAE_EXPORT int lint_unprefixed(void);\nint lint_unprefixed(void)\n{\n\treturn 1;\n}\n' > "$tmp/unprefixed.c"
for x in hidden exported unprefixed; do
	"$cc" -shared -fPIC -fvisibility=hidden -I"$root/include" -o "$tmp/lib$x.so" "$tmp/$x.c"
done
expect_lib "a library whose internal symbols are hidden passes" 0 "$tmp/libhidden.so"
expect_lib "a library exporting an internal symbol fails" 1 "$tmp/libexported.so" \
	"exports cae__lint_internal, which has the internal prefix cae__"
expect_lib "a library exporting a symbol without the cae_ prefix fails" 1 "$tmp/libunprefixed.so" \
	"exports lint_unprefixed, which lacks the cae_ prefix"
if [ $# -gt 0 ]; then
	expect_lib "the build's libcae.so exports only the public API" 0 "$1"
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
