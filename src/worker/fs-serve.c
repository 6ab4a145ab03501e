/* The patch worker's file service (fs-serve.h): one table of open file systems and the
 * dispatch of each request to fs-host.c's operations. */
#include "worker/fs-serve.h"

#include "worker/worker-internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/banned.h"

void cae__wk_fs_table_init(cae_wk_fs_table *t)
{
	memset(t, 0, sizeof(*t));
	pthread_mutex_init(&t->lock, NULL);
}

void cae__wk_fs_table_clear(cae_wk_fs_table *t)
{
	pthread_mutex_lock(&t->lock);
	for (int i = 0; i < CAE_WK_FS_HANDLES; i++) {
		cae__wk_fs_free(t->fs[i]);
		t->fs[i] = NULL;
		free(t->owner[i]);
		t->owner[i] = NULL;
	}
	pthread_mutex_unlock(&t->lock);
}

static int open_fs(cae_wk_fs_table *t, const char *owner, const cae_wk_fs_open *at,
		   const char *root, cae_fs_reply *rep, cae_error *err)
{
	int slot = -1;
	for (int i = 0; i < CAE_WK_FS_HANDLES && slot < 0; i++)
		if (!t->fs[i])
			slot = i;
	if (slot < 0)
		return cae_error_set(err, -EMFILE, "too many open file systems");
	if (!root)
		return cae_error_set(err, -EINVAL, "no workspace to open");
	char *who = strdup(owner);
	if (!who)
		return cae_error_set(err, -ENOMEM, "out of memory");
	int r = cae__wk_fs_host_new(root, &t->fs[slot], err);
	if (r < 0) {
		free(who);
		return r;
	}
	if (at && at->n_protected)
		cae__wk_fs_host_protect(t->fs[slot], at->protected_paths, at->n_protected);
	t->owner[slot] = who;
	rep->handle = (uint32_t)slot + 1;
	return 0;
}

static int serve_locked(cae_wk_fs_table *t, const char *owner, const cae_wk_fs_open *at,
			const cae_fs_request *q, cae_fs_reply *rep, cae_error *err)
{
	if (q->op == CAE_FS_OPEN)
		return open_fs(t, owner, at, at && at->root ? at->root : q->root, rep, err);
	wk_fs *fs = NULL;
	if (q->handle >= 1 && q->handle <= CAE_WK_FS_HANDLES &&
	    strcmp(t->owner[q->handle - 1] ? t->owner[q->handle - 1] : "", owner) == 0)
		fs = t->fs[q->handle - 1];
	if (!fs)
		return cae_error_set(err, -EBADF, "no such file system handle");
	const char *rel = q->rel ? q->rel : "";
	const char *data = q->data ? q->data : "";
	mode_t mode = q->mode == (uint32_t)-1 ? WK_MODE_KEEP : (mode_t)(q->mode & 07777);
	switch (q->op) {
	case CAE_FS_READ: {
		mode_t m = 0;
		int r =
		    fs->ops->read(fs, rel, q->max, q->max ? &rep->data : NULL, &rep->len, &m, err);
		rep->mode = (uint32_t)m;
		return r;
	}
	case CAE_FS_WRITE:
		return fs->ops->write(fs, rel, data, q->len, mode, err);
	case CAE_FS_REMOVE:
		return fs->ops->remove(fs, rel, err);
	case CAE_FS_TXN_BEGIN:
		return fs->ops->txn_begin(fs, err);
	case CAE_FS_TXN_WRITE:
		return fs->ops->txn_write(fs, rel, data, q->len, mode, err);
	case CAE_FS_TXN_REMOVE:
		return fs->ops->txn_remove(fs, rel, err);
	case CAE_FS_TXN_COMMIT:
		return fs->ops->txn_commit(fs, err);
	case CAE_FS_TXN_ABORT:
		fs->ops->txn_abort(fs);
		return 0;
	case CAE_FS_CLOSE:
		cae__wk_fs_free(fs);
		t->fs[q->handle - 1] = NULL;
		free(t->owner[q->handle - 1]);
		t->owner[q->handle - 1] = NULL;
		return 0;
	case CAE_FS_OPEN:
		break;
	}
	return cae_error_set(err, -EINVAL, "unknown file operation %d", (int)q->op);
}

int cae__wk_fs_serve(cae_wk_fs_table *t, const char *owner, const cae_wk_fs_open *at,
		     const cae_fs_request *q, cae_fs_reply *rep, cae_error *err)
{
	memset(rep, 0, sizeof(*rep));
	pthread_mutex_lock(&t->lock);
	int r = serve_locked(t, owner, at, q, rep, err);
	pthread_mutex_unlock(&t->lock);
	if (r < 0)
		cae_fs_reply_clear(rep);
	return r;
}
