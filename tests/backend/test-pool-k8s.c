/* Tests of the kubernetes backend's warm pool (src/backend/pool-kubernetes.c) against the
 * single-node cluster (CAE_TEST_K8S=1 and its KUBECONFIG; skipped otherwise): two
 * processes claiming from a pool of one get it once (the other prepares cold), a pool pod
 * past its maximum age is never handed out and is removed, a claimed pod is the task's as a
 * cold one would be (commands, the editor, info and list from another process, gc,
 * cleanup), drain removes free pool pods only. Every configuration has a memory limit of its
 * own (this run's pid and a sequence number), so its pool key is its own: no other run's
 * pool pod is claimed or removed here, and the teardown deletes only this run's pods. */
#include "backend-test.h"

#include "base/timeutil.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <time.h>

static int cfg_seq;

/* The kubernetes backend on the host network with a pool of size for python, and a memory
 * limit (so a pool key) no other test run has. */
static cae_config *pcfg(const char *size, const char *max_age)
{
	cae_config *cfg = cae_config_defaults(NULL);
	ck_assert_ptr_nonnull(cfg);
	char mem[32];
	snprintf(mem, sizeof(mem), "%lld",
		 (1LL << 30) + ((long long)(bt_runner_pid % 100000) * 16 + cfg_seq) * 4096);
	bt_kubernetes_configure(cfg, mem);
	bt_pool_configure(cfg, size, max_age);
	return cfg;
}

static cae_backend *pbackend(const cae_config *cfg)
{
	return bt_backend("kubernetes", cfg, NULL);
}

#define TASK_PREFIX "caetest-k8spool"
#define CFG_SEQS 5 /* the configurations (pool keys) of the tests below */

/* Two processes prepare at once from a pool of one: exactly one gets the pool's pod, the
 * other a cold prepare, and both environments work. */
START_TEST(two_claimers_pool_of_one)
{
	cfg_seq = 1;
	cae_config *cfg = pcfg("1", "600");
	cae_backend *b = pbackend(cfg);
	char pool_uid[128], pool_name[160];
	bt_pool_filled(b, pool_uid, sizeof(pool_uid), pool_name, sizeof(pool_name));
	ck_assert_int_eq(bt_fill(b), 0); /* full */
	bt_two_claimers("kubernetes", cfg, b, pool_uid, TASK_PREFIX);
	ck_assert(!bt_k8s_pod_exists(pool_name));
	cae_backend_free(b);
	cae_config_free(cfg);
}
END_TEST

/* A pool pod past the maximum age is never handed out: the prepare is cold, and the old
 * pod is removed. */
START_TEST(expired_never_handed_out)
{
	cfg_seq = 2;
	cae_config *cfg = pcfg("1", "600");
	cae_backend *b = pbackend(cfg);
	char pool_uid[128], pool_name[160];
	bt_pool_filled(b, pool_uid, sizeof(pool_uid), pool_name, sizeof(pool_name));
	json_t *mine = bt_own_pool(b);
	int64_t age = json_integer_value(json_object_get(json_array_get(mine, 0), "age_s"));
	json_decref(mine);
	/* the same pods, claimed with a maximum age of a second: the same pool key */
	cae_config *old = pcfg("1", "1");
	bt_wait_until((int64_t)time(NULL) + 2 - age);
	cae_backend *ob = pbackend(old);
	char uuid[64];
	bt_task_uuid(uuid, sizeof(uuid), TASK_PREFIX);
	cae_env_info info = bt_prepare(ob, uuid);
	ck_assert_str_ne(info.container_id, pool_uid);
	ck_assert(!bt_k8s_pod_exists(pool_name));
	mine = bt_own_pool(b);
	ck_assert_int_eq(json_array_size(mine), 0);
	json_decref(mine);
	cae_error err = {0};
	ck_assert_int_eq(cae_backend_cleanup(ob, uuid, &err), 0);
	cae_env_info_clear(&info);
	cae_backend_free(ob);
	cae_config_free(old);
	cae_backend_free(b);
	cae_config_free(cfg);
}
END_TEST

static bool only_this(const char *uuid, void *ud)
{
	return strcmp(uuid, ud) == 0;
}

