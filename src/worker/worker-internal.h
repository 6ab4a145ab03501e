/* Internal to src/worker: the environment file system the executor writes through, path
 * confinement, and the rollback snapshot. */
#ifndef CAE_WORKER_INTERNAL_H
#define CAE_WORKER_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "cae/backend.h"
#include "cae/error.h"

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
	/* All-or-nothing changes (NULL when the fs has none): after txn_begin, txn_write and
	 * txn_remove (same checks as write and remove) only stage; txn_commit applies every
	 * staged change, or none (then err says why); txn_abort drops them. One transaction
	 * at a time. A crash at any point is completed or rolled back by the next recovery:
	 * on this host base/txn.h's (cae__wk_fs_host_new), through commands the environment's own
	 * journal (cae__wk_fs_env_new). */
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

/* Through commands in the environment (any backend). root is the workspace as commands see
 * it. b, uuid are borrowed and must outlive the fs. Opening recovers the environment's
 * journals of cae processes that are gone (one command). */
typedef struct wk_exec_ctx {
	cae_backend *backend;
	const char *task_uuid;
	int64_t timeout_ms;
	int cancel_fd; /* -1: none */
} wk_exec_ctx;
int cae__wk_fs_env_new(const wk_exec_ctx *ctx, const char *root, wk_fs **out, cae_error *err);

void cae__wk_fs_free(wk_fs *fs);

/* ---- Rollback snapshot: a tar of the whole workspace ---- */

typedef struct wk_snapshot wk_snapshot;

/* host_path non-NULL: tar on this host into a private temporary directory; else tar in the
 * environment into its scratch directory (the workspace's sibling "tmp", $TMPDIR or /tmp). */
int cae__wk_snapshot_take(const wk_exec_ctx *ctx, const char *root, const char *host_path,
			  wk_snapshot **out, cae_error *err);
/* Empties the workspace and extracts the snapshot into it. */
int cae__wk_snapshot_restore(wk_snapshot *s, cae_error *err);
/* Removes the snapshot's files and frees it. Accepts NULL. */
void cae__wk_snapshot_free(wk_snapshot *s);

/* Runs argv in the environment (ctx) or, when host is true, on this host with cwd. The
 * output is capped at max_out bytes per stream. */
int cae__wk_run(const wk_exec_ctx *ctx, bool host, const char *cwd, const char *const *argv,
		const char *stdin_data, size_t stdin_len, bool has_stdin, size_t max_out,
		cae_run_result *res, cae_error *err);

#endif
