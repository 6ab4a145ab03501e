/* Commands in the environment: shell_command (sh -c, bash when the environment has it,
 * stdout and stderr combined), git_operation (argv, no shell; a commit identity given with -c
 * when the repository has none) and the auto-commit after a run; and cae__wk_run(), how the
 * worker runs any command (these, and the rollback snapshot's tar). Every git command starts
 * with CAE_GIT_ARGV and resets the drivers the repository's own configuration names
 * (git_prefix): nothing an agent wrote into .git runs in these steps. */
#include "worker/worker-internal.h"

#include "base/gitsafe.h"
#include "base/macro.h"
#include "base/utf8.h"
#include "cae/policy.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/banned.h"

#define ERROR_OUTPUT_CHARS 2000 /* of a failed command's output quoted in its error */
#define IDENTITY_NAME "cae-worker"
#define IDENTITY_EMAIL "cae-worker@localhost"

int cae__wk_run(const wk_exec_ctx *ctx, bool host, const char *cwd, const char *const *argv,
		const char *stdin_data, size_t stdin_len, bool has_stdin, size_t max_out,
		cae_run_result *res, cae_error *err)
{
	if (host) {
		cae_run_spec spec = {
		    .argv = argv,
		    .cwd = cwd,
		    .stdin_data = stdin_data,
		    .stdin_len = stdin_len,
		    .has_stdin = has_stdin,
		    .timeout_ms = ctx->timeout_ms,
		    .max_stdout = max_out,
		    .max_stderr = max_out,
		    .cancel_fd = ctx->cancel_fd,
		};
		return cae_runner_run(&spec, res, err);
	}
	static const char *const env[] = {"LC_ALL=C", NULL};
	cae_exec_request req = {
	    .argv = argv,
	    .cwd = cwd,
	    .extra_env = env,
	    .stdin_data = stdin_data,
	    .stdin_len = stdin_len,
	    .has_stdin = has_stdin,
	    .timeout_ms = ctx->timeout_ms,
	    .max_stdout = max_out,
	    .max_stderr = max_out,
	    .cancel_fd = ctx->cancel_fd,
	};
	return cae_backend_exec(ctx->backend, ctx->task_uuid, &req, res, err);
}

/* Quotes the last chars characters of s[0..n) for an error message. */
static void put_tail(cae_buf *b, const char *s, size_t n)
{
	while (n && (s[n - 1] == '\n' || s[n - 1] == '\r'))
		n--;
	if (!n)
		return;
	size_t from = cae__utf8_suffix_chars(s, n, ERROR_OUTPUT_CHARS);
	/* a quote in an error message already recorded: dropped when memory runs out */
	DISCARD_RESULT(
	    cae__buf_printf(b, " (output: %s%.*s)", from ? "…" : "", (int)(n - from), s + from));
}

/* Runs argv in the workspace with the timeout; fills oc. what: "command" or "git command". */
static void run_in_env(wk_state *st, const char *const *argv, int64_t timeout_ms, const char *what,
		       wk_outcome *oc)
{
	wk_exec_ctx ctx = st->fs_ctx;
	ctx.timeout_ms = timeout_ms;
	cae_run_result res;
	cae_error err;
	cae_error_clear(&err);
	static const char *const env[] = {"GIT_TERMINAL_PROMPT=0", NULL};
	cae_exec_request req = {
	    .argv = argv,
	    .cwd = st->root,
	    .extra_env = env,
	    .timeout_ms = timeout_ms,
	    .max_stdout = st->max_output,
	    .max_stderr = st->max_output,
	    .cancel_fd = ctx.cancel_fd,
	};
	int r = cae_backend_exec(st->b, st->uuid, &req, &res, &err);
	if (r < 0) {
		cae__wk_fail(oc, "%s execution error: %s", what, err.message);
		return;
	}
	/* the output is capped (what does not fit is dropped and recorded); failing to keep
	 * what fits would show the model part of it as all of it */
	r = cae__buf_append(&oc->output, res.out, res.out_len);
	if (r == 0 && res.err_len) {
		if (oc->output.len && oc->output.data[oc->output.len - 1] != '\n')
			r = cae__buf_append(&oc->output, "\n", 1);
		if (r == 0)
			r = cae__buf_append(&oc->output, res.err, res.err_len);
	}
	if (r < 0) {
		cae__wk_fail(oc, "%s output: %s", what, strerror(-r));
		cae_run_result_clear(&res);
		return;
	}
	oc->has_exit_code = true;
	oc->exit_code = res.exit_code;
	oc->timed_out = res.timed_out;
	if (res.cancelled) {
		st->cancelled = true;
		cae__wk_fail(oc, "%s cancelled", what);
	} else if (res.timed_out) {
		oc->exit_code = 124;
		cae__wk_fail(oc, "%s timed out (time limit: %lld seconds)", what,
			     (long long)((timeout_ms + 999) / 1000));
	} else if (res.exit_code != 0) {
		if (res.term_signal)
			cae__wk_fail(oc, "%s failed: killed by signal %d", what, res.term_signal);
		else
			cae__wk_fail(oc, "%s failed: exit status %d", what, res.exit_code);
		put_tail(&oc->error, oc->output.data ? oc->output.data : "", oc->output.len);
	} else {
		oc->success = true;
	}
	cae_run_result_clear(&res);
}

