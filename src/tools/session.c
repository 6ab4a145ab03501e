/* The session: configuration, backend, policy, current environment and the tool dispatch
 * every front end uses (CLI, MCP server). */
#include "cae/session.h"

#include "base/macro.h"
#include "base/utf8.h"
#include "cae/editor.h"
#include "cae/tools.h"
#include "cae/worker.h"
#include "tools/tools-internal.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/banned.h"

struct cae_session {
	cae_config *cfg;
	cae_log *log;
	cae_backend *backend; /* from the config */
	cae_backend *local;   /* for --workspace directories when the main backend is not local */
	cae_policy *policy;
	pthread_mutex_t lock; /* guards the current environment and the editor */
	char *current;	      /* task uuid */
	cae_backend *current_backend;
	char *workspace_path;	    /* of the current environment, as commands see it */
	cae_editor *editor;	    /* current environment's editor (local environments) */
	char *editor_error;	    /* why there is no editor */
	char *owned_workspace_uuid; /* environment created by use_workspace: removed at free */
	bool editor_compat;
};

void cae_tool_result_clear(cae_tool_result *res)
{
	if (!res)
		return;
	free(res->text);
	json_decref(res->structured);
	memset(res, 0, sizeof(*res));
}

cae_policy *cae_policy_from_config(const cae_config *cfg, cae_error *err)
{
	cae_policy_options o;
	cae_policy_options_init(&o);
	const __typeof__(cfg->command_executor.allowed_commands) *ac =
	    &cfg->command_executor.allowed_commands;
	o.use_default = ac->use_default;
	o.enforce = ac->enforce;
	o.additional =
	    (cae_policy_list){(const char *const *)ac->additional.items, ac->additional.n};
	o.exclude = (cae_policy_list){(const char *const *)ac->exclude.items, ac->exclude.n};
	o.custom_list =
	    (cae_policy_list){(const char *const *)ac->custom_list.items, ac->custom_list.n};
	return cae_policy_new(&o, err);
}

int cae_session_new(cae_config *cfg, cae_log *log, cae_session **out, cae_error *err)
{
	cae_session *s = calloc(1, sizeof(*s));
	if (!s) {
		cae_config_free(cfg);
		return -ENOMEM;
	}
	s->cfg = cfg;
	s->log = log;
	pthread_mutex_init(&s->lock, NULL);
	if (cfg->github.token)
		cae_log_add_secret(log, cfg->github.token);
	if (cfg->gitlab.token)
		cae_log_add_secret(log, cfg->gitlab.token);
	s->policy = cae_policy_from_config(cfg, err);
	int r = s->policy ? cae_backend_new(cfg, log, &s->backend, err) : -EINVAL;
	if (r < 0) {
		cae_session_free(s);
		return r;
	}
	*out = s;
	return 0;
}

static void drop_current_locked(cae_session *s)
{
	free(s->current);
	s->current = NULL;
	s->current_backend = NULL;
	free(s->workspace_path);
	s->workspace_path = NULL;
	cae_editor_free(s->editor);
	s->editor = NULL;
	free(s->editor_error);
	s->editor_error = NULL;
}

void cae_session_free(cae_session *s)
{
	if (!s)
		return;
	if (s->owned_workspace_uuid) {
		cae_backend *b = s->local ? s->local : s->backend;
		if (b)
			cae_backend_cleanup(b, s->owned_workspace_uuid, NULL);
		free(s->owned_workspace_uuid);
	}
	drop_current_locked(s);
	cae_backend_free(s->local);
	cae_backend_free(s->backend);
	cae_policy_free(s->policy);
	cae_config_free(s->cfg);
	pthread_mutex_destroy(&s->lock);
	free(s);
}

const char *cae_session_current(cae_session *s)
{
	return s->current;
}

cae_backend *cae_session_backend(cae_session *s)
{
	return s->backend;
}

const cae_config *cae_session_config(const cae_session *s)
{
	return s->cfg;
}

void cae_session_set_editor_compat(cae_session *s, bool on)
{
	s->editor_compat = on;
}