/* A claimed pod is the task's as a cold one would be: commands and the editor through its
 * helper, info and list from another process (which finds it by its uuid), no token in its
 * spec, the gc and cleanup remove it by the task's uuid. */
/* The NetworkPolicy named name in namespace default, new; NULL: none. */
static json_t *egress_policy(cae_k8s *k, const char *name)
{
	char path[256];
	snprintf(path, sizeof(path),
		 "/apis/networking.k8s.io/v1/namespaces/default/networkpolicies/%s", name);
	json_t *np = NULL;
	return cae_k8s_call(k, "GET", path, NULL, &np, NULL) == 0 ? np : NULL;
}

START_TEST(claimed_pod_is_the_tasks)
{
	cfg_seq = 3;
	cae_config *cfg = pcfg("1", "600");
	/* an allow-list: the claimed pod gets the NetworkPolicy denying its egress (the clone
	 * goes through the proxy, to the loopback forge by allowed_addresses) */
	bt_cfg_set(cfg, "command_executor.docker.network.whitelist_mode", "true");
	bt_cfg_set(cfg, "command_executor.docker.network.allowed_domains", "allowed.test");
	bt_cfg_set(cfg, "command_executor.docker.network.allowed_addresses", "127.0.0.1/32");
	cae_backend *b = pbackend(cfg);
	char pool_uid[128], pool_name[160];
	bt_pool_filled(b, pool_uid, sizeof(pool_uid), pool_name, sizeof(pool_name));
	/* the pool's pod carries no task and no token */
	cae_k8s *k = bt_k8s_client();
	json_t *pod = NULL;
	cae_error err = {0};
	ck_assert_int_eq(cae_k8s_pod_get(k, "default", pool_name, &pod, &err), 0);
	char *text = json_dumps(pod, 0);
	ck_assert_ptr_null(strstr(text, git_token));
	ck_assert_ptr_null(strstr(text, "cae.task_uuid"));
	ck_assert_ptr_null(strstr(text, "cae.git_credential"));
	ck_assert_ptr_null(strstr(text, "cae.egress"));
	free(text);
	json_decref(pod);

	char uuid[64], cold[160];
	bt_task_uuid(uuid, sizeof(uuid), TASK_PREFIX);
	snprintf(cold, sizeof(cold), "coding-agent-exec-%s", uuid);
	cae_env_info info = bt_prepare(b, uuid);
	ck_assert_str_eq(info.container_id, pool_uid);
	ck_assert_str_eq(info.status, "ready");
	/* it left the pool: the pool's labels are gone, the task's are there */
	ck_assert_int_eq(cae_k8s_pod_get(k, "default", pool_name, &pod, &err), 0);
	json_t *labels = json_object_get(json_object_get(pod, "metadata"), "labels");
	ck_assert_ptr_null(json_object_get(labels, "cae.pool"));
	ck_assert_str_eq(json_string_value(json_object_get(labels, "cae.task_uuid")), uuid);
	ck_assert_str_eq(json_string_value(json_object_get(labels, "cae.phase")), "ready");
	/* the claim labelled it for its policy, named as the task's cold pod */
	ck_assert_str_eq(json_string_value(json_object_get(labels, "cae.egress")) ?: "", cold);
	json_t *np = egress_policy(k, cold);
	ck_assert_msg(np, "no NetworkPolicy %s", cold);
	ck_assert_str_eq(
	    json_string_value(json_object_get(
		json_object_get(json_object_get(json_object_get(np, "spec"), "podSelector"),
				"matchLabels"),
		"cae.egress"))
		?: "",
	    cold);
	json_decref(np);
	/* the deadline is a cold pod's from the claim on, not the pool's longer one */
	json_int_t dl = json_integer_value(
	    json_object_get(json_object_get(pod, "spec"), "activeDeadlineSeconds"));
	ck_assert_int_le(dl, 86400 + 120);
	ck_assert_int_ge(dl, 86400);
	text = json_dumps(pod, 0);
	ck_assert_ptr_null(strstr(text, git_token));
	free(text);
	json_decref(pod);
	json_t *mine = bt_own_pool(b);
	ck_assert_int_eq(json_array_size(mine), 0);
	json_decref(mine);

	/* commands and the editor */
	cae_run_result r = bt_exec(b, uuid, "test -f .git/HEAD && pwd && id -u", 120000);
	ck_assert_msg(strcmp(r.out, "/workspace/project\n1000\n") == 0, "%s%s", r.out, r.err);
	cae_run_result_clear(&r);
	cae_editor_limits lim;
	cae_editor_limits_default(&lim);
	cae_editor_request q = {.command = CAE_EDITOR_CMD_CREATE,
				.path = "pooled.txt",
				.path_len = 10,
				.text = "warm\n",
				.text_len = 5};
	cae_editor_result res = {0};
	ck_assert_msg(cae_backend_edit(b, uuid, &lim, &q, &res, &err) == 0 && !res.is_error,
		      "%s %s", err.message, res.text);
	cae_editor_result_clear(&res);

	/* another process's view: found by the task's uuid */
	cae_backend *b2 = pbackend(cfg);
	cae_env_info i2;
	ck_assert_msg(cae_backend_info(b2, uuid, &i2, &err) == 0, "%s", err.message);
	ck_assert_str_eq(i2.task_uuid, uuid);
	ck_assert_str_eq(i2.status, "ready");
	ck_assert_str_eq(i2.environment_name, "python");
	ck_assert_str_eq(i2.container_id, pool_uid);
	cae_env_info_clear(&i2);
	r = bt_exec(b2, uuid, "cat pooled.txt", 120000);
	ck_assert_str_eq(r.out, "warm\n");
	cae_run_result_clear(&r);
	json_t *list = NULL;
	ck_assert_int_eq(cae_backend_list(b2, &list, &err), 0);
	int listed = 0;
	size_t i;
	json_t *e;
	json_array_foreach(list, i, e)
	{
		const char *u = json_string_value(json_object_get(e, "task_uuid"));
		if (u && strcmp(u, uuid) == 0)
			listed++;
	}
	ck_assert_int_eq(listed, 1);
	json_decref(list);
	/* the gc sees it as the task's: young and ready, kept; past the threshold, removed */
	int removed = -1;
	ck_assert_int_eq(
	    cae_backend_cleanup_stale_filtered(b2, 86400, only_this, uuid, &removed, &err), 0);
	ck_assert_int_eq(removed, 0);
	ck_assert(bt_k8s_pod_exists(pool_name));
	removed = 0;
	ck_assert_int_eq(cae_backend_cleanup_stale_filtered(b2, 0, only_this, uuid, &removed, &err),
			 0);
	ck_assert_int_eq(removed, 1);
	ck_assert(!bt_k8s_pod_exists(pool_name));
	np = egress_policy(k, cold);
	ck_assert_msg(!np, "the gc left NetworkPolicy %s", cold);
	/* the task prepared again elsewhere, cold (the pool is empty): the first process, which
	 * remembers the pool pod, finds the cold one, and removes it */
	cae_env_info_clear(&info);
	info = bt_prepare(b2, uuid);
	ck_assert_str_ne(info.container_id, pool_uid);
	ck_assert_msg(cae_backend_info(b, uuid, &i2, &err) == 0, "%s", err.message);
	ck_assert_str_eq(i2.container_id, info.container_id);
	cae_env_info_clear(&i2);
	ck_assert_int_eq(cae_backend_cleanup(b, uuid, &err), 0);
	ck_assert_int_eq(cae_backend_info(b2, uuid, &i2, &err), -ENOENT);
	/* the first process's commands see it gone */
	const char *argv[] = {"true", NULL};
	cae_exec_request req = {.argv = argv, .timeout_ms = 60000, .cancel_fd = -1};
	ck_assert_int_lt(cae_backend_exec(b, uuid, &req, &r, &err), 0);
	cae_backend_free(b2);

	/* and again, removed by cleanup */
	bt_pool_filled(b, pool_uid, sizeof(pool_uid), pool_name, sizeof(pool_name));
	cae_env_info_clear(&info);
	info = bt_prepare(b, uuid);
	ck_assert_str_eq(info.container_id, pool_uid);
	b2 = pbackend(cfg);
	ck_assert_int_eq(cae_backend_cleanup(b2, uuid, &err), 0);
	ck_assert(!bt_k8s_pod_exists(pool_name));
	ck_assert_int_eq(cae_backend_info(b, uuid, &i2, &err), -ENOENT);
	cae_backend_free(b2);
	cae_env_info_clear(&info);
	cae_k8s_free(k);
	cae_backend_free(b);
	cae_config_free(cfg);
}
END_TEST

