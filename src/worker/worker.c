/* The patch worker's executor: runs a parsed patch in an environment and builds its result
 * (PatchExecutionResult). See cae/worker.h. */
#include "cae/worker.h"

#include "base/buf.h"
#include "base/macro.h"
#include "base/timeutil.h"
#include "base/utf8.h"
#include "cae/config.h"
#include "cae/policy.h"
#include "worker/worker-internal.h"

#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/banned.h"

DEFINE_TRIVIAL_CLEANUP_FUNC(cae_patch *, cae_patch_free)
DEFINE_TRIVIAL_CLEANUP_FUNC(cae_patch_plan *, cae_patch_plan_free)

#define ERROR_OUTPUT_CHARS 2000 /* of a failed command's output quoted in its error */
#define IDENTITY_NAME "cae-worker"
#define IDENTITY_EMAIL "cae-worker@localhost"

void cae_worker_options_init(cae_worker_options *o)
{
	memset(o, 0, sizeof(*o));
	o->cancel_fd = -1;
}

void cae_worker_options_from_config(cae_worker_options *o, const cae_config *cfg)
{
	cae_worker_options_init(o);
	if (!cfg)
		return;
	o->dry_run = cfg->worker.dry_run;
	o->stop_on_error = cfg->worker.stop_on_error;
	o->rollback = cfg->worker.rollback;
	o->auto_commit = cfg->worker.auto_commit;
	o->commit_message_prefix = cfg->worker.commit_message_prefix;
	if (cfg->worker.command_timeout > 0)
		o->command_timeout_ms = (int64_t)cfg->worker.command_timeout * 1000;
	if (cfg->worker.git_timeout > 0)
		o->git_timeout_ms = (int64_t)cfg->worker.git_timeout * 1000;
}

/* ---------------------------------------------------------------------------------------- */
/* State of one run */

typedef struct run_state {
	cae_backend *b;
	const char *uuid;
	const cae_worker_options *o;
	cae_log *log;
	const cae_patch *p;
	cae_env_info info;
	const char *root; /* the workspace as commands see it */
	bool host;	  /* files through this host's file system */
	wk_exec_ctx fs_ctx;
	wk_fs *fs;
	size_t max_file, max_output;
	int64_t command_timeout_ms, git_timeout_ms;
	int identity; /* -1 not asked yet; bit 0 name configured, bit 1 email configured */
	json_t *results;
	size_t ok, failed, skipped;
	bool cancelled;
} run_state;

/* What one command did. */
typedef struct outcome {
	bool success;
	cae_buf output;
	cae_buf error;
	int exit_code;
	bool has_exit_code;
	bool timed_out;
} outcome;

static void outcome_init(outcome *oc, size_t max_output)
{
	memset(oc, 0, sizeof(*oc));
	cae_buf_init(&oc->output, max_output);
	cae_buf_init(&oc->error, 16384);
}

static void outcome_clear(outcome *oc)
{
	cae_buf_clear(&oc->output);
	cae_buf_clear(&oc->error);
}

