/* The patch worker's executor (src/worker).
 *
 * Every test that touches an environment runs in several modes (a Check loop test):
 *   mode 0  local backend, files through this host's file system (openat2 beneath)
 *   mode 1  local backend, files through commands in the environment (the exec-based file
 *           system every non-local backend uses), the rollback snapshot in the environment
 *   mode 2  docker backend (built as test-worker-docker with -DCAE_WORKER_DOCKER: a real
 *           container of coding-agent-executor-python:latest, network none)
 * and inspects the workspace through commands in the environment, so one body checks all.
 *
 * Required unit cases -> tests:
 *   parsePatch()           JSON ok -> json_patch_full; JSON bad -> parse_json_bad;
 *                          Markdown ok -> markdown_patch; Markdown bad -> markdown_bad;
 *                          empty patch -> empty_patch
 *   executeFileEdit()      create, update, delete, append -> file_edit_actions;
 *                          outside the workspace -> outside_paths_refused
 *   executeShellCommand()  ok, error -> shell_ok_and_error; timeout -> shell_timeout
 *   executeGitOperation()  add, commit, reset, checkout, error -> git_operations
 *                          (+ git_timeout)
 *   autoCommitChanges()    commit -> auto_commit_hash; nothing to commit ->
 *                          auto_commit_nothing; error -> auto_commit_error
 * Required integration cases -> tests:
 *   complete patch run     -> json_patch_full
 *   error handling         -> continue_mode_and_stop_on_error (+ continue_mode_diffs)
 *   auto-commit            -> auto_commit_hash
 *   security               -> outside_paths_refused, shell_timeout
 * Beyond those: diff formats (apply_patch_format, unified_diff_format,
 * diff_context_not_found, diff_crlf, diff_no_final_newline), big_file_50mb,
 * thousand_commands, rollback_7_of_10 (+ without git), dry_run_changes_nothing, log_events,
 * cancelled, and (local only) render_format, path_rel, options_from_config, session_tool,
 * cli_patch.
 */
#include "base/chase.h"
#include "base/macro.h"
#include "cae/backend.h"
#include "cae/config.h"
#include "cae/docker.h"
#include "cae/log.h"
#include "cae/runner.h"
#include "cae/session.h"
#include "cae/worker.h"
#include "base/scratch.h"
#include "crashutil.h"
#include "testutil.h"
#include "worker/worker-internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stdarg.h>
#include <sys/stat.h>

#ifdef CAE_WORKER_DOCKER
#define MODE_FIRST 2
#define MODE_LAST 3
#else
#define MODE_FIRST 0
#define MODE_LAST 2
#endif

static const char *cae_exe;
static int seq;

typedef struct fx {
	int mode;
	char *tmp;
	char *origin;
	cae_config *cfg;
	cae_log *log;
	int logfd;
	char *logpath;
	cae_backend *b;
	char uuid[64];
	cae_env_info info;
	const char *ws; /* the workspace as commands see it */
} fx;

static void cfg_set(cae_config *cfg, const char *key, const char *value)
{
	cae_error err = {0};
	ck_assert_msg(cae_config_set(cfg, key, value, &err) == 0, "%s: %s", key, err.message);
}

/* The origin repository every environment is cloned from, made in dir/origin (new path). */
static char *make_origin(const char *dir)
{
	char *origin = NULL;
	ck_assert_int_ge(asprintf(&origin, "%s/origin", dir), 0);
	tu_sh("mkdir -p %s/src && cd %s && git init -q -b main && "
	      "printf '# Demo\\n\\nHello.\\n' > README.md && "
	      "printf 'def main():\\n    print(\"hi\")\\n\\n\\nif __name__ == \"__main__\":\\n"
	      "    main()\\n' > src/app.py && printf '*.log\\nbuild/\\n' > .gitignore && "
	      "git add . && git -c user.name=t -c user.email=t@e commit -qm init",
	      origin, origin);
	return origin;
}

/* A config for mode with its state in dir (new). */
static int run_pid; /* this test binary's: the instance of its containers (main sets it) */

static cae_config *make_cfg(const char *dir, int mode)
{
	cae_config *cfg = cae_config_defaults(NULL);
	ck_assert_ptr_nonnull(cfg);
	char state[PATH_MAX];
	snprintf(state, sizeof(state), "%s/state", dir);
	cfg_set(cfg, "command_executor.state_dir", state);
	cfg_set(cfg, "command_executor.clone.auto_install_deps", "false");
	cfg_set(cfg, "text_editor_mcp.enabled", "false");
	if (mode == 2) {
		cfg_set(cfg, "command_executor.backend", "docker");
		if (getenv("DOCKER_HOST") && *getenv("DOCKER_HOST"))
			cfg_set(cfg, "command_executor.docker_host", getenv("DOCKER_HOST"));
		cfg_set(cfg, "command_executor.docker.network.mode", "none");
		cfg_set(cfg, "command_executor.docker.resources.memory_limit", "1g");
		/* one instance for the run: the shared container is every case's, whatever
		 * state directory the case has */
		char inst[64];
		snprintf(inst, sizeof(inst), "worker-%d", run_pid);
		cfg_set(cfg, "command_executor.instance", inst);
	} else {
		cfg_set(cfg, "command_executor.backend", "local");
	}
	return cfg;
}

static cae_backend *make_backend(const cae_config *cfg, int mode, cae_log *log)
{
	cae_backend *b = NULL;
	cae_error err = {0};
	ck_assert_msg(cae_backend_new_named(mode == 2 ? "docker" : "local", cfg, log, &b, &err) ==
			  0,
		      "%s", err.message);
	return b;
}

#ifdef CAE_WORKER_DOCKER
/* One container for every case of a TCase: preparing one (create, start, clone) costs more
 * than most cases. An unchecked fixture prepares it in the parent before the cases are
 * forked and keeps a copy of the workspace and of its scratch directory beside them; each
 * case starts by putting both back (fx_init), so no case sees another's files, snapshots or
 * journals. Cases run one at a time. The copies are made and restored by raw execs from /,
 * which also work after a case removed the project directory (commands through the backend
 * then cannot run: they start in it). */
#define SHARED_PRISTINE "/workspace/.wkt-pristine"
static char *shared_tmp;
static char shared_uuid[64];

/* Runs script with sh -c in the shared container, from /. Returns 0, or -ENOENT when the
 * container is gone; asserts that the script succeeds. */
static int shared_sh(const cae_config *cfg, const char *script)
{
	cae_docker *d = NULL;
	cae_error err = {0};
	ck_assert_msg(cae_docker_new(cfg->command_executor.docker_host, &d, &err) == 0, "%s",
		      err.message);
	char name[128];
	snprintf(name, sizeof(name), "coding-agent-exec-%s", shared_uuid);
	const char *argv[] = {"sh", "-c", script, NULL};
	cae_docker_exec_spec spec = {
	    .argv = argv, .cwd = "/", .timeout_ms = 120000, .cancel_fd = -1, .raw = true};
	cae_run_result r;
	int ret = cae_docker_exec(d, name, &spec, &r, NULL, &err);
	cae_docker_free(d);
	if (ret == -ENOENT || ret == -ESRCH || ret == -EAGAIN)
		return -ENOENT;
	ck_assert_msg(ret == 0, "%s: %d %s", script, ret, err.message);
	ck_assert_msg(r.exit_code == 0, "%s: exit %d: %s", script, r.exit_code, r.err);
	cae_run_result_clear(&r);
	return 0;
}

/* Prepares the shared environment (again, when a case found it gone) and keeps its copies. */
static void shared_prepare(const cae_config *cfg)
{
	char *origin = make_origin(shared_tmp);
	cae_backend *b = make_backend(cfg, 2, NULL);
	cae_task t = {.uuid = shared_uuid, .repo = origin};
	cae_env_info info;
	cae_error err = {0};
	ck_assert_msg(cae_backend_prepare(b, &t, "python", NULL, &info, &err) == 0, "prepare: %s",
		      err.message);
	ck_assert_str_eq(info.workspace_path, "/workspace/project");
	cae_env_info_clear(&info);
	cae_backend_free(b);
	ck_assert_int_eq(shared_sh(cfg, "mkdir " SHARED_PRISTINE " && cp -a /workspace/project "
					"/workspace/tmp " SHARED_PRISTINE "/"),
			 0);
	cae__rm_rf(origin);
	free(origin);
}

static void shared_setup(void)
{
	shared_tmp = tu_mkdtemp();
	snprintf(shared_uuid, sizeof(shared_uuid), "wkt-%d-shared", (int)getpid());
	cae_config *cfg = make_cfg(shared_tmp, 2);
	shared_prepare(cfg);
	cae_config_free(cfg);
}

static void shared_teardown(void)
{
	cae_config *cfg = make_cfg(shared_tmp, 2);
	cae_backend *b = make_backend(cfg, 2, NULL);
	cae_error err = {0};
	cae_backend_cleanup(b, shared_uuid, &err);
	cae_backend_free(b);
	cae_config_free(cfg);
	cae__rm_rf(shared_tmp);
	free(shared_tmp);
}

/* The shared environment as its fixture prepared it. A container removed from outside
 * (another process's gc, a person) is prepared again. */
static void shared_reset(fx *f)
{
	snprintf(f->uuid, sizeof(f->uuid), "%s", shared_uuid);
	/* the project, its .git and .git/hooks are root's (protected paths): emptied and
	 * filled again around the hooks, which no case can change */
	if (shared_sh(
		f->cfg,
		"cd /workspace && rm -rf tmp .cae-journal && cp -a " SHARED_PRISTINE
		"/tmp . && cd project && "
		"find . -mindepth 1 -maxdepth 1 ! -name .git -exec rm -rf {} + && "
		"find .git -mindepth 1 -maxdepth 1 ! -name hooks -exec rm -rf {} + && "
		"cd " SHARED_PRISTINE "/project && for e in * .[!.]* ..?* .git/* .git/.[!.]*; "
		"do case $e in .git | .git/hooks) continue ;; esac; "
		"if [ -e \"$e\" ]; then cp -a \"$e\" \"/workspace/project/$e\"; fi; done") < 0)
		shared_prepare(f->cfg);
	cae_error err = {0};
	ck_assert_msg(cae_backend_info(f->b, f->uuid, &f->info, &err) == 0, "%s", err.message);
}
#endif

