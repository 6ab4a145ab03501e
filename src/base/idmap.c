/* Idmapped mounts (see idmap.h): open_tree(OPEN_TREE_CLONE), mount_setattr(MOUNT_ATTR_IDMAP)
 * with a user namespace made for the mapping, move_mount. Called through syscall(2): the
 * static helper's libc (musl) has no wrappers for them. */
#include "base/idmap.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/banned.h"

/* the same numbers on every architecture (the generic table) */
#ifndef SYS_open_tree
#define SYS_open_tree 428
#endif
#ifndef SYS_move_mount
#define SYS_move_mount 429
#endif
#ifndef SYS_mount_setattr
#define SYS_mount_setattr 442
#endif
#define CAE_OPEN_TREE_CLONE 1
#define CAE_OPEN_TREE_CLOEXEC O_CLOEXEC
#define CAE_MOVE_MOUNT_F_EMPTY_PATH 0x00000004
#define CAE_MOUNT_ATTR_IDMAP 0x00100000
#ifndef AT_EMPTY_PATH
#define AT_EMPTY_PATH 0x1000
#endif

struct cae_mount_attr {
	uint64_t attr_set;
	uint64_t attr_clr;
	uint64_t propagation;
	uint64_t userns_fd;
};

static int write_at(pid_t pid, const char *name, const char *text)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, name);
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	size_t n = strlen(text);
	ssize_t w = write(fd, text, n);
	int e = errno;
	close(fd);
	return w == (ssize_t)n ? 0 : w < 0 ? -e : -EIO;
}

int cae__idmap_userns(uid_t from_uid, gid_t from_gid, uid_t to_uid, gid_t to_gid)
{
	int ready[2], hold[2];
	if (pipe2(ready, O_CLOEXEC) < 0)
		return -errno;
	if (pipe2(hold, O_CLOEXEC) < 0) {
		int e = -errno;
		close(ready[0]);
		close(ready[1]);
		return e;
	}
	pid_t pid = fork();
	if (pid == 0) {
		/* a process in a new user namespace, kept until its mapping is written and the
		 * namespace opened */
		char c = unshare(CLONE_NEWUSER) == 0 ? 'y' : 'n';
		close(ready[0]);
		close(hold[1]);
		if (write(ready[1], &c, 1) != 1)
			_exit(1);
		(void)!read(hold[0], &c, 1);
		_exit(0);
	}
	int r = pid < 0 ? -errno : 0;
	close(ready[1]);
	close(hold[0]);
	char c = 'n';
	if (r == 0 && read(ready[0], &c, 1) != 1)
		r = -EIO;
	if (r == 0 && c != 'y')
		r = -EPERM;
	char map[64];
	if (r == 0) {
		snprintf(map, sizeof(map), "%u %u 1\n", (unsigned)from_uid, (unsigned)to_uid);
		r = write_at(pid, "uid_map", map);
	}
	if (r == 0)
		r = write_at(pid, "setgroups", "deny\n");
	if (r == 0) {
		snprintf(map, sizeof(map), "%u %u 1\n", (unsigned)from_gid, (unsigned)to_gid);
		r = write_at(pid, "gid_map", map);
	}
	int fd = -1;
	if (r == 0) {
		char path[64];
		snprintf(path, sizeof(path), "/proc/%d/ns/user", (int)pid);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			r = -errno;
	}
	close(ready[0]);
	close(hold[1]); /* the child ends */
	if (pid > 0)
		while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
			;
	return r < 0 ? r : fd;
}

int cae__idmap_clone(const char *src, int userns_fd)
{
	int t =
	    (int)syscall(SYS_open_tree, AT_FDCWD, src, CAE_OPEN_TREE_CLONE | CAE_OPEN_TREE_CLOEXEC);
	if (t < 0)
		return -errno;
	struct cae_mount_attr a = {.attr_set = CAE_MOUNT_ATTR_IDMAP,
				   .userns_fd = (uint64_t)userns_fd};
	if (syscall(SYS_mount_setattr, t, "", AT_EMPTY_PATH, &a, sizeof(a)) < 0) {
		int e = -errno;
		close(t);
		return e;
	}
	return t;
}

int cae__idmap_attach(int tree_fd, const char *target)
{
	if (syscall(SYS_move_mount, tree_fd, "", AT_FDCWD, target, CAE_MOVE_MOUNT_F_EMPTY_PATH) < 0)
		return -errno;
	return 0;
}

int cae__idmap_probe(const char *src, uid_t from_uid, gid_t from_gid, uid_t to_uid, gid_t to_gid)
{
	int ns = cae__idmap_userns(from_uid, from_gid, to_uid, to_gid);
	if (ns < 0)
		return ns;
	int t = cae__idmap_clone(src, ns);
	close(ns);
	if (t < 0)
		return t;
	close(t);
	return 0;
}
