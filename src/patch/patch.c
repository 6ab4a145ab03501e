/* The patch object, format detection, shared helpers and rendering. */
#include "cae/patch.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/macro.h"
#include "base/utf8.h"
#include "patch/patch-internal.h"

#include "base/banned.h"

/* ---- small helpers ---- */

bool cae__patch_is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f' || c == '\n';
}

void cae__patch_trim(const char **s, size_t *n)
{
	while (*n && cae__patch_is_space(**s)) {
		(*s)++;
		(*n)--;
	}
	while (*n && cae__patch_is_space((*s)[*n - 1]))
		(*n)--;
}

bool cae__patch_starts_with(const char *s, size_t n, const char *prefix)
{
	size_t pl = strlen(prefix);
	return n >= pl && memcmp(s, prefix, pl) == 0;
}

bool cae__patch_eq(const char *s, size_t n, const char *lit)
{
	return strlen(lit) == n && memcmp(s, lit, n) == 0;
}

const char *cae__patch_quote(const char *s, size_t n, size_t max, char *buf, size_t bsize)
{
	size_t o = 0;
	bool cut = false;
	if (n > max) {
		n = cae__utf8_floor(s, max);
		cut = true;
	}
	for (size_t i = 0; i < n && o + 8 < bsize; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c == '\n' || c == '\r' || c == '\t') {
			buf[o++] = '\\';
			buf[o++] = c == '\n' ? 'n' : c == '\r' ? 'r' : 't';
		} else if (c < 0x20 || c == 0x7f) {
			o += (size_t)snprintf(buf + o, bsize - o, "\\x%02x", c);
		} else {
			buf[o++] = (char)c;
		}
	}
	if (cut && o + 4 < bsize) {
		memcpy(buf + o, "...", 3);
		o += 3;
	}
	buf[o < bsize ? o : bsize - 1] = '\0';
	return buf;
}

void cae__patch_strv_free(char **v, size_t n)
{
	if (!v)
		return;
	for (size_t i = 0; i < n; i++)
		free(v[i]);
	free(v);
}

/* Shell-like word splitting: enough for the git lines of a ```git block and JSON git
 * targets. Not a shell: no expansions; the policy module has the full lexer. */
int cae__patch_shell_split(const char *s, size_t n, char ***words, bool **is_op, size_t *nwords)
{
	char **v = NULL;
	bool *ops = NULL;
	size_t nv = 0, cap = 0;
	cae_buf w;
	cae__buf_init(&w, n + 1);
	int r = 0;
	size_t i = 0;

	for (;;) {
		while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r' || s[i] == '\n'))
			i++;
		if (i >= n)
			break;
		bool op = false;
		bool have = false;
		if (s[i] == '&' && i + 1 < n && s[i + 1] == '&') {
			r = cae__buf_append(&w, "&&", 2);
			i += 2;
			op = have = true;
		} else if (s[i] == '|' && i + 1 < n && s[i + 1] == '|') {
			r = cae__buf_append(&w, "||", 2);
			i += 2;
			op = have = true;
		} else if (s[i] == ';' || s[i] == '|') {
			r = cae__buf_append(&w, &s[i], 1);
			i++;
			op = have = true;
		} else {
			while (i < n && r == 0) {
				char c = s[i];
				if (c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == ';' ||
				    c == '|' || (c == '&' && i + 1 < n && s[i + 1] == '&'))
					break;
				have = true;
				if (c == '\'') {
					const char *q = memchr(s + i + 1, '\'', n - i - 1);
					if (!q) {
						r = -EINVAL;
						break;
					}
					r = cae__buf_append(&w, s + i + 1,
							    (size_t)(q - (s + i + 1)));
					i = (size_t)(q - s) + 1;
				} else if (c == '"') {
					i++;
					bool closed = false;
					while (i < n && r == 0) {
						if (s[i] == '"') {
							closed = true;
							i++;
							break;
						}
						if (s[i] == '\\' && i + 1 < n &&
						    strchr("\"\\$`\n", s[i + 1])) {
							if (s[i + 1] != '\n')
								r = cae__buf_append(&w, &s[i + 1],
										    1);
							i += 2;
							continue;
						}
						r = cae__buf_append(&w, &s[i], 1);
						i++;
					}
					if (!closed && r == 0)
						r = -EINVAL;
				} else if (c == '\\' && i + 1 < n) {
					if (s[i + 1] != '\n')
						r = cae__buf_append(&w, &s[i + 1], 1);
					i += 2;
				} else {
					r = cae__buf_append(&w, &c, 1);
					i++;
				}
			}
		}
		if (r < 0)
			break;
		if (!have)
			continue;
		if (nv == cap) {
			size_t ncap = cap ? cap * 2 : 8;
			char **nvv = realloc(v, ncap * sizeof(*v));
			if (!nvv) {
				r = -ENOMEM;
				break;
			}
			v = nvv;
			bool *nops = realloc(ops, ncap * sizeof(*ops));
			if (!nops) {
				r = -ENOMEM;
				break;
			}
			ops = nops;
			cap = ncap;
		}
		size_t wl;
		char *word = cae__buf_steal(&w, &wl);
		if (!word) {
			r = -ENOMEM;
			break;
		}
		v[nv] = word;
		ops[nv] = op;
		nv++;
	}
	cae__buf_clear(&w);
	if (r < 0) {
		cae__patch_strv_free(v, nv);
		free(ops);
		return r;
	}
	*words = v;
	*nwords = nv;
	if (is_op)
		*is_op = ops;
	else
		free(ops);
	return 0;
}

