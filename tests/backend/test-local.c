/* The local backend: prepare (clone, PR branches, dependency warnings, fallbacks, failures
 * leaving nothing), exec confinement with and without bubblewrap, state seen by a second
 * process, cleanup and stale GC. Uses real git on repositories made here. */
#include "base/macro.h"
#include "cae/backend.h"
#include "cae/config.h"
#include "backend/backend-internal.h"
#include "backend/seccomp.h"
#include "backend/diskfs.h"
#include "backend/pkgcache.h"
#include "base/txn.h"
#include "runner/proctree.h"
#include "testutil.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <signal.h>
#include <poll.h>
#include <sys/inotify.h>
#include <sys/wait.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

static char *state;
#define C(s) ((char *)(s))

#define GIT "git -c user.email=t@example.com -c user.name=t -c init.defaultBranch=main"

/* A repository whose main has 20 commits, then feature branches off with 40 commits of its
 * own while main gets 40 more: a depth-1 clone of feature lacks the merge base, and reaching
 * it does not need the whole history. */
static char *make_repo(void)
{
	char *d = tu_mkdtemp();
	tu_sh("cd %s && " GIT " init -q && for i in $(seq 1 20); do echo c$i >> a.txt && " GIT
	      " add . && " GIT " commit -qm c$i; done && " GIT " checkout -qb feature && for i in "
	      "$(seq 1 40); do echo f$i >> f.txt && " GIT " add . && " GIT
	      " commit -qm f$i; done && " GIT
	      " checkout -q main && for i in $(seq 1 40); do echo m$i >> a.txt && " GIT
	      " commit -qam m$i; done",
	      d);
	return d;
}

static cae_config *config(const char *extra)
{
	state = tu_mkdtemp();
	char yaml[2048];
	snprintf(yaml, sizeof(yaml), "command_executor:\n  backend: local\n  state_dir: %s\n%s",
		 state, extra ? extra : "");
	cae_config *cfg;
	cae_error err;
	char *envp[] = {NULL};
	ck_assert_msg(cae_config_load_string(&cfg, yaml, strlen(yaml), "t.yaml", envp, &err) == 0,
		      "%s", err.message);
	return cfg;
}

static cae_backend *backend(cae_config *cfg)
{
	cae_backend *b;
	cae_error err;
	ck_assert_msg(cae_backend_new_named("local", cfg, NULL, &b, &err) == 0, "%s", err.message);
	return b;
}

static cae_run_result run(cae_backend *b, const char *uuid, const char *script)
{
	const char *argv[] = {"sh", "-c", script, NULL};
	cae_exec_request req = {.argv = argv, .timeout_ms = 30000, .cancel_fd = -1};
	cae_run_result r;
	cae_error err;
	ck_assert_msg(cae_backend_exec(b, uuid, &req, &r, &err) == 0, "%s", err.message);
	return r;
}

START_TEST(prepare_issue_shallow_clone)
{
	_cleanup_free_ char *repo = make_repo();
	cae_config *cfg = config(NULL);
	cae_backend *b = backend(cfg);
	cae_task t = {.uuid = C("t1"), .repo = repo};
	cae_env_info info;
	cae_error err;
	ck_assert_msg(cae_backend_prepare(b, &t, "python", NULL, &info, &err) == 0, "%s",
		      err.message);
	ck_assert_str_eq(info.status, "ready");
	ck_assert_str_eq(info.task_uuid, "t1");
	ck_assert_str_eq(info.environment_name, "python");
	ck_assert_str_eq(info.backend, "local");
	ck_assert_uint_eq(json_array_size(info.deps), 0);
	cae_run_result r = run(b, "t1",
			       "git rev-parse --is-shallow-repository; git rev-parse "
			       "--abbrev-ref HEAD; cat a.txt | wc -l");
	ck_assert_str_eq(r.out, "true\nmain\n60\n");
	cae_run_result_clear(&r);
	/* commands see the project where containers have it; the host keeps it in the state
	 * directory */
	ck_assert_str_eq(info.workspace_path, "/workspace/project");
	ck_assert_int_eq(strncmp(info.host_path, state, strlen(state)), 0);
	ck_assert_str_eq(json_string_value(json_object_get(info.limits, "mechanism")), "cgroup");
	cae_env_info_clear(&info);
	cae_backend_free(b);
	cae_config_free(cfg);
}
END_TEST

START_TEST(prepare_pull_request_diff_against_target)
{
	_cleanup_free_ char *repo = make_repo();
	cae_config *cfg = config(NULL);
	cae_backend *b = backend(cfg);
	cae_task t = {.uuid = C("pr1"),
		      .repo = repo,
		      .kind = CAE_TASK_PULL_REQUEST,
		      .branch = C("feature"),
		      .target_branch = C("main")};
	cae_env_info info;
	cae_error err;
	ck_assert_msg(cae_backend_prepare(b, &t, NULL, NULL, &info, &err) == 0, "%s", err.message);
	cae_run_result r = run(b, "pr1",
			       "git rev-parse --abbrev-ref HEAD; "
			       "git diff --name-only origin/main...HEAD; "
			       "git rev-parse --is-shallow-repository");
	ck_assert_str_eq(r.out, "feature\nf.txt\ntrue\n");
	cae_run_result_clear(&r);
	/* no environment given -> default, with a warning */
	ck_assert_uint_ge(json_array_size(info.warnings), 1);
	ck_assert_ptr_nonnull(
	    strstr(json_string_value(json_array_get(info.warnings, 0)), "python"));
	cae_env_info_clear(&info);

	/* no target given: the remote's default branch is fetched deep enough, and origin/HEAD
	 * names it */
	cae_task t2 = {
	    .uuid = C("pr2"), .repo = repo, .kind = CAE_TASK_PULL_REQUEST, .branch = C("feature")};
	ck_assert_msg(cae_backend_prepare(b, &t2, NULL, NULL, &info, &err) == 0, "%s", err.message);
	r = run(b, "pr2",
		"git rev-parse --abbrev-ref HEAD; "
		"git diff --name-only origin/main...HEAD; "
		"git rev-parse --abbrev-ref origin/HEAD; "
		"git rev-parse --is-shallow-repository");
	ck_assert_str_eq(r.out, "feature\nf.txt\norigin/main\ntrue\n");
	cae_run_result_clear(&r);
	cae_env_info_clear(&info);
	cae_backend_free(b);
	cae_config_free(cfg);
}
END_TEST

START_TEST(unknown_environment_falls_back)
{
	_cleanup_free_ char *repo = make_repo();
	cae_config *cfg = config(NULL);
	cae_backend *b = backend(cfg);
	cae_task t = {.uuid = C("fb"), .repo = repo};
	cae_env_info info;
	cae_error err;
	ck_assert(cae_backend_prepare(b, &t, "cobol", NULL, &info, &err) == 0);
	ck_assert_str_eq(info.environment_name, "python");
	ck_assert_ptr_nonnull(strstr(json_string_value(json_array_get(info.warnings, 0)), "cobol"));
	cae_env_info_clear(&info);
	cae_backend_free(b);
	cae_config_free(cfg);
}
END_TEST

START_TEST(failed_clone_leaves_nothing)
{
	cae_config *cfg = config(NULL);
	cae_backend *b = backend(cfg);
	cae_task t = {.uuid = C("bad"), .repo = C("http://127.0.0.1:9/nothing.git")};
	cae_env_info info;
	cae_error err;
	ck_assert_int_lt(cae_backend_prepare(b, &t, NULL, NULL, &info, &err), 0);
	ck_assert_msg(strncmp(err.message, "clone", 5) == 0, "%s", err.message);
	_cleanup_free_ char *dir = cae__path_join(state, "local/bad");
	ck_assert(!cae__is_dir(dir));
	json_t *list;
	ck_assert_int_eq(cae_backend_list(b, &list, &err), 0);
	ck_assert_uint_eq(json_array_size(list), 0);
	json_decref(list);
	/* a missing local path, and credentials in the URL, are refused */
	cae_task t2 = {.uuid = C("bad2"), .repo = C("/nonexistent/repo")};
	ck_assert_int_lt(cae_backend_prepare(b, &t2, NULL, NULL, &info, &err), 0);
	cae_task t3 = {.uuid = C("bad3"), .repo = C("https://user:secret@example.invalid/r.git")};
	ck_assert_int_lt(cae_backend_prepare(b, &t3, NULL, NULL, &info, &err), 0);
	ck_assert_ptr_null(strstr(err.message, "secret"));
	cae_backend_free(b);
	cae_config_free(cfg);
}
END_TEST

START_TEST(reprepare_starts_clean_and_second_process_sees_it)
{
	_cleanup_free_ char *repo = make_repo();
	cae_config *cfg = config(NULL);
	cae_backend *b = backend(cfg);
	cae_task t = {.uuid = C("same"), .repo = repo};
	cae_env_info info;
	cae_error err;
	ck_assert(cae_backend_prepare(b, &t, NULL, NULL, &info, &err) == 0);
	cae_env_info_clear(&info);
	cae_run_result r = run(b, "same", "echo junk > junk.txt");
	cae_run_result_clear(&r);
	/* junk.txt would be lost: refused, then forced */
	ck_assert_int_eq(cae_backend_prepare(b, &t, NULL, NULL, &info, &err), -EBUSY);
	ck_assert_msg(strstr(err.message, "junk.txt"), "%s", err.message);
	cae_prepare_options force = {.cancel_fd = -1, .force = true};
	ck_assert(cae_backend_prepare(b, &t, NULL, &force, &info, &err) == 0);
	cae_env_info_clear(&info);
	r = run(b, "same", "ls");
	ck_assert_str_eq(r.out, "a.txt\n");
	cae_run_result_clear(&r);
	/* A second process reads the state the first wrote. */
	pid_t pid = fork();
	if (pid == 0) {
		cae_backend *b2;
		cae_env_info i2;
		int ok = cae_backend_new_named("local", cfg, NULL, &b2, NULL) == 0 &&
			 cae_backend_info(b2, "same", &i2, NULL) == 0 &&
			 strcmp(i2.status, "ready") == 0;
		_exit(ok ? 0 : 1);
	}
	int st;
	waitpid(pid, &st, 0);
	ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	ck_assert_int_eq(cae_backend_cleanup(b, "same", &err), 0);
	ck_assert_int_eq(cae_backend_info(b, "same", &info, &err), -ENOENT);
	/* cleanup of a missing environment is fine */
	ck_assert_int_eq(cae_backend_cleanup(b, "same", &err), 0);
	cae_backend_free(b);
	cae_config_free(cfg);
}
END_TEST

START_TEST(cleanup_stale_by_age)
{
	_cleanup_free_ char *repo = make_repo();
	cae_config *cfg = config(NULL);
	cae_backend *b = backend(cfg);
	cae_error err;
	cae_env_info info;
	cae_task old = {.uuid = C("old"), .repo = repo}, fresh = {.uuid = C("fresh"), .repo = repo};
	ck_assert(cae_backend_prepare(b, &old, NULL, NULL, &info, &err) == 0);
	cae_env_info_clear(&info);
	ck_assert(cae_backend_prepare(b, &fresh, NULL, NULL, &info, &err) == 0);
	cae_env_info_clear(&info);
	/* age "old" by two days */
	tu_sh("cd %s/local/old && sed -i 's/\"created_at\": \"[^\"]*\"/\"created_at\": "
	      "\"2020-01-01T00:00:00.000Z\"/' meta.json",
	      state);
	int removed = -1;
	ck_assert_int_eq(cae_backend_cleanup_stale(b, 24 * 3600, &removed, &err), 0);
	ck_assert_int_eq(removed, 1);
	ck_assert_int_eq(cae_backend_info(b, "old", &info, &err), -ENOENT);
	ck_assert_int_eq(cae_backend_info(b, "fresh", &info, &err), 0);
	cae_env_info_clear(&info);
	cae_backend_free(b);
	cae_config_free(cfg);
}
END_TEST

static void age_env(const char *uuid)
{
	tu_sh("cd %s/local/%s && sed -i 's/\"created_at\": \"[^\"]*\"/\"created_at\": "
	      "\"2020-01-01T00:00:00.000Z\"/' meta.json",
	      state, uuid);
}

static bool env_exists(cae_backend *b, const char *uuid)
{
	cae_env_info info;
	int r = cae_backend_info(b, uuid, &info, NULL);
	if (r == 0)
		cae_env_info_clear(&info);
	return r == 0;
}

static bool not_spared(const char *uuid, void *ud)
{
	return strcmp(uuid, (const char *)ud) != 0;
}

/* The collector runs at once, then every interval: a stale environment goes at the first
 * run; one that becomes stale later goes at a later run; the fresh one stays, and so does a
 * stale one the filter keeps out of its sight. Asserted by the run count, never by time. */
START_TEST(collector_at_start_and_every_interval)
{
	_cleanup_free_ char *repo = make_repo();
	cae_config *cfg = config(NULL);
	cae_backend *b = backend(cfg);
	cae_error err;
	cae_env_info info;
	const char *uuids[] = {"old", "fresh", "later", "spared"};
	for (size_t i = 0; i < 4; i++) {
		cae_task t = {.uuid = C(uuids[i]), .repo = repo};
		ck_assert_msg(cae_backend_prepare(b, &t, NULL, NULL, &info, &err) == 0, "%s",
			      err.message);
		cae_env_info_clear(&info);
	}
	age_env("old");
	age_env("spared");
	cae_collector_options o = {.interval_ms = 20,
				   .threshold_s = 24 * 3600,
				   .filter = not_spared,
				   .filter_userdata = C("spared")};
	cae_backend_collector *c = NULL;
	ck_assert_msg(cae_backend_collector_start(b, &o, &c, &err) == 0, "%s", err.message);
	unsigned runs = cae_backend_collector_wait(c, 1, 60000);
	ck_assert_uint_ge(runs, 1);
	ck_assert(!env_exists(b, "old"));
	ck_assert(env_exists(b, "fresh"));
	ck_assert(env_exists(b, "later"));
	ck_assert(env_exists(b, "spared"));
	/* stale from now on: a run that starts after this removes it */
	age_env("later");
	ck_assert_uint_ge(cae_backend_collector_wait(c, runs + 2, 60000), runs + 2);
	ck_assert(!env_exists(b, "later"));
	ck_assert(env_exists(b, "fresh"));
	ck_assert(env_exists(b, "spared"));
	cae_backend_collector_stop(c);
	/* a single run (interval 0) ends by itself */
	o.interval_ms = 0;
	o.filter = NULL;
	ck_assert_int_eq(cae_backend_collector_start(b, &o, &c, &err), 0);
	ck_assert_uint_eq(cae_backend_collector_wait(c, 1, 60000), 1);
	ck_assert(!env_exists(b, "spared"));
	ck_assert(env_exists(b, "fresh"));
	cae_backend_collector_stop(c);
	cae_backend_free(b);
	cae_config_free(cfg);
}
END_TEST

/* An environment whose workspace is gone can run nothing: stale whatever its age. */
START_TEST(workspace_gone_is_stale)
{
	cae_config *cfg = config(NULL);
	cae_backend *b = backend(cfg);
	char *ws = tu_mkdtemp(), *ws2 = tu_mkdtemp();
	cae_task t = {.uuid = C("gone"), .repo = ws}, t2 = {.uuid = C("kept"), .repo = ws2};
	cae_prepare_options o = {.workspace = ws, .cancel_fd = -1};
	cae_env_info info;
	cae_error err;
	ck_assert_msg(cae_backend_prepare(b, &t, NULL, &o, &info, &err) == 0, "%s", err.message);
	cae_env_info_clear(&info);
	o.workspace = ws2;
	ck_assert_msg(cae_backend_prepare(b, &t2, NULL, &o, &info, &err) == 0, "%s", err.message);
	cae_env_info_clear(&info);
	cae__rm_rf(ws);
	int removed = -1;
	ck_assert_int_eq(cae_backend_cleanup_stale(b, 8760 * 3600, &removed, &err), 0);
	ck_assert_int_eq(removed, 1);
	ck_assert(!env_exists(b, "gone"));
	ck_assert(env_exists(b, "kept"));
	ck_assert(cae__is_dir(ws2)); /* a workspace used as is is never removed */
	cae_backend_free(b);
	cae__rm_rf(ws2);
	free(ws);
	free(ws2);
	cae_config_free(cfg);
}
END_TEST

/* What a backend object prepared is removed by cae_backend_cleanup_prepared; what another
 * one (another process) prepared stays, and so does one it prepared that the other prepared
 * again since, and one already cleaned up is not counted. */
START_TEST(cleanup_prepared_takes_only_its_own)
{
	_cleanup_free_ char *repo = make_repo();
	cae_config *cfg = config(NULL);
	cae_backend *mine = backend(cfg), *other = backend(cfg);
	cae_error err;
	cae_env_info info;
	struct {
		cae_backend *b;
		const char *uuid;
	} steps[] = {{mine, "m1"},    {mine, "m2"},	{other, "o1"},
		     {mine, "again"}, {other, "again"}, {mine, "done"}};
	for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
		cae_task t = {.uuid = C(steps[i].uuid), .repo = repo};
		ck_assert_msg(cae_backend_prepare(steps[i].b, &t, NULL, NULL, &info, &err) == 0,
			      "%s", err.message);
		cae_env_info_clear(&info);
	}
	ck_assert_int_eq(cae_backend_cleanup(mine, "done", &err), 0);
	int removed = -1;
	ck_assert_msg(cae_backend_cleanup_prepared(mine, &removed, &err) == 0, "%s", err.message);
	ck_assert_int_eq(removed, 2);
	ck_assert(!env_exists(other, "m1"));
	ck_assert(!env_exists(other, "m2"));
	ck_assert(env_exists(mine, "o1"));
	ck_assert(env_exists(mine, "again"));
	/* once: the list is empty now */
	ck_assert_int_eq(cae_backend_cleanup_prepared(mine, &removed, &err), 0);
	ck_assert_int_eq(removed, 0);
	ck_assert_int_eq(cae_backend_cleanup_prepared(other, &removed, &err), 0);
	ck_assert_int_eq(removed, 2);
	ck_assert(!env_exists(mine, "again"));
	cae_backend_free(mine);
	cae_backend_free(other);
	cae_config_free(cfg);
}
END_TEST

