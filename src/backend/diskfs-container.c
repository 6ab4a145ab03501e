/* A container's workspace on a file system of its own (see diskfs.h): the local backend's
 * loop-mounted ext4 image, in the state directory, bound into the container at /workspace. */
#include "backend/diskfs.h"

#include "base/fs.h"
#include "base/macro.h"
#include "cae/backend.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/banned.h"

char *cae__diskfs_container_dir(const char *state_dir, const char *uuid)
{
	char *d = NULL;
	if (!state_dir || !uuid ||
	    asprintf(&d, "%s/" CAE_DISKFS_CONTAINER_DIR "/%s", state_dir, uuid) < 0)
		return NULL;
	return d;
}

static int make_owned(const char *path, uid_t uid, gid_t gid)
{
	if (mkdir(path, 0755) < 0 && errno != EEXIST)
		return -errno;
	if (chown(path, uid, gid) < 0 || chmod(path, 0755) < 0)
		return -errno;
	return 0;
}

int cae__diskfs_container_make(const char *dir, uint64_t bytes, uid_t uid, gid_t gid, int cancel_fd,
			       int *lock_fd, cae_error *err)
{
	*lock_fd = -1;
	_cleanup_free_ char *img = cae__path_join(dir, CAE_DISKFS_IMAGE);
	_cleanup_free_ char *ws = cae__path_join(dir, "workspace");
	_cleanup_free_ char *project = ws ? cae__path_join(ws, "project") : NULL;
	_cleanup_free_ char *tmp = ws ? cae__path_join(ws, "tmp") : NULL;
	if (!img || !project || !tmp)
		return cae_error_set(err, -ENOMEM, "out of memory");
	int r = cae__mkdir_p(ws, 0700);
	if (r < 0)
		return cae_error_set(err, r, "cannot create %s: %s", ws, strerror(-r));
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0 || flock(fd, LOCK_EX) < 0) {
		r = cae_error_set(err, -errno, "cannot lock %s: %s", dir, strerror(errno));
		if (fd >= 0)
			close(fd);
		return r;
	}
	*lock_fd = fd;
	r = cae__diskfs_create(img, ws, bytes, cancel_fd, err);
	if (r < 0)
		return r;
	if ((r = make_owned(ws, uid, gid)) < 0 || (r = make_owned(project, uid, gid)) < 0 ||
	    (r = make_owned(tmp, uid, gid)) < 0)
		return cae_error_set(err, r, "the workspace's file system: %s", strerror(-r));
	return 0;
}

int cae__diskfs_container_remount(const char *dir, cae_error *err)
{
	_cleanup_free_ char *img = cae__path_join(dir, CAE_DISKFS_IMAGE);
	_cleanup_free_ char *ws = cae__path_join(dir, "workspace");
	if (!img || !ws)
		return -ENOMEM;
	return cae__diskfs_remount(img, ws, err);
}

int cae__diskfs_container_release(const char *dir)
{
	_cleanup_free_ char *img = cae__path_join(dir, CAE_DISKFS_IMAGE);
	_cleanup_free_ char *ws = cae__path_join(dir, "workspace");
	if (!img || !ws)
		return -ENOMEM;
	if (!cae__is_dir(dir))
		return 0;
	int r = cae__diskfs_release(img, ws);
	if (r < 0)
		return r; /* nothing below a mount is removed */
	return cae__rm_rf(dir);
}

int cae__diskfs_container_sweep(const char *state_dir, bool (*gone)(const char *uuid, void *ud),
				void *ud)
{
	_cleanup_free_ char *root = cae__path_join(state_dir, CAE_DISKFS_CONTAINER_DIR);
	if (!root)
		return 0;
	DIR *d = opendir(root);
	if (!d)
		return 0;
	int n = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (!cae_task_uuid_valid(de->d_name))
			continue;
		_cleanup_free_ char *dir = cae__path_join(root, de->d_name);
		if (!dir)
			break;
		_cleanup_close_ int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		/* a prepare that holds it is making it; then its container exists */
		if (fd < 0 || flock(fd, LOCK_EX | LOCK_NB) < 0 || !gone(de->d_name, ud))
			continue;
		if (cae__diskfs_container_release(dir) == 0)
			n++;
	}
	closedir(d);
	return n;
}
