#include "base/fs.h"

#include "base/macro.h"

#include <dirent.h>
#include <ftw.h>
#include <pthread.h>
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/banned.h"

int cae__open_beneath(int dirfd, const char *path, int flags, mode_t mode)
{
	struct open_how how = {
	    .flags = (uint64_t)(flags | O_CLOEXEC),
	    .mode = (flags & (O_CREAT | O_TMPFILE)) ? (uint64_t)(mode & 07777) : 0,
	    .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS,
	};
	if (!path || !*path)
		path = ".";
	long fd = -1;
	/* EAGAIN: a rename or mount raced with the resolution of a ".."; the kernel asks us to
	 * try again (bounded, so that a busy attacker only gets an error). */
	for (int i = 0; i < 64; i++) {
		fd = syscall(SYS_openat2, dirfd, path, &how, sizeof(how));
		if (fd >= 0 || (errno != EINTR && errno != EAGAIN))
			break;
	}
	if (fd < 0)
		return -errno;
	return (int)fd;
}

int cae__read_exact(int fd, void *data, size_t len)
{
	char *p = data;
	while (len > 0) {
		ssize_t r = read(fd, p, len);
		if (r > 0) {
			p += r;
			len -= (size_t)r;
		} else if (r == 0) {
			return -EPIPE;
		} else if (errno != EINTR) {
			return -errno;
		}
	}
	return 0;
}

int cae__write_all(int fd, const void *data, size_t len)
{
	const char *p = data;
	while (len > 0) {
		ssize_t w = write(fd, p, len);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += w;
		len -= (size_t)w;
	}
	return 0;
}

/* fsync of the directory dfd (an O_PATH fd cannot be synced: reopened). Best effort. */
static void fsync_dir(int dfd)
{
	int fd = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd >= 0) {
		(void)fsync(fd);
		close(fd);
	}
}

#ifndef RENAME_NOREPLACE
#define RENAME_NOREPLACE (1 << 0) /* the kernel's value (musl's headers lack it) */
#endif

/* renameat2(RENAME_NOREPLACE) (the system call: musl has no wrapper), or link + unlink where
 * the file system has no such rename (link() refuses to replace too). */
int cae__rename_noreplace(int dfd, const char *from, const char *to)
{
	if (syscall(SYS_renameat2, dfd, from, dfd, to, RENAME_NOREPLACE) == 0)
		return 0;
	int r = -errno;
	if (r != -EINVAL && r != -ENOSYS)
		return r;
	r = linkat(dfd, from, dfd, to, 0) < 0 ? -errno : 0;
	unlinkat(dfd, from, 0);
	return r;
}