struct slot_waiter {
	const char *dir;
	int n;
	int cancel_fd;
	int r;
	int fd;
};

static void *slot_wait_main(void *arg)
{
	struct slot_waiter *w = arg;
	w->r = cae__slot_acquire(w->dir, w->n, true, w->cancel_fd, &w->fd, NULL);
	return NULL;
}

/* The engine semaphore admits at most n holders: with n held, another is refused (without
 * waiting) or waits; one released admits exactly one more; a holder that dies releases. */
START_TEST(engine_slots_admit_at_most_n)
{
	char *dir = tu_mkdtemp();
	enum { N = 3 };
	int held[N];
	for (int i = 0; i < N; i++)
		ck_assert_int_eq(cae__slot_acquire(dir, N, false, -1, &held[i], NULL), 0);
	int fd = -1;
	ck_assert_int_eq(cae__slot_acquire(dir, N, false, -1, &fd, NULL), -EAGAIN);
	ck_assert_int_eq(fd, -1);
	/* a waiter (no cancel fd) is admitted whichever slot is given back: each in turn */
	struct slot_waiter w;
	pthread_t t;
	for (int i = 0; i < N; i++) {
		w = (struct slot_waiter){.dir = dir, .n = N, .cancel_fd = -1, .r = 1, .fd = -1};
		ck_assert_int_eq(pthread_create(&t, NULL, slot_wait_main, &w), 0);
		cae__slot_release(held[i]);
		ck_assert_int_eq(pthread_join(t, NULL), 0);
		ck_assert_int_eq(w.r, 0);
		ck_assert_int_ge(w.fd, 0);
		held[i] = w.fd; /* the waiter holds it now: full again */
		ck_assert_int_eq(cae__slot_acquire(dir, N, false, -1, &fd, NULL), -EAGAIN);
	}
	/* a waiter with a cancel fd ends when it is cancelled */
	int cp[2];
	ck_assert_int_eq(pipe(cp), 0);
	struct slot_waiter wc = {.dir = dir, .n = N, .cancel_fd = cp[0], .r = 1, .fd = -1};
	ck_assert_int_eq(pthread_create(&t, NULL, slot_wait_main, &wc), 0);
	ck_assert_int_eq(write(cp[1], "x", 1), 1);
	ck_assert_int_eq(pthread_join(t, NULL), 0);
	ck_assert_int_eq(wc.r, -ECANCELED);
	ck_assert_int_eq(wc.fd, -1);
	close(cp[0]);
	close(cp[1]);
	for (int i = 0; i < N; i++)
		cae__slot_release(held[i]);
	/* another process holds every slot, then dies: the slots are free again */
	int up[2], down[2];
	ck_assert_int_eq(pipe(up), 0);
	ck_assert_int_eq(pipe(down), 0);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		int mine[N];
		for (int i = 0; i < N; i++)
			if (cae__slot_acquire(dir, N, false, -1, &mine[i], NULL) < 0)
				_exit(1);
		char c = 'h';
		if (write(up[1], &c, 1) != 1)
			_exit(1);
		ssize_t k = read(down[0], &c, 1); /* held until killed */
		_exit(k < 0);
	}
	char c;
	ck_assert_int_eq(read(up[0], &c, 1), 1);
	ck_assert_int_eq(cae__slot_acquire(dir, N, false, -1, &fd, NULL), -EAGAIN);
	kill(pid, SIGKILL);
	ck_assert_int_eq(waitpid(pid, NULL, 0), pid);
	for (int i = 0; i < N; i++)
		ck_assert_int_eq(cae__slot_acquire(dir, N, false, -1, &held[i], NULL), 0);
	ck_assert_int_eq(cae__slot_acquire(dir, N, false, -1, &fd, NULL), -EAGAIN);
	for (int i = 0; i < N; i++)
		cae__slot_release(held[i]);
	cae__rm_rf(dir);
	free(dir);
}
END_TEST

struct bg_exec {
	cae_backend *b;
	const char *uuid;
	const char *script;
	int cancel_fd;
	int r;
};

static void *bg_exec_main(void *arg)
{
	struct bg_exec *x = arg;
	const char *argv[] = {"sh", "-c", x->script, NULL};
	cae_exec_request req = {.argv = argv, .timeout_ms = 120000, .cancel_fd = x->cancel_fd};
	cae_run_result r;
	x->r = cae_backend_exec(x->b, x->uuid, &req, &r, NULL);
	if (x->r == 0)
		cae_run_result_clear(&r);
	return NULL;
}

static json_t *find_env(json_t *list, const char *uuid)
{
	size_t i;
	json_t *e;
	json_array_foreach(list, i, e)
	{
		if (strcmp(json_string_value(json_object_get(e, "task_uuid")), uuid) == 0)
			return e;
	}
	return NULL;
}

/* The list shows what each environment's processes use and its limits, to any process: a
 * busy one has processes, CPU time and memory; an idle one none. */
START_TEST(list_shows_resources)
{
	_cleanup_free_ char *repo = make_repo();
	cae_config *cfg = config("  local:\n    sandbox: bubblewrap\n");
	cae_backend *b = backend(cfg);
	cae_error err;
	cae_env_info info;
	char busy_flag[4200];
	for (int i = 0; i < 2; i++) {
		cae_task t = {.uuid = C(i ? "idle" : "busy"), .repo = repo};
		ck_assert_msg(cae_backend_prepare(b, &t, NULL, NULL, &info, &err) == 0, "%s",
			      err.message);
		if (i == 0)
			snprintf(busy_flag, sizeof(busy_flag), "%s/.busy", info.host_path);
		cae_env_info_clear(&info);
	}
	int cancel[2];
	ck_assert_int_eq(pipe(cancel), 0);
	struct bg_exec x = {.b = b,
			    .uuid = "busy",
			    .script = "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done; "
				      "touch .busy; sleep 300",
			    .cancel_fd = cancel[0]};
	pthread_t t;
	ck_assert_int_eq(pthread_create(&t, NULL, bg_exec_main, &x), 0);
	for (int i = 0; i < 1200 && access(busy_flag, F_OK) != 0; i++)
		usleep(100000);
	ck_assert_msg(access(busy_flag, F_OK) == 0, "the command never got going");
	cae_backend *viewer = backend(cfg); /* as another process sees it */
	json_t *list = NULL;
	ck_assert_msg(cae_backend_list(viewer, &list, &err) == 0, "%s", err.message);
	json_t *busy = json_object_get(find_env(list, "busy"), "resources");
	json_t *idle = json_object_get(find_env(list, "idle"), "resources");
	ck_assert_ptr_nonnull(busy);
	ck_assert_ptr_nonnull(idle);
	ck_assert_int_ge(json_integer_value(json_object_get(busy, "pids")), 2); /* sh, sleep */
	ck_assert(json_real_value(json_object_get(busy, "cpu_seconds")) > 0);
	ck_assert_int_gt(json_integer_value(json_object_get(busy, "memory_bytes")), 0);
	ck_assert_int_eq(json_integer_value(json_object_get(busy, "memory_limit_bytes")),
			 (json_int_t)cfg->command_executor.docker.resources.memory_bytes);
	ck_assert(json_number_value(json_object_get(busy, "cpus_limit")) ==
		  cfg->command_executor.docker.resources.cpu_limit);
	ck_assert_int_eq(json_integer_value(json_object_get(busy, "pids_limit")),
			 cfg->command_executor.docker.resources.pids_limit);
	ck_assert_int_eq(json_integer_value(json_object_get(idle, "pids")), 0);
	ck_assert_int_eq(json_integer_value(json_object_get(idle, "memory_bytes")), 0);
	/* the workspace's own file system (as root): what it holds, of disk_limit */
	if (geteuid() == 0) {
		ck_assert_int_gt(json_integer_value(json_object_get(busy, "disk_bytes")), 0);
		ck_assert_int_lt(json_integer_value(json_object_get(busy, "disk_bytes")),
				 json_integer_value(json_object_get(busy, "disk_limit_bytes")));
		ck_assert_int_eq(json_integer_value(json_object_get(busy, "disk_limit_bytes")),
				 (json_int_t)cfg->command_executor.docker.resources.disk_bytes);
	}
	json_decref(list);
	ck_assert_int_eq(write(cancel[1], "x", 1), 1);
	ck_assert_int_eq(pthread_join(t, NULL), 0);
	close(cancel[0]);
	close(cancel[1]);
	cae_backend_free(viewer);
	cae_backend_free(b);
	cae_config_free(cfg);
}
END_TEST

START_TEST(bubblewrap_confines)
{
	_cleanup_free_ char *repo = make_repo();
	cae_config *cfg = config("  local:\n    sandbox: bubblewrap\n");
	cae_backend *b = backend(cfg);
	cae_task t = {.uuid = C("bw"), .repo = repo};
	cae_env_info info;
	cae_error err;
	ck_assert_msg(cae_backend_prepare(b, &t, NULL, NULL, &info, &err) == 0, "%s", err.message);
	ck_assert_str_eq(info.sandbox, "bubblewrap");
	_cleanup_free_ char *outside = cae__path_join(state, "outside.txt");
	char script[2048];
	snprintf(script, sizeof(script),
		 "echo in > inside.txt && echo ok-inside; pwd; id -u; "
		 "grep CapEff /proc/self/status; "
		 "echo x > %s 2>/dev/null && echo wrote-outside; "
		 "ls %s 2>/dev/null && echo sees-state; "
		 "echo x > /etc/cae-test 2>/dev/null && echo wrote-etc; "
		 "echo t > /tmp/cae-private-test && echo tmp-ok; "
		 "awk 'NR>2{print $1}' /proc/net/dev; echo x > ../tmp/scratch && echo scratch-ok",
		 outside, state);
	cae_run_result r = run(b, "bw", script);
	ck_assert_str_eq(r.out, "ok-inside\n/workspace/project\n1000\nCapEff:\t0000000000000000\n"
				"tmp-ok\nlo:\nscratch-ok\n");
	cae_run_result_clear(&r);
	ck_assert_int_ne(access(outside, F_OK), 0);
	ck_assert_int_ne(access("/tmp/cae-private-test", F_OK), 0);
	/* on the host, what commands write belongs to the unprivileged sandbox uid */
	_cleanup_free_ char *inside = cae__path_join(info.host_path, "inside.txt");
	struct stat st;
	ck_assert_int_eq(stat(inside, &st), 0);
	ck_assert_uint_eq(st.st_uid, geteuid() == 0 ? 100000 : geteuid());
	cae_env_info_clear(&info);
	cae_backend_free(b);
	cae_config_free(cfg);
}
END_TEST

static size_t descendants(void)
{
	pid_t kids[256];
	return cae__proctree_descendants(getpid(), kids, 256);
}

static cae_backend *prepared(cae_config *cfg, const char *uuid, const char *repo)
{
	cae_backend *b = backend(cfg);
	cae_task t = {.uuid = C(uuid), .repo = C(repo)};
	cae_env_info info;
	cae_error err;
	ck_assert_msg(cae_backend_prepare(b, &t, NULL, NULL, &info, &err) == 0, "%s", err.message);
	cae_env_info_clear(&info);
	return b;
}

/* The sandbox lives as long as the environment: every command of an environment runs in the
 * same namespaces (its parent is the helper, not a fresh bwrap init; its /tmp persists),
 * each environment has its own, and cleanup stops it. */
static void no_disk_left(const char *uuid);

START_TEST(sandbox_lives_with_the_environment)
{
	_cleanup_free_ char *repo = make_repo();
	cae_config *cfg = config("  local:\n    sandbox: bubblewrap\n");
	cae_backend *b = prepared(cfg, "keep1", repo);
	cae_task t2 = {.uuid = C("keep2"), .repo = repo};
	cae_env_info info;
	cae_error err;
	ck_assert(cae_backend_prepare(b, &t2, NULL, NULL, &info, &err) == 0);
	cae_env_info_clear(&info);
	size_t before = descendants();

	cae_run_result r = run(b, "keep1", "echo $PPID; echo kept > /tmp/keep");
	int ppid1 = atoi(r.out);
	cae_run_result_clear(&r);
	r = run(b, "keep1", "echo $PPID; cat /tmp/keep; tr '\\0' ' ' < /proc/$PPID/cmdline");
	char want[64];
	/* the helper, the PID namespace's init (--as-pid-1: no bwrap init) */
	snprintf(want, sizeof(want), "%d\nkept\n/.cae/cae-helper ", ppid1);
	ck_assert_str_eq(r.out, want);
	cae_run_result_clear(&r);
	/* the other environment: its own sandbox, its own /tmp */
	r = run(b, "keep2", "cat /tmp/keep 2>/dev/null || echo none");
	ck_assert_str_eq(r.out, "none\n");
	cae_run_result_clear(&r);
	size_t with_two = descendants();
	ck_assert_uint_gt(with_two, before);

	/* a timeout inside the sandbox kills the command's whole tree, the sandbox stays */
	const char *argv[] = {"sh", "-c", "setsid sleep 1000 & sh -c 'sleep 1000 &'; sleep 1000",
			      NULL};
	cae_exec_request req = {.argv = argv, .timeout_ms = 500, .cancel_fd = -1};
	ck_assert_int_eq(cae_backend_exec(b, "keep1", &req, &r, &err), 0);
	ck_assert(r.timed_out);
	cae_run_result_clear(&r);
	ck_assert_uint_eq(descendants(), with_two);
	r = run(b, "keep1", "ps -e -o comm= 2>/dev/null | grep -c sleep || true");
	ck_assert_str_eq(r.out, "0\n");
	cae_run_result_clear(&r);

	/* cleanup stops that environment's sandbox; freeing the backend the rest */
	ck_assert_int_eq(cae_backend_cleanup(b, "keep1", &err), 0);
	ck_assert_uint_lt(descendants(), with_two);
	ck_assert_uint_gt(descendants(), 0);
	/* keep2's sandbox, started while keep1's file system was mounted, keeps no copy of it:
	 * the file system ends, its loop device goes, with keep2's sandbox still running (the
	 * removal of keep1's directory detaches what is mounted on it in every namespace;
	 * a restore, which keeps the directory, is test-snapshot.c's) */
	no_disk_left("keep1");
	cae_backend_free(b);
	ck_assert_uint_eq(descendants(), 0);
	cae_config_free(cfg);
}
END_TEST

/* An environment re-created (here by a second backend, as another process would) gets a new
 * sandbox: the old one holds the removed directory. */
START_TEST(sandbox_follows_a_recreated_workspace)
{
	_cleanup_free_ char *repo = make_repo();
	cae_config *cfg = config("  local:\n    sandbox: bubblewrap\n");
	cae_backend *a = prepared(cfg, "again", repo);
	cae_run_result r = run(a, "again", "echo $PPID");
	cae_run_result_clear(&r);
	cae_backend *b = prepared(cfg, "again", repo);
	r = run(a, "again", "echo fresh > marker.txt && ls");
	ck_assert_str_eq(r.out, "a.txt\nmarker.txt\n");
	cae_run_result_clear(&r);
	cae_env_info info;
	cae_error err;
	ck_assert_int_eq(cae_backend_info(b, "again", &info, &err), 0);
	_cleanup_free_ char *marker = cae__path_join(info.host_path, "marker.txt");
	ck_assert_int_eq(access(marker, F_OK), 0);
	cae_env_info_clear(&info);
	/* the same backend re-preparing stops its sandbox first (forced: marker.txt goes) */
	cae_task t = {.uuid = C("again"), .repo = repo};
	cae_prepare_options force = {.cancel_fd = -1, .force = true};
	ck_assert(cae_backend_prepare(a, &t, NULL, &force, &info, &err) == 0);
	cae_env_info_clear(&info);
	r = run(a, "again", "ls");
	ck_assert_str_eq(r.out, "a.txt\n");
	cae_run_result_clear(&r);
	cae_backend_free(a);
	cae_backend_free(b);
	ck_assert_uint_eq(descendants(), 0);
	cae_config_free(cfg);
}
END_TEST

/* The helper program may live where the sandbox has a file system of its own (a build tree
 * under /tmp): it is bound in, read-only. */
START_TEST(sandbox_helper_from_tmp)
{
	char *dir = tu_mkdtemp(); /* under /tmp unless TMPDIR says otherwise */
	_cleanup_free_ char *copy = cae__path_join(dir, "cae-helper");
	tu_sh("cp '%s' '%s'", getenv("CAE_HELPER"), copy);
	setenv("CAE_HELPER", copy, 1);
	_cleanup_free_ char *repo = make_repo();
	cae_config *cfg = config("  local:\n    sandbox: bubblewrap\n");
	cae_backend *b = prepared(cfg, "tmphelper", repo);
	cae_run_result r =
	    run(b, "tmphelper", "tr '\\0' ' ' < /proc/$PPID/cmdline; echo x > /tmp/x");
	/* forked by the helper, not a fresh sandbox */
	ck_assert_str_eq(r.out, "/.cae/cae-helper ");
	cae_run_result_clear(&r);
	char script[4200];
	snprintf(script, sizeof(script), "cat /tmp/x; echo y > '%s' 2>/dev/null || echo ro", copy);
	r = run(b, "tmphelper", script);
	ck_assert_str_eq(r.out, "x\nro\n");
	cae_run_result_clear(&r);
	cae_backend_free(b);
	ck_assert_uint_eq(descendants(), 0);
	cae_config_free(cfg);
	cae__rm_rf(dir);
	free(dir);
}
END_TEST

/* Without the means for a sandbox (here: no cae-helper), commands are refused, unless the
 * config says unconfined: true in so many words. */
