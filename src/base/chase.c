/* The one place where a path is confined to a root directory: the lexical pass
 * (cae__path_lexical) and the resolver beneath an open directory (cae__chase). The editor, the
 * patch worker and the command tools all go through here, so a path means the same, and
 * is refused the same way, whichever tool gets it. See chase.h for the rules. */
#include "base/chase.h"

#include "base/fs.h"
#include "base/macro.h"
#include "base/utf8.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/banned.h"

/* ---------------------------------------------------------------------------------------- */
/* The lexical pass */

typedef struct comp {
	const char *p;
	size_t n;
} comp;

static bool is_sep(char c, unsigned flags)
{
	return c == '/' || (c == '\\' && (flags & CAE_PATH_BACKSLASH));
}

static bool is_dotdot(const comp *c)
{
	return c->n == 2 && c->p[0] == '.' && c->p[1] == '.';
}

/* Splits s[0..len) into its components, dropping empty and "." ones (".." kept). out has
 * room for len / 2 + 1. Returns how many. */
static size_t split(const char *s, size_t len, unsigned flags, comp *out)
{
	size_t n = 0, i = 0;
	while (i < len) {
		while (i < len && is_sep(s[i], flags))
			i++;
		size_t start = i;
		while (i < len && !is_sep(s[i], flags))
			i++;
		size_t k = i - start;
		if (k == 0 || (k == 1 && s[start] == '.'))
			continue;
		out[n++] = (comp){s + start, k};
	}
	return n;
}

/* "/" + root's components + comps, or comps alone, '/'-separated. New string. */
static char *join(const comp *root, size_t nroot, const comp *comps, size_t n, bool absolute)
{
	size_t total = 2;
	for (size_t i = 0; i < nroot; i++)
		total += root[i].n + 1;
	for (size_t i = 0; i < n; i++)
		total += comps[i].n + 1;
	char *r = malloc(total);
	if (!r)
		return NULL;
	size_t o = 0;
	if (absolute) {
		for (size_t i = 0; i < nroot; i++) {
			r[o++] = '/';
			memcpy(r + o, root[i].p, root[i].n);
			o += root[i].n;
		}
	}
	for (size_t i = 0; i < n; i++) {
		if (absolute || i > 0)
			r[o++] = '/';
		memcpy(r + o, comps[i].p, comps[i].n);
		o += comps[i].n;
	}
	if (absolute && o == 0)
		r[o++] = '/';
	r[o] = '\0';
	return r;
}

/* Whether the first k components of a are b's k components. */
static bool same_prefix(const comp *a, const comp *b, size_t k)
{
	for (size_t i = 0; i < k; i++)
		if (a[i].n != b[i].n || memcmp(a[i].p, b[i].p, a[i].n) != 0)
			return false;
	return true;
}

int cae__path_lexical(const char *root, const char *base, const char *path, size_t len,
		      unsigned flags, char **out)
{
	*out = NULL;
	if (!path || len == 0)
		return -ENOENT;
	if (len > CAE_PATH_MAX)
		return -ENAMETOOLONG;
	if (memchr(path, '\0', len) || !root || root[0] != '/' || (base && base[0] != '/'))
		return -EINVAL;
	if ((flags & CAE_PATH_UTF8) && !cae__utf8_is_valid(path, len))
		return -EILSEQ;
	size_t rlen = strlen(root), blen = base ? strlen(base) : 0;
	/* The root's and the base's components are ours: split at '/' only. */
	_cleanup_free_ comp *rc = calloc(rlen / 2 + 1, sizeof(comp));
	_cleanup_free_ comp *bc = calloc(blen / 2 + 1, sizeof(comp));
	_cleanup_free_ comp *c = calloc(blen / 2 + len / 2 + 2, sizeof(comp));
	if (!rc || !bc || !c)
		return -ENOMEM;
	size_t nr = split(root, rlen, 0, rc);
	size_t n = 0;
	comp *in = c; /* the path's own components, after the base's */
	if (is_sep(path[0], flags)) {
		size_t np = split(path, len, flags, c);
		if (np < nr || !same_prefix(c, rc, nr))
			return -EXDEV;
		in = c + nr;
		n = np - nr;
		memmove(c, in, n * sizeof(comp));
		in = c;
	} else {
		size_t nb = base ? split(base, blen, 0, bc) : nr;
		if (base && (nb < nr || !same_prefix(bc, rc, nr)))
			return -EINVAL;
		size_t from = nb - nr;
		if (base)
			memcpy(c, bc + nr, from * sizeof(comp));
		n = from + split(path, len, flags, c + from);
	}
	size_t top = 0;
	for (size_t i = 0; i < n; i++) {
		if (is_dotdot(&in[i])) {
			if (flags & CAE_PATH_NO_DOTDOT)
				return -EACCES;
			if (flags & CAE_PATH_FOLD_DOTDOT) {
				if (top == 0)
					return -EXDEV;
				top--;
				continue;
			}
		}
		in[top++] = in[i];
	}
	*out = join(rc, nr, in, top, (flags & CAE_PATH_ABSOLUTE) != 0);
	return *out ? 0 : -ENOMEM;
}

