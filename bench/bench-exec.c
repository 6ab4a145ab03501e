/* exec_command round trip on the local backend (issue: foundation): the full tool call
 * through the session (argument validation, policy, cwd confinement, spawn, capture, JSON
 * result) for `true`, next to a bare posix_spawn + waitpid loop in the same run
 * (target: within 1.5x), unconfined and in the default bubblewrap sandbox (one sandbox per
 * environment, commands forked inside it by cae-helper), and in that sandbox with a domain
 * allow-list (the filtered network: an empty network namespace and cae's proxy).
 * usage: bench-exec [BUILD_DIR]   (finds cae-helper there unless CAE_HELPER is set) */
#include "base/fs.h"
#include "base/timeutil.h"
#include "cae/runner.h"
#include "cae/session.h"

#include <spawn.h>
#include <stdbool.h>
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

static double median_us(int64_t *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp64);
	return v[n / 2] / 1000.0;
}

static int bench(const char *sandbox, int n, const char *label, bool allow_list)
{
	char state[] = "/tmp/cae-bench-XXXXXX", ws[] = "/tmp/cae-bench-ws-XXXXXX";
	if (!mkdtemp(state) || !mkdtemp(ws))
		return 1;
	char yaml[1024];
	snprintf(yaml, sizeof(yaml),
		 "command_executor:\n  backend: local\n  state_dir: %s\n  local:\n    sandbox: %s\n"
		 "    unconfined: %s\n%s",
		 state, sandbox, strcmp(sandbox, "none") == 0 ? "true" : "false",
		 allow_list ? "  docker:\n    network:\n      whitelist_mode: true\n"
			      "      allowed_domains: [pypi.org]\n"
			    : "");
	cae_config *cfg;
	cae_session *s;
	cae_error err;
	char *envp[] = {NULL};
	if (cae_config_load_string(&cfg, yaml, strlen(yaml), "bench", envp, &err) < 0 ||
	    cae_session_new(cfg, NULL, &s, &err) < 0 ||
	    cae_session_use_workspace(s, ws, &err) < 0) {
		fprintf(stderr, "bench-exec: %s\n", err.message);
		return 1;
	}
	json_t *args =
	    json_pack("{s:s, s:[s], s:s}", "cwd", ".", "command", "true", "shell_mode", "direct");
	char *true_path = NULL;
	cae_runner_find_program("true", NULL, &true_path);
	char *targv[] = {true_path, NULL};
	int64_t *a = calloc((size_t)n, sizeof(int64_t)), *b = calloc((size_t)n, sizeof(int64_t));
	for (int i = 0; i < n; i++) {
		int64_t t = cae__now_ns();
		pid_t pid;
		if (posix_spawn(&pid, true_path, NULL, NULL, targv, environ) == 0)
			waitpid(pid, NULL, 0);
		b[i] = cae__now_ns() - t;
		t = cae__now_ns();
		cae_tool_result res;
		if (cae_session_call_tool(s, "exec_command", args, NULL, &res, &err) < 0 ||
		    res.is_error) {
			fprintf(stderr, "bench-exec: %s\n", res.text ? res.text : err.message);
			return 1;
		}
		a[i] = cae__now_ns() - t;
		cae_tool_result_clear(&res);
	}
	double ma = median_us(a, n), mb = median_us(b, n);
	printf(
	    "exec.exec_command_true_us sandbox=%s median=%.1f baseline(posix_spawn+waitpid)=%.1f "
	    "ratio=%.2f %s n=%d\n",
	    label, ma, mb, ma / mb, "target<=1.50", n);
	json_decref(args);
	free(a);
	free(b);
	free(true_path);
	cae_session_free(s);
	cae__rm_rf(state);
	cae__rm_rf(ws);
	return 0;
}

int main(int argc, char **argv)
{
	const char *ns = getenv("BENCH_N");
	int n = ns ? (int)strtol(ns, NULL, 10) : 1000;
	char helper[4096];
	if (argc > 1 && !getenv("CAE_HELPER")) {
		snprintf(helper, sizeof(helper), "%s/cae-helper", argv[1]);
		setenv("CAE_HELPER", helper, 1);
	}
	int r = bench("none", n, "none", false);
	if (r == 0)
		r = bench("bubblewrap", n, "bubblewrap", false);
	/* the same sandbox with a domain allow-list: its own network namespace and the proxy */
	if (r == 0)
		r = bench("bubblewrap", n, "bubblewrap+allow-list", true);
	return r;
}