START_TEST(no_sandbox_means_refused_unless_unconfined)
{
	setenv("CAE_HELPER", "/nonexistent/cae-helper", 1);
	_cleanup_free_ char *repo = make_repo();
	cae_config *cfg = config(NULL);
	cae_backend *b = backend(cfg);
	cae_task t = {.uuid = C("nohelper"), .repo = repo};
	cae_env_info info;
	cae_error err;
	ck_assert_int_eq(cae_backend_prepare(b, &t, NULL, NULL, &info, &err), -ENOSYS);
	ck_assert_ptr_nonnull(strstr(err.message, "no sandbox for commands on this host"));
	ck_assert_ptr_nonnull(strstr(err.message, "unconfined: true"));
	json_t *list;
	ck_assert_int_eq(cae_backend_list(b, &list, &err), 0);
	ck_assert_uint_eq(json_array_size(list), 0);
	json_decref(list);
	cae_backend_free(b);
	cae_config_free(cfg);
	free(state);

	cfg = config("  local:\n    unconfined: true\n");
	b = backend(cfg);
	ck_assert_msg(cae_backend_prepare(b, &t, "python", NULL, &info, &err) == 0, "%s",
		      err.message);
	ck_assert_str_eq(info.sandbox, "none");
	ck_assert_ptr_nonnull(
	    strstr(json_string_value(json_array_get(info.warnings, 0)), "unconfined"));
	cae_run_result r = run(b, "nohelper", "pwd");
	char want[4200];
	snprintf(want, sizeof(want), "%s\n", info.host_path);
	ck_assert_str_eq(r.out, want);
	cae_run_result_clear(&r);
	cae_env_info_clear(&info);
	cae_backend_free(b);
	cae_config_free(cfg);
}
END_TEST

static pid_t find_helper(void)
{
	pid_t kids[256];
	size_t n = cae__proctree_descendants(getpid(), kids, 256);
	for (size_t i = 0; i < n; i++) {
		char p[64], comm[64] = "";
		snprintf(p, sizeof(p), "/proc/%d/comm", (int)kids[i]);
		FILE *f = fopen(p, "r");
		if (!f)
			continue;
		char *ok = fgets(comm, sizeof(comm), f);
		fclose(f);
		if (ok && strcmp(comm, "cae-helper\n") == 0)
			return kids[i];
	}
	return -1;
}

/* Kills the sandbox's helper (from this host: commands cannot, it is their PID namespace's
 * init) once the file at ud exists. */
static void *kill_helper_once(void *ud)
{
	for (int i = 0; i < 3000 && access(ud, F_OK) < 0; i++)
		usleep(10000);
	kill(find_helper(), SIGKILL);
	return NULL;
}

/* A helper that dies is replaced: between commands without the agent noticing; during a
 * command that command fails with a clear error and the next one runs in a new sandbox. */
START_TEST(sandbox_replaced_when_the_helper_dies)
{
	_cleanup_free_ char *repo = make_repo();
	cae_config *cfg = config("  local:\n    sandbox: bubblewrap\n");
	cae_backend *b = prepared(cfg, "phoenix", repo);
	cae_run_result r = run(b, "phoenix", "echo one > /tmp/one");
	cae_run_result_clear(&r);
	pid_t h = find_helper();
	ck_assert_int_gt(h, 0);
	/* No waiting: the next command may reach the channel while the dying helper's
	 * wrapper still holds it; unacknowledged, it is sent again to a new helper. */
	ck_assert_int_eq(kill(h, SIGKILL), 0);
	r = run(b, "phoenix", "cat /tmp/one 2>/dev/null || echo new-sandbox");
	ck_assert_str_eq(r.out, "new-sandbox\n");
	cae_run_result_clear(&r);

	/* a command cannot kill it: it is the PID namespace's init */
	r = run(b, "phoenix", "kill -9 $PPID; echo still; cat /tmp/one 2>/dev/null || echo gone");
	ck_assert_str_eq(r.out, "still\ngone\n");
	cae_run_result_clear(&r);
	cae_env_info info;
	cae_error err;
	ck_assert_int_eq(cae_backend_info(b, "phoenix", &info, &err), 0);
	_cleanup_free_ char *started = cae__path_join(info.host_path, "started");
	cae_env_info_clear(&info);
	pthread_t killer;
	ck_assert_int_eq(pthread_create(&killer, NULL, kill_helper_once, started), 0);
	const char *argv[] = {"sh", "-c", "touch started; sleep 20", NULL};
	cae_exec_request req = {.argv = argv, .timeout_ms = 30000, .cancel_fd = -1};
	ck_assert_int_eq(cae_backend_exec(b, "phoenix", &req, &r, &err), -ECONNRESET);
	pthread_join(killer, NULL);
	ck_assert_ptr_nonnull(strstr(err.message, "cae-helper ended during the command"));
	r = run(b, "phoenix", "echo back");
	ck_assert_str_eq(r.out, "back\n");
	cae_run_result_clear(&r);
	cae_backend_free(b);
	ck_assert_uint_eq(descendants(), 0);
	cae_config_free(cfg);
}
END_TEST

/* Nothing of the workspace's own file system of task uuid is left: no mount in
 * /proc/self/mountinfo, no loop device backed by its image (a device detaches itself once
 * the mount's last user, a sandbox that was killed, has gone: waited for), no image. */
static void no_disk_left(const char *uuid)
{
	tu_sh("d=%s/local/%s; for i in $(seq 100); do grep -qs \"$d/\" "
	      "/sys/block/loop*/loop/backing_file || break; sleep 0.1; done; "
	      "! grep \"$d/\" /proc/self/mountinfo /sys/block/loop*/loop/backing_file && "
	      "[ ! -e \"$d/" CAE_DISKFS_IMAGE "\" ]",
	      state, uuid);
}

static void kill_at_step(void *ud, int step, int total, const char *msg)
{
	(void)total;
	(void)msg;
	if (step == *(int *)ud)
		raise(SIGKILL);
}

/* A prepare killed at any step leaves an environment that is never "ready" (until the
 * step that made it ready): listed as "failed", refused by exec, collected by the stale
 * cleanup whatever its age, with nothing running. */
START_TEST(prepare_killed_is_never_ready)
{
	_cleanup_free_ char *repo = make_repo();
	cae_config *cfg = config(NULL);
	for (int step = 1; step <= 7; step++) {
		pid_t pid = fork();
		ck_assert_int_ge(pid, 0);
		if (pid == 0) {
			cae_backend *b = backend(cfg);
			cae_task t = {.uuid = C("killed"), .repo = repo};
			cae_prepare_options o = {
			    .progress = kill_at_step, .progress_userdata = &step, .cancel_fd = -1};
			cae_env_info info;
			cae_error err;
			cae_backend_prepare(b, &t, NULL, &o, &info, &err);
			_exit(3);
		}
		int st;
		ck_assert_int_eq(waitpid(pid, &st, 0), pid);
		ck_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
		cae_backend *b = backend(cfg);
		cae_env_info info;
		cae_error err;
		int r = cae_backend_info(b, "killed", &info, &err);
		if (step <= 3) {
			ck_assert_int_eq(r, -ENOENT); /* nothing made yet */
		} else {
			ck_assert_int_eq(r, 0);
			ck_assert_str_eq(info.status, step == 7 ? "ready" : "failed");
			cae_env_info_clear(&info);
			const char *argv[] = {"true", NULL};
			cae_exec_request req = {.argv = argv, .cancel_fd = -1};
			cae_run_result res;
			r = cae_backend_exec(b, "killed", &req, &res, &err);
			if (step == 7) {
				ck_assert_int_eq(r, 0);
				cae_run_result_clear(&res);
			} else {
				ck_assert_int_lt(r, 0);
				ck_assert_msg(strstr(err.message, "not ready"), "%s", err.message);
			}
			int removed = 0;
			ck_assert_int_eq(cae_backend_cleanup_stale(b, 86400, &removed, &err), 0);
			ck_assert_int_eq(removed, step == 7 ? 0 : 1);
			ck_assert_int_eq(cae_backend_info(b, "killed", &info, &err),
					 step == 7 ? 0 : -ENOENT);
			if (step == 7)
				cae_env_info_clear(&info);
		}
		cae_backend_free(b);
		/* What the killed process had started was re-parented to us: it ends on its own
		 * (its sandbox's init died with it); reap it. */
		pid_t kids[16];
		size_t nk = 0;
		for (int i = 0; i < 300; i++) {
			while (waitpid(-1, NULL, WNOHANG) > 0)
				;
			if ((nk = cae__proctree_descendants(getpid(), kids, 16)) == 0)
				break;
			usleep(100000);
		}
		char comm[256] = "";
		if (nk) {
			char p[64];
			snprintf(p, sizeof(p), "/proc/%d/cmdline", (int)kids[0]);
			FILE *f = fopen(p, "r");
			if (f) {
				size_t n = fread(comm, 1, sizeof(comm) - 1, f);
				for (size_t i = 0; i < n; i++)
					if (!comm[i])
						comm[i] = ' ';
				fclose(f);
			}
		}
		ck_assert_msg(nk == 0, "step %d: %zu left: %s", step, nk, comm);
		if (step == 7) {
			b = backend(cfg);
			ck_assert_int_eq(cae_backend_cleanup(b, "killed", &err), 0);
			cae_backend_free(b);
		}
		no_disk_left("killed");
	}
	cae_config_free(cfg);
}
END_TEST

/* A prepare killed in its first moments (right after each change to the state directory:
 * inotify tells the test when the prepare made one; then a few delays in, before any
 * progress step) leaves nothing, or an environment listed as failed that the stale cleanup
 * collects: never a directory nobody lists, nothing left after the cleanup. */