static void fail(outcome *oc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(outcome *oc, const char *fmt, ...)
{
	oc->success = false;
	cae_buf_clear(&oc->error);
	va_list ap;
	va_start(ap, fmt);
	/* the failure is recorded above; its text is capped, and empty when memory ran out */
	DISCARD_RESULT(cae_buf_vprintf(&oc->error, fmt, ap));
	va_end(ap);
}

/* What a successful file edit did, in the command's output. The edit is done and recorded
 * (success): when memory runs out, the report stays short. */
static void report(outcome *oc, const char *fmt, ...) _printf_(2, 3);
static void report(outcome *oc, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	DISCARD_RESULT(cae_buf_vprintf(&oc->output, fmt, ap)); /* best effort: see above */
	va_end(ap);
}

static bool cancel_requested(run_state *st)
{
	if (st->o->cancel_fd < 0)
		return false;
	struct pollfd pfd = {.fd = st->o->cancel_fd, .events = POLLIN};
	return poll(&pfd, 1, 0) > 0;
}

/* A JSON string from bytes (made valid UTF-8, secrets redacted). */
static json_t *clean_string(run_state *st, const char *s, size_t n)
{
	_cleanup_free_ char *u = cae_utf8_sanitize(s ? s : "", s ? n : 0, NULL);
	if (!u)
		return NULL;
	_cleanup_free_ char *r = cae_redact(st->log, u);
	return r ? json_string(r) : NULL;
}

static int rel_path(run_state *st, const char *path, char **rel, cae_error *err)
{
	return cae__wk_path_rel(st->root, path, rel, err);
}

/* ---------------------------------------------------------------------------------------- */
/* file_edit */

static int fs_write(run_state *st, const char *path, const char *data, size_t len, mode_t mode,
		    cae_error *err)
{
	_cleanup_free_ char *rel = NULL;
	int r = rel_path(st, path, &rel, err);
	if (r < 0)
		return r;
	return st->fs->ops->write(st->fs, rel, data, len, mode, err);
}

static int fs_read(run_state *st, const char *path, char **data, size_t *len, mode_t *mode,
		   cae_error *err)
{
	_cleanup_free_ char *rel = NULL;
	int r = rel_path(st, path, &rel, err);
	if (r < 0)
		return r;
	return st->fs->ops->read(st->fs, rel, st->max_file, data, len, mode, err);
}

static int fs_remove(run_state *st, const char *path, cae_error *err)
{
	_cleanup_free_ char *rel = NULL;
	int r = rel_path(st, path, &rel, err);
	if (r < 0)
		return r;
	return st->fs->ops->remove(st->fs, rel, err);
}

/* Same path after normalisation? */
static bool same_path(run_state *st, const char *a, const char *b)
{
	_cleanup_free_ char *ra = NULL, *rb = NULL;
	if (rel_path(st, a, &ra, NULL) < 0 || rel_path(st, b, &rb, NULL) < 0)
		return strcmp(a, b) == 0;
	return strcmp(ra, rb) == 0;
}

/* Applies c->op's hunks to the current content of op->path: *out new. */
static int apply_op(run_state *st, const cae_patch_command *c, char **out, size_t *out_len,
		    mode_t *mode, cae_error *err)
{
	const cae_patch_file_op *op = c->op;
	_cleanup_free_ char *old = NULL;
	size_t old_len = 0;
	int r = fs_read(st, op->path, &old, &old_len, mode, err);
	if (r < 0)
		return r;
	return cae_patch_apply_hunks(old, old_len, op, out, out_len, err);
}

static void exec_file_edit(run_state *st, const cae_patch_command *c, outcome *oc)
{
	cae_error err;
	cae_error_clear(&err);
	int r = 0;
	oc->success = true;
	switch (c->action) {
	case CAE_PATCH_CREATE:
	case CAE_PATCH_UPDATE:
		r = fs_write(st, c->target, c->content, c->content_len, WK_MODE_KEEP, &err);
		if (r == 0)
			report(oc, "File %s written successfully (%zu bytes)", c->target,
			       c->content_len);
		break;
	case CAE_PATCH_APPEND: {
		_cleanup_free_ char *old = NULL;
		size_t old_len = 0;
		r = fs_read(st, c->target, &old, &old_len, NULL, &err);
		if (r == -ENOENT) {
			cae_error_clear(&err);
			r = 0;
		}
		if (r < 0)
			break;
		if (old_len > SIZE_MAX - c->content_len - 1) {
			r = cae_error_set(&err, -EFBIG, "%s: file too large", c->target);
			break;
		}
		_cleanup_free_ char *buf = malloc(old_len + c->content_len + 1);
		if (!buf) {
			r = cae_error_set(&err, -ENOMEM, "out of memory");
			break;
		}
		if (old_len)
			memcpy(buf, old, old_len);
		memcpy(buf + old_len, c->content, c->content_len);
		r = fs_write(st, c->target, buf, old_len + c->content_len, WK_MODE_KEEP, &err);
		if (r == 0)
			report(oc, "Appended %zu bytes to %s", c->content_len, c->target);
		break;
	}
	case CAE_PATCH_DELETE: {
		const char *path = c->op ? c->op->path : c->target;
		if (c->op && c->op->nhunks) {
			/* a unified diff's deletion holds the content: it must still match */
			_cleanup_free_ char *rest = NULL;
			size_t rest_len;
			r = apply_op(st, c, &rest, &rest_len, NULL, &err);
			if (r < 0)
				break;
		}
		r = fs_remove(st, path, &err);
		if (r == 0)
			report(oc, "File %s deleted", path);
		break;
	}
	case CAE_PATCH_PATCH:
	case CAE_PATCH_MOVE: {
		const cae_patch_file_op *op = c->op;
		if (!op) {
			r = cae_error_set(&err, -EINVAL, "%s: no hunks to apply", c->target);
			break;
		}
		_cleanup_free_ char *text = NULL;
		size_t len = 0;
		mode_t mode = 0644;
		r = apply_op(st, c, &text, &len, &mode, &err);
		if (r < 0)
			break;
		bool move = op->move_to && !same_path(st, op->move_to, op->path);
		r = fs_write(st, move ? op->move_to : op->path, text, len,
			     move ? mode : WK_MODE_KEEP, &err);
		if (r == 0 && move)
			r = fs_remove(st, op->path, &err);
		if (r == 0 && move)
			report(oc, "Moved %s to %s (%zu hunk%s applied)", op->path, op->move_to,
			       op->nhunks, op->nhunks == 1 ? "" : "s");
		else if (r == 0)
			report(oc, "Patched %s (%zu hunk%s applied)", op->path, op->nhunks,
			       op->nhunks == 1 ? "" : "s");
		break;
	}
	default:
		r = cae_error_set(&err, -EINVAL, "unknown file_edit action: %s",
				  cae_patch_action_name(c->action));
	}
	if (r < 0)
		fail(oc, "%s", err.message[0] ? err.message : strerror(-r));
}

/* ---------------------------------------------------------------------------------------- */
/* shell_command and git_operation */

/* Quotes the last chars characters of s[0..n) for an error message. */
static void put_tail(cae_buf *b, const char *s, size_t n)
{
	while (n && (s[n - 1] == '\n' || s[n - 1] == '\r'))
		n--;
	if (!n)
		return;
	size_t from = cae_utf8_suffix_chars(s, n, ERROR_OUTPUT_CHARS);
	/* a quote in an error message already recorded: dropped when memory runs out */
	DISCARD_RESULT(
	    cae_buf_printf(b, " (output: %s%.*s)", from ? "…" : "", (int)(n - from), s + from));
}

/* Runs argv in the workspace with the timeout; fills oc. what: "command" or "git command". */
static void run_in_env(run_state *st, const char *const *argv, int64_t timeout_ms, const char *what,
		       outcome *oc)
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
		fail(oc, "%s execution error: %s", what, err.message);
		return;
	}
	/* the output is capped (what does not fit is dropped and recorded); failing to keep
	 * what fits would show the model part of it as all of it */
	r = cae_buf_append(&oc->output, res.out, res.out_len);
	if (r == 0 && res.err_len) {
		if (oc->output.len && oc->output.data[oc->output.len - 1] != '\n')
			r = cae_buf_append(&oc->output, "\n", 1);
		if (r == 0)
			r = cae_buf_append(&oc->output, res.err, res.err_len);
	}
	if (r < 0) {
		fail(oc, "%s output: %s", what, strerror(-r));
		cae_run_result_clear(&res);
		return;
	}
	oc->has_exit_code = true;
	oc->exit_code = res.exit_code;
	oc->timed_out = res.timed_out;
	if (res.cancelled) {
		st->cancelled = true;
		fail(oc, "%s cancelled", what);
	} else if (res.timed_out) {
		oc->exit_code = 124;
		fail(oc, "%s timed out (time limit: %lld seconds)", what,
		     (long long)((timeout_ms + 999) / 1000));
	} else if (res.exit_code != 0) {
		if (res.term_signal)
			fail(oc, "%s failed: killed by signal %d", what, res.term_signal);
		else
			fail(oc, "%s failed: exit status %d", what, res.exit_code);
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

static void exec_shell(run_state *st, const cae_patch_command *c, outcome *oc)
{
	cae_buf script;
	cae_buf_init(&script, CAE_PATCH_MAX_INPUT + 16);
	int r = cae_buf_puts(&script, c->target);
	if (r == 0 && c->content_len)
		r = cae_buf_puts(&script, " ");
	if (r == 0 && c->content_len)
		r = cae_buf_append(&script, c->content, strnlen(c->content, c->content_len));
	if (r < 0) { /* never a part of the command */
		cae_buf_clear(&script);
		fail(oc, "%s", strerror(-r));
		return;
	}
	if (!script.data || !*script.data) {
		cae_buf_clear(&script);
		fail(oc, "empty shell command");
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
			fail(oc, "refused by the command policy: %s", v.reason);
			cae_buf_clear(&script);
			return;
		}
	}
	const char *argv[] = {"sh", "-c", shell_wrapper, "sh", script.data, NULL};
	run_in_env(st, argv, st->command_timeout_ms, "command", oc);
	cae_buf_clear(&script);
}

/* Which parts of a commit identity the repository lacks: asked once per run. */
static int identity(run_state *st)
{
	if (st->identity >= 0)
		return st->identity;
	st->identity = 0;
	static const char *const keys[] = {"user.name", "user.email"};
	for (int i = 0; i < 2; i++) {
		const char *argv[] = {"git", "config", "--get", keys[i], NULL};
		outcome oc;
		outcome_init(&oc, 4096);
		run_in_env(st, argv, st->git_timeout_ms, "git command", &oc);
		if (oc.success && oc.output.len > 1)
			st->identity |= 1 << i;
		outcome_clear(&oc);
	}
	return st->identity;
}

/* "git" plus -c user.name/-c user.email for what is not configured. Returns argv used. */
static size_t git_prefix(run_state *st, const char **argv, bool commit)
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

static void exec_git(run_state *st, const cae_patch_command *c, outcome *oc)
{
	_cleanup_free_ const char **argv = calloc(c->nargs + 12, sizeof(char *));
	if (!argv) {
		fail(oc, "out of memory");
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
		fail(oc, "unknown git_operation action: %s", cae_patch_action_name(c->action));
		return;
	}
	for (size_t i = 0; i < c->nargs; i++)
		argv[k++] = c->args[i];
	_cleanup_free_ char *msg = NULL;
	if (commit) {
		msg = c->content_len ? strndup(c->content, c->content_len)
				     : strdup("Auto-commit by Worker");
		if (!msg) {
			fail(oc, "out of memory");
			return;
		}
		argv[k++] = "-m";
		argv[k++] = msg;
	}
	argv[k] = NULL;
	run_in_env(st, argv, st->git_timeout_ms, "git command", oc);
}

