/* The patch worker's executor: runs a parsed patch (cae/patch.h) in a
 * task's environment, on any backend.
 *
 * What it does, in order:
 *  1. Finds the environment (cae_backend_info) and chooses how to touch its files: directly
 *     on this host when the backend gives a host path (local backend: every path opened with
 *     openat2 RESOLVE_BENEATH from the workspace, atomic writes, modes kept), or through
 *     commands run in the environment (any backend: a small POSIX sh script that resolves
 *     the target inside the environment, refuses anything outside the workspace, and writes
 *     to a temporary file renamed over the target).
 *  2. Paths: relative to the workspace, or absolute under the workspace as commands see it
 *     (ContainerInfo.workspace_path). A ".." component, a path outside, a path through a
 *     symbolic link that leads outside (or to a missing file) are refused: nothing outside
 *     the workspace is read or changed. Missing parent directories are created.
 *  3. The diff forms (`*** Begin Patch`, unified diffs) are all-or-nothing: every hunk is
 *     checked against the current files first (exact context, then whitespace-tolerant);
 *     if one does not apply nothing is written and the result's `error` names the file and
 *     the hunk. On this host (local environments) the files are then changed as one
 *     transaction of the workspace's journal (base/txn.h): every new version is staged
 *     beside its target, then all are renamed after a commit record, so a failure or a
 *     crash at any instant leaves every file old or every one new once recovered (the
 *     next process opening the workspace, or `cae gc`, recovers). Through commands the
 *     same is done by scripts in the environment (staged files, a journal and a commit
 *     record there; the next worker run in that environment recovers).
 *  4. The command forms (JSON, Markdown) run command by command: file_edit
 *     create|update|append|delete|patch|move, shell_command (sh -c, bash when the
 *     environment has it, stdout and stderr combined, command_timeout, 5 min by default),
 *     git_operation add|commit|reset|checkout (argv, no shell, git_timeout, 30 s by
 *     default). Continue mode by default; stop_on_error stops at the first failure.
 *  5. Options: dry_run (check and plan, nothing changed) and rollback (a tar
 *     snapshot of the whole workspace, modes included, taken before the first command; on
 *     the first failure the workspace is emptied and the snapshot extracted, so tracked,
 *     untracked, ignored and deleted files alike come back byte for byte). rollback implies
 *     stopping at the first failure. A diff form needs no snapshot (it is one
 *     transaction), nor does a JSON/Markdown patch made only of file edits: it is
 *     checked whole first (cae_patch_check) and applied as one transaction, so a failure
 *     leaves nothing changed ("rolled_back": true) and a crash too. The snapshot lives in
 *     $TMPDIR/cae-snap.<pid>-<start>.XXXXXX (in a container, /workspace/tmp); a patch killed
 *     after it was taken is rolled back by the next patch of the workspace, or `cae gc`,
 *     and only then is the snapshot removed ("snapshots_restored" in the next result). When
 *     a rollback itself fails, the snapshot is kept ("snapshot_kept") for them.
 *  6. auto_commit: after a run in which at least one command succeeded (and nothing was
 *     rolled back): `git add -A`, then `git commit -m "<prefix> <subject>"`, the subject
 *     being cae_worker_commit_subject's, cut at 80 characters (an identity is given with
 *     -c when neither the repository nor the environment has one);
 *     "nothing to commit" is not an error. The commit hash goes into `git_commit`.
 *
 * The result (new JSON object):
 *   { "success": bool,            every command succeeded (and the patch was applied)
 *     "executed_cmds": n,         commands that succeeded (not merely run)
 *     "failed_cmds": n,
 *     "skipped_cmds": n,          not run (stop_on_error, rollback, all-or-nothing)
 *     "results": [ { "command": {type, action, target, content (cut), ...},
 *                    "success", "output", "error", "duration" (ms),
 *                    "exit_code"?, "timed_out"? } ],
 *     "summary": "commands: 3, succeeded: 2, failed: 1",
 *     "format": "json"|"markdown"|"apply_patch"|"unified"|"empty",
 *     "warnings": [...],          the parser's (unknown blocks skipped)
 *     "git_commit"?: hash,        auto-commit made a commit
 *     "auto_commit"?: "committed"|"nothing_to_commit"|"failed", "auto_commit_error"?,
 *     "rolled_back"?: bool, "rollback_error"?,
 *     "dry_run"?: true, "plan"?: text, "patch"?: cae_patch_to_json(),
 *     "error"?: message }         the patch as a whole was not applied (a hunk did not
 *                                 apply, a path was refused in the check, ...)
 * Output and error strings are valid UTF-8, capped, and have the log's secrets redacted.
 *
 * Log events (name, level, fields):
 *   worker.patch_execution_start    info   patch, session_key, format, commands
 *   worker.command_executed         info   command_index, type, action, target, duration_ms
 *   worker.command_failed           error  command_index, type, action, target, error
 *   worker.patch_execution_complete info|error  success, executed_cmds, failed_cmds, summary
 *   worker.auto_commit_success      info   commit (warn with commit "" and
 *                                          nothing_to_commit true when there was nothing)
 *   worker.auto_commit_failed       warn   error
 *   worker.patch_execution_error    error  error (the patch was not applied at all)
 *   worker.rollback                 warn|error  restored, error?
 *
 * Library code: nothing here prints. Thread-safe as far as the backend is.
 */
