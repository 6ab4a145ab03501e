/* What a snapshot, a restore and a fork of a local environment cost (include/cae/snapshot.h)
 * next to `cp -a` of the same workspace, in the same run: a prepared environment whose
 * workspace holds BENCH_SNAPSHOT_MB of files (made by the bench), with the state directory on
 * this host's file system (ext4 here: the image is copied, "copy") and, as root with mkfs.xfs,
 * on an XFS file system on a loop device (extents shared: "reflink").
 *
 *   bench-snapshot               BENCH_SNAPSHOT_MB (200), BENCH_SNAPSHOT_RUNS (5),
 *                                BENCH_SNAPSHOT_STATE (host, xfs; both when unset)
 *
 * A snapshot right after the fill is measured once apart (it writes back what the fill left
 * in the page cache first); the runs snapshot the workspace at rest. Before the fill, 16
 * forks of the environment at once, each checked independent.
 *
 * The docker backend's (a commit of the container, the workspace's `loopfs` image cloned or
 * copied) next to a cold prepare of the same measured in the same run (the prepare, and the
 * prepare with the command that fills the workspace, as a dependency install would), and
 * 16 forks of one environment at once, each checked independent:
 *
 *   bench-snapshot docker        BENCH_SNAPSHOT_MB (1024), BENCH_SNAPSHOT_RUNS (3),
 *                                DOCKER_HOST
 *
 * The kubernetes backend's (a tar of the workspace and the home streamed out over one API
 * server exec and back in: "tar-stream"), against the cluster of scripts/k8s-env.sh
 * (KUBECONFIG; skipped without it), next to a cold prepare of the same project in the same
 * run and, as the stream's baseline, `kubectl exec` of the same tar to a file of this host
 * and of its bytes back into the pod (each run, just before cae's snapshot), and
 * BENCH_SNAPSHOT_FORKS forks of one pod at once (each a pod of its own):
 *
 *   bench-snapshot kubernetes [BUILD]  BENCH_SNAPSHOT_MB (200), BENCH_SNAPSHOT_RUNS (3),
 *                                      BENCH_SNAPSHOT_FORKS (4) */
#include "base/fs.h"
#include "base/timeutil.h"
#include "cae/backend.h"
#include "cae/config.h"
#include "cae/snapshot.h"

#include "benchutil.h"

#include <jansson.h>
#include <pthread.h>
#include <sys/mount.h>
#include <sys/stat.h>

static cae_config *config_for(const char *state)
{
	char yaml[1024];
	snprintf(yaml, sizeof(yaml),
		 "command_executor:\n  backend: local\n  state_dir: %s\n  instance: bench-snap\n"
		 "  clone:\n    auto_install_deps: false\n",
		 state);
	cae_config *cfg = NULL;
	cae_error err;
	char *envp[] = {NULL};
	if (cae_config_load_string(&cfg, yaml, strlen(yaml), "bench.yaml", envp, &err) < 0) {
		fprintf(stderr, "config: %s\n", err.message);
		exit(1);
	}
	return cfg;
}

static void die(const char *what, const cae_error *err)
{
	fprintf(stderr, "%s: %s\n", what, err->message);
	exit(1);
}

static int exec_sh(cae_backend *b, const char *uuid, const char *script, char **out)
{
	const char *argv[] = {"sh", "-c", script, NULL};
	cae_exec_request req = {.argv = argv, .timeout_ms = 1200000, .cancel_fd = -1};
	cae_run_result res;
	cae_error err;
	if (cae_backend_exec(b, uuid, &req, &res, &err) < 0)
		die("exec", &err);
	int code = res.exit_code;
	if (out)
		*out = strdup(res.out ? res.out : "");
	cae_run_result_clear(&res);
	return code;
}

#define FORKS 16

struct forker {
	cae_backend *b;
	const char *src;
	char uuid[64];
	int r;
	char msg[CAE_ERROR_MSG_MAX];
};

static void *fork_main(void *arg)
{
	struct forker *f = arg;
	cae_env_info info;
	cae_error err = {0};
	f->r = cae_snapshot_fork(f->b, f->src, NULL, f->uuid, &info, NULL, &err);
	if (f->r < 0)
		snprintf(f->msg, sizeof(f->msg), "%s", err.message);
	else
		cae_env_info_clear(&info);
	return NULL;
}