static void exec_command(run_state *st, const cae_patch_command *c, outcome *oc)
{
	switch (c->type) {
	case CAE_PATCH_FILE_EDIT:
		exec_file_edit(st, c, oc);
		return;
	case CAE_PATCH_SHELL_COMMAND:
		exec_shell(st, c, oc);
		return;
	case CAE_PATCH_GIT_OPERATION:
		exec_git(st, c, oc);
		return;
	}
	fail(oc, "unknown command type");
}

/* ---------------------------------------------------------------------------------------- */
/* Results and log events */

static json_t *command_json(const cae_patch_command *c)
{
	json_t *j = cae_patch_command_to_json(c, CAE_WORKER_MAX_COMMAND_JSON);
	json_t *h = j ? json_object_get(j, "hunks") : NULL;
	if (h) {
		json_object_set_new(j, "hunk_count", json_integer((json_int_t)json_array_size(h)));
		json_object_del(j, "hunks");
	}
	return j;
}

/* Appends the result of command i and logs it. */
static void record(run_state *st, size_t i, const cae_patch_command *c, outcome *oc,
		   int64_t duration_ms)
{
	_cleanup_free_ char *target = cae_utf8_sanitize(c->target, strlen(c->target), NULL);
	_cleanup_free_ char *error =
	    oc->error.data ? cae_utf8_sanitize(oc->error.data, oc->error.len, NULL) : NULL;
	json_t *r = json_object();
	json_object_set_new(r, "command", command_json(c));
	json_object_set_new(r, "success", json_boolean(oc->success));
	json_object_set_new(r, "output", clean_string(st, oc->output.data, oc->output.len));
	json_object_set_new(r, "error", clean_string(st, oc->error.data, oc->error.len));
	json_object_set_new(r, "duration", json_integer(duration_ms));
	if (oc->has_exit_code)
		json_object_set_new(r, "exit_code", json_integer(oc->exit_code));
	if (oc->has_exit_code)
		json_object_set_new(r, "timed_out", json_boolean(oc->timed_out));
	if (oc->output.truncated)
		json_object_set_new(r, "output_truncated", json_true());
	json_array_append_new(st->results, r);
	if (oc->success) {
		st->ok++;
		cae_log_fields(st->log, CAE_LOG_INFO, "worker.command_executed",
			       json_pack("{s:I, s:s, s:s, s:s, s:I}", "command_index",
					 (json_int_t)i, "type", cae_patch_type_name(c->type),
					 "action", cae_patch_action_name(c->action), "target",
					 target ? target : "", "duration_ms",
					 (json_int_t)duration_ms),
			       "command executed");
	} else {
		st->failed++;
		cae_log_fields(st->log, CAE_LOG_ERROR, "worker.command_failed",
			       json_pack("{s:I, s:s, s:s, s:s, s:s, s:I}", "command_index",
					 (json_int_t)i, "type", cae_patch_type_name(c->type),
					 "action", cae_patch_action_name(c->action), "target",
					 target ? target : "", "error", error ? error : "",
					 "duration_ms", (json_int_t)duration_ms),
			       "command execution failed");
	}
}

/* Runs command i, records it; returns its success. */
static bool run_one(run_state *st, size_t i, const cae_patch_command *c)
{
	outcome oc;
	outcome_init(&oc, st->max_output);
	int64_t t0 = cae_now_ns();
	exec_command(st, c, &oc);
	int64_t ms = (cae_now_ns() - t0) / 1000000;
	record(st, i, c, &oc, ms);
	bool ok = oc.success;
	outcome_clear(&oc);
	return ok;
}

/* ---------------------------------------------------------------------------------------- */
/* The diff forms: check everything, then write; put back what was written if a write fails */

typedef struct saved {
	char *rel;
	bool existed;
	char *data;
	size_t len;
	mode_t mode;
} saved;

typedef struct journal {
	saved *v;
	size_t n;
} journal;

static void journal_clear(journal *j)
{
	for (size_t i = 0; i < j->n; i++) {
		free(j->v[i].rel);
		free(j->v[i].data);
	}
	free(j->v);
	j->v = NULL;
	j->n = 0;
}

/* Remembers path's current state before the first change to it. */
static int journal_save(run_state *st, journal *j, const char *path, cae_error *err)
{
	_cleanup_free_ char *rel = NULL;
	int r = rel_path(st, path, &rel, err);
	if (r < 0)
		return r;
	for (size_t i = 0; i < j->n; i++)
		if (strcmp(j->v[i].rel, rel) == 0)
			return 0;
	saved s = {.mode = 0644};
	r = st->fs->ops->read(st->fs, rel, st->max_file, &s.data, &s.len, &s.mode, err);
	if (r == -ENOENT) {
		cae_error_clear(err);
		s.existed = false;
	} else if (r < 0) {
		return r;
	} else {
		s.existed = true;
	}
	saved *nv = realloc(j->v, (j->n + 1) * sizeof(*nv));
	if (!nv) {
		free(s.data);
		return cae_error_set(err, -ENOMEM, "out of memory");
	}
	j->v = nv;
	s.rel = TAKE_PTR(rel);
	j->v[j->n++] = s;
	return 0;
}

/* Puts every remembered file back, last first. Returns the number that could not be. */
static size_t journal_revert(run_state *st, journal *j)
{
	size_t bad = 0;
	for (size_t i = j->n; i-- > 0;) {
		saved *s = &j->v[i];
		cae_error e;
		cae_error_clear(&e);
		int r = s->existed
			    ? st->fs->ops->write(st->fs, s->rel, s->data, s->len, s->mode, &e)
			    : st->fs->ops->remove(st->fs, s->rel, &e);
		if (r < 0 && !(r == -ENOENT && !s->existed))
			bad++;
	}
	return bad;
}

static int check_read(void *userdata, const char *path, char **data, size_t *len, cae_error *err)
{
	run_state *st = userdata;
	return fs_read(st, path, data, len, NULL, err);
}

static void exec_step(run_state *st, journal *j, const cae_patch_step *s, outcome *oc)
{
	const cae_patch_command *c = s->command;
	if (s->kind == CAE_PATCH_STEP_RUN || s->deferred) {
		/* after a command: computed now, from the files as they are */
		if (s->kind != CAE_PATCH_STEP_RUN) {
			cae_error err;
			cae_error_clear(&err);
			if (journal_save(st, j, s->path, &err) < 0 ||
			    (s->old_path && journal_save(st, j, s->old_path, &err) < 0)) {
				fail(oc, "%s", err.message);
				return;
			}
		}
		exec_command(st, c, oc);
		return;
	}
	cae_error err;
	cae_error_clear(&err);
	int r = journal_save(st, j, s->path, &err);
	if (r == 0 && s->old_path)
		r = journal_save(st, j, s->old_path, &err);
	oc->success = true;
	switch (s->kind) {
	case CAE_PATCH_STEP_WRITE: {
		if (r < 0)
			break;
		mode_t mode = WK_MODE_KEEP;
		bool move = s->old_path && !same_path(st, s->old_path, s->path);
		if (move && fs_read(st, s->old_path, NULL, NULL, &mode, &err) < 0)
			mode = 0644;
		cae_error_clear(&err);
		r = fs_write(st, s->path, s->data, s->len, mode, &err);
		if (r == 0 && move)
			r = fs_remove(st, s->old_path, &err);
		if (r < 0)
			break;
		if (move)
			report(oc, "Moved %s to %s (%zu bytes)", s->old_path, s->path, s->len);
		else if (c->action == CAE_PATCH_PATCH)
			report(oc, "Patched %s (%zu hunk%s applied, %zu bytes)", s->path,
			       c->op ? c->op->nhunks : 0, c->op && c->op->nhunks == 1 ? "" : "s",
			       s->len);
		else
			report(oc, "File %s written successfully (%zu bytes)", s->path, s->len);
		break;
	}
	case CAE_PATCH_STEP_APPEND:
		if (r == 0) {
			exec_file_edit(st, c, oc);
			return;
		}
		break;
	case CAE_PATCH_STEP_DELETE:
		if (r == 0)
			r = fs_remove(st, s->path, &err);
		if (r == 0)
			report(oc, "File %s deleted", s->path);
		break;
	default:
		r = cae_error_set(&err, -EINVAL, "unexpected step");
	}
	if (r < 0)
		fail(oc, "%s", err.message[0] ? err.message : strerror(-r));
}