/* stdout and stderr in one stream, in order (a combined output); bash when the environment
 * has it (patches are written for bash -c), else sh. */
static const char shell_wrapper[] =
    "exec 2>&1\n"
    "if command -v bash >/dev/null 2>&1; then exec bash -c \"$1\"; fi\n"
    "eval \"$1\"\n";

static void exec_shell(wk_state *st, const cae_patch_command *c, wk_outcome *oc)
{
	cae_buf script;
	cae__buf_init(&script, CAE_PATCH_MAX_INPUT + 16);
	int r = cae__buf_puts(&script, c->target);
	if (r == 0 && c->content_len)
		r = cae__buf_puts(&script, " ");
	if (r == 0 && c->content_len)
		r = cae__buf_append(&script, c->content, strnlen(c->content, c->content_len));
	if (r < 0) { /* never a part of the command */
		cae__buf_clear(&script);
		cae__wk_fail(oc, "%s", strerror(-r));
		return;
	}
	if (!script.data || !*script.data) {
		cae__buf_clear(&script);
		cae__wk_fail(oc, "empty shell command");
		return;
	}
	if (st->o->policy) {
		cae_policy_verdict v;
		cae_policy_check(st->o->policy, script.data, &v);
		if (!v.allowed) {
			cae_log_fields(
			    st->log, CAE_LOG_WARN, "policy.denied",
			    json_pack("{s:s, s:s}", "tool", "apply_patch", "program", v.program),
			    "%s", v.reason);
			oc->has_exit_code = true;
			oc->exit_code = 126;
			cae__wk_fail(oc, "refused by the command policy: %s", v.reason);
			cae__buf_clear(&script);
			return;
		}
	}
	const char *argv[] = {"sh", "-c", shell_wrapper, "sh", script.data, NULL};
	run_in_env(st, argv, st->command_timeout_ms, "command", oc);
	cae__buf_clear(&script);
}

static const char *const git_safe_argv[] = {CAE_GIT_ARGV};
_Static_assert(ARRAY_SIZE(git_safe_argv) == CAE_GIT_ARGC, "CAE_GIT_ARGC counts CAE_GIT_ARGV");

/* Which parts of a commit identity the repository lacks: asked once per run. */
static int identity(wk_state *st)
{
	if (st->identity >= 0)
		return st->identity;
	st->identity = 0;
	static const char *const keys[] = {"user.name", "user.email"};
	for (int i = 0; i < 2; i++) {
		const char *argv[] = {CAE_GIT_ARGV, "config", "--get", keys[i], NULL};
		wk_outcome oc;
		cae__wk_outcome_init(&oc, 4096);
		run_in_env(st, argv, st->git_timeout_ms, "git command", &oc);
		if (oc.success && oc.output.len > 1)
			st->identity |= 1 << i;
		cae__wk_outcome_clear(&oc);
	}
	return st->identity;
}

/* The keys of a driver that name a command, and the value that disables each: an empty
 * command is no filter (git runs a filter's clean, smudge or process only when non-empty),
 * a filter that is not required may then do nothing, an empty textconv or diff command is
 * none, and "false" as a merge driver leaves a conflict instead of running anything. */
static const struct {
	const char *section, *key, *value;
} driver_keys[] = {
    {"filter", "clean", ""},	     {"filter", "smudge", ""}, {"filter", "process", ""},
    {"filter", "required", "false"}, {"diff", "textconv", ""}, {"diff", "command", ""},
    {"merge", "driver", "false"},
};

#define DRIVER_QUERY "^(filter|diff|merge)\\..*\\.(clean|smudge|process|textconv|command|driver)$"