START_TEST(prepare_killed_early_is_listed_and_collected)
{
	_cleanup_free_ char *repo = make_repo();
	cae_config *cfg = config(NULL);
	_cleanup_free_ char *root = NULL, *dir = NULL;
	ck_assert_int_ge(asprintf(&root, "%s/local", state), 0);
	ck_assert_int_ge(asprintf(&dir, "%s/early", root), 0);
	cae_backend_free(backend(cfg)); /* the state directory and its sandbox /etc exist */
	/* what the killed prepare started (a git clone runs on after cae is killed) becomes this
	 * process's child, so that it can be waited for before gc: gc runs once the last writer
	 * is gone (one that runs on beside gc is sweep_unrecorded's case, tested below) */
	ck_assert_int_eq(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
	static const int delays_us[] = {0, 1000, 3000, 10000, 30000, 100000, 200000, 300000};
	const int n_events = 2, n = n_events + (int)ARRAY_SIZE(delays_us);
	for (int i = 0; i < n; i++) {
		int ino = inotify_init1(IN_CLOEXEC);
		ck_assert_int_ge(ino, 0);
		ck_assert_int_ge(inotify_add_watch(ino, root, IN_CREATE | IN_MOVED_TO), 0);
		int done[2];
		ck_assert_int_eq(pipe2(done, O_CLOEXEC), 0);
		pid_t pid = fork();
		ck_assert_int_ge(pid, 0);
		if (pid == 0) {
			cae_backend *b = backend(cfg);
			cae_task t = {.uuid = C("early"), .repo = repo};
			cae_prepare_options o = {.cancel_fd = -1};
			cae_env_info info;
			cae_error err;
			if (cae_backend_prepare(b, &t, NULL, &o, &info, &err) == 0)
				cae_env_info_clear(&info);
			(void)!write(done[1], "x", 1);
			pause();
			_exit(0);
		}
		close(done[1]);
		if (i < n_events) {
			/* killed right after the (i+1)th entry made in <state>/local (other than
			 * the sandbox's /etc, made by the first prepare) */
			int seen = 0;
			while (seen <= i) {
				struct pollfd pf[2] = {{.fd = ino, .events = POLLIN},
						       {.fd = done[0], .events = POLLIN}};
				ck_assert_int_gt(poll(pf, 2, -1), 0);
				if (pf[1].revents)
					break; /* the prepare made fewer: killed once done */
				char buf[4096];
				ssize_t k = read(ino, buf, sizeof(buf));
				for (ssize_t off = 0; off < k;) {
					const struct inotify_event *ev = (const void *)(buf + off);
					seen += !ev->len || strcmp(ev->name, ".sandbox-etc") != 0;
					off += (ssize_t)(sizeof(*ev) + ev->len);
				}
			}
		} else {
			usleep((useconds_t)delays_us[i - n_events]);
		}
		kill(pid, SIGKILL);
		ck_assert_int_eq(waitpid(pid, NULL, 0), pid);
		close(done[0]);
		close(ino);
		/* its orphans end by themselves (a bound on the wait, not on their time) */
		bool gone = false;
		for (int w = 0; w < 1200 && !gone; w++) {
			pid_t q = waitpid(-1, NULL, WNOHANG);
			if (q < 0)
				gone = errno == ECHILD;
			else if (q == 0)
				usleep(100000);
		}
		ck_assert_msg(gone,
			      "kill %d: what the prepare started is still running after 120 s", i);
		cae_backend *b = backend(cfg);
		cae_error err;
		json_t *list;
		ck_assert_int_eq(cae_backend_list(b, &list, &err), 0);
		bool listed = json_array_size(list) == 1;
		const char *status =
		    json_string_value(json_object_get(json_array_get(list, 0), "status"));
		bool ready = listed && status && strcmp(status, "ready") == 0;
		ck_assert_msg(listed || !cae__is_dir(dir), "kill %d: %s exists and is not listed",
			      i, dir);
		ck_assert_msg(!listed || ready || strcmp(status, "failed") == 0,
			      "kill %d: listed as %s", i, status);
		char was[32];
		snprintf(was, sizeof(was), "%s", listed && status ? status : "not listed");
		json_decref(list);
		/* what failed is collected whatever its age; a prepare that finished is removed */
		int removed = 0;
		if (ready)
			ck_assert_int_eq(cae_backend_cleanup(b, "early", &err), 0);
		else
			ck_assert_int_eq(cae_backend_cleanup_stale(b, 86400, &removed, &err), 0);
		cae_backend_free(b);
		while (waitpid(-1, NULL, WNOHANG) > 0)
			;
		/* nothing left: the environment's directory, a temporary one, a mount (what is
		 * left, its record and who holds it said on failure) */
		tu_sh(
		    "if ls -A %s | grep -v '^.sandbox-etc$' | grep .; then echo 'kill %d (%s, "
		    "removed %d):'; ls -la %s/*; cat %s/*/meta.json; grep %s /proc/self/mountinfo; "
		    "ls -l /proc/[0-9]*/cwd 2>/dev/null | grep %s; exit 1; fi",
		    root, i, was, removed, root, root, root, root);
		no_disk_left("early");
	}
	cae_config_free(cfg);
}
END_TEST

/* A directory named as an environment but without its record (what a killed prepare's git
 * clone recreates when it runs on past gc, or an older cae's) is removed by gc, and one with
 * a record is left to its rules; neither is listed. */
START_TEST(gc_removes_a_directory_without_record)
{
	cae_config *cfg = config(NULL);
	cae_backend *b = backend(cfg);
	tu_sh("mkdir -p %s/local/debris/workspace/project/.git/objects/ab && "
	      "touch %s/local/debris/workspace/project/.git/objects/ab/cd",
	      state, state);
	cae_error err;
	json_t *list;
	ck_assert_int_eq(cae_backend_list(b, &list, &err), 0);
	ck_assert_uint_eq(json_array_size(list), 0);
	json_decref(list);
	int removed = 0;
	ck_assert_int_eq(cae_backend_cleanup_stale(b, 86400, &removed, &err), 0);
	ck_assert_int_eq(removed, 1);
	tu_sh("[ ! -e %s/local/debris ]", state);
	cae_backend_free(b);
	cae_config_free(cfg);
}
END_TEST

/* As root the workspace is a file system of its own (limits.disk.mechanism "loopfs"): a
 * cleanup killed at any moment (a few delays in, the work being a helper's stop, an unmount,
 * an unlink and a removal) leaves what the collector then removes, and nothing after it: no
 * mount, no loop device, no image. */
START_TEST(cleanup_killed_leaves_no_disk)
{
	_cleanup_free_ char *repo = make_repo();
	cae_config *cfg = config(NULL);
	static const int delays_us[] = {0, 500, 2000, 5000, 10000, 30000};
	for (size_t i = 0; i < ARRAY_SIZE(delays_us); i++) {
		cae_backend *b = backend(cfg);
		cae_task t = {.uuid = C("kc"), .repo = repo};
		cae_prepare_options o = {.cancel_fd = -1};
		cae_env_info info;
		cae_error err;
		ck_assert_msg(cae_backend_prepare(b, &t, NULL, &o, &info, &err) == 0, "%s",
			      err.message);
		ck_assert_str_eq(json_string_value(json_object_get(
				     json_object_get(info.limits, "disk"), "mechanism")),
				 "loopfs");
		cae_env_info_clear(&info);
		cae_run_result r = run(b, "kc", "echo x > /workspace/project/new.txt");
		cae_run_result_clear(&r);
		pid_t pid = fork();
		ck_assert_int_ge(pid, 0);
		if (pid == 0) {
			cae_backend *b2 = backend(cfg);
			cae_backend_cleanup(b2, "kc", NULL);
			pause();
			_exit(0);
		}
		usleep((useconds_t)delays_us[i]);
		kill(pid, SIGKILL);
		ck_assert_int_eq(waitpid(pid, NULL, 0), pid);
		cae_backend_free(b); /* its sandbox goes with it */
		b = backend(cfg);
		int removed = 0;
		(void)cae_backend_cleanup_stale(b, 0, &removed, &err);
		cae_backend_free(b);
		no_disk_left("kc");
	}
	cae_config_free(cfg);
}
END_TEST

/* After a reboot (the mount gone, the image kept) the environment is mounted again by its
 * first use, in any process, with its files. */
START_TEST(workspace_remounted_after_reboot)
{
	_cleanup_free_ char *repo = make_repo();
	cae_config *cfg = config(NULL);
	cae_backend *b = backend(cfg);
	cae_task t = {.uuid = C("rb"), .repo = repo};
	cae_prepare_options o = {.cancel_fd = -1};
	cae_env_info info;
	cae_error err;
	ck_assert_msg(cae_backend_prepare(b, &t, NULL, &o, &info, &err) == 0, "%s", err.message);
	cae_env_info_clear(&info);
	cae_run_result r = run(b, "rb", "echo kept > kept.txt");
	cae_run_result_clear(&r);
	cae_backend_free(b); /* the sandbox ends */
	_cleanup_free_ char *ws = NULL;
	ck_assert_int_ge(asprintf(&ws, "%s/local/rb/workspace", state), 0);
	ck_assert(cae__diskfs_mounted(ws));
	ck_assert_int_eq(umount2(ws, MNT_DETACH), 0); /* "reboot" */
	ck_assert(!cae__diskfs_mounted(ws));
	b = backend(cfg);
	r = run(b, "rb", "cat kept.txt; df -P /workspace | tail -1 | cut -d' ' -f1");
	ck_assert_msg(strncmp(r.out, "kept\n/dev/loop", 14) == 0, "%s%s", r.out, r.err);
	cae_run_result_clear(&r);
	ck_assert(cae__diskfs_mounted(ws));
	ck_assert_int_eq(cae_backend_cleanup(b, "rb", &err), 0);
	cae_backend_free(b);
	no_disk_left("rb");
	cae_config_free(cfg);
}
END_TEST

START_TEST(plain_mode_warns_and_is_unconfined)
{
	_cleanup_free_ char *repo = make_repo();
	cae_config *cfg = config("  local:\n    sandbox: none\n    unconfined: true\n");
	cae_backend *b = backend(cfg);
	cae_task t = {.uuid = C("plain"), .repo = repo};
	cae_env_info info;
	cae_error err;
	ck_assert(cae_backend_prepare(b, &t, NULL, NULL, &info, &err) == 0);
	ck_assert_str_eq(info.sandbox, "none");
	bool warned = false;
	size_t i;
	json_t *w;
	json_array_foreach(info.warnings, i, w) if (strstr(json_string_value(w), "unconfined"))
	    warned = true;
	ck_assert(warned);
	_cleanup_free_ char *outside = cae__path_join(state, "outside.txt");
	char script[1024];
	snprintf(script, sizeof(script), "echo x > %s && echo wrote-outside", outside);
	cae_run_result r = run(b, "plain", script);
	ck_assert_str_eq(r.out, "wrote-outside\n");
	cae_run_result_clear(&r);
	ck_assert_int_eq(access(outside, F_OK), 0);
	cae_env_info_clear(&info);
	cae_backend_free(b);
	cae_config_free(cfg);
}
END_TEST

START_TEST(dependency_failure_is_a_warning)
{
	_cleanup_free_ char *repo = make_repo();
	tu_sh("cd %s && printf 'no-such-package-cae-test==0.0.0\\n' > requirements.txt && " GIT
	      " add . && " GIT " commit -qm deps",
	      repo);
	cae_config *cfg = config(NULL);
	cae_backend *b = backend(cfg);
	cae_task t = {.uuid = C("deps"), .repo = repo};
	cae_env_info info;
	cae_error err;
	ck_assert_msg(cae_backend_prepare(b, &t, NULL, NULL, &info, &err) == 0, "%s", err.message);
	ck_assert_str_eq(info.status, "ready");
	ck_assert_uint_eq(json_array_size(info.deps), 1);
	json_t *d = json_array_get(info.deps, 0);
	ck_assert_str_eq(json_string_value(json_object_get(d, "manifest")), "requirements.txt");
	ck_assert(json_is_false(json_object_get(d, "success")));
	bool warned = false;
	size_t i;
	json_t *w;
	json_array_foreach(info.warnings, i,
			   w) if (strstr(json_string_value(w), "requirements.txt") ||
				  strstr(json_string_value(w), "pip")) warned = true;
	ck_assert(warned);
	cae_env_info_clear(&info);
	cae_backend_free(b);
	cae_config_free(cfg);
}
END_TEST

static json_t *dep_of(json_t *deps, const char *manifest)
{
	size_t i;
	json_t *d;
	json_array_foreach(deps, i, d)
	{
		if (strcmp(json_string_value(json_object_get(d, "manifest")), manifest) == 0)
			return d;
	}
	return NULL;
}

static bool warned_with(json_t *warnings, const char *a, const char *b)
{
	size_t i;
	json_t *w;
	json_array_foreach(warnings, i, w)
	{
		if (strstr(json_string_value(w), a) && (!b || strstr(json_string_value(w), b)))
			return true;
	}
	return false;
}

/* conda and mamba cannot be installed on this test host (no conda-forge), nor cargo's
 * registry reached: stand-in `mamba`, `conda` and `cargo` scripts on PATH record how they
 * are called. environment.yml goes to a prefix under the user's home (never the base
 * environment of a root-owned /opt/conda); without mamba, conda does it (a warning says
 * so); Cargo.toml runs `cargo fetch`. Unconfined local commands see this process's PATH. */
START_TEST(dependency_standins_conda_and_cargo)
{
	_cleanup_free_ char *repo = make_repo();
	tu_sh("cd %s && printf 'name: t\\ndependencies: [python]\\n' > environment.yml && "
	      "printf '[package]\\nname = \"t\"\\nversion = \"0.1.0\"\\n' > Cargo.toml && " GIT
	      " add . && " GIT " commit -qm deps",
	      repo);
	char *bin = tu_mkdtemp(), *home = tu_mkdtemp();
	static const char standin[] =
	    "#!/bin/sh\necho \"$(basename \"$0\") $* uid=$(id -u)\" >> \"$HOME/calls.log\"\n"
	    "while [ $# -gt 0 ]; do [ \"$1\" = -p ] && mkdir -p \"$2\"; shift; done\nexit 0\n";
	tu_write(bin, "mamba", standin);
	tu_write(bin, "conda", standin);
	tu_write(bin, "cargo", standin);
	tu_sh("chmod 755 %s/mamba %s/conda %s/cargo", bin, bin, bin);
	char path[8192];
	snprintf(path, sizeof(path), "%s:/usr/local/bin:/usr/bin:/bin", bin);
	setenv("PATH", path, 1);
	setenv("HOME", home, 1);
	cae_config *cfg = config("  local:\n    sandbox: none\n    unconfined: true\n");
	cae_backend *b = backend(cfg);
	cae_task t = {.uuid = C("standin"), .repo = repo};
	cae_env_info info;
	cae_error err;
	ck_assert_msg(cae_backend_prepare(b, &t, NULL, NULL, &info, &err) == 0, "%s", err.message);
	json_t *env = dep_of(info.deps, "environment.yml");
	json_t *cargo = dep_of(info.deps, "Cargo.toml");
	ck_assert_ptr_nonnull(env);
	ck_assert_ptr_nonnull(cargo);
	ck_assert(json_is_true(json_object_get(env, "success")));
	ck_assert(json_is_true(json_object_get(cargo, "success")));
	ck_assert_str_eq(json_string_value(json_object_get(cargo, "command")), "cargo fetch");
	cae_env_info_clear(&info);
	_cleanup_free_ char *log = cae__path_join(home, "calls.log");
	_cleanup_free_ char *text = NULL;
	size_t len;
	ck_assert_int_eq(cae__read_file(AT_FDCWD, log, 65536, &text, &len), 0);
	char want[8400];
	snprintf(want, sizeof(want),
		 "mamba env update -p %s/.conda/envs/project -f environment.yml", home);
	ck_assert_msg(strstr(text, want) != NULL, "%s", text);
	ck_assert_msg(strstr(text, "cargo fetch") != NULL, "%s", text);
	ck_assert_ptr_null(strstr(text, "-n base"));
	char prefix[8300];
	snprintf(prefix, sizeof(prefix), "%s/.conda/envs/project", home);
	ck_assert(cae__is_dir(prefix)); /* made by the (stand-in) tool as this user */
	/* without mamba: conda makes the environment, and a warning names mamba */
	tu_sh("rm %s/mamba && : > %s/calls.log", bin, home);
	ck_assert_msg(cae_backend_prepare(b, &t, NULL, NULL, &info, &err) == 0, "%s", err.message);
	env = dep_of(info.deps, "environment.yml");
	ck_assert(json_is_true(json_object_get(env, "success")));
	ck_assert_ptr_nonnull(
	    strstr(json_string_value(json_object_get(env, "command")), "conda env update -p"));
	ck_assert(warned_with(info.warnings, "mamba is not installed", "conda env update"));
	cae_env_info_clear(&info);
	free(text);
	text = NULL;
	ck_assert_int_eq(cae__read_file(AT_FDCWD, log, 65536, &text, &len), 0);
	snprintf(want, sizeof(want),
		 "conda env update -p %s/.conda/envs/project -f environment.yml", home);
	ck_assert_msg(strstr(text, want) != NULL, "%s", text);
	/* neither: a warning naming both, and the prepare still succeeds */
	tu_sh("rm %s/conda %s/cargo", bin, bin);
	ck_assert_msg(cae_backend_prepare(b, &t, NULL, NULL, &info, &err) == 0, "%s", err.message);
	ck_assert_str_eq(info.status, "ready");
	ck_assert(json_is_true(json_object_get(dep_of(info.deps, "environment.yml"), "skipped")));
	ck_assert(json_is_true(json_object_get(dep_of(info.deps, "Cargo.toml"), "skipped")));
	ck_assert(warned_with(info.warnings, "neither mamba nor conda", NULL));
	ck_assert(warned_with(info.warnings, "cargo is not installed", NULL));
	cae_env_info_clear(&info);
	cae_backend_free(b);
	cae_config_free(cfg);
	cae__rm_rf(bin);
	cae__rm_rf(home);
	free(bin);
	free(home);
}
END_TEST

START_TEST(environment_gone_is_clear)
{
	_cleanup_free_ char *repo = make_repo();
	cae_config *cfg = config(NULL);
	cae_backend *b = backend(cfg);
	cae_task t = {.uuid = C("gone"), .repo = repo};
	cae_env_info info;
	cae_error err;
	ck_assert(cae_backend_prepare(b, &t, NULL, NULL, &info, &err) == 0);
	cae__rm_rf(info.host_path);
	const char *argv[] = {"true", NULL};
	cae_exec_request req = {.argv = argv, .cancel_fd = -1};
	cae_run_result r;
	ck_assert_int_eq(cae_backend_exec(b, "gone", &req, &r, &err), -ENOENT);
	ck_assert_ptr_nonnull(strstr(err.message, "gone"));
	ck_assert_int_eq(cae_backend_exec(b, "never", &req, &r, &err), -ENOENT);
	cae_env_info_clear(&info);
	cae_backend_free(b);
	cae_config_free(cfg);
}
END_TEST

/* exec keeps what it needs of meta.json while the file is unchanged; a rewrite (by any
 * process) is seen by the next command. */
START_TEST(metadata_changes_are_seen)
{
	_cleanup_free_ char *repo = make_repo();
	cae_config *cfg = config(NULL);
	cae_backend *b = prepared(cfg, "meta", repo);
	cae_run_result r = run(b, "meta", "true");
	cae_run_result_clear(&r);
	_cleanup_free_ char *path = cae__path_join(state, "local/meta/meta.json");
	char *text = NULL;
	size_t len;
	ck_assert_int_eq(cae__read_file(AT_FDCWD, path, 1 << 20, &text, &len), 0);
	char *ready = strstr(text, "\"ready\"");
	ck_assert_ptr_nonnull(ready);
	memcpy(ready, "\"reset\"", 7);
	ck_assert_int_eq(cae__write_file_atomic(AT_FDCWD, path, text, len, 0600, false), 0);
	const char *argv[] = {"true", NULL};
	cae_exec_request req = {.argv = argv, .cancel_fd = -1};
	cae_error err;
	ck_assert_int_eq(cae_backend_exec(b, "meta", &req, &r, &err), -EAGAIN);
	ck_assert_ptr_nonnull(strstr(err.message, "not ready"));
	memcpy(ready, "\"ready\"", 7);
	ck_assert_int_eq(cae__write_file_atomic(AT_FDCWD, path, text, len, 0600, false), 0);
	r = run(b, "meta", "echo again");
	ck_assert_str_eq(r.out, "again\n");
	cae_run_result_clear(&r);
	free(text);
	cae_backend_free(b);
	cae_config_free(cfg);
}
END_TEST

START_TEST(external_workspace_used_as_is)
{
	cae_config *cfg = config(NULL);
	cae_backend *b = backend(cfg);
	_cleanup_free_ char *dir = tu_mkdtemp();
	tu_write(dir, "keep.txt", "precious");
	cae_task t = {.uuid = C("ext"), .repo = dir};
	cae_prepare_options o = {.workspace = dir, .cancel_fd = -1};
	cae_env_info info;
	cae_error err;
	ck_assert_msg(cae_backend_prepare(b, &t, NULL, &o, &info, &err) == 0, "%s", err.message);
	cae_run_result r = run(b, "ext", "cat keep.txt");
	ck_assert_str_eq(r.out, "precious");
	cae_run_result_clear(&r);
	ck_assert_int_eq(cae_backend_cleanup(b, "ext", &err), 0);
	_cleanup_free_ char *kept = cae__path_join(dir, "keep.txt");
	ck_assert_int_eq(access(kept, F_OK), 0); /* the directory itself is left alone */
	cae_env_info_clear(&info);
	cae_backend_free(b);
	cae_config_free(cfg);
	cae__rm_rf(dir);
}
END_TEST

START_TEST(task_json_parsing)
{
	cae_task t;
	cae_error err;
	json_t *j =
	    json_loads("{\"uuid\": \"a-1\", \"repo\": \"o/r\", \"platform\": \"github\", "
		       "\"kind\": \"pull_request\", \"branch\": \"f\", \"target_branch\": \"m\"}",
		       0, NULL);
	ck_assert_int_eq(cae_task_from_json(j, &t, &err), 0);
	ck_assert_str_eq(t.owner, "o");
	ck_assert_str_eq(t.name, "r");
	ck_assert_int_eq(t.kind, CAE_TASK_PULL_REQUEST);
	cae_task_clear(&t);
	json_decref(j);
	const char *bad[] = {"{}",
			     "{\"uuid\": \"../x\", \"repo\": \"r\"}",
			     "{\"uuid\": \"x\"}",
			     "{\"uuid\": \"x\", \"repo\": \"r\", \"kind\": \"pr\"}",
			     "{\"uuid\": \"x\", \"repo\": \"r\", \"kind\": \"pull_request\"}",
			     "[]"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		j = json_loads(bad[i], 0, NULL);
		ck_assert_msg(cae_task_from_json(j, &t, &err) == -EINVAL, "%s accepted", bad[i]);
		json_decref(j);
	}
}
END_TEST

/* GitLab clone URLs: path_with_namespace comes from the projects API (a local stand-in: the
 * hosted API cannot run here), protocol and host from GITLAB_API_URL, the token only in the
 * API header. */
START_TEST(gitlab_clone_url_from_projects_api)
{
	int p[2];
	ck_assert_int_eq(pipe(p), 0);
	pid_t pid = fork();
	if (pid == 0) {
		dup2(p[1], 1);
		execlp("python3", "python3", SRCDIR "/mock-gitlab.py", "glpat-test-token",
		       (char *)NULL);
		_exit(127);
	}
	close(p[1]);
	char port[16] = "";
	ssize_t n = read(p[0], port, sizeof(port) - 1);
	ck_assert_int_gt(n, 0);
	port[strcspn(port, "\n")] = '\0';
	char yaml[1024];
	snprintf(yaml, sizeof(yaml),
		 "gitlab:\n  api_url: http://127.0.0.1:%s/api/v4\n  token: glpat-test-token\n",
		 port);
	cae_config *cfg = config(yaml);
	cae_task t = {
	    .uuid = C("gl"), .platform = C("gitlab"), .owner = C("group/sub"), .name = C("proj")};
	char *url = NULL;
	const char *token, *user;
	cae_error err;
	ck_assert_msg(cae__git_clone_source(cfg, &t, &url, &token, &user, &err) == 0, "%s",
		      err.message);
	char want[128];
	snprintf(want, sizeof(want), "http://127.0.0.1:%s/Group/Sub/proj.git", port);
	ck_assert_str_eq(url, want);
	ck_assert_str_eq(user, "oauth2");
	ck_assert_str_eq(token, "glpat-test-token");
	ck_assert_ptr_null(strstr(url, "glpat"));
	free(url);
	/* unknown project and a wrong token are clear errors */
	cae_task t2 = {
	    .uuid = C("gl2"), .platform = C("gitlab"), .owner = C("nobody"), .name = C("x")};
	ck_assert_int_eq(cae__git_clone_source(cfg, &t2, &url, &token, &user, &err), -ENOENT);
	ck_assert_ptr_nonnull(strstr(err.message, "404"));
	free(cfg->gitlab.token);
	cfg->gitlab.token = strdup("wrong-token");
	ck_assert_int_lt(cae__git_clone_source(cfg, &t, &url, &token, &user, &err), 0);
	ck_assert_ptr_nonnull(strstr(err.message, "401"));
	ck_assert_ptr_null(strstr(err.message, "wrong-token"));
	kill(pid, SIGTERM);
	waitpid(pid, NULL, 0);
	close(p[0]);
	cae_config_free(cfg);
}
END_TEST

/* GitHub: https://github.com/{owner}/{repo}.git, token for x-access-token, never in the URL. */
START_TEST(github_clone_url)
{
	cae_config *cfg = config("github:\n  token: ghp_test_token_value\n");
	cae_task t = {.uuid = C("gh"), .platform = C("github"), .owner = C("o"), .name = C("r")};
	char *url = NULL;
	const char *token, *user;
	cae_error err;
	ck_assert_int_eq(cae__git_clone_source(cfg, &t, &url, &token, &user, &err), 0);
	ck_assert_str_eq(url, "https://github.com/o/r.git");
	ck_assert_str_eq(user, "x-access-token");
	ck_assert_str_eq(token, "ghp_test_token_value");
	free(url);
	cae_task t2 = {.uuid = C("gh2"), .repo = C("https://github.com/o/r.git")};
	ck_assert_int_eq(cae__git_clone_source(cfg, &t2, &url, &token, &user, &err), 0);
	ck_assert_str_eq(token, "ghp_test_token_value");
	free(url);
	cae_task t3 = {.uuid = C("gh3"), .repo = C("https://example.com/o/r.git")};
	ck_assert_int_eq(cae__git_clone_source(cfg, &t3, &url, &token, &user, &err), 0);
	ck_assert_ptr_null(token);
	free(url);
	cae_config_free(cfg);
}
END_TEST

/* What is on this host under the project's .git/hooks: names, modes, sizes and contents
 * (new string). */
static char *hooks_state(const char *project)
{
	char cmd[8192];
	snprintf(cmd, sizeof(cmd),
		 "cd '%s' && ls -la .git/hooks | sed 1d | awk '{print $1, $5, $9}' | sort && "
		 "cat .git/hooks/* | cksum && find . -name pre-commit",
		 project);
	const char *argv[] = {"sh", "-c", cmd, NULL};
	cae_run_spec spec = {
	    .argv = argv, .timeout_ms = 30000, .max_stdout = 1 << 20, .cancel_fd = -1};
	cae_run_result r;
	cae_error err;
	ck_assert_msg(cae_runner_run(&spec, &r, &err) == 0, "%s", err.message);
	ck_assert_msg(r.exit_code == 0, "%s: %s", cmd, r.err);
	char *out = strdup(r.out);
	cae_run_result_clear(&r);
	return out;
}

/* command_executor.protected_paths in the sandbox: the agent's own git config, commit and
 * push work; a hook written by a command is refused, whichever way around the read-only
 * .git/hooks it tries (rename the directory, its parent, the project; remove and remake; a
 * link; /proc/self/cwd; git init with a template; chmod; mount). */
START_TEST(protected_paths_hold_in_the_sandbox)
{
	_cleanup_free_ char *repo = make_repo();
	cae_config *cfg = config("  local:\n    sandbox: bubblewrap\n");
	cae_backend *b = prepared(cfg, "prot", repo);
	cae_env_info info;
	cae_error err;
	ck_assert_int_eq(cae_backend_info(b, "prot", &info, &err), 0);
	_cleanup_free_ char *before = hooks_state(info.host_path);
	ck_assert_ptr_nonnull(strstr(before, "pre-commit.sample"));
	/* the agent's own git: config, commit, push */
	cae_run_result own =
	    run(b, "prot",
		"git rev-parse --git-dir >/dev/null && git config user.name agent && "
		"git config user.email agent@example.com && echo more >> a.txt && "
		"git commit -qam mine && git init -q --bare ../tmp/remote.git && "
		"git --git-dir=../tmp/remote.git config receive.shallowUpdate true && "
		"git push -q ../tmp/remote.git HEAD:refs/heads/pushed && "
		"git --git-dir=../tmp/remote.git log -1 --format=%s%an pushed");
	ck_assert_msg(own.exit_code == 0, "%s%s", own.out, own.err);
	ck_assert_str_eq(own.out, "mineagent\n");
	cae_run_result_clear(&own);
	static const char *const attacks[] = {
	    "echo 'touch /tmp/pwned' > .git/hooks/pre-commit",
	    "echo x >> .git/hooks/pre-commit.sample",
	    "rm -f .git/hooks/pre-push.sample",
	    "chmod u+w .git/hooks; echo x > .git/hooks/pre-commit",
	    "mv .git/hooks .git/h2 && mkdir .git/hooks && echo x > .git/hooks/pre-commit",
	    "cd .git && mv hooks ../h && mkdir hooks && echo x > hooks/pre-commit",
	    "mv .git .g && mkdir -p .git/hooks && echo x > .git/hooks/pre-commit",
	    "rm -rf .git/hooks; mkdir -p .git/hooks && echo x > .git/hooks/pre-commit",
	    "rm -rf .git; mkdir -p .git/hooks && echo x > .git/hooks/pre-commit",
	    "cd .. && mv project p2 && mkdir -p project/.git/hooks && "
	    "echo x > project/.git/hooks/pre-commit",
	    "cd .. && rm -rf project; mkdir -p project/.git/hooks && "
	    "echo x > project/.git/hooks/pre-commit",
	    "ln -s /tmp/x .git/hooks/pre-commit",
	    "echo x > /proc/self/cwd/.git/hooks/pre-commit",
	    "echo x > /proc/self/root/workspace/project/.git/hooks/pre-commit",
	    "mkdir -p /tmp/t/hooks && echo x > /tmp/t/hooks/pre-commit && "
	    "chmod +x /tmp/t/hooks/pre-commit && git init -q --template=/tmp/t .",
	    "cp -r .git/hooks /tmp/h && echo x > /tmp/h/pre-commit && mount --bind /tmp/h "
	    ".git/hooks",
	    "umount .git/hooks && echo x > .git/hooks/pre-commit",
	};
	for (size_t i = 0; i < ARRAY_SIZE(attacks); i++) {
		cae_run_result r = run(b, "prot", attacks[i]);
		ck_assert_msg(r.exit_code != 0, "%s: succeeded", attacks[i]);
		cae_run_result_clear(&r);
		char *now = hooks_state(info.host_path);
		ck_assert_msg(strcmp(now, before) == 0, "%s: hooks changed:\n%s\nwas:\n%s",
			      attacks[i], now, before);
		free(now);
		/* the attack's leftovers go (not .git: that is the next one's to try) */
		r = run(b, "prot",
			"rm -rf ../p2 .g .git/h2 ../h /tmp/t /tmp/h; git checkout -q -- . "
			"2>/dev/null; true");
		cae_run_result_clear(&r);
	}
	ck_assert_int_eq(cae_backend_cleanup(b, "prot", &err), 0);
	cae_env_info_clear(&info);
	cae_backend_free(b);
	cae_config_free(cfg);
}
END_TEST

/* Calls the sandbox's filter refuses, each with arguments the kernel rejects (or that change
 * nothing but the calling child) even for root with every capability, as this test runs:
 * without the filter none fails with EPERM, with it each does (clone3: ENOSYS). */
#define NX "/cae-test-no-such-path"
static const struct {
	const char *name;
	long nr;
	long a[5];
} filtered_calls[] = {
    {"keyctl", SYS_keyctl, {-1}},
    {"add_key", SYS_add_key, {0}},
    {"request_key", SYS_request_key, {0}},
    {"bpf", SYS_bpf, {-1}},
    {"perf_event_open", SYS_perf_event_open, {0}},
    {"userfaultfd", SYS_userfaultfd, {-1}},
    {"io_uring_setup", SYS_io_uring_setup, {0}},
    {"io_uring_enter", SYS_io_uring_enter, {-1}},
    {"io_uring_register", SYS_io_uring_register, {-1}},
    {"kexec_load", SYS_kexec_load, {0, 1000000}},
    {"kexec_file_load", SYS_kexec_file_load, {-1, -1}},
    {"init_module", SYS_init_module, {0}},
    {"finit_module", SYS_finit_module, {-1}},
    {"delete_module", SYS_delete_module, {0}},
    {"clock_settime", SYS_clock_settime, {CLOCK_REALTIME, 0}},
    {"clock_adjtime", SYS_clock_adjtime, {CLOCK_REALTIME, 0}},
    {"adjtimex", SYS_adjtimex, {0}},
    {"settimeofday", SYS_settimeofday, {1}},
    {"open_by_handle_at", SYS_open_by_handle_at, {-1}},
    {"name_to_handle_at", SYS_name_to_handle_at, {AT_FDCWD}},
    {"mount", SYS_mount, {0, (long)NX}},
    {"umount2", SYS_umount2, {(long)NX}},
    {"pivot_root", SYS_pivot_root, {(long)NX, (long)NX}},
    {"fsopen", SYS_fsopen, {0}},
    {"open_tree", SYS_open_tree, {-1}},
    {"swapon", SYS_swapon, {(long)NX}},
    {"swapoff", SYS_swapoff, {(long)NX}},
    {"reboot", SYS_reboot, {0}},
    {"acct", SYS_acct, {(long)NX}},
    {"quotactl", SYS_quotactl, {0}},
    {"syslog", SYS_syslog, {-1}},
    {"setns", SYS_setns, {-1}},
    {"unshare", SYS_unshare, {CLONE_NEWUSER}},
    {"personality", SYS_personality, {0x0400000 /* READ_IMPLIES_EXEC */}},
    {"clone3", SYS_clone3, {0}},
};

/* Each call's errno (0: it succeeded) in a child, under the filter in file (NULL: none). */
static void run_filtered_calls(const char *file, int *out)
{
	size_t n = ARRAY_SIZE(filtered_calls);
	struct sock_filter prog[4096];
	size_t len = 0;
	if (file) {
		int fd = open(file, O_RDONLY | O_CLOEXEC);
		ck_assert_int_ge(fd, 0);
		ssize_t got = read(fd, prog, sizeof(prog));
		close(fd);
		ck_assert_int_gt(got, 0);
		ck_assert_int_eq(got % (ssize_t)sizeof(prog[0]), 0);
		len = (size_t)got / sizeof(prog[0]);
	}
	int p[2];
	ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		struct sock_fprog fp = {.len = (unsigned short)len, .filter = prog};
		if (file && (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ||
			     prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &fp) < 0))
			_exit(2);
		int res[64];
		for (size_t i = 0; i < n; i++) {
			const long *a = filtered_calls[i].a;
			errno = 0;
			long r = syscall(filtered_calls[i].nr, a[0], a[1], a[2], a[3], a[4]);
			res[i] = r < 0 ? errno : 0;
		}
		_exit(write(p[1], res, n * sizeof(int)) == (ssize_t)(n * sizeof(int)) ? 0 : 3);
	}
	close(p[1]);
	ssize_t got = read(p[0], out, n * sizeof(int));
	close(p[0]);
	int st;
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child: %d", st);
	ck_assert_int_eq(got, (ssize_t)(n * sizeof(int)));
}

