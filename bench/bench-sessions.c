/* Process sessions through the session's tools (the MCP server's path without the JSON-RPC
 * framing), on the local backend in its default sandbox and, when an engine answers, on
 * docker: session start → first output (process_start of `echo ready; cat` waiting for its
 * first output), and the read round trip (process_write of a line to `cat`, then
 * process_read until it is echoed back), each next to an ordinary exec_command of `true` in
 * the same environment and run.
 * usage: bench-sessions [BUILD_DIR]   (BENCH_N: repetitions, default 50) */
#include "benchutil.h"

#include "base/fs.h"
#include "base/timeutil.h"
#include "cae/session.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static json_t *call(cae_session *s, const char *tool, json_t *args)
{
	cae_tool_result res;
	cae_error err = {0};
	if (cae_session_call_tool(s, tool, args, NULL, &res, &err) < 0 || res.is_error) {
		fprintf(stderr, "bench-sessions: %s: %s\n", tool,
			res.text ? res.text : err.message);
		exit(1);
	}
	json_t *out = json_incref(res.structured);
	cae_tool_result_clear(&res);
	json_decref(args);
	return out;
}

static void measure(cae_session *s, const char *label, int n)
{
	int64_t *start = calloc((size_t)n, sizeof(int64_t));
	int64_t *rt = calloc((size_t)n, sizeof(int64_t));
	int64_t *ex = calloc((size_t)n, sizeof(int64_t));
	for (int i = 0; i < n; i++) {
		int64_t t = cae__now_ns();
		json_t *r = call(s, "command-executor_execute_command",
				 json_pack("{s:s}", "command", "true"));
		ex[i] = cae__now_ns() - t;
		json_decref(r);

		t = cae__now_ns();
		r = call(
		    s, "process_start",
		    json_pack("{s:s, s:i}", "command", "echo ready; exec cat", "wait_ms", 30000));
		start[i] = cae__now_ns() - t;
		const char *out = json_string_value(json_object_get(r, "output"));
		if (!out || strcmp(out, "ready\n") != 0) {
			fprintf(stderr, "bench-sessions: no first output: %s\n", json_dumps(r, 0));
			exit(1);
		}
		char *id = strdup(json_string_value(json_object_get(r, "session_id")));
		json_decref(r);

		t = cae__now_ns();
		json_decref(call(s, "process_write",
				 json_pack("{s:s, s:s}", "session_id", id, "input", "ping\n")));
		size_t got = 0;
		while (got < 5) {
			r = call(s, "process_read",
				 json_pack("{s:s, s:i}", "session_id", id, "wait_ms", 30000));
			got += strlen(json_string_value(json_object_get(r, "output")));
			json_decref(r);
		}
		rt[i] = cae__now_ns() - t;
		json_decref(call(s, "process_kill", json_pack("{s:s}", "session_id", id)));
		free(id);
	}
	printf("sessions.%s start_to_first_output_ms p50=%.2f write_read_round_trip_ms p50=%.2f "
	       "baseline(execute_command true) p50=%.2f n=%d\n",
	       label, bench_p50_ms(start, n), bench_p50_ms(rt, n), bench_p50_ms(ex, n), n);
	free(start);
	free(rt);
	free(ex);
}

static cae_session *open_session(const char *yaml, cae_error *err)
{
	cae_config *cfg;
	cae_session *s;
	char *envp[] = {NULL};
	if (cae_config_load_string(&cfg, yaml, strlen(yaml), "bench", envp, err) < 0 ||
	    cae_session_new(cfg, NULL, &s, err) < 0)
		return NULL;
	return s;
}

int main(int argc, char **argv)
{
	int n = bench_env_int("BENCH_N", 50);
	const char *build = argc > 1 ? argv[1] : "build";
	char helper[4096];
	if (!getenv("CAE_HELPER")) {
		snprintf(helper, sizeof(helper), "%s/cae-helper", build);
		setenv("CAE_HELPER", helper, 1);
	}
	bench_use_static_helper(build);
	char dir[] = "/tmp/cae-bench-sessions-XXXXXX";
	if (!mkdtemp(dir))
		return 1;
	char yaml[2048], ws[600];
	snprintf(ws, sizeof(ws), "%s/ws", dir);
	snprintf(yaml, sizeof(yaml),
		 "command_executor:\n  backend: local\n  state_dir: %s/state-local\n", dir);
	cae_error err = {0};
	cae_session *s = NULL;
	if (!(s = open_session(yaml, &err)) ||
	    (cae__mkdir_p(ws, 0755) < 0 || cae_session_use_workspace(s, ws, &err) < 0)) {
		fprintf(stderr, "bench-sessions: local: %s\n", err.message);
		return 1;
	}
	measure(s, "local", n);
	cae_session_free(s);

	/* docker, when an engine answers */
	char url[512];
	const char *root = getenv("CAE_SOURCE_ROOT");
	if (bench_small_repo_start("bench-sessions", dir, root, url, sizeof(url)) < 0)
		return 1;
	snprintf(yaml, sizeof(yaml),
		 "command_executor:\n  backend: docker\n  state_dir: %s/state-docker\n  docker:\n"
		 "    network:\n      mode: host\n",
		 dir);
	s = open_session(yaml, &err);
	char uuid[64];
	snprintf(uuid, sizeof(uuid), "bench-sessions-%d", (int)getpid());
	cae_task task = {.uuid = uuid, .repo = url};
	if (!s || cae_session_prepare(s, &task, NULL, NULL, NULL, &err) < 0) {
		printf("sessions.docker skipped: %s\n", err.message);
	} else {
		measure(s, "docker", n);
		cae_session_cleanup(s, uuid, NULL);
	}
	cae_session_free(s);
	bench_small_repo_stop(dir, root);
	return 0;
}
