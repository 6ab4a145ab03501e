/* Lexical path handling for the editor: the agent's path becomes a workspace-relative path
 * and a display form. This never decides confinement on its own: every access goes through
 * openat2(RESOLVE_BENEATH) from the workspace fd (editor.c), which also judges every "..". It
 * only refuses early what is plainly outside: an absolute path not under the display root. */
#include "editor-internal.h"

#include "base/macro.h"
#include "base/utf8.h"

#include <stdlib.h>
#include <string.h>

#include "base/banned.h"

typedef struct comp {
	const char *p;
	size_t n;
} comp;

/* Splits s[0..len) at "/", dropping empty and "." components (".." kept). */
static long split(const char *s, size_t len, comp *out)
{
	long n = 0;
	size_t i = 0;
	while (i < len) {
		while (i < len && s[i] == '/')
			i++;
		size_t start = i;
		while (i < len && s[i] != '/')
			i++;
		size_t k = i - start;
		if (k == 0 || (k == 1 && s[start] == '.'))
			continue;
		out[n].p = s + start;
		out[n].n = k;
		n++;
	}
	return n;
}

/* split(), then ".." resolved on the stack (".." at the top stays at the top, as for "/..").
 * Returns the number of components. */
static long normalize(const char *s, size_t len, comp *stack)
{
	long n = split(s, len, stack), top = 0;
	for (long i = 0; i < n; i++) {
		if (stack[i].n == 2 && stack[i].p[0] == '.' && stack[i].p[1] == '.') {
			if (top > 0)
				top--;
			continue;
		}
		stack[top++] = stack[i];
	}
	return top;
}

static char *join(const comp *stack, long count, bool leading_slash)
{
	size_t total = leading_slash ? 1 : 0;
	for (long i = 0; i < count; i++)
		total += stack[i].n + 1;
	char *r = malloc(total + 1);
	if (!r)
		return NULL;
	size_t o = 0;
	if (leading_slash)
		r[o++] = '/';
	for (long i = 0; i < count; i++) {
		if (i > 0)
			r[o++] = '/';
		memcpy(r + o, stack[i].p, stack[i].n);
		o += stack[i].n;
	}
	r[o] = '\0';
	return r;
}

char *ed_path_root_normalize(const char *display_root)
{
	if (!display_root || display_root[0] != '/')
		return NULL;
	size_t len = strlen(display_root);
	_cleanup_free_ comp *stack = calloc(len / 2 + 2, sizeof(comp));
	if (!stack)
		return NULL;
	long n = normalize(display_root, len, stack);
	return join(stack, n, true);
}

ed_path_error ed_path_to_rel(const char *root, const char *path, size_t len, char **rel)
{
	*rel = NULL;
	if (len == 0)
		return ED_PATH_EMPTY;
	if (len > ED_PATH_MAX)
		return ED_PATH_TOO_LONG;
	if (memchr(path, '\0', len))
		return ED_PATH_NUL;
	if (!cae_utf8_is_valid(path, len))
		return ED_PATH_NOT_UTF8;
	size_t rlen = strlen(root);
	_cleanup_free_ comp *c = calloc(len / 2 + 2, sizeof(comp));
	_cleanup_free_ comp *rc = calloc(rlen / 2 + 2, sizeof(comp));
	if (!c || !rc)
		return ED_PATH_NOMEM;
	long n = split(path, len, c), skip = 0;
	if (path[0] == '/') {
		/* Under the display root, component by component (root has no ".."). */
		long k = split(root, rlen, rc);
		if (n < k)
			return ED_PATH_OUTSIDE;
		for (long i = 0; i < k; i++)
			if (c[i].n != rc[i].n || memcmp(c[i].p, rc[i].p, c[i].n) != 0)
				return ED_PATH_OUTSIDE;
		skip = k;
	}
	*rel = join(c + skip, n - skip, false);
	return *rel ? ED_PATH_OK : ED_PATH_NOMEM;
}

char *ed_path_display(const char *root, const char *rel)
{
	if (!*rel)
		return strdup(root);
	size_t rl = strlen(root), l = strlen(rel);
	bool slash = !(rl == 1 && root[0] == '/');
	char *r = malloc(rl + l + 2);
	if (!r)
		return NULL;
	memcpy(r, root, rl);
	size_t o = rl;
	if (slash)
		r[o++] = '/';
	memcpy(r + o, rel, l + 1);
	return r;
}

char *ed_path_join_rel(const char *dir, const char *path)
{
	if (!*dir)
		return strdup(path);
	size_t dl = strlen(dir), pl = strlen(path);
	char *r = malloc(dl + pl + 2);
	if (!r)
		return NULL;
	memcpy(r, dir, dl);
	r[dl] = '/';
	memcpy(r + dl + 1, path, pl + 1);
	return r;
}