#ifndef CAE_WORKER_H
#define CAE_WORKER_H

#include "cae/export.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cae/backend.h"
#include "cae/error.h"
#include "cae/log.h"
#include "cae/patch.h"

#ifdef __cplusplus
extern "C" {
#endif

struct cae_config;
struct cae_policy;

#define CAE_WORKER_DEFAULT_COMMAND_TIMEOUT_MS (300 * 1000)
#define CAE_WORKER_DEFAULT_GIT_TIMEOUT_MS (30 * 1000)
#define CAE_WORKER_DEFAULT_PREFIX "[Worker Auto-Commit]"
#define CAE_WORKER_DEFAULT_MAX_OUTPUT ((size_t)1 << 20) /* bytes of output per command */
#define CAE_WORKER_DEFAULT_MAX_FILE ((size_t)256 << 20) /* largest file read (patch, append) */
#define CAE_WORKER_COMMIT_SUMMARY_CHARS 80

/* The subject of an auto-commit of patch p (parsed from patch_text, which may be NULL): the
 * patch's first meaningful line (a mail's Subject, the message before a diff, a Markdown
 * heading or sentence outside code blocks), never a format marker; else what it does
 * ("update 2 files: a.c, b.c", "add 1 file: x", "run make test"). New string, one line,
 * uncut (the commit cuts it at CAE_WORKER_COMMIT_SUMMARY_CHARS); NULL on ENOMEM. */
CAE_EXPORT char *cae_worker_commit_subject(const char *patch_text, const cae_patch *p);
#define CAE_WORKER_MAX_COMMAND_JSON 2048 /* bytes of content shown in each result's command */

/* How the worker touches the environment's files. */
typedef enum cae_worker_fs_mode {
	CAE_WORKER_FS_AUTO = 0, /* HOST when the environment has a host path, else ENV */
	CAE_WORKER_FS_HOST,	/* file system calls on this host; the rollback snapshot too */
	/* through the environment's file service (a container's helper; the local backend
	 * answers in this process) and the rollback snapshot by commands there */
	CAE_WORKER_FS_ENV,
} cae_worker_fs_mode;

typedef struct cae_worker_options {
	bool dry_run;
	bool stop_on_error;
	bool rollback;
	bool auto_commit;
	const char *commit_message_prefix; /* borrowed; NULL: CAE_WORKER_DEFAULT_PREFIX */
	int64_t command_timeout_ms;	   /* shell_command; <= 0: the default (5 min) */
	int64_t git_timeout_ms;		   /* git_operation and auto-commit; <= 0: 30 s */
	size_t max_output;		   /* 0: CAE_WORKER_DEFAULT_MAX_OUTPUT */
	size_t max_file;		   /* 0: CAE_WORKER_DEFAULT_MAX_FILE */
	/* The patch text (borrowed, may be NULL): the auto-commit message takes its first
	 * non-blank line, and worker.patch_execution_start logs it. */
	const char *patch_text;
	const char *session_key; /* for the log; NULL: the task uuid */
	/* When set (borrowed), a shell_command the policy denies is not run and fails. NULL:
	 * no check (the environment, not a word list, is the boundary). */
	const struct cae_policy *policy;
	cae_worker_fs_mode fs;
	/* Workspace-relative paths a patch never writes or removes (borrowed; NULL/0: none;
	 * cae_worker_options_init: command_executor.protected_paths' default, .git/hooks):
	 * refused on this host's file system however the path is spelt; elsewhere the
	 * environment keeps commands and its helper out (command_executor.protected_paths). */
	const char *const *protected_paths;
	size_t n_protected_paths;
	/* readable = stop: the running command is killed, the rest not run. -1: none (as
	 * cae_worker_options_init() sets it; 0 is fd 0). */
	int cancel_fd;
} cae_worker_options;

/* Zeroes *o (defaults everywhere, cancel_fd -1, protected_paths .git/hooks). */
CAE_EXPORT void cae_worker_options_init(cae_worker_options *o);
/* cae_worker_options_init() then worker.* and command_executor.protected_paths of cfg
 * (borrowed; strings point into cfg). */
CAE_EXPORT void cae_worker_options_from_config(cae_worker_options *o, const struct cae_config *cfg);

/* Runs p (borrowed) in the environment of task_uuid. Returns 0 with *result (new reference)
 * whenever the environment was reached, whatever the commands did: check result.success and
 * result.error. Returns < 0 with err set, and no result, when nothing could be done: -ENOENT
 * (no such environment), -EINVAL (bad options), a snapshot that could not be taken
 * (rollback), -ENOMEM. log may be NULL. */
CAE_EXPORT int cae_worker_run(cae_backend *b, const char *task_uuid, const cae_patch *p,
			      const cae_worker_options *o, cae_log *log, json_t **result,
			      cae_error *err);

/* Parses text[0..len) (cae_patch_parse; warnings are logged) and runs it. A patch that does
 * not parse is -EINVAL (or -E2BIG) with the parser's message in err ("patch parse error:
 * line 3, column 14: ..."), logged as worker.patch_execution_error; nothing runs. When
 * o->patch_text is NULL the text is used for the commit message and the log. */
CAE_EXPORT int cae_worker_run_text(cae_backend *b, const char *task_uuid, const char *text,
				   size_t len, const cae_worker_options *o, cae_log *log,
				   json_t **result, cae_error *err);

/* Completes or rolls back what cae processes that are gone left half done in the files of
 * task_uuid's environment (what every cae_worker_run does first for the file system it
 * uses): the workspace's journal on this host (local environments), and the environment's
 * own (one command in it). Returns 0, or < 0 with err set when the environment cannot be
 * reached. */
CAE_EXPORT int cae_worker_recover(cae_backend *b, const char *task_uuid, cae_error *err);

/* Restores, then removes, every armed rollback snapshot on this host ($TMPDIR and /tmp) of a
 * cae process that is gone: a patch with rollback killed half-way (of workspace, or of every
 * workspace when NULL; one whose workspace is gone is only removed). Adds their number to
 * *restored (may be NULL). cae_worker_run and cae_worker_recover do this for their
 * environment first (and for the snapshots a killed patch left in a container). */
CAE_EXPORT int cae_worker_recover_snapshots(const char *workspace, unsigned *restored,
					    cae_error *err);

/* The human rendering of a result (borrowed): the summary, a blank line, then
 * one line per command
 *   ✓ [1] file_edit update src/a.go (3ms)
 *   ✗ [2] shell_command run go test ./... (1520ms)
 *       error: command failed: exit status 1 ...
 * then "git commit: <hash>", "rolled back: ..." or "error: ..." lines when present, and for
 * a dry run the plan. A multi-line target shows its first line and "…". New string, NULL
 * only on ENOMEM. */
CAE_EXPORT char *cae_worker_render(const json_t *result);

#ifdef __cplusplus
}
#endif
#endif
