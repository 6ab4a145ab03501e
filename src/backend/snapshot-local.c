/* The local backend's snapshots (cae__snapshot_ops; the common part is snapshot.c):
 *   <state_dir>/local/<uuid>/snapshots/<id>/disk.img   the workspace's file system, or
 *   <state_dir>/local/<uuid>/snapshots/<id>/tree/      a copy of the workspace's tree
 * A restore's image or tree is made in <uuid>/.restore.<tag>.*; a fork in
 * <state_dir>/local/.creating.<tag>.<uuid>, the prepare's own temporary name: each names its
 * process (cae__preparer_tag), so whatever a killed one left is a temporary the sweep
 * removes once that process is gone, never an environment that looks whole. */
#include "backend/snapshot.h"

#include "backend/backend-internal.h"
#include "backend/diskfs.h"

#include "base/fs.h"
#include "base/macro.h"
#include "base/timeutil.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/banned.h"

static char *local_root(cae_backend *b)
{
	return cae__path_join(b->cfg->command_executor.state_dir, "local");
}

static char *env_dir(cae_backend *b, const char *uuid)
{
	_cleanup_free_ char *root = local_root(b);
	return root ? cae__path_join(root, uuid) : NULL;
}

static json_t *meta_of(cae_backend *b, const char *uuid)
{
	_cleanup_free_ char *dir = env_dir(b, uuid);
	_cleanup_free_ char *path = dir ? cae__path_join(dir, "meta.json") : NULL;
	return path ? cae__snapshot_read_json(path) : NULL;
}

static bool local_sees(cae_backend *b, const char *uuid)
{
	json_t *meta = meta_of(b, uuid);
	bool mine =
	    meta && cae__backend_sees(b, json_string_value(json_object_get(meta, "instance")));
	json_decref(meta);
	return mine;
}

/* uuid's metadata, when the environment is this instance's, ready, and in the state
 * directory (not a workspace used as is). */
static int local_check(cae_backend *b, const char *uuid, json_t **out, cae_error *err)
{
	json_t *meta = meta_of(b, uuid);
	if (!meta || !cae__backend_own(b, json_string_value(json_object_get(meta, "instance")))) {
		json_decref(meta);
		return cae_error_set(err, -ENOENT, "no environment for task %s", uuid);
	}
	const char *status = json_string_value(json_object_get(meta, "status"));
	int r = 0;
	if (!status || strcmp(status, "ready") != 0)
		r = cae_error_set(err, -EAGAIN, "environment %s is not ready", uuid);
	else if (json_is_true(json_object_get(meta, "external")))
		r = cae_error_set(err, -EOPNOTSUPP,
				  "environment %s is a workspace used as is (the user's own "
				  "directory): snapshot it with the user's own tools",
				  uuid);
	if (r < 0) {
		json_decref(meta);
		return r;
	}
	*out = meta;
	return 0;
}

static int local_capture(cae_backend *b, const char *uuid, json_t *meta, const char *tmp,
			 const char *id, json_t *rec, cae_error *err)
{
	(void)meta;
	(void)id;
	_cleanup_free_ char *dir = env_dir(b, uuid);
	_cleanup_free_ char *ws = dir ? cae__path_join(dir, "workspace") : NULL;
	if (!ws)
		return -ENOMEM;
	cae__snapshot_thaw(ws); /* one a killed snapshot left frozen */
	const char *kind = NULL, *mech = NULL;
	int r = cae__snapshot_capture(dir, tmp, "tree", &kind, &mech, err);
	if (r == 0) {
		json_object_set_new(rec, "mechanism", json_string(mech));
		json_object_set_new(rec, "kind", json_string(kind));
	}
	return r;
}

