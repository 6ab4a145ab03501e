/* Protected paths: the lexical and the physical check (see protect.h). */
#include "base/protect.h"

#include "base/macro.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "base/banned.h"

/* The next component of *p (skipping "" and "."); false at the end. */
static bool next_comp(const char **p, const char **s, size_t *n)
{
	for (;;) {
		while (**p == '/')
			(*p)++;
		if (!**p)
			return false;
		size_t len = strcspn(*p, "/");
		const char *c = *p;
		*p += len;
		if (len == 1 && c[0] == '.')
			continue;
		*s = c;
		*n = len;
		return true;
	}
}

/* Whether the components of prot are the first components of rel (ASCII case ignored). */
static bool at_or_below(const char *rel, const char *prot)
{
	const char *a = rel, *b = prot, *as, *bs;
	size_t an, bn;
	bool any = false;
	while (next_comp(&b, &bs, &bn)) {
		any = true;
		if (!next_comp(&a, &as, &an) || an != bn || strncasecmp(as, bs, an) != 0)
			return false;
	}
	return any;
}

bool cae__protected_lexical(const char *rel, const char *const *paths, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (paths[i] && at_or_below(rel, paths[i]))
			return true;
	return false;
}

/* The physical path of fd (new string), or NULL with errno set. */
static char *fd_path(int fd)
{
	char proc[64], buf[PATH_MAX];
	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
	ssize_t k = readlink(proc, buf, sizeof(buf) - 1);
	if (k < 0)
		return NULL;
	if ((size_t)k >= sizeof(buf) - 1) {
		errno = ENAMETOOLONG;
		return NULL;
	}
	buf[k] = '\0';
	return strdup(buf);
}

int cae__protected_at(int root_fd, int dfd, const char *name, const char *const *paths, size_t n)
{
	if (!n)
		return 0;
	_cleanup_free_ char *root = fd_path(root_fd);
	_cleanup_free_ char *dir = root ? fd_path(dfd) : NULL;
	if (!dir)
		return -errno;
	size_t rl = strcmp(root, "/") == 0 ? 0 : strlen(root);
	if (strncmp(dir, root, rl) != 0 || (dir[rl] != '/' && dir[rl] != '\0'))
		return -EXDEV; /* also a directory removed since (" (deleted)") */
	_cleanup_free_ char *rel = NULL;
	if (asprintf(&rel, "%s/%s", dir + rl, name ? name : "") < 0)
		return -ENOMEM;
	return cae__protected_lexical(rel, paths, n) ? 1 : 0;
}
