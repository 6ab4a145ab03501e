/* What the tests of tests/backend share, so that each states only what is its own: the
 * configurations of the engine and of the cluster the tests run against, tasks for the
 * loopback git server's py.git (tests/gitserver.h), prepare and exec that fail the test
 * loudly, the warm pool's status and fill, a prepare run in a child process that reports
 * its steps and can be held at one (to be killed there, or raced against another), the
 * cluster's client and a sweep that deletes only the pods of this run, and the checks that
 * protected paths hold. Header only, as tests/testutil.h and tests/gitserver.h are: the git
 * server's state is the including test's. Call bt_init() first thing in main. */
#ifndef CAE_TESTS_BACKEND_TEST_H
#define CAE_TESTS_BACKEND_TEST_H

#include "testutil.h"
#include "gitserver.h"

#include "base/macro.h"
#include "cae/backend.h"
#include "cae/config.h"
#include "cae/editor.h"
#include "cae/k8s.h"
#include "cae/log.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>

__attribute__((unused)) static int bt_runner_pid; /* set by bt_init */
__attribute__((unused)) static int bt_seq;
__attribute__((unused)) static char bt_repo_url[512];

static inline void bt_init(void)
{
	bt_runner_pid = (int)getpid();
}

static inline void bt_cfg_set(cae_config *cfg, const char *key, const char *value)
{
	cae_error err = {0};
	ck_assert_msg(cae_config_set(cfg, key, value, &err) == 0, "%s: %s", key, err.message);
}

/* The docker backend on the host network (the engine has no bridge; the git server is on
 * loopback), modest limits with the pids limit given (a test makes it a pool key of its
 * own). DOCKER_HOST, when set, is the engine. */
/* The test suite is an instance of its own (command_executor.instance): one per test
 * binary's run, unless the test set one. It never touches another instance's environments
 * (scripts/bystander.sh proves it during `make check`). */
static inline void bt_instance(cae_config *cfg)
{
	if (cfg->command_executor.instance)
		return;
	char inst[64];
	snprintf(inst, sizeof(inst), "caetest-%d", bt_runner_pid);
	bt_cfg_set(cfg, "command_executor.instance", inst);
}

static inline void bt_docker_configure(cae_config *cfg, const char *pids_limit)
{
	bt_instance(cfg);
	bt_cfg_set(cfg, "command_executor.backend", "docker");
	if (getenv("DOCKER_HOST") && *getenv("DOCKER_HOST"))
		bt_cfg_set(cfg, "command_executor.docker_host", getenv("DOCKER_HOST"));
	bt_cfg_set(cfg, "command_executor.docker.network.mode", "host");
	bt_cfg_set(cfg, "command_executor.docker.resources.pids_limit", pids_limit);
	bt_cfg_set(cfg, "command_executor.docker.resources.memory_limit", "1g");
	bt_cfg_set(cfg, "command_executor.docker.resources.cpu_limit", "1");
}

/* The single-node cluster of scripts/k8s-env.sh: no scheduler (pods name their node),
 * images imported (never pulled), no CNI (host network, so that pods reach the loopback
 * git server). The memory limit is given (a test makes it a pool key of its own). */
static inline void bt_kubernetes_configure(cae_config *cfg, const char *memory_limit)
{
	bt_instance(cfg);
	bt_cfg_set(cfg, "command_executor.backend", "kubernetes");
	bt_cfg_set(cfg, "command_executor.kubernetes.namespace", "default");
	bt_cfg_set(cfg, "command_executor.kubernetes.node_name", "localhost");
	bt_cfg_set(cfg, "command_executor.kubernetes.image_pull_policy", "Never");
	bt_cfg_set(cfg, "command_executor.docker.network.mode", "host");
	bt_cfg_set(cfg, "command_executor.docker.resources.memory_limit", memory_limit);
	bt_cfg_set(cfg, "command_executor.docker.resources.cpu_limit", "1");
}

/* A warm pool of size for the default environment (python), with pods or containers of at
 * most max_age seconds; no dependency install; the git server's token as GitHub's. */
static inline void bt_pool_configure(cae_config *cfg, const char *size, const char *max_age)
{
	bt_cfg_set(cfg, "command_executor.clone.auto_install_deps", "false");
	bt_cfg_set(cfg, "github.token", git_token);
	bt_cfg_set(cfg, "command_executor.pool.max_age_seconds", max_age);
	bt_cfg_set(cfg, "command_executor.pool.size", size);
}

