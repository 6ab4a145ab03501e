/* The session's state: configuration, backends, policy, secrets, the current environment and
 * its editor, the workspace it owns. The tools (table.c and the family files) reach that
 * state through the few functions of tools-internal.h. */
#include "cae/session.h"

#include "base/macro.h"
#include "cae/editor.h"
#include "cae/prompt.h"
#include "cae/worker.h"
#include "tools/tools-internal.h"

#include "cae/snapshot.h"

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
	cae_secrets *secrets; /* masked in tool output; also registered in log */
	pthread_mutex_t lock; /* guards the current environment and the editor */
	char *current;	      /* task uuid */
	cae_backend *current_backend;
	char *workspace_path; /* of the current environment, as commands see it */
	cae_editor *editor;   /* current environment's editor (local environments) */
	bool remote_editor;   /* ... or its backend edits it (environments elsewhere) */
	cae_editor_limits editor_limits;
	bool mcp_mode;		     /* text_editor_mcp.mode mcp: a server is the editor... */
	cae__mcp_editor *mcp_editor; /* ... its server in the current environment (NULL: not
				      * started yet, started by the next editor call) */
	char *editor_error;	     /* why there is no editor */
	char *owned_workspace_uuid;  /* environment created by use_workspace: removed at free */
	bool editor_compat;
	cae__procs *procs; /* process sessions: ended before their environment goes */
	/* the task uuids of the environments the session prepared or was given (under lock):
	 * the only ones its model-facing tools act on (cae__session_owns) */
	char **owned;
	size_t n_owned;
};

static void own_locked(cae_session *s, const char *uuid)
{
	for (size_t i = 0; i < s->n_owned; i++)
		if (strcmp(s->owned[i], uuid) == 0)
			return;
	char **more = realloc(s->owned, (s->n_owned + 1) * sizeof(*more));
	char *copy = strdup(uuid);
	if (more)
		s->owned = more;
	if (!more || !copy) {
		free(copy);
		return;
	}
	s->owned[s->n_owned++] = copy;
}

static void disown(cae_session *s, const char *uuid)
{
	pthread_mutex_lock(&s->lock);
	for (size_t i = 0; i < s->n_owned; i++)
		if (strcmp(s->owned[i], uuid) == 0) {
			free(s->owned[i]);
			s->owned[i] = s->owned[--s->n_owned];
			break;
		}
	pthread_mutex_unlock(&s->lock);
}

bool cae__session_env_exists(cae_session *s, const char *task_uuid)
{
	cae_env_info info;
	cae_backend *bs[] = {s->backend, s->local};
	for (size_t i = 0; i < 2; i++) {
		if (!bs[i])
			continue;
		int r = cae_backend_info(bs[i], task_uuid, &info, NULL);
		cae_env_info_clear(&info);
		if (r != -ENOENT && r != -EINVAL)
			return true; /* there, or cannot tell: not to be replaced unasked */
	}
	return false;
}

bool cae__session_owns(cae_session *s, const char *task_uuid)
{
	if (s->cfg->command_executor.sessions.share_environments)
		return true;
	if (!task_uuid)
		return false;
	pthread_mutex_lock(&s->lock);
	bool found = false;
	for (size_t i = 0; i < s->n_owned && !found; i++)
		found = strcmp(s->owned[i], task_uuid) == 0;
	pthread_mutex_unlock(&s->lock);
	return found;
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
	s->secrets = cae_secrets_new();
	s->procs = cae__procs_new(cfg, log);
	int r = s->secrets && s->procs ? 0 : cae_error_set(err, -ENOMEM, "out of memory");
	/* A token too short to be masked is ignored, as the logger ignores it. */
	if (r == 0 && (cae_session_add_secret(s, cfg->github.token) == -ENOMEM ||
		       cae_session_add_secret(s, cfg->gitlab.token) == -ENOMEM))
		r = cae_error_set(err, -ENOMEM, "out of memory");
	if (r == 0) {
		s->policy = cae_policy_from_config(cfg, err);
		r = s->policy ? cae_backend_new(cfg, log, &s->backend, err) : -EINVAL;
	}
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
	s->remote_editor = false;
	s->mcp_mode = false;
	cae__mcp_editor_unref(TAKE_PTR(s->mcp_editor));
	free(s->editor_error);
	s->editor_error = NULL;
}

