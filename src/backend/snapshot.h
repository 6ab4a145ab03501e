/* Internal to src/backend: what the snapshots' common part (snapshot.c: records, names,
 * bounds, locks, temporaries, sweeps; include/cae/snapshot.h) and each backend's storage
 * (snapshot-local.c, snapshot-docker.c, snapshot-kubernetes.c) share, and the backends' hooks into
 * them. */
#ifndef CAE_BACKEND_SNAPSHOT_H
#define CAE_BACKEND_SNAPSHOT_H

#include <jansson.h>
#include <stdbool.h>

#include "cae/backend.h"
#include "cae/error.h"

/* <env dir>/snapshots: an environment's snapshots, one directory each (snapshot.json and
 * what its backend keeps there), removed with it */
#define CAE_SNAPSHOT_DIR "snapshots"
/* the temporary names (each followed by cae__preparer_tag's tag of its process) */
#define CAE_SNAPSHOT_TMP_PREFIX ".tmp."
#define CAE_SNAPSHOT_RESTORE_PREFIX ".restore."
#define CAE_SNAPSHOT_CREATING_PREFIX ".creating."

/* One backend's storage of snapshots. The common part calls them with the environment's
 * lock held (cae__snapshot_lock) except fork and sweep, which lock what they take. */
typedef struct cae__snapshot_ops {
	/* The directory of uuid's snapshots/ and its snapshot.lock (new string). */
	char *(*env_dir)(cae_backend *b, const char *uuid);
	/* The directory holding every environment's env_dir (new string). */
	char *(*root)(cae_backend *b);
	/* Whether the environment of env_dir named uuid is this instance's (its snapshots are
	 * listed and swept). */
	bool (*sees)(cae_backend *b, const char *uuid);
	/* uuid's environment when it is this instance's and ready: *meta (new) is what the
	 * backend knows of it. -ENOENT, -EAGAIN (not ready), -EOPNOTSUPP, err set. */
	int (*check)(cae_backend *b, const char *uuid, json_t **meta, cae_error *err);
	/* Takes uuid's environment as it is now into tmp (an empty directory made): rec gets
	 * "kind" and "mechanism" and whatever restore and fork need; "outside_bytes" for what it
	 * keeps elsewhere (an image of the engine's), counted in the snapshot's bytes. */
	int (*capture)(cae_backend *b, const char *uuid, json_t *meta, const char *tmp,
		       const char *id, json_t *rec, cae_error *err);
	/* Removes what snapshot rec keeps outside its directory (NULL: nothing). */
	void (*discard)(cae_backend *b, json_t *rec);
	/* Puts uuid back as snapshot rec (its directory snap) was; res gets "mechanism",
	 * "sandbox_stopped" and what else the result says. */
	int (*restore)(cae_backend *b, const char *uuid, json_t *meta, const char *snap,
		       json_t *rec, json_t *res, cae_error *err);
	/* Makes new_uuid's environment from src's (meta) as it is now (snap and rec NULL) or
	 * from its snapshot rec (directory snap); forked_from (borrowed) is what it records of
	 * its source; *mech the mechanism. */
	int (*fork)(cae_backend *b, const char *src, json_t *meta, const char *snap, json_t *rec,
		    const char *new_uuid, json_t *forked_from, cae_env_info *info,
		    const char **mech, cae_error *err);
	/* Under the environment's lock, before a sweep of its temporaries (NULL: nothing). */
	void (*tidy)(cae_backend *b, const char *uuid);
	/* What a killed snapshot or fork left outside the records (NULL: nothing); returns
	 * how many went. */
	int (*sweep)(cae_backend *b);
} cae__snapshot_ops;

extern const cae__snapshot_ops cae__snapshot_local_ops;
extern const cae__snapshot_ops cae__snapshot_docker_ops;
extern const cae__snapshot_ops cae__snapshot_kubernetes_ops;

/* ---- common helpers (snapshot.c), for the backends' storage ---- */

/* The lock of the environment in dir (snapshot.lock, flock), held while its files are
 * taken or replaced: its descriptor or -errno. */
int cae__snapshot_lock(const char *dir, bool wait);
/* Whether a process holds that lock now (a snapshot or a fork of the environment in dir
 * runs): what the sweeps leave alone. False when dir is NULL or no directory. */
bool cae__snapshot_held(const char *dir);
/* Copies the file src to dst (made, must not exist): a clone (FICLONE) where the file
 * system shares extents, else its data extents copied (holes stay holes). *mech:
 * "reflink" or "copy". */
int cae__snapshot_clone_file(const char *src, const char *dst, const char **mech, cae_error *err);
/* cp -a --reflink=auto src dst (dst must not exist). */
int cae__snapshot_copy_tree(const char *src, const char *dst, cae_error *err);
/* Takes the workspace of dir (dir/disk.img mounted at dir/workspace, or the tree
 * dir/workspace) into dst_dir: its image as dst_dir/disk.img, the file system frozen
 * meanwhile (a guard process thaws it if this one dies), or its tree as
 * dst_dir/<tree_name>. */
int cae__snapshot_capture(const char *dir, const char *dst_dir, const char *tree_name,
			  const char **kind, const char **mech, cae_error *err);
/* Thaws the file system mounted at ws (one a killed snapshot left frozen). */
void cae__snapshot_thaw(const char *ws);
json_t *cae__snapshot_read_json(const char *path);
int cae__snapshot_write_json(const char *path, json_t *j);

/* ---- the backends' hooks ---- */

/* Stops this process's sandbox of uuid's environment and its credential channel (what runs
 * in it ends): the first step of a restore (backend-local.c). */
void cae__local_stop_sandbox(cae_backend *b, const char *uuid);

/* What a snapshot, restore or fork killed half-way left (root: <state_dir>/local for the
 * local backend; NULL: the backend's own root): the temporaries of processes that are gone
 * are removed, a workspace file system left frozen is thawed, snapshots older than
 * command_executor.snapshots.max_age_hours go. Returns how many went. (Local forks are made
 * under the prepare's .creating.<tag>.<uuid> name, which the environments' own sweep
 * removes.) */
int cae__snapshot_sweep(cae_backend *b, const char *root);

/* Docker: removes uuid's snapshots (their images and records) and the image its container
 * was forked from, once its containers are gone (remove_env). */
int cae__snapshot_docker_drop(cae_backend *b, const char *uuid, cae_error *err);

/* Kubernetes: removes uuid's snapshot records (<state>/k8s-snapshots/<uuid>) once its pod is
 * gone (remove_env, the gc's removal). */
void cae__snapshot_k8s_drop(cae_backend *b, const char *uuid);

/* What the kubernetes backend lends snapshot-kubernetes.c (backend-kubernetes.c): the cold
 * pod name of uuid; its pod (any state, -ENOENT); its pod when this instance's and able to
 * run commands (ready, running: -ENOENT, -EAGAIN otherwise); the end of this process's
 * channel to its helper; the protected paths' two passes (the user's, then the root
 * sidecar's, which then ends) in pod, as at a prepare's ready step. */
void cae__k8s_pod_name(char *buf, size_t size, const char *uuid);
int cae__k8s_get_pod(cae_backend *b, const char *uuid, json_t **pod, cae_error *err);
int cae__k8s_env_pod(cae_backend *b, const char *uuid, json_t **pod, cae_error *err);
void cae__k8s_forget(cae_backend *b, const char *uuid);
int cae__k8s_protect(cae_backend *b, const char *uuid, const char *pod, cae_error *err);

#endif
