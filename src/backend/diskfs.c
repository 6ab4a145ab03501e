/* A workspace on a file system of its own: a sparse ext4 image on a loop device, mounted on
 * the workspace directory (see diskfs.h). */
#include "backend/diskfs.h"

#include "base/txn.h"

#include "base/macro.h"
#include "cae/runner.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/loop.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/banned.h"

#ifndef STATX_ATTR_MOUNT_ROOT
#define STATX_ATTR_MOUNT_ROOT 0x00002000
#endif

#define MOUNT_FLAGS (MS_NOSUID | MS_NODEV)
/* the inode tables are left uninitialised by mkfs (lazy_itable_init) and the kernel is told
 * not to zero them in the background either: nothing writes the image but the workspace */
#define MOUNT_DATA "noinit_itable"

static const char *const mkfs_paths[] = {"/usr/sbin/mkfs.ext4", "/sbin/mkfs.ext4",
					 "/usr/local/sbin/mkfs.ext4"};

static const char *mkfs_program(void)
{
	for (size_t i = 0; i < ARRAY_SIZE(mkfs_paths); i++)
		if (access(mkfs_paths[i], X_OK) == 0)
			return mkfs_paths[i];
	return NULL;
}

int cae__diskfs_usable(const char **why)
{
	const char *w = NULL;
	if (geteuid() != 0)
		w = "cae does not run as root (mounting a file system for the workspace needs it)";
	else if (access("/dev/loop-control", R_OK | W_OK) < 0)
		w = "the loop driver is unavailable (/dev/loop-control)";
	else if (!mkfs_program())
		w = "mkfs.ext4 (e2fsprogs) is not installed";
	if (why)
		*why = w;
	return w ? -ENOTSUP : 0;
}

bool cae__diskfs_mounted(const char *path)
{
	struct statx stx;
	if (statx(AT_FDCWD, path, AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT, STATX_BASIC_STATS, &stx) <
	    0)
		return false;
	return (stx.stx_attributes_mask & STATX_ATTR_MOUNT_ROOT) &&
	       (stx.stx_attributes & STATX_ATTR_MOUNT_ROOT);
}

/* Attaches the open image to a free loop device that detaches itself once its last user is
 * gone. Returns the device's fd (its name in dev) or -errno. */
static int loop_attach(int img, char *dev, size_t size, cae_error *err)
{
	_cleanup_close_ int ctl = open("/dev/loop-control", O_RDWR | O_CLOEXEC);
	if (ctl < 0)
		return cae_error_set(err, -errno, "/dev/loop-control: %s", strerror(errno));
	int e = EBUSY;
	/* another process may take the free device between our two calls: ask again */
	for (int attempt = 0; attempt < 32; attempt++) {
		int n = ioctl(ctl, LOOP_CTL_GET_FREE);
		if (n < 0)
			return cae_error_set(err, -errno, "no free loop device: %s",
					     strerror(errno));
		snprintf(dev, size, "/dev/loop%d", n);
		int fd = -1;
		/* a device just added appears in /dev a moment later (devtmpfs) */
		for (int wait = 0; wait < 100 && fd < 0; wait++) {
			fd = open(dev, O_RDWR | O_CLOEXEC);
			if (fd < 0 && errno != ENOENT)
				break;
			if (fd < 0)
				usleep(1000);
		}
		if (fd < 0) {
			e = errno;
			continue;
		}
		struct loop_config c = {.fd = (unsigned)img};
		c.info.lo_flags = LO_FLAGS_AUTOCLEAR;
		snprintf((char *)c.info.lo_file_name, sizeof(c.info.lo_file_name), "cae-workspace");
		if (ioctl(fd, LOOP_CONFIGURE, &c) == 0)
			return fd;
		e = errno;
		close(fd);
		if (e != EBUSY)
			break;
	}
	return cae_error_set(err, -e, "cannot attach a loop device: %s", strerror(e));
}

/* Attaches img and mounts it on mountpoint; the loop device goes with the mount. */
static int attach_and_mount(int img, const char *mountpoint, cae_error *err)
{
	char dev[64];
	int lfd = loop_attach(img, dev, sizeof(dev), err);
	if (lfd < 0)
		return lfd;
	int r = 0;
	if (mount(dev, mountpoint, "ext4", MOUNT_FLAGS, MOUNT_DATA) < 0)
		r = cae_error_set(err, -errno, "cannot mount the workspace's file system: %s",
				  strerror(errno));
	close(lfd); /* LO_FLAGS_AUTOCLEAR: without a mount, the device is free again */
	return r;
}

static int run_mkfs(const char *image, int cancel_fd, cae_error *err)
{
	const char *mkfs = mkfs_program();
	if (!mkfs)
		return cae_error_set(err, -ENOENT, "mkfs.ext4 (e2fsprogs) is not installed");
	const char *argv[] = {mkfs,
			      "-q",
			      "-F",
			      "-O",
			      "^has_journal,^resize_inode",
			      "-E",
			      "lazy_itable_init=1,lazy_journal_init=1,nodiscard",
			      "-m",
			      "0",
			      "-L",
			      "cae-workspace",
			      image,
			      NULL};
	const char *envp[] = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C", NULL};
	cae_run_spec spec = {.argv = argv,
			     .envp = envp,
			     .timeout_ms = 120000,
			     .max_stdout = 4096,
			     .max_stderr = 4096,
			     .cancel_fd = cancel_fd};
	cae_run_result res;
	int r = cae_runner_run(&spec, &res, err);
	if (r < 0)
		return r;
	if (res.cancelled)
		r = cae_error_set(err, -ECANCELED, "cancelled");
	else if (res.exit_code != 0)
		r = cae_error_set(err, -EIO, "mkfs.ext4 failed (exit %d): %.300s", res.exit_code,
				  res.err ? res.err : "");
	cae_run_result_clear(&res);
	return r;
}

