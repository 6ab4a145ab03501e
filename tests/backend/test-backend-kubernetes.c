/* The kubernetes backend against the single-node cluster of scripts/k8s-env.sh: what is
 * particular to pods and not a conformance scenario. Here: command_executor.protected_paths,
 * which a pod's commands cannot give to root themselves, made root's by the short-lived root
 * sidecar (cae-protect) at the ready step; and, with protect_with_root_sidecar false, no
 * sidecar and a warning that says so. And the backend without its helper: one API-server
 * exec per command, its arguments on stdin. On the environments those tests prepare anyway:
 * a listed pod's resources, cleanup's graceful stop, the helper's idle lifetime, and a push
 * of a task given as {platform, owner, name}. The shared package caches served to a pod, and
 * the shared node_modules trees between two pods (needs cae-test-node in the cluster).
 *
 * Needs CAE_TEST_K8S=1 and the cluster's KUBECONFIG (skipped, exit 77, otherwise); every
 * test removes the environments it prepared, and the teardown the pods of this run's tasks
 * that a failed test left (no other pod). */
#include "backend-test.h"

#include "backend/backend-internal.h"
#include "backend/pkgcache.h"
#include "runner/proctree.h"

#include <glob.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sys/prctl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>

#define TASK_PREFIX "caetest-k8sprot"

/* The single-node cluster (bt_kubernetes_configure) with a state directory of its own. */
static cae_config *kcfg(char **state)
{
	cae_config *cfg = cae_config_defaults(NULL);
	ck_assert_ptr_nonnull(cfg);
	*state = tu_mkdtemp();
	bt_cfg_set(cfg, "command_executor.state_dir", *state);
	bt_kubernetes_configure(cfg, "1g");
	bt_cfg_set(cfg, "github.token", git_token);
	return cfg;
}

/* A backend of cfg and a ready environment for a new task of py.git; uuid gets the task's
 * uuid. */
static cae_backend *prepared(cae_config *cfg, char uuid[64], cae_env_info *info)
{
	cae_backend *b = bt_backend("kubernetes", cfg, bt_warn_log());
	bt_task_uuid(uuid, 64, TASK_PREFIX);
	*info = bt_prepare(b, uuid);
	ck_assert_str_eq(info->status, "ready");
	return b;
}

static cae_run_result kexec(cae_backend *b, const char *uuid, const char *script)
{
	return bt_exec(b, uuid, script, 120000);
}

/* The pod of uuid as the API has it (new reference). */
static json_t *pod_of(const char *uuid)
{
	char name[160];
	snprintf(name, sizeof(name), "coding-agent-exec-%s", uuid);
	json_t *pod = bt_k8s_pod(name);
	ck_assert_msg(pod != NULL, "no pod %s", name);
	return pod;
}

/* The named container's entry in the pod's spec (kind "containers") or status (kind
 * "containerStatuses"), or NULL (borrowed). */
static json_t *container(json_t *pod, const char *part, const char *kind, const char *name)
{
	size_t i;
	json_t *c;
	json_array_foreach(json_object_get(json_object_get(pod, part), kind), i, c)
	{
		if (strcmp(json_string_value(json_object_get(c, "name")), name) == 0)
			return c;
	}
	return NULL;
}

static bool has_warning(const cae_env_info *info, const char *needle)
{
	size_t i;
	json_t *w;
	json_array_foreach(info->warnings, i, w)
	{
		if (strstr(json_string_value(w), needle))
			return true;
	}
	return false;
}

static void finish(cae_backend *b, const char *uuid, cae_env_info *info, cae_config *cfg,
		   char *state)
{
	cae_error err = {0};
	ck_assert_msg(cae_backend_cleanup(b, uuid, &err) == 0, "%s", err.message);
	cae_env_info_clear(info);
	cae_backend_free(b);
	cae_config_free(cfg);
	cae__rm_rf(state);
	free(state);
}

/* A listener on 127.0.0.1 (the pods have the host's network): its fd, its port in *port. */
static int listener(int *port)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(fd, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(a);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	ck_assert_int_eq(listen(fd, 8), 0);
	ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&a, &len), 0);
	*port = ntohs(a.sin_port);
	return fd;
}

/* What the next connection to l says, once one came within timeout_ms ("" when none did). */
static void heard(int l, int timeout_ms, char *buf, size_t size)
{
	buf[0] = '\0';
	struct pollfd p = {.fd = l, .events = POLLIN};
	if (poll(&p, 1, timeout_ms) != 1)
		return;
	int c = accept4(l, NULL, NULL, SOCK_CLOEXEC);
	ck_assert_int_ge(c, 0);
	size_t have = 0;
	ssize_t n;
	while (have < size - 1 && (n = read(c, buf + have, size - 1 - have)) > 0)
		have += (size_t)n;
	buf[have] = '\0';
	close(c);
}

/* uuid's entry of b's list (new reference). */
static json_t *listed(cae_backend *b, const char *uuid)
{
	json_t *list = NULL, *mine = NULL;
	cae_error err = {0};
	ck_assert_msg(cae_backend_list(b, &list, &err) == 0, "%s", err.message);
	size_t i;
	json_t *e;
	json_array_foreach(list, i, e)
	{
		if (strcmp(json_string_value(json_object_get(e, "task_uuid")), uuid) == 0)
			mine = json_incref(e);
	}
	json_decref(list);
	ck_assert_msg(mine != NULL, "%s is not listed", uuid);
	return mine;
}

/* A command run on a backend of its own (its own stream to the pod's helper), on a thread. */
struct runner {
	cae_backend *b;
	const char *uuid;
	const char *script;
};

static void *run_script(void *ud)
{
	struct runner *rn = ud;
	const char *argv[] = {"sh", "-c", rn->script, NULL};
	cae_exec_request req = {.argv = argv, .timeout_ms = 300000, .cancel_fd = -1};
	cae_run_result r;
	cae_error e = {0};
	if (cae_backend_exec(rn->b, rn->uuid, &req, &r, &e) == 0)
		cae_run_result_clear(&r);
	return NULL;
}

/* While a command of uuid's environment runs three sleeps, the list gives the pod's
 * resources as the other backends do (its limits from the configuration: 1 CPU, 1 GiB);
 * then cleanup stops the pod gracefully: the command, run by another backend over its own
 * stream, gets SIGTERM and its trap (a second's work, then a word to this test) has run when
 * cleanup returns. Deleting the pod with grace 0 (before) returned first. */
static void resources_then_graceful_cleanup(cae_backend *b, const cae_config *cfg, const char *uuid)
{
	int port;
	int l = listener(&port);
	char script[1024];
	snprintf(script, sizeof(script),
		 "say() { python3 -c 'import socket, sys; socket.create_connection((\"127.0.0.1\", "
		 "%d)).sendall(sys.argv[1].encode())' \"$1\"; }\n"
		 "trap 'sleep 1; say term; exit 0' TERM\n"
		 "sleep 300 & sleep 300 & sleep 300 &\n"
		 "say started; wait\n",
		 port);
	struct runner rn = {
	    .b = bt_backend("kubernetes", cfg, bt_warn_log()), .uuid = uuid, .script = script};
	pthread_t th;
	ck_assert_int_eq(pthread_create(&th, NULL, run_script, &rn), 0);
	char what[64];
	heard(l, 120000, what, sizeof(what));
	ck_assert_str_eq(what, "started");

	json_t *e = listed(b, uuid);
	json_t *res = json_object_get(e, "resources");
	ck_assert_msg(json_is_object(res), "no resources in %s", json_dumps(e, 0));
	ck_assert(json_real_value(json_object_get(res, "cpu_seconds")) > 0);
	ck_assert_int_gt(json_integer_value(json_object_get(res, "memory_bytes")), 0);
	ck_assert_int_eq(json_integer_value(json_object_get(res, "memory_limit_bytes")),
			 1024LL * 1024 * 1024);
	ck_assert(json_real_value(json_object_get(res, "cpus_limit")) == 1.0);
	/* PID 1, two stream helpers, the command's shell and its three sleeps */
	ck_assert_int_ge(json_integer_value(json_object_get(res, "pids")), 7);
	json_decref(e);

	cae_error err = {0};
	ck_assert_msg(cae_backend_cleanup(b, uuid, &err) == 0, "%s", err.message);
	heard(l, 0, what, sizeof(what));
	ck_assert_msg(strcmp(what, "term") == 0,
		      "the command's SIGTERM trap had not run when cleanup returned (%s)", what);
	ck_assert_int_eq(pthread_join(th, NULL), 0);
	cae_backend_free(rn.b);
	close(l);
}

/* .git/hooks (the default protected path) in a pod: root's, and every directory on the way
 * root's and sticky, so that commands (uid 1000, no capabilities) and the editor cannot
 * write, rename, remove or replace it, whichever way they try; the agent's own git config,
 * commit, push and other files under .git work; the root sidecar that did it has
 * terminated (the API says so) and the environment is ready all the same. */
