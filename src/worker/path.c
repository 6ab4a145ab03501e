/* Lexical confinement of patch paths: what the worker refuses before touching anything. The
 * file systems (fs-host.c, fs-env.c) then resolve every symbolic link inside the workspace. */
#include "worker/worker-internal.h"

#include "base/buf.h"
#include "base/macro.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/banned.h"

#define WK_PATH_MAX 4096

/* Appends the components of s (dropping "" and ".") to b, '/'-separated. Returns -EACCES for
 * a ".." component, else 0. When skip is given, it is matched first: every component of skip
 * must come first in s (-EXDEV otherwise). */
static int components(cae_buf *b, const char *s, const char *skip)
{
	const char *p = s, *q = skip;
	for (;;) {
		while (*p == '/')
			p++;
		if (!*p)
			break;
		const char *e = strchr(p, '/');
		size_t n = e ? (size_t)(e - p) : strlen(p);
		if (n == 1 && p[0] == '.') {
			p += n;
			continue;
		}
		if (n == 2 && p[0] == '.' && p[1] == '.')
			return -EACCES;
		if (q) {
			/* the next component of skip */
			while (*q == '/' || (q[0] == '.' && (q[1] == '/' || !q[1])))
				q++;
			if (*q) {
				const char *qe = strchr(q, '/');
				size_t qn = qe ? (size_t)(qe - q) : strlen(q);
				if (qn != n || memcmp(p, q, n) != 0)
					return -EXDEV;
				q += qn;
				p += n;
				continue;
			}
		}
		if (b->len)
			cae_buf_append(b, "/", 1);
		cae_buf_append(b, p, n);
		p += n;
	}
	if (q) {
		while (*q == '/' || (q[0] == '.' && (q[1] == '/' || !q[1])))
			q++;
		if (*q)
			return -EXDEV; /* s is a parent of root */
	}
	return 0;
}

int wk_path_rel(const char *root, const char *path, char **rel, cae_error *err)
{
	*rel = NULL;
	if (!path || !*path)
		return cae_error_set(err, -EACCES, "empty path: give a file inside the workspace");
	size_t len = strlen(path);
	if (len > WK_PATH_MAX)
		return cae_error_set(err, -EACCES, "path too long (%zu bytes, at most %d)", len,
				     WK_PATH_MAX);
	cae_buf b;
	cae_buf_init(&b, WK_PATH_MAX);
	int r = components(&b, path, path[0] == '/' ? root : NULL);
	if (r == -EACCES) {
		cae_buf_clear(&b);
		return cae_error_set(err, -EACCES,
				     "%s: security error: '..' is not allowed in a path; give the "
				     "path relative to the workspace %s",
				     path, root);
	}
	if (r == -EXDEV) {
		cae_buf_clear(&b);
		return cae_error_set(err, -EACCES,
				     "%s: security error: the path is outside the workspace %s; "
				     "only files inside it can be written",
				     path, root);
	}
	if (b.len == 0) {
		cae_buf_clear(&b);
		return cae_error_set(err, -EACCES, "%s: the workspace itself is not a file", path);
	}
	if (b.truncated) {
		cae_buf_clear(&b);
		return cae_error_set(err, -ENOMEM, "out of memory");
	}
	*rel = cae_buf_steal(&b, NULL);
	return *rel ? 0 : cae_error_set(err, -ENOMEM, "out of memory");
}
