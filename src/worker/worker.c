/* The patch worker's entry points (see cae/worker.h): a run is set up here (the environment,
 * how its files are reached), then planned (plan.c), executed (execute.c), rolled back from
 * a snapshot when asked (snapshot.c), auto-committed (command.c) and reported (report.c). */
#include "cae/worker.h"

#include "base/macro.h"
#include "cae/config.h"
#include "worker/worker-internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/banned.h"

DEFINE_TRIVIAL_CLEANUP_FUNC(cae_patch *, cae_patch_free)

/* command_executor.protected_paths' default, for options not taken from a config */
static const char *const default_protected[] = {".git/hooks"};

void cae_worker_options_init(cae_worker_options *o)
{
	memset(o, 0, sizeof(*o));
	o->cancel_fd = -1;
	o->protected_paths = default_protected;
	o->n_protected_paths = ARRAY_SIZE(default_protected);
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
	o->protected_paths = (const char *const *)cfg->command_executor.protected_paths.items;
	o->n_protected_paths = cfg->command_executor.protected_paths.n;
}

static int dry_run(wk_state *st, json_t *out)
{
	const cae_patch *p = st->p;
	cae__wk_log_start(st, true);
	_cleanup_free_ char *plan_text = cae_patch_plan_text(p);
	cae_patch_plan *plan = NULL;
	cae_error err;
	cae_error_clear(&err);
	int r = cae__wk_plan_check(st, &plan, &err);
	cae_patch_plan_free(plan);
	size_t n = cae_patch_count(p);
	/* a command of an unknown type or action would fail in its turn */
	for (size_t i = 0; i < n && r == 0; i++)
		if (cae_patch_get(p, i)->invalid)
			r = cae_error_set(&err, -EINVAL, "command %zu: %s", i + 1,
					  cae_patch_get(p, i)->invalid);
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
			    cae__wk_clean_string(st, plan_text, plan_text ? strlen(plan_text) : 0));
	json_object_set_new(out, "patch", cae_patch_to_json(p));
	if (r < 0) {
		json_object_set_new(out, "error",
				    cae__wk_clean_string(st, err.message, strlen(err.message)));
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

static void rollback(wk_state *st, wk_snapshot *snap, json_t *out, bool *rolled_back)
{
	cae_error err;
	cae_error_clear(&err);
	int r =
	    cae__wk_snapshot_restore(snap, st->o->protected_paths, st->o->n_protected_paths, &err);
	*rolled_back = r == 0;
	json_object_set_new(out, "rolled_back", json_boolean(r == 0));
	if (r < 0)
		json_object_set_new(out, "rollback_error",
				    cae__wk_clean_string(st, err.message, strlen(err.message)));
	cae_log_fields(
	    st->log, r == 0 ? CAE_LOG_WARN : CAE_LOG_ERROR, "worker.rollback",
	    json_pack("{s:b, s:s?}", "restored", r == 0, "error", r < 0 ? err.message : NULL),
	    r == 0 ? "the workspace was restored to its state before the patch"
		   : "the workspace could not be restored");
}

/* The rollback snapshots of patches killed half-way in this workspace (snapshot.c): restored
 * before anything else touches it. Failures are logged; the snapshots stay armed. */
static unsigned recover_snapshots(cae_backend *b, const char *task_uuid, const cae_env_info *info,
				  cae_log *log)
{
	unsigned restored = 0;
	cae_error e;
	cae_error_clear(&e);
	int r = 0;
	if (info->host_path)
		r = cae_worker_recover_snapshots(info->host_path, &restored, &e);
	wk_exec_ctx ctx = {
	    .backend = b, .task_uuid = task_uuid, .timeout_ms = 600000, .cancel_fd = -1};
	if (r == 0 && info->workspace_path)
		r = cae__wk_snapshot_recover_env(&ctx, info->workspace_path, &restored, &e);
	if (r < 0)
		cae_log_fields(log, CAE_LOG_ERROR, "worker.snapshot_recovery_failed",
			       json_pack("{s:s, s:s}", "task_uuid", task_uuid, "error", e.message),
			       "a patch killed half-way could not be rolled back yet");
	else if (restored)
		cae_log_fields(
		    log, CAE_LOG_WARN, "worker.snapshot_restored",
		    json_pack("{s:s, s:i}", "task_uuid", task_uuid, "snapshots", (int)restored),
		    "a patch killed half-way was rolled back");
	return restored;
}

static int execute(wk_state *st, json_t *out, cae_error *err)
{
	const cae_patch *p = st->p;
	const cae_worker_options *o = st->o;
	_cleanup_free_ char *patch_error = NULL;
	wk_snapshot *snap = NULL;
	/* The diff forms and, with rollback, a patch of file edits only are one transaction
	 * (base/txn.h, wherever the files are): all or nothing, also across a crash, without a
	 * snapshot. */
	bool files_only = true;
	for (size_t i = 0; i < cae_patch_count(p); i++)
		files_only = files_only && cae_patch_get(p, i)->type == CAE_PATCH_FILE_EDIT;
	bool all_or_nothing = cae_patch_is_atomic(p) || (o->rollback && files_only);
	if (o->rollback && !all_or_nothing) {
		int r = cae__wk_snapshot_take(&st->fs_ctx, st->root,
					      st->host ? st->info.host_path : NULL,
					      o->protected_paths, o->n_protected_paths, &snap, err);
		if (r < 0)
			return r;
	}
	cae__wk_log_start(st, false);
	size_t n = cae_patch_count(p);
	bool failed;
	bool rolled_back = false;
	wk_plan plan;
	if (cae__wk_plan_make(st, all_or_nothing, &plan, &patch_error) < 0)
		failed = true;
	else
		failed = cae__wk_plan_run(st, &plan, o->stop_on_error || o->rollback, &patch_error);
	cae__wk_plan_clear(&plan);
	if (failed && st->ok + st->failed == 0)
		st->skipped = n;
	/* all or nothing, nothing was changed: for a command form with rollback, that is
	 * the rollback */
	if (failed && all_or_nothing && o->rollback && !cae_patch_is_atomic(p)) {
		rolled_back = true;
		json_object_set_new(out, "rolled_back", json_true());
	}
	bool restore_failed = false;
	if (snap && (failed || st->cancelled)) {
		rollback(st, snap, out, &rolled_back);
		restore_failed = !rolled_back;
	}
	if (restore_failed) {
		/* what it protects is half applied: kept, armed, for the next patch or gc */
		json_object_set_new(out, "snapshot_kept", json_string(cae__wk_snapshot_dir(snap)));
		cae__wk_snapshot_keep(snap);
	} else {
		cae__wk_snapshot_free(snap);
	}

	bool success = !failed && !st->cancelled && st->failed == 0;
	json_object_set_new(out, "success", json_boolean(success));
	json_object_set_new(out, "executed_cmds", json_integer((json_int_t)st->ok));
	json_object_set_new(out, "failed_cmds", json_integer((json_int_t)st->failed));
	json_object_set_new(out, "skipped_cmds", json_integer((json_int_t)st->skipped));
	json_object_set_new(out, "results", json_incref(st->results));
	cae__wk_set_summary(out, st, rolled_back);
	if (patch_error) {
		json_object_set_new(out, "error",
				    cae__wk_clean_string(st, patch_error, strlen(patch_error)));
		cae_log_fields(st->log, CAE_LOG_ERROR, "worker.patch_execution_error",
			       json_pack("{s:s}", "error", patch_error),
			       "the patch was not applied");
	}

	/* auto-commit: after at least one success, never after a rollback */
	if (o->auto_commit && st->ok > 0 && !rolled_back && !st->cancelled) {
		_cleanup_free_ char *hash = NULL, *cerr = NULL;
		int r = cae__wk_auto_commit(st, &hash, &cerr);
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
			json_object_set_new(
			    out, "auto_commit_error",
			    cae__wk_clean_string(st, cerr, cerr ? strlen(cerr) : 0));
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
	wk_state st = {
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
	if (st.host) {
		r = cae__wk_fs_host_new(st.info.host_path, &st.fs, err);
		if (r == 0)
			cae__wk_fs_host_protect(st.fs, o->protected_paths, o->n_protected_paths);
	} else {
		r = cae__wk_fs_helper_new(b, task_uuid, st.root, &st.fs, err);
		if (r == -EOPNOTSUPP)
			cae_error_prefix(err,
					 "the patch worker cannot reach this environment's files");
	}
	_cleanup_(json_decrefp) json_t *out = json_object();
	st.results = json_array();
	if (r == 0 && (!out || !st.results))
		r = cae_error_set(err, -ENOMEM, "out of memory");
	if (r == 0 && !o->dry_run) {
		unsigned restored = recover_snapshots(b, task_uuid, &st.info, log);
		if (restored)
			json_object_set_new(out, "snapshots_restored", json_integer(restored));
	}
	if (r == 0) {
		json_object_set_new(out, "format",
				    json_string(cae_patch_format_name(cae_patch_get_format(p))));
		json_object_set_new(out, "warnings", cae__wk_warnings_json(p));
		r = o->dry_run ? dry_run(&st, out) : execute(&st, out, err);
	}
	/* files written on this host: .git/config back to the rule (a workspace the user owns;
	 * the patch's commands were guarded by the backend already) */
	if (st.host && !o->dry_run)
		DISCARD_RESULT(cae_backend_guard(b, task_uuid, NULL));
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
	/* in a container: the workspace's journal, recovered by the helper there */
	if (r == 0 && !info.host_path && info.workspace_path &&
	    cae__wk_fs_helper_new(b, task_uuid, info.workspace_path, &fs, NULL) == 0)
		cae__wk_fs_free(TAKE_PTR(fs));
	if (r == 0)
		recover_snapshots(b, task_uuid, &info, NULL);
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
