/* The backend conformance suite: every scenario a backend must pass, run against the backend
 * named by argv[1] ("local" or "docker"; meson runs it once for each). A new backend is
 * proven by adding its target below and passing (local, docker, docker-tcp, podman,
 * kubernetes). What
 * differs between backends is only how a test makes a config for it and how it destroys an
 * environment behind cae's back.
 *
 * Repositories come from the loopback git server (tests/gitserver.h); docker containers use
 * the host network to reach it. */
#include "backend-test.h"
#include "dockertest.h"

#include "base/macro.h"
#include "base/timeutil.h"
#include "cae/backend.h"
#include "cae/config.h"
#include "cae/docker.h"
#include "cae/helper.h"
#include "cae/k8s.h"
#include "cae/log.h"
#include "cae/session.h"
#include "cae/snapshot.h"

#include <errno.h>
#include <pthread.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- targets ---- */

struct target {
	const char *name;
	void (*configure)(cae_config *cfg);
	/* removes the environment the way a crash, an operator or the engine would */
	void (*destroy)(const cae_env_info *info);
};

static char *state; /* this test's state directory */

static void local_configure(cae_config *cfg)
{
	bt_cfg_set(cfg, "command_executor.backend", "local");
}

static void local_destroy(const cae_env_info *info)
{
	ck_assert_ptr_nonnull(info->host_path);
	ck_assert_int_eq(cae__rm_rf(info->host_path), 0);
}

static void docker_configure(cae_config *cfg)
{
	bt_docker_configure(cfg, "256");
}

static void docker_destroy(const cae_env_info *info)
{
	cae_docker *d = NULL;
	cae_error err = {0};
	ck_assert_msg(cae_docker_new(getenv("DOCKER_HOST"), &d, &err) == 0, "%s", err.message);
	ck_assert_msg(cae_docker_container_remove(d, info->container_id, true, true, &err) == 0,
		      "%s", err.message);
	cae_docker_free(d);
}

/* The single-node cluster of scripts/k8s-env.sh: no scheduler (pods name their node), no
 * registry (images are imported: never pulled), no CNI (host network). What it cannot do:
 * NetworkPolicy (no CNI enforces one), so no scenario here depends on network isolation. */
static void kubernetes_configure(cae_config *cfg)
{
	bt_kubernetes_configure(cfg, "1g");
}

/* Deletes the environment's pod behind cae's back (found by its uuid annotation). */
static void kubernetes_destroy(const cae_env_info *info)
{
	cae_k8s *k = bt_k8s_client();
	cae_error err = {0};
	json_t *items = NULL;
	ck_assert_msg(cae_k8s_pod_list(k, "default", "cae.task", &items, &err) == 0, "%s",
		      err.message);
	int deleted = 0;
	size_t i;
	json_t *p;
	json_array_foreach(items, i, p)
	{
		json_t *md = json_object_get(p, "metadata");
		const char *u = json_string_value(
		    json_object_get(json_object_get(md, "annotations"), "cae.task_uuid"));
		if (u && strcmp(u, info->task_uuid) == 0) {
			const char *name = json_string_value(json_object_get(md, "name"));
			/* as `kubectl delete pod` does: a short grace period, then wait until the
			 * API no longer has it, which is when the kubelet has stopped its
			 * containers (a forced delete with grace 0 removes the object at once
			 * and leaves them running for seconds: Kubernetes itself says such a
			 * pod may go on running) */
			ck_assert_int_eq(cae_k8s_pod_delete(k, "default", name, 1, &err), 0);
			json_t *pod = NULL;
			int r = 0;
			for (int t = 0;
			     t < 1800 && (r = cae_k8s_pod_get(k, "default", name, &pod, &err)) == 0;
			     t++) {
				json_decref(pod);
				pod = NULL;
				usleep(100000);
			}
			ck_assert_msg(r == -ENOENT, "pod %s not deleted: %s", name, err.message);
			deleted++;
		}
	}
	ck_assert_int_eq(deleted, 1);
	json_decref(items);
	cae_k8s_free(k);
}

static const struct target targets[] = {
    {"local", local_configure, local_destroy},
    {"docker", docker_configure, docker_destroy},
    /* the docker backend through a tcp:// engine (a loopback relay to the real one) */
    {"docker-tcp", docker_configure, docker_destroy},
    /* the docker backend against Podman's Docker-compatible API (CAE_TEST_PODMAN=1; the
     * socket of scripts/podman-env.sh, or CAE_PODMAN_HOST) */
    {"podman", docker_configure, docker_destroy},
    /* the kubernetes backend against the real cluster (CAE_TEST_K8S=1, its KUBECONFIG) */
    {"kubernetes", kubernetes_configure, kubernetes_destroy},
};
static const struct target *T;

/* ---- helpers ---- */

#define C(s) ((char *)(s))
#define S(j, k) json_string_value(json_object_get((j), (k)))
#define I(j, k) json_integer_value(json_object_get((j), (k)))

static int seq;

/* A task uuid unique to this run: docker environments of parallel runs share one engine. */
static void new_uuid(char *buf, size_t size)
{
	snprintf(buf, size, "conf-%s-%d-%d", T->name, (int)getpid(), ++seq);
}

static cae_config *config(void)
{
	state = tu_mkdtemp();
	cae_config *cfg = cae_config_defaults(NULL);
	ck_assert_ptr_nonnull(cfg);
	bt_cfg_set(cfg, "command_executor.state_dir", state);
	bt_cfg_set(cfg, "github.token", git_token);
	T->configure(cfg);
	return cfg;
}

/* The backend a target tests ("docker-tcp" and "podman" are the docker backend). */
static const char *backend_name(void)
{
	if (strncmp(T->name, "docker", 6) == 0 || strcmp(T->name, "podman") == 0)
		return "docker";
	return T->name;
}

static cae_backend *backend(cae_config *cfg, cae_log *log)
{
	return bt_backend(backend_name(), cfg, log);
}

static void prepare_ok(cae_backend *b, const cae_task *t, const char *env,
		       const cae_prepare_options *o, cae_env_info *info)
{
	cae_error err = {0};
	int r = cae_backend_prepare(b, t, env, o, info, &err);
	ck_assert_msg(r == 0, "prepare: %s", err.message);
	ck_assert_str_eq(info->status, "ready");
	ck_assert_str_eq(info->backend, backend_name());
	ck_assert_str_eq(info->task_uuid, t->uuid);
}

static cae_run_result sh(cae_backend *b, const char *uuid, const char *script)
{
	return bt_exec(b, uuid, script, 60000);
}

static bool listed(cae_backend *b, const char *uuid)
{
	json_t *list = NULL;
	cae_error err = {0};
	ck_assert_msg(cae_backend_list(b, &list, &err) == 0, "%s", err.message);
	bool found = false;
	size_t i;
	json_t *e;
	json_array_foreach(list, i, e) found |= strcmp(S(e, "task_uuid"), uuid) == 0;
	json_decref(list);
	return found;
}

static void assert_gone(cae_backend *b, const char *uuid)
{
	cae_env_info info;
	cae_error err = {0};
	ck_assert_int_eq(cae_backend_info(b, uuid, &info, &err), -ENOENT);
	ck_assert(!listed(b, uuid));
	const char *argv[] = {"true", NULL};
	cae_exec_request req = {.argv = argv, .cancel_fd = -1};
	cae_run_result r;
	ck_assert_int_eq(cae_backend_exec(b, uuid, &req, &r, &err), -ENOENT);
}

static void done(cae_backend *b, cae_config *cfg)
{
	cae_backend_free(b);
	cae_config_free(cfg);
	cae__rm_rf(state);
	free(state);
	state = NULL;
}

/* ---- prepare ---- */

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
	ck_assert_ptr_nonnull(msg);
	if (step <= s->last)
		s->ordered = false;
	s->last = step;
	s->seen[step]++;
}

/* Seven steps in order, a ready environment with the clone where ContainerInfo says, and
 * the same ContainerInfo from info and list. */
START_TEST(prepare_reports_every_step_and_a_ready_environment)
{
	cae_config *cfg = config();
	cae_backend *b = backend(cfg, NULL);
	char uuid[64];
	new_uuid(uuid, sizeof(uuid));
	cae_task t = bt_http_task(uuid);
	struct steps st = {.ordered = true};
	cae_prepare_options o = {
	    .progress = on_progress, .progress_userdata = &st, .cancel_fd = -1};
	cae_env_info info;
	prepare_ok(b, &t, NULL, &o, &info);
	ck_assert(st.ordered);
	for (int i = 1; i <= 7; i++)
		ck_assert_int_eq(st.seen[i], 1);
	ck_assert_str_eq(info.workspace_path, "/workspace/project");
	ck_assert_ptr_nonnull(info.container_id);
	ck_assert_ptr_nonnull(info.created_at);
	ck_assert_ptr_nonnull(info.environment_name);
	cae_run_result r = sh(b, uuid, "pwd; cat calc.py; git rev-parse --abbrev-ref HEAD");
	ck_assert_int_eq(r.exit_code, 0);
	ck_assert_msg(strstr(r.out, "/workspace/project\n") == r.out, "%s", r.out);
	ck_assert_ptr_nonnull(strstr(r.out, "def add"));
	ck_assert_ptr_nonnull(strstr(r.out, "main\n"));
	cae_run_result_clear(&r);
	cae_env_info again;
	cae_error err = {0};
	ck_assert_int_eq(cae_backend_info(b, uuid, &again, &err), 0);
	ck_assert_str_eq(again.status, "ready");
	ck_assert_str_eq(again.container_id, info.container_id);
	ck_assert_str_eq(again.workspace_path, info.workspace_path);
	ck_assert_str_eq(again.environment_name, info.environment_name);
	cae_env_info_clear(&again);
	ck_assert(listed(b, uuid));
	ck_assert_int_eq(cae_backend_cleanup(b, uuid, &err), 0);
	assert_gone(b, uuid);
	/* a second cleanup finds nothing, and that is fine */
	ck_assert_int_eq(cae_backend_cleanup(b, uuid, &err), 0);
	cae_env_info_clear(&info);
	done(b, cfg);
}
END_TEST

/* Another process using uuid's environment (as another `cae mcp` or a `cae exec` would):
 * this program run again as `TARGET --hold STATE UUID INSTANCE` (hold_main), which runs a command
 * there, says "1" on its fd 3, and keeps its backend (the sandbox, the helper stream)
 * until its stdin ends. */
struct holder {
	pid_t pid;
	int ready, end;
};

static const char *hold_args[3]; /* state, uuid, instance */