START_TEST(seccomp_filter_refuses_each_call)
{
	char *dir = tu_mkdtemp();
	int dfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	cae_error err = {0};
	ck_assert_msg(cae__seccomp_write(dfd, "f.bpf", &err) == 0, "%s", err.message);
	close(dfd);
	char file[4200];
	snprintf(file, sizeof(file), "%s/f.bpf", dir);
	int without[64], with[64];
	run_filtered_calls(NULL, without);
	run_filtered_calls(file, with);
	for (size_t i = 0; i < ARRAY_SIZE(filtered_calls); i++) {
		int want = filtered_calls[i].nr == SYS_clone3 ? ENOSYS : EPERM;
		ck_assert_msg(without[i] != want, "%s: %s without the filter already",
			      filtered_calls[i].name, strerror(want));
		ck_assert_msg(with[i] == want, "%s: %s under the filter, not %s",
			      filtered_calls[i].name, strerror(with[i]), strerror(want));
	}
	cae__rm_rf(dir);
	free(dir);
}
END_TEST

/* The local backend takes environments seriously: a requirements.txt project's packages go
 * into the workspace's virtual environment (the host's Python refuses pip installs, PEP 668)
 * that commands find first on PATH; Maven, whose m2.conf is under /etc/maven, runs in the
 * sandbox while /etc/maven/settings.xml (where repository passwords live) stays out; Python
 * writes unbuffered; and the prepare says which tools of the environment's name the host
 * lacks. The package is a wheel in the repository: no index is reachable. */
START_TEST(environment_venv_etc_and_tools)
{
	_cleanup_free_ char *repo = make_repo();
	tu_sh("cd %s && mkdir wheels && python3 -c \"import zipfile; z = "
	      "zipfile.ZipFile('wheels/caetestpkg-1.0-py3-none-any.whl', 'w'); "
	      "d = 'caetestpkg-1.0.dist-info/'; "
	      "z.writestr('caetestpkg/__init__.py', 'VALUE = 42\\n'); "
	      "z.writestr(d + 'METADATA', 'Metadata-Version: 2.1\\nName: caetestpkg\\nVersion: "
	      "1.0\\n'); "
	      "z.writestr(d + 'WHEEL', 'Wheel-Version: 1.0\\nGenerator: t\\nRoot-Is-Purelib: "
	      "true\\nTag: py3-none-any\\n'); "
	      "z.writestr(d + 'RECORD', 'caetestpkg/__init__.py,,\\n' + d + 'METADATA,,\\n' + d "
	      "+ 'WHEEL,,\\n' + d + 'RECORD,,\\n'); z.close()\" && "
	      "echo ./wheels/caetestpkg-1.0-py3-none-any.whl > requirements.txt && " GIT
	      " add . && " GIT " commit -qm deps",
	      repo);
	cae_config *cfg = config(NULL);
	cae_backend *b = backend(cfg);
	cae_task t = {.uuid = C("envs"), .repo = repo};
	cae_env_info info;
	cae_error err;
	ck_assert_msg(cae_backend_prepare(b, &t, "go", NULL, &info, &err) == 0, "%s", err.message);
	json_t *d = dep_of(info.deps, "requirements.txt");
	ck_assert_ptr_nonnull(d);
	ck_assert_msg(json_is_true(json_object_get(d, "success")), "%s",
		      json_string_value(json_object_get(d, "output")));
	cae_run_result r = run(b, "envs",
			       "command -v python3; python3 -c 'import caetestpkg; "
			       "print(caetestpkg.VALUE)'; echo $VIRTUAL_ENV $PYTHONUNBUFFERED; "
			       "git status --porcelain; test -e /cache || echo no-cache; "
			       "echo \"npm:$npm_config_cache\"");
	/* (the shared package caches are off by default) */
	ck_assert_str_eq(r.out,
			 "/workspace/.venv/bin/python3\n42\n/workspace/.venv 1\nno-cache\nnpm:\n");
	cae_run_result_clear(&r);
	r = run(b, "envs",
		"mvn -v >/dev/null && echo mvn-ok; test -e /etc/maven/m2.conf && echo m2; "
		"test -e /etc/maven/settings.xml || echo no-settings");
	ck_assert_msg(strcmp(r.out, "mvn-ok\nm2\nno-settings\n") == 0, "%s%s", r.out, r.err);
	cae_run_result_clear(&r);
	/* go: named in a warning exactly when the sandbox has none */
	r = run(b, "envs", "command -v go >/dev/null || echo missing");
	bool missing = strcmp(r.out, "missing\n") == 0, said = false;
	cae_run_result_clear(&r);
	size_t i;
	json_t *w;
	json_array_foreach(info.warnings, i, w) said =
	    said || strstr(json_string_value(w), "lacks go for environment go");
	ck_assert_msg(said == missing, "missing: %d, said: %d", missing, said);
	cae_env_info_clear(&info);
	ck_assert_int_eq(cae_backend_cleanup(b, "envs", &err), 0);
	cae_backend_free(b);
	cae_config_free(cfg);
}
END_TEST

/* The shared npm cache (command_executor.package_cache): task A fills it with its prepare's
 * `npm ci`, then, as an attacker, overwrites the cached tarball with one whose code is its
 * own; task B's `npm ci` of the same lock file never installs that code (cacache checks the
 * content's sha512, npm the lock file's integrity: EINTEGRITY) and succeeds all the same,
 * with a cache of its own; B's cache is the same directory. A also plants files in pip's
 * HTTP and wheel caches, Maven's repository and Go's module cache, which nothing verifies on
 * read: B has none of them (each environment's own; what is shared of pip's, Maven's and
 * Go's is read-only and cae's, tested below, and nothing else points B's tools elsewhere). */
START_TEST(package_cache_shared_and_unpoisoned)
{
	_cleanup_free_ char *repo = make_repo();
	_cleanup_free_ char *npmtmp = tu_mkdtemp();
	tu_sh("cd %s && printf '{\"name\":\"t\",\"version\":\"1.0.0\",\"dependencies\":"
	      "{\"is-number\":\"7.0.0\"}}\\n' > package.json && npm install --package-lock-only "
	      "--ignore-scripts --no-audit --no-fund --omit-lockfile-registry-resolved --cache "
	      "%s/c >/dev/null 2>&1 && " GIT " add . && " GIT " commit -qm npm",
	      repo, npmtmp);
	/* (a lock file without resolved URLs has no shared node_modules tree: B's npm ci runs) */
	cae_config *cfg = config("  local:\n    network: true\n  package_cache:\n"
				 "    enabled: true\n");
	cae_backend *b = backend(cfg);
	cae_task ta = {.uuid = C("cache-a"), .repo = repo},
		 tb = {.uuid = C("cache-b"), .repo = repo};
	cae_env_info info;
	cae_error err;
	ck_assert_msg(cae_backend_prepare(b, &ta, "node", NULL, &info, &err) == 0, "%s",
		      err.message);
	json_t *d = dep_of(info.deps, "package-lock.json");
	ck_assert_msg(d && json_is_true(json_object_get(d, "success")), "%s",
		      d ? json_string_value(json_object_get(d, "output")) : "no npm ci");
	cae_env_info_clear(&info);
	/* A: the cache is there, filled; every content file becomes a poisoned is-number */
	cae_run_result r =
	    run(b, "cache-a",
		"echo $npm_config_cache; cd /tmp && mkdir -p p/package && "
		"cp /workspace/project/node_modules/is-number/package.json "
		"p/package/ && echo 'module.exports = () => \"POISONED\"' > "
		"p/package/index.js && tar -czf evil.tgz -C p package && n=0 && "
		"for f in $(find /cache/npm/_cacache/content-v2 -type f); do "
		"chmod u+w \"$f\" && cp evil.tgz \"$f\" && n=$((n+1)); done; "
		"[ $n -gt 0 ] && echo poisoned; for d in ~/.cache/pip/http "
		"~/.cache/pip/wheels ~/.m2/repository ~/go/pkg/mod; do mkdir -p $d && "
		"echo POISON > $d/planted || exit 1; done; echo planted");
	ck_assert_msg(strcmp(r.out, "/cache/npm\npoisoned\nplanted\n") == 0, "%s%s", r.out, r.err);
	cae_run_result_clear(&r);
	ck_assert_msg(cae_backend_prepare(b, &tb, "node", NULL, &info, &err) == 0, "%s",
		      err.message);
	d = dep_of(info.deps, "package-lock.json");
	ck_assert_ptr_nonnull(d);
	const char *out = json_string_value(json_object_get(d, "output"));
	r = run(
	    b, "cache-b",
	    "echo $npm_config_cache; grep -rl POISONED node_modules /cache/npm/_cacache/index-v5 "
	    "2>/dev/null; node -e 'console.log(require(\"is-number\")(5))' 2>&1; "
	    /* pip's, Maven's and Go's module caches are not shared: A's files are not B's */
	    "cat ~/.cache/pip/http/planted ~/.cache/pip/wheels/planted ~/.m2/repository/planted "
	    "~/go/pkg/mod/planted 2>/dev/null; env | grep -E "
	    "'^(PIP_CACHE_DIR|GOMODCACHE|GOPATH|MAVEN_OPTS|MAVEN_ARGS)=' ");
	/* refused by npm (EINTEGRITY), then installed with a cache of B's own: the registry's
	 * package, and the result says why */
	ck_assert_msg(json_is_true(json_object_get(d, "success")), "%s", out);
	ck_assert(json_is_true(json_object_get(d, "shared_cache_bypassed")));
	ck_assert_msg(strcmp(r.out, "/cache/npm\ntrue\n") == 0, "%s", r.out);
	cae_run_result_clear(&r);
	cae_env_info_clear(&info);
	ck_assert_int_eq(cae_backend_cleanup(b, "cache-a", &err), 0);
	ck_assert_int_eq(cae_backend_cleanup(b, "cache-b", &err), 0);
	cae__rm_rf(npmtmp);
	cae_backend_free(b);
	cae_config_free(cfg);
}
END_TEST