/* Drain removes this configuration's free pool pods, never a claimed one. */
START_TEST(drain_removes_free_only)
{
	cfg_seq = 4;
	cae_config *cfg = pcfg("1", "600");
	cae_backend *b = pbackend(cfg);
	char claimed_uid[128], claimed_name[160], free_uid[128], free_name[160];
	bt_pool_filled(b, claimed_uid, sizeof(claimed_uid), claimed_name, sizeof(claimed_name));
	char uuid[64];
	bt_task_uuid(uuid, sizeof(uuid), TASK_PREFIX);
	cae_env_info info = bt_prepare(b, uuid);
	ck_assert_str_eq(info.container_id, claimed_uid);
	bt_pool_filled(b, free_uid, sizeof(free_uid), free_name, sizeof(free_name));
	ck_assert_str_ne(free_uid, claimed_uid);
	int n = 0;
	cae_error err = {0};
	ck_assert_int_eq(cae_backend_pool_drain(b, false, &n, &err), 0);
	ck_assert_int_eq(n, 1);
	ck_assert(!bt_k8s_pod_exists(free_name));
	ck_assert(bt_k8s_pod_exists(claimed_name));
	/* the gc of the pool (cae gc) leaves the claimed one too */
	ck_assert_int_eq(cae_backend_pool_gc(b, &n, &err), 0);
	ck_assert_int_eq(n, 0);
	cae_run_result r = bt_exec(b, uuid, "echo still", 120000);
	ck_assert_str_eq(r.out, "still\n");
	cae_run_result_clear(&r);
	ck_assert_int_eq(cae_backend_cleanup(b, uuid, &err), 0);
	ck_assert(!bt_k8s_pod_exists(claimed_name));
	json_t *mine = bt_own_pool(b);
	ck_assert_int_eq(json_array_size(mine), 0);
	json_decref(mine);
	cae_env_info_clear(&info);
	cae_backend_free(b);
	cae_config_free(cfg);
}
END_TEST