START_TEST(hold)
{
	cae_config *cfg = cae_config_defaults(NULL);
	bt_cfg_set(cfg, "command_executor.state_dir", hold_args[0]);
	bt_cfg_set(cfg, "command_executor.instance", hold_args[2]);
	T->configure(cfg);
	cae_backend *hb = backend(cfg, NULL);
	cae_run_result r = sh(hb, hold_args[1], "true");
	ck_assert_int_eq(write(3, r.exit_code == 0 ? "1" : "0", 1), 1);
	cae_run_result_clear(&r);
	char c;
	while (read(STDIN_FILENO, &c, 1) > 0)
		;
	cae_backend_free(hb);
	cae_config_free(cfg);
}
END_TEST

static int hold_main(const char *st, const char *uuid, const char *instance)
{
	hold_args[0] = st;
	hold_args[1] = uuid;
	hold_args[2] = instance;
	Suite *s = suite_create("hold");
	TCase *tc = tcase_create("hold");
	tcase_set_timeout(tc, 600);
	tcase_add_test(tc, hold);
	suite_add_tcase(s, tc);
	return tu_run(s);
}

static struct holder holder_start(const char *uuid, const char *instance)
{
	int ready[2], end[2];
	ck_assert(pipe2(ready, O_CLOEXEC) == 0 && pipe2(end, O_CLOEXEC) == 0);
	char self[4096];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	ck_assert_int_gt(n, 0);
	self[n] = '\0';
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		dup2(end[0], STDIN_FILENO);
		dup2(ready[1], 3);
		execl(self, self, T->name, "--hold", state, uuid, instance, (char *)NULL);
		_exit(127);
	}
	close(ready[1]);
	close(end[0]);
	return (struct holder){.pid = pid, .ready = ready[0], .end = end[1]};
}

/* How many of warnings mention needle. */
static int warnings_with(const json_t *warnings, const char *needle)
{
	int n = 0;
	size_t i;
	json_t *w;
	json_array_foreach((json_t *)warnings, i, w) n +=
	    strstr(json_string_value(w), needle) != NULL;
	return n;
}

START_TEST(reprepare_starts_clean)
{
	cae_config *cfg = config();
	char uuid[64];
	new_uuid(uuid, sizeof(uuid));
	cae_backend *b = backend(cfg, NULL);
	cae_task t = bt_http_task(uuid);
	cae_env_info info;
	prepare_ok(b, &t, NULL, NULL, &info);
	/* a warning true of every prepare on the engine (the storage driver takes no size
	 * option: docker through tcp here) is said once per engine per process, not again in
	 * the prepares below (issue 23) */
	ck_assert_int_le(warnings_with(info.warnings, "disk limit"), 1);
	cae_run_result r = sh(b, uuid,
			      "echo x > left.txt && echo y > /workspace/tmp/scratch && "
			      "echo '# edited' >> calc.py");
	ck_assert_int_eq(r.exit_code, 0);
	cae_run_result_clear(&r);
	cae_env_info_clear(&info);
	/* preparing it again would lose the uncommitted edit and the new file, and the work
	 * of another live process using it: refused, and the refusal says which, until the
	 * call says force */
	cae_error err = {0};
	char c = 0;
	struct holder h = holder_start(uuid, cae_backend_instance(b));
	ck_assert_int_eq(read(h.ready, &c, 1), 1);
	ck_assert_int_eq(c, '1');
	ck_assert_int_eq(cae_backend_prepare(b, &t, NULL, NULL, &info, &err), -EBUSY);
	ck_assert_msg(strstr(err.message, "calc.py") && strstr(err.message, "left.txt") &&
			  strstr(err.message, "2 changed files") && strstr(err.message, "force") &&
			  strstr(err.message, "1 other live process"),
		      "%s", err.message);
	close(h.end);
	close(h.ready);
	int status = -1;
	ck_assert_int_eq(waitpid(h.pid, &status, 0), h.pid);
	ck_assert_int_eq(status, 0);
	r = sh(b, uuid, "cat left.txt; tail -n 1 calc.py");
	ck_assert_str_eq(r.out, "x\n# edited\n");
	cae_run_result_clear(&r);
	cae_prepare_options force = {.cancel_fd = -1, .force = true};
	prepare_ok(b, &t, NULL, &force, &info);
	ck_assert_msg(warnings_with(info.warnings, "disk limit") == 0, "said again: %s",
		      json_string_value(json_array_get(info.warnings, 0)));
	r = sh(b, uuid,
	       "test -e left.txt && echo left; test -e /workspace/tmp/scratch && echo scratch; "
	       "git status --porcelain; test -f calc.py && echo clone");
	ck_assert_str_eq(r.out, "clone\n");
	cae_run_result_clear(&r);
	/* nothing to lose: no force needed */
	cae_env_info_clear(&info);
	prepare_ok(b, &t, NULL, NULL, &info);
	ck_assert_int_eq(warnings_with(info.warnings, "disk limit"), 0);
	ck_assert_int_eq(cae_backend_cleanup(b, uuid, &err), 0);
	cae_env_info_clear(&info);
	done(b, cfg);
}
END_TEST

START_TEST(unknown_environment_falls_back_with_a_warning)
{
	cae_config *cfg = config();
	cae_backend *b = backend(cfg, NULL);
	char uuid[64];
	new_uuid(uuid, sizeof(uuid));
	cae_task t = bt_http_task(uuid);
	cae_env_info dflt, info;
	prepare_ok(b, &t, NULL, NULL, &dflt);
	prepare_ok(b, &t, "no-such-environment", NULL, &info);
	ck_assert_str_eq(info.environment_name, dflt.environment_name);
	bool warned = false;
	size_t i;
	json_t *w;
	json_array_foreach(info.warnings, i, w) warned |=
	    strstr(json_string_value(w), "no-such-environment") != NULL;
	ck_assert_msg(warned, "no warning names the environment asked for");
	/* recorded with the environment: another backend object (another process) sees it */
	cae_backend *b2 = backend(cfg, NULL);
	cae_env_info seen;
	cae_error err = {0};
	ck_assert_int_eq(cae_backend_info(b2, uuid, &seen, &err), 0);
	ck_assert_str_eq(seen.environment_name, dflt.environment_name);
	ck_assert(json_equal(seen.warnings, info.warnings));
	cae_env_info_clear(&seen);
	cae_backend_free(b2);
	ck_assert_int_eq(cae_backend_cleanup(b, uuid, &err), 0);
	cae_env_info_clear(&dflt);
	cae_env_info_clear(&info);
	done(b, cfg);
}
END_TEST

/* A clone that fails leaves nothing, names its step, and says so in the log with the
 * backend's name. */
START_TEST(failed_clone_leaves_nothing)
{
	char logpath[] = "/tmp/cae-conf-log-XXXXXX";
	int fd = mkstemp(logpath);
	ck_assert_int_ge(fd, 0);
	cae_log *log = cae_log_new(fd, CAE_LOG_DEBUG);
	cae_config *cfg = config();
	cae_backend *b = backend(cfg, log);
	char uuid[64];
	new_uuid(uuid, sizeof(uuid));
	char missing[600];
	snprintf(missing, sizeof(missing), "%sno-such-repo.git", git_http);
	cae_task t = {.uuid = uuid, .repo = missing, .platform = C("github")};
	cae_env_info info;
	cae_error err = {0};
	int r = cae_backend_prepare(b, &t, NULL, NULL, &info, &err);
	ck_assert_int_lt(r, 0);
	ck_assert_msg(strncmp(err.message, "clone", 5) == 0, "%s", err.message);
	ck_assert_ptr_null(info.status);
	assert_gone(b, uuid);
	cae_log_free(log);
	char *text = NULL;
	ck_assert_int_eq(cae__read_file(AT_FDCWD, logpath, 1 << 20, &text, NULL), 0);
	char want[128];
	snprintf(want, sizeof(want), "\"backend\":\"%s\"", backend_name());
	const char *line = strstr(text, "\"event\":\"environment.prepare_failed\"");
	ck_assert_msg(line != NULL, "%s", text);
	ck_assert_msg(strstr(line, want) != NULL && strstr(line, uuid) != NULL, "%s", line);
	ck_assert_msg(strstr(text, git_token) == NULL, "the token is in the log");
	free(text);
	close(fd);
	unlink(logpath);
	done(b, cfg);
}
END_TEST

/* Cancelled at any step: the prepare stops there, says so, and leaves nothing. */
struct cancel_at {
	int step;
	int wfd;
};

static void cancel_on_step(void *ud, int step, int total, const char *msg)
{
	(void)total;
	(void)msg;
	struct cancel_at *c = ud;
	if (step == c->step)
		ck_assert_int_eq(write(c->wfd, "x", 1), 1);
}

START_TEST(cancelled_at_every_step_leaves_nothing)
{
	cae_config *cfg = config();
	cae_backend *b = backend(cfg, NULL);
	for (int step = 1; step <= 6; step++) {
		char uuid[64];
		new_uuid(uuid, sizeof(uuid));
		cae_task t = bt_http_task(uuid);
		int p[2];
		ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
		struct cancel_at c = {.step = step, .wfd = p[1]};
		cae_prepare_options o = {
		    .progress = cancel_on_step, .progress_userdata = &c, .cancel_fd = p[0]};
		cae_env_info info;
		cae_error err = {0};
		int r = cae_backend_prepare(b, &t, NULL, &o, &info, &err);
		ck_assert_msg(r == -ECANCELED, "step %d: %d %s", step, r, err.message);
		assert_gone(b, uuid);
		close(p[0]);
		close(p[1]);
	}
	done(b, cfg);
}
END_TEST

/* ---- environments that go away ---- */

START_TEST(environment_gone_is_clear)
{
	cae_config *cfg = config();
	cae_backend *b = backend(cfg, NULL);
	char uuid[64];
	new_uuid(uuid, sizeof(uuid));
	cae_task t = bt_http_task(uuid);
	cae_env_info info;
	prepare_ok(b, &t, NULL, NULL, &info);
	T->destroy(&info);
	const char *argv[] = {"true", NULL};
	cae_exec_request req = {.argv = argv, .cancel_fd = -1};
	cae_run_result r;
	cae_error err = {0};
	ck_assert_int_eq(cae_backend_exec(b, uuid, &req, &r, &err), -ENOENT);
	ck_assert_msg(strstr(err.message, uuid) != NULL, "%s", err.message);
	ck_assert_int_eq(cae_backend_exec(b, "never-prepared", &req, &r, &err), -ENOENT);
	/* cleanup of what is left is fine */
	ck_assert_int_eq(cae_backend_cleanup(b, uuid, &err), 0);
	cae_env_info_clear(&info);
	done(b, cfg);
}
END_TEST

/* Stale cleanup removes what is older than the threshold and nothing younger, and only of
 * its own instance: an environment of another instance (same state directory, same engine)
 * is not listed, not found, runs nothing, is neither removed nor replaced, and outlives the
 * collection, with its commands working. Ages only grow, so waiting until the environments
 * are surely older than one second is not a race. */