/* Adds to resets one "-c" setting per command key of a driver that the line of `git config
 * --show-scope --name-only` (or, scoped false, `--name-only`) names: every one but those of
 * the system configuration, which is the operator's (/etc/gitconfig: git-lfs installs its
 * filter there); the global one is the environment user's own file, which commands write.
 * Returns 0, or -EINVAL for a name that `-c` cannot carry ('=' in it). */
static int driver_reset(cae_buf *resets, const char *line, size_t n, bool scoped)
{
	if (scoped) {
		const char *tab = memchr(line, '\t', n);
		if (!tab)
			return 0;
		size_t sl = (size_t)(tab - line);
		if (sl == 6 && memcmp(line, "system", 6) == 0)
			return 0;
		n -= sl + 1;
		line = tab + 1;
	}
	const char *dot = memchr(line, '.', n);
	const char *last = NULL;
	for (size_t i = n; i > 0; i--)
		if (line[i - 1] == '.') {
			last = line + i - 1;
			break;
		}
	if (!dot || !last || last <= dot)
		return 0;
	size_t section_len = (size_t)(dot - line);
	const char *name = dot + 1;
	size_t name_len = (size_t)(last - name);
	if (memchr(name, '=', name_len))
		return -EINVAL;
	int r = 0;
	for (size_t i = 0; i < ARRAY_SIZE(driver_keys) && r == 0; i++) {
		if (strlen(driver_keys[i].section) != section_len ||
		    strncasecmp(driver_keys[i].section, line, section_len) != 0)
			continue;
		r = cae__buf_printf(resets, "%s.%.*s.%s=%s", driver_keys[i].section, (int)name_len,
				    name, driver_keys[i].key, driver_keys[i].value);
		if (r == 0)
			r = cae__buf_append(resets, "", 1);
	}
	return r;
}

/* Reads the drivers the repository names now (a command may have changed them since the last
 * step) into resets (initialised here): NUL-separated "-c" settings. Returns 0, or -1 with
 * fail set: nothing may run then, since a driver might be left on. */
static int read_drivers(wk_state *st, cae_buf *resets, wk_outcome *fail)
{
	cae__buf_init(resets, 1024 * 1024);
	for (int scoped = 1; scoped >= 0; scoped--) {
		const char *argv[CAE_GIT_ARGC + 8];
		size_t k = 0;
		for (size_t i = 0; i < CAE_GIT_ARGC; i++)
			argv[k++] = git_safe_argv[i];
		argv[k++] = "config";
		if (scoped)
			argv[k++] = "--show-scope";
		argv[k++] = "--name-only";
		argv[k++] = "--get-regexp";
		argv[k++] = DRIVER_QUERY;
		argv[k] = NULL;
		wk_outcome oc;
		cae__wk_outcome_init(&oc, 1024 * 1024);
		run_in_env(st, argv, st->git_timeout_ms, "git config", &oc);
		/* exit 1: no such key; anything else: once more without scopes (a git older
		 * than --show-scope), then fail */
		if (!oc.has_exit_code || (oc.exit_code != 0 && oc.exit_code != 1) ||
		    oc.output.truncated) {
			if (scoped && !oc.output.truncated) {
				cae__wk_outcome_clear(&oc);
				continue;
			}
			cae__wk_fail(fail, "cannot read the repository's filter drivers%s%s",
				     oc.error.data ? ": " : "", oc.error.data ? oc.error.data : "");
			cae__wk_outcome_clear(&oc);
			return -1;
		}
		int r = 0;
		const char *p = oc.output.data ? oc.output.data : "";
		const char *end = p + oc.output.len;
		while (p < end && r == 0) {
			const char *nl = memchr(p, '\n', (size_t)(end - p));
			size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
			r = driver_reset(resets, p, n, scoped);
			p += n + 1;
		}
		cae__wk_outcome_clear(&oc);
		if (r == -EINVAL) {
			cae__wk_fail(fail,
				     "refused: the repository's configuration names a filter, diff "
				     "or merge driver with '=' in its name, which cannot be turned "
				     "off for cae's own git commands");
			return -1;
		}
		if (r < 0 || resets->truncated) {
			cae__wk_fail(fail, "out of memory");
			return -1;
		}
		return 0;
	}
	return 0;
}

/* How many argv entries git_prefix adds at most, besides the driver resets. */
#define PREFIX_MAX (CAE_GIT_ARGC + 4)

