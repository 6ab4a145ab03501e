/* The shared node_modules trees on the docker backend (pkgcache.h): the container's
 * node_modules after the prepare's `npm ci` taken out through the engine's archive API and
 * kept sealed on this host beside the local backend's trees, and put into a new container
 * of the same lock file and image instead of running `npm ci` again.
 *
 * Neither side follows a path the repository controls on this host: the store reads the
 * engine's tar (of what npm made, in a container where nothing else of the task's ran) and
 * creates each entry itself, beneath the store's own directory, opening every directory on
 * the way without following a link; the put hands the engine a tar cae made from the
 * store, which the engine extracts inside the container, at the project, where the
 * container's user has just been seen to have no node_modules. */
#include "backend/pkgcache.h"

#include "backend/backend-internal.h"
#include "base/fs.h"
#include "base/macro.h"
#include "base/timeutil.h"
#include "cae/docker.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/banned.h"

/* The project's files in the container, as its user sees them, before any command of the
 * task's: *ok when it has a lock file and npm ci would run as the key says (no .npmrc, no
 * shrinkwrap, no lock file of pnpm or yarn, which would install instead (deps.c); before the
 * install no node_modules at all, after it a directory, not a link). */
static int project_check(cae_prepare *p, bool installed, bool *ok, cae_error *err)
{
	char script[512];
	snprintf(script, sizeof(script),
		 "cd '%s' && [ -f package-lock.json ] || exit 3; for f in .npmrc "
		 "npm-shrinkwrap.json pnpm-lock.yaml yarn.lock%s; do if [ -e \"$f\" ] || "
		 "[ -L \"$f\" ]; then exit 3; fi; done; %s",
		 p->project, installed ? "" : " node_modules",
		 installed ? "[ -d node_modules ] && [ ! -L node_modules ] || exit 3" : "exit 0");
	const char *argv[] = {"sh", "-c", script, NULL};
	cae_exec_request req = {.argv = argv,
				.cwd = "/workspace", /* (kubernetes confines it beneath) */
				.timeout_ms = 60000,
				.max_stdout = 4096,
				.max_stderr = 4096,
				.cancel_fd = -1};
	cae_run_result res = {0};
	int r = p->exec(p->exec_ctx, &req, &res, err);
	if (r < 0)
		return r;
	*ok = res.exit_code == 0 && !res.timed_out;
	cae_run_result_clear(&res);
	return 0;
}

int cae__pkgcache_npm_exec_key(cae_prepare *p, const char *head, bool installed, char **key,
			       size_t *len, char name[17], cae_error *err)
{
	*key = NULL;
	bool ok = false;
	int r = project_check(p, installed, &ok, err);
	if (r < 0 || !ok)
		return r;
	_cleanup_free_ char *pkg = NULL, *lock = NULL;
	if ((r = cae__pkgcache_container_manifest(p, "package.json", &pkg, err)) < 0 ||
	    (pkg && (r = cae__pkgcache_container_manifest(p, "package-lock.json", &lock, err)) < 0))
		return r;
	if (!pkg || !lock)
		return 0;
	*key = cae__pkgcache_npm_key(head, pkg, strlen(pkg), lock, strlen(lock), len, name);
	return 0;
}

/* The tree's key for the container's project (pkgcache.h): *key NULL when it has none. */
static int docker_key(cae_prepare *p, cae_docker *d, const char *container, bool installed,
		      char **key, size_t *len, char name[17], cae_error *err)
{
	*key = NULL;
	/* node and npm are the image's: its id */
	char image[80], head[160];
	int r = cae__pkgcache_image_key(d, container, image, sizeof(image), err);
	if (r < 0)
		return r;
	snprintf(head, sizeof(head), "cae-npm-tree-docker 1\n%s\n", image);
	return cae__pkgcache_npm_exec_key(p, head, installed, key, len, name, err);
}

