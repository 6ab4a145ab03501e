/* What the benchmarks that prepare environments share: sorting timings and their median, the
 * progress steps' times of a prepare, integer settings from
 * the environment, a shell line, the static helper beside the build, and a small repository
 * served on loopback by scripts/git-server.sh (so that a prepare clones for real). */
#ifndef CAE_BENCH_BENCHUTIL_H
#define CAE_BENCH_BENCHUTIL_H

#include "base/timeutil.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static inline int bench_cmp64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return x < y ? -1 : x > y;
}

/* The median of v[0..n) (sorted in place), in ms; 0 when n is 0. */
static inline double bench_p50_ms(int64_t *v, int n)
{
	if (n <= 0)
		return 0;
	qsort(v, (size_t)n, sizeof(*v), bench_cmp64);
	return (double)v[n / 2] / 1e6;
}

/* When each of a prepare's progress steps (1 to 7) began: bench_on_progress as its progress
 * callback, the marks as its userdata. */
struct bench_marks {
	int64_t at[8];
};

static inline void bench_on_progress(void *ud, int step, int total, const char *msg)
{
	struct bench_marks *m = ud;
	(void)total;
	(void)msg;
	if (step >= 1 && step <= 7)
		m->at[step] = cae__now_ns();
}

static inline int bench_env_int(const char *name, int def)
{
	const char *s = getenv(name);
	return s && *s ? (int)strtol(s, NULL, 10) : def;
}

static inline int bench_sh(const char *cmd)
{
	int st = system(cmd);
	return st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* CAE_HELPER_STATIC from <build>/cae-helper-static unless set. */
static inline void bench_use_static_helper(const char *build)
{
	char hpath[600];
	snprintf(hpath, sizeof(hpath), "%s/cae-helper-static", build);
	if (!getenv("CAE_HELPER_STATIC") && access(hpath, X_OK) == 0) {
		char *real = realpath(hpath, NULL);
		if (real)
			setenv("CAE_HELPER_STATIC", real, 1);
		free(real);
	}
}

/* Makes dir/srv/small.git (a commit of main.py and README.md, no dependency manifests) and
 * serves it; url gets its git:// address. root: the source tree (NULL: the current
 * directory). 0, or -1 with the reason on stderr under the name prog. */
/* Makes a small repository (two files, one commit) under dir and serves it with
 * scripts/git-server.sh (root: the source root, NULL: the working directory); url gets it as
 * the server's line "<which>=" says (GIT_DAEMON_URL=: git://, GIT_HTTP_PUBLIC_URL=: smart
 * HTTP without auth, as a forge serves a public repository). */
static inline int bench_small_repo_serve(const char *prog, const char *dir, const char *root,
					 const char *which, char *url, size_t size)
{
	char cmd[4096];
	snprintf(cmd, sizeof(cmd),
		 "set -e; mkdir -p %s/work %s/srv && cd %s/work && git init -q -b main && "
		 "printf 'print(\"hello\")\\n' > main.py && printf '# bench\\n' > README.md && "
		 "git add . && git -c user.email=b@e -c user.name=b commit -qm init && "
		 "git clone -q --bare . %s/srv/small.git",
		 dir, dir, dir, dir);
	if (bench_sh(cmd) != 0) {
		fprintf(stderr, "%s: cannot make the repository\n", prog);
		return -1;
	}
	snprintf(cmd, sizeof(cmd), "%s%sscripts/git-server.sh start %s/srv", root ? root : "",
		 root ? "/" : "", dir);
	url[0] = '\0';
	FILE *p = popen(cmd, "r");
	char line[512];
	while (p && fgets(line, sizeof(line), p))
		if (strncmp(line, which, strlen(which)) == 0)
			snprintf(url, size, "%.*ssmall.git",
				 (int)strcspn(line + strlen(which), "\n"), line + strlen(which));
	if (!p || pclose(p) != 0 || !url[0]) {
		fprintf(stderr,
			"%s: git-server.sh did not start (run from the source root, or set "
			"CAE_SOURCE_ROOT)\n",
			prog);
		return -1;
	}
	return 0;
}

/* bench_small_repo_serve over git:// (git daemon). */
static inline int bench_small_repo_start(const char *prog, const char *dir, const char *root,
					 char *url, size_t size)
{
	return bench_small_repo_serve(prog, dir, root, "GIT_DAEMON_URL=", url, size);
}

/* Stops the server and removes dir. */
static inline void bench_small_repo_stop(const char *dir, const char *root)
{
	char cmd[4096];
	snprintf(cmd, sizeof(cmd),
		 "%s%sscripts/git-server.sh stop %s/srv >/dev/null 2>&1; rm -rf %s",
		 root ? root : "", root ? "/" : "", dir, dir);
	(void)bench_sh(cmd);
}

#endif