static size_t count_resets(const cae_buf *resets)
{
	size_t n = 0;
	for (size_t i = 0; i < resets->len; i++)
		n += resets->data[i] == '\0';
	return n;
}

/* CAE_GIT_ARGV, the driver resets read by read_drivers (NULL: none), and -c user.name/-c
 * user.email for what is not configured when commit. argv has room for PREFIX_MAX +
 * 2 * count_resets(resets). Returns the number of entries used. */
static size_t git_prefix(wk_state *st, const cae_buf *resets, const char **argv, bool commit)
{
	size_t k = 0;
	for (size_t i = 0; i < CAE_GIT_ARGC; i++)
		argv[k++] = git_safe_argv[i];
	for (size_t i = 0; resets && i < resets->len;) {
		const char *s = resets->data + i;
		argv[k++] = "-c";
		argv[k++] = s;
		i += strlen(s) + 1;
	}
	if (!commit)
		return k;
	int id = identity(st);
	if (!(id & 1)) {
		argv[k++] = "-c";
		argv[k++] = "user.name=" IDENTITY_NAME;
	}
	if (!(id & 2)) {
		argv[k++] = "-c";
		argv[k++] = "user.email=" IDENTITY_EMAIL;
	}
	return k;
}

static void exec_git(wk_state *st, const cae_patch_command *c, wk_outcome *oc)
{
	_cleanup_(cae__buf_clear) cae_buf resets = {0};
	if (read_drivers(st, &resets, oc) < 0)
		return;
	_cleanup_free_ const char **argv =
	    calloc(c->nargs + PREFIX_MAX + 2 * count_resets(&resets) + 8, sizeof(char *));
	if (!argv) {
		cae__wk_fail(oc, "out of memory");
		return;
	}
	bool commit = c->action == CAE_PATCH_GIT_COMMIT;
	size_t k = git_prefix(st, &resets, argv, commit);
	switch (c->action) {
	case CAE_PATCH_GIT_ADD:
		argv[k++] = "add";
		break;
	case CAE_PATCH_GIT_COMMIT:
		argv[k++] = "commit";
		break;
	case CAE_PATCH_GIT_RESET:
		argv[k++] = "reset";
		break;
	case CAE_PATCH_GIT_CHECKOUT:
		argv[k++] = "checkout";
		break;
	default:
		cae__wk_fail(oc, "unknown git_operation action: %s",
			     cae_patch_action_name(c->action));
		return;
	}
	for (size_t i = 0; i < c->nargs; i++) {
		/* git in a submodule would read the submodule's own configuration, whose
		 * drivers read_drivers does not see */
		if (strncmp(c->args[i], "--recurse-submodules", 20) == 0) {
			cae__wk_fail(oc,
				     "git_operation: %s is not allowed (cae's git commands "
				     "do not enter submodules)",
				     c->args[i]);
			return;
		}
		/* a trailer's command comes from the configuration (trailer.<token>.cmd) */
		if (strncmp(c->args[i], "--trailer", 9) == 0) {
			cae__wk_fail(oc,
				     "git_operation: %s is not allowed (it runs commands the "
				     "repository's configuration names); put the trailer in "
				     "the message",
				     c->args[i]);
			return;
		}
		argv[k++] = c->args[i];
	}
	_cleanup_free_ char *msg = NULL;
	if (commit) {
		msg = c->content_len ? strndup(c->content, c->content_len)
				     : strdup("Auto-commit by Worker");
		if (!msg) {
			cae__wk_fail(oc, "out of memory");
			return;
		}
		argv[k++] = "-m";
		argv[k++] = msg;
	}
	argv[k] = NULL;
	run_in_env(st, argv, st->git_timeout_ms, "git command", oc);
}

void cae__wk_exec_command(wk_state *st, const cae_patch_command *c, wk_outcome *oc)
{
	switch (c->type) {
	case CAE_PATCH_SHELL_COMMAND:
		exec_shell(st, c, oc);
		return;
	case CAE_PATCH_GIT_OPERATION:
		exec_git(st, c, oc);
		return;
	case CAE_PATCH_INVALID:
		cae__wk_fail(oc, "%s", c->invalid);
		return;
	case CAE_PATCH_FILE_EDIT:
		break; /* a step of the plan, not a command (execute.c) */
	}
	cae__wk_fail(oc, "not a shell or git command");
}

/* The commit message: prefix, a space, the patch's subject (cae_worker_commit_subject) cut
 * at 80 characters. */
