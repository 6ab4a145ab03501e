/* bench-prepare: prepare of a small repository (served on loopback by
 * scripts/git-server.sh; the container uses the host network), cold (create, helper upload,
 * start, clone) next to warm (a container claimed from command_executor.pool, then the
 * clone), p50 of each, interleaved. The pool is filled between warm prepares, outside the
 * timing, as a long-lived process's collector would.
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

static cae_config *config(const char *pool_size)
{
	cae_config *cfg = cae_config_defaults(NULL);
	cae_error err = {0};
	const char *dh = getenv("DOCKER_HOST");
	if ((dh && *dh && cae_config_set(cfg, "command_executor.docker_host", dh, &err) < 0) ||
	    cae_config_set(cfg, "command_executor.docker.network.mode", "host", &err) < 0 ||
	    cae_config_set(cfg, "command_executor.pool.max_age_seconds", "600", &err) < 0 ||
	    cae_config_set(cfg, "command_executor.pool.size", pool_size, &err) < 0) {
		fprintf(stderr, "bench-prepare: %s\n", err.message);
		exit(1);
	}
	return cfg;
}

static int64_t prepare_once(cae_backend *b, const char *url, const char *uuid, const char *id_of,
			    int *warm)
{
	cae_task task = {.uuid = (char *)uuid, .repo = (char *)url};
	cae_prepare_options o = {.cancel_fd = -1};
	cae_env_info info;
	cae_error err = {0};
	int64_t t0 = cae__now_ns();
	if (cae_backend_prepare(b, &task, "python", &o, &info, &err) < 0) {
		fprintf(stderr, "bench-prepare: prepare: %s\n", err.message);
		exit(1);
	}
	int64_t t = cae__now_ns() - t0;
	if (warm)
		*warm += id_of && strcmp(info.container_id, id_of) == 0;
	cae_env_info_clear(&info);
	(void)cae_backend_cleanup(b, uuid, &err);
	return t;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	int n = bench_env_int("BENCH_PREPARE_N", 10);
	bench_use_static_helper(argc > 1 ? argv[1] : "build");
	const char *root = getenv("CAE_SOURCE_ROOT");
	char tmpl[] = "/tmp/cae-bench-prepare-XXXXXX";
	char *dir = mkdtemp(tmpl);
	char url[512] = "";
	if (!dir || bench_small_repo_start("bench-prepare", dir, root, url, sizeof(url)) < 0)
		return 1;
	cae_config *cold_cfg = config("0"), *warm_cfg = config("1");
	cae_backend *cold = NULL, *warm = NULL;
	cae_error err = {0};
	if (cae_backend_new_named("docker", cold_cfg, NULL, &cold, &err) < 0 ||
	    cae_backend_new_named("docker", warm_cfg, NULL, &warm, &err) < 0) {
		fprintf(stderr, "bench-prepare: %s\n", err.message);
		return 1;
	}
	int64_t *tc = calloc((size_t)n, 8), *tw = calloc((size_t)n, 8);
	int claimed = 0;
	char uuid[64];
	/* one of each first, not counted (images in the page cache, the engine warm) */
	for (int i = -1; i < n; i++) {
		snprintf(uuid, sizeof(uuid), "bench-prepare-%d-c%d", (int)getpid(), i + 1);
		int64_t c = prepare_once(cold, url, uuid, NULL, NULL);
		int created = 0;
		json_t *st = NULL;
		char id[128] = "";
		if (cae_backend_pool_fill(warm, -1, &created, &err) < 0 ||
		    cae_backend_pool_status(warm, &st, &err) < 0) {
			fprintf(stderr, "bench-prepare: pool: %s\n", err.message);
			return 1;
		}
		size_t k;
		json_t *e;
		json_array_foreach(st, k, e)
		{
			if (json_is_true(json_object_get(e, "this_config")) &&
			    !json_is_true(json_object_get(e, "expired")))
				snprintf(id, sizeof(id), "%s",
					 json_string_value(json_object_get(e, "container_id")));
		}
		json_decref(st);
		snprintf(uuid, sizeof(uuid), "bench-prepare-%d-w%d", (int)getpid(), i + 1);
		int64_t w = prepare_once(warm, url, uuid, id, i >= 0 ? &claimed : NULL);
		if (i >= 0) {
			tc[i] = c;
			tw[i] = w;
		}
	}
	int removed = 0;
	(void)cae_backend_pool_drain(warm, false, &removed, &err);
	printf("docker.prepare_cold_ms p50=%.0f target_p50<=1000 n=%d\n", bench_p50_ms(tc, n), n);
	printf("docker.prepare_warm_ms p50=%.0f target_p50<=150 (claimed %d of %d) n=%d\n",
	       bench_p50_ms(tw, n), claimed, n, n);
	cae_backend_free(cold);
	cae_backend_free(warm);
	cae_config_free(cold_cfg);
	cae_config_free(warm_cfg);
	bench_small_repo_stop(dir, root);
	free(tc);
	free(tw);
	return claimed == n ? 0 : 1;
}
