/* Docker backend benchmarks (issue 3), against the real engine (bench/run.sh runs this from
 * the source root; scripts/docker-env.sh up starts an engine and builds the images).
 * 1. prepare of a small repository with no dependencies, split into create, start, clone and
 *    deps, p50 over BENCH_PREPARE_N runs (default 10; target p50 <= 1.5 s). The repository
 *    is served by scripts/git-server.sh (git daemon on loopback; the container uses the host
 *    network, as the engine of the test machines has no bridge).
 * 2. exec round trip of `true`: through the container's cae-helper (cae_backend_exec), next
 *    to a raw Engine API exec (cae_docker_exec: create, start, inspect) and `docker exec <id>
 *    true` (the CLI), interleaved, BENCH_N times (default 50; targets: helper p50 <= 3 ms and
 *    >= 20x faster than the Engine API).
 * 3. through `cae mcp --task` on the same kind of environment: exec_command of `true` and a
 *    text_editor view, next to a ping round trip on the same connection (targets p50 <= 3 ms).
 * 4. a 10 MB str_replace in the container (the helper's editor) next to the same edit by the
 *    in-process editor on this host (target: within 2x).
 * 5. `cae exec --uuid U -- true`, a one-shot CLI, next to `docker exec <id> true` (target: not
 *    slower), and the helper's size and idle memory in the container (targets: binary <=
 *    1.5 MiB, RSS <= 2 MiB). */
#include "base/timeutil.h"
#include "benchutil.h"
#include "cae/backend.h"
#include "cae/config.h"
#include "cae/docker.h"
#include "cae/editor.h"
#include "cae/log.h"
#include "cae/runner.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

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

/* A `cae mcp` child with pipes. */
struct mcp {
	pid_t pid;
	int in, out;
	char buf[1 << 16];
	size_t len;
};

static int mcp_start(struct mcp *m, char *const argv[])
{
	int pin[2], pout[2];
	if (pipe(pin) < 0 || pipe(pout) < 0)
		return -1;
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, pin[0], 0);
	posix_spawn_file_actions_adddup2(&fa, pout[1], 1);
	posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
	int r = posix_spawn(&m->pid, argv[0], &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	close(pin[0]);
	close(pout[1]);
	m->in = pin[1];
	m->out = pout[0];
	m->len = 0;
	return r == 0 ? 0 : -1;
}

/* Sends one line and reads the answer's line (the first line that holds "id":ID). */
static int mcp_call(struct mcp *m, const char *line, int id)
{
	size_t n = strlen(line);
	if (write(m->in, line, n) != (ssize_t)n)
		return -1;
	char want[32];
	snprintf(want, sizeof(want), "\"id\":%d", id);
	for (;;) {
		char *nl = memchr(m->buf, '\n', m->len);
		if (nl) {
			*nl = 0;
			bool mine = strstr(m->buf, want) != NULL;
			size_t used = (size_t)(nl - m->buf) + 1;
			memmove(m->buf, m->buf + used, m->len - used);
			m->len -= used;
			if (mine)
				return 0;
			continue;
		}
		if (m->len == sizeof(m->buf))
			m->len = 0; /* a long line we do not need */
		ssize_t k = read(m->out, m->buf + m->len, sizeof(m->buf) - m->len);
		if (k <= 0)
			return -1;
		m->len += (size_t)k;
	}
}