/* Makes (backend, info) current; opens the editor for local environments. */
static int set_current_locked(cae_session *s, cae_backend *b, const cae_env_info *info)
{
	drop_current_locked(s);
	s->current = strdup(info->task_uuid);
	s->workspace_path = strdup(info->workspace_path);
	s->current_backend = b;
	if (!s->current || !s->workspace_path) {
		drop_current_locked(s);
		return -ENOMEM;
	}
	/* A dead process's half-made change (its journal) is completed or rolled back before
	 * any command of ours sees the workspace (the editor does it too when it opens). */
	if (info->host_path && !s->cfg->text_editor_mcp.enabled)
		(void)cae_worker_recover(b, info->task_uuid, NULL);
	if (!s->cfg->text_editor_mcp.enabled)
		return 0;
	if (info->host_path) {
		cae_editor_limits lim;
		cae_editor_limits_default(&lim);
		lim.max_file_bytes = (size_t)s->cfg->text_editor_mcp.max_file_size;
		lim.undo_depth = (unsigned)s->cfg->text_editor_mcp.undo_depth;
		lim.undo_budget_bytes = (size_t)s->cfg->text_editor_mcp.undo_max_bytes;
		lim.max_output_chars = (size_t)s->cfg->text_editor_mcp.view_max_chars;
		cae_error e;
		s->editor = cae_editor_new(info->host_path, info->workspace_path, &lim, &e);
		if (!s->editor)
			s->editor_error = strdup(e.message);
	} else {
		s->editor_error =
		    strdup("the native text editor runs in-process for local "
			   "environments; this environment's backend does not offer it "
			   "yet");
	}
	return 0;
}

static int set_current(cae_session *s, cae_backend *b, const cae_env_info *info)
{
	pthread_mutex_lock(&s->lock);
	int r = set_current_locked(s, b, info);
	pthread_mutex_unlock(&s->lock);
	return r;
}

/* A stable uuid for a directory used as a workspace, so that a second process finds it. */
static void workspace_uuid(const char *real, char out[32])
{
	uint64_t h = 1469598103934665603ULL;
	for (const char *p = real; *p; p++) {
		h ^= (unsigned char)*p;
		h *= 1099511628211ULL;
	}
	snprintf(out, 32, "ws-%016llx", (unsigned long long)h);
}

int cae_session_use_workspace(cae_session *s, const char *dir, cae_error *err)
{
	char real[PATH_MAX];
	if (!realpath(dir, real))
		return cae_error_set(err, -ENOTDIR, "workspace %s: %s", dir, strerror(errno));
	cae_backend *b = s->backend;
	if (strcmp(cae_backend_name(b), "local") != 0) {
		if (!s->local) {
			int r = cae_backend_new_named("local", s->cfg, s->log, &s->local, err);
			if (r < 0)
				return r;
		}
		b = s->local;
	}
	char uuid[32];
	workspace_uuid(real, uuid);
	cae_task task = {.uuid = uuid, .repo = real};
	cae_prepare_options opts = {.workspace = real, .cancel_fd = -1};
	cae_env_info info;
	int r = cae_backend_prepare(b, &task, NULL, &opts, &info, err);
	if (r < 0)
		return r;
	r = set_current(s, b, &info);
	cae_env_info_clear(&info);
	if (r == 0) {
		free(s->owned_workspace_uuid);
		s->owned_workspace_uuid = strdup(uuid);
	}
	return r;
}

struct progress_bridge {
	const cae_call_ctx *ctx;
};

static void progress_cb(void *ud, int step, int total, const char *msg)
{
	struct progress_bridge *pb = ud;
	if (pb->ctx && pb->ctx->progress)
		pb->ctx->progress(pb->ctx->progress_userdata, step, total, msg);
}