/* ---- lines ---- */

void cae__patch_lines_init(patch_lines *it, const char *text, size_t len, size_t first_lineno)
{
	it->cur = text;
	it->end = text + len;
	it->lineno = first_lineno ? first_lineno - 1 : 0;
}

static bool lines_get(const patch_lines *it, patch_line *l, const char **next)
{
	if (it->cur >= it->end)
		return false;
	const char *nl = memchr(it->cur, '\n', (size_t)(it->end - it->cur));
	const char *e = nl ? nl : it->end;
	l->p = it->cur;
	l->len = (size_t)(e - it->cur);
	if (l->len && l->p[l->len - 1] == '\r')
		l->len--;
	l->lineno = it->lineno + 1;
	*next = nl ? nl + 1 : it->end;
	return true;
}

bool cae__patch_lines_next(patch_lines *it, patch_line *l)
{
	const char *next;
	if (!lines_get(it, l, &next))
		return false;
	it->cur = next;
	it->lineno++;
	return true;
}

bool cae__patch_lines_peek(const patch_lines *it, patch_line *l)
{
	const char *next;
	return lines_get(it, l, &next);
}

bool cae__patch_line_is_begin_patch(const patch_line *l)
{
	const char *s = l->p;
	size_t n = l->len;
	cae__patch_trim(&s, &n);
	return cae__patch_eq(s, n, "*** Begin Patch");
}

bool cae__patch_line_starts_unified(const patch_line *l, const patch_lines *rest)
{
	if (cae__patch_starts_with(l->p, l->len, "diff --git "))
		return true;
	if (!cae__patch_starts_with(l->p, l->len, "--- "))
		return false;
	patch_line nx;
	return cae__patch_lines_peek(rest, &nx) && cae__patch_starts_with(nx.p, nx.len, "+++ ");
}

bool cae__patch_fence_open(const patch_line *l, patch_fence *f)
{
	size_t i = 0;
	while (i < l->len && i < 4 && l->p[i] == ' ')
		i++;
	if (i > 3 || i >= l->len)
		return false;
	char ch = l->p[i];
	if (ch != '`' && ch != '~')
		return false;
	size_t run = 0;
	while (i + run < l->len && l->p[i + run] == ch)
		run++;
	if (run < 3)
		return false;
	const char *info = l->p + i + run;
	size_t info_len = l->len - i - run;
	if (ch == '`' && memchr(info, '`', info_len))
		return false;
	cae__patch_trim(&info, &info_len);
	f->ch = ch;
	f->indent = i;
	f->run = run;
	f->info = info;
	f->info_len = info_len;
	return true;
}

