/* The patch worker's file service: cae_fs_request answered with the code that serves a local
 * workspace (fs-host.c). Owned by src/worker; served by the in-environment helper (requests
 * arriving on its channel, src/helper/stream.c) and by the local backend in its own process
 * (src/backend/backend-local.c), so that a worker reaches an environment's files through one
 * request path on every backend. */
#ifndef CAE_WORKER_FS_SERVE_H
#define CAE_WORKER_FS_SERVE_H

#include "cae/error.h"
#include "cae/helper.h"

#include <pthread.h>

#define CAE_WK_FS_HANDLES 32

struct wk_fs;

/* The open file systems of one server, by handle (1..CAE_WK_FS_HANDLES). One request at a
 * time. */
typedef struct cae_wk_fs_table {
	pthread_mutex_t lock;
	struct wk_fs *fs[CAE_WK_FS_HANDLES];
	char *owner[CAE_WK_FS_HANDLES]; /* who opened it: only they may use it */
} cae_wk_fs_table;

void cae__wk_fs_table_init(cae_wk_fs_table *t);
/* Closes every file system still open (an open transaction is dropped). The table stays
 * usable. */
void cae__wk_fs_table_clear(cae_wk_fs_table *t);

/* Where a server opens a workspace: root (NULL: the request's), and the workspace-relative
 * paths no write or removal may touch (command_executor.protected_paths; borrowed, must
 * outlive the table's file systems; none where the environment itself keeps them
 * read-only). */
typedef struct cae_wk_fs_open {
	const char *root;
	const char *const *protected_paths;
	size_t n_protected;
} cae_wk_fs_open;

/* Answers q for owner (any string; "" when there is one client). CAE_FS_OPEN opens as `at`
 * says (NULL: the request's root, nothing protected) and rep->handle names it; every other
 * request must name a handle owner opened (-EBADF). Returns 0, or -errno with err set (the
 * request failed; rep empty). */
int cae__wk_fs_serve(cae_wk_fs_table *t, const char *owner, const cae_wk_fs_open *at,
		     const cae_fs_request *q, cae_fs_reply *rep, cae_error *err);

#endif