int cae_session_prepare(cae_session *s, const cae_task *task, const char *environment,
			const cae_call_ctx *ctx, json_t **info_json, cae_error *err)
{
	struct progress_bridge pb = {ctx};
	cae_prepare_options opts = {
	    .progress = progress_cb,
	    .progress_userdata = &pb,
	    .cancel_fd = ctx && ctx->has_cancel_fd ? ctx->cancel_fd : -1,
	    .has_cancel_fd = ctx && ctx->has_cancel_fd,
	};
	cae_env_info info;
	int r = cae_backend_prepare(s->backend, task, environment, &opts, &info, err);
	if (r < 0)
		return r;
	r = set_current(s, s->backend, &info);
	if (r == 0 && info_json)
		*info_json = cae_env_info_to_json(&info);
	cae_env_info_clear(&info);
	return r;
}

int cae_session_set_current(cae_session *s, const char *task_uuid, cae_error *err)
{
	cae_env_info info;
	cae_backend *b = s->backend;
	int r = cae_backend_info(b, task_uuid, &info, err);
	if (r == -ENOENT && s->local) {
		b = s->local;
		r = cae_backend_info(b, task_uuid, &info, err);
	}
	if (r < 0)
		return r;
	r = set_current(s, b, &info);
	cae_env_info_clear(&info);
	return r;
}

int cae_session_cleanup(cae_session *s, const char *task_uuid, cae_error *err)
{
	pthread_mutex_lock(&s->lock);
	_cleanup_free_ char *uuid = strdup(task_uuid ? task_uuid : s->current ? s->current : "");
	cae_backend *b =
	    s->current && strcmp(uuid, s->current) == 0 ? s->current_backend : s->backend;
	if (s->current && strcmp(uuid, s->current) == 0)
		drop_current_locked(s);
	pthread_mutex_unlock(&s->lock);
	if (!uuid || !*uuid)
		return cae_error_set(err, -EINVAL, "no environment to clean up");
	if (s->owned_workspace_uuid && strcmp(uuid, s->owned_workspace_uuid) == 0) {
		free(s->owned_workspace_uuid);
		s->owned_workspace_uuid = NULL;
	}
	return cae_backend_cleanup(b, uuid, err);
}

json_t *cae_session_tool_list(cae_session *s, bool with_output_schema)
{
	cae_tools_options o = {
	    .format = CAE_TOOLS_MCP,
	    .environment_tools = true,
	    .output_schema = with_output_schema,
	    .patch_tool = true,
	};
	return cae_tools_definitions(s->cfg, &o);
}

static void replace_all(char *msg, size_t size, const char *what, const char *with)
{
	size_t wn = strlen(what), rn = strlen(with);
	if (wn < 2)
		return; /* "/" alone is no secret, and replacing it would mangle every path */
	for (char *at = strstr(msg, what); at; at = strstr(at + rn, what)) {
		size_t head = (size_t)(at - msg);
		if (head + rn >= size) {
			*at = '\0'; /* no room for the replacement: the message ends here */
			return;
		}
		size_t tail = strlen(at + wn);
		if (head + rn + tail + 1 > size)
			tail = size - 1 - head - rn;
		memmove(at + rn, at + wn, tail);
		at[rn + tail] = '\0';
		memcpy(at, with, rn);
	}
}

void cae_tools_hide_host_paths(const cae_config *cfg, char *msg, size_t size)
{
	const char *sd = cfg ? cfg->command_executor.state_dir : NULL;
	if (!cfg || size < 32)
		return;
	if (!sd)
		sd = "";
	char real[PATH_MAX];
	/* The longer spelling first, so that a prefix of it does not hide the rest. */
	const char *a = sd, *b = realpath(sd, real) ? real : NULL;
	if (b && strlen(b) > strlen(a)) {
		const char *t = a;
		a = b;
		b = t;
	}
	replace_all(msg, size, a, "<state directory>");
	if (b)
		replace_all(msg, size, b, "<state directory>");
	/* "cannot connect to the Docker engine at unix:///..." */
	const char *dh = cfg->command_executor.docker_host;
	if (dh && strncmp(dh, "unix://", 7) == 0)
		replace_all(msg, size, dh, "<docker socket>");
}

