/* Tests of the docker backend (src/backend/backend-docker.c) against a real engine: what
 * is particular to containers (images, limits, security options, the network, local
 * repositories as bundles, unfinished prepares, the socket warning, auto selection); what
 * every backend must do is tests/backend/test-conformance.c. Fails, loudly, when no engine
 * answers (scripts/docker-env.sh up). Repositories come from the loopback git server
 * (tests/gitserver.h); containers use the host network to reach it. */
#include "backend-test.h"
#include "dockertest.h"

#include "backend/backend-internal.h"
#include "backend/diskfs.h"
#include "backend/pkgcache.h"
#include "base/buf.h"
#include "base/fs.h"
#include "base/macro.h"
#include "base/timeutil.h"
#include "cae/backend.h"
#include "cae/config.h"
#include "cae/docker.h"
#include "cae/editor.h"
#include "cae/helper.h"
#include "cae/log.h"
#include "cae/policy.h"
#include "cae/prompt.h"
#include "cae/session.h"
#include "cae/worker.h"
#include "docker/docker-internal.h"
#include "runner/proctree.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <stdarg.h>
#include <signal.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

START_TEST(preparer_alive_or_not)
{
	char me[CAE_PREPARER_MAX];
	cae__preparer_label(me, sizeof(me));
	ck_assert(cae__preparer_alive(me, 0, 300));
	/* a process that ended: dead, however recent */
	int p[2];
	ck_assert_int_eq(pipe(p), 0);
	pid_t pid = fork();
	if (pid == 0) {
		char l[CAE_PREPARER_MAX];
		cae__preparer_label(l, sizeof(l));
		ssize_t k = write(p[1], l, strlen(l) + 1);
		_exit(k > 0 ? 0 : 1);
	}
	char child[CAE_PREPARER_MAX] = {0};
	ck_assert_int_gt(read(p[0], child, sizeof(child) - 1), 0);
	ck_assert_int_eq(waitpid(pid, NULL, 0), pid);
	close(p[0]);
	close(p[1]);
	ck_assert_str_ne(child, me);
	ck_assert(!cae__preparer_alive(child, (int64_t)time(NULL), 300));
	/* the same pid with another start time (a reused pid): dead */
	char reused[CAE_PREPARER_MAX + 8];
	snprintf(reused, sizeof(reused), "%.*s1", (int)(strrchr(me, '/') - me + 1), me);
	ck_assert(!cae__preparer_alive(reused, (int64_t)time(NULL), 300));
	/* another host or namespace: alive only while younger than the timeout */
	const char *far = "00000000-0000-0000-0000-000000000000/pid:[1]/42/42";
	ck_assert(cae__preparer_alive(far, (int64_t)time(NULL) - 10, 300));
	ck_assert(!cae__preparer_alive(far, (int64_t)time(NULL) - 400, 300));
	ck_assert(!cae__preparer_alive(NULL, 0, 300));
}
END_TEST

/* The docker backend (bt_docker_configure), the test token as the GitHub token. */
static cae_config *dcfg(void)
{
	cae_config *cfg = cae_config_defaults(NULL);
	ck_assert_ptr_nonnull(cfg);
	bt_docker_configure(cfg, "256");
	bt_cfg_set(cfg, "github.token", git_token);
	return cfg;
}

/* `cae mcp --task taskpath` with config, its output discarded; in[1] is its stdin (in[0] is
 * closed here). */
static pid_t spawn_mcp_task(const char *config, const char *taskpath, int in[2])
{
	ck_assert_int_eq(pipe2(in, O_CLOEXEC), 0);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		dup2(in[0], 0);
		int null = open("/dev/null", O_WRONLY);
		dup2(null, 1);
		dup2(null, 2);
		setenv("CAE_CONFIG", config, 1);
		execl(CAE_EXE, CAE_EXE, "mcp", "--task", taskpath, (char *)NULL);
		_exit(127);
	}
	close(in[0]);
	return pid;
}

static void prepare_ok(cae_backend *b, const cae_task *t, const char *env, cae_env_info *info)
{
	cae_error err = {0};
	int r = cae_backend_prepare(b, t, env, NULL, info, &err);
	ck_assert_msg(r == 0, "prepare: %s", err.message);
}

static bool container_exists(cae_docker *d, const char *uuid)
{
	char name[160];
	snprintf(name, sizeof(name), "coding-agent-exec-%s", uuid);
	json_t *j = NULL;
	cae_error err = {0};
	int r = cae_docker_container_inspect(d, name, &j, &err);
	json_decref(j);
	ck_assert_msg(r == 0 || r == -ENOENT, "%s", err.message);
	return r == 0;
}

struct steps {
	int seen[8];
	int last;
	bool ordered;
};

static void on_progress(void *ud, int step, int total, const char *msg)
{
	struct steps *s = ud;
	ck_assert_int_eq(total, 7);
	ck_assert(step >= 1 && step <= 7);
	if (step <= s->last)
		s->ordered = false;
	s->last = step;
	s->seen[step]++;
}

START_TEST(backend_prepare_pytest_cleanup)
{
	cae_config *cfg = dcfg();
	cae_backend *b = bt_backend("docker", cfg, NULL);
	cae_docker *d = client();
	char uuid[64];
	bt_task_uuid(uuid, sizeof(uuid), "caetest");
	cae_task t = bt_http_task(uuid);
	struct steps st = {.ordered = true};
	cae_prepare_options opts = {
	    .progress = on_progress, .progress_userdata = &st, .cancel_fd = -1};
	cae_env_info info;
	cae_error err = {0};
	ck_assert_msg(cae_backend_prepare(b, &t, "python", &opts, &info, &err) == 0, "%s",
		      err.message);
	ck_assert(st.ordered);
	for (int i = 1; i <= 7; i++)
		ck_assert_int_eq(st.seen[i], 1);
	ck_assert_str_eq(info.status, "ready");
	ck_assert_str_eq(info.backend, "docker");
	ck_assert_str_eq(info.task_uuid, uuid);
	ck_assert_str_eq(info.environment_name, "python");
	ck_assert_str_eq(info.workspace_path, "/workspace/project");
	ck_assert_uint_ge(strlen(info.container_id), 12);
	ck_assert(cae__parse_iso8601(info.created_at) > 0);

	/* labels and name, through the API */
	char name[160];
	snprintf(name, sizeof(name), "coding-agent-exec-%s", uuid);
	json_t *c = NULL;
	ck_assert_int_eq(cae_docker_container_inspect(d, name, &c, &err), 0);
	json_t *labels = json_object_get(json_object_get(c, "Config"), "Labels");
	ck_assert_str_eq(json_string_value(json_object_get(labels, "cae.task_uuid")), uuid);
	ck_assert_str_eq(json_string_value(json_object_get(labels, "cae.environment")), "python");
	ck_assert_str_eq(json_string_value(json_object_get(labels, "cae.created_at")),
			 info.created_at);
	ck_assert_str_eq(json_string_value(json_object_get(c, "Id")), info.container_id);
	json_t *mounts = json_deep_copy(json_object_get(c, "Mounts"));
	json_decref(c);

	cae_run_result r =
	    bt_exec(b, uuid, "python3 -m pytest -q -p no:cacheprovider 2>&1", 120000);
	ck_assert_msg(r.exit_code == 0, "pytest: %s", r.out);
	ck_assert_msg(strstr(r.out, "1 passed") != NULL, "%s", r.out);
	cae_run_result_clear(&r);
	/* the image builds native code (issue 23: no make, no C compiler): a C and a C++
	 * program built with make and run, as the agent (uid 1000) in the scratch directory,
	 * and Python's headers for C extensions are there */
	r = bt_exec(b, uuid,
		    "cd /workspace/tmp && printf '#include <stdio.h>\\nint main(void) { "
		    "puts(\"c ok\"); return 0; }\\n' > hello.c && printf '#include <iostream>\\n"
		    "int main() { std::cout << \"c++ ok\" << std::endl; }\\n' > hello.cc && "
		    "printf 'all: hello hellocc\\nhellocc: hello.cc\\n\\t$(CXX) -o $@ $<\\n' > "
		    "Makefile && make -s 2>&1 && ./hello && ./hellocc && "
		    "test -f \"$(python3 -c 'import sysconfig; "
		    "print(sysconfig.get_paths()[\"include\"])')/Python.h\"",
		    120000);
	ck_assert_msg(r.exit_code == 0 && strcmp(r.out, "c ok\nc++ ok\n") == 0, "make: %d %s%s",
		      r.exit_code, r.out, r.err);
	cae_run_result_clear(&r);
	/* every tool the command-executor section lists for this environment is there */
	cae_policy *pol = cae_policy_from_config(cfg, &err);
	cae_prompt_context pc = {.backend = "docker", .environment = "python"};
	_cleanup_free_ char *prompt = cae_prompt_command_executor_for(cfg, pol, &pc);
	cae_policy_free(pol);
	const char *tl = prompt ? strstr(prompt, "Installed in this environment: ") : NULL;
	ck_assert_msg(tl && strstr(tl, "`make`, `gcc`, `g++`"), "%s", prompt);
	cae_buf check;
	cae__buf_init(&check, 1 << 16);
	for (const char *q = strchr(tl, '`'); q && q < strchr(tl, '\n'); q = strchr(q, '`')) {
		const char *e = strchr(q + 1, '`');
		ck_assert_int_eq(cae__buf_printf(&check,
						 "command -v %.*s >/dev/null || echo %.*s; ",
						 (int)(e - q - 1), q + 1, (int)(e - q - 1), q + 1),
				 0);
		q = e + 1;
	}
	r = bt_exec(b, uuid, check.data, 60000);
	ck_assert_msg(r.exit_code == 0 && r.out[0] == '\0', "listed but missing: %s", r.out);
	cae_run_result_clear(&r);
	cae__buf_clear(&check);
	r = bt_exec(b, uuid, "pwd; git remote get-url origin; ls /workspace", 30000);
	char expect[1024];
	snprintf(expect, sizeof(expect), "/workspace/project\n%s\nproject\ntmp\n", bt_repo_url);
	ck_assert_str_eq(r.out, expect);
	cae_run_result_clear(&r);

	/* info and list agree, from a second backend (as a second process would) */
	cae_backend *b2 = bt_backend("docker", cfg, NULL);
	cae_env_info i2;
	ck_assert_int_eq(cae_backend_info(b2, uuid, &i2, &err), 0);
	ck_assert_str_eq(i2.container_id, info.container_id);
	ck_assert_str_eq(i2.status, "ready");
	ck_assert_str_eq(i2.environment_name, "python");
	cae_env_info_clear(&i2);
	json_t *list = NULL;
	ck_assert_int_eq(cae_backend_list(b2, &list, &err), 0);
	bool found = false;
	size_t i;
	json_t *e;
	json_array_foreach(list, i, e)
	{
		if (strcmp(json_string_value(json_object_get(e, "task_uuid")), uuid) == 0)
			found = true;
	}
	ck_assert(found);
	json_decref(list);

	/* cleanup leaves no container, volume or network */
	ck_assert_msg(cae_backend_cleanup(b2, uuid, &err) == 0, "%s", err.message);
	ck_assert(!container_exists(d, uuid));
	json_t *vols = NULL;
	ck_assert_int_ge(cae_docker_call(d, "GET", "/volumes", NULL, &vols, &err), 0);
	json_t *m;
	json_array_foreach(mounts, i, m)
	{
		const char *vn = json_string_value(json_object_get(m, "Name"));
		size_t k;
		json_t *v;
		json_array_foreach(json_object_get(vols, "Volumes"), k, v)
		{
			ck_assert(!vn ||
				  strcmp(vn, json_string_value(json_object_get(v, "Name"))) != 0);
		}
	}
	json_decref(vols);
	json_decref(mounts);
	char path[256];
	snprintf(path, sizeof(path), "/networks/%s", name);
	ck_assert_int_eq(cae_docker_call(d, "GET", path, NULL, NULL, &err), -ENOENT);
	ck_assert_int_eq(cae_backend_info(b2, uuid, &i2, &err), -ENOENT);
	/* cleaning up again is fine */
	ck_assert_int_eq(cae_backend_cleanup(b, uuid, &err), 0);
	/* exec now: a clear error */
	const char *argv[] = {"true", NULL};
	cae_exec_request req = {.argv = argv, .cancel_fd = -1};
	ck_assert_int_eq(cae_backend_exec(b, uuid, &req, &r, &err), -ENOENT);
	ck_assert_msg(strstr(err.message, "environment gone") != NULL, "%s", err.message);

	cae_env_info_clear(&info);
	cae_backend_free(b2);
	cae_backend_free(b);
	cae_docker_free(d);
	cae_config_free(cfg);
}
END_TEST

/* A failed prepare names its step, and leaves no container behind. */
static void expect_prepare_failure(cae_config *cfg, cae_task *t, const char *env, const char *step,
				   const char *needle)
{
	cae_backend *b = bt_backend("docker", cfg, NULL);
	cae_docker *d = client();
	cae_env_info info;
	cae_error err = {0};
	int r = cae_backend_prepare(b, t, env, NULL, &info, &err);
	ck_assert_msg(r < 0, "prepare succeeded");
	char prefix[64];
	snprintf(prefix, sizeof(prefix), "%s: ", step);
	ck_assert_msg(strncmp(err.message, prefix, strlen(prefix)) == 0, "%s", err.message);
	ck_assert_msg(strstr(err.message, needle) != NULL, "%s", err.message);
	ck_assert_msg(strstr(err.message, git_token) == NULL, "token in error: %s", err.message);
	ck_assert(!container_exists(d, t->uuid));
	cae_docker_free(d);
	cae_backend_free(b);
}

START_TEST(backend_missing_image)
{
	cae_config *cfg = dcfg();
	bt_cfg_set(
	    cfg, "command_executor.environments",
	    "python=coding-agent-executor-python:latest,ghost=coding-agent-executor-ghost:latest");
	char uuid[64];
	bt_task_uuid(uuid, sizeof(uuid), "caetest");
	cae_task t = bt_http_task(uuid);
	expect_prepare_failure(cfg, &t, "ghost", "create", "coding-agent-executor-ghost");
	/* it says what to do (issue 23: a raw Engine 404 before): the image, the environment,
	 * and the command that builds a cae image; not found, a user's to fix */
	bt_cfg_set(cfg, "command_executor.environments",
		   "python=coding-agent-executor-python:latest,"
		   "go=coding-agent-executor-go:cae-test-no-such-tag");
	expect_prepare_failure(
	    cfg, &t, "go", "create",
	    "image coding-agent-executor-go:cae-test-no-such-tag of environment "
	    "go is not on the Docker engine: build it with `cae images build go`");
	cae_backend *b = bt_backend("docker", cfg, NULL);
	cae_env_info info;
	cae_error err = {0};
	ck_assert_int_eq(cae_backend_prepare(b, &t, "go", NULL, &info, &err), -ENOENT);
	ck_assert_str_eq(cae_error_kind(err.code), "NOT_FOUND");
	cae_backend_free(b);
	cae_config_free(cfg);
}
END_TEST

START_TEST(backend_unreachable_repo)
{
	cae_config *cfg = dcfg();
	char uuid[64];
	bt_task_uuid(uuid, sizeof(uuid), "caetest");
	cae_task t = {.uuid = uuid, .repo = (char *)"http://127.0.0.1:9/nope.git"};
	expect_prepare_failure(cfg, &t, "python", "clone", "127.0.0.1");
	cae_config_free(cfg);
}
END_TEST

START_TEST(backend_wrong_token)
{
	cae_config *cfg = dcfg();
	bt_cfg_set(cfg, "github.token", "wrong-token-0123456789");
	char uuid[64];
	bt_task_uuid(uuid, sizeof(uuid), "caetest");
	cae_task t = bt_http_task(uuid);
	expect_prepare_failure(cfg, &t, "python", "clone", "uthentication");
	cae_config_free(cfg);
}
END_TEST

START_TEST(backend_pull_request_diff_in_shallow_clone)
{
	cae_config *cfg = dcfg();
	cae_backend *b = bt_backend("docker", cfg, NULL);
	char uuid[64];
	bt_task_uuid(uuid, sizeof(uuid), "caetest");
	char url[512];
	snprintf(url, sizeof(url), "%spy.git", git_daemon);
	cae_task t = {.uuid = uuid,
		      .repo = url,
		      .kind = CAE_TASK_PULL_REQUEST,
		      .branch = (char *)"feature",
		      .target_branch = (char *)"main"};
	cae_env_info info;
	prepare_ok(b, &t, "python", &info);
	cae_run_result r = bt_exec(b, uuid,
				   "git rev-parse --abbrev-ref HEAD; "
				   "git diff --name-only origin/main...HEAD; "
				   "git rev-parse --is-shallow-repository",
				   30000);
	ck_assert_str_eq(r.out, "feature\nf.txt\ntrue\n");
	cae_run_result_clear(&r);
	cae_error err = {0};
	ck_assert_int_eq(cae_backend_cleanup(b, uuid, &err), 0);
	cae_env_info_clear(&info);
	cae_backend_free(b);
	cae_config_free(cfg);
}
END_TEST

START_TEST(backend_local_path_repository)
{
	cae_config *cfg = dcfg();
	bt_cfg_set(cfg, "command_executor.docker.network.mode", "none");
	cae_backend *b = bt_backend("docker", cfg, NULL);
	char uuid[64];
	bt_task_uuid(uuid, sizeof(uuid), "caetest");
	/* a local clone of py.git: the container cannot see this path, nor any network */
	char *work = tu_mkdtemp();
	shf("git clone -q %s/py.git %s/repo && git -C %s/repo branch -q feature origin/feature",
	    git_root, work, work);
	char repo[600];
	snprintf(repo, sizeof(repo), "%s/repo", work);
	cae_task t = {.uuid = uuid,
		      .repo = repo,
		      .kind = CAE_TASK_PULL_REQUEST,
		      .branch = (char *)"feature",
		      .target_branch = (char *)"main"};
	cae_env_info info;
	prepare_ok(b, &t, "python", &info);
	cae_run_result r =
	    bt_exec(b, uuid,
		    "git rev-parse --abbrev-ref HEAD; "
		    "git diff --name-only origin/main...HEAD; "
		    "git rev-parse --is-shallow-repository; git remote get-url origin; "
		    "ls /workspace/tmp",
		    30000);
	ck_assert_str_eq(r.out, "feature\nf.txt\ntrue\nfile:///workspace/tmp/.cae-src.git\n");
	cae_run_result_clear(&r);
	cae_error err = {0};
	ck_assert_int_eq(cae_backend_cleanup(b, uuid, &err), 0);
	cae_env_info_clear(&info);
	/* a path that does not exist: the clone step says so, nothing is left */
	cae_backend_free(b);
	snprintf(repo, sizeof(repo), "%s/nope", work);
	cae_task t2 = {.uuid = uuid, .repo = repo};
	expect_prepare_failure(cfg, &t2, "python", "clone", "repository not found");
	cae__rm_rf(work);
	free(work);
	cae_config_free(cfg);
}
END_TEST

static bool file_contains(const char *path, const char *needle)
{
	char *text = NULL;
	size_t len = 0;
	ck_assert_int_eq(cae__read_file(AT_FDCWD, path, 64 * 1024 * 1024, &text, &len), 0);
	bool found = memmem(text, len, needle, strlen(needle)) != NULL;
	free(text);
	return found;
}

