/* bench-prepare: prepare of a small repository (served on loopback by
 * scripts/git-server.sh over smart HTTP, as a forge serves it; BENCH_PREPARE_PROTO=git for
 * git daemon's git://; the container uses the host network), p50 of each kind, interleaved:
 *
 *   cold        no pool, no mirror cache: create, helper upload, start, clone
 *   warm        command_executor.pool of one and the mirror cache: a container claimed
 *               from the pool by the process that filled it (as a long-lived `cae mcp`
 *               does, through the helper stream it kept), the clone from the mirror
 *   warm_other  the same pool and cache, the container claimed by another backend (as
 *               another process would: no kept stream)
 *
 * The pool is filled before each warm prepare, outside the timing, as a long-lived
 * process's collector would; the mirror was made by the first prepare, not counted.
 *
 *   build/bench/bench-prepare [build dir]   (BENCH_PREPARE_N: prepares of each kind, 10)
 *
 * Targets on a quiet machine: warm p50 <= 150 ms, cold p50 <= 1 s. */
#include "base/timeutil.h"
#include "benchutil.h"
#include "cae/backend.h"
#include "cae/config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static cae_config *config(const char *pool_size, const char *state_dir)
{
	cae_config *cfg = cae_config_defaults(NULL);
	cae_error err = {0};
	const char *dh = getenv("DOCKER_HOST");
	if ((dh && *dh && cae_config_set(cfg, "command_executor.docker_host", dh, &err) < 0) ||
	    cae_config_set(cfg, "command_executor.docker.network.mode", "host", &err) < 0 ||
	    cae_config_set(cfg, "command_executor.pool.max_age_seconds", "600", &err) < 0 ||
	    cae_config_set(cfg, "command_executor.pool.size", pool_size, &err) < 0 ||
	    cae_config_set(cfg, "command_executor.state_dir", state_dir, &err) < 0 ||
	    cae_config_set(cfg, "command_executor.clone.mirror_cache.enabled",
			   strcmp(pool_size, "0") ? "true" : "false", &err) < 0) {
		fprintf(stderr, "bench-prepare: %s\n", err.message);
		exit(1);
	}
	return cfg;
}

static const char *const step_names[] = {"",	  "validate", "remove", "create",
					 "clone", "deps",     "editor", "ready"};

enum { COLD, WARM, WARM_OTHER, KINDS };
static const char *const kind_names[] = {"cold", "warm", "warm_other"};

/* One prepare (and its cleanup, not timed): its time, and each step's in steps[1..7]. */
static int64_t prepare_once(cae_backend *b, const char *url, const char *uuid, const char *id_of,
			    int *warm, int64_t *steps)
{
	cae_task task = {.uuid = (char *)uuid, .repo = (char *)url};
	struct bench_marks m = {0};
	cae_prepare_options o = {
	    .cancel_fd = -1, .progress = bench_on_progress, .progress_userdata = &m};
	cae_env_info info;
	cae_error err = {0};
	int64_t t0 = cae__now_ns();
	if (cae_backend_prepare(b, &task, "python", &o, &info, &err) < 0) {
		fprintf(stderr, "bench-prepare: prepare: %s\n", err.message);
		exit(1);
	}
	int64_t t1 = cae__now_ns(), t = t1 - t0;
	for (int k = 1; k <= 7; k++)
		steps[k] = (k < 7 ? m.at[k + 1] : t1) - m.at[k];
	if (warm)
		*warm += id_of && strcmp(info.container_id, id_of) == 0;
	cae_env_info_clear(&info);
	(void)cae_backend_cleanup(b, uuid, &err);
	return t;
}