START_TEST(protected_paths_hold_in_a_pod)
{
	char *state;
	cae_config *cfg = kcfg(&state);
	char uuid[64];
	cae_env_info info;
	cae_backend *b = prepared(cfg, uuid, &info);
	ck_assert(!has_warning(&info, "protected_paths"));

	/* the workspace's emptyDir is bounded by disk_limit, and the result says so */
	json_t *pod = pod_of(uuid);
	const char *size_limit = NULL;
	size_t vi;
	json_t *vol;
	json_array_foreach(json_object_get(json_object_get(pod, "spec"), "volumes"), vi, vol)
	{
		const char *sl = json_string_value(
		    json_object_get(json_object_get(vol, "emptyDir"), "sizeLimit"));
		if (sl)
			size_limit = sl;
	}
	json_t *disk = json_object_get(info.limits, "disk");
	ck_assert_str_eq(json_string_value(json_object_get(disk, "mechanism")) ?: "(none)",
			 "emptydir");
	ck_assert_int_eq(json_integer_value(json_object_get(disk, "bytes")),
			 (json_int_t)cfg->command_executor.docker.resources.disk_bytes);
	ck_assert_msg(size_limit != NULL, "the workspace's emptyDir has no sizeLimit");

	/* the sidecar: root with CAP_CHOWN only, and ended before prepare returned */
	json_t *spec = container(pod, "spec", "containers", "cae-protect");
	ck_assert_ptr_nonnull(spec);
	json_t *sc = json_object_get(spec, "securityContext");
	ck_assert_int_eq(json_integer_value(json_object_get(sc, "runAsUser")), 0);
	ck_assert(json_is_false(json_object_get(sc, "allowPrivilegeEscalation")));
	json_t *caps = json_object_get(sc, "capabilities");
	ck_assert_str_eq(json_string_value(json_array_get(json_object_get(caps, "drop"), 0)),
			 "ALL");
	ck_assert_int_eq(json_array_size(json_object_get(caps, "add")), 1);
	ck_assert_str_eq(json_string_value(json_array_get(json_object_get(caps, "add"), 0)),
			 "CHOWN");
	ck_assert_int_eq(json_array_size(json_object_get(spec, "volumeMounts")), 1);
	json_t *st = container(pod, "status", "containerStatuses", "cae-protect");
	json_t *term = json_object_get(json_object_get(st, "state"), "terminated");
	ck_assert_msg(term != NULL, "the root sidecar still runs after prepare");
	ck_assert_int_eq(json_integer_value(json_object_get(term, "exitCode")), 0);
	ck_assert_str_eq(
	    json_string_value(json_object_get(json_object_get(pod, "status"), "phase")), "Running");
	json_decref(pod);
	/* a pod whose sidecar ended is alive */
	cae_env_info again;
	cae_error err = {0};
	ck_assert_msg(cae_backend_info(b, uuid, &again, &err) == 0, "%s", err.message);
	ck_assert_str_eq(again.status, "ready");
	cae_env_info_clear(&again);

	static const char state_script[] =
	    "ls -la .git/hooks | sed 1d | awk '{print $1, $3, $5, $9}' | sort && "
	    "cat .git/hooks/* | cksum && find /workspace -name pre-commit 2>/dev/null; "
	    "stat -c '%U %a %n' /workspace /workspace/project /workspace/project/.git "
	    "/workspace/project/.git/hooks";
	cae_run_result r = kexec(b, uuid, state_script);
	char *before = strdup(r.out);
	cae_run_result_clear(&r);
	ck_assert_msg(strstr(before, "pre-commit.sample") && strstr(before, " root ") &&
			  strstr(before, "root 1777 /workspace\n") &&
			  strstr(before, "root 1777 /workspace/project\n") &&
			  strstr(before, "root 1777 /workspace/project/.git\n") &&
			  strstr(before, "root 755 /workspace/project/.git/hooks\n"),
		      "%s", before);
	/* the agent's own git, and other files under .git */
	bt_agent_git_works(b, uuid, "echo x > .git/agent-note && git branch side && ", 120000);
	/* bt_hook_attacks, and more */
	static const char *const attacks[] = {
	    "echo 'touch /tmp/pwned' > .git/hooks/post-commit",
	    "echo 'touch /tmp/pwned' > .git/hooks/pre-push",
	    "cp .git/hooks/pre-commit.sample .git/hooks/pre-commit",
	    "chmod 0777 .git/hooks/pre-commit.sample",
	    "mv .git/hooks/pre-commit.sample .git/hooks/pre-commit",
	    "echo x > /tmp/x && ln /tmp/x .git/hooks/pre-commit",
	    "ln -sfn /tmp .git/hooks",
	    "mkdir -p /tmp/h && echo x > /tmp/h/pre-commit && mv -T /tmp/h .git/hooks",
	    "chown 1000 .git/hooks",
	};
	static const char restore[] = "rm -rf /workspace/p2 .g .git/h2 ../h /tmp/t /tmp/h /tmp/x; "
				      "git checkout -q -- . 2>/dev/null; true";
	bt_attacks_fail(b, uuid, bt_hook_attacks, ARRAY_SIZE(bt_hook_attacks), state_script, before,
			restore, 120000);
	bt_attacks_fail(b, uuid, attacks, ARRAY_SIZE(attacks), state_script, before, restore,
			120000);
	bt_editor_cannot_write_hooks(b, uuid);
	r = kexec(b, uuid, state_script);
	ck_assert_str_eq(r.out, before);
	cae_run_result_clear(&r);
	/* the rest of the workspace stays the agent's */
	r = kexec(b, uuid,
		  "echo ok > new.txt && mkdir -p d/e && mv new.txt d/e/ && rm -r d && "
		  "echo ok > /workspace/tmp/x && echo y > .git/note2 && rm .git/note2 && "
		  "git status --short | wc -l");
	ck_assert_msg(r.exit_code == 0, "%s%s", r.out, r.err);
	cae_run_result_clear(&r);
	free(before);
	resources_then_graceful_cleanup(b, cfg, uuid);
	cae_env_info_clear(&info);
	cae_backend_free(b);
	cae_config_free(cfg);
	cae__rm_rf(state);
	free(state);
}
END_TEST

/* The pod of uuid once its main container ended (new reference), read until then. */
static json_t *ended_pod(const char *uuid)
{
	for (int i = 0; i < 600; i++) {
		json_t *pod = pod_of(uuid);
		json_t *c = container(pod, "status", "containerStatuses", "main");
		if (json_object_get(json_object_get(c, "state"), "terminated"))
			return pod;
		json_decref(pod);
		nanosleep(&(struct timespec){0, 100000000L}, NULL);
	}
	ck_abort_msg("the pod of %s still runs a minute after its helper's lifetime", uuid);
	return NULL;
}

/* Starts the mock GitLab (tests/backend/mock-gitlab.py) serving repository team/tool, a copy
 * of py.git, beside its projects API: its pid; *out gets the pipe on which it says its port
 * once it listens (mock_port). */
static pid_t mock_gitlab(int *out)
{
	tu_sh(
	    "rm -rf %s/team && mkdir -p %s/team && git clone -q --bare %s/py.git %s/team/tool.git",
	    git_root, git_root, git_root, git_root);
	int p[2];
	ck_assert_int_eq(pipe(p), 0);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGTERM); /* a failed test leaves no server behind */
		dup2(p[1], 1);
		execlp("python3", "python3", CAE_SOURCE_ROOT "/tests/backend/mock-gitlab.py",
		       git_token, git_root, (char *)NULL);
		_exit(127);
	}
	close(p[1]);
	*out = p[0];
	return pid;
}

static int mock_port(int fd)
{
	char buf[16] = "";
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	ck_assert_int_gt(n, 0);
	return (int)strtol(buf, NULL, 10);
}

/* protect_with_root_sidecar false (a cluster that refuses root containers): no sidecar, and
 * the environment's warnings say that the protected paths are not read-only to commands
 * (they are not: a command writes a hook). Its helper has a lifetime of 6 s
 * (docker.helper_lifetime_seconds): once its backend is freed (its stream closed), nobody
 * talks to the pod and it ends by itself (exit code 75); a command then says why.
 * protected_paths empty: no sidecar, no warning; that one is a GitLab task given as
 * {platform, owner, name}, whose pushes authenticate as those of a URL's. */
START_TEST(no_sidecar_is_said_or_not_needed)
{
	int says;
	pid_t gl = mock_gitlab(&says); /* started first: it is ready when needed */
	char *state;
	cae_config *cfg = kcfg(&state);
	bt_cfg_set(cfg, "command_executor.kubernetes.protect_with_root_sidecar", "false");
	bt_cfg_set(cfg, "command_executor.docker.helper_lifetime_seconds", "6");
	char uuid[64];
	cae_env_info info;
	cae_backend *b = prepared(cfg, uuid, &info);
	ck_assert(has_warning(&info, "protected_paths are not read-only to commands"));
	json_t *pod = pod_of(uuid);
	ck_assert_ptr_null(container(pod, "spec", "containers", "cae-protect"));
	ck_assert_int_eq(
	    json_array_size(json_object_get(json_object_get(pod, "spec"), "containers")), 1);
	json_decref(pod);
	cae_run_result r = kexec(b, uuid, "echo x > .git/hooks/pre-commit && echo written");
	ck_assert_str_eq(r.out, "written\n");
	cae_run_result_clear(&r);
	/* nobody talks to the pod any more: its helper ends it after its lifetime */
	cae_backend_free(b);
	pod = ended_pod(uuid);
	json_t *term = json_object_get(
	    json_object_get(container(pod, "status", "containerStatuses", "main"), "state"),
	    "terminated");
	ck_assert_int_eq(json_integer_value(json_object_get(term, "exitCode")), 75);
	json_decref(pod);
	b = bt_backend("kubernetes", cfg, bt_warn_log());
	const char *tr[] = {"true", NULL};
	cae_exec_request req = {.argv = tr, .timeout_ms = 60000, .cancel_fd = -1};
	cae_error err = {0};
	ck_assert_int_eq(cae_backend_exec(b, uuid, &req, &r, &err), -ENOENT);
	ck_assert_msg(strstr(err.message, "helper_lifetime_seconds"), "%s", err.message);
	finish(b, uuid, &info, cfg, state);

	cfg = kcfg(&state);
	bt_cfg_set(cfg, "command_executor.protected_paths", "");
	char api[128];
	snprintf(api, sizeof(api), "http://127.0.0.1:%d/api/v4", mock_port(says));
	bt_cfg_set(cfg, "gitlab.api_url", api);
	bt_cfg_set(cfg, "gitlab.token", git_token);
	b = bt_backend("kubernetes", cfg, bt_warn_log());
	bt_task_uuid(uuid, sizeof(uuid), TASK_PREFIX);
	cae_task t = {.uuid = uuid,
		      .platform = (char *)"gitlab",
		      .owner = (char *)"team",
		      .name = (char *)"tool"};
	cae_prepare_options o = {.cancel_fd = -1};
	ck_assert_msg(cae_backend_prepare(b, &t, "python", &o, &info, &err) == 0, "%s",
		      err.message);
	ck_assert(!has_warning(&info, "protected_paths"));
	pod = pod_of(uuid);
	ck_assert_ptr_null(container(pod, "spec", "containers", "cae-protect"));
	json_decref(pod);
	bt_agent_git_works(b, uuid, "", 120000);
	tu_sh("git --git-dir=%s/team/tool.git rev-parse -q --verify refs/heads/protected-%s",
	      git_root, uuid);
	kill(gl, SIGTERM);
	waitpid(gl, NULL, 0);
	finish(b, uuid, &info, cfg, state);
}
END_TEST