/* Whether plan can be staged as one transaction: every step a WRITE, APPEND or DELETE
 * computed in advance (no command to run in between), on a file system that has
 * transactions. */
static bool plan_transactional(run_state *st, const cae_patch_plan *plan)
{
	if (!st->fs->ops->txn_begin)
		return false;
	for (size_t i = 0; i < cae_patch_plan_count(plan); i++) {
		const cae_patch_step *s = cae_patch_plan_step(plan, i);
		if (s->deferred || s->kind == CAE_PATCH_STEP_RUN)
			return false;
	}
	return true;
}

/* The files a transaction has staged so far (what a later APPEND appends to). */
typedef struct staged_file {
	char *rel;
	char *data; /* NULL: removed */
	size_t len;
} staged_file;

typedef struct staged_set {
	staged_file *v;
	size_t n;
} staged_set;

static void staged_set_clear(staged_set *ss)
{
	for (size_t i = 0; i < ss->n; i++) {
		free(ss->v[i].rel);
		free(ss->v[i].data);
	}
	free(ss->v);
	memset(ss, 0, sizeof(*ss));
}

/* Records rel's staged content (data copied; NULL: removed). */
static int staged_set_put(staged_set *ss, const char *rel, const char *data, size_t len)
{
	staged_file *f = NULL;
	for (size_t i = 0; i < ss->n && !f; i++)
		if (strcmp(ss->v[i].rel, rel) == 0)
			f = &ss->v[i];
	if (!f) {
		staged_file *nv = realloc(ss->v, (ss->n + 1) * sizeof(*nv));
		if (!nv)
			return -ENOMEM;
		ss->v = nv;
		f = &ss->v[ss->n];
		memset(f, 0, sizeof(*f));
		f->rel = strdup(rel);
		if (!f->rel)
			return -ENOMEM;
		ss->n++;
	}
	char *copy = NULL;
	if (data) {
		copy = malloc(len + 1);
		if (!copy)
			return -ENOMEM;
		memcpy(copy, data, len);
		copy[len] = '\0';
	}
	free(f->data);
	f->data = copy;
	f->len = len;
	return 0;
}

static const staged_file *staged_set_get(const staged_set *ss, const char *rel)
{
	for (size_t i = 0; i < ss->n; i++)
		if (strcmp(ss->v[i].rel, rel) == 0)
			return &ss->v[i];
	return NULL;
}

/* APPEND as a staged write: the staged or current content plus s->data. */
static int stage_append(run_state *st, staged_set *ss, const char *rel, const cae_patch_step *s,
			cae_error *err)
{
	_cleanup_free_ char *old = NULL;
	size_t old_len = 0;
	const staged_file *f = staged_set_get(ss, rel);
	const char *base = f ? f->data : NULL;
	if (f) {
		old_len = f->data ? f->len : 0;
	} else {
		int r = st->fs->ops->read(st->fs, rel, st->max_file, &old, &old_len, NULL, err);
		if (r == -ENOENT) {
			cae_error_clear(err);
			old_len = 0;
		} else if (r < 0) {
			return r;
		}
		base = old;
	}
	if (old_len > SIZE_MAX - s->len - 1)
		return cae_error_set(err, -EFBIG, "%s: file too large", s->path);
	_cleanup_free_ char *buf = malloc(old_len + s->len + 1);
	if (!buf)
		return cae_error_set(err, -ENOMEM, "out of memory");
	if (old_len)
		memcpy(buf, base, old_len);
	memcpy(buf + old_len, s->data, s->len);
	int r = st->fs->ops->txn_write(st->fs, rel, buf, old_len + s->len, WK_MODE_KEEP, err);
	if (r == 0 && staged_set_put(ss, rel, buf, old_len + s->len) < 0)
		r = cae_error_set(err, -ENOMEM, "out of memory");
	return r;
}

/* Stages step s in the open transaction; fills oc like exec_step. */
static void stage_step(run_state *st, staged_set *ss, const cae_patch_step *s, outcome *oc)
{
	const cae_patch_command *c = s->command;
	cae_error err;
	cae_error_clear(&err);
	_cleanup_free_ char *rel = NULL, *old_rel = NULL;
	int r = rel_path(st, s->path, &rel, &err);
	if (r == 0 && s->old_path)
		r = rel_path(st, s->old_path, &old_rel, &err);
	oc->success = true;
	if (r == 0 && s->kind == CAE_PATCH_STEP_APPEND) {
		r = stage_append(st, ss, rel, s, &err);
		if (r == 0)
			report(oc, "Appended %zu bytes to %s", s->len, s->path);
	} else if (r == 0 && s->kind == CAE_PATCH_STEP_DELETE) {
		const staged_file *f = staged_set_get(ss, rel);
		if (f && !f->data)
			r = cae_error_set(&err, -ENOENT, "%s: no such file or directory", s->path);
		else
			r = st->fs->ops->txn_remove(st->fs, rel, &err);
		if (r == 0 && staged_set_put(ss, rel, NULL, 0) < 0)
			r = cae_error_set(&err, -ENOMEM, "out of memory");
		r = st->fs->ops->txn_remove(st->fs, rel, &err);
		if (r == 0)
			report(oc, "File %s deleted", s->path);
	} else if (r == 0) {
		mode_t mode = WK_MODE_KEEP;
		bool move = old_rel && strcmp(old_rel, rel) != 0;
		if (move &&
		    st->fs->ops->read(st->fs, old_rel, st->max_file, NULL, NULL, &mode, &err) < 0)
			mode = 0644;
		cae_error_clear(&err);
		r = st->fs->ops->txn_write(st->fs, rel, s->data, s->len, mode, &err);
		if (r == 0 && staged_set_put(ss, rel, s->data, s->len) < 0)
			r = cae_error_set(&err, -ENOMEM, "out of memory");
		if (r == 0 && move)
			r = st->fs->ops->txn_remove(st->fs, old_rel, &err);
		if (r == 0 && move && staged_set_put(ss, old_rel, NULL, 0) < 0)
			r = cae_error_set(&err, -ENOMEM, "out of memory");
		if (r == 0 && move)
			report(oc, "Moved %s to %s (%zu bytes)", s->old_path, s->path, s->len);
		else if (r == 0 && c->action == CAE_PATCH_PATCH)
			report(oc, "Patched %s (%zu hunk%s applied, %zu bytes)", s->path,
			       c->op ? c->op->nhunks : 0, c->op && c->op->nhunks == 1 ? "" : "s",
			       s->len);
		else if (r == 0)
			report(oc, "File %s written successfully (%zu bytes)", s->path, s->len);
	}
	if (r < 0)
		fail(oc, "%s", err.message[0] ? err.message : strerror(-r));
}