int cae__pkgcache_npm_archive_file(const char *trees, cae_error *err)
{
	int fd = open(trees, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	if (fd < 0 && (errno == EOPNOTSUPP || errno == EISDIR)) {
		char path[PATH_MAX + 32];
		snprintf(path, sizeof(path), "%s/.archive-XXXXXX", trees);
		if ((fd = mkostemp(path, O_CLOEXEC)) >= 0)
			unlink(path);
	}
	return fd < 0 ? cae_error_set(err, -errno, "cannot make a file in %s: %s", trees,
				      strerror(errno))
		      : fd;
}

/* ---- store: the engine's tar into the store ---- */

struct extract {
	int root; /* the new tree's node_modules */
	long files;
};

/* The directory of rel's parent (rel: a path beneath node_modules, checked), opened from
 * the root without following a link; *leaf: rel's last name, *dir_name: its parent's. */
static int open_parent(const struct extract *x, char *rel, char **leaf, const char **dir_name)
{
	int fd = dup(x->root);
	if (fd < 0)
		return -errno;
	*dir_name = "node_modules";
	char *s = rel, *slash;
	while ((slash = strchr(s, '/'))) {
		*slash = '\0';
		int n = openat(fd, s, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		int e = errno;
		close(fd);
		if (n < 0)
			return -e;
		fd = n;
		*dir_name = s;
		s = slash + 1;
	}
	*leaf = s;
	return fd;
}

/* A path of the tar as the tree's: "node_modules" itself (*rel empty) or beneath it, each
 * name neither empty, "." nor "..", at most CAE_PKGCACHE_NPM_DEPTH_MAX deep. */
static bool tree_path(const char *path, char *rel, size_t size)
{
	if (!path || strncmp(path, "node_modules", 12) != 0 || (path[12] && path[12] != '/'))
		return false;
	const char *s = path[12] ? path + 13 : path + 12;
	size_t n = strlen(s);
	while (n > 0 && s[n - 1] == '/')
		n--;
	if (n >= size)
		return false;
	memcpy(rel, s, n);
	rel[n] = '\0';
	int depth = 0;
	for (const char *c = rel; n > 0;) {
		const char *e = strchr(c, '/');
		size_t l = e ? (size_t)(e - c) : strlen(c);
		if (l == 0 || (l == 1 && c[0] == '.') || (l == 2 && c[0] == '.' && c[1] == '.') ||
		    ++depth > CAE_PKGCACHE_NPM_DEPTH_MAX)
			return false;
		if (!e)
			break;
		c = e + 1;
	}
	return true;
}

static int extract_data(struct archive *a, int fd)
{
	const void *buf;
	size_t n;
	la_int64_t off;
	int r;
	while ((r = archive_read_data_block(a, &buf, &n, &off)) == ARCHIVE_OK)
		if (lseek(fd, off, SEEK_SET) < 0 || cae__write_all(fd, buf, n) < 0)
			return -EIO;
	return r == ARCHIVE_EOF ? 0 : -EPROTO;
}

/* One entry of the tar, created beneath the root: a directory, a regular file (sealed,
 * 0444 or 0555) or a bin link; nothing else. */
static int extract_entry(struct extract *x, struct archive *a, struct archive_entry *e)
{
	char rel[PATH_MAX];
	if (!tree_path(archive_entry_pathname(e), rel, sizeof(rel)))
		return -EPERM;
	mode_t type = archive_entry_filetype(e);
	if (!rel[0]) /* node_modules itself: made by the store */
		return type == AE_IFDIR ? 0 : -EPERM;
	if (++x->files > CAE_PKGCACHE_NPM_FILES_MAX)
		return -EFBIG;
	if (archive_entry_hardlink(e))
		return -EPERM; /* npm makes none */
	char *leaf = rel;
	const char *dir_name = "node_modules";
	int dfd = open_parent(x, rel, &leaf, &dir_name);
	if (dfd < 0)
		return dfd;
	int r = 0;
	if (type == AE_IFDIR) {
		if (mkdirat(dfd, leaf, 0755) < 0)
			r = -errno;
	} else if (type == AE_IFREG) {
		int fd =
		    openat(dfd, leaf, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (fd < 0) {
			r = -errno;
		} else {
			r = extract_data(a, fd);
			if (r == 0 && fchmod(fd, archive_entry_perm(e) & 0111 ? 0555 : 0444) < 0)
				r = -errno;
			close(fd);
		}
	} else if (type == AE_IFLNK) {
		const char *target = archive_entry_symlink(e);
		if (!target || !cae__pkgcache_npm_bin_link(dir_name, target))
			r = -EPERM;
		else if (symlinkat(target, dfd, leaf) < 0)
			r = -errno;
	} else {
		r = -EPERM; /* npm makes nothing else */
	}
	close(dfd);
	return r;
}

int cae__pkgcache_npm_extract(int fd, int root)
{
	struct archive *a = archive_read_new();
	if (!a)
		return -ENOMEM;
	int r = 0;
	if (archive_read_support_format_tar(a) != ARCHIVE_OK ||
	    archive_read_open_fd(a, fd, 65536) != ARCHIVE_OK) {
		archive_read_free(a);
		return -EPROTO;
	}
	struct extract x = {.root = root};
	struct archive_entry *e;
	int ar;
	bool first = true;
	while (r == 0 && (ar = archive_read_next_header(a, &e)) != ARCHIVE_EOF) {
		if (ar != ARCHIVE_OK) {
			r = -EPROTO;
			break;
		}
		/* the archive of node_modules, a directory: its own entry first */
		if (first && (archive_entry_filetype(e) != AE_IFDIR ||
			      strcmp(archive_entry_pathname(e) ? archive_entry_pathname(e) : "",
				     "node_modules/") != 0)) {
			r = -EPERM;
			break;
		}
		first = false;
		r = extract_entry(&x, a, e);
	}
	if (r == 0 && first)
		r = -EPROTO;
	archive_read_free(a);
	return r;
}

int cae__pkgcache_npm_docker_store(cae_prepare *p, cae_docker *d, const char *container,
				   cae_error *err)
{
	if (!p->b->cfg->command_executor.package_cache.enabled)
		return 0;
	_cleanup_free_ char *key = NULL;
	size_t klen = 0;
	char name[17];
	int r = docker_key(p, d, container, true, &key, &klen, name, err);
	if (r < 0 || !key)
		return r;
	char trees[PATH_MAX], tmp[PATH_MAX + 64], path[PATH_MAX + 96];
	if ((r = cae__pkgcache_npm_trees_dir(p->b->cfg, trees, sizeof(trees), err)) < 0)
		return r;
	int lock;
	if ((r = cae__pkgcache_npm_tree_begin(trees, name, key, klen, tmp, sizeof(tmp), &lock,
					      err)) <= 0)
		return r;
	char src[PATH_MAX];
	snprintf(src, sizeof(src), "%s/node_modules", p->project);
	_cleanup_close_ int fd = cae__pkgcache_npm_archive_file(trees, err);
	if (fd < 0)
		return cae__pkgcache_npm_tree_end(trees, name, tmp, fd, lock);
	cae_error gerr;
	cae_error_clear(&gerr);
	r = cae_docker_get_archive(d, container, src, fd, CAE_PKGCACHE_NPM_ARCHIVE_MAX, NULL,
				   &gerr);
	if (r == 0 && lseek(fd, 0, SEEK_SET) < 0)
		r = -errno;
	snprintf(path, sizeof(path), "%s/node_modules", tmp);
	int root = r == 0 ? open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) : -1;
	if (r == 0 && root < 0)
		r = -errno;
	if (r == 0) {
		r = cae__pkgcache_npm_extract(fd, root);
		close(root);
	}
	if ((r = cae__pkgcache_npm_tree_end(trees, name, tmp, r, lock)) < 0)
		return cae_error_set(err, r, "cannot keep the container's %s as a shared tree: %s",
				     src, gerr.message[0] ? gerr.message : strerror(-r));
	return 1;
}

/* ---- put: a tar of the tree into the container ---- */

struct pack {
	struct archive *a;
	uid_t uid;
	gid_t gid;
	long files;
};

static int pack_header(struct pack *k, const char *path, mode_t type, mode_t perm, int64_t size,
		       const char *target)
{
	struct archive_entry *e = archive_entry_new();
	if (!e)
		return -ENOMEM;
	archive_entry_set_pathname(e, path);
	archive_entry_set_filetype(e, type);
	archive_entry_set_perm(e, perm);
	archive_entry_set_uid(e, k->uid);
	archive_entry_set_gid(e, k->gid);
	archive_entry_set_size(e, size);
	if (target)
		archive_entry_set_symlink(e, target);
	int r = archive_write_header(k->a, e) == ARCHIVE_OK ? 0 : -EIO;
	archive_entry_free(e);
	return r;
}

static int pack_file(struct pack *k, int dfd, const char *name, const char *path,
		     const struct stat *st)
{
	_cleanup_close_ int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	int r = pack_header(k, path, AE_IFREG, st->st_mode & 0111 ? 0755 : 0644, st->st_size, NULL);
	char buf[65536];
	ssize_t n;
	int64_t left = st->st_size;
	while (r == 0 && left > 0 && (n = read(fd, buf, sizeof(buf))) > 0) {
		if (n > left)
			n = (ssize_t)left;
		if (archive_write_data(k->a, buf, (size_t)n) != n)
			r = -EIO;
		left -= n;
	}
	return r == 0 && left != 0 ? -EIO : r; /* the store's files never change */
}

/* The tree under dfd (consumed), as path/, into the tar. */
static int pack_dir(struct pack *k, int dfd, const char *path, const char *dir_name, int depth)
{
	DIR *d = fdopendir(dfd);
	if (!d) {
		close(dfd);
		return -errno;
	}
	char sub[PATH_MAX];
	int r = pack_header(k, path, AE_IFDIR, 0755, 0, NULL);
	struct dirent *e;
	while (r == 0 && (e = readdir(d))) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		struct stat st;
		int n = snprintf(sub, sizeof(sub), "%s/%s", path, e->d_name);
		if (n < 0 || (size_t)n >= sizeof(sub)) {
			r = -ENAMETOOLONG;
		} else if (++k->files > CAE_PKGCACHE_NPM_FILES_MAX) {
			r = -EFBIG;
		} else if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
			r = -errno;
		} else if (S_ISDIR(st.st_mode)) {
			int s = depth >= CAE_PKGCACHE_NPM_DEPTH_MAX
				    ? -1
				    : openat(dirfd(d), e->d_name,
					     O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			r = s < 0 ? (depth >= CAE_PKGCACHE_NPM_DEPTH_MAX ? -ELOOP : -errno)
				  : pack_dir(k, s, sub, e->d_name, depth + 1);
		} else if (S_ISREG(st.st_mode)) {
			r = pack_file(k, dirfd(d), e->d_name, sub, &st);
		} else if (S_ISLNK(st.st_mode)) {
			char target[PATH_MAX];
			ssize_t l = readlinkat(dirfd(d), e->d_name, target, sizeof(target) - 1);
			if (l < 0)
				r = -errno;
			else if ((target[l] = '\0', !cae__pkgcache_npm_bin_link(dir_name, target)))
				r = -EPERM;
			else
				r = pack_header(k, sub, AE_IFLNK, 0777, 0, target);
		} else {
			r = -EPERM;
		}
	}
	closedir(d);
	return r;
}

int cae__pkgcache_npm_pack(const char *trees, const char *name, int fd, uid_t uid, gid_t gid)
{
	char path[PATH_MAX + 64];
	snprintf(path, sizeof(path), "%s/%s/node_modules", trees, name);
	int dfd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0)
		return -errno;
	struct pack k = {.a = archive_write_new(), .uid = uid, .gid = gid};
	if (!k.a) {
		close(dfd);
		return -ENOMEM;
	}
	int r = 0;
	if (archive_write_set_format_pax_restricted(k.a) != ARCHIVE_OK ||
	    archive_write_set_bytes_in_last_block(k.a, 1) != ARCHIVE_OK ||
	    archive_write_open_fd(k.a, fd) != ARCHIVE_OK) {
		close(dfd);
		r = -EIO;
	} else {
		r = pack_dir(&k, dfd, "node_modules", "node_modules", 0);
	}
	if (archive_write_close(k.a) != ARCHIVE_OK && r == 0)
		r = -EIO;
	archive_write_free(k.a);
	return r;
}