static int local_restore(cae_backend *b, const char *uuid, json_t *meta, const char *one,
			 json_t *rec, json_t *res, cae_error *err)
{
	const char *wsroot = json_string_value(json_object_get(meta, "workspace_root")) ?: "";
	_cleanup_free_ char *dir = env_dir(b, uuid);
	if (!dir)
		return -ENOMEM;
	bool image = strcmp(json_string_value(json_object_get(rec, "kind")) ?: "", "image") == 0;
	char holders[512];
	if (cae__sandbox_holders(wsroot, holders, sizeof(holders)) > 0)
		return cae_error_set(err, -EBUSY,
				     "environment %s runs commands of other processes (%s): "
				     "end them first",
				     uuid, holders);
	/* what runs in this process's sandbox of it ends: the sandbox binds the old files */
	cae__local_stop_sandbox(b, uuid);
	char tag[64];
	cae__preparer_tag(tag, sizeof(tag));
	_cleanup_free_ char *ws = cae__path_join(dir, "workspace");
	_cleanup_free_ char *tmp = NULL;
	if (!ws || asprintf(&tmp, "%s/" CAE_SNAPSHOT_RESTORE_PREFIX "%s.new", dir, tag) < 0)
		return -ENOMEM;
	const char *mech = "copy";
	(void)cae__rm_rf(tmp);
	int r;
	if (image) {
		cae__snapshot_thaw(ws);
		_cleanup_free_ char *src = cae__path_join(one, CAE_DISKFS_IMAGE);
		_cleanup_free_ char *img = cae__path_join(dir, CAE_DISKFS_IMAGE);
		if (!src || !img)
			return -ENOMEM;
		r = cae__snapshot_clone_file(src, tmp, &mech, err);
		if (r == 0)
			r = cae__diskfs_swap(tmp, img, ws, err);
		else
			(void)unlink(tmp);
	} else {
		_cleanup_free_ char *src = cae__path_join(one, "tree");
		r = src ? cae__snapshot_copy_tree(src, tmp, err) : -ENOMEM;
		/* one exchange: the workspace is the old tree or the new one, never neither */
		if (r == 0 && renameat2(AT_FDCWD, tmp, AT_FDCWD, ws, RENAME_EXCHANGE) < 0)
			r = cae_error_set(err, -errno, "cannot put the workspace in place: %s",
					  strerror(errno));
		(void)cae__rm_rf(tmp); /* the old tree after the exchange */
	}
	if (r < 0)
		return r;
	json_object_set_new(res, "mechanism", json_string(mech));
	json_object_set_new(res, "sandbox_stopped", json_true());
	return 0;
}

