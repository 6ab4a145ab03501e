/* The docker backend's snapshots (cae__snapshot_ops; the common part is snapshot.c).
 *
 * What one holds: what commands changed outside the workspace (packages installed into the
 * image's paths, the user's home, the helper), as an image the engine commits from the
 * container (POST /commit, paused meanwhile), tagged cae-snapshot:<id> and labelled
 * cae.snapshot=<uuid>/<id>; and the workspace: with the `loopfs` disk bound (the file system
 * image of <state>/docker-disk/<uuid>/) that image cloned or copied into the record's
 * directory, <state>/docker-snapshots/<uuid>/snapshots/<id>/disk.img (its file system
 * frozen meanwhile), else the workspace is in the container's layer and so in the commit.
 * Not processes, not volumes or binds (the shared package caches).
 *
 * A container made from a snapshot (a restore) or from another's state (a fork) runs the
 * image tagged cae-base:<uuid>, its environment's own tag, so that removing a snapshot only
 * untags an image a container still uses; the environment's removal (remove_env ->
 * cae__snapshot_docker_drop) removes its snapshots' tags and its base tag, and the engine
 * its images once nothing uses them. A fork holds <state>/docker-snapshots/<new uuid>/
 * snapshot.lock until its container exists; a snapshot its environment's: what a killed one
 * left (an image without a record, a base tag without a container, a disk without a
 * container) is swept by `cae gc` once no process holds the lock. */
#include "backend/snapshot.h"

#include "backend/backend-internal.h"
#include "backend/diskfs.h"
#include "backend/envs.h"

#include "base/fs.h"
#include "base/macro.h"
#include "base/timeutil.h"
#include "cae/docker.h"
#include "cae/log.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/banned.h"

#define ROOT_DIR "docker-snapshots"
#define SNAP_REPO "cae-snapshot"
#define BASE_REPO "cae-base"
#define LABEL_SNAPSHOT "cae.snapshot"
#define LABEL_FORKED_FROM "cae.forked_from"
#define LABEL_STATE "cae.state_dir" /* whose records say whether an image is whole */
#define WORKSPACE "/workspace"
#define CREATING_SUFFIX ".creating"

static char *docker_root(cae_backend *b)
{
	return cae__path_join(b->cfg->command_executor.state_dir, ROOT_DIR);
}

static char *env_dir(cae_backend *b, const char *uuid)
{
	_cleanup_free_ char *root = docker_root(b);
	return root ? cae__path_join(root, uuid) : NULL;
}

static char *disk_dir(cae_backend *b, const char *uuid)
{
	return cae__diskfs_container_dir(b->cfg->command_executor.state_dir, uuid);
}

/* uuid's workspace disk (<state>/docker-disk/<uuid>, new string) when it has one. */
static char *disk_of(cae_backend *b, const char *uuid)
{
	char *d = disk_dir(b, uuid);
	_cleanup_free_ char *img = d ? cae__path_join(d, CAE_DISKFS_IMAGE) : NULL;
	if (!img || access(img, F_OK) < 0) {
		free(d);
		return NULL;
	}
	return d;
}

static void names(const char *uuid, char *name, size_t size, char *creating, size_t csize)
{
	snprintf(name, size, CAE_DOCKER_NAME_PREFIX "%s", uuid);
	snprintf(creating, csize, CAE_DOCKER_NAME_PREFIX "%s" CREATING_SUFFIX, uuid);
}

static json_t *labels_of(json_t *inspect)
{
	return json_object_get(json_object_get(inspect, "Config"), "Labels");
}

/* uuid's container (its final name) inspected, or NULL. */
static json_t *inspect_env(cae_backend *b, const char *uuid)
{
	char name[128], creating[160];
	names(uuid, name, sizeof(name), creating, sizeof(creating));
	json_t *c = NULL;
	if (cae_docker_container_inspect(cae__docker_client(b), name, &c, NULL) < 0)
		return NULL;
	return c;
}

/* Whether uuid has a container, finished or not (-1: the engine did not say). */
static int has_container(cae_backend *b, const char *uuid)
{
	char name[128], creating[160];
	names(uuid, name, sizeof(name), creating, sizeof(creating));
	cae_docker *d = cae__docker_client(b);
	const char *both[] = {name, creating};
	for (int i = 0; i < 2; i++) {
		json_t *c = NULL;
		int r = cae_docker_container_inspect(d, both[i], &c, NULL);
		json_decref(c);
		if (r == 0)
			return 1;
		if (r != -ENOENT)
			return -1;
	}
	return 0;
}