/* Without the static helper on this host every command is one API-server exec, and its
 * arguments travel on the exec's stdin, not in the URL (libwebsockets sends at most 2 KiB of
 * a request line): a prepare (its git clone has a long command line) and commands with long
 * arguments, newlines, backslashes, quotes and empty ones arrive whole, with their stdin,
 * extra environment and working directory rules; an exec whose URL would be too long is
 * refused, saying why, instead of reaching the API server cut short. */
START_TEST(without_the_helper_each_command_is_one_exec)
{
	const char *had = getenv("CAE_HELPER_STATIC");
	char *saved = had ? strdup(had) : NULL;
	setenv("CAE_HELPER_STATIC", "/nonexistent/cae-helper-static", 1);
	char *state;
	cae_config *cfg = kcfg(&state);
	char uuid[64];
	cae_env_info info;
	cae_backend *b = prepared(cfg, uuid, &info);
	if (saved)
		setenv("CAE_HELPER_STATIC", saved, 1);
	else
		unsetenv("CAE_HELPER_STATIC");
	free(saved);
	ck_assert(has_warning(&info, "every command is one API server exec"));
	json_t *pod = pod_of(uuid);
	ck_assert_ptr_null(json_object_get(json_object_get(pod, "spec"), "initContainers"));
	json_decref(pod);

	char *lng = malloc(6001);
	ck_assert_ptr_nonnull(lng);
	for (int i = 0; i < 6000; i++)
		lng[i] = (char)('a' + i % 26);
	lng[6000] = '\0';
	const char *argv[] = {"sh",
			      "-c",
			      "printf '<%s>' \"$@\"; printf '[%s]' \"$CAE_T\"; cat; pwd",
			      "sh",
			      lng,
			      "two\nlines\n",
			      "back\\slash \\n \\\\ end\\",
			      "",
			      "'quoted' \"too\" $HOME `x` ; |",
			      NULL};
	const char *env[] = {"CAE_T=v w", NULL};
	cae_exec_request req = {.argv = argv,
				.cwd = "/workspace/project",
				.extra_env = env,
				.stdin_data = "fed\n",
				.stdin_len = 4,
				.has_stdin = true,
				.timeout_ms = 120000,
				.max_stdout = 1 << 20,
				.cancel_fd = -1};
	cae_run_result r;
	cae_error err = {0};
	ck_assert_msg(cae_backend_exec(b, uuid, &req, &r, &err) == 0, "%s", err.message);
	char *want = NULL;
	ck_assert_int_ge(
	    asprintf(&want,
		     "<%s><two\nlines\n><back\\slash \\n \\\\ end\\><><'quoted' \"too\" "
		     "$HOME `x` ; |>[v w]fed\n/workspace/project\n",
		     lng),
	    0);
	ck_assert_int_eq(r.exit_code, 0);
	ck_assert_msg(strcmp(r.out, want) == 0, "got %.300s", r.out);
	free(want);
	cae_run_result_clear(&r);
	/* the working directory rules and a missing program, as with the helper */
	const char *pw[] = {"pwd", NULL};
	cae_exec_request out = {.argv = pw, .cwd = "/etc", .timeout_ms = 60000, .cancel_fd = -1};
	ck_assert_int_eq(cae_backend_exec(b, uuid, &out, &r, &err), -ENOTDIR);
	const char *none[] = {"no-such-program-xyz", NULL};
	cae_exec_request missing = {.argv = none, .timeout_ms = 60000, .cancel_fd = -1};
	ck_assert_int_eq(cae_backend_exec(b, uuid, &missing, &r, &err), -ENOENT);

	/* an exec whose command would make too long a URL: refused before it is sent */
	char name[160];
	snprintf(name, sizeof(name), "coding-agent-exec-%s", uuid);
	const char *huge[] = {"echo", lng, NULL};
	cae_k8s *k = bt_k8s_client();
	int rr = cae_k8s_exec(k, "default", name, "main", huge, NULL, 0, 60000, 0, 0, -1, &r, &err);
	ck_assert_int_eq(rr, -E2BIG);
	ck_assert_msg(strstr(err.message, "pass it on stdin"), "%s", err.message);
	cae_k8s_free(k);
	free(lng);
	finish(b, uuid, &info, cfg, state);
}
END_TEST

/* An environment whose image the node has not got (pull policy Never, as on this cluster):
 * the prepare fails, not found, naming the image, the pull policy, how to get the image to
 * the nodes and the command that builds it (issue 23: "pod cannot start: ErrImageNeverPull",
 * naming no image), and leaves no pod. */
START_TEST(missing_image_says_how_to_get_it)
{
	char *state;
	cae_config *cfg = kcfg(&state);
	bt_cfg_set(cfg, "command_executor.environments",
		   "python=coding-agent-executor-python:latest,"
		   "go=coding-agent-executor-go:cae-test-no-such-tag");
	cae_backend *b = bt_backend("kubernetes", cfg, bt_warn_log());
	char uuid[64];
	bt_task_uuid(uuid, sizeof(uuid), TASK_PREFIX);
	cae_task t = bt_http_task(uuid);
	cae_env_info info;
	cae_error err = {0};
	ck_assert_int_eq(cae_backend_prepare(b, &t, "go", NULL, &info, &err), -ENOENT);
	ck_assert_str_eq(cae_error_kind(err.code), "NOT_FOUND");
	const char *want[] = {
	    "ErrImageNeverPull",	   "image coding-agent-executor-go:cae-test-no-such-tag",
	    "pull policy is Never",	   "cae images build go",
	    "ctr -n k8s.io images import", "image_pull_policy to IfNotPresent"};
	for (size_t i = 0; i < ARRAY_SIZE(want); i++)
		ck_assert_msg(strstr(err.message, want[i]), "no \"%s\" in: %s", want[i],
			      err.message);
	char name[160];
	snprintf(name, sizeof(name), "coding-agent-exec-%s", uuid);
	json_t *pod = bt_k8s_pod(name);
	ck_assert_msg(pod == NULL, "pod %s left", name);
	cae_backend_free(b);
	cae_config_free(cfg);
	cae__rm_rf(state);
	free(state);
}
END_TEST

/* A pod's manifests as cae__pkgcache_container_manifest reads them: the files of the
 * directory ctx (exit 3 for one that is not there). */
static int manifest_exec(void *ctx, const cae_exec_request *req, cae_run_result *res,
			 cae_error *err)
{
	(void)err;
	memset(res, 0, sizeof(*res));
	const char *name = strstr(req->argv[2], "/workspace/project/") + 19;
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/%.*s", (const char *)ctx, (int)strcspn(name, ";"), name);
	size_t len;
	res->exit_code = cae__read_file(AT_FDCWD, path, 1 << 20, &res->out, &len) == 0 ? 0 : 3;
	return 0;
}

/* cae's fills for a pod of cfg whose project is work, in a state directory of their own:
 * whether they put anything in the shared trees. */
static bool pod_fill_fills(const char *net_access, const char *work)
{
	char *state;
	cae_config *cfg = kcfg(&state);
	bt_cfg_set(cfg, "command_executor.package_cache.enabled", "true");
	bt_cfg_set(cfg, "command_executor.docker.network.external_access", net_access);
	cae_backend *b = bt_backend("kubernetes", cfg, bt_warn_log());
	cae_task t = {.uuid = (char *)"caetest-k8sprot-fill"};
	cae_prepare p = {.b = b,
			 .task = &t,
			 .warnings = json_array(),
			 .exec = manifest_exec,
			 .exec_ctx = (void *)work};
	cae__pkgcache_pod_fill(&p);
	ck_assert_msg(json_array_size(p.warnings) == 0, "%s",
		      json_string_value(json_array_get(p.warnings, 0)));
	json_decref(p.warnings);
	char pat[PATH_MAX];
	bool filled = false;
	static const char *const what[] = {"pip-wheels/caewheel-*.whl",
					   "go-mod/example.com/caedep/@v/v1.0.0.zip"};
	for (size_t i = 0; i < ARRAY_SIZE(what); i++) {
		snprintf(pat, sizeof(pat), "%s/package-cache/*/%s", state, what[i]);
		glob_t g;
		if (glob(pat, 0, NULL, &g) == 0)
			filled = true;
		globfree(&g);
	}
	cae_backend_free(b);
	cae_config_free(cfg);
	cae__rm_rf(state);
	free(state);
	return filled;
}