static char *commit_message(wk_state *st)
{
	const char *prefix =
	    st->o->commit_message_prefix ? st->o->commit_message_prefix : CAE_WORKER_DEFAULT_PREFIX;
	_cleanup_free_ char *subject = cae_worker_commit_subject(st->o->patch_text, st->p);
	if (!subject)
		return NULL;
	_cleanup_free_ char *u = cae__utf8_sanitize(subject, strlen(subject), NULL);
	if (!u)
		return NULL;
	size_t ul = strlen(u);
	size_t chars;
	size_t cut = cae__utf8_prefix_chars(u, ul, CAE_WORKER_COMMIT_SUMMARY_CHARS, &chars);
	char *msg = NULL;
	if (asprintf(&msg, "%s %.*s%s", prefix, (int)cut, u, cut < ul ? "..." : "") < 0)
		return NULL;
	return msg;
}

/* Returns 0 (committed: *hash new), 1 (nothing to commit), or -1 with *error new. */
int cae__wk_auto_commit(wk_state *st, char **hash, char **error)
{
	*hash = NULL;
	*error = NULL;
	wk_outcome oc;
	cae__wk_outcome_init(&oc, 65536);
	_cleanup_(cae__buf_clear) cae_buf resets = {0};
	if (read_drivers(st, &resets, &oc) < 0) {
		*error = strdup(oc.error.data ? oc.error.data : "git config failed");
		cae__wk_outcome_clear(&oc);
		return -1;
	}
	size_t max = PREFIX_MAX + 2 * count_resets(&resets) + 8;
	_cleanup_free_ const char **argv = calloc(max, sizeof(char *));
	if (!argv) {
		*error = strdup("out of memory");
		cae__wk_outcome_clear(&oc);
		return -1;
	}
	size_t k = git_prefix(st, &resets, argv, false);
	argv[k++] = "add";
	argv[k++] = "-A";
	argv[k] = NULL;
	run_in_env(st, argv, st->git_timeout_ms, "git add", &oc);
	if (!oc.success) {
		*error = strdup(oc.error.data ? oc.error.data : "git add failed");
		cae__wk_outcome_clear(&oc);
		return -1;
	}
	cae__wk_outcome_clear(&oc);
	/* nothing staged: nothing to commit (not an error) */
	k = git_prefix(st, &resets, argv, false);
	argv[k++] = "diff";
	argv[k++] = "--cached";
	argv[k++] = "--quiet";
	argv[k++] = "--no-ext-diff";
	argv[k++] = "--no-textconv";
	argv[k] = NULL;
	cae__wk_outcome_init(&oc, 65536);
	run_in_env(st, argv, st->git_timeout_ms, "git diff", &oc);
	bool nothing = oc.success;
	cae__wk_outcome_clear(&oc);
	if (nothing)
		return 1;
	_cleanup_free_ char *msg = commit_message(st);
	if (!msg) {
		*error = strdup("out of memory");
		return -1;
	}
	k = git_prefix(st, &resets, argv, true);
	argv[k++] = "commit";
	argv[k++] = "-m";
	argv[k++] = msg;
	argv[k] = NULL;
	cae__wk_outcome_init(&oc, 65536);
	run_in_env(st, argv, st->git_timeout_ms, "git commit", &oc);
	if (!oc.success) {
		bool none = oc.output.data && (strstr(oc.output.data, "nothing to commit") ||
					       strstr(oc.output.data, "nothing added to commit"));
		if (!none)
			*error = strdup(oc.error.data ? oc.error.data : "git commit failed");
		cae__wk_outcome_clear(&oc);
		return none ? 1 : -1;
	}
	cae__wk_outcome_clear(&oc);
	k = git_prefix(st, &resets, argv, false);
	argv[k++] = "rev-parse";
	argv[k++] = "HEAD";
	argv[k] = NULL;
	cae__wk_outcome_init(&oc, 4096);
	run_in_env(st, argv, st->git_timeout_ms, "git rev-parse", &oc);
	if (!oc.success || !oc.output.data) {
		*error = strdup(oc.error.data ? oc.error.data : "failed to get the commit hash");
		cae__wk_outcome_clear(&oc);
		return -1;
	}
	size_t n = oc.output.len;
	while (n && (oc.output.data[n - 1] == '\n' || oc.output.data[n - 1] == '\r'))
		n--;
	*hash = strndup(oc.output.data, n);
	cae__wk_outcome_clear(&oc);
	return *hash ? 0 : -1;
}
