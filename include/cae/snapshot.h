/* Snapshots, restores and forks of an environment (src/backend/snapshot.c): the files of an
 * environment recorded under a name, put back later, or made the start of a new environment.
 *
 * What a snapshot holds: the whole workspace (tracked, untracked and ignored files, .git,
 * modes, owners, symbolic links, empty directories), never processes. The local, docker and
 * kubernetes backends (-EOPNOTSUPP against Podman's API, whose commit keeps no labels), not
 * for a workspace used as is (the user's own directory: -EOPNOTSUPP). On docker also what
 * commands changed outside the workspace (an image the engine commits from the container:
 * the image's paths, the user's home; not volumes or binds), see
 * src/backend/snapshot-docker.c; its mechanism is "commit+copy", "commit+reflink" or "commit"
 * (workspace in the container's layer), its kind "commit+image" or "commit", and a restore
 * ends every process of the container (the result adds container_restarted and
 * processes_ended). On kubernetes a tar of the workspace, the home and the writable /usr/local
 * and /opt streamed out of the pod over an exec and kept as bytes (extracted only in pods;
 * not file owners, /tmp or processes; read while commands may run), mechanism "tar-stream",
 * see src/backend/snapshot-kubernetes.c.
 *
 * Where it is kept: <state_dir>/local/<uuid>/snapshots/<id>/ (docker:
 * <state_dir>/docker-snapshots/<uuid>/..., kubernetes: <state_dir>/k8s-snapshots/<uuid>/...)
 * with snapshot.json and, on local, the
 * workspace's file system image disk.img, or a copy of the workspace's tree in tree/ when
 * the workspace has no file system of its own, so it goes with its environment. Each is made
 * under a temporary name naming its process and renamed into place: a snapshot or fork killed
 * half-way leaves nothing listed, and the collector (cae_backend_cleanup_stale, `cae gc`)
 * removes what a dead process left, and snapshots older than
 * command_executor.snapshots.max_age_hours.
 *
 * Cost: an image is cloned (FICLONE) where the state directory's file system shares extents
 * (btrfs, xfs), else copied extent by extent (its holes stay holes); the result's
 * "mechanism" says which ("reflink" | "copy"). The workspace's file system is frozen
 * (FIFREEZE) while its image is taken, so the image is consistent.
 *
 * Results are JSON objects (new references):
 *   snapshot: {id, name, task_uuid, created_at, bytes, mechanism, kind: "image"|"tree",
 *              duration_ms}
 *   restore:  {task_uuid, snapshot, mechanism, duration_ms, sandbox_stopped}
 *   fork:     ContainerInfo of the new environment with forked_from {task_uuid, snapshot?},
 *             mechanism and duration_ms */
#ifndef CAE_SNAPSHOT_H
#define CAE_SNAPSHOT_H

#include "cae/export.h"

#include <jansson.h>

#include "cae/backend.h"
#include "cae/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Records uuid's environment; name (NULL: none) is 1-64 of [A-Za-z0-9_.-] and unique among
 * the environment's snapshots. -ENOSPC past command_executor.snapshots' bounds. */
CAE_EXPORT int cae_snapshot_create(cae_backend *b, const char *uuid, const char *name, json_t **out,
				   cae_error *err);
/* The snapshots of uuid's environment (NULL: of every environment of this instance), oldest
 * first: an array of snapshot objects. */
CAE_EXPORT int cae_snapshot_list(cae_backend *b, const char *uuid, json_t **out, cae_error *err);
/* Puts uuid's environment back as snapshot (an id or a name of its snapshots) was: files
 * added since are gone, changed ones as they were. This process's sandbox of the environment
 * is stopped first (what runs in it ends); an environment another live process runs commands
 * in is refused (-EBUSY, naming them). */
CAE_EXPORT int cae_snapshot_restore(cae_backend *b, const char *uuid, const char *snapshot,
				    json_t **out, cae_error *err);
/* Removes one snapshot (an id or a name) of uuid's environment. -ENOENT: no such one. */
CAE_EXPORT int cae_snapshot_remove(cae_backend *b, const char *uuid, const char *snapshot,
				   cae_error *err);
/* Makes environment new_uuid from from_uuid's environment as it is now (snapshot NULL) or
 * from one of its snapshots (snapshot an id or name of from_uuid's; from_uuid NULL: an id
 * looked up among every environment's). It gets its own directory, file system, sandbox and
 * cgroup, and shares nothing writable with its source. -EEXIST when new_uuid has an
 * environment. *info gets its ContainerInfo, *out (may be NULL) the result object. */
CAE_EXPORT int cae_snapshot_fork(cae_backend *b, const char *from_uuid, const char *snapshot,
				 const char *new_uuid, cae_env_info *info, json_t **out,
				 cae_error *err);

#ifdef __cplusplus
}
#endif
#endif
