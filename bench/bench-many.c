/* Many tasks on one host, against the real engine (bench/run.sh runs this from
 * the source root; scripts/docker-env.sh up starts an engine and builds the images):
 * 32 prepares of a small repository at once (threads, one backend each, as 32 processes
 * would have), with the engine steps limited by command_executor.docker.max_concurrent_engine_ops
 * (default 4): how many succeed, and their p50 and p95 next to one prepare alone (p50 of
 * BENCH_PREPARE_N runs, default 5) in the same run. BENCH_MANY (default 32) and
 * BENCH_ENGINE_OPS (default: the configured default) change the figures' conditions. Then
 * the aggregate throughput of `true` through the helpers of all of them at once
 * (BENCH_TRUE_N commands each, default 100) next to one environment alone. The
 * repository is served by scripts/git-server.sh (git daemon on loopback; the containers use
 * the host network). */
#include "base/timeutil.h"
#include "benchutil.h"
#include "cae/backend.h"
#include "cae/config.h"

#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* The q-quantile (nearest rank) of v[0..n), in ms. */
static double quantile_ms(int64_t *v, int n, double q)
{
	qsort(v, (size_t)n, sizeof(*v), bench_cmp64);
	int k = (int)(q * n + 0.999999) - 1;
	return v[k < 0 ? 0 : k >= n ? n - 1 : k] / 1e6;
}

struct one {
	const cae_config *cfg;
	char uuid[64];
	const char *url;
	cae_backend *b;
	int64_t ns;
	int r;
	cae_error err;
};

/* BENCH_TRUE_N commands of `true` through o's environment's helper, one after another. */
static int true_n;
static void *true_main(void *arg)
{
	struct one *o = arg;
	const char *argv[] = {"true", NULL};
	cae_exec_request req = {.argv = argv, .timeout_ms = 60000, .cancel_fd = -1};
	for (int i = 0; i < true_n && o->r == 0; i++) {
		cae_run_result res;
		o->r = cae_backend_exec(o->b, o->uuid, &req, &res, &o->err);
		if (o->r == 0) {
			if (res.exit_code != 0)
				o->r = -EIO;
			cae_run_result_clear(&res);
		}
	}
	return NULL;
}