/* ---------------------------------------------------------------------------------------- */
/* The resolver */

void cae__chased_clear(cae_chased *c)
{
	if (c->fd >= 0)
		close(c->fd);
	free(c->dir);
	free(c->name);
	*c = (cae_chased)CAE_CHASED_INIT;
}

static bool has_dotdot(const char *s)
{
	for (const char *p = s; (p = strstr(p, "..")); p += 2)
		if ((p == s || p[-1] == '/') && (p[2] == '/' || p[2] == '\0'))
			return true;
	return false;
}

/* The path the resolver walks: components '/'-separated without empty or "." ones, and a
 * final "." for a directory asked for by a trailing "/" (or "/."). "" for the root. New
 * string. */
static char *tidy(const char *s)
{
	size_t len = strlen(s);
	_cleanup_free_ comp *c = calloc(len / 2 + 1, sizeof(comp));
	if (!c)
		return NULL;
	size_t n = split(s, len, 0, c);
	/* the last raw component: "" (trailing slash) or "." asks for a directory */
	const char *last = s + len;
	while (last > s && last[-1] != '/')
		last--;
	bool dir_only = n > 0 && (!*last || strcmp(last, ".") == 0) && !is_dotdot(&c[n - 1]);
	char *r = join(NULL, 0, c, n, false);
	if (!r || !dir_only)
		return r;
	size_t rl = strlen(r);
	char *d = realloc(r, rl + 3);
	if (!d) {
		free(r);
		return NULL;
	}
	memcpy(d + rl, "/.", 3);
	return d;
}

static int dup_fd(int fd)
{
	int d = fcntl(fd, F_DUPFD_CLOEXEC, 3);
	return d < 0 ? -errno : d;
}

/* An O_PATH fd on the directory dir (relative to root_fd, "" for it), beneath root_fd. */
static int open_dir(int root_fd, const char *dir)
{
	return *dir ? cae__open_beneath(root_fd, dir, O_PATH | O_DIRECTORY, 0) : dup_fd(root_fd);
}

static int default_mkdir(int dfd, const char *name)
{
	if (mkdirat(dfd, name, 0755) < 0)
		return -errno;
	cae__keep_owner_dir(dfd, name);
	return 0;
}

/* Makes the missing directories of dir (relative, no ".."), each one beneath root_fd in
 * its parent opened beneath root_fd just before. */
static int make_dirs(int root_fd, const char *dir, cae__chase_mkdir_fn mkdir_fn, void *ctx)
{
	_cleanup_free_ char *p = strdup(dir);
	if (!p)
		return -ENOMEM;
	size_t len = strlen(p);
	for (size_t i = 0; i <= len; i++) {
		if (p[i] != '/' && p[i] != '\0')
			continue;
		char saved = p[i];
		p[i] = '\0';
		int fd = cae__open_beneath(root_fd, p, O_PATH | O_DIRECTORY, 0);
		if (fd == -ENOENT) {
			char *slash = strrchr(p, '/');
			const char *name = slash ? slash + 1 : p;
			if (slash)
				*slash = '\0';
			_cleanup_close_ int pfd = open_dir(root_fd, slash ? p : "");
			if (slash)
				*slash = '/';
			if (pfd < 0)
				return pfd;
			int r = mkdir_fn ? mkdir_fn(ctx, pfd, name, p) : default_mkdir(pfd, name);
			if (r < 0 && r != -EEXIST)
				return r;
			fd = cae__open_beneath(root_fd, p, O_PATH | O_DIRECTORY, 0);
		}
		if (fd < 0)
			return fd;
		close(fd);
		p[i] = saved;
	}
	return 0;
}

/* The same directory (fd) under a shorter name: dir with ".." folded, when that opens
 * beneath root_fd to the very directory fd is. Else dir unchanged. */
static int fold_dir(int root_fd, int fd, char **dir)
{
	if (!has_dotdot(*dir))
		return 0;
	char *folded = NULL;
	int r = cae__path_lexical("/", NULL, *dir, strlen(*dir), CAE_PATH_FOLD_DOTDOT, &folded);
	if (r == -ENOMEM)
		return r;
	if (r < 0)
		return 0; /* above the root as text: only the kernel's answer stands */
	struct stat a, b;
	_cleanup_close_ int ffd = open_dir(root_fd, folded);
	if (ffd >= 0 && fstat(ffd, &a) == 0 && fstat(fd, &b) == 0 && a.st_dev == b.st_dev &&
	    a.st_ino == b.st_ino) {
		free(*dir);
		*dir = folded;
		return 0;
	}
	free(folded);
	return 0;
}