int cae__write_atomic(int dfd, const char *name, mode_t mode, unsigned flags, cae_fill_fn fill,
		      void *ctx)
{
	if (strchr(name, '/'))
		return -EINVAL;
	if (!*name || strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
		return -EISDIR;
	static atomic_uint seq;
	char tmp[96];
	int fd = -1;
	for (int attempt = 0; attempt < 100 && fd < 0; attempt++) {
		snprintf(tmp, sizeof(tmp), ".cae-tmp-%d-%u-%u", (int)getpid(),
			 atomic_fetch_add(&seq, 1), (unsigned)random());
		fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
		if (fd < 0 && errno != EEXIST)
			return -errno;
	}
	if (fd < 0)
		return -EEXIST;
	cae__keep_owner(fd, dfd, name);
	int r = fill(ctx, fd);
	if (r == 0 && fchmod(fd, mode & 07777) < 0)
		r = -errno;
	if (r == 0 && fsync(fd) < 0)
		r = -errno;
	if (close(fd) < 0 && r == 0)
		r = -errno;
	if (r == 0 && (flags & CAE_WRITE_NOREPLACE))
		r = cae__rename_noreplace(dfd, tmp, name);
	else if (r == 0 && renameat(dfd, tmp, dfd, name) < 0)
		r = -errno;
	if (r < 0) {
		unlinkat(dfd, tmp, 0);
		return r;
	}
	fsync_dir(dfd);
	return 0;
}

typedef struct data_fill {
	const void *data;
	size_t len;
} data_fill;

static int fill_data(void *ctx, int fd)
{
	const data_fill *d = ctx;
	return cae__write_all(fd, d->data, d->len);
}

int cae__write_file_atomic(int dirfd, const char *path, const void *data, size_t len, mode_t mode,
			   bool beneath)
{
	_cleanup_free_ char *dir = NULL;
	const char *base = strrchr(path, '/');
	if (base) {
		dir = base == path ? strdup("/") : strndup(path, (size_t)(base - path));
		if (!dir)
			return -ENOMEM;
		base++;
	} else {
		base = path;
	}
	if (!*base || strcmp(base, ".") == 0 || strcmp(base, "..") == 0)
		return -EISDIR;
	_cleanup_close_ int dfd = -1;
	if (beneath)
		dfd = cae__open_beneath(dirfd, dir ? dir : ".", O_PATH | O_DIRECTORY, 0);
	else if ((dfd = openat(dirfd, dir ? dir : ".", O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0)
		dfd = -errno;
	if (dfd < 0)
		return dfd;
	data_fill d = {data, len};
	return cae__write_atomic(dfd, base, mode, 0, fill_data, &d);
}

int cae__read_fd(int fd, size_t max, char **out, size_t *len)
{
	size_t cap = 4096, n = 0;
	struct stat st;
	if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
		if ((uint64_t)st.st_size > max)
			return -EFBIG;
		cap = (size_t)st.st_size + 1;
	}
	char *buf = malloc(cap + 1);
	if (!buf)
		return -ENOMEM;
	for (;;) {
		if (n == cap) {
			if (cap >= max + 1) {
				free(buf);
				return -EFBIG;
			}
			size_t ncap = cap * 2 > max + 1 ? max + 1 : cap * 2;
			char *nb = realloc(buf, ncap + 1);
			if (!nb) {
				free(buf);
				return -ENOMEM;
			}
			buf = nb;
			cap = ncap;
		}
		ssize_t r = read(fd, buf + n, cap - n);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			int e = -errno;
			free(buf);
			return e;
		}
		if (r == 0)
			break;
		n += (size_t)r;
	}
	if (n > max) {
		free(buf);
		return -EFBIG;
	}
	buf[n] = '\0';
	*out = buf;
	if (len)
		*len = n;
	return 0;
}

int cae__read_file(int dirfd, const char *path, size_t max, char **out, size_t *len)
{
	_cleanup_close_ int fd = openat(dirfd, path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	return cae__read_fd(fd, max, out, len);
}

int cae__mkdir_p(const char *path, mode_t mode)
{
	_cleanup_free_ char *p = strdup(path);
	if (!p)
		return -ENOMEM;
	for (char *s = p + 1; *s; s++) {
		if (*s != '/')
			continue;
		*s = '\0';
		if (mkdir(p, mode) < 0 && errno != EEXIST)
			return -errno;
		*s = '/';
	}
	if (mkdir(p, mode) < 0 && errno != EEXIST)
		return -errno;
	return cae__is_dir(p) ? 0 : -ENOTDIR;
}

static int rm_rf_children(int dfd, int depth)
{
	if (depth > 4096)
		return -ELOOP;
	DIR *d = fdopendir(dfd);
	if (!d) {
		int e = -errno;
		close(dfd);
		return e;
	}
	int ret = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		int r = cae__rm_rf_at(dirfd(d), de->d_name);
		if (r < 0 && ret == 0)
			ret = r;
	}
	closedir(d);
	return ret;
}

int cae__rm_rf_at(int dirfd, const char *name)
{
	struct stat st;
	if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return errno == ENOENT ? 0 : -errno;
	if (S_ISDIR(st.st_mode)) {
		int cfd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (cfd < 0)
			return -errno;
		/* Make it writable so that its entries can go, as rm -rf does for our own tree. */
		(void)fchmod(cfd, 0700);
		int r = rm_rf_children(cfd, 0);
		if (unlinkat(dirfd, name, AT_REMOVEDIR) < 0 && errno != ENOENT)
			return r < 0 ? r : -errno;
		return r;
	}
	if (unlinkat(dirfd, name, 0) < 0 && errno != ENOENT)
		return -errno;
	return 0;
}

int cae__rm_rf(const char *path)
{
	return cae__rm_rf_at(AT_FDCWD, path);
}

char *cae__path_join(const char *a, const char *b)
{
	size_t la = strlen(a);
	while (la > 1 && a[la - 1] == '/')
		la--;
	while (*b == '/')
		b++;
	size_t lb = strlen(b);
	char *r = malloc(la + lb + 2);
	if (!r)
		return NULL;
	memcpy(r, a, la);
	size_t o = la;
	if (lb) {
		if (!(la == 1 && a[0] == '/'))
			r[o++] = '/';
		memcpy(r + o, b, lb);
		o += lb;
	}
	r[o] = '\0';
	return r;
}

bool cae__is_dir(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

void cae__keep_owner(int fd, int dfd, const char *base)
{
	if (geteuid() != 0)
		return;
	struct stat st;
	if (fstatat(dfd, base, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode)) {
		if (fstat(dfd, &st) < 0)
			return;
	}
	if (st.st_uid != 0 || st.st_gid != 0)
		(void)!fchown(fd, st.st_uid, st.st_gid);
}

void cae__keep_owner_dir(int dfd, const char *name)
{
	if (geteuid() != 0)
		return;
	struct stat st;
	if (fstat(dfd, &st) == 0 && (st.st_uid != 0 || st.st_gid != 0))
		(void)!fchownat(dfd, name, st.st_uid, st.st_gid, AT_SYMLINK_NOFOLLOW);
}

char *cae__fd_path(int fd)
{
	char link[64], buf[PATH_MAX];
	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	ssize_t n = readlink(link, buf, sizeof(buf) - 1);
	if (n <= 0)
		return NULL;
	buf[n] = '\0';
	return strdup(buf);
}

static uint64_t du_total;
static int du_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)path;
	(void)flag;
	(void)ftw;
	du_total += (uint64_t)st->st_blocks * 512;
	return 0;
}

uint64_t cae__disk_use(const char *path)
{
	/* nftw has no user pointer: one tree at a time */
	static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
	pthread_mutex_lock(&lock);
	du_total = 0;
	(void)nftw(path, du_one, 16, FTW_PHYS | FTW_MOUNT);
	uint64_t n = du_total;
	pthread_mutex_unlock(&lock);
	return n;
}