/* The backend named name (and nothing else) for cfg. */
/* A log of warnings and errors on stderr (kept by meson in the test's log): what the backend
 * says went wrong (a helper that did not answer, a cache not served) beside a failed
 * assertion. One per process, never freed. */
static inline cae_log *bt_warn_log(void)
{
	static cae_log *log;
	if (!log)
		log = cae_log_new(2, CAE_LOG_WARN);
	return log;
}

static inline cae_backend *bt_backend(const char *name, const cae_config *cfg, cae_log *log)
{
	cae_backend *b = NULL;
	cae_error err = {0};
	ck_assert_msg(cae_backend_new_named(name, cfg, log, &b, &err) == 0, "%s", err.message);
	ck_assert_str_eq(cae_backend_name(b), name);
	return b;
}

/* A task uuid unique to this run and process: prefix-<runner pid>-<pid>-<n> (lower case,
 * digits and '-' with a prefix of those: the pod or container is then coding-agent-exec-
 * followed by it exactly). */
static inline void bt_task_uuid(char *buf, size_t size, const char *prefix)
{
	snprintf(buf, size, "%s-%d-%d-%d", prefix, bt_runner_pid, (int)getpid(), ++bt_seq);
}

/* A task for py.git over authenticated HTTP (platform github: the token applies). */
static inline cae_task bt_http_task(const char *uuid)
{
	snprintf(bt_repo_url, sizeof(bt_repo_url), "%spy.git", git_http);
	cae_task t = {.uuid = (char *)uuid, .repo = bt_repo_url, .platform = (char *)"github"};
	return t;
}

/* Prepares uuid's py.git task in python; it must succeed. */
static inline cae_env_info bt_prepare(cae_backend *b, const char *uuid)
{
	cae_task t = bt_http_task(uuid);
	cae_env_info info;
	cae_prepare_options o = {.cancel_fd = -1};
	cae_error err = {0};
	ck_assert_msg(cae_backend_prepare(b, &t, "python", &o, &info, &err) == 0, "%s",
		      err.message);
	return info;
}

/* Runs sh -c script in uuid's environment; the call must succeed (the command may fail). */
static inline cae_run_result bt_exec(cae_backend *b, const char *uuid, const char *script,
				     int64_t timeout_ms)
{
	const char *argv[] = {"sh", "-c", script, NULL};
	cae_exec_request req = {.argv = argv, .timeout_ms = timeout_ms, .cancel_fd = -1};
	cae_run_result r;
	cae_error err = {0};
	ck_assert_msg(cae_backend_exec(b, uuid, &req, &r, &err) == 0, "%s: %s", script,
		      err.message);
	return r;
}

/* uuid's status in b's list into status ("" when it is not listed). */
static inline void bt_listed_status(cae_backend *b, const char *uuid, char *status, size_t size)
{
	json_t *list = NULL;
	cae_error err = {0};
	ck_assert_msg(cae_backend_list(b, &list, &err) == 0, "%s", err.message);
	snprintf(status, size, "%s", "");
	size_t i;
	json_t *e;
	json_array_foreach(list, i, e)
	{
		if (strcmp(json_string_value(json_object_get(e, "task_uuid")), uuid) == 0)
			snprintf(status, size, "%s",
				 json_string_value(json_object_get(e, "status")));
	}
	json_decref(list);
}

/* uuid's environment is not ready: info and list say status, and a command is refused
 * with an error that says why (needle). */
static inline void bt_assert_unready(cae_backend *b, const char *uuid, const char *status,
				     const char *needle)
{
	cae_env_info info;
	cae_error err = {0};
	ck_assert_msg(cae_backend_info(b, uuid, &info, &err) == 0, "%s", err.message);
	ck_assert_str_eq(info.status, status);
	cae_env_info_clear(&info);
	char st[32];
	bt_listed_status(b, uuid, st, sizeof(st));
	ck_assert_msg(strcmp(st, status) == 0, "listed as %s", st);
	const char *argv[] = {"true", NULL};
	cae_exec_request req = {.argv = argv, .cancel_fd = -1};
	cae_run_result res;
	ck_assert_int_eq(cae_backend_exec(b, uuid, &req, &res, &err), -EAGAIN);
	ck_assert_msg(strstr(err.message, needle), "%s", err.message);
}

/* ---- the warm pool ---- */

