/* Runner benchmarks (issue: foundation).
 * 1. round trip of `true` through cae_runner_run next to a bare posix_spawn + waitpid loop
 *    measured in the same run (target: within 1.5x);
 * 2. output throughput through the runner for `head -c 1G /dev/zero` under a 1 MiB cap next
 *    to `head -c 1G /dev/zero | cat > /dev/null` (target: >= 1 GB/s). */
#include "base/timeutil.h"
#include "cae/runner.h"

#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

extern char **environ;

static int cmp64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return x < y ? -1 : x > y;
}

static int64_t median(int64_t *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp64);
	return v[n / 2];
}

int main(int argc, char **argv)
{
	const char *ns = getenv("BENCH_N");
	int n = ns ? (int)strtol(ns, NULL, 10) : 2000;
	(void)argc;
	(void)argv;
	int64_t *a = calloc((size_t)n, sizeof(int64_t)), *b = calloc((size_t)n, sizeof(int64_t));
	char *true_path = NULL;
	cae_runner_find_program("true", NULL, &true_path);
	char *targv[] = {true_path, NULL};
	const char *cargv[] = {true_path, NULL};
	cae_run_spec spec = {.argv = cargv, .cancel_fd = -1};
	/* Interleave the two loops so that machine noise hits both alike. */
	for (int i = 0; i < n; i++) {
		int64_t t = cae__now_ns();
		pid_t pid;
		if (posix_spawn(&pid, true_path, NULL, NULL, targv, environ) == 0)
			waitpid(pid, NULL, 0);
		b[i] = cae__now_ns() - t;
		t = cae__now_ns();
		cae_run_result r;
		cae_runner_run(&spec, &r, NULL);
		a[i] = cae__now_ns() - t;
		cae_run_result_clear(&r);
	}
	int64_t ma = median(a, n), mb = median(b, n);
	printf("runner.roundtrip_true_us median=%.1f baseline(posix_spawn+waitpid)=%.1f ratio=%.2f "
	       "target<=1.50 n=%d\n",
	       ma / 1000.0, mb / 1000.0, (double)ma / (double)mb, n);

	/* Throughput. */
	const char *hargv[] = {"head", "-c", "1G", "/dev/zero", NULL};
	cae_run_spec hs = {.argv = hargv, .max_stdout = 1024 * 1024, .cancel_fd = -1};
	double best = 0, base_best = 0;
	for (int k = 0; k < 3; k++) {
		int64_t t = cae__now_ns();
		cae_run_result r;
		cae_runner_run(&hs, &r, NULL);
		double s = (cae__now_ns() - t) / 1e9;
		double gbs = (double)r.out_total / s / 1e9;
		if (gbs > best)
			best = gbs;
		cae_run_result_clear(&r);
		const char *sargv[] = {"sh", "-c", "head -c 1G /dev/zero | cat > /dev/null", NULL};
		cae_run_spec ss = {.argv = sargv, .cancel_fd = -1};
		t = cae__now_ns();
		cae_runner_run(&ss, &r, NULL);
		s = (cae__now_ns() - t) / 1e9;
		gbs = 1073741824.0 / s / 1e9;
		if (gbs > base_best)
			base_best = gbs;
		cae_run_result_clear(&r);
	}
	printf("runner.throughput_GBps best_of_3=%.2f baseline(cat>/dev/null)=%.2f target>=1.00 "
	       "cap=1MiB\n",
	       best, base_best);
	free(a);
	free(b);
	free(true_path);
	return 0;
}
