/* The environment file system on this host (local backend): every path is resolved with
 * base/chase.h beneath the workspace directory, opened once, so no symbolic link and no ".."
 * can lead out of it; writes are atomic (staged file, fsync, rename) and keep the file's
 * mode. Every write is a transaction of the workspace's journal (base/txn.h), so a
 * process killed mid-write leaves no staged file once recovered, and a patch staged with
 * txn_* is applied all or nothing even across a crash. Protected paths are never written or
 * removed (base/protect.h: as written, and as resolved). */
#include "worker/worker-internal.h"

#include "base/chase.h"
#include "base/fs.h"
#include "base/macro.h"
#include "base/protect.h"
#include "base/txn.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/banned.h"

typedef struct host_fs {
	wk_fs base;
	int root_fd;  /* O_PATH | O_DIRECTORY */
	cae_wsj *wsj; /* NULL: no journal directory could be made (plain atomic writes) */
	cae_txn *txn; /* the open transaction (txn_begin), else NULL */
	const char *const *protected; /* borrowed (cae__wk_fs_host_protect) */
	size_t n_protected;
} host_fs;

static host_fs *host_of(wk_fs *fs)
{
	return (host_fs *)fs;
}

static int path_error(cae_error *err, const char *rel, int r)
{
	switch (r) {
	case -EXDEV:
	case -ELOOP:
		return cae_error_set(err, -EACCES,
				     "%s: security error: a symbolic link on the way leads outside "
				     "the workspace",
				     rel);
	case -ENOENT:
		return cae_error_set(err, -ENOENT, "%s: no such file or directory", rel);
	case -ENOTDIR:
		return cae_error_set(err, -ENOTDIR,
				     "%s: a component of the path is not a directory", rel);
	case -EISDIR:
		return cae_error_set(err, -EISDIR, "%s: is a directory", rel);
	case -EFBIG:
		return cae_error_set(err, -EFBIG, "%s: file too large", rel);
	default:
		return cae_error_set(err, r, "%s: %s", rel, strerror(-r));
	}
}

static int protected_error(cae_error *err, const char *rel)
{
	return cae_error_set(err, -EACCES,
			     "%s: security error: the path is protected (it is, or lies below, "
			     "one of command_executor.protected_paths); patches cannot write or "
			     "remove it",
			     rel);
}

void cae__wk_fs_host_protect(wk_fs *fs, const char *const *paths, size_t n)
{
	host_of(fs)->protected = paths;
	host_of(fs)->n_protected = paths ? n : 0;
}

/* Resolves rel for writing (follow: a final symbolic link is followed when its target is
 * inside the workspace; create: missing directories are made, in the open transaction when
 * there is one) or removing (not followed). t->fd is the directory holding t->name. */
static int resolve(host_fs *h, const char *rel, bool create, bool follow, cae_chased *t,
		   cae_error *err)
{
	unsigned flags =
	    CAE_CHASE_PARENT | (create ? CAE_CHASE_MKDIR : 0) | (follow ? 0 : CAE_CHASE_NOFOLLOW);
	/* as written: refused before a missing directory is made */
	if (cae__protected_lexical(rel, h->protected, h->n_protected))
		return protected_error(err, rel);
	int r = cae__chase(h->root_fd, rel, flags, h->txn ? cae__txn_mkdir_hook : NULL, h->txn, t);
	if (r == 0 && h->n_protected) {
		/* as resolved: whatever links or spelling led here */
		int p = cae__protected_at(h->root_fd, t->fd, t->name, h->protected, h->n_protected);
		if (p != 0)
			return p > 0 ? protected_error(err, rel) : path_error(err, rel, p);
	}
	if (r < 0 && r != -ENOENT)
		return path_error(err, rel, r);
	if (r == 0 && !*t->name)
		return path_error(err, rel, -EISDIR);
	if (t->links && (r == -ENOENT || !t->exists))
		return cae_error_set(err, -EACCES,
				     "%s: is a symbolic link to a missing file; refusing to write "
				     "through it",
				     rel);
	return r < 0 ? path_error(err, rel, r) : 0;
}