static bool docker_sees(cae_backend *b, const char *uuid)
{
	json_t *c = inspect_env(b, uuid);
	bool mine =
	    c && cae__backend_sees(
		     b, json_string_value(json_object_get(labels_of(c), CAE_LABEL_INSTANCE)));
	json_decref(c);
	return mine;
}

/* Whether the engine is Podman's Docker-compatible API (GET /version names it): its commit
 * takes no labels and its inspect is not what its create takes back. */
static bool podman(cae_backend *b)
{
	json_t *v = NULL;
	if (cae_docker_call(cae__docker_client(b), "GET", "/version", NULL, &v, NULL) < 0)
		return false;
	bool p = false;
	size_t i;
	json_t *c;
	json_array_foreach(json_object_get(v, "Components"), i, c)
	{
		const char *n = json_string_value(json_object_get(c, "Name"));
		p |= n && strstr(n, "Podman") != NULL;
	}
	json_decref(v);
	return p;
}

static int docker_check(cae_backend *b, const char *uuid, json_t **out, cae_error *err)
{
	if (podman(b))
		return cae_error_set(err, -EOPNOTSUPP,
				     "snapshots are not available on Podman's Docker-compatible "
				     "API yet (its commit takes no labels)");
	json_t *c = inspect_env(b, uuid);
	if (!c || !cae__backend_own(
		      b, json_string_value(json_object_get(labels_of(c), CAE_LABEL_INSTANCE)))) {
		json_decref(c);
		return cae_error_set(err, -ENOENT, "no environment for task %s", uuid);
	}
	if (!json_is_true(json_object_get(json_object_get(c, "State"), "Running"))) {
		json_decref(c);
		return cae_error_set(
		    err, -EAGAIN, "environment %s is not running: run a command in it first", uuid);
	}
	*out = c;
	return 0;
}

/* ---- images ---- */

/* (The references and tags here need no escaping in a URL: repositories are ours, tags a
 * task uuid or snapshot id ([A-Za-z0-9_.-]), ids "sha256:" and hex.) */
static int image_tag(cae_backend *b, const char *ref, const char *repo, const char *tag,
		     cae_error *err)
{
	char path[512];
	snprintf(path, sizeof(path), "/images/%s/tag?repo=%s&tag=%s", ref, repo, tag);
	int r = cae_docker_call(cae__docker_client(b), "POST", path, NULL, NULL, err);
	return r < 0 ? r : 0;
}

/* Removes the reference ref (repo:tag or an id): the engine removes the image, and its
 * untagged parents, once no other tag and no container has it. A missing one is success. */
static int image_untag(cae_backend *b, const char *ref)
{
	char path[512];
	snprintf(path, sizeof(path), "/images/%s", ref);
	json_t *out = NULL;
	int r = cae_docker_call(cae__docker_client(b), "DELETE", path, NULL, &out, NULL);
	json_decref(out);
	return r == -ENOENT ? 0 : r < 0 ? r : 0;
}

/* The image id (new string, NULL: none) and size of ref. */
static char *image_id(cae_backend *b, const char *ref, int64_t *size, bool *tagged)
{
	char path[512];
	snprintf(path, sizeof(path), "/images/%s/json", ref);
	json_t *out = NULL;
	if (cae_docker_call(cae__docker_client(b), "GET", path, NULL, &out, NULL) < 0)
		return NULL;
	const char *id = json_string_value(json_object_get(out, "Id"));
	char *r = id ? strdup(id) : NULL;
	if (size)
		*size = json_integer_value(json_object_get(out, "Size"));
	if (tagged)
		*tagged = json_array_size(json_object_get(out, "RepoTags")) > 0;
	json_decref(out);
	return r;
}

/* Commits container id as repo:tag labelled cae.snapshot (snap) and with this state
 * directory; the container is paused meanwhile. */
static int commit(cae_backend *b, const char *id, const char *repo, const char *tag,
		  const char *snap, cae_error *err)
{
	char path[512];
	snprintf(path, sizeof(path), "/commit?container=%s&repo=%s&tag=%s&pause=1", id, repo, tag);
	json_t *body = json_pack("{s:{s:s, s:s}}", "Labels", LABEL_SNAPSHOT, snap, LABEL_STATE,
				 b->cfg->command_executor.state_dir);
	json_t *out = NULL;
	int r =
	    body ? cae_docker_call(cae__docker_client(b), "POST", path, body, &out, err) : -ENOMEM;
	json_decref(body);
	json_decref(out);
	return r < 0 ? cae_error_prefix(err, "commit") : 0;
}