static bool in_set(const char *uuid, void *ud)
{
	return json_object_get(ud, uuid) != NULL;
}

/* A listener on 127.0.0.1 that accepts and never answers (a clone from it hangs); url gets
 * a repository URL on it. */
static int silent_server(char *url, size_t size)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(fd, 0);
	struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t sl = sizeof(sin);
	ck_assert(bind(fd, (struct sockaddr *)&sin, sizeof(sin)) == 0 && listen(fd, 8) == 0 &&
		  getsockname(fd, (struct sockaddr *)&sin, &sl) == 0);
	snprintf(url, size, "http://127.0.0.1:%d/py.git", ntohs(sin.sin_port));
	return fd;
}

/* Waits until the prepare p connects to the silent server lfd (its clone runs): the
 * connection, which the caller closes. */
static int wait_for_clone(struct bt_preparer *p, int lfd)
{
	for (;;) {
		struct pollfd fds[2] = {{.fd = lfd, .events = POLLIN},
					{.fd = p->steps, .events = POLLIN}};
		ck_assert_int_gt(poll(fds, 2, 300000), 0);
		if (fds[0].revents)
			return accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
		ck_assert_msg(bt_preparer_next_step(p), "the prepare ended before its clone");
	}
}

/* Waits until the protected paths' user pass of a prepare into pod reads the global git
 * configuration, made a FIFO here: the returned stream holds the FIFO's write end open, so
 * the pass stays there until the stream is closed. */