/* The read-only shared caches on kubernetes (pkgcache-serve.c): a pod is not on this host,
 * so the shared Go module proxy and pip wheels are served by cae over the pod's helper
 * stream, on 127.0.0.1:3129 in the pod. A project with a go.mod requiring example.com/caedep
 * and a requirements.txt naming caewheel; the operator's Go proxy and pip index are
 * directories of this host (GOPROXY and PIP_INDEX_URL of cae's environment), which no pod
 * can see. Pod C, whose network is not its own (external_access false): no fill, nothing
 * served. Pod A, with the network: cae's fills on this host put both in the shared trees;
 * A's pip install takes caewheel from PIP_FIND_LINKS (the served page) alone; then A, as an
 * attacker, asks the server to write (PUT, POST, DELETE: refused), to climb out of the trees
 * (.., %2e%2e, through symbolic links planted in the tree, dot files: not found) while what
 * is in them is served, and to take the port over (a socket of its own joining it with
 * SO_REUSEPORT, which would get some of the connections: refused, EADDRINUSE); nothing in
 * the trees changed. Then the operator's proxy is gone,
 * and this host's go (the pods are on the host's network here) downloads and verifies the
 * module through A's GOPROXY alone, the module's own code. Failed before: no PIP_FIND_LINKS
 * or GOPROXY of cae's in a pod, caewheel not found by A's install, nothing on 3129. */
START_TEST(package_caches_served_read_only_to_a_pod)
{
	char *gp = tu_mkdtemp(), *work = tu_mkdtemp();
	char repo[64];
	snprintf(repo, sizeof(repo), "pkgc-%d.git", (int)getpid());
	shf("set -e; P=%s; V=$P/m/example.com/caedep@v1.0.0; D=$P/proxy/example.com/caedep/@v; "
	    "mkdir -p $V $D; printf 'module example.com/caedep\\n\\ngo 1.19\\n' > $V/go.mod; "
	    "printf 'package caedep\\n\\nfunc Word() string { return \"pristine\" }\\n' > "
	    "$V/dep.go; (cd $P/m && zip -qr $D/v1.0.0.zip example.com/caedep@v1.0.0); cp "
	    "$V/go.mod $D/v1.0.0.mod; printf '{\"Version\":\"v1.0.0\"}' > $D/v1.0.0.info; "
	    "mkdir -p $P/src/caewheel $P/simple/caewheel; echo 'WORD = \"pristine\"' > "
	    "$P/src/caewheel/__init__.py; printf 'from setuptools import setup\\nsetup(name="
	    "\"caewheel\", version=\"1.0\", packages=[\"caewheel\"])\\n' > $P/src/setup.py; (cd $P "
	    "&& HOME=$P/h PATH=/usr/bin:/bin python3 -m pip wheel -q --no-deps "
	    "--no-build-isolation --no-index -w $P/wheels ./src) >/dev/null 2>&1; W=$(ls "
	    "$P/wheels); printf '<a href=\"file://%%s/wheels/%%s\">%%s</a>\\n' $P $W $W > "
	    "$P/simple/caewheel/index.html; cd %s && git init -q -b main && printf 'module "
	    "example.com/g\\n\\ngo 1.19\\n\\nrequire example.com/caedep v1.0.0\\n' > go.mod && "
	    "printf 'package g\\n\\nimport \"example.com/caedep\"\\n\\nfunc W() string { return "
	    "caedep.Word() }\\n' > g.go && HOME=$P/h GOMODCACHE=$P/gm GOFLAGS='-mod=mod "
	    "-modcacherw' GOPROXY=file://$P/proxy GOSUMDB=off go mod tidy && test -s go.sum && "
	    "rm -rf $P/gm $P/h && printf 'caewheel==1.0\\n' > requirements.txt && git add . && "
	    "git -c user.email=t@e -c user.name=t commit -qm pkgc && rm -rf %s/%s && git clone "
	    "-q --bare . %s/%s",
	    gp, work, git_root, repo, git_root, repo);
	char env[PATH_MAX + 32];
	snprintf(env, sizeof(env), "file://%s/proxy", gp);
	setenv("GOPROXY", env, 1);
	snprintf(env, sizeof(env), "file://%s/simple", gp);
	setenv("PIP_INDEX_URL", env, 1);
	char url[512];
	snprintf(url, sizeof(url), "%s%s", git_http, repo);
	char *state;
	cae_config *cfg = kcfg(&state);
	bt_cfg_set(cfg, "command_executor.package_cache.enabled", "true");
	cae_error err = {0};
	cae_prepare_options o = {.cancel_fd = -1};
	cae_env_info info;
	cae_backend *b = bt_backend("kubernetes", cfg, bt_warn_log());
	char ua[64];
	bt_task_uuid(ua, sizeof(ua), TASK_PREFIX);
	cae_task ta = {.uuid = ua, .repo = url, .platform = (char *)"github"};
	ck_assert_msg(cae_backend_prepare(b, &ta, "python", &o, &info, &err) == 0, "%s",
		      err.message);
	char *ws = json_dumps(info.warnings, 0);
	ck_assert_msg(!has_warning(&info, "not filled"), "%s", ws);
	free(ws);
	json_t *d = NULL;
	size_t i;
	json_array_foreach(info.deps, i, d)
	{
		if (strcmp(json_string_value(json_object_get(d, "manifest")), "requirements.txt") ==
		    0)
			break;
	}
	ck_assert_msg(d && json_is_true(json_object_get(d, "success")), "%s",
		      d ? json_string_value(json_object_get(d, "output")) : "no pip install");
	cae_env_info_clear(&info);
	cae_run_result r;
	/* links planted in the trees (as if cae had left them): never followed */
	shf("cd %s/package-cache/*/pip-wheels && ln -s /etc/passwd out.whl && cd ../go-mod && ln "
	    "-s /etc example.com/out",
	    state);
	r = bt_exec(
	    b, ua,
	    "cd / && python3 -c 'import caewheel; print(caewheel.WORD)' && echo \"${GOPROXY%%,*} "
	    "$PIP_FIND_LINKS\" | sed -E "
	    "'s#127[.]0[.]0[.]1:(3129|31[3-5][0-9]|3160)/#127.0.0.1:PORT/#g' "
	    "&& python3 -c '\n"
	    "import os, socket, urllib.parse\n"
	    "u = urllib.parse.urlparse(os.environ[\"PIP_FIND_LINKS\"])\n"
	    "def ask(m, p, body=b\"\"):\n"
	    "    s = socket.create_connection((u.hostname, u.port))\n"
	    "    s.sendall((\"%s %s HTTP/1.1\\r\\nHost: x\\r\\nContent-Length: %d\\r\\n\\r\\n\" "
	    "% (m, p, len(body))).encode() + body)\n"
	    "    d = b\"\"\n"
	    "    while True:\n"
	    "        c = s.recv(65536)\n"
	    "        if not c: break\n"
	    "        d += c\n"
	    "    h, _, b = d.partition(b\"\\r\\n\\r\\n\")\n"
	    "    return h.split(b\" \")[1].decode(), b\n"
	    "M = \"/go-mod/example.com/caedep/@v/v1.0.0.mod\"\n"
	    "s, b = ask(\"GET\", M); print(\"get\", s, b\"module example.com/caedep\" in b)\n"
	    "s, b = ask(\"HEAD\", M); print(\"head\", s, len(b))\n"
	    "s, b = ask(\"GET\", \"/pip-wheels/\"); print(\"page\", s, "
	    "b\"caewheel-1.0-py3-none-any.whl\" in b, b\"out.whl\" in b)\n"
	    "for m, p in [(\"PUT\", \"/pip-wheels/caewheel-1.0-py3-none-any.whl\"), (\"POST\", M), "
	    "(\"DELETE\", M), (\"PUT\", \"/pip-wheels/new.whl\")]:\n"
	    "    print(m, ask(m, p, b\"POISON\")[0])\n"
	    "for p in [\"/pip-wheels/../go-mod/example.com/caedep/@v/v1.0.0.mod\", "
	    "\"/go-mod/../../../../../../etc/passwd\", \"/pip-wheels/%2e%2e/%2e%2e/etc/passwd\", "
	    "\"/pip-wheels/.filled\", \"/go-mod/.used\", \"/pip-wheels/out.whl\", "
	    "\"/go-mod/example.com/out/passwd\", \"/go-mod/example.com/caedep/@v/\", "
	    "\"/go-mod//etc/passwd\", \"/etc/passwd\", "
	    "\"http://127.0.0.1/go-mod/../../etc/passwd\"]:\n"
	    "    print(p, ask(\"GET\", p)[0])\n"
	    "t = socket.socket()\n"
	    "t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
	    "t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)\n"
	    "try:\n"
	    "    t.bind((u.hostname, u.port)); print(\"joined\")\n"
	    "except OSError as e:\n"
	    "    print(\"bind\", e.errno)\n"
	    "'",
	    120000);
	char *want = NULL;
	ck_assert_int_ge(asprintf(&want,
				  "pristine\nhttp://127.0.0.1:PORT/go-mod "
				  "http://127.0.0.1:PORT/pip-wheels/\nget 200 True\nhead 200 0\n"
				  "page 200 True False\nPUT 405\nPOST 405\nDELETE 405\nPUT 405\n"
				  "/pip-wheels/../go-mod/example.com/caedep/@v/v1.0.0.mod 404\n"
				  "/go-mod/../../../../../../etc/passwd 404\n"
				  "/pip-wheels/%%2e%%2e/%%2e%%2e/etc/passwd 404\n"
				  "/pip-wheels/.filled 404\n/go-mod/.used 404\n"
				  "/pip-wheels/out.whl 404\n/go-mod/example.com/out/passwd 404\n"
				  "/go-mod/example.com/caedep/@v/ 404\n/go-mod//etc/passwd 404\n"
				  "/etc/passwd 404\nhttp://127.0.0.1/go-mod/../../etc/passwd 404\n"
				  "bind 98\n"),
			 0);
	ck_assert_msg(strcmp(r.out, want) == 0, "%s%s", r.out, r.err);
	free(want);
	cae_run_result_clear(&r);
	/* the trees: cae's, read-only, unchanged */
	shf("cd %s/package-cache/* && rm pip-wheels/out.whl go-mod/example.com/out && ! grep -rl "
	    "POISON . && test -z \"$(find go-mod pip-wheels \\( -type f -perm /222 -o ! -user 0 "
	    "\\))\" && test \"$(ls pip-wheels)\" = caewheel-1.0-py3-none-any.whl",
	    state);
	/* no fill for a pod whose network is not its own (none on this cluster: a pod off the
	 * host's network has none at all), as for one that has it */
	ck_assert(!pod_fill_fills("false", work));
	ck_assert(pod_fill_fills("true", work));
	/* the operator's proxy gone: this host's go takes the module through A's listener (the
	 * pod is on the host's network: its port is this host's) */
	r = bt_exec(b, ua, "printf %s \"$CAE_PACKAGE_CACHE_URL\"", 60000);
	ck_assert_msg(strncmp(r.out, "http://127.0.0.1:", 17) == 0, "%s", r.out);
	shf("set -e; P=%s; rm -rf $P/proxy; cd %s; HOME=$P/h GOMODCACHE=$P/gm GOFLAGS='-mod=mod "
	    "-modcacherw' GOPROXY=%s/go-mod,off GOSUMDB=off GOTOOLCHAIN=local "
	    "go mod download -x && grep -q pristine $P/gm/example.com/caedep@v1.0.0/dep.go",
	    gp, work, r.out);
	cae_run_result_clear(&r);
	ck_assert_int_eq(cae_backend_cleanup(b, ua, &err), 0);
	unsetenv("GOPROXY");
	unsetenv("PIP_INDEX_URL");
	shf("rm -rf %s/%s", git_root, repo);
	cae__rm_rf(work);
	free(work);
	cae__rm_rf(gp);
	free(gp);
	cae_backend_free(b);
	cae_config_free(cfg);
	cae__rm_rf(state);
	free(state);
}
END_TEST