/* ---- snapshot ---- */

static int docker_capture(cae_backend *b, const char *uuid, json_t *meta, const char *tmp,
			  const char *id, json_t *rec, cae_error *err)
{
	const char *cid = json_string_value(json_object_get(meta, "Id"));
	const char *base = json_string_value(json_object_get(meta, "Image"));
	char ref[160], label[160];
	snprintf(ref, sizeof(ref), SNAP_REPO ":%s", id);
	snprintf(label, sizeof(label), "%s/%s", uuid, id);
	json_object_set_new(rec, "image", json_string(ref));
	int r = cid ? commit(b, cid, SNAP_REPO, id, label, err) : -ENOENT;
	if (r < 0)
		return r;
	int64_t size = 0, base_size = 0;
	free(image_id(b, ref, &size, NULL));
	if (base)
		free(image_id(b, base, &base_size, NULL));
	json_object_set_new(rec, "outside_bytes",
			    json_integer(size > base_size ? size - base_size : 0));
	_cleanup_free_ char *disk = disk_of(b, uuid);
	const char *kind = "commit", *mech = "commit";
	if (disk) {
		_cleanup_free_ char *ws = cae__path_join(disk, "workspace");
		if (!ws)
			return -ENOMEM;
		cae__snapshot_thaw(ws);
		const char *k = NULL, *m = NULL;
		r = cae__snapshot_capture(disk, tmp, "tree", &k, &m, err);
		if (r < 0)
			return r;
		kind = "commit+image";
		mech = strcmp(m, "reflink") == 0 ? "commit+reflink" : "commit+copy";
	}
	json_object_set_new(rec, "kind", json_string(kind));
	json_object_set_new(rec, "mechanism", json_string(mech));
	return 0;
}

static void docker_discard(cae_backend *b, json_t *rec)
{
	const char *ref = json_string_value(json_object_get(rec, "image"));
	if (ref && strncmp(ref, SNAP_REPO ":", strlen(SNAP_REPO) + 1) == 0)
		(void)image_untag(b, ref);
}

/* ---- containers from a snapshot's or another's state ---- */

/* The create body of a container like meta's (inspect form) running image, its workspace
 * disk disk (NULL: none), labels (owned) its own. */
static json_t *body_like(json_t *meta, const char *image, const char *disk, json_t *labels)
{
	/* the host configuration cae gives a container (container_config in backend-docker.c),
	 * not all that inspect reports: Podman's is not what its create takes back (a CPU limit
	 * also as CpuPeriod/CpuQuota, ulimits named RLIMIT_*) */
	static const char *const keep[] = {
	    "Init",	"CapDrop", "SecurityOpt", "NetworkMode", "RestartPolicy",
	    "NanoCpus", "Memory",  "MemorySwap",  "PidsLimit",	 "StorageOpt",
	    "Mounts",	"Binds",   NULL};
	json_t *body = json_deep_copy(json_object_get(meta, "Config"));
	json_t *from = json_object_get(meta, "HostConfig");
	json_t *hc = json_object();
	if (!body || !hc) {
		json_decref(body);
		json_decref(hc);
		json_decref(labels);
		return NULL;
	}
	for (const char *const *k = keep; *k; k++) {
		json_t *v = json_object_get(from, *k);
		if (v && !json_is_null(v) && !(json_is_integer(v) && json_integer_value(v) == 0))
			json_object_set_new(hc, *k, json_deep_copy(v));
	}
	json_object_del(body, "Hostname");
	json_object_set_new(body, "Image", json_string(image));
	json_object_set_new(body, "Labels", labels);
	/* the workspace's disk is its own: never the source's */
	char src[4096];
	snprintf(src, sizeof(src), "%s/workspace", disk ? disk : "");
	int moved = 0, binds = 0;
	size_t i;
	json_t *m;
	json_array_foreach(json_object_get(hc, "Mounts"), i, m)
	{
		const char *t = json_string_value(json_object_get(m, "Target"));
		if (t && strcmp(t, WORKSPACE) == 0) {
			json_object_set_new(m, "Source", json_string(src));
			moved++;
		}
	}
	json_array_foreach(json_object_get(hc, "Binds"), i, m)
	{
		const char *bnd = json_string_value(m), *c = bnd ? strchr(bnd, ':') : NULL;
		if (c && strncmp(c + 1, WORKSPACE, strlen(WORKSPACE)) == 0 &&
		    (c[1 + strlen(WORKSPACE)] == '\0' || c[1 + strlen(WORKSPACE)] == ':'))
			binds++;
	}
	json_object_set_new(body, "HostConfig", hc);
	if (binds || (disk && moved != 1)) {
		json_decref(body);
		return NULL;
	}
	return body;
}

