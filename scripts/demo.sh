#!/usr/bin/env bash
# The main job on the embedded default (the local backend, no Docker): make a small git
# repository with a test suite, let `cae run` prepare an environment for it (clone), run its
# tests inside the environment (confined by bubblewrap when installed), print the result,
# and clean up. Needs only what `make` needs (a C compiler and make run the tests).
set -euo pipefail
cd "$(dirname "$0")/.."
CAE=${CAE:-build/cae}
work=$(mktemp -d /tmp/cae-demo-XXXXXX)
trap 'rm -rf "$work"' EXIT
repo=$work/calc
mkdir -p "$repo"
cat > "$repo/calc.c" <<'C'
int add(int a, int b) { return a + b; }
int mul(int a, int b) { return a * b; }
C
cat > "$repo/test_calc.c" <<'C'
#include <stdio.h>
int add(int a, int b);
int mul(int a, int b);
int main(void)
{
	int failed = 0;
	failed += add(2, 3) != 5;
	failed += mul(4, 5) != 20;
	printf("%d passed, %d failed\n", 2 - failed, failed);
	return failed != 0;
}
C
printf 'test: calc.c test_calc.c\n\tcc -o test_calc calc.c test_calc.c\n\t./test_calc\n' > "$repo/Makefile"
git -C "$repo" init -q -b main
git -C "$repo" add .
git -C "$repo" -c user.email=demo@example.com -c user.name=demo commit -qm "calc with tests"

echo "== cae run: prepare an environment for $repo, run 'make test' in it, clean up" >&2
export CAE_STATE_DIR=${CAE_STATE_DIR:-$work/state}
# The job runs as a user would run it, not as a sub-make of this Makefile.
unset MAKEFLAGS MAKELEVEL MFLAGS
set +e
"$CAE" run --backend local --repo "$repo" --uuid demo-calc -- make test
status=$?
set -e
echo "== exit status: $status" >&2
exit $status
