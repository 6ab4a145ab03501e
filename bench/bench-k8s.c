/* Kubernetes backend benchmarks, against the single-node cluster (scripts/k8s-env.sh up; run
 * with its KUBECONFIG from the source root, as bench/run.sh does).
 * 1. prepare of a small repository with no dependencies on a cold pod (create, the helper's
 *    delivery, start, clone), p50 over BENCH_PREPARE_N runs (default 5), next to the same
 *    prepare claiming a pod of a warm pool of one (command_executor.pool; refilled, untimed,
 *    before each run). The repository is served by scripts/git-server.sh on loopback (the
 *    pod uses the host network).
 * 2. exec round trip of `true`: through the pod's cae-helper over its one long-lived exec
 *    stream (cae_backend_exec), next to one API server exec per command (cae_k8s_exec: a
 *    WebSocket upgrade, the command, its status) and `kubectl exec POD -- true`, interleaved,
 *    BENCH_N times (default 40; targets: helper p50 <= 5 ms and >= 20x faster than an exec
 *    per command). */
#include "base/timeutil.h"
#include "benchutil.h"
#include "cae/backend.h"
#include "cae/config.h"
#include "cae/k8s.h"
#include "cae/runner.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int set(cae_config *cfg, const char *k, const char *v)
{
	cae_error err = {0};
	if (cae_config_set(cfg, k, v, &err) < 0) {
		fprintf(stderr, "bench-k8s: %s: %s\n", k, err.message);
		return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	const char *build = argc > 1 ? argv[1] : "build";
	if (!getenv("KUBECONFIG")) {
		fprintf(stderr,
			"bench-k8s: no KUBECONFIG (scripts/k8s-env.sh up prints it); skipped\n");
		return 0;
	}
	bench_use_static_helper(build);
	int n = bench_env_int("BENCH_N", 40), np = bench_env_int("BENCH_PREPARE_N", 5);
	char dir[] = "/tmp/cae-bench-k8s-XXXXXX", url[512];
	if (!mkdtemp(dir) || bench_small_repo_start("bench-k8s", dir, getenv("CAE_SOURCE_ROOT"),
						    url, sizeof(url)) < 0)
		return 1;
	char state[600];
	snprintf(state, sizeof(state), "%s/state", dir);
	cae_config *cfg = cae_config_defaults(NULL);
	if (!cfg || set(cfg, "command_executor.state_dir", state) ||
	    set(cfg, "command_executor.kubernetes.namespace", "default") ||
	    set(cfg, "command_executor.kubernetes.node_name", "localhost") ||
	    set(cfg, "command_executor.kubernetes.image_pull_policy", "Never") ||
	    set(cfg, "command_executor.docker.network.mode", "host"))
		return 1;
	cae_backend *b = NULL;
	cae_error err = {0};
	if (cae_backend_new_named("kubernetes", cfg, NULL, &b, &err) < 0) {
		fprintf(stderr, "bench-k8s: %s\n", err.message);
		return 1;
	}
	int status = 0;
	int64_t *prep = calloc((size_t)np, sizeof(int64_t)),
		*warm = calloc((size_t)np, sizeof(int64_t));
	int64_t *th = calloc((size_t)n, sizeof(int64_t)), *tx = calloc((size_t)n, sizeof(int64_t)),
		*tk = calloc((size_t)n, sizeof(int64_t));
	char uuid[64];
	cae_env_info info;
	for (int i = 0; i < np && status == 0; i++) {
		snprintf(uuid, sizeof(uuid), "bench-k8s-%d-%d", (int)getpid(), i);
		cae_task t = {.uuid = uuid, .repo = url};
		int64_t t0 = cae__now_ns();
		if (cae_backend_prepare(b, &t, NULL, NULL, &info, &err) < 0) {
			fprintf(stderr, "bench-k8s: prepare: %s\n", err.message);
			status = 1;
			break;
		}
		prep[i] = cae__now_ns() - t0;
		cae_env_info_clear(&info);
		if (i < np - 1)
			(void)cae_backend_cleanup(b, uuid, NULL);
	}
	/* the same prepares from a warm pool of one (the same configuration but for the pool) */
	cae_config *pcfg = cae_config_defaults(NULL);
	cae_backend *pb = NULL;
	if (status == 0 && (!pcfg || set(pcfg, "command_executor.state_dir", state) ||
			    set(pcfg, "command_executor.kubernetes.namespace", "default") ||
			    set(pcfg, "command_executor.kubernetes.node_name", "localhost") ||
			    set(pcfg, "command_executor.kubernetes.image_pull_policy", "Never") ||
			    set(pcfg, "command_executor.docker.network.mode", "host") ||
			    set(pcfg, "command_executor.pool.size", "1") ||
			    cae_backend_new_named("kubernetes", pcfg, NULL, &pb, &err) < 0)) {
		fprintf(stderr, "bench-k8s: pool: %s\n", err.message);
		status = 1;
	}
	for (int i = 0; i < np && status == 0; i++) {
		char wu[64];
		snprintf(wu, sizeof(wu), "bench-k8s-warm-%d-%d", (int)getpid(), i);
		cae_task t = {.uuid = wu, .repo = url};
		int made = 0;
		if (cae_backend_pool_fill(pb, -1, &made, &err) < 0) {
			fprintf(stderr, "bench-k8s: pool fill: %s\n", err.message);
			status = 1;
			break;
		}
		int64_t t0 = cae__now_ns();
		if (cae_backend_prepare(pb, &t, NULL, NULL, &info, &err) < 0) {
			fprintf(stderr, "bench-k8s: warm prepare: %s\n", err.message);
			status = 1;
			break;
		}
		warm[i] = cae__now_ns() - t0;
		cae_env_info_clear(&info);
		(void)cae_backend_cleanup(pb, wu, NULL);
	}
	if (pb) {
		int removed = 0;
		(void)cae_backend_pool_drain(pb, false, &removed, NULL);
	}
	cae_backend_free(pb);
	cae_config_free(pcfg);
	if (status == 0) {
		/* the last environment serves the exec round trips */
		char pod[160], kcmd[600];
		json_t *items = NULL;
		cae_k8s_auth a;
		cae_k8s *k = NULL;
		pod[0] = '\0';
		if (cae_k8s_auth_load(NULL, NULL, &a, &err) == 0 &&
		    cae_k8s_new(&a, &k, &err) == 0 &&
		    cae_k8s_pod_list(k, "default", "cae.task", &items, &err) == 0) {
			size_t i;
			json_t *p;
			json_array_foreach(items, i, p)
			{
				json_t *md = json_object_get(p, "metadata");
				const char *u = json_string_value(json_object_get(
				    json_object_get(md, "annotations"), "cae.task_uuid"));
				if (u && strcmp(u, uuid) == 0)
					snprintf(pod, sizeof(pod), "%s",
						 json_string_value(json_object_get(md, "name")));
			}
		}
		json_decref(items);
		bool kubectl = bench_sh("command -v kubectl >/dev/null 2>&1") == 0;
		snprintf(kcmd, sizeof(kcmd), "kubectl exec %s -c main -- true >/dev/null 2>&1",
			 pod);
		const char *tr[] = {"true", NULL};
		cae_exec_request req = {.argv = tr, .timeout_ms = 30000, .cancel_fd = -1};
		cae_run_result res;
		/* a first command opens the stream: not counted */
		if (cae_backend_exec(b, uuid, &req, &res, &err) == 0)
			cae_run_result_clear(&res);
		for (int i = 0; i < n && status == 0 && pod[0]; i++) {
			int64_t t0 = cae__now_ns();
			int r = cae_backend_exec(b, uuid, &req, &res, &err);
			th[i] = cae__now_ns() - t0;
			cae_run_result_clear(&res);
			t0 = cae__now_ns();
			int r2 = cae_k8s_exec(k, "default", pod, "main", tr, NULL, 0, 30000, 0, 0,
					      -1, &res, &err);
			tx[i] = cae__now_ns() - t0;
			cae_run_result_clear(&res);
			t0 = cae__now_ns();
			int r3 = kubectl ? bench_sh(kcmd) : 0;
			tk[i] = cae__now_ns() - t0;
			if (r < 0 || r2 < 0 || r3 != 0) {
				fprintf(stderr, "bench-k8s: exec failed: %s\n", err.message);
				status = 1;
			}
		}
		cae_k8s_free(k);
		(void)cae_backend_cleanup(b, uuid, NULL);
		if (status == 0 && pod[0]) {
			double ph = bench_p50_ms(prep, np), pw = bench_p50_ms(warm, np),
			       h = bench_p50_ms(th, n), x = bench_p50_ms(tx, n);
			printf(
			    "kubernetes prepare (small repo): cold pod p50 %.0f ms, warm pool p50 "
			    "%.0f ms (%.1fx) over %d each\n",
			    ph, pw, ph / pw, np);
			printf(
			    "exec true through the pod's cae-helper: p50 %.2f ms; one API server "
			    "exec per command: p50 %.1f ms (%.0fx); ",
			    h, x, x / h);
			if (kubectl)
				printf("kubectl exec: p50 %.1f ms (%.0fx)\n", bench_p50_ms(tk, n),
				       bench_p50_ms(tk, n) / h);
			else
				printf("kubectl: not installed\n");
			printf("targets: helper p50 <= 5 ms: %s; >= 20x an exec per command: %s\n",
			       h <= 5 ? "met" : "NOT met", x / h >= 20 ? "met" : "NOT met");
		}
	}
	free(prep);
	free(warm);
	free(th);
	free(tx);
	free(tk);
	cae_backend_free(b);
	cae_config_free(cfg);
	bench_small_repo_stop(dir, getenv("CAE_SOURCE_ROOT"));
	return status;
}