START_TEST(cleanup_stale_by_age)
{
	cae_config *cfg = config();
	cae_backend *b = backend(cfg, NULL);
	cae_config *ocfg = cae_config_dup(cfg);
	char other_instance[64];
	snprintf(other_instance, sizeof(other_instance), "conf-other-%d", (int)getpid());
	bt_cfg_set(ocfg, "command_executor.instance", other_instance);
	cae_backend *ob = backend(ocfg, NULL);
	char mine[CAE_CONFIG_INSTANCE_MAX];
	ck_assert_str_ne(cae_config_instance(cfg, mine), other_instance);
	ck_assert_str_eq(cae_backend_instance(b), mine);
	char uuid[64], ouuid[64];
	new_uuid(uuid, sizeof(uuid));
	new_uuid(ouuid, sizeof(ouuid));
	cae_task t = bt_http_task(uuid), ot = bt_http_task(ouuid);
	cae_env_info info, oinfo;
	prepare_ok(b, &t, NULL, NULL, &info);
	ck_assert_str_eq(info.instance, mine);
	prepare_ok(ob, &ot, NULL, NULL, &oinfo);
	ck_assert_str_eq(oinfo.instance, other_instance);
	/* the other instance's environment is nobody's business here */
	ck_assert(!listed(b, ouuid));
	ck_assert(listed(ob, ouuid) && !listed(ob, uuid));
	cae_env_info seen;
	cae_error err = {0};
	ck_assert_int_eq(cae_backend_info(b, ouuid, &seen, &err), -ENOENT);
	const char *argv[] = {"true", NULL};
	cae_exec_request req = {.argv = argv, .cancel_fd = -1};
	cae_run_result rr;
	ck_assert_int_eq(cae_backend_exec(b, ouuid, &req, &rr, &err), -ENOENT);
	cae_fs_request fq = {.op = CAE_FS_OPEN, .root = oinfo.workspace_path};
	cae_fs_reply frep;
	ck_assert_int_lt(cae_backend_fs(b, ouuid, &fq, &frep, &err), 0);
	cae_fs_reply_clear(&frep);
	ck_assert_int_eq(cae_backend_cleanup(b, ouuid, &err), -EPERM);
	cae_prepare_options force = {.cancel_fd = -1, .force = true};
	ck_assert_int_eq(cae_backend_prepare(b, &ot, NULL, &force, &seen, &err), -EEXIST);
	ck_assert_msg(strstr(err.message, "another cae instance"), "%s", err.message);
	/* with every instance: listed (and still not removed, replaced or run) */
	cae_backend_set_all_instances(b, true);
	ck_assert(listed(b, ouuid) && listed(b, uuid));
	ck_assert_int_eq(cae_backend_cleanup(b, ouuid, &err), -EPERM);
	cae_backend_set_all_instances(b, false);

	int removed = -1;
	ck_assert_msg(cae_backend_cleanup_stale(b, 3600, &removed, &err) == 0, "%s", err.message);
	ck_assert(listed(b, uuid));
	sleep(3);
	ck_assert_msg(cae_backend_cleanup_stale(b, 1, &removed, &err) == 0, "%s", err.message);
	ck_assert_int_ge(removed, 1);
	assert_gone(b, uuid);
	/* the other instance's environment is older than a second too, and untouched */
	cae_run_result r = sh(ob, ouuid, "test -f calc.py && echo alive");
	ck_assert_str_eq(r.out, "alive\n");
	cae_run_result_clear(&r);
	ck_assert(listed(ob, ouuid));
	ck_assert_int_eq(cae_backend_cleanup(ob, ouuid, &err), 0);
	cae_backend_free(ob);
	cae_config_free(ocfg);
	cae_env_info_clear(&oinfo);
	cae_env_info_clear(&info);
	done(b, cfg);
}
END_TEST

/* ---- commands ---- */

/* A command's attempts at the kernel's key store, bpf, and cae's helpers (python3 and ctypes,
 * which the local host and the python image have): prints "keyctl ok|refused", "bpf
 * ok|refused", "pid1-and-a-stream-are-helpers" when PID 1 is cae-helper and another one
 * (the command's stream) is found, and "helpers-untouchable" when
 * at least one helper was found and none could be attached to with ptrace, nor its environ,
 * mem or fd directory opened. */
