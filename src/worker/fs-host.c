/* The environment file system on this host (local backend): every path is opened with
 * openat2(RESOLVE_BENEATH) from the workspace directory, opened once, so no symbolic link and
 * no ".." can lead out of it; writes are atomic (staged file, fsync, rename) and keep the
 * file's mode. Every write is a transaction of the workspace's journal (base/txn.h), so a
 * process killed mid-write leaves no staged file once recovered, and a patch staged with
 * txn_* is applied all or nothing even across a crash. */
#include "worker/worker-internal.h"

#include "base/fs.h"
#include "base/macro.h"
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

#define SYMLINK_MAX_FOLLOW 8

typedef struct host_fs {
	wk_fs base;
	int root_fd;	 /* O_PATH | O_DIRECTORY */
	char *root_real; /* the workspace's real path on this host */
	cae_wsj *wsj;	 /* NULL: no journal directory could be made (plain atomic writes) */
	cae_txn *txn;	 /* the open transaction (txn_begin), else NULL */
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

/* Splits rel at its last '/': *dir new ("" for none), *base points into rel. */
static int split(const char *rel, char **dir, const char **base)
{
	const char *s = strrchr(rel, '/');
	*dir = s ? strndup(rel, (size_t)(s - rel)) : strdup("");
	*base = s ? s + 1 : rel;
	return *dir ? 0 : -ENOMEM;
}

/* Opens the directory dir (relative, "" = the workspace) beneath the root, making missing
 * components when create is set. Returns an O_PATH fd or -errno. */
static int open_dir(host_fs *h, const char *dir, bool create)
{
	if (!*dir) {
		int d = fcntl(h->root_fd, F_DUPFD_CLOEXEC, 3);
		return d < 0 ? -errno : d;
	}
	int fd = cae_open_beneath(h->root_fd, dir, O_PATH | O_DIRECTORY, 0);
	if (fd != -ENOENT || !create)
		return fd;
	/* Walk the prefixes: open each beneath the root, make the missing ones. */
	_cleanup_free_ char *p = strdup(dir);
	if (!p)
		return -ENOMEM;
	for (char *s = p;;) {
		char *slash = strchr(s, '/');
		if (slash)
			*slash = '\0';
		fd = cae_open_beneath(h->root_fd, p, O_PATH | O_DIRECTORY, 0);
		if (fd == -ENOENT) {
			/* the parent was opened beneath the root just before (or is the root) */
			char *last = strrchr(p, '/');
			_cleanup_close_ int pfd = -1;
			const char *name = p;
			if (last) {
				*last = '\0';
				pfd = cae_open_beneath(h->root_fd, p, O_PATH | O_DIRECTORY, 0);
				*last = '/';
				if (pfd < 0)
					return pfd;
				name = last + 1;
			}
			if (h->txn) {
				/* announced: a rollback removes it again */
				int m = cae_txn_mkdir(h->txn, p);
				if (m < 0 && m != -EEXIST)
					return m;
			} else if (mkdirat(pfd >= 0 ? pfd : h->root_fd, name, 0755) < 0) {
				if (errno != EEXIST)
					return -errno;
			} else {
				cae_keep_owner_dir(pfd >= 0 ? pfd : h->root_fd, name);
			}
			fd = cae_open_beneath(h->root_fd, p, O_PATH | O_DIRECTORY, 0);
		}
		if (fd < 0)
			return fd;
		if (!slash)
			return fd;
		close(fd);
		*slash = '/';
		s = slash + 1;
	}
}

/* A resolved target: the directory (O_PATH fd beneath the root) and the final name. */
typedef struct target {
	int dfd;
	char *rel; /* the path after following a final symbolic link */
	const char *base;
	bool exists;
	struct stat st; /* of the final name, not followed */
} target;

static void target_clear(target *t)
{
	if (t->dfd >= 0)
		close(t->dfd);
	free(t->rel);
	t->dfd = -1;
	t->rel = NULL;
}

/* Resolves rel for writing (follow: a final symbolic link is followed when its target is
 * inside the workspace) or removing (not followed). */
static int resolve(host_fs *h, const char *rel, bool create, bool follow, target *t, cae_error *err)
{
	memset(t, 0, sizeof(*t));
	t->dfd = -1;
	t->rel = strdup(rel);
	if (!t->rel)
		return cae_error_set(err, -ENOMEM, "out of memory");
	for (int hop = 0;; hop++) {
		_cleanup_free_ char *dir = NULL;
		if (split(t->rel, &dir, &t->base) < 0)
			return cae_error_set(err, -ENOMEM, "out of memory");
		if (t->dfd >= 0)
			close(t->dfd);
		t->dfd = open_dir(h, dir, create);
		if (t->dfd < 0)
			return path_error(err, rel, t->dfd);
		if (fstatat(t->dfd, t->base, &t->st, AT_SYMLINK_NOFOLLOW) < 0) {
			if (errno != ENOENT)
				return path_error(err, rel, -errno);
			t->exists = false;
			return 0;
		}
		t->exists = true;
		if (!S_ISLNK(t->st.st_mode) || !follow)
			return 0;
		if (hop >= SYMLINK_MAX_FOLLOW)
			return path_error(err, rel, -ELOOP);
		/* Let the kernel follow it beneath the root, then take the real path. */
		int fd = cae_open_beneath(h->root_fd, t->rel, O_PATH, 0);
		if (fd == -ENOENT)
			return cae_error_set(
			    err, -EACCES,
			    "%s: is a symbolic link to a missing file; refusing to "
			    "write through it",
			    rel);
		if (fd < 0)
			return path_error(err, rel, fd);
		_cleanup_free_ char *real = cae_fd_path(fd);
		close(fd);
		if (!real)
			return cae_error_set(err, -EIO, "%s: cannot resolve the symbolic link",
					     rel);
		size_t rl = strlen(h->root_real);
		if (strncmp(real, h->root_real, rl) != 0 || real[rl] != '/')
			return path_error(err, rel, -EXDEV);
		char *next = strdup(real + rl + 1);
		if (!next)
			return cae_error_set(err, -ENOMEM, "out of memory");
		free(t->rel);
		t->rel = next;
	}
}

static int host_read(wk_fs *fs, const char *rel, size_t max, char **data, size_t *len, mode_t *mode,
		     cae_error *err)
{
	host_fs *h = host_of(fs);
	if (data)
		*data = NULL;
	/* O_NONBLOCK: a FIFO must not block the open */
	_cleanup_close_ int fd = cae_open_beneath(h->root_fd, rel, O_RDONLY | O_NONBLOCK, 0);
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
	int r = cae_read_fd(fd, max, data, len);
	if (r < 0)
		return path_error(err, rel, r);
	return 0;
}

/* Stages data for rel in the open transaction. */
static int stage_write(host_fs *h, const char *rel, const char *data, size_t len, mode_t mode,
		       cae_error *err)
{
	target t;
	int r = resolve(h, rel, true, true, &t, err);
	if (r == 0 && t.exists && S_ISDIR(t.st.st_mode))
		r = path_error(err, rel, -EISDIR);
	if (r < 0) {
		target_clear(&t);
		return r;
	}
	if (mode == WK_MODE_KEEP)
		mode = t.exists && S_ISREG(t.st.st_mode) ? (t.st.st_mode & 07777) : 0644;
	_cleanup_free_ char *dir = NULL;
	const char *base;
	r = split(t.rel, &dir, &base);
	int fd = r < 0 ? r : cae_txn_stage(h->txn, t.dfd, dir, base, 0);
	if (fd < 0) {
		target_clear(&t);
		return path_error(err, rel, fd);
	}
	r = cae_write_all(fd, data, len);
	if (r == 0 && fchmod(fd, mode & 07777) < 0)
		r = -errno;
	int d = cae_txn_stage_done(h->txn, fd);
	target_clear(&t);
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
	int r = cae_txn_begin(h->wsj, &h->txn);
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
	target t;
	int r = resolve(h, rel, false, false, &t, err);
	if (r == 0 && !t.exists)
		r = path_error(err, rel, -ENOENT);
	else if (r == 0 && S_ISDIR(t.st.st_mode))
		r = path_error(err, rel, -EISDIR);
	if (r == 0) {
		_cleanup_free_ char *dir = NULL;
		const char *base;
		r = split(t.rel, &dir, &base);
		if (r == 0)
			r = cae_txn_remove(h->txn, t.dfd, dir, base);
		if (r < 0)
			r = path_error(err, rel, r);
	}
	target_clear(&t);
	return r;
}

static int host_txn_commit(wk_fs *fs, cae_error *err)
{
	host_fs *h = host_of(fs);
	if (!h->txn)
		return cae_error_set(err, -EINVAL, "no open transaction");
	int r = cae_txn_commit(TAKE_PTR(h->txn), NULL);
	return r < 0 ? cae_error_set(err, r,
				     "the files could not be replaced: %s; nothing was changed",
				     strerror(-r))
		     : 0;
}

static void host_txn_abort(wk_fs *fs)
{
	host_fs *h = host_of(fs);
	cae_txn_abort(TAKE_PTR(h->txn));
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
		r = cae_txn_commit(TAKE_PTR(h->txn), NULL);
		return r < 0 ? path_error(err, rel, r) : 0;
	}
	target t;
	int r = resolve(h, rel, true, true, &t, err);
	if (r < 0) {
		target_clear(&t);
		return r;
	}
	if (t.exists && S_ISDIR(t.st.st_mode)) {
		target_clear(&t);
		return path_error(err, rel, -EISDIR);
	}
	if (mode == WK_MODE_KEEP)
		mode = t.exists && S_ISREG(t.st.st_mode) ? (t.st.st_mode & 07777) : 0644;
	r = cae_write_file_atomic(t.dfd, t.base, data, len, mode, false);
	target_clear(&t);
	if (r < 0)
		return path_error(err, rel, r);
	return 0;
}

