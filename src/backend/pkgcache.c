/* The shared package caches (pkgcache.h): where they are, what points commands at them, and
 * their prune. */
#include "backend/pkgcache.h"

#include "base/fs.h"
#include "base/macro.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/banned.h"

static const char *const cache_env[] = {
    "npm_config_cache=" CAE_PKGCACHE_NPM,
    /* metadata is asked of the registry each time (a 304 costs little); tarballs come from
     * the cache, checked against their integrity */
    "npm_config_prefer_online=true",
    NULL,
};

const char *const *cae__pkgcache_env(void)
{
	return cache_env;
}

static int root_dir(const cae_config *cfg, char *out, size_t size)
{
	int n = snprintf(out, size, "%s/package-cache", cfg->command_executor.state_dir);
	return n < 0 || (size_t)n >= size ? -ENAMETOOLONG : 0;
}

int cae__pkgcache_npm_dir(const cae_config *cfg, const char *owner, uid_t uid, gid_t gid, bool make,
			  char *out, size_t size, cae_error *err)
{
	if (!cfg->command_executor.package_cache.enabled)
		return 0;
	char inst[CAE_CONFIG_INSTANCE_MAX], root[PATH_MAX], dir[PATH_MAX + 200];
	cae_config_instance(cfg, inst);
	int r = root_dir(cfg, root, sizeof(root));
	if (r < 0)
		return cae_error_set(err, r, "the package cache's path is too long");
	snprintf(dir, sizeof(dir), "%s/%s/%s", root, inst, owner);
	int n = snprintf(out, size, "%s/npm", dir);
	if (n < 0 || (size_t)n >= size)
		return cae_error_set(err, -ENAMETOOLONG, "the package cache's path is too long");
	struct stat st;
	if (!make)
		return lstat(out, &st) == 0 && S_ISDIR(st.st_mode) ? 1 : 0;
	/* everything above npm is cae's: a command can change what is in its cache, never
	 * which directory is bound */
	if ((r = cae__mkdir_p(dir, 0755)) < 0)
		return cae_error_set(err, r, "cannot make the package cache %s: %s", dir,
				     strerror(-r));
	if (mkdir(out, 0700) == 0) {
		if (lchown(out, uid, gid) < 0) {
			r = -errno;
			rmdir(out);
			return cae_error_set(err, r, "cannot give the package cache to uid %u: %s",
					     (unsigned)uid, strerror(-r));
		}
	} else if (errno != EEXIST) {
		r = -errno;
		return cae_error_set(err, r, "cannot make the package cache %s: %s", out,
				     strerror(-r));
	}
	if (lstat(out, &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != uid)
		return cae_error_set(err, -EPERM, "the package cache %s is not uid %u's directory",
				     out, (unsigned)uid);
	/* the last use, for the prune */
	char used[PATH_MAX + 220];
	snprintf(used, sizeof(used), "%s/.used", dir);
	int fd = open(used, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
	if (fd >= 0) {
		futimens(fd, NULL);
		close(fd);
	}
	return 1;
}

/* ---- prune ---- */

static uint64_t du_total;
static int du_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)path;
	(void)flag;
	(void)ftw;
	du_total += (uint64_t)st->st_blocks * 512;
	return 0;
}

/* The bytes under dir on disk (links not followed). */
static uint64_t disk_use(const char *dir)
{
	/* nftw has no user pointer: one tree at a time */
	static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
	pthread_mutex_lock(&lock);
	du_total = 0;
	nftw(dir, du_one, 16, FTW_PHYS | FTW_MOUNT);
	uint64_t n = du_total;
	pthread_mutex_unlock(&lock);
	return n;
}

struct owner_cache {
	char path[PATH_MAX + 600];
	int64_t used; /* seconds since the epoch; 0: never recorded */
	uint64_t bytes;
};

static int by_use(const void *a, const void *b)
{
	const struct owner_cache *x = a, *y = b;
	return x->used < y->used ? -1 : x->used > y->used;
}

/* Appends every owner cache of instance directory idir to *v. */
static int collect(const char *idir, struct owner_cache **v, size_t *n, size_t *cap)
{
	DIR *d = opendir(idir);
	if (!d)
		return errno == ENOENT ? 0 : -errno;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		if (*n == *cap) {
			size_t c = *cap ? *cap * 2 : 16;
			struct owner_cache *nv = realloc(*v, c * sizeof(**v));
			if (!nv) {
				closedir(d);
				return -ENOMEM;
			}
			*v = nv;
			*cap = c;
		}
		struct owner_cache *o = &(*v)[*n];
		snprintf(o->path, sizeof(o->path), "%s/%s", idir, e->d_name);
		struct stat st;
		if (lstat(o->path, &st) < 0 || !S_ISDIR(st.st_mode))
			continue;
		char used[sizeof(o->path) + 8];
		snprintf(used, sizeof(used), "%s/.used", o->path);
		o->used = lstat(used, &st) == 0 ? (int64_t)st.st_mtime : 0;
		o->bytes = disk_use(o->path);
		(*n)++;
	}
	closedir(d);
	return 0;
}

int cae__pkgcache_prune(const cae_config *cfg, int64_t max_age_s, uint64_t max_bytes, bool all,
			bool all_instances, json_t *removed, int *count, cae_error *err)
{
	*count = 0;
	char root[PATH_MAX], inst[CAE_CONFIG_INSTANCE_MAX];
	if (root_dir(cfg, root, sizeof(root)) < 0)
		return cae_error_set(err, -ENAMETOOLONG, "the package cache's path is too long");
	cae_config_instance(cfg, inst);
	_cleanup_free_ struct owner_cache *v = NULL;
	size_t n = 0, cap = 0;
	int r = 0;
	if (all_instances) {
		DIR *d = opendir(root);
		if (!d)
			return errno == ENOENT
				   ? 0
				   : cae_error_set(err, -errno, "%s: %s", root, strerror(errno));
		struct dirent *e;
		while (r == 0 && (e = readdir(d))) {
			if (e->d_name[0] == '.')
				continue;
			char idir[PATH_MAX + 300];
			snprintf(idir, sizeof(idir), "%s/%s", root, e->d_name);
			r = collect(idir, &v, &n, &cap);
		}
		closedir(d);
	} else {
		char idir[PATH_MAX + 300];
		snprintf(idir, sizeof(idir), "%s/%s", root, inst);
		r = collect(idir, &v, &n, &cap);
	}
	if (r < 0)
		return cae_error_set(err, r, "cannot read the package caches: %s", strerror(-r));
	if (n > 1)
		qsort(v, n, sizeof(*v), by_use);
	uint64_t total = 0;
	for (size_t i = 0; i < n; i++)
		total += v[i].bytes;
	int64_t now = (int64_t)time(NULL);
	for (size_t i = 0; i < n; i++) {
		bool old = now - v[i].used > max_age_s;
		bool big = max_bytes && total > max_bytes;
		if (!all && !old && !big)
			continue;
		if ((r = cae__rm_rf(v[i].path)) < 0)
			return cae_error_set(err, r, "cannot remove %s: %s", v[i].path,
					     strerror(-r));
		total -= v[i].bytes;
		(*count)++;
		json_array_append_new(removed, json_pack("{s:s, s:I}", "cache", v[i].path, "bytes",
							 (json_int_t)v[i].bytes));
	}
	return 0;
}
