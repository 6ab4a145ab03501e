/* The shared node_modules trees (pkgcache.h): what `npm ci` made of a lock file that runs no
 * code, kept sealed by cae and put into a new environment of the same lock file instead of
 * running `npm ci` again. */
#include "backend/pkgcache.h"

#include "backend/sandbox.h"
#include "base/fs.h"
#include "base/macro.h"
#include "base/txn.h"
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
#include <unistd.h>

#include "base/banned.h"

#define MANIFEST_MAX (16u << 20)
#define REGISTRY "https://registry.npmjs.org/"

/* A program of the sandbox's PATH: its real path, inode, size and mtime. */
static void stamp(const char *name, char *out, size_t size)
{
	const char *envp[] = {"PATH=" CAE_SANDBOX_PATH, NULL};
	_cleanup_free_ char *prog = NULL, *real = NULL;
	struct stat st;
	out[0] = '\0';
	if (cae_runner_find_program(name, envp, &prog) < 0 || !(real = realpath(prog, NULL)) ||
	    stat(real, &st) < 0)
		return;
	snprintf(out, size, "%s %llu %lld %lld", real, (unsigned long long)st.st_ino,
		 (long long)st.st_size, (long long)st.st_mtime);
}

static bool has_script(json_t *pkg)
{
	static const char *const install[] = {"preinstall",  "install",	    "postinstall",
					      "prepublish",  "preprepare",  "prepare",
					      "postprepare", "dependencies"};
	json_t *scripts = json_object_get(pkg, "scripts");
	for (size_t i = 0; i < sizeof(install) / sizeof(install[0]); i++)
		if (json_object_get(scripts, install[i]))
			return true;
	return false;
}

/* Whether `npm ci` of the lock file runs nothing but npm and installs only the registry's
 * tarballs, each pinned by its sha512. */
static bool lock_runs_nothing(json_t *pkg, json_t *lock)
{
	if (!json_is_object(pkg) || !json_is_object(lock) || has_script(pkg) ||
	    json_object_get(pkg, "workspaces") || json_object_get(pkg, "bundleDependencies") ||
	    json_object_get(pkg, "bundledDependencies"))
		return false;
	json_int_t v = json_integer_value(json_object_get(lock, "lockfileVersion"));
	json_t *pkgs = json_object_get(lock, "packages");
	if ((v != 2 && v != 3) || !json_is_object(pkgs))
		return false;
	const char *path;
	json_t *e;
	json_object_foreach(pkgs, path, e)
	{
		if (path[0] == '\0')
			continue;
		const char *res = json_string_value(json_object_get(e, "resolved"));
		const char *integ = json_string_value(json_object_get(e, "integrity"));
		if (strncmp(path, "node_modules/", 13) != 0 || strstr(path, "..") ||
		    !json_is_object(e) || !res || strncmp(res, REGISTRY, strlen(REGISTRY)) != 0 ||
		    !integ || strncmp(integ, "sha512-", 7) != 0 ||
		    json_is_true(json_object_get(e, "hasInstallScript")) ||
		    json_object_get(e, "link") || json_is_true(json_object_get(e, "inBundle")))
			return false;
	}
	return true;
}

/* The regular file name of the project (never through a symbolic link: the repository's). */
static int read_manifest(const char *project, const char *name, char **out, size_t *len)
{
	char path[PATH_MAX + 32];
	snprintf(path, sizeof(path), "%s/%s", project, name);
	_cleanup_close_ int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
		return -EINVAL;
	return cae__read_fd(fd, MANIFEST_MAX, out, len);
}

char *cae__pkgcache_npm_key(const char *head, const char *pkg, size_t pl, const char *lock,
			    size_t ll, size_t *len, char name[17])
{
	json_t *pj = json_loadb(pkg, pl, 0, NULL), *lj = json_loadb(lock, ll, 0, NULL);
	bool ok = lock_runs_nothing(pj, lj);
	json_decref(pj);
	json_decref(lj);
	if (!ok)
		return NULL;
	size_t hl = strlen(head);
	char *key = malloc(hl + pl + ll + 2);
	if (!key)
		return NULL;
	memcpy(key, head, hl);
	memcpy(key + hl, pkg, pl);
	key[hl + pl] = '\0';
	memcpy(key + hl + pl + 1, lock, ll);
	key[hl + pl + 1 + ll] = '\0';
	*len = hl + pl + ll + 2;
	snprintf(name, 17, "%016llx",
		 (unsigned long long)cae__pkgcache_fnv1a(1469598103934665603ull, key, *len));
	return key;
}

