/* Crash-consistent changes to the files of a workspace (libc + Linux syscalls only).
 *
 * A transaction changes a set of files (each replaced by a staged version, or removed) so that
 * a process killed at any instant (SIGKILL, OOM, power loss for what fsync covers) leaves
 * every file old or new and the set all-or-nothing, once recovery has run; no temporary file
 * survives recovery.
 *
 * The journal: one file per transaction in the workspace's journal directory, outside the
 * workspace when possible: <parent of the workspace>/.cae-journal (for the local backend
 * <state>/local/<uuid>/.cae-journal, cae's own), else <workspace>/.cae-journal. Its name is
 * <hash of the workspace's real path>.<pid>.<n>.journal; its lines announce, before it is
 * done, every change in the workspace:
 *   cae-journal 1 <workspace>       header
 *   D <dir>                         a directory about to be made
 *   S <dir> <name> <staged>         a staged version of dir/name about to be written
 *   X <dir> <name>                  dir/name is to be removed
 *   C                               committed (multi-file transactions; fsync'd first)
 *   B <dir> <name> <backup>         dir/name about to get a hard-linked backup
 *   N <dir> <name>                  dir/name did not exist before the commit
 *   A                               aborting after the commit began (fsync'd)
 * (fields percent-encoded; <dir> relative to the workspace, "." for itself; the last S or X
 * of a name is its change). Staged files and backups live next to their target, named
 * .cae-tmp-* and .cae-bak-*, so every rename stays in one directory.
 *
 * Recovery (cae__wsj_recover, run when an editor or a worker opens a workspace and by
 * `cae gc`): a journal whose owner still lives is locked (flock, held for the whole
 * transaction) and left alone; any other one is completed: without C, staged files are
 * removed and made directories removed when empty (nothing else was touched); with C and no
 * A, every staged file is renamed over its target (those already renamed are gone) and every
 * X target removed; with A, every backup is renamed back and every N target removed. Then
 * the remaining staged files and backups and the journal go. Every step is idempotent, so a
 * recovery killed half-way is completed by the next one.
 *
 * A transaction of one file is the plain atomic rename (no C, no backup): its journal only
 * serves to remove a staged file left behind.
 *
 * Paths in a journal are resolved beneath the workspace (openat2 RESOLVE_BENEATH) and only
 * names starting with ".cae-" are taken as staged files or backups, so a forged journal can
 * do nothing outside the workspace.
 */
#ifndef CAE_BASE_TXN_H
#define CAE_BASE_TXN_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#define CAE_JOURNAL_DIR ".cae-journal"

/* The journal of one workspace. */
typedef struct cae_wsj cae_wsj;

/* Opens (making it if needed) the journal directory of the workspace whose directory is
 * root_fd (borrowed: it must stay open as long as the cae_wsj). Returns 0 with *out new, or
 * -errno. Holds no fd of its own. */
int cae__wsj_open(int root_fd, cae_wsj **out);
/* Accepts NULL. */
void cae__wsj_free(cae_wsj *w);
/* The journal directory's path (borrowed). */
const char *cae__wsj_dir(const cae_wsj *w);

typedef struct cae_wsj_stats {
	unsigned journals;   /* journals of dead transactions handled */
	unsigned forward;    /* of which completed (rolled forward) */
	unsigned back;	     /* of which rolled back */
	unsigned busy;	     /* journals of live transactions left alone */
	unsigned removed;    /* staged files and backups removed */
	unsigned incomplete; /* journals kept because a step failed (retried next time) */
} cae_wsj_stats;

/* Completes or rolls back every transaction of this workspace whose owner is gone. st may be
 * NULL. Returns 0 or -errno (the journal directory could not be read). */
int cae__wsj_recover(cae_wsj *w, cae_wsj_stats *st);

/* Opens the workspace at path and recovers it (cae gc). */
int cae__wsj_recover_path(const char *root_path, cae_wsj_stats *st);

/* ---- Transactions ---- */

typedef struct cae_txn cae_txn;

/* Starts a transaction (its journal is created with the first change). Returns 0 or -errno.
 * A cae_wsj may run several transactions, from several threads; one transaction belongs to
 * one thread. */
int cae__txn_begin(cae_wsj *w, cae_txn **out);

/* Makes directory dir (relative to the workspace; its parent must exist), announced first.
 * -EEXIST when it exists (not announced then). */
int cae__txn_mkdir(cae_txn *t, const char *dir);
/* cae__txn_mkdir as base/chase.h's cae__chase_mkdir_fn (ctx: the cae_txn, of the root that
 * cae__chase resolves beneath), so that directories made while resolving a path are
 * announced and a rollback removes them again. */
int cae__txn_mkdir_hook(void *ctx, int dfd, const char *name, const char *path);

#define CAE_TXN_NOREPLACE 1u /* the commit fails with -EEXIST if the target exists */

/* Stages a new version of dir/name: dfd is that directory (borrowed, beneath the workspace;
 * dir its path relative to the workspace, "" for the workspace). Returns an fd (O_WRONLY)
 * on an empty staged file (mode 0600) that the caller fills and may fchmod/fchown, then
 * hands back to cae__txn_stage_done. Staging a name again replaces its earlier version or
 * removal. */
int cae__txn_stage(cae_txn *t, int dfd, const char *dir, const char *name, unsigned flags);
/* fsync and close of a staged fd (always closed). Returns 0 or -errno. */
int cae__txn_stage_done(cae_txn *t, int fd);
/* Announces the removal of dir/name (not following a final symbolic link). */
int cae__txn_remove(cae_txn *t, int dfd, const char *dir, const char *name);

/* Applies every change in order. On failure every change is undone and -errno returned
 * (*failed, may be NULL, names the index of the change that failed, in the order of first
 * staging). Frees t in every case. */
int cae__txn_commit(cae_txn *t, size_t *failed);
/* Drops every staged change; nothing in the workspace changes. Frees t. Accepts NULL. */
void cae__txn_abort(cae_txn *t);

/* Number of changes (distinct names) in t. */
size_t cae__txn_count(const cae_txn *t);

/* ---- Testing ---- */

/* Every write, fsync, rename, link, unlink and mkdir of the transactions and of recovery is a
 * numbered kill point; with n > 0, the process raises SIGKILL at the n-th one from now on
 * (0: never). Returns the number of kill points passed since the last call. */
long cae__txn_test_kill_at(long n);
/* A kill point of another transaction implementation (the worker's in-environment one), or
 * of another step that must survive a kill (a restore's swap of images, backend/diskfs.c). */
void cae__txn_kill_point(void);
/* With n > 0, the n-th change applied by a commit from now on fails with -EIO (the commit
 * then puts back what it applied). Returns the number of changes applied since the last
 * call. */
long cae__txn_test_fail_apply(long n);

#endif