/* The plan as one transaction: every file staged beside its target, then all renamed (or, on
 * any failure or a crash before the commit record, none). Returns NULL or the error (new). */
static char *run_transaction(run_state *st, const cae_patch_plan *plan)
{
	size_t steps = cae_patch_plan_count(plan);
	cae_error err;
	cae_error_clear(&err);
	if (st->fs->ops->txn_begin(st->fs, &err) < 0) {
		char *m = NULL;
		if (asprintf(&m, "the patch was not applied: %s", err.message) < 0)
			m = NULL;
		return m ? m : strdup("out of memory");
	}
	/* results are recorded once the outcome of the whole is known */
	outcome *ocs = calloc(steps ? steps : 1, sizeof(outcome));
	int64_t *ms = calloc(steps ? steps : 1, sizeof(int64_t));
	if (!ocs || !ms) {
		free(ocs);
		free(ms);
		st->fs->ops->txn_abort(st->fs);
		return strdup("out of memory");
	}
	char *error = NULL;
	size_t done = 0;
	staged_set ss = {0};
	for (; done < steps; done++) {
		if (cancel_requested(st))
			st->cancelled = true;
		if (st->cancelled)
			break;
		const cae_patch_step *s = cae_patch_plan_step(plan, done);
		outcome_init(&ocs[done], st->max_output);
		int64_t t0 = cae_now_ns();
		stage_step(st, &ss, s, &ocs[done]);
		ms[done] = (cae_now_ns() - t0) / 1000000;
		if (!ocs[done].success) {
			if (asprintf(&error,
				     "command %zu failed: %s; nothing was changed (the patch is "
				     "applied all or nothing)",
				     done + 1,
				     ocs[done].error.data ? ocs[done].error.data : "") < 0)
				error = NULL;
			if (!error)
				error = strdup("a command failed");
			done++;
			break;
		}
	}
	if (error || st->cancelled) {
		st->fs->ops->txn_abort(st->fs);
		if (!error)
			error = strdup("cancelled; nothing was changed");
	} else if (st->fs->ops->txn_commit(st->fs, &err) < 0) {
		/* the file system's message says what state the files are in */
		error = strdup(err.message[0] ? err.message : "the patch could not be applied");
	}
	staged_set_clear(&ss);
	for (size_t i = 0; i < done; i++) {
		const cae_patch_step *s = cae_patch_plan_step(plan, i);
		record(st, s->index, s->command, &ocs[i], ms[i]);
		outcome_clear(&ocs[i]);
	}
	st->skipped += steps - done;
	free(ocs);
	free(ms);
	return error;
}

/* Returns NULL on success, else the patch-level error (new string). */
static char *run_atomic(run_state *st)
{
	const cae_patch *p = st->p;
	size_t n = cae_patch_count(p);
	/* every path first, lexically: nothing is written when one is refused */
	for (size_t i = 0; i < n; i++) {
		const cae_patch_command *c = cae_patch_get(p, i);
		if (c->type != CAE_PATCH_FILE_EDIT)
			continue;
		const char *paths[] = {c->op ? c->op->path : c->target,
				       c->op ? c->op->move_to : NULL};
		for (size_t k = 0; k < 2; k++) {
			_cleanup_free_ char *rel = NULL;
			cae_error e;
			cae_error_clear(&e);
			if (paths[k] && rel_path(st, paths[k], &rel, &e) < 0) {
				char *m = NULL;
				if (asprintf(&m, "command %zu: %s", i + 1, e.message) < 0)
					m = NULL;
				return m ? m : strdup("out of memory");
			}
		}
	}
	cae_patch_fs pfs = {.read = check_read, .userdata = st};
	_cleanup_(cae_patch_plan_freep) cae_patch_plan *plan = NULL;
	cae_error err;
	cae_error_clear(&err);
	if (cae_patch_check(p, &pfs, &plan, &err) < 0)
		return strdup(err.message[0] ? err.message : "the patch does not apply");
	if (plan_transactional(st, plan))
		return run_transaction(st, plan);
	journal j = {0};
	char *error = NULL;
	size_t steps = cae_patch_plan_count(plan);
	for (size_t i = 0; i < steps; i++) {
		const cae_patch_step *s = cae_patch_plan_step(plan, i);
		if (cancel_requested(st))
			st->cancelled = true;
		if (st->cancelled) {
			st->skipped += steps - i;
			break;
		}
		outcome oc;
		outcome_init(&oc, st->max_output);
		int64_t t0 = cae_now_ns();
		exec_step(st, &j, s, &oc);
		record(st, s->index, s->command, &oc, (cae_now_ns() - t0) / 1000000);
		bool ok = oc.success;
		if (!ok) {
			size_t bad = journal_revert(st, &j);
			if (asprintf(&error, "command %zu failed: %s; %s", i + 1,
				     oc.error.data ? oc.error.data : "",
				     bad ? "some files written before it could not be put back"
					 : "every file written before it was put back: nothing "
					   "was changed") < 0)
				error = NULL;
			st->skipped += steps - i - 1;
			outcome_clear(&oc);
			if (!error)
				error = strdup("a command failed");
			break;
		}
		outcome_clear(&oc);
	}
	if (!error && st->cancelled) {
		size_t bad = journal_revert(st, &j);
		error = strdup(bad ? "cancelled; some files written before could not be put back"
				   : "cancelled; every file written before was put back: nothing "
				     "was changed");
	}
	journal_clear(&j);
	return error;
}

/* ---------------------------------------------------------------------------------------- */
/* Auto-commit */

/* The commit message: prefix, a space, the first non-blank line cut at 80 characters. */
static char *commit_message(run_state *st)
{
	const char *prefix =
	    st->o->commit_message_prefix ? st->o->commit_message_prefix : CAE_WORKER_DEFAULT_PREFIX;
	cae_buf line;
	cae_buf_init(&line, 4096);
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
				r = cae_buf_append(&line, t + a, MIN(z - a, (size_t)4000));
				break;
			}
			if (!e)
				break;
			t = e + 1;
		}
	}
	if (r == 0 && !line.len && cae_patch_count(st->p)) {
		const cae_patch_command *c = cae_patch_get(st->p, 0);
		r = cae_buf_printf(&line, "%s %s %.300s", cae_patch_type_name(c->type),
				   cae_patch_action_name(c->action), c->target);
	}
	if (r < 0) {
		cae_buf_clear(&line);
		return NULL;
	}
	_cleanup_free_ char *u = cae_utf8_sanitize(line.data ? line.data : "", line.len, NULL);
	cae_buf_clear(&line);
	if (!u)
		return NULL;
	size_t ul = strlen(u);
	size_t chars;
	size_t cut = cae_utf8_prefix_chars(u, ul, CAE_WORKER_COMMIT_SUMMARY_CHARS, &chars);
	char *msg = NULL;
	if (asprintf(&msg, "%s %.*s%s", prefix, (int)cut, u, cut < ul ? "..." : "") < 0)
		return NULL;
	return msg;
}