/* nf (at most FORKS) forks of src at once: how many succeeded, each independent (its own
 * file seen by it only), and how long they took together. */
static void many_forks(cae_backend *b, const char *src_uuid, const char *what, const char *label,
		       int nf)
{
	struct forker f[FORKS];
	pthread_t th[FORKS];
	int64_t t0 = cae__now_ns();
	for (int i = 0; i < nf; i++) {
		f[i] = (struct forker){.b = b, .src = src_uuid};
		snprintf(f[i].uuid, sizeof(f[i].uuid), "bench-dfork-%d", i);
		pthread_create(&th[i], NULL, fork_main, &f[i]);
	}
	int ok = 0;
	for (int i = 0; i < nf; i++) {
		pthread_join(th[i], NULL);
		if (f[i].r == 0)
			ok++;
		else
			fprintf(stderr, "fork %d: %s\n", i, f[i].msg);
	}
	int64_t all = cae__now_ns() - t0;
	char cmd[256];
	for (int i = 0; i < nf; i++)
		if (f[i].r == 0) {
			snprintf(cmd, sizeof(cmd), "echo %d > mine-%d", i, i);
			(void)exec_sh(b, f[i].uuid, cmd, NULL);
		}
	int independent = 0;
	for (int i = 0; i < nf; i++) {
		char *out = NULL;
		if (f[i].r == 0 && exec_sh(b, f[i].uuid, "cat mine-* | tr '\\n' ' '", &out) == 0) {
			char want[32];
			snprintf(want, sizeof(want), "%d ", i);
			independent += strcmp(out, want) == 0;
		}
		free(out);
	}
	char *src = NULL;
	(void)exec_sh(b, src_uuid, "ls mine-* 2>/dev/null | wc -l", &src);
	printf("%s.forks_at_once %s%s%sn=%d succeeded=%d independent=%d source_untouched=%s "
	       "total_ms=%.0f\n",
	       what, label ? "state=" : "", label ? label : "", label ? " " : "", nf, ok,
	       independent, src && atoi(src) == 0 ? "yes" : "no", (double)all / 1e6);
	free(src);
	cae_error err;
	for (int i = 0; i < nf; i++)
		if (f[i].r == 0 && cae_backend_cleanup(b, f[i].uuid, &err) < 0)
			die("cleanup", &err);
}

