/* Internal to src/worker: the state of one run, the plan it runs, and the parts it is made of:
 * the environment file system the executor writes through, path confinement, commands in the
 * environment, the rollback snapshot, and the result.
 *
 * The files, in the order a run uses them:
 *   worker.c    the public entry points: options, setting up a run (environment, file system),
 *               the run itself (snapshot, plan, execution, rollback, auto-commit), recovery
 *   plan.c      the plan: checked whole before anything is written (all or nothing), or one
 *               step per command, each checked as it runs (continue mode)
 *   execute.c   the one execution path: every step, in either mode, through one executor
 *   command.c   shell_command, git_operation and the auto-commit (commands in the environment),
 *               and cae__wk_run()
 *   report.c    each command's result and log event, the summary, the start event
 *   render.c    cae_worker_render(): the human rendering of a result
 *   path.c      what is refused in a patch's path, before anything is touched
 *   fs-host.c   files on this host (resolved beneath the workspace with base/chase.h,
 *               base/txn.h transactions)
 *   fs-helper.c files through the environment's file service (cae_backend_fs: in a container
 *               its helper runs fs-host.c's code there; the local backend runs it in process)
 *   fs-serve.c  that service's side (fs-serve.h): requests answered with fs-host.c
 *   snapshot.c  the rollback snapshot (a tar of the workspace)
 */
#ifndef CAE_WORKER_INTERNAL_H
#define CAE_WORKER_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <jansson.h>

#include "base/buf.h"
#include "cae/backend.h"
#include "cae/error.h"
#include "cae/log.h"
#include "cae/patch.h"
#include "cae/worker.h"

/* Turns a path from a patch into a path relative to the workspace: relative paths are taken
 * from the workspace; absolute ones must lie under root (the workspace as commands see it).
 * "." components and repeated slashes are dropped. Refused with -EACCES and a message: "",
 * a NUL byte, a ".." component, an absolute path outside root, the workspace itself.
 * *rel is a new string ("a/b.txt"). */
int cae__wk_path_rel(const char *root, const char *path, char **rel, cae_error *err);

/* ---- The environment file system ---- */

#define WK_MODE_KEEP ((mode_t)-1) /* write: keep the existing file's mode, 0644 for a new one */

typedef struct wk_fs wk_fs;

typedef struct wk_fs_ops {
	/* Reads rel (at most max bytes: -EFBIG beyond). data NULL: only whether it exists and
	 * its mode. -ENOENT when it does not exist; -EISDIR for a directory; -EACCES when
	 * the path leads outside the workspace; err says which path and why. *data is new,
	 * NUL-terminated. */
	int (*read)(wk_fs *fs, const char *rel, size_t max, char **data, size_t *len, mode_t *mode,
		    cae_error *err);
	/* Writes rel atomically (temporary file in the same directory, renamed over), making
	 * missing parent directories. A final symbolic link is followed when it stays inside
	 * the workspace. mode: WK_MODE_KEEP or the permission bits to give the file. */
	int (*write)(wk_fs *fs, const char *rel, const char *data, size_t len, mode_t mode,
		     cae_error *err);
	/* Removes the file rel (a symbolic link itself, not its target). -ENOENT, -EISDIR. */
	int (*remove)(wk_fs *fs, const char *rel, cae_error *err);
	/* All-or-nothing changes: after txn_begin, txn_write and
	 * txn_remove (same checks as write and remove) only stage; txn_commit applies every
	 * staged change, or none (then err says why); txn_abort drops them. One transaction
	 * at a time. A crash at any point is completed or rolled back by the next recovery
	 * (base/txn.h's journal, recovered by cae__wk_fs_host_new where the files are: on this
	 * host, or by the environment's helper). */
	int (*txn_begin)(wk_fs *fs, cae_error *err);
	int (*txn_write)(wk_fs *fs, const char *rel, const char *data, size_t len, mode_t mode,
			 cae_error *err);
	int (*txn_remove)(wk_fs *fs, const char *rel, cae_error *err);
	int (*txn_commit)(wk_fs *fs, cae_error *err);
	void (*txn_abort)(wk_fs *fs);
	void (*free)(wk_fs *fs);
} wk_fs_ops;

struct wk_fs {
	const wk_fs_ops *ops;
};

/* Host file system calls below host_path (opened once; openat2 RESOLVE_BENEATH). Opening
 * recovers what a killed process left in the workspace's journal (base/txn.h). */
int cae__wk_fs_host_new(const char *host_path, wk_fs **out, cae_error *err);
/* Writes and removes of fs (a host file system) at or below one of paths[0..n) (borrowed,
 * for fs's lifetime) are refused with -EACCES, however the path is spelt (base/protect.h). */
void cae__wk_fs_host_protect(wk_fs *fs, const char *const *paths, size_t n);

/* How the worker runs commands in the environment (cae__wk_run). backend, task_uuid are
 * borrowed. */
typedef struct wk_exec_ctx {
	cae_backend *backend;
	const char *task_uuid;
	int64_t timeout_ms;
	int cancel_fd; /* -1: none */
} wk_exec_ctx;

/* Through the environment's file service (fs-helper.c, cae_backend_fs), which runs fs-host.c's
 * code where the files are, on root (the workspace as commands see it): a container's helper,
 * or the local backend in this process. -EOPNOTSUPP when the environment has none (a
 * container whose helper is missing). Opening recovers the workspace's journal there. */
int cae__wk_fs_helper_new(cae_backend *b, const char *task_uuid, const char *root, wk_fs **out,
			  cae_error *err);

void cae__wk_fs_free(wk_fs *fs);

/* ---- Rollback snapshot: a tar of the whole workspace ---- */

typedef struct wk_snapshot wk_snapshot;