/* Text for the model: the structured result as JSON, or the error message. */
static void finish(cae_tool_result *res, json_t *structured, bool is_error)
{
	res->is_error = is_error;
	res->structured = structured;
	json_t *e = json_object_get(structured, "error");
	const char *msg = json_string_value(json_object_get(e, "message"));
	const char *code = json_string_value(json_object_get(e, "code"));
	if (is_error && msg) {
		size_t n = strlen(msg) + (code ? strlen(code) : 0) + 4;
		res->text = malloc(n);
		if (res->text)
			snprintf(res->text, n, "%s: %s", code ? code : "ERROR", msg);
	} else {
		res->text = json_dumps(structured, JSON_COMPACT);
	}
}

/* An error result for the environment tools, with host paths hidden. */
static void env_error(cae_session *s, cae_tool_result *res, const char *code, cae_error *err)
{
	cae_tools_hide_host_paths(s->cfg, err->message, sizeof(err->message));
	finish(res, cae_tool_error(code, "%s", err->message), true);
}

static int call_editor(cae_session *s, const char *name, json_t *args, cae_tool_result *res)
{
	_cleanup_(json_decrefp) json_t *a = NULL;
	if (strncmp(name, "text_editor_", 12) == 0) {
		a = json_is_object(args) ? json_deep_copy(args) : json_object();
		json_object_set_new(a, "command", json_string(name + 12));
		args = a;
	}
	pthread_mutex_lock(&s->lock);
	if (!s->current) {
		pthread_mutex_unlock(&s->lock);
		finish(res,
		       cae_tool_error("INTERNAL", "no environment is ready: prepare one first "
						  "(environment_prepare)"),
		       true);
		return 0;
	}
	if (!s->editor) {
		finish(res,
		       cae_tool_error("INTERNAL", "the text editor is not available: %s",
				      s->editor_error ? s->editor_error : "unknown"),
		       true);
		pthread_mutex_unlock(&s->lock);
		return 0;
	}
	cae_editor_result er;
	int r = cae_editor_call(s->editor, args, &er);
	pthread_mutex_unlock(&s->lock);
	if (r < 0)
		return r;
	res->is_error = er.is_error;
	if (s->editor_compat) {
		res->text = cae_editor_result_compat_text(&er);
		res->structured = res->text ? json_loads(res->text, 0, NULL) : NULL;
	} else {
		res->text = er.text;
		er.text = NULL;
		/* The output can be a whole file: checked once here (a faster check than
		 * json_pack's), and the MCP result shares this string for its text. */
		size_t n = res->text ? strlen(res->text) : 0;
		json_t *out = res->text && cae_utf8_is_valid(res->text, n)
				  ? json_stringn_nocheck(res->text, n)
				  : NULL;
		res->structured = out ? json_pack("{s:s, s:s?, s:o, s:b}", "command",
						  cae_editor_command_name(er.command), "path",
						  er.path, "output", out, "is_error", er.is_error)
				      : NULL;
	}
	cae_editor_result_clear(&er);
	return res->text ? 0 : -ENOMEM;
}

/* What the model sees of an environment: where things are as commands see them, not where
 * they are on this host (the state directory is the operator's business). */
static void model_view(json_t *info)
{
	json_object_del(info, "host_path");
}

