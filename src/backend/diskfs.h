/* Internal to src/backend: a workspace on a file system of its own (the local backend's bound
 * on its total disk use, fallocate included).
 *
 * The file system is a sparse image file in the environment's directory of the state
 * directory, formatted ext4 (mkfs.ext4, made for speed: no journal, inode tables initialised
 * lazily and never by the kernel behind our back, no reserved blocks), attached to a free loop
 * device (LOOP_CTL_GET_FREE, LOOP_CONFIGURE with LO_FLAGS_AUTOCLEAR: the device detaches by
 * itself when its last user, the mount, goes) and mounted (nosuid, nodev) on the workspace
 * directory, in the host's mount namespace so that every cae process finds it. The image
 * never grows past its size: what the workspace holds, however written, takes at most that
 * much of the host's disk. Root only (mount(2), the loop driver).
 *
 * Lifecycle: made at prepare (after the environment's metadata says "creating", so that a
 * prepare killed at any point is collected); unmounted (lazily: a sandbox still running keeps
 * it until it ends, then the loop device goes) and the image removed before the environment's
 * directory is; after a reboot (mount gone, image kept) mounted again by the first use. */
#ifndef CAE_BACKEND_DISKFS_H
#define CAE_BACKEND_DISKFS_H

#include "cae/error.h"

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

/* The image's name in the environment's directory. */
#define CAE_DISKFS_IMAGE "disk.img"

/* Whether this process can make one: root, the loop driver (/dev/loop-control) and
 * mkfs.ext4. Returns 0, or -errno with *why (static text) saying what is missing. */
int cae__diskfs_usable(const char **why);

/* Makes image (bytes large, sparse), formats it and mounts it on mountpoint (an existing
 * empty directory), whose root then has mode 0700. cancel_fd (-1: none) cancels mkfs. On
 * failure nothing stays mounted (the image may stay: cae__diskfs_release removes it).
 * Returns 0 or -errno with err set. */
int cae__diskfs_create(const char *image, const char *mountpoint, uint64_t bytes, int cancel_fd,
		       cae_error *err);

/* Mounts image on mountpoint again when it is not mounted there (after a reboot), under a
 * lock on the image so that two processes never mount it twice. Returns 1 when it mounted,
 * 0 when it already was or there is no image, -errno (err set) on failure. */
int cae__diskfs_remount(const char *image, const char *mountpoint, cae_error *err);

/* Puts the image fresh (a file beside image) in place of image under mountpoint: the
 * workspace's file system unmounted, fresh renamed over image, mounted again. Killed in
 * between, the next use mounts whichever image is in place, the old or the new, each whole.
 * What the old file system's end costs (its cached pages and inodes evicted, its loop
 * device released, its image's blocks freed: a quarter of a second for a workspace of 1 GB)
 * is not paid here: a reference to it is kept across the unmount and let go on a thread of
 * this process, after the new one is mounted (cae__diskfs_settle waits for it). Returns 0 or
 * -errno with err set (then fresh is removed). */
int cae__diskfs_swap(const char *fresh, const char *image, const char *mountpoint, cae_error *err);

/* Waits until every old file system cae__diskfs_swap let go of in this process has ended. */
void cae__diskfs_settle(void);

/* Whether a file system is mounted on path (its root is path). */
bool cae__diskfs_mounted(const char *path);

/* Unmounts every file system mounted on mountpoint (lazily) and removes image. Returns 0, or
 * -EBUSY when something stays mounted there (then nothing below it may be removed). */
int cae__diskfs_release(const char *image, const char *mountpoint);

/* ---- a container's workspace (diskfs-container.c) ----
 * For an engine of this host whose storage driver cannot bound a container's disk: the same
 * file system in <state_dir>/docker-disk/<uuid>/ (disk.img mounted on workspace/), bound
 * into the container at /workspace. */

/* Where they are: <state_dir>/CAE_DISKFS_CONTAINER_DIR/<uuid>. */
#define CAE_DISKFS_CONTAINER_DIR "docker-disk"

/* <state_dir>/docker-disk/<uuid> (new string), or NULL. */
char *cae__diskfs_container_dir(const char *state_dir, const char *uuid);

/* Makes dir and its file system of bytes; the workspace's root, project/ and tmp/ belong to
 * uid:gid (the container's user). *lock_fd gets an flock on dir that keeps the collector
 * (cae__diskfs_container_sweep) away until the container exists: the prepare closes it.
 * Returns 0 or -errno (err set). */
int cae__diskfs_container_make(const char *dir, uint64_t bytes, uid_t uid, gid_t gid, int cancel_fd,
			       int *lock_fd, cae_error *err);

/* Mounts dir's file system again when its image is there and it is not mounted (before a
 * stopped container is started again). 0, 1 when it mounted, -errno. */
int cae__diskfs_container_remount(const char *dir, cae_error *err);

/* Unmounts dir's file system, removes its image and dir. 0 (also when there is no dir) or
 * -errno. */
int cae__diskfs_container_release(const char *dir);

/* Releases every directory under <state_dir>/docker-disk whose task has no container
 * (gone(uuid, ud) true) and that no prepare holds. Returns how many. */
int cae__diskfs_container_sweep(const char *state_dir, bool (*gone)(const char *uuid, void *ud),
				void *ud);

#endif