/* One state directory: prepare, fill, then runs of cp -a, snapshot, restore, fork. */
static void measure(const char *label, const char *state, const char *repo, int mb, int n)
{
	cae_config *cfg = config_for(state);
	cae_backend *b = NULL;
	cae_error err;
	if (cae_backend_new_named("local", cfg, NULL, &b, &err) < 0)
		die("backend", &err);
	cae_task t = {.uuid = (char *)"bench-snap", .repo = (char *)repo};
	cae_prepare_options o = {.cancel_fd = -1};
	cae_env_info info;
	if (cae_backend_prepare(b, &t, NULL, &o, &info, &err) < 0)
		die("prepare", &err);
	many_forks(b, "bench-snap", "local", label, FORKS); /* the workspace still small */
	char cmd[4096];
	/* files of 100 KiB, as a dependency tree's are many and small */
	snprintf(cmd, sizeof(cmd),
		 "mkdir -p node_modules && cd node_modules && i=0; while [ $i -lt %d ]; do "
		 "mkdir -p d$((i / 100)) && head -c 102400 /dev/urandom > d$((i / 100))/f$i; "
		 "i=$((i + 1)); done",
		 mb * 10);
	const char *argv[] = {"sh", "-c", cmd, NULL};
	cae_exec_request req = {.argv = argv, .timeout_ms = 600000, .cancel_fd = -1};
	cae_run_result res;
	if (cae_backend_exec(b, "bench-snap", &req, &res, &err) < 0 || res.exit_code != 0)
		die("fill", &err);
	cae_run_result_clear(&res);
	/* A snapshot taken right after the fill first writes back what the fill left in the
	 * page cache (its syncfs): that cost is the writes not yet on disk, not the workspace.
	 * Measured once, apart; the runs below snapshot a workspace at rest. */
	json_t *s = NULL;
	int64_t t0 = cae__now_ns();
	if (cae_snapshot_create(b, "bench-snap", "s", &s, &err) < 0)
		die("snapshot", &err);
	double dirty = (double)(cae__now_ns() - t0) / 1e6;
	json_decref(s);
	if (cae_snapshot_remove(b, "bench-snap", "s", &err) < 0)
		die("remove", &err);
	int64_t *cp = calloc((size_t)n, 8), *sn = calloc((size_t)n, 8), *rs = calloc((size_t)n, 8),
		*fk = calloc((size_t)n, 8);
	const char *ms = "?", *mf = "?", *mr = "?";
	static char mech[3][16];
	for (int i = 0; i < n; i++) {
		snprintf(cmd, sizeof(cmd), "cp -a %s %s/cp-copy && sync -f %s/cp-copy",
			 info.host_path, state, state);
		t0 = cae__now_ns();
		if (bench_sh(cmd) != 0)
			exit(1);
		cp[i] = cae__now_ns() - t0;
		snprintf(cmd, sizeof(cmd), "rm -rf %s/cp-copy", state);
		(void)bench_sh(cmd);

		t0 = cae__now_ns();
		if (cae_snapshot_create(b, "bench-snap", "s", &s, &err) < 0)
			die("snapshot", &err);
		sn[i] = cae__now_ns() - t0;
		snprintf(mech[0], sizeof(mech[0]), "%s",
			 json_string_value(json_object_get(s, "mechanism")));
		ms = mech[0];
		json_decref(s);

		t0 = cae__now_ns();
		if (cae_snapshot_restore(b, "bench-snap", "s", &s, &err) < 0)
			die("restore", &err);
		rs[i] = cae__now_ns() - t0;
		snprintf(mech[1], sizeof(mech[1]), "%s",
			 json_string_value(json_object_get(s, "mechanism")));
		mr = mech[1];
		json_decref(s);
		if (cae_snapshot_remove(b, "bench-snap", "s", &err) < 0)
			die("remove", &err);

		cae_env_info fi;
		t0 = cae__now_ns();
		if (cae_snapshot_fork(b, "bench-snap", NULL, "bench-fork", &fi, &s, &err) < 0)
			die("fork", &err);
		fk[i] = cae__now_ns() - t0;
		snprintf(mech[2], sizeof(mech[2]), "%s",
			 json_string_value(json_object_get(s, "mechanism")));
		mf = mech[2];
		json_decref(s);
		cae_env_info_clear(&fi);
		if (cae_backend_cleanup(b, "bench-fork", &err) < 0)
			die("cleanup", &err);
	}
	double base = bench_p50_ms(cp, n);
	printf("local.cp_a_ms state=%s workspace_mb=%d median=%.1f runs=%d\n", label, mb, base, n);
	printf("local.snapshot_ms state=%s mechanism=%s median=%.1f baseline(cp -a)=%.1f runs=%d\n",
	       label, ms, bench_p50_ms(sn, n), base, n);
	printf("local.snapshot_after_fill_ms state=%s mechanism=%s %.1f (once: the fill's writes "
	       "flushed first) baseline(cp -a)=%.1f\n",
	       label, ms, dirty, base);
	printf("local.restore_ms state=%s mechanism=%s median=%.1f baseline(cp -a)=%.1f runs=%d\n",
	       label, mr, bench_p50_ms(rs, n), base, n);
	printf("local.fork_ms state=%s mechanism=%s median=%.1f baseline(cp -a)=%.1f runs=%d\n",
	       label, mf, bench_p50_ms(fk, n), base, n);
	cae_env_info_clear(&info);
	if (cae_backend_cleanup(b, "bench-snap", &err) < 0)
		die("cleanup", &err);
	cae_backend_free(b);
	cae_config_free(cfg);
	free(cp);
	free(sn);
	free(rs);
	free(fk);
}

/* ---- docker ---- */

