/* Internals shared by the patch parsers (patch.c, parse-json.c, parse-markdown.c,
 * parse-diff.c) and the applier (apply.c). */
#ifndef CAE_PATCH_INTERNAL_H
#define CAE_PATCH_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>

#include "cae/patch.h"

struct cae_patch {
	cae_patch_format format;
	/* Owned copy of the text for the line-based forms: hunk lines point into it. */
	char *src;
	size_t src_len;
	cae_patch_command *cmds;
	size_t ncmds, cmds_cap;
	char **warnings;
	size_t nwarnings;
	size_t dropped_warnings;
};

/* One line of text: [p, p+len) without the "\n" and without one trailing "\r". */
typedef struct patch_line {
	const char *p;
	size_t len;
	size_t lineno; /* 1-based, in the whole patch text */
} patch_line;

typedef struct patch_lines {
	const char *cur, *end;
	size_t lineno; /* of the line returned last */
} patch_lines;

void cae__patch_lines_init(patch_lines *it, const char *text, size_t len, size_t first_lineno);
/* Next line, or false at the end. A final line without "\n" counts; "" has no lines. */
bool cae__patch_lines_next(patch_lines *it, patch_line *l);
/* The next line without consuming it. */
bool cae__patch_lines_peek(const patch_lines *it, patch_line *l);

/* Appends a zeroed command (target and content set to "") and returns it in *out; the
 * pointer is valid until the next append. -E2BIG past CAE_PATCH_MAX_COMMANDS. */
int cae__patch_add_command(cae_patch *p, cae_patch_command **out, cae_error *err);
/* Records a warning (kept up to CAE_PATCH_MAX_WARNINGS, then counted). */
void cae__patch_warn(cae_patch *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void cae__patch_command_clear(cae_patch_command *c);
void cae__patch_file_op_free(cae_patch_file_op *op);

/* Small string helpers. */
bool cae__patch_is_space(char c); /* ' ', \t, \r, \v, \f, \n */
void cae__patch_trim(const char **s, size_t *n);
bool cae__patch_starts_with(const char *s, size_t n, const char *prefix);
bool cae__patch_eq(const char *s, size_t n, const char *lit);
/* Quotes a piece of text for an error message: at most max bytes, control characters
 * escaped, cut at a UTF-8 boundary with "..." when longer. Writes into buf (size bsize). */
const char *cae__patch_quote(const char *s, size_t n, size_t max, char *buf, size_t bsize);

/* Splits a command line into words as a shell would (single and double quotes, backslash).
 * Operators && || ; | outside quotes are returned as separate words "&&", ";" (with
 * *is_op[i] true). Returns 0, -EINVAL (unterminated quote) or -ENOMEM. */
int cae__patch_shell_split(const char *s, size_t n, char ***words, bool **is_op, size_t *nwords);
void cae__patch_strv_free(char **v, size_t n);

/* Parsers. text lies inside p->src for the line-based forms; first_lineno is the line
 * number of text's first line in the whole patch. */
int cae__patch_parse_json_text(cae_patch *p, const char *text, size_t len, cae_error *err);
int cae__patch_parse_json_value(cae_patch *p, const json_t *arr, cae_error *err);
int cae__patch_parse_markdown(cae_patch *p, const char *text, size_t len, size_t first_lineno,
			      cae_error *err);
int cae__patch_parse_apply_patch(cae_patch *p, const char *text, size_t len, size_t first_lineno,
				 cae_error *err);
/* default_path: for hunks without file headers (a ```diff:<path> block), else NULL. */
int cae__patch_parse_unified(cae_patch *p, const char *text, size_t len, size_t first_lineno,
			     const char *default_path, cae_error *err);

/* Line classification shared by format detection and Markdown. */
bool cae__patch_line_is_begin_patch(const patch_line *l);
/* "--- x" whose next line is "+++ y", or "diff --git ". */
bool cae__patch_line_starts_unified(const patch_line *l, const patch_lines *rest);

/* Fence recognition (Markdown): an opening fence is up to 3 spaces, then 3+ '`' or '~',
 * then an info string (no '`' in it for backtick fences). */
typedef struct patch_fence {
	char ch;
	size_t indent;
	size_t run;
	const char *info;
	size_t info_len;
} patch_fence;
bool cae__patch_fence_open(const patch_line *l, patch_fence *f);

#endif