/* Returns 0 (committed: *hash new), 1 (nothing to commit), or -1 with *error new. */
static int auto_commit(run_state *st, char **hash, char **error)
{
	*hash = NULL;
	*error = NULL;
	outcome oc;
	const char *add[] = {"git", "add", "-A", NULL};
	outcome_init(&oc, 65536);
	run_in_env(st, add, st->git_timeout_ms, "git add", &oc);
	if (!oc.success) {
		*error = strdup(oc.error.data ? oc.error.data : "git add failed");
		outcome_clear(&oc);
		return -1;
	}
	outcome_clear(&oc);
	/* nothing staged: nothing to commit (not an error) */
	const char *diff[] = {"git", "diff", "--cached", "--quiet", NULL};
	outcome_init(&oc, 65536);
	run_in_env(st, diff, st->git_timeout_ms, "git diff", &oc);
	bool nothing = oc.success;
	outcome_clear(&oc);
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
	outcome_init(&oc, 65536);
	run_in_env(st, argv, st->git_timeout_ms, "git commit", &oc);
	if (!oc.success) {
		bool none = oc.output.data && (strstr(oc.output.data, "nothing to commit") ||
					       strstr(oc.output.data, "nothing added to commit"));
		if (!none)
			*error = strdup(oc.error.data ? oc.error.data : "git commit failed");
		outcome_clear(&oc);
		return none ? 1 : -1;
	}
	outcome_clear(&oc);
	const char *rev[] = {"git", "rev-parse", "HEAD", NULL};
	outcome_init(&oc, 4096);
	run_in_env(st, rev, st->git_timeout_ms, "git rev-parse", &oc);
	if (!oc.success || !oc.output.data) {
		*error = strdup(oc.error.data ? oc.error.data : "failed to get the commit hash");
		outcome_clear(&oc);
		return -1;
	}
	size_t n = oc.output.len;
	while (n && (oc.output.data[n - 1] == '\n' || oc.output.data[n - 1] == '\r'))
		n--;
	*hash = strndup(oc.output.data, n);
	outcome_clear(&oc);
	return *hash ? 0 : -1;
}

/* ---------------------------------------------------------------------------------------- */
/* The run */

static json_t *warnings_json(const cae_patch *p)
{
	json_t *a = json_array();
	for (size_t i = 0; i < cae_patch_warning_count(p); i++)
		json_array_append_new(a, json_string(cae_patch_warning(p, i)));
	return a;
}

static void log_start(run_state *st, bool dry_run)
{
	const char *text = st->o->patch_text;
	_cleanup_free_ char *fallback = NULL;
	if (!text) {
		json_t *j = cae_patch_to_json(st->p);
		fallback = j ? json_dumps(json_object_get(j, "commands"), JSON_COMPACT) : NULL;
		json_decref(j);
		text = fallback ? fallback : "";
	}
	size_t tl = strlen(text);
	_cleanup_free_ char *clean =
	    cae_utf8_sanitize(text, MIN(tl, (size_t)CAE_LOG_MAX_STRING), NULL);
	text = clean ? clean : "";
	cae_log_fields(st->log, CAE_LOG_INFO, "worker.patch_execution_start",
		       json_pack("{s:s, s:s, s:s, s:I, s:b, s:s, s:s}", "patch", text,
				 "session_key", st->o->session_key ? st->o->session_key : st->uuid,
				 "format", cae_patch_format_name(cae_patch_get_format(st->p)),
				 "commands", (json_int_t)cae_patch_count(st->p), "dry_run", dry_run,
				 "backend", cae_backend_name(st->b), "files",
				 st->host ? "host" : "environment"),
		       "patch execution start");
}

static void set_summary(json_t *out, run_state *st, bool rolled_back)
{
	char summary[256];
	int n = snprintf(summary, sizeof(summary), "commands: %zu, succeeded: %zu, failed: %zu",
			 cae_patch_count(st->p), st->ok, st->failed);
	if (st->skipped && n > 0 && (size_t)n < sizeof(summary))
		n += snprintf(summary + n, sizeof(summary) - (size_t)n, ", not run: %zu",
			      st->skipped);
	if (rolled_back && n > 0 && (size_t)n < sizeof(summary))
		snprintf(summary + n, sizeof(summary) - (size_t)n,
			 "; the workspace was rolled back");
	json_object_set_new(out, "summary", json_string(summary));
}

static int dry_run(run_state *st, json_t *out)
{
	const cae_patch *p = st->p;
	log_start(st, true);
	_cleanup_free_ char *plan_text = cae_patch_plan_text(p);
	cae_patch_fs pfs = {.read = check_read, .userdata = st};
	cae_patch_plan *plan = NULL;
	cae_error err;
	cae_error_clear(&err);
	int r = cae_patch_check(p, &pfs, &plan, &err);
	cae_patch_plan_free(plan);
	size_t n = cae_patch_count(p);
	char summary[160];
	snprintf(summary, sizeof(summary), "dry run: %zu command%s planned, nothing changed", n,
		 n == 1 ? "" : "s");
	json_object_set_new(out, "success", json_boolean(r == 0));
	json_object_set_new(out, "dry_run", json_true());
	json_object_set_new(out, "executed_cmds", json_integer(0));
	json_object_set_new(out, "failed_cmds", json_integer(0));
	json_object_set_new(out, "skipped_cmds", json_integer((json_int_t)n));
	json_object_set_new(out, "summary", json_string(summary));
	json_object_set_new(out, "plan",
			    clean_string(st, plan_text, plan_text ? strlen(plan_text) : 0));
	json_object_set_new(out, "patch", cae_patch_to_json(p));
	if (r < 0) {
		json_object_set_new(out, "error",
				    clean_string(st, err.message, strlen(err.message)));
		cae_log_fields(st->log, CAE_LOG_ERROR, "worker.patch_execution_error",
			       json_pack("{s:s, s:b}", "error", err.message, "dry_run", 1),
			       "the patch would not apply");
	}
	cae_log_fields(st->log, r == 0 ? CAE_LOG_INFO : CAE_LOG_ERROR,
		       "worker.patch_execution_complete",
		       json_pack("{s:b, s:i, s:i, s:s, s:b}", "success", r == 0, "executed_cmds", 0,
				 "failed_cmds", 0, "summary", summary, "dry_run", 1),
		       "dry run complete");
	return 0;
}

static void rollback(run_state *st, wk_snapshot *snap, json_t *out, bool *rolled_back)
{
	cae_error err;
	cae_error_clear(&err);
	int r = cae__wk_snapshot_restore(snap, &err);
	*rolled_back = r == 0;
	json_object_set_new(out, "rolled_back", json_boolean(r == 0));
	if (r < 0)
		json_object_set_new(out, "rollback_error",
				    clean_string(st, err.message, strlen(err.message)));
	cae_log_fields(
	    st->log, r == 0 ? CAE_LOG_WARN : CAE_LOG_ERROR, "worker.rollback",
	    json_pack("{s:b, s:s?}", "restored", r == 0, "error", r < 0 ? err.message : NULL),
	    r == 0 ? "the workspace was restored to its state before the patch"
		   : "the workspace could not be restored");
}