static cae_config *docker_config(const char *state)
{
	char yaml[1024];
	const char *dh = getenv("DOCKER_HOST");
	snprintf(yaml, sizeof(yaml),
		 "command_executor:\n  backend: docker\n  state_dir: %s\n  instance: bench-snap\n"
		 "  docker:\n    network:\n      mode: host\n    resources:\n      disk_limit: 4g\n"
		 "      pids_limit: 512\n  clone:\n    auto_install_deps: false\n",
		 state);
	cae_config *cfg = NULL;
	cae_error err;
	char *envp[] = {NULL};
	if (cae_config_load_string(&cfg, yaml, strlen(yaml), "bench.yaml", envp, &err) < 0 ||
	    (dh && *dh && cae_config_set(cfg, "command_executor.docker_host", dh, &err) < 0)) {
		fprintf(stderr, "config: %s\n", err.message);
		exit(1);
	}
	return cfg;
}

static void measure_docker(const char *label, const char *state, const char *repo, int mb, int n,
			   bool forks)
{
	cae_config *cfg = docker_config(state);
	cae_backend *b = NULL;
	cae_error err;
	if (cae_backend_new_named("docker", cfg, NULL, &b, &err) < 0) {
		printf("# no Docker engine here: %s\n", err.message);
		cae_config_free(cfg);
		return;
	}
	cae_task t = {.uuid = (char *)"bench-dsnap", .repo = (char *)repo};
	cae_prepare_options o = {.cancel_fd = -1};
	cae_env_info info;
	int64_t t0 = cae__now_ns();
	if (cae_backend_prepare(b, &t, NULL, &o, &info, &err) < 0)
		die("prepare", &err);
	int64_t prep = cae__now_ns() - t0;
	if (forks)
		many_forks(b, "bench-dsnap", "docker", NULL,
			   FORKS); /* a small workspace: FORKS copies of 1 GB are not the point */
	char cmd[4096];
	snprintf(cmd, sizeof(cmd),
		 "mkdir -p node_modules && cd node_modules && i=0; while [ $i -lt %d ]; do "
		 "mkdir -p d$((i / 100)) && head -c 102400 /dev/urandom > d$((i / 100))/f$i; "
		 "i=$((i + 1)); done",
		 mb * 10);
	t0 = cae__now_ns();
	if (exec_sh(b, "bench-dsnap", cmd, NULL) != 0) {
		fprintf(stderr, "fill failed\n");
		exit(1);
	}
	int64_t fill = cae__now_ns() - t0;
	int64_t *sn = calloc((size_t)n, 8), *rs = calloc((size_t)n, 8), *fk = calloc((size_t)n, 8);
	static char mech[3][32];
	for (int i = 0; i < n; i++) {
		json_t *s = NULL;
		t0 = cae__now_ns();
		if (cae_snapshot_create(b, "bench-dsnap", "s", &s, &err) < 0)
			die("snapshot", &err);
		sn[i] = cae__now_ns() - t0;
		snprintf(mech[0], sizeof(mech[0]), "%s",
			 json_string_value(json_object_get(s, "mechanism")));
		json_decref(s);
		t0 = cae__now_ns();
		if (cae_snapshot_restore(b, "bench-dsnap", "s", &s, &err) < 0)
			die("restore", &err);
		rs[i] = cae__now_ns() - t0;
		snprintf(mech[1], sizeof(mech[1]), "%s",
			 json_string_value(json_object_get(s, "mechanism")));
		json_decref(s);
		if (cae_snapshot_remove(b, "bench-dsnap", "s", &err) < 0)
			die("remove", &err);
		cae_env_info fi;
		t0 = cae__now_ns();
		if (cae_snapshot_fork(b, "bench-dsnap", NULL, "bench-dfork", &fi, &s, &err) < 0)
			die("fork", &err);
		fk[i] = cae__now_ns() - t0;
		snprintf(mech[2], sizeof(mech[2]), "%s",
			 json_string_value(json_object_get(s, "mechanism")));
		json_decref(s);
		cae_env_info_clear(&fi);
		if (cae_backend_cleanup(b, "bench-dfork", &err) < 0)
			die("cleanup", &err);
	}
	double cold = (double)prep / 1e6, cold_full = (double)(prep + fill) / 1e6;
	printf("docker.prepare_cold_ms state=%s %.0f (clone), with the workspace filled (%d MB, "
	       "as a dependency install) %.0f\n",
	       label, cold, mb, cold_full);
	printf("docker.snapshot_ms state=%s workspace_mb=%d mechanism=%s median=%.0f "
	       "target<=1500 baseline(cold prepare+fill)=%.0f runs=%d\n",
	       label, mb, mech[0], bench_p50_ms(sn, n), cold_full, n);
	printf("docker.restore_ms state=%s workspace_mb=%d mechanism=%s median=%.0f "
	       "target<=1500 baseline(cold prepare+fill)=%.0f runs=%d\n",
	       label, mb, mech[1], bench_p50_ms(rs, n), cold_full, n);
	printf("docker.fork_ms state=%s workspace_mb=%d mechanism=%s median=%.0f target<=1500 "
	       "baseline(cold prepare)=%.0f (+fill %.0f) runs=%d\n",
	       label, mb, mech[2], bench_p50_ms(fk, n), cold, cold_full, n);
	fflush(stdout);
	cae_env_info_clear(&info);
	if (cae_backend_cleanup(b, "bench-dsnap", &err) < 0)
		die("cleanup", &err);
	cae_backend_free(b);
	cae_config_free(cfg);
	free(sn);
	free(rs);
	free(fk);
}