void cae__pkgcache_npm_exec_remove(cae_prepare *p)
{
	char script[PATH_MAX + 64];
	snprintf(script, sizeof(script), "rm -rf '%s/node_modules'", p->project);
	const char *argv[] = {"sh", "-c", script, NULL};
	cae_exec_request req = {.argv = argv,
				.cwd = "/workspace",
				.timeout_ms = 60000,
				.max_stdout = 4096,
				.cancel_fd = -1};
	cae_run_result res = {0};
	cae_error e;
	if (p->exec(p->exec_ctx, &req, &res, &e) == 0)
		cae_run_result_clear(&res);
}

int cae__pkgcache_npm_docker_put(cae_prepare *p, cae_docker *d, const char *container, uid_t uid,
				 gid_t gid, cae_error *err)
{
	/* (in place of the prepare's npm ci: none without the dependency step) */
	if (!p->b->cfg->command_executor.package_cache.enabled || !p->deps_opts.npm_cache_shared ||
	    !p->b->cfg->command_executor.clone.auto_install_deps || p->given_as_is)
		return 0;
	int64_t t0 = cae__now_ms();
	_cleanup_free_ char *key = NULL;
	size_t klen = 0;
	char name[17], trees[PATH_MAX];
	int r = docker_key(p, d, container, false, &key, &klen, name, err);
	if (r < 0 || !key)
		return r;
	if ((r = cae__pkgcache_npm_trees_dir(p->b->cfg, trees, sizeof(trees), err)) < 0)
		return r;
	/* the same bytes, not only the same name */
	if (!cae__pkgcache_npm_tree_is(trees, name, key, klen))
		return 0;
	_cleanup_close_ int fd = cae__pkgcache_npm_archive_file(trees, err);
	if (fd < 0)
		return fd;
	off_t size;
	if ((r = cae__pkgcache_npm_pack(trees, name, fd, uid, gid)) < 0 ||
	    (size = lseek(fd, 0, SEEK_END)) < 0 || lseek(fd, 0, SEEK_SET) < 0)
		return cae_error_set(err, r < 0 ? r : -errno,
				     "cannot read the shared tree %s/%s: %s", trees, name,
				     strerror(r < 0 ? -r : errno));
	/* the engine extracts it inside the container, at the project (no node_modules) */
	if ((r = cae_docker_put_archive(d, container, p->project, fd, (uint64_t)size, err)) < 0) {
		cae__pkgcache_npm_exec_remove(p);
		return r;
	}
	cae__pkgcache_npm_used(trees);
	p->deps_opts.npm_tree_linked = true;
	p->deps_opts.npm_tree_ms = cae__now_ms() - t0;
	return 1;
}
