/* The subject of an auto-commit: what a reviewer reads in `git log --oneline`. The patch's
 * first meaningful line (a mail's Subject, the message of `git show` output before its diff,
 * a Markdown heading or sentence outside code blocks), never a format marker (`*** Begin
 * Patch`, `diff --git`, a fence, JSON); without one, what the patch does ("update 2 files:
 * a.c, b.c"). */
#include "cae/worker.h"

#include "base/buf.h"
#include "base/macro.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/banned.h"

#define SCAN_LINES 2000 /* a subject is near the top: no longer scan than this */
#define NAMED_FILES 3

static bool starts(const char *s, size_t n, const char *p)
{
	size_t k = strlen(p);
	return n >= k && memcmp(s, p, k) == 0;
}

/* Lines that belong to a diff or a mail's headers, in the unified form. */
static bool diff_starts(const char *s, size_t n)
{
	return starts(s, n, "diff ") || starts(s, n, "--- ") || starts(s, n, "+++ ") ||
	       starts(s, n, "@@") || starts(s, n, "Index: ");
}

static bool header_line(const char *s, size_t n)
{
	static const char *const heads[] = {
	    "From ",
	    "From:",
	    "Date:",
	    "To:",
	    "Cc:",
	    "commit ",
	    "Author:",
	    "AuthorDate:",
	    "Commit:",
	    "CommitDate:",
	    "Merge:",
	    "index ",
	    "new file mode",
	    "deleted file mode",
	    "old mode",
	    "new mode",
	    "similarity index",
	    "dissimilarity index",
	    "rename from",
	    "rename to",
	    "copy from",
	    "copy to",
	    "Signed-off-by:",
	    "Co-authored-by:",
	    "Change-Id:",
	    "MIME-Version:",
	    "Content-Type:",
	    "Content-Transfer-Encoding:",
	    "Message-Id:",
	    "Message-ID:",
	    "In-Reply-To:",
	    "References:",
	    "---",
	};
	for (size_t i = 0; i < ARRAY_SIZE(heads); i++)
		if (starts(s, n, heads[i]))
			return true;
	return false;
}

/* What the Markdown form never takes as a subject: the markers of the other forms. */
static bool marker_line(const char *s, size_t n)
{
	return starts(s, n, "***") || diff_starts(s, n) || starts(s, n, "<!--") ||
	       starts(s, n, "[{") || starts(s, n, "{\"") || (n == 1 && (*s == '[' || *s == '{'));
}

static void trim(const char **s, size_t *n)
{
	while (*n && (**s == ' ' || **s == '\t' || **s == '\r')) {
		(*s)++;
		(*n)--;
	}
	while (*n && ((*s)[*n - 1] == ' ' || (*s)[*n - 1] == '\t' || (*s)[*n - 1] == '\r'))
		(*n)--;
}

/* "Subject: [PATCH v2 1/3] fix it" -> "fix it" */
static void mail_subject(const char **s, size_t *n)
{
	*s += 8;
	*n -= 8;
	trim(s, n);
	if (*n && **s == '[') {
		const char *close = memchr(*s, ']', *n);
		if (close) {
			*n -= (size_t)(close + 1 - *s);
			*s = close + 1;
			trim(s, n);
		}
	}
}

