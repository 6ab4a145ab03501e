/* The shared package caches (pkgcache.h): where they are, what points commands at them, and
 * their prune. */
#include "backend/pkgcache.h"

#include "backend/sandbox.h"
#include "base/fs.h"
#include "base/macro.h"
#include "cae/runner.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
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

int cae__pkgcache_go_docker_dir(const cae_config *cfg, char *out, size_t size, cae_error *err)
{
	if (!cfg->command_executor.package_cache.enabled)
		return 0;
	char inst[CAE_CONFIG_INSTANCE_MAX], root[PATH_MAX];
	cae_config_instance(cfg, inst);
	if (root_dir(cfg, root, sizeof(root)) < 0)
		return cae_error_set(err, -ENAMETOOLONG, "the package cache's path is too long");
	int n = snprintf(out, size, "%s/%s/go-docker", root, inst);
	if (n < 0 || (size_t)n >= size)
		return cae_error_set(err, -ENAMETOOLONG, "the package cache's path is too long");
	int r = cae__mkdir_p(out, 0755);
	struct stat st;
	if (r < 0 || lstat(out, &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != getuid())
		return cae_error_set(err, r < 0 ? r : -EPERM, "cannot make the package cache %s",
				     out);
	return 1;
}

/* ---- Go's build cache ---- */

#define GO_FILL_TIMEOUT_MS (15 * 60 * 1000)

/* Runs argv (go ...) in dir with envp; 0 when it exited 0, else -EIO with err set (its
 * output's end). *out (NULL: not kept) receives its standard output. */
static int go_run(const char *const *argv, const char *const *envp, const char *dir, char **out,
		  cae_error *err)
{
	cae_run_spec spec = {.argv = argv,
			     .envp = envp,
			     .cwd = dir,
			     .timeout_ms = GO_FILL_TIMEOUT_MS,
			     .max_stdout = 4u << 20,
			     .cancel_fd = -1};
	cae_run_result res = {0};
	int r = cae_runner_run(&spec, &res, err);
	if (r < 0)
		return r;
	if (res.exit_code != 0) {
		size_t n = strlen(res.err);
		r = cae_error_set(err, -EIO,
				  "go %s (filling the shared Go build cache): exit %d: %s", argv[1],
				  res.exit_code, res.err + (n > 600 ? n - 600 : 0));
	} else if (out) {
		*out = res.out;
		res.out = NULL;
	}
	cae_run_result_clear(&res);
	return r;
}

static int write_text(const char *dir, const char *name, const char *text)
{
	char path[PATH_MAX + 400];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	return cae__write_file_atomic(AT_FDCWD, path, text, strlen(text), 0644, false);
}

/* Files under dfd (one tree level at a time): mode 0444, directories 0755, all of cae's
 * uid (a fill in a container writes as the container's user). */
static int go_seal(int dfd)
{
	DIR *d = fdopendir(dfd);
	if (!d) {
		close(dfd);
		return -errno;
	}
	int r = 0;
	struct dirent *e;
	while (r == 0 && (e = readdir(d))) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		struct stat st;
		if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			continue;
		if ((S_ISDIR(st.st_mode) || S_ISREG(st.st_mode)) &&
		    (st.st_uid != getuid() || st.st_gid != getgid()) &&
		    fchownat(dirfd(d), e->d_name, getuid(), getgid(), AT_SYMLINK_NOFOLLOW) < 0) {
			r = -errno;
			break;
		}
		if (S_ISDIR(st.st_mode)) {
			int sub = openat(dirfd(d), e->d_name,
					 O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (sub < 0 || fchmodat(dirfd(d), e->d_name, 0755, 0) < 0)
				r = -errno;
			else
				r = go_seal(sub);
		} else if (S_ISREG(st.st_mode) && (st.st_mode & 07777) != 0444 &&
			   fchmodat(dirfd(d), e->d_name, 0444, 0) < 0) {
			r = -errno;
		} else if (!S_ISREG(st.st_mode)) {
			unlinkat(dirfd(d), e->d_name, 0); /* the go command makes none */
		}
	}
	closedir(d);
	return r;
}

int cae__pkgcache_open_pair(int sdfd, int ddfd, const char *name, int *s, int *t)
{
	*s = openat(sdfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	*t = *s < 0 ? -1 : openat(ddfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (*t >= 0)
		return 0;
	int r = -errno;
	if (*s >= 0)
		close(*s);
	return r;
}

/* What identifies the Go toolchain commands run: the go program's path, inode, size and
 * mtime. */
static int go_stamp(const char *const *envp, char *out, size_t size)
{
	_cleanup_free_ char *prog = NULL;
	if (cae_runner_find_program("go", envp, &prog) < 0)
		return 0;
	_cleanup_free_ char *real = realpath(prog, NULL);
	struct stat st;
	if (!real || stat(real, &st) < 0)
		return 0;
	snprintf(out, size, "%s %llu %lld %lld\n", real, (unsigned long long)st.st_ino,
		 (long long)st.st_size, (long long)st.st_mtime);
	return 1;
}

/* Fills dir/build for this toolchain unless dir/.filled says it is done. Under dir/.lock:
 * concurrent prepares wait for one fill. 1: filled; 0: no go; -errno. */
static int go_fill(const char *dir, cae_error *err)
{
	char build[PATH_MAX + 300], pkg[PATH_MAX + 300], home[PATH_MAX + 300], lock[PATH_MAX + 300];
	snprintf(build, sizeof(build), "%s/build", dir);
	snprintf(pkg, sizeof(pkg), "%s/fill", dir);
	snprintf(home, sizeof(home), "%s/home", dir);
	snprintf(lock, sizeof(lock), "%s/.lock", dir);
	char e_cache[PATH_MAX + 320], e_home[PATH_MAX + 320];
	snprintf(e_cache, sizeof(e_cache), "GOCACHE=%s", build);
	snprintf(e_home, sizeof(e_home), "HOME=%s", home);
	/* what the sandbox's commands find on PATH; nothing of any task's configuration */
	const char *envp[] = {"PATH=" CAE_SANDBOX_PATH,
			      e_home,
			      e_cache,
			      "GOENV=off",
			      "GOFLAGS=",
			      "GOPROXY=off",
			      "GOWORK=off",
			      "GO111MODULE=on",
			      "LANG=C.UTF-8",
			      NULL};
	char stamp[PATH_MAX + 100];
	if (!go_stamp(envp, stamp, sizeof(stamp)))
		return 0;
	_cleanup_close_ int lfd = open(lock, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (lfd < 0 || flock(lfd, LOCK_EX) < 0)
		return cae_error_set(err, -errno, "cannot lock %s: %s", lock, strerror(errno));
	char filled[PATH_MAX + 300];
	snprintf(filled, sizeof(filled), "%s/.filled", dir);
	_cleanup_free_ char *had = NULL;
	size_t hl = 0;
	if (cae__read_file(AT_FDCWD, filled, 1 << 16, &had, &hl) == 0 && strcmp(had, stamp) == 0)
		return 1;
	int r;
	if ((r = cae__mkdir_p(pkg, 0755)) < 0 || (r = cae__mkdir_p(home, 0755)) < 0 ||
	    (r = cae__mkdir_p(build, 0755)) < 0 ||
	    (r = write_text(pkg, "go.mod", "module cae.invalid/fill\n")) < 0 ||
	    (r = write_text(
		 pkg, "fill_test.go",
		 "package fill\n\nimport \"testing\"\n\nfunc TestFill(t *testing.T) {}\n")) < 0)
		return cae_error_set(err, r, "cannot make %s: %s", pkg, strerror(-r));
	/* every package of the standard library a program may import */
	_cleanup_free_ char *list = NULL;
	const char *list_argv[] = {"go", "list", "std", NULL};
	if ((r = go_run(list_argv, envp, pkg, &list, err)) < 0)
		return r;
	size_t cap = strlen(list) * 2 + 64, n = 0;
	_cleanup_free_ char *src = malloc(cap);
	if (!src)
		return cae_error_set(err, -ENOMEM, "out of memory");
	n += (size_t)snprintf(src + n, cap - n, "package fill\n\nimport (\n");
	for (char *save = NULL, *l = strtok_r(list, "\n", &save); l;
	     l = strtok_r(NULL, "\n", &save)) {
		if (strstr(l, "internal") || strncmp(l, "vendor/", 7) == 0 ||
		    strcmp(l, "unsafe") == 0 || strcmp(l, "syscall/js") == 0 ||
		    strcmp(l, "runtime/cgo") == 0 || strchr(l, '"') || strlen(l) + 8 > cap - n - 8)
			continue;
		n += (size_t)snprintf(src + n, cap - n, "\t_ \"%s\"\n", l);
	}
	snprintf(src + n, cap - n, ")\n");
	if ((r = write_text(pkg, "fill.go", src)) < 0)
		return cae_error_set(err, r, "cannot write %s/fill.go: %s", pkg, strerror(-r));
	/* the compile, cgo and vet outputs a project's go test takes from the cache */
	const char *test_argv[] = {"go", "test", "-count=1", "-run", "^$", ".", NULL};
	if ((r = go_run(test_argv, envp, pkg, NULL, err)) < 0)
		return r;
	int bfd = open(build, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (bfd < 0 || (r = go_seal(bfd)) < 0)
		return cae_error_set(err, bfd < 0 ? -errno : r, "cannot seal %s: %s", build,
				     strerror(bfd < 0 ? errno : -r));
	if ((r = cae__write_file_atomic(AT_FDCWD, filled, stamp, strlen(stamp), 0644, false)) < 0)
		return cae_error_set(err, r, "cannot write %s: %s", filled, strerror(-r));
	return 1;
}

static int copy_file(int sdfd, const char *name, int ddfd)
{
	_cleanup_close_ int in = openat(sdfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (in < 0)
		return -errno;
	_cleanup_close_ int out =
	    openat(ddfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0444);
	if (out < 0)
		return -errno;
	char buf[65536];
	ssize_t k;
	while ((k = read(in, buf, sizeof(buf))) > 0) {
		int r = cae__write_all(out, buf, (size_t)k);
		if (r < 0)
			return r;
	}
	return k < 0 ? -errno : 0;
}

/* The tree under sdfd into ddfd: directories made and given to uid:gid, files linked (or
 * copied). Both descriptors are consumed. */
static int go_link(int sdfd, int ddfd, uid_t uid, gid_t gid, bool *copy, int depth)
{
	DIR *d = fdopendir(sdfd);
	if (!d) {
		close(sdfd);
		close(ddfd);
		return -errno;
	}
	int r = 0;
	struct dirent *e;
	while (r == 0 && (e = readdir(d))) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		struct stat st;
		if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			continue;
		if (S_ISDIR(st.st_mode) && depth < 4) {
			if ((mkdirat(ddfd, e->d_name, 0755) < 0 && errno != EEXIST) ||
			    fchownat(ddfd, e->d_name, uid, gid, AT_SYMLINK_NOFOLLOW) < 0) {
				r = -errno;
				break;
			}
			int s, t;
			if ((r = cae__pkgcache_open_pair(dirfd(d), ddfd, e->d_name, &s, &t)) < 0)
				break;
			r = go_link(s, t, uid, gid, copy, depth + 1);
		} else if (S_ISREG(st.st_mode) && (st.st_mode & 0222) == 0) {
			/* only sealed files: one the fill is writing is not shared */
			if (!*copy && linkat(dirfd(d), e->d_name, ddfd, e->d_name, 0) < 0) {
				if (errno == EEXIST)
					continue;
				if (errno != EXDEV) {
					r = -errno;
					break;
				}
				*copy = true;
			}
			if (*copy && (r = copy_file(dirfd(d), e->d_name, ddfd)) == -EEXIST)
				r = 0;
		}
	}
	closedir(d);
	close(ddfd);
	return r;
}

int cae__pkgcache_seal(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fchown(fd, getuid(), getgid()) < 0 || fchmod(fd, 0755) < 0) {
		int r = -errno;
		close(fd);
		return r;
	}
	return go_seal(fd);
}

int cae__pkgcache_go(const cae_config *cfg, const char *dest, uid_t uid, gid_t gid, bool copy,
		     cae_error *err)
{
	if (!cfg->command_executor.package_cache.enabled)
		return 0;
	char inst[CAE_CONFIG_INSTANCE_MAX], root[PATH_MAX], dir[PATH_MAX + 100];
	cae_config_instance(cfg, inst);
	if (root_dir(cfg, root, sizeof(root)) < 0)
		return cae_error_set(err, -ENAMETOOLONG, "the package cache's path is too long");
	snprintf(dir, sizeof(dir), "%s/%s/go", root, inst);
	int r = cae__mkdir_p(dir, 0755);
	if (r < 0)
		return cae_error_set(err, r, "cannot make the package cache %s: %s", dir,
				     strerror(-r));
	if ((r = go_fill(dir, err)) <= 0)
		return r;
	char used[PATH_MAX + 120];
	snprintf(used, sizeof(used), "%s/.used", dir);
	int fd = open(used, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
	if (fd >= 0) {
		futimens(fd, NULL);
		close(fd);
	}
	if ((r = cae__mkdir_p(dest, 0755)) < 0 || lchown(dest, uid, gid) < 0)
		return cae_error_set(err, r < 0 ? r : -errno, "cannot make %s: %s", dest,
				     strerror(r < 0 ? -r : errno));
	char build[PATH_MAX + 120];
	snprintf(build, sizeof(build), "%s/build", dir);
	int s = open(build, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	int t = open(dest, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (s < 0 || t < 0) {
		r = -errno;
		if (s >= 0)
			close(s);
		if (t >= 0)
			close(t);
		return cae_error_set(err, r, "cannot open %s: %s", s < 0 ? build : dest,
				     strerror(-r));
	}
	if ((r = go_link(s, t, uid, gid, &copy, 0)) < 0)
		return cae_error_set(err, r, "cannot copy the shared Go build cache to %s: %s",
				     dest, strerror(-r));
	return 1;
}

/* ---- prune ---- */

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
		o->bytes = cae__disk_use(o->path);
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