START_TEST(backend_token_appears_nowhere)
{
	cae_config *cfg = dcfg();
	char *dir = tu_mkdtemp();
	char *logpath = cae__path_join(dir, "log.jsonl");
	int logfd = open(logpath, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	ck_assert_int_ge(logfd, 0);
	cae_log *log = cae_log_new(logfd, CAE_LOG_DEBUG);
	cae_backend *b = bt_backend("docker", cfg, log);
	cae_docker *d = client();
	char uuid[64];
	bt_task_uuid(uuid, sizeof(uuid), "caetest");
	cae_task t = bt_http_task(uuid);
	cae_env_info info;
	prepare_ok(b, &t, "python", &info);
	json_t *ij = cae_env_info_to_json(&info);
	_cleanup_free_ char *infotext = json_dumps(ij, 0);
	json_decref(ij);
	ck_assert(strstr(infotext, git_token) == NULL);

	/* .git/config and the whole container filesystem (the pattern is built in the shell so
	 * that it is not in any command line) */
	char script[1024];
	size_t half = strlen(git_token) / 2;
	snprintf(script, sizeof(script),
		 "a='%.*s'; b='%s'; cat .git/config; "
		 "grep -rIl --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev \"$a$b\" / "
		 "2>/dev/null; echo searched; "
		 "(env; cat /proc/[0-9]*/environ) 2>/dev/null | tr '\\0' '\\n' | grep -c \"$a$b\"; "
		 "echo env-searched",
		 (int)half, git_token, git_token + half);
	cae_run_result r = bt_exec(b, uuid, script, 120000);
	/* no command's environment holds it either */
	ck_assert_msg(strstr(r.out, "\n0\nenv-searched\n") != NULL, "%s", r.out);
	ck_assert_msg(strstr(r.out, git_token) == NULL, "token found: %s", r.out);
	ck_assert_msg(strstr(r.out, "searched\n") != NULL, "%s", r.out);
	ck_assert_msg(strstr(r.out, "url = ") != NULL, "%s", r.out);
	ck_assert(strstr(r.err, git_token) == NULL);
	cae_run_result_clear(&r);

	/* docker inspect (env, args, labels), the container's logs */
	char name[160];
	snprintf(name, sizeof(name), "coding-agent-exec-%s", uuid);
	json_t *c = NULL;
	cae_error err = {0};
	ck_assert_int_eq(cae_docker_container_inspect(d, name, &c, &err), 0);
	_cleanup_free_ char *ctext = json_dumps(c, 0);
	ck_assert_msg(strstr(ctext, git_token) == NULL, "token in inspect");
	/* exec inspects of everything that ran in it */
	size_t i;
	json_t *eid;
	json_array_foreach(json_object_get(c, "ExecIDs"), i, eid)
	{
		char path[256];
		snprintf(path, sizeof(path), "/exec/%s/json", json_string_value(eid));
		json_t *x = NULL;
		if (cae_docker_call(d, "GET", path, NULL, &x, &err) >= 0) {
			_cleanup_free_ char *xt = json_dumps(x, 0);
			ck_assert_msg(strstr(xt, git_token) == NULL, "token in exec inspect");
		}
		json_decref(x);
	}
	json_decref(c);
	char lpath[256];
	snprintf(lpath, sizeof(lpath), "/containers/%s/logs?stdout=1&stderr=1", name);
	char *logs = NULL;
	size_t loglen = 0;
	ck_assert_int_ge(cae__docker_call_raw(d, "GET", lpath, &logs, &loglen, &err), 0);
	ck_assert(memmem(logs, loglen, git_token, strlen(git_token)) == NULL);
	free(logs);

	ck_assert_int_eq(cae_backend_cleanup(b, uuid, &err), 0);
	cae_backend_free(b);
	cae_log_free(log);
	close(logfd);
	ck_assert(!file_contains(logpath, git_token));
	ck_assert(file_contains(logpath, "environment.ready"));
	cae__rm_rf(dir);
	free(dir);
	free(logpath);
	cae_env_info_clear(&info);
	cae_docker_free(d);
	cae_config_free(cfg);
}
END_TEST

START_TEST(backend_security_and_limits)
{
	cae_config *cfg = dcfg();
	bt_cfg_set(cfg, "command_executor.docker.resources.disk_limit", "64m");
	cae_backend *b = bt_backend("docker", cfg, NULL);
	cae_docker *d = client();
	char uuid[64];
	bt_task_uuid(uuid, sizeof(uuid), "caetest");
	cae_task t = bt_http_task(uuid);
	cae_env_info info;
	prepare_ok(b, &t, "python", &info);
	cae_run_result r =
	    bt_exec(b, uuid,
		    "id -u; grep -E '^(CapEff|CapPrm|CapBnd|NoNewPrivs)' /proc/self/status", 30000);
	ck_assert_str_eq(r.out, "1000\nCapPrm:\t0000000000000000\nCapEff:\t0000000000000000\n"
				"CapBnd:\t0000000000000000\nNoNewPrivs:\t1\n");
	cae_run_result_clear(&r);
	/* PID 1 is cae-helper --init; it and its directory are root's and read-only to
	 * commands */
	r = bt_exec(b, uuid,
		    "tr '\\0' ' ' < /proc/1/cmdline; echo; stat -c '%u %a' /.cae /.cae/cae-helper; "
		    "rm -f /.cae/cae-helper 2>/dev/null || echo kept",
		    30000);
	ck_assert_str_eq(r.out, "/.cae/cae-helper --init --lifetime 3600 \n0 755\n0 755\nkept\n");
	cae_run_result_clear(&r);
	/* a zombie a command leaves (a child its exec'd parent never waits for) is reaped by
	 * the time the command is over */
	r = bt_exec(b, uuid, "sh -c 'sleep 0 & exec sleep 0.3'", 30000);
	cae_run_result_clear(&r);
	r = bt_exec(b, uuid, "ps -eo stat= | grep -c Z || true", 30000);
	ck_assert_str_eq(r.out, "0\n");
	cae_run_result_clear(&r);

	char name[160];
	snprintf(name, sizeof(name), "coding-agent-exec-%s", uuid);
	json_t *c = NULL;
	cae_error err = {0};
	ck_assert_int_eq(cae_docker_container_inspect(d, name, &c, &err), 0);
	json_t *hc = json_object_get(c, "HostConfig");
	ck_assert_str_eq(json_string_value(json_array_get(json_object_get(hc, "CapDrop"), 0)),
			 "ALL");
	ck_assert_str_eq(json_string_value(json_array_get(json_object_get(hc, "SecurityOpt"), 0)),
			 "no-new-privileges");
	ck_assert_int_eq(json_integer_value(json_object_get(hc, "PidsLimit")), 256);
	ck_assert_int_eq(json_integer_value(json_object_get(hc, "Memory")), 1 << 30);
	ck_assert_int_eq(json_integer_value(json_object_get(hc, "MemorySwap")), 1 << 30);
	ck_assert_int_eq(json_integer_value(json_object_get(hc, "NanoCpus")), 1000000000);
	ck_assert_str_eq(json_string_value(json_object_get(hc, "NetworkMode")), "host");
	/* no host mount, but the workspace's own file system where it bounds the disk */
	const char *dm =
	    json_string_value(json_object_get(json_object_get(info.limits, "disk"), "mechanism"));
	bool loopfs = dm && strcmp(dm, "loopfs") == 0;
	_cleanup_free_ char *disk_dir = NULL;
	ck_assert_int_ge(
	    asprintf(&disk_dir, "%s/docker-disk/%s", cfg->command_executor.state_dir, uuid), 0);
	ck_assert_int_eq(json_array_size(json_object_get(hc, "Binds")), 0);
	ck_assert_int_eq(json_array_size(json_object_get(c, "Mounts")), loopfs ? 1 : 0);
	if (loopfs) {
		char src[4200];
		snprintf(src, sizeof(src), "%s/workspace", disk_dir);
		json_t *m = json_array_get(json_object_get(hc, "Mounts"), 0);
		ck_assert_str_eq(json_string_value(json_object_get(m, "Source")), src);
		ck_assert_str_eq(json_string_value(json_object_get(m, "Target")), "/workspace");
	}
	/* no Docker init: cae-helper is PID 1 */
	ck_assert(!json_is_true(json_object_get(hc, "Init")));
	ck_assert_str_eq(json_string_value(json_object_get(json_object_get(c, "Config"), "User")),
			 "1000:1000");
	json_decref(c);
	/* the disk limit: applied, or a warning says why not */
	bool disk_warning = false;
	size_t i;
	json_t *w;
	json_array_foreach(info.warnings, i, w)
	{
		if (strstr(json_string_value(w), "disk limit"))
			disk_warning = true;
	}
	json_t *dinfo = NULL;
	ck_assert_int_eq(cae_docker_info(d, &dinfo, &err), 0);
	_cleanup_free_ char *ds = json_dumps(json_object_get(dinfo, "DriverStatus"), 0);
	bool xfs = strstr(ds, "xfs") != NULL;
	json_decref(dinfo);
	/* ... and the result says what bounds the disk: here (root, the engine on a unix
	 * socket, overlay2 on ext4) the workspace's own file system */
	bool local_root = geteuid() == 0 && !(getenv("DOCKER_HOST") && *getenv("DOCKER_HOST"));
	ck_assert_str_eq(dm ? dm : "(no limits.disk)", xfs	    ? "storage_opt"
						       : local_root ? "loopfs"
								    : "none");
	ck_assert(disk_warning == (strcmp(dm, "none") == 0));
	if (loopfs) {
		/* past disk_limit (64m), fallocate (KEEP_SIZE too) and writes are ENOSPC in the
		 * container, and the host's disk holds at most the image */
		r = bt_exec(
		    b, uuid,
		    "cd /workspace/project && python3 -c 'import ctypes, os\n"
		    "l = ctypes.CDLL(None, use_errno=True)\n"
		    "fd = os.open(\"one\", os.O_CREAT | os.O_WRONLY)\n"
		    "r = l.fallocate(fd, 1, ctypes.c_longlong(0), ctypes.c_longlong(700 << 20))\n"
		    "print(\"keep\", r, ctypes.get_errno())'; rm -f one; "
		    "for i in 1 2 3; do head -c 40000000 /dev/zero > w$i 2>/dev/null; "
		    "echo w$i=$?; done",
		    60000);
		ck_assert_msg(strcmp(r.out, "keep -1 28\nw1=0\nw2=1\nw3=1\n") == 0, "%s%s", r.out,
			      r.err);
		cae_run_result_clear(&r);
		tu_sh("[ $(du -sxB1 %s | cut -f1) -le $((66 << 20)) ]", disk_dir);
	}

	ck_assert_int_eq(cae_backend_cleanup(b, uuid, &err), 0);
	/* nothing of the workspace's file system is left: no mount, no loop device, no image */
	tu_sh("for i in $(seq 100); do grep -qs '%s/' /sys/block/loop*/loop/backing_file || "
	      "break; sleep 0.1; done; ! grep '%s/' /proc/self/mountinfo "
	      "/sys/block/loop*/loop/backing_file && [ ! -e '%s' ]",
	      disk_dir, disk_dir, disk_dir);
	cae_env_info_clear(&info);
	cae_docker_free(d);
	cae_backend_free(b);
	cae_config_free(cfg);
}
END_TEST

START_TEST(backend_network_none_and_socket_warning)
{
	cae_config *cfg = dcfg();
	bt_cfg_set(cfg, "command_executor.docker.network.mode", "none");
	cae_backend *b = bt_backend("docker", cfg, NULL);
	cae_docker *d = client();
	char uuid[64];
	bt_task_uuid(uuid, sizeof(uuid), "caetest");
	/* no network: the clone cannot reach the server, and the failure says so */
	cae_task t = bt_http_task(uuid);
	cae_env_info info;
	cae_error err = {0};
	ck_assert_int_lt(cae_backend_prepare(b, &t, "python", NULL, &info, &err), 0);
	ck_assert_msg(strncmp(err.message, "clone: ", 7) == 0, "%s", err.message);
	ck_assert(!container_exists(d, uuid));
	cae_backend_free(b);

	/* from a local repository it works; the container has loopback only. The Docker socket
	 * is mounted only when configured, and then with a warning. */
	bt_cfg_set(cfg, "command_executor.docker.mount_docker_socket", "true");
	b = bt_backend("docker", cfg, NULL);
	char *work = tu_mkdtemp();
	shf("git clone -q %s/py.git %s/repo", git_root, work);
	char repo[600];
	snprintf(repo, sizeof(repo), "%s/repo", work);
	cae_task t2 = {.uuid = uuid, .repo = repo};
	prepare_ok(b, &t2, "python", &info);
	bool warned = false;
	size_t i;
	json_t *w;
	json_array_foreach(info.warnings, i, w)
	{
		warned |= strstr(json_string_value(w), "Docker socket") != NULL;
	}
	ck_assert(warned);
	cae_run_result r =
	    bt_exec(b, uuid, "ls /sys/class/net; test -S /var/run/docker.sock && echo sock", 30000);
	ck_assert_str_eq(r.out, "lo\nsock\n");
	cae_run_result_clear(&r);
	char name[160];
	snprintf(name, sizeof(name), "coding-agent-exec-%s", uuid);
	json_t *c = NULL;
	ck_assert_int_eq(cae_docker_container_inspect(d, name, &c, &err), 0);
	json_t *binds = json_object_get(json_object_get(c, "HostConfig"), "Binds");
	ck_assert_uint_eq(json_array_size(binds), 1);
	ck_assert(strstr(json_string_value(json_array_get(binds, 0)), ":/var/run/docker.sock"));
	json_decref(c);
	ck_assert_int_eq(cae_backend_cleanup(b, uuid, &err), 0);
	cae_env_info_clear(&info);
	cae__rm_rf(work);
	free(work);
	cae_docker_free(d);
	cae_backend_free(b);
	cae_config_free(cfg);
}
END_TEST

START_TEST(backend_fork_bomb_held)
{
	cae_config *cfg = dcfg();
	bt_cfg_set(cfg, "command_executor.docker.resources.pids_limit", "64");
	cae_backend *b = bt_backend("docker", cfg, NULL);
	char uuid[64];
	bt_task_uuid(uuid, sizeof(uuid), "caetest");
	cae_task t = bt_http_task(uuid);
	cae_env_info info;
	prepare_ok(b, &t, "python", &info);
	/* a bounded burst first: forks fail with EAGAIN before 64 processes exist */
	static const char burst[] =
	    "python3 - <<'EOF'\n"
	    "import errno, os, signal\n"
	    "pids, err = [], None\n"
	    "for i in range(200):\n"
	    "    try:\n"
	    "        pid = os.fork()\n"
	    "    except OSError as e:\n"
	    "        err = e.errno\n"
	    "        break\n"
	    "    if pid == 0:\n"
	    "        signal.pause()\n"
	    "        os._exit(0)\n"
	    "    pids.append(pid)\n"
	    "for p in pids:\n"
	    "    os.kill(p, 9)\n"
	    "    os.waitpid(p, 0)\n"
	    "mx = None\n"
	    "for f in ('/sys/fs/cgroup/pids/pids.max', '/sys/fs/cgroup/pids.max'):\n"
	    "    if os.path.exists(f):\n"
	    "        mx = open(f).read().strip()\n"
	    "print(len(pids), err == errno.EAGAIN, mx)\n"
	    "EOF\n";
	cae_run_result r = bt_exec(b, uuid, burst, 60000);
	int forked = 0;
	char again[8] = "", mx[16] = "";
	ck_assert_msg(sscanf(r.out, "%d %7s %15s", &forked, again, mx) == 3, "%s%s", r.out, r.err);
	ck_assert_int_lt(forked, 64);
	ck_assert_int_gt(forked, 32);
	ck_assert_str_eq(again, "True");
	ck_assert_str_eq(mx, "64");
	cae_run_result_clear(&r);
	/* the real thing, with a timeout: the manager gets its result and stays usable */
	int64_t t0 = cae__now_ms();
	r = bt_exec(b, uuid, "b() { b | b & }; b; sleep 100", 5000);
	int64_t took = cae__now_ms() - t0;
	ck_assert_msg(took < 60000, "took %lld ms", (long long)took);
	cae_run_result_clear(&r);
	r = bt_exec(b, uuid, "echo alive; cat calc.py | head -1", 60000);
	ck_assert_str_eq(r.out, "alive\ndef add(a, b):\n");
	cae_run_result_clear(&r);
	r = bt_exec(b, uuid, "ls /proc | grep -c '^[0-9]'", 60000);
	ck_assert_int_lt(strtol(r.out, NULL, 10), 10);
	cae_run_result_clear(&r);
	cae_error err = {0};
	ck_assert_int_eq(cae_backend_cleanup(b, uuid, &err), 0);
	cae_env_info_clear(&info);
	cae_backend_free(b);
	cae_config_free(cfg);
}
END_TEST

START_TEST(backend_oom_is_137)
{
	cae_config *cfg = dcfg();
	bt_cfg_set(cfg, "command_executor.docker.resources.memory_limit", "96m");
	cae_backend *b = bt_backend("docker", cfg, NULL);
	char uuid[64];
	bt_task_uuid(uuid, sizeof(uuid), "caetest");
	cae_task t = bt_http_task(uuid);
	cae_env_info info;
	prepare_ok(b, &t, "python", &info);
	cae_run_result r = bt_exec(b, uuid, "python3 -c \"a = b'x' * (512 * 1024 * 1024)\"", 60000);
	ck_assert_int_eq(r.exit_code, 137);
	ck_assert(!r.timed_out);
	cae_run_result_clear(&r);
	/* the environment survives its command's OOM kill */
	r = bt_exec(b, uuid, "echo fine", 30000);
	ck_assert_str_eq(r.out, "fine\n");
	cae_run_result_clear(&r);
	cae_error err = {0};
	ck_assert_int_eq(cae_backend_cleanup(b, uuid, &err), 0);
	cae_env_info_clear(&info);
	cae_backend_free(b);
	cae_config_free(cfg);
}
END_TEST

START_TEST(backend_timeout_kills_in_container)
{
	cae_config *cfg = dcfg();
	cae_backend *b = bt_backend("docker", cfg, NULL);
	cae_docker *d = client();
	char uuid[64];
	bt_task_uuid(uuid, sizeof(uuid), "caetest");
	cae_task t = bt_http_task(uuid);
	cae_env_info info;
	prepare_ok(b, &t, "python", &info);
	cae_run_result r = bt_exec(b, uuid, "sleep 1000", 2000);
	ck_assert(r.timed_out);
	cae_run_result_clear(&r);
	char *top = top_text(d, info.container_id);
	ck_assert_msg(strstr(top, "sleep 1000") == NULL, "left behind: %s", top);
	free(top);
	/* relative and absolute working directories; outside the workspace is refused */
	const char *argv[] = {"pwd", NULL};
	cae_exec_request req = {.argv = argv, .cwd = "..\\tmp", .cancel_fd = -1};
	cae_error err = {0};
	ck_assert_int_eq(cae_backend_exec(b, uuid, &req, &r, &err), 0);
	ck_assert_str_eq(r.out, "/workspace/tmp\n");
	cae_run_result_clear(&r);
	req.cwd = "/etc";
	ck_assert_int_eq(cae_backend_exec(b, uuid, &req, &r, &err), -ENOTDIR);
	req.cwd = "../../etc";
	ck_assert_int_eq(cae_backend_exec(b, uuid, &req, &r, &err), -ENOTDIR);
	req.cwd = "nope";
	ck_assert_int_eq(cae_backend_exec(b, uuid, &req, &r, &err), -ENOTDIR);
	const char *nf[] = {"no-such-tool", NULL};
	cae_exec_request rq2 = {.argv = nf, .cancel_fd = -1};
	ck_assert_int_eq(cae_backend_exec(b, uuid, &rq2, &r, &err), -ENOENT);
	ck_assert_msg(strstr(err.message, "no-such-tool") != NULL, "%s", err.message);
	ck_assert_int_eq(cae_backend_cleanup(b, uuid, &err), 0);
	cae_env_info_clear(&info);
	cae_docker_free(d);
	cae_backend_free(b);
	cae_config_free(cfg);
}
END_TEST

START_TEST(backend_environment_gone)
{
	cae_config *cfg = dcfg();
	cae_backend *b = bt_backend("docker", cfg, NULL);
	cae_docker *d = client();
	char uuid[64];
	bt_task_uuid(uuid, sizeof(uuid), "caetest");
	cae_task t = bt_http_task(uuid);
	cae_env_info info;
	prepare_ok(b, &t, "python", &info);
	/* removed behind the manager's back */
	cae_error err = {0};
	ck_assert_int_eq(cae_docker_container_remove(d, info.container_id, true, true, &err), 0);
	const char *argv[] = {"true", NULL};
	cae_exec_request req = {.argv = argv, .cancel_fd = -1};
	cae_run_result r;
	ck_assert_int_eq(cae_backend_exec(b, uuid, &req, &r, &err), -ENOENT);
	char expect[256];
	snprintf(expect, sizeof(expect),
		 "environment gone: container coding-agent-exec-%s no longer exists", uuid);
	ck_assert_str_eq(err.message, expect);
	/* stopped behind its back: not ready */
	cae_env_info i2;
	prepare_ok(b, &t, "python", &i2);
	ck_assert_int_eq(cae_docker_container_stop(d, i2.container_id, 1, &err), 0);
	ck_assert_int_eq(cae_backend_exec(b, uuid, &req, &r, &err), -EAGAIN);
	ck_assert_msg(strstr(err.message, "not running") != NULL, "%s", err.message);
	cae_env_info_clear(&i2);
	ck_assert_int_eq(cae_backend_info(b, uuid, &i2, &err), 0);
	ck_assert_str_eq(i2.status, "exited");
	cae_env_info_clear(&i2);
	ck_assert_int_eq(cae_backend_cleanup(b, uuid, &err), 0);
	cae_env_info_clear(&info);
	cae_docker_free(d);
	cae_backend_free(b);
	cae_config_free(cfg);
}
END_TEST

/* This test run's instance (bt_instance's; main exports it as CAE_INSTANCE for the cae
 * processes the tests start). */
static const char *instance(void)
{
	static char inst[64];
	snprintf(inst, sizeof(inst), "caetest-%d", bt_runner_pid);
	return inst;
}

/* A container that looks like an environment of this run's instance, made directly with a
 * chosen label. */
static char *fake_env(cae_docker *d, const char *name, const char *uuid, const char *created)
{
	json_t *cfg =
	    json_pack("{s:s, s:[s,s], s:[], s:{s:s, s:s, s:s, s:s}, s:{s:s}}", "Image",
		      test_image(), "Entrypoint", "sleep", "infinity", "Cmd", "Labels",
		      "cae.task_uuid", uuid, "cae.environment", "python", "cae.created_at", created,
		      "cae.instance", instance(), "HostConfig", "NetworkMode", "none");
	char *id = NULL;
	cae_error err = {0};
	ck_assert_msg(cae_docker_container_create(d, name, cfg, &id, NULL, &err) == 0, "%s",
		      err.message);
	json_decref(cfg);
	return id;
}

START_TEST(backend_stale_gc)
{
	cae_config *cfg = dcfg();
	cae_backend *b = bt_backend("docker", cfg, NULL);
	cae_docker *d = client();
	char old_uuid[64], new_uuid[64], other[128], n1[160], n2[160];
	bt_task_uuid(old_uuid, sizeof(old_uuid), "caetest");
	bt_task_uuid(new_uuid, sizeof(new_uuid), "caetest");
	snprintf(n1, sizeof(n1), "coding-agent-exec-%s", old_uuid);
	snprintf(n2, sizeof(n2), "coding-agent-exec-%s", new_uuid);
	unique_name(other, sizeof(other), "not-ours");
	char old[40], now[40];
	time_t two_days_ago = time(NULL) - 2 * 86400;
	struct tm tm;
	gmtime_r(&two_days_ago, &tm);
	strftime(old, sizeof(old), "%Y-%m-%dT%H:%M:%S.000Z", &tm);
	cae__iso8601_now(now, sizeof(now));
	char *a = fake_env(d, n1, old_uuid, old);
	char *bb = fake_env(d, n2, new_uuid, now);
	char *c = fake_env(d, other, old_uuid, old); /* old, but not named like ours */
	ck_assert_int_eq(cae_docker_container_start(d, a, NULL), 0);
	int removed = -1;
	cae_error err = {0};
	ck_assert_msg(cae_backend_cleanup_stale(b, 24 * 3600, &removed, &err) == 0, "%s",
		      err.message);
	ck_assert_int_ge(removed, 1);
	json_t *j = NULL;
	ck_assert_int_eq(cae_docker_container_inspect(d, a, &j, &err), -ENOENT);
	ck_assert_int_eq(cae_docker_container_inspect(d, bb, &j, &err), 0);
	json_decref(j);
	ck_assert_int_eq(cae_docker_container_inspect(d, c, &j, &err), 0);
	json_decref(j);
	/* list shows ours only */
	json_t *list = NULL;
	ck_assert_int_eq(cae_backend_list(b, &list, &err), 0);
	bool saw_new = false, saw_other = false;
	size_t i;
	json_t *e;
	json_array_foreach(list, i, e)
	{
		const char *cid = json_string_value(json_object_get(e, "container_id"));
		saw_new |= strcmp(cid, bb) == 0;
		saw_other |= strcmp(cid, c) == 0;
	}
	ck_assert(saw_new && !saw_other);
	json_decref(list);
	remove_container(d, bb);
	remove_container(d, c);
	free(a);
	free(bb);
	free(c);
	cae_docker_free(d);
	cae_backend_free(b);
	cae_config_free(cfg);
}
END_TEST

/* ---- the tools' view of a container gone during a command ---- */

struct bg_tool {
	cae_session *s;
	const char *tool;
	const char *args;
	cae_tool_result res;
	int r;
};

static void *bg_tool_main(void *arg)
{
	struct bg_tool *x = arg;
	json_t *a = json_loads(x->args, 0, NULL);
	cae_error err = {0};
	x->r = cae_session_call_tool(x->s, x->tool, a, NULL, &x->res, &err);
	json_decref(a);
	return NULL;
}

START_TEST(tools_report_a_container_gone_mid_command)
{
	cae_config *cfg = dcfg();
	cae_session *s = NULL;
	cae_error err = {0};
	ck_assert_msg(cae_session_new(cfg, NULL, &s, &err) == 0, "%s", err.message);
	cae_docker *d = client();
	char uuid[64];
	bt_task_uuid(uuid, sizeof(uuid), "caetest");
	snprintf(bt_repo_url, sizeof(bt_repo_url), "%spy.git", git_http);
	const char *tools[] = {"exec_command", "command-executor_execute_command"};
	const char *args[] = {"{\"cwd\": \".\", \"command\": [\"sleep\", \"30\"]}",
			      "{\"command\": \"sleep 30\"}"};
	for (int i = 0; i < 2; i++) {
		json_t *pa = json_pack("{s:{s:s, s:s, s:s}}", "task", "uuid", uuid, "repo",
				       bt_repo_url, "platform", "github");
		cae_tool_result res;
		ck_assert_int_eq(
		    cae_session_call_tool(s, "environment_prepare", pa, NULL, &res, &err), 0);
		json_decref(pa);
		ck_assert_msg(!res.is_error, "%s", res.text);
		char id[80];
		snprintf(id, sizeof(id), "%s",
			 json_string_value(json_object_get(res.structured, "container_id")));
		cae_tool_result_clear(&res);
		struct bg_tool x = {.s = s, .tool = tools[i], .args = args[i]};
		pthread_t th;
		ck_assert_int_eq(pthread_create(&th, NULL, bg_tool_main, &x), 0);
		wait_for_sleep(d, id);
		if (i == 0)
			ck_assert_int_eq(cae_docker_container_kill(d, id, "KILL", &err), 0);
		else
			ck_assert_int_eq(cae_docker_container_remove(d, id, true, true, &err), 0);
		pthread_join(th, NULL);
		ck_assert_int_eq(x.r, 0);
		json_t *o = x.res.structured;
		if (i == 0) {
			/* exec_command: a tool error, INTERNAL, saying what happened */
			ck_assert(x.res.is_error);
			json_t *e = json_object_get(o, "error");
			ck_assert_str_eq(json_string_value(json_object_get(e, "code")), "INTERNAL");
			ck_assert_msg(strstr(json_string_value(json_object_get(e, "message")),
					     "container stopped during the command"),
				      "%s", x.res.text);
		} else {
			/* execute_command: exit -1 and the error in stderr */
			ck_assert_int_eq(json_integer_value(json_object_get(o, "exit_code")), -1);
			const char *se = json_string_value(json_object_get(o, "stderr"));
			const char *want = "Command execution error: the environment's container "
					   "stopped during the command";
			ck_assert_msg(se && strncmp(se, want, strlen(want)) == 0, "%s", x.res.text);
		}
		cae_tool_result_clear(&x.res);
	}
	json_t *ca = json_pack("{s:s}", "task_uuid", uuid);
	cae_tool_result res;
	ck_assert_int_eq(cae_session_call_tool(s, "environment_cleanup", ca, NULL, &res, &err), 0);
	cae_tool_result_clear(&res);
	json_decref(ca);
	cae_docker_free(d);
	cae_session_free(s);
}
END_TEST

/* ---- a prepare that did not finish ---- */

/* A child that prepares uuid for dcfg() and is held at step hold_at (bt_preparer_start). */
static void spawn_prepare(struct bt_preparer *p, const char *uuid, int hold_at)
{
	cae_config *cfg = dcfg();
	cae_task t = bt_http_task(uuid);
	bt_preparer_start(p, "docker", cfg, &t, hold_at);
	cae_config_free(cfg);
}

static bool any_container(cae_docker *d, const char *uuid)
{
	char name[200];
	snprintf(name, sizeof(name), "%s.creating", uuid);
	return container_exists(d, uuid) || container_exists(d, name);
}

START_TEST(backend_killed_prepare_is_never_ready)
{
	cae_config *cfg = dcfg();
	cae_backend *b = bt_backend("docker", cfg, NULL);
	cae_docker *d = client();
	/* Killed at the start of create (before the container exists), of the clone, and of
	 * the last steps (the child waits there to be killed: no race with its next step). */
	const int points[] = {3, 4, 6};
	for (size_t k = 0; k < 3; k++) {
		char uuid[64];
		bt_task_uuid(uuid, sizeof(uuid), "caetest");
		struct bt_preparer p;
		spawn_prepare(&p, uuid, points[k]);
		bt_preparer_wait_step(&p, points[k]);
		bt_preparer_kill(&p);

		cae_env_info info;
		cae_error err = {0};
		int r = cae_backend_info(b, uuid, &info, &err);
		if (points[k] == 3) {
			ck_assert_int_eq(r, -ENOENT);
		} else {
			ck_assert_msg(r == 0, "%s", err.message);
			cae_env_info_clear(&info);
			bt_assert_unready(b, uuid, "failed", "is not ready");
		}
		/* gc removes it whatever its age */
		int removed = 0;
		ck_assert_msg(cae_backend_cleanup_stale(b, 24 * 3600, &removed, &err) == 0, "%s",
			      err.message);
		ck_assert_msg(!any_container(d, uuid), "step %d: left behind", points[k]);
		ck_assert_int_eq(cae_backend_info(b, uuid, &info, &err), -ENOENT);
	}
	cae_docker_free(d);
	cae_backend_free(b);
	cae_config_free(cfg);
}
END_TEST

START_TEST(backend_prepare_in_progress_is_creating)
{
	cae_config *cfg = dcfg();
	cae_backend *b = bt_backend("docker", cfg, NULL);
	cae_docker *d = client();
	char uuid[64];
	bt_task_uuid(uuid, sizeof(uuid), "caetest");
	struct bt_preparer p;
	spawn_prepare(&p, uuid, 5);
	bt_preparer_wait_step(&p, 5); /* cloned; held before the dependencies */
	bt_assert_unready(b, uuid, "creating", "still running");
	cae_env_info info;
	cae_error err = {0};
	/* its preparer lives: gc leaves it */
	int removed = 0;
	ck_assert_int_eq(cae_backend_cleanup_stale(b, 24 * 3600, &removed, &err), 0);
	ck_assert(any_container(d, uuid));
	/* the preparer dies: failed, and gc takes it */
	bt_preparer_kill(&p);
	ck_assert_int_eq(cae_backend_info(b, uuid, &info, &err), 0);
	ck_assert_str_eq(info.status, "failed");
	cae_env_info_clear(&info);
	ck_assert_int_eq(cae_backend_cleanup_stale(b, 24 * 3600, &removed, &err), 0);
	ck_assert(!any_container(d, uuid));
	/* a finished prepare: ready under its final name */
	spawn_prepare(&p, uuid, 0);
	char id[256];
	ck_assert_msg(bt_preparer_finish(&p, id, sizeof(id)), "prepare failed: %s", id);
	ck_assert(container_exists(d, uuid));
	ck_assert_int_eq(cae_backend_info(b, uuid, &info, &err), 0);
	ck_assert_str_eq(info.status, "ready");
	cae_env_info_clear(&info);
	ck_assert_int_eq(cae_backend_cleanup(b, uuid, &err), 0);
	cae_docker_free(d);
	cae_backend_free(b);
	cae_config_free(cfg);
}
END_TEST

/* ---- `cae prepare` killed, as an operator would meet it ---- */

/* Runs build/cae with CAE_CONFIG=config; stdout and stderr captured together. */
static char *cae_out(const char *config, const char *args, int *status)
{
	char cmd[2048];
	snprintf(cmd, sizeof(cmd), "CAE_CONFIG=%s CAE_LOG_LEVEL=error %s %s 2>&1", config, CAE_EXE,
		 args);
	FILE *f = popen(cmd, "r");
	ck_assert_ptr_nonnull(f);
	cae_buf b;
	cae__buf_init(&b, 1 << 20);
	char chunk[4096];
	size_t n;
	while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
		ck_assert_int_eq(cae__buf_append(&b, chunk, n), 0);
	*status = pclose(f);
	char *s = strndup(b.data ? b.data : "", b.len);
	cae__buf_clear(&b);
	return s;
}

START_TEST(cli_prepare_killed_then_gc)
{
	char *dir = tu_mkdtemp();
	char config[600];
	snprintf(config, sizeof(config), "%s/config.yaml", dir);
	tu_write(
	    dir, "config.yaml",
	    "command_executor:\n  backend: docker\n  docker:\n    network:\n      mode: host\n"
	    "    resources:\n      pids_limit: 256\n      memory_limit: 1g\n      cpu_limit: 1\n"
	    /* the engine is shared: no collection of other runs' environments */
	    "  cleanup:\n    interval_hours: 0\n");
	cae_docker *d = client();
	/* Killed once its container exists, and once it logged that the container started
	 * (the clone comes next). A prepare that finished before the kill landed proves
	 * nothing: that round is done again. */
	for (int point = 0; point < 2; point++) {
		bool killed = false;
		for (int attempt = 0; attempt < 5 && !killed; attempt++) {
			char uuid[64], creating[200];
			bt_task_uuid(uuid, sizeof(uuid), "caetest");
			snprintf(creating, sizeof(creating), "coding-agent-exec-%s.creating", uuid);
			char repo[400];
			snprintf(repo, sizeof(repo), "%spy.git", git_daemon);
			int errp[2];
			ck_assert_int_eq(pipe2(errp, O_CLOEXEC), 0);
			pid_t pid = fork();
			ck_assert_int_ge(pid, 0);
			if (pid == 0) {
				dup2(errp[1], 2);
				int null = open("/dev/null", O_WRONLY);
				dup2(null, 1);
				setenv("CAE_CONFIG", config, 1);
				setenv("CAE_LOG_LEVEL", "info", 1);
				execl(CAE_EXE, CAE_EXE, "prepare", "--repo", repo, "--uuid", uuid,
				      (char *)NULL);
				_exit(127);
			}
			close(errp[1]);
			FILE *ef = fdopen(errp[0], "r");
			if (point == 0) {
				for (int i = 0; i < 3000 && !any_container(d, uuid); i++)
					nanosleep(&(struct timespec){0, 10000000L}, NULL);
			} else {
				char line[4096];
				while (fgets(line, sizeof(line), ef) &&
				       !strstr(line, "\"environment.create\""))
					;
			}
			kill(pid, SIGKILL);
			int st;
			ck_assert_int_eq(waitpid(pid, &st, 0), pid);
			fclose(ef);
			cae_error err = {0};
			if (!WIFSIGNALED(st)) {
				cae_config *cfg = dcfg();
				cae_backend *b = bt_backend("docker", cfg, NULL);
				cae_backend_cleanup(b, uuid, &err);
				cae_backend_free(b);
				cae_config_free(cfg);
				continue;
			}
			killed = true;
			int status;
			char *out = cae_out(config, "env list", &status);
			ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s", out);
			json_t *list = json_loads(out, 0, NULL);
			ck_assert_msg(json_is_array(list), "%s", out);
			const char *st_text = NULL;
			size_t i;
			json_t *e;
			json_array_foreach(list, i, e)
			{
				if (strcmp(json_string_value(json_object_get(e, "task_uuid")),
					   uuid) == 0)
					st_text = json_string_value(json_object_get(e, "status"));
			}
			ck_assert_msg(st_text && strcmp(st_text, "failed") == 0, "%s: %s", uuid,
				      out);
			json_decref(list);
			free(out);
			out = cae_out(config, "gc", &status);
			ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s", out);
			free(out);
			ck_assert_msg(!any_container(d, uuid), "gc left %s", creating);
		}
		ck_assert_msg(killed, "point %d: every prepare finished before its kill", point);
	}
	cae_docker_free(d);
	cae__rm_rf(dir);
	free(dir);
}
END_TEST

/* End of input while `cae mcp --task` still prepares (a clone from a server that accepts and
 * never answers): the prepare is cancelled, the server exits and nothing is left behind. */
START_TEST(mcp_end_of_input_cancels_task_prepare)
{
	char *dir = tu_mkdtemp();
	tu_write(
	    dir, "config.yaml",
	    "command_executor:\n  backend: docker\n  docker:\n    network:\n      mode: host\n"
	    "    resources:\n      pids_limit: 256\n      memory_limit: 1g\n      cpu_limit: 1\n"
	    /* the engine is shared: no collection of other runs' environments */
	    "  cleanup:\n    interval_hours: 0\n");
	int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t sl = sizeof(sin);
	ck_assert_int_eq(bind(lfd, (struct sockaddr *)&sin, sizeof(sin)), 0);
	ck_assert_int_eq(listen(lfd, 4), 0);
	ck_assert_int_eq(getsockname(lfd, (struct sockaddr *)&sin, &sl), 0);
	char uuid[64], task[512], config[600], taskpath[600];
	bt_task_uuid(uuid, sizeof(uuid), "caetest");
	snprintf(task, sizeof(task),
		 "{\"uuid\": \"%s\", \"repo\": \"git://127.0.0.1:%d/never.git\"}", uuid,
		 ntohs(sin.sin_port));
	tu_write(dir, "task.json", task);
	snprintf(config, sizeof(config), "%s/config.yaml", dir);
	snprintf(taskpath, sizeof(taskpath), "%s/task.json", dir);
	int in[2];
	pid_t pid = spawn_mcp_task(config, taskpath, in);
	/* the clone reached the server (and waits for an answer that never comes) */
	struct pollfd p = {.fd = lfd, .events = POLLIN};
	ck_assert_msg(poll(&p, 1, 120000) == 1, "the clone never connected");
	int conn = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	ck_assert_int_ge(conn, 0);
	cae_docker *d = client();
	ck_assert(any_container(d, uuid));
	close(in[1]); /* end of input */
	int st = 0;
	pid_t w = 0;
	for (int i = 0; i < 600 && w == 0; i++) { /* a generous bound: 60 s, not the clone's 300 */
		w = waitpid(pid, &st, WNOHANG);
		if (w == 0)
			nanosleep(&(struct timespec){0, 100000000L}, NULL);
	}
	if (w == 0) {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
	}
	ck_assert_msg(w == pid, "cae mcp still prepares after the end of its input");
	ck_assert_msg(!any_container(d, uuid), "the cancelled prepare left its container");
	close(conn);
	close(lfd);
	cae_docker_free(d);
	cae__rm_rf(dir);
	free(dir);
}
END_TEST

START_TEST(backend_auto_selection)
{
	cae_config *cfg = dcfg();
	char *state = tu_mkdtemp();
	bt_cfg_set(cfg, "command_executor.backend", "auto");
	bt_cfg_set(cfg, "command_executor.state_dir", state);
	cae_backend *b = NULL;
	cae_error err = {0};
	ck_assert_msg(cae_backend_new(cfg, NULL, &b, &err) == 0, "%s", err.message);
	ck_assert_str_eq(cae_backend_name(b), "docker");
	cae_backend_free(b);
	/* no engine: auto is local, docker is a clear error naming the host */
	bt_cfg_set(cfg, "command_executor.docker_host", "unix:///nonexistent/docker.sock");
	ck_assert_msg(cae_backend_new(cfg, NULL, &b, &err) == 0, "%s", err.message);
	ck_assert_str_eq(cae_backend_name(b), "local");
	cae_backend_free(b);
	ck_assert_int_lt(cae_backend_new_named("docker", cfg, NULL, &b, &err), 0);
	ck_assert_msg(strstr(err.message, "unix:///nonexistent/docker.sock") != NULL, "%s",
		      err.message);
	cae__rm_rf(state);
	free(state);
	cae_config_free(cfg);
}
END_TEST

/* ---- the in-container helper ---- */

/* Waits until the container's processes (GET top) show needle, or (gone) no longer do. */
static void wait_top(cae_docker *d, const char *id, const char *needle, bool gone)
{
	for (int i = 0; i < 1200; i++) {
		char *top = top_text(d, id);
		bool seen = strstr(top, needle) != NULL;
		free(top);
		if (seen != gone)
			return;
		nanosleep(&(struct timespec){0, 50000000L}, NULL);
	}
	ck_abort_msg("%s never %s", needle, gone ? "went" : "appeared");
}

struct bg_exec {
	cae_backend *b;
	const char *uuid;
	const char *script;
	int r;
	cae_run_result res;
	cae_error err;
};

static void *bg_exec_backend(void *arg)
{
	struct bg_exec *x = arg;
	const char *argv[] = {"sh", "-c", x->script, NULL};
	cae_exec_request req = {.argv = argv, .timeout_ms = 120000, .cancel_fd = -1};
	x->r = cae_backend_exec(x->b, x->uuid, &req, &x->res, &x->err);
	return NULL;
}

/* Runs script in the container as user (NULL: the container's), not through cae; it must
 * succeed. */
static void in_container(cae_docker *d, const char *id, const char *user, const char *script)
{
	const char *argv[] = {"sh", "-c", script, NULL};
	cae_docker_exec_spec spec = {
	    .argv = argv, .user = user, .raw = true, .timeout_ms = 30000, .cancel_fd = -1};
	cae_run_result r;
	cae_error err = {0};
	ck_assert_msg(cae_docker_exec(d, id, &spec, &r, NULL, &err) == 0, "%s: %s", script,
		      err.message);
	ck_assert_msg(r.exit_code == 0, "%s: exit %d: %s", script, r.exit_code, r.err);
	cae_run_result_clear(&r);
}

/* From outside (as the container's user: root there has no CAP_KILL): the helpers serving
 * streams, with SIGKILL. */
static void kill_stream_helpers(cae_docker *d, const char *id)
{
	in_container(d, id, NULL, "pkill -KILL -f 'cae-helper --strea[m]'");
}

/* The stream helper killed with SIGKILL during a command: the command's call says so, the
 * command does not survive it (PID 1 kills what the dead helper left), and the next command
 * works through a new helper. */
START_TEST(helper_killed_mid_command)
{
	cae_config *cfg = dcfg();
	cae_backend *b = bt_backend("docker", cfg, NULL);
	cae_docker *d = client();
	char uuid[64];
	bt_task_uuid(uuid, sizeof(uuid), "caetest");
	cae_task t = bt_http_task(uuid);
	cae_env_info info;
	prepare_ok(b, &t, "python", &info);
	struct bg_exec x = {.b = b, .uuid = uuid, .script = "sleep 313; echo never"};
	pthread_t th;
	ck_assert_int_eq(pthread_create(&th, NULL, bg_exec_backend, &x), 0);
	wait_top(d, info.container_id, "sleep 313", false);
	kill_stream_helpers(d, info.container_id);
	cae_error err = {0};
	pthread_join(th, NULL);
	ck_assert_int_eq(x.r, -ECONNRESET);
	ck_assert_msg(strstr(x.err.message, "cae-helper ended during the command") &&
			  strstr(x.err.message, "the next command starts a new one"),
		      "%s", x.err.message);
	wait_top(d, info.container_id, "sleep 313", true);
	cae_run_result r = bt_exec(b, uuid, "echo again", 30000);
	ck_assert_str_eq(r.out, "again\n");
	ck_assert_ptr_null(r.warning);
	cae_run_result_clear(&r);
	ck_assert_int_eq(cae_backend_cleanup(b, uuid, &err), 0);
	cae_env_info_clear(&info);
	cae_docker_free(d);
	cae_backend_free(b);
	cae_config_free(cfg);
}
END_TEST

/* SIGTERM to `cae exec` cancels the command in the container (exit 130, nothing left);
 * SIGKILL (no chance to cancel) ends it too: its stream closes and the helper stops. */
START_TEST(cli_exec_signals_end_the_command_in_the_container)
{
	char *dir = tu_mkdtemp();
	char config[600];
	snprintf(config, sizeof(config), "%s/config.yaml", dir);
	/* the engine is shared: no collection of other runs' environments; the container stays
	 * at exit, to be looked into */
	tu_write(dir, "config.yaml",
		 "command_executor:\n  backend: docker\n  docker:\n    network:\n      mode: "
		 "host\n  cleanup:\n    interval_hours: 0\n    on_session_end: false\n");
	cae_config *cfg = dcfg();
	cae_backend *b = bt_backend("docker", cfg, NULL);
	cae_docker *d = client();
	char uuid[64];
	bt_task_uuid(uuid, sizeof(uuid), "caetest");
	cae_task t = bt_http_task(uuid);
	cae_env_info info;
	prepare_ok(b, &t, "python", &info);
	const int sigs[] = {SIGTERM, SIGKILL};
	for (int i = 0; i < 2; i++) {
		char script[64];
		snprintf(script, sizeof(script), "sleep %d", 320 + i);
		pid_t pid = fork();
		ck_assert_int_ge(pid, 0);
		if (pid == 0) {
			int null = open("/dev/null", O_WRONLY);
			dup2(null, 1);
			dup2(null, 2);
			setenv("CAE_CONFIG", config, 1);
			execl(CAE_EXE, CAE_EXE, "exec", "--uuid", uuid, "--", script, (char *)NULL);
			_exit(127);
		}
		wait_top(d, info.container_id, script, false);
		kill(pid, sigs[i]);
		int st;
		ck_assert_int_eq(waitpid(pid, &st, 0), pid);
		if (sigs[i] == SIGTERM) {
			ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 130, "status %d", st);
			/* cancelled before cae exec answered: gone already */
			char *top = top_text(d, info.container_id);
			ck_assert_msg(strstr(top, script) == NULL, "left: %s", top);
			free(top);
		} else {
			wait_top(d, info.container_id, script, true);
		}
	}
	cae_error err = {0};
	ck_assert_int_eq(cae_backend_cleanup(b, uuid, &err), 0);
	cae_env_info_clear(&info);
	cae_docker_free(d);
	cae_backend_free(b);
	cae_config_free(cfg);
	cae__rm_rf(dir);
	free(dir);
}
END_TEST