static void *prepare_main(void *arg)
{
	struct one *o = arg;
	cae_task task = {.uuid = o->uuid, .repo = (char *)o->url};
	cae_env_info info;
	int64_t t0 = cae__now_ns();
	o->r = cae_backend_prepare(o->b, &task, "python", NULL, &info, &o->err);
	o->ns = cae__now_ns() - t0;
	if (o->r == 0)
		cae_env_info_clear(&info);
	return NULL;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	int np = bench_env_int("BENCH_PREPARE_N", 5), many = bench_env_int("BENCH_MANY", 32);
	bench_use_static_helper(argc > 1 ? argv[1] : "build");
	const char *root = getenv("CAE_SOURCE_ROOT");
	char tmpl[] = "/tmp/cae-bench-many-XXXXXX";
	char *dir = mkdtemp(tmpl);
	if (!dir || np < 1 || many < 1)
		return 1;
	char url[512] = "";
	if (bench_small_repo_start("bench-many", dir, root, url, sizeof(url)) < 0)
		return 1;
	cae_config *cfg = cae_config_defaults(NULL);
	cae_error err = {0};
	char state[600], ops[16];
	snprintf(state, sizeof(state), "%s/state", dir);
	snprintf(ops, sizeof(ops), "%d", bench_env_int("BENCH_ENGINE_OPS", 0));
	const char *dh = getenv("DOCKER_HOST");
	if ((dh && *dh && cae_config_set(cfg, "command_executor.docker_host", dh, &err) < 0) ||
	    cae_config_set(cfg, "command_executor.docker.network.mode", "host", &err) < 0 ||
	    cae_config_set(cfg, "command_executor.state_dir", state, &err) < 0 ||
	    (getenv("BENCH_ENGINE_OPS") &&
	     cae_config_set(cfg, "command_executor.docker.max_concurrent_engine_ops", ops, &err) <
		 0)) {
		fprintf(stderr, "bench-many: %s\n", err.message);
		return 1;
	}
	struct one *all = calloc((size_t)(many > np ? many : np), sizeof(*all));
	for (int i = 0; i < (many > np ? many : np); i++) {
		all[i].cfg = cfg;
		all[i].url = url;
		snprintf(all[i].uuid, sizeof(all[i].uuid), "bench-many-%d-%d", (int)getpid(), i);
		if (cae_backend_new_named("docker", cfg, NULL, &all[i].b, &err) < 0) {
			fprintf(stderr, "bench-many: %s\n", err.message);
			return 1;
		}
	}

	/* one alone */
	int64_t *alone = calloc((size_t)np, sizeof(int64_t));
	for (int i = 0; i < np; i++) {
		prepare_main(&all[0]);
		if (all[0].r < 0) {
			fprintf(stderr, "bench-many: prepare: %s\n", all[0].err.message);
			return 1;
		}
		alone[i] = all[0].ns;
	}
	(void)cae_backend_cleanup(all[0].b, all[0].uuid, NULL);

	/* many at once */
	pthread_t *t = calloc((size_t)many, sizeof(pthread_t));
	int64_t t0 = cae__now_ns();
	for (int i = 0; i < many; i++)
		pthread_create(&t[i], NULL, prepare_main, &all[i]);
	int ok = 0;
	int64_t *ns = calloc((size_t)many, sizeof(int64_t));
	for (int i = 0; i < many; i++) {
		pthread_join(t[i], NULL);
		ns[i] = all[i].ns;
		if (all[i].r == 0)
			ok++;
		else
			fprintf(stderr, "bench-many: prepare %d: %s\n", i, all[i].err.message);
	}
	int64_t wall = cae__now_ns() - t0;
	printf("many.prepare_ms concurrent=%d succeeded=%d p50=%.0f p95=%.0f wall=%.0f "
	       "engine_ops=%d | alone p50=%.0f (n=%d)\n",
	       many, ok, quantile_ms(ns, many, 0.5), quantile_ms(ns, many, 0.95), wall / 1e6,
	       cfg->command_executor.docker.max_concurrent_engine_ops, quantile_ms(alone, np, 0.5),
	       np);
	/* aggregate `true` throughput through the helpers of all of them at once (each
	 * environment's channel opened first, outside the timing, as an agent's first command
	 * would) next to one environment alone */
	true_n = bench_env_int("BENCH_TRUE_N", 100);
	int saved = true_n;
	true_n = 1;
	for (int i = 0; i < many && ok == many; i++)
		true_main(&all[i]);
	true_n = saved;
	int64_t a0 = cae__now_ns();
	true_main(&all[0]);
	double alone_per_s = true_n / ((cae__now_ns() - a0) / 1e9);
	int64_t w0 = cae__now_ns();
	for (int i = 0; i < many && ok == many; i++)
		pthread_create(&t[i], NULL, true_main, &all[i]);
	int failed = 0;
	for (int i = 0; i < many && ok == many; i++) {
		pthread_join(t[i], NULL);
		if (all[i].r < 0 && failed++ == 0)
			fprintf(stderr, "bench-many: true: %s\n", all[i].err.message);
	}
	double wall_s = (cae__now_ns() - w0) / 1e9;
	if (ok == many)
		printf("many.true_per_s environments=%d commands=%d failed=%d aggregate=%.0f "
		       "target>=500 | one environment alone=%.0f\n",
		       many, many * true_n, failed, many * true_n / wall_s, alone_per_s);
	int64_t c0 = cae__now_ns();
	for (int i = 0; i < many; i++)
		(void)cae_backend_cleanup(all[i].b, all[i].uuid, NULL);
	printf("many.cleanup_ms n=%d wall=%.0f\n", many, (cae__now_ns() - c0) / 1e6);
	for (int i = 0; i < (many > np ? many : np); i++)
		cae_backend_free(all[i].b);
	bench_small_repo_stop(dir, root);
	free(t);
	free(ns);
	free(alone);
	free(all);
	cae_config_free(cfg);
	return ok == many ? 0 : 1;
}