static int host_read(wk_fs *fs, const char *rel, size_t max, char **data, size_t *len, mode_t *mode,
		     cae_error *err)
{
	host_fs *h = host_of(fs);
	if (data)
		*data = NULL;
	/* O_NONBLOCK: a FIFO must not block the open */
	_cleanup_close_ int fd = cae__open_beneath(h->root_fd, rel, O_RDONLY | O_NONBLOCK, 0);
	if (fd < 0)
		return path_error(err, rel, fd);
	struct stat st;
	if (fstat(fd, &st) < 0)
		return path_error(err, rel, -errno);
	if (S_ISDIR(st.st_mode))
		return path_error(err, rel, -EISDIR);
	if (!S_ISREG(st.st_mode))
		return cae_error_set(err, -EINVAL, "%s: not a regular file", rel);
	if (mode)
		*mode = st.st_mode & 07777;
	if (!data)
		return 0;
	int r = cae__read_fd(fd, max, data, len);
	if (r < 0)
		return path_error(err, rel, r);
	return 0;
}

/* Stages data for rel in the open transaction. */
static int stage_write(host_fs *h, const char *rel, const char *data, size_t len, mode_t mode,
		       cae_error *err)
{
	_cleanup_(cae__chased_clear) cae_chased t = CAE_CHASED_INIT;
	int r = resolve(h, rel, true, true, &t, err);
	if (r == 0 && t.exists && S_ISDIR(t.st.st_mode))
		r = path_error(err, rel, -EISDIR);
	if (r < 0)
		return r;
	if (mode == WK_MODE_KEEP)
		mode = t.exists && S_ISREG(t.st.st_mode) ? (t.st.st_mode & 07777) : 0644;
	int fd = cae__txn_stage(h->txn, t.fd, t.dir, t.name, 0);
	if (fd < 0)
		return path_error(err, rel, fd);
	r = cae__write_all(fd, data, len);
	if (r == 0 && fchmod(fd, mode & 07777) < 0)
		r = -errno;
	int d = cae__txn_stage_done(h->txn, fd);
	if (r == 0)
		r = d;
	return r < 0 ? path_error(err, rel, r) : 0;
}

static int host_txn_begin(wk_fs *fs, cae_error *err)
{
	host_fs *h = host_of(fs);
	if (h->txn)
		return cae_error_set(err, -EBUSY, "a transaction is already open");
	if (!h->wsj)
		return cae_error_set(err, -ENOTSUP, "no journal directory for this workspace");
	int r = cae__txn_begin(h->wsj, &h->txn);
	return r < 0 ? cae_error_set(err, r, "%s", strerror(-r)) : 0;
}

static int host_txn_write(wk_fs *fs, const char *rel, const char *data, size_t len, mode_t mode,
			  cae_error *err)
{
	host_fs *h = host_of(fs);
	if (!h->txn)
		return cae_error_set(err, -EINVAL, "no open transaction");
	return stage_write(h, rel, data, len, mode, err);
}

static int host_txn_remove(wk_fs *fs, const char *rel, cae_error *err)
{
	host_fs *h = host_of(fs);
	if (!h->txn)
		return cae_error_set(err, -EINVAL, "no open transaction");
	_cleanup_(cae__chased_clear) cae_chased t = CAE_CHASED_INIT;
	int r = resolve(h, rel, false, false, &t, err);
	if (r == 0 && !t.exists)
		r = path_error(err, rel, -ENOENT);
	else if (r == 0 && S_ISDIR(t.st.st_mode))
		r = path_error(err, rel, -EISDIR);
	if (r == 0 && (r = cae__txn_remove(h->txn, t.fd, t.dir, t.name)) < 0)
		r = path_error(err, rel, r);
	return r;
}

