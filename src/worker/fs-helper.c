/* The environment file system through the environment's file service (cae_backend_fs):
 * every operation is one request, answered where the files are by the code that serves a
 * local workspace (fs-host.c through fs-serve.c: resolution beneath the workspace, atomic
 * writes keeping modes, journaled transactions) — in a container by its helper, over the
 * helper's channel; for a local environment by the backend in this process. There is no
 * other way to an environment's files that are not on this host: a container without a
 * working helper has no patch worker (the error says why). */
#include "worker/worker-internal.h"

#include "base/macro.h"
#include "cae/helper.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/banned.h"

typedef struct helper_fs {
	wk_fs base;
	cae_backend *backend;
	char *uuid;
	uint32_t handle;
} helper_fs;

static helper_fs *hfs_of(wk_fs *fs)
{
	return (helper_fs *)fs;
}

static int call(wk_fs *fs, cae_fs_request *q, cae_fs_reply *rep, cae_error *err)
{
	helper_fs *h = hfs_of(fs);
	q->handle = h->handle;
	cae_fs_reply none;
	int r = cae_backend_fs(h->backend, h->uuid, q, rep ? rep : &none, err);
	if (!rep)
		cae_fs_reply_clear(&none);
	return r;
}

static int h_read(wk_fs *fs, const char *rel, size_t max, char **data, size_t *len, mode_t *mode,
		  cae_error *err)
{
	cae_fs_request q = {.op = CAE_FS_READ, .rel = rel, .max = data ? (uint64_t)max : 0};
	cae_fs_reply rep;
	int r = call(fs, &q, &rep, err);
	if (r == 0) {
		if (data) {
			*data = TAKE_PTR(rep.data);
			if (!*data && !(*data = calloc(1, 1)))
				r = -ENOMEM;
		}
		if (len)
			*len = rep.len;
		if (mode)
			*mode = (mode_t)rep.mode;
	}
	cae_fs_reply_clear(&rep);
	return r;
}

static int h_write(wk_fs *fs, const char *rel, const char *data, size_t len, mode_t mode,
		   cae_error *err)
{
	cae_fs_request q = {.op = CAE_FS_WRITE,
			    .rel = rel,
			    .data = data ? data : "",
			    .len = len,
			    .mode = mode == WK_MODE_KEEP ? (uint32_t)-1 : (uint32_t)mode};
	return call(fs, &q, NULL, err);
}

static int h_remove(wk_fs *fs, const char *rel, cae_error *err)
{
	cae_fs_request q = {.op = CAE_FS_REMOVE, .rel = rel};
	return call(fs, &q, NULL, err);
}

static int h_txn_begin(wk_fs *fs, cae_error *err)
{
	cae_fs_request q = {.op = CAE_FS_TXN_BEGIN};
	return call(fs, &q, NULL, err);
}

static int h_txn_write(wk_fs *fs, const char *rel, const char *data, size_t len, mode_t mode,
		       cae_error *err)
{
	cae_fs_request q = {.op = CAE_FS_TXN_WRITE,
			    .rel = rel,
			    .data = data ? data : "",
			    .len = len,
			    .mode = mode == WK_MODE_KEEP ? (uint32_t)-1 : (uint32_t)mode};
	return call(fs, &q, NULL, err);
}

static int h_txn_remove(wk_fs *fs, const char *rel, cae_error *err)
{
	cae_fs_request q = {.op = CAE_FS_TXN_REMOVE, .rel = rel};
	return call(fs, &q, NULL, err);
}

static int h_txn_commit(wk_fs *fs, cae_error *err)
{
	cae_fs_request q = {.op = CAE_FS_TXN_COMMIT};
	return call(fs, &q, NULL, err);
}

static void h_txn_abort(wk_fs *fs)
{
	cae_fs_request q = {.op = CAE_FS_TXN_ABORT};
	(void)call(fs, &q, NULL, NULL);
}

static void h_free(wk_fs *fs)
{
	helper_fs *h = hfs_of(fs);
	cae_fs_request q = {.op = CAE_FS_CLOSE};
	(void)call(fs, &q, NULL, NULL);
	free(h->uuid);
	free(h);
}

static const wk_fs_ops helper_ops = {
    .read = h_read,
    .write = h_write,
    .remove = h_remove,
    .txn_begin = h_txn_begin,
    .txn_write = h_txn_write,
    .txn_remove = h_txn_remove,
    .txn_commit = h_txn_commit,
    .txn_abort = h_txn_abort,
    .free = h_free,
};

int cae__wk_fs_helper_new(cae_backend *b, const char *task_uuid, const char *root, wk_fs **out,
			  cae_error *err)
{
	helper_fs *h = calloc(1, sizeof(*h));
	if (!h || !(h->uuid = strdup(task_uuid))) {
		free(h);
		return cae_error_set(err, -ENOMEM, "out of memory");
	}
	h->base.ops = &helper_ops;
	h->backend = b;
	cae_fs_request q = {.op = CAE_FS_OPEN, .root = root};
	cae_fs_reply rep;
	int r = cae_backend_fs(b, task_uuid, &q, &rep, err);
	if (r < 0) {
		free(h->uuid);
		free(h);
		return r;
	}
	h->handle = rep.handle;
	cae_fs_reply_clear(&rep);
	*out = &h->base;
	return 0;
}