/* The prepare's npm dependency entry (NULL: none). */
static json_t *npm_entry(const cae_env_info *info)
{
	size_t i;
	json_t *d;
	json_array_foreach(info->deps, i, d)
	{
		if (strcmp(json_string_value(json_object_get(d, "manifest")),
			   "package-lock.json") == 0)
			return d;
	}
	return NULL;
}

/* What cae__pkgcache_npm_k8s reads of a project (the fake pod of npm_tree_gate): the
 * project's checks pass, its manifests are the files of the directory ctx. */
static int npm_gate_exec(void *ctx, const cae_exec_request *req, cae_run_result *res,
			 cae_error *err)
{
	(void)err;
	memset(res, 0, sizeof(*res));
	const char *f = strstr(req->argv[2], "f=/workspace/project/");
	if (!f)
		return 0;
	f += 21;
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/%.*s", (const char *)ctx, (int)strcspn(f, ";"), f);
	size_t len;
	res->exit_code = cae__read_file(AT_FDCWD, path, 1 << 20, &res->out, &len) == 0 ? 0 : 3;
	return 0;
}

/* cae__pkgcache_npm_k8s for a prepare of uuid's pod whose project's manifests are dir's:
 * whether `npm ci` is followed by a store (p->deps_opts), and p's warnings (new). */
static bool npm_tree_gate(cae_backend *b, const char *uuid, const char *dir, json_t **warnings)
{
	cae_task t = {.uuid = (char *)uuid};
	cae_prepare p = {.b = b,
			 .task = &t,
			 .warnings = json_array(),
			 .exec = npm_gate_exec,
			 .exec_ctx = (void *)dir,
			 .project = "/workspace/project",
			 .cancel_fd = -1};
	cae__pkgcache_npm_k8s(&p);
	ck_assert(!p.deps_opts.npm_tree_linked);
	*warnings = p.warnings;
	return p.deps_opts.npm_installed != NULL;
}

/* The shared node_modules trees on kubernetes (pkgcache-npm-kubernetes.c), in cae-test-node
 * (node and npm), with a lock file that runs no code (is-number, and semver with its bin
 * link, from the npm registry). A's `npm ci` is kept by cae: `tar -cf - node_modules` of
 * the image's GNU tar streamed out of the pod as its user and extracted on this host; A
 * then appends to every file of its own node_modules. B, a new pod of the same lock file
 * and image, gets the tree instead of an `npm ci` (shared_node_modules): the user's and
 * writable by it, none of A's writes, require and the bin link work. As an attacker, in
 * A's pod (the same stream and extraction as the store's): node_modules a link to "/", a
 * link to a directory of this host, a tree with a hard link, with a bin link that climbs
 * out, with a fifo: each refused, nothing made on this host outside the new tree, and a
 * tree of names past 100 bytes (GNU tar's long-name records) taken whole. A package.json
 * with an install script (postinstall) of the same lock file: no store after its npm ci,
 * no put; the same files for a project that has a node_modules the check before missed
 * (A's): the pod's own check refuses the put (a warning) and leaves A's tree as it was.
 * The kept tree: one, cae's, read-only, none of A's or B's writes. Failed before: B ran
 * npm ci (no shared_node_modules), nothing was kept. */