static cae_k8s_stream *hold_protect_step(cae_k8s *k, const char *pod, struct bt_preparer *p)
{
	const char *mk[] = {"sh", "-c", "rm -f \"$HOME/.gitconfig\" && mkfifo \"$HOME/.gitconfig\"",
			    NULL};
	cae_run_result res;
	cae_error err = {0};
	ck_assert_msg(
	    cae_k8s_exec(k, "default", pod, "main", mk, NULL, 0, 60000, 0, 0, -1, &res, &err) == 0,
	    "%s", err.message);
	ck_assert_msg(res.exit_code == 0, "%s", res.err);
	cae_run_result_clear(&res);
	/* the open of the write end returns when the pass opens the read end */
	const char *hold[] = {"sh", "-c", "exec 3>\"$HOME/.gitconfig\"; echo opened; exec cat",
			      NULL};
	cae_k8s_stream *s = NULL;
	ck_assert_msg(cae_k8s_exec_open(k, "default", pod, "main", hold, 60000, &s, &err) == 0,
		      "%s", err.message);
	bt_preparer_go(p);
	char got[16];
	size_t have = 0;
	while (have < 7) {
		struct pollfd pf = {.fd = cae_k8s_stream_fd(s), .events = POLLIN};
		ck_assert_int_eq(poll(&pf, 1, 300000), 1);
		ssize_t r = cae_k8s_stream_read(s, got + have, sizeof(got) - 1 - have);
		if (r == -EAGAIN)
			continue;
		ck_assert_msg(r > 0, "the FIFO was never opened: %s", cae_k8s_stream_stderr(s));
		have += (size_t)r;
	}
	got[have] = '\0';
	ck_assert_str_eq(got, "opened\n");
	return s;
}

/* The environment of uuid, whose preparer was killed in pod: never ready, and never a pool
 * pod again. */
static void killed_never_ready(cae_backend *b, const char *uuid, const char *pod)
{
	bt_assert_unready(b, uuid, "failed", "is not ready");
	json_t *p = bt_k8s_pod(pod);
	ck_assert_ptr_nonnull(p);
	json_t *labels = json_object_get(json_object_get(p, "metadata"), "labels");
	ck_assert_ptr_null(json_object_get(labels, "cae.pool"));
	ck_assert_str_eq(json_string_value(json_object_get(labels, "cae.task_uuid")), uuid);
	ck_assert_str_ne(json_string_value(json_object_get(labels, "cae.phase")), "ready");
	json_decref(p);
	json_t *mine = bt_own_pool(b);
	size_t i;
	json_t *e;
	json_array_foreach(mine, i, e)
	    ck_assert_str_ne(json_string_value(json_object_get(e, "name")), pod);
	json_decref(mine);
}

/* A claimer SIGKILLed in a prepare from the pool: right after its claim (held where the
 * clone starts), during the clone (its git has reached a server that never answers), and
 * during the protected paths' step (its user pass reads a FIFO held open). The pod it
 * claimed is never ready (info, list, commands), is never a pool pod again (the pool's
 * status leaves it out, a fill does not count it, the next prepare, which takes the oldest
 * pool pod, gets a newer one), and the gc or the cleanup of its task removes it. */