static const char syscall_probe[] =
    "python3 -c '\n"
    "import ctypes, os, platform\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "keyctl, bpf = {\"x86_64\": (250, 321), \"aarch64\": (219, 280)}[platform.machine()]\n"
    "print(\"keyctl\", \"ok\" if libc.syscall(keyctl, 0, -3, 1) >= 0 else \"refused\")\n"
    "attr = ctypes.create_string_buffer(bytes([2, 0, 0, 0, 4, 0, 0, 0, 4, 0, 0, 0, 1]), 128)\n"
    "print(\"bpf\", \"ok\" if libc.syscall(bpf, 0, attr, 128) >= 0 else \"refused\")\n"
    "helpers, reached = [], []\n"
    "for p in os.listdir(\"/proc\"):\n"
    "    try:\n"
    "        cmdline = open(\"/proc/\" + p + \"/cmdline\", \"rb\").read()\n"
    "        if cmdline.startswith(b\"/.cae/cae-helper\\0\"):\n"
    "            helpers.append(int(p))\n"
    "    except (OSError, ValueError):\n"
    "        pass\n"
    "for h in helpers:\n"
    "    if libc.ptrace(16, h, 0, 0) == 0:\n"
    "        reached.append((h, \"ptrace\"))\n"
    "        os.waitpid(h, 0x40000000)\n"
    "        libc.ptrace(17, h, 0, 0)\n"
    "    for f in (\"environ\", \"mem\", \"fd\"):\n"
    "        try:\n"
    "            os.close(os.open(\"/proc/%d/%s\" % (h, f), os.O_RDONLY))\n"
    "            reached.append((h, f))\n"
    "        except OSError:\n"
    "            pass\n"
    "print(\"helpers\", helpers, \"reached\", reached)\n"
    "if 1 in helpers and len(helpers) >= 2:\n"
    "    print(\"pid1-and-a-stream-are-helpers\")\n"
    "if helpers and not reached:\n"
    "    print(\"helpers-untouchable\")\n"
    "'";

START_TEST(commands_behave_the_same)
{
	cae_config *cfg = config();
	cae_backend *b = backend(cfg, NULL);
	char uuid[64];
	new_uuid(uuid, sizeof(uuid));
	cae_task t = bt_http_task(uuid);
	cae_env_info info;
	prepare_ok(b, &t, NULL, NULL, &info);
	cae_error err = {0};
	cae_run_result r;
	/* exit code, both streams apart */
	r = sh(b, uuid, "echo out; echo err >&2; exit 3");
	ck_assert_int_eq(r.exit_code, 3);
	ck_assert_str_eq(r.out, "out\n");
	ck_assert_str_eq(r.err, "err\n");
	cae_run_result_clear(&r);
	/* stdin, extra environment, a relative working directory */
	r = sh(b, uuid, "mkdir -p sub/dir");
	ck_assert_int_eq(r.exit_code, 0);
	cae_run_result_clear(&r);
	const char *cat[] = {"sh", "-c", "cat; echo \"[$CONF_VAR]\"; pwd", NULL};
	const char *env[] = {"CONF_VAR=v1", NULL};
	cae_exec_request req = {.argv = cat,
				.cwd = "sub/dir",
				.extra_env = env,
				.stdin_data = "in\n",
				.stdin_len = 3,
				.has_stdin = true,
				.timeout_ms = 60000,
				.cancel_fd = -1};
	ck_assert_msg(cae_backend_exec(b, uuid, &req, &r, &err) == 0, "%s", err.message);
	ck_assert_str_eq(r.out, "in\n[v1]\n/workspace/project/sub/dir\n");
	cae_run_result_clear(&r);
	/* an absolute working directory inside the workspace */
	req.cwd = "/workspace/project/sub";
	req.has_stdin = false;
	ck_assert_msg(cae_backend_exec(b, uuid, &req, &r, &err) == 0, "%s", err.message);
	ck_assert_msg(strstr(r.out, "/workspace/project/sub\n") != NULL, "%s", r.out);
	cae_run_result_clear(&r);
	/* a working directory that is not there */
	req.cwd = "no/such/dir";
	ck_assert_int_eq(cae_backend_exec(b, uuid, &req, &r, &err), -ENOTDIR);
	/* output caps */
	const char *big[] = {"sh", "-c", "seq 1 100000", NULL};
	cae_exec_request capped = {
	    .argv = big, .timeout_ms = 60000, .max_stdout = 1000, .cancel_fd = -1};
	ck_assert_msg(cae_backend_exec(b, uuid, &capped, &r, &err) == 0, "%s", err.message);
	ck_assert(r.out_truncated);
	ck_assert_uint_le(strlen(r.out), 1000);
	ck_assert_int_eq(r.exit_code, 0);
	cae_run_result_clear(&r);
	/* a timeout kills the command and all it started, in a new session or double-forked
	 * too, and returns without waiting for them */
	const char *slow[] = {
	    "sh", "-c", "sleep 1000 & setsid sleep 1000 & (sleep 1000 &) ; sleep 1000; echo never",
	    NULL};
	cae_exec_request timed = {.argv = slow, .timeout_ms = 500, .cancel_fd = -1};
	ck_assert_msg(cae_backend_exec(b, uuid, &timed, &r, &err) == 0, "%s", err.message);
	ck_assert(r.timed_out);
	ck_assert_ptr_null(strstr(r.out, "never"));
	ck_assert_int_lt(r.duration_ms, 30000);
	cae_run_result_clear(&r);
	r = sh(b, uuid, "ps -eo args 2>/dev/null | grep -c '^sleep 1000' || true");
	ck_assert_msg(strcmp(r.out, "0\n") == 0, "left running: %s", r.out);
	cae_run_result_clear(&r);
	/* a program that is not there: exit code 127, as a shell says it */
	const char *none[] = {"no-such-program-xyz", NULL};
	cae_exec_request missing = {.argv = none, .timeout_ms = 60000, .cancel_fd = -1};
	int rc = cae_backend_exec(b, uuid, &missing, &r, &err);
	ck_assert_msg(rc == -ENOENT || (rc == 0 && r.exit_code == 127), "%d %d", rc,
		      rc == 0 ? r.exit_code : 0);
	if (rc == 0)
		cae_run_result_clear(&r);
	/* commands are not root */
	r = sh(b, uuid, "id -u");
	ck_assert_str_ne(r.out, "0\n");
	cae_run_result_clear(&r);
	/* the kernel's keys and bpf are refused (seccomp: the sandbox's filter, the engine's
	 * default profile, the pod's RuntimeDefault), and cae's helpers (the sandbox's serve
	 * loop; a container's PID 1 and stream) can be neither traced nor read through /proc */
	r = sh(b, uuid, syscall_probe);
	ck_assert_msg(strstr(r.out, "keyctl refused\n") && strstr(r.out, "bpf refused\n"), "%s%s",
		      r.out, r.err);
	ck_assert_msg(strstr(r.out, "helpers-untouchable\n"), "%s%s", r.out, r.err);
	if (strcmp(T->name, "local") != 0)
		ck_assert_msg(strstr(r.out, "pid1-and-a-stream-are-helpers\n"), "%s%s", r.out,
			      r.err);
	cae_run_result_clear(&r);
	ck_assert_int_eq(cae_backend_cleanup(b, uuid, &err), 0);
	cae_env_info_clear(&info);
	done(b, cfg);
}
END_TEST

/* ---- the agent's tools over this backend ---- */

static json_t *call(cae_session *s, const char *tool, json_t *args, bool *is_error)
{
	cae_tool_result res;
	cae_error err = {0};
	ck_assert_msg(cae_session_call_tool(s, tool, args, NULL, &res, &err) == 0, "%s",
		      err.message);
	json_decref(args);
	*is_error = res.is_error;
	json_t *out = json_incref(res.structured);
	if (!out)
		out = json_pack("{s:s}", "text", res.text ? res.text : "");
	cae_tool_result_clear(&res);
	return out;
}

/* A session over the same environment (cae_session_set_current) whose text editor is
 * tests/data/editor-mcp/server.py, in mode, run inside the environment. */
static cae_session *mcp_editor_session(const char *uuid, const char *mode)
{
	cae_config *cfg = cae_config_defaults(NULL);
	ck_assert_ptr_nonnull(cfg);
	bt_cfg_set(cfg, "command_executor.state_dir", state);
	bt_cfg_set(cfg, "github.token", git_token);
	T->configure(cfg);
	bt_cfg_set(cfg, "text_editor_mcp.mode", "mcp");
	char cmd[256];
	snprintf(cmd, sizeof(cmd), "python3,/workspace/project/.ed.py,%s", mode);
	bt_cfg_set(cfg, "text_editor_mcp.mcp_server.command", cmd);
	cae_session *s = NULL;
	cae_error err = {0};
	ck_assert_msg(cae_session_new(cfg, NULL, &s, &err) == 0, "%s", err.message);
	ck_assert_msg(cae_session_set_current(s, uuid, &err) == 0, "%s", err.message);
	return s;
}

START_TEST(tools_behave_the_same)
{
	cae_config *cfg = config();
	cae_session *s = NULL;
	cae_error err = {0};
	ck_assert_msg(cae_session_new(cfg, NULL, &s, &err) == 0, "%s", err.message);
	ck_assert_str_eq(cae_backend_name(cae_session_backend(s)), backend_name());
	char uuid[64];
	new_uuid(uuid, sizeof(uuid));
	cae_task t = bt_http_task(uuid);
	json_t *info = NULL;
	ck_assert_msg(cae_session_prepare(s, &t, NULL, NULL, &info, &err) == 0, "%s", err.message);
	json_decref(info);
	bool e;
	/* the command tool */
	json_t *r = call(s, "exec_command",
			 json_pack("{s:s, s:[s]}", "cwd", ".", "command",
				   "echo $GITHUB_PERSONAL_ACCESS_TOKEN; git config --get "
				   "remote.origin.url; ls"),
			 &e);
	ck_assert(!e);
	ck_assert_int_eq(I(r, "exit_code"), 0);
	ck_assert_str_eq(S(r, "cwd"), "/workspace/project");
	ck_assert_ptr_nonnull(strstr(S(r, "stdout"), "calc.py"));
	ck_assert_ptr_null(strstr(S(r, "stdout"), git_token));
	json_decref(r);
	/* the editor: create, view, str_replace, undo */
	r = call(s, "text_editor",
		 json_pack("{s:s, s:s, s:s}", "command", "create", "path", "pkg/new.py",
			   "file_text", "a = 1\nb = 2\n"),
		 &e);
	ck_assert_msg(!e, "%s", json_dumps(r, 0));
	json_decref(r);
	r = call(s, "text_editor",
		 json_pack("{s:s, s:s, s:s, s:s}", "command", "str_replace", "path", "pkg/new.py",
			   "old_str", "b = 2", "new_str", "b = 3"),
		 &e);
	ck_assert(!e);
	json_decref(r);
	r = call(s, "text_editor", json_pack("{s:s, s:s}", "command", "view", "path", "pkg/new.py"),
		 &e);
	ck_assert(!e);
	char *text = json_dumps(r, 0);
	ck_assert_msg(strstr(text, "b = 3") != NULL, "%s", text);
	free(text);
	json_decref(r);
	/* the file is the command's too, owned by the user commands run as */
	r = call(s, "exec_command",
		 json_pack("{s:s, s:[s]}", "cwd", ".", "command",
			   "cat pkg/new.py; test -O pkg/new.py && echo mine; echo c >> pkg/new.py"),
		 &e);
	ck_assert_str_eq(S(r, "stdout"), "a = 1\nb = 3\nmine\n");
	json_decref(r);
	/* the editor stays in the workspace */
	r = call(s, "text_editor",
		 json_pack("{s:s, s:s}", "command", "view", "path", "../../../../etc/shadow"), &e);
	ck_assert(e);
	json_decref(r);
	r = call(s, "exec_command",
		 json_pack("{s:s, s:[s]}", "cwd", ".", "command", "ln -s /etc escape"), &e);
	json_decref(r);
	r = call(s, "text_editor",
		 json_pack("{s:s, s:s, s:s}", "command", "create", "path", "escape/cae-conf",
			   "file_text", "x"),
		 &e);
	ck_assert(e);
	json_decref(r);
	/* the patch worker: a unified diff, all or nothing */
	r = call(s, "apply_patch",
		 json_pack("{s:s}", "patch",
			   "--- a/calc.py\n+++ b/calc.py\n@@ -1,2 +1,2 @@\n def add(a, b):\n"
			   "-    return a + b\n+    return b + a\n"),
		 &e);
	ck_assert_msg(!e, "%s", json_dumps(r, 0));
	json_decref(r);
	r = call(
	    s, "exec_command",
	    json_pack("{s:s, s:[s]}", "cwd", ".", "command", "git diff --stat; ls /etc/cae-conf"),
	    &e);
	ck_assert_ptr_nonnull(strstr(S(r, "stdout"), "calc.py | 2"));
	ck_assert_ptr_null(strstr(S(r, "stdout"), "/etc/cae-conf\n"));
	json_decref(r);
	/* text_editor_mcp.mode mcp: the test's MCP editor server, put in the workspace by a
	 * command, run inside the environment (python3 is in the local sandbox and the image) */
	char *server = NULL;
	size_t server_len = 0;
	ck_assert_int_eq(cae__read_file(AT_FDCWD,
					CAE_SOURCE_ROOT "/tests/data/editor-mcp/server.py", 1 << 20,
					&server, &server_len),
			 0);
	r = call(
	    s, "exec_command",
	    json_pack("{s:s, s:[s], s:s}", "cwd", ".", "command", "cat > .ed.py", "stdin", server),
	    &e);
	ck_assert_int_eq(I(r, "exit_code"), 0);
	json_decref(r);
	free(server);
	cae_session *m = mcp_editor_session(uuid, "ok");
	r = call(m, "text_editor",
		 json_pack("{s:s, s:s, s:s}", "command", "create", "path", "pkg/mcp.py",
			   "file_text", "x = 1\n"),
		 &e);
	ck_assert_msg(!e, "%s", json_dumps(r, 0));
	ck_assert_str_eq(S(r, "path"), "/workspace/project/pkg/mcp.py");
	json_decref(r);
	r = call(m, "text_editor",
		 json_pack("{s:s, s:s, s:s, s:s}", "command", "str_replace", "path", "pkg/mcp.py",
			   "old_str", "x = 1", "new_str", "x = 2"),
		 &e);
	ck_assert_msg(!e, "%s", json_dumps(r, 0));
	json_decref(r);
	r = call(m, "text_editor", json_pack("{s:s, s:s}", "command", "view", "path", "pkg/mcp.py"),
		 &e);
	ck_assert_msg(!e, "%s", json_dumps(r, 0));
	ck_assert_str_eq(S(r, "output"), "     1\tx = 2\n     2\t");
	json_decref(r);
	r = call(m, "text_editor",
		 json_pack("{s:s, s:s}", "command", "view", "path", "../../../../etc/shadow"), &e);
	ck_assert(e);
	json_decref(r);
	/* written by the server inside the environment, as the user commands run as */
	r = call(s, "exec_command",
		 json_pack("{s:s, s:[s]}", "cwd", ".", "command",
			   "cat pkg/mcp.py; test -O pkg/mcp.py && echo mine"),
		 &e);
	ck_assert_str_eq(S(r, "stdout"), "x = 2\nmine\n");
	json_decref(r);
	cae_session_free(m);
	/* a server that dies: its status and last words, here as in a container */
	m = mcp_editor_session(uuid, "die");
	r = call(m, "text_editor", json_pack("{s:s, s:s}", "command", "view", "path", "pkg/mcp.py"),
		 &e);
	ck_assert(e);
	text = json_dumps(r, 0);
	ck_assert_msg(strstr(text, "ended (exit status 3): editor crashed") != NULL, "%s", text);
	free(text);
	json_decref(r);
	cae_session_free(m);
	ck_assert_int_eq(cae_session_cleanup(s, NULL, &err), 0);
	cae_session_free(s);
	cae__rm_rf(state);
	free(state);
}
END_TEST

/* git push from an environment: the token is asked for when git needs it, for the clone's
 * host only, and is nowhere in the environment's files, environment or process list (the
 * search pattern is given to grep on a descriptor: its own command line would hold it);
 * without a token the error says so. The environment has no network (local: the default;
 * docker: network none): the push reaches the forge it was cloned from through cae's proxy
 * (the forge rule; a loopback forge only through allowed_addresses), and the prepare result
 * says so. */
START_TEST(push_on_demand)
{
	cae_config *cfg = config();
	bool none = strcmp(T->name, "kubernetes") != 0;
	if (none) {
		bt_cfg_set(cfg, "command_executor.docker.network.mode", "none");
		bt_cfg_set(cfg, "command_executor.docker.network.allowed_addresses",
			   "127.0.0.1/32");
	}
	cae_backend *b = backend(cfg, NULL);
	char uuid[64];
	new_uuid(uuid, sizeof(uuid));
	cae_task t = bt_http_task(uuid);
	cae_env_info info;
	prepare_ok(b, &t, NULL, NULL, &info);
	if (none) {
		char forge[64];
		unsigned port = 0;
		ck_assert_int_eq(sscanf(git_http, "http://127.0.0.1:%u/", &port), 1);
		snprintf(forge, sizeof(forge), "127.0.0.1:%u", port);
		ck_assert_msg(
		    info.network &&
			strcmp(json_string_value(json_object_get(info.network, "access")) ?: "",
			       "none") == 0 &&
			strcmp(json_string_value(json_object_get(info.network, "forge")) ?: "",
			       forge) == 0,
		    "%s", info.network ? json_dumps(info.network, 0) : "no network");
		/* nothing else is reachable: the same server by another loopback address */
		cae_run_result d = sh(
		    b, uuid, "git ls-remote http://127.0.0.2:1/x.git >/dev/null 2>&1; echo rc=$?");
		ck_assert_msg(strstr(d.out, "rc=0") == NULL, "%s", d.out);
		cae_run_result_clear(&d);
	}
	char script[2048];
	size_t half = strlen(git_token) / 2;
	snprintf(
	    script, sizeof(script),
	    "set -e; echo change >> a.txt; git commit -qam change; "
	    "[ \"$(git log -1 --format='%%an <%%ae>')\" = 'Coding Agent <coding-agent@localhost>' "
	    "] "
	    "|| { echo no identity; exit 9; }; "
	    "! git config --local --get-regexp '^user[.]' || { echo in the project; exit 8; }; "
	    /* (the loopback test forge is in NO_PROXY, which names the environment's own
	     * loopback: not for this push) */
	    "env -u NO_PROXY -u no_proxy git push -q origin HEAD:refs/heads/%s 2>&1; echo pushed; "
	    "a='%.*s'; b='%s'; "
	    "grep -rIl --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev \"$a$b\" / "
	    "2>/dev/null || true; (env; cat /proc/[0-9]*/environ /proc/[0-9]*/cmdline) "
	    "2>/dev/null | tr '\\0' '\\n' | grep -c -F -f /dev/fd/3 3<<EOF || true\n"
	    "$a$b\nEOF\n",
	    uuid, (int)half, git_token, git_token + half);
	cae_run_result r = sh(b, uuid, script);
	ck_assert_msg(r.exit_code == 0 && strcmp(r.out, "pushed\n0\n") == 0, "%d: %s%s",
		      r.exit_code, r.out, r.err);
	cae_run_result_clear(&r);
	tu_sh("git --git-dir=%s/py.git rev-parse --verify -q refs/heads/%s", git_root, uuid);
	/* the commits' identity is the environment's (command_executor.git), and the agent's
	 * own configuration wins over it */
	r = sh(b, uuid,
	       "git config --global user.name 'Agent Own' && git commit -q --allow-empty -m own "
	       "&& git log -1 --format='%an <%ae>'");
	ck_assert_msg(r.exit_code == 0 &&
			  strcmp(r.out, "Agent Own <coding-agent@localhost>\n") == 0,
		      "%d: %s%s", r.exit_code, r.out, r.err);
	cae_run_result_clear(&r);
	/* another host gets nothing, even asked directly */
	r = sh(b, uuid,
	       "printf 'protocol=https\\nhost=evil.example.com\\n\\n' | git credential fill 2>&1 "
	       "</dev/null; echo rc=$?");
	ck_assert_msg(strstr(r.out, "password=") == NULL, "%s", r.out);
	cae_run_result_clear(&r);
	cae_error err = {0};
	cae_backend_cleanup(b, uuid, &err);
	cae_env_info_clear(&info);
	cae_backend_free(b);
	cae_config_free(cfg);
	cae__rm_rf(state);
	free(state);

	/* no token configured: the push fails and says why */
	cfg = config();
	bt_cfg_set(cfg, "command_executor.local.network", "true");
	bt_cfg_set(cfg, "github.token", "");
	b = backend(cfg, NULL);
	new_uuid(uuid, sizeof(uuid));
	snprintf(bt_repo_url, sizeof(bt_repo_url), "%spublic/py.git", git_http);
	cae_task pub = {.uuid = uuid, .repo = bt_repo_url, .platform = C("github")};
	prepare_ok(b, &pub, NULL, NULL, &info);
	r = sh(b, uuid,
	       "git remote set-url origin $(git remote get-url origin | sed s,/public/,/,); "
	       "git push origin HEAD:refs/heads/nope 2>&1 </dev/null; echo rc=$?");
	ck_assert_msg(strstr(r.out, "no token is configured") && !strstr(r.out, "rc=0"), "%s",
		      r.out);
	cae_run_result_clear(&r);
	cae_backend_cleanup(b, uuid, &err);
	cae_env_info_clear(&info);
	done(b, cfg);
}
END_TEST

/* ---- live input and output ---- */

struct live_run {
	cae_backend *b;
	const char *uuid;
	const char *script;
	cae_live_io io;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	char seen[2][4096]; /* what came live, per stream */
	size_t seen_len[2];
	int r;
	cae_run_result res;
	cae_error err;
};

static void live_output(void *ud, int stream, const char *data, size_t len)
{
	struct live_run *x = ud;
	pthread_mutex_lock(&x->lock);
	int i = stream == 2;
	size_t n = MIN(len, sizeof(x->seen[i]) - 1 - x->seen_len[i]);
	memcpy(x->seen[i] + x->seen_len[i], data, n);
	x->seen_len[i] += n;
	x->seen[i][x->seen_len[i]] = '\0';
	pthread_cond_broadcast(&x->cond);
	pthread_mutex_unlock(&x->lock);
}

static void *live_main(void *arg)
{
	struct live_run *x = arg;
	const char *argv[] = {"sh", "-c", x->script, NULL};
	cae_exec_request req = {
	    .argv = argv, .timeout_ms = 120000, .cancel_fd = -1, .live = &x->io};
	x->r = cae_backend_exec(x->b, x->uuid, &req, &x->res, &x->err);
	return NULL;
}

/* Waits (bounded generously: no timing is measured) until stream 1 has shown want. */
static bool live_wait(struct live_run *x, const char *want)
{
	int64_t until = cae__now_ns() + 120 * 1000000000LL;
	pthread_mutex_lock(&x->lock);
	while (!strstr(x->seen[0], want) && cae__now_ns() < until) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += 1;
		pthread_cond_timedwait(&x->cond, &x->lock, &ts);
	}
	bool ok = strstr(x->seen[0], want) != NULL;
	pthread_mutex_unlock(&x->lock);
	return ok;
}

