/* Docker backend benchmarks (issue 3), against the real engine (bench/run.sh runs this from
 * the source root; scripts/docker-env.sh up starts an engine and builds the images).
 * 1. prepare of a small repository with no dependencies, split into create, start, clone and
 *    deps, p50 over BENCH_PREPARE_N runs (default 10; target p50 <= 1.5 s). The repository
 *    is served by scripts/git-server.sh (git daemon on loopback; the container uses the host
 *    network, as the engine of the test machines has no bridge).
 * 2. exec round trip of `true` through the Engine API (cae_backend_exec) next to
 *    `docker exec <id> true` (the CLI) in the same run, interleaved, BENCH_N times (default
 *    50; target: not slower than the CLI). */
#include "base/timeutil.h"
#include "cae/backend.h"
#include "cae/config.h"
#include "cae/log.h"
#include "cae/runner.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int cmp64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return x < y ? -1 : x > y;
}

static double p50_ms(int64_t *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp64);
	return v[n / 2] / 1e6;
}

static int env_int(const char *name, int def)
{
	const char *s = getenv(name);
	return s && *s ? (int)strtol(s, NULL, 10) : def;
}

static int sh(const char *cmd)
{
	int st = system(cmd);
	return st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Progress timestamps of one prepare. */
struct marks {
	int64_t at[8];
};

static void on_progress(void *ud, int step, int total, const char *msg)
{
	struct marks *m = ud;
	(void)total;
	(void)msg;
	if (step >= 1 && step <= 7)
		m->at[step] = cae_now_ns();
}

/* create_ms and start_ms of the last environment.create event in the log file. */
static void create_split(const char *logpath, int64_t *create_ns, int64_t *start_ns)
{
	FILE *f = fopen(logpath, "r");
	char line[8192];
	*create_ns = *start_ns = 0;
	while (f && fgets(line, sizeof(line), f)) {
		json_t *j = json_loads(line, 0, NULL);
		const char *ev = json_string_value(json_object_get(j, "event"));
		if (ev && strcmp(ev, "environment.create") == 0) {
			*create_ns = json_integer_value(json_object_get(j, "create_ms")) * 1000000;
			*start_ns = json_integer_value(json_object_get(j, "start_ms")) * 1000000;
		}
		json_decref(j);
	}
	if (f)
		fclose(f);
}

int main(int argc, char **argv)
{
	(void)argc;
	(void)argv;
	int np = env_int("BENCH_PREPARE_N", 10), ne = env_int("BENCH_N", 50);
	const char *root = getenv("CAE_SOURCE_ROOT");
	char tmpl[] = "/tmp/cae-bench-docker-XXXXXX";
	char *dir = mkdtemp(tmpl);
	if (!dir)
		return 1;
	char cmd[4096], url[512] = "";
	/* A small repository without dependency manifests, served on loopback. */
	snprintf(cmd, sizeof(cmd),
		 "set -e; mkdir -p %s/work %s/srv && cd %s/work && git init -q -b main && "
		 "printf 'print(\"hello\")\\n' > main.py && printf '# bench\\n' > README.md && "
		 "git add . && git -c user.email=b@e -c user.name=b commit -qm init && "
		 "git clone -q --bare . %s/srv/small.git",
		 dir, dir, dir, dir);
	if (sh(cmd) != 0) {
		fprintf(stderr, "bench-docker: cannot make the repository\n");
		return 1;
	}
	snprintf(cmd, sizeof(cmd), "%s%sscripts/git-server.sh start %s/srv", root ? root : "",
		 root ? "/" : "", dir);
	FILE *p = popen(cmd, "r");
	char line[512];
	while (p && fgets(line, sizeof(line), p))
		if (strncmp(line, "GIT_DAEMON_URL=", 15) == 0)
			snprintf(url, sizeof(url), "%.*ssmall.git", (int)strcspn(line + 15, "\n"),
				 line + 15);
	if (!p || pclose(p) != 0 || !url[0]) {
		fprintf(stderr, "bench-docker: git-server.sh did not start (run from the source "
				"root, or set CAE_SOURCE_ROOT)\n");
		return 1;
	}

	cae_config *cfg = cae_config_defaults(NULL);
	cae_error err = {0};
	const char *dh = getenv("DOCKER_HOST");
	if ((dh && *dh && cae_config_set(cfg, "command_executor.docker_host", dh, &err) < 0) ||
	    cae_config_set(cfg, "command_executor.docker.network.mode", "host", &err) < 0) {
		fprintf(stderr, "bench-docker: %s\n", err.message);
		return 1;
	}
	char logpath[600];
	snprintf(logpath, sizeof(logpath), "%s/log.jsonl", dir);
	int logfd = open(logpath, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	cae_log *log = cae_log_new(logfd, CAE_LOG_INFO);
	cae_backend *b = NULL;
	if (cae_backend_new_named("docker", cfg, log, &b, &err) < 0) {
		fprintf(stderr, "bench-docker: %s\n", err.message);
		return 1;
	}

	/* 1. prepare, split */
	int64_t *total = calloc((size_t)np, sizeof(int64_t)), *create = calloc((size_t)np, 8),
		*start = calloc((size_t)np, 8), *clone = calloc((size_t)np, 8),
		*deps = calloc((size_t)np, 8), *remove = calloc((size_t)np, 8);
	char uuid[64];
	snprintf(uuid, sizeof(uuid), "bench-%d", (int)getpid());
	cae_task task = {.uuid = uuid, .repo = url};
	for (int i = 0; i < np; i++) {
		struct marks m = {{0}};
		cae_prepare_options o = {
		    .progress = on_progress, .progress_userdata = &m, .cancel_fd = -1};
		cae_env_info info;
		int64_t t0 = cae_now_ns();
		if (cae_backend_prepare(b, &task, "python", &o, &info, &err) < 0) {
			fprintf(stderr, "bench-docker: prepare: %s\n", err.message);
			return 1;
		}
		total[i] = cae_now_ns() - t0;
		cae_env_info_clear(&info);
		create_split(logpath, &create[i], &start[i]);
		remove[i] = m.at[3] - m.at[2]; /* the clean start (removes run i-1's container) */
		clone[i] = m.at[5] - m.at[4];
		deps[i] = m.at[6] - m.at[5];
	}
	printf("docker.prepare_ms p50=%.0f (remove=%.0f create=%.0f start=%.0f clone=%.0f "
	       "deps=%.0f) target_p50<=1500 n=%d\n",
	       p50_ms(total, np), p50_ms(remove, np), p50_ms(create, np), p50_ms(start, np),
	       p50_ms(clone, np), p50_ms(deps, np), np);

	/* 2. exec round trip: API next to the CLI, interleaved */
	cae_env_info info;
	if (cae_backend_info(b, uuid, &info, &err) < 0) {
		fprintf(stderr, "bench-docker: %s\n", err.message);
		return 1;
	}
	int64_t *api = calloc((size_t)ne, 8), *cli = calloc((size_t)ne, 8);
	const char *targv[] = {"true", NULL};
	cae_exec_request req = {.argv = targv, .timeout_ms = 60000, .cancel_fd = -1};
	const char *cargv[] = {"docker", "exec", info.container_id, "true", NULL};
	cae_run_spec cspec = {.argv = cargv, .timeout_ms = 60000, .cancel_fd = -1};
	int cli_ok = 1;
	for (int i = 0; i < ne; i++) {
		cae_run_result r;
		int64_t t = cae_now_ns();
		if (cae_backend_exec(b, uuid, &req, &r, &err) < 0 || r.exit_code != 0) {
			fprintf(stderr, "bench-docker: exec: %s\n", err.message);
			return 1;
		}
		api[i] = cae_now_ns() - t;
		cae_run_result_clear(&r);
		t = cae_now_ns();
		if (cae_runner_run(&cspec, &r, &err) < 0 || r.exit_code != 0)
			cli_ok = 0;
		cli[i] = cae_now_ns() - t;
		cae_run_result_clear(&r);
	}
	double ma = p50_ms(api, ne), mc = p50_ms(cli, ne);
	if (cli_ok)
		printf("docker.exec_roundtrip_true_ms p50=%.1f baseline(docker exec CLI)=%.1f "
		       "ratio=%.2f target<=1.00 n=%d\n",
		       ma, mc, ma / mc, ne);
	else
		printf(
		    "docker.exec_roundtrip_true_ms p50=%.1f baseline(docker exec CLI)=unavailable "
		    "n=%d\n",
		    ma, ne);

	cae_backend_cleanup(b, uuid, NULL);
	cae_env_info_clear(&info);
	cae_backend_free(b);
	cae_log_free(log);
	close(logfd);
	cae_config_free(cfg);
	snprintf(cmd, sizeof(cmd),
		 "%s%sscripts/git-server.sh stop %s/srv >/dev/null 2>&1; rm -rf %s",
		 root ? root : "", root ? "/" : "", dir, dir);
	sh(cmd);
	free(total);
	free(create);
	free(start);
	free(clone);
	free(deps);
	free(remove);
	free(api);
	free(cli);
	return 0;
}