/* ---- the patch object ---- */

void cae__patch_file_op_free(cae_patch_file_op *op)
{
	if (!op)
		return;
	for (size_t i = 0; i < op->nhunks; i++) {
		cae_patch_hunk *h = &op->hunks[i];
		free(h->heading);
		cae__patch_strv_free(h->contexts, h->ncontexts);
		free(h->lines);
	}
	free(op->hunks);
	free(op->path);
	free(op->move_to);
	free(op);
}

void cae__patch_command_clear(cae_patch_command *c)
{
	free(c->invalid);
	free(c->target);
	free(c->content);
	json_decref(c->metadata);
	cae__patch_strv_free(c->args, c->nargs);
	cae__patch_file_op_free(c->op);
	memset(c, 0, sizeof(*c));
}

int cae__patch_add_command(cae_patch *p, cae_patch_command **out, cae_error *err)
{
	if (p->ncmds >= CAE_PATCH_MAX_COMMANDS)
		return cae_error_set(err, -E2BIG, "patch has more than %d commands",
				     CAE_PATCH_MAX_COMMANDS);
	if (p->ncmds == p->cmds_cap) {
		size_t ncap = p->cmds_cap ? p->cmds_cap * 2 : 16;
		cae_patch_command *n = realloc(p->cmds, ncap * sizeof(*n));
		if (!n)
			return cae_error_set(err, -ENOMEM, "out of memory");
		p->cmds = n;
		p->cmds_cap = ncap;
	}
	cae_patch_command *c = &p->cmds[p->ncmds];
	memset(c, 0, sizeof(*c));
	c->target = strdup("");
	c->content = strdup("");
	if (!c->target || !c->content) {
		free(c->target);
		free(c->content);
		return cae_error_set(err, -ENOMEM, "out of memory");
	}
	p->ncmds++;
	*out = c;
	return 0;
}

void cae__patch_warn(cae_patch *p, const char *fmt, ...)
{
	if (p->nwarnings >= CAE_PATCH_MAX_WARNINGS) {
		p->dropped_warnings++;
		return;
	}
	char **n = realloc(p->warnings, (p->nwarnings + 1) * sizeof(*n));
	if (!n) {
		p->dropped_warnings++;
		return;
	}
	p->warnings = n;
	char buf[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	char *s = strdup(buf);
	if (!s) {
		p->dropped_warnings++;
		return;
	}
	p->warnings[p->nwarnings++] = s;
}

void cae_patch_free(cae_patch *p)
{
	if (!p)
		return;
	for (size_t i = 0; i < p->ncmds; i++)
		cae__patch_command_clear(&p->cmds[i]);
	free(p->cmds);
	cae__patch_strv_free(p->warnings, p->nwarnings);
	free(p->src);
	free(p);
}

DEFINE_TRIVIAL_CLEANUP_FUNC(cae_patch *, cae_patch_free)

/* Which form is it? The first marker wins: '[' first → JSON; else the first line that is a
 * code fence, "*** Begin Patch", or a unified diff header decides. */
static int detect_format(const char *text, size_t len, cae_patch_format *fmt, cae_error *err)
{
	size_t i = 0;
	while (i < len && cae__patch_is_space(text[i]))
		i++;
	if (i == len) {
		*fmt = CAE_PATCH_FORMAT_EMPTY;
		return 0;
	}
	if (text[i] == '[' || text[i] == '{') {
		/* an object is refused by the JSON parser with a message saying what is expected */
		*fmt = CAE_PATCH_FORMAT_JSON;
		return 0;
	}
	patch_lines it;
	patch_line l;
	patch_fence f;
	cae__patch_lines_init(&it, text, len, 1);
	while (cae__patch_lines_next(&it, &l)) {
		if (cae__patch_fence_open(&l, &f)) {
			*fmt = CAE_PATCH_FORMAT_MARKDOWN;
			return 0;
		}
		if (cae__patch_line_is_begin_patch(&l)) {
			*fmt = CAE_PATCH_FORMAT_APPLY_PATCH;
			return 0;
		}
		if (cae__patch_line_starts_unified(&l, &it)) {
			*fmt = CAE_PATCH_FORMAT_UNIFIED;
			return 0;
		}
	}
	return cae_error_set(err, -EINVAL,
			     "unrecognized patch format: expected a JSON array of commands, "
			     "Markdown code blocks (```lang:path, ```bash, ```git), an "
			     "'*** Begin Patch' block, or a unified diff");
}

/* Refuses any line longer than CAE_PATCH_MAX_LINE (the line-based forms). */
static int check_line_lengths(const char *text, size_t len, cae_error *err)
{
	const char *p = text, *end = text + len;
	size_t lineno = 1;
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t n = (size_t)((nl ? nl : end) - p);
		if (n > CAE_PATCH_MAX_LINE)
			return cae_error_set(err, -E2BIG,
					     "line %zu is longer than the limit of %zu bytes",
					     lineno, CAE_PATCH_MAX_LINE);
		if (!nl)
			break;
		p = nl + 1;
		lineno++;
	}
	return 0;
}