static ssize_t st_read(void *ctx, char *buf, size_t n)
{
	return cae_docker_stream_read(ctx, buf, n);
}

static int st_write(void *ctx, const void *p, size_t n)
{
	return cae_docker_stream_write(ctx, p, n);
}

static void st_close(void *ctx)
{
	cae_docker_stream_close(ctx);
}

/* Waits (up to a minute) until container id stops; returns its exit code. */
static int64_t wait_stopped(cae_docker *d, const char *id)
{
	for (int i = 0; i < 600; i++) {
		json_t *c = NULL;
		cae_error err = {0};
		ck_assert_int_eq(cae_docker_container_inspect(d, id, &c, &err), 0);
		json_t *state = json_object_get(c, "State");
		bool stopped = !json_is_true(json_object_get(state, "Running"));
		int64_t code = json_integer_value(json_object_get(state, "ExitCode"));
		json_decref(c);
		if (stopped)
			return code;
		nanosleep(&(struct timespec){0, 100000000L}, NULL);
	}
	ck_abort_msg("container %s did not stop", id);
	return -1;
}

/* A new stream to the helper of container id, signalling PID 1 every heartbeat seconds ("0":
 * never). */
static cae_helper_mux *helper_stream_beating(cae_docker *d, const char *id, const char *heartbeat)
{
	const char *argv[] = {"/.cae/cae-helper", "--stream", "--heartbeat", heartbeat, NULL};
	cae_docker_stream *st = NULL;
	cae_error err = {0};
	ck_assert_msg(cae_docker_attach(d, id, argv, NULL, 10000, &st, &err) == 0, "%s",
		      err.message);
	cae_helper_link link = {.fd = cae_docker_stream_fd(st),
				.read = st_read,
				.write = st_write,
				.close = st_close,
				.ctx = st};
	cae_helper_mux *m = NULL;
	ck_assert_msg(cae_helper_mux_open(&link, 10000, &m, &err) == 0, "%s", err.message);
	return m;
}