/* Fills b's pool (to one) and writes the container it holds into id. */
static void fill(cae_backend *b, char *id, size_t size)
{
	int created = 0;
	json_t *st = NULL;
	cae_error err = {0};
	if (cae_backend_pool_fill(b, -1, &created, &err) < 0 ||
	    cae_backend_pool_status(b, &st, &err) < 0) {
		fprintf(stderr, "bench-prepare: pool: %s\n", err.message);
		exit(1);
	}
	size_t k;
	json_t *e;
	id[0] = '\0';
	json_array_foreach(st, k, e)
	{
		if (json_is_true(json_object_get(e, "this_config")) &&
		    !json_is_true(json_object_get(e, "expired")))
			snprintf(id, size, "%s",
				 json_string_value(json_object_get(e, "container_id")));
	}
	json_decref(st);
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	int n = bench_env_int("BENCH_PREPARE_N", 10);
	bench_use_static_helper(argc > 1 ? argv[1] : "build");
	const char *root = getenv("CAE_SOURCE_ROOT");
	char tmpl[] = "/tmp/cae-bench-prepare-XXXXXX";
	char *dir = mkdtemp(tmpl);
	char url[512] = "", state[600];
	const char *proto = getenv("BENCH_PREPARE_PROTO");
	bool git_daemon = proto && strcmp(proto, "git") == 0;
	if (!dir || bench_small_repo_serve("bench-prepare", dir, root,
					   git_daemon ? "GIT_DAEMON_URL=" : "GIT_HTTP_PUBLIC_URL=",
					   url, sizeof(url)) < 0)
		return 1;
	snprintf(state, sizeof(state), "%s/state", dir);
	cae_config *cold_cfg = config("0", state), *warm_cfg = config("1", state);
	cae_backend *b[KINDS] = {NULL};
	cae_error err = {0};
	for (int k = 0; k < KINDS; k++) {
		if (cae_backend_new_named("docker", k == COLD ? cold_cfg : warm_cfg, NULL, &b[k],
					  &err) < 0) {
			fprintf(stderr, "bench-prepare: %s\n", err.message);
			return 1;
		}
	}
	int64_t *t[KINDS], *steps[KINDS][8], one[8];
	for (int k = 0; k < KINDS; k++) {
		t[k] = calloc((size_t)n, 8);
		for (int s = 1; s <= 7; s++)
			steps[k][s] = calloc((size_t)n, 8);
	}
	int claimed[KINDS] = {0};
	char uuid[64], id[128];
	/* one of each first, not counted (images in the page cache, the engine warm, the
	 * mirror made) */
	for (int i = -1; i < n; i++) {
		for (int k = 0; k < KINDS; k++) {
			snprintf(uuid, sizeof(uuid), "bench-prepare-%d-%c%d", (int)getpid(),
				 "cwo"[k], i + 1);
			if (k != COLD)
				fill(b[WARM], id, sizeof(id)); /* the filler is WARM's backend */
			int64_t v = prepare_once(b[k], url, uuid, k == COLD ? NULL : id,
						 i >= 0 ? &claimed[k] : NULL, one);
			if (i < 0)
				continue;
			t[k][i] = v;
			for (int s = 1; s <= 7; s++)
				steps[k][s][i] = one[s];
		}
	}
	int removed = 0;
	(void)cae_backend_pool_drain(b[WARM], false, &removed, &err);
	printf("bench-prepare: %s, %s\n", url, git_daemon ? "git daemon" : "smart HTTP");
	printf("docker.prepare_cold_ms p50=%.0f target_p50<=1000 n=%d\n", bench_p50_ms(t[COLD], n),
	       n);
	printf("docker.prepare_warm_ms p50=%.0f target_p50<=150 (pool + mirror cache, claimed by "
	       "the filling process: %d of %d) n=%d\n",
	       bench_p50_ms(t[WARM], n), claimed[WARM], n, n);
	printf("docker.prepare_warm_other_ms p50=%.0f (claimed by another process: %d of %d) "
	       "n=%d\n",
	       bench_p50_ms(t[WARM_OTHER], n), claimed[WARM_OTHER], n, n);
	for (int k = 0; k < KINDS; k++) {
		printf("docker.prepare_steps_ms %s (p50 of each step):", kind_names[k]);
		for (int s = 1; s <= 7; s++) {
			printf(" %s %.1f", step_names[s], bench_p50_ms(steps[k][s], n));
			free(steps[k][s]);
		}
		printf("\n");
		free(t[k]);
		cae_backend_free(b[k]);
	}
	cae_config_free(cold_cfg);
	cae_config_free(warm_cfg);
	bench_small_repo_stop(dir, root);
	return claimed[WARM] == n && claimed[WARM_OTHER] == n ? 0 : 1;
}