static int execute(run_state *st, json_t *out, cae_error *err)
{
	const cae_patch *p = st->p;
	const cae_worker_options *o = st->o;
	_cleanup_free_ char *patch_error = NULL;
	wk_snapshot *snap = NULL;
	/* The diff forms and, with rollback, a patch of file edits only are one transaction
	 * (on this host or through commands): all or nothing, also across a crash, without a
	 * snapshot. */
	bool files_only = true;
	for (size_t i = 0; i < cae_patch_count(p); i++)
		files_only = files_only && cae_patch_get(p, i)->type == CAE_PATCH_FILE_EDIT;
	bool transactional =
	    st->fs->ops->txn_begin && (cae_patch_is_atomic(p) || (o->rollback && files_only));
	if (o->rollback && !transactional) {
		int r = cae__wk_snapshot_take(&st->fs_ctx, st->root,
					      st->host ? st->info.host_path : NULL, &snap, err);
		if (r < 0)
			return r;
	}
	log_start(st, false);
	size_t n = cae_patch_count(p);
	bool stop_on_error = o->stop_on_error || o->rollback;
	bool failed = false;
	bool rolled_back = false;
	if (cae_patch_is_atomic(p) || transactional) {
		patch_error = run_atomic(st);
		failed = patch_error != NULL;
		if (failed && st->ok + st->failed == 0)
			st->skipped = n;
		/* nothing was changed: for a command form with rollback, that is the rollback */
		if (failed && o->rollback && !cae_patch_is_atomic(p)) {
			rolled_back = true;
			json_object_set_new(out, "rolled_back", json_true());
		}
	} else {
		for (size_t i = 0; i < n; i++) {
			if (cancel_requested(st))
				st->cancelled = true;
			if (st->cancelled || (failed && stop_on_error)) {
				st->skipped = n - i;
				break;
			}
			if (!run_one(st, i, cae_patch_get(p, i)))
				failed = true;
		}
		if (st->cancelled)
			patch_error = strdup("cancelled: the remaining commands were not run");
	}
	if (snap && (failed || st->cancelled))
		rollback(st, snap, out, &rolled_back);
	cae__wk_snapshot_free(snap);

	bool success = !failed && !st->cancelled && st->failed == 0;
	json_object_set_new(out, "success", json_boolean(success));
	json_object_set_new(out, "executed_cmds", json_integer((json_int_t)st->ok));
	json_object_set_new(out, "failed_cmds", json_integer((json_int_t)st->failed));
	json_object_set_new(out, "skipped_cmds", json_integer((json_int_t)st->skipped));
	json_object_set_new(out, "results", json_incref(st->results));
	set_summary(out, st, rolled_back);
	if (patch_error) {
		json_object_set_new(out, "error",
				    clean_string(st, patch_error, strlen(patch_error)));
		cae_log_fields(st->log, CAE_LOG_ERROR, "worker.patch_execution_error",
			       json_pack("{s:s}", "error", patch_error),
			       "the patch was not applied");
	}

	/* auto-commit: after at least one success, never after a rollback */
	if (o->auto_commit && st->ok > 0 && !rolled_back && !st->cancelled) {
		_cleanup_free_ char *hash = NULL, *cerr = NULL;
		int r = auto_commit(st, &hash, &cerr);
		if (r == 0) {
			json_object_set_new(out, "git_commit", json_string(hash));
			json_object_set_new(out, "auto_commit", json_string("committed"));
			cae_log_fields(st->log, CAE_LOG_INFO, "worker.auto_commit_success",
				       json_pack("{s:s}", "commit", hash), "auto-commit success");
		} else if (r == 1) {
			json_object_set_new(out, "auto_commit", json_string("nothing_to_commit"));
			cae_log_fields(
			    st->log, CAE_LOG_WARN, "worker.auto_commit_success",
			    json_pack("{s:s, s:b}", "commit", "", "nothing_to_commit", 1),
			    "auto-commit: nothing to commit");
		} else {
			json_object_set_new(out, "auto_commit", json_string("failed"));
			json_object_set_new(out, "auto_commit_error",
					    clean_string(st, cerr, cerr ? strlen(cerr) : 0));
			cae_log_fields(st->log, CAE_LOG_WARN, "worker.auto_commit_failed",
				       json_pack("{s:s}", "error", cerr ? cerr : ""),
				       "auto-commit failed");
		}
	}
	cae_log_fields(st->log, success ? CAE_LOG_INFO : CAE_LOG_ERROR,
		       "worker.patch_execution_complete",
		       json_pack("{s:b, s:I, s:I, s:O}", "success", success, "executed_cmds",
				 (json_int_t)st->ok, "failed_cmds", (json_int_t)st->failed,
				 "summary", json_object_get(out, "summary")),
		       "patch execution complete");
	return 0;
}

int cae_worker_run(cae_backend *b, const char *task_uuid, const cae_patch *p,
		   const cae_worker_options *o, cae_log *log, json_t **result, cae_error *err)
{
	*result = NULL;
	cae_worker_options defaults;
	if (!o) {
		cae_worker_options_init(&defaults);
		o = &defaults;
	}
	if (!b || !task_uuid || !p)
		return cae_error_set(err, -EINVAL, "no backend, task or patch");
	run_state st = {
	    .b = b,
	    .uuid = task_uuid,
	    .o = o,
	    .log = log,
	    .p = p,
	    .identity = -1,
	    .max_file = o->max_file ? o->max_file : CAE_WORKER_DEFAULT_MAX_FILE,
	    .max_output = o->max_output ? o->max_output : CAE_WORKER_DEFAULT_MAX_OUTPUT,
	    .command_timeout_ms = o->command_timeout_ms > 0 ? o->command_timeout_ms
							    : CAE_WORKER_DEFAULT_COMMAND_TIMEOUT_MS,
	    .git_timeout_ms =
		o->git_timeout_ms > 0 ? o->git_timeout_ms : CAE_WORKER_DEFAULT_GIT_TIMEOUT_MS,
	};
	if (st.max_file > CAE_PATCH_MAX_FILE)
		st.max_file = CAE_PATCH_MAX_FILE;
	int r = cae_backend_info(b, task_uuid, &st.info, err);
	if (r < 0)
		return r;
	if (!st.info.workspace_path) {
		cae_env_info_clear(&st.info);
		return cae_error_set(err, -EINVAL, "environment %s has no workspace path",
				     task_uuid);
	}
	st.root = st.info.workspace_path;
	switch (o->fs) {
	case CAE_WORKER_FS_HOST:
		if (!st.info.host_path) {
			cae_env_info_clear(&st.info);
			return cae_error_set(err, -EINVAL,
					     "environment %s is not on this host: its files can "
					     "only be reached through commands",
					     task_uuid);
		}
		st.host = true;
		break;
	case CAE_WORKER_FS_ENV:
		st.host = false;
		break;
	default:
		st.host = st.info.host_path != NULL;
	}
	st.fs_ctx = (wk_exec_ctx){
	    .backend = b,
	    .task_uuid = task_uuid,
	    .timeout_ms = st.command_timeout_ms,
	    .cancel_fd = o->cancel_fd,
	};
	r = st.host ? cae__wk_fs_host_new(st.info.host_path, &st.fs, err)
		    : cae__wk_fs_env_new(&st.fs_ctx, st.root, &st.fs, err);
	_cleanup_(json_decrefp) json_t *out = json_object();
	st.results = json_array();
	if (r == 0 && (!out || !st.results))
		r = cae_error_set(err, -ENOMEM, "out of memory");
	if (r == 0) {
		json_object_set_new(out, "format",
				    json_string(cae_patch_format_name(cae_patch_get_format(p))));
		json_object_set_new(out, "warnings", warnings_json(p));
		r = o->dry_run ? dry_run(&st, out) : execute(&st, out, err);
	}
	if (r == 0 && o->dry_run)
		json_object_set_new(out, "results", json_incref(st.results));
	json_decref(st.results);
	cae__wk_fs_free(st.fs);
	cae_env_info_clear(&st.info);
	if (r < 0)
		return r;
	*result = TAKE_PTR(out);
	return 0;
}