static int host_txn_commit(wk_fs *fs, cae_error *err)
{
	host_fs *h = host_of(fs);
	if (!h->txn)
		return cae_error_set(err, -EINVAL, "no open transaction");
	int r = cae__txn_commit(TAKE_PTR(h->txn), NULL);
	return r < 0 ? cae_error_set(err, r,
				     "the files could not be replaced: %s; nothing was changed",
				     strerror(-r))
		     : 0;
}

static void host_txn_abort(wk_fs *fs)
{
	host_fs *h = host_of(fs);
	cae__txn_abort(TAKE_PTR(h->txn));
}

static int host_write(wk_fs *fs, const char *rel, const char *data, size_t len, mode_t mode,
		      cae_error *err)
{
	host_fs *h = host_of(fs);
	if (h->wsj && !h->txn) {
		/* a transaction of one file: the journal removes a staged file left by a crash */
		int r = host_txn_begin(fs, err);
		if (r == 0)
			r = stage_write(h, rel, data, len, mode, err);
		if (r < 0) {
			host_txn_abort(fs);
			return r;
		}
		r = cae__txn_commit(TAKE_PTR(h->txn), NULL);
		return r < 0 ? path_error(err, rel, r) : 0;
	}
	_cleanup_(cae__chased_clear) cae_chased t = CAE_CHASED_INIT;
	int r = resolve(h, rel, true, true, &t, err);
	if (r < 0)
		return r;
	if (t.exists && S_ISDIR(t.st.st_mode))
		return path_error(err, rel, -EISDIR);
	if (mode == WK_MODE_KEEP)
		mode = t.exists && S_ISREG(t.st.st_mode) ? (t.st.st_mode & 07777) : 0644;
	r = cae__write_file_atomic(t.fd, t.name, data, len, mode, false);
	if (r < 0)
		return path_error(err, rel, r);
	return 0;
}

static int host_remove(wk_fs *fs, const char *rel, cae_error *err)
{
	host_fs *h = host_of(fs);
	_cleanup_(cae__chased_clear) cae_chased t = CAE_CHASED_INIT;
	int r = resolve(h, rel, false, false, &t, err);
	if (r == 0 && !t.exists)
		r = path_error(err, rel, -ENOENT);
	else if (r == 0 && S_ISDIR(t.st.st_mode))
		r = path_error(err, rel, -EISDIR);
	else if (r == 0 && unlinkat(t.fd, t.name, 0) < 0)
		r = path_error(err, rel, -errno);
	else if (r == 0)
		(void)fsync(t.fd);
	return r;
}

static void host_free(wk_fs *fs)
{
	host_fs *h = host_of(fs);
	cae__txn_abort(h->txn);
	cae__wsj_free(h->wsj);
	if (h->root_fd >= 0)
		close(h->root_fd);
	free(h);
}

static const wk_fs_ops host_ops = {
    .read = host_read,
    .write = host_write,
    .remove = host_remove,
    .txn_begin = host_txn_begin,
    .txn_write = host_txn_write,
    .txn_remove = host_txn_remove,
    .txn_commit = host_txn_commit,
    .txn_abort = host_txn_abort,
    .free = host_free,
};

int cae__wk_fs_host_new(const char *host_path, wk_fs **out, cae_error *err)
{
	host_fs *h = calloc(1, sizeof(*h));
	if (!h)
		return cae_error_set(err, -ENOMEM, "out of memory");
	h->base.ops = &host_ops;
	h->root_fd = open(host_path, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (h->root_fd < 0) {
		int r = -errno;
		free(h);
		return cae_error_set(err, r, "workspace %s: %s", host_path, strerror(-r));
	}
	/* What a process killed while writing here left is completed or rolled back first. */
	if (cae__wsj_open(h->root_fd, &h->wsj) == 0)
		(void)cae__wsj_recover(h->wsj, NULL);
	*out = &h->base;
	return 0;
}

void cae__wk_fs_free(wk_fs *fs)
{
	if (fs)
		fs->ops->free(fs);
}