/* Creates and starts a container of body under uuid's creating name, then gives it the
 * final name. */
static int create_named(cae_backend *b, const char *uuid, json_t *body, cae_error *err)
{
	char name[128], creating[160];
	names(uuid, name, sizeof(name), creating, sizeof(creating));
	_cleanup_free_ char *id = NULL;
	int r = cae__docker_create_started(b, creating, body, NULL, -1, &id, err);
	if (r < 0)
		return r;
	r = cae_docker_container_rename(cae__docker_client(b), id, name, err);
	if (r < 0)
		(void)cae__docker_remove(b, id, NULL);
	return r;
}

/* Clones the workspace image src (a file) into the disk directory dir (made, locked by
 * the caller) and mounts it. */
static int disk_from(const char *src, const char *dir, const char **mech, cae_error *err)
{
	_cleanup_free_ char *img = cae__path_join(dir, CAE_DISKFS_IMAGE);
	_cleanup_free_ char *ws = cae__path_join(dir, "workspace");
	if (!img || !ws)
		return -ENOMEM;
	int r = cae__snapshot_clone_file(src, img, mech, err);
	if (r == 0 && mkdir(ws, 0700) < 0 && errno != EEXIST)
		r = cae_error_set(err, -errno, "cannot make the workspace: %s", strerror(errno));
	if (r == 0 && (r = cae__diskfs_remount(img, ws, err)) > 0)
		r = 0;
	return r;
}

/* ---- restore ---- */

static int docker_restore(cae_backend *b, const char *uuid, json_t *meta, const char *one,
			  json_t *rec, json_t *res, cae_error *err)
{
	const char *ref = json_string_value(json_object_get(rec, "image"));
	const char *cid = json_string_value(json_object_get(meta, "Id"));
	_cleanup_free_ char *old_image =
	    strdup(json_string_value(json_object_get(meta, "Image")) ?: "");
	_cleanup_free_ char *disk = disk_of(b, uuid);
	_cleanup_free_ char *dir = env_dir(b, uuid);
	if (!ref || !cid || !old_image || !dir)
		return cae_error_set(err, -EINVAL, "the snapshot has no image");
	char tag[64];
	cae__preparer_tag(tag, sizeof(tag));
	_cleanup_free_ char *tmp = NULL;
	if (asprintf(&tmp, "%s/" CAE_SNAPSHOT_RESTORE_PREFIX "%s.new", dir, tag) < 0)
		return -ENOMEM;
	(void)cae__rm_rf(tmp);
	const char *mech = "commit";
	bool image =
	    strcmp(json_string_value(json_object_get(rec, "kind")) ?: "", "commit+image") == 0;
	int r = 0;
	/* the workspace's image first (the container still runs on the old one) */
	if (image && disk) {
		_cleanup_free_ char *src = cae__path_join(one, CAE_DISKFS_IMAGE);
		r = src ? cae__snapshot_clone_file(src, tmp, &mech, err) : -ENOMEM;
		mech = r == 0 && strcmp(mech, "reflink") == 0 ? "commit+reflink" : "commit+copy";
	} else if (image || disk) {
		r = cae_error_set(err, -EINVAL,
				  "the snapshot and the environment differ in where the "
				  "workspace is (a disk of its own or the container's layer)");
	}
	char preparer[CAE_PREPARER_MAX];
	cae__preparer_label(preparer, sizeof(preparer));
	json_t *labels = json_deep_copy(labels_of(meta));
	json_object_set_new(labels, "cae.preparer", json_string(preparer));
	char base[160];
	snprintf(base, sizeof(base), BASE_REPO ":%s", uuid);
	json_t *body = r == 0 ? body_like(meta, base, disk, labels) : (json_decref(labels), NULL);
	if (r == 0 && !body)
		r = cae_error_set(err, -EINVAL,
				  "environment %s's workspace is not the mount cae made", uuid);
	if (r == 0)
		r = image_tag(b, ref, BASE_REPO, uuid, err);
	/* every process of the container ends with it: its helper, commands, sessions */
	if (r == 0) {
		cae__docker_forget(b, uuid);
		r = cae__docker_remove(b, cid, err);
	}
	if (r == 0 && image && disk) {
		_cleanup_free_ char *ws = cae__path_join(disk, "workspace");
		_cleanup_free_ char *img = cae__path_join(disk, CAE_DISKFS_IMAGE);
		r = ws && img ? cae__diskfs_swap(tmp, img, ws, err) : -ENOMEM;
	}
	if (r == 0)
		r = create_named(b, uuid, body, err);
	json_decref(body);
	(void)unlink(tmp);
	/* the image the old container ran, when nothing else has it now */
	bool tagged = true;
	_cleanup_free_ char *oid = r == 0 ? image_id(b, old_image, NULL, &tagged) : NULL;
	if (oid && !tagged)
		(void)image_untag(b, oid);
	if (r < 0)
		return r;
	json_object_set_new(res, "mechanism", json_string(mech));
	json_object_set_new(res, "sandbox_stopped", json_true());
	json_object_set_new(res, "container_restarted", json_true());
	json_object_set_new(res, "processes_ended",
			    json_string("every process of the container (its commands, "
					"process sessions and helper)"));
	return 0;
}

