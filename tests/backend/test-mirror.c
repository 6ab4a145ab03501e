/* The host-side mirror cache (src/backend/mirror.c) with real git, over the loopback git
 * server (tests/gitserver.h) with its token: a clone through the cache is the clone without
 * it (branch, shallowness, refs, origin's URL, a pull request's diff), a second task fetches
 * only what is new, no token lands in the cache, a mirror with a corrupted object or with a
 * lock file left by a dead git is rebuilt and the task's clone is still right, two processes
 * cloning the same URL at once both succeed, and `cae cache prune` removes what is unused.
 * `test-mirror local` runs the local backend (suite backend); `test-mirror docker` the
 * docker backend against a real engine (suite docker). */
#include "testutil.h"
#include "dockertest.h"
#include "gitserver.h"

#include "backend/backend-internal.h"
#include "base/macro.h"
#include "cae/backend.h"
#include "cae/config.h"
#include "cae/log.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>

static bool docker_mode;
static char *state;
static char repo_url[512];
static cae_log *tlog; /* every backend's, when the test gives none: into tlog_path */
static char tlog_path[600];

/* How many lines of the test's log name event. */
static int log_count(const char *event)
{
	char quoted[128];
	snprintf(quoted, sizeof(quoted), "\"%s\"", event);
	return tu_lines_with(tlog_path, quoted);
}

static void cfg_set(cae_config *cfg, const char *key, const char *value)
{
	cae_error err = {0};
	ck_assert_msg(cae_config_set(cfg, key, value, &err) == 0, "%s: %s", key, err.message);
}