static cae_helper_mux *helper_stream(cae_docker *d, const char *id)
{
	return helper_stream_beating(d, id, "1");
}

/* A container of image with cae-helper-static put in as the docker backend does (root's,
 * 0755, in /.cae) and running as PID 1 with lifetime_s; *m is a stream to it. Returns the
 * container id (new). */
static char *helper_container(cae_docker *d, const char *image, const char *lifetime_s,
			      cae_helper_mux **m)
{
	const char *helper = getenv("CAE_HELPER_STATIC");
	ck_assert_msg(helper && *helper, "CAE_HELPER_STATIC is not set");
	char name[128];
	unique_name(name, sizeof(name), "helper");
	json_t *cfg =
	    json_pack("{s:s, s:[s,s,s,s], s:[], s:s, s:{s:s, s:b}}", "Image", image, "Entrypoint",
		      "/.cae/cae-helper", "--init", "--lifetime", lifetime_s, "Cmd", "User",
		      "1000:1000", "HostConfig", "NetworkMode", "none", "Init", 0);
	char *id = NULL;
	cae_error err = {0};
	ck_assert_msg(cae_docker_container_create(d, name, cfg, &id, NULL, &err) == 0, "%s",
		      err.message);
	json_decref(cfg);
	char *dir = tu_mkdtemp();
	tu_sh("mkdir %s/.cae && cp %s %s/.cae/cae-helper && tar --owner=0 --group=0 "
	      "--numeric-owner --mode=0755 -C %s -cf %s/h.tar .cae",
	      dir, helper, dir, dir, dir);
	char tarpath[600];
	snprintf(tarpath, sizeof(tarpath), "%s/h.tar", dir);
	int fd = open(tarpath, O_RDONLY | O_CLOEXEC);
	struct stat sb;
	ck_assert_int_eq(fstat(fd, &sb), 0);
	ck_assert_msg(cae_docker_put_archive(d, id, "/", fd, (uint64_t)sb.st_size, &err) == 0, "%s",
		      err.message);
	close(fd);
	cae__rm_rf(dir);
	free(dir);
	ck_assert_msg(cae_docker_container_start(d, id, &err) == 0, "%s", err.message);
	*m = helper_stream(d, id);
	return id;
}

/* cae-helper-static in an image with nothing but Debian's static busybox (no libc, no
 * git): PID 1 there, commands through its stream with the runner's semantics, and, once no
 * manager is connected, the container stops by itself after its lifetime. */
START_TEST(helper_in_a_busybox_only_image)
{
	cae_docker *d = client();
	cae_helper_mux *m = NULL;
	char *id = helper_container(d, "cae-test-busybox:latest", "4", &m);
	cae_error err = {0};
	const char *sh[] = {"sh", "-c",
			    "echo hi; id -u; tr '\\0' ' ' < /proc/1/cmdline; echo; cat; "
			    "echo \"[$ADDED]\"",
			    NULL};
	const char *add[] = {"ADDED=1", NULL};
	cae_run_spec spec = {.argv = sh,
			     .cwd = "/workspace",
			     .stdin_data = "in\n",
			     .stdin_len = 3,
			     .has_stdin = true,
			     .timeout_ms = 30000,
			     .cancel_fd = -1};
	cae_run_result r;
	ck_assert_msg(cae_helper_mux_run(m, &spec, add, "/workspace", &r, &err) == 0, "%s",
		      err.message);
	ck_assert_str_eq(r.out, "hi\n1000\n/.cae/cae-helper --init --lifetime 4 \nin\n[1]\n");
	cae_run_result_clear(&r);
	/* a timeout kills the tree, setsid and double forks included */
	const char *slow[] = {"sh", "-c", "setsid sleep 331 & (sleep 332 &); sleep 333", NULL};
	cae_run_spec s2 = {.argv = slow, .cwd = "/workspace", .timeout_ms = 500, .cancel_fd = -1};
	ck_assert_msg(cae_helper_mux_run(m, &s2, NULL, "/workspace", &r, &err) == 0, "%s",
		      err.message);
	ck_assert(r.timed_out);
	cae_run_result_clear(&r);
	const char *ps[] = {"sh", "-c", "ps -o args | grep -c '^sleep 33' || true", NULL};
	cae_run_spec s3 = {.argv = ps, .cwd = "/workspace", .timeout_ms = 30000, .cancel_fd = -1};
	ck_assert_msg(cae_helper_mux_run(m, &s3, NULL, "/workspace", &r, &err) == 0, "%s",
		      err.message);
	ck_assert_str_eq(r.out, "0\n");
	cae_run_result_clear(&r);
	/* the cwd must stay in the confinement */
	s3.cwd = "/tmp";
	ck_assert_int_eq(cae_helper_mux_run(m, &s3, NULL, "/workspace", &r, &err), -ENOTDIR);
	/* the manager's stream (an exec) keeps it alive past its lifetime (4 s) */
	const char *longer[] = {"sh", "-c", "sleep 6; echo lived", NULL};
	s3.argv = longer;
	s3.cwd = "/workspace";
	ck_assert_msg(cae_helper_mux_run(m, &s3, NULL, "/workspace", &r, &err) == 0, "%s",
		      err.message);
	ck_assert_str_eq(r.out, "lived\n");
	cae_run_result_clear(&r);
	/* the manager goes: after its lifetime the container stops by itself, even while a
	 * command (of a stream that sends no heartbeats) sends PID 1 heartbeats of its own */
	cae_helper_mux *quiet = helper_stream_beating(d, id, "0");
	cae_helper_mux_close(m);
	const char *spoof[] = {
	    "sh", "-c",
	    "i=0; while [ $i -lt 12 ]; do kill -USR1 1; sleep 1; i=$((i+1)); done; echo spoofed",
	    NULL};
	s3.argv = spoof;
	int rc = cae_helper_mux_run(quiet, &s3, NULL, "/workspace", &r, &err);
	if (rc == 0) {
		ck_assert_msg(strstr(r.out, "spoofed") == NULL, "a command kept PID 1 alive");
		cae_run_result_clear(&r);
	}
	cae_helper_mux_close(quiet);
	ck_assert_int_eq(wait_stopped(d, id), CAE_HELPER_INIT_EXPIRED);
	remove_container(d, id);
	free(id);
	cae_docker_free(d);
}
END_TEST

/* ---- the editor's golden cases, run by the helper in a container ---- */

/* Runs script (sh) through the stream; it must succeed; returns its stdout (new). */
static char *mux_sh(cae_helper_mux *m, const char *script)
{
	const char *argv[] = {"sh", "-c", script, NULL};
	cae_run_spec spec = {
	    .argv = argv, .cwd = "/workspace", .timeout_ms = 60000, .cancel_fd = -1};
	cae_run_result r;
	cae_error err = {0};
	ck_assert_msg(cae_helper_mux_run(m, &spec, NULL, NULL, &r, &err) == 0, "%s", err.message);
	ck_assert_msg(r.exit_code == 0, "%s: %s%s", script, r.out, r.err);
	char *out = TAKE_PTR(r.out);
	cae_run_result_clear(&r);
	return out;
}

/* s in single quotes for sh. */
static void sq(cae_buf *b, const char *s)
{
	ck_assert_int_eq(cae__buf_puts(b, "'"), 0);
	for (; *s; s++) {
		if (*s == '\'')
			ck_assert_int_eq(cae__buf_puts(b, "'\\''"), 0);
		else
			ck_assert_int_eq(cae__buf_append(b, s, 1), 0);
	}
	ck_assert_int_eq(cae__buf_puts(b, "'"), 0);
}

/* The shell commands that make what a case's setup.json describes, in the current
 * directory (the same on this host and in the container). */
static char *setup_script(json_t *setup)
{
	cae_buf b;
	cae__buf_init(&b, 1 << 20);
	ck_assert_int_eq(cae__buf_puts(&b, "set -e; "), 0);
	const char *k;
	json_t *v;
	size_t i;
	json_array_foreach(json_object_get(setup, "dirs"), i, v)
	{
		ck_assert_int_eq(cae__buf_puts(&b, "mkdir -p "), 0);
		sq(&b, json_string_value(v));
		ck_assert_int_eq(cae__buf_puts(&b, "; "), 0);
	}
	json_object_foreach(json_object_get(setup, "symlinks"), k, v)
	{
		ck_assert_int_eq(cae__buf_puts(&b, "ln -s "), 0);
		sq(&b, json_string_value(v));
		ck_assert_int_eq(cae__buf_puts(&b, " "), 0);
		sq(&b, k);
		ck_assert_int_eq(cae__buf_puts(&b, "; "), 0);
	}
	json_array_foreach(json_object_get(setup, "fifos"), i, v)
	{
		ck_assert_int_eq(cae__buf_puts(&b, "mkfifo "), 0);
		sq(&b, json_string_value(v));
		ck_assert_int_eq(cae__buf_puts(&b, "; "), 0);
	}
	json_object_foreach(json_object_get(setup, "modes"), k, v)
	{
		ck_assert_int_eq(cae__buf_puts(&b, "if [ -e "), 0);
		sq(&b, k);
		ck_assert_int_eq(cae__buf_printf(&b, " ]; then chmod %s ", json_string_value(v)),
				 0);
		sq(&b, k);
		ck_assert_int_eq(cae__buf_puts(&b, "; fi; "), 0);
	}
	ck_assert_int_eq(cae__buf_puts(&b, "true"), 0);
	return cae__buf_steal(&b, NULL);
}

/* Every entry below the current directory: type, name, and a file's checksum and mode or a
 * link's target (busybox and coreutils print these alike). */
#define TREE_SCRIPT                                                                                \
	"find . ! -name . | sort | while IFS= read -r f; do "                                      \
	"if [ -L \"$f\" ]; then echo \"L $f $(readlink \"$f\")\"; "                                \
	"elif [ -d \"$f\" ]; then echo \"D $f\"; elif [ -p \"$f\" ]; then echo \"P $f\"; "         \
	"else echo \"F $f $(md5sum < \"$f\" | cut -c1-32) $(stat -c %a \"$f\")\"; fi; done"

static char *host_sh(const char *dir, const char *script)
{
	char *cmd = NULL;
	ck_assert_int_ge(asprintf(&cmd, "cd '%s' && %s", dir, script), 0);
	const char *argv[] = {"sh", "-c", cmd, NULL};
	cae_run_spec spec = {.argv = argv, .timeout_ms = 60000, .cancel_fd = -1};
	cae_run_result r;
	cae_error err = {0};
	ck_assert_msg(cae_runner_run(&spec, &r, &err) == 0, "%s", err.message);
	ck_assert_msg(r.exit_code == 0, "%s: %s", cmd, r.err);
	free(cmd);
	char *out = TAKE_PTR(r.out);
	cae_run_result_clear(&r);
	return out;
}

static void limits_of(json_t *setup, cae_editor_limits *lim)
{
	cae_editor_limits_default(lim);
	json_t *l = json_object_get(setup, "limits"), *v;
	if ((v = json_object_get(l, "max_file_bytes")))
		lim->max_file_bytes = (size_t)json_integer_value(v);
	if ((v = json_object_get(l, "max_output_chars")))
		lim->max_output_chars = (size_t)json_integer_value(v);
	if ((v = json_object_get(l, "undo_depth")))
		lim->undo_depth = (unsigned)json_integer_value(v);
	if ((v = json_object_get(l, "undo_budget_bytes")))
		lim->undo_budget_bytes = (size_t)json_integer_value(v);
	if ((v = json_object_get(l, "max_dir_entries")))
		lim->max_dir_entries = (size_t)json_integer_value(v);
}

#define OUTSIDE_SCRIPT                                                                             \
	"mkdir -p /workspace/outside/dir && printf 'top secret\\nneedle\\n' > "                    \
	"/workspace/outside/secret.txt && printf 'outside file\\nneedle\\n' > "                    \
	"/workspace/outside/dir/f.txt && printf 'outside a\\nneedle\\n' > "                        \
	"/workspace/outside/dir/a.txt"

/* One golden case (tests/data/editor/<name>, see tests/editor/test-editor.c) through the
 * helper's editor in the container: the same text, byte for byte, and the same workspace
 * afterwards. Returns a description of the first difference (new), or NULL. */
static char *golden_in_container(cae_docker *d, const char *id, const char *name)
{
	char cdir[PATH_MAX];
	snprintf(cdir, sizeof(cdir), "%s/tests/data/editor/%s", CAE_SOURCE_ROOT, name);
	char *p_args = cae__path_join(cdir, "args.json"),
	     *p_exp = cae__path_join(cdir, "expected.txt");
	char *p_before = cae__path_join(cdir, "before"), *p_after = cae__path_join(cdir, "after");
	char *p_setup = cae__path_join(cdir, "setup.json");
	json_error_t je;
	json_t *args = json_load_file(p_args, JSON_ALLOW_NUL, &je);
	ck_assert_msg(args != NULL, "%s: %s", p_args, je.text);
	json_t *setup =
	    access(p_setup, F_OK) == 0 ? json_load_file(p_setup, 0, &je) : json_object();
	ck_assert_ptr_nonnull(setup);
	char *expected = NULL;
	ck_assert_int_eq(cae__read_file(AT_FDCWD, p_exp, 64 << 20, &expected, NULL), 0);

	/* a fresh stream (a fresh editor: no undo history) on a fresh workspace */
	cae_helper_mux *m = helper_stream(d, id);
	free(mux_sh(m, "rm -rf /workspace/project /workspace/outside /workspace/.cae-journal "
		       "/workspace/pwned && mkdir /workspace/project && " OUTSIDE_SCRIPT));
	cae_error err = {0};
	if (cae__is_dir(p_before)) {
		char *tmp = tu_mkdtemp();
		tu_sh("tar --owner=1000 --group=1000 --numeric-owner -C '%s' -cf %s/t.tar .",
		      p_before, tmp);
		char tarpath[PATH_MAX];
		snprintf(tarpath, sizeof(tarpath), "%s/t.tar", tmp);
		int fd = open(tarpath, O_RDONLY | O_CLOEXEC);
		struct stat sb;
		ck_assert_int_eq(fstat(fd, &sb), 0);
		ck_assert_msg(cae_docker_put_archive(d, id, "/workspace/project", fd,
						     (uint64_t)sb.st_size, &err) == 0,
			      "%s", err.message);
		close(fd);
		cae__rm_rf(tmp);
		free(tmp);
	}
	char *setup_sh = setup_script(setup);
	char *cmd = NULL;
	ck_assert_int_ge(asprintf(&cmd, "cd /workspace/project && %s", setup_sh), 0);
	free(mux_sh(m, cmd));
	free(cmd);
	char *outside_before = mux_sh(m, "cd /workspace/outside && " TREE_SCRIPT);

	cae_editor_limits lim;
	limits_of(setup, &lim);
	bool compat = json_is_true(json_object_get(setup, "compat"));
	cae_buf actual;
	cae__buf_init(&actual, 256 << 20);
	size_t ncalls = json_is_array(args) ? json_array_size(args) : 1;
	for (size_t i = 0; i < ncalls; i++) {
		json_t *call = json_is_array(args) ? json_array_get(args, i) : args;
		cae_editor_request q;
		cae_editor_result res;
		int r = cae_editor_parse(call, &q, &res);
		ck_assert_int_ge(r, 0);
		if (r == 0)
			ck_assert_msg(
			    cae_helper_mux_edit(m, "/workspace/project", &lim, &q, &res, &err) == 0,
			    "%s: %s", name, err.message);
		ck_assert_ptr_nonnull(res.text);
		ck_assert_int_eq(cae__buf_puts(&actual, res.is_error ? "[error]\n" : "[ok]\n"), 0);
		if (compat) {
			char *c = cae_editor_result_compat_text(&res);
			ck_assert_int_eq(cae__buf_puts(&actual, c), 0);
			free(c);
		} else {
			ck_assert_int_eq(cae__buf_puts(&actual, res.text), 0);
		}
		ck_assert_int_eq(cae__buf_puts(&actual, "\n"), 0);
		cae_editor_result_clear(&res);
	}
	char *diff = NULL;
	if (strcmp(actual.data ? actual.data : "", expected) != 0)
		ck_assert_int_ge(asprintf(&diff,
					  "%s: output differs:\n--- expected\n%s\n--- got\n%s",
					  name, expected, actual.data ? actual.data : ""),
				 0);
	/* the workspace afterwards, and nothing outside it touched */
	char *got_tree = mux_sh(m, "cd /workspace/project && " TREE_SCRIPT);
	char *outside_after =
	    mux_sh(m, "cd /workspace/outside && " TREE_SCRIPT
		      "; ls /workspace/pwned /workspace/project/pwned 2>/dev/null; true");
	char *want_dir = tu_mkdtemp();
	const char *src = cae__is_dir(p_after) ? p_after : p_before;
	if (cae__is_dir(src))
		tu_sh("cp -a '%s'/. %s", src, want_dir);
	free(host_sh(want_dir, setup_sh));
	char *want_tree = host_sh(want_dir, TREE_SCRIPT);
	if (!diff && strcmp(got_tree, want_tree) != 0)
		ck_assert_int_ge(asprintf(&diff,
					  "%s: workspace differs:\n--- expected\n%s--- got\n%s",
					  name, want_tree, got_tree),
				 0);
	if (!diff && strcmp(outside_before, outside_after) != 0)
		ck_assert_int_ge(asprintf(&diff, "%s: outside changed:\n%s\n%s", name,
					  outside_before, outside_after),
				 0);
	cae__rm_rf(want_dir);
	free(want_dir);
	free(want_tree);
	free(got_tree);
	free(outside_after);
	free(outside_before);
	free(setup_sh);
	cae__buf_clear(&actual);
	cae_helper_mux_close(m);
	free(expected);
	json_decref(setup);
	json_decref(args);
	free(p_args);
	free(p_exp);
	free(p_before);
	free(p_after);
	free(p_setup);
	return diff;
}