static int patch_new(cae_patch **out, cae_error *err)
{
	cae_patch *p = calloc(1, sizeof(*p));
	if (!p)
		return cae_error_set(err, -ENOMEM, "out of memory");
	*out = p;
	return 0;
}

int cae_patch_parse(const char *text, size_t len, cae_patch **out, cae_error *err)
{
	*out = NULL;
	if (!text && len)
		return cae_error_set(err, -EINVAL, "patch text is NULL");
	if (len > CAE_PATCH_MAX_INPUT)
		return cae_error_set(err, -E2BIG, "patch is %zu bytes, more than the limit of %zu",
				     len, CAE_PATCH_MAX_INPUT);
	_cleanup_(cae_patch_freep) cae_patch *p = NULL;
	int r = patch_new(&p, err);
	if (r < 0)
		return r;
	r = detect_format(text, len, &p->format, err);
	if (r < 0)
		return r;
	switch (p->format) {
	case CAE_PATCH_FORMAT_EMPTY:
		break;
	case CAE_PATCH_FORMAT_JSON:
		r = cae__patch_parse_json_text(p, text, len, err);
		break;
	default:
		r = check_line_lengths(text, len, err);
		if (r < 0)
			return r;
		p->src = cae__memdup0(text, len);
		if (!p->src)
			return cae_error_set(err, -ENOMEM, "out of memory");
		p->src_len = len;
		if (p->format == CAE_PATCH_FORMAT_MARKDOWN)
			r = cae__patch_parse_markdown(p, p->src, len, 1, err);
		else if (p->format == CAE_PATCH_FORMAT_APPLY_PATCH)
			r = cae__patch_parse_apply_patch(p, p->src, len, 1, err);
		else
			r = cae__patch_parse_unified(p, p->src, len, 1, NULL, err);
		break;
	}
	if (r < 0)
		return r;
	*out = TAKE_PTR(p);
	return 0;
}

int cae_patch_from_json(const json_t *commands, cae_patch **out, cae_error *err)
{
	*out = NULL;
	_cleanup_(cae_patch_freep) cae_patch *p = NULL;
	int r = patch_new(&p, err);
	if (r < 0)
		return r;
	p->format = CAE_PATCH_FORMAT_JSON;
	r = cae__patch_parse_json_value(p, commands, err);
	if (r < 0)
		return r;
	*out = TAKE_PTR(p);
	return 0;
}

cae_patch_format cae_patch_get_format(const cae_patch *p)
{
	return p->format;
}

size_t cae_patch_count(const cae_patch *p)
{
	return p ? p->ncmds : 0;
}

const cae_patch_command *cae_patch_get(const cae_patch *p, size_t i)
{
	return p && i < p->ncmds ? &p->cmds[i] : NULL;
}

size_t cae_patch_warning_count(const cae_patch *p)
{
	return p ? p->nwarnings : 0;
}

const char *cae_patch_warning(const cae_patch *p, size_t i)
{
	return p && i < p->nwarnings ? p->warnings[i] : NULL;
}