START_TEST(npm_tree_shared_in_pods)
{
	char *work = tu_mkdtemp(), *victim = tu_mkdtemp(), *scripted = tu_mkdtemp();
	char repo[64];
	snprintf(repo, sizeof(repo), "npmt-%d.git", (int)getpid());
	shf("set -e; cd %s; git init -q -b main; printf "
	    "'{\"name\":\"t\",\"version\":\"1.0.0\",\"dependencies\":{\"is-number\":\"7.0.0\","
	    "\"semver\":\"7.6.3\"}}\\n' > package.json; HOME=%s/h npm install --package-lock-only "
	    "--ignore-scripts --no-audit --no-fund --cache %s/npmcache >/dev/null 2>&1; test -s "
	    "package-lock.json; rm -rf %s/h %s/npmcache; git add package.json package-lock.json; "
	    "git -c user.email=t@e -c user.name=t commit -qm npm; rm -rf %s/%s; git clone -q "
	    "--bare . %s/%s; echo marker > %s/marker; cp package.json package-lock.json %s/; sed "
	    "-i 's/\"version\":\"1.0.0\",/&\"scripts\":{\"postinstall\":\"echo ran\"},/' "
	    "%s/package.json; grep -q postinstall %s/package.json",
	    work, work, work, work, work, git_root, repo, git_root, repo, victim, scripted,
	    scripted, scripted);
	char url[512];
	snprintf(url, sizeof(url), "%s%s", git_http, repo);
	char *state;
	cae_config *cfg = kcfg(&state);
	bt_cfg_set(cfg, "command_executor.package_cache.enabled", "true");
	bt_cfg_set(cfg, "command_executor.environments",
		   "python=coding-agent-executor-python:latest,node=cae-test-node:latest");
	cae_backend *b = bt_backend("kubernetes", cfg, bt_warn_log());
	cae_error err = {0};
	cae_prepare_options o = {.cancel_fd = -1};
	cae_env_info info;
	char uuids[2][64];
	for (int i = 0; i < 2; i++) {
		bt_task_uuid(uuids[i], sizeof(uuids[i]), TASK_PREFIX);
		cae_task t = {.uuid = uuids[i], .repo = url, .platform = (char *)"github"};
		ck_assert_msg(cae_backend_prepare(b, &t, "node", &o, &info, &err) == 0, "%s",
			      err.message);
		json_t *d = npm_entry(&info);
		char *ws = json_dumps(info.warnings, 0);
		ck_assert_msg(d && json_is_true(json_object_get(d, "success")), "%d: %s %s", i,
			      d ? json_string_value(json_object_get(d, "output")) : "no npm ci",
			      ws);
		/* only B got A's tree */
		ck_assert_msg(json_is_true(json_object_get(d, "shared_node_modules")) == (i == 1),
			      "%d: %s", i, ws);
		ck_assert_msg(!has_warning(&info, "node_modules"), "%d: %s", i, ws);
		free(ws);
		cae_env_info_clear(&info);
		if (i == 0) {
			shf("test -f "
			    "%s/package-cache/*/npm-trees/*/node_modules/is-number/index.js",
			    state);
			cae_run_result r =
			    kexec(b, uuids[0],
				  "w=0; for f in $(find node_modules -type f); do printf POISON >> "
				  "\"$f\" "
				  "&& w=$((w+1)); done; [ $w -gt 10 ] && echo written");
			ck_assert_msg(strcmp(r.out, "written\n") == 0, "%s%s", r.out, r.err);
			cae_run_result_clear(&r);
		}
	}
	cae_run_result r = kexec(
	    b, uuids[1],
	    "n=$(find node_modules | wc -l); [ $n -gt 10 ] && echo tree; test -z \"$(find "
	    "node_modules ! -user 1000)\" && echo owned; grep -rl POISON node_modules; node -e "
	    "'console.log(require(\"is-number\")(5))'; node_modules/.bin/semver 1.2.3; test -L "
	    "node_modules/.bin/semver && echo link; w=0; for f in $(find node_modules -type f); do "
	    "printf POISON >> \"$f\" && w=$((w+1)); done; [ $w -gt 10 ] && echo written");
	ck_assert_msg(strcmp(r.out, "tree\nowned\ntrue\n1.2.3\nlink\nwritten\n") == 0, "%s%s",
		      r.out, r.err);
	cae_run_result_clear(&r);

	/* the attacker's trees in A's pod, each taken as the store takes the project's */
	char pod[160];
	snprintf(pod, sizeof(pod), "coding-agent-exec-%s", uuids[0]);
	char script[2048];
	snprintf(script, sizeof(script),
		 "set -e; cd /workspace; L=$(printf 'l%%.0s' $(seq 150)); mkdir e1 e2 e3 e4 e5 "
		 "e6; ln -s / e1/node_modules; ln -s %s e2/node_modules; mkdir -p e3/node_modules "
		 "e4/node_modules/.bin e5/node_modules e6/node_modules/$L/.bin; echo a > "
		 "e3/node_modules/a; ln e3/node_modules/a e3/node_modules/b; ln -s ../../../etc "
		 "e4/node_modules/.bin/x; mkfifo e5/node_modules/f; printf good > "
		 "e6/node_modules/$L/$L.js; ln -s ../$L.js e6/node_modules/$L/.bin/g; echo made",
		 victim);
	r = kexec(b, uuids[0], script);
	ck_assert_msg(strcmp(r.out, "made\n") == 0, "%s%s", r.out, r.err);
	cae_run_result_clear(&r);
	static const struct {
		const char *dir;
		int r;
	} cases[] = {{"/workspace/e1", -EPERM}, {"/workspace/e2", -EPERM},
		     {"/workspace/e3", -EPERM}, {"/workspace/e4", -EPERM},
		     {"/workspace/e5", -EPERM}, {"/workspace/e6", 0}};
	char *into = tu_mkdtemp();
	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		shf("cd %s && rm -rf t && mkdir -p t/node_modules", into);
		char path[PATH_MAX];
		snprintf(path, sizeof(path), "%s/t/node_modules", into);
		int root = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		ck_assert_int_ge(root, 0);
		cae_error_clear(&err);
		int got = cae__pkgcache_npm_k8s_take(b, pod, cases[i].dir, root, -1, &err);
		close(root);
		ck_assert_msg(got == cases[i].r, "%s: %d %s", cases[i].dir, got, err.message);
		shf("test \"$(ls -A %s)\" = marker && test \"$(ls -A %s)\" = t", victim, into);
	}
	shf("cd %s/t/node_modules && test \"$(cat l*/l*.js)\" = good && test \"$(cat l*/.bin/g)\" "
	    "= good && test \"$(stat -c %%a l*/l*.js)\" = 444",
	    into);
	cae__rm_rf(into);
	free(into);

	/* an install script: not eligible; A's project (a node_modules already): refused */
	json_t *w = NULL;
	ck_assert(!npm_tree_gate(b, uuids[0], scripted, &w));
	ck_assert_int_eq(json_array_size(w), 0);
	json_decref(w);
	ck_assert(!npm_tree_gate(b, uuids[0], work, &w));
	ck_assert_msg(json_array_size(w) == 1 &&
			  strstr(json_string_value(json_array_get(w, 0)), "node_modules"),
		      "%s", json_string_value(json_array_get(w, 0)));
	json_decref(w);
	r = kexec(b, uuids[0], "grep -c POISON node_modules/is-number/index.js");
	ck_assert_msg(strcmp(r.out, "1\n") == 0, "%s%s", r.out, r.err);
	cae_run_result_clear(&r);

	/* the kept tree: one, none of A's or B's writes, cae's and read-only, the bin link */
	shf("cd %s/package-cache/*/npm-trees && test \"$(ls -A | grep -v -e '^\\.used$' -e "
	    "'^\\.lock-' | wc -l)\" = "
	    "1 && ! grep -rl POISON . && test -z \"$(find . -path './*/*' \\( -type f -perm /222 "
	    "-o ! -user 0 \\))\" && test -f */node_modules/is-number/index.js && test -L "
	    "*/node_modules/.bin/semver",
	    state);
	for (int i = 0; i < 2; i++)
		ck_assert_int_eq(cae_backend_cleanup(b, uuids[i], &err), 0);
	shf("rm -rf %s/%s", git_root, repo);
	cae__rm_rf(work);
	free(work);
	cae__rm_rf(victim);
	free(victim);
	cae__rm_rf(scripted);
	free(scripted);
	cae_backend_free(b);
	cae_config_free(cfg);
	cae__rm_rf(state);
	free(state);
}
END_TEST

/* Maven's side of a pod being prepared, as cae__pkgcache_maven_pod sees it: the settings
 * script answered (what it was given kept in ctx), the listing of the local repository
 * given as the names of ctx. */
struct maven_pod {
	const char *listing;
	char *settings; /* what the settings script got on stdin */
};

static int maven_exec(void *ctx, const cae_exec_request *req, cae_run_result *res, cae_error *err)
{
	(void)err;
	struct maven_pod *m = ctx;
	memset(res, 0, sizeof(*res));
	if (strstr(req->argv[2], "settings.xml")) {
		free(m->settings);
		m->settings = strndup(req->stdin_data, req->stdin_len);
	} else {
		res->out = strdup(m->listing);
	}
	return 0;
}

/* Maven's shared repository on kubernetes (pkgcache-maven.c, pkgcache-serve.c): served
 * read-only under /maven/ by cae over the pod's helper stream, on 127.0.0.1:3129 in the
 * pod. A remote of the test's own (http on this host) has caelib 1.0's jar and pom, each
 * with its .sha1. cae's side of a pod's prepare: for a pod whose network is not its own,
 * no fill after its Maven install; for one with the network, the fill after it takes the
 * names its local repository lists (the jar, the pom; a maven-metadata.xml and a snapshot
 * are not taken) from the remote, checked. Then a pod of the python image (no mvn: the
 * settings are written all the same, for the project's Maven wrapper or a Maven the task
 * installs; the install is skipped) whose project has a pom.xml: its ~/.m2/settings.xml is
 * cae's served settings, byte for byte, and its commands have the variable that activates
 * their profile; from the pod, over 127.0.0.1:3129/maven/, the jar and pom are the remote's
 * bytes and their .sha1 the sha1 of what was served; as an attacker, the pod asks the
 * server to write (PUT, POST, DELETE: refused), for a maven-metadata.xml, a snapshot, an
 * .md5 and a symbolic link planted in the tree (as if cae had left them), dot files,
 * climbs out of the tree and directories: not found. Nothing in the tree changed. Failed
 * before: nothing under /maven/ (404), no settings in the pod, no fill hook for a pod. */