/* A command's output arrives while it runs and its stdin comes from a descriptor, on every
 * backend: the command waits for a line that the test writes only after it has seen the
 * command's first output live; the result is the same as without live output. */
START_TEST(live_output_and_input)
{
	cae_config *cfg = config();
	cae_backend *b = backend(cfg, NULL);
	char uuid[64];
	new_uuid(uuid, sizeof(uuid));
	cae_task t = bt_http_task(uuid);
	cae_env_info info;
	prepare_ok(b, &t, "python", NULL, &info);
	int in[2];
	ck_assert_int_eq(pipe2(in, O_CLOEXEC), 0);
	struct live_run x = {
	    .b = b,
	    .uuid = uuid,
	    .script = "echo ready; echo warm >&2; read a; read b; echo got-$a-$b; echo bye >&2",
	    .io = {.output = live_output, .ud = &x, .stdin_fd = in[0]}};
	pthread_mutex_init(&x.lock, NULL);
	pthread_cond_init(&x.cond, NULL);
	pthread_t th;
	ck_assert_int_eq(pthread_create(&th, NULL, live_main, &x), 0);
	ck_assert_msg(live_wait(&x, "ready\n"), "no live output: %s", x.seen[0]);
	ck_assert_int_eq(write(in[1], "one\n", 4), 4);
	ck_assert_int_eq(write(in[1], "two\n", 4), 4);
	close(in[1]);
	pthread_join(th, NULL);
	close(in[0]);
	ck_assert_msg(x.r == 0, "%s", x.err.message);
	ck_assert_int_eq(x.res.exit_code, 0);
	ck_assert_str_eq(x.res.out, "ready\ngot-one-two\n");
	ck_assert_str_eq(x.res.err, "warm\nbye\n");
	ck_assert_str_eq(x.seen[0], x.res.out);
	ck_assert_str_eq(x.seen[1], x.res.err);
	cae_run_result_clear(&x.res);
	/* live output without live input: stdin_data as usual, nothing waits */
	struct live_run y = {.b = b,
			     .uuid = uuid,
			     .script = "cat; echo done",
			     .io = {.output = live_output, .ud = &y, .stdin_fd = -1}};
	pthread_mutex_init(&y.lock, NULL);
	pthread_cond_init(&y.cond, NULL);
	const char *argv[] = {"sh", "-c", y.script, NULL};
	cae_exec_request req = {.argv = argv,
				.stdin_data = "fed\n",
				.stdin_len = 4,
				.has_stdin = true,
				.timeout_ms = 120000,
				.cancel_fd = -1,
				.live = &y.io};
	cae_error err = {0};
	ck_assert_msg(cae_backend_exec(b, uuid, &req, &y.res, &err) == 0, "%s", err.message);
	ck_assert_str_eq(y.res.out, "fed\ndone\n");
	ck_assert_str_eq(y.seen[0], "fed\ndone\n");
	cae_run_result_clear(&y.res);
	/* Python's output to a pipe arrives as it prints, not when it exits (a session): it
	 * waits for its input line, which comes only after its first line was seen */
	int pin[2];
	ck_assert_int_eq(pipe2(pin, O_CLOEXEC), 0);
	struct live_run z = {.b = b,
			     .uuid = uuid,
			     .script = "exec python3 -c 'import sys; print(\"py-ready\"); "
				       "print(\"py-got-\" + sys.stdin.readline().strip())'",
			     .io = {.output = live_output, .ud = &z, .stdin_fd = pin[0]}};
	pthread_mutex_init(&z.lock, NULL);
	pthread_cond_init(&z.cond, NULL);
	ck_assert_int_eq(pthread_create(&th, NULL, live_main, &z), 0);
	bool early = live_wait(&z, "py-ready\n");
	ck_assert_int_eq(write(pin[1], "x\n", 2), 2);
	close(pin[1]);
	pthread_join(th, NULL);
	close(pin[0]);
	ck_assert_msg(z.r == 0, "%s", z.err.message);
	ck_assert_msg(early, "python's output came only at its exit: %s", z.res.out);
	ck_assert_str_eq(z.res.out, "py-ready\npy-got-x\n");
	cae_run_result_clear(&z.res);
	ck_assert_int_eq(cae_backend_cleanup(b, uuid, &err), 0);
	cae_env_info_clear(&info);
	done(b, cfg);
}
END_TEST

/* ---- the patch worker's file service ---- */