/* The tree's identity for the project: the bytes it is made from (new; NULL when the
 * project's lock file may not have a shared tree) and their FNV-1a as its name. */
static char *tree_key(const char *project, bool installed, size_t *len, char name[17])
{
	char path[PATH_MAX + 32];
	struct stat st;
	/* npm's own configuration of the project, a shrinkwrap, a lock file of pnpm or yarn
	 * (which install instead of npm, deps.c), or (before the install) node_modules in the
	 * repository: npm ci as it would run */
	static const char *const other[] = {".npmrc", "npm-shrinkwrap.json", "pnpm-lock.yaml",
					    "yarn.lock", "node_modules"};
	for (size_t i = 0; i < (installed ? 4u : 5u); i++) {
		snprintf(path, sizeof(path), "%s/%s", project, other[i]);
		if (lstat(path, &st) == 0)
			return NULL;
	}
	_cleanup_free_ char *pkg = NULL, *lock = NULL;
	size_t pl = 0, ll = 0;
	if (read_manifest(project, "package.json", &pkg, &pl) < 0 ||
	    read_manifest(project, "package-lock.json", &lock, &ll) < 0)
		return NULL;
	char node[PATH_MAX + 100], npm[PATH_MAX + 100];
	stamp("node", node, sizeof(node));
	stamp("npm", npm, sizeof(npm));
	if (!node[0] || !npm[0])
		return NULL;
	char head[2 * PATH_MAX + 300];
	snprintf(head, sizeof(head), "cae-npm-tree 1\n%s\n%s\n", node, npm);
	return cae__pkgcache_npm_key(head, pkg, pl, lock, ll, len, name);
}

int cae__pkgcache_npm_trees_dir(const cae_config *cfg, char *out, size_t size, cae_error *err)
{
	char inst[CAE_CONFIG_INSTANCE_MAX];
	cae_config_instance(cfg, inst);
	int n = snprintf(out, size, "%s/package-cache/%s/npm-trees",
			 cfg->command_executor.state_dir, inst);
	if (n < 0 || (size_t)n >= size)
		return cae_error_set(err, -ENAMETOOLONG, "the package cache's path is too long");
	int r = cae__mkdir_p(out, 0755);
	struct stat st;
	if (r < 0 || lstat(out, &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != getuid())
		return cae_error_set(err, r < 0 ? r : -EPERM, "cannot make the package cache %s",
				     out);
	return 0;
}

void cae__pkgcache_npm_used(const char *dir)
{
	char used[PATH_MAX + 16];
	snprintf(used, sizeof(used), "%s/.used", dir);
	int fd = open(used, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
	if (fd >= 0) {
		futimens(fd, NULL);
		close(fd);
	}
}

/* Copies the regular file name of sdfd into ddfd with mode. */
static int copy_file(int sdfd, const char *name, int ddfd, mode_t mode)
{
	_cleanup_close_ int in = openat(sdfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (in < 0)
		return -errno;
	_cleanup_close_ int out =
	    openat(ddfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (out < 0)
		return -errno;
	char buf[65536];
	ssize_t k;
	while ((k = read(in, buf, sizeof(buf))) > 0) {
		int r = cae__write_all(out, buf, (size_t)k);
		if (r < 0)
			return r;
	}
	if (k < 0)
		return -errno;
	return fchmod(out, mode) < 0 ? -errno : 0;
}

bool cae__pkgcache_npm_bin_link(const char *dir_name, const char *target)
{
	return strcmp(dir_name, ".bin") == 0 && strncmp(target, "../", 3) == 0 &&
	       !strstr(target + 3, "..") && !strchr(target, '\n');
}

struct walk {
	bool store; /* into the shared tree (copies, sealed) or out of it (links) */
	bool copy;  /* out: copies instead of hard links */
	uid_t uid;  /* out: the owner of directories and links */
	gid_t gid;
	long files;
};

/* The tree under sdfd into ddfd (both consumed); name: the directory's own name. */
static int walk(struct walk *w, int sdfd, int ddfd, const char *name, int depth)
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
		if (++w->files > CAE_PKGCACHE_NPM_FILES_MAX) {
			r = -EFBIG;
			break;
		}
		struct stat st;
		if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
			r = -errno;
			break;
		}
		if (S_ISDIR(st.st_mode)) {
			if (depth >= CAE_PKGCACHE_NPM_DEPTH_MAX) {
				r = -ELOOP;
				break;
			}
			if (mkdirat(ddfd, e->d_name, 0755) < 0 ||
			    (!w->store &&
			     fchownat(ddfd, e->d_name, w->uid, w->gid, AT_SYMLINK_NOFOLLOW) < 0)) {
				r = -errno;
				break;
			}
			int s, t;
			if ((r = cae__pkgcache_open_pair(dirfd(d), ddfd, e->d_name, &s, &t)) < 0)
				break;
			r = walk(w, s, t, e->d_name, depth + 1);
		} else if (S_ISREG(st.st_mode)) {
			if (w->store) {
				r = copy_file(dirfd(d), e->d_name, ddfd,
					      st.st_mode & 0111 ? 0555 : 0444);
				cae__txn_kill_point();
			} else if (w->copy)
				r = copy_file(dirfd(d), e->d_name, ddfd, st.st_mode & 07777);
			else if (linkat(dirfd(d), e->d_name, ddfd, e->d_name, 0) < 0) {
				if (errno != EXDEV) {
					r = -errno;
					break;
				}
				w->copy = true;
				r = copy_file(dirfd(d), e->d_name, ddfd, st.st_mode & 07777);
			}
		} else if (S_ISLNK(st.st_mode)) {
			char target[PATH_MAX];
			ssize_t n = readlinkat(dirfd(d), e->d_name, target, sizeof(target) - 1);
			if (n < 0) {
				r = -errno;
				break;
			}
			target[n] = '\0';
			if (!cae__pkgcache_npm_bin_link(name, target))
				r = -EPERM;
			else if (symlinkat(target, ddfd, e->d_name) < 0 ||
				 (!w->store && fchownat(ddfd, e->d_name, w->uid, w->gid,
							AT_SYMLINK_NOFOLLOW) < 0))
				r = -errno;
		} else {
			r = -EPERM; /* npm makes nothing else */
		}
	}
	closedir(d);
	close(ddfd);
	return r;
}

/* The temporaries of name's stores that died (SIGKILL, a crash, a power loss) before their
 * end: with name's store lock held, no other store of it runs, so each is a dead one's. */
static void sweep(const char *trees, const char *name)
{
	char prefix[40];
	int pl = snprintf(prefix, sizeof(prefix), ".tmp-%s-", name);
	DIR *d = opendir(trees);
	if (!d)
		return;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (strncmp(e->d_name, prefix, (size_t)pl) != 0)
			continue;
		char path[PATH_MAX + 300];
		snprintf(path, sizeof(path), "%s/%s", trees, e->d_name);
		(void)cae__rm_rf(path);
	}
	closedir(d);
}