START_TEST(package_cache_maven_served_to_a_pod)
{
	char *mp = tu_mkdtemp(), *work = tu_mkdtemp();
	const char *lib = "cae/test/caelib/1.0/caelib-1.0";
	char repo[64];
	snprintf(repo, sizeof(repo), "mvnc-%d.git", (int)getpid());
	shf("set -e; M=%s/www/maven2/cae/test/caelib/1.0; mkdir -p $M; head -c 4096 /dev/urandom "
	    "> $M/caelib-1.0.jar; printf '<project><modelVersion>4.0.0</modelVersion><groupId>"
	    "cae.test</groupId><artifactId>caelib</artifactId><version>1.0</version></project>\\n'"
	    " > $M/caelib-1.0.pom; for f in $M/*; do sha1sum < $f | cut -c1-40 > $f.sha1; done; "
	    "cd %s && git init -q -b main && printf '<project><modelVersion>4.0.0</modelVersion>"
	    "<groupId>cae.test</groupId><artifactId>app</artifactId><version>1.0</version>"
	    "<dependencies><dependency><groupId>cae.test</groupId><artifactId>caelib</artifactId>"
	    "<version>1.0</version></dependency></dependencies></project>\\n' > pom.xml && git add "
	    ". && git -c user.email=t@e -c user.name=t commit -qm mvnc && rm -rf %s/%s && git "
	    "clone "
	    "-q --bare . %s/%s",
	    mp, work, git_root, repo, git_root, repo);
	int port = 40000 + (int)(getpid() % 20000);
	pid_t server = fork();
	ck_assert_int_ge(server, 0);
	if (server == 0) {
		char p[16], www[PATH_MAX];
		snprintf(p, sizeof(p), "%d", port);
		snprintf(www, sizeof(www), "%s/www", mp);
		int fd = open("/dev/null", O_RDWR);
		if (fd < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0 || chdir(www) < 0)
			_exit(127);
		execl("/usr/bin/python3", "python3", "-m", "http.server", "--bind", "127.0.0.1", p,
		      (char *)NULL);
		_exit(127);
	}
	cae__proctree_lock();
	cae__proctree_register(server);
	cae__proctree_unlock();
	tu_sh("for i in $(seq 100); do curl -sf -o /dev/null http://127.0.0.1:%d/maven2/%s.pom "
	      "&& exit 0; sleep 0.1; done; exit 1",
	      port, lib);
	char *state;
	cae_config *cfg = kcfg(&state);
	bt_cfg_set(cfg, "command_executor.package_cache.enabled", "true");
	char remote[64];
	snprintf(remote, sizeof(remote), "http://127.0.0.1:%d/maven2", port);
	bt_cfg_set(cfg, "command_executor.package_cache.maven_remote", remote);
	cae_backend *b = bt_backend("kubernetes", cfg, bt_warn_log());

	/* cae's side of a pod's prepare: the fill after the install, for a pod with the
	 * network only */
	char listing[1024];
	snprintf(listing, sizeof(listing),
		 "./%s.jar\n./%s.pom\n./cae/test/caelib/maven-metadata.xml\n"
		 "./cae/test/caelib/1.1-SNAPSHOT/caelib-1.1-SNAPSHOT.jar\n",
		 lib, lib);
	struct maven_pod mpod = {.listing = listing};
	cae_task t = {.uuid = (char *)"caetest-k8sprot-mvnfill"};
	const char *const access[] = {"false", "true"};
	for (size_t i = 0; i < ARRAY_SIZE(access); i++) {
		bt_cfg_set(cfg, "command_executor.docker.network.external_access", access[i]);
		cae_prepare p = {.b = b,
				 .task = &t,
				 .warnings = json_array(),
				 .exec = maven_exec,
				 .exec_ctx = &mpod,
				 .project = "/workspace/project"};
		cae__pkgcache_maven_pod(&p);
		ck_assert_str_eq(mpod.settings, cae__pkgcache_maven_settings_served());
		ck_assert(i == 1 ? p.deps_opts.maven_installed == cae__pkgcache_maven_installed &&
				       p.deps_opts.maven_installed_ctx == &p
				 : p.deps_opts.maven_installed == NULL);
		if (p.deps_opts.maven_installed)
			p.deps_opts.maven_installed(p.deps_opts.maven_installed_ctx);
		ck_assert_msg(json_array_size(p.warnings) == 0, "%s",
			      json_string_value(json_array_get(p.warnings, 0)));
		json_decref(p.warnings);
	}
	free(mpod.settings);
	bt_cfg_set(cfg, "command_executor.docker.network.mode", "host"); /* as kcfg has it */
	shf("set -e; S=$(echo %s/package-cache/*/maven); R=%s/www/maven2; for f in %s.jar %s.pom; "
	    "do cmp $S/$f $R/$f; test \"$(cat $S/$f.sha1)\" = \"$(cat $R/$f.sha1)\"; done; test -z "
	    "\"$(find $S -name "
	    "'*SNAPSHOT*' -o -name maven-metadata.xml)\"",
	    state, mp, lib, lib);

	/* a pod whose project is Maven's */
	char url[512];
	snprintf(url, sizeof(url), "%s%s", git_http, repo);
	cae_error err = {0};
	cae_prepare_options o = {.cancel_fd = -1};
	cae_env_info info;
	char ua[64];
	bt_task_uuid(ua, sizeof(ua), TASK_PREFIX);
	cae_task ta = {.uuid = ua, .repo = url, .platform = (char *)"github"};
	ck_assert_msg(cae_backend_prepare(b, &ta, "python", &o, &info, &err) == 0, "%s",
		      err.message);
	char *ws = json_dumps(info.warnings, 0);
	ck_assert_msg(!has_warning(&info, "Maven") && has_warning(&info, "mvn is not installed"),
		      "%s", ws);
	free(ws);
	cae_env_info_clear(&info);
	cae_run_result r = bt_exec(
	    b, ua, "cat \"$HOME/.m2/settings.xml\" || echo \"served: $CAE_PACKAGE_CACHE_URL\"",
	    120000);
	ck_assert_msg(strcmp(r.out, cae__pkgcache_maven_settings_served()) == 0, "%s%s", r.out,
		      r.err);
	cae_run_result_clear(&r);
	/* planted in the tree, as if cae had left them: never served */
	shf("set -e; cd %s/package-cache/*/maven/cae/test/caelib; echo META > maven-metadata.xml; "
	    "echo META > 1.0/maven-metadata.xml; echo MD5 > 1.0/caelib-1.0.jar.md5; mkdir "
	    "1.1-SNAPSHOT 2.0; echo SNAP > 1.1-SNAPSHOT/caelib-1.1-SNAPSHOT.jar; ln -s /etc/passwd "
	    "2.0/caelib-2.0.jar; ln -s /etc/passwd 2.0/caelib-2.0.pom.sha1",
	    state);
	char script[4096];
	snprintf(
	    script, sizeof(script),
	    "echo \"$CAE_PACKAGE_CACHE_URL\" | sed -E "
	    "'s#^http://127[.]0[.]0[.]1:(3129|31[3-5][0-9]|3160)$#http://127.0.0.1:PORT#' && "
	    "python3 -c '\n"
	    "import hashlib, os, socket, urllib.parse\n"
	    "u = urllib.parse.urlparse(os.environ[\"CAE_PACKAGE_CACHE_URL\"])\n"
	    "def ask(m, p, body=b\"\"):\n"
	    "    s = socket.create_connection((u.hostname, u.port))\n"
	    "    s.sendall((\"%%s %%s HTTP/1.1\\r\\nHost: x\\r\\nContent-Length: %%d\\r\\n\\r\\n\" "
	    "%% (m, p, len(body))).encode() + body)\n"
	    "    d = b\"\"\n"
	    "    while True:\n"
	    "        c = s.recv(65536)\n"
	    "        if not c: break\n"
	    "        d += c\n"
	    "    h, _, b = d.partition(b\"\\r\\n\\r\\n\")\n"
	    "    return h.split(b\" \")[1].decode(), b\n"
	    "L = \"/maven/%s\"\n"
	    "for x in [\".jar\", \".pom\"]:\n"
	    "    s, b = ask(\"GET\", L + x)\n"
	    "    t, c = ask(\"GET\", L + x + \".sha1\")\n"
	    "    print(x, s, t, hashlib.sha1(b).hexdigest(), c.decode() == "
	    "hashlib.sha1(b).hexdigest())\n"
	    "s, b = ask(\"HEAD\", L + \".jar\"); print(\"head\", s, len(b))\n"
	    "for m in [\"PUT\", \"POST\", \"DELETE\"]:\n"
	    "    print(m, ask(m, L + \".jar\", b\"POISON\")[0])\n"
	    "print(\"new\", ask(\"PUT\", \"/maven/cae/test/caelib/9/caelib-9.jar\", "
	    "b\"POISON\")[0])\n"
	    "for p in [\"/maven/cae/test/caelib/maven-metadata.xml\", "
	    "\"/maven/cae/test/caelib/1.0/maven-metadata.xml\", L + \".jar.md5\", "
	    "\"/maven/cae/test/caelib/1.1-SNAPSHOT/caelib-1.1-SNAPSHOT.jar\", "
	    "\"/maven/cae/test/caelib/2.0/caelib-2.0.jar\", "
	    "\"/maven/cae/test/caelib/2.0/caelib-2.0.pom.sha1\", \"/maven/.filled\", "
	    "\"/maven/.used\", \"/maven/\", \"/maven/cae/test/caelib/1.0/\", "
	    "\"/maven/../go-mod/.used\", \"/maven/%%2e%%2e/%%2e%%2e/etc/passwd\", "
	    "\"/maven/cae/../../../etc/passwd\", \"/maven//etc/passwd\", "
	    "\"/mavenx/cae/test/caelib/1.0/caelib-1.0.jar\"]:\n"
	    "    print(ask(\"GET\", p)[0], p)\n"
	    "'",
	    lib);
	r = bt_exec(b, ua, script, 120000);
	char sums[2][41];
	for (int i = 0; i < 2; i++) {
		char path[PATH_MAX], *text = NULL;
		size_t len;
		snprintf(path, sizeof(path), "%s/www/maven2/%s.%s.sha1", mp, lib,
			 i == 0 ? "jar" : "pom");
		ck_assert_int_eq(cae__read_file(AT_FDCWD, path, 100, &text, &len), 0);
		snprintf(sums[i], sizeof(sums[i]), "%.40s", text);
		free(text);
	}
	char *want = NULL;
	ck_assert_int_ge(
	    asprintf(&want,
		     "http://127.0.0.1:PORT\n.jar 200 200 %s True\n.pom 200 200 %s True\n"
		     "head 200 0\nPUT 405\nPOST 405\nDELETE 405\nnew 405\n"
		     "404 /maven/cae/test/caelib/maven-metadata.xml\n"
		     "404 /maven/cae/test/caelib/1.0/maven-metadata.xml\n"
		     "404 /maven/%s.jar.md5\n"
		     "404 /maven/cae/test/caelib/1.1-SNAPSHOT/caelib-1.1-SNAPSHOT.jar\n"
		     "404 /maven/cae/test/caelib/2.0/caelib-2.0.jar\n"
		     "404 /maven/cae/test/caelib/2.0/caelib-2.0.pom.sha1\n404 /maven/.filled\n"
		     "404 /maven/.used\n404 /maven/\n404 /maven/cae/test/caelib/1.0/\n"
		     "404 /maven/../go-mod/.used\n404 /maven/%%2e%%2e/%%2e%%2e/etc/passwd\n"
		     "404 /maven/cae/../../../etc/passwd\n404 /maven//etc/passwd\n"
		     "404 /mavenx/cae/test/caelib/1.0/caelib-1.0.jar\n",
		     sums[0], sums[1], lib),
	    0);
	ck_assert_msg(strcmp(r.out, want) == 0, "%s%s", r.out, r.err);
	free(want);
	cae_run_result_clear(&r);
	/* the tree: the remote's bytes, cae's, read-only, nothing new */
	shf("set -e; S=$(echo %s/package-cache/*/maven); R=%s/www/maven2; cd $S/cae/test/caelib; "
	    "rm -r maven-metadata.xml 1.0/maven-metadata.xml 1.0/caelib-1.0.jar.md5 1.1-SNAPSHOT "
	    "2.0; cd $S; for f in %s.jar %s.pom; do cmp $S/$f $R/$f; test \"$(cat $S/$f.sha1)\" = "
	    "\"$(cat $R/$f.sha1)\"; "
	    "done; ! grep -rl POISON $S; test \"$(ls $S/cae/test/caelib)\" = 1.0; test -z \"$(find "
	    "$S/cae \\( -type f -perm /222 -o ! -user 0 \\))\"",
	    state, mp, lib, lib);
	ck_assert_int_eq(cae_backend_cleanup(b, ua, &err), 0);
	cae__proctree_unregister(server);
	kill(server, SIGTERM);
	waitpid(server, NULL, 0);
	shf("rm -rf %s/%s", git_root, repo);
	cae__rm_rf(work);
	free(work);
	cae__rm_rf(mp);
	free(mp);
	cae_backend_free(b);
	cae_config_free(cfg);
	cae__rm_rf(state);
	free(state);
}
END_TEST