static int host_remove(wk_fs *fs, const char *rel, cae_error *err)
{
	host_fs *h = host_of(fs);
	target t;
	int r = resolve(h, rel, false, false, &t, err);
	if (r == 0 && !t.exists)
		r = path_error(err, rel, -ENOENT);
	else if (r == 0 && S_ISDIR(t.st.st_mode))
		r = path_error(err, rel, -EISDIR);
	else if (r == 0 && unlinkat(t.dfd, t.base, 0) < 0)
		r = path_error(err, rel, -errno);
	else if (r == 0)
		(void)fsync(t.dfd);
	target_clear(&t);
	return r;
}

static void host_free(wk_fs *fs)
{
	host_fs *h = host_of(fs);
	cae_txn_abort(h->txn);
	cae_wsj_free(h->wsj);
	if (h->root_fd >= 0)
		close(h->root_fd);
	free(h->root_real);
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

int wk_fs_host_new(const char *host_path, wk_fs **out, cae_error *err)
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
	h->root_real = cae_fd_path(h->root_fd);
	if (!h->root_real) {
		host_free(&h->base);
		return cae_error_set(err, -EIO, "workspace %s: cannot resolve its path", host_path);
	}
	/* What a process killed while writing here left is completed or rolled back first. */
	if (cae_wsj_open(h->root_fd, &h->wsj) == 0)
		(void)cae_wsj_recover(h->wsj, NULL);
	*out = &h->base;
	return 0;
}

void wk_fs_free(wk_fs *fs)
{
	if (fs)
		fs->ops->free(fs);
}