/* ---- kubernetes ---- */

static int k8s_set(cae_config *cfg, const char *k, const char *v)
{
	cae_error err;
	if (cae_config_set(cfg, k, v, &err) < 0) {
		fprintf(stderr, "config %s: %s\n", k, err.message);
		return -1;
	}
	return 0;
}

static int measure_k8s(const char *build, int mb, int n)
{
	if (!getenv("KUBECONFIG")) {
		printf("# kubernetes: no KUBECONFIG (scripts/k8s-env.sh up prints it); skipped\n");
		return 0;
	}
	bench_use_static_helper(build);
	int nf = bench_env_int("BENCH_SNAPSHOT_FORKS", 4);
	if (nf < 0 || nf > FORKS)
		nf = 4;
	char dir[] = "/tmp/cae-bench-ksnap-XXXXXX", url[512], state[600];
	if (!mkdtemp(dir) ||
	    bench_small_repo_start("bench-snapshot", dir, getenv("CAE_SOURCE_ROOT"), url,
				   sizeof(url)) < 0)
		return 1;
	snprintf(state, sizeof(state), "%s/state", dir);
	cae_config *cfg = cae_config_defaults(NULL);
	if (!cfg || k8s_set(cfg, "command_executor.state_dir", state) ||
	    k8s_set(cfg, "command_executor.instance", "bench-snap") ||
	    k8s_set(cfg, "command_executor.kubernetes.namespace", "default") ||
	    k8s_set(cfg, "command_executor.kubernetes.node_name", "localhost") ||
	    k8s_set(cfg, "command_executor.kubernetes.image_pull_policy", "Never") ||
	    k8s_set(cfg, "command_executor.docker.network.mode", "host") ||
	    k8s_set(cfg, "command_executor.docker.resources.disk_limit", "4g") ||
	    k8s_set(cfg, "command_executor.clone.auto_install_deps", "false"))
		return 1;
	cae_backend *b = NULL;
	cae_error err;
	if (cae_backend_new_named("kubernetes", cfg, NULL, &b, &err) < 0) {
		printf("# kubernetes: %s\n", err.message);
		return 0;
	}
	cae_task t = {.uuid = (char *)"bench-ksnap", .repo = url};
	cae_env_info info;
	int64_t t0 = cae__now_ns();
	if (cae_backend_prepare(b, &t, NULL, NULL, &info, &err) < 0)
		die("prepare", &err);
	int64_t prep = cae__now_ns() - t0;
	if (nf > 0)
		many_forks(b, "bench-ksnap", "kubernetes", NULL, nf); /* a small workspace */
	char cmd[4096];
	snprintf(cmd, sizeof(cmd),
		 "mkdir -p node_modules && cd node_modules && i=0; while [ $i -lt %d ]; do "
		 "mkdir -p d$((i / 100)) && head -c 102400 /dev/urandom > d$((i / 100))/f$i; "
		 "i=$((i + 1)); done",
		 mb * 10);
	t0 = cae__now_ns();
	if (exec_sh(b, "bench-ksnap", cmd, NULL) != 0) {
		fprintf(stderr, "fill failed\n");
		exit(1);
	}
	int64_t fill = cae__now_ns() - t0;
	int64_t *sn = calloc((size_t)n, 8), *rs = calloc((size_t)n, 8), *fk = calloc((size_t)n, 8);
	int64_t *ko = calloc((size_t)n, 8), *ki = calloc((size_t)n, 8);
	bool kubectl = bench_sh("command -v kubectl >/dev/null 2>&1") == 0;
	long long kbytes = 0, sbytes = 0;
	char kfile[700], kout[2048], kin[2048];
	snprintf(kfile, sizeof(kfile), "%s/kubectl.tar", dir);
	/* the baseline: the same paths' tar through `kubectl exec` (the API server's exec, as
	 * cae's stream), to a file of this host, and the same bytes streamed back into the pod
	 * (counted there, the count checked) */
	snprintf(kout, sizeof(kout),
		 "p=$(kubectl get pod -l cae.task_uuid=bench-ksnap -o name) && "
		 "kubectl exec \"$p\" -c main -- sh -c 'cd / && exec tar -cf - workspace "
		 "\"${HOME#/}\"' > %s && sync -f %s",
		 kfile, kfile);
	snprintf(kin, sizeof(kin),
		 "p=$(kubectl get pod -l cae.task_uuid=bench-ksnap -o name) && "
		 "n=$(kubectl exec -i \"$p\" -c main -- sh -c 'exec wc -c' < %s) && "
		 "[ \"$n\" = \"$(wc -c < %s)\" ]",
		 kfile, kfile);
	for (int i = 0; i < n; i++) {
		json_t *s = NULL;
		if (kubectl) {
			t0 = cae__now_ns();
			if (bench_sh(kout) != 0) {
				fprintf(stderr, "kubectl exec tar failed\n");
				exit(1);
			}
			ko[i] = cae__now_ns() - t0;
			struct stat kst;
			kbytes = stat(kfile, &kst) == 0 ? (long long)kst.st_size : -1;
			t0 = cae__now_ns();
			if (bench_sh(kin) != 0) {
				fprintf(stderr, "kubectl exec -i failed\n");
				exit(1);
			}
			ki[i] = cae__now_ns() - t0;
			(void)unlink(kfile);
		}
		t0 = cae__now_ns();
		if (cae_snapshot_create(b, "bench-ksnap", "s", &s, &err) < 0)
			die("snapshot", &err);
		sn[i] = cae__now_ns() - t0;
		sbytes = (long long)json_integer_value(json_object_get(s, "bytes"));
		json_decref(s);
		t0 = cae__now_ns();
		if (cae_snapshot_restore(b, "bench-ksnap", "s", &s, &err) < 0)
			die("restore", &err);
		rs[i] = cae__now_ns() - t0;
		json_decref(s);
		cae_env_info fi;
		t0 = cae__now_ns();
		if (cae_snapshot_fork(b, "bench-ksnap", "s", "bench-kfork", &fi, &s, &err) < 0)
			die("fork", &err);
		fk[i] = cae__now_ns() - t0;
		json_decref(s);
		cae_env_info_clear(&fi);
		if (cae_snapshot_remove(b, "bench-ksnap", "s", &err) < 0 ||
		    cae_backend_cleanup(b, "bench-kfork", &err) < 0)
			die("cleanup", &err);
	}
	double cold = (double)prep / 1e6, cold_full = (double)(prep + fill) / 1e6;
	printf("kubernetes.prepare_cold_ms %.0f (clone), with the workspace filled (%d MB, as a "
	       "dependency install) %.0f\n",
	       cold, mb, cold_full);
	printf("kubernetes.snapshot_ms workspace_mb=%d mechanism=tar-stream median=%.0f "
	       "baseline(cold prepare+fill)=%.0f runs=%d\n",
	       mb, bench_p50_ms(sn, n), cold_full, n);
	if (kubectl)
		printf(
		    "kubernetes.kubectl_exec_tar_ms workspace_mb=%d out(tar -cf - > file) "
		    "median=%.0f (%.0f MB/s) in(the same bytes to wc -c) median=%.0f (%.0f MB/s) "
		    "bytes=%lld (cae's archive %lld) runs=%d\n",
		    mb, bench_p50_ms(ko, n), (double)kbytes / 1e3 / bench_p50_ms(ko, n),
		    bench_p50_ms(ki, n), (double)kbytes / 1e3 / bench_p50_ms(ki, n), kbytes, sbytes,
		    n);
	else
		printf("# kubectl: not installed (no baseline)\n");
	printf("kubernetes.snapshot_MBps workspace_mb=%d %.0f\n", mb,
	       (double)sbytes / 1e3 / bench_p50_ms(sn, n));
	printf("kubernetes.restore_ms workspace_mb=%d mechanism=tar-stream median=%.0f "
	       "baseline(cold prepare+fill)=%.0f runs=%d\n",
	       mb, bench_p50_ms(rs, n), cold_full, n);
	printf("kubernetes.fork_ms workspace_mb=%d mechanism=tar-stream (from the snapshot) "
	       "median=%.0f baseline(cold prepare)=%.0f (+fill %.0f) runs=%d\n",
	       mb, bench_p50_ms(fk, n), cold, cold_full, n);
	fflush(stdout);
	cae_env_info_clear(&info);
	if (cae_backend_cleanup(b, "bench-ksnap", &err) < 0)
		die("cleanup", &err);
	cae_backend_free(b);
	cae_config_free(cfg);
	free(sn);
	free(rs);
	free(fk);
	free(ko);
	free(ki);
	bench_small_repo_stop(dir, getenv("CAE_SOURCE_ROOT"));
	return 0;
}