bool cae_patch_is_atomic(const cae_patch *p)
{
	return p->format == CAE_PATCH_FORMAT_APPLY_PATCH || p->format == CAE_PATCH_FORMAT_UNIFIED ||
	       p->format == CAE_PATCH_FORMAT_EMPTY;
}

const char *cae_patch_format_name(cae_patch_format f)
{
	switch (f) {
	case CAE_PATCH_FORMAT_EMPTY:
		return "empty";
	case CAE_PATCH_FORMAT_JSON:
		return "json";
	case CAE_PATCH_FORMAT_MARKDOWN:
		return "markdown";
	case CAE_PATCH_FORMAT_APPLY_PATCH:
		return "apply_patch";
	case CAE_PATCH_FORMAT_UNIFIED:
		return "unified";
	}
	return "unknown";
}

const char *cae_patch_type_name(cae_patch_type t)
{
	switch (t) {
	case CAE_PATCH_FILE_EDIT:
		return "file_edit";
	case CAE_PATCH_SHELL_COMMAND:
		return "shell_command";
	case CAE_PATCH_GIT_OPERATION:
		return "git_operation";
	case CAE_PATCH_INVALID:
		return "invalid";
	}
	return "unknown";
}

const char *cae_patch_action_name(cae_patch_action a)
{
	switch (a) {
	case CAE_PATCH_CREATE:
		return "create";
	case CAE_PATCH_UPDATE:
		return "update";
	case CAE_PATCH_DELETE:
		return "delete";
	case CAE_PATCH_APPEND:
		return "append";
	case CAE_PATCH_PATCH:
		return "patch";
	case CAE_PATCH_MOVE:
		return "move";
	case CAE_PATCH_RUN:
		return "run";
	case CAE_PATCH_GIT_ADD:
		return "add";
	case CAE_PATCH_GIT_COMMIT:
		return "commit";
	case CAE_PATCH_GIT_RESET:
		return "reset";
	case CAE_PATCH_GIT_CHECKOUT:
		return "checkout";
	}
	return "unknown";
}

const char *cae_patch_command_meta(const cae_patch_command *c, const char *key)
{
	if (!c || !c->metadata)
		return NULL;
	return json_string_value(json_object_get(c->metadata, key));
}

/* ---- rendering ---- */

static void hunk_stats(const cae_patch_file_op *op, size_t *added, size_t *removed)
{
	*added = *removed = 0;
	for (size_t i = 0; i < op->nhunks; i++)
		for (size_t j = 0; j < op->hunks[i].nlines; j++) {
			if (op->hunks[i].lines[j].kind == '+')
				(*added)++;
			else if (op->hunks[i].lines[j].kind == '-')
				(*removed)++;
		}
}

/* One line of text for the plan: first line only, control characters escaped, cut. Returns 0
 * or -ENOMEM. */
static int plan_put_text(cae_buf *b, const char *s, size_t n, bool quoted)
{
	while (n && (s[n - 1] == '\n' || s[n - 1] == '\r'))
		n--;
	const char *nl = memchr(s, '\n', n);
	size_t first = nl ? (size_t)(nl - s) : n;
	size_t more = 0;
	for (size_t i = first; i < n; i++)
		if (s[i] == '\n')
			more++;
	char buf[512];
	_cleanup_free_ char *clean = cae__utf8_sanitize(s, first, NULL);
	if (!clean)
		return -ENOMEM;
	int r = 0;
	if (quoted)
		r |= cae__buf_puts(b, "\"");
	r |= cae__buf_puts(b, cae__patch_quote(clean, strlen(clean), 200, buf, sizeof(buf)));
	if (quoted)
		r |= cae__buf_puts(b, "\"");
	if (more)
		r |= cae__buf_printf(b, " (+%zu more line%s)", more, more == 1 ? "" : "s");
	return r < 0 ? -ENOMEM : 0;
}