int cae_worker_recover(cae_backend *b, const char *task_uuid, cae_error *err)
{
	cae_env_info info;
	int r = cae_backend_info(b, task_uuid, &info, err);
	if (r < 0)
		return r;
	wk_fs *fs = NULL;
	if (info.host_path) {
		r = cae__wk_fs_host_new(info.host_path, &fs, err);
		cae__wk_fs_free(TAKE_PTR(fs));
	}
	/* and the environment's own journal (a local environment has one when a patch ran
	 * with fs=env) */
	if (r == 0 && info.workspace_path) {
		wk_exec_ctx ctx = {
		    .backend = b,
		    .task_uuid = task_uuid,
		    .timeout_ms = CAE_WORKER_DEFAULT_GIT_TIMEOUT_MS,
		    .cancel_fd = -1,
		};
		r = cae__wk_fs_env_new(&ctx, info.workspace_path, &fs, err);
		cae__wk_fs_free(fs);
	}
	cae_env_info_clear(&info);
	return r;
}

int cae_worker_run_text(cae_backend *b, const char *task_uuid, const char *text, size_t len,
			const cae_worker_options *o, cae_log *log, json_t **result, cae_error *err)
{
	*result = NULL;
	cae_worker_options opts;
	if (o)
		opts = *o;
	else
		cae_worker_options_init(&opts);
	_cleanup_(cae_patch_freep) cae_patch *p = NULL;
	int r = cae_patch_parse(text, len, &p, err);
	if (r < 0) {
		cae_error_prefix(err, "patch parse error");
		cae_log_fields(log, CAE_LOG_ERROR, "worker.patch_execution_error",
			       json_pack("{s:s, s:s}", "error", err ? err->message : "",
					 "session_key",
					 opts.session_key ? opts.session_key
					 : task_uuid	  ? task_uuid
							  : ""),
			       "patch parse error");
		return r;
	}
	for (size_t i = 0; i < cae_patch_warning_count(p); i++)
		cae_log_fields(log, CAE_LOG_WARN, "worker.patch_warning",
			       json_pack("{s:s}", "warning", cae_patch_warning(p, i)), "%s",
			       cae_patch_warning(p, i));
	_cleanup_free_ char *copy = NULL;
	if (!opts.patch_text) {
		copy = strndup(text, len);
		if (!copy)
			return cae_error_set(err, -ENOMEM, "out of memory");
		opts.patch_text = copy;
	}
	return cae_worker_run(b, task_uuid, p, &opts, log, result, err);
}

/* ---------------------------------------------------------------------------------------- */
/* Rendering */

/* The rendering is whole or nothing (NULL): every append's result is kept with r |= (a
 * failed one leaves r negative), and checked at the end. */

/* The target on one line: its first line, "…" when there is more or it is long. */
static int put_target(cae_buf *b, const char *t)
{
	const char *nl = strchr(t, '\n');
	size_t n = nl ? (size_t)(nl - t) : strlen(t);
	size_t cut = cae_utf8_prefix_chars(t, n, 200, NULL);
	int r = cae_buf_append(b, t, cut);
	if (cut < n || nl)
		r |= cae_buf_puts(b, " …");
	return r;
}

/* Appends text with every line after the first indented by indent. */
static int put_indented(cae_buf *b, const char *text, const char *indent)
{
	int r = 0;
	for (const char *s = text; *s;) {
		const char *nl = strchr(s, '\n');
		size_t n = nl ? (size_t)(nl - s) : strlen(s);
		if (s != text)
			r |= cae_buf_puts(b, indent);
		r |= cae_buf_append(b, s, n);
		if (!nl)
			break;
		r |= cae_buf_puts(b, "\n");
		s = nl + 1;
	}
	return r;
}

char *cae_worker_render(const json_t *result)
{
	cae_buf b;
	cae_buf_init(&b, (size_t)64 << 20);
	int ret = 0;
	const char *summary = json_string_value(json_object_get(result, "summary"));
	ret |= cae_buf_puts(&b, summary ? summary : "");
	ret |= cae_buf_puts(&b, "\n");
	if (json_is_true(json_object_get(result, "dry_run"))) {
		const char *plan = json_string_value(json_object_get(result, "plan"));
		if (plan && *plan) {
			ret |= cae_buf_puts(&b, "\n");
			ret |= cae_buf_puts(&b, plan);
		}
	}
	json_t *results = json_object_get(result, "results");
	if (json_array_size(results))
		ret |= cae_buf_puts(&b, "\n");
	size_t i;
	json_t *r;
	json_array_foreach(results, i, r)
	{
		json_t *cmd = json_object_get(r, "command");
		const char *type = json_string_value(json_object_get(cmd, "type"));
		const char *action = json_string_value(json_object_get(cmd, "action"));
		const char *target = json_string_value(json_object_get(cmd, "target"));
		bool ok = json_is_true(json_object_get(r, "success"));
		ret |= cae_buf_printf(&b, "%s [%zu] %s %s ", ok ? "✓" : "✗", i + 1,
				      type ? type : "", action ? action : "");
		ret |= put_target(&b, target ? target : "");
		ret |= cae_buf_printf(
		    &b, " (%lldms)", (long long)json_integer_value(json_object_get(r, "duration")));
		const char *e = json_string_value(json_object_get(r, "error"));
		if (e && *e) {
			ret |= cae_buf_puts(&b, "\n    error: ");
			ret |= put_indented(&b, e, "    ");
		}
		ret |= cae_buf_puts(&b, "\n");
	}
	const char *hash = json_string_value(json_object_get(result, "git_commit"));
	const char *ac = json_string_value(json_object_get(result, "auto_commit"));
	const char *ace = json_string_value(json_object_get(result, "auto_commit_error"));
	bool tail = hash || (ac && strcmp(ac, "committed") != 0) ||
		    json_object_get(result, "rolled_back") || json_object_get(result, "error");
	if (tail)
		ret |= cae_buf_puts(&b, "\n");
	if (hash)
		ret |= cae_buf_printf(&b, "git commit: %s\n", hash);
	else if (ac && strcmp(ac, "nothing_to_commit") == 0)
		ret |= cae_buf_puts(&b, "git commit: nothing to commit\n");
	else if (ac && strcmp(ac, "failed") == 0)
		ret |= cae_buf_printf(&b, "git commit failed: %s\n", ace ? ace : "");
	json_t *rb = json_object_get(result, "rolled_back");
	if (json_is_true(rb))
		ret |=
		    cae_buf_puts(&b, "rolled back: the workspace was restored to its state before "
				     "the patch\n");
	else if (rb) {
		const char *re = json_string_value(json_object_get(result, "rollback_error"));
		ret |= cae_buf_printf(&b, "rollback failed: %s\n", re ? re : "");
	}
	const char *err = json_string_value(json_object_get(result, "error"));
	if (err) {
		ret |= cae_buf_puts(&b, "error: ");
		ret |= put_indented(&b, err, "    ");
		ret |= cae_buf_puts(&b, "\n");
	}
	if (ret < 0) {
		cae_buf_clear(&b);
		return NULL;
	}
	return cae_buf_steal(&b, NULL);
}