/* The editor's golden suite (tests/data/editor), the one the local editor passes, run by
 * cae-helper in a container: byte-identical results. */
START_TEST(editor_goldens_in_a_container)
{
	cae_docker *d = client();
	cae_helper_mux *m = NULL;
	char *id = helper_container(d, "cae-test-busybox:latest", "600", &m);
	free(mux_sh(m, "mkdir -p /workspace"));
	cae_helper_mux_close(m);
	char dir[PATH_MAX];
	snprintf(dir, sizeof(dir), "%s/tests/data/editor", CAE_SOURCE_ROOT);
	DIR *dd = opendir(dir);
	ck_assert_ptr_nonnull(dd);
	struct dirent *e;
	int cases = 0, failed = 0;
	while ((e = readdir(dd))) {
		if (e->d_name[0] == '.')
			continue;
		cases++;
		char *diff = golden_in_container(d, id, e->d_name);
		if (diff) {
			fprintf(stderr, "%s\n", diff);
			failed++;
			free(diff);
		}
	}
	closedir(dd);
	ck_assert_int_gt(cases, 50);
	ck_assert_msg(failed == 0, "%d of %d golden cases differ in the container (see stderr)",
		      failed, cases);
	remove_container(d, id);
	free(id);
	cae_docker_free(d);
}
END_TEST

/* After a push (the conformance suite's push_on_demand covers how it works), `docker
 * inspect` of the container knows no token: the label names host, user and forge only. */
START_TEST(push_leaves_no_token_in_inspect)
{
	cae_config *cfg = dcfg();
	cae_backend *b = bt_backend("docker", cfg, NULL);
	cae_docker *d = client();
	char uuid[64];
	bt_task_uuid(uuid, sizeof(uuid), "caetest");
	cae_task t = bt_http_task(uuid);
	cae_env_info info;
	prepare_ok(b, &t, "python", &info);
	char script[512];
	snprintf(script, sizeof(script),
		 "git push -q origin HEAD:refs/heads/inspect-%s 2>&1 && echo pushed", uuid);
	cae_run_result r = bt_exec(b, uuid, script, 120000);
	ck_assert_msg(strcmp(r.out, "pushed\n") == 0, "%s%s", r.out, r.err);
	cae_run_result_clear(&r);
	json_t *c = NULL;
	cae_error err = {0};
	ck_assert_int_eq(cae_docker_container_inspect(d, info.container_id, &c, &err), 0);
	char *text = json_dumps(c, 0);
	ck_assert_ptr_null(strstr(text, git_token));
	ck_assert_ptr_nonnull(strstr(text, "cae.git_credential"));
	free(text);
	json_decref(c);
	cae_backend_cleanup(b, uuid, &err);
	cae_env_info_clear(&info);
	cae_docker_free(d);
	cae_backend_free(b);
	cae_config_free(cfg);
}
END_TEST

/* A container whose managers are all gone stops by itself after its helper's lifetime; the
 * next command starts it again, files kept. */
START_TEST(leaked_container_stops_and_comes_back)
{
	cae_config *cfg = dcfg();
	bt_cfg_set(cfg, "command_executor.docker.helper_lifetime_seconds", "3");
	cae_backend *b = bt_backend("docker", cfg, NULL);
	cae_docker *d = client();
	char uuid[64];
	bt_task_uuid(uuid, sizeof(uuid), "caetest");
	cae_task t = bt_http_task(uuid);
	cae_env_info info;
	prepare_ok(b, &t, "python", &info);
	cae_run_result r = bt_exec(b, uuid, "echo kept > kept.txt", 30000);
	cae_run_result_clear(&r);
	/* A command tries to keep it alive: a daemon of its freezes PID 1 with ptrace, signals it
	 * (STOP, KILL), kills the stream helper so that what it leaves becomes PID 1's, and
	 * sends PID 1 heartbeats of its own. PID 1 is non-dumpable and counts only an exec's
	 * heartbeats: it kills and reaps the orphans, and the container still expires. */
	const char *attack[] = {"python3", "-c",
				"import ctypes, os, signal, time\n"
				"libc = ctypes.CDLL(None, use_errno=True)\n"
				"if os.fork() == 0:\n"
				"    os.setsid()\n"
				"    if os.fork() == 0:\n"
				"        libc.ptrace(16, 1, 0, 0)\n"
				"        for sig in (signal.SIGSTOP, signal.SIGKILL):\n"
				"            try:\n"
				"                os.kill(1, sig)\n"
				"            except OSError:\n"
				"                pass\n"
				"        for p in os.listdir(\"/proc\"):\n"
				"            try:\n"
				"                if b\"--stream\" in open(\"/proc/\" + p + "
				"\"/cmdline\", \"rb\").read():\n"
				"                    os.kill(int(p), signal.SIGKILL)\n"
				"            except (OSError, ValueError):\n"
				"                pass\n"
				"        while True:\n"
				"            try:\n"
				"                os.kill(1, signal.SIGUSR1)\n"
				"            except OSError:\n"
				"                pass\n"
				"            time.sleep(0.2)\n"
				"    os._exit(0)\n"
				"time.sleep(10)\n",
				NULL};
	cae_exec_request req = {.argv = attack, .timeout_ms = 20000, .cancel_fd = -1};
	cae_error err = {0};
	if (cae_backend_exec(b, uuid, &req, &r, &err) == 0) /* its stream died under it */
		cae_run_result_clear(&r);
	/* (a new stream) nothing of the attack is left, not even a zombie */
	r = bt_exec(
	    b, uuid,
	    "for i in $(seq 100); do ps -eo stat=,args= | grep -qE '^Z|[p]ython3 -c' || break; "
	    "sleep 0.1; done; ps -eo stat=,args= | grep -E '^Z|[p]ython3 -c'",
	    30000);
	ck_assert_msg(strcmp(r.out, "") == 0, "left in the container: %s", r.out);
	cae_run_result_clear(&r);
	/* this manager goes away (its stream closes with it) */
	cae_backend_free(b);
	ck_assert_int_eq(wait_stopped(d, info.container_id), CAE_HELPER_INIT_EXPIRED);
	/* a manager comes back: the container starts again, the workspace as it was */
	b = bt_backend("docker", cfg, NULL);
	r = bt_exec(b, uuid, "cat kept.txt", 30000);
	ck_assert_str_eq(r.out, "kept\n");
	cae_run_result_clear(&r);
	ck_assert_int_eq(cae_backend_cleanup(b, uuid, &err), 0);
	cae_env_info_clear(&info);
	cae_docker_free(d);
	cae_backend_free(b);
	cae_config_free(cfg);
}
END_TEST

/* Several manager processes on one environment at once, each with its own stream to the
 * helper: this process runs a long command while three `cae exec` processes run theirs. */
START_TEST(several_managers_at_once)
{
	char *dir = tu_mkdtemp();
	char config[600];
	snprintf(config, sizeof(config), "%s/config.yaml", dir);
	/* the engine is shared: no collection of other runs' environments; the container stays
	 * at exit, to be looked into */
	tu_write(dir, "config.yaml",
		 "command_executor:\n  backend: docker\n  docker:\n    network:\n      mode: "
		 "host\n  cleanup:\n    interval_hours: 0\n    on_session_end: false\n");
	cae_config *cfg = dcfg();
	cae_backend *b = bt_backend("docker", cfg, NULL);
	char uuid[64];
	bt_task_uuid(uuid, sizeof(uuid), "caetest");
	cae_task t = bt_http_task(uuid);
	cae_env_info info;
	prepare_ok(b, &t, "python", &info);
	struct bg_exec x = {.b = b, .uuid = uuid, .script = "sleep 2; echo long"};
	pthread_t th;
	ck_assert_int_eq(pthread_create(&th, NULL, bg_exec_backend, &x), 0);
	pid_t kids[3];
	for (int k = 0; k < 3; k++) {
		kids[k] = fork();
		ck_assert_int_ge(kids[k], 0);
		if (kids[k] == 0) {
			char cmd[1024];
			snprintf(cmd, sizeof(cmd),
				 "for i in 1 2 3 4 5; do CAE_CONFIG=%s CAE_LOG_LEVEL=error %s exec "
				 "--uuid %s -- \"echo p%d-$i >> out-%d.txt\" >/dev/null || exit 1; "
				 "done",
				 config, CAE_EXE, uuid, k, k);
			execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
			_exit(127);
		}
	}
	for (int k = 0; k < 3; k++) {
		int st;
		ck_assert_int_eq(waitpid(kids[k], &st, 0), kids[k]);
		ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "cae exec process %d: %d", k,
			      st);
	}
	pthread_join(th, NULL);
	ck_assert_int_eq(x.r, 0);
	ck_assert_str_eq(x.res.out, "long\n");
	cae_run_result_clear(&x.res);
	cae_run_result r =
	    bt_exec(b, uuid, "cat out-0.txt out-1.txt out-2.txt | sort | tr '\\n' ' '", 30000);
	ck_assert_str_eq(r.out, "p0-1 p0-2 p0-3 p0-4 p0-5 p1-1 p1-2 p1-3 p1-4 p1-5 p2-1 p2-2 "
				"p2-3 p2-4 p2-5 ");
	cae_run_result_clear(&r);
	cae_error err = {0};
	ck_assert_int_eq(cae_backend_cleanup(b, uuid, &err), 0);
	cae_env_info_clear(&info);
	cae_backend_free(b);
	cae_config_free(cfg);
	cae__rm_rf(dir);
	free(dir);
}
END_TEST

/* A container whose helper does not answer (here: moved away, by root in the container):
 * commands still run, as plain Engine API execs, and their result says so; the editor and
 * the patch worker's files have no way around the helper and say why, changing nothing. */
START_TEST(dead_helper_falls_back_with_a_warning)
{
	cae_config *cfg = dcfg();
	cae_backend *b = bt_backend("docker", cfg, NULL);
	cae_docker *d = client();
	char uuid[64];
	bt_task_uuid(uuid, sizeof(uuid), "caetest");
	cae_task t = bt_http_task(uuid);
	cae_env_info info;
	prepare_ok(b, &t, "python", &info);
	cae_backend_free(b); /* its stream goes */
	in_container(d, info.container_id, "0", "mv /.cae/cae-helper /.cae/moved");
	cae_run_result r;
	cae_error err = {0};
	b = bt_backend("docker", cfg, NULL);
	r = bt_exec(b, uuid, "echo still", 30000);
	ck_assert_str_eq(r.out, "still\n");
	ck_assert_msg(r.warning && strstr(r.warning, "cae-helper did not answer") &&
			  strstr(r.warning, "plain Engine API exec"),
		      "%s", r.warning ? r.warning : "(no warning)");
	cae_run_result_clear(&r);
	const char *patch = "[{\"type\": \"file_edit\", \"action\": \"create\", "
			    "\"target\": \"nohelper.txt\", \"content\": \"x\\n\"}]";
	json_t *res = NULL;
	ck_assert_int_eq(cae_worker_run_text(b, uuid, patch, strlen(patch), NULL, NULL, &res, &err),
			 -EOPNOTSUPP);
	ck_assert_ptr_null(res);
	ck_assert_msg(strstr(err.message, "cannot reach this environment's files") &&
			  strstr(err.message, "cae-helper did not answer"),
		      "%s", err.message);
	cae_editor_request ed = {
	    .command = CAE_EDITOR_CMD_VIEW, .path = "/workspace/project", .path_len = 18};
	cae_editor_result er = {0};
	ck_assert_int_eq(cae_backend_edit(b, uuid, NULL, &ed, &er, &err), -EOPNOTSUPP);
	ck_assert_msg(strstr(err.message, "cae-helper did not answer"), "%s", err.message);
	cae_editor_result_clear(&er);
	r = bt_exec(b, uuid, "test -e nohelper.txt && echo made || echo absent", 30000);
	ck_assert_str_eq(r.out, "absent\n");
	cae_run_result_clear(&r);
	ck_assert_int_eq(cae_backend_cleanup(b, uuid, &err), 0);
	cae_env_info_clear(&info);
	cae_docker_free(d);
	cae_backend_free(b);
	cae_config_free(cfg);
}
END_TEST

static int fs_call(cae_backend *b, const char *uuid, cae_fs_request q, uint32_t handle)
{
	q.handle = handle;
	cae_fs_reply rep;
	cae_error err = {0};
	int r = cae_backend_fs(b, uuid, &q, &rep, &err);
	ck_assert_msg(r == 0, "file operation %d: %s", (int)q.op, err.message);
	uint32_t h = rep.handle;
	cae_fs_reply_clear(&rep);
	return q.op == CAE_FS_OPEN ? (int)h : 0;
}

/* The helper killed with SIGKILL in the middle of a transaction of the patch worker (three
 * files staged, not committed): the next one to open the workspace through a new helper
 * rolls it back, leaving the old files, no staged file and no journal. */
START_TEST(helper_killed_mid_transaction_is_rolled_back)
{
	cae_config *cfg = dcfg();
	cae_backend *b = bt_backend("docker", cfg, NULL);
	cae_docker *d = client();
	char uuid[64];
	bt_task_uuid(uuid, sizeof(uuid), "caetest");
	cae_task t = bt_http_task(uuid);
	cae_env_info info;
	prepare_ok(b, &t, "python", &info);
	cae_run_result r =
	    bt_exec(b, uuid, "mkdir -p kp && echo old > kp/a && echo old > kp/b", 30000);
	ck_assert_int_eq(r.exit_code, 0);
	cae_run_result_clear(&r);
	int h =
	    fs_call(b, uuid, (cae_fs_request){.op = CAE_FS_OPEN, .root = info.workspace_path}, 0);
	ck_assert_int_gt(h, 0);
	fs_call(b, uuid, (cae_fs_request){.op = CAE_FS_TXN_BEGIN}, (uint32_t)h);
	const char *names[] = {"kp/a", "kp/b", "kp/new/c"};
	for (int i = 0; i < 3; i++)
		fs_call(b, uuid,
			(cae_fs_request){.op = CAE_FS_TXN_WRITE,
					 .rel = names[i],
					 .data = "new\n",
					 .len = 4,
					 .mode = (uint32_t)-1},
			(uint32_t)h);
	const char *look = "find /workspace -name '.cae-*' | sort";
	r = bt_exec(b, uuid, look, 30000);
	ck_assert_msg(strstr(r.out, ".cae-"), "nothing staged: %s", r.out);
	cae_run_result_clear(&r);
	kill_stream_helpers(d, info.container_id);
	cae_error err = {0};
	cae_backend_free(b); /* the manager goes too: nothing of the transaction is remembered */
	b = bt_backend("docker", cfg, NULL);
	h = fs_call(b, uuid, (cae_fs_request){.op = CAE_FS_OPEN, .root = info.workspace_path}, 0);
	fs_call(b, uuid, (cae_fs_request){.op = CAE_FS_CLOSE}, (uint32_t)h);
	/* (the journal directory, outside the project, stays: empty) */
	r = bt_exec(b, uuid,
		    "cat kp/a kp/b; test -e kp/new/c && echo c-exists; find /workspace -name "
		    "'.cae-*' ! -path /workspace/.cae-journal; ls -A /workspace/.cae-journal",
		    30000);
	ck_assert_msg(strcmp(r.out, "old\nold\n") == 0, "after recovery: %s", r.out);
	cae_run_result_clear(&r);
	ck_assert_int_eq(cae_backend_cleanup(b, uuid, &err), 0);
	cae_env_info_clear(&info);
	cae_docker_free(d);
	cae_backend_free(b);
	cae_config_free(cfg);
}
END_TEST

/* An MCP client that goes away (end of its input) while a command runs in a container: the
 * call is cancelled and the command ends in the container. */
START_TEST(mcp_client_gone_ends_the_command_in_the_container)
{
	char *dir = tu_mkdtemp();
	/* the engine is shared: no collection of other runs' environments; the container stays
	 * at exit, to be looked into */
	tu_write(dir, "config.yaml",
		 "command_executor:\n  backend: docker\n  docker:\n    network:\n      mode: "
		 "host\n  cleanup:\n    interval_hours: 0\n    on_session_end: false\n");
	char uuid[64], task[1024], config[600], taskpath[600], name[160];
	bt_task_uuid(uuid, sizeof(uuid), "caetest");
	snprintf(name, sizeof(name), "coding-agent-exec-%s", uuid);
	snprintf(bt_repo_url, sizeof(bt_repo_url), "%spy.git", git_daemon);
	snprintf(task, sizeof(task), "{\"uuid\": \"%s\", \"repo\": \"%s\"}", uuid, bt_repo_url);
	tu_write(dir, "task.json", task);
	snprintf(config, sizeof(config), "%s/config.yaml", dir);
	snprintf(taskpath, sizeof(taskpath), "%s/task.json", dir);
	int in[2];
	pid_t pid = spawn_mcp_task(config, taskpath, in);
	static const char msgs[] =
	    "{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\",\"params\":{"
	    "\"protocolVersion\":\"2025-06-18\",\"capabilities\":{},\"clientInfo\":{\"name\":\"t\","
	    "\"version\":\"1\"}}}\n"
	    "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n"
	    "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":"
	    "\"exec_command\",\"arguments\":{\"cwd\":\".\",\"command\":[\"sleep 334\"],"
	    "\"timeout_ms\":120000}}}\n";
	ck_assert_int_eq(write(in[1], msgs, sizeof(msgs) - 1), (ssize_t)(sizeof(msgs) - 1));
	cae_docker *d = client();
	/* the prepare first (the container gets its final name at the end) */
	for (int i = 0; i < 1200 && !container_exists(d, uuid); i++)
		nanosleep(&(struct timespec){0, 100000000L}, NULL);
	wait_top(d, name, "sleep 334", false);
	close(in[1]); /* the client is gone */
	int st;
	pid_t w = 0;
	for (int i = 0; i < 600 && w == 0; i++) {
		w = waitpid(pid, &st, WNOHANG);
		if (w == 0)
			nanosleep(&(struct timespec){0, 100000000L}, NULL);
	}
	if (w == 0) {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
	}
	ck_assert_msg(w == pid, "cae mcp still runs after the end of its input");
	char *top = top_text(d, name);
	ck_assert_msg(strstr(top, "sleep 334") == NULL, "left running: %s", top);
	free(top);
	cae_docker_container_remove(d, name, true, true, NULL);
	cae_docker_free(d);
	cae__rm_rf(dir);
	free(dir);
}
END_TEST

/* ---- many tasks on one host: collection, engine slots ---- */

/* A set of task uuids: what a collection in these tests may look at (the engine is shared
 * with other test runs, whose environments are not ours to remove). */
struct uuid_set {
	const char *uuids[8];
	size_t n;
};

static bool in_set(const char *uuid, void *ud)
{
	const struct uuid_set *set = ud;
	for (size_t i = 0; i < set->n; i++)
		if (strcmp(set->uuids[i], uuid) == 0)
			return true;
	return false;
}

static char *fake_env_running(cae_docker *d, char *uuid, size_t size, const char *created)
{
	char name[160];
	bt_task_uuid(uuid, size, "caetest");
	snprintf(name, sizeof(name), "coding-agent-exec-%s", uuid);
	char *id = fake_env(d, name, uuid, created);
	cae_error err = {0};
	ck_assert_msg(cae_docker_container_start(d, id, &err) == 0, "%s", err.message);
	return id;
}

