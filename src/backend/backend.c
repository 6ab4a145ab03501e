#include "backend/backend-internal.h"

#include "cae/log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/banned.h"

int cae_backend_new_named(const char *name, const cae_config *cfg, struct cae_log *log,
			  cae_backend **out, cae_error *err)
{
	if (strcmp(name, "local") == 0)
		return cae__local_backend_new(cfg, log, out, err);
	if (strcmp(name, "docker") == 0)
		return cae__docker_backend_new(cfg, log, out, err);
	if (strcmp(name, "auto") == 0)
		return cae__docker_backend_available(cfg)
			   ? cae__docker_backend_new(cfg, log, out, err)
			   : cae__local_backend_new(cfg, log, out, err);
	return cae_error_set(err, -EINVAL, "unknown backend \"%s\" (auto, docker or local)", name);
}

int cae_backend_new(const cae_config *cfg, struct cae_log *log, cae_backend **out, cae_error *err)
{
	return cae_backend_new_named(cae_config_backend_name(cfg->command_executor.backend), cfg,
				     log, out, err);
}

void cae_backend_free(cae_backend *b)
{
	if (b)
		b->ops->free(b);
}

const char *cae_backend_name(const cae_backend *b)
{
	return b->ops->name;
}

int cae_backend_prepare(cae_backend *b, const cae_task *task, const char *environment_name,
			const cae_prepare_options *opts, cae_env_info *info, cae_error *err)
{
	static const cae_prepare_options none = {.cancel_fd = -1};
	memset(info, 0, sizeof(*info));
	return cae__prepare_run(b, task, environment_name, opts ? opts : &none, info, err);
}

cae_run_spec cae__backend_run_spec(const cae_exec_request *req, const char *cwd,
				   const char *const *envp)
{
	return (cae_run_spec){
	    .argv = req->argv,
	    .envp = envp,
	    .cwd = cwd,
	    .stdin_data = req->stdin_data,
	    .stdin_len = req->stdin_len,
	    .has_stdin = req->has_stdin,
	    .timeout_ms = req->timeout_ms,
	    .max_stdout = req->max_stdout,
	    .max_stderr = req->max_stderr,
	    .truncate = req->truncate,
	    .cancel_fd = req->cancel_fd,
	    .live = req->live,
	};
}

int cae_backend_exec(cae_backend *b, const char *task_uuid, const cae_exec_request *req,
		     cae_run_result *res, cae_error *err)
{
	memset(res, 0, sizeof(*res));
	if (!req->argv || !req->argv[0])
		return cae_error_set(err, -EINVAL, "no command to run");
	return b->ops->exec(b, task_uuid, req, res, err);
}

int cae_backend_edit(cae_backend *b, const char *task_uuid, const cae_editor_limits *limits,
		     const cae_editor_request *req, cae_editor_result *res, cae_error *err)
{
	memset(res, 0, sizeof(*res));
	if (!cae_task_uuid_valid(task_uuid))
		return cae_error_set(err, -EINVAL, "invalid task uuid");
	if (!b->ops->edit)
		return cae_error_set(err, -EOPNOTSUPP,
				     "the %s backend edits its environments on this host",
				     b->ops->name);
	return b->ops->edit(b, task_uuid, limits, req, res, err);
}

int cae_backend_fs(cae_backend *b, const char *task_uuid, const cae_fs_request *q,
		   cae_fs_reply *rep, cae_error *err)
{
	memset(rep, 0, sizeof(*rep));
	if (!cae_task_uuid_valid(task_uuid))
		return cae_error_set(err, -EINVAL, "invalid task uuid");
	if (!b->ops->fs)
		return cae_error_set(err, -EOPNOTSUPP, "the %s backend has no helper for files",
				     b->ops->name);
	return b->ops->fs(b, task_uuid, q, rep, err);
}

int cae_backend_cleanup(cae_backend *b, const char *task_uuid, cae_error *err)
{
	if (!cae_task_uuid_valid(task_uuid))
		return cae_error_set(err, -EINVAL, "invalid task uuid");
	int r = b->ops->remove(b, task_uuid, true, err);
	if (r == 0)
		cae_log_fields(
		    b->log, CAE_LOG_INFO, "environment.cleanup",
		    json_pack("{s:s, s:s}", "task_uuid", task_uuid, "backend", b->ops->name), NULL);
	else
		cae_log_fields(
		    b->log, CAE_LOG_ERROR, "environment.cleanup_failed",
		    json_pack("{s:s, s:s}", "task_uuid", task_uuid, "backend", b->ops->name), "%s",
		    err ? err->message : "");
	return r;
}

int cae_backend_cleanup_stale(cae_backend *b, int64_t threshold_s, int *removed, cae_error *err)
{
	*removed = 0;
	return b->ops->cleanup_stale(b, threshold_s, removed, err);
}

int cae_backend_list(cae_backend *b, json_t **out, cae_error *err)
{
	return b->ops->list(b, out, err);
}

int cae_backend_info(cae_backend *b, const char *task_uuid, cae_env_info *info, cae_error *err)
{
	memset(info, 0, sizeof(*info));
	if (!cae_task_uuid_valid(task_uuid))
		return cae_error_set(err, -EINVAL, "invalid task uuid");
	return b->ops->info(b, task_uuid, info, err);
}

const char *cae_backend_select_environment(const cae_config *cfg, const char *name, char **warning)
{
	*warning = NULL;
	const char *def = cfg->command_executor.default_environment;
	if (name && *name && cae_config_environment_image(cfg, name))
		return name;
	const char *used = def && cae_config_environment_image(cfg, def) ? def : "python";
	char buf[512];
	if (!name || !*name)
		snprintf(buf, sizeof(buf),
			 "no environment selected; using the default environment \"%s\"", used);
	else
		snprintf(buf, sizeof(buf),
			 "unknown environment \"%.200s\"; using the default environment \"%s\"",
			 name, used);
	*warning = strdup(buf);
	return used;
}
