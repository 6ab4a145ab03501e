#include "base/fs.h"

#include "base/macro.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/banned.h"

int cae_open_beneath(int dirfd, const char *path, int flags, mode_t mode)
{
	struct open_how how = {
	    .flags = (uint64_t)(flags | O_CLOEXEC),
	    .mode = (flags & (O_CREAT | O_TMPFILE)) ? (uint64_t)(mode & 07777) : 0,
	    .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS,
	};
	if (!path || !*path)
		path = ".";
	long fd;
	do
		fd = syscall(SYS_openat2, dirfd, path, &how, sizeof(how));
	while (fd < 0 && errno == EINTR);
	if (fd < 0)
		return -errno;
	return (int)fd;
}

int cae_write_all(int fd, const void *data, size_t len)
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

int cae_write_file_atomic(int dirfd, const char *path, const void *data, size_t len, mode_t mode,
			  bool beneath)
{
	_cleanup_free_ char *dir = NULL;
	const char *base = strrchr(path, '/');
	if (base) {
		dir = strndup(path, (size_t)(base - path));
		if (!dir)
			return -ENOMEM;
		base++;
		if (!*dir) {
			free(dir);
			dir = strdup("/");
			if (!dir)
				return -ENOMEM;
		}
	} else {
		base = path;
	}
	if (!*base || strcmp(base, ".") == 0 || strcmp(base, "..") == 0)
		return -EISDIR;

	_cleanup_close_ int dfd = -1;
	if (beneath)
		dfd = cae_open_beneath(dirfd, dir ? dir : ".", O_RDONLY | O_DIRECTORY, 0);
	else
		dfd = openat(dirfd, dir ? dir : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return beneath ? dfd : -errno;

	char tmp[64];
	int fd = -1;
	for (int attempt = 0; attempt < 100 && fd < 0; attempt++) {
		snprintf(tmp, sizeof(tmp), ".cae-tmp-%d-%u-%d", (int)getpid(), (unsigned)random(),
			 attempt);
		fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
		if (fd < 0 && errno != EEXIST)
			return -errno;
	}
	if (fd < 0)
		return -EEXIST;
	int r = cae_write_all(fd, data, len);
	cae_keep_owner(fd, dfd, base);
	if (r == 0 && fchmod(fd, mode & 07777) < 0)
		r = -errno;
	if (r == 0 && fsync(fd) < 0)
		r = -errno;
	if (close(fd) < 0 && r == 0)
		r = -errno;
	if (r == 0 && renameat(dfd, tmp, dfd, base) < 0)
		r = -errno;
	if (r < 0) {
		unlinkat(dfd, tmp, 0);
		return r;
	}
	(void)fsync(dfd);
	return 0;
}

int cae_read_fd(int fd, size_t max, char **out, size_t *len)
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

int cae_read_file(int dirfd, const char *path, size_t max, char **out, size_t *len)
{
	_cleanup_close_ int fd = openat(dirfd, path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	return cae_read_fd(fd, max, out, len);
}

int cae_mkdir_p(const char *path, mode_t mode)
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
	return cae_is_dir(p) ? 0 : -ENOTDIR;
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
		int r = cae_rm_rf_at(dirfd(d), de->d_name);
		if (r < 0 && ret == 0)
			ret = r;
	}
	closedir(d);
	return ret;
}

int cae_rm_rf_at(int dirfd, const char *name)
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

int cae_rm_rf(const char *path)
{
	return cae_rm_rf_at(AT_FDCWD, path);
}

char *cae_path_join(const char *a, const char *b)
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

bool cae_is_dir(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

void cae_keep_owner(int fd, int dfd, const char *base)
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

void cae_keep_owner_dir(int dfd, const char *name)
{
	if (geteuid() != 0)
		return;
	struct stat st;
	if (fstat(dfd, &st) == 0 && (st.st_uid != 0 || st.st_gid != 0))
		(void)!fchownat(dfd, name, st.st_uid, st.st_gid, AT_SYMLINK_NOFOLLOW);
}

char *cae_fd_path(int fd)
{
	char link[64], buf[PATH_MAX];
	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	ssize_t n = readlink(link, buf, sizeof(buf) - 1);
	if (n <= 0)
		return NULL;
	buf[n] = '\0';
	return strdup(buf);
}
