/* The prepare lifecycle, written once for every backend. A backend supplies hooks (validate,
 * remove, create, populate, editor, ready, release); this file owns what is the same
 * everywhere: the environment's selection and its fallback warning, progress reports,
 * cancellation between steps, the dependency step, the events, and removal of whatever was
 * made when a step fails.
 *
 *   1 validate  the environment name (fallback: a warning), then the backend's checks
 *   2 remove    whatever the same task uuid left behind
 *   3 create    the environment, under a name or status that says it is not ready
 *   4 clone     the backend fills the workspace (usually cae__git_clone through p->exec)
 *   5 deps      cae__deps_install through p->exec, unless the workspace was given as is
 *   6 editor    the backend starts what edits files there, if anything
 *   7 ready     the backend marks it ready and fills ContainerInfo
 */
#include "backend/backend-internal.h"

#include "base/timeutil.h"
#include "cae/log.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>

#include "base/banned.h"

#define STEPS 7

static void progress(const cae_prepare *p, int step, const char *msg)
{
	if (p->opts->progress)
		p->opts->progress(p->opts->progress_userdata, step, STEPS, msg);
}

static bool cancelled(const cae_prepare *p)
{
	if (p->cancel_fd < 0)
		return false;
	struct pollfd pfd = {.fd = p->cancel_fd, .events = POLLIN};
	return poll(&pfd, 1, 0) > 0;
}

void cae__prepare_warn(cae_prepare *p, const char *event, const char *msg)
{
	json_array_append_new(p->warnings, json_string(msg));
	if (event)
		cae_log_fields(
		    p->b->log, CAE_LOG_WARN, event,
		    json_pack("{s:s, s:s}", "task_uuid", p->task->uuid, "backend", p->b->ops->name),
		    "%s", msg);
}

/* The identity of the agent's commits (command_executor.git), in the environment's own
 * global git configuration when that names none: `git commit` works as the prompts ask, the
 * agent's own `git config` wins, and the project's configuration is never touched. (The
 * local sandbox also has it as its /etc/gitconfig, which outlives its /tmp home.) A failure
 * (no git in the image) is a warning. */
static void set_identity(cae_prepare *p)
{
	static const char script[] =
	    "git config --global --get user.name >/dev/null || "
	    "git config --global user.name \"$1\" || exit 1\n"
	    "git config --global --get user.email >/dev/null || "
	    "git config --global user.email \"$2\"\n";
	const cae_config *cfg = p->b->cfg;
	const char *argv[] = {"sh",
			      "-c",
			      script,
			      "cae-git-identity",
			      cfg->command_executor.git.user_name,
			      cfg->command_executor.git.user_email,
			      NULL};
	cae_exec_request req = {.argv = argv,
				.cwd = p->project,
				.timeout_ms = 30000,
				.max_stdout = 4096,
				.max_stderr = 4096,
				.cancel_fd = p->cancel_fd};
	cae_run_result res;
	cae_error e;
	cae_error_clear(&e);
	int r = p->exec ? p->exec(p->exec_ctx, &req, &res, &e) : -ENOSYS;
	if (r == 0 && res.exit_code == 0) {
		cae_run_result_clear(&res);
		return;
	}
	char msg[1200];
	snprintf(msg, sizeof(msg),
		 "the git identity (command_executor.git) could not be set in the environment: "
		 "%.1000s",
		 r < 0 ? e.message : res.err ? res.err : "");
	if (r == 0)
		cae_run_result_clear(&res);
	cae__prepare_warn(p, "environment.git_identity_unset", msg);
}

/* Between steps: a cancelled prepare stops there. */
static int check_cancel(const cae_prepare *p, cae_error *err)
{
	return cancelled(p) ? cae_error_set(err, -ECANCELED, "prepare cancelled") : 0;
}

