/* The mirror cache's benchmark: prepare (and its clone step) of a small repository served on
 * loopback (scripts/git-server.sh), p50 over BENCH_CLONE_N prepares (default 10) each, with
 * the cache off (every clone from the remote: the baseline) and with it on and warm (the
 * mirror made by one prepare before the timed ones), for the local backend and, when an
 * engine answers, the docker backend, in the same run. BENCH_CLONE_COMMITS (default 1) gives
 * the repository more history (each commit adds a 64 KiB file of random bytes), to see how
 * the two grow with its size. Run from the source root: build/bench/bench-clone build */
#include "base/timeutil.h"
#include "benchutil.h"
#include "cae/backend.h"
#include "cae/config.h"
#include "cae/docker.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int set(cae_config *cfg, const char *key, const char *value)
{
	cae_error err = {0};
	if (cae_config_set(cfg, key, value, &err) < 0) {
		fprintf(stderr, "bench-clone: %s: %s\n", key, err.message);
		return -1;
	}
	return 0;
}

/* p50 of n prepares of url (prepare and clone step, ms) with backend name and the cache on or
 * off; with it on, one prepare first makes the mirror. 0 or -1. */
static int measure(const char *name, const char *url, const char *state, bool cache, int n,
		   double *prep_p50, double *clone_p50)
{
	cae_config *cfg = cae_config_defaults(NULL);
	if (!cfg || set(cfg, "command_executor.backend", name) < 0 ||
	    set(cfg, "command_executor.state_dir", state) < 0 ||
	    set(cfg, "command_executor.clone.auto_install_deps", "false") < 0 ||
	    set(cfg, "command_executor.clone.mirror_cache.enabled", cache ? "true" : "false") < 0 ||
	    (strcmp(name, "docker") == 0 &&
	     set(cfg, "command_executor.docker.network.mode", "host") < 0))
		return -1;
	if (getenv("DOCKER_HOST") && *getenv("DOCKER_HOST") &&
	    set(cfg, "command_executor.docker_host", getenv("DOCKER_HOST")) < 0)
		return -1;
	cae_backend *b = NULL;
	cae_error err = {0};
	if (cae_backend_new_named(name, cfg, NULL, &b, &err) < 0) {
		fprintf(stderr, "bench-clone: %s: %s\n", name, err.message);
		cae_config_free(cfg);
		return -1;
	}
	int64_t *prep = calloc((size_t)n, sizeof(int64_t));
	int64_t *clone = calloc((size_t)n, sizeof(int64_t));
	int r = prep && clone ? 0 : -1;
	for (int i = cache ? -1 : 0; r == 0 && i < n; i++) {
		char uuid[96];
		snprintf(uuid, sizeof(uuid), "bench-clone-%d-%s-%d-%d", (int)getpid(), name, cache,
			 i + 1);
		cae_task t = {.uuid = uuid, .repo = (char *)url};
		struct bench_marks m = {{0}};
		cae_prepare_options o = {
		    .progress = bench_on_progress, .progress_userdata = &m, .cancel_fd = -1};
		cae_env_info info;
		int64_t t0 = cae__now_ns();
		r = cae_backend_prepare(b, &t, "python", &o, &info, &err);
		int64_t t1 = cae__now_ns();
		if (r < 0) {
			fprintf(stderr, "bench-clone: prepare (%s): %s\n", name, err.message);
			break;
		}
		cae_env_info_clear(&info);
		if (i >= 0) {
			prep[i] = t1 - t0;
			clone[i] = m.at[5] - m.at[4];
		}
		(void)cae_backend_cleanup(b, uuid, &err);
	}
	if (r == 0) {
		*prep_p50 = bench_p50_ms(prep, n);
		*clone_p50 = bench_p50_ms(clone, n);
	}
	free(prep);
	free(clone);
	cae_backend_free(b);
	cae_config_free(cfg);
	return r;
}

static bool engine_answers(void)
{
	cae_docker *d = NULL;
	bool ok = cae_docker_new(getenv("DOCKER_HOST"), &d, NULL) == 0 &&
		  cae_docker_ping(d, 3000, NULL) == 0;
	cae_docker_free(d);
	return ok;
}

int main(int argc, char **argv)
{
	const char *build = argc > 1 ? argv[1] : "build";
	bench_use_static_helper(build);
	int n = bench_env_int("BENCH_CLONE_N", 10);
	int commits = bench_env_int("BENCH_CLONE_COMMITS", 1);
	if (n < 1)
		n = 1;
	char dir[] = "/tmp/bench-clone-XXXXXX";
	if (!mkdtemp(dir))
		return 1;
	char url[512];
	if (bench_small_repo_start("bench-clone", dir, getenv("CAE_SOURCE_ROOT"), url,
				   sizeof(url)) < 0)
		return 1;
	if (commits > 1) {
		char cmd[4096];
		snprintf(cmd, sizeof(cmd),
			 "set -e; cd %s/work && for i in $(seq 2 %d); do head -c 65536 "
			 "/dev/urandom > blob$i && git add . && git -c user.email=b@e -c "
			 "user.name=b commit -qm c$i; done && git push -q %s/srv/small.git main",
			 dir, commits, dir);
		if (bench_sh(cmd) != 0) {
			fprintf(stderr, "bench-clone: cannot grow the repository\n");
			bench_small_repo_stop(dir, getenv("CAE_SOURCE_ROOT"));
			return 1;
		}
	}
	printf("prepare of a small repository (%d commit%s), p50 of %d, cache off (baseline) vs "
	       "on and warm:\n",
	       commits, commits == 1 ? "" : "s", n);
	const char *backends[] = {"local", "docker"};
	int status = 0;
	for (size_t k = 0; k < 2; k++) {
		if (k == 1 && !engine_answers()) {
			printf("  docker: no engine answers, skipped\n");
			continue;
		}
		double p[2] = {0}, c[2] = {0};
		for (int cache = 0; cache < 2; cache++) {
			char state[600];
			snprintf(state, sizeof(state), "%s/state-%s-%d", dir, backends[k], cache);
			if (measure(backends[k], url, state, cache, n, &p[cache], &c[cache]) < 0) {
				status = 1;
				break;
			}
		}
		if (status)
			break;
		printf("  %-6s prepare %8.1f ms -> %8.1f ms   clone step %8.1f ms -> %8.1f ms "
		       "(%.2fx)\n",
		       backends[k], p[0], p[1], c[0], c[1], c[1] > 0 ? c[0] / c[1] : 0);
	}
	bench_small_repo_stop(dir, getenv("CAE_SOURCE_ROOT"));
	return status;
}