/* The first meaningful line of text in the given form, or NULL. */
static char *text_subject(const char *text, cae_patch_format fmt)
{
	if (!text || (fmt != CAE_PATCH_FORMAT_MARKDOWN && fmt != CAE_PATCH_FORMAT_UNIFIED))
		return NULL;
	bool fence = false;
	const char *t = text;
	for (size_t lines = 0; *t && lines < SCAN_LINES; lines++) {
		const char *e = strchr(t, '\n');
		size_t n = e ? (size_t)(e - t) : strlen(t);
		const char *s = t;
		t = e ? e + 1 : t + n;
		trim(&s, &n);
		if (fmt == CAE_PATCH_FORMAT_MARKDOWN &&
		    (starts(s, n, "```") || starts(s, n, "~~~"))) {
			fence = !fence;
			continue;
		}
		if (fence || n == 0)
			continue;
		if (fmt == CAE_PATCH_FORMAT_UNIFIED) {
			if (starts(s, n, "Subject:")) {
				mail_subject(&s, &n);
				return n ? strndup(s, n) : NULL;
			}
			if (diff_starts(s, n))
				return NULL; /* the diff began: there was no message */
			if (header_line(s, n))
				continue;
			return strndup(s, n);
		}
		if (*s == '#') {
			while (n && *s == '#') {
				s++;
				n--;
			}
			trim(&s, &n);
			while (n && s[n - 1] == '#')
				n--;
			trim(&s, &n);
			if (n)
				return strndup(s, n);
			continue;
		}
		if (marker_line(s, n))
			continue;
		return strndup(s, n);
	}
	return NULL;
}

static const char *command_path(const cae_patch_command *c)
{
	if (c->op)
		return c->op->move_to ? c->op->move_to : c->op->path;
	return c->target;
}

/* "update 2 files: a.c, b.c" (add / delete when every file is added / deleted), or the
 * first command's own words when no file is edited. */
static char *summary(const cae_patch *p)
{
	size_t n = p ? cae_patch_count(p) : 0;
	size_t files = 0;
	bool all_add = true, all_delete = true;
	cae_buf names;
	cae__buf_init(&names, 4096);
	int r = 0;
	for (size_t i = 0; i < n; i++) {
		const cae_patch_command *c = cae_patch_get(p, i);
		if (c->type != CAE_PATCH_FILE_EDIT)
			continue;
		const char *path = command_path(c);
		bool seen = false;
		for (size_t k = 0; k < i && !seen; k++) {
			const cae_patch_command *o = cae_patch_get(p, k);
			seen = o->type == CAE_PATCH_FILE_EDIT && strcmp(command_path(o), path) == 0;
		}
		if (seen)
			continue;
		bool add =
		    c->action == CAE_PATCH_CREATE || (c->op && c->op->kind == CAE_PATCH_OP_ADD);
		bool del = c->action == CAE_PATCH_DELETE;
		all_add = all_add && add;
		all_delete = all_delete && del;
		if (files < NAMED_FILES)
			r |= cae__buf_printf(&names, "%s%.200s", files ? ", " : "", path);
		else if (files == NAMED_FILES)
			r |= cae__buf_puts(&names, ", ...");
		files++;
	}
	char *out = NULL;
	if (r == 0 && files) {
		if (asprintf(&out, "%s %zu file%s: %s",
			     all_add	  ? "add"
			     : all_delete ? "delete"
					  : "update",
			     files, files == 1 ? "" : "s", names.data) < 0)
			out = NULL;
	} else if (r == 0 && n) {
		const cae_patch_command *c = cae_patch_get(p, 0);
		int k = c->type == CAE_PATCH_SHELL_COMMAND ? asprintf(&out, "run %.200s", c->target)
			: c->type == CAE_PATCH_GIT_OPERATION
			    ? asprintf(&out, "git %s %.200s", cae_patch_action_name(c->action),
				       c->target)
			    : asprintf(&out, "apply a patch");
		if (k < 0)
			out = NULL;
	} else if (r == 0) {
		out = strdup("apply a patch");
	}
	cae__buf_clear(&names);
	return out;
}

char *cae_worker_commit_subject(const char *patch_text, const cae_patch *p)
{
	char *s = text_subject(patch_text, p ? cae_patch_get_format(p) : CAE_PATCH_FORMAT_EMPTY);
	if (s) {
		/* one line, no control characters */
		for (char *c = s; *c; c++)
			if ((unsigned char)*c < 0x20 || *c == 0x7f)
				*c = ' ';
		return s;
	}
	return summary(p);
}