/* One request: its status, the reply kept in rep. */
static int fsq(cae_backend *b, const char *uuid, cae_fs_request q, cae_fs_reply *rep,
	       cae_error *err)
{
	return cae_backend_fs(b, uuid, &q, rep, err);
}

/* The worker's file service answers the same on every backend: writes keep or set modes,
 * reads come back whole, escapes through "..", absolute paths and symbolic links are
 * refused, and a handle serves only the environment that opened it. */
START_TEST(file_service_behaves_the_same)
{
	cae_config *cfg = config();
	cae_backend *b = backend(cfg, NULL);
	char u1[64], u2[64];
	new_uuid(u1, sizeof(u1));
	new_uuid(u2, sizeof(u2));
	cae_task t1 = bt_http_task(u1), t2 = bt_http_task(u2);
	cae_env_info i1, i2;
	prepare_ok(b, &t1, "python", NULL, &i1);
	prepare_ok(b, &t2, "python", NULL, &i2);
	cae_run_result r = sh(
	    b, u1, "ln -s / rootlink && ln -s calc.py inside && echo s > s.sh && chmod 755 s.sh");
	ck_assert_int_eq(r.exit_code, 0);
	cae_run_result_clear(&r);
	cae_fs_reply rep;
	cae_error err = {0};
	ck_assert_msg(fsq(b, u1, (cae_fs_request){.op = CAE_FS_OPEN, .root = i1.workspace_path},
			  &rep, &err) == 0,
		      "%s", err.message);
	uint32_t h = rep.handle;
	ck_assert_uint_gt(h, 0);
	cae_fs_reply_clear(&rep);
	/* a new file in a new directory, with its mode; an existing one keeps its own */
	ck_assert_int_eq(fsq(b, u1,
			     (cae_fs_request){.op = CAE_FS_WRITE,
					      .handle = h,
					      .rel = "d/e/new.txt",
					      .data = "hello\n",
					      .len = 6,
					      .mode = 0640},
			     &rep, &err),
			 0);
	ck_assert_int_eq(fsq(b, u1,
			     (cae_fs_request){.op = CAE_FS_WRITE,
					      .handle = h,
					      .rel = "s.sh",
					      .data = "t\n",
					      .len = 2,
					      .mode = (uint32_t)-1},
			     &rep, &err),
			 0);
	r = sh(b, u1, "stat -c '%a %n' d/e/new.txt s.sh; cat d/e/new.txt s.sh");
	ck_assert_str_eq(r.out, "640 d/e/new.txt\n755 s.sh\nhello\nt\n");
	cae_run_result_clear(&r);
	ck_assert_int_eq(
	    fsq(b, u1,
		(cae_fs_request){.op = CAE_FS_READ, .handle = h, .rel = "inside", .max = 1 << 20},
		&rep, &err),
	    0);
	ck_assert_ptr_nonnull(rep.data);
	ck_assert_ptr_nonnull(strstr(rep.data, "def add"));
	cae_fs_reply_clear(&rep);
	/* escapes */
	const char *bad[] = {"../x", "rootlink/etc/passwd", "/etc/passwd", "d/../../x"};
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		cae_error e = {0};
		ck_assert_msg(
		    fsq(b, u1,
			(cae_fs_request){
			    .op = CAE_FS_READ, .handle = h, .rel = bad[i], .max = 1 << 20},
			&rep, &e) < 0,
		    "read %s was not refused", bad[i]);
		ck_assert_msg(fsq(b, u1,
				  (cae_fs_request){.op = CAE_FS_WRITE,
						   .handle = h,
						   .rel = bad[i],
						   .data = "x",
						   .len = 1,
						   .mode = 0644},
				  &rep, &e) < 0,
			      "write %s was not refused", bad[i]);
	}
	r = sh(b, u1, "ls /x ../x 2>/dev/null; echo done");
	ck_assert_str_eq(r.out, "done\n");
	cae_run_result_clear(&r);
	/* the handle is u1's: u2 cannot use it (nothing of u1 is read or written) */
	cae_error e2 = {0};
	ck_assert_int_lt(fsq(b, u2,
			     (cae_fs_request){.op = CAE_FS_WRITE,
					      .handle = h,
					      .rel = "via-u2",
					      .data = "x",
					      .len = 1,
					      .mode = 0644},
			     &rep, &e2),
			 0);
	ck_assert_int_lt(
	    fsq(b, u2,
		(cae_fs_request){.op = CAE_FS_READ, .handle = h, .rel = "d/e/new.txt", .max = 100},
		&rep, &e2),
	    0);
	ck_assert_ptr_null(rep.data);
	r = sh(b, u1, "ls via-u2 2>/dev/null; echo done");
	ck_assert_str_eq(r.out, "done\n");
	cae_run_result_clear(&r);
	ck_assert_int_eq(fsq(b, u1, (cae_fs_request){.op = CAE_FS_CLOSE, .handle = h}, &rep, &err),
			 0);
	ck_assert_int_eq(
	    fsq(b, u1, (cae_fs_request){.op = CAE_FS_READ, .handle = h, .rel = "s.sh", .max = 100},
		&rep, &e2),
	    -EBADF);
	ck_assert_int_eq(cae_backend_cleanup(b, u1, &err), 0);
	ck_assert_int_eq(cae_backend_cleanup(b, u2, &err), 0);
	cae_env_info_clear(&i1);
	cae_env_info_clear(&i2);
	done(b, cfg);
}
END_TEST

/* ---- snapshots, restores and forks ---- */

/* The snapshot images of the engine whose cae.snapshot label or base tag names uuid. */
static int engine_images_of(const char *uuid)
{
	if (strcmp(backend_name(), "docker") != 0)
		return 0;
	cae_docker *d = NULL;
	cae_error err = {0};
	ck_assert_msg(cae_docker_new(getenv("DOCKER_HOST"), &d, &err) == 0, "%s", err.message);
	json_t *imgs = NULL;
	ck_assert_msg(cae_docker_call(d, "GET", "/images/json", NULL, &imgs, &err) >= 0, "%s",
		      err.message);
	int n = 0;
	size_t i, j;
	json_t *im, *t;
	size_t ul = strlen(uuid);
	json_array_foreach(imgs, i, im)
	{
		const char *l = S(json_object_get(im, "Labels"), "cae.snapshot");
		bool hit = l && strncmp(l, uuid, ul) == 0 && l[ul] == '/';
		json_array_foreach(json_object_get(im, "RepoTags"), j, t)
		{
			const char *tag = json_string_value(t);
			hit |=
			    tag && strncmp(tag, "cae-base:", 9) == 0 && strcmp(tag + 9, uuid) == 0;
		}
		n += hit;
	}
	json_decref(imgs);
	cae_docker_free(d);
	return n;
}

static json_t *snap_ok(cae_backend *b, const char *uuid, const char *name)
{
	json_t *s = NULL;
	cae_error err = {0};
	ck_assert_msg(cae_snapshot_create(b, uuid, name, &s, &err) == 0, "snapshot: %s",
		      err.message);
	return s;
}

static void out_is(cae_backend *b, const char *uuid, const char *script, const char *want)
{
	cae_run_result r = sh(b, uuid, script);
	ck_assert_msg(r.exit_code == 0 && r.out && strcmp(r.out, want) == 0,
		      "%s: exit %d, out [%s] err [%s], want [%s]", script, r.exit_code,
		      r.out ? r.out : "", r.err ? r.err : "", want);
	cae_run_result_clear(&r);
}

/* What the whole state holds: tracked, untracked and ignored files, a link, modes, .git,
 * and (containers) a file a command wrote outside the workspace, in the user's home. */
#define STATE_SCRIPT                                                                               \
	"cat tracked.txt; readlink lnk; stat -c %%a run.sh; cat untracked.txt ignored.log; "       \
	"git log -1 --format=%%s; git status --porcelain --ignored | sort | tr '\\n' ' '; "        \
	"echo; ls added 2>&1 | head -c 0; [ -e added ] && echo added-present; "                    \
	"[ -z \"$CONF_OUTSIDE\" ] || cat \"$HOME/.conf-outside\"; echo end"

static const char *outside(void)
{
	return strcmp(backend_name(), "local") != 0 ? "CONF_OUTSIDE=1; " : "";
}

/* The pods of the cluster whose task uuid is uuid (kubernetes; 0 elsewhere). */
static int pods_of(const char *uuid)
{
	if (strcmp(T->name, "kubernetes") != 0)
		return 0;
	cae_k8s *k = bt_k8s_client();
	cae_error err = {0};
	json_t *items = NULL;
	ck_assert_msg(cae_k8s_pod_list(k, "default", "cae.task", &items, &err) == 0, "%s",
		      err.message);
	int n = 0;
	size_t i;
	json_t *p;
	json_array_foreach(items, i, p)
	{
		const char *u = S(json_object_get(json_object_get(p, "metadata"), "annotations"),
				  "cae.task_uuid");
		n += u && strcmp(u, uuid) == 0;
	}
	json_decref(items);
	cae_k8s_free(k);
	return n;
}

/* A command of another manager process's (a backend of its own) that a restore must end. */
struct long_run {
	cae_config *cfg;
	const char *uuid;
	int rc;
	cae_run_result res;
};

static void *long_run_main(void *arg)
{
	struct long_run *x = arg;
	cae_backend *other = backend(x->cfg, NULL);
	const char *argv[] = {"sh", "-c", "echo started > /workspace/tmp/long; sleep 50; echo late",
			      NULL};
	cae_exec_request req = {.argv = argv, .timeout_ms = 120000, .cancel_fd = -1};
	cae_error err = {0};
	x->rc = cae_backend_exec(other, x->uuid, &req, &x->res, &err);
	cae_backend_free(other);
	return NULL;
}

static void state_is(cae_backend *b, const char *uuid, const char *want)
{
	char script[2048];
	snprintf(script, sizeof(script), "%s" STATE_SCRIPT, outside());
	out_is(b, uuid, script, want);
}

static void kill_when(const char *dir, const char *prefix, const char *sub,
		      void (*fn)(cae_backend *b, const char *uuid, const char *arg),
		      const char *uuid, const char *arg);
static void child_snapshot(cae_backend *b, const char *uuid, const char *arg);
static void child_fork(cae_backend *b, const char *uuid, const char *arg);

/* Snapshot, restore and fork on one prepared environment: what a snapshot holds comes back
 * exactly (added files gone), forks start from the source's state or a snapshot and share
 * nothing writable with it (both ways), and the environments' removal takes their
 * snapshots (records, disks, the engine's images, the pods) with them. Podman's API has
 * no snapshots and says so clearly. Kubernetes: the pod's protected paths (.git/hooks, the
 * root sidecar's) stay root's through a restore and are root's again in a fork; a command
 * of another process is ended by a restore; a snapshot and a fork SIGKILLed while the
 * archive streams leave nothing listed, no pod, and leftovers that the collection removes. */
