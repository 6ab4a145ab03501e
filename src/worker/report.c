/* What a run reports: each command's outcome and its entry in the result's "results", the
 * worker.command_executed / worker.command_failed events, the parser's warnings, the start
 * event and the summary line. Every string is made valid UTF-8 with the log's secrets
 * redacted. */
#include "worker/worker-internal.h"

#include "base/macro.h"
#include "base/utf8.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/banned.h"

void cae__wk_outcome_init(wk_outcome *oc, size_t max_output)
{
	memset(oc, 0, sizeof(*oc));
	cae__buf_init(&oc->output, max_output);
	cae__buf_init(&oc->error, 16384);
}

void cae__wk_outcome_clear(wk_outcome *oc)
{
	cae__buf_clear(&oc->output);
	cae__buf_clear(&oc->error);
}

void cae__wk_fail(wk_outcome *oc, const char *fmt, ...)
{
	oc->success = false;
	cae__buf_clear(&oc->error);
	va_list ap;
	va_start(ap, fmt);
	/* the failure is recorded above; its text is capped, and empty when memory ran out */
	DISCARD_RESULT(cae__buf_vprintf(&oc->error, fmt, ap));
	va_end(ap);
}

void cae__wk_report(wk_outcome *oc, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	/* best effort: see worker-internal.h */
	DISCARD_RESULT(cae__buf_vprintf(&oc->output, fmt, ap));
	va_end(ap);
}

/* A JSON string from bytes (made valid UTF-8, secrets redacted). */
json_t *cae__wk_clean_string(const wk_state *st, const char *s, size_t n)
{
	_cleanup_free_ char *u = cae__utf8_sanitize(s ? s : "", s ? n : 0, NULL);
	if (!u)
		return NULL;
	_cleanup_free_ char *r = cae_redact(st->log, u);
	return r ? json_string(r) : NULL;
}

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
void cae__wk_record(wk_state *st, size_t i, const cae_patch_command *c, const wk_outcome *oc,
		    int64_t duration_ms)
{
	_cleanup_free_ char *target = cae__utf8_sanitize(c->target, strlen(c->target), NULL);
	_cleanup_free_ char *error =
	    oc->error.data ? cae__utf8_sanitize(oc->error.data, oc->error.len, NULL) : NULL;
	json_t *r = json_object();
	json_object_set_new(r, "command", command_json(c));
	json_object_set_new(r, "success", json_boolean(oc->success));
	json_object_set_new(r, "output", cae__wk_clean_string(st, oc->output.data, oc->output.len));
	json_object_set_new(r, "error", cae__wk_clean_string(st, oc->error.data, oc->error.len));
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

json_t *cae__wk_warnings_json(const cae_patch *p)
{
	json_t *a = json_array();
	for (size_t i = 0; i < cae_patch_warning_count(p); i++)
		json_array_append_new(a, json_string(cae_patch_warning(p, i)));
	return a;
}

void cae__wk_log_start(const wk_state *st, bool dry_run)
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
	    cae__utf8_sanitize(text, MIN(tl, (size_t)CAE_LOG_MAX_STRING), NULL);
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

void cae__wk_set_summary(json_t *out, const wk_state *st, bool rolled_back)
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