/* The first run of a collector (what `cae mcp` starts with): an old environment and one
 * whose container stopped for good go; a fresh one stays, and so does one its helper
 * stopped after its lifetime (the next command starts it again). */
START_TEST(collector_first_run_docker)
{
	cae_config *cfg = dcfg();
	cae_backend *b = bt_backend("docker", cfg, NULL);
	cae_docker *d = client();
	char old[40], now[40];
	time_t two_days_ago = time(NULL) - 2 * 86400;
	struct tm tm;
	gmtime_r(&two_days_ago, &tm);
	strftime(old, sizeof(old), "%Y-%m-%dT%H:%M:%S.000Z", &tm);
	cae__iso8601_now(now, sizeof(now));
	char u_old[64], u_fresh[64], u_gone[64], u_expired[64];
	char *a = fake_env_running(d, u_old, sizeof(u_old), old);
	char *f = fake_env_running(d, u_fresh, sizeof(u_fresh), now);
	char *g = fake_env_running(d, u_gone, sizeof(u_gone), now);
	cae_error err = {0};
	ck_assert_int_eq(cae_docker_container_stop(d, g, 0, &err), 0);
	wait_stopped(d, g);
	/* a container its helper stopped: exit code 75, labelled as having a helper */
	char name[160];
	bt_task_uuid(u_expired, sizeof(u_expired), "caetest");
	snprintf(name, sizeof(name), "coding-agent-exec-%s", u_expired);
	json_t *ccfg = json_pack("{s:s, s:[s,s,s], s:[], s:{s:s, s:s, s:s, s:s, s:s}, s:{s:s}}",
				 "Image", test_image(), "Entrypoint", "sh", "-c", "exit 75", "Cmd",
				 "Labels", "cae.task_uuid", u_expired, "cae.environment", "python",
				 "cae.created_at", now, "cae.helper", "1", "cae.instance",
				 instance(), "HostConfig", "NetworkMode", "none");
	char *x = NULL;
	ck_assert_msg(cae_docker_container_create(d, name, ccfg, &x, NULL, &err) == 0, "%s",
		      err.message);
	json_decref(ccfg);
	ck_assert_int_eq(cae_docker_container_start(d, x, &err), 0);
	ck_assert_int_eq(wait_stopped(d, x), 75);
	struct uuid_set set = {{u_old, u_fresh, u_gone, u_expired}, 4};
	cae_collector_options o = {
	    .interval_ms = 0, .threshold_s = 24 * 3600, .filter = in_set, .filter_userdata = &set};
	cae_backend_collector *c = NULL;
	ck_assert_msg(cae_backend_collector_start(b, &o, &c, &err) == 0, "%s", err.message);
	ck_assert_uint_eq(cae_backend_collector_wait(c, 1, 300000), 1);
	cae_backend_collector_stop(c);
	ck_assert(!container_exists(d, u_old));
	ck_assert(!container_exists(d, u_gone));
	ck_assert(container_exists(d, u_fresh));
	ck_assert(container_exists(d, u_expired));
	remove_container(d, f);
	remove_container(d, x);
	free(a);
	free(f);
	free(g);
	free(x);
	cae_docker_free(d);
	cae_backend_free(b);
	cae_config_free(cfg);
}
END_TEST

/* What a session (a backend object) prepared is removed at its end; what another one
 * prepared stays. */
START_TEST(session_end_removes_what_it_prepared_docker)
{
	cae_config *cfg = dcfg();
	cae_backend *mine = bt_backend("docker", cfg, NULL),
		    *other = bt_backend("docker", cfg, NULL);
	cae_docker *d = client();
	char um[64], uo[64];
	bt_task_uuid(um, sizeof(um), "caetest");
	bt_task_uuid(uo, sizeof(uo), "caetest");
	cae_task tm = bt_http_task(um), to = bt_http_task(uo);
	cae_env_info info;
	prepare_ok(mine, &tm, "python", &info);
	cae_env_info_clear(&info);
	prepare_ok(other, &to, "python", &info);
	cae_env_info_clear(&info);
	int removed = -1;
	cae_error err = {0};
	ck_assert_msg(cae_backend_cleanup_prepared(mine, &removed, &err) == 0, "%s", err.message);
	ck_assert_int_eq(removed, 1);
	ck_assert(!container_exists(d, um));
	ck_assert(container_exists(d, uo));
	ck_assert_int_eq(cae_backend_cleanup(other, uo, &err), 0);
	cae_docker_free(d);
	cae_backend_free(mine);
	cae_backend_free(other);
	cae_config_free(cfg);
}
END_TEST

struct slot_prepare {
	cae_backend *b;
	cae_task t;
	int cancel_fd;
	int step_fd; /* written when step 3 (create) begins; -1: none */
	int r;
	cae_error err;
};

static void report_create(void *ud, int step, int total, const char *msg)
{
	(void)total;
	(void)msg;
	struct slot_prepare *sp = ud;
	if (step == 3 && sp->step_fd >= 0)
		ck_assert_int_eq(write(sp->step_fd, "3", 1), 1);
}

static void *slot_prepare_main(void *arg)
{
	struct slot_prepare *sp = arg;
	cae_prepare_options o = {
	    .progress = report_create, .progress_userdata = sp, .cancel_fd = sp->cancel_fd};
	cae_env_info info;
	sp->r = cae_backend_prepare(sp->b, &sp->t, "python", &o, &info, &sp->err);
	if (sp->r == 0)
		cae_env_info_clear(&info);
	return NULL;
}

/* With every engine slot of the state directory held (by another process, as far as cae
 * can tell), a prepare waits before it creates its container: cancelled there, it says it
 * was waiting for the engine and leaves nothing; admitted when a slot is given back. */
/* Nothing of a workspace's own file system (docker-disk/<uuid> of state) stays: no mount,
 * no loop device backed by its image, no directory. */
static void no_container_disk_left(const char *dir)
{
	tu_sh("for i in $(seq 100); do grep -qs '%s/' /sys/block/loop*/loop/backing_file || "
	      "break; sleep 0.1; done; ! grep '%s/' /proc/self/mountinfo "
	      "/sys/block/loop*/loop/backing_file && [ ! -e '%s' ]",
	      dir, dir, dir);
}

/* A prepare SIGKILLed once its container exists (its workspace's own file system mounted and
 * bound), and one killed between making the file system and creating the container (a
 * directory whose lock its dead preparer no longer holds): `gc` leaves neither's mount,
 * loop device nor image; one still being made (its lock held) is left alone. */
START_TEST(disk_of_a_killed_prepare_is_collected)
{
	cae_config *cfg = dcfg();
	char *state = tu_mkdtemp();
	bt_cfg_set(cfg, "command_executor.state_dir", state);
	bt_cfg_set(cfg, "command_executor.docker.resources.disk_limit", "64m");
	cae_backend *b = bt_backend("docker", cfg, NULL);
	char uuid[64], orphan[64];
	bt_task_uuid(uuid, sizeof(uuid), "caetest");
	bt_task_uuid(orphan, sizeof(orphan), "caetest");
	_cleanup_free_ char *dir = cae__diskfs_container_dir(state, uuid);
	_cleanup_free_ char *odir = cae__diskfs_container_dir(state, orphan);
	_cleanup_free_ char *ows = cae__path_join(odir, "workspace");
	struct bt_preparer p;
	cae_task t = bt_http_task(uuid);
	bt_preparer_start(&p, "docker", cfg, &t, 4);
	bt_preparer_wait_step(&p, 4);
	bt_preparer_kill(&p);
	_cleanup_free_ char *ws = cae__path_join(dir, "workspace");
	ck_assert_msg(cae__diskfs_mounted(ws), "no file system of its own at step 4");
	int lock = -1;
	cae_error err = {0};
	ck_assert_msg(cae__diskfs_container_make(odir, 64 << 20, 1000, 1000, -1, &lock, &err) == 0,
		      "%s", err.message);
	int removed = 0;
	ck_assert_int_eq(cae_backend_cleanup_stale(b, 86400, &removed, &err), 0);
	no_container_disk_left(dir);
	ck_assert(cae__diskfs_mounted(ows)); /* its preparer (this test) holds it */
	close(lock);
	ck_assert_int_eq(cae_backend_cleanup_stale(b, 86400, &removed, &err), 0);
	no_container_disk_left(odir);
	cae_backend_free(b);
	cae__rm_rf(state);
	free(state);
	cae_config_free(cfg);
}
END_TEST

START_TEST(prepare_waits_for_an_engine_slot)
{
	cae_config *cfg = dcfg();
	char *state = tu_mkdtemp();
	bt_cfg_set(cfg, "command_executor.state_dir", state);
	bt_cfg_set(cfg, "command_executor.docker.max_concurrent_engine_ops", "2");
	cae_backend *b = bt_backend("docker", cfg, NULL);
	cae_docker *d = client();
	char slots[4200];
	snprintf(slots, sizeof(slots), "%s/engine-slots", state);
	int held[2];
	for (int i = 0; i < 2; i++)
		ck_assert_int_eq(cae__slot_acquire(slots, 2, false, -1, &held[i], NULL), 0);
	int step[2], cancel[2];
	ck_assert_int_eq(pipe2(step, O_CLOEXEC), 0);
	ck_assert_int_eq(pipe2(cancel, O_CLOEXEC), 0);
	char uuid[64];
	bt_task_uuid(uuid, sizeof(uuid), "caetest");
	struct slot_prepare sp = {
	    .b = b, .t = bt_http_task(uuid), .cancel_fd = cancel[0], .step_fd = step[1]};
	pthread_t t;
	ck_assert_int_eq(pthread_create(&t, NULL, slot_prepare_main, &sp), 0);
	char c;
	ck_assert_int_eq(read(step[0], &c, 1), 1);
	ck_assert_int_eq(write(cancel[1], "x", 1), 1);
	ck_assert_int_eq(pthread_join(t, NULL), 0);
	ck_assert_int_eq(sp.r, -ECANCELED);
	ck_assert_msg(strstr(sp.err.message, "waiting for the engine") != NULL, "%s",
		      sp.err.message);
	ck_assert(!any_container(d, uuid));
	/* admitted once a slot is free */
	struct slot_prepare sp2 = {
	    .b = b, .t = bt_http_task(uuid), .cancel_fd = -1, .step_fd = step[1]};
	ck_assert_int_eq(pthread_create(&t, NULL, slot_prepare_main, &sp2), 0);
	ck_assert_int_eq(read(step[0], &c, 1), 1);
	cae__slot_release(held[0]);
	ck_assert_int_eq(pthread_join(t, NULL), 0);
	ck_assert_msg(sp2.r == 0, "%s", sp2.err.message);
	ck_assert(container_exists(d, uuid));
	cae_error err = {0};
	ck_assert_int_eq(cae_backend_cleanup(b, uuid, &err), 0);
	cae__slot_release(held[1]);
	for (int i = 0; i < 2; i++) {
		close(step[i]);
		close(cancel[i]);
	}
	cae_docker_free(d);
	cae_backend_free(b);
	cae__rm_rf(state);
	free(state);
	cae_config_free(cfg);
}
END_TEST

/* cae env list / environment_list: what a running environment uses, from the engine's
 * stats endpoint, next to its limits. */