/* ---- fork ---- */

static int docker_fork(cae_backend *b, const char *src, json_t *meta, const char *one, json_t *s,
		       const char *new_uuid, json_t *forked_from, cae_env_info *info,
		       const char **mechp, cae_error *err)
{
	if (has_container(b, new_uuid) != 0)
		return cae_error_set(err, -EEXIST, "task %s has an environment already", new_uuid);
	_cleanup_free_ char *ndir = env_dir(b, new_uuid);
	_cleanup_free_ char *sdir = env_dir(b, src);
	_cleanup_free_ char *sdisk = disk_of(b, src);
	_cleanup_free_ char *ndisk = sdisk ? disk_dir(b, new_uuid) : NULL;
	if (!ndir || !sdir || (sdisk && !ndisk))
		return -ENOMEM;
	/* held until the container exists: the sweep leaves what it makes alone meanwhile */
	int r = cae__mkdir_p(ndir, 0700);
	if (r < 0)
		return cae_error_set(err, r, "cannot make %s: %s", ndir, strerror(-r));
	_cleanup_close_ int nlock = cae__snapshot_lock(ndir, false);
	if (nlock < 0)
		return cae_error_set(err, -EEXIST, "task %s has an environment already", new_uuid);
	_cleanup_close_ int dlock = -1;
	if (ndisk) {
		if (cae__is_dir(ndisk))
			return cae_error_set(err, -EEXIST, "task %s has a workspace already",
					     new_uuid);
		r = cae__mkdir_p(ndisk, 0700);
		dlock = r == 0 ? open(ndisk, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
		if (dlock < 0 || flock(dlock, LOCK_EX) < 0)
			return cae_error_set(err, -errno, "cannot lock %s: %s", ndisk,
					     strerror(errno));
	}
	const char *mech = "commit";
	char base[160];
	snprintf(base, sizeof(base), BASE_REPO ":%s", new_uuid);
	if (s) {
		const char *ref = json_string_value(json_object_get(s, "image"));
		bool image = strcmp(json_string_value(json_object_get(s, "kind")) ?: "",
				    "commit+image") == 0;
		r = ref ? image_tag(b, ref, BASE_REPO, new_uuid, err)
			: cae_error_set(err, -EINVAL, "the snapshot has no image");
		if (r == 0 && image != (ndisk != NULL))
			r = cae_error_set(err, -EINVAL,
					  "the snapshot and its environment differ in where the "
					  "workspace is");
		if (r == 0 && ndisk) {
			_cleanup_free_ char *simg = cae__path_join(one, CAE_DISKFS_IMAGE);
			r = simg ? disk_from(simg, ndisk, &mech, err) : -ENOMEM;
		}
	} else {
		/* one live fork or snapshot of the source at a time: the engine pauses it */
		_cleanup_close_ int slock = -1;
		r = cae__mkdir_p(sdir, 0700);
		slock = r == 0 ? cae__snapshot_lock(sdir, true) : r;
		if (slock < 0)
			r = cae_error_set(err, slock, "cannot lock environment %s", src);
		const char *cid = json_string_value(json_object_get(meta, "Id"));
		if (r == 0)
			r = commit(b, cid ? cid : "", BASE_REPO, new_uuid, "", err);
		if (r == 0 && ndisk) {
			_cleanup_free_ char *sws = cae__path_join(sdisk, "workspace");
			_cleanup_free_ char *nws = cae__path_join(ndisk, "workspace");
			const char *kind = NULL;
			if (sws)
				cae__snapshot_thaw(sws);
			r = sws && nws ? cae__snapshot_capture(sdisk, ndisk, "workspace", &kind,
							       &mech, err)
				       : -ENOMEM;
			if (r == 0 && mkdir(nws, 0700) < 0 && errno != EEXIST)
				r = -errno;
			_cleanup_free_ char *img = cae__path_join(ndisk, CAE_DISKFS_IMAGE);
			if (r == 0 && (r = img ? cae__diskfs_remount(img, nws, err) : -ENOMEM) > 0)
				r = 0;
		}
	}
	if (ndisk && r == 0)
		mech = strcmp(mech, "reflink") == 0 ? "commit+reflink" : "commit+copy";
	/* its own labels: the source's (its environment, helper, credential target, forge),
	 * with its own uuid, creation time, preparer and instance */
	char created[40], preparer[CAE_PREPARER_MAX];
	cae__iso8601_now(created, sizeof(created));
	cae__preparer_label(preparer, sizeof(preparer));
	json_t *labels = json_deep_copy(labels_of(meta));
	_cleanup_free_ char *from = json_dumps(forked_from, JSON_COMPACT);
	json_object_set_new(labels, "cae.task_uuid", json_string(new_uuid));
	json_object_set_new(labels, CAE_DOCKER_LABEL_CREATED, json_string(created));
	json_object_set_new(labels, "cae.preparer", json_string(preparer));
	json_object_set_new(labels, CAE_LABEL_INSTANCE, json_string(b->instance));
	json_object_set_new(labels, LABEL_FORKED_FROM, json_string(from ? from : ""));
	json_object_del(labels, LABEL_SNAPSHOT);
	json_t *body = body_like(meta, base, ndisk, labels);
	if (r == 0 && !body)
		r = cae_error_set(err, -EINVAL,
				  "environment %s's workspace is not the mount cae made", src);
	if (r == 0)
		r = create_named(b, new_uuid, body, err);
	json_decref(body);
	if (r < 0) {
		if (ndisk)
			(void)cae__diskfs_container_release(ndisk);
		(void)image_untag(b, base);
		(void)cae__rm_rf(ndir);
		return r;
	}
	*mechp = mech;
	return cae_backend_info(b, new_uuid, info, err);
}

/* ---- removal and sweeps ---- */

static void tidy_disk(cae_backend *b, const char *uuid)
{
	_cleanup_free_ char *disk = disk_dir(b, uuid);
	_cleanup_free_ char *ws = disk ? cae__path_join(disk, "workspace") : NULL;
	if (ws)
		cae__snapshot_thaw(ws);
}

/* Whether an image (list form) is this instance's, recorded in this state directory (another
 * process of the same instance may keep its records elsewhere). */
static bool ours(cae_backend *b, json_t *im)
{
	json_t *labels = json_object_get(im, "Labels");
	const char *sdir = json_string_value(json_object_get(labels, LABEL_STATE));
	return cae__backend_own(b,
				json_string_value(json_object_get(labels, CAE_LABEL_INSTANCE))) &&
	       sdir && strcmp(sdir, b->cfg->command_executor.state_dir) == 0;
}

/* Removes the images of uuid's snapshots and its base tag, and its records. */
static void drop(cae_backend *b, const char *uuid, json_t *images)
{
	size_t i, j;
	json_t *im, *t;
	size_t ul = strlen(uuid);
	json_array_foreach(images, i, im)
	{
		if (!ours(b, im))
			continue;
		const char *l = json_string_value(
		    json_object_get(json_object_get(im, "Labels"), LABEL_SNAPSHOT));
		json_array_foreach(json_object_get(im, "RepoTags"), j, t)
		{
			const char *tag = json_string_value(t);
			bool snap = tag && l && strncmp(l, uuid, ul) == 0 && l[ul] == '/' &&
				    strncmp(tag, SNAP_REPO ":", strlen(SNAP_REPO) + 1) == 0 &&
				    strcmp(tag + strlen(SNAP_REPO) + 1, l + ul + 1) == 0;
			bool base = tag &&
				    strncmp(tag, BASE_REPO ":", strlen(BASE_REPO) + 1) == 0 &&
				    strcmp(tag + strlen(BASE_REPO) + 1, uuid) == 0;
			if (snap || base)
				(void)image_untag(b, tag);
		}
	}
	_cleanup_free_ char *dir = env_dir(b, uuid);
	if (dir)
		(void)cae__rm_rf(dir);
}

static json_t *our_images(cae_backend *b)
{
	/* filters={"reference":["cae-snapshot","cae-base"]} */
	const char *path = "/images/json?filters=%7B%22reference%22%3A%5B%22" SNAP_REPO
			   "%22%2C%22" BASE_REPO "%22%5D%7D";
	json_t *out = NULL;
	int r = cae_docker_call(cae__docker_client(b), "GET", path, NULL, &out, NULL);
	if (r < 0 || !json_is_array(out)) {
		json_decref(out);
		return NULL;
	}
	return out;
}

int cae__snapshot_docker_drop(cae_backend *b, const char *uuid, cae_error *err)
{
	(void)err;
	json_t *images = our_images(b);
	drop(b, uuid, images);
	json_decref(images);
	return 0;
}

/* Whether the environment directory <root>/<uuid> is held by a process (a snapshot or a
 * fork of it runs). */
static bool held(cae_backend *b, const char *uuid)
{
	_cleanup_free_ char *dir = env_dir(b, uuid);
	return cae__snapshot_held(dir);
}

/* What killed snapshots and forks left: records of environments without a container,
 * images without a record or container, of this instance and held by no process. */
static int docker_sweep(cae_backend *b)
{
	int n = 0;
	_cleanup_free_ char *root = docker_root(b);
	DIR *d = root ? opendir(root) : NULL;
	struct dirent *de;
	json_t *images = our_images(b);
	while (d && (de = readdir(d))) {
		if (!cae_task_uuid_valid(de->d_name) || held(b, de->d_name) ||
		    has_container(b, de->d_name) != 0)
			continue;
		drop(b, de->d_name, images);
		n++;
	}
	if (d)
		closedir(d);
	size_t i;
	json_t *im;
	json_array_foreach(images, i, im)
	{
		json_t *labels = json_object_get(im, "Labels");
		if (!ours(b, im))
			continue;
		size_t j;
		json_t *t;
		json_array_foreach(json_object_get(im, "RepoTags"), j, t)
		{
			const char *tag = json_string_value(t);
			if (!tag)
				continue;
			char uuid[CAE_ENV_UUID_MAX] = "";
			bool orphan = false;
			if (strncmp(tag, BASE_REPO ":", strlen(BASE_REPO) + 1) == 0) {
				snprintf(uuid, sizeof(uuid), "%s", tag + strlen(BASE_REPO) + 1);
				orphan = cae_task_uuid_valid(uuid) && !held(b, uuid) &&
					 has_container(b, uuid) == 0;
			} else if (strncmp(tag, SNAP_REPO ":", strlen(SNAP_REPO) + 1) == 0) {
				const char *l =
				    json_string_value(json_object_get(labels, LABEL_SNAPSHOT));
				const char *slash = l ? strchr(l, '/') : NULL;
				if (!slash || (size_t)(slash - l) >= sizeof(uuid))
					continue;
				snprintf(uuid, sizeof(uuid), "%.*s", (int)(slash - l), l);
				_cleanup_free_ char *dir = env_dir(b, uuid);
				char *rec = NULL;
				if (!dir ||
				    asprintf(&rec, "%s/" CAE_SNAPSHOT_DIR "/%s/snapshot.json", dir,
					     slash + 1) < 0)
					continue;
				orphan = cae_task_uuid_valid(uuid) && access(rec, F_OK) < 0 &&
					 !held(b, uuid);
				free(rec);
			}
			if (orphan && image_untag(b, tag) == 0)
				n++;
		}
	}
	json_decref(images);
	return n;
}

const cae__snapshot_ops cae__snapshot_docker_ops = {
    .env_dir = env_dir,
    .root = docker_root,
    .sees = docker_sees,
    .check = docker_check,
    .capture = docker_capture,
    .discard = docker_discard,
    .restore = docker_restore,
    .fork = docker_fork,
    .tidy = tidy_disk,
    .sweep = docker_sweep,
};