static int local_fork(cae_backend *b, const char *src_uuid, json_t *meta, const char *one,
		      json_t *s, const char *new_uuid, json_t *forked_from, cae_env_info *info,
		      const char **mechp, cae_error *err)
{
	_cleanup_free_ char *root = local_root(b);
	_cleanup_free_ char *sdir = env_dir(b, src_uuid);
	_cleanup_free_ char *ndir = root ? cae__path_join(root, new_uuid) : NULL;
	char real[PATH_MAX];
	if (!sdir || !ndir || !realpath(root, real))
		return cae_error_set(err, -ENOMEM, "the state directory: %s", strerror(errno));
	if (access(ndir, F_OK) == 0)
		return cae_error_set(err, -EEXIST, "task %s has an environment already", new_uuid);
	char tag[64];
	cae__preparer_tag(tag, sizeof(tag));
	_cleanup_free_ char *tmp = NULL;
	if (asprintf(&tmp, "%s/" CAE_SNAPSHOT_CREATING_PREFIX "%s.%s", root, tag, new_uuid) < 0)
		return -ENOMEM;
	(void)cae__rm_rf(tmp);
	if (mkdir(tmp, 0700) < 0)
		return cae_error_set(err, -errno, "cannot make %s: %s", tmp, strerror(errno));
	const char *kind = NULL, *mech = NULL;
	int r = 0;
	if (s) {
		_cleanup_free_ char *simg = cae__path_join(one, CAE_DISKFS_IMAGE);
		_cleanup_free_ char *stree = cae__path_join(one, "tree");
		_cleanup_free_ char *dimg = cae__path_join(tmp, CAE_DISKFS_IMAGE);
		_cleanup_free_ char *dtree = cae__path_join(tmp, "workspace");
		kind = json_string_value(json_object_get(s, "kind"));
		if (!simg || !stree || !dimg || !dtree)
			r = -ENOMEM;
		else if (kind && strcmp(kind, "image") == 0)
			r = cae__snapshot_clone_file(simg, dimg, &mech, err);
		else {
			mech = "copy";
			r = cae__snapshot_copy_tree(stree, dtree, err);
		}
	} else {
		_cleanup_close_ int lock = cae__snapshot_lock(sdir, true);
		_cleanup_free_ char *ws = cae__path_join(sdir, "workspace");
		if (lock < 0)
			r = cae_error_set(err, lock, "cannot lock environment %s", src_uuid);
		else if (!ws)
			r = -ENOMEM;
		else {
			cae__snapshot_thaw(ws);
			r = cae__snapshot_capture(sdir, tmp, "workspace", &kind, &mech, err);
		}
	}
	_cleanup_free_ char *nimg = cae__path_join(tmp, CAE_DISKFS_IMAGE);
	_cleanup_free_ char *nws = cae__path_join(tmp, "workspace");
	if (r == 0 && nimg && nws && access(nimg, F_OK) == 0 && mkdir(nws, 0700) < 0)
		r = cae_error_set(err, -errno, "cannot make the workspace: %s", strerror(errno));
	/* its own metadata: the source's, with its own name, paths and creation time */
	json_t *nmeta = json_deep_copy(meta);
	char created[40], cid[128], wsroot[PATH_MAX + 128], project[PATH_MAX + 160];
	cae__iso8601_now(created, sizeof(created));
	snprintf(cid, sizeof(cid), "local-%s", new_uuid);
	snprintf(wsroot, sizeof(wsroot), "%s/%s/workspace", real, new_uuid);
	snprintf(project, sizeof(project), "%s/project", wsroot);
	json_object_set_new(nmeta, "task_uuid", json_string(new_uuid));
	json_object_set_new(nmeta, "container_id", json_string(cid));
	json_object_set_new(nmeta, "created_at", json_string(created));
	json_object_set_new(nmeta, "workspace_root", json_string(wsroot));
	json_object_set_new(nmeta, "host_path", json_string(project));
	json_object_set_new(nmeta, "instance", json_string(b->instance));
	json_object_set(nmeta, "forked_from", forked_from);
	_cleanup_free_ char *mpath = cae__path_join(tmp, "meta.json");
	if (r == 0)
		r = mpath && nmeta ? cae__snapshot_write_json(mpath, nmeta) : -ENOMEM;
	if (r == 0 && renameat2(AT_FDCWD, tmp, AT_FDCWD, ndir, RENAME_NOREPLACE) < 0)
		r = cae_error_set(err, -errno,
				  errno == EEXIST ? "task %s has an environment already"
						  : "cannot put the fork in place: %s",
				  errno == EEXIST ? new_uuid : strerror(errno));
	if (r < 0) {
		(void)cae__rm_rf(tmp);
		json_decref(nmeta);
		return r;
	}
	/* mounted now (else by its first use) */
	_cleanup_free_ char *img = cae__path_join(ndir, CAE_DISKFS_IMAGE);
	_cleanup_free_ char *ws = cae__path_join(ndir, "workspace");
	if (img && ws)
		(void)cae__diskfs_remount(img, ws, NULL);
	*mechp = mech ? mech : "copy";
	r = cae_env_info_from_json(nmeta, info, err);
	json_decref(nmeta);
	return r;
}

static void local_tidy(cae_backend *b, const char *uuid)
{
	_cleanup_free_ char *dir = env_dir(b, uuid);
	_cleanup_free_ char *ws = dir ? cae__path_join(dir, "workspace") : NULL;
	if (ws)
		cae__snapshot_thaw(ws);
}

const cae__snapshot_ops cae__snapshot_local_ops = {
    .env_dir = env_dir,
    .root = local_root,
    .sees = local_sees,
    .check = local_check,
    .capture = local_capture,
    .restore = local_restore,
    .fork = local_fork,
    .tidy = local_tidy,
};