START_TEST(snapshot_restore_and_fork)
{
	cae_config *cfg = config();
	cae_backend *b = backend(cfg, NULL);
	cae_error err = {0};
	json_t *s = NULL;
	bool k8s = strcmp(T->name, "kubernetes") == 0;
	if (strcmp(T->name, "podman") == 0) {
		ck_assert_int_eq(cae_snapshot_create(b, "conf-none", NULL, &s, &err), -EOPNOTSUPP);
		ck_assert_msg(strstr(err.message, "not available on Podman"), "%s", err.message);
		cae_env_info fi;
		ck_assert_int_eq(
		    cae_snapshot_fork(b, "conf-none", NULL, "conf-none2", &fi, NULL, &err),
		    -EOPNOTSUPP);
		done(b, cfg);
		return;
	}
	char a[64], f1[64], f2[64];
	new_uuid(a, sizeof(a));
	new_uuid(f1, sizeof(f1));
	new_uuid(f2, sizeof(f2));
	cae_task t = bt_http_task(a);
	cae_env_info info;
	prepare_ok(b, &t, NULL, NULL, &info);
	char script[2048];
	snprintf(
	    script, sizeof(script),
	    "%sset -e; git config user.email t@e; git config user.name t; "
	    "echo v1 > tracked.txt; printf '#!/bin/sh\\n' > run.sh; chmod 750 run.sh; "
	    "ln -s tracked.txt lnk; git add tracked.txt run.sh lnk; git commit -qm snap-commit; "
	    "echo u > untracked.txt; echo '*.log' >> .git/info/exclude; echo i > ignored.log; "
	    "[ -z \"$CONF_OUTSIDE\" ] || echo home-pkg > \"$HOME/.conf-outside\"",
	    outside());
	cae_run_result r = sh(b, a, script);
	ck_assert_msg(r.exit_code == 0, "%s", r.err);
	cae_run_result_clear(&r);
	char want[512];
	snprintf(
	    want, sizeof(want),
	    "v1\ntracked.txt\n750\nu\ni\nsnap-commit\n!! ignored.log ?? untracked.txt \n%send\n",
	    *outside() ? "home-pkg\n" : "");
	state_is(b, a, want);
	s = snap_ok(b, a, "base");
	ck_assert_str_eq(S(s, "name"), "base");
	ck_assert_int_gt(I(s, "bytes"), 0);
	printf("snapshot: kind %s, mechanism %s\n", S(s, "kind"), S(s, "mechanism"));
	_cleanup_free_ char *id = strdup(S(s, "id"));
	json_decref(s);
	/* everything changed, then put back: added files gone */
	snprintf(script, sizeof(script),
		 "%sset -e; echo v2 > tracked.txt; rm lnk untracked.txt; chmod 700 run.sh; "
		 "git commit -qam later; echo new > added; rm ignored.log; "
		 "[ -z \"$CONF_OUTSIDE\" ] || rm \"$HOME/.conf-outside\"",
		 outside());
	r = sh(b, a, script);
	ck_assert_msg(r.exit_code == 0, "%s", r.err);
	cae_run_result_clear(&r);
	/* kubernetes: a command another process runs in the pod is ended by the restore */
	struct long_run lr = {.cfg = cfg, .uuid = a, .rc = -1};
	pthread_t lth;
	if (k8s) {
		ck_assert_int_eq(pthread_create(&lth, NULL, long_run_main, &lr), 0);
		for (int i = 0; i < 600; i++) {
			cae_run_result w = sh(b, a, "cat /workspace/tmp/long 2>/dev/null; true");
			bool up = w.out && strcmp(w.out, "started\n") == 0;
			cae_run_result_clear(&w);
			if (up)
				break;
			usleep(100000);
		}
	}
	json_t *res = NULL;
	ck_assert_msg(cae_snapshot_restore(b, a, "base", &res, &err) == 0, "restore: %s",
		      err.message);
	ck_assert(json_is_true(json_object_get(res, "sandbox_stopped")));
	json_decref(res);
	if (k8s) {
		pthread_join(lth, NULL);
		ck_assert_msg(lr.rc < 0 || !lr.res.out || !strstr(lr.res.out, "late"),
			      "the command went on through the restore: [%s]", lr.res.out);
		if (lr.rc == 0)
			cae_run_result_clear(&lr.res);
		out_is(b, a, "ls /workspace/tmp/long 2>/dev/null; echo .", ".\n");
	}
	state_is(b, a, want);
	if (k8s)
		out_is(b, a, "stat -c %u .git/hooks; touch .git/hooks/x 2>/dev/null || echo ro",
		       "0\nro\n");
	json_t *list = NULL;
	ck_assert_int_eq(cae_snapshot_list(b, a, &list, &err), 0);
	ck_assert_uint_eq(json_array_size(list), 1);
	json_decref(list);
	/* a fork of the live environment and one of the snapshot */
	r = sh(b, a, "echo live > live.txt");
	cae_run_result_clear(&r);
	cae_env_info i1, i2;
	json_t *fo = NULL;
	ck_assert_msg(cae_snapshot_fork(b, a, NULL, f1, &i1, &fo, &err) == 0, "fork: %s",
		      err.message);
	ck_assert_str_eq(S(json_object_get(fo, "forked_from"), "task_uuid"), a);
	ck_assert_str_eq(i1.task_uuid, f1);
	ck_assert_str_ne(i1.container_id, info.container_id);
	json_decref(fo);
	ck_assert_msg(cae_snapshot_fork(b, a, id, f2, &i2, &fo, &err) == 0, "fork: %s",
		      err.message);
	ck_assert_str_eq(S(json_object_get(fo, "forked_from"), "snapshot"), id);
	json_decref(fo);
	state_is(b, f2, want);
	if (k8s) {
		out_is(b, f1, "stat -c %u .git/hooks; touch .git/hooks/x 2>/dev/null || echo ro",
		       "0\nro\n");
		ck_assert_int_eq(pods_of(f1), 1);
	}
	out_is(b, f2, "ls live.txt 2>/dev/null; echo x", "x\n");
	out_is(b, f1, "cat live.txt tracked.txt", "live\nv1\n");
	/* nothing writable shared, both ways, outside the workspace too */
	r = sh(b, f1,
	       "echo from-fork > tracked.txt; echo f > only-fork; echo f > $HOME/.only-fork");
	cae_run_result_clear(&r);
	r = sh(b, a, "echo from-source > untracked.txt; echo s > only-source");
	cae_run_result_clear(&r);
	out_is(b, a, "cat tracked.txt; ls only-fork $HOME/.only-fork 2>/dev/null; echo .",
	       "v1\n.\n");
	out_is(b, f1, "cat untracked.txt; ls only-source 2>/dev/null; echo .", "u\n.\n");
	out_is(b, f2, "cat tracked.txt untracked.txt; ls only-fork only-source 2>/dev/null; echo .",
	       "v1\nu\n.\n");
	/* the fork's workspace is a file system of its own, not the source's seen again (a
	 * command in it that looks for the source's finds no mount of it) */
	if (strcmp(backend_name(), "docker") == 0) {
		cae_run_result da = sh(b, a,
				       "stat -c %d /workspace; grep -c ' /workspace ' "
				       "/proc/self/mountinfo");
		cae_run_result df = sh(b, f1,
				       "stat -c %d /workspace; grep -c ' /workspace ' "
				       "/proc/self/mountinfo");
		ck_assert_msg(da.out && df.out && strcmp(da.out, df.out) != 0, "[%s] [%s]",
			      da.out ? da.out : "", df.out ? df.out : "");
		cae_run_result_clear(&da);
		cae_run_result_clear(&df);
	}
	/* a fork's uuid is its own: taken is refused */
	cae_env_info i3;
	ck_assert_int_eq(cae_snapshot_fork(b, a, NULL, f1, &i3, NULL, &err), -EEXIST);
	if (k8s) {
		/* a snapshot and a live fork SIGKILLed while the archive streams in: nothing
		 * listed, no pod, and what they left goes with the collection */
		char f3[64];
		new_uuid(f3, sizeof(f3));
		out_is(b, a, "head -c 30000000 /dev/urandom > big && echo ok", "ok\n");
		_cleanup_free_ char *root = NULL, *sd = NULL, *nsd = NULL;
		ck_assert_int_ge(asprintf(&root, "%s/k8s-snapshots", state), 0);
		ck_assert_int_ge(asprintf(&sd, "%s/%s/snapshots", root, a), 0);
		ck_assert_int_ge(asprintf(&nsd, "%s/%s/snapshots", root, f3), 0);
		kill_when(sd, ".tmp.", "snapshot.tar", child_snapshot, a, "k1");
		tu_sh("mkdir -p %s", nsd); /* watched: the fork makes it again */
		kill_when(nsd, ".tmp.", "snapshot.tar", child_fork, a, f3);
		json_t *l2 = NULL;
		ck_assert_int_eq(cae_snapshot_list(b, a, &l2, &err), 0);
		ck_assert_uint_eq(json_array_size(l2), 1);
		json_decref(l2);
		ck_assert_int_eq(cae_backend_info(b, f3, &i3, &err), -ENOENT);
		ck_assert_int_eq(pods_of(f3), 0);
		tu_sh("ls -A %s | grep -q '^.tmp.' && [ -e %s/%s ]", sd, root, f3);
		int removed = 0;
		ck_assert_int_eq(cae_backend_cleanup_stale(b, 86400, &removed, &err), 0);
		tu_sh("! ls -A %s | grep -q '^.tmp.' && [ ! -e %s/%s ]", sd, root, f3);
		out_is(b, a, "rm big; echo ok", "ok\n");
	}
	/* removal takes the snapshots with the environment: records, disks, images */
	ck_assert_int_eq(cae_backend_cleanup(b, f1, &err), 0);
	ck_assert_int_eq(cae_backend_cleanup(b, f2, &err), 0);
	if (strcmp(backend_name(), "docker") == 0)
		ck_assert_int_gt(engine_images_of(a), 0);
	ck_assert_int_eq(cae_backend_cleanup(b, a, &err), 0);
	ck_assert_int_eq(engine_images_of(a), 0);
	ck_assert_int_eq(engine_images_of(f1), 0);
	ck_assert_int_eq(engine_images_of(f2), 0);
	tu_sh("! ls -A %s/docker-disk %s/docker-snapshots %s/k8s-snapshots %s/local 2>/dev/null | "
	      "grep -q conf-",
	      state, state, state, state);
	ck_assert_int_eq(pods_of(a) + pods_of(f1) + pods_of(f2), 0);
	cae_env_info_clear(&i1);
	cae_env_info_clear(&i2);
	cae_env_info_clear(&info);
	done(b, cfg);
}
END_TEST

