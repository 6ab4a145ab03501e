/* A counting semaphore across processes, for the engine-heavy steps (container create,
 * start, stop, remove): on a small host, dozens of prepares that all ask the engine at once
 * make every one of them slow enough to time out; a few at a time all finish.
 *
 * The semaphore is n lock files <dir>/slot-<i>.lock. A slot is held by an flock(LOCK_EX) on
 * an open file description of its own, so the kernel releases it when the holder closes it
 * or dies: a crashed process never keeps a slot. Acquiring tries every slot without
 * blocking, starting at a different one in each call (round robin), and when all are held
 * sweeps again after a short wait on the cancel fd, until a slot is free or the wait is
 * cancelled. (Blocking in flock on one slot would wait for that slot only, while another
 * may be given back first.) */
#include "backend/backend-internal.h"

#include "base/fs.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "base/banned.h"

/* Between two sweeps while waiting with a cancel fd: short against an engine step (tens to
 * hundreds of milliseconds), long against a sweep (n opens). */
#define SWEEP_WAIT_MS 20

static int open_slot(const char *dir, int i)
{
	char path[PATH_MAX];
	if (snprintf(path, sizeof(path), "%s/slot-%d.lock", dir, i) >= (int)sizeof(path))
		return -ENAMETOOLONG;
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	return fd < 0 ? -errno : fd;
}

/* One slot taken without waiting: its fd, -EAGAIN when all are held, or another error. */
static int sweep(const char *dir, int n, unsigned start)
{
	for (int k = 0; k < n; k++) {
		int fd = open_slot(dir, (int)((start + (unsigned)k) % (unsigned)n));
		if (fd < 0)
			return fd;
		if (flock(fd, LOCK_EX | LOCK_NB) == 0)
			return fd;
		int e = errno;
		close(fd);
		if (e != EWOULDBLOCK)
			return -e;
	}
	return -EAGAIN;
}

int cae__slot_acquire(const char *dir, int n, bool wait, int cancel_fd, int *fd_out, cae_error *err)
{
	static atomic_uint next;
	*fd_out = -1;
	if (n < 1)
		return cae_error_set(err, -EINVAL, "a semaphore needs at least one slot");
	int r = cae__mkdir_p(dir, 0700);
	if (r < 0)
		return cae_error_set(err, r, "cannot create %s: %s", dir, strerror(-r));
	unsigned start = atomic_fetch_add(&next, 1) + (unsigned)getpid();
	for (;;) {
		int fd = sweep(dir, n, start);
		if (fd >= 0) {
			*fd_out = fd;
			return 0;
		}
		if (fd != -EAGAIN)
			return cae_error_set(err, fd, "engine slot in %s: %s", dir, strerror(-fd));
		if (!wait)
			return -EAGAIN;
		struct pollfd p = {.fd = cancel_fd, .events = POLLIN};
		if (poll(&p, 1, SWEEP_WAIT_MS) > 0 && (p.revents & POLLIN))
			return cae_error_set(err, -ECANCELED,
					     "cancelled while waiting for the engine");
	}
}

void cae__slot_release(int fd)
{
	if (fd >= 0)
		close(fd); /* the lock goes with the last reference to the description */
}