/* host_path non-NULL: tar on this host into a private temporary directory; else tar in the
 * environment into its scratch directory (the workspace's sibling "tmp", $TMPDIR or /tmp). */
int cae__wk_snapshot_take(const wk_exec_ctx *ctx, const char *root, const char *host_path,
			  const char *const *paths, size_t npaths, wk_snapshot **out,
			  cae_error *err);
/* Empties the workspace and extracts the snapshot into it, leaving the protected paths
 * (paths[0..n), borrowed) and the directories on the way to them as they are: the
 * environment keeps them read-only, so no patch changed them. */
int cae__wk_snapshot_restore(wk_snapshot *s, const char *const *paths, size_t n, cae_error *err);
/* Removes the snapshot's files (disarmed first) and frees it. Accepts NULL. */
void cae__wk_snapshot_free(wk_snapshot *s);
/* Frees it and keeps its files, armed: what it protects is half applied (the restore failed),
 * and the next patch or `cae gc` restores it. Accepts NULL. */
void cae__wk_snapshot_keep(wk_snapshot *s);
const char *cae__wk_snapshot_dir(const wk_snapshot *s); /* borrowed */
/* Restores, then removes, every armed snapshot in the environment of the workspace root (as
 * commands see it) whose owner, a process of this boot of this host, is gone; adds their
 * number to *restored. */
int cae__wk_snapshot_recover_env(const wk_exec_ctx *ctx, const char *root, unsigned *restored,
				 cae_error *err);

/* Runs argv in the environment (ctx) or, when host is true, on this host with cwd. The
 * output is capped at max_out bytes per stream. */
int cae__wk_run(const wk_exec_ctx *ctx, bool host, const char *cwd, const char *const *argv,
		const char *stdin_data, size_t stdin_len, bool has_stdin, size_t max_out,
		cae_run_result *res, cae_error *err);

/* ---- One run ---- */

typedef struct wk_state {
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
} wk_state;

/* What one command did. */
typedef struct wk_outcome {
	bool success;
	cae_buf output;
	cae_buf error;
	int exit_code;
	bool has_exit_code;
	bool timed_out;
} wk_outcome;

void cae__wk_outcome_init(wk_outcome *oc, size_t max_output);
void cae__wk_outcome_clear(wk_outcome *oc);
/* Marks oc failed with the message. */
void cae__wk_fail(wk_outcome *oc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* What a successful file edit did, in oc's output. The edit is done and recorded (success):
 * when memory runs out, the report stays short. */
void cae__wk_report(wk_outcome *oc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- The plan (plan.c) ---- */

typedef struct wk_plan {
	bool all_or_nothing;
	cae_patch_plan *checked; /* all or nothing: cae_patch_check()'s plan */
	cae_patch_step *steps;	 /* continue mode: one step per command */
	size_t n;
} wk_plan;

/* cae_patch_check() over the files as they are now (through st->fs). */
int cae__wk_plan_check(wk_state *st, cae_patch_plan **out, cae_error *err);
/* Makes the plan of st->p. all_or_nothing: every path is checked first, lexically, then the
 * whole patch against the files (cae_patch_check): every step's new content is known before
 * anything is written. Otherwise one step per command, in order: a step that depends on a
 * file's content (a hunked patch, move or delete, an append) is computed, and so checked,
 * when it runs, from the files as the commands before it left them. Returns 0, or < 0 with
 * *error (new) saying why nothing can run. */
int cae__wk_plan_make(wk_state *st, bool all_or_nothing, wk_plan *pl, char **error);
size_t cae__wk_plan_count(const wk_plan *pl);
const cae_patch_step *cae__wk_plan_step(const wk_plan *pl, size_t i); /* borrowed */
void cae__wk_plan_clear(wk_plan *pl);

/* ---- Execution (execute.c) ---- */

/* Runs the plan through the one executor, recording every step it runs (cae__wk_record) and
 * counting the others in st->skipped. All or nothing: every file change is staged in one
 * transaction, committed after the last step, or dropped at the first failure, a cancel or
 * a failed commit. Continue mode: each change is made (and kept) as its step runs; a failed
 * step is reported and the next one runs, unless stop_on_error. Returns whether a step
 * failed or the patch was not applied; *error (new, or NULL) says why the patch as a whole
 * failed (nothing was changed, or it was cancelled). */
bool cae__wk_plan_run(wk_state *st, const wk_plan *pl, bool stop_on_error, char **error);

/* ---- Commands in the environment (command.c) ---- */

/* Runs a shell_command or git_operation, filling oc. */
void cae__wk_exec_command(wk_state *st, const cae_patch_command *c, wk_outcome *oc);
/* The auto-commit: `git add -A`, then a commit when something is staged. Returns 0
 * (committed: *hash new), 1 (nothing to commit), or -1 with *error new. */
int cae__wk_auto_commit(wk_state *st, char **hash, char **error);

/* ---- The result and the log (report.c) ---- */

/* A JSON string from bytes (made valid UTF-8, the log's secrets redacted). */
json_t *cae__wk_clean_string(const wk_state *st, const char *s, size_t n);
/* Appends the result of command i to st->results, counts it, and logs it. */
void cae__wk_record(wk_state *st, size_t i, const cae_patch_command *c, const wk_outcome *oc,
		    int64_t duration_ms);
/* The parser's warnings (new array). */
json_t *cae__wk_warnings_json(const cae_patch *p);
/* worker.patch_execution_start. */
void cae__wk_log_start(const wk_state *st, bool dry_run);
/* "commands: 3, succeeded: 2, failed: 1[, not run: n][; the workspace was rolled back]". */
void cae__wk_set_summary(json_t *out, const wk_state *st, bool rolled_back);

#endif