/* Splits cur at its last '/': *dir new ("" for none), *name new. */
static int split_last(const char *cur, char **dir, char **name)
{
	const char *slash = strrchr(cur, '/');
	*dir = slash ? strndup(cur, (size_t)(slash - cur)) : strdup("");
	*name = strdup(slash ? slash + 1 : cur);
	return *dir && *name ? 0 : -ENOMEM;
}

/* Fills out for the directory dfd itself (stolen), named dir (stolen). */
static int found_dir(int root_fd, int dfd, char *dir, cae_chased *out)
{
	out->fd = dfd;
	out->dir = dir;
	out->name = strdup("");
	if (!out->name)
		return -ENOMEM;
	if (fstat(dfd, &out->st) < 0)
		return -errno;
	out->exists = true;
	return fold_dir(root_fd, dfd, &out->dir);
}

int cae__chase(int root_fd, const char *path, unsigned flags, cae__chase_mkdir_fn mkdir_fn,
	       void *ctx, cae_chased *out)
{
	*out = (cae_chased)CAE_CHASED_INIT;
	if (!path)
		return -EINVAL;
	if (strlen(path) >= PATH_MAX)
		return -ENAMETOOLONG;
	if (path[0] == '/')
		return -EXDEV;
	_cleanup_free_ char *cur = tidy(path);
	if (!cur)
		return -ENOMEM;
	bool parent = flags & CAE_CHASE_PARENT, make = flags & CAE_CHASE_MKDIR, made = false;
	for (;;) {
		if (!*cur) {
			int fd = dup_fd(root_fd);
			if (fd < 0)
				return fd;
			return found_dir(root_fd, fd, TAKE_PTR(cur), out);
		}
		_cleanup_free_ char *dir = NULL, *name = NULL;
		if (split_last(cur, &dir, &name) < 0)
			return -ENOMEM;
		bool may_mkdir = make && out->links == 0 && !has_dotdot(cur);
		_cleanup_close_ int dfd = open_dir(root_fd, dir);
		if (dfd == -ENOENT && may_mkdir) {
			int r = make_dirs(root_fd, dir, mkdir_fn, ctx);
			if (r < 0)
				return r;
			dfd = open_dir(root_fd, dir);
		}
		if (dfd < 0)
			return dfd;
		if (strcmp(name, ".") == 0)
			return found_dir(root_fd, TAKE_FD(dfd), TAKE_PTR(dir), out);
		if (strcmp(name, "..") == 0) {
			/* the kernel resolves it (beneath the root) */
			int fd = cae__open_beneath(root_fd, cur, O_PATH | O_DIRECTORY, 0);
			if (fd < 0)
				return fd;
			return found_dir(root_fd, fd, TAKE_PTR(cur), out);
		}
		_cleanup_close_ int fd = openat(dfd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0 && errno == ENOENT && may_mkdir && !parent && !made) {
			int r = mkdir_fn ? mkdir_fn(ctx, dfd, name, cur) : default_mkdir(dfd, name);
			if (r < 0 && r != -EEXIST)
				return r;
			made = true;
			continue; /* look again */
		}
		if (fd < 0 && (errno != ENOENT || !parent))
			return -errno;
		if (fd >= 0 && fstat(fd, &out->st) < 0)
			return -errno;
		if (fd >= 0 && S_ISLNK(out->st.st_mode) && !(flags & CAE_CHASE_NOFOLLOW)) {
			/* A final symbolic link: its target, from the link's directory. Read
			 * through the fd, so it is the link just checked. */
			if (++out->links > CAE_CHASE_SYMLINK_MAX)
				return -ELOOP;
			char target[PATH_MAX];
			ssize_t n = readlinkat(fd, "", target, sizeof(target) - 1);
			if (n < 0)
				return -errno;
			if (n == 0)
				return -ENOENT;
			target[n] = '\0';
			if (target[0] == '/')
				return -EXDEV;
			_cleanup_free_ char *joined = *dir ? cae__path_join(dir, target) : NULL;
			if (*dir && !joined)
				return -ENOMEM;
			char *next = tidy(joined ? joined : target);
			if (!next)
				return -ENOMEM;
			free(cur);
			cur = next;
			if (strlen(cur) >= PATH_MAX)
				return -ENAMETOOLONG;
			memset(&out->st, 0, sizeof(out->st));
			continue;
		}
		out->exists = fd >= 0;
		if (!out->exists)
			memset(&out->st, 0, sizeof(out->st));
		int r = fold_dir(root_fd, dfd, &dir);
		if (r < 0)
			return r;
		out->fd = parent ? TAKE_FD(dfd) : TAKE_FD(fd);
		out->dir = TAKE_PTR(dir);
		out->name = TAKE_PTR(name);
		return 0;
	}
}