/* This configuration's pool environments (status entries with this_config). */
static inline json_t *bt_own_pool(cae_backend *b)
{
	json_t *st = NULL;
	cae_error err = {0};
	ck_assert_msg(cae_backend_pool_status(b, &st, &err) == 0, "%s", err.message);
	json_t *mine = json_array();
	size_t i;
	json_t *e;
	json_array_foreach(st, i, e)
	{
		if (json_is_true(json_object_get(e, "this_config")))
			json_array_append(mine, e);
	}
	json_decref(st);
	return mine;
}

/* Fills the pool: how many it started. */
static inline int bt_fill(cae_backend *b)
{
	int n = -1;
	cae_error err = {0};
	ck_assert_msg(cae_backend_pool_fill(b, -1, &n, &err) == 0, "%s", err.message);
	return n;
}

/* The only pool environment of b's configuration, which runs python: its container_id into
 * id, its name into name (NULL: not wanted). */
static inline void bt_only_pool_entry(cae_backend *b, char *id, size_t isize, char *name,
				      size_t nsize)
{
	json_t *mine = bt_own_pool(b);
	ck_assert_int_eq(json_array_size(mine), 1);
	json_t *e = json_array_get(mine, 0);
	ck_assert_str_eq(json_string_value(json_object_get(e, "state")), "running");
	ck_assert_str_eq(json_string_value(json_object_get(e, "environment")), "python");
	snprintf(id, isize, "%s", json_string_value(json_object_get(e, "container_id")));
	if (name)
		snprintf(name, nsize, "%s", json_string_value(json_object_get(e, "name")));
	json_decref(mine);
}

/* Fills the empty pool of one of b's configuration: the one it started, as
 * bt_only_pool_entry gives it. */
static inline void bt_pool_filled(cae_backend *b, char *id, size_t isize, char *name, size_t nsize)
{
	ck_assert_int_eq(bt_fill(b), 1);
	bt_only_pool_entry(b, id, isize, name, nsize);
}

/* ---- a prepare in a child process ---- */

/* A child process preparing one task: it writes each progress step on `steps` as one digit,
 * then "=" and the environment's container_id, or "!" and the error. At the step it is
 * held at it waits until the parent writes to `go` (or is killed there: no race with its
 * next step). */
struct bt_preparer {
	pid_t pid;
	int steps; /* read end */
	int go;	   /* write end */
	int last;  /* the last step read from steps */
};

struct bt_hold {
	int steps, go, at;
};

static inline void bt_child_progress(void *ud, int step, int total, const char *msg)
{
	(void)total;
	(void)msg;
	struct bt_hold *h = ud;
	char c = (char)('0' + step);
	if (write(h->steps, &c, 1) != 1)
		_exit(3);
	if (step == h->at && read(h->go, &c, 1) != 1)
		_exit(3);
}

/* Forks a process that prepares t in python with the backend name for cfg and holds at
 * step hold_at (0: none). */
static inline void bt_preparer_start(struct bt_preparer *p, const char *name, const cae_config *cfg,
				     const cae_task *t, int hold_at)
{
	int s[2], g[2];
	ck_assert_int_eq(pipe2(s, O_CLOEXEC), 0);
	ck_assert_int_eq(pipe2(g, O_CLOEXEC), 0);
	p->pid = fork();
	ck_assert_int_ge(p->pid, 0);
	if (p->pid == 0) {
		close(s[0]);
		close(g[1]);
		cae_backend *b = NULL;
		cae_error err = {0};
		if (cae_backend_new_named(name, cfg, NULL, &b, &err) < 0) {
			dprintf(s[1], "!%s", err.message);
			_exit(4);
		}
		struct bt_hold h = {.steps = s[1], .go = g[0], .at = hold_at};
		cae_prepare_options o = {
		    .progress = bt_child_progress, .progress_userdata = &h, .cancel_fd = -1};
		cae_env_info info;
		if (cae_backend_prepare(b, t, "python", &o, &info, &err) < 0) {
			dprintf(s[1], "!%s", err.message);
			_exit(5);
		}
		dprintf(s[1], "=%s", info.container_id);
		_exit(0);
	}
	close(s[1]);
	close(g[0]);
	p->steps = s[0];
	p->go = g[1];
	p->last = 0;
}

/* Reads the child's next progress step into p->last: false at the end of its steps. */
static inline bool bt_preparer_next_step(struct bt_preparer *p)
{
	char c;
	if (read(p->steps, &c, 1) != 1 || c < '1' || c > '9')
		return false;
	p->last = c - '0';
	return true;
}

