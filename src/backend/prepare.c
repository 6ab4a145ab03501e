/* The prepare lifecycle, written once for every backend. A backend supplies hooks (validate,
 * remove, create, populate, editor, ready, release); this file owns what is the same
 * everywhere: the environment's selection and its fallback warning, progress reports,
 * cancellation between steps, the dependency step, the events, and removal of whatever was
 * made when a step fails.
 *
 *   1 validate  the environment name (fallback: a warning), then the backend's checks
 *   2 remove    whatever the same task uuid left behind: never another instance's, nor,
 *               unless forced, one with changes not committed or held by a live process
 *   3 create    the environment, under a name or status that says it is not ready
 *   4 clone     the backend fills the workspace (usually cae__git_clone through p->exec)
 *   5 deps      cae__deps_install through p->exec, unless the workspace was given as is
 *   6 editor    the backend starts what edits files there, if anything
 *   7 ready     the backend marks it ready and fills ContainerInfo
 */
#include "backend/backend-internal.h"
#include "backend/net-local.h"

#include "base/gitsafe.h"
#include "base/timeutil.h"
#include "cae/log.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
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

/* The files of the environment ready at info that differ from their last commit, as
 * `git status --porcelain` in it lists them: up to LOST_NAMED named in names, all counted;
 * 0 when it cannot tell (no git there, the environment cannot run commands). */
#define LOST_NAMED 5
static int changed_files(cae_prepare *p, const cae_env_info *info, char *names, size_t size)
{
	const char *argv[] = {CAE_GIT_ARGV, "status", "--porcelain", "--ignore-submodules", NULL};
	cae_exec_request req = {.argv = argv,
				.cwd = info->workspace_path,
				.timeout_ms = 60000,
				.max_stdout = 1 << 20,
				.max_stderr = 4096,
				.cancel_fd = p->cancel_fd};
	cae_run_result res;
	names[0] = '\0';
	if (p->b->ops->exec(p->b, p->task->uuid, &req, &res, NULL) < 0)
		return 0;
	int n = 0;
	size_t used = 0;
	if (res.exit_code == 0 && res.out) {
		char *save = NULL;
		for (char *line = strtok_r(res.out, "\n", &save); line;
		     line = strtok_r(NULL, "\n", &save)) {
			if (strlen(line) < 4)
				continue;
			if (n++ < LOST_NAMED && used < size) {
				int w = snprintf(names + used, size - used, "%s%s",
						 n > 1 ? ", " : "", line + 3);
				used += w > 0 ? (size_t)w : 0;
			}
		}
	}
	cae_run_result_clear(&res);
	if (used >= size && size > 4)
		memcpy(names + size - 4, "...", 4);
	return n;
}

/* How many other live processes hold the environment ready at info: the backend's own
 * count (local: other managers' sandboxes in it), else the helper streams in it besides the
 * one this count runs through (each manager process keeps one). */
static int other_holders(cae_prepare *p, const cae_env_info *info, char *text, size_t size)
{
	text[0] = '\0';
	if (p->b->ops->holders)
		return p->b->ops->holders(p->b, p->task->uuid, text, size);
	const char *argv[] = {
	    "sh", "-c",
	    "n=0; for f in /proc/[0-9]*/cmdline; do case \"$(tr '\\000' ' ' <\"$f\" 2>/dev/null)\" "
	    "in */.cae/cae-helper\\ --stream*) n=$((n+1)) ;; esac; done; echo $n",
	    NULL};
	cae_exec_request req = {.argv = argv,
				.cwd = info->workspace_path,
				.timeout_ms = 60000,
				.max_stdout = 64,
				.max_stderr = 4096,
				.cancel_fd = p->cancel_fd};
	cae_run_result res;
	if (p->b->ops->exec(p->b, p->task->uuid, &req, &res, NULL) < 0)
		return 0;
	long n = res.exit_code == 0 && res.out ? strtol(res.out, NULL, 10) : 0;
	cae_run_result_clear(&res);
	if (n <= 1)
		return 0;
	snprintf(text, size, "helper streams of %ld other cae process%s", n - 1,
		 n - 1 == 1 ? "" : "es");
	return (int)(n - 1);
}