int cae__prepare_run(cae_backend *b, const cae_task *task, const char *env_name,
		     const cae_prepare_options *opts, cae_env_info *info, cae_error *err)
{
	const cae_backend_ops *ops = b->ops;
	if (!cae_task_uuid_valid(task->uuid))
		return cae_error_set(err, -EINVAL, "invalid task uuid");
	char *fallback = NULL;
	cae_prepare p = {.b = b,
			 .task = task,
			 .opts = opts,
			 .environment = cae_backend_select_environment(b->cfg, env_name, &fallback),
			 .cancel_fd = opts->cancel_fd,
			 .warnings = json_array(),
			 .deps = json_array()};
	cae__iso8601_now(p.created_at, sizeof(p.created_at));
	bool made = false; /* step 3 began: a failure removes what it made */
	int r = 0;
	if (!p.warnings || !p.deps) {
		r = cae_error_set(err, -ENOMEM, "validate: out of memory");
		goto fail;
	}

	progress(&p, 1, "validate");
	if (fallback) {
		json_array_append_new(p.warnings, json_string(fallback));
		cae_log_fields(b->log, CAE_LOG_WARN, "environment.fallback",
			       json_pack("{s:s, s:s, s:s?}", "task_uuid", task->uuid, "backend",
					 ops->name, "requested", env_name),
			       "%s", fallback);
	}
	if (ops->validate && (r = ops->validate(&p, err)) < 0) {
		cae_error_prefix(err, "validate");
		goto fail;
	}
	if ((r = check_cancel(&p, err)) < 0)
		goto fail;

	progress(&p, 2, "remove");
	if ((r = ops->remove(b, task->uuid, false, err)) < 0) {
		cae_error_prefix(err, "remove");
		goto fail;
	}
	if ((r = check_cancel(&p, err)) < 0)
		goto fail;

	progress(&p, 3, "create");
	made = true;
	if ((r = ops->create(&p, err)) < 0) {
		cae_error_prefix(err, "create");
		goto fail;
	}
	json_t *fields = json_pack("{s:s, s:s, s:s}", "task_uuid", task->uuid, "backend", ops->name,
				   "environment", p.environment);
	if (fields && p.create_fields)
		json_object_update(fields, p.create_fields);
	json_decref(p.create_fields);
	p.create_fields = NULL;
	cae_log_fields(b->log, CAE_LOG_INFO, "environment.create", fields, NULL);
	if ((r = check_cancel(&p, err)) < 0)
		goto fail;

	progress(&p, 4, "clone");
	if ((r = ops->populate(&p, err)) < 0) {
		cae_error_prefix(err, "clone");
		goto fail;
	}
	if ((r = check_cancel(&p, err)) < 0)
		goto fail;

	progress(&p, 5, "deps");
	set_identity(&p);
	if (!p.given_as_is && b->cfg->command_executor.clone.auto_install_deps)
		cae__deps_install(p.exec, p.exec_ctx, b->log, p.project, p.deps, p.warnings,
				  p.cancel_fd);
	if ((r = check_cancel(&p, err)) < 0)
		goto fail;

	progress(&p, 6, "editor");
	if (ops->editor && (r = ops->editor(&p, err)) < 0) {
		cae_error_prefix(err, "editor");
		goto fail;
	}
	if ((r = check_cancel(&p, err)) < 0)
		goto fail;

	if ((r = ops->ready(&p, info, err)) < 0) {
		cae_error_prefix(err, "ready");
		goto fail;
	}
	cae__backend_remember(b, info);
	progress(&p, 7, "ready");
	cae_log_fields(b->log, CAE_LOG_INFO, "environment.ready",
		       json_pack("{s:s, s:s, s:s}", "task_uuid", task->uuid, "backend", ops->name,
				 "container_id", info->container_id ? info->container_id : ""),
		       NULL);
	goto out;

fail:
	/* A step that failed because it was cancelled (a clone killed mid-way) says so. */
	if (r != -ECANCELED && cancelled(&p))
		r = cae_error_set(err, -ECANCELED, "prepare cancelled (%s)",
				  err ? err->message : "");
	cae_env_info_clear(info);
	/* Nothing is left behind. */
	if (made)
		ops->remove(b, task->uuid, false, NULL);
	cae_log_fields(b->log, CAE_LOG_ERROR, "environment.prepare_failed",
		       json_pack("{s:s, s:s}", "task_uuid", task->uuid, "backend", ops->name), "%s",
		       err ? err->message : "");
out:
	if (ops->release)
		ops->release(&p);
	json_decref(p.create_fields);
	json_decref(p.warnings);
	json_decref(p.deps);
	json_decref(p.limits);
	free(fallback);
	return r;
}