/* Reads the child's progress until `step` was reported. */
static inline void bt_preparer_wait_step(struct bt_preparer *p, int step)
{
	while (p->last != step)
		ck_assert_msg(bt_preparer_next_step(p), "the prepare ended before step %d", step);
}

/* Lets a held child go on. */
static inline void bt_preparer_go(struct bt_preparer *p)
{
	ck_assert_int_eq(write(p->go, "g", 1), 1);
}

static inline void bt_preparer_close(struct bt_preparer *p)
{
	close(p->steps);
	close(p->go);
	p->pid = -1;
}

/* SIGKILLs the child and reaps it; p->last is then the last step it reported. */
static inline void bt_preparer_kill(struct bt_preparer *p)
{
	ck_assert_int_eq(kill(p->pid, SIGKILL), 0);
	ck_assert_int_eq(waitpid(p->pid, NULL, 0), p->pid);
	while (bt_preparer_next_step(p))
		;
	bt_preparer_close(p);
}

/* Waits for the child's end: whether it prepared; out gets its container_id, or "!" and
 * the error. */
static inline bool bt_preparer_finish(struct bt_preparer *p, char *out, size_t size)
{
	char all[1024];
	size_t have = 0;
	ssize_t n;
	while (have < sizeof(all) - 1 &&
	       (n = read(p->steps, all + have, sizeof(all) - 1 - have)) > 0)
		have += (size_t)n;
	all[have] = '\0';
	int st;
	ck_assert_int_eq(waitpid(p->pid, &st, 0), p->pid);
	bt_preparer_close(p);
	const char *r = strpbrk(all, "=!");
	snprintf(out, size, "%s", !r ? "!no result" : *r == '=' ? r + 1 : r);
	return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

/* uuid's environment has its clone and runs commands as the container's user; then it is
 * removed. */
static inline void bt_works_then_cleanup(cae_backend *b, const char *uuid)
{
	cae_run_result r =
	    bt_exec(b, uuid, "cat /workspace/project/.git/HEAD >/dev/null && id -u", 120000);
	ck_assert_str_eq(r.out, "1000\n");
	cae_run_result_clear(&r);
	cae_error err = {0};
	ck_assert_int_eq(cae_backend_cleanup(b, uuid, &err), 0);
}

/* Two processes prepare at once (both held at the first step, then let go together) from the
 * pool of one of b (backend name for cfg): exactly one gets the pool's environment pool_id,
 * the other another one, both succeed and leave the pool empty, and both environments work
 * (the clone is there, commands run as 1000). Then b cleans both up. */
static inline void bt_two_claimers(const char *name, const cae_config *cfg, cae_backend *b,
				   const char *pool_id, const char *prefix)
{
	char uuids[2][64];
	struct bt_preparer p[2];
	for (int i = 0; i < 2; i++) {
		bt_task_uuid(uuids[i], sizeof(uuids[i]), prefix);
		cae_task t = bt_http_task(uuids[i]);
		bt_preparer_start(&p[i], name, cfg, &t, 1);
	}
	for (int i = 0; i < 2; i++)
		bt_preparer_wait_step(&p[i], 1);
	for (int i = 0; i < 2; i++)
		bt_preparer_go(&p[i]);
	char ids[2][256];
	for (int i = 0; i < 2; i++)
		ck_assert_msg(bt_preparer_finish(&p[i], ids[i], sizeof(ids[i])), "claimer %d: %s",
			      i, ids[i]);
	int won = (strcmp(ids[0], pool_id) == 0) + (strcmp(ids[1], pool_id) == 0);
	ck_assert_msg(won == 1, "pool environment %s went to %d claimers (%s, %s)", pool_id, won,
		      ids[0], ids[1]);
	ck_assert_str_ne(ids[0], ids[1]);
	/* the pool has nothing left to hand out */
	json_t *mine = bt_own_pool(b);
	ck_assert_int_eq(json_array_size(mine), 0);
	json_decref(mine);
	for (int i = 0; i < 2; i++)
		bt_works_then_cleanup(b, uuids[i]);
}

/* Waits until the wall clock (not another process) reaches t (seconds since the epoch). */
static inline void bt_wait_until(int64_t t)
{
	while ((int64_t)time(NULL) < t)
		nanosleep(&(struct timespec){0, 100000000L}, NULL);
}

/* A test case of suite s with a timeout of timeout_s, the loopback git server for its
 * tests and sweep (may be NULL) after them. */
static inline TCase *bt_tcase(Suite *s, const char *name, int timeout_s, void (*sweep)(void))
{
	TCase *tc = tcase_create(name);
	tcase_set_timeout(tc, timeout_s);
	tcase_add_unchecked_fixture(tc, gs_setup, gs_teardown);
	if (sweep)
		tcase_add_unchecked_fixture(tc, NULL, sweep);
	suite_add_tcase(s, tc);
	return tc;
}

/* ---- Podman ---- */

/* Whether Podman's Docker-compatible API is there to test against (CAE_TEST_PODMAN=1, as
 * make check sets after scripts/podman-env.sh up); says so when not. */
static inline bool bt_podman_enabled(void)
{
	const char *on = getenv("CAE_TEST_PODMAN");
	if (on && strcmp(on, "1") == 0)
		return true;
	fprintf(stderr, "CAE_TEST_PODMAN is not 1: no Podman service to test against (skipped)\n");
	return false;
}

/* The endpoint of that service: CAE_PODMAN_HOST, or the socket of scripts/podman-env.sh. */
static inline const char *bt_podman_host(void)
{
	const char *h = getenv("CAE_PODMAN_HOST");
	return h && *h ? h : "unix:///run/cae-podman/podman.sock";
}

/* ---- the cluster ---- */

/* Whether the cluster is there to test against (CAE_TEST_K8S=1); says so when not. */
static inline bool bt_k8s_enabled(void)
{
	const char *on = getenv("CAE_TEST_K8S");
	if (on && strcmp(on, "1") == 0)
		return true;
	fprintf(stderr, "CAE_TEST_K8S is not 1: no cluster to test against (skipped)\n");
	return false;
}

/* main of a test of the cluster: the suite make_suite makes, run when the cluster is there
 * (77, skipped, otherwise). */
static inline int bt_k8s_main(Suite *(*make_suite)(void))
{
	if (!bt_k8s_enabled())
		return 77;
	bt_init();
	return tu_run(make_suite());
}

/* A client of the cluster of $KUBECONFIG. */
static inline cae_k8s *bt_k8s_client(void)
{
	cae_k8s_auth a;
	cae_k8s *k = NULL;
	cae_error err = {0};
	ck_assert_msg(cae_k8s_auth_load(NULL, NULL, &a, &err) == 0, "%s", err.message);
	ck_assert_msg(cae_k8s_new(&a, &k, &err) == 0, "%s", err.message);
	return k;
}

/* Pod name in namespace default as the API has it (new reference), or NULL when there is
 * none. */
static inline json_t *bt_k8s_pod(const char *name)
{
	cae_k8s *k = bt_k8s_client();
	json_t *pod = NULL;
	cae_error err = {0};
	int r = cae_k8s_pod_get(k, "default", name, &pod, &err);
	ck_assert_msg(r == 0 || r == -ENOENT, "%s", err.message);
	cae_k8s_free(k);
	return r == 0 ? pod : NULL;
}

/* Whether pod name exists (by name, through the API). */
static inline bool bt_k8s_pod_exists(const char *name)
{
	json_t *pod = bt_k8s_pod(name);
	json_decref(pod);
	return pod != NULL;
}

/* Deletes this run's pods in namespace default, what failed tests left: those of the tasks
 * bt_task_uuid made with prefix in this run, and those named in pool_names (an object, may
 * be NULL). */
static inline void bt_k8s_sweep(const char *prefix, json_t *pool_names)
{
	char task_prefix[128];
	snprintf(task_prefix, sizeof(task_prefix), "%s-%d-", prefix, bt_runner_pid);
	cae_k8s *k = bt_k8s_client();
	json_t *items = NULL;
	if (cae_k8s_pod_list(k, "default", NULL, &items, NULL) == 0) {
		size_t i;
		json_t *p;
		json_array_foreach(items, i, p)
		{
			json_t *md = json_object_get(p, "metadata");
			const char *name = json_string_value(json_object_get(md, "name"));
			const char *u = json_string_value(
			    json_object_get(json_object_get(md, "annotations"), "cae.task_uuid"));
			if (name && ((u && strncmp(u, task_prefix, strlen(task_prefix)) == 0) ||
				     json_object_get(pool_names, name)))
				(void)cae_k8s_pod_delete(k, "default", name, 0, NULL);
		}
	}
	json_decref(items);
	cae_k8s_free(k);
}

/* ---- protected paths ---- */

/* The agent's own git works in uuid's project with protected paths: config, a commit, a
 * push (with cae's credential helper only: one the repository names does not run), and
 * what more (a script ending in "&& ", may be "") does. */
static inline void bt_agent_git_works(cae_backend *b, const char *uuid, const char *more,
				      int64_t timeout_ms)
{
	char script[1024];
	snprintf(script, sizeof(script),
		 "git config user.name agent && git config user.email agent@example.com && "
		 "git config credential.helper '!f() { touch /workspace/tmp/helper-ran; }; f' && "
		 "echo more >> mine.txt && git add mine.txt && git commit -qm mine && %s"
		 "git push -q origin HEAD:refs/heads/protected-%s 2>&1 && "
		 "test ! -e /workspace/tmp/helper-ran && git log -1 --format=%%s%%an",
		 more, uuid);
	cae_run_result r = bt_exec(b, uuid, script, timeout_ms);
	ck_assert_msg(r.exit_code == 0, "%s%s", r.out, r.err);
	ck_assert_str_eq(r.out, "mineagent\n");
	cae_run_result_clear(&r);
}

/* Commands that would change .git/hooks (the default protected path) or what leads to it:
 * each must fail wherever the path is protected. */
__attribute__((unused)) static const char *const bt_hook_attacks[] = {
    "echo 'touch /tmp/pwned' > .git/hooks/pre-commit",
    "echo x >> .git/hooks/pre-commit.sample",
    "rm -f .git/hooks/pre-push.sample",
    "chmod u+w .git/hooks",
    "mv .git/hooks .git/h2",
    "cd .git && mv hooks ../h",
    "mv .git .g",
    "rm -rf .git/hooks",
    "rm -rf .git",
    "cd .. && mv project p2",
    "cd .. && rm -rf project",
    "ln -s /tmp/x .git/hooks/pre-commit",
    "echo x > /proc/self/cwd/.git/hooks/pre-commit",
    "mkdir -p /tmp/t/hooks && echo x > /tmp/t/hooks/pre-commit && "
    "chmod +x /tmp/t/hooks/pre-commit && git init -q --template=/tmp/t . && "
    "test -e .git/hooks/pre-commit",
    "chmod 0777 /workspace/project/.git",
    "chmod 0777 /workspace",
};

/* Every attack (a command as the environment's user) fails and leaves state_script's output
 * as it was (before); restore clears what an attack may leave on its way. */
static inline void bt_attacks_fail(cae_backend *b, const char *uuid, const char *const *attacks,
				   size_t n, const char *state_script, const char *before,
				   const char *restore, int64_t timeout_ms)
{
	for (size_t i = 0; i < n; i++) {
		cae_run_result r = bt_exec(b, uuid, attacks[i], timeout_ms);
		ck_assert_msg(r.exit_code != 0, "%s: succeeded", attacks[i]);
		cae_run_result_clear(&r);
		r = bt_exec(b, uuid, state_script, timeout_ms);
		ck_assert_msg(strcmp(r.out, before) == 0, "%s: changed:\n%s\nwas:\n%s", attacks[i],
			      r.out, before);
		cae_run_result_clear(&r);
		r = bt_exec(b, uuid, restore, timeout_ms);
		cae_run_result_clear(&r);
	}
}

/* The editor (run by the helper, as the user) cannot write into .git/hooks (the default
 * protected path), by any spelling of it. */
static inline void bt_editor_cannot_write_hooks(cae_backend *b, const char *uuid)
{
	cae_editor_limits lim;
	cae_editor_limits_default(&lim);
	static const char *const paths[] = {".git/hooks/pre-commit", ".git/hooks/pre-push.sample",
					    "/workspace/project/.git/./hooks/post-commit"};
	for (size_t i = 0; i < ARRAY_SIZE(paths); i++) {
		cae_editor_request q = {.command = CAE_EDITOR_CMD_CREATE,
					.path = paths[i],
					.path_len = strlen(paths[i]),
					.text = "#!/bin/sh\n",
					.text_len = 10};
		cae_editor_result res = {0};
		cae_error err = {0};
		int e = cae_backend_edit(b, uuid, &lim, &q, &res, &err);
		ck_assert_msg(e < 0 || res.is_error, "%s: %s", paths[i], res.text);
		cae_editor_result_clear(&res);
	}
}

#endif