int cae__pkgcache_npm_tree_begin(const char *trees, const char *name, const char *key, size_t klen,
				 char *tmp, size_t size, int *lock, cae_error *err)
{
	char dir[PATH_MAX + 40], path[PATH_MAX + 96];
	*lock = -1;
	snprintf(dir, sizeof(dir), "%s/%s", trees, name);
	if (cae__is_dir(dir))
		return 0;
	/* one store of a tree at once, in every process: another one's is kept, this one not */
	snprintf(path, sizeof(path), "%s/.lock-%s", trees, name);
	_cleanup_close_ int lfd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (lfd < 0)
		return cae_error_set(err, -errno, "cannot open %s: %s", path, strerror(errno));
	if (flock(lfd, LOCK_EX | LOCK_NB) < 0)
		return errno == EWOULDBLOCK ? 0
					    : cae_error_set(err, -errno, "cannot lock %s: %s", path,
							    strerror(errno));
	if (cae__is_dir(dir))
		return 0; /* kept meanwhile */
	sweep(trees, name);
	int n = snprintf(tmp, size, "%s/.tmp-%s-XXXXXX", trees, name);
	if (n < 0 || (size_t)n >= size || !mkdtemp(tmp))
		return cae_error_set(err, -errno, "cannot make %s: %s", tmp, strerror(errno));
	cae__txn_kill_point();
	snprintf(path, sizeof(path), "%s/node_modules", tmp);
	int r = 0;
	if (chmod(tmp, 0755) < 0 || mkdir(path, 0755) < 0)
		r = -errno;
	snprintf(path, sizeof(path), "%s/key", tmp);
	if (r == 0)
		r = cae__write_file_atomic(AT_FDCWD, path, key, klen, 0444, false);
	if (r < 0) {
		(void)cae__rm_rf(tmp);
		return cae_error_set(err, r, "cannot make %s: %s", path, strerror(-r));
	}
	*lock = lfd;
	lfd = -1;
	return 1;
}