START_TEST(list_shows_resources_docker)
{
	cae_config *cfg = dcfg();
	cae_backend *b = bt_backend("docker", cfg, NULL);
	char uuid[64];
	bt_task_uuid(uuid, sizeof(uuid), "caetest");
	cae_task t = bt_http_task(uuid);
	cae_env_info info;
	prepare_ok(b, &t, "python", &info);
	cae_env_info_clear(&info);
	cae_run_result r = bt_exec(
	    b, uuid, "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done; echo done", 120000);
	ck_assert_str_eq(r.out, "done\n");
	cae_run_result_clear(&r);
	json_t *list = NULL;
	cae_error err = {0};
	ck_assert_msg(cae_backend_list(b, &list, &err) == 0, "%s", err.message);
	json_t *res = NULL;
	size_t i;
	json_t *e;
	json_array_foreach(list, i, e)
	{
		if (strcmp(json_string_value(json_object_get(e, "task_uuid")), uuid) == 0)
			res = json_object_get(e, "resources");
	}
	ck_assert_ptr_nonnull(res);
	ck_assert(json_real_value(json_object_get(res, "cpu_seconds")) > 0.05);
	ck_assert_int_gt(json_integer_value(json_object_get(res, "memory_bytes")), 0);
	ck_assert_int_eq(json_integer_value(json_object_get(res, "memory_limit_bytes")),
			 1024 * 1024 * 1024);
	ck_assert(json_real_value(json_object_get(res, "cpus_limit")) == 1.0);
	ck_assert_int_ge(json_integer_value(json_object_get(res, "pids")), 1);
	ck_assert_int_eq(json_integer_value(json_object_get(res, "pids_limit")), 256);
	json_decref(list);
	ck_assert_int_eq(cae_backend_cleanup(b, uuid, &err), 0);
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

static bool warned_with(json_t *warnings, const char *needle)
{
	size_t i;
	json_t *w;
	json_array_foreach(warnings, i, w)
	{
		if (strstr(json_string_value(w), needle))
			return true;
	}
	return false;
}

/* Dependencies in the python image, as its user (uid 1000): pyproject.toml is installed by
 * pip, editable (poetry.lock names poetry, which the image lacks: a warning, pip instead);
 * Cargo.toml and environment.yml name tools the image lacks: warnings naming them, and the
 * prepare succeeds. */
START_TEST(dependencies_in_the_python_image)
{
	cae_config *cfg = dcfg();
	cae_backend *b = bt_backend("docker", cfg, NULL);
	char uuid[64];
	bt_task_uuid(uuid, sizeof(uuid), "caetest");
	char *work = tu_mkdtemp();
	shf("set -e; cd %s && git init -q -b main && mkdir caepkg && "
	    "echo 'VALUE = 1' > caepkg/__init__.py && "
	    "printf '[project]\\nname = \"caepkg\"\\nversion = \"0.1\"\\n[build-system]\\n"
	    "requires = [\"setuptools\"]\\nbuild-backend = \"setuptools.build_meta\"\\n' "
	    "> pyproject.toml && : > poetry.lock && "
	    "printf '[package]\\nname = \"t\"\\nversion = \"0.1.0\"\\n' > Cargo.toml && "
	    "printf 'name: t\\ndependencies: [python]\\n' > environment.yml && git add . && "
	    "git -c user.email=t@e -c user.name=t commit -qm init",
	    work);
	cae_task t = {.uuid = uuid, .repo = work};
	cae_env_info info;
	prepare_ok(b, &t, "python", &info);
	json_t *py = dep_of(info.deps, "pyproject.toml");
	ck_assert_ptr_nonnull(py);
	ck_assert_msg(json_is_true(json_object_get(py, "success")), "%s",
		      json_dumps(py, JSON_COMPACT));
	ck_assert_str_eq(json_string_value(json_object_get(py, "lock_file")), "poetry.lock");
	ck_assert_ptr_nonnull(strstr(json_string_value(json_object_get(py, "command")), "pip"));
	ck_assert(warned_with(info.warnings, "poetry is not installed"));
	ck_assert(json_is_true(json_object_get(dep_of(info.deps, "Cargo.toml"), "skipped")));
	ck_assert(warned_with(info.warnings, "cargo is not installed"));
	ck_assert(json_is_true(json_object_get(dep_of(info.deps, "environment.yml"), "skipped")));
	ck_assert(warned_with(info.warnings, "neither mamba nor conda"));
	cae_env_info_clear(&info);
	/* editable: a change in the clone is what an import anywhere sees */
	cae_run_result r =
	    bt_exec(b, uuid,
		    "echo 'VALUE = 2' > caepkg/__init__.py && cd / && python3 -c 'import caepkg; "
		    "print(caepkg.VALUE)' && id -u",
		    60000);
	ck_assert_str_eq(r.out, "2\n1000\n");
	cae_run_result_clear(&r);
	cae_error err = {0};
	ck_assert_int_eq(cae_backend_cleanup(b, uuid, &err), 0);
	cae__rm_rf(work);
	free(work);
	cae_backend_free(b);
	cae_config_free(cfg);
}
END_TEST

/* Go's shared caches on docker. Build cache (pkgcache-docker.c): filled by cae alone in a
 * container of its own, bound read-only at /cache/go, copied into a Go project's GOCACHE by
 * the prepare. Modules (pkgcache-gomod.c): cae's fill, in a container of the Go image as on
 * a host without go (the local tests fill with the host's), put the project's module (from
 * the operator's GOPROXY: a module proxy on the host's loopback, which the fill's container
 * reaches over the host's network) in the shared proxy bound read-only at
 * /cache/go-mod, first on the container's GOPROXY. Task A, as an attacker, writes into,
 * removes and adds to every file of both shared trees (refused: read-only binds of cae's
 * files), replaces every file of its own build cache copy with garbage and plants its own
 * code in the module as its go extracted it (its own: allowed). Then the operator's proxy
 * is gone: task B's go mod download (its prepare's) and go test, into an empty GOMODCACHE
 * too, take the module from the shared proxy alone, the module's own code; B's build cache
 * has the standard library's entries, none of A's garbage, and its go test passes; the
 * shared files on the host are unchanged, cae's, read-only. Failed before: no /cache/go,
 * the GOCACHE of a new container empty; no /cache/go-mod, B's module not found. */
START_TEST(go_build_cache_shared_read_only_docker)
{
	cae_config *cfg = dcfg();
	char *state = tu_mkdtemp();
	bt_cfg_set(cfg, "command_executor.state_dir", state);
	bt_cfg_set(cfg, "command_executor.package_cache.enabled", "true");
	cae_backend *b = bt_backend("docker", cfg, NULL);
	char ua[64], ub[64];
	bt_task_uuid(ua, sizeof(ua), "caetest");
	bt_task_uuid(ub, sizeof(ub), "caetest");
	char *work = tu_mkdtemp(), *gp = tu_mkdtemp();
	/* a module proxy on disk holding example.com/caedep, and a project that requires it
	 * (its go.sum made by go from that proxy: no network) */
	shf("set -e; P=%s; V=$P/m/example.com/caedep@v1.0.0; D=$P/proxy/example.com/caedep/@v; "
	    "mkdir -p $V $D; printf 'module example.com/caedep\\n\\ngo 1.19\\n' > $V/go.mod; "
	    "printf 'package caedep\\n\\nfunc Word() string { return \"pristine\" }\\n' > "
	    "$V/dep.go; (cd $P/m && zip -qr $D/v1.0.0.zip example.com/caedep@v1.0.0); cp "
	    "$V/go.mod $D/v1.0.0.mod; printf '{\"Version\":\"v1.0.0\"}' > $D/v1.0.0.info; "
	    "cd %s && git init -q -b main && printf 'module example.com/g\\n\\ngo "
	    "1.19\\n\\nrequire example.com/caedep v1.0.0\\n' > go.mod && printf 'package "
	    "g\\n\\nimport (\\n\\t\"strings\"\\n\\n\\t\"example.com/caedep\"\\n)\\n\\nfunc Up() "
	    "string { return strings.ToUpper(caedep.Word()) }\\n' > g.go && printf 'package "
	    "g\\n\\nimport \"testing\"\\n\\nfunc TestUp(t *testing.T) {\\n\\tif Up() != "
	    "\"PRISTINE\" {\\n\\t\\tt.Fatal(Up())\\n\\t}\\n}\\n' > g_test.go && HOME=$P/h "
	    "GOMODCACHE=$P/gm GOCACHE=$P/gc GOFLAGS='-mod=mod -modcacherw' GOPROXY=file://$P/proxy "
	    "GOSUMDB=off go mod tidy && test -s go.sum && rm -rf $P/gm $P/gc $P/h && git add . && "
	    "git -c user.email=t@e -c user.name=t commit -qm go",
	    gp, work);
	/* the operator's proxy: cae's environment; served on the loopback by a child of ours
	 * known to the runner (which reaps children it does not know of) */
	int port = tu_free_port();
	pid_t server = fork();
	ck_assert_int_ge(server, 0);
	if (server == 0) {
		int fd = open("/dev/null", O_RDWR);
		char pa[16], dir[PATH_MAX + 16];
		snprintf(pa, sizeof(pa), "%d", port);
		snprintf(dir, sizeof(dir), "%s/proxy", gp);
		if (fd < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0 || chdir(dir) < 0)
			_exit(127);
		execl("/usr/bin/python3", "python3", "-m", "http.server", "--bind", "127.0.0.1", pa,
		      (char *)NULL);
		_exit(127);
	}
	cae__proctree_lock();
	cae__proctree_register(server);
	cae__proctree_unlock();
	shf("for i in $(seq 100); do curl -sf -o /dev/null "
	    "http://127.0.0.1:%d/example.com/caedep/@v/v1.0.0.info && exit 0; sleep 0.1; done; "
	    "exit 1",
	    port);
	char proxy[64];
	snprintf(proxy, sizeof(proxy), "http://127.0.0.1:%d", port);
	setenv("GOPROXY", proxy, 1);
	/* the fill as on a host without go: the image's, in a container of cae's (the local
	 * tests fill with the host's) */
	cae__pkgcache_gomod_in_container = true;
	cae_task ta = {.uuid = ua, .repo = work}, tb = {.uuid = ub, .repo = work};
	cae_env_info info;
	prepare_ok(b, &ta, "go", &info);
	ck_assert(!warned_with(info.warnings, "Go build cache"));
	ck_assert(!warned_with(info.warnings, "Go module"));
	cae_env_info_clear(&info);
	cae_run_result r = bt_exec(
	    b, ua,
	    "C=$(go env GOCACHE); n=$(find \"$C\" -type f | wc -l); [ $n -gt 300 ] && echo seeded; "
	    "s=$(find /cache/go -path '*/build/*' -type f | wc -l); [ $s -eq $n ] && echo shared "
	    "|| echo \"not shared: $s $n\"; echo ${GOPROXY%%,*}; test -f "
	    "/cache/go-mod/example.com/caedep/@v/v1.0.0.zip && echo module; "
	    "w=0; for f in $(find /cache/go /cache/go-mod -type f); do { printf POISON >> \"$f\"; "
	    "} 2>/dev/null && w=$((w+1)); rm -f \"$f\" 2>/dev/null && w=$((w+1)); done; for d in "
	    "$(find /cache/go /cache/go-mod -type d); do touch \"$d/POISON\" 2>/dev/null && "
	    "w=$((w+1)); done; echo written:$w; k=0; for f in $(find \"$C\" -type f); do rm -f "
	    "\"$f\" && printf POISON > \"$f\" && k=$((k+1)); done; [ $k -eq $n ] && echo replaced; "
	    "M=$(go env GOMODCACHE); chmod -R u+w $M/example.com && printf 'package "
	    "caedep\\nfunc Word() string { return \"POISON\" }\\n' > "
	    "$M/example.com/caedep@v1.0.0/dep.go && go test ./... 2>&1 | grep -q POISON && echo "
	    "planted",
	    120000);
	ck_assert_msg(strcmp(r.out, "seeded\nshared\nfile:///cache/go-mod\nmodule\nwritten:0\n"
				    "replaced\nplanted\n") == 0,
		      "%s%s", r.out, r.err);
	cae_run_result_clear(&r);
	/* the operator's proxy unreachable from here on */
	cae__proctree_unregister(server);
	kill(server, SIGTERM);
	waitpid(server, NULL, 0);
	shf("rm -rf %s/proxy", gp);
	prepare_ok(b, &tb, "go", &info);
	json_t *d = NULL;
	size_t i;
	json_array_foreach(
	    info.deps, i,
	    d) if (strcmp(json_string_value(json_object_get(d, "manifest")), "go.mod") == 0) break;
	ck_assert_msg(d && json_is_true(json_object_get(d, "success")), "%s",
		      d ? json_string_value(json_object_get(d, "output")) : "no go mod download");
	cae_env_info_clear(&info);
	r = bt_exec(
	    b, ub,
	    "C=$(go env GOCACHE); n=$(find \"$C\" -type f | wc -l); [ $n -gt 300 ] && "
	    "echo seeded; grep -rl POISON \"$C\" /cache/go /cache/go-mod; go test ./... 2>&1 | "
	    "awk '!/^go: downloading/ {print $1, $2}'; GOMODCACHE=/tmp/fresh GOFLAGS=-modcacherw "
	    "go test -count=1 ./... 2>&1 | awk '!/^go: downloading/ {print $1, $2}'; grep -rl "
	    "POISON /tmp/fresh",
	    120000);
	ck_assert_msg(strcmp(r.out, "seeded\nok example.com/g\nok example.com/g\n") == 0, "%s%s",
		      r.out, r.err);
	cae_run_result_clear(&r);
	/* the shared files: none of A's, every one cae's and read-only */
	shf("! grep -rl POISON %s/package-cache && test -z \"$(find %s/package-cache \\( -path "
	    "'*/go-docker/*/*' -o -path '*/go-mod/*' \\) \\( -perm /222 -type f -o ! -user 0 "
	    "\\))\" "
	    "&& test -n \"$(find %s/package-cache -path '*/go-docker/*/build/*' -type f)\" && test "
	    "-f \"$(echo %s/package-cache/*/go-mod/example.com/caedep/@v/v1.0.0.zip)\"",
	    state, state, state, state);
	cae_error err = {0};
	ck_assert_int_eq(cae_backend_cleanup(b, ua, &err), 0);
	ck_assert_int_eq(cae_backend_cleanup(b, ub, &err), 0);
	cae__rm_rf(work);
	free(work);
	cae__rm_rf(gp);
	free(gp);
	cae__rm_rf(state);
	free(state);
	cae_backend_free(b);
	cae_config_free(cfg);
}
END_TEST

/* pip's shared wheels on docker (pkgcache-pip.c): cae's fill, in a container of the
 * environment's image (its Python's wheels: the engine's events show the fill's container),
 * put the wheel a container's requirements.txt names (from the operator's index,
 * PIP_INDEX_URL of cae's environment, here served on this host's loopback, which the fill's
 * container reaches on the host's network) in the shared directory bound read-only at
 * /cache/pip-wheels, named by the container's PIP_FIND_LINKS. Task A, as an attacker,
 * appends to, removes, renames and adds files there, its own wheel of the same name among
 * them (refused: a read-only bind of root's files); then the operator's index is gone, and
 * task B's prepare installs the package's own wheel from the shared directory alone. Failed
 * before: no /cache/pip-wheels, no PIP_FIND_LINKS, the install found no caewheel. */
START_TEST(pip_wheels_shared_read_only_docker)
{
	cae_config *cfg = dcfg();
	char *state = tu_mkdtemp();
	bt_cfg_set(cfg, "command_executor.state_dir", state);
	bt_cfg_set(cfg, "command_executor.package_cache.enabled", "true");
	cae_backend *b = bt_backend("docker", cfg, NULL);
	char ua[64], ub[64];
	bt_task_uuid(ua, sizeof(ua), "caetest");
	bt_task_uuid(ub, sizeof(ub), "caetest");
	char *work = tu_mkdtemp(), *pp = tu_mkdtemp();
	shf("set -e; P=%s; mkdir -p $P/src/caewheel $P/simple/caewheel; echo 'WORD = "
	    "\"pristine\"' > $P/src/caewheel/__init__.py; printf 'from setuptools import "
	    "setup\\nsetup(name=\"caewheel\", version=\"1.0\", packages=[\"caewheel\"])\\n' > "
	    "$P/src/setup.py; (cd $P && HOME=$P/h PATH=/usr/bin:/bin python3 -m pip wheel -q "
	    "--no-deps --no-build-isolation --no-index -w $P/wheels ./src) >/dev/null 2>&1; W=$(ls "
	    "$P/wheels); printf '<a href=\"../../wheels/%%s\">%%s</a>\\n' $W $W > "
	    "$P/simple/caewheel/index.html; cd %s && git init -q -b main && printf "
	    "'caewheel==1.0\\n' > requirements.txt && git add . && git -c user.email=t@e -c "
	    "user.name=t commit -qm pip",
	    pp, work);
	/* the operator's index: $P served on a loopback port */
	shf("P=%s; python3 -c 'import functools, http.server, sys\n"
	    "h = functools.partial(http.server.SimpleHTTPRequestHandler, directory=sys.argv[1])\n"
	    "s = http.server.ThreadingHTTPServer((\"127.0.0.1\", 0), h)\n"
	    "open(sys.argv[2] + \".new\", \"w\").write(str(s.server_address[1]))\n"
	    "__import__(\"os\").rename(sys.argv[2] + \".new\", sys.argv[2])\n"
	    "s.serve_forever()' $P $P/port >/dev/null 2>&1 & echo $! > $P/pid; for i in $(seq "
	    "300); do [ -s $P/port ] && exit 0; sleep 0.1; done; exit 1",
	    pp);
	char index[PATH_MAX + 64], t0[32];
	_cleanup_free_ char *port = NULL, *portfile = cae__path_join(pp, "port");
	ck_assert_int_eq(cae__read_file(AT_FDCWD, portfile, 64, &port, NULL), 0);
	snprintf(index, sizeof(index), "http://127.0.0.1:%s/simple", port);
	setenv("PIP_INDEX_URL", index, 1);
	snprintf(t0, sizeof(t0), "%lld", (long long)time(NULL));
	cae_task ta = {.uuid = ua, .repo = work}, tb = {.uuid = ub, .repo = work};
	cae_env_info info;
	prepare_ok(b, &ta, "python", &info);
	ck_assert(!warned_with(info.warnings, "pip wheels"));
	cae_env_info_clear(&info);
	/* the fill ran in a container of the python image, as no other test's does */
	shf("img=$(docker image inspect -f '{{.Id}}' coding-agent-executor-python:latest | sed "
	    "'s/^sha256://'); docker events --since %s --until $(($(date +%%s) + 1)) --filter "
	    "label=cae.pkgcache_fill=pip --filter event=create --format "
	    "'{{.Actor.Attributes.image}}' | grep -qx \"$img\"",
	    t0);
	cae_run_result r = bt_exec(
	    b, ua,
	    "echo $PIP_FIND_LINKS; ls /cache/pip-wheels; w=0; for f in $(find /cache/pip-wheels "
	    "-type f); do { printf POISON >> \"$f\"; } 2>/dev/null && w=$((w+1)); rm -f \"$f\" "
	    "2>/dev/null && w=$((w+1)); mv \"$f\" \"$f.x\" 2>/dev/null && w=$((w+1)); done; touch "
	    "/cache/pip-wheels/POISON 2>/dev/null && w=$((w+1)); echo POISON > /tmp/x.whl; cp "
	    "/tmp/x.whl /cache/pip-wheels/caewheel-1.0-py2.py3-none-any.whl 2>/dev/null && "
	    "w=$((w+1)); echo written:$w",
	    120000);
	ck_assert_msg(
	    strcmp(r.out, "/cache/pip-wheels\ncaewheel-1.0-py3-none-any.whl\nwritten:0\n") == 0,
	    "%s%s", r.out, r.err);
	cae_run_result_clear(&r);
	/* the operator's index gone */
	shf("kill $(cat %s/pid); rm -rf %s/simple %s/wheels", pp, pp, pp);
	prepare_ok(b, &tb, "python", &info);
	cae_env_info_clear(&info);
	r = bt_exec(b, ub,
		    "cd / && python3 -c 'import caewheel; print(caewheel.WORD)'; grep -rl POISON "
		    "/cache/pip-wheels",
		    120000);
	ck_assert_msg(strcmp(r.out, "pristine\n") == 0, "%s%s", r.out, r.err);
	cae_run_result_clear(&r);
	shf("! grep -rl POISON %s/package-cache && test -z \"$(find %s/package-cache -path "
	    "'*/pip-wheels/*' \\( -type f -perm /222 -o ! -user 0 \\))\" && test -f \"$(echo "
	    "%s/package-cache/*/pip-wheels/caewheel-1.0-py3-none-any.whl)\"",
	    state, state, state);
	cae_error err = {0};
	ck_assert_int_eq(cae_backend_cleanup(b, ua, &err), 0);
	ck_assert_int_eq(cae_backend_cleanup(b, ub, &err), 0);
	cae__rm_rf(work);
	free(work);
	cae__rm_rf(pp);
	free(pp);
	cae__rm_rf(state);
	free(state);
	cae_backend_free(b);
	cae_config_free(cfg);
}
END_TEST

/* The deps entry of package-lock.json in a prepare's result (NULL: none). */
static json_t *npm_dep(json_t *deps)
{
	json_t *d;
	size_t i;
	json_array_foreach(deps, i, d) if (strcmp(json_string_value(json_object_get(d, "manifest")),
						  "package-lock.json") == 0) return d;
	return NULL;
}

/* The shared node_modules trees on docker (pkgcache-npm-docker.c), in cae-test-node (node
 * and npm on the python test image). A's `npm ci` of a lock file that runs no code
 * (is-number, and semver with its bin link, from the npm registry) is kept by cae, taken out
 * through the engine's archive API before anything of A's ran; A then appends to every file
 * of its own node_modules. B, a new container of the same lock file, gets the tree instead
 * of an `npm ci`: uid 1000's and writable by it, none of A's writes, require and the bin
 * link work; B then appends to every file of its copy, which reaches no kept file. As an
 * attacker: C's repository has node_modules as a link to a directory of this host (and the
 * same lock file), D's to "/", E's package.json has an install script: none gets the tree
 * (each runs npm ci; D's fails, npm itself removing what the link names, the container's
 * "/"), nothing is written in the host's directory, no other tree is kept; F has the same
 * files and a yarn.lock, so yarn is its installer: no node_modules of npm's is put there.
 * The kept tree: cae's, read-only, none of A's or B's writes. Failed before: every
 * container ran npm ci (no shared_node_modules), nothing was kept. */
START_TEST(npm_tree_shared_docker)
{
	cae_config *cfg = dcfg();
	char *state = tu_mkdtemp();
	bt_cfg_set(cfg, "command_executor.state_dir", state);
	bt_cfg_set(cfg, "command_executor.package_cache.enabled", "true");
	bt_cfg_set(cfg, "command_executor.environments",
		   "python=coding-agent-executor-python:latest,node=cae-test-node:latest");
	cae_backend *b = bt_backend("docker", cfg, NULL);
	char *work = tu_mkdtemp(), *victim = tu_mkdtemp();
	shf("set -e; cd %s; mkdir a c d e f; cd a; git init -q -b main; printf "
	    "'{\"name\":\"t\",\"version\":\"1.0.0\",\"dependencies\":{\"is-number\":\"7.0.0\","
	    "\"semver\":\"7.6.3\"}}\\n' > package.json; HOME=%s/h npm install --package-lock-only "
	    "--ignore-scripts --no-audit --no-fund --cache %s/npmcache >/dev/null 2>&1; test -s "
	    "package-lock.json; git add .; git -c user.email=t@e -c user.name=t commit -qm npm; "
	    "for r in c d e f; do cp package.json package-lock.json ../$r/; (cd ../$r && git "
	    "init -q -b main); done; echo marker > %s/marker; ln -s %s ../c/node_modules; ln -s / "
	    "../d/node_modules; sed -i 's/\"version\":\"1.0.0\",/&\"scripts\":{\"postinstall\":"
	    "\"echo ran > ran.txt\"},/' ../e/package.json; grep -q postinstall ../e/package.json; "
	    ": > ../f/yarn.lock; for r in c d e f; do (cd ../$r && git add . && git -c "
	    "user.email=t@e -c user.name=t commit -qm npm); done",
	    work, work, work, victim, victim);
	const char *names[] = {"a", "a", "c", "d", "e", "f"};
	char uuids[6][64];
	cae_env_info info;
	for (int i = 0; i < 6; i++) {
		bt_task_uuid(uuids[i], sizeof(uuids[i]), "caetest");
		char repo[PATH_MAX];
		snprintf(repo, sizeof(repo), "%s/%s", work, names[i]);
		cae_task t = {.uuid = uuids[i], .repo = repo};
		prepare_ok(b, &t, "node", &info);
		json_t *d = npm_dep(info.deps);
		if (i == 5) {
			/* F's installer is yarn (not in the image: skipped), never npm ci */
			ck_assert(!d);
			cae_env_info_clear(&info);
			cae_run_result r =
			    bt_exec(b, uuids[5], "test -e node_modules || echo none", 60000);
			ck_assert_msg(strcmp(r.out, "none\n") == 0, "%s%s", r.out, r.err);
			cae_run_result_clear(&r);
			continue;
		}
		/* (D's npm ci fails: npm removes what node_modules links to, "/" there) */
		ck_assert_msg(d && json_is_true(json_object_get(d, "success")) == (i != 3),
			      "%d: %s", i,
			      d ? json_string_value(json_object_get(d, "output")) : "no npm ci");
		/* only B got A's tree; every other one ran npm ci */
		ck_assert_msg(json_is_true(json_object_get(d, "shared_node_modules")) == (i == 1),
			      "%d: %s", i, json_string_value(json_object_get(d, "command")));
		ck_assert_msg(!warned_with(info.warnings, "node_modules"), "%d", i);
		cae_env_info_clear(&info);
		if (i == 0) {
			cae_run_result r =
			    bt_exec(b, uuids[0],
				    "w=0; for f in $(find node_modules -type f); do printf POISON "
				    ">> \"$f\" && w=$((w+1)); done; [ $w -gt 10 ] && echo written",
				    60000);
			ck_assert_msg(strcmp(r.out, "written\n") == 0, "%s%s", r.out, r.err);
			cae_run_result_clear(&r);
		}
	}
	cae_run_result r = bt_exec(
	    b, uuids[1],
	    "n=$(find node_modules | wc -l); [ $n -gt 10 ] && echo tree; test -z \"$(find "
	    "node_modules ! -user 1000 -o ! -group 1000)\" && echo owned; grep -rl POISON "
	    "node_modules; node -e 'console.log(require(\"is-number\")(5))'; "
	    "node_modules/.bin/semver 1.2.3; test -L node_modules/.bin/semver && echo link; w=0; "
	    "for f in $(find node_modules -type f); do printf POISON >> \"$f\" && w=$((w+1)); "
	    "done; "
	    "[ $w -gt 10 ] && echo written; mkdir node_modules/mine && echo made",
	    60000);
	ck_assert_msg(strcmp(r.out, "tree\nowned\ntrue\n1.2.3\nlink\nwritten\nmade\n") == 0, "%s%s",
		      r.out, r.err);
	cae_run_result_clear(&r);
	/* E's script ran (its npm ci did) */
	r = bt_exec(b, uuids[4], "cat ran.txt", 60000);
	ck_assert_str_eq(r.out, "ran\n");
	cae_run_result_clear(&r);
	/* the host's directory C's link named: only its own file; the kept tree: one, none of
	 * A's or B's writes, cae's and read-only, with semver's bin link */
	shf("test \"$(ls -A %s)\" = marker && test \"$(cat %s/marker)\" = marker", victim, victim);
	shf("cd %s/package-cache/*/npm-trees && test \"$(ls -A | grep -v -e '^\\.used$' -e "
	    "'^\\.lock-' | wc -l)\" = "
	    "1 && "
	    "! grep -rl POISON . && test -z \"$(find . -path './*/*' \\( -type f -perm /222 -o ! "
	    "-user 0 \\))\" && test -f */node_modules/is-number/index.js && test -L "
	    "*/node_modules/.bin/semver",
	    state);
	cae_error err = {0};
	for (int i = 0; i < 6; i++)
		ck_assert_int_eq(cae_backend_cleanup(b, uuids[i], &err), 0);
	cae__rm_rf(work);
	free(work);
	cae__rm_rf(victim);
	free(victim);
	cae__rm_rf(state);
	free(state);
	cae_backend_free(b);
	cae_config_free(cfg);
}
END_TEST

#define MANY 32

/* 32 prepares at once (each its own backend, as separate processes would be) on a small
 * host: every one succeeds, and every one is then removed. */
START_TEST(many_prepares_at_once_all_succeed)
{
	cae_config *cfg = dcfg();
	char *state = tu_mkdtemp();
	bt_cfg_set(cfg, "command_executor.state_dir", state);
	cae_docker *d = client();
	static struct slot_prepare sp[MANY];
	static char uuids[MANY][64];
	pthread_t t[MANY];
	(void)bt_http_task("x"); /* bt_repo_url is set once, before the threads read it */
	for (int i = 0; i < MANY; i++) {
		bt_task_uuid(uuids[i], sizeof(uuids[i]), "caetest");
		sp[i] = (struct slot_prepare){
		    .b = bt_backend("docker", cfg, NULL), .cancel_fd = -1, .step_fd = -1, .r = 1};
		sp[i].t =
		    (cae_task){.uuid = uuids[i], .repo = bt_repo_url, .platform = (char *)"github"};
	}
	for (int i = 0; i < MANY; i++)
		ck_assert_int_eq(pthread_create(&t[i], NULL, slot_prepare_main, &sp[i]), 0);
	int ok = 0;
	for (int i = 0; i < MANY; i++) {
		ck_assert_int_eq(pthread_join(t[i], NULL), 0);
		if (sp[i].r == 0)
			ok++;
		else
			fprintf(stderr, "prepare %d: %s\n", i, sp[i].err.message);
	}
	for (int i = 0; i < MANY; i++) {
		cae_error err = {0};
		ck_assert_msg(cae_backend_cleanup(sp[i].b, uuids[i], &err) == 0, "%s", err.message);
		ck_assert(!any_container(d, uuids[i]));
		cae_backend_free(sp[i].b);
	}
	ck_assert_int_eq(ok, MANY);
	cae_docker_free(d);
	cae__rm_rf(state);
	free(state);
	cae_config_free(cfg);
}
END_TEST

/* command_executor.protected_paths in a container: .git/hooks is root's, and every
 * directory on the way to it root's and sticky, so that commands (the image's user, no
 * capabilities) and the editor cannot write, rename or remove it, whichever way they try;
 * the agent's own git config, commit and push work (the push with our credential helper
 * only: one the repository names does not run). */
START_TEST(protected_paths_hold_in_a_container)
{
	cae_config *cfg = dcfg();
	cae_backend *b = bt_backend("docker", cfg, NULL);
	char uuid[64];
	bt_task_uuid(uuid, sizeof(uuid), "caetest");
	cae_task t = bt_http_task(uuid);
	cae_env_info info;
	prepare_ok(b, &t, "python", &info);
	static const char state_script[] =
	    "ls -la .git/hooks | sed 1d | awk '{print $1, $3, $5, $9}' | sort && "
	    "cat .git/hooks/* | cksum && find /workspace -name pre-commit 2>/dev/null; "
	    "stat -c '%U %a %n' /workspace /workspace/project /workspace/project/.git";
	cae_run_result r = bt_exec(b, uuid, state_script, 30000);
	char *before = strdup(r.out);
	cae_run_result_clear(&r);
	ck_assert_msg(strstr(before, "pre-commit.sample") && strstr(before, " root ") &&
			  strstr(before, "root 1777 /workspace/project/.git"),
		      "%s", before);
	bt_agent_git_works(b, uuid, "", 120000);
	bt_attacks_fail(b, uuid, bt_hook_attacks, ARRAY_SIZE(bt_hook_attacks), state_script, before,
			"rm -rf /workspace/p2 .g .git/h2 ../h /tmp/t; git checkout -q -- . "
			"2>/dev/null; true",
			30000);
	bt_editor_cannot_write_hooks(b, uuid);
	r = bt_exec(b, uuid, state_script, 30000);
	ck_assert_str_eq(r.out, before);
	cae_run_result_clear(&r);
	/* the rest of the workspace stays the agent's */
	r = bt_exec(b, uuid,
		    "echo ok > new.txt && mkdir -p d/e && mv new.txt d/e/ && rm -r d && "
		    "echo ok > /workspace/tmp/x && git status --short | wc -l",
		    30000);
	ck_assert_msg(r.exit_code == 0, "%s%s", r.out, r.err);
	cae_run_result_clear(&r);
	free(before);
	cae_error err = {0};
	cae_backend_cleanup(b, uuid, &err);
	cae_env_info_clear(&info);
	cae_backend_free(b);
	cae_config_free(cfg);
}
END_TEST

/* A tar header (POSIX ustar unless gnu) for the confinement check: name (with prefix in
 * the ustar prefix field when given), type, size written in octal (or raw when size_raw). */
static void tar_hdr(char *h, const char *prefix, const char *name, char type, const char *size,
		    bool gnu)
{
	memset(h, 0, 512);
	memcpy(h, name, strlen(name));
	memcpy(h + 100, "0000644", 7);
	memcpy(h + 124, size, strlen(size));
	h[156] = type;
	memcpy(h + 257,
	       gnu ? "ustar  "
		   : "ustar\0"
		     "00",
	       8);
	if (prefix)
		memcpy(h + 345, prefix, strlen(prefix));
}

/* The store's extraction of the engine's tar of a node_modules (pkgcache-npm-docker.c),
 * given tars an attacker would shape (made with Python's tarfile): only node_modules and
 * what is beneath it, directories, regular files (sealed) and bin links; nothing through
 * a link, no "..", no absolute name, no hard link, device or fifo, no entry twice, no other
 * link. Outside the root (a directory beside it and one a link names) nothing appears. */
START_TEST(npm_tree_extract_refuses_escapes)
{
	char *dir = tu_mkdtemp();
	/* each case: python lines adding to tar t; the expected result */
	static const struct {
		const char *add;
		int r;
	} cases[] = {
	    {"d('node_modules/'); d('node_modules/x/'); f('node_modules/x/index.js', 0o755); "
	     "d('node_modules/.bin/'); l('node_modules/.bin/x', '../x/index.js')",
	     0},
	    {"d('node_modules/'); f('node_modules/../outside/evil')", -EPERM},
	    {"d('node_modules/'); f('/outside/evil')", -EPERM},
	    {"d('node_modules/'); f('outside/evil')", -EPERM},
	    {"d('node_modules/'); d('node_modules/x/'); f('node_modules/x/./../../outside/e')",
	     -EPERM},
	    {"d('node_modules/'); l('node_modules/x', 'OUT')", -EPERM},
	    {"d('node_modules/'); d('node_modules/.bin/'); l('node_modules/.bin/x', '../../out')",
	     -EPERM},
	    {"d('node_modules/'); d('node_modules/.bin/'); l('node_modules/.bin/x', 'OUT')",
	     -EPERM},
	    /* a bin link that stays inside, then a file through it */
	    {"d('node_modules/'); d('node_modules/y/'); d('node_modules/.bin/'); "
	     "l('node_modules/.bin/x', '../y'); f('node_modules/.bin/x/evil')",
	     -ENOTDIR},
	    {"d('node_modules/'); f('node_modules/a'); h('node_modules/b', 'node_modules/a')",
	     -EPERM},
	    {"d('node_modules/'); o('node_modules/p', tarfile.FIFOTYPE)", -EPERM},
	    {"d('node_modules/'); o('node_modules/c', tarfile.CHRTYPE)", -EPERM},
	    {"d('node_modules/'); f('node_modules/a'); f('node_modules/a')", -EEXIST},
	    /* node_modules itself a link, or a file */
	    {"l('node_modules', 'OUT')", -EPERM},
	    {"f('node_modules')", -EPERM},
	    {"d('node_modules/'); d('node_modules/' + 'd/' * 70); ", -EPERM},
	};
	/* every case's tar (tar-N) made by one python */
	char py[8192];
	size_t o = (size_t)snprintf(
	    py, sizeof(py),
	    "import io, tarfile\ndef e(n, ty, **k):\n  i = tarfile.TarInfo(n); i.type = ty; "
	    "[setattr(i, a, v) for a, v in k.items()]; t.addfile(i, io.BytesIO(b'x' * i.size) "
	    "if ty == tarfile.REGTYPE else None)\nd = lambda n: e(n, tarfile.DIRTYPE, "
	    "mode=0o755)\nf = lambda n, m=0o644: e(n, tarfile.REGTYPE, mode=m, size=3)\nl = "
	    "lambda n, to: e(n, tarfile.SYMTYPE, linkname=to.replace('OUT', '%s/outside'))\nh = "
	    "lambda n, to: e(n, tarfile.LNKTYPE, linkname=to)\no = lambda n, ty: e(n, ty)\n",
	    dir);
	for (size_t i = 0; i < ARRAY_SIZE(cases); i++)
		o +=
		    (size_t)snprintf(py + o, sizeof(py) - o,
				     "t = tarfile.open('tar-%zu', 'w', format=tarfile.PAX_FORMAT)\n"
				     "%s\nt.close()\n",
				     i, cases[i].add);
	ck_assert_uint_lt(o, sizeof(py));
	char pyfile[PATH_MAX];
	snprintf(pyfile, sizeof(pyfile), "%s/make.py", dir);
	ck_assert_int_eq(cae__write_file_atomic(AT_FDCWD, pyfile, py, o, 0644, false), 0);
	shf("cd %s && python3 make.py", dir);
	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		shf("cd %s && rm -rf root && mkdir -p root/node_modules outside", dir);
		char path[PATH_MAX];
		snprintf(path, sizeof(path), "%s/tar-%zu", dir, i);
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		snprintf(path, sizeof(path), "%s/root/node_modules", dir);
		int root = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		ck_assert(fd >= 0 && root >= 0);
		int r = cae__pkgcache_npm_extract(fd, root);
		close(fd);
		close(root);
		ck_assert_msg(r == cases[i].r, "%zu: %d (%s)", i, r, cases[i].add);
		/* nothing outside; what was made, sealed */
		shf("cd %s && test -z \"$(ls -A outside)\" && test -z \"$(find root -type f -perm "
		    "/222)\"",
		    dir);
	}
	/* the good one's tree */
	shf("cd %s && rm -rf root && mkdir -p root/node_modules && python3 -c \"\nimport io, "
	    "tarfile\nt = tarfile.open('tar', 'w', format=tarfile.PAX_FORMAT)\nfor n in "
	    "['node_modules/', 'node_modules/x/']:\n  i = tarfile.TarInfo(n); i.type = "
	    "tarfile.DIRTYPE; t.addfile(i)\ni = tarfile.TarInfo('node_modules/x/' + 'n' * 200); "
	    "i.size = 3; i.mode = 0o755; t.addfile(i, io.BytesIO(b'abc'))\nt.close()\n\"",
	    dir);
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/tar", dir);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	snprintf(path, sizeof(path), "%s/root/node_modules", dir);
	int root = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	ck_assert_int_eq(cae__pkgcache_npm_extract(fd, root), 0);
	close(fd);
	close(root);
	shf("cd %s/root/node_modules/x && test \"$(cat n*)\" = abc && test \"$(stat -c %%a n*)\" = "
	    "555",
	    dir);
	cae__rm_rf(dir);
	free(dir);
}
END_TEST