int main(int argc, char **argv)
{
	if (argc > 1 && strcmp(argv[1], "kubernetes") == 0) {
		int kmb = bench_env_int("BENCH_SNAPSHOT_MB", 200);
		int kn = bench_env_int("BENCH_SNAPSHOT_RUNS", 3);
		return measure_k8s(argc > 2 ? argv[2] : "build",
				   kmb < 1 || kmb > 100000 ? 200 : kmb,
				   kn < 1 || kn > 1000 ? 3 : kn);
	}
	bool docker = argc > 1 && strcmp(argv[1], "docker") == 0;
	int mb = bench_env_int("BENCH_SNAPSHOT_MB", docker ? 1024 : 200);
	int n = bench_env_int("BENCH_SNAPSHOT_RUNS", docker ? 3 : 5);
	if (mb < 1 || mb > 100000)
		mb = 200;
	if (n < 1 || n > 1000)
		n = 5;
	char dir[] = "/var/tmp/cae-bench-snapshot-XXXXXX";
	if (!mkdtemp(dir))
		return 1;
	char cmd[4096], state[256], repo[128], xfs[128];
	snprintf(repo, sizeof(repo), "%s/repo", dir);
	snprintf(cmd, sizeof(cmd),
		 "git init -q %s && cd %s && for i in $(seq 1 50); do echo $i > f$i; done && "
		 "git add . && git -c user.name=b -c user.email=b@b commit -qm x",
		 repo, repo);
	if (bench_sh(cmd) != 0)
		return 1;
	snprintf(state, sizeof(state), "%s/state", dir);
	/* BENCH_SNAPSHOT_STATE: "host", "xfs" or both (unset) */
	const char *only = getenv("BENCH_SNAPSHOT_STATE");
	bool host = !only || strcmp(only, "xfs") != 0, onxfs = !only || strcmp(only, "host") != 0;
	if (host && docker)
		measure_docker("host-fs", state, repo, mb, n, true);
	else if (host)
		measure("host-fs", state, repo, mb, n);
	/* the same on XFS (reflink=1 by default), where the image is cloned */
	snprintf(xfs, sizeof(xfs), "%s/xfs", dir);
	snprintf(
	    cmd, sizeof(cmd),
	    "command -v mkfs.xfs >/dev/null && truncate -s 32G %s.img && mkfs.xfs -q %s.img && "
	    "mkdir %s && mount -o loop %s.img %s",
	    xfs, xfs, xfs, xfs, xfs);
	if (!onxfs) {
		;
	} else if (geteuid() == 0 && bench_sh(cmd) == 0) {
		snprintf(state, sizeof(state), "%s/state", xfs);
		if (docker)
			measure_docker("xfs-loop", state, repo, mb, n, !host);
		else
			measure("xfs-loop", state, repo, mb, n);
		(void)umount2(xfs, MNT_DETACH);
	} else {
		printf("# no XFS state directory here (root and mkfs.xfs, xfsprogs, needed)\n");
	}
	cae__rm_rf(dir);
	return 0;
}