START_TEST(killed_claimer_leaves_no_pool_pod)
{
	cfg_seq = 5;
	cae_config *cfg = pcfg("1", "600");
	cae_backend *b = pbackend(cfg);
	cae_k8s *k = bt_k8s_client();
	enum { AFTER_CLAIM, IN_CLONE, IN_PROTECT, POINTS };
	char uuids[POINTS][64], uids[POINTS][128], pods[POINTS][160];
	for (int pt = 0; pt < POINTS; pt++) {
		bt_pool_filled(b, uids[pt], sizeof(uids[pt]), pods[pt], sizeof(pods[pt]));
		bt_task_uuid(uuids[pt], sizeof(uuids[pt]), TASK_PREFIX);
		cae_task t = bt_http_task(uuids[pt]);
		struct bt_preparer p;
		if (pt == AFTER_CLAIM) {
			bt_preparer_start(&p, "kubernetes", cfg, &t, 4);
			bt_preparer_wait_step(&p, 4);
			bt_preparer_kill(&p);
			ck_assert_int_eq(p.last, 4);
		} else if (pt == IN_CLONE) {
			char url[128];
			int lfd = silent_server(url, sizeof(url));
			t.repo = url;
			bt_preparer_start(&p, "kubernetes", cfg, &t, 0);
			int c = wait_for_clone(&p, lfd);
			ck_assert_int_ge(c, 0);
			bt_preparer_kill(&p);
			ck_assert_int_eq(p.last, 4); /* in the clone: its step begun, none after */
			close(c);
			close(lfd);
		} else {
			/* the pod protects .git/hooks with its root sidecar */
			json_t *pod = bt_k8s_pod(pods[pt]);
			json_t *cs = json_object_get(json_object_get(pod, "spec"), "containers");
			ck_assert_int_eq(json_array_size(cs), 2);
			ck_assert_str_eq(
			    json_string_value(json_object_get(json_array_get(cs, 1), "name")),
			    "cae-protect");
			json_decref(pod);
			bt_preparer_start(&p, "kubernetes", cfg, &t, 6);
			bt_preparer_wait_step(&p, 6);
			cae_k8s_stream *hold = hold_protect_step(k, pods[pt], &p);
			bt_preparer_kill(&p);
			ck_assert_int_eq(p.last,
					 6); /* in the ready step, which it never reported */
			cae_k8s_stream_close(hold);
		}
		ck_assert(bt_k8s_pod_exists(pods[pt]));
		killed_never_ready(b, uuids[pt], pods[pt]);
	}
	/* the pool is empty: a fill starts one, and the next prepare gets that one */
	char uid[128];
	bt_pool_filled(b, uid, sizeof(uid), NULL, 0);
	char uuid[64];
	bt_task_uuid(uuid, sizeof(uuid), TASK_PREFIX);
	cae_env_info info = bt_prepare(b, uuid);
	ck_assert_str_eq(info.container_id, uid);
	for (int pt = 0; pt < POINTS; pt++)
		ck_assert_str_ne(info.container_id, uids[pt]);
	cae_env_info_clear(&info);
	cae_error err = {0};
	ck_assert_int_eq(cae_backend_cleanup(b, uuid, &err), 0);
	/* the gc of the first two tasks removes their pods whatever their age; the cleanup of
	 * the third removes its */
	json_t *set = json_pack("{s:b, s:b}", uuids[AFTER_CLAIM], 1, uuids[IN_CLONE], 1);
	int removed = 0;
	ck_assert_msg(cae_backend_cleanup_stale_filtered(b, 86400, in_set, set, &removed, &err) ==
			  0,
		      "%s", err.message);
	json_decref(set);
	ck_assert_int_eq(removed, 2);
	ck_assert_msg(cae_backend_cleanup(b, uuids[IN_PROTECT], &err) == 0, "%s", err.message);
	for (int pt = 0; pt < POINTS; pt++) {
		ck_assert_msg(!bt_k8s_pod_exists(pods[pt]), "%s left behind", pods[pt]);
		ck_assert_int_eq(cae_backend_info(b, uuids[pt], &info, &err), -ENOENT);
	}
	json_t *mine = bt_own_pool(b);
	ck_assert_int_eq(json_array_size(mine), 0);
	json_decref(mine);
	cae_k8s_free(k);
	cae_backend_free(b);
	cae_config_free(cfg);
}
END_TEST

/* Deletes this run's pods: its tasks' and its pool keys' (what a failed test left). */
static void sweep(void)
{
	json_t *pool = json_object(); /* this run's pool pods, by name */
	for (cfg_seq = 1; cfg_seq <= CFG_SEQS; cfg_seq++) {
		cae_config *cfg = pcfg("1", "600");
		cae_backend *b = pbackend(cfg);
		json_t *mine = bt_own_pool(b);
		size_t i;
		json_t *e;
		json_array_foreach(mine, i, e) json_object_set_new(
		    pool, json_string_value(json_object_get(e, "name")), json_true());
		json_decref(mine);
		cae_backend_free(b);
		cae_config_free(cfg);
	}
	bt_k8s_sweep(TASK_PREFIX, pool);
	json_decref(pool);
}

static Suite *make_suite(void)
{
	Suite *s = suite_create("pool-k8s");
	TCase *p = bt_tcase(s, "pool", 900, sweep);
	tcase_add_test(p, two_claimers_pool_of_one);
	tcase_add_test(p, expired_never_handed_out);
	tcase_add_test(p, claimed_pod_is_the_tasks);
	tcase_add_test(p, drain_removes_free_only);
	tcase_add_test(p, killed_claimer_leaves_no_pool_pod);
	return s;
}

int main(void)
{
	return bt_k8s_main(make_suite);
}
