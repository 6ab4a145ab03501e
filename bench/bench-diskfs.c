/* What bounding the workspace's total disk use costs a local prepare (and its cleanup): the
 * workspace on a file system of its own (a sparse ext4 image, mkfs.ext4, a loop device, a
 * mount: limits.disk.mechanism "loopfs", root only) against a plain directory (disk_limit 0:
 * no bound), prepares of the same local repository alternating in the same run.
 *
 *   bench-diskfs [BUILD_DIR]     BENCH_DISKFS_RUNS (15), BENCH_DISKFS_LIMIT ("10g", the
 *                                default disk_limit) */
#include "base/fs.h"
#include "base/timeutil.h"
#include "cae/backend.h"
#include "cae/config.h"

#include "benchutil.h"

#include <jansson.h>

static cae_config *config_for(const char *state, const char *limit)
{
	char yaml[1024];
	snprintf(yaml, sizeof(yaml),
		 "command_executor:\n  backend: local\n  state_dir: %s\n  docker:\n    resources:\n"
		 "      disk_limit: %s\n",
		 state, limit);
	cae_config *cfg = NULL;
	cae_error err;
	char *envp[] = {NULL};
	if (cae_config_load_string(&cfg, yaml, strlen(yaml), "bench.yaml", envp, &err) < 0) {
		fprintf(stderr, "config: %s\n", err.message);
		exit(1);
	}
	return cfg;
}

/* One prepare and cleanup; their times in *prep and *clean; the mechanism it got. */
static const char *one(cae_backend *b, const char *repo, int i, int64_t *prep, int64_t *clean)
{
	char uuid[64];
	snprintf(uuid, sizeof(uuid), "bench-diskfs-%d", i);
	cae_task t = {.uuid = uuid, .repo = (char *)repo};
	cae_prepare_options o = {.cancel_fd = -1};
	cae_env_info info;
	cae_error err;
	int64_t t0 = cae__now_ns();
	if (cae_backend_prepare(b, &t, NULL, &o, &info, &err) < 0) {
		fprintf(stderr, "prepare: %s\n", err.message);
		exit(1);
	}
	int64_t t1 = cae__now_ns();
	const char *m =
	    json_string_value(json_object_get(json_object_get(info.limits, "disk"), "mechanism"));
	m = m && strcmp(m, "loopfs") == 0 ? "loopfs" : "none";
	cae_env_info_clear(&info);
	if (cae_backend_cleanup(b, uuid, &err) < 0) {
		fprintf(stderr, "cleanup: %s\n", err.message);
		exit(1);
	}
	*prep = t1 - t0;
	*clean = cae__now_ns() - t1;
	return m;
}

int main(int argc, char **argv)
{
	(void)argc;
	(void)argv;
	int n = bench_env_int("BENCH_DISKFS_RUNS", 15);
	const char *limit = getenv("BENCH_DISKFS_LIMIT");
	if (!limit || !*limit)
		limit = "10g";
	if (n < 1 || n > 1000)
		n = 15;
	char dir[] = "/var/tmp/cae-bench-diskfs-XXXXXX";
	if (!mkdtemp(dir))
		return 1;
	char cmd[2048], state_b[512], state_n[512], repo[512];
	snprintf(repo, sizeof(repo), "%s/repo", dir);
	snprintf(state_b, sizeof(state_b), "%s/bounded", dir);
	snprintf(state_n, sizeof(state_n), "%s/plain", dir);
	snprintf(cmd, sizeof(cmd),
		 "git init -q %s && cd %s && for i in $(seq 1 50); do echo $i > f$i; done && "
		 "git add . && git -c user.name=b -c user.email=b@b commit -qm x",
		 repo, repo);
	if (bench_sh(cmd) != 0)
		return 1;
	cae_config *cb = config_for(state_b, limit), *cn = config_for(state_n, "0");
	cae_backend *bb = NULL, *bn = NULL;
	cae_error err;
	if (cae_backend_new_named("local", cb, NULL, &bb, &err) < 0 ||
	    cae_backend_new_named("local", cn, NULL, &bn, &err) < 0) {
		fprintf(stderr, "backend: %s\n", err.message);
		return 1;
	}
	int64_t *pb = calloc((size_t)n, sizeof(int64_t)), *pn = calloc((size_t)n, sizeof(int64_t));
	int64_t *cbt = calloc((size_t)n, sizeof(int64_t)),
		*cnt = calloc((size_t)n, sizeof(int64_t));
	if (!pb || !pn || !cbt || !cnt)
		return 1;
	const char *mech = "none";
	int64_t w1, w2;
	(void)one(bn, repo, -1, &w1, &w2); /* warm the page cache and git */
	for (int i = 0; i < n; i++) {
		mech = one(bb, repo, i, &pb[i], &cbt[i]);
		(void)one(bn, repo, i, &pn[i], &cnt[i]);
	}
	double mb = bench_p50_ms(pb, n), mn = bench_p50_ms(pn, n);
	double cmb = bench_p50_ms(cbt, n), cmn = bench_p50_ms(cnt, n);
	printf("local.prepare_ms disk=%s(%s) median=%.1f baseline(disk_limit 0: no bound)=%.1f "
	       "added=%.1f runs=%d\n",
	       mech, limit, mb, mn, mb - mn, n);
	printf("local.cleanup_ms disk=%s(%s) median=%.1f baseline(disk_limit 0: no bound)=%.1f "
	       "added=%.1f runs=%d\n",
	       mech, limit, cmb, cmn, cmb - cmn, n);
	if (strcmp(mech, "loopfs") != 0)
		printf("# the bound was not made here (cae must run as root, with the loop driver "
		       "and mkfs.ext4): both figures are without it\n");
	cae_backend_free(bb);
	cae_backend_free(bn);
	cae_config_free(cb);
	cae_config_free(cn);
	free(pb);
	free(pn);
	free(cbt);
	free(cnt);
	cae__rm_rf(dir);
	return 0;
}