int cae__pkgcache_npm_tree_end(const char *trees, const char *name, const char *tmp, int r,
			       int lock)
{
	char dir[PATH_MAX + 40];
	snprintf(dir, sizeof(dir), "%s/%s", trees, name);
	cae__txn_kill_point();
	if (r == 0 && rename(tmp, dir) < 0 && errno != EEXIST && errno != ENOTEMPTY)
		r = -errno;
	cae__txn_kill_point();
	(void)cae__rm_rf(tmp);
	if (lock >= 0)
		close(lock);
	if (r == 0)
		cae__pkgcache_npm_used(trees);
	return r;
}

int cae__pkgcache_npm_tree_store(const cae_config *cfg, const char *project, cae_error *err)
{
	if (!cfg->command_executor.package_cache.enabled)
		return 0;
	size_t klen = 0;
	char name[17];
	_cleanup_free_ char *key = tree_key(project, true, &klen, name);
	if (!key)
		return 0;
	char trees[PATH_MAX], tmp[PATH_MAX + 64], path[PATH_MAX + 96];
	int lock;
	int r = cae__pkgcache_npm_trees_dir(cfg, trees, sizeof(trees), err);
	if (r < 0)
		return r;
	if ((r = cae__pkgcache_npm_tree_begin(trees, name, key, klen, tmp, sizeof(tmp), &lock,
					      err)) <= 0)
		return r;
	char src[PATH_MAX + 32];
	snprintf(src, sizeof(src), "%s/node_modules", project);
	snprintf(path, sizeof(path), "%s/node_modules", tmp);
	int s = open(src, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	int t = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	struct walk w = {.store = true};
	if (s < 0 || t < 0) {
		r = -errno;
		if (s >= 0)
			close(s);
		if (t >= 0)
			close(t);
	} else {
		r = walk(&w, s, t, "node_modules", 0);
	}
	if ((r = cae__pkgcache_npm_tree_end(trees, name, tmp, r, lock)) < 0)
		return cae_error_set(err, r, "cannot keep %s as a shared tree: %s", src,
				     strerror(-r));
	return 1;
}

bool cae__pkgcache_npm_tree_is(const char *trees, const char *name, const char *key, size_t klen)
{
	char path[PATH_MAX + 64];
	snprintf(path, sizeof(path), "%s/%s/key", trees, name);
	_cleanup_free_ char *had = NULL;
	size_t hl = 0;
	return cae__read_file(AT_FDCWD, path, klen + 1, &had, &hl) == 0 && hl == klen &&
	       memcmp(had, key, klen) == 0;
}

int cae__pkgcache_npm_tree_link(const cae_config *cfg, const char *project, uid_t uid, gid_t gid,
				bool copy, cae_error *err)
{
	if (!cfg->command_executor.package_cache.enabled)
		return 0;
	size_t klen = 0;
	char name[17];
	_cleanup_free_ char *key = tree_key(project, false, &klen, name);
	if (!key)
		return 0;
	char trees[PATH_MAX], dir[PATH_MAX + 40], path[PATH_MAX + 96];
	int r = cae__pkgcache_npm_trees_dir(cfg, trees, sizeof(trees), err);
	if (r < 0)
		return r;
	snprintf(dir, sizeof(dir), "%s/%s", trees, name);
	/* the same bytes, not only the same name */
	if (!cae__pkgcache_npm_tree_is(trees, name, key, klen))
		return 0;
	char dst[PATH_MAX + 32];
	snprintf(dst, sizeof(dst), "%s/node_modules", project);
	if (mkdir(dst, 0755) < 0 || lchown(dst, uid, gid) < 0)
		return cae_error_set(err, -errno, "cannot make %s: %s", dst, strerror(errno));
	snprintf(path, sizeof(path), "%s/node_modules", dir);
	int s = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	int t = open(dst, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	struct walk w = {.copy = copy, .uid = uid, .gid = gid};
	if (s < 0 || t < 0) {
		r = -errno;
		if (s >= 0)
			close(s);
		if (t >= 0)
			close(t);
	} else {
		r = walk(&w, s, t, "node_modules", 0);
	}
	if (r < 0) {
		(void)cae__rm_rf(dst);
		return cae_error_set(err, r, "cannot put the shared tree %s in %s: %s", dir, dst,
				     strerror(-r));
	}
	cae__pkgcache_npm_used(trees);
	return 1;
}