/* 3. exec_command and text_editor view through `cae mcp --task` (docker), next to ping. */
static void bench_mcp(const char *exe, const char *dir, const char *url, int n)
{
	char task[600];
	snprintf(task, sizeof(task), "%s/task.json", dir);
	FILE *f = fopen(task, "w");
	fprintf(f, "{\"uuid\": \"bench-mcp-%d\", \"repo\": \"%s\"}\n", (int)getpid(), url);
	fclose(f);
	char *argv[] = {(char *)exe, (char *)"mcp", (char *)"--task", task, NULL};
	struct mcp m;
	if (mcp_start(&m, argv) < 0 ||
	    mcp_call(&m,
		     "{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\",\"params\":{"
		     "\"protocolVersion\":\"2025-06-18\",\"capabilities\":{},\"clientInfo\":{"
		     "\"name\":\"bench\",\"version\":\"1\"}}}\n",
		     0) < 0) {
		fprintf(stderr, "bench-docker: cae mcp did not start\n");
		return;
	}
	static const char initialized[] =
	    "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n";
	(void)!write(m.in, initialized, sizeof(initialized) - 1);
	int64_t *ex = calloc((size_t)n, 8), *vw = calloc((size_t)n, 8), *pg = calloc((size_t)n, 8);
	char line[512];
	int id = 1;
	bool ok = true;
	for (int i = -1; i < n && ok; i++) { /* i = -1: the first call opens the stream */
		int64_t t = cae__now_ns();
		snprintf(line, sizeof(line),
			 "{\"jsonrpc\":\"2.0\",\"id\":%d,\"method\":\"tools/call\",\"params\":{"
			 "\"name\":\"exec_command\",\"arguments\":{\"cwd\":\".\",\"command\":["
			 "\"true\"],\"shell_mode\":\"direct\"}}}\n",
			 id);
		ok = mcp_call(&m, line, id++) == 0;
		if (i >= 0)
			ex[i] = cae__now_ns() - t;
		t = cae__now_ns();
		snprintf(line, sizeof(line),
			 "{\"jsonrpc\":\"2.0\",\"id\":%d,\"method\":\"tools/call\",\"params\":{"
			 "\"name\":\"text_editor\",\"arguments\":{\"command\":\"view\",\"path\":"
			 "\"main.py\"}}}\n",
			 id);
		ok = ok && mcp_call(&m, line, id++) == 0;
		if (i >= 0)
			vw[i] = cae__now_ns() - t;
		t = cae__now_ns();
		snprintf(line, sizeof(line),
			 "{\"jsonrpc\":\"2.0\",\"id\":%d,\"method\":\"ping\"}\n", id);
		ok = ok && mcp_call(&m, line, id++) == 0;
		if (i >= 0)
			pg[i] = cae__now_ns() - t;
	}
	if (ok)
		printf("docker.mcp_exec_command_true_ms p50=%.2f text_editor_view_p50=%.2f "
		       "baseline(ping)=%.2f targets: <=3 n=%d\n",
		       bench_p50_ms(ex, n), bench_p50_ms(vw, n), bench_p50_ms(pg, n), n);
	else
		fprintf(stderr, "bench-docker: a cae mcp call failed\n");
	snprintf(line, sizeof(line),
		 "{\"jsonrpc\":\"2.0\",\"id\":%d,\"method\":\"tools/call\",\"params\":{\"name\":"
		 "\"environment_cleanup\",\"arguments\":{}}}\n",
		 id);
	(void)mcp_call(&m, line, id);
	close(m.in);
	close(m.out);
	kill(m.pid, SIGTERM);
	waitpid(m.pid, NULL, 0);
	free(ex);
	free(vw);
	free(pg);
}