/* The shared node_modules trees (pkgcache.h): A's `npm ci` of a lock file that runs no code
 * is kept by cae; B, a new environment of the same lock file, gets that tree instead of an
 * `npm ci` and, as an attacker, writes into every file of it (refused: cae's files, which it
 * can neither write nor chmod), then replaces every file with its own code (its own
 * directories: allowed, its copy only); C, the next one, gets the registry's package, none
 * of B's code; the kept files are unchanged and read-only. A lock file with an install
 * script has no tree (D: npm ci runs). Failed before: every environment ran npm ci. */
START_TEST(package_cache_npm_tree_shared_read_only)
{
	_cleanup_free_ char *repo = make_repo(), *repo2 = make_repo();
	_cleanup_free_ char *npmtmp = tu_mkdtemp();
	tu_sh("cd %s && printf '{\"name\":\"t\",\"version\":\"1.0.0\",\"dependencies\":"
	      "{\"is-number\":\"7.0.0\"}}\\n' > package.json && npm install --package-lock-only "
	      "--ignore-scripts --no-audit --no-fund --omit-lockfile-registry-resolved=false "
	      "--cache %s/c >/dev/null 2>&1 && " GIT " add . && " GIT " commit -qm npm && cd %s "
	      "&& cp %s/package-lock.json . && printf '{\"name\":\"t\",\"version\":\"1.0.0\","
	      "\"scripts\":{\"postinstall\":\"echo ran > ran.txt\"},\"dependencies\":"
	      "{\"is-number\":\"7.0.0\"}}\\n' > package.json && " GIT " add . && " GIT
	      " commit -qm npm",
	      repo, npmtmp, repo2, repo);
	cae_config *cfg = config("  local:\n    network: true\n  package_cache:\n"
				 "    enabled: true\n");
	cae_backend *b = backend(cfg);
	const char *uuids[] = {"tree-a", "tree-b", "tree-c", "tree-d"};
	cae_env_info info;
	cae_error err;
	for (int i = 0; i < 4; i++) {
		cae_task t = {.uuid = C(uuids[i]), .repo = i == 3 ? repo2 : repo};
		ck_assert_msg(cae_backend_prepare(b, &t, "node", NULL, &info, &err) == 0, "%s",
			      err.message);
		json_t *d = dep_of(info.deps, "package-lock.json");
		ck_assert_msg(d && json_is_true(json_object_get(d, "success")), "%s",
			      d ? json_string_value(json_object_get(d, "output")) : "no npm ci");
		/* A and D ran npm ci; B and C got A's tree */
		ck_assert_msg(json_is_true(json_object_get(d, "shared_node_modules")) ==
				  (i == 1 || i == 2),
			      "%d: %s", i, json_string_value(json_object_get(d, "command")));
		cae_env_info_clear(&info);
		if (i != 1)
			continue;
		cae_run_result r = run(
		    b, uuids[1],
		    "n=$(find node_modules -type f | wc -l); [ $n -gt 2 ] && echo linked; w=0; "
		    "for f in $(find node_modules -type f); do { chmod u+w \"$f\" || chmod 666 "
		    "\"$f\"; printf POISON >> \"$f\"; } 2>/dev/null && w=$((w+1)); done; echo "
		    "written:$w; k=0; for f in $(find node_modules -type f); do rm -f \"$f\" && "
		    "case $f in *.json) echo '{\"main\": \"index.js\", \"POISON\": 1}';; *) echo "
		    "'module.exports = () => \"POISONED\"';; esac > \"$f\" && k=$((k+1)); done; "
		    "[ $k -eq $n ] && echo replaced; node -e "
		    "'console.log(require(\"is-number\")(5))'");
		ck_assert_msg(strcmp(r.out, "linked\nwritten:0\nreplaced\nPOISONED\n") == 0, "%s%s",
			      r.out, r.err);
		cae_run_result_clear(&r);
	}
	cae_run_result r = run(b, uuids[2],
			       "grep -rl POISON node_modules; node -e "
			       "'console.log(require(\"is-number\")(5))'; test -e ran.txt || echo "
			       "no-script");
	ck_assert_msg(strcmp(r.out, "true\nno-script\n") == 0, "%s%s", r.out, r.err);
	cae_run_result_clear(&r);
	r = run(b, uuids[3], "cat ran.txt");
	ck_assert_msg(strcmp(r.out, "ran\n") == 0, "%s%s", r.out, r.err);
	cae_run_result_clear(&r);
	/* E: A's files and a yarn.lock: yarn is its installer (not on this host: skipped), no
	 * tree of npm's is put there */
	_cleanup_free_ char *repo3 = make_repo();
	tu_sh("cd %s && cp %s/package.json %s/package-lock.json . && : > yarn.lock && " GIT
	      " add . && " GIT " commit -qm yarn",
	      repo3, repo, repo);
	cae_task te = {.uuid = C("tree-e"), .repo = repo3};
	ck_assert_msg(cae_backend_prepare(b, &te, "node", NULL, &info, &err) == 0, "%s",
		      err.message);
	cae_env_info_clear(&info);
	r = run(b, "tree-e", "test -e node_modules || echo none");
	ck_assert_msg(strcmp(r.out, "none\n") == 0, "%s%s", r.out, r.err);
	cae_run_result_clear(&r);
	ck_assert_int_eq(cae_backend_cleanup(b, "tree-e", &err), 0);
	/* F: a workspace given as it is (the user's own directory), with A's files and no
	 * node_modules: cae installs nothing there, so it puts no tree there either */
	_cleanup_free_ char *given = tu_mkdtemp();
	tu_sh("cp %s/package.json %s/package-lock.json %s/", repo, repo, given);
	cae_task tf = {.uuid = C("tree-f")};
	cae_prepare_options of = {.workspace = given, .cancel_fd = -1};
	ck_assert_msg(cae_backend_prepare(b, &tf, "node", &of, &info, &err) == 0, "%s",
		      err.message);
	cae_env_info_clear(&info);
	tu_sh("test ! -e %s/node_modules", given);
	ck_assert_int_eq(cae_backend_cleanup(b, "tree-f", &err), 0);
	cae__rm_rf(given);
	/* G: A's repository with the dependency step off (clone.auto_install_deps): no npm ci,
	 * so no tree in its place either */
	cfg->command_executor.clone.auto_install_deps = false;
	cae_task tg = {.uuid = C("tree-g"), .repo = repo};
	ck_assert_msg(cae_backend_prepare(b, &tg, "node", NULL, &info, &err) == 0, "%s",
		      err.message);
	cfg->command_executor.clone.auto_install_deps = true;
	cae_env_info_clear(&info);
	r = run(b, "tree-g", "test -e node_modules || echo none");
	ck_assert_msg(strcmp(r.out, "none\n") == 0, "%s%s", r.out, r.err);
	cae_run_result_clear(&r);
	ck_assert_int_eq(cae_backend_cleanup(b, "tree-g", &err), 0);
	/* the kept tree: none of B's code, every file read-only and cae's */
	_cleanup_free_ char *shared = cae__path_join(state, "package-cache");
	tu_sh("! grep -rl POISON %s && test -z \"$(find %s -path '*/npm-trees/*/*' \\( -type f "
	      "-perm /222 -o ! -user %u \\))\" && test -n \"$(find %s -path "
	      "'*/npm-trees/*/node_modules/is-number/*' -type f)\"",
	      shared, shared, (unsigned)getuid(), shared);
	for (int i = 0; i < 4; i++)
		ck_assert_int_eq(cae_backend_cleanup(b, uuids[i], &err), 0);
	cae__rm_rf(npmtmp);
	cae_backend_free(b);
	cae_config_free(cfg);
}
END_TEST

/* A module proxy on disk (dir/proxy) holding example.com/caedep v1.0.0, whose Word() says
 * "pristine", and a Go project in repo that requires it, its go.sum made by go from that
 * proxy (no network: the module is ours). */
static void go_module_project(const char *dir, const char *repo)
{
	tu_sh(
	    "set -e; P=%s; V=$P/m/example.com/caedep@v1.0.0; D=$P/proxy/example.com/caedep/@v; "
	    "mkdir -p $V $D; printf 'module example.com/caedep\\n\\ngo 1.19\\n' > $V/go.mod; "
	    "printf 'package caedep\\n\\nfunc Word() string { return \"pristine\" }\\n' > "
	    "$V/dep.go; (cd $P/m && zip -qr $D/v1.0.0.zip example.com/caedep@v1.0.0); cp "
	    "$V/go.mod $D/v1.0.0.mod; printf '{\"Version\":\"v1.0.0\"}' > $D/v1.0.0.info; "
	    "printf 'v1.0.0\\n' > $D/list; cd %s; printf 'module example.com/g\\n\\ngo "
	    "1.19\\n\\nrequire example.com/caedep v1.0.0\\n' > go.mod; printf 'package "
	    "g\\n\\nimport (\\n\\t\"strings\"\\n\\n\\t\"example.com/caedep\"\\n)\\n\\nfunc Up() "
	    "string { return strings.ToUpper(caedep.Word()) }\\n' > g.go; printf 'package "
	    "g\\n\\nimport \"testing\"\\n\\nfunc TestUp(t *testing.T) {\\n\\tif Up() != "
	    "\"PRISTINE\" {\\n\\t\\tt.Fatal(Up())\\n\\t}\\n}\\n' > g_test.go; HOME=$P/h "
	    "GOMODCACHE=$P/gm GOCACHE=$P/gc GOFLAGS='-mod=mod -modcacherw' GOPROXY=file://$P/proxy "
	    "GOSUMDB=off go mod tidy; test -s go.sum; rm -rf $P/gm $P/gc $P/h; " GIT
	    " add . && " GIT " commit -qm go",
	    dir, repo);
}

/* Go's shared caches (pkgcache.h), filled by cae alone, read-only to every task.
 * Build cache: an environment's GOCACHE is a copy of links to read-only files of cae's. Task
 * A, as an attacker, writes into every file of its cache in place (refused: not its files,
 * and it cannot chmod them), then replaces each one with garbage (its own directory:
 * allowed, A's copy only). Modules: cae's fill put the project's module (from the operator's
 * GOPROXY, here a directory) in the shared proxy bound at /cache/go-mod, first on A's
 * GOPROXY; A writes into, removes, chmods and adds to every file and directory of it
 * (refused: a read-only bind of cae's files), and plants its own code in the module as its
 * go extracted it (its own GOMODCACHE: allowed). Then the operator's proxy is gone: B, a new
 * environment of the same project, gets the module from the shared proxy alone (its
 * prepare's go mod download, and again into an empty GOMODCACHE), the module's own code,
 * none of A's garbage, and its go test passes; the shared files are unchanged, cae's and
 * read-only. Failed before: no GOCACHE and no /cache/go-mod shared, B's prepare could not
 * download the module. */
START_TEST(package_cache_go_shared_read_only)
{
	_cleanup_free_ char *repo = make_repo();
	_cleanup_free_ char *gp = tu_mkdtemp();
	go_module_project(gp, repo);
	/* the operator's proxy: cae's environment */
	char proxy[PATH_MAX + 16];
	snprintf(proxy, sizeof(proxy), "file://%s/proxy", gp);
	setenv("GOPROXY", proxy, 1);
	/* an environment without the network gets no fill (cae's fill acts for the task: Go's
	 * proxy would fetch the module paths its go.mod names from their hosts) */
	cae_config *cfg0 = config("  package_cache:\n    enabled: true\n");
	cae_backend *b0 = backend(cfg0);
	cae_task t0 = {.uuid = C("gocache-0"), .repo = repo};
	cae_env_info info;
	cae_error err;
	ck_assert_msg(cae_backend_prepare(b0, &t0, "go", NULL, &info, &err) == 0, "%s",
		      err.message);
	cae_env_info_clear(&info);
	char dir0[PATH_MAX], zip0[PATH_MAX + 64];
	ck_assert_int_eq(cae__pkgcache_gomod_dir(cfg0, true, dir0, sizeof(dir0), &err), 1);
	snprintf(zip0, sizeof(zip0), "%s/example.com/caedep/@v/v1.0.0.zip", dir0);
	ck_assert_msg(access(zip0, F_OK) != 0, "filled for an environment without the network");
	ck_assert_int_eq(cae_backend_cleanup(b0, "gocache-0", &err), 0);
	cae_backend_free(b0);
	cae_config_free(cfg0);
	cae__rm_rf(state); /* config() makes the next one */
	free(state);
	cae_config *cfg =
	    config("  local:\n    network: true\n  package_cache:\n    enabled: true\n");
	cae_backend *b = backend(cfg);
	cae_task ta = {.uuid = C("gocache-a"), .repo = repo},
		 tb = {.uuid = C("gocache-b"), .repo = repo};
	ck_assert_msg(cae_backend_prepare(b, &ta, "go", NULL, &info, &err) == 0, "%s", err.message);
	size_t i;
	json_t *w;
	json_array_foreach(info.warnings, i, w) ck_assert_msg(
	    !strstr(json_string_value(w), "Go build") && !strstr(json_string_value(w), "Go mod"),
	    "%s", json_string_value(w));
	json_t *d = dep_of(info.deps, "go.mod");
	ck_assert_msg(d && json_is_true(json_object_get(d, "success")), "%s",
		      d ? json_string_value(json_object_get(d, "output")) : "no go mod download");
	cae_env_info_clear(&info);
	const char *attack =
	    "echo $GOCACHE; n=$(find \"$GOCACHE\" -type f | wc -l); [ $n -gt 300 ] && echo "
	    "seeded; w=0; for f in $(find \"$GOCACHE\" -type f); do { chmod u+w \"$f\" || "
	    "chmod 666 \"$f\"; printf POISON >> \"$f\"; } 2>/dev/null && w=$((w+1)); done; "
	    "echo written:$w; r=0; for f in $(find \"$GOCACHE\" -type f); do "
	    "rm -f \"$f\" && printf POISON > \"$f\" && r=$((r+1)); done; [ $r -eq $n ] && "
	    "echo replaced";
	cae_run_result r = run(b, "gocache-a", attack);
	ck_assert_msg(strcmp(r.out, "/workspace/.cache/go-build\nseeded\nwritten:0\nreplaced\n") ==
			  0,
		      "%s%s", r.out, r.err);
	cae_run_result_clear(&r);
	r = run(
	    b, "gocache-a",
	    "echo ${GOPROXY%%,*}; test -f /cache/go-mod/example.com/caedep/@v/v1.0.0.zip && "
	    "echo shared; w=0; for f in $(find /cache/go-mod -type f); do { printf POISON >> "
	    "\"$f\"; } 2>/dev/null && w=$((w+1)); chmod 666 \"$f\" 2>/dev/null && w=$((w+1)); "
	    "rm -f \"$f\" 2>/dev/null && w=$((w+1)); done; for d in $(find /cache/go-mod -type "
	    "d); do touch \"$d/POISON\" 2>/dev/null && w=$((w+1)); mkdir \"$d/example.com\" "
	    "2>/dev/null && w=$((w+1)); mv \"$d\" /tmp/moved 2>/dev/null && w=$((w+1)); done; "
	    "echo written:$w; M=$(go env GOMODCACHE); go mod download && chmod -R u+w "
	    "$M/example.com $M/cache && printf 'package caedep\\nfunc Word() string { "
	    "return \"POISON\" }\\n' > $M/example.com/caedep@v1.0.0/dep.go && for z in $(find "
	    "$M/cache -name '*.zip'); do printf POISON > $z; done && go test ./... 2>&1 | grep -q "
	    "POISON && echo planted");
	ck_assert_msg(strcmp(r.out, "file:///cache/go-mod\nshared\nwritten:0\nplanted\n") == 0,
		      "%s%s", r.out, r.err);
	cae_run_result_clear(&r);
	/* the operator's proxy unreachable from here on */
	tu_sh("rm -rf %s/proxy", gp);
	ck_assert_msg(cae_backend_prepare(b, &tb, "go", NULL, &info, &err) == 0, "%s", err.message);
	d = dep_of(info.deps, "go.mod");
	ck_assert_msg(d && json_is_true(json_object_get(d, "success")), "%s",
		      d ? json_string_value(json_object_get(d, "output")) : "no go mod download");
	cae_env_info_clear(&info);
	r = run(
	    b, "gocache-b",
	    "echo $GOCACHE; n=$(find \"$GOCACHE\" -type f | wc -l); [ $n -gt 300 ] && echo "
	    "seeded; grep -rl POISON \"$GOCACHE\" /cache/go-mod; go test ./... 2>&1 | awk "
	    "'!/^go: downloading/ {print $1, $2}'; GOMODCACHE=/tmp/fresh GOFLAGS=-modcacherw go "
	    "test -count=1 ./... 2>&1 | awk '!/^go: downloading/ {print $1, $2}'; grep -rl "
	    "POISON /tmp/fresh");
	ck_assert_msg(strcmp(r.out, "/workspace/.cache/go-build\nseeded\nok example.com/g\nok "
				    "example.com/g\n") == 0,
		      "%s%s", r.out, r.err);
	cae_run_result_clear(&r);
	/* the shared files: none of A's, every one read-only, cae's */
	_cleanup_free_ char *shared = cae__path_join(state, "package-cache");
	tu_sh("! grep -rl POISON %s && test -z \"$(find %s \\( -path '*/go/build/*' -o -path "
	      "'*/go-mod/*' \\) -type f -perm /222)\" && test -n \"$(find %s -path '*/go/build/*' "
	      "-type f)\" && test -z \"$(find %s -path '*/go-mod/*' ! -user %u)\" && test -f "
	      "\"$(echo %s/*/go-mod/example.com/caedep/@v/v1.0.0.zip)\"",
	      shared, shared, shared, shared, (unsigned)getuid(), shared);
	ck_assert_int_eq(cae_backend_cleanup(b, "gocache-a", &err), 0);
	ck_assert_int_eq(cae_backend_cleanup(b, "gocache-b", &err), 0);
	cae__rm_rf(gp);
	cae_backend_free(b);
	cae_config_free(cfg);
}
END_TEST