static int call_environment(cae_session *s, const char *name, json_t *args, const cae_call_ctx *ctx,
			    cae_tool_result *res)
{
	cae_error err;
	cae_error_clear(&err);
	if (strcmp(name, "environment_list") == 0) {
		json_t *list = NULL;
		int r = cae_backend_list(s->backend, &list, &err);
		if (r < 0) {
			env_error(s, res, "INTERNAL", &err);
			return 0;
		}
		if (s->local) {
			json_t *more = NULL;
			if (cae_backend_list(s->local, &more, NULL) == 0) {
				json_array_extend(list, more);
				json_decref(more);
			}
		}
		size_t i;
		json_t *e;
		json_array_foreach(list, i, e) model_view(e);
		pthread_mutex_lock(&s->lock);
		json_t *out = json_pack("{s:o, s:s?, s:s}", "environments", list, "current",
					s->current, "backend", cae_backend_name(s->backend));
		pthread_mutex_unlock(&s->lock);
		finish(res, out, false);
		return 0;
	}
	if (strcmp(name, "environment_prepare") == 0) {
		json_t *jt = json_object_get(args, "task");
		json_t *je = json_object_get(args, "environment");
		if (je && !json_is_null(je) && !json_is_string(je)) {
			finish(res,
			       cae_tool_error("INVALID_ARGUMENT", "environment must be a string"),
			       true);
			return 0;
		}
		cae_task task;
		if (cae_task_from_json(jt, &task, &err) < 0) {
			finish(res, cae_tool_error("INVALID_ARGUMENT", "%s", err.message), true);
			return 0;
		}
		/* The model names remote repositories; host paths are the operator's. */
		if (cae_task_check_model_repo(s->cfg, &task, &err) < 0) {
			cae_task_clear(&task);
			finish(res, cae_tool_error("INVALID_ARGUMENT", "%s", err.message), true);
			return 0;
		}
		json_t *info = NULL;
		int r = cae_session_prepare(s, &task, json_string_value(je), ctx, &info, &err);
		cae_task_clear(&task);
		if (r < 0) {
			env_error(s, res, "INTERNAL", &err);
			return 0;
		}
		model_view(info);
		finish(res, info, false);
		return 0;
	}
	/* environment_cleanup */
	json_t *ju = json_object_get(args, "task_uuid");
	if (ju && !json_is_null(ju) && !json_is_string(ju)) {
		finish(res, cae_tool_error("INVALID_ARGUMENT", "task_uuid must be a string"), true);
		return 0;
	}
	const char *uuid = json_string_value(ju);
	pthread_mutex_lock(&s->lock);
	_cleanup_free_ char *target = strdup(uuid ? uuid : s->current ? s->current : "");
	pthread_mutex_unlock(&s->lock);
	if (!target || !*target) {
		finish(res,
		       cae_tool_error("INVALID_ARGUMENT",
				      "no task_uuid given and no current environment"),
		       true);
		return 0;
	}
	int r = cae_session_cleanup(s, target, &err);
	if (r < 0) {
		env_error(s, res, "INTERNAL", &err);
		return 0;
	}
	finish(res, json_pack("{s:s, s:b}", "task_uuid", target, "removed", 1), false);
	return 0;
}

/* apply_patch: the patch worker (src/worker) in the current environment. */
static int call_patch(cae_session *s, json_t *args, const cae_call_ctx *ctx, cae_tool_result *res)
{
	cae_worker_options o;
	cae_worker_options_from_config(&o, s->cfg);
	static const char *const flags[] = {"dry_run", "stop_on_error", "rollback", "auto_commit"};
	bool *dest[] = {&o.dry_run, &o.stop_on_error, &o.rollback, &o.auto_commit};
	for (size_t i = 0; i < ARRAY_SIZE(flags); i++) {
		json_t *v = json_object_get(args, flags[i]);
		if (!v || json_is_null(v))
			continue;
		if (!json_is_boolean(v)) {
			finish(res,
			       cae_tool_error("INVALID_ARGUMENT", "%s must be a boolean", flags[i]),
			       true);
			return 0;
		}
		*dest[i] = json_is_true(v);
	}
	json_t *jp = json_object_get(args, "patch");
	if (!json_is_string(jp) && !json_is_array(jp)) {
		finish(res,
		       cae_tool_error("INVALID_ARGUMENT",
				      "patch must be a string (the patch text) or an array of "
				      "commands"),
		       true);
		return 0;
	}
	pthread_mutex_lock(&s->lock);
	_cleanup_free_ char *uuid = s->current ? strdup(s->current) : NULL;
	cae_backend *b = s->current_backend;
	pthread_mutex_unlock(&s->lock);
	if (!uuid) {
		finish(res,
		       cae_tool_error("INTERNAL", "no environment is ready: prepare one first "
						  "(environment_prepare)"),
		       true);
		return 0;
	}
	o.policy = s->policy;
	o.session_key = uuid;
	if (ctx && ctx->has_cancel_fd) {
		o.cancel_fd = ctx->cancel_fd;
		o.has_cancel_fd = true;
	}
	cae_error err;
	cae_error_clear(&err);
	json_t *result = NULL;
	int r;
	if (json_is_string(jp)) {
		r = cae_worker_run_text(b, uuid, json_string_value(jp), json_string_length(jp), &o,
					s->log, &result, &err);
	} else {
		cae_patch *p = NULL;
		r = cae_patch_from_json(jp, &p, &err);
		if (r == 0)
			r = cae_worker_run(b, uuid, p, &o, s->log, &result, &err);
		cae_patch_free(p);
	}
	if (r < 0) {
		env_error(s, res, r == -EINVAL || r == -E2BIG ? "INVALID_ARGUMENT" : "INTERNAL",
			  &err);
		return 0;
	}
	res->structured = result;
	res->is_error = json_object_get(result, "error") != NULL;
	res->text = cae_worker_render(result);
	return res->text ? 0 : -ENOMEM;
}