/* Step 2's guard: the task's environment that exists already is another instance's (never
 * replaced: -EEXIST), or would lose what is not saved anywhere else (its changed files, a
 * prepare another live process is running, what the caller holds in it: -EBUSY unless
 * force). */
static int check_existing(cae_prepare *p, cae_error *err)
{
	cae_env_info old;
	if (p->b->ops->info(p->b, p->task->uuid, &old, NULL) < 0)
		return 0; /* none: nothing to lose */
	int r = 0;
	if (!cae__backend_own(p->b, old.instance)) {
		r = cae_error_set(err, -EEXIST,
				  "task uuid %s is in use by another cae instance's environment, "
				  "which is left alone: choose another task uuid",
				  p->task->uuid);
		goto out;
	}
	if (p->opts->force)
		goto out;
	char names[512] = "", others[512] = "";
	int changed = 0, held = 0;
	bool creating = old.status && strcmp(old.status, "creating") == 0;
	bool ready = old.status && strcmp(old.status, "ready") == 0;
	/* a workspace given as is stays where it is: re-preparing it loses none of its files,
	 * and it is the operator's to share between processes (`cae mcp --workspace`) */
	if (!p->opts->workspace && ready) {
		changed = changed_files(p, &old, names, sizeof(names));
		held = other_holders(p, &old, others, sizeof(others));
	}
	if (!changed && !creating && !held && !p->opts->holders)
		goto out;
	char what[1024];
	size_t used = 0;
	const char *sep = "";
	if (changed) {
		int w =
		    snprintf(what, sizeof(what), "%d changed file%s not committed (%s%s)", changed,
			     changed == 1 ? "" : "s", names, changed > LOST_NAMED ? ", ..." : "");
		used = w > 0 ? (size_t)w : 0;
		sep = "; ";
	}
	if (held && used < sizeof(what)) {
		int w = snprintf(what + used, sizeof(what) - used,
				 "%sthe work of %d other live process%s using it: %s", sep, held,
				 held == 1 ? "" : "es", others);
		used += w > 0 ? (size_t)w : 0;
		sep = "; ";
	}
	if (creating && used < sizeof(what)) {
		int w = snprintf(what + used, sizeof(what) - used,
				 "%sthe prepare another live process is running in it", sep);
		used += w > 0 ? (size_t)w : 0;
		sep = "; ";
	}
	if (p->opts->holders && used < sizeof(what))
		snprintf(what + used, sizeof(what) - used, "%s%s", sep, p->opts->holders);
	r = cae_error_set(err, -EBUSY,
			  "environment %s exists and preparing it again would lose: %s. Commit "
			  "or stop them first, or prepare with force (force: true, or --force) "
			  "to replace it anyway",
			  p->task->uuid, what);
out:
	cae_env_info_clear(&old);
	return r;
}

/* The identity of the agent's commits (command_executor.git), in the environment's own
 * global git configuration when that names none: `git commit` works as the prompts ask, the
 * agent's own `git config` wins, and the project's configuration is never touched. (The
 * local sandbox also has it as its /etc/gitconfig, which outlives its /tmp home.) A failure
 * (no git in the image) is a warning. */
static void set_identity(cae_prepare *p)
{
	/* $1 name, $2 email, then the git argv (CAE_GIT_ARGV) */
	static const char script[] = "n=$1 e=$2; shift 2\n"
				     "\"$@\" config --global --get user.name >/dev/null || "
				     "\"$@\" config --global user.name \"$n\" || exit 1\n"
				     "\"$@\" config --global --get user.email >/dev/null || "
				     "\"$@\" config --global user.email \"$e\"\n";
	const cae_config *cfg = p->b->cfg;
	const char *argv[] = {"sh",
			      "-c",
			      script,
			      "cae-git-identity",
			      cfg->command_executor.git.user_name,
			      cfg->command_executor.git.user_email,
			      CAE_GIT_ARGV,
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
		 r < 0	   ? e.message
		 : res.err ? res.err
			   : "");
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
	if ((r = check_existing(&p, err)) < 0)
		goto fail;
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
		cae__deps_install(p.exec, p.exec_ctx, b->log, p.project, &p.deps_opts, p.deps,
				  p.warnings, p.cancel_fd);
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
	if (!info->network)
		info->network = cae__net_info(b->cfg, ops->name, task);
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