/* The prepare's commands of cae__pkgcache_go_pod_seed, run in uuid's pod by b. */
struct pod_exec {
	cae_backend *b;
	const char *uuid;
};

static int pod_exec(void *ctx, const cae_exec_request *req, cae_run_result *res, cae_error *err)
{
	struct pod_exec *pe = ctx;
	return cae_backend_exec(pe->b, pe->uuid, req, res, err);
}

/* Go's shared build cache on kubernetes (pkgcache-go-kubernetes.c): a Go project's pod (the
 * go image) gets the standard library's compile outputs in its own GOCACHE before its first
 * command, from a fill pod of cae's own: its `go test -x` compiles no package of the standard
 * library (no "-std" compile: Go 1.20 on) and runs vet on its own package alone (the facts of
 * every standard package it imports are cached: go 1.19, whose standard library is
 * precompiled in GOROOT), and passes. Its copy is its own (every file its user's,
 * writable: it overwrites one) while the store, the fill pod's tar on this host, stays
 * cae's, 0444 and byte for byte what it was. A pod whose project has no go.mod gets nothing
 * (cae__pkgcache_go_pod_seed, run in the same pod once go.mod is moved away and its GOCACHE
 * removed: 0, and no GOCACHE made). Failed before: the pod had no GOCACHE before its go test, which
 * ran vet 51 times (its package and 50 of the standard library). */
START_TEST(go_build_cache_seeded_into_a_pod)
{
	char *work = tu_mkdtemp();
	char repo[64];
	snprintf(repo, sizeof(repo), "gobuild-%d.git", (int)getpid());
	shf("set -e; cd %s && git init -q -b main && printf 'module example.com/gb\\n\\ngo "
	    "1.19\\n' > go.mod && printf 'package gb\\n\\nimport "
	    "(\\n\\t\"fmt\"\\n\\t\"strings\"\\n)"
	    "\\n\\nfunc Word() string { return strings.ToUpper(fmt.Sprint(\"gb\")) }\\n' > gb.go "
	    "&& "
	    "printf 'package gb\\n\\nimport \"testing\"\\n\\nfunc TestWord(t *testing.T) {\\n\\tif "
	    "Word() != \"GB\" {\\n\\t\\tt.Fatal(Word())\\n\\t}\\n}\\n' > gb_test.go && git add . "
	    "&& "
	    "git -c user.email=t@e -c user.name=t commit -qm gb && rm -rf %s/%s && git clone -q "
	    "--bare . %s/%s",
	    work, git_root, repo, git_root, repo);
	char url[512];
	snprintf(url, sizeof(url), "%s%s", git_http, repo);
	char *state;
	cae_config *cfg = kcfg(&state);
	bt_cfg_set(cfg, "command_executor.package_cache.enabled", "true");
	cae_error err = {0};
	cae_prepare_options o = {.cancel_fd = -1};
	cae_env_info info;
	cae_backend *b = bt_backend("kubernetes", cfg, bt_warn_log());
	char uuid[64];
	bt_task_uuid(uuid, sizeof(uuid), TASK_PREFIX);
	cae_task t = {.uuid = uuid, .repo = url, .platform = (char *)"github"};
	ck_assert_msg(cae_backend_prepare(b, &t, "go", &o, &info, &err) == 0, "%s", err.message);
	char *ws = json_dumps(info.warnings, 0);
	ck_assert_msg(!has_warning(&info, "Go build cache"), "%s", ws);
	free(ws);
	cae_env_info_clear(&info);
	/* the store's bytes before the pod writes (checked below) */
	shf("cd %s/package-cache/*/go-kubernetes 2>/dev/null && sha256sum *.tar > %s/sum; true",
	    state, work);
	cae_run_result r = bt_exec(
	    b, uuid,
	    "c=$(go env GOCACHE); test -d \"$c\" || echo no GOCACHE; cd /workspace/project && go "
	    "test -x -count=1 . > /tmp/x 2>&1; echo rc=$?; echo vet $(grep -c -e '/vet ' /tmp/x); "
	    "grep -e '/compile ' /tmp/x | grep -e "
	    "' -std' | sed 's/.* -p \\([^ ]*\\) .*/\\1/' | sort | tr '\\n' ' '; echo; test -z "
	    "\"$(find \"$c\" ! -user \"$(id -u)\")\" && f=$(find \"$c\" -type f -name '*-d' | "
	    "head -1) && test -w \"$f\" && echo POISON > \"$f\" && echo own",
	    600000);
	ck_assert_msg(strcmp(r.out, "rc=0\nvet 1\n\nown\n") == 0, "%s%s", r.out, r.err);
	cae_run_result_clear(&r);
	/* the store: one tar, cae's, read-only; the pod's writes changed none of its bytes */
	shf("cd %s/package-cache/*/go-kubernetes && test \"$(ls *.tar | wc -l)\" = 1 && test "
	    "-z \"$(find . -name '*.tar' \\( -perm /222 -o ! -user 0 \\))\" && test -s %s/sum "
	    "&& sha256sum -c --quiet %s/sum",
	    state, work, work);
	/* no go.mod: nothing */
	r = bt_exec(b, uuid, "rm -rf \"$(go env GOCACHE)\" && mv /workspace/project/go.mod /tmp/",
		    60000);
	ck_assert_msg(r.exit_code == 0, "%s", r.err);
	cae_run_result_clear(&r);
	struct pod_exec pe = {.b = b, .uuid = uuid};
	cae_prepare p = {
	    .b = b, .task = &t, .warnings = json_array(), .exec = pod_exec, .exec_ctx = &pe};
	p.cancel_fd = -1;
	ck_assert_int_eq(cae__pkgcache_go_pod_seed(&p, &err), 0);
	json_decref(p.warnings);
	r = bt_exec(b, uuid, "test -e \"$(go env GOCACHE)\" && echo seeded; true", 60000);
	ck_assert_msg(strcmp(r.out, "") == 0, "%s%s", r.out, r.err);
	cae_run_result_clear(&r);
	ck_assert_int_eq(cae_backend_cleanup(b, uuid, &err), 0);
	shf("rm -rf %s/%s", git_root, repo);
	cae__rm_rf(work);
	free(work);
	cae_backend_free(b);
	cae_config_free(cfg);
	cae__rm_rf(state);
	free(state);
}
END_TEST

/* Deletes the pods of this run's tasks (what a failed test left). */
static void sweep(void)
{
	bt_k8s_sweep(TASK_PREFIX, NULL);
}

static Suite *make_suite(void)
{
	Suite *s = suite_create("backend-kubernetes");
	TCase *pr = bt_tcase(s, "protected", 600, sweep);
	tcase_add_test(pr, protected_paths_hold_in_a_pod);
	tcase_add_test(pr, no_sidecar_is_said_or_not_needed);
	tcase_add_test(pr, missing_image_says_how_to_get_it);
	TCase *nh = bt_tcase(s, "no-helper", 600, sweep);
	tcase_add_test(nh, without_the_helper_each_command_is_one_exec);
	TCase *pk = bt_tcase(s, "pkgcache", 600, sweep);
	tcase_add_test(pk, package_caches_served_read_only_to_a_pod);
	tcase_add_test(pk, package_cache_maven_served_to_a_pod);
	TCase *nt = bt_tcase(s, "npm-tree", 900, sweep);
	tcase_add_test(nt, npm_tree_shared_in_pods);
	TCase *gb = bt_tcase(s, "pkgcache-go", 900, sweep);
	tcase_add_test(gb, go_build_cache_seeded_into_a_pod);
	return s;
}

int main(void)
{
	return bt_k8s_main(make_suite);
}
