/* bench-pkgcache: the shared package cache (command_executor.package_cache) on the local
 * backend: `npm ci` of one lock file (express 4.21.2: 72 packages, from the npm registry)
 * in a prepare's dependency step, each in a new environment:
 *
 *   cold      the cache off (every package from the registry, npm's own cache empty)
 *   first     the cache on and empty (fills it)
 *   second    the cache on, filled by first: a new environment of the same lock file
 *
 * The figure is the install's own duration (deps[].duration_ms of the prepare's result).
 * Go is not measured here: no Go toolchain on this host and no Go module proxy reachable,
 * and Go's caches are not shared (pkgcache.h says why).
 *
 *   build/bench/bench-pkgcache   (BENCH_PKGCACHE_N: rounds, 3; needs bubblewrap, npm and
 *                                 the npm registry)
 *
 * Target: second at least 2x faster than cold. */
#include "benchutil.h"
#include "cae/backend.h"
#include "cae/config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static cae_config *config(const char *state_dir, bool cache)
{
	cae_config *cfg = cae_config_defaults(NULL);
	cae_error err = {0};
	if (cae_config_set(cfg, "command_executor.backend", "local", &err) < 0 ||
	    cae_config_set(cfg, "command_executor.state_dir", state_dir, &err) < 0 ||
	    cae_config_set(cfg, "command_executor.package_cache.enabled", cache ? "true" : "false",
			   &err) < 0) {
		fprintf(stderr, "bench-pkgcache: %s\n", err.message);
		exit(1);
	}
	return cfg;
}

/* One prepare of repo in a new environment: the npm ci's duration in ms, -1 on failure. */
static int64_t npm_ci_ms(cae_config *cfg, const char *repo, const char *uuid)
{
	cae_backend *b;
	cae_error err = {0};
	if (cae_backend_new_named("local", cfg, NULL, &b, &err) < 0) {
		fprintf(stderr, "bench-pkgcache: %s\n", err.message);
		exit(1);
	}
	cae_task t = {.uuid = (char *)uuid, .repo = (char *)repo};
	cae_env_info info;
	int64_t ms = -1;
	if (cae_backend_prepare(b, &t, "node", NULL, &info, &err) < 0) {
		fprintf(stderr, "bench-pkgcache: prepare: %s\n", err.message);
	} else {
		json_t *d = json_array_get(info.deps, 0);
		if (json_is_true(json_object_get(d, "success")))
			ms = json_integer_value(json_object_get(d, "duration_ms"));
		else
			fprintf(stderr, "bench-pkgcache: npm ci failed: %s\n",
				json_string_value(json_object_get(d, "output")));
		cae_env_info_clear(&info);
	}
	cae_backend_cleanup(b, uuid, &err);
	cae_backend_free(b);
	return ms;
}

int main(void)
{
	int n = bench_env_int("BENCH_PKGCACHE_N", 3);
	char tmpl[] = "/tmp/bench-pkgcache-XXXXXX";
	char *root = mkdtemp(tmpl);
	if (!root)
		return 1;
	char repo[4200], cmd[9000], state_cold[4200], state_cache[4200];
	snprintf(repo, sizeof(repo), "%s/repo", root);
	snprintf(cmd, sizeof(cmd),
		 "mkdir -p %s && cd %s && git init -q && printf '{\"name\":\"b\",\"version\":"
		 "\"1.0.0\",\"dependencies\":{\"express\":\"4.21.2\"}}\\n' > package.json && "
		 "npm install --package-lock-only --ignore-scripts --no-audit --no-fund --cache "
		 "%s/npm >/dev/null 2>&1 && git add . && git -c user.name=b -c user.email=b@b "
		 "commit -qm lock",
		 repo, repo, root);
	if (bench_sh(cmd) != 0) {
		fprintf(stderr, "bench-pkgcache: could not make the lock file (npm registry?)\n");
		return 1;
	}
	printf("npm ci of express 4.21.2 (its lock file), a new local environment each, %d "
	       "rounds\n",
	       n);
	printf("%-6s %10s %10s %10s %8s\n", "round", "cold ms", "first ms", "second ms",
	       "cold/2nd");
	for (int i = 0; i < n; i++) {
		snprintf(state_cold, sizeof(state_cold), "%s/state-cold-%d", root, i);
		snprintf(state_cache, sizeof(state_cache), "%s/state-cache-%d", root, i);
		cae_config *cold = config(state_cold, false), *cached = config(state_cache, true);
		char u1[64], u2[64], u3[64];
		snprintf(u1, sizeof(u1), "bench-pkgcache-cold-%d", i);
		snprintf(u2, sizeof(u2), "bench-pkgcache-first-%d", i);
		snprintf(u3, sizeof(u3), "bench-pkgcache-second-%d", i);
		int64_t c = npm_ci_ms(cold, repo, u1);
		int64_t f = npm_ci_ms(cached, repo, u2);
		int64_t s = npm_ci_ms(cached, repo, u3);
		printf("%-6d %10lld %10lld %10lld %8.2f\n", i + 1, (long long)c, (long long)f,
		       (long long)s, s > 0 ? (double)c / (double)s : 0.0);
		fflush(stdout);
		cae_config_free(cold);
		cae_config_free(cached);
	}
	snprintf(cmd, sizeof(cmd), "rm -rf %s", root);
	bench_sh(cmd);
	return 0;
}