char *cae_patch_plan_text(const cae_patch *p)
{
	cae_buf b;
	cae__buf_init(&b, (size_t)16 << 20);
	int r = 0; /* whole or nothing: a failed append leaves r negative */
	for (size_t i = 0; i < p->ncmds; i++) {
		const cae_patch_command *c = &p->cmds[i];
		if (c->type == CAE_PATCH_INVALID) {
			r |= cae__buf_printf(&b, "[%zu] invalid: ", i + 1);
			r |= plan_put_text(&b, c->invalid, strlen(c->invalid), false);
			r |= cae__buf_puts(&b, "\n");
			continue;
		}
		r |= cae__buf_printf(&b, "[%zu] %s %s ", i + 1, cae_patch_type_name(c->type),
				     cae_patch_action_name(c->action));
		if (c->op && (c->action == CAE_PATCH_PATCH || c->action == CAE_PATCH_MOVE)) {
			size_t a, d;
			hunk_stats(c->op, &a, &d);
			r |= plan_put_text(&b, c->op->path, strlen(c->op->path), false);
			if (c->op->move_to) {
				r |= cae__buf_puts(&b, " -> ");
				r |= plan_put_text(&b, c->op->move_to, strlen(c->op->move_to),
						   false);
			}
			r |= cae__buf_printf(&b, " (%zu hunk%s, +%zu -%zu)", c->op->nhunks,
					     c->op->nhunks == 1 ? "" : "s", a, d);
		} else if (c->type == CAE_PATCH_FILE_EDIT) {
			r |= plan_put_text(&b, c->target, strlen(c->target), false);
			if (c->action != CAE_PATCH_DELETE)
				r |= cae__buf_printf(&b, " (%zu bytes)", c->content_len);
		} else if (c->action == CAE_PATCH_GIT_COMMIT) {
			if (c->target[0]) {
				r |= plan_put_text(&b, c->target, strlen(c->target), false);
				r |= cae__buf_puts(&b, " ");
			}
			r |=
			    plan_put_text(&b, c->content_len ? c->content : "Auto-commit by Worker",
					  c->content_len ? c->content_len : 21, true);
		} else {
			r |= plan_put_text(&b, c->target, strlen(c->target), false);
			if (c->type == CAE_PATCH_SHELL_COMMAND && c->content_len) {
				r |= cae__buf_puts(&b, " ");
				r |= plan_put_text(&b, c->content, c->content_len, false);
			}
		}
		r |= cae__buf_puts(&b, "\n");
	}
	for (size_t i = 0; i < p->nwarnings; i++)
		r |= cae__buf_printf(&b, "warning: %s\n", p->warnings[i]);
	if (p->dropped_warnings)
		r |= cae__buf_printf(&b, "warning: %zu more warnings\n", p->dropped_warnings);
	if (r < 0) {
		cae__buf_clear(&b);
		return NULL;
	}
	return cae__buf_steal(&b, NULL);
}

/* A JSON string from bytes that may be invalid UTF-8 or hold NUL bytes. */
static json_t *json_bytes(const char *s, size_t n)
{
	if (cae__utf8_is_valid(s, n))
		return json_stringn(s, n);
	size_t cl;
	_cleanup_free_ char *clean = cae__utf8_sanitize(s, n, &cl);
	return clean ? json_stringn(clean, cl) : NULL;
}

static int obj_set_new(json_t *o, const char *k, json_t *v)
{
	if (!v)
		return -ENOMEM;
	return json_object_set_new(o, k, v) < 0 ? -ENOMEM : 0;
}