/* www served on 127.0.0.1:port by python3's http.server, a child of ours known to the
 * runner (which reaps children it does not know of), its requests logged in log (NULL: not
 * kept); returns once probe (a path under www) is served: its pid. */
static pid_t serve_http(const char *www, const char *log, int port, const char *probe)
{
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		char p[16];
		snprintf(p, sizeof(p), "%d", port);
		int fd = open("/dev/null", O_RDWR);
		int lfd = log ? open(log, O_WRONLY | O_CREAT | O_APPEND, 0644) : fd;
		if (fd < 0 || lfd < 0 || dup2(fd, 1) < 0 || dup2(lfd, 2) < 0 || chdir(www) < 0)
			_exit(127);
		execl("/usr/bin/python3", "python3", "-m", "http.server", "--bind", "127.0.0.1", p,
		      (char *)NULL);
		_exit(127);
	}
	cae__proctree_lock();
	cae__proctree_register(pid);
	cae__proctree_unlock();
	tu_sh("for i in $(seq 100); do curl -sf -o /dev/null http://127.0.0.1:%d/%s && exit 0; "
	      "sleep 0.1; done; exit 1",
	      port, probe);
	return pid;
}

/* A wheel of our own (caewheel 1.0, whose WORD is "pristine") in a package index served on
 * 127.0.0.1:port from dir (dir/simple; python3's http.server, a child of ours known to the
 * runner: its pid is returned), and a project in repo whose requirements.txt names it, and also
 * names, as an attacker's project would, a directory of its own (dir/evil) holding a caewheel 1.0
 * wheel whose WORD is "POISON" (pip prefers a --find-links file to an equal one of an index). */
static pid_t pip_wheel_project(const char *dir, const char *repo, int port)
{
	tu_sh(
	    "set -e; P=%s; mkdir -p $P/src/caewheel $P/simple/caewheel; echo 'WORD = "
	    "\"pristine\"' > $P/src/caewheel/__init__.py; printf 'from setuptools import "
	    "setup\\nsetup(name=\"caewheel\", version=\"1.0\", packages=[\"caewheel\"])\\n' > "
	    "$P/src/setup.py; (cd $P && HOME=$P/h PATH=/usr/bin:/bin python3 -m pip wheel -q "
	    "--no-deps --no-build-isolation --no-index -w $P/wheels ./src) >/dev/null 2>&1; W=$(ls "
	    "$P/wheels); printf '<a href=\"http://127.0.0.1:%d/wheels/%%s\">%%s</a>\\n' $W $W > "
	    "$P/simple/caewheel/index.html; echo 'WORD = \"POISON\"' > "
	    "$P/src/caewheel/__init__.py; sed -i 's/1[.]0/9.0/' $P/src/setup.py; rm -rf "
	    "$P/src/build $P/src/*.egg-info; (cd $P && "
	    "HOME=$P/h PATH=/usr/bin:/bin python3 -m pip wheel -q --no-deps --no-build-isolation "
	    "--no-index -w $P/evil ./src) >/dev/null 2>&1; test -f "
	    "$P/evil/caewheel-9.0-py3-none-any.whl; cd "
	    "%s; printf -- '--find-links file://%%s/evil\\ncaewheel\\n' $P > requirements.txt; " GIT
	    " add . && " GIT " commit -qm pip",
	    dir, port, repo);
	return serve_http(dir, NULL, port, "simple/caewheel/");
}

/* pip's shared wheels (pkgcache.h): cae's fill put the project's wheel (from the operator's
 * index, PIP_INDEX_URL of cae's environment, here one on the loopback) in the shared directory
 * bound read-only at /cache/pip-wheels and named by PIP_FIND_LINKS. Task A, as an
 * attacker, writes into, chmods, removes, renames and adds to every file and directory of
 * it, and copies its own wheel of the same name there (all refused: a read-only bind of
 * cae's files); the shared wheel is the index's, never the one the project's own
 * --find-links line offers (the fill keeps no option). Then the operator's index is gone
 * (and the project's directory): B, a new environment of the same
 * project, installs the wheel from the shared directory alone (its prepare's pip install,
 * and again with --no-index), the package's own code; the shared files are cae's,
 * read-only, none of A's. Failed before: no PIP_FIND_LINKS, no /cache/pip-wheels, B's
 * install could not find caewheel. */
START_TEST(package_cache_pip_wheels_read_only)
{
	_cleanup_free_ char *repo = make_repo();
	_cleanup_free_ char *pp = tu_mkdtemp();
	int port = tu_free_port();
	pid_t server = pip_wheel_project(pp, repo, port);
	char index[64];
	snprintf(index, sizeof(index), "http://127.0.0.1:%d/simple", port);
	setenv("PIP_INDEX_URL", index, 1);
	cae_config *cfg =
	    config("  local:\n    network: true\n  package_cache:\n    enabled: true\n");
	cae_backend *b = backend(cfg);
	cae_task ta = {.uuid = C("pip-a"), .repo = repo}, tb = {.uuid = C("pip-b"), .repo = repo};
	cae_env_info info;
	cae_error err;
	ck_assert_msg(cae_backend_prepare(b, &ta, "python", NULL, &info, &err) == 0, "%s",
		      err.message);
	size_t i;
	json_t *w;
	json_array_foreach(info.warnings, i, w)
	    ck_assert_msg(!strstr(json_string_value(w), "pip wheels"), "%s", json_string_value(w));
	json_t *d = dep_of(info.deps, "requirements.txt");
	ck_assert_msg(d && json_is_true(json_object_get(d, "success")), "%s",
		      d ? json_string_value(json_object_get(d, "output")) : "no pip install");
	cae_env_info_clear(&info);
	cae_run_result r = run(
	    b, "pip-a",
	    "echo $PIP_FIND_LINKS; ls /cache/pip-wheels; w=0; for f in $(find /cache/pip-wheels "
	    "-type f); do { printf POISON >> \"$f\"; } 2>/dev/null && w=$((w+1)); chmod 666 \"$f\" "
	    "2>/dev/null && w=$((w+1)); rm -f \"$f\" 2>/dev/null && w=$((w+1)); mv \"$f\" "
	    "\"$f.x\" 2>/dev/null && w=$((w+1)); done; touch /cache/pip-wheels/POISON "
	    "2>/dev/null && w=$((w+1)); mkdir /cache/pip-wheels/x 2>/dev/null && w=$((w+1)); "
	    "mkdir -p /tmp/e/caewheel && echo 'WORD = \"POISON\"' > /tmp/e/caewheel/__init__.py "
	    "&& (cd /tmp/e && zip -qr /tmp/caewheel-1.0-py3-none-any.whl caewheel) && echo built "
	    "&& cp "
	    "/tmp/caewheel-1.0-py3-none-any.whl /cache/pip-wheels/caewheel-1.0-py3-none-any.whl "
	    "2>/dev/null && w=$((w+1)); cp /tmp/caewheel-1.0-py3-none-any.whl "
	    "/cache/pip-wheels/caewheel-1.0-py2.py3-none-any.whl 2>/dev/null && w=$((w+1)); "
	    "echo written:$w; unzip -p /cache/pip-wheels/caewheel-1.0-py3-none-any.whl "
	    "caewheel/__init__.py");
	ck_assert_msg(
	    strcmp(r.out,
		   "/cache/pip-wheels\ncaewheel-1.0-py3-none-any.whl\nbuilt\nwritten:0\nWORD = "
		   "\"pristine\"\n") == 0,
	    "%s%s", r.out, r.err);
	cae_run_result_clear(&r);
	/* the operator's index unreachable from here on */
	tu_sh("rm -rf %s/simple %s/wheels %s/evil", pp, pp, pp);
	ck_assert_msg(cae_backend_prepare(b, &tb, "python", NULL, &info, &err) == 0, "%s",
		      err.message);
	d = dep_of(info.deps, "requirements.txt");
	ck_assert_msg(d && json_is_true(json_object_get(d, "success")), "%s",
		      d ? json_string_value(json_object_get(d, "output")) : "no pip install");
	cae_env_info_clear(&info);
	r = run(
	    b, "pip-b",
	    "cd / && python3 -c 'import caewheel; print(caewheel.WORD)'; python3 -m pip install "
	    "-q --no-index --target /tmp/t caewheel >/dev/null 2>&1 && cat "
	    "/tmp/t/caewheel/__init__.py; grep -rl POISON /cache/pip-wheels");
	ck_assert_msg(strcmp(r.out, "pristine\nWORD = \"pristine\"\n") == 0, "%s%s", r.out, r.err);
	cae_run_result_clear(&r);
	_cleanup_free_ char *shared = cae__path_join(state, "package-cache");
	tu_sh("! grep -rl POISON %s && test -z \"$(find %s -path '*/pip-wheels/*' \\( -type f "
	      "-perm /222 "
	      "-o ! -user %u \\))\" && test -f \"$(echo "
	      "%s/*/pip-wheels/caewheel-1.0-py3-none-any.whl)\"",
	      shared, shared, (unsigned)getuid(), shared);
	ck_assert_int_eq(cae_backend_cleanup(b, "pip-a", &err), 0);
	ck_assert_int_eq(cae_backend_cleanup(b, "pip-b", &err), 0);
	cae__proctree_unregister(server);
	kill(server, SIGTERM);
	waitpid(server, NULL, 0);
	cae__rm_rf(pp);
	cae_backend_free(b);
	cae_config_free(cfg);
}
END_TEST

/* A Maven remote of the tests' own served on 127.0.0.1:port from dir/www (python3's
 * http.server, a child of ours known to the runner, its requests logged in dir/http.log: its
 * pid is returned), at http://127.0.0.1:port/maven2/, and a project in repo that resolves from
 * it with a plugin of the tests' own which runs the project's forge.sh, an attacker's code
 * (tests/data/maven). */
static pid_t maven_remote(const char *dir, const char *repo, int port)
{
	tu_sh("sh " SRCDIR "/../data/maven/make.sh %s %s %d >/dev/null && cd %s && " GIT
	      " add . && " GIT " commit -qm maven",
	      dir, repo, port, repo);
	char www[PATH_MAX], log[PATH_MAX];
	snprintf(www, sizeof(www), "%s/www", dir);
	snprintf(log, sizeof(log), "%s/http.log", dir);
	return serve_http(www, log, port, "maven2/javax/inject/javax.inject/1/javax.inject-1.pom");
}

/* Maven's shared repository (pkgcache.h). Task A's prepare resolves the project from the
 * operator's remote (here one on the loopback) and its project's code, as an attacker's,
 * forges files in its own local repository: an artifact it resolved and one it never used,
 * each with a checksum of its own, names outside Maven's layout (one that escapes the
 * repository through a newline in a directory's name: "../escape/..."), a snapshot. cae's fill
 * after the install took the names and the remote's bytes: the shared repository holds
 * exactly the remote's files (the resolved ones and the one A only named), none of A's, no
 * name outside the layout and no request for one, not the file whose checksum the remote gets
 * wrong. In A, /cache/maven and cae's settings.xml refuse writes, chmod, removals, renames and
 * new files. B, an environment without the network (no fill: no request at all during its
 * prepare, though its project names a file the shared repository lacks), resolves everything
 * from the shared repository, and, with the remote gone, again into an empty local
 * repository: the remote's bytes. Failed before: no /cache/maven, nothing filled, B's
 * resolution with the remote gone failed. */
START_TEST(package_cache_maven_read_only)
{
	_cleanup_free_ char *repo = make_repo();
	_cleanup_free_ char *mp = tu_mkdtemp();
	int port = tu_free_port();
	pid_t server = maven_remote(mp, repo, port);
	char extra[512];
	snprintf(extra, sizeof(extra),
		 "  local:\n    network: true\n  package_cache:\n    enabled: true\n"
		 "    maven_remote: http://127.0.0.1:%d/maven2\n",
		 port);
	cae_config *cfg = config(extra);
	cae_backend *b = backend(cfg);
	cae_task ta = {.uuid = C("maven-a"), .repo = repo},
		 tb = {.uuid = C("maven-b"), .repo = repo};
	cae_env_info info;
	cae_error err;
	ck_assert_msg(cae_backend_prepare(b, &ta, "java", NULL, &info, &err) == 0, "%s",
		      err.message);
	json_t *d = dep_of(info.deps, "pom.xml");
	ck_assert_msg(d && json_is_true(json_object_get(d, "success")), "%s",
		      d ? json_string_value(json_object_get(d, "output")) : "no mvn");
	/* the prepare resolved the build plugins too (the goal of the tests' plugin leaves its
	 * mark): what an agent's `mvn test` takes is in the local repository for the fill */
	cae_run_result rp = run(b, "maven-a", "cat resolve-plugins.ran");
	ck_assert_msg(strcmp(rp.out, "ran\n") == 0, "%s%s", rp.out, rp.err);
	cae_run_result_clear(&rp);
	/* one warning: the pom whose checksum the remote gets wrong is not shared */
	size_t i, said = 0;
	json_t *w;
	json_array_foreach(info.warnings, i, w)
	{
		const char *t = json_string_value(w);
		if (strstr(t, "Maven"))
			ck_assert_msg(strstr(t, "plexus-interpolation-1.26.pom") &&
					  strstr(t, "checksum") && ++said == 1,
				      "%s", t);
	}
	ck_assert_int_eq(said, 1);
	cae_env_info_clear(&info);
	/* the shared repository: the remote's files and checksums, sealed, cae's */
	tu_sh(
	    "S=$(echo %s/package-cache/*/maven); M=%s/www/maven2; for f in "
	    "javax/inject/javax.inject/1/javax.inject-1.jar "
	    "javax/inject/javax.inject/1/javax.inject-1.pom "
	    "org/codehaus/plexus/plexus-utils/3.4.2/plexus-utils-3.4.2.jar "
	    "cae/test/cae-maven-plugin/1.0/cae-maven-plugin-1.0.jar "
	    "org/codehaus/plexus/plexus-interpolation/1.26/plexus-interpolation-1.26.jar; do cmp "
	    "$S/$f $M/$f && test \"$(cat $S/$f.sha1)\" = \"$(cat $M/$f.sha1)\" || exit 1; done; "
	    "test ! -e $S/org/codehaus/plexus/plexus-interpolation/1.26/"
	    "plexus-interpolation-1.26.pom && test ! -e $S/org/codehaus/plexus/plexus-classworlds "
	    "&& ! grep -rl FORGED $S/.. && test -z \"$(find $S/.. -name '*evil*' -o -name "
	    "'*SNAPSHOT*' -o -name '*escape*' -o -name 'y-1.jar' -o -name 'a')\" && test -z "
	    "\"$(find $S -path $S/.filled -prune -o -type f -perm /222 -print -o ! -user %u "
	    "-print)\" && ! grep -E 'escape|evil|SNAPSHOT|/a ' %s/http.log",
	    state, mp, (unsigned)getuid(), mp);
	cae_run_result r = run(
	    b, "maven-a",
	    "test -f /workspace/.m2/repository/javax/inject/javax.inject/1/javax.inject-1.jar && "
	    "echo kept; ls /cache/maven; w=0; for f in $(find /cache/maven -type f) "
	    "/etc/maven/settings.xml; do { printf FORGED >> \"$f\"; } 2>/dev/null && w=$((w+1)); "
	    "chmod 666 \"$f\" 2>/dev/null && w=$((w+1)); rm -f \"$f\" 2>/dev/null && w=$((w+1)); "
	    "mv \"$f\" \"$f.x\" 2>/dev/null && w=$((w+1)); done; for d in $(find /cache/maven "
	    "-type d); do touch \"$d/planted\" 2>/dev/null && w=$((w+1)); mkdir \"$d/x\" "
	    "2>/dev/null && w=$((w+1)); done; echo written:$w");
	ck_assert_msg(strcmp(r.out, "kept\ncae\njavax\norg\nwritten:0\n") == 0, "%s%s", r.out,
		      r.err);
	cae_run_result_clear(&r);
	cae_backend_free(b);
	/* B: no network of its own, the same state directory */
	char yaml[1024];
	snprintf(yaml, sizeof(yaml),
		 "command_executor:\n  backend: local\n  state_dir: %s\n  package_cache:\n"
		 "    enabled: true\n    maven_remote: http://127.0.0.1:%d/maven2\n",
		 state, port);
	cae_config *cfg0;
	char *envp[] = {NULL};
	ck_assert_msg(cae_config_load_string(&cfg0, yaml, strlen(yaml), "t.yaml", envp, &err) == 0,
		      "%s", err.message);
	b = backend(cfg0);
	char log[PATH_MAX + 16];
	snprintf(log, sizeof(log), "%s/http.log", mp);
	struct stat st;
	ck_assert_int_eq(stat(log, &st), 0);
	off_t before = st.st_size;
	ck_assert_msg(cae_backend_prepare(b, &tb, "java", NULL, &info, &err) == 0, "%s",
		      err.message);
	d = dep_of(info.deps, "pom.xml");
	ck_assert_msg(d && json_is_true(json_object_get(d, "success")), "%s",
		      d ? json_string_value(json_object_get(d, "output")) : "no mvn");
	cae_env_info_clear(&info);
	ck_assert_int_eq(stat(log, &st), 0);
	ck_assert_msg(st.st_size == before, "requests during B's prepare");
	/* the remote gone */
	cae__proctree_unregister(server);
	kill(server, SIGTERM);
	waitpid(server, NULL, 0);
	r = run(b, "maven-b",
		"test -f /workspace/.m2/repository/org/codehaus/plexus/plexus-classworlds/2.7.0/"
		"plexus-classworlds-2.7.0.jar && echo named; J=javax/inject/javax.inject/1; cmp "
		"/workspace/.m2/repository/$J/javax.inject-1.pom /usr/share/maven-repo/$J/"
		"javax.inject-1.pom && echo resolved; mvn -B -q -Dmaven.repo.local=/tmp/fresh "
		"dependency:resolve 2>&1 | grep -c '^cp: /tmp/fresh/'$J; cmp /tmp/fresh/$J/"
		"javax.inject-1.jar /usr/share/maven-repo/$J/javax.inject-1.jar && echo pristine; "
		"grep -h cae-package-cache /tmp/fresh/$J/_remote.repositories | cut -d'>' -f2");
	ck_assert_msg(strcmp(r.out, "named\nresolved\n1\npristine\ncae-package-cache=\n"
				    "cae-package-cache=\n") == 0,
		      "%s%s", r.out, r.err);
	cae_run_result_clear(&r);
	ck_assert_int_eq(cae_backend_cleanup(b, "maven-a", &err), 0);
	ck_assert_int_eq(cae_backend_cleanup(b, "maven-b", &err), 0);
	cae__rm_rf(mp);
	cae_backend_free(b);
	cae_config_free(cfg0);
	cae_config_free(cfg);
}
END_TEST