/* The backend under test with a state directory of its own, the test token as GitHub's. */
static cae_config *config(bool cache)
{
	free(state);
	state = tu_mkdtemp();
	if (!tlog) {
		_cleanup_free_ char *d = tu_mkdtemp();
		snprintf(tlog_path, sizeof(tlog_path), "%s/log.jsonl", d);
		int fd = open(tlog_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
		ck_assert_int_ge(fd, 0);
		tlog = cae_log_new(fd, CAE_LOG_DEBUG);
		ck_assert_ptr_nonnull(tlog);
	}
	cae_config *cfg = cae_config_defaults(NULL);
	ck_assert_ptr_nonnull(cfg);
	cfg_set(cfg, "command_executor.state_dir", state);
	cfg_set(cfg, "github.token", git_token);
	cfg_set(cfg, "command_executor.clone.mirror_cache.enabled", cache ? "true" : "false");
	cfg_set(cfg, "command_executor.clone.auto_install_deps", "false");
	if (docker_mode) {
		cfg_set(cfg, "command_executor.backend", "docker");
		if (getenv("DOCKER_HOST") && *getenv("DOCKER_HOST"))
			cfg_set(cfg, "command_executor.docker_host", getenv("DOCKER_HOST"));
		cfg_set(cfg, "command_executor.docker.network.mode", "host");
		cfg_set(cfg, "command_executor.docker.resources.memory_limit", "1g");
	} else {
		cfg_set(cfg, "command_executor.backend", "local");
	}
	return cfg;
}

static cae_backend *backend(cae_config *cfg, cae_log *log)
{
	cae_backend *b = NULL;
	cae_error err = {0};
	ck_assert_msg(cae_backend_new_named(docker_mode ? "docker" : "local", cfg, log ? log : tlog,
					    &b, &err) == 0,
		      "%s", err.message);
	return b;
}

static void new_uuid(char *buf, size_t size)
{
	snprintf(buf, size, "caetest-%d-%d-%d-mirror", runner_pid, (int)getpid(), ++name_seq);
}

/* A task for py.git over authenticated HTTP (platform github: the token applies); pr: the
 * pull request feature -> main. */
static cae_task task(const char *uuid, bool pr)
{
	snprintf(repo_url, sizeof(repo_url), "%spy.git", git_http);
	cae_task t = {.uuid = (char *)uuid, .repo = repo_url, .platform = (char *)"github"};
	if (pr) {
		t.kind = CAE_TASK_PULL_REQUEST;
		t.branch = (char *)"feature";
		t.target_branch = (char *)"main";
	}
	return t;
}

static char *run(cae_backend *b, const char *uuid, const char *script)
{
	const char *argv[] = {"sh", "-c", script, NULL};
	cae_exec_request req = {.argv = argv, .timeout_ms = 120000, .cancel_fd = -1};
	cae_run_result r;
	cae_error err = {0};
	ck_assert_msg(cae_backend_exec(b, uuid, &req, &r, &err) == 0, "%s", err.message);
	ck_assert_msg(r.exit_code == 0, "%s: %s%s", script, r.out, r.err);
	char *out = strdup(r.out ? r.out : "");
	cae_run_result_clear(&r);
	return out;
}

/* What a task sees of its clone: commit, branch, shallowness, origin, refs, a full object
 * check, the content; for a pull request the diff against the target. */
#define CLONE_FACTS                                                                                \
	"git rev-parse HEAD; git rev-parse --abbrev-ref HEAD; "                                    \
	"git rev-parse --is-shallow-repository; git remote get-url origin; "                       \
	"git config --get-all remote.origin.fetch; "                                               \
	"git for-each-ref --format='%(refname) %(objectname)'; "                                   \
	"git fsck --no-progress >/dev/null && echo fsck-ok; wc -l < a.txt; "                       \
	"git status --porcelain; git diff --name-only origin/main...HEAD 2>/dev/null; true"

/* Prepares task t, returns its CLONE_FACTS and removes the environment. */
static char *prepare_facts(cae_backend *b, const cae_task *t)
{
	cae_env_info info;
	cae_error err = {0};
	ck_assert_msg(cae_backend_prepare(b, t, "python", NULL, &info, &err) == 0, "prepare: %s",
		      err.message);
	char *facts = run(b, t->uuid, CLONE_FACTS);
	if (docker_mode) {
		/* the copy of the mirror is gone once cloned */
		_cleanup_free_ char *left = run(b, t->uuid, "ls -a /workspace/tmp");
		ck_assert_msg(!strstr(left, ".cae-mirror"), "%s", left);
	}
	ck_assert_int_eq(cae_backend_cleanup(b, t->uuid, &err), 0);
	cae_env_info_clear(&info);
	return facts;
}

/* The one mirror in the state directory (path new), asserting there is exactly one. */
static char *the_mirror(void)
{
	_cleanup_free_ char *root = cae__path_join(state, "mirrors");
	DIR *d = opendir(root);
	ck_assert_msg(d != NULL, "no mirror cache at %s", root);
	char *found = NULL;
	struct dirent *e;
	while ((e = readdir(d))) {
		size_t n = strlen(e->d_name);
		if (n > 4 && strcmp(e->d_name + n - 4, ".git") == 0) {
			ck_assert_msg(found == NULL, "two mirrors");
			found = cae__path_join(root, e->d_name);
		}
	}
	closedir(d);
	ck_assert_msg(found != NULL, "no mirror in %s", root);
	return found;
}

/* The lock file beside mirror m (new). */
static char *lock_of(const char *m)
{
	char *l = NULL;
	ck_assert_int_ge(asprintf(&l, "%.*s.lock", (int)(strlen(m) - 4), m), 0);
	return l;
}

/* The facts of a clone without the cache, for pr or not (in a state directory of its own). */
static char *facts_without_cache(bool pr)
{
	cae_config *cfg = config(false);
	cae_backend *b = backend(cfg, NULL);
	char uuid[96];
	new_uuid(uuid, sizeof(uuid));
	cae_task t = task(uuid, pr);
	char *facts = prepare_facts(b, &t);
	_cleanup_free_ char *root = cae__path_join(state, "mirrors");
	ck_assert_msg(!cae__is_dir(root), "the cache was used though disabled");
	cae_backend_free(b);
	cae_config_free(cfg);
	return facts;
}

/* A commit on main of the served repository (through a clone pushed over git://). */
static void push_commit(const char *what)
{
	_cleanup_free_ char *w = tu_mkdtemp();
	tu_sh("set -e; " GIT " clone -q %spy.git %s/c && cd %s/c && echo %s >> a.txt && " GIT
	      " commit -qam %s && " GIT " push -q origin main && rm -rf %s",
	      git_daemon, w, w, what, what, w);
}

START_TEST(clone_through_the_cache_is_the_clone_without_it)
{
	for (int pr = 0; pr < 2; pr++) {
		_cleanup_free_ char *cold_ref = facts_without_cache(pr);
		cae_config *cfg = config(true);
		cae_backend *b = backend(cfg, NULL);
		char u1[96], u2[96];
		new_uuid(u1, sizeof(u1));
		new_uuid(u2, sizeof(u2));
		cae_task t1 = task(u1, pr), t2 = task(u2, pr);
		_cleanup_free_ char *cold = prepare_facts(b, &t1);
		_cleanup_free_ char *warm = prepare_facts(b, &t2);
		ck_assert_str_eq(cold, cold_ref);
		ck_assert_str_eq(warm, cold_ref);
		/* both read the mirror; only the first made it */
		ck_assert_int_eq(log_count("git.mirror_unused"), 0);
		ck_assert_int_eq(log_count("git.mirror_rebuild"), 0);
		/* the second found nothing new: one ls-remote, no fetch */
		ck_assert_int_eq(log_count("git.mirror_fetch"), pr + 1);
		ck_assert_int_eq(log_count("git.mirror_current"), pr + 1);
		/* docker: a small mirror goes through the prepare's helper stream, not the
		 * archive API */
		if (docker_mode) {
			ck_assert_int_eq(tu_lines_with(tlog_path, "\"through\":\"stream\""),
					 2 * (pr + 1));
			ck_assert_int_eq(tu_lines_with(tlog_path, "\"through\":\"archive\""), 0);
		}
		/* origin is the remote, not the mirror */
		ck_assert_ptr_nonnull(strstr(warm, repo_url));
		ck_assert_ptr_null(strstr(warm, "mirrors"));
		ck_assert_ptr_nonnull(strstr(warm, "fsck-ok"));
		ck_assert_ptr_nonnull(strstr(warm, pr ? "feature\n" : "main\n"));
		if (pr)
			ck_assert_ptr_nonnull(strstr(warm, "\nf.txt\n"));
		_cleanup_free_ char *m = the_mirror();
		/* the mirror names no remote and has no token anywhere in it */
		tu_sh("! git --git-dir=%s config --get-regexp '^remote\\.' && ! grep -rqF %s %s "
		      "&& ! grep -rqF %s %s/..",
		      m, git_token, state, git_token, m);
		cae_backend_free(b);
		cae_config_free(cfg);
	}
}
END_TEST

START_TEST(second_task_fetches_only_what_is_new)
{
	cae_config *cfg = config(true);
	cae_log *log = NULL;
	_cleanup_free_ char *logdir = tu_mkdtemp();
	_cleanup_free_ char *logpath = cae__path_join(logdir, "log.jsonl");
	int logfd = open(logpath, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	ck_assert_int_ge(logfd, 0);
	log = cae_log_new(logfd, CAE_LOG_DEBUG);
	ck_assert_ptr_nonnull(log);
	cae_backend *b = backend(cfg, log);
	char u1[96], u2[96];
	new_uuid(u1, sizeof(u1));
	new_uuid(u2, sizeof(u2));
	cae_task t1 = task(u1, false), t2 = task(u2, false);
	_cleanup_free_ char *first = prepare_facts(b, &t1);
	_cleanup_free_ char *m = the_mirror();
	/* a file of ours in the mirror: it survives only if the mirror is reused */
	tu_sh("echo keep > %s/cae-test-keep", m);
	push_commit("new1");
	_cleanup_free_ char *second = prepare_facts(b, &t2);
	ck_assert_str_ne(first, second);
	ck_assert_ptr_nonnull(strstr(second, "\n61\n")); /* a.txt has the new line */
	_cleanup_free_ char *again = the_mirror();
	ck_assert_str_eq(again, m);
	tu_sh("test -f %s/cae-test-keep", m);
	/* the new commit came into the mirror by a fetch, and main there is the remote's */
	tu_sh("test \"$(git --git-dir=%s rev-parse main)\" = \"$(git --git-dir=%s/py.git "
	      "rev-parse main)\"",
	      m, git_root);
	/* nothing new: the mirror is used as it is (no fetch) */
	tu_sh("test \"$(grep -c git.mirror_fetch %s)\" = 2 && ! grep -q git.mirror_current %s",
	      logpath, logpath);
	char u3[96], u4[96];
	new_uuid(u3, sizeof(u3));
	new_uuid(u4, sizeof(u4));
	cae_task t3 = task(u3, false), t4 = task(u4, false);
	_cleanup_free_ char *third = prepare_facts(b, &t3);
	ck_assert_str_eq(third, second);
	tu_sh("test \"$(grep -c git.mirror_fetch %s)\" = 2 && grep -q git.mirror_current %s",
	      logpath, logpath);
	/* a tag alone on the remote (no branch moved) is something new: fetched */
	tu_sh("git --git-dir=%s/py.git tag cae-test-tag main", git_root);
	_cleanup_free_ char *fourth = prepare_facts(b, &t4);
	ck_assert_int_eq(strncmp(fourth, second, 41), 0); /* the same HEAD (a tag may show) */
	tu_sh("test \"$(grep -c git.mirror_fetch %s)\" = 3 && "
	      "git --git-dir=%s rev-parse -q --verify refs/tags/cae-test-tag",
	      logpath, m);
	tu_sh("git --git-dir=%s/py.git tag -d cae-test-tag >/dev/null", git_root);
	cae_backend_free(b);
	cae_log_free(log);
	close(logfd);
	tu_sh("! grep -q git.mirror_rebuild %s && grep -q git.mirror_fetch %s && ! grep -qF %s %s",
	      logpath, logpath, git_token, logpath);
	cae_config_free(cfg);
}
END_TEST

/* Flips bytes inside the packed object of main:a.txt in mirror m: a clone must read it. */
static void corrupt_object(const char *m)
{
	tu_sh("set -e; m=%s; oid=$(git --git-dir=$m rev-parse main:a.txt); "
	      "for idx in $m/objects/pack/*.idx; do "
	      "  off=$(git show-index < $idx | awk -v o=$oid '$2 == o { print $1 }'); "
	      "  [ -n \"$off\" ] || continue; p=${idx%%.idx}.pack; chmod u+w $p; "
	      "  printf '\\377\\377\\377\\377\\377\\377\\377\\377' | "
	      "    dd of=$p bs=1 seek=$((off + 2)) conv=notrunc status=none; found=1; "
	      "done; test -n \"$found\"; "
	      "! git --git-dir=$m cat-file -p $oid >/dev/null 2>&1",
	      m);
}

START_TEST(corrupted_object_is_rebuilt)
{
	_cleanup_free_ char *cold_ref = facts_without_cache(false);
	cae_config *cfg = config(true);
	cae_backend *b = backend(cfg, NULL);
	char u1[96], u2[96];
	new_uuid(u1, sizeof(u1));
	new_uuid(u2, sizeof(u2));
	cae_task t1 = task(u1, false), t2 = task(u2, false);
	_cleanup_free_ char *first = prepare_facts(b, &t1);
	ck_assert_str_eq(first, cold_ref);
	_cleanup_free_ char *m = the_mirror();
	tu_sh("echo keep > %s/cae-test-keep", m);
	corrupt_object(m);
	_cleanup_free_ char *second = prepare_facts(b, &t2);
	ck_assert_str_eq(second, cold_ref);
	/* the clone that read the corrupt object failed, the mirror was made anew and the
	 * second clone read it */
	ck_assert_int_eq(log_count("git.mirror_rebuild"), 1);
	ck_assert_int_eq(log_count("git.mirror_unused"), 0);
	/* rebuilt, not trusted: our file is gone and the object reads again */
	tu_sh("test ! -e %s/cae-test-keep && git --git-dir=%s fsck --no-progress 2>&1", m, m);
	cae_backend_free(b);
	cae_config_free(cfg);
}
END_TEST

START_TEST(stale_locks_are_rebuilt)
{
	_cleanup_free_ char *cold_ref = facts_without_cache(true);
	cae_config *cfg = config(true);
	cae_backend *b = backend(cfg, NULL);
	const char *left[] = {"packed-refs.lock", "shallow.lock", "refs/heads/main.lock"};
	for (size_t i = 0; i <= ARRAY_SIZE(left); i++) {
		char u[96];
		new_uuid(u, sizeof(u));
		cae_task t = task(u, true);
		_cleanup_free_ char *facts = prepare_facts(b, &t);
		ck_assert_str_eq(facts, cold_ref);
		_cleanup_free_ char *m = the_mirror();
		ck_assert_int_eq(log_count("git.mirror_unused"), 0);
		ck_assert_int_eq(log_count("git.mirror_rebuild"), (int)i);
		if (i > 0) /* the lock file of the round before made it anew */
			tu_sh("test ! -e %s/cae-test-keep && test -z \"$(find %s -name '*.lock')\"",
			      m, m);
		if (i == ARRAY_SIZE(left))
			break;
		/* a git killed while writing left its lock file; cae's own lock is held by a
		 * process killed while holding it */
		tu_sh("echo keep > %s/cae-test-keep && : > %s/%s", m, m, left[i]);
		_cleanup_free_ char *lock = lock_of(m);
		int p[2];
		ck_assert_int_eq(pipe(p), 0);
		pid_t pid = fork();
		ck_assert_int_ge(pid, 0);
		if (pid == 0) {
			int fd = open(lock, O_RDWR);
			if (fd < 0 || flock(fd, LOCK_EX) < 0 || write(p[1], "x", 1) != 1)
				_exit(1);
			pause();
			_exit(0);
		}
		char c;
		ck_assert_int_eq(read(p[0], &c, 1), 1);
		close(p[0]);
		close(p[1]);
		kill(pid, SIGKILL);
		ck_assert_int_eq(waitpid(pid, NULL, 0), pid);
	}
	cae_backend_free(b);
	cae_config_free(cfg);
}
END_TEST

START_TEST(two_processes_clone_the_same_url_at_once)
{
	_cleanup_free_ char *cold_ref = facts_without_cache(true);
	cae_config *cfg = config(true);
	int go[2], res[2];
	ck_assert_int_eq(pipe(go), 0);
	ck_assert_int_eq(pipe(res), 0);
	pid_t pids[2];
	for (int i = 0; i < 2; i++) {
		pids[i] = fork();
		ck_assert_int_ge(pids[i], 0);
		if (pids[i] == 0) {
			close(go[1]);
			char c;
			/* both wait here until the parent lets them go together */
			if (read(go[0], &c, 1) != 1)
				_exit(3);
			cae_backend *b = backend(cfg, NULL);
			char u[96];
			new_uuid(u, sizeof(u));
			cae_task t = task(u, true);
			char *facts = prepare_facts(b, &t);
			bool same = strcmp(facts, cold_ref) == 0;
			if (write(res[1], same ? "1" : "0", 1) != 1)
				_exit(4);
			_exit(same ? 0 : 2);
		}
	}
	close(go[0]);
	ck_assert_int_eq(write(go[1], "gg", 2), 2);
	close(go[1]);
	for (int i = 0; i < 2; i++) {
		int st;
		ck_assert_int_eq(waitpid(pids[i], &st, 0), pids[i]);
		ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "task %d: status %d", i, st);
	}
	char got[3] = {0};
	ck_assert_int_eq(read(res[0], got, 2), 2);
	ck_assert_str_eq(got, "11");
	/* both read the one mirror, made once */
	ck_assert_int_eq(log_count("git.mirror_unused"), 0);
	ck_assert_int_eq(log_count("git.mirror_rebuild"), 0);
	_cleanup_free_ char *m = the_mirror();
	cae_config_free(cfg);
}
END_TEST

START_TEST(prune_removes_what_is_unused)
{
	cae_config *cfg = config(true);
	cae_backend *b = backend(cfg, NULL);
	char u[96];
	new_uuid(u, sizeof(u));
	cae_task t = task(u, false);
	_cleanup_free_ char *facts = prepare_facts(b, &t);
	_cleanup_free_ char *m = the_mirror();
	_cleanup_free_ char *lock = lock_of(m);
	int count = -1;
	cae_error err = {0};
	/* just used: kept */
	ck_assert_int_eq(cae__mirror_prune(cfg, 3600, false, NULL, &count, &err), 0);
	ck_assert_int_eq(count, 0);
	ck_assert(cae__is_dir(m));
	/* unused for eight days (longer than the default 168 hours), but in use right now: kept */
	struct timespec old[2] = {{.tv_sec = time(NULL) - 8 * 86400},
				  {.tv_sec = time(NULL) - 8 * 86400}};
	ck_assert_int_eq(utimensat(AT_FDCWD, lock, old, 0), 0);
	int fd = open(lock, O_RDWR);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(flock(fd, LOCK_SH), 0);
	ck_assert_int_eq(cae__mirror_prune(cfg, 3600, true, NULL, &count, &err), 0);
	ck_assert_int_eq(count, 0);
	ck_assert(cae__is_dir(m));
	close(fd);
	/* unused for eight days: the CLI removes it */
	char cmd[2048];
	snprintf(cmd, sizeof(cmd), "%s cache prune --state-dir %s", CAE_EXE, state);
	FILE *f = popen(cmd, "r");
	ck_assert_ptr_nonnull(f);
	char out[4096];
	size_t n = fread(out, 1, sizeof(out) - 1, f);
	out[n] = '\0';
	ck_assert_int_eq(pclose(f), 0);
	ck_assert_msg(strstr(out, git_http) && strstr(out, "removed 1 mirror\n"), "%s", out);
	ck_assert(!cae__is_dir(m));
	ck_assert_int_eq(access(lock, F_OK), -1);
	/* the next task makes it anew */
	new_uuid(u, sizeof(u));
	t = task(u, false);
	_cleanup_free_ char *again = prepare_facts(b, &t);
	ck_assert_str_eq(again, facts);
	_cleanup_free_ char *m2 = the_mirror();
	snprintf(cmd, sizeof(cmd), "%s cache prune --all --state-dir %s >/dev/null", CAE_EXE,
		 state);
	ck_assert_int_eq(system(cmd), 0);
	ck_assert(!cae__is_dir(m2));
	cae_backend_free(b);
	cae_config_free(cfg);
}
END_TEST

/* docker: a mirror larger than what the helper stream carries (32 MiB) reaches the
 * container through the archive API, and the clone from it is whole. */
START_TEST(large_mirror_through_the_archive_api)
{
	_cleanup_free_ char *w = tu_mkdtemp();
	tu_sh("set -e; rm -rf %s/big.git; " GIT " init -q --bare %s/big.git; cd %s; " GIT
	      " init -q -b main c; cd c; head -c 34000000 /dev/urandom > big.bin; " GIT
	      " add big.bin; " GIT " commit -qm big; " GIT " push -q %s/big.git main; "
	      "sha256sum big.bin | cut -c1-64 > %s/sum",
	      git_root, git_root, w, git_root, w);
	cae_config *cfg = config(true);
	cae_backend *b = backend(cfg, NULL);
	char uuid[96], url[600];
	new_uuid(uuid, sizeof(uuid));
	snprintf(url, sizeof(url), "%sbig.git", git_http);
	cae_task t = {.uuid = uuid, .repo = url, .platform = (char *)"github"};
	cae_env_info info;
	cae_error err = {0};
	ck_assert_msg(cae_backend_prepare(b, &t, "python", NULL, &info, &err) == 0, "prepare: %s",
		      err.message);
	_cleanup_free_ char *sum = run(b, uuid, "sha256sum big.bin | cut -c1-64");
	_cleanup_free_ char *want = NULL;
	_cleanup_free_ char *sumpath = cae__path_join(w, "sum");
	size_t len = 0;
	ck_assert_int_eq(cae__read_file(AT_FDCWD, sumpath, 4096, &want, &len), 0);
	ck_assert_str_eq(sum, want);
	_cleanup_free_ char *left = run(b, uuid, "ls -a /workspace/tmp");
	ck_assert_msg(!strstr(left, ".cae-mirror"), "%s", left);
	ck_assert_int_eq(tu_lines_with(tlog_path, "\"through\":\"archive\""), 1);
	ck_assert_int_eq(cae_backend_cleanup(b, uuid, &err), 0);
	cae_env_info_clear(&info);
	cae_backend_free(b);
	cae_config_free(cfg);
	tu_sh("rm -rf %s/big.git %s", git_root, w);
}
END_TEST

static Suite *make_suite(void)
{
	Suite *s = suite_create(docker_mode ? "mirror-docker" : "mirror-local");
	TCase *tc = tcase_create("mirror");
	tcase_set_timeout(tc, 600);
	tcase_add_unchecked_fixture(tc, gs_setup, gs_teardown);
	if (docker_mode)
		tcase_add_unchecked_fixture(tc, NULL, sweep);
	tcase_add_test(tc, clone_through_the_cache_is_the_clone_without_it);
	tcase_add_test(tc, corrupted_object_is_rebuilt);
	tcase_add_test(tc, stale_locks_are_rebuilt);
	tcase_add_test(tc, two_processes_clone_the_same_url_at_once);
	if (docker_mode)
		tcase_add_test(tc, large_mirror_through_the_archive_api);
	if (!docker_mode) {
		tcase_add_test(tc, second_task_fetches_only_what_is_new);
		tcase_add_test(tc, prune_removes_what_is_unused);
	}
	suite_add_tcase(s, tc);
	return s;
}

int main(int argc, char **argv)
{
	docker_mode = argc > 1 && strcmp(argv[1], "docker") == 0;
	dt_init();
	if (docker_mode) {
		/* fails loudly without an engine */
		cae_docker *d = NULL;
		cae_error err = {0};
		if (cae_docker_new(getenv("DOCKER_HOST"), &d, &err) < 0 ||
		    cae_docker_ping(d, 5000, &err) < 0) {
			fprintf(stderr, "no Docker engine answers (%s)\n", err.message);
			return EXIT_FAILURE;
		}
		cae_docker_free(d);
	}
	return tu_run(make_suite());
}