/* Runs fn(uuid, arg) in a child process with a backend of its own and SIGKILLs it when an
 * entry of dir starting with prefix has appeared and, when sub is given, sub in it
 * (inotify): a point in the middle of a snapshot or fork. */
static void kill_when(const char *dir, const char *prefix, const char *sub,
		      void (*fn)(cae_backend *b, const char *uuid, const char *arg),
		      const char *uuid, const char *arg)
{
	int in = inotify_init1(IN_CLOEXEC);
	ck_assert_int_ge(in, 0);
	ck_assert_msg(inotify_add_watch(in, dir, IN_CREATE) >= 0, "%s", dir);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		cae_config *cfg = cae_config_defaults(NULL);
		bt_cfg_set(cfg, "command_executor.state_dir", state);
		T->configure(cfg);
		fn(backend(cfg, NULL), uuid, arg);
		_exit(0);
	}
	char entry[4096] = "", want[4400] = "";
	bool killed = false;
	char buf[4096] __attribute__((aligned(8)));
	while (!killed) {
		struct pollfd p = {.fd = in, .events = POLLIN};
		ck_assert_int_eq(poll(&p, 1, 120000), 1);
		ssize_t n = read(in, buf, sizeof(buf));
		ck_assert_int_gt(n, 0);
		for (char *q = buf; q < buf + n && !killed;) {
			struct inotify_event *ev = (struct inotify_event *)q;
			q += sizeof(*ev) + ev->len;
			if (!entry[0] && ev->len &&
			    strncmp(ev->name, prefix, strlen(prefix)) == 0) {
				snprintf(entry, sizeof(entry), "%s/%s", dir, ev->name);
				snprintf(want, sizeof(want), "%s/%s", entry, sub ? sub : "");
				if (sub)
					ck_assert_int_ge(inotify_add_watch(in, entry, IN_CREATE),
							 0);
			} else if (!entry[0] || (ev->len && sub && strcmp(ev->name, sub) != 0)) {
				continue;
			}
			if (!sub || access(want, F_OK) == 0) {
				kill(pid, SIGKILL);
				killed = true;
			}
		}
	}
	close(in);
	int st;
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "the operation ended first");
}

static void *unpause_later(void *arg)
{
	usleep(700000);
	cae_docker *d = NULL;
	cae_error err = {0};
	ck_assert_int_eq(cae_docker_new(getenv("DOCKER_HOST"), &d, &err), 0);
	char path[256];
	snprintf(path, sizeof(path), "/containers/%s/unpause", (const char *)arg);
	ck_assert_msg(cae_docker_call(d, "POST", path, NULL, NULL, &err) >= 0, "%s", err.message);
	cae_docker_free(d);
	return NULL;
}

/* A command while the engine has the container paused (the commit of a snapshot or fork,
 * which goes on after its process was killed) waits for the commit to end: a new stream
 * to the helper (another process's first command) included. */
static void command_waits_for_unpause(cae_config *cfg, const char *uuid)
{
	char name[128], path[256];
	snprintf(name, sizeof(name), "coding-agent-exec-%s", uuid);
	snprintf(path, sizeof(path), "/containers/%s/pause", name);
	cae_docker *d = NULL;
	cae_error err = {0};
	ck_assert_int_eq(cae_docker_new(getenv("DOCKER_HOST"), &d, &err), 0);
	ck_assert_msg(cae_docker_call(d, "POST", path, NULL, NULL, &err) >= 0, "%s", err.message);
	cae_docker_free(d);
	pthread_t th;
	pthread_create(&th, NULL, unpause_later, name);
	cae_backend *other = backend(cfg, NULL);
	out_is(other, uuid, "echo during-pause", "during-pause\n");
	cae_backend_free(other);
	pthread_join(th, NULL);
}

static void child_snapshot(cae_backend *b, const char *uuid, const char *arg)
{
	json_t *s = NULL;
	cae_snapshot_create(b, uuid, arg, &s, NULL);
}

static void child_fork(cae_backend *b, const char *uuid, const char *arg)
{
	cae_env_info info;
	cae_snapshot_fork(b, uuid, NULL, arg, &info, NULL, NULL);
}

/* Docker: a snapshot and a fork SIGKILLed at several points (the commit under way, the
 * workspace's image being copied; the fork's records made, its disk being copied) leave no
 * snapshot and no environment listed, a source whose writes do not hang, and leftovers
 * (records, disks, the engine's images) that `cae gc` removes. (The local backend's:
 * tests/backend/test-snapshot.c.) */
START_TEST(killed_snapshot_and_fork_leave_nothing_whole)
{
	if (strcmp(T->name, "docker") != 0)
		return;
	cae_config *cfg = config();
	cae_backend *b = backend(cfg, NULL);
	cae_error err = {0};
	char a[64], f1[64], f2[64];
	new_uuid(a, sizeof(a));
	new_uuid(f1, sizeof(f1));
	new_uuid(f2, sizeof(f2));
	cae_task t = bt_http_task(a);
	cae_env_info info;
	prepare_ok(b, &t, NULL, NULL, &info);
	/* enough data that the workspace image's copy takes a while */
	out_is(b, a, "head -c 100000000 /dev/urandom > big && echo ok", "ok\n");
	json_decref(snap_ok(b, a, "ok"));
	_cleanup_free_ char *sd = NULL, *root = NULL, *disks = NULL;
	ck_assert_int_ge(asprintf(&root, "%s/docker-snapshots", state), 0);
	ck_assert_int_ge(asprintf(&sd, "%s/%s/snapshots", root, a), 0);
	ck_assert_int_ge(asprintf(&disks, "%s/docker-disk", state), 0);
	kill_when(sd, ".tmp.", NULL, child_snapshot, a, "k1");
	kill_when(sd, ".tmp.", "disk.img", child_snapshot, a, "k2");
	kill_when(root, f1, NULL, child_fork, a, f1);
	kill_when(disks, f2, "disk.img", child_fork, a, f2);
	json_t *list = NULL;
	ck_assert_int_eq(cae_snapshot_list(b, a, &list, &err), 0);
	ck_assert_uint_eq(json_array_size(list), 1);
	json_decref(list);
	cae_env_info fi;
	ck_assert_int_eq(cae_backend_info(b, f1, &fi, &err), -ENOENT);
	ck_assert_int_eq(cae_backend_info(b, f2, &fi, &err), -ENOENT);
	/* writes go on (a frozen file system would hang this command until its timeout; a
	 * commit the engine goes on with after its process was killed pauses it meanwhile) */
	out_is(b, a, "echo after > w && sync -f w && cat w", "after\n");
	command_waits_for_unpause(cfg, a);
	/* what they left is there until the collection, then gone */
	tu_sh("ls -A %s | grep -q '^.tmp.' && [ -e %s/%s ]", sd, disks, f2);
	int removed = 0;
	ck_assert_int_eq(cae_backend_cleanup_stale(b, 86400, &removed, &err), 0);
	tu_sh("! ls -A %s | grep -q '^.tmp.' && [ ! -e %s/%s ] && [ ! -e %s/%s ] && "
	      "[ ! -e %s/%s ] && [ ! -e %s/%s ]",
	      sd, disks, f2, disks, f1, root, f1, root, f2);
	ck_assert_int_eq(engine_images_of(f1), 0);
	ck_assert_int_eq(engine_images_of(f2), 0);
	ck_assert_int_eq(engine_images_of(a), 1); /* "ok" only */
	/* and it still snapshots and restores */
	out_is(b, a, "rm big w; echo ok", "ok\n");
	ck_assert_msg(cae_snapshot_restore(b, a, "ok", NULL, &err) == 0, "%s", err.message);
	out_is(b, a, "ls big; ls w 2>/dev/null; echo .", "big\n.\n");
	ck_assert_int_eq(cae_backend_cleanup(b, a, &err), 0);
	ck_assert_int_eq(engine_images_of(a), 0);
	cae_env_info_clear(&info);
	done(b, cfg);
}
END_TEST

static Suite *make_suite(void)
{
	Suite *s = suite_create(T->name);
	TCase *tc = tcase_create("conformance");
	tcase_set_timeout(tc, 600);
	tcase_add_unchecked_fixture(tc, gs_setup, gs_teardown);
	tcase_add_test(tc, prepare_reports_every_step_and_a_ready_environment);
	tcase_add_test(tc, reprepare_starts_clean);
	tcase_add_test(tc, unknown_environment_falls_back_with_a_warning);
	tcase_add_test(tc, failed_clone_leaves_nothing);
	tcase_add_test(tc, cancelled_at_every_step_leaves_nothing);
	tcase_add_test(tc, environment_gone_is_clear);
	tcase_add_test(tc, cleanup_stale_by_age);
	tcase_add_test(tc, commands_behave_the_same);
	tcase_add_test(tc, tools_behave_the_same);
	tcase_add_test(tc, file_service_behaves_the_same);
	tcase_add_test(tc, live_output_and_input);
	tcase_add_test(tc, snapshot_restore_and_fork);
	tcase_add_test(tc, killed_snapshot_and_fork_leave_nothing_whole);
	suite_add_tcase(s, tc);
	/* a case of its own (CK_RUN_CASE=push runs it alone) */
	tc = tcase_create("push");
	tcase_set_timeout(tc, 600);
	tcase_add_unchecked_fixture(tc, gs_setup, gs_teardown);
	tcase_add_test(tc, push_on_demand);
	suite_add_tcase(s, tc);
	return s;
}

int main(int argc, char **argv)
{
	for (size_t i = 0; (argc == 2 || argc == 6) && i < sizeof(targets) / sizeof(targets[0]);
	     i++)
		if (strcmp(argv[1], targets[i].name) == 0)
			T = &targets[i];
	if (!T) {
		fprintf(stderr, "usage: %s local|docker|docker-tcp|podman|kubernetes\n", argv[0]);
		return 2;
	}
	if (strcmp(T->name, "kubernetes") == 0 && !bt_k8s_enabled())
		return 77;
	if (strcmp(T->name, "podman") == 0) {
		if (!bt_podman_enabled())
			return 77;
		setenv("DOCKER_HOST", bt_podman_host(), 1);
	}
	bt_init();
	if (argc == 6 && strcmp(argv[2], "--hold") == 0)
		return hold_main(argv[3], argv[4], argv[5]);
	pid_t relay = 0;
	if (strcmp(T->name, "docker-tcp") == 0) {
		char host[64];
		relay = dt_tcp_relay(host, sizeof(host));
		setenv("DOCKER_HOST", host, 1);
	}
	int r = tu_run(make_suite());
	if (relay > 0) {
		kill(relay, SIGKILL);
		waitpid(relay, NULL, 0);
	}
	return r;
}