int cae_session_call_tool(cae_session *s, const char *name, json_t *args, const cae_call_ctx *ctx,
			  cae_tool_result *res, cae_error *err)
{
	memset(res, 0, sizeof(*res));
	if (!name)
		return cae_error_set(err, -ENOENT, "no tool name");
	if (args && !json_is_object(args))
		return cae_error_set(err, -EINVAL, "tool arguments must be an object");
	_cleanup_(json_decrefp) json_t *empty = NULL;
	if (!args)
		args = empty = json_object();
	bool exec_tool = strcmp(name, "exec_command") == 0 ||
			 strcmp(name, "command-executor_execute_command") == 0;
	if (exec_tool) {
		if (!s->cfg->command_executor.enabled)
			return cae_error_set(err, -ENOENT, "unknown tool: %s (disabled)", name);
		pthread_mutex_lock(&s->lock);
		_cleanup_free_ char *uuid = s->current ? strdup(s->current) : NULL;
		_cleanup_free_ char *ws = s->workspace_path ? strdup(s->workspace_path) : NULL;
		cae_backend *b = s->current_backend;
		pthread_mutex_unlock(&s->lock);
		cae_tool_env env = {
		    .backend = b,
		    .task_uuid = uuid,
		    .workspace_path = ws,
		    .cfg = s->cfg,
		    .policy = s->policy,
		    .log = s->log,
		    .ctx = ctx,
		};
		bool is_error;
		json_t *out = strcmp(name, "exec_command") == 0
				  ? cae_tool_exec_command(&env, args, &is_error)
				  : cae_tool_execute_command(&env, args, &is_error);
		if (!out)
			return cae_error_set(err, -ENOMEM, "out of memory");
		finish(res, out, is_error);
		return res->text ? 0 : -ENOMEM;
	}
	if (strcmp(name, "text_editor") == 0 ||
	    (strncmp(name, "text_editor_", 12) == 0 &&
	     (strcmp(name + 12, "view") == 0 || strcmp(name + 12, "create") == 0 ||
	      strcmp(name + 12, "str_replace") == 0 || strcmp(name + 12, "insert") == 0 ||
	      strcmp(name + 12, "undo_edit") == 0))) {
		if (!s->cfg->text_editor_mcp.enabled)
			return cae_error_set(err, -ENOENT, "unknown tool: %s (disabled)", name);
		return call_editor(s, name, args, res);
	}
	if (strcmp(name, "apply_patch") == 0) {
		if (!s->cfg->worker.enabled)
			return cae_error_set(err, -ENOENT, "unknown tool: %s (disabled)", name);
		return call_patch(s, args, ctx, res);
	}
	if (strcmp(name, "environment_list") == 0 || strcmp(name, "environment_prepare") == 0 ||
	    strcmp(name, "environment_cleanup") == 0)
		return call_environment(s, name, args, ctx, res);
	return cae_error_set(err, -ENOENT, "unknown tool: %s", name);
}