int cae__diskfs_create(const char *image, const char *mountpoint, uint64_t bytes, int cancel_fd,
		       cae_error *err)
{
	_cleanup_close_ int img =
	    open(image, O_RDWR | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (img < 0)
		return cae_error_set(err, -errno, "cannot create the workspace's image: %s",
				     strerror(errno));
	if (ftruncate(img, (off_t)bytes) < 0)
		return cae_error_set(err, -errno, "cannot size the workspace's image: %s",
				     strerror(errno));
	int r = run_mkfs(image, cancel_fd, err);
	if (r < 0)
		return r;
	if (flock(img, LOCK_EX) < 0)
		return cae_error_set(err, -errno, "cannot lock the workspace's image: %s",
				     strerror(errno));
	r = attach_and_mount(img, mountpoint, err);
	if (r < 0)
		return r;
	_cleanup_free_ char *lf = NULL;
	if (asprintf(&lf, "%s/lost+found", mountpoint) >= 0)
		(void)rmdir(lf);
	if (chmod(mountpoint, 0700) < 0) {
		r = cae_error_set(err, -errno, "the workspace's file system: %s", strerror(errno));
		(void)umount2(mountpoint, MNT_DETACH | UMOUNT_NOFOLLOW);
		return r;
	}
	return 0;
}

int cae__diskfs_remount(const char *image, const char *mountpoint, cae_error *err)
{
	if (cae__diskfs_mounted(mountpoint))
		return 0;
	_cleanup_close_ int img = open(image, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
	if (img < 0)
		return errno == ENOENT ? 0
				       : cae_error_set(err, -errno, "the workspace's image: %s",
						       strerror(errno));
	if (flock(img, LOCK_EX) < 0)
		return cae_error_set(err, -errno, "cannot lock the workspace's image: %s",
				     strerror(errno));
	if (cae__diskfs_mounted(mountpoint)) /* another process was first */
		return 0;
	int r = attach_and_mount(img, mountpoint, err);
	return r < 0 ? r : 1;
}

/* The old file systems of swaps not yet ended: each a reference (an O_PATH descriptor of
 * its root) that a thread lets go of. */
static pthread_mutex_t ending_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ending_done = PTHREAD_COND_INITIALIZER;
static unsigned ending;

static void *let_go(void *arg)
{
	/* the last reference: the unmount's work (the super block's end, the loop device's
	 * release) runs on this thread as the close returns */
	close((int)(intptr_t)arg);
	pthread_mutex_lock(&ending_lock);
	ending--;
	pthread_cond_broadcast(&ending_done);
	pthread_mutex_unlock(&ending_lock);
	return NULL;
}

static void let_go_later(int fd)
{
	pthread_attr_t a;
	pthread_t t;
	pthread_mutex_lock(&ending_lock);
	ending++;
	pthread_mutex_unlock(&ending_lock);
	if (pthread_attr_init(&a) == 0) {
		(void)pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
		int r = pthread_create(&t, &a, let_go, (void *)(intptr_t)fd);
		pthread_attr_destroy(&a);
		if (r == 0)
			return;
	}
	(void)let_go((void *)(intptr_t)fd); /* no thread: here, then */
}

void cae__diskfs_settle(void)
{
	pthread_mutex_lock(&ending_lock);
	while (ending > 0)
		pthread_cond_wait(&ending_done, &ending_lock);
	pthread_mutex_unlock(&ending_lock);
}

int cae__diskfs_swap(const char *fresh, const char *image, const char *mountpoint, cae_error *err)
{
	int r = 0;
	int old = cae__diskfs_mounted(mountpoint)
		      ? open(mountpoint, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
		      : -1;
	for (int i = 0; i < 16 && cae__diskfs_mounted(mountpoint); i++)
		if (umount2(mountpoint, MNT_DETACH | UMOUNT_NOFOLLOW) < 0 && errno != EINVAL) {
			r = cae_error_set(err, -errno, "cannot unmount the workspace: %s",
					  strerror(errno));
			break;
		}
	/* (kill points of the tests: a process killed here leaves the old image unmounted, or
	 * the fresh one in its place unmounted; the next process mounts what is there) */
	cae__txn_kill_point();
	if (r == 0 && rename(fresh, image) < 0)
		r = cae_error_set(err, -errno, "cannot put the image in place: %s",
				  strerror(errno));
	cae__txn_kill_point();
	if (r == 0 && (r = cae__diskfs_remount(image, mountpoint, err)) > 0)
		r = 0;
	if (r < 0)
		(void)unlink(fresh);
	if (old >= 0)
		let_go_later(old);
	return r;
}

int cae__diskfs_release(const char *image, const char *mountpoint)
{
	cae__diskfs_settle(); /* what a restore let go of ends first: nothing left when we return */
	/* (a sandbox of the environment still running keeps the file system until it ends) */
	for (int i = 0; i < 16 && cae__diskfs_mounted(mountpoint); i++)
		if (umount2(mountpoint, MNT_DETACH | UMOUNT_NOFOLLOW) < 0 && errno != EINVAL)
			break;
	if (cae__diskfs_mounted(mountpoint))
		return -EBUSY;
	if (unlink(image) < 0 && errno != ENOENT)
		return -errno;
	return 0;
}