static json_t *hunk_to_json(const cae_patch_hunk *h)
{
	json_t *o = json_object();
	if (!o)
		return NULL;
	int r = 0;
	if (h->ncontexts) {
		json_t *ctx = json_array();
		r |= obj_set_new(o, "contexts", ctx);
		for (size_t i = 0; ctx && i < h->ncontexts; i++)
			r |= json_array_append_new(
			    ctx, json_bytes(h->contexts[i], strlen(h->contexts[i])));
	}
	if (h->has_range) {
		r |= obj_set_new(o, "old_start", json_integer((json_int_t)h->old_start));
		r |= obj_set_new(o, "old_count", json_integer((json_int_t)h->old_count));
		r |= obj_set_new(o, "new_start", json_integer((json_int_t)h->new_start));
		r |= obj_set_new(o, "new_count", json_integer((json_int_t)h->new_count));
	}
	if (h->heading)
		r |= obj_set_new(o, "heading", json_bytes(h->heading, strlen(h->heading)));
	if (h->end_of_file)
		r |= obj_set_new(o, "end_of_file", json_true());
	if (h->old_no_newline)
		r |= obj_set_new(o, "old_no_newline", json_true());
	if (h->new_no_newline)
		r |= obj_set_new(o, "new_no_newline", json_true());
	json_t *lines = json_array();
	r |= obj_set_new(o, "lines", lines);
	cae_buf b;
	cae__buf_init(&b, CAE_PATCH_MAX_LINE + 2);
	for (size_t i = 0; lines && i < h->nlines; i++) {
		b.len = 0;
		r |= cae__buf_append(&b, &h->lines[i].kind, 1);
		r |= cae__buf_append(&b, h->lines[i].text, h->lines[i].len);
		r |= json_array_append_new(lines, json_bytes(b.data, b.len));
	}
	cae__buf_clear(&b);
	if (r) {
		json_decref(o);
		return NULL;
	}
	return o;
}

json_t *cae_patch_command_to_json(const cae_patch_command *c, size_t max_content)
{
	json_t *o = json_object();
	if (!o)
		return NULL;
	int r = 0;
	r |= obj_set_new(o, "type", json_string(cae_patch_type_name(c->type)));
	r |= obj_set_new(o, "action", json_string(cae_patch_action_name(c->action)));
	r |= obj_set_new(o, "target", json_bytes(c->target, strlen(c->target)));
	size_t n = c->content_len;
	if (max_content && n > max_content) {
		n = cae__utf8_floor(c->content, max_content);
		r |= obj_set_new(o, "content_truncated", json_true());
		r |= obj_set_new(o, "content_bytes", json_integer((json_int_t)c->content_len));
	}
	r |= obj_set_new(o, "content", json_bytes(c->content, n));
	if (c->metadata)
		r |= obj_set_new(o, "metadata", json_deep_copy(c->metadata));
	if (c->type == CAE_PATCH_GIT_OPERATION) {
		json_t *a = json_array();
		r |= obj_set_new(o, "args", a);
		for (size_t i = 0; a && i < c->nargs; i++)
			r |= json_array_append_new(a, json_bytes(c->args[i], strlen(c->args[i])));
	}
	if (c->op) {
		r |= obj_set_new(o, "path", json_bytes(c->op->path, strlen(c->op->path)));
		if (c->op->move_to)
			r |= obj_set_new(o, "move_to",
					 json_bytes(c->op->move_to, strlen(c->op->move_to)));
		json_t *hs = json_array();
		r |= obj_set_new(o, "hunks", hs);
		for (size_t i = 0; hs && i < c->op->nhunks; i++)
			r |= json_array_append_new(hs, hunk_to_json(&c->op->hunks[i]));
	}
	if (c->source_line)
		r |= obj_set_new(o, "source_line", json_integer((json_int_t)c->source_line));
	if (c->invalid)
		r |= obj_set_new(o, "error", json_bytes(c->invalid, strlen(c->invalid)));
	if (r) {
		json_decref(o);
		return NULL;
	}
	return o;
}

json_t *cae_patch_to_json(const cae_patch *p)
{
	json_t *o = json_object();
	json_t *cmds = json_array();
	json_t *warns = json_array();
	if (!o || !cmds || !warns) {
		json_decref(o);
		json_decref(cmds);
		json_decref(warns);
		return NULL;
	}
	int r = 0;
	r |= obj_set_new(o, "format", json_string(cae_patch_format_name(p->format)));
	r |= obj_set_new(o, "commands", cmds);
	r |= obj_set_new(o, "warnings", warns);
	for (size_t i = 0; i < p->ncmds; i++)
		r |= json_array_append_new(cmds, cae_patch_command_to_json(&p->cmds[i], 0));
	for (size_t i = 0; i < p->nwarnings; i++)
		r |= json_array_append_new(warns,
					   json_bytes(p->warnings[i], strlen(p->warnings[i])));
	if (r) {
		json_decref(o);
		return NULL;
	}
	return o;
}
