/* Lexical path handling for the editor: the agent's path becomes a workspace-relative path
 * and a display form. This never decides confinement on its own: every access goes through
 * openat2(RESOLVE_BENEATH) from the workspace fd (editor.c). It only refuses early what is
 * plainly outside (an absolute path not under the display root, ".." above the top). */
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

/* Splits s[0..len) at "/" and resolves "." and ".." on a stack. Returns the number of
 * components, or -1 when ".." goes above the top and !clamp_at_top. */
static long normalize(const char *s, size_t len, comp *stack, bool clamp_at_top)
{
	long top = 0;
	size_t i = 0;
	while (i < len) {
		while (i < len && s[i] == '/')
			i++;
		size_t start = i;
		while (i < len && s[i] != '/')
			i++;
		size_t n = i - start;
		if (n == 0 || (n == 1 && s[start] == '.'))
			continue;
		if (n == 2 && s[start] == '.' && s[start + 1] == '.') {
			if (top == 0) {
				if (clamp_at_top)
					continue;
				return -1;
			}
			top--;
			continue;
		}
		stack[top].p = s + start;
		stack[top].n = n;
		top++;
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
	long n = normalize(display_root, len, stack, true);
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
	_cleanup_free_ comp *stack = calloc(len / 2 + 2, sizeof(comp));
	if (!stack)
		return ED_PATH_NOMEM;
	if (path[0] != '/') {
		long n = normalize(path, len, stack, false);
		if (n < 0)
			return ED_PATH_OUTSIDE;
		*rel = join(stack, n, false);
		return *rel ? ED_PATH_OK : ED_PATH_NOMEM;
	}
	long n = normalize(path, len, stack, true);
	_cleanup_free_ char *abs = join(stack, n, true);
	if (!abs)
		return ED_PATH_NOMEM;
	size_t rl = strlen(root);
	const char *rest;
	if (strcmp(root, "/") == 0)
		rest = abs + 1;
	else if (strncmp(abs, root, rl) == 0 && abs[rl] == '\0')
		rest = abs + rl;
	else if (strncmp(abs, root, rl) == 0 && abs[rl] == '/')
		rest = abs + rl + 1;
	else
		return ED_PATH_OUTSIDE;
	*rel = strdup(rest);
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