/* The caches' server of the kubernetes pods (pkgcache-serve.c), as a pod's helper hands it
 * connections: environment A holds open every connection it can (each one's server waits
 * for a request that does not come, up to its timeout); it gets its share, no more, and
 * environment B's request is still answered. Failed before: A took the server's every
 * connection (64), and B's was refused. */
START_TEST(package_cache_server_shares_its_connections)
{
	cae_config *cfg = config("  package_cache:\n    enabled: true\n");
	cae_pkgcache_share *a = cae__pkgcache_share_new(cfg), *b = cae__pkgcache_share_new(cfg);
	ck_assert(a && b);
	enum { HELD = 64 };
	int held[HELD], taken = 0;
	for (int i = 0; i < HELD; i++) {
		int sv[2];
		ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
		held[i] = sv[0];
		if (cae__pkgcache_serve_conn(a, 'h', sv[1]) == 0)
			taken++;
	}
	ck_assert_int_eq(taken, CAE_PKGCACHE_SERVE_ENV_CONNS);
	int sv[2];
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	ck_assert_int_eq(cae__pkgcache_serve_conn(b, 'h', sv[1]), 0);
	const char req[] = "GET /go-mod/example.com/x/@v/list HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
	ck_assert_int_eq(write(sv[0], req, sizeof(req) - 1), (ssize_t)sizeof(req) - 1);
	char got[64] = "";
	ck_assert_int_gt(read(sv[0], got, sizeof(got) - 1), 0);
	ck_assert_msg(strncmp(got, "HTTP/1.1 404", 12) == 0, "%s", got);
	close(sv[0]);
	/* the held ones end with their clients; the shares with their last connection */
	for (int i = 0; i < HELD; i++)
		close(held[i]);
	cae__pkgcache_share_unref(a);
	cae__pkgcache_share_unref(b);
	cae_config_free(cfg);
	cae__rm_rf(state);
	free(state);
	state = NULL;
}
END_TEST

/* Which names the Maven fill takes (pkgcache.h): a release's .jar or .pom in Maven's layout,
 * nothing that could name a file elsewhere on the remote or outside the shared repository. */
START_TEST(package_cache_maven_paths)
{
	static const char *const ok[] = {
	    "javax/inject/javax.inject/1/javax.inject-1.jar",
	    "org/codehaus/plexus/plexus-utils/3.4.2/plexus-utils-3.4.2.pom",
	    "org/x/a-b/1.0+x/a-b-1.0+x-tests.jar",
	};
	static const char *const refused[] = {
	    "",
	    "../escape/x/1/x-1.jar",
	    "org/../../x/1/x-1.jar",
	    "/etc/x/1/x-1.jar",
	    "./org/x/1/x-1.jar",
	    "org//x/1/x-1.jar",
	    "x/1/x-1.jar",
	    "org/.x/1/.x-1.jar",
	    "org/x/1/y-1.jar",
	    "org/x/1/x-2.jar",
	    "org/x/1/x-1.xml",
	    "org/x/1/x-1-.jar",
	    "org/x/1/x-1jar.jar",
	    "org/x/1/maven-metadata.xml",
	    "org/x/1.0-SNAPSHOT/x-1.0-SNAPSHOT.jar",
	    "org/x/1/x-1.jar/",
	    "org/x y/x/1/x-1.jar",
	    "org/x%2e%2e/x/1/x-1.jar",
	    "org/x\n../x/1/x-1.jar",
	};
	for (size_t i = 0; i < ARRAY_SIZE(ok); i++)
		ck_assert_msg(cae__pkgcache_maven_path_ok(ok[i]), "%s", ok[i]);
	for (size_t i = 0; i < ARRAY_SIZE(refused); i++)
		ck_assert_msg(!cae__pkgcache_maven_path_ok(refused[i]), "%s", refused[i]);
}
END_TEST

/* The Go module fill (pkgcache.h) without a prepare: nothing made while no fill ran, once
 * per go.mod and go.sum (a second fill of the same files does nothing), and again after a
 * prune took the shared tree (its record of the fills goes with it: a record kept beside
 * the tree would leave every later fill skipped and the tree empty). */
START_TEST(package_cache_go_mod_fill_after_prune)
{
	_cleanup_free_ char *repo = make_repo();
	_cleanup_free_ char *gp = tu_mkdtemp();
	go_module_project(gp, repo);
	char proxy[PATH_MAX + 16];
	snprintf(proxy, sizeof(proxy), "file://%s/proxy", gp);
	setenv("GOPROXY", proxy, 1);
	cae_config *cfg = config("  package_cache:\n    enabled: true\n");
	_cleanup_free_ char *mod = NULL, *sum = NULL;
	ck_assert_int_eq(cae__pkgcache_manifest(repo, "go.mod", &mod), 0);
	ck_assert_int_eq(cae__pkgcache_manifest(repo, "go.sum", &sum), 0);
	ck_assert(mod && sum);
	cae_error err;
	char dir[PATH_MAX], zip[PATH_MAX + 64];
	ck_assert_int_eq(cae__pkgcache_gomod_dir(cfg, false, dir, sizeof(dir), &err), 0);
	ck_assert_msg(cae__pkgcache_gomod_fill(cfg, mod, sum, &err) == 1, "%s", err.message);
	ck_assert_int_eq(cae__pkgcache_gomod_dir(cfg, false, dir, sizeof(dir), &err), 1);
	snprintf(zip, sizeof(zip), "%s/example.com/caedep/@v/v1.0.0.zip", dir);
	ck_assert_int_eq(access(zip, F_OK), 0);
	ck_assert_int_eq(cae__pkgcache_gomod_fill(cfg, mod, sum, &err), 0);
	json_t *removed = json_array();
	int count = 0;
	ck_assert_int_eq(
	    cae__pkgcache_prune(cfg, 168 * 3600, 0, true, false, removed, &count, &err), 0);
	json_decref(removed);
	ck_assert_int_ne(access(zip, F_OK), 0);
	ck_assert_msg(cae__pkgcache_gomod_fill(cfg, mod, sum, &err) == 1, "%s", err.message);
	ck_assert_int_eq(access(zip, F_OK), 0);
	cae__rm_rf(gp);
	cae_config_free(cfg);
}
END_TEST

/* The package caches' directories and their prune: off by default (nothing made), made per
 * owner with the owner's uid, and pruned by age, then by size (least recently used first),
 * this instance's only. */
/* The entries of dir (but . and ..) into a newline-separated list (new), names starting with
 * prefix only (NULL: every one). */
static char *entries_of(const char *dir, const char *prefix)
{
	DIR *d = opendir(dir);
	ck_assert_ptr_nonnull(d);
	char *out = calloc(1, 1);
	size_t n = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0 ||
		    (prefix && strncmp(e->d_name, prefix, strlen(prefix)) != 0))
			continue;
		size_t l = strlen(e->d_name);
		out = realloc(out, n + l + 2);
		memcpy(out + n, e->d_name, l);
		out[n + l] = '\n';
		n += l + 1;
		out[n] = '\0';
	}
	closedir(d);
	return out;
}

/* The shared caches' writers SIGKILLed at every point (the kill points of cae__txn: each
 * file of a fill published into a shared tree, npm's tree store from its temporary's making
 * to its rename and after). Killed anywhere, a publish leaves nothing in the shared directory
 * (no temporary for the prune to find later), and a store leaves at most its temporary,
 * which the next store of that tree removes; a tree is there whole or not at all. Failed
 * before: a publish killed before its link left its ".<pid>.<name>.tmp" in the shared tree,
 * a store's ".tmp-<name>-*" directory stayed for good (and neither had kill points). */
START_TEST(package_cache_writers_killed_leave_nothing_behind)
{
	cae_config *cfg = config("  package_cache:\n    enabled: true\n");
	_cleanup_free_ char *dir = tu_mkdtemp();
	/* a fill's download published into a shared tree */
	tu_sh("mkdir %s/src %s/dst && head -c 300000 /dev/urandom > %s/src/v1.0.0.zip", dir, dir,
	      dir);
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/src", dir);
	int sfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	snprintf(path, sizeof(path), "%s/dst", dir);
	int dfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	ck_assert(sfd >= 0 && dfd >= 0);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		cae__txn_test_kill_at(1);
		_exit(cae__pkgcache_publish_file(sfd, "v1.0.0.zip", dfd) == 0 ? 0 : 1);
	}
	int st;
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "the publish was not killed");
	_cleanup_free_ char *left = entries_of(path, NULL);
	ck_assert_msg(strcmp(left, "") == 0, "left in the shared tree: %s", left);
	ck_assert_int_eq(cae__pkgcache_publish_file(sfd, "v1.0.0.zip", dfd), 0);
	free(left);
	left = entries_of(path, NULL);
	ck_assert_str_eq(left, "v1.0.0.zip\n");
	tu_sh("cmp %s/src/v1.0.0.zip %s/dst/v1.0.0.zip && test \"$(stat -c %%a "
	      "%s/dst/v1.0.0.zip)\" = 444",
	      dir, dir, dir);
	close(sfd);
	close(dfd);

	/* npm's tree of a project whose lock file runs nothing (a lock file of the tests' own:
	 * the store copies node_modules as it is, nothing is downloaded) */
	tu_sh("cd %s && mkdir -p p/node_modules/a/lib p/node_modules/.bin && cd p && printf "
	      "'{\"name\":\"t\",\"version\":\"1.0.0\",\"dependencies\":{\"a\":\"1.0.0\"}}' > "
	      "package.json && printf '{\"lockfileVersion\":3,\"packages\":{\"\":{\"name\":\"t\"},"
	      "\"node_modules/a\":{\"version\":\"1.0.0\",\"resolved\":"
	      "\"https://registry.npmjs.org/a/-/a-1.0.0.tgz\",\"integrity\":\"sha512-AAAA\"}}}' > "
	      "package-lock.json && echo '{\"name\":\"a\"}' > node_modules/a/package.json && echo "
	      "'module.exports = 1' > node_modules/a/index.js && echo x > node_modules/a/lib/x.js "
	      "&& head -c 200000 /dev/urandom > node_modules/a/lib/blob && ln -s ../a/index.js "
	      "node_modules/.bin/a",
	      dir);
	snprintf(path, sizeof(path), "%s/p", dir);
	char trees[PATH_MAX];
	cae_error err = {0};
	ck_assert_int_eq(cae__pkgcache_npm_trees_dir(cfg, trees, sizeof(trees), &err), 0);
	int killed = 0;
	for (long at = 1;; at++) {
		pid = fork();
		ck_assert_int_ge(pid, 0);
		if (pid == 0) {
			cae__txn_test_kill_at(at);
			cae_error e = {0};
			_exit(cae__pkgcache_npm_tree_store(cfg, path, &e) == 1 ? 0 : 1);
		}
		ck_assert_int_eq(waitpid(pid, &st, 0), pid);
		if (!WIFSIGNALED(st)) {
			ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the store failed");
			break;
		}
		ck_assert_int_eq(WTERMSIG(st), SIGKILL);
		killed++;
		/* the tree: whole, or not there */
		_cleanup_free_ char *names = entries_of(trees, NULL);
		tu_sh("cd %s && for t in $(ls); do diff -r %s/node_modules $t/node_modules && "
		      "test -f $t/key || exit 1; done",
		      trees, path);
		/* the next store of it: its tree kept whole, no temporary left */
		int r = cae__pkgcache_npm_tree_store(cfg, path, &err);
		ck_assert_msg(r >= 0, "%s", err.message);
		_cleanup_free_ char *tmps = entries_of(trees, ".tmp-");
		ck_assert_msg(strcmp(tmps, "") == 0, "after a store killed at %ld: %s (%s)", at,
			      tmps, names);
		tu_sh(
		    "cd %s && test $(ls | wc -l) = 1 && diff -r %s/node_modules */node_modules && "
		    "rm -rf -- */",
		    trees, path);
	}
	/* mkdtemp, five files, before and after the rename */
	ck_assert_int_ge(killed, 7);
	tu_sh("cd %s && test $(ls | wc -l) = 1 && diff -r %s/node_modules */node_modules", trees,
	      path);
	cae__rm_rf(dir);
	cae_config_free(cfg);
}
END_TEST

START_TEST(package_cache_dirs_and_prune)
{
	cae_config *off = config(NULL);
	char dir[PATH_MAX], dir2[PATH_MAX];
	cae_error err = {0};
	ck_assert_int_eq(cae__pkgcache_npm_dir(off, "local-1", 1, 1, true, dir, sizeof(dir), &err),
			 0);
	_cleanup_free_ char *none = cae__path_join(state, "package-cache");
	ck_assert_int_eq(access(none, F_OK), -1);
	cae_config_free(off);
	cae__rm_rf(state);
	free(state);
	cae_config *cfg = config("  package_cache:\n    enabled: true\n    max_size: 1m\n");
	_cleanup_free_ char *root = cae__path_join(state, "package-cache");
	ck_assert_int_eq(cae__pkgcache_npm_dir(cfg, "local-1", 1, 1, true, dir, sizeof(dir), &err),
			 1);
	ck_assert_int_eq(
	    cae__pkgcache_npm_dir(cfg, "docker", 1000, 1000, true, dir2, sizeof(dir2), &err), 1);
	struct stat st;
	ck_assert_int_eq(lstat(dir, &st), 0);
	ck_assert_int_eq(st.st_uid, 1);
	ck_assert_int_eq(st.st_mode & 0777, 0700);
	tu_sh("head -c 2000000 /dev/urandom > %s/blob && mkdir -p %s/other-instance/docker/npm && "
	      "touch -d '8 days ago' %s/../.used",
	      dir2, root, dir);
	/* by age: local-1 (unused for 8 days), not docker nor another instance's */
	json_t *removed = json_array();
	int count = 0;
	ck_assert_int_eq(
	    cae__pkgcache_prune(cfg, 168 * 3600, 0, false, false, removed, &count, &err), 0);
	ck_assert_int_eq(count, 1);
	ck_assert_int_eq(access(dir, F_OK), -1);
	ck_assert_int_eq(access(dir2, F_OK), 0);
	/* by size: docker holds 2 MB, more than max_size */
	ck_assert_int_eq(cae__pkgcache_prune(cfg, 168 * 3600,
					     cfg->command_executor.package_cache.max_bytes, false,
					     false, removed, &count, &err),
			 0);
	ck_assert_int_eq(count, 1);
	ck_assert_int_eq(access(dir2, F_OK), -1);
	_cleanup_free_ char *other = cae__path_join(root, "other-instance/docker/npm");
	ck_assert_int_eq(access(other, F_OK), 0);
	ck_assert_uint_eq(json_array_size(removed), 2);
	json_decref(removed);
	cae_config_free(cfg);
}
END_TEST

static Suite *make_suite(void)
{
	Suite *s = suite_create("backend-local");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, prepare_issue_shallow_clone);
	tcase_add_test(tc, prepare_pull_request_diff_against_target);
	tcase_add_test(tc, unknown_environment_falls_back);
	tcase_add_test(tc, failed_clone_leaves_nothing);
	tcase_add_test(tc, reprepare_starts_clean_and_second_process_sees_it);
	tcase_add_test(tc, cleanup_stale_by_age);
	tcase_add_test(tc, collector_at_start_and_every_interval);
	tcase_add_test(tc, workspace_gone_is_stale);
	tcase_add_test(tc, cleanup_prepared_takes_only_its_own);
	tcase_add_test(tc, engine_slots_admit_at_most_n);
	tcase_add_test(tc, list_shows_resources);
	tcase_add_test(tc, bubblewrap_confines);
	tcase_add_test(tc, sandbox_lives_with_the_environment);
	tcase_add_test(tc, sandbox_follows_a_recreated_workspace);
	tcase_add_test(tc, no_sandbox_means_refused_unless_unconfined);
	tcase_add_test(tc, sandbox_helper_from_tmp);
	tcase_add_test(tc, sandbox_replaced_when_the_helper_dies);
	tcase_add_test(tc, prepare_killed_is_never_ready);
	tcase_add_test(tc, prepare_killed_early_is_listed_and_collected);
	tcase_add_test(tc, gc_removes_a_directory_without_record);
	tcase_add_test(tc, cleanup_killed_leaves_no_disk);
	tcase_add_test(tc, workspace_remounted_after_reboot);
	tcase_add_test(tc, plain_mode_warns_and_is_unconfined);
	tcase_add_test(tc, dependency_failure_is_a_warning);
	tcase_add_test(tc, dependency_standins_conda_and_cargo);
	tcase_add_test(tc, environment_venv_etc_and_tools);
	tcase_add_test(tc, package_cache_shared_and_unpoisoned);
	tcase_add_test(tc, package_cache_npm_tree_shared_read_only);
	tcase_add_test(tc, package_cache_server_shares_its_connections);
	tcase_add_test(tc, package_cache_go_shared_read_only);
	tcase_add_test(tc, package_cache_pip_wheels_read_only);
	tcase_add_test(tc, package_cache_maven_read_only);
	tcase_add_test(tc, package_cache_maven_paths);
	tcase_add_test(tc, package_cache_go_mod_fill_after_prune);
	tcase_add_test(tc, package_cache_dirs_and_prune);
	tcase_add_test(tc, package_cache_writers_killed_leave_nothing_behind);
	tcase_add_test(tc, environment_gone_is_clear);
	tcase_add_test(tc, metadata_changes_are_seen);
	tcase_add_test(tc, external_workspace_used_as_is);
	tcase_add_test(tc, task_json_parsing);
	tcase_add_test(tc, gitlab_clone_url_from_projects_api);
	tcase_add_test(tc, github_clone_url);
	tcase_add_test(tc, protected_paths_hold_in_the_sandbox);
	tcase_add_test(tc, seccomp_filter_refuses_each_call);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run(make_suite());
}