/* The helper's size, and the resident memory of PID 1 and of this process's stream helper. */
static void footprint(cae_backend *b, const char *uuid, const char *build, const char *when)
{
	cae_error err = {0};
	const char *fp[] = {"sh", "-c", "grep VmRSS /proc/1/status; grep VmRSS /proc/$PPID/status",
			    NULL};
	cae_exec_request fq = {.argv = fp, .timeout_ms = 60000, .cancel_fd = -1};
	cae_run_result r;
	if (cae_backend_exec(b, uuid, &fq, &r, &err) < 0)
		return;
	long init_kb = 0, stream_kb = 0;
	sscanf(r.out, "VmRSS: %ld kB\nVmRSS: %ld kB", &init_kb, &stream_kb);
	struct stat hs;
	const char *hp = getenv("CAE_HELPER_STATIC");
	char hpath[600];
	snprintf(hpath, sizeof(hpath), "%s/cae-helper-static", build);
	long size = stat(hp && *hp ? hp : hpath, &hs) == 0 ? (long)hs.st_size : -1;
	printf("docker.helper_footprint binary_kib=%ld init_rss_kib=%ld stream_rss_kib=%ld (%s) "
	       "targets: binary<=1536 rss<=2048\n",
	       size / 1024, init_kb, stream_kb, when);
	cae_run_result_clear(&r);
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	int np = bench_env_int("BENCH_PREPARE_N", 10), ne = bench_env_int("BENCH_N", 50);
	/* the helper that goes into containers: this build's */
	bench_use_static_helper(argc > 1 ? argv[1] : "build");
	const char *root = getenv("CAE_SOURCE_ROOT");
	char tmpl[] = "/tmp/cae-bench-docker-XXXXXX";
	char *dir = mkdtemp(tmpl);
	if (!dir)
		return 1;
	char cmd[4096], url[512] = "";
	if (bench_small_repo_start("bench-docker", dir, root, url, sizeof(url)) < 0)
		return 1;

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
		struct bench_marks m = {{0}};
		cae_prepare_options o = {
		    .progress = bench_on_progress, .progress_userdata = &m, .cancel_fd = -1};
		cae_env_info info;
		int64_t t0 = cae__now_ns();
		if (cae_backend_prepare(b, &task, "python", &o, &info, &err) < 0) {
			fprintf(stderr, "bench-docker: prepare: %s\n", err.message);
			return 1;
		}
		total[i] = cae__now_ns() - t0;
		cae_env_info_clear(&info);
		create_split(logpath, &create[i], &start[i]);
		remove[i] = m.at[3] - m.at[2]; /* the clean start (removes run i-1's container) */
		clone[i] = m.at[5] - m.at[4];
		deps[i] = m.at[6] - m.at[5];
	}
	printf("docker.prepare_ms p50=%.0f (remove=%.0f create=%.0f start=%.0f clone=%.0f "
	       "deps=%.0f) target_p50<=1500 n=%d\n",
	       bench_p50_ms(total, np), bench_p50_ms(remove, np), bench_p50_ms(create, np),
	       bench_p50_ms(start, np), bench_p50_ms(clone, np), bench_p50_ms(deps, np), np);

	/* 2. exec round trip: API next to the CLI, interleaved */
	cae_env_info info;
	if (cae_backend_info(b, uuid, &info, &err) < 0) {
		fprintf(stderr, "bench-docker: %s\n", err.message);
		return 1;
	}
	int64_t *api = calloc((size_t)ne, 8), *cli = calloc((size_t)ne, 8),
		*raw = calloc((size_t)ne, 8);
	const char *targv[] = {"true", NULL};
	cae_exec_request req = {.argv = targv, .timeout_ms = 60000, .cancel_fd = -1};
	const char *cargv[] = {"docker", "exec", info.container_id, "true", NULL};
	cae_run_spec cspec = {.argv = cargv, .timeout_ms = 60000, .cancel_fd = -1};
	cae_docker *dk = NULL;
	if (cae_docker_new(dh, &dk, &err) < 0) {
		fprintf(stderr, "bench-docker: %s\n", err.message);
		return 1;
	}
	cae_docker_exec_spec rspec = {
	    .argv = targv, .cwd = "/workspace/project", .timeout_ms = 60000, .cancel_fd = -1};
	int cli_ok = 1;
	/* the first command opens this process's stream to the helper: not counted */
	cae_run_result r0;
	if (cae_backend_exec(b, uuid, &req, &r0, &err) == 0)
		cae_run_result_clear(&r0);
	for (int i = 0; i < ne; i++) {
		cae_run_result r;
		int64_t t = cae__now_ns();
		if (cae_backend_exec(b, uuid, &req, &r, &err) < 0 || r.exit_code != 0) {
			fprintf(stderr, "bench-docker: exec: %s\n", err.message);
			return 1;
		}
		api[i] = cae__now_ns() - t;
		cae_run_result_clear(&r);
		t = cae__now_ns();
		if (cae_docker_exec(dk, info.container_id, &rspec, &r, NULL, &err) < 0) {
			fprintf(stderr, "bench-docker: raw exec: %s\n", err.message);
			return 1;
		}
		raw[i] = cae__now_ns() - t;
		cae_run_result_clear(&r);
		t = cae__now_ns();
		if (cae_runner_run(&cspec, &r, &err) < 0 || r.exit_code != 0)
			cli_ok = 0;
		cli[i] = cae__now_ns() - t;
		cae_run_result_clear(&r);
	}
	double ma = bench_p50_ms(api, ne), mr = bench_p50_ms(raw, ne), mc = bench_p50_ms(cli, ne);
	printf("docker.exec_roundtrip_true_ms helper_p50=%.2f baseline(Engine API exec)=%.1f "
	       "speedup=%.0fx baseline(docker exec CLI)=%.1f targets: helper<=3 speedup>=20 "
	       "n=%d\n",
	       ma, mr, mr / ma, cli_ok ? mc : -1.0, ne);

	footprint(b, uuid, argc > 1 ? argv[1] : "build", "idle, after the commands above");

	/* 4. 10 MB str_replace: in the container, next to the same edit here */
	{
		size_t big = 10u << 20;
		char *text = malloc(big + 1);
		for (size_t k = 0; k < big; k++)
			text[k] = (k % 64 == 63) ? '\n' : (char)('a' + k % 26);
		memcpy(text + big / 2, "NEEDLE-ONE", 10);
		text[big] = 0;
		cae_editor_limits lim;
		cae_editor_limits_default(&lim);
		cae_editor_request cq = {.command = CAE_EDITOR_CMD_CREATE,
					 .path = "big.txt",
					 .path_len = 7,
					 .text = text,
					 .text_len = big};
		cae_editor_result er;
		int n10 = bench_env_int("BENCH_EDIT_N", 10);
		int64_t *rem = calloc((size_t)n10, 8), *loc = calloc((size_t)n10, 8);
		char ldir[] = "/tmp/cae-bench-edit-XXXXXX";
		if (!mkdtemp(ldir))
			return 1;
		cae_editor *led = cae_editor_new(ldir, "/workspace/project", &lim, &err);
		if (cae_backend_edit(b, uuid, &lim, &cq, &er, &err) < 0 || er.is_error || !led) {
			fprintf(stderr, "bench-docker: edit: %s %s\n", err.message,
				er.text ? er.text : "");
			return 1;
		}
		cae_editor_result_clear(&er);
		cae_editor_create(led, "big.txt", text, big, &er);
		cae_editor_result_clear(&er);
		for (int i = 0; i < n10; i++) {
			const char *from = i % 2 ? "NEEDLE-TWO" : "NEEDLE-ONE";
			const char *to = i % 2 ? "NEEDLE-ONE" : "NEEDLE-TWO";
			cae_editor_request q = {.command = CAE_EDITOR_CMD_STR_REPLACE,
						.path = "big.txt",
						.path_len = 7,
						.text = from,
						.text_len = 10,
						.new_str = to,
						.new_len = 10};
			int64_t t = cae__now_ns();
			if (cae_backend_edit(b, uuid, &lim, &q, &er, &err) < 0 || er.is_error) {
				fprintf(stderr, "bench-docker: str_replace: %s\n", err.message);
				return 1;
			}
			rem[i] = cae__now_ns() - t;
			cae_editor_result_clear(&er);
			t = cae__now_ns();
			cae_editor_run(led, &q, &er);
			loc[i] = cae__now_ns() - t;
			cae_editor_result_clear(&er);
		}
		double a = bench_p50_ms(rem, n10), l = bench_p50_ms(loc, n10);
		printf("docker.str_replace_10MB_ms container_p50=%.1f baseline(local editor)=%.1f "
		       "ratio=%.2f target<=2.00 n=%d\n",
		       a, l, a / l, n10);
		cae_editor_free(led);
		snprintf(cmd, sizeof(cmd), "rm -rf %s", ldir);
		bench_sh(cmd);
		free(rem);
		free(loc);
		free(text);
	}

	/* 5. one-shot CLI, and the helper's footprint */
	{
		char cfgpath[600];
		snprintf(cfgpath, sizeof(cfgpath), "%s/config.yaml", dir);
		FILE *cf = fopen(cfgpath, "w");
		fprintf(cf, "command_executor:\n  backend: docker\n  docker:\n    network:\n"
			    "      mode: host\n");
		fclose(cf);
		setenv("CAE_CONFIG", cfgpath, 1);
		setenv("CAE_LOG_LEVEL", "error", 1);
		char exe[600];
		snprintf(exe, sizeof(exe), "%s/cae", argc > 1 ? argv[1] : "build");
		const char *eargv[] = {exe, "exec", "--uuid", uuid, "--", "true", NULL};
		cae_run_spec es = {.argv = eargv, .timeout_ms = 60000, .cancel_fd = -1};
		int n1 = bench_env_int("BENCH_CLI_N", 20);
		int64_t *one = calloc((size_t)n1, 8), *dcli = calloc((size_t)n1, 8);
		for (int i = 0; i < n1; i++) {
			cae_run_result r;
			int64_t t = cae__now_ns();
			if (cae_runner_run(&es, &r, &err) < 0 || r.exit_code != 0) {
				fprintf(stderr, "bench-docker: cae exec: %s %s\n", err.message,
					r.err ? r.err : "");
				return 1;
			}
			one[i] = cae__now_ns() - t;
			cae_run_result_clear(&r);
			t = cae__now_ns();
			if (cae_runner_run(&cspec, &r, &err) == 0)
				cae_run_result_clear(&r);
			dcli[i] = cae__now_ns() - t;
		}
		double o = bench_p50_ms(one, n1), c = bench_p50_ms(dcli, n1);
		printf("docker.cae_exec_oneshot_ms p50=%.1f baseline(docker exec CLI)=%.1f "
		       "ratio=%.2f target<=1.00 n=%d\n",
		       o, c, o / c, n1);
		free(one);
		free(dcli);
		bench_mcp(exe, dir, url, bench_env_int("BENCH_MCP_N", 50));
		footprint(b, uuid, argc > 1 ? argv[1] : "build", "after the edits: undo history");
	}

	cae_docker_free(dk);
	free(raw);
	cae_backend_cleanup(b, uuid, NULL);
	cae_env_info_clear(&info);
	cae_backend_free(b);
	cae_log_free(log);
	close(logfd);
	cae_config_free(cfg);
	bench_small_repo_stop(dir, root);
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
