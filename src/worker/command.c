/* Commands in the environment: shell_command (sh -c, bash when the environment has it,
 * stdout and stderr combined), git_operation (argv, no shell; a commit identity given with -c
 * when the repository has none) and the auto-commit after a run; and cae__wk_run(), how the
 * worker runs any command (these, and the rollback snapshot's tar). */
#include "worker/worker-internal.h"

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

/* Which parts of a commit identity the repository lacks: asked once per run. */
static int identity(wk_state *st)
{
	if (st->identity >= 0)
		return st->identity;
	st->identity = 0;
	static const char *const keys[] = {"user.name", "user.email"};
	for (int i = 0; i < 2; i++) {
		const char *argv[] = {"git", "config", "--get", keys[i], NULL};
		wk_outcome oc;
		cae__wk_outcome_init(&oc, 4096);
		run_in_env(st, argv, st->git_timeout_ms, "git command", &oc);
		if (oc.success && oc.output.len > 1)
			st->identity |= 1 << i;
		cae__wk_outcome_clear(&oc);
	}
	return st->identity;
}

/* "git" plus -c user.name/-c user.email for what is not configured. Returns argv used. */
static size_t git_prefix(wk_state *st, const char **argv, bool commit)
{
	size_t k = 0;
	argv[k++] = "git";
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
	_cleanup_free_ const char **argv = calloc(c->nargs + 12, sizeof(char *));
	if (!argv) {
		cae__wk_fail(oc, "out of memory");
		return;
	}
	bool commit = c->action == CAE_PATCH_GIT_COMMIT;
	size_t k = git_prefix(st, argv, commit);
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
	for (size_t i = 0; i < c->nargs; i++)
		argv[k++] = c->args[i];
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
	case CAE_PATCH_FILE_EDIT:
		break; /* a step of the plan, not a command (execute.c) */
	}
	cae__wk_fail(oc, "not a shell or git command");
}

/* The commit message: prefix, a space, the first non-blank line cut at 80 characters. */
static char *commit_message(wk_state *st)
{
	const char *prefix =
	    st->o->commit_message_prefix ? st->o->commit_message_prefix : CAE_WORKER_DEFAULT_PREFIX;
	cae_buf line;
	cae__buf_init(&line, 4096);
	int r = 0;
	const char *t = st->o->patch_text;
	if (t) {
		while (*t) {
			const char *e = strchr(t, '\n');
			size_t n = e ? (size_t)(e - t) : strlen(t);
			size_t a = 0;
			while (a < n && (t[a] == ' ' || t[a] == '\t' || t[a] == '\r'))
				a++;
			size_t z = n;
			while (z > a && (t[z - 1] == ' ' || t[z - 1] == '\t' || t[z - 1] == '\r'))
				z--;
			if (z > a) {
				r = cae__buf_append(&line, t + a, MIN(z - a, (size_t)4000));
				break;
			}
			if (!e)
				break;
			t = e + 1;
		}
	}
	if (r == 0 && !line.len && cae_patch_count(st->p)) {
		const cae_patch_command *c = cae_patch_get(st->p, 0);
		r = cae__buf_printf(&line, "%s %s %.300s", cae_patch_type_name(c->type),
				    cae_patch_action_name(c->action), c->target);
	}
	if (r < 0) {
		cae__buf_clear(&line);
		return NULL;
	}
	_cleanup_free_ char *u = cae__utf8_sanitize(line.data ? line.data : "", line.len, NULL);
	cae__buf_clear(&line);
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
	const char *add[] = {"git", "add", "-A", NULL};
	cae__wk_outcome_init(&oc, 65536);
	run_in_env(st, add, st->git_timeout_ms, "git add", &oc);
	if (!oc.success) {
		*error = strdup(oc.error.data ? oc.error.data : "git add failed");
		cae__wk_outcome_clear(&oc);
		return -1;
	}
	cae__wk_outcome_clear(&oc);
	/* nothing staged: nothing to commit (not an error) */
	const char *diff[] = {"git", "diff", "--cached", "--quiet", NULL};
	cae__wk_outcome_init(&oc, 65536);
	run_in_env(st, diff, st->git_timeout_ms, "git diff", &oc);
	bool nothing = oc.success;
	cae__wk_outcome_clear(&oc);
	if (nothing)
		return 1;
	_cleanup_free_ char *msg = commit_message(st);
	if (!msg) {
		*error = strdup("out of memory");
		return -1;
	}
	const char *argv[12];
	size_t k = git_prefix(st, argv, true);
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
	const char *rev[] = {"git", "rev-parse", "HEAD", NULL};
	cae__wk_outcome_init(&oc, 4096);
	run_in_env(st, rev, st->git_timeout_ms, "git rev-parse", &oc);
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