static void fx_init(fx *f, int mode)
{
	memset(f, 0, sizeof(*f));
	f->mode = mode;
	f->tmp = tu_mkdtemp();
	ck_assert_int_ge(asprintf(&f->logpath, "%s/log.jsonl", f->tmp), 0);
	f->logfd = open(f->logpath, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	ck_assert_int_ge(f->logfd, 0);
	f->log = cae_log_new(f->logfd, CAE_LOG_DEBUG);
	f->cfg = make_cfg(f->tmp, mode);
	f->b = make_backend(f->cfg, mode, f->log);
#ifdef CAE_WORKER_DOCKER
	if (mode == 2) {
		shared_reset(f);
		f->ws = f->info.workspace_path;
		return;
	}
#endif
	f->origin = make_origin(f->tmp);
	snprintf(f->uuid, sizeof(f->uuid), "wkt-%d-%d", (int)getpid(), ++seq);
	cae_task t = {.uuid = f->uuid, .repo = f->origin};
	cae_error err = {0};
	ck_assert_msg(cae_backend_prepare(f->b, &t, "python", NULL, &f->info, &err) == 0,
		      "prepare: %s", err.message);
	f->ws = f->info.workspace_path;
}

static void fx_free(fx *f)
{
	cae_error err = {0};
	if (f->origin) /* else the shared environment: its fixture removes it */
		cae_backend_cleanup(f->b, f->uuid, &err);
	cae_env_info_clear(&f->info);
	cae_backend_free(f->b);
	cae_config_free(f->cfg);
	cae_log_free(f->log);
	close(f->logfd);
	cae__rm_rf(f->tmp);
	free(f->tmp);
	free(f->origin);
	free(f->logpath);
}

/* A script in the environment, in the workspace. */
static cae_run_result env_run(fx *f, const char *script)
{
	const char *argv[] = {"sh", "-c", script, NULL};
	cae_exec_request req = {
	    .argv = argv, .timeout_ms = 120000, .cancel_fd = -1, .max_stdout = 8 << 20};
	cae_run_result r;
	cae_error err = {0};
	ck_assert_msg(cae_backend_exec(f->b, f->uuid, &req, &r, &err) == 0, "%s: %s", script,
		      err.message);
	return r;
}

/* Stdout of a script that must succeed (new string). */
static char *sh(fx *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static char *sh(fx *f, const char *fmt, ...)
{
	char *script;
	va_list ap;
	va_start(ap, fmt);
	ck_assert_int_ge(vasprintf(&script, fmt, ap), 0);
	va_end(ap);
	cae_run_result r = env_run(f, script);
	ck_assert_msg(r.exit_code == 0, "%s: exit %d: %s%s", script, r.exit_code, r.out, r.err);
	char *out = strdup(r.out);
	cae_run_result_clear(&r);
	free(script);
	return out;
}

/* Exit status of a script. */
static int sh_status(fx *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int sh_status(fx *f, const char *fmt, ...)
{
	char *script;
	va_list ap;
	va_start(ap, fmt);
	ck_assert_int_ge(vasprintf(&script, fmt, ap), 0);
	va_end(ap);
	cae_run_result r = env_run(f, script);
	int st = r.exit_code;
	cae_run_result_clear(&r);
	free(script);
	return st;
}

static void assert_file(fx *f, const char *path, const char *want)
{
	char *got = sh(f, "cat -- '%s'", path);
	ck_assert_msg(strcmp(got, want) == 0, "%s: got [%s], want [%s]", path, got, want);
	free(got);
}

static bool exists(fx *f, const char *path)
{
	return sh_status(f, "test -e '%s' || test -L '%s'", path, path) == 0;
}

/* Every entry of the workspace: mode, type, path, content hash or link target. */
static char *tree_hash(fx *f)
{
	return sh(f,
		  "cd '%s' && find . \\( -type f -exec sh -c 'for x do printf \"%%s %%s "
		  "%%s\\n\" \"$(stat -c %%a:%%F \"$x\")\" \"$x\" \"$(sha256sum < \"$x\" | cut "
		  "-d\" \" -f1)\"; done' sh {} + \\) -o \\( ! -type f -exec sh -c 'for x do "
		  "printf \"%%s %%s %%s\\n\" \"$(stat -c %%a:%%F \"$x\")\" \"$x\" \"$(readlink "
		  "\"$x\")\"; done' sh {} + \\) | LC_ALL=C sort",
		  f->ws);
}

static cae_worker_fs_mode fs_mode(fx *f)
{
	return f->mode == 0   ? CAE_WORKER_FS_HOST
	       : f->mode == 1 ? CAE_WORKER_FS_ENV
			      : CAE_WORKER_FS_AUTO;
}

static json_t *run_n(fx *f, const char *text, size_t len, const cae_worker_options *o)
{
	cae_worker_options opts;
	if (o)
		opts = *o;
	else
		cae_worker_options_init(&opts);
	opts.fs = fs_mode(f);
	json_t *res = NULL;
	cae_error err = {0};
	int r = cae_worker_run_text(f->b, f->uuid, text, len, &opts, f->log, &res, &err);
	ck_assert_msg(r == 0, "run: %s", err.message);
	ck_assert_ptr_nonnull(res);
	return res;
}

static json_t *run(fx *f, const char *text, const cae_worker_options *o)
{
	return run_n(f, text, strlen(text), o);
}

/* Runs a JSON array of commands (stolen). */
static json_t *run_json(fx *f, json_t *cmds, const cae_worker_options *o)
{
	char *text = json_dumps(cmds, JSON_COMPACT);
	json_decref(cmds);
	json_t *res = run(f, text, o);
	free(text);
	return res;
}

static json_t *cmd(const char *type, const char *action, const char *target, const char *content)
{
	return json_pack("{s:s, s:s, s:s, s:s}", "type", type, "action", action, "target", target,
			 "content", content ? content : "");
}

static long long ri(json_t *res, const char *key)
{
	json_t *v = json_object_get(res, key);
	ck_assert_msg(json_is_integer(v), "%s missing", key);
	return json_integer_value(v);
}

static bool rb(json_t *res, const char *key)
{
	json_t *v = json_object_get(res, key);
	ck_assert_msg(json_is_boolean(v), "%s missing", key);
	return json_is_true(v);
}

/* The workspace without a repository: all of .git that commands may remove (its protected
 * hooks directory stays, read-only), which leaves git no repository there. */
static void no_repository(fx *f)
{
	free(sh(f, "find .git -mindepth 1 -maxdepth 1 ! -name hooks -exec rm -rf {} + && "
		   "! git rev-parse --git-dir 2>/dev/null"));
}

static json_t *result_at(json_t *res, size_t i)
{
	json_t *r = json_array_get(json_object_get(res, "results"), i);
	ck_assert_msg(r != NULL, "no result %zu", i);
	return r;
}

static const char *rs(json_t *obj, const char *key)
{
	const char *s = json_string_value(json_object_get(obj, key));
	ck_assert_msg(s != NULL, "%s missing", key);
	return s;
}

static void assert_contains(const char *hay, const char *needle)
{
	ck_assert_msg(hay && strstr(hay, needle), "[%s] does not contain [%s]",
		      hay ? hay : "(null)", needle);
}

/* The log lines written so far, as JSON objects (new array). */
static json_t *log_lines(fx *f)
{
	char *text = NULL;
	size_t len;
	ck_assert_int_eq(cae__read_file(AT_FDCWD, f->logpath, 64 << 20, &text, &len), 0);
	json_t *a = json_array();
	for (char *s = text; *s;) {
		char *nl = strchr(s, '\n');
		if (nl)
			*nl = '\0';
		json_t *j = json_loads(s, 0, NULL);
		ck_assert_msg(j != NULL, "log line is not JSON: %s", s);
		json_array_append_new(a, j);
		if (!nl)
			break;
		s = nl + 1;
	}
	free(text);
	return a;
}

/* The first log event named name (borrowed from lines), or NULL. */
static json_t *event(json_t *lines, const char *name)
{
	size_t i;
	json_t *l;
	json_array_foreach(lines, i, l)
	{
		const char *e = json_string_value(json_object_get(l, "event"));
		if (e && strcmp(e, name) == 0)
			return l;
	}
	return NULL;
}

/* ---------------------------------------------------------------------------------------- */
/* parsePatch() and a complete patch run */

START_TEST(json_patch_full)
{
	fx f;
	fx_init(&f, _i);
	json_t *c = json_array();
	json_array_append_new(
	    c, cmd("file_edit", "create", "pkg/agent/loop.py", "def foo():\n    return 1\n"));
	json_array_append_new(c, cmd("file_edit", "update", "README.md", "# Demo\n\nUpdated.\n"));
	json_array_append_new(c, cmd("file_edit", "append", "README.md", "More.\n"));
	json_array_append_new(c, cmd("shell_command", "run", "cat", "pkg/agent/loop.py"));
	json_array_append_new(c, cmd("git_operation", "add", "pkg/agent/loop.py README.md", ""));
	json_array_append_new(c, cmd("git_operation", "commit", "", "Add foo"));
	json_t *res = run_json(&f, c, NULL);
	ck_assert(rb(res, "success"));
	ck_assert_int_eq(ri(res, "executed_cmds"), 6);
	ck_assert_int_eq(ri(res, "failed_cmds"), 0);
	ck_assert_str_eq(rs(res, "format"), "json");
	ck_assert_str_eq(rs(res, "summary"), "commands: 6, succeeded: 6, failed: 0");
	ck_assert_int_eq(json_array_size(json_object_get(res, "results")), 6);
	json_t *r0 = result_at(res, 0);
	ck_assert_str_eq(rs(json_object_get(r0, "command"), "type"), "file_edit");
	ck_assert_str_eq(rs(json_object_get(r0, "command"), "action"), "create");
	ck_assert_str_eq(rs(json_object_get(r0, "command"), "target"), "pkg/agent/loop.py");
	ck_assert_str_eq(rs(r0, "output"),
			 "File pkg/agent/loop.py written successfully (24 bytes)");
	ck_assert_str_eq(rs(r0, "error"), "");
	ck_assert(json_is_integer(json_object_get(r0, "duration")));
	ck_assert_str_eq(rs(result_at(res, 3), "output"), "def foo():\n    return 1\n");
	assert_file(&f, "README.md", "# Demo\n\nUpdated.\nMore.\n");
	char *log = sh(&f, "git log -1 --format=%%s; git status --porcelain");
	ck_assert_str_eq(log, "Add foo\n");
	free(log);
	json_decref(res);
	fx_free(&f);
}
END_TEST

START_TEST(parse_json_bad)
{
	fx f;
	fx_init(&f, _i);
	const char *text =
	    "[{\"type\": \"file_edit\", \"action\": \"create\", \"target\": \"x.txt\",";
	cae_worker_options o;
	cae_worker_options_init(&o);
	o.fs = fs_mode(&f);
	json_t *res = NULL;
	cae_error err = {0};
	int r = cae_worker_run_text(f.b, f.uuid, text, strlen(text), &o, f.log, &res, &err);
	ck_assert_int_eq(r, -EINVAL);
	ck_assert_ptr_null(res);
	assert_contains(err.message, "patch parse error");
	assert_contains(err.message, "line 1");
	ck_assert(!exists(&f, "x.txt"));
	json_t *lines = log_lines(&f);
	json_t *e = event(lines, "worker.patch_execution_error");
	ck_assert_ptr_nonnull(e);
	ck_assert_str_eq(rs(e, "level"), "error");
	assert_contains(rs(e, "error"), "patch parse error");
	json_decref(lines);
	fx_free(&f);
}
END_TEST

/* A JSON command of an unknown type or action fails that command with its error;
 * in continue mode the others run, with stop_on_error the patch stops there, and a dry run
 * says it would fail. */
START_TEST(unknown_command_fails_alone)
{
	fx f;
	fx_init(&f, _i);
	const char *text =
	    "[{\"type\": \"file_edit\", \"action\": \"create\", \"target\": \"one.txt\", "
	    "\"content\": \"1\\n\"},"
	    " {\"type\": \"rm_rf\", \"action\": \"run\", \"target\": \"/\"},"
	    " {\"type\": \"file_edit\", \"action\": \"remove\", \"target\": \"one.txt\"},"
	    " {\"type\": \"file_edit\", \"action\": \"create\", \"target\": \"two.txt\", "
	    "\"content\": \"2\\n\"}]";
	cae_worker_options o;
	cae_worker_options_init(&o);
	o.fs = fs_mode(&f);
	json_t *res = NULL;
	cae_error err = {0};
	ck_assert_msg(cae_worker_run_text(f.b, f.uuid, text, strlen(text), &o, f.log, &res, &err) ==
			  0,
		      "%s", err.message);
	ck_assert(!json_is_true(json_object_get(res, "success")));
	ck_assert_int_eq(json_integer_value(json_object_get(res, "executed_cmds")), 2);
	ck_assert_int_eq(json_integer_value(json_object_get(res, "failed_cmds")), 2);
	ck_assert(exists(&f, "one.txt"));
	ck_assert(exists(&f, "two.txt"));
	_cleanup_free_ char *dump = json_dumps(res, 0);
	assert_contains(dump, "patch command at index 1: unknown type \\\"rm_rf\\\"");
	assert_contains(dump, "patch command at index 2: unknown action \\\"remove\\\"");
	_cleanup_free_ char *text_out = cae_worker_render(res);
	assert_contains(text_out, "\u2717 [2]");
	assert_contains(text_out, "\u2713 [4]");
	json_decref(res);
	res = NULL;
	/* stop_on_error: nothing after the unknown command runs */
	const char *t2 = "[{\"type\": \"shell_command\", \"action\": \"exec\", \"target\": "
			 "\"true\"}, {\"type\": \"file_edit\", \"action\": \"create\", "
			 "\"target\": \"three.txt\", \"content\": \"3\"}]";
	o.stop_on_error = true;
	ck_assert_int_eq(cae_worker_run_text(f.b, f.uuid, t2, strlen(t2), &o, f.log, &res, &err),
			 0);
	ck_assert(!json_is_true(json_object_get(res, "success")));
	ck_assert(!exists(&f, "three.txt"));
	json_decref(res);
	res = NULL;
	/* a dry run says it would fail, and changes nothing */
	o.stop_on_error = false;
	o.dry_run = true;
	ck_assert_int_eq(cae_worker_run_text(f.b, f.uuid, t2, strlen(t2), &o, f.log, &res, &err),
			 0);
	ck_assert(!json_is_true(json_object_get(res, "success")));
	assert_contains(json_string_value(json_object_get(res, "error")),
			"command 1: patch command at index 0: unknown action \"exec\"");
	ck_assert(!exists(&f, "three.txt"));
	json_decref(res);
	fx_free(&f);
}
END_TEST

START_TEST(markdown_patch)
{
	fx f;
	fx_init(&f, _i);
	const char *text = "## File edit\n\n"
			   "```python:src/util.py\n"
			   "def twice(x):\n    return 2 * x\n"
			   "```\n\n## Commands\n\n"
			   "```bash\n"
			   "python3 -c 'print(1+1)' 2>/dev/null || echo 2\n"
			   "cat src/util.py | wc -l\n"
			   "```\n\n"
			   "```git\n"
			   "git add src/util.py\n"
			   "git commit -m \"Add twice\"\n"
			   "```\n";
	json_t *res = run(&f, text, NULL);
	ck_assert(rb(res, "success"));
	ck_assert_str_eq(rs(res, "format"), "markdown");
	ck_assert_int_eq(ri(res, "executed_cmds"), 4);
	assert_file(&f, "src/util.py", "def twice(x):\n    return 2 * x\n");
	const char *out = rs(result_at(res, 1), "output");
	ck_assert_str_eq(out, "2\n2\n");
	char *s = sh(&f, "git log -1 --format=%%s");
	ck_assert_str_eq(s, "Add twice\n");
	free(s);
	json_decref(res);
	fx_free(&f);
}
END_TEST

START_TEST(markdown_bad)
{
	fx f;
	fx_init(&f, _i);
	/* unknown blocks: a warning each, skipped; the known ones still run */
	const char *text = "```ruby\nputs 1\n```\n```bash\necho ok\n```\n```\nplain\n```\n";
	json_t *res = run(&f, text, NULL);
	ck_assert(rb(res, "success"));
	ck_assert_int_eq(ri(res, "executed_cmds"), 1);
	ck_assert_int_eq(json_array_size(json_object_get(res, "warnings")), 2);
	ck_assert_str_eq(rs(result_at(res, 0), "output"), "ok\n");
	json_t *lines = log_lines(&f);
	ck_assert_ptr_nonnull(event(lines, "worker.patch_warning"));
	json_decref(lines);
	json_decref(res);
	/* neither JSON nor Markdown: an error, nothing runs */
	cae_worker_options o;
	cae_worker_options_init(&o);
	o.fs = fs_mode(&f);
	cae_error err = {0};
	res = NULL;
	const char *bad = "please create a file named x.txt";
	ck_assert_int_eq(cae_worker_run_text(f.b, f.uuid, bad, strlen(bad), &o, f.log, &res, &err),
			 -EINVAL);
	ck_assert_ptr_null(res);
	fx_free(&f);
}
END_TEST

START_TEST(empty_patch)
{
	fx f;
	fx_init(&f, _i);
	char *before = tree_hash(&f);
	const char *texts[] = {"", "  \n\t\n"};
	for (size_t i = 0; i < 2; i++) {
		json_t *res = run(&f, texts[i], NULL);
		ck_assert(rb(res, "success"));
		ck_assert_int_eq(ri(res, "executed_cmds"), 0);
		ck_assert_int_eq(ri(res, "failed_cmds"), 0);
		ck_assert_int_eq(json_array_size(json_object_get(res, "results")), 0);
		ck_assert_str_eq(rs(res, "format"), "empty");
		json_decref(res);
	}
	char *after = tree_hash(&f);
	ck_assert_str_eq(before, after);
	free(before);
	free(after);
	fx_free(&f);
}
END_TEST

/* ---------------------------------------------------------------------------------------- */
/* executeFileEdit() */

START_TEST(file_edit_actions)
{
	fx f;
	fx_init(&f, _i);
	free(sh(&f, "chmod 750 src/app.py && mkdir -p adir"));
	char abs[PATH_MAX];
	snprintf(abs, sizeof(abs), "%s/abs/inside.txt", f.ws);
	json_t *c = json_array();
	json_array_append_new(c, cmd("file_edit", "create", "a/b/c/deep.txt", "deep\n"));
	json_array_append_new(c, cmd("file_edit", "update", "src/app.py", "print('new')\n"));
	json_array_append_new(c, cmd("file_edit", "append", "README.md", "Appended.\n"));
	json_array_append_new(c, cmd("file_edit", "append", "notes/new.txt", "first\n"));
	json_array_append_new(c, cmd("file_edit", "delete", ".gitignore", ""));
	json_array_append_new(c, cmd("file_edit", "create", abs, "absolute\n"));
	json_array_append_new(c, cmd("file_edit", "create", "./dot//slashes.txt", "ok\n"));
	json_array_append_new(c,
			      cmd("file_edit", "create", "dir with space/ünï 'q' $x.txt", "u\n"));
	/* failures */
	json_array_append_new(c, cmd("file_edit", "delete", "missing.txt", ""));
	json_array_append_new(c, cmd("file_edit", "delete", "adir", ""));
	json_array_append_new(c, cmd("file_edit", "update", "adir", "x"));
	json_array_append_new(c, cmd("file_edit", "create", "README.md/x", "x"));
	/* NUL bytes survive (JSON \u0000) */
	json_array_append_new(c, json_pack("{s:s, s:s, s:s, s:s#}", "type", "file_edit", "action",
					   "create", "target", "bin.dat", "content", "a\0b\0", 4));
	json_t *res = run_json(&f, c, NULL);
	ck_assert(!rb(res, "success"));
	ck_assert_int_eq(ri(res, "executed_cmds"), 9);
	ck_assert_int_eq(ri(res, "failed_cmds"), 4);
	assert_file(&f, "a/b/c/deep.txt", "deep\n");
	assert_file(&f, "src/app.py", "print('new')\n");
	char *mode = sh(&f, "stat -c %%a src/app.py");
	ck_assert_str_eq(mode, "750\n"); /* an update keeps the mode */
	free(mode);
	mode = sh(&f, "stat -c %%a a/b/c/deep.txt");
	ck_assert_str_eq(mode, "644\n");
	free(mode);
	assert_file(&f, "README.md", "# Demo\n\nHello.\nAppended.\n");
	assert_file(&f, "notes/new.txt", "first\n");
	ck_assert(!exists(&f, ".gitignore"));
	assert_file(&f, "abs/inside.txt", "absolute\n");
	assert_file(&f, "dot/slashes.txt", "ok\n");
	char *u = sh(&f, "cat -- \"dir with space/ünï 'q' \\$x.txt\"");
	ck_assert_str_eq(u, "u\n");
	free(u);
	char *od = sh(&f, "od -An -c bin.dat | tr -s ' '");
	ck_assert_str_eq(od, " a \\0 b \\0\n");
	free(od);
	assert_contains(rs(result_at(res, 8), "error"), "missing.txt: no such file");
	assert_contains(rs(result_at(res, 9), "error"), "is a directory");
	assert_contains(rs(result_at(res, 10), "error"), "is a directory");
	assert_contains(rs(result_at(res, 11), "error"), "not a directory");
	ck_assert_str_eq(rs(result_at(res, 4), "output"), "File .gitignore deleted");
	ck_assert_str_eq(rs(result_at(res, 2), "output"), "Appended 10 bytes to README.md");
	/* no temporary file is left anywhere */
	char *tmps = sh(&f, "find . -name '.cae-tmp-*' | wc -l");
	ck_assert_str_eq(tmps, "0\n");
	free(tmps);
	json_decref(res);
	fx_free(&f);
}
END_TEST

/* Nothing outside the workspace is written, whatever the path. */
START_TEST(outside_paths_refused)
{
	fx f;
	fx_init(&f, _i);
	/* the workspace's parent: outside (in every mode, <parent>/tmp exists and is writable) */
	char parent[PATH_MAX], outside[PATH_MAX + 32], updot[PATH_MAX + 32];
	snprintf(parent, sizeof(parent), "%s", f.ws);
	*strrchr(parent, '/') = '\0';
	snprintf(outside, sizeof(outside), "%s/tmp/outside", parent);
	char grand[PATH_MAX];
	snprintf(grand, sizeof(grand), "%s", parent);
	*strrchr(grand, '/') = '\0';
	snprintf(updot, sizeof(updot), "%s/etc/x", grand);
	/* make the escapes possible if confinement failed: ../../etc exists and is writable
	 * on the local backend; in the container ../../etc is /etc */
	if (f.mode != 2)
		tu_sh("mkdir -p '%s/etc'", grand);
	free(sh(&f,
		"mkdir -p '%s' && echo secret > '%s/secret.txt' && ln -s / rootlink && "
		"ln -s '%s' outdir && ln -s '%s/secret.txt' outfile && "
		"ln -s '%s/nothing.txt' dangling && ln -s src/app.py inlink && ln -s src srclink",
		outside, outside, outside, outside, outside));
	char *outside_before =
	    sh(&f, "cd '%s' && ls -lA --time-style=+ . && cat secret.txt", outside);
	bool etc_x_before = exists(&f, "/etc/x");
	json_t *c = json_array();
	const char *bad[] = {"../../etc/x",	      "/etc/x",	 "rootlink/etc/x", "outdir/new.txt",
			     "outdir/secret.txt",     "outfile", "dangling",	   "src/../../x",
			     "/workspace-elsewhere/x"};
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++)
		json_array_append_new(c, cmd("file_edit", "create", bad[i], "pwned\n"));
	json_array_append_new(c, cmd("file_edit", "append", "outfile", "pwned\n"));
	json_array_append_new(c, cmd("file_edit", "delete", "outdir/secret.txt", ""));
	json_array_append_new(c, cmd("file_edit", "create", "outdir/sub/deeper.txt", "pwned\n"));
	/* allowed: links that stay inside are followed */
	json_array_append_new(c, cmd("file_edit", "update", "inlink", "print('via link')\n"));
	json_array_append_new(c, cmd("file_edit", "create", "srclink/linked.py", "x = 1\n"));
	json_t *res = run_json(&f, c, NULL);
	size_t nbad = ARRAY_SIZE(bad) + 3;
	ck_assert_int_eq(ri(res, "failed_cmds"), (long long)nbad);
	ck_assert_int_eq(ri(res, "executed_cmds"), 2);
	for (size_t i = 0; i < nbad; i++) {
		const char *e = rs(result_at(res, i), "error");
		ck_assert_msg(strstr(e, "security error") || strstr(e, "outside") ||
				  strstr(e, "'..'") || strstr(e, "symbolic link"),
			      "command %zu: %s", i, e);
	}
	/* nothing changed outside */
	char *outside_after =
	    sh(&f, "cd '%s' && ls -lA --time-style=+ . && cat secret.txt", outside);
	ck_assert_str_eq(outside_before, outside_after);
	ck_assert(exists(&f, "/etc/x") == etc_x_before);
	ck_assert(!exists(&f, updot));
	ck_assert(!exists(&f, "/x"));
	char *l = sh(&f, "readlink inlink; cat src/app.py; cat src/linked.py; readlink outfile");
	char want[PATH_MAX + 200];
	snprintf(want, sizeof(want), "src/app.py\nprint('via link')\nx = 1\n%s/secret.txt\n",
		 outside);
	ck_assert_str_eq(l, want);
	free(l);
	if (f.mode != 2) {
		struct stat st;
		ck_assert_int_ne(stat(updot, &st), 0);
	}
	/* the diff forms: a refused path refuses the whole patch, nothing is written */
	char *before = tree_hash(&f);
	json_decref(res);
	res = run(&f,
		  "*** Begin Patch\n*** Add File: fine.txt\n+fine\n*** Add File: ../../etc/x\n+x\n"
		  "*** End Patch\n",
		  NULL);
	ck_assert(!rb(res, "success"));
	assert_contains(rs(res, "error"), "'..'");
	ck_assert(!exists(&f, "fine.txt"));
	json_decref(res);
	res = run(&f,
		  "*** Begin Patch\n*** Add File: fine.txt\n+fine\n*** Add File: outdir/evil.txt\n"
		  "+x\n*** End Patch\n",
		  NULL);
	ck_assert(!rb(res, "success"));
	assert_contains(rs(res, "error"), "symbolic link");
	char *after = tree_hash(&f);
	ck_assert_str_eq(before, after);
	char *outside_end = sh(&f, "cd '%s' && ls -lA --time-style=+ . && cat secret.txt", outside);
	ck_assert_str_eq(outside_before, outside_end);
	free(outside_end);
	free(before);
	free(after);
	free(outside_before);
	free(outside_after);
	json_decref(res);
	fx_free(&f);
}
END_TEST

/* ---------------------------------------------------------------------------------------- */
/* executeShellCommand() */

START_TEST(shell_ok_and_error)
{
	fx f;
	fx_init(&f, _i);
	json_t *c = json_array();
	json_array_append_new(c,
			      cmd("shell_command", "run", "echo out; echo err >&2; echo out2", ""));
	json_array_append_new(c, cmd("shell_command", "run", "echo failing; exit 3", ""));
	json_array_append_new(c, cmd("shell_command", "run", "pwd", ""));
	json_array_append_new(c, cmd("shell_command", "run", "no-such-program-xyz", ""));
	json_t *res = run_json(&f, c, NULL);
	ck_assert_int_eq(ri(res, "executed_cmds"), 2);
	ck_assert_int_eq(ri(res, "failed_cmds"), 2);
	json_t *r0 = result_at(res, 0);
	ck_assert(rb(r0, "success"));
	ck_assert_str_eq(rs(r0, "output"), "out\nerr\nout2\n");
	ck_assert_int_eq(ri(r0, "exit_code"), 0);
	json_t *r1 = result_at(res, 1);
	ck_assert(!rb(r1, "success"));
	ck_assert_int_eq(ri(r1, "exit_code"), 3);
	ck_assert_str_eq(rs(r1, "error"), "command failed: exit status 3 (output: failing)");
	ck_assert_str_eq(rs(r1, "output"), "failing\n");
	char want[PATH_MAX];
	snprintf(want, sizeof(want), "%s\n", f.ws);
	ck_assert_str_eq(rs(result_at(res, 2), "output"), want);
	ck_assert_int_eq(ri(result_at(res, 3), "exit_code"), 127);
	json_decref(res);
	fx_free(&f);
}
END_TEST

START_TEST(shell_timeout)
{
	fx f;
	fx_init(&f, _i);
	cae_worker_options o;
	cae_worker_options_init(&o);
	o.command_timeout_ms = 1500;
	json_t *c = json_array();
	json_array_append_new(
	    c, cmd("shell_command", "run", "echo started; sleep 60; echo never", ""));
	json_array_append_new(c, cmd("shell_command", "run", "echo next", ""));
	json_t *res = run_json(&f, c, &o);
	json_t *r0 = result_at(res, 0);
	ck_assert(!rb(r0, "success"));
	ck_assert(rb(r0, "timed_out"));
	ck_assert_int_eq(ri(r0, "exit_code"), 124);
	assert_contains(rs(r0, "error"), "timed out (time limit: 2 seconds)");
	assert_contains(rs(r0, "output"), "started");
	ck_assert(strstr(rs(r0, "output"), "never") == NULL);
	/* continue mode: the next command ran */
	ck_assert(rb(result_at(res, 1), "success"));
	ck_assert_int_eq(ri(res, "failed_cmds"), 1);
	json_decref(res);
	fx_free(&f);
}
END_TEST

/* ---------------------------------------------------------------------------------------- */
/* executeGitOperation() */

START_TEST(git_operations)
{
	fx f;
	fx_init(&f, _i);
	free(sh(&f, "echo change >> README.md && echo new > new.txt"));
	json_t *c = json_array();
	json_array_append_new(c, cmd("git_operation", "add", "new.txt README.md", ""));
	json_array_append_new(c, cmd("git_operation", "reset", "README.md", ""));
	json_array_append_new(c, cmd("git_operation", "commit", "", "Add new.txt"));
	json_array_append_new(c, cmd("git_operation", "checkout", "README.md", ""));
	json_array_append_new(c, cmd("git_operation", "checkout", "-b feature", ""));
	json_array_append_new(c, cmd("git_operation", "commit", "", ""));
	json_array_append_new(c, cmd("git_operation", "checkout", "no-such-branch", ""));
	json_t *res = run_json(&f, c, NULL);
	ck_assert_int_eq(ri(res, "executed_cmds"), 5);
	ck_assert_int_eq(ri(res, "failed_cmds"), 2);
	for (size_t i = 0; i < 5; i++)
		ck_assert_msg(rb(result_at(res, i), "success"), "%zu: %s", i,
			      rs(result_at(res, i), "error"));
	/* commit with nothing staged fails; an unknown branch fails, saying why */
	assert_contains(rs(result_at(res, 5), "error"), "git command failed: exit status 1");
	assert_contains(rs(result_at(res, 5), "error"), "nothing");
	assert_contains(rs(result_at(res, 6), "error"), "no-such-branch");
	char *s = sh(&f, "git log -1 --format='%%s|%%an' && git show --stat --format= HEAD | "
			 "grep -c new.txt && git status --porcelain && git branch --show-current");
	/* the environment's identity (command_executor.git) */
	ck_assert_str_eq(s, "Add new.txt|Coding Agent\n1\nfeature\n");
	free(s);
	json_decref(res);
	fx_free(&f);
}
END_TEST

START_TEST(git_timeout)
{
	fx f;
	fx_init(&f, _i);
	/* git reading its pathspecs from a FIFO no one writes: a git step that never ends
	 * without running anything of the repository's (cae's git steps run no hook) */
	free(sh(&f, "mkfifo paths.fifo"));
	cae_worker_options o;
	cae_worker_options_init(&o);
	o.git_timeout_ms = 1500;
	json_t *c = json_array();
	json_array_append_new(c,
			      cmd("git_operation", "add", "--pathspec-from-file=paths.fifo", ""));
	json_t *res = run_json(&f, c, &o);
	json_t *r0 = result_at(res, 0);
	ck_assert(!rb(r0, "success"));
	ck_assert(rb(r0, "timed_out"));
	assert_contains(rs(r0, "error"), "git command timed out (time limit: 2 seconds)");
	json_decref(res);
	fx_free(&f);
}
END_TEST

/* ---------------------------------------------------------------------------------------- */
/* autoCommitChanges() */

/* The auto-commit's subject: the patch's first meaningful line, never a format marker; else
 * what the patch does. */
START_TEST(commit_subjects)
{
	static const struct {
		const char *patch, *want;
	} cases[] = {
	    /* Markdown: a heading, without its hashes; prose; never a fence or a marker */
	    {"## Fix the parser ##\n\n```c:a.c\nint a;\n```\n", "Fix the parser"},
	    {"\n\nMake twice() handle floats.\n```python:t.py\nx\n```\n",
	     "Make twice() handle floats."},
	    {"```python:src/t.py\n# not a heading\n```\n```bash\nmake test\n```\n",
	     "update 1 file: src/t.py"},
	    /* the apply_patch form and JSON: no prose, so what it does */
	    {"*** Begin Patch\n*** Update File: a.txt\n@@\n-a\n+b\n*** Add File: n.txt\n+n\n"
	     "*** End Patch\n",
	     "update 2 files: a.txt, n.txt"},
	    {"*** Begin Patch\n*** Add File: n.txt\n+n\n*** End Patch\n", "add 1 file: n.txt"},
	    {"*** Begin Patch\n*** Delete File: old.txt\n*** End Patch\n",
	     "delete 1 file: old.txt"},
	    {"[{\"type\":\"file_edit\",\"action\":\"update\",\"target\":\"a\",\"content\":\"x\"},"
	     "{\"type\":\"file_edit\",\"action\":\"update\",\"target\":\"b\",\"content\":\"x\"},"
	     "{\"type\":\"file_edit\",\"action\":\"update\",\"target\":\"c\",\"content\":\"x\"},"
	     "{\"type\":\"file_edit\",\"action\":\"update\",\"target\":\"d\",\"content\":\"x\"},"
	     "{\"type\":\"file_edit\",\"action\":\"append\",\"target\":\"a\",\"content\":\"y\"}]",
	     "update 4 files: a, b, c, ..."},
	    {"[{\"type\":\"shell_command\",\"action\":\"run\",\"target\":\"make test\"}]",
	     "run make test"},
	    /* a unified diff: a mail's subject, the message of `git show`, else the files */
	    {"From 1234 Mon Sep 17 00:00:00 2001\nFrom: A <a@b>\nDate: Mon, 1 Jan 2024\n"
	     "Subject: [PATCH v2 1/3] Speed up the lexer\n\nBody.\n---\n a.c | 2 +-\n\n"
	     "diff --git a/a.c b/a.c\n--- a/a.c\n+++ b/a.c\n@@ -1 +1 @@\n-a\n+b\n",
	     "Speed up the lexer"},
	    {"commit 0123456789abcdef\nAuthor: A <a@b>\nDate:   Mon Jan 1 2024\n\n"
	     "    Handle empty input\n\ndiff --git a/a.c b/a.c\n--- a/a.c\n+++ b/a.c\n"
	     "@@ -1 +1 @@\n-a\n+b\n",
	     "Handle empty input"},
	    {"diff --git a/src/x.c b/src/x.c\n--- a/src/x.c\n+++ b/src/x.c\n@@ -1 +1 @@\n-a\n+b\n",
	     "update 1 file: src/x.c"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		cae_patch *p = NULL;
		cae_error err = {0};
		ck_assert_msg(cae_patch_parse(cases[i].patch, strlen(cases[i].patch), &p, &err) ==
				  0,
			      "case %zu: %s", i, err.message);
		char *got = cae_worker_commit_subject(cases[i].patch, p);
		ck_assert_msg(got && strcmp(got, cases[i].want) == 0, "case %zu: got \"%s\"", i,
			      got ? got : "(null)");
		free(got);
		cae_patch_free(p);
	}
}
END_TEST

START_TEST(auto_commit_hash)
{
	fx f;
	fx_init(&f, _i);
	cae_worker_options o;
	cae_worker_options_init(&o);
	o.auto_commit = true;
	const char *text =
	    "# Implement the twice() helper and make sure that the description of this patch "
	    "is longer than eighty characters ✓\n\n```python:src/twice.py\ndef twice(x):\n"
	    "    return 2 * x\n```\n";
	json_t *res = run(&f, text, &o);
	ck_assert(rb(res, "success"));
	const char *hash = rs(res, "git_commit");
	ck_assert_int_eq(strlen(hash), 40);
	ck_assert_str_eq(rs(res, "auto_commit"), "committed");
	char *head = sh(&f, "git rev-parse HEAD; git log -1 --format=%%s; git status --porcelain");
	char want[512];
	snprintf(want, sizeof(want),
		 "%s\n[Worker Auto-Commit] Implement the twice() helper and make sure that the "
		 "description of this patch is...\n",
		 hash);
	ck_assert_str_eq(head, want);
	free(head);
	char *text_r = cae_worker_render(res);
	snprintf(want, sizeof(want), "git commit: %s\n", hash);
	assert_contains(text_r, want);
	free(text_r);
	json_decref(res);
	/* a configured prefix */
	o.commit_message_prefix = "[bot]";
	res = run(&f, "```text:b.txt\nb\n```\n", &o);
	head = sh(&f, "git log -1 --format=%%s");
	ck_assert_str_eq(head, "[bot] update 1 file: b.txt\n");
	free(head);
	json_decref(res);
	fx_free(&f);
}
END_TEST

START_TEST(auto_commit_nothing)
{
	fx f;
	fx_init(&f, _i);
	cae_worker_options o;
	cae_worker_options_init(&o);
	o.auto_commit = true;
	char *head0 = sh(&f, "git rev-parse HEAD");
	json_t *res = run(&f, "```bash\ntrue\n```\n", &o);
	ck_assert(rb(res, "success"));
	ck_assert_ptr_null(json_object_get(res, "git_commit"));
	ck_assert_str_eq(rs(res, "auto_commit"), "nothing_to_commit");
	char *head1 = sh(&f, "git rev-parse HEAD");
	ck_assert_str_eq(head0, head1);
	json_t *lines = log_lines(&f);
	json_t *e = event(lines, "worker.auto_commit_success");
	ck_assert_ptr_nonnull(e);
	ck_assert_str_eq(rs(e, "level"), "warn");
	ck_assert(json_is_true(json_object_get(e, "nothing_to_commit")));
	json_decref(lines);
	json_decref(res);
	/* nothing succeeded: no commit is attempted */
	res = run(&f, "```bash\nexit 1\n```\n", &o);
	ck_assert_ptr_null(json_object_get(res, "auto_commit"));
	json_decref(res);
	free(head0);
	free(head1);
	fx_free(&f);
}
END_TEST

START_TEST(auto_commit_error)
{
	fx f;
	fx_init(&f, _i);
	no_repository(&f);
	cae_worker_options o;
	cae_worker_options_init(&o);
	o.auto_commit = true;
	json_t *res = run(&f, "```text:a.txt\na\n```\n", &o);
	/* the commands succeeded; the auto-commit failed, and says why */
	ck_assert(rb(res, "success"));
	ck_assert_str_eq(rs(res, "auto_commit"), "failed");
	assert_contains(rs(res, "auto_commit_error"), "git add failed");
	assert_contains(rs(res, "auto_commit_error"), "not a git repository");
	char *t = cae_worker_render(res);
	assert_contains(t, "git commit failed: git add failed");
	free(t);
	json_t *lines = log_lines(&f);
	json_t *e = event(lines, "worker.auto_commit_failed");
	ck_assert_ptr_nonnull(e);
	ck_assert_str_eq(rs(e, "level"), "warn");
	assert_contains(rs(e, "error"), "not a git repository");
	json_decref(lines);
	json_decref(res);
	fx_free(&f);
}
END_TEST

/* ---------------------------------------------------------------------------------------- */
/* Error handling: continue (default) and stop_on_error */

START_TEST(continue_mode_and_stop_on_error)
{
	fx f;
	fx_init(&f, _i);
	for (int stop = 0; stop < 2; stop++) {
		cae_worker_options o;
		cae_worker_options_init(&o);
		o.stop_on_error = stop;
		char third[32];
		snprintf(third, sizeof(third), "third%d.txt", stop);
		json_t *c = json_array();
		json_array_append_new(c, cmd("file_edit", "create", "first.txt", "1\n"));
		json_array_append_new(c, cmd("shell_command", "run", "false", ""));
		json_array_append_new(c, cmd("file_edit", "create", third, "3\n"));
		json_t *res = run_json(&f, c, &o);
		ck_assert(!rb(res, "success"));
		ck_assert_int_eq(ri(res, "failed_cmds"), 1);
		if (!stop) {
			ck_assert_int_eq(ri(res, "executed_cmds"), 2);
			ck_assert_int_eq(ri(res, "skipped_cmds"), 0);
			ck_assert_int_eq(json_array_size(json_object_get(res, "results")), 3);
			ck_assert(exists(&f, third));
			ck_assert_str_eq(rs(res, "summary"),
					 "commands: 3, succeeded: 2, failed: 1");
		} else {
			ck_assert_int_eq(ri(res, "executed_cmds"), 1);
			ck_assert_int_eq(ri(res, "skipped_cmds"), 1);
			ck_assert_int_eq(json_array_size(json_object_get(res, "results")), 2);
			ck_assert(!exists(&f, third));
			ck_assert_str_eq(rs(res, "summary"),
					 "commands: 3, succeeded: 1, failed: 1, not run: 1");
		}
		json_decref(res);
	}
	fx_free(&f);
}
END_TEST

/* Continue mode runs a Markdown patch's diff blocks step by step: each hunked step is
 * computed when it runs, from the files as the commands before it left them, and a step that
 * does not apply fails alone. */
START_TEST(continue_mode_diffs)
{
	fx f;
	fx_init(&f, _i);
	free(sh(&f, "printf 'one\\ntwo\\n' > a.txt && printf 'keep\\n' > m.txt && chmod 750 m.txt "
		    "&& printf 'x\\n' > d.txt && printf 'y\\n' > e.txt && printf 'z\\n' > g.txt"));
	const char *text = "```bash\nprintf 'one\\nTWO\\n' > a.txt\n```\n"
			   "```\n*** Begin Patch\n"
			   "*** Update File: a.txt\n@@\n one\n-TWO\n+three\n"
			   "*** Update File: m.txt\n*** Move to: moved/m.txt\n@@\n-keep\n+kept\n"
			   "*** Update File: e.txt\n@@\n-nope\n+no\n"
			   "*** End Patch\n```\n"
			   "```diff\n--- a/d.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-x\n"
			   "--- a/g.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-wrong\n```\n";
	json_t *res = run(&f, text, NULL);
	ck_assert_str_eq(rs(res, "format"), "markdown");
	ck_assert(!rb(res, "success"));
	ck_assert_int_eq(json_array_size(json_object_get(res, "results")), 6);
	ck_assert_int_eq(ri(res, "executed_cmds"), 4);
	ck_assert_int_eq(ri(res, "failed_cmds"), 2);
	ck_assert_ptr_null(json_object_get(res, "error"));
	/* the hunk applies to what the shell command wrote */
	ck_assert_str_eq(rs(result_at(res, 1), "output"),
			 "Patched a.txt (1 hunk applied, 10 bytes)");
	assert_file(&f, "a.txt", "one\nthree\n");
	ck_assert_str_eq(rs(result_at(res, 2), "output"),
			 "Moved m.txt to moved/m.txt (1 hunk applied, 5 bytes)");
	ck_assert(!exists(&f, "m.txt"));
	assert_file(&f, "moved/m.txt", "kept\n");
	char *mode = sh(&f, "stat -c %%a moved/m.txt");
	ck_assert_str_eq(mode, "750\n"); /* a move keeps the mode */
	free(mode);
	assert_contains(rs(result_at(res, 3), "error"), "hunk 1 of e.txt did not apply");
	assert_file(&f, "e.txt", "y\n");
	ck_assert_str_eq(rs(result_at(res, 4), "output"), "File d.txt deleted");
	ck_assert(!exists(&f, "d.txt"));
	/* a deletion whose content no longer matches fails, and the file stays */
	assert_contains(rs(result_at(res, 5), "error"), "g.txt");
	ck_assert(!rb(result_at(res, 5), "success"));
	assert_file(&f, "g.txt", "z\n");
	json_decref(res);
	fx_free(&f);
}
END_TEST

/* ---------------------------------------------------------------------------------------- */
/* The diff forms */

START_TEST(apply_patch_format)
{
	fx f;
	fx_init(&f, _i);
	free(sh(&f,
		"printf 'a\\nb\\nc\\nd\\ne\\nf\\ng\\nh\\ni\\nj\\n' > letters.txt && "
		"printf 'old name\\n' > old.sh && chmod 755 old.sh && printf 'bye\\n' > gone.txt"));
	const char *text = "*** Begin Patch\n"
			   "*** Add File: docs/new.md\n"
			   "+# New\n"
			   "+text\n"
			   "*** Update File: letters.txt\n"
			   "@@\n"
			   " a\n"
			   "-b\n"
			   "+B\n"
			   " c\n"
			   "@@\n"
			   " h\n"
			   "-i\n"
			   "+I\n"
			   "+I2\n"
			   " j\n"
			   "*** Delete File: gone.txt\n"
			   "*** Update File: old.sh\n"
			   "*** Move to: bin/new.sh\n"
			   "@@\n"
			   "-old name\n"
			   "+new name\n"
			   "*** End Patch\n";
	json_t *res = run(&f, text, NULL);
	ck_assert_msg(rb(res, "success"), "%s", json_dumps(res, 0));
	ck_assert_str_eq(rs(res, "format"), "apply_patch");
	ck_assert_int_eq(ri(res, "executed_cmds"), 4);
	assert_file(&f, "docs/new.md", "# New\ntext\n");
	assert_file(&f, "letters.txt", "a\nB\nc\nd\ne\nf\ng\nh\nI\nI2\nj\n");
	ck_assert(!exists(&f, "gone.txt"));
	ck_assert(!exists(&f, "old.sh"));
	assert_file(&f, "bin/new.sh", "new name\n");
	char *m = sh(&f, "stat -c %%a bin/new.sh");
	ck_assert_str_eq(m, "755\n"); /* a move keeps the mode */
	free(m);
	assert_contains(rs(result_at(res, 1), "output"), "Patched letters.txt (2 hunks applied");
	json_decref(res);
	fx_free(&f);
}
END_TEST

START_TEST(unified_diff_format)
{
	fx f;
	fx_init(&f, _i);
	free(sh(&f, "printf 'one\\ntwo\\nthree\\nfour\\nfive\\nsix\\nseven\\neight\\nnine\\n' > "
		    "n.txt && printf 'keep\\n' > rename-me.txt && printf 'x\\ny\\n' > del.txt && "
		    "git add -A && git -c user.name=t -c user.email=t@e commit -qm base"));
	const char *text = "diff --git a/n.txt b/n.txt\n"
			   "--- a/n.txt\n"
			   "+++ b/n.txt\n"
			   "@@ -1,3 +1,3 @@\n"
			   " one\n"
			   "-two\n"
			   "+TWO\n"
			   " three\n"
			   "@@ -7,3 +7,4 @@\n"
			   " seven\n"
			   " eight\n"
			   "+eight and a half\n"
			   " nine\n"
			   "diff --git a/added.txt b/added.txt\n"
			   "new file mode 100644\n"
			   "--- /dev/null\n"
			   "+++ b/added.txt\n"
			   "@@ -0,0 +1,2 @@\n"
			   "+hello\n"
			   "+world\n"
			   "diff --git a/del.txt b/del.txt\n"
			   "deleted file mode 100644\n"
			   "--- a/del.txt\n"
			   "+++ /dev/null\n"
			   "@@ -1,2 +0,0 @@\n"
			   "-x\n"
			   "-y\n"
			   "diff --git a/rename-me.txt b/renamed.txt\n"
			   "similarity index 50%\n"
			   "rename from rename-me.txt\n"
			   "rename to renamed.txt\n"
			   "--- a/rename-me.txt\n"
			   "+++ b/renamed.txt\n"
			   "@@ -1 +1,2 @@\n"
			   " keep\n"
			   "+added\n";
	json_t *res = run(&f, text, NULL);
	ck_assert_msg(rb(res, "success"), "%s", json_dumps(res, 0));
	ck_assert_str_eq(rs(res, "format"), "unified");
	assert_file(&f, "n.txt",
		    "one\nTWO\nthree\nfour\nfive\nsix\nseven\neight\neight and a half\nnine\n");
	assert_file(&f, "added.txt", "hello\nworld\n");
	ck_assert(!exists(&f, "del.txt"));
	ck_assert(!exists(&f, "rename-me.txt"));
	assert_file(&f, "renamed.txt", "keep\nadded\n");
	/* git agrees: the same diff reversed applies cleanly to the result */
	json_decref(res);
	fx_free(&f);
}
END_TEST

START_TEST(diff_context_not_found)
{
	fx f;
	fx_init(&f, _i);
	char *before = tree_hash(&f);
	/* the first file's hunk is fine, the second's context is not in the file */
	const char *text = "*** Begin Patch\n"
			   "*** Update File: README.md\n"
			   "@@\n"
			   "-Hello.\n"
			   "+Bonjour.\n"
			   "*** Update File: src/app.py\n"
			   "@@\n"
			   " def main():\n"
			   "-    print(\"bye\")\n"
			   "+    print(\"hello\")\n"
			   "*** Add File: new.txt\n"
			   "+new\n"
			   "*** End Patch\n";
	json_t *res = run(&f, text, NULL);
	ck_assert(!rb(res, "success"));
	const char *e = rs(res, "error");
	assert_contains(e, "hunk 1 of src/app.py did not apply");
	ck_assert_int_eq(ri(res, "executed_cmds"), 0);
	ck_assert_int_eq(ri(res, "skipped_cmds"), 3);
	char *after = tree_hash(&f);
	ck_assert_str_eq(before, after);
	char *t = cae_worker_render(res);
	assert_contains(t, "error: hunk 1 of src/app.py did not apply");
	free(t);
	json_decref(res);
	/* the same as a unified diff */
	res = run(&f,
		  "--- a/README.md\n+++ b/README.md\n@@ -3 +3 @@\n-Hello.\n+Bonjour.\n"
		  "--- a/src/app.py\n+++ b/src/app.py\n@@ -1,2 +1,2 @@\n def main():\n"
		  "-    print(\"bye\")\n+    print(\"hello\")\n",
		  NULL);
	ck_assert(!rb(res, "success"));
	assert_contains(rs(res, "error"), "src/app.py");
	assert_contains(rs(res, "error"), "hunk 1");
	free(after);
	after = tree_hash(&f);
	ck_assert_str_eq(before, after);
	/* whitespace-tolerant second pass: trailing blanks in the patch still apply */
	json_decref(res);
	res = run(&f,
		  "*** Begin Patch\n*** Update File: README.md\n@@\n-Hello.   \n+Hi.\n"
		  "*** End Patch\n",
		  NULL);
	ck_assert_msg(rb(res, "success"), "%s", json_dumps(res, 0));
	assert_file(&f, "README.md", "# Demo\n\nHi.\n");
	json_decref(res);
	free(before);
	free(after);
	fx_free(&f);
}
END_TEST

START_TEST(diff_crlf)
{
	fx f;
	fx_init(&f, _i);
	free(sh(&f, "printf 'line1\\r\\nline2\\r\\nline3\\r\\n' > win.txt"));
	json_t *res = run(&f,
			  "*** Begin Patch\n*** Update File: win.txt\n@@\n line1\n-line2\n+LINE2\n"
			  "+inserted\n line3\n*** End Patch\n",
			  NULL);
	ck_assert_msg(rb(res, "success"), "%s", json_dumps(res, 0));
	char *od = sh(&f, "od -An -c win.txt | tr -d ' \\n'");
	ck_assert_str_eq(od, "line1\\r\\nLINE2\\r\\ninserted\\r\\nline3\\r\\n");
	free(od);
	json_decref(res);
	/* unified, with the patch itself in CRLF */
	res = run(&f,
		  "--- a/win.txt\r\n+++ b/win.txt\r\n@@ -1,2 +1,2 @@\r\n line1\r\n-LINE2\r\n"
		  "+line2\r\n",
		  NULL);
	ck_assert_msg(rb(res, "success"), "%s", json_dumps(res, 0));
	od = sh(&f, "od -An -c win.txt | tr -d ' \\n'");
	ck_assert_str_eq(od, "line1\\r\\nline2\\r\\ninserted\\r\\nline3\\r\\n");
	free(od);
	json_decref(res);
	fx_free(&f);
}
END_TEST

START_TEST(diff_no_final_newline)
{
	fx f;
	fx_init(&f, _i);
	free(sh(&f, "printf 'alpha\\nbeta\\ngamma' > nonl.txt"));
	json_t *res = run(&f,
			  "*** Begin Patch\n*** Update File: nonl.txt\n@@\n alpha\n-beta\n+BETA\n"
			  " gamma\n*** End Patch\n",
			  NULL);
	ck_assert_msg(rb(res, "success"), "%s", json_dumps(res, 0));
	assert_file(&f, "nonl.txt", "alpha\nBETA\ngamma");
	json_decref(res);
	/* a unified diff that adds the final newline */
	res = run(&f,
		  "--- a/nonl.txt\n+++ b/nonl.txt\n@@ -2,2 +2,2 @@\n BETA\n-gamma\n"
		  "\\ No newline at end of file\n+gamma\n",
		  NULL);
	ck_assert_msg(rb(res, "success"), "%s", json_dumps(res, 0));
	assert_file(&f, "nonl.txt", "alpha\nBETA\ngamma\n");
	json_decref(res);
	fx_free(&f);
}
END_TEST

/* ---------------------------------------------------------------------------------------- */
/* Size and count */

START_TEST(big_file_50mb)
{
	fx f;
	fx_init(&f, _i);
	size_t n = (size_t)50 << 20;
	char *content = malloc(n + 1);
	for (size_t i = 0; i < n; i++)
		content[i] = (i % 61 == 60) ? '\n' : (char)('a' + (i * 7) % 26);
	content[n] = '\0';
	/* the expected hash, computed on this host */
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/big.expected", f.tmp);
	ck_assert_int_eq(cae__write_file_atomic(AT_FDCWD, path, content, n, 0644, false), 0);
	tu_sh("cd %s && sha256sum < big.expected | cut -d' ' -f1 > big.sha && "
	      "printf 'tail\\n' >> big.expected && sha256sum < big.expected | cut -d' ' -f1 >> "
	      "big.sha",
	      f.tmp);
	char *shas = NULL;
	size_t sl;
	snprintf(path, sizeof(path), "%s/big.sha", f.tmp);
	ck_assert_int_eq(cae__read_file(AT_FDCWD, path, 4096, &shas, &sl), 0);
	json_t *c = json_array();
	json_array_append_new(c,
			      json_pack("{s:s, s:s, s:s, s:s%}", "type", "file_edit", "action",
					"create", "target", "data/big.txt", "content", content, n));
	json_array_append_new(c, cmd("file_edit", "append", "data/big.txt", "tail\n"));
	free(content);
	json_t *res = run_json(&f, c, NULL);
	ck_assert_msg(
	    rb(res, "success"), "%s",
	    rs(result_at(res, json_array_size(json_object_get(res, "results")) - 1), "error"));
	char *got = sh(&f, "sha256sum < data/big.txt | cut -d' ' -f1");
	char *second = strchr(shas, '\n') + 1;
	ck_assert_str_eq(got, second);
	/* the result does not carry 50 MB back: the command's content is cut */
	json_t *cj = json_object_get(result_at(res, 0), "command");
	ck_assert(json_is_true(json_object_get(cj, "content_truncated")));
	ck_assert_int_le(json_string_length(json_object_get(cj, "content")),
			 CAE_WORKER_MAX_COMMAND_JSON + 4);
	free(got);
	free(shas);
	json_decref(res);
	fx_free(&f);
}
END_TEST

START_TEST(thousand_commands)
{
	fx f;
	fx_init(&f, _i);
	json_t *c = json_array();
	for (int i = 0; i < 998; i++) {
		char name[32], body[32];
		snprintf(name, sizeof(name), "many/f%04d.txt", i);
		snprintf(body, sizeof(body), "%d\n", i);
		json_array_append_new(c, cmd("file_edit", "create", name, body));
	}
	json_array_append_new(c, cmd("shell_command", "run", "ls many | wc -l", ""));
	json_array_append_new(c, cmd("git_operation", "add", "many", ""));
	json_t *res = run_json(&f, c, NULL);
	ck_assert(rb(res, "success"));
	ck_assert_int_eq(ri(res, "executed_cmds"), 1000);
	ck_assert_int_eq(json_array_size(json_object_get(res, "results")), 1000);
	ck_assert_str_eq(rs(result_at(res, 998), "output"), "998\n");
	assert_file(&f, "many/f0997.txt", "997\n");
	char *staged = sh(&f, "git diff --cached --name-only | wc -l");
	ck_assert_str_eq(staged, "998\n");
	free(staged);
	char *t = cae_worker_render(res);
	assert_contains(t, "✓ [1000] git_operation add many (");
	free(t);
	json_decref(res);
	fx_free(&f);
}
END_TEST

/* ---------------------------------------------------------------------------------------- */
/* Rollback and dry run */

/* A workspace with every kind of entry: tracked, untracked, ignored, modes, links, empty
 * directories. */
static void populate(fx *f)
{
	free(sh(f, "echo 'ignored' > build.log && mkdir -p build/out empty/dir && "
		   "echo obj > build/out/a.o && echo untracked > notes.txt && "
		   "printf '#!/bin/sh\\necho hi\\n' > run.sh && chmod 751 run.sh && "
		   "chmod 600 notes.txt && ln -s src/app.py app-link && ln -s nowhere dangling && "
		   "chmod 700 empty"));
}

static void rollback_case(fx *f)
{
	char *before = tree_hash(f);
	cae_worker_options o;
	cae_worker_options_init(&o);
	o.rollback = true;
	json_t *c = json_array();
	json_array_append_new(c, cmd("file_edit", "update", "README.md", "changed\n"));
	json_array_append_new(c, cmd("file_edit", "delete", "src/app.py", ""));
	json_array_append_new(c, cmd("file_edit", "create", "new/dir/file.txt", "new\n"));
	json_array_append_new(c, cmd("file_edit", "append", "build.log", "more\n"));
	json_array_append_new(c, cmd("shell_command", "run",
				     "chmod 644 run.sh && rm -rf empty build && rm dangling && "
				     "mkdir -p x/y && ln -sf README.md app-link && "
				     "echo more >> notes.txt",
				     ""));
	json_array_append_new(c,
			      cmd("shell_command", "run",
				  "if git rev-parse --git-dir >/dev/null 2>&1; then git add -A && "
				  "git -c user.name=t -c "
				  "user.email=t@e commit -qm wip; fi",
				  ""));
	json_array_append_new(c, cmd("shell_command", "run", "echo failing; exit 7", ""));
	json_array_append_new(c, cmd("file_edit", "create", "after1.txt", "x"));
	json_array_append_new(c, cmd("file_edit", "create", "after2.txt", "x"));
	json_array_append_new(c, cmd("shell_command", "run", "touch after3.txt", ""));
	json_t *res = run_json(f, c, &o);
	ck_assert(!rb(res, "success"));
	ck_assert_int_eq(ri(res, "executed_cmds"), 6);
	ck_assert_int_eq(ri(res, "failed_cmds"), 1);
	ck_assert_int_eq(ri(res, "skipped_cmds"), 3);
	ck_assert_msg(rb(res, "rolled_back"), "%s", json_dumps(res, 0));
	ck_assert_int_eq(ri(result_at(res, 6), "exit_code"), 7);
	ck_assert_str_eq(rs(res, "summary"), "commands: 10, succeeded: 6, failed: 1, not run: 3; "
					     "the workspace was rolled back");
	char *after = tree_hash(f);
	ck_assert_str_eq(before, after);
	char *t = cae_worker_render(res);
	assert_contains(t, "rolled back: the workspace was restored");
	free(t);
	/* no snapshot is left behind */
	char *snaps = sh(f, "ls -d ../tmp/cae-snap.* 2>/dev/null | wc -l");
	ck_assert_str_eq(snaps, "0\n");
	free(snaps);
	json_t *lines = log_lines(f);
	json_t *e = event(lines, "worker.rollback");
	ck_assert_ptr_nonnull(e);
	ck_assert(json_is_true(json_object_get(e, "restored")));
	json_decref(lines);
	free(before);
	free(after);
	json_decref(res);
}

START_TEST(rollback_7_of_10)
{
	fx f;
	fx_init(&f, _i);
	populate(&f);
	rollback_case(&f);
	fx_free(&f);
}
END_TEST

START_TEST(rollback_without_git)
{
	fx f;
	fx_init(&f, _i);
	populate(&f);
	no_repository(&f);
	rollback_case(&f);
	/* and a successful patch is not rolled back */
	cae_worker_options o;
	cae_worker_options_init(&o);
	o.rollback = true;
	json_t *res = run(&f, "```text:kept.txt\nkept\n```\n", &o);
	ck_assert(rb(res, "success"));
	ck_assert_ptr_null(json_object_get(res, "rolled_back"));
	assert_file(&f, "kept.txt", "kept\n");
	json_decref(res);
	fx_free(&f);
}
END_TEST

/* A command that removes the workspace itself: a rollback from this host brings it back; in
 * the environment it cannot, and the result says so. */
/* Whether the project directory is gone (a command removed it): where it is a mount point
 * of its own (the protected paths' arrangement), it stays, and so can the rollback. */
static bool project_gone(fx *f)
{
	if (f->info.host_path)
		return access(f->info.host_path, F_OK) != 0;
	char script[PATH_MAX + 16];
	snprintf(script, sizeof(script), "test -d '%s'", f->ws);
	const char *argv[] = {"sh", "-c", script, NULL};
	cae_exec_request req = {.argv = argv, .timeout_ms = 120000, .cancel_fd = -1};
	cae_run_result r;
	cae_error err = {0};
	if (cae_backend_exec(f->b, f->uuid, &req, &r, &err) < 0)
		return true;
	bool gone = r.exit_code != 0;
	cae_run_result_clear(&r);
	return gone;
}

START_TEST(rollback_after_workspace_removed)
{
	fx f;
	fx_init(&f, _i);
	populate(&f);
	char *before = tree_hash(&f);
	cae_worker_options o;
	cae_worker_options_init(&o);
	o.rollback = true;
	json_t *res = run(&f, "```bash\ncd .. && rm -rf project\n```\n```bash\nexit 1\n```\n", &o);
	ck_assert(!rb(res, "success"));
	if (f.mode != 0 && project_gone(&f)) {
		/* neither backend runs a command in an environment whose project directory is
		 * gone: the in-environment rollback cannot run, and says why */
		ck_assert(!rb(res, "rolled_back"));
		assert_contains(rs(res, "rollback_error"), "rollback failed: ");
		if (f.mode == 1)
			assert_contains(rs(res, "rollback_error"), "no longer exists");
		free(before);
		json_decref(res);
		fx_free(&f);
		return;
	}
	ck_assert_msg(rb(res, "rolled_back"), "%s",
		      json_string_value(json_object_get(res, "rollback_error")));
	char *after = tree_hash(&f);
	ck_assert_str_eq(before, after);
	free(before);
	free(after);
	json_decref(res);
	fx_free(&f);
}
END_TEST

START_TEST(dry_run_changes_nothing)
{
	fx f;
	fx_init(&f, _i);
	populate(&f);
	char *before = tree_hash(&f);
	cae_worker_options o;
	cae_worker_options_init(&o);
	o.dry_run = true;
	o.auto_commit = true;
	o.rollback = true;
	json_t *res = run(&f,
			  "```python:src/app.py\nprint(1)\n```\n```bash\nrm -f README.md\n```\n"
			  "```git\ngit add -A\ngit commit -m x\n```\n",
			  &o);
	ck_assert(rb(res, "success"));
	ck_assert(rb(res, "dry_run"));
	ck_assert_int_eq(json_array_size(json_object_get(res, "results")), 0);
	const char *plan = rs(res, "plan");
	assert_contains(plan, "[1] file_edit update src/app.py (9 bytes)");
	assert_contains(plan, "[2] shell_command run rm -f README.md");
	assert_contains(rs(res, "summary"), "dry run: 4 commands planned, nothing changed");
	char *t = cae_worker_render(res);
	assert_contains(t, "[2] shell_command run rm -f README.md");
	free(t);
	json_decref(res);
	/* a diff that would not apply: the dry run says so, and still changes nothing */
	res = run(&f,
		  "*** Begin Patch\n*** Update File: README.md\n@@\n-Nope.\n+Yes.\n*** End Patch\n",
		  &o);
	ck_assert(!rb(res, "success"));
	assert_contains(rs(res, "error"), "hunk 1 of README.md did not apply");
	json_decref(res);
	res = run(
	    &f, "*** Begin Patch\n*** Update File: README.md\n@@\n-Hello.\n+Yes.\n*** End Patch\n",
	    &o);
	ck_assert(rb(res, "success"));
	json_decref(res);
	char *after = tree_hash(&f);
	ck_assert_str_eq(before, after);
	free(before);
	free(after);
	fx_free(&f);
}
END_TEST

/* ---------------------------------------------------------------------------------------- */
/* Log events */

START_TEST(log_events)
{
	fx f;
	fx_init(&f, _i);
	cae_worker_options o;
	cae_worker_options_init(&o);
	o.auto_commit = true;
	o.session_key = "session-42";
	json_t *c = json_array();
	json_array_append_new(c, cmd("file_edit", "create", "ok.txt", "ok\n"));
	json_array_append_new(c, cmd("shell_command", "run", "exit 5", ""));
	json_t *res = run_json(&f, c, &o);
	json_t *lines = log_lines(&f);
	json_t *e = event(lines, "worker.patch_execution_start");
	ck_assert_ptr_nonnull(e);
	ck_assert_str_eq(rs(e, "level"), "info");
	assert_contains(rs(e, "patch"), "\"target\":\"ok.txt\"");
	ck_assert_str_eq(rs(e, "session_key"), "session-42");
	e = event(lines, "worker.command_executed");
	ck_assert_ptr_nonnull(e);
	ck_assert_str_eq(rs(e, "level"), "info");
	ck_assert_int_eq(ri(e, "command_index"), 0);
	ck_assert_str_eq(rs(e, "type"), "file_edit");
	ck_assert_str_eq(rs(e, "action"), "create");
	ck_assert_str_eq(rs(e, "target"), "ok.txt");
	e = event(lines, "worker.command_failed");
	ck_assert_ptr_nonnull(e);
	ck_assert_str_eq(rs(e, "level"), "error");
	ck_assert_int_eq(ri(e, "command_index"), 1);
	ck_assert_str_eq(rs(e, "type"), "shell_command");
	ck_assert_str_eq(rs(e, "action"), "run");
	ck_assert_str_eq(rs(e, "target"), "exit 5");
	ck_assert_str_eq(rs(e, "error"), "command failed: exit status 5");
	e = event(lines, "worker.auto_commit_success");
	ck_assert_ptr_nonnull(e);
	ck_assert_str_eq(rs(e, "level"), "info");
	ck_assert_str_eq(rs(e, "commit"), rs(res, "git_commit"));
	e = event(lines, "worker.patch_execution_complete");
	ck_assert_ptr_nonnull(e);
	ck_assert_str_eq(rs(e, "level"), "error");
	ck_assert(!json_is_true(json_object_get(e, "success")));
	ck_assert_int_eq(ri(e, "executed_cmds"), 1);
	ck_assert_int_eq(ri(e, "failed_cmds"), 1);
	ck_assert_str_eq(rs(e, "summary"), "commands: 2, succeeded: 1, failed: 1");
	json_decref(lines);
	json_decref(res);
	/* auto_commit_failed: no repository */
	no_repository(&f);
	res = run(&f, "```text:x.txt\nx\n```\n", &o);
	lines = log_lines(&f);
	e = event(lines, "worker.auto_commit_failed");
	ck_assert_ptr_nonnull(e);
	ck_assert(strlen(rs(e, "error")) > 0);
	json_decref(lines);
	json_decref(res);
	fx_free(&f);
}
END_TEST

START_TEST(cancelled)
{
	fx f;
	fx_init(&f, _i);
	int p[2];
	ck_assert_int_eq(pipe(p), 0);
	ck_assert_int_eq(write(p[1], "x", 1), 1);
	cae_worker_options o;
	cae_worker_options_init(&o);
	o.cancel_fd = p[0];
	json_t *res = run(&f, "```text:c.txt\nc\n```\n", &o);
	ck_assert(!rb(res, "success"));
	ck_assert_int_eq(ri(res, "skipped_cmds"), 1);
	assert_contains(rs(res, "error"), "cancelled");
	ck_assert(!exists(&f, "c.txt"));
	json_decref(res);
	close(p[0]);
	close(p[1]);
	fx_free(&f);
}
END_TEST

#ifndef CAE_WORKER_DOCKER
/* ---------------------------------------------------------------------------------------- */
/* Local only: rendering, paths, config, the session's tool, the CLI */

START_TEST(render_format)
{
	json_t *res = json_pack(
	    "{s:b, s:i, s:i, s:[{s:{s:s, s:s, s:s}, s:b, s:s, s:s, s:i}, "
	    "{s:{s:s, s:s, s:s}, s:b, s:s, s:s, s:i}, {s:{s:s, s:s, s:s}, s:b, s:s, s:s, s:i}], "
	    "s:s, s:s}",
	    "success", 0, "executed_cmds", 2, "failed_cmds", 1, "results", "command", "type",
	    "file_edit", "action", "update", "target", "pkg/agent/loop.go", "success", 1, "output",
	    "", "error", "", "duration", 3, "command", "type", "shell_command", "action", "run",
	    "target", "go test ./...\ngo vet ./...", "success", 0, "output", "", "error",
	    "command failed: exit status 1\nsecond line", "duration", 1520, "command", "type",
	    "git_operation", "action", "add", "target", "pkg", "success", 1, "output", "", "error",
	    "", "duration", 9, "summary", "commands: 3, succeeded: 2, failed: 1", "git_commit",
	    "0123456789abcdef0123456789abcdef01234567");
	char *t = cae_worker_render(res);
	ck_assert_str_eq(t, "commands: 3, succeeded: 2, failed: 1\n"
			    "\n"
			    "✓ [1] file_edit update pkg/agent/loop.go (3ms)\n"
			    "✗ [2] shell_command run go test ./... … (1520ms)\n"
			    "    error: command failed: exit status 1\n"
			    "    second line\n"
			    "✓ [3] git_operation add pkg (9ms)\n"
			    "\n"
			    "git commit: 0123456789abcdef0123456789abcdef01234567\n");
	free(t);
	json_decref(res);
}
END_TEST

START_TEST(path_rel)
{
	struct {
		const char *in, *out;
	} ok[] = {
	    {"a.txt", "a.txt"},
	    {"./a//b/./c.txt", "a/b/c.txt"},
	    {"/workspace/project/src/x.py", "src/x.py"},
	    {"/workspace/project//./src/", "src"},
	};
	for (size_t i = 0; i < ARRAY_SIZE(ok); i++) {
		char *rel = NULL;
		cae_error err = {0};
		ck_assert_msg(cae__wk_path_rel("/workspace/project", ok[i].in, &rel, &err) == 0,
			      "%s: %s", ok[i].in, err.message);
		ck_assert_str_eq(rel, ok[i].out);
		free(rel);
	}
	const char *bad[] = {"",
			     "../x",
			     "a/../../x",
			     "a/../b",
			     "/etc/x",
			     "/workspace/projectX/a",
			     "/workspace",
			     "/workspace/project",
			     "/workspace/project/..",
			     ".",
			     "./"};
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		char *rel = NULL;
		cae_error err = {0};
		ck_assert_msg(cae__wk_path_rel("/workspace/project", bad[i], &rel, &err) == -EACCES,
			      "%s accepted", bad[i]);
		ck_assert_ptr_null(rel);
		ck_assert(err.message[0]);
	}
}
END_TEST

/* Writes data to rel through fs; returns its result, err's message in msg. */
static int fs_put(wk_fs *fs, const char *rel, const char *data, char *msg, size_t cap)
{
	cae_error err = {0};
	int r = fs->ops->write(fs, rel, data, strlen(data), WK_MODE_KEEP, &err);
	snprintf(msg, cap, "%s", err.message);
	return r;
}

static char *slurp(const char *path)
{
	char *data = NULL;
	ck_assert_int_eq(cae__read_file(AT_FDCWD, path, 1000, &data, NULL), 0);
	return data;
}

/* The host file system resolves through base/chase.h: links inside are followed up to the one
 * limit (CAE_CHASE_SYMLINK_MAX), never out; directories are made only on the patch's path. */
START_TEST(host_fs_links)
{
	char *top = tu_mkdtemp();
	char *ws = cae__path_join(top, "ws");
	tu_sh("mkdir -p '%s/sub' '%s/outside' && echo secret > '%s/outside/secret.txt' && "
	      "echo old > '%s/f.txt'",
	      ws, top, top, ws);
	/* l0 -> l1 -> ... -> l40 -> f.txt: from l1 the limit exactly, from l0 one more */
	for (int i = 0; i < CAE_CHASE_SYMLINK_MAX; i++)
		tu_sh("cd '%s' && ln -s l%d l%d", ws, i + 1, i);
	tu_sh("cd '%s' && ln -s f.txt l%d && ln -s .. sub/up && ln -s ../outside out && "
	      "ln -s nothing/missing.txt dangling",
	      ws, CAE_CHASE_SYMLINK_MAX);
	wk_fs *fs = NULL;
	cae_error err = {0};
	ck_assert_int_eq(cae__wk_fs_host_new(ws, &fs, &err), 0);
	char msg[sizeof(err.message)];
	ck_assert_msg(fs_put(fs, "l1", "new\n", msg, sizeof(msg)) == 0, "%s", msg);
	char *f = cae__path_join(ws, "f.txt");
	char *data = slurp(f);
	ck_assert_str_eq(data, "new\n");
	free(data);
	ck_assert_int_eq(fs_put(fs, "l0", "pwned\n", msg, sizeof(msg)), -EACCES);
	ck_assert_ptr_nonnull(strstr(msg, "security error"));
	/* a link to ".." inside: the file lands in the workspace itself */
	ck_assert_msg(fs_put(fs, "sub/up/via_up.txt", "up\n", msg, sizeof(msg)) == 0, "%s", msg);
	char *via = cae__path_join(ws, "via_up.txt");
	ck_assert_int_eq(access(via, F_OK), 0);
	/* out, with or without new directories: refused, nothing made outside */
	ck_assert_int_eq(fs_put(fs, "out/secret.txt", "pwned\n", msg, sizeof(msg)), -EACCES);
	ck_assert_int_eq(fs_put(fs, "out/made/x.txt", "pwned\n", msg, sizeof(msg)), -EACCES);
	char *made = cae__path_join(top, "outside/made");
	ck_assert_int_ne(access(made, F_OK), 0);
	/* a dangling link: not written through, and its directory not made */
	ck_assert_int_eq(fs_put(fs, "dangling", "x\n", msg, sizeof(msg)), -EACCES);
	ck_assert_ptr_nonnull(strstr(msg, "symbolic link"));
	char *nothing = cae__path_join(ws, "nothing");
	ck_assert_int_ne(access(nothing, F_OK), 0);
	/* new directories on the patch's own path */
	ck_assert_msg(fs_put(fs, "n1/n2/new.txt", "n\n", msg, sizeof(msg)) == 0, "%s", msg);
	/* a removal takes the link, not its target */
	ck_assert_int_eq(fs->ops->remove(fs, "l1", &err), 0);
	data = slurp(f);
	ck_assert_str_eq(data, "new\n");
	free(data);
	/* directories made in a transaction go again with it */
	ck_assert_int_eq(fs->ops->txn_begin(fs, &err), 0);
	ck_assert_int_eq(fs->ops->txn_write(fs, "t1/t2/a.txt", "a", 1, WK_MODE_KEEP, &err), 0);
	fs->ops->txn_abort(fs);
	char *t1 = cae__path_join(ws, "t1");
	ck_assert_int_ne(access(t1, F_OK), 0);
	cae__wk_fs_free(fs);
	char *secret = cae__path_join(top, "outside/secret.txt");
	data = slurp(secret);
	ck_assert_str_eq(data, "secret\n");
	free(data);
	cae__rm_rf(top);
	free(t1);
	free(secret);
	free(nothing);
	free(made);
	free(via);
	free(f);
	free(ws);
	free(top);
}
END_TEST

START_TEST(options_from_config)
{
	cae_worker_options o;
	cae_config *cfg = cae_config_defaults(NULL);
	cae_worker_options_from_config(&o, cfg);
	ck_assert(!o.auto_commit && !o.stop_on_error && !o.dry_run && !o.rollback);
	ck_assert_int_eq(o.command_timeout_ms, 300000); /* 5 minutes */
	ck_assert_int_eq(o.git_timeout_ms, 30000);
	ck_assert_str_eq(o.commit_message_prefix, "[Worker Auto-Commit]");
	ck_assert_int_eq(o.cancel_fd, -1);
	cae_config_free(cfg);
	char *const envp[] = {(char *)"PICOCLAW_WORKER_AUTO_COMMIT=true",
			      (char *)"PICOCLAW_WORKER_COMMIT_PREFIX=[ci]",
			      (char *)"PICOCLAW_WORKER_COMMAND_TIMEOUT=7",
			      (char *)"PICOCLAW_WORKER_GIT_TIMEOUT=3",
			      (char *)"PICOCLAW_WORKER_STOP_ON_ERROR=yes",
			      (char *)"PICOCLAW_WORKER_DRY_RUN=1",
			      (char *)"PICOCLAW_WORKER_ROLLBACK=on",
			      NULL};
	cae_error err = {0};
	cfg = NULL;
	ck_assert_msg(cae_config_load_string(&cfg, "", 0, NULL, envp, &err) == 0, "%s",
		      err.message);
	cae_worker_options_from_config(&o, cfg);
	ck_assert(o.auto_commit && o.stop_on_error && o.dry_run && o.rollback);
	ck_assert_int_eq(o.command_timeout_ms, 7000);
	ck_assert_int_eq(o.git_timeout_ms, 3000);
	ck_assert_str_eq(o.commit_message_prefix, "[ci]");
	cae_config_free(cfg);
	/* config.yaml's worker.* keys */
	const char *yaml = "worker:\n  auto_commit: true\n  commit_message_prefix: '[yaml]'\n"
			   "  command_timeout: 11\n  git_timeout: 12\n  stop_on_error: true\n";
	char *const none[] = {NULL};
	ck_assert_msg(cae_config_load_string(&cfg, yaml, strlen(yaml), "config.yaml", none, &err) ==
			  0,
		      "%s", err.message);
	cae_worker_options_from_config(&o, cfg);
	ck_assert(o.auto_commit && o.stop_on_error && !o.dry_run && !o.rollback);
	ck_assert_int_eq(o.command_timeout_ms, 11000);
	ck_assert_int_eq(o.git_timeout_ms, 12000);
	ck_assert_str_eq(o.commit_message_prefix, "[yaml]");
	cae_config_free(cfg);
}
END_TEST

static cae_session *open_session(const char *tmp, const char *ws, cae_config **cfg_out)
{
	cae_config *cfg = cae_config_defaults(NULL);
	char state[PATH_MAX];
	snprintf(state, sizeof(state), "%s/state", tmp);
	cfg_set(cfg, "command_executor.state_dir", state);
	cfg_set(cfg, "command_executor.backend", "local");
	if (cfg_out)
		*cfg_out = cfg;
	cae_session *s = NULL;
	cae_error err = {0};
	ck_assert_msg(cae_session_new(cfg, NULL, &s, &err) == 0, "%s", err.message);
	if (ws)
		ck_assert_msg(cae_session_use_workspace(s, ws, &err) == 0, "%s", err.message);
	return s;
}

static cae_tool_result call(cae_session *s, json_t *args)
{
	cae_tool_result res;
	cae_error err = {0};
	ck_assert_msg(cae_session_call_tool(s, "apply_patch", args, NULL, &res, &err) == 0, "%s",
		      err.message);
	json_decref(args);
	return res;
}

START_TEST(session_tool)
{
	char *tmp = tu_mkdtemp();
	char ws[PATH_MAX];
	snprintf(ws, sizeof(ws), "%s/ws", tmp);
	tu_sh("mkdir -p %s && cd %s && git init -q && echo hi > a.txt", ws, ws);
	cae_session *s = open_session(tmp, NULL, NULL);
	/* no environment yet */
	cae_tool_result res = call(s, json_pack("{s:s}", "patch", "```bash\ntrue\n```\n"));
	ck_assert(res.is_error);
	assert_contains(res.text, "no environment is ready");
	cae_tool_result_clear(&res);
	cae_error err = {0};
	ck_assert_msg(cae_session_use_workspace(s, ws, &err) == 0, "%s", err.message);
	/* listed, with its arguments */
	json_t *tools = cae_session_tool_list(s, true);
	json_t *def = NULL;
	size_t i;
	json_t *t;
	json_array_foreach(tools, i, t)
	{
		if (strcmp(json_string_value(json_object_get(t, "name")), "apply_patch") == 0)
			def = t;
	}
	ck_assert_ptr_nonnull(def);
	json_t *props = json_object_get(json_object_get(def, "inputSchema"), "properties");
	const char *keys[] = {"patch", "dry_run", "stop_on_error", "rollback", "auto_commit"};
	for (i = 0; i < ARRAY_SIZE(keys); i++)
		ck_assert_msg(json_object_get(props, keys[i]) != NULL, "%s", keys[i]);
	json_decref(tools);
	/* text patch: the ✓/✗ rendering as text, the result as structured content */
	res = call(s, json_pack("{s:s}", "patch", "```text:b.txt\nb\n```\n```bash\nfalse\n```\n"));
	ck_assert(!res.is_error);
	assert_contains(res.text, "commands: 2, succeeded: 1, failed: 1\n\n✓ [1] file_edit update "
				  "b.txt (");
	assert_contains(res.text, "✗ [2] shell_command run false (");
	assert_contains(res.text, "    error: command failed: exit status 1");
	ck_assert(!json_is_true(json_object_get(res.structured, "success")));
	cae_tool_result_clear(&res);
	/* an array of commands; flags */
	res = call(s, json_pack("{s:[{s:s, s:s, s:s, s:s}], s:b}", "patch", "type", "file_edit",
				"action", "create", "target", "c.txt", "content", "c\n",
				"auto_commit", 1));
	ck_assert(!res.is_error);
	ck_assert(json_is_true(json_object_get(res.structured, "success")));
	ck_assert(json_is_string(json_object_get(res.structured, "git_commit")));
	cae_tool_result_clear(&res);
	/* bad arguments */
	res = call(s, json_pack("{s:i}", "patch", 3));
	ck_assert(res.is_error);
	assert_contains(res.text, "INVALID_ARGUMENT");
	cae_tool_result_clear(&res);
	res = call(s, json_pack("{s:s, s:s}", "patch", "", "dry_run", "yes"));
	ck_assert(res.is_error);
	assert_contains(res.text, "dry_run must be a boolean");
	cae_tool_result_clear(&res);
	res = call(s, json_pack("{s:s}", "patch", "[{\"type\": 1}"));
	ck_assert(res.is_error);
	assert_contains(res.text, "INVALID_ARGUMENT: patch parse error");
	cae_tool_result_clear(&res);
	/* an unknown type is that command's failure, not the patch's */
	res = call(s, json_pack("{s:[{s:s}]}", "patch", "type", "bogus"));
	ck_assert(!json_is_true(json_object_get(res.structured, "success")));
	assert_contains(res.text, "unknown type \"bogus\"");
	cae_tool_result_clear(&res);
	/* a hunk that does not apply: not applied at all -> isError, nothing changed */
	res = call(s, json_pack("{s:s}", "patch",
				"*** Begin Patch\n*** Update File: a.txt\n@@\n-nope\n+x\n"
				"*** End Patch\n"));
	ck_assert(res.is_error);
	assert_contains(res.text, "error: hunk 1 of a.txt did not apply");
	cae_tool_result_clear(&res);
	/* the command policy applies to the agent's shell commands */
	res = call(s, json_pack("{s:s}", "patch", "```bash\nsudo ls\n```\n"));
	ck_assert(!res.is_error);
	json_t *r0 = json_array_get(json_object_get(res.structured, "results"), 0);
	ck_assert_int_eq(json_integer_value(json_object_get(r0, "exit_code")), 126);
	assert_contains(json_string_value(json_object_get(r0, "error")), "policy");
	cae_tool_result_clear(&res);
	cae_session_free(s);
	/* worker disabled: no such tool */
	cae_config *cfg = NULL;
	s = open_session(tmp, ws, &cfg);
	cfg_set(cfg, "worker.enabled", "false");
	cae_tool_result r2;
	json_t *args = json_pack("{s:s}", "patch", "");
	ck_assert_int_eq(cae_session_call_tool(s, "apply_patch", args, NULL, &r2, &err), -ENOENT);
	json_decref(args);
	cae_session_free(s);
	cae__rm_rf(tmp);
	free(tmp);
}
END_TEST

typedef struct cli_out {
	int status;
	char *out, *err;
} cli_out;

static cli_out cli(const char *stdin_text, const char *first, ...)
{
	const char *argv[32];
	size_t n = 0;
	argv[n++] = cae_exe;
	va_list ap;
	va_start(ap, first);
	for (const char *a = first; a && n < 31; a = va_arg(ap, const char *))
		argv[n++] = a;
	va_end(ap);
	argv[n] = NULL;
	setenv("EXECUTOR_BACKEND", "local", 1);
	cae_run_spec spec = {.argv = argv,
			     .timeout_ms = 120000,
			     .max_stdout = 16 << 20,
			     .stdin_data = stdin_text,
			     .stdin_len = stdin_text ? strlen(stdin_text) : 0,
			     .has_stdin = stdin_text != NULL,
			     .cancel_fd = -1};
	cae_run_result r;
	cae_error err = {0};
	ck_assert_msg(cae_runner_run(&spec, &r, &err) == 0, "%s", err.message);
	cli_out o = {r.exit_code, r.out, r.err};
	return o;
}

START_TEST(cli_patch)
{
	char *tmp = tu_mkdtemp();
	char ws[PATH_MAX], state[PATH_MAX], pf[PATH_MAX];
	ck_assert_int_lt(strlen(tmp), 1000);
	snprintf(ws, sizeof(ws), "%s/ws", tmp);
	snprintf(state, sizeof(state), "%s/state", tmp);
	snprintf(pf, sizeof(pf), "%s/p.md", tmp);
	tu_sh("mkdir -p %s && cd %s && git init -q && echo hi > a.txt && "
	      "printf '```text:b.txt\\nb\\n```\\n' > %s",
	      ws, ws, pf);
	/* --help */
	cli_out o = cli(NULL, "patch", "--help", NULL);
	ck_assert_int_eq(o.status, 0);
	assert_contains(o.out, "usage: cae patch");
	assert_contains(o.out, "--rollback");
	free(o.out);
	free(o.err);
	/* usage errors */
	o = cli(NULL, "patch", "--bogus", NULL);
	ck_assert_int_eq(o.status, 2);
	free(o.out);
	free(o.err);
	o = cli(NULL, "patch", "--state-dir", state, "--workspace", ws, "--format", "xml", pf,
		NULL);
	ck_assert_int_eq(o.status, 2);
	free(o.out);
	free(o.err);
	/* a file, JSON out */
	o = cli(NULL, "patch", "--state-dir", state, "--workspace", ws, pf, NULL);
	ck_assert_msg(o.status == 0, "%s%s", o.out, o.err);
	json_t *j = json_loads(o.out, 0, NULL);
	ck_assert_ptr_nonnull(j);
	ck_assert(json_is_true(json_object_get(j, "success")));
	ck_assert_int_eq(json_integer_value(json_object_get(j, "executed_cmds")), 1);
	json_decref(j);
	free(o.out);
	free(o.err);
	char path[PATH_MAX + 32];
	snprintf(path, sizeof(path), "%s/b.txt", ws);
	char *b = NULL;
	size_t bl;
	ck_assert_int_eq(cae__read_file(AT_FDCWD, path, 100, &b, &bl), 0);
	ck_assert_str_eq(b, "b\n");
	free(b);
	/* stdin, text out, a failure: exit status 1 */
	o = cli("```bash\necho hello\nexit 4\n```\n", "patch", "--state-dir", state, "--workspace",
		ws, "--format", "text", "-", NULL);
	ck_assert_int_eq(o.status, 1);
	assert_contains(o.out, "commands: 1, succeeded: 0, failed: 1\n\n✗ [1] shell_command run "
			       "echo hello …");
	assert_contains(o.out, "error: command failed: exit status 4 (output: hello)");
	free(o.out);
	free(o.err);
	/* --dry-run changes nothing; --auto-commit commits */
	o = cli("```text:dry.txt\nx\n```\n", "patch", "--state-dir", state, "--workspace", ws,
		"--dry-run", "--format", "text", NULL);
	ck_assert_int_eq(o.status, 0);
	assert_contains(o.out,
			"dry run: 1 command planned, nothing changed\n\n[1] file_edit update "
			"dry.txt (2 bytes)");
	free(o.out);
	free(o.err);
	snprintf(path, sizeof(path), "%s/dry.txt", ws);
	ck_assert_int_ne(access(path, F_OK), 0);
	o = cli("```text:c.txt\nc\n```\n", "patch", "--state-dir", state, "--workspace", ws,
		"--auto-commit", NULL);
	ck_assert_msg(o.status == 0, "%s%s", o.out, o.err);
	j = json_loads(o.out, 0, NULL);
	ck_assert(json_is_string(json_object_get(j, "git_commit")));
	json_decref(j);
	free(o.out);
	free(o.err);
	/* a hunk that does not apply: 1, with the error in the JSON */
	o = cli("*** Begin Patch\n*** Update File: a.txt\n@@\n-nope\n+x\n*** End Patch\n", "patch",
		"--state-dir", state, "--workspace", ws, NULL);
	ck_assert_int_eq(o.status, 1);
	j = json_loads(o.out, 0, NULL);
	assert_contains(json_string_value(json_object_get(j, "error")), "hunk 1 of a.txt");
	json_decref(j);
	free(o.out);
	free(o.err);
	/* a patch that does not parse: 1, the tool error */
	o = cli("[{\"type\":", "patch", "--state-dir", state, "--workspace", ws, NULL);
	ck_assert_int_eq(o.status, 1);
	assert_contains(o.out, "patch parse error");
	free(o.out);
	free(o.err);
	/* PICOCLAW_WORKER_STOP_ON_ERROR from the environment */
	setenv("PICOCLAW_WORKER_STOP_ON_ERROR", "true", 1);
	o = cli("```bash\nfalse\n```\n```text:never.txt\nx\n```\n", "patch", "--state-dir", state,
		"--workspace", ws, NULL);
	unsetenv("PICOCLAW_WORKER_STOP_ON_ERROR");
	ck_assert_int_eq(o.status, 1);
	j = json_loads(o.out, 0, NULL);
	ck_assert_int_eq(json_integer_value(json_object_get(j, "skipped_cmds")), 1);
	json_decref(j);
	free(o.out);
	free(o.err);
	cae__rm_rf(tmp);
	free(tmp);
}
END_TEST
#endif

#ifndef CAE_WORKER_DOCKER
/* ---------------------------------------------------------------------------------------- */
/* Crash consistency (local, host files): SIGKILL at every kill point of a 20-file patch */

/* Writes text to ws/rel as a shell's `printf > rel` would (mode 0666 less the umask), then
 * gives it mode when mode is not 0, and the owner of ws. */
static void kill_tree_file(const char *ws, const struct stat *owner, const char *rel,
			   const char *text, mode_t mode)
{
	char *p = cae__path_join(ws, rel);
	int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
	ck_assert_msg(fd >= 0, "%s: %s", p, strerror(errno));
	ck_assert_int_eq(cae__write_all(fd, text, strlen(text)), 0);
	ck_assert_int_eq(fchown(fd, owner->st_uid, owner->st_gid), 0);
	if (mode)
		ck_assert_int_eq(fchmod(fd, mode), 0);
	close(fd);
	free(p);
}

/* The tree the crash tests patch (kp/ in the workspace), made afresh before every kill point:
 * 16 files in kp/src and kp/lib/deep, kp/mv/old.txt (0640) and kp/mode.sh (0755), owned like
 * the workspace (by the sandbox's user). Plain system calls: a shell per kill point would
 * take most of the test's time. */
static void kill_tree_reset(const char *ws)
{
	char *kp = cae__path_join(ws, "kp");
	ck_assert_int_eq(cae__rm_rf(kp), 0);
	free(kp);
	struct stat owner;
	ck_assert_int_eq(stat(ws, &owner), 0);
	const char *dirs[] = {"kp", "kp/src", "kp/lib", "kp/lib/deep", "kp/mv"};
	for (size_t i = 0; i < ARRAY_SIZE(dirs); i++) {
		char *d = cae__path_join(ws, dirs[i]);
		ck_assert_msg(mkdir(d, 0777) == 0, "%s: %s", d, strerror(errno));
		ck_assert_int_eq(chown(d, owner.st_uid, owner.st_gid), 0);
		free(d);
	}
	for (int i = 0; i < 16; i++) {
		char rel[64], text[128];
		snprintf(rel, sizeof(rel), "kp/%s/p%02d.txt", i >= 8 ? "lib/deep" : "src", i);
		snprintf(text, sizeof(text), "line A %02d\nline B %02d\nline C %02d\n", i, i, i);
		kill_tree_file(ws, &owner, rel, text, 0);
	}
	kill_tree_file(ws, &owner, "kp/mv/old.txt", "moving\nalong\n", 0640);
	kill_tree_file(ws, &owner, "kp/mode.sh", "#!/bin/sh\necho one\n", 0755);
}

static char *kill_patch_text(void)
{
	cae_buf b;
	cae__buf_init(&b, 1 << 20);
	ck_assert_int_eq(cae__buf_puts(&b, "*** Begin Patch\n"), 0);
	for (int i = 0; i < 15; i++)
		ck_assert_int_eq(
		    cae__buf_printf(
			&b,
			"*** Update File: kp/%s/p%02d.txt\n@@\n line A %02d\n-line B %02d\n"
			"+line B %02d changed\n line C %02d\n",
			i >= 8 ? "lib/deep" : "src", i, i, i, i, i),
		    0);
	ck_assert_int_eq(
	    cae__buf_puts(
		&b, "*** Add File: kp/newdir/sub/added1.txt\n+added one\n"
		    "*** Add File: kp/src/added2.txt\n+added two\n"
		    "*** Delete File: kp/lib/deep/p15.txt\n"
		    "*** Update File: kp/mv/old.txt\n*** Move to: kp/mv2/new.txt\n@@\n moving\n"
		    "-along\n+moved\n"
		    "*** Update File: kp/mode.sh\n@@\n #!/bin/sh\n-echo one\n+echo two\n"
		    "*** End Patch\n"),
	    0);
	return cae__buf_steal(&b, NULL);
}

typedef struct patch_job {
	const cae_config *cfg;
	const char *uuid;
	const char *text;
	long fail_apply; /* > 0: the commit's n-th rename fails; the patch must fail */
	bool env;	 /* files through the environment's file service (mode 1) */
	const char *ws;	 /* the workspace (on this host, and as commands see it) */
} patch_job;

static int patch_job_run(void *arg)
{
	patch_job *j = arg;
	cae_backend *b = NULL;
	cae_error err = {0};
	if (cae_backend_new_named("local", j->cfg, NULL, &b, &err) < 0)
		return 1;
	cae_worker_options o;
	cae_worker_options_init(&o);
	o.rollback = true; /* the issue's case: must not leave a snapshot either */
	o.fs = j->env ? CAE_WORKER_FS_ENV : CAE_WORKER_FS_HOST;
	json_t *res = NULL;
	cae__txn_test_fail_apply(j->fail_apply);
	int r = cae_worker_run_text(b, j->uuid, j->text, strlen(j->text), &o, NULL, &res, &err);
	cae__txn_test_fail_apply(0);
	bool ok = r == 0 && json_is_true(json_object_get(res, "success")) == !j->fail_apply;
	json_decref(res);
	cae_backend_free(b);
	return ok ? 0 : 2;
}

/* What the next process opening the workspace does first. */
static int recover_ws_job(void *arg)
{
	patch_job *j = arg;
	wk_fs *fs = NULL;
	if (!j->env) {
		int r = cae__wk_fs_host_new(j->ws, &fs, NULL);
		cae__wk_fs_free(fs);
		return r;
	}
	cae_backend *b = NULL;
	if (cae_backend_new_named("local", j->cfg, NULL, &b, NULL) < 0)
		return 1;
	int r = cae__wk_fs_helper_new(b, j->uuid, j->ws, &fs, NULL);
	cae__wk_fs_free(fs);
	cae_backend_free(b);
	return r;
}

/* Runs text (20 file changes) killed at every kill point, with and without a rename failing
 * in the commit: after recovery every file of the patch is old, or every one new. */
static void kill_loop(const char *name, const char *text, int mode)
{
	fx f;
	fx_init(&f, mode);
	const char *ws = f.info.host_path;
	ck_assert_ptr_nonnull(ws);
	/* a private TMPDIR: a rollback snapshot left behind would show there */
	char *scratch = cae__path_join(f.tmp, "scratch");
	ck_assert_int_eq(cae__mkdir_p(scratch, 0700), 0);
	setenv("TMPDIR", scratch, 1);
	patch_job j = {f.cfg, f.uuid, text, 0, mode == 1, mode == 1 ? f.ws : ws};
	/* all-old and all-new, from an uninterrupted run */
	kill_tree_reset(ws);
	int temps = 0;
	char *old_state = cu_state(ws, &temps);
	ck_assert_int_eq(patch_job_run(&j), 0);
	char *new_state = cu_state(ws, &temps);
	ck_assert_int_eq(temps, 0);
	ck_assert_str_ne(old_state, new_state);
	/* Killed at the n-th kill point (staging, commit record, renames, cleanup), for every n
	 * until the patch finishes; every third time the recovery is killed too and run again.
	 * Every file of the patch is then old, or every one new. Then the same where the
	 * commit's 12th rename fails, so that the commit puts back the 11 before it: a crash
	 * before that failure is completed (new), one after it, while the commit puts files
	 * back, is rolled back (old), and the uninterrupted run changes nothing. */
	long killed = 0, olds = 0, news = 0;
	for (int pass = 0; pass < 2; pass++) {
		j.fail_apply = pass ? 12 : 0;
		for (long n = 1;; n++) {
			kill_tree_reset(ws);
			if (!cu_run_killed(n, patch_job_run, &j))
				break;
			killed++;
			if (n % 3 == 0)
				(void)cu_run_killed(n % 7 + 1, recover_ws_job, &j);
			ck_assert_int_eq(recover_ws_job(&j), 0);
			char *now = cu_state(ws, &temps);
			ck_assert_msg(temps == 0, "kill point %ld: temporary files left:\n%s", n,
				      now);
			ck_assert_msg(cu_journals(ws) == 0, "kill point %ld: a journal is left", n);
			bool is_old = strcmp(now, old_state) == 0;
			bool is_new = strcmp(now, new_state) == 0;
			ck_assert_msg(is_old || is_new,
				      "pass %d, kill point %ld: half applied:\n%s", pass, n, now);
			olds += is_old;
			news += is_new;
			free(now);
		}
		char *now = cu_state(ws, &temps);
		ck_assert_str_eq(now, pass ? old_state : new_state);
		free(now);
	}
	fprintf(stderr, "%s: %ld kill points: %ld all old, %ld all new\n", name, killed, olds,
		news);
	ck_assert_int_ge(killed, 200);
	ck_assert_int_gt(olds, 0);
	ck_assert_int_gt(news, 0);
	/* no rollback snapshot was needed (nothing to leak) */
	int left = 0;
	char *sc = cu_state(scratch, &left);
	ck_assert_str_eq(sc, "");
	free(sc);
	unsetenv("TMPDIR");
	free(scratch);
	free(old_state);
	free(new_state);
	fx_free(&f);
}

START_TEST(sigkill_every_patch_point)
{
	char *text = kill_patch_text();
	kill_loop("sigkill_every_patch_point", text, 0);
	free(text);
}
END_TEST

START_TEST(sigkill_every_env_patch_point)
{
	/* the same 20-file patch through the environment's file service (the request path a
	 * container's helper serves), killed at every point, then recovered by the next worker
	 * opening the workspace through that service */
	char *text = kill_patch_text();
	kill_loop("sigkill_every_env_patch_point", text, 1);
	free(text);
}
END_TEST

START_TEST(sigkill_every_json_rollback_point)
{
	/* the JSON form with rollback: 20 file edits (update, append, create, delete,
	 * append to a new file) are one transaction too */
	json_t *c = json_array();
	char path[64];
	for (int i = 0; i < 8; i++) {
		snprintf(path, sizeof(path), "kp/src/p%02d.txt", i);
		json_array_append_new(c, cmd("file_edit", "update", path, "rewritten\n"));
	}
	for (int i = 8; i < 12; i++) {
		snprintf(path, sizeof(path), "kp/lib/deep/p%02d.txt", i);
		json_array_append_new(c, cmd("file_edit", "append", path, "appended\n"));
	}
	json_array_append_new(c, cmd("file_edit", "create", "kp/newdir/j1.txt", "j1\n"));
	json_array_append_new(c, cmd("file_edit", "create", "kp/newdir/deeper/j2.txt", "j2\n"));
	json_array_append_new(c, cmd("file_edit", "delete", "kp/lib/deep/p15.txt", ""));
	json_array_append_new(c, cmd("file_edit", "append", "kp/newdir/j3.txt", "j3\n"));
	json_array_append_new(c, cmd("file_edit", "update", "kp/mode.sh", "#!/bin/sh\nexit 0\n"));
	json_array_append_new(c, cmd("file_edit", "append", "kp/src/p00.txt", "again\n"));
	json_array_append_new(c, cmd("file_edit", "append", "kp/newdir/j3.txt", "more\n"));
	json_array_append_new(c, cmd("file_edit", "append", "kp/lib/deep/p08.txt", "twice\n"));
	ck_assert_int_eq(json_array_size(c), 20);
	char *text = json_dumps(c, JSON_COMPACT);
	json_decref(c);
	kill_loop("sigkill_every_json_rollback_point", text, 0);
	free(text);
}
END_TEST
/* A mixed patch (files and a command) with rollback, run by a child process. */
typedef struct mixed_job {
	fx *f;
	const char *text;
} mixed_job;

static int mixed_job_run(void *arg)
{
	mixed_job *j = arg;
	cae_backend *b = make_backend(j->f->cfg, j->f->mode, NULL);
	cae_worker_options o;
	cae_worker_options_init(&o);
	o.rollback = true;
	o.fs = fs_mode(j->f);
	json_t *res = NULL;
	cae_error err = {0};
	int r = cae_worker_run_text(b, j->f->uuid, j->text, strlen(j->text), &o, NULL, &res, &err);
	json_decref(res);
	cae_backend_free(b);
	return r == 0 ? 0 : 2;
}

/* Starts the mixed patch in a child and SIGKILLs it while its command runs, with the first
 * file written: the workspace is half applied. */
static void kill_mixed_patch(fx *f, const char *text)
{
	mixed_job j = {f, text};
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0)
		_exit(mixed_job_run(&j));
	while (!exists(f, "started-marker")) {
		int st;
		ck_assert_msg(waitpid(pid, &st, WNOHANG) == 0,
			      "the patch ended before its command");
		usleep(20 * 1000);
	}
	ck_assert_int_eq(kill(pid, SIGKILL), 0);
	ck_assert_int_eq(waitpid(pid, NULL, 0), pid);
	ck_assert(exists(f, "mixed-a.txt"));
	ck_assert(!exists(f, "mixed-b.txt"));
}

/* Issue: a mixed patch run with rollback and killed mid-way stayed half applied, and gc
 * deleted its snapshot. Now the snapshot stays armed until the next patch of the workspace
 * (or `cae gc`) restored it: the workspace is as before the killed patch, then the next
 * patch applies. */
START_TEST(killed_rollback_patch_is_rolled_back_later)
{
	fx f;
	fx_init(&f, _i);
	char *scratch = cae__path_join(f.tmp, "scratch");
	ck_assert_int_eq(cae__mkdir_p(scratch, 0700), 0);
	setenv("TMPDIR", scratch, 1);
	free(sh(&f, "echo before > kept.txt"));
	char *before = tree_hash(&f);
	const char *text =
	    "[{\"type\":\"file_edit\",\"action\":\"create\",\"target\":\"mixed-a.txt\","
	    "\"content\":\"a\\n\"},{\"type\":\"file_edit\",\"action\":\"update\",\"target\":"
	    "\"kept.txt\",\"content\":\"changed\\n\"},{\"type\":\"shell_command\",\"action\":"
	    "\"run\","
	    "\"target\":\"touch started-marker && sleep 600\"},{\"type\":\"file_edit\",\"action\":"
	    "\"create\",\"target\":\"mixed-b.txt\",\"content\":\"b\\n\"}]";
	/* 1. the next patch restores first, then applies */
	kill_mixed_patch(&f, text);
	cae_worker_options o;
	cae_worker_options_init(&o);
	o.fs = fs_mode(&f);
	json_t *res = run(&f,
			  "[{\"type\":\"file_edit\",\"action\":\"create\",\"target\":"
			  "\"after.txt\",\"content\":\"x\\n\"}]",
			  &o);
	ck_assert(rb(res, "success"));
	ck_assert_int_eq(json_integer_value(json_object_get(res, "snapshots_restored")), 1);
	json_decref(res);
	ck_assert(!exists(&f, "mixed-a.txt") && !exists(&f, "started-marker"));
	char *kept = sh(&f, "cat kept.txt; rm after.txt");
	ck_assert_str_eq(kept, "before\n");
	free(kept);
	char *now = tree_hash(&f);
	ck_assert_str_eq(now, before);
	free(now);
	/* 2. cae gc restores it too, and only then removes the snapshot */
	kill_mixed_patch(&f, text);
	char state[PATH_MAX];
	snprintf(state, sizeof(state), "%s/state", f.tmp);
	cli_out c = cli(NULL, "gc", "--state-dir", state, "--older-than-hours", "1000", NULL);
	ck_assert_msg(c.status == 0, "%s%s", c.out, c.err);
	free(c.out);
	free(c.err);
	now = tree_hash(&f);
	ck_assert_str_eq(now, before);
	free(now);
	/* nothing armed is left, on this host or in the environment */
	char *left = sh(&f, "ls -d ../tmp/cae-snap.* 2>/dev/null | wc -l");
	ck_assert_str_eq(left, "0\n");
	free(left);
	DIR *d = opendir(scratch);
	ck_assert_ptr_nonnull(d);
	struct dirent *de;
	while ((de = readdir(d)))
		ck_assert_msg(strncmp(de->d_name, "cae-snap.", 9) != 0, "%s left", de->d_name);
	closedir(d);
	unsetenv("TMPDIR");
	free(scratch);
	free(before);
	fx_free(&f);
}
END_TEST

START_TEST(gc_recovers_and_removes_dead_scratch)
{
	fx f;
	fx_init(&f, 0);
	const char *ws = f.info.host_path;
	char *text = kill_patch_text();
	patch_job j = {f.cfg, f.uuid, text, 0};
	kill_tree_reset(ws);
	int temps = 0;
	char *old_state = cu_state(ws, &temps);
	/* a patch killed half-way through its commit leaves its journal */
	long n = 150;
	for (; n > 0; n--) {
		kill_tree_reset(ws);
		ck_assert_int_eq(cu_run_killed(n, patch_job_run, &j), 1);
		if (cu_journals(ws) > 0)
			break;
	}
	ck_assert_int_gt(n, 0);
	/* scratch directories: of a dead process, of a reused pid, of us (alive), and one of
	 * an older version without an owner */
	pid_t dead = fork();
	if (dead == 0)
		_exit(0);
	ck_assert_int_eq(waitpid(dead, NULL, 0), dead);
	char *scratch = cae__path_join(f.tmp, "scratch");
	unsigned long long me = cae__process_start_time(getpid());
	tu_sh("mkdir -p %s/cae-snap.%d-5.aaaaaa %s/cae-bundle-%d-5.bbbbbb "
	      "%s/cae-snap.%d-%llu.cccccc %s/cae-snap.%d-%llu.dddddd %s/cae-snap.eeeeee "
	      "%s/cae-upload-%d-5.ffffff && echo x > %s/cae-snap.%d-5.aaaaaa/ws.tar",
	      scratch, (int)dead, scratch, (int)dead, scratch, (int)getpid(), me + 1, scratch,
	      (int)getpid(), me, scratch, scratch, (int)dead, scratch, (int)dead);
	setenv("TMPDIR", scratch, 1);
	char state[PATH_MAX];
	snprintf(state, sizeof(state), "%s/state", f.tmp);
	cli_out o = cli(NULL, "gc", "--state-dir", state, "--older-than-hours", "1000", NULL);
	unsetenv("TMPDIR");
	ck_assert_msg(o.status == 0, "%s%s", o.out, o.err);
	json_t *res = json_loads(o.out, 0, NULL);
	ck_assert_ptr_nonnull(res);
	ck_assert_int_eq(json_integer_value(json_object_get(res, "removed")), 0);
	ck_assert_int_ge(json_integer_value(json_object_get(res, "journals_recovered")), 1);
	/* a dead process's snapshot, bundle and container upload, and the reused pid's */
	ck_assert_int_eq(json_integer_value(json_object_get(res, "scratch_removed")), 4);
	json_decref(res);
	free(o.out);
	free(o.err);
	/* the workspace: consistent, nothing left */
	ck_assert_int_eq(cu_journals(ws), 0);
	char *now = cu_state(ws, &temps);
	ck_assert_int_eq(temps, 0);
	kill_tree_reset(ws);
	ck_assert_int_eq(patch_job_run(&j), 0);
	char *new_state = cu_state(ws, &temps);
	ck_assert(strcmp(now, old_state) == 0 || strcmp(now, new_state) == 0);
	/* what is alive or cannot be attributed (and is recent) stays */
	char *left = NULL;
	ck_assert_int_ge(asprintf(&left, "cd %s && ls -d cae-* | sort", scratch), 0);
	const char *argv[] = {"sh", "-c", left, NULL};
	cae_run_spec spec = {.argv = argv, .timeout_ms = 10000, .cancel_fd = -1};
	cae_run_result r;
	ck_assert_int_eq(cae_runner_run(&spec, &r, NULL), 0);
	char want[512];
	snprintf(want, sizeof(want), "cae-snap.%d-%llu.dddddd\ncae-snap.eeeeee\n", (int)getpid(),
		 me);
	ck_assert_str_eq(r.out, want);
	cae_run_result_clear(&r);
	free(left);
	free(now);
	free(new_state);
	free(old_state);
	free(scratch);
	free(text);
	fx_free(&f);
}
END_TEST
#endif

/* The traps of git_config_never_runs: each command it could run writes a marker in .markers.
 * Returns the markers present, one a line (new string). */
static char *markers(fx *f)
{
	return sh(f, "ls -A .markers");
}

/* A run with a git_operation commit and the auto-commit: both must succeed and trip no trap. */
static void run_git_steps(fx *f, const char *name)
{
	cae_worker_options o;
	cae_worker_options_init(&o);
	o.auto_commit = true;
	char a[128], b[128];
	snprintf(a, sizeof(a), "%s-a.txt", name);
	snprintf(b, sizeof(b), "%s-b.txt", name);
	json_t *c = json_array();
	json_array_append_new(c, cmd("file_edit", "create", a, "a\n"));
	json_array_append_new(c, cmd("git_operation", "add", a, ""));
	json_array_append_new(c, cmd("git_operation", "commit", "", name));
	json_array_append_new(c, cmd("git_operation", "checkout", "HEAD~1 -- README.md", ""));
	json_array_append_new(c, cmd("file_edit", "create", b, "b\n"));
	json_t *res = run_json(f, c, &o);
	ck_assert_msg(rb(res, "success"), "%s: %s", name, json_dumps(res, 0));
	ck_assert_str_eq(rs(res, "auto_commit"), "committed");
	json_decref(res);
	char *m = markers(f);
	ck_assert_msg(strcmp(m, "") == 0, "%s: ran in cae's git steps: %s", name, m);
	free(m);
	char *log = sh(f, "git log --format=%%s -2");
	ck_assert_msg(strstr(log, name), "%s: %s", name, log);
	free(log);
}

/* Nothing the repository names runs in cae's own git steps (a git_operation, the
 * auto-commit): hooks in .git/hooks (put there on the host's side, local backend), hooks under
 * core.hooksPath, core.fsmonitor, clean and smudge filters that the repository requires, a
 * textconv driver, a signing program. The agent's own git runs them all: that is how the test
 * knows each trap is armed. */
START_TEST(git_config_never_runs)
{
	fx f;
	fx_init(&f, _i);
	static const char *const hooks[] = {
	    "pre-commit",  "prepare-commit-msg", "commit-msg",	      "post-commit",
	    "pre-auto-gc", "post-checkout",	 "post-index-change", "reference-transaction"};
	char trap[PATH_MAX + 64];
	snprintf(trap, sizeof(trap), "#!/bin/sh\ntouch \"%s/.markers/$(basename \"$0\")\"\n", f.ws);
	free(sh(
	    &f,
	    "git config user.name agent && git config user.email agent@example.com && "
	    "mkdir .markers .githooks && echo .markers/ >> .git/info/exclude && "
	    "printf '%%s' '%s' > .githooks/trap && chmod +x .githooks/trap && "
	    "cp .githooks/trap .githooks/fsmonitor && "
	    "git config core.fsmonitor \"$PWD/.githooks/fsmonitor\" && "
	    "git config filter.trap.clean \"touch '$PWD/.markers/clean'; cat\" && "
	    "git config filter.trap.smudge \"touch '$PWD/.markers/smudge'; cat\" && "
	    "git config filter.trap.required true && "
	    "git config diff.trap.textconv \"touch '$PWD/.markers/textconv'; cat\" && "
	    "git config gpg.program \"$PWD/.githooks/trap\" && git config commit.gpgSign true && "
	    "git config --global filter.gtrap.clean \"touch '$PWD/.markers/gclean'; cat\" && "
	    "printf '* filter=trap diff=trap\\n*-b.txt filter=gtrap\\n.githooks/** -filter\\n' "
	    "> .gitattributes",
	    trap));
	for (size_t i = 0; i < ARRAY_SIZE(hooks); i++)
		free(sh(&f, "cp .githooks/trap .githooks/%s", hooks[i]));
	if (f.mode < 2)
		for (size_t i = 0; i < ARRAY_SIZE(hooks); i++)
			tu_sh("cp '%s/.githooks/trap' '%s/.git/hooks/%s'", f.info.host_path,
			      f.info.host_path, hooks[i]);
	/* armed: the agent's own git trips them (the signing program fails, as it should) */
	free(sh(&f,
		"echo x > armed.txt && echo x > armed-b.txt && git add armed.txt armed-b.txt && "
		"git -c commit.gpgSign=false commit "
		"-qm armed && git diff HEAD~1 -- armed.txt >/dev/null && "
		"git checkout -q HEAD~1 -- README.md; git status >/dev/null; true"));
	char *m = markers(&f);
	ck_assert_msg(strstr(m, "clean") && strstr(m, "gclean") && strstr(m, "textconv") &&
			  strstr(m, "fsmonitor"),
		      "traps not armed: %s", m);
	if (f.mode < 2)
		ck_assert_msg(strstr(m, "pre-commit"), "traps not armed: %s", m);
	free(m);
	free(sh(&f, "git reset -q --hard HEAD; rm -f .markers/*"));
	run_git_steps(&f, "in-git-hooks");
	/* the same with the hooks under core.hooksPath */
	free(sh(&f, "git config core.hooksPath .githooks"));
	run_git_steps(&f, "under-hooks-path");
	/* arguments of a git_operation that would run what the configuration names: refused */
	free(sh(&f, "git config trailer.t.cmd \"touch '$PWD/.markers/trailer'\" && "
		    "echo t > t.txt && git add t.txt && rm -f .markers/*"));
	static const char *const refused[] = {"--trailer t=1", "--trailer=t:1",
					      "--recurse-submodules"};
	for (size_t i = 0; i < ARRAY_SIZE(refused); i++) {
		json_t *c = json_array();
		json_array_append_new(c, cmd("git_operation", "commit", refused[i], "refused"));
		json_t *res = run_json(&f, c, NULL);
		ck_assert_msg(!rb(res, "success"), "%s", refused[i]);
		assert_contains(rs(result_at(res, 0), "error"), "is not allowed");
		json_decref(res);
	}
	char *m2 = markers(&f);
	ck_assert_str_eq(m2, "");
	free(m2);
	/* the global configuration is the environment's (the shared container's, too) */
	free(sh(&f, "git config --global --remove-section filter.gtrap"));
	fx_free(&f);
}
END_TEST

/* A patch never writes or removes a protected path (.git/hooks by default), however it spells
 * it: directly, with "." and "//", in another case, through a link to the directory or to its
 * parent; on this host's file system it is refused by name, elsewhere the environment keeps
 * it read-only. Nothing is made, the hooks stay as they were, and the rest of the workspace
 * stays writable. */
START_TEST(protected_paths_patch)
{
	fx f;
	fx_init(&f, _i);
	char *before = sh(&f, "ls -la .git/hooks | sed 1d | sort; cat .git/hooks/*.sample | cksum");
	free(sh(&f, "ln -s .git/hooks hl && ln -s .git g"));
	static const char *const targets[] = {
	    ".git/hooks/pre-commit", ".git/./hooks/pre-commit", ".git//hooks/post-commit",
	    "hl/pre-commit",	     "g/hooks/pre-commit",	".git/hooks/new/x",
	};
	cae_worker_options o;
	cae_worker_options_from_config(&o, f.cfg);
	o.fs = fs_mode(&f);
	for (size_t i = 0; i < ARRAY_SIZE(targets); i++) {
		json_t *c = json_array();
		json_array_append_new(c, cmd("file_edit", "create", targets[i], "#!/bin/sh\n"));
		json_t *res = run_json(&f, c, &o);
		ck_assert_msg(!rb(res, "success"), "%s written", targets[i]);
		if (f.mode == 0)
			assert_contains(rs(result_at(res, 0), "error"), "protected");
		json_decref(res);
	}
	json_t *c = json_array();
	json_array_append_new(c, cmd("file_edit", "delete", ".git/hooks/pre-commit.sample", ""));
	json_t *res = run_json(&f, c, &o);
	ck_assert(!rb(res, "success"));
	json_decref(res);
	char *after = sh(&f, "ls -la .git/hooks | sed 1d | sort; cat .git/hooks/*.sample | cksum");
	ck_assert_str_eq(after, before);
	free(after);
	free(before);
	c = json_array();
	json_array_append_new(c, cmd("file_edit", "create", "ok/fine.txt", "fine\n"));
	res = run_json(&f, c, &o);
	ck_assert(rb(res, "success"));
	json_decref(res);
	assert_file(&f, "ok/fine.txt", "fine\n");
	fx_free(&f);
}
END_TEST

static Suite *worker_suite(void)
{
	Suite *s = suite_create("worker");
	TCase *env = tcase_create("environment");
	tcase_set_timeout(env, 600);
	tcase_add_loop_test(env, json_patch_full, MODE_FIRST, MODE_LAST);
	tcase_add_loop_test(env, parse_json_bad, MODE_FIRST, MODE_LAST);
	tcase_add_loop_test(env, unknown_command_fails_alone, MODE_FIRST, MODE_LAST);
	tcase_add_loop_test(env, markdown_patch, MODE_FIRST, MODE_LAST);
	tcase_add_loop_test(env, markdown_bad, MODE_FIRST, MODE_LAST);
	tcase_add_loop_test(env, empty_patch, MODE_FIRST, MODE_LAST);
	tcase_add_loop_test(env, file_edit_actions, MODE_FIRST, MODE_LAST);
	tcase_add_loop_test(env, outside_paths_refused, MODE_FIRST, MODE_LAST);
	tcase_add_loop_test(env, shell_ok_and_error, MODE_FIRST, MODE_LAST);
	tcase_add_loop_test(env, shell_timeout, MODE_FIRST, MODE_LAST);
	tcase_add_loop_test(env, git_operations, MODE_FIRST, MODE_LAST);
	tcase_add_loop_test(env, git_timeout, MODE_FIRST, MODE_LAST);
	tcase_add_test(env, commit_subjects);
	tcase_add_loop_test(env, auto_commit_hash, MODE_FIRST, MODE_LAST);
	tcase_add_loop_test(env, auto_commit_nothing, MODE_FIRST, MODE_LAST);
	tcase_add_loop_test(env, auto_commit_error, MODE_FIRST, MODE_LAST);
	tcase_add_loop_test(env, continue_mode_and_stop_on_error, MODE_FIRST, MODE_LAST);
	tcase_add_loop_test(env, continue_mode_diffs, MODE_FIRST, MODE_LAST);
	tcase_add_loop_test(env, apply_patch_format, MODE_FIRST, MODE_LAST);
	tcase_add_loop_test(env, unified_diff_format, MODE_FIRST, MODE_LAST);
	tcase_add_loop_test(env, diff_context_not_found, MODE_FIRST, MODE_LAST);
	tcase_add_loop_test(env, diff_crlf, MODE_FIRST, MODE_LAST);
	tcase_add_loop_test(env, diff_no_final_newline, MODE_FIRST, MODE_LAST);
	tcase_add_loop_test(env, big_file_50mb, MODE_FIRST, MODE_LAST);
	tcase_add_loop_test(env, thousand_commands, MODE_FIRST, MODE_LAST);
	tcase_add_loop_test(env, rollback_7_of_10, MODE_FIRST, MODE_LAST);
	tcase_add_loop_test(env, rollback_without_git, MODE_FIRST, MODE_LAST);
	tcase_add_loop_test(env, rollback_after_workspace_removed, MODE_FIRST, MODE_LAST);
	tcase_add_loop_test(env, dry_run_changes_nothing, MODE_FIRST, MODE_LAST);
	tcase_add_loop_test(env, log_events, MODE_FIRST, MODE_LAST);
	tcase_add_loop_test(env, cancelled, MODE_FIRST, MODE_LAST);
	tcase_add_loop_test(env, git_config_never_runs, MODE_FIRST, MODE_LAST);
	tcase_add_loop_test(env, protected_paths_patch, MODE_FIRST, MODE_LAST);
#ifdef CAE_WORKER_DOCKER
	tcase_add_unchecked_fixture(env, shared_setup, shared_teardown);
#endif
	suite_add_tcase(s, env);
#ifndef CAE_WORKER_DOCKER
	TCase *unit = tcase_create("local");
	tcase_set_timeout(unit, 300);
	tcase_add_test(unit, render_format);
	tcase_add_test(unit, path_rel);
	tcase_add_test(unit, host_fs_links);
	tcase_add_test(unit, options_from_config);
	tcase_add_test(unit, session_tool);
	tcase_add_test(unit, cli_patch);
	suite_add_tcase(s, unit);
	/* the SIGKILL cases in three parts that meson runs side by side (CK_RUN_CASE) */
	TCase *crash = tcase_create("crash-patch");
	tcase_set_timeout(crash, 900);
	tcase_add_test(crash, sigkill_every_patch_point);
	suite_add_tcase(s, crash);
	crash = tcase_create("crash-json");
	tcase_set_timeout(crash, 900);
	tcase_add_test(crash, sigkill_every_json_rollback_point);
	tcase_add_loop_test(crash, killed_rollback_patch_is_rolled_back_later, 0, 2);
	suite_add_tcase(s, crash);
	crash = tcase_create("crash-env");
	tcase_set_timeout(crash, 900);
	tcase_add_test(crash, sigkill_every_env_patch_point);
	tcase_add_test(crash, gc_recovers_and_removes_dead_scratch);
	suite_add_tcase(s, crash);
#endif
	return s;
}

int main(int argc, char **argv)
{
	cae_exe = argc > 1 ? argv[1] : "cae";
	run_pid = (int)getpid();
	/* no identity or hooks from this machine's git configuration */
	setenv("GIT_CONFIG_GLOBAL", "/dev/null", 1);
	setenv("GIT_CONFIG_NOSYSTEM", "1", 1);
	return tu_run(worker_suite());
}