/* The one archive extracted at "/" as root carries the container's tar only when it stays
 * beneath the project: a container's user who shaped that tar must not reach the claim's
 * record, the helper or anything else of root's. */
START_TEST(tar_confined_to_the_project)
{
	static char t[512 * 8];
	const char *P = "workspace/project/";
	/* a directory and a file of 5 bytes, then the end */
	memset(t, 0, sizeof(t));
	tar_hdr(t, NULL, "workspace/project/.git/hooks/", '5', "00000000000", false);
	tar_hdr(t + 512, NULL, "workspace/project/.git/hooks/pre-commit", '0', "00000000005",
		false);
	memcpy(t + 1024, "hello", 5);
	ck_assert(cae__tar_confined(t, 512 * 5, P));
	/* GNU headers too; the ustar prefix field is part of the name */
	tar_hdr(t, NULL, "workspace/project/.git/hooks/", '5', "0", true);
	ck_assert(cae__tar_confined(t, 512 * 5, P));
	tar_hdr(t, "workspace/project/.git", "hooks/x", '5', "0", false);
	ck_assert(cae__tar_confined(t, 512 * 5, P));
	/* no end, or a lone zero block */
	ck_assert(!cae__tar_confined(t, 512 * 3, P));
	ck_assert(!cae__tar_confined(t, 512 * 4, P));
	ck_assert(!cae__tar_confined(t, 100, P));
	/* beneath the prefix only: the record, the helper, the prefix itself, a leading "/",
	 * ".." anywhere, a prefix field that escapes, GNU's prefix area that is not one */
	const char *bad[] = {".cae-claim/git_credential",
			     ".cae/cae-helper",
			     "workspace/project/",
			     "workspace/project",
			     "/workspace/project/x",
			     "workspace/project/../../.cae-claim/x",
			     "workspace/project/..",
			     "workspace/projectx/a",
			     "workspace/tmp/x"};
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		tar_hdr(t, NULL, bad[i], '5', "0", false);
		ck_assert_msg(!cae__tar_confined(t, 512 * 5, P), "%s", bad[i]);
	}
	tar_hdr(t, "workspace/project/../..", "etc", '5', "0", false);
	ck_assert(!cae__tar_confined(t, 512 * 5, P));
	tar_hdr(t, ".cae-claim", "workspace/project/x", '5', "0", false);
	ck_assert(!cae__tar_confined(t, 512 * 5, P));
	/* links, devices, long names and pax headers, star and v7 headers */
	const char types[] = {'1', '2', '3', '4', '6', '7', 'L', 'K', 'x', 'g', 'S'};
	for (size_t i = 0; i < sizeof(types); i++) {
		tar_hdr(t, NULL, "workspace/project/.git/hooks/l", types[i], "0", false);
		ck_assert_msg(!cae__tar_confined(t, 512 * 5, P), "type %c", types[i]);
	}
	tar_hdr(t, NULL, "workspace/project/.git/hooks/", '5', "0", false);
	memcpy(t + 508, "tar", 4);
	ck_assert(!cae__tar_confined(t, 512 * 5, P));
	memset(t + 257, 0, 8);
	memset(t + 508, 0, 4);
	ck_assert(!cae__tar_confined(t, 512 * 5, P));
	/* sizes: a directory with data, a base-256 size, one past the end, a non-octal one;
	 * a size that hides a header in the data is read as the engine reads it */
	tar_hdr(t, NULL, "workspace/project/.git/hooks/", '5', "00000000001", false);
	ck_assert(!cae__tar_confined(t, 512 * 5, P));
	tar_hdr(t, NULL, "workspace/project/.git/hooks/", '5', "0", false);
	tar_hdr(t + 512, NULL, "workspace/project/a", '0', "", false);
	t[512 + 124] = (char)0x80;
	t[512 + 135] = 5;
	ck_assert(!cae__tar_confined(t, 512 * 5, P));
	tar_hdr(t + 512, NULL, "workspace/project/a", '0', "77777777777", false);
	ck_assert(!cae__tar_confined(t, 512 * 5, P));
	tar_hdr(t + 512, NULL, "workspace/project/a", '0', "00000000009", false);
	ck_assert(!cae__tar_confined(t, 512 * 5, P));
	/* a file of 512 bytes whose data looks like a header of the record: data, not read */
	memset(t, 0, sizeof(t));
	tar_hdr(t, NULL, "workspace/project/a", '0', "00000001000", false);
	tar_hdr(t + 512, NULL, ".cae-claim/git_credential", '0', "0", false);
	ck_assert(cae__tar_confined(t, 512 * 4, P));
	/* and one of 0 bytes: the same block is then a header, refused */
	tar_hdr(t, NULL, "workspace/project/a", '0', "0", false);
	ck_assert(!cae__tar_confined(t, 512 * 4, P));
}
END_TEST

/* The same extraction given GNU tar's own format (the kubernetes store reads the tar the
 * pod's image's tar writes, GNU tar's on Debian images: names past 100 bytes in its
 * ././@LongLink records, link targets past 100 in its K records), made by this host's GNU
 * tar (--format=gnu): a tree of long names and a long bin link comes out whole and sealed;
 * what an attacker can make GNU tar write (-P and --transform: "..", also inside a long
 * name, an absolute name; a hard link; node_modules a link to a directory of this host; a
 * bin link that climbs out in a long target; a fifo) is refused and nothing appears
 * outside. Failed before: none (GNU's records were read already); the kubernetes store is
 * the first to read them (pkgcache-npm-kubernetes.c). */
START_TEST(npm_tree_extract_gnu_tar)
{
	char *dir = tu_mkdtemp();
	shf("set -e; cd %s; L=$(printf 'l%%.0s' $(seq 150)); F=$(printf 'f%%.0s' $(seq 120)); "
	    "mkdir -p outside g/node_modules/$L g/node_modules/.bin e/node_modules "
	    "h/node_modules l p/node_modules x/node_modules/.bin; printf abc > "
	    "g/node_modules/$L/$F; chmod 755 g/node_modules/$L/$F; ln -s ../$L/$F "
	    "g/node_modules/.bin/t; echo x > e/node_modules/evil; echo a > h/node_modules/a; ln "
	    "h/node_modules/a h/node_modules/b; ln -s %s/outside l/node_modules; mkfifo "
	    "p/node_modules/f; ln -s ../$L/../../../outside x/node_modules/.bin/x; G='tar "
	    "--format=gnu -cf'; (cd g && $G ../t-good node_modules); for w in "
	    "node_modules/../outside/evil node_modules/$L/../../outside/evil %s/outside/evil; "
	    "do i=$((${i:-0}+1)); (cd e && $G ../t-e$i -P node_modules --transform "
	    "\"s,^node_modules/evil,$w,\" 2>/dev/null); done; for t in h l p x; do (cd $t && $G "
	    "../t-$t node_modules); done; tar -tf t-good | grep -q \"/$F\\$\"",
	    dir, dir, dir);
	static const struct {
		const char *tar;
		int r;
	} cases[] = {{"t-e1", -EPERM}, {"t-e2", -EPERM}, {"t-e3", -EPERM}, {"t-h", -EPERM},
		     {"t-l", -EPERM},  {"t-p", -EPERM},	 {"t-x", -EPERM},  {"t-good", 0}};
	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		shf("cd %s && rm -rf root && mkdir -p root/node_modules", dir);
		char path[PATH_MAX];
		snprintf(path, sizeof(path), "%s/%s", dir, cases[i].tar);
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		snprintf(path, sizeof(path), "%s/root/node_modules", dir);
		int root = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		ck_assert(fd >= 0 && root >= 0);
		int r = cae__pkgcache_npm_extract(fd, root);
		close(fd);
		close(root);
		ck_assert_msg(r == cases[i].r, "%s: %d", cases[i].tar, r);
		shf("cd %s && test -z \"$(ls -A outside)\" && test -z \"$(find root -type f -perm "
		    "/222)\"",
		    dir);
	}
	/* the good one's tree: the long names, sealed, the long bin link */
	shf("cd %s/root/node_modules && test \"$(cat l*/f*)\" = abc && test \"$(stat -c %%a "
	    "l*/f*)\" = 555 && test \"$(cat .bin/t)\" = abc && test -L .bin/t",
	    dir);
	cae__rm_rf(dir);
	free(dir);
}
END_TEST

static Suite *make_suite(void)
{
	Suite *s = suite_create("backend-docker");
	TCase *u = tcase_create("unit");
	tcase_set_timeout(u, 60);
	tcase_add_test(u, preparer_alive_or_not);
	tcase_add_test(u, tar_confined_to_the_project);
	tcase_add_test(u, npm_tree_extract_refuses_escapes);
	tcase_add_test(u, npm_tree_extract_gnu_tar);
	suite_add_tcase(s, u);

	TCase *b = tcase_create("backend");
	tcase_set_timeout(b, 300);
	tcase_add_unchecked_fixture(b, gs_setup, gs_teardown);
	tcase_add_unchecked_fixture(b, NULL, sweep);
	tcase_add_test(b, backend_prepare_pytest_cleanup);
	tcase_add_test(b, backend_killed_prepare_is_never_ready);
	tcase_add_test(b, backend_prepare_in_progress_is_creating);
	tcase_add_test(b, tools_report_a_container_gone_mid_command);
	tcase_add_test(b, cli_prepare_killed_then_gc);
	tcase_add_test(b, mcp_end_of_input_cancels_task_prepare);
	tcase_add_test(b, backend_missing_image);
	tcase_add_test(b, backend_unreachable_repo);
	tcase_add_test(b, backend_wrong_token);
	tcase_add_test(b, backend_pull_request_diff_in_shallow_clone);
	tcase_add_test(b, backend_local_path_repository);
	tcase_add_test(b, backend_token_appears_nowhere);
	tcase_add_test(b, backend_security_and_limits);
	tcase_add_test(b, backend_network_none_and_socket_warning);
	tcase_add_test(b, backend_fork_bomb_held);
	tcase_add_test(b, backend_oom_is_137);
	tcase_add_test(b, backend_timeout_kills_in_container);
	tcase_add_test(b, backend_environment_gone);
	tcase_add_test(b, backend_stale_gc);
	tcase_add_test(b, backend_auto_selection);
	tcase_add_test(b, helper_killed_mid_command);
	tcase_add_test(b, cli_exec_signals_end_the_command_in_the_container);
	tcase_add_test(b, helper_in_a_busybox_only_image);
	tcase_add_test(b, editor_goldens_in_a_container);
	tcase_add_test(b, push_leaves_no_token_in_inspect);
	tcase_add_test(b, leaked_container_stops_and_comes_back);
	tcase_add_test(b, several_managers_at_once);
	tcase_add_test(b, dead_helper_falls_back_with_a_warning);
	tcase_add_test(b, helper_killed_mid_transaction_is_rolled_back);
	tcase_add_test(b, mcp_client_gone_ends_the_command_in_the_container);
	suite_add_tcase(s, b);

	TCase *m = tcase_create("many");
	tcase_set_timeout(m, 1200);
	tcase_add_unchecked_fixture(m, gs_setup, gs_teardown);
	tcase_add_unchecked_fixture(m, NULL, sweep);
	tcase_add_test(m, collector_first_run_docker);
	tcase_add_test(m, session_end_removes_what_it_prepared_docker);
	tcase_add_test(m, prepare_waits_for_an_engine_slot);
	tcase_add_test(m, disk_of_a_killed_prepare_is_collected);
	tcase_add_test(m, list_shows_resources_docker);
	tcase_add_test(m, dependencies_in_the_python_image);
	tcase_add_test(m, many_prepares_at_once_all_succeed);
	suite_add_tcase(s, m);

	/* protected paths in a container: a case of its own (CK_RUN_CASE=protected) */
	TCase *pr = tcase_create("protected");
	tcase_set_timeout(pr, 300);
	tcase_add_unchecked_fixture(pr, gs_setup, gs_teardown);
	tcase_add_unchecked_fixture(pr, NULL, sweep);
	tcase_add_test(pr, protected_paths_hold_in_a_container);
	suite_add_tcase(s, pr);

	/* the shared package caches in containers (CK_RUN_CASE=pkgcache) */
	TCase *pk = tcase_create("pkgcache");
	tcase_set_timeout(pk, 600);
	tcase_add_unchecked_fixture(pk, gs_setup, gs_teardown);
	tcase_add_unchecked_fixture(pk, NULL, sweep);
	tcase_add_test(pk, go_build_cache_shared_read_only_docker);
	tcase_add_test(pk, pip_wheels_shared_read_only_docker);
	tcase_add_test(pk, npm_tree_shared_docker);
	suite_add_tcase(s, pk);
	return s;
}

int main(void)
{
	dt_init();
	bt_init();
	setenv("CAE_INSTANCE", instance(), 1);
	return tu_run(make_suite());
}
