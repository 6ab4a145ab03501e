/* apply_patch: the patch worker (src/worker) in the current environment; its definition and
 * its call. */
#include "tools/tools-internal.h"

#include "base/macro.h"
#include "cae/patch.h"
#include "cae/worker.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/banned.h"

bool cae__tool_patch_enabled(const cae_config *cfg)
{
	return cfg->worker.enabled;
}

json_t *cae__tool_apply_patch_definition(void)
{
	json_t *f = cae__tool_function(
	    "apply_patch",
	    "Apply a patch to the workspace. Accepts a JSON array of commands "
	    "({type: file_edit|shell_command|git_operation, action, target, content}), "
	    "Markdown with fenced blocks (```lang:path for a file's new content, ```bash for "
	    "a command, ```git for git add/commit), the `*** Begin Patch` format, or a unified "
	    "diff. Paths are relative to the workspace. The diff forms apply all or nothing; "
	    "the other forms run command by command and go on after a failure unless "
	    "stop_on_error. Returns what each command did (✓/✗ per command).",
	    json_pack(
		"{s:s, s:{s:{s:s, s:[{s:s}, {s:s, s:{s:s}}]}, s:{s:s, s:s}, s:{s:s, s:s}, "
		"s:{s:s, s:s}, s:{s:s, s:s}}, s:[s]}",
		"type", "object", "properties", "patch", "description",
		"The patch text (or the commands as a JSON array).", "anyOf", "type", "string",
		"type", "array", "items", "type", "object", "dry_run", "type", "boolean",
		"description", "Only check the patch and show the plan; change nothing.",
		"stop_on_error", "type", "boolean", "description",
		"Stop at the first failing command.", "rollback", "type", "boolean", "description",
		"On a failure, restore the workspace exactly as it was before the patch.",
		"auto_commit", "type", "boolean", "description",
		"Commit every change afterwards (git add -A; git commit).", "required", "patch"));
	/* The patch worker's bounds: in the description, and the commands form's in the schema
	 * too. */
	json_t *patch = json_object_get(
	    json_object_get(json_object_get(f, "parameters"), "properties"), "patch");
	json_object_set_new(patch, "description",
			    json_sprintf("The patch text (or the commands as a JSON array). At "
					 "most %zu MiB of text, with lines of at most %zu MiB, "
					 "and at most %d commands.",
					 CAE_PATCH_MAX_INPUT >> 20, CAE_PATCH_MAX_LINE >> 20,
					 CAE_PATCH_MAX_COMMANDS));
	json_object_set_new(json_array_get(json_object_get(patch, "anyOf"), 1), "maxItems",
			    json_integer(CAE_PATCH_MAX_COMMANDS));
	return f;
}

int cae__tool_call_apply_patch(const cae_tool_env *env, json_t *args, cae_tool_result *res,
			       cae_error *err)
{
	cae_worker_options o;
	cae_worker_options_from_config(&o, env->cfg);
	static const char *const flags[] = {"dry_run", "stop_on_error", "rollback", "auto_commit"};
	bool *dest[] = {&o.dry_run, &o.stop_on_error, &o.rollback, &o.auto_commit};
	for (size_t i = 0; i < ARRAY_SIZE(flags); i++) {
		json_t *v = json_object_get(args, flags[i]);
		if (!v || json_is_null(v))
			continue;
		if (!json_is_boolean(v))
			return cae__tool_finish(
			    res,
			    cae__tool_error("INVALID_ARGUMENT", "%s must be a boolean", flags[i]),
			    true, err);
		*dest[i] = json_is_true(v);
	}
	json_t *jp = json_object_get(args, "patch");
	if (!json_is_string(jp) && !json_is_array(jp))
		return cae__tool_finish(
		    res,
		    cae__tool_error("INVALID_ARGUMENT",
				    "patch must be a string (the patch text) or "
				    "an array of commands"),
		    true, err);
	if (!env->task_uuid)
		return cae__tool_finish(res,
					cae__tool_error("NOT_FOUND",
							"no environment is ready: prepare "
							"one first (environment_prepare)"),
					true, err);
	o.policy = env->policy;
	o.session_key = env->task_uuid;
	if (env->ctx)
		o.cancel_fd = env->ctx->cancel_fd;
	cae_error werr;
	cae_error_clear(&werr);
	_cleanup_(json_decrefp) json_t *result = NULL;
	int r;
	if (json_is_string(jp)) {
		r = cae_worker_run_text(env->backend, env->task_uuid, json_string_value(jp),
					json_string_length(jp), &o, env->log, &result, &werr);
	} else {
		cae_patch *p = NULL;
		r = cae_patch_from_json(jp, &p, &werr);
		if (r == 0)
			r = cae_worker_run(env->backend, env->task_uuid, p, &o, env->log, &result,
					   &werr);
		cae_patch_free(p);
	}
	if (r < 0)
		return cae__tool_finish_error(
		    env, res, r == -EINVAL || r == -E2BIG ? "INVALID_ARGUMENT" : "INTERNAL", &werr,
		    err);
	/* The worker masks with the logger's secrets, and there may be no logger: the
	 * session's are masked here, in what the model reads. */
	res->structured = cae_secrets_mask_json(env->secrets, result, 0);
	if (!res->structured)
		return cae_error_set(err, -ENOMEM, "out of memory");
	res->is_error = json_object_get(res->structured, "error") != NULL;
	res->text = cae_worker_render(res->structured);
	return res->text ? 0 : cae_error_set(err, -ENOMEM, "out of memory");
}