void cae_session_free(cae_session *s)
{
	if (!s)
		return;
	/* no session's command outlives the session, and none runs on a freed backend */
	cae__procs_free(s->procs);
	if (s->owned_workspace_uuid) {
		cae_backend *b = s->local ? s->local : s->backend;
		if (b)
			cae_backend_cleanup(b, s->owned_workspace_uuid, NULL);
		free(s->owned_workspace_uuid);
	}
	drop_current_locked(s);
	for (size_t i = 0; i < s->n_owned; i++)
		free(s->owned[i]);
	free(s->owned);
	cae_backend_free(s->local);
	cae_backend_free(s->backend);
	cae_policy_free(s->policy);
	cae_secrets_free(s->secrets);
	cae_config_free(s->cfg);
	pthread_mutex_destroy(&s->lock);
	free(s);
}

cae__procs *cae__session_procs(cae_session *s)
{
	return s->procs;
}

const char *cae_session_current(cae_session *s)
{
	return s->current;
}

char *cae_session_prompt_command_executor(cae_session *s)
{
	pthread_mutex_lock(&s->lock);
	char *uuid = s->current ? strdup(s->current) : NULL;
	cae_backend *b = s->current_backend;
	pthread_mutex_unlock(&s->lock);
	if (!uuid || !b) {
		free(uuid);
		return NULL;
	}
	cae_env_info info;
	cae_error err;
	char *text = NULL;
	if (cae_backend_info(b, uuid, &info, &err) == 0) {
		if (json_array_size(info.deps) > 0) {
			cae_prompt_context ctx = {.backend = info.backend,
						  .environment = info.environment_name,
						  .deps = info.deps};
			text = cae_prompt_command_executor_for(s->cfg, s->policy, &ctx);
		}
		cae_env_info_clear(&info);
	}
	free(uuid);
	return text;
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

int cae_session_add_secret(cae_session *s, const char *secret)
{
	int r = cae_secrets_add(s->secrets, secret);
	int rl = cae_log_add_secret(s->log, secret);
	return r < 0 ? r : rl;
}

/* Makes (backend, info) current; opens the editor for local environments. */
static int set_current_locked(cae_session *s, cae_backend *b, const cae_env_info *info)
{
	drop_current_locked(s);
	own_locked(s, info->task_uuid);
	s->current = strdup(info->task_uuid);
	s->workspace_path = strdup(info->workspace_path);
	s->current_backend = b;
	if (!s->current || !s->workspace_path) {
		drop_current_locked(s);
		return -ENOMEM;
	}
	/* A dead process's half-made change (its journal) is completed or rolled back before
	 * any command of ours sees the workspace (the editor does it too when it opens). */
	bool editor = cae__tool_editor_enabled(s->cfg);
	if (info->host_path && !editor)
		(void)cae_worker_recover(b, info->task_uuid, NULL);
	if (!editor)
		return 0;
	cae_editor_limits *lim = &s->editor_limits;
	cae_editor_limits_default(lim);
	lim->max_file_bytes = (size_t)s->cfg->text_editor_mcp.max_file_size;
	lim->undo_depth = (unsigned)s->cfg->text_editor_mcp.undo_depth;
	lim->undo_budget_bytes = (size_t)s->cfg->text_editor_mcp.undo_max_bytes;
	lim->max_output_chars = (size_t)s->cfg->text_editor_mcp.view_max_chars;
	/* (copied by cae_editor_new; an environment's helper is kept out by ownership) */
	lim->protected_paths = (const char *const *)s->cfg->command_executor.protected_paths.items;
	lim->n_protected_paths = s->cfg->command_executor.protected_paths.n;
	if (s->cfg->text_editor_mcp.mode == CAE_CONFIG_EDITOR_MCP) {
		/* the configured server, started in the environment by the first call */
		if (info->host_path)
			(void)cae_worker_recover(b, info->task_uuid, NULL);
		s->mcp_mode = true;
	} else if (info->host_path) {
		cae_error e;
		s->editor = cae_editor_new(info->host_path, info->workspace_path, lim, &e);
		if (!s->editor)
			s->editor_error = strdup(e.message);
	} else {
		/* the environment's helper edits where commands run */
		s->remote_editor = true;
	}
	return 0;
}

/* Ends the text-editor server running in task_uuid's environment (before the environment is
 * prepared again or removed). */
static void end_mcp_editor(cae_session *s, const char *task_uuid)
{
	pthread_mutex_lock(&s->lock);
	cae__mcp_editor *m = NULL;
	if (s->mcp_editor && task_uuid &&
	    strcmp(cae__mcp_editor_task(s->mcp_editor), task_uuid) == 0)
		m = TAKE_PTR(s->mcp_editor);
	pthread_mutex_unlock(&s->lock);
	cae__mcp_editor_unref(m);
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
	cae__procs_end_env(s->procs, uuid);
	end_mcp_editor(s, uuid);
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
	return cae_session_prepare_ex(s, task, environment, false, ctx, info_json, err);
}

int cae_session_prepare_ex(cae_session *s, const cae_task *task, const char *environment,
			   bool force, const cae_call_ctx *ctx, json_t **info_json, cae_error *err)
{
	struct progress_bridge pb = {ctx};
	/* the process sessions running in the environment are lost to a prepare: said, and
	 * refused, unless forced */
	_cleanup_free_ char *holders =
	    task && task->uuid && !force ? cae__procs_running_text(s->procs, task->uuid) : NULL;
	cae_prepare_options opts = {
	    .progress = progress_cb,
	    .progress_userdata = &pb,
	    .cancel_fd = ctx ? ctx->cancel_fd : -1,
	    .force = force,
	    .holders = holders,
	};
	cae_env_info info;
	/* the environment is about to be replaced: its sessions end first (with holders the
	 * prepare refuses before it replaces anything) */
	if (task && task->uuid && !holders) {
		cae__procs_end_env(s->procs, task->uuid);
		end_mcp_editor(s, task->uuid);
	}
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
	cae__procs_end_env(s->procs, uuid);
	if (s->owned_workspace_uuid && strcmp(uuid, s->owned_workspace_uuid) == 0) {
		free(s->owned_workspace_uuid);
		s->owned_workspace_uuid = NULL;
	}
	int r = cae_backend_cleanup(b, uuid, err);
	if (r == 0)
		disown(s, uuid);
	return r;
}

int cae__session_restore(cae_session *s, const char *task_uuid, const char *snapshot, json_t **out,
			 cae_error *err)
{
	/* its process sessions and editor server end first (they run in the old files) */
	_cleanup_free_ char *ended = cae__procs_running_text(s->procs, task_uuid);
	cae__procs_end_env(s->procs, task_uuid);
	end_mcp_editor(s, task_uuid);
	int r = cae_snapshot_restore(s->backend, task_uuid, snapshot, out, err);
	if (r < 0)
		return r;
	json_object_set_new(*out, "sessions_ended", ended ? json_string(ended) : json_null());
	/* the editor of the current environment held the old workspace open: a new one */
	pthread_mutex_lock(&s->lock);
	cae_env_info info;
	if (s->current && strcmp(s->current, task_uuid) == 0 &&
	    cae_backend_info(s->current_backend, task_uuid, &info, NULL) == 0) {
		(void)set_current_locked(s, s->current_backend, &info);
		cae_env_info_clear(&info);
	}
	pthread_mutex_unlock(&s->lock);
	return 0;
}

int cae__session_fork(cae_session *s, const char *from_uuid, const char *snapshot,
		      const char *new_uuid, json_t **out, cae_error *err)
{
	cae_env_info info;
	int r = cae_snapshot_fork(s->backend, from_uuid, snapshot, new_uuid, &info, out, err);
	if (r < 0)
		return r;
	/* the fork is the session's, and its current environment */
	r = set_current(s, s->backend, &info);
	cae_env_info_clear(&info);
	if (r < 0) {
		json_decref(*out);
		*out = NULL;
		return cae_error_set(err, r, "out of memory");
	}
	return 0;
}

int cae__session_snapshot(cae_session *s, const cae_call_ctx *ctx, cae_tool_env *env)
{
	*env = (cae_tool_env){
	    .session = s,
	    .cfg = s->cfg,
	    .policy = s->policy,
	    .log = s->log,
	    .secrets = s->secrets,
	    .editor_compat = s->editor_compat,
	    .ctx = ctx,
	};
	pthread_mutex_lock(&s->lock);
	env->backend = s->current_backend;
	env->task_uuid = s->current ? strdup(s->current) : NULL;
	env->workspace_path = s->workspace_path ? strdup(s->workspace_path) : NULL;
	bool ok = (!s->current || env->task_uuid) && (!s->workspace_path || env->workspace_path);
	pthread_mutex_unlock(&s->lock);
	if (!ok) {
		cae__tool_env_clear(env);
		return -ENOMEM;
	}
	return 0;
}

void cae__tool_env_clear(cae_tool_env *env)
{
	free(env->task_uuid);
	free(env->workspace_path);
	env->task_uuid = env->workspace_path = NULL;
}

int cae__session_editor_acquire(cae_session *s, cae_editor_target *t, json_t **error)
{
	memset(t, 0, sizeof(*t));
	pthread_mutex_lock(&s->lock);
	if (!s->current) {
		*error = cae__tool_error("NOT_FOUND", "no environment is ready: prepare one first "
						      "(environment_prepare)");
	} else if (s->editor) {
		t->local = s->editor;
		/* for cae_backend_guard after a write (NULL when out of memory: no guard) */
		t->backend = s->current_backend;
		t->task_uuid = strdup(s->current);
		return 0; /* locked until cae__session_editor_release */
	} else if (s->mcp_mode) {
		t->backend = s->current_backend;
		t->task_uuid = strdup(s->current);
		/* a server that ended or was left in an unknown state is started again */
		if (s->mcp_editor && !cae__mcp_editor_usable(s->mcp_editor))
			cae__mcp_editor_unref(TAKE_PTR(s->mcp_editor));
		cae_error e = {0};
		int r = t->task_uuid ? 0 : cae_error_set(&e, -ENOMEM, "out of memory");
		if (r == 0 && !s->mcp_editor)
			r = cae__mcp_editor_start(s->cfg, s->current_backend, s->current,
						  s->workspace_path, &s->editor_limits,
						  &s->mcp_editor, &e);
		if (r == 0)
			t->mcp = cae__mcp_editor_ref(s->mcp_editor);
		pthread_mutex_unlock(&s->lock);
		if (r == 0)
			return 0;
		free(TAKE_PTR(t->task_uuid));
		*error =
		    cae__tool_error("INTERNAL", "the text editor is not available: %s", e.message);
		return -1;
	} else if (s->remote_editor) {
		t->backend = s->current_backend;
		t->task_uuid = strdup(s->current);
		t->limits = s->editor_limits;
		pthread_mutex_unlock(&s->lock);
		if (t->task_uuid)
			return 0;
		*error = cae__tool_error("INTERNAL", "out of memory");
		return -1;
	} else {
		*error = cae__tool_error("INTERNAL", "the text editor is not available: %s",
					 s->editor_error ? s->editor_error : "unknown");
	}
	pthread_mutex_unlock(&s->lock);
	return -1;
}

void cae__session_editor_release(cae_session *s, cae_editor_target *t)
{
	if (t->local)
		pthread_mutex_unlock(&s->lock);
	cae__mcp_editor_unref(t->mcp);
	free(t->task_uuid);
	memset(t, 0, sizeof(*t));
}

json_t *cae__session_environments(cae_session *s, cae_error *err)
{
	json_t *list = NULL;
	if (cae_backend_list(s->backend, &list, err) < 0)
		return NULL;
	if (s->local) {
		json_t *more = NULL;
		if (cae_backend_list(s->local, &more, NULL) == 0) {
			json_array_extend(list, more);
			json_decref(more);
		}
	}
	/* the session's own (every one of the instance when sharing is on) */
	for (size_t i = json_array_size(list); i-- > 0;) {
		const char *u =
		    json_string_value(json_object_get(json_array_get(list, i), "task_uuid"));
		if (!cae__session_owns(s, u)) {
			json_array_remove(list, i);
			continue;
		}
		/* its snapshots (environment_restore and environment_fork take their names) */
		json_t *snaps = NULL;
		if (cae_snapshot_list(s->backend, u, &snaps, NULL) == 0)
			json_object_set_new(json_array_get(list, i), "snapshots", snaps);
	}
	pthread_mutex_lock(&s->lock);
	json_t *out = json_pack("{s:o, s:s?, s:s}", "environments", list, "current", s->current,
				"backend", cae_backend_name(s->backend));
	pthread_mutex_unlock(&s->lock);
	if (!out)
		cae_error_set(err, -ENOMEM, "out of memory");
	return out;
}
