/* The two diff forms agents are trained on.
 *
 * apply_patch (OpenAI's tool; our grammar, lenient where models are sloppy):
 *   Patch      := { prose } Begin { FileOp | blank } End { ... further Begin/End }
 *   Begin      := "*** Begin Patch"          End := "*** End Patch"   (surrounding spaces ok)
 *   FileOp     := "*** Add File: " path NL { "+" text NL }
 *               | "*** Delete File: " path NL
 *               | "*** Update File: " path NL [ "*** Move to: " path NL ] { Hunk }
 *   Hunk       := { "@@" [ " " context-line ] NL } { HunkLine } [ "*** End of File" NL ]
 *   HunkLine   := (" " | "-" | "+") text NL | NL (an empty context line)
 * Several "@@ ctx" lines in a row narrow the position step by step; the first hunk may omit
 * "@@"; "@@ -l,c +l,c @@" (a unified header) is taken as a line-number hint; blank lines at
 * the end of a hunk are dropped; an envelope without "*** End Patch" is an error (cut text).
 *
 * unified: `diff --git` sections (extended headers: new/deleted file mode, rename from/to,
 * index, modes) and/or "--- old" / "+++ new" headers, "@@ -l[,c] +l[,c] @@ [heading]" hunks
 * whose counts delimit the body (a miscounted hunk is read by its line prefixes, with a
 * warning), "\ No newline at end of file", /dev/null for add and delete, a/ b/ prefixes
 * stripped, C-quoted names. Text outside file sections is ignored.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/macro.h"
#include "patch/patch-internal.h"

#include "base/banned.h"

DEFINE_TRIVIAL_CLEANUP_FUNC(cae_patch_file_op *, cae__patch_file_op_free)

/* ---- building ops ---- */

typedef struct hunk_builder {
	cae_patch_file_op *op;
	size_t hcap;
	cae_patch_hunk *cur; /* open hunk or NULL */
	size_t lcap;
} hunk_builder;

static cae_patch_hunk *hb_open(hunk_builder *b, size_t source_line)
{
	cae_patch_file_op *op = b->op;
	if (op->nhunks == b->hcap) {
		size_t ncap = b->hcap ? b->hcap * 2 : 4;
		cae_patch_hunk *n = realloc(op->hunks, ncap * sizeof(*n));
		if (!n)
			return NULL;
		op->hunks = n;
		b->hcap = ncap;
	}
	cae_patch_hunk *h = &op->hunks[op->nhunks++];
	memset(h, 0, sizeof(*h));
	h->source_line = source_line;
	b->cur = h;
	b->lcap = 0;
	return h;
}

static int hb_line(hunk_builder *b, char kind, const char *text, size_t len)
{
	cae_patch_hunk *h = b->cur;
	if (h->nlines == b->lcap) {
		size_t ncap = b->lcap ? b->lcap * 2 : 16;
		cae_patch_line *n = realloc(h->lines, ncap * sizeof(*n));
		if (!n)
			return -ENOMEM;
		h->lines = n;
		b->lcap = ncap;
	}
	h->lines[h->nlines++] = (cae_patch_line){.kind = kind, .text = text, .len = len};
	return 0;
}

static int hb_context(cae_patch_hunk *h, const char *s, size_t n)
{
	char **v = realloc(h->contexts, (h->ncontexts + 1) * sizeof(*v));
	if (!v)
		return -ENOMEM;
	h->contexts = v;
	if (!(v[h->ncontexts] = cae__memdup0(s, n)))
		return -ENOMEM;
	h->ncontexts++;
	return 0;
}

static cae_patch_file_op *op_new(cae_patch_op_kind kind, const char *path, size_t n)
{
	cae_patch_file_op *op = calloc(1, sizeof(*op));
	if (!op)
		return NULL;
	op->kind = kind;
	if (!(op->path = cae__memdup0(path, n))) {
		free(op);
		return NULL;
	}
	return op;
}

/* Hands op to a new command. content: for patch/move the op's diff text; for create the
 * computed file content (built from the '+' lines). */
static int emit_op(cae_patch *p, cae_patch_file_op **opp, const char *section, size_t section_len,
		   size_t source_line, cae_error *err)
{
	cae_patch_file_op *op = *opp;
	cae_patch_command *c;
	int r = cae__patch_add_command(p, &c, err);
	if (r < 0)
		return r;
	c->type = CAE_PATCH_FILE_EDIT;
	c->source_line = source_line;
	free(c->target);
	c->target = strdup(op->path);
	if (!c->target)
		return cae_error_set(err, -ENOMEM, "out of memory");
	if (op->kind == CAE_PATCH_OP_ADD) {
		c->action = CAE_PATCH_CREATE;
		cae_buf b;
		cae__buf_init(&b, SIZE_MAX / 2);
		bool no_nl = false;
		int a = 0; /* the content whole or none: a failed append leaves a negative */
		for (size_t i = 0; i < op->nhunks; i++) {
			for (size_t j = 0; j < op->hunks[i].nlines; j++) {
				a |= cae__buf_append(&b, op->hunks[i].lines[j].text,
						     op->hunks[i].lines[j].len);
				a |= cae__buf_append(&b, "\n", 1);
			}
			no_nl = op->hunks[i].new_no_newline;
		}
		if (a < 0) {
			cae__buf_clear(&b);
			return cae_error_set(err, -ENOMEM, "out of memory");
		}
		if (no_nl && b.len)
			b.data[--b.len] = '\0';
		free(c->content);
		c->content = cae__buf_steal(&b, &c->content_len);
		if (!c->content)
			return cae_error_set(err, -ENOMEM, "out of memory");
	} else if (op->kind == CAE_PATCH_OP_DELETE) {
		c->action = CAE_PATCH_DELETE;
	} else {
		c->action = op->move_to ? CAE_PATCH_MOVE : CAE_PATCH_PATCH;
		free(c->content);
		c->content = cae__memdup0(section, section_len);
		c->content_len = section_len;
		if (!c->content)
			return cae_error_set(err, -ENOMEM, "out of memory");
	}
	c->op = TAKE_PTR(*opp);
	return 0;
}

/* "-l[,c] +l[,c]" at s; returns the bytes used or 0. */
static size_t parse_num(const char *s, size_t n, size_t *v)
{
	size_t i = 0, x = 0;
	while (i < n && s[i] >= '0' && s[i] <= '9') {
		if (x > (SIZE_MAX - 9) / 10)
			return 0;
		x = x * 10 + (size_t)(s[i] - '0');
		i++;
	}
	*v = x;
	return i;
}

static size_t parse_range(const char *s, size_t n, char sign, size_t *start, size_t *count)
{
	if (n < 2 || s[0] != sign)
		return 0;
	size_t i = 1;
	size_t k = parse_num(s + i, n - i, start);
	if (!k)
		return 0;
	i += k;
	*count = 1;
	if (i < n && s[i] == ',') {
		i++;
		k = parse_num(s + i, n - i, count);
		if (!k)
			return 0;
		i += k;
	}
	return i;
}

/* "-a,b +c,d @@ heading" (after the first "@@ "). Fills the hunk's range and heading. */
static bool parse_unified_ranges(const char *s, size_t n, cae_patch_hunk *h, bool *heading_oom)
{
	size_t os, oc, ns, nc;
	size_t i = 0;
	while (i < n && s[i] == ' ')
		i++;
	size_t k = parse_range(s + i, n - i, '-', &os, &oc);
	if (!k)
		return false;
	i += k;
	if (i >= n || s[i] != ' ')
		return false;
	while (i < n && s[i] == ' ')
		i++;
	k = parse_range(s + i, n - i, '+', &ns, &nc);
	if (!k)
		return false;
	i += k;
	while (i < n && s[i] == ' ')
		i++;
	if (!cae__patch_starts_with(s + i, n - i, "@@"))
		return false;
	i += 2;
	h->has_range = true;
	h->old_start = os;
	h->old_count = oc;
	h->new_start = ns;
	h->new_count = nc;
	const char *hd = s + i;
	size_t hn = n - i;
	cae__patch_trim(&hd, &hn);
	if (hn && !(h->heading = cae__memdup0(hd, hn)))
		*heading_oom = true;
	return true;
}

static int oom(cae_error *err)
{
	return cae_error_set(err, -ENOMEM, "out of memory");
}

/* ---- apply_patch ---- */

static bool marker(const patch_line *l, const char *m, const char **rest, size_t *rn)
{
	const char *s = l->p;
	size_t n = l->len;
	cae__patch_trim(&s, &n);
	if (!cae__patch_starts_with(s, n, m))
		return false;
	*rest = s + strlen(m);
	*rn = n - strlen(m);
	cae__patch_trim(rest, rn);
	return true;
}

static bool trimmed_is(const patch_line *l, const char *lit)
{
	const char *s = l->p;
	size_t n = l->len;
	cae__patch_trim(&s, &n);
	return cae__patch_eq(s, n, lit);
}

static int ap_path(const patch_line *l, const char *what, const char *s, size_t n, cae_error *err)
{
	if (n == 0)
		return cae_error_set(err, -EINVAL, "line %zu: '*** %s' without a path", l->lineno,
				     what);
	if (memchr(s, '\0', n))
		return cae_error_set(err, -EINVAL, "line %zu: path contains a NUL byte", l->lineno);
	return 0;
}

static int ap_add(cae_patch *p, patch_lines *it, const patch_line *hdr, const char *path, size_t pn,
		  cae_error *err)
{
	_cleanup_(cae__patch_file_op_freep) cae_patch_file_op *op =
	    op_new(CAE_PATCH_OP_ADD, path, pn);
	if (!op)
		return oom(err);
	hunk_builder b = {.op = op};
	patch_line l;
	while (cae__patch_lines_peek(it, &l)) {
		if (l.len && l.p[0] == '+') {
			/* fine */
		} else if (l.len == 0) {
			/* a blank line between '+' lines is an empty line the model left bare */
			patch_lines la = *it;
			patch_line nx;
			cae__patch_lines_next(&la, &nx);
			if (!cae__patch_lines_peek(&la, &nx) || !nx.len || nx.p[0] != '+')
				break;
		} else {
			break;
		}
		cae__patch_lines_next(it, &l);
		if (!b.cur && !hb_open(&b, l.lineno))
			return oom(err);
		if (hb_line(&b, '+', l.len ? l.p + 1 : l.p, l.len ? l.len - 1 : 0) < 0)
			return oom(err);
	}
	return emit_op(p, &op, NULL, 0, hdr->lineno, err);
}

/* Closes the open hunk: drops trailing bare blank lines (pending), checks it has lines. */
static int ap_close_hunk(hunk_builder *b, const char *path, cae_error *err)
{
	if (!b->cur)
		return 0;
	cae_patch_hunk *h = b->cur;
	b->cur = NULL;
	if (h->nlines == 0)
		return cae_error_set(err, -EINVAL, "line %zu: hunk of %s has no lines",
				     h->source_line, path);
	return 0;
}

static int ap_update(cae_patch *p, patch_lines *it, const patch_line *hdr, const char *path,
		     size_t pn, cae_error *err)
{
	_cleanup_(cae__patch_file_op_freep) cae_patch_file_op *op =
	    op_new(CAE_PATCH_OP_UPDATE, path, pn);
	if (!op)
		return oom(err);
	const char *section = hdr->p;
	patch_line l;
	const char *rest;
	size_t rn;
	if (cae__patch_lines_peek(it, &l) && marker(&l, "*** Move to:", &rest, &rn)) {
		int r = ap_path(&l, "Move to:", rest, rn, err);
		if (r < 0)
			return r;
		cae__patch_lines_next(it, &l);
		if (!cae__patch_eq(rest, rn, op->path) && !(op->move_to = cae__memdup0(rest, rn)))
			return oom(err);
	}
	hunk_builder b = {.op = op};
	size_t pending_blank = 0; /* bare empty lines not yet known to be inside the hunk */
	const char *pending_at = NULL;
	int r;
	while (cae__patch_lines_peek(it, &l)) {
		if (l.len == 0) {
			cae__patch_lines_next(it, &l);
			if (b.cur) {
				if (!pending_blank)
					pending_at = l.p;
				pending_blank++;
			}
			continue;
		}
		const char *t = l.p;
		size_t tn = l.len;
		cae__patch_trim(&t, &tn);
		if (cae__patch_starts_with(l.p, l.len, "***")) { /* markers start the line */
			if (!cae__patch_eq(t, tn, "*** End of File"))
				break;
			cae__patch_lines_next(it, &l);
			if (!b.cur || b.cur->nlines == 0)
				return cae_error_set(
				    err, -EINVAL,
				    "line %zu: '*** End of File' without hunk lines "
				    "before it",
				    l.lineno);
			b.cur->end_of_file = true;
			pending_blank = 0;
			if ((r = ap_close_hunk(&b, op->path, err)) < 0)
				return r;
			continue;
		}
		if (l.p[0] == '@' && cae__patch_starts_with(t, tn, "@@")) {
			cae__patch_lines_next(it, &l);
			pending_blank = 0;
			if (b.cur && b.cur->nlines > 0 &&
			    (r = ap_close_hunk(&b, op->path, err)) < 0)
				return r;
			if (!b.cur && !hb_open(&b, l.lineno))
				return oom(err);
			const char *ctx = t + 2;
			size_t cn = tn - 2;
			bool hoom = false;
			if (!b.cur->has_range && parse_unified_ranges(ctx, cn, b.cur, &hoom)) {
				if (hoom)
					return oom(err);
				continue;
			}
			if (cn && ctx[0] == ' ') {
				ctx++;
				cn--;
			}
			if (cn && hb_context(b.cur, ctx, cn) < 0)
				return oom(err);
			continue;
		}
		char k = l.p[0];
		if (k != ' ' && k != '-' && k != '+') {
			char q[160];
			return cae_error_set(
			    err, -EINVAL,
			    "line %zu: unexpected line in the update of %s: \"%s\" "
			    "(hunk lines start with ' ', '-' or '+', hunks with '@@')",
			    l.lineno, op->path, cae__patch_quote(l.p, l.len, 80, q, sizeof(q)));
		}
		cae__patch_lines_next(it, &l);
		if (!b.cur && !hb_open(&b, l.lineno))
			return oom(err);
		for (; pending_blank; pending_blank--)
			if (hb_line(&b, ' ', pending_at, 0) < 0)
				return oom(err);
		if (hb_line(&b, k, l.p + 1, l.len - 1) < 0)
			return oom(err);
	}
	if ((r = ap_close_hunk(&b, op->path, err)) < 0)
		return r;
	if (op->nhunks == 0 && !op->move_to)
		return cae_error_set(err, -EINVAL, "line %zu: '*** Update File: %s' has no hunks",
				     hdr->lineno, op->path);
	/* the section's text, for the command's content: header to the last line read */
	size_t slen = (size_t)(it->cur - section);
	return emit_op(p, &op, section, slen, hdr->lineno, err);
}

int cae__patch_parse_apply_patch(cae_patch *p, const char *text, size_t len, size_t first_lineno,
				 cae_error *err)
{
	patch_lines it;
	patch_line l;
	cae__patch_lines_init(&it, text, len, first_lineno);
	size_t begin_line = 0;
	bool in = false, seen = false;
	while (cae__patch_lines_next(&it, &l)) {
		if (!in) {
			if (cae__patch_line_is_begin_patch(&l)) {
				in = seen = true;
				begin_line = l.lineno;
			}
			continue;
		}
		const char *rest;
		size_t rn;
		int r;
		if (trimmed_is(&l, ""))
			continue;
		if (trimmed_is(&l, "*** End Patch")) {
			in = false;
			continue;
		}
		if (marker(&l, "*** Add File:", &rest, &rn)) {
			if ((r = ap_path(&l, "Add File:", rest, rn, err)) < 0 ||
			    (r = ap_add(p, &it, &l, rest, rn, err)) < 0)
				return r;
		} else if (marker(&l, "*** Delete File:", &rest, &rn)) {
			if ((r = ap_path(&l, "Delete File:", rest, rn, err)) < 0)
				return r;
			_cleanup_(cae__patch_file_op_freep) cae_patch_file_op *op =
			    op_new(CAE_PATCH_OP_DELETE, rest, rn);
			if (!op)
				return oom(err);
			if ((r = emit_op(p, &op, NULL, 0, l.lineno, err)) < 0)
				return r;
		} else if (marker(&l, "*** Update File:", &rest, &rn)) {
			if ((r = ap_path(&l, "Update File:", rest, rn, err)) < 0 ||
			    (r = ap_update(p, &it, &l, rest, rn, err)) < 0)
				return r;
		} else {
			char q[160];
			return cae_error_set(
			    err, -EINVAL,
			    "line %zu: expected '*** Add File: <path>', '*** Delete "
			    "File: <path>', '*** Update File: <path>' or '*** End "
			    "Patch', got \"%s\"",
			    l.lineno, cae__patch_quote(l.p, l.len, 80, q, sizeof(q)));
		}
	}
	if (in)
		return cae_error_set(
		    err, -EINVAL,
		    "line %zu: '*** Begin Patch' without '*** End Patch' (the patch "
		    "may be cut short)",
		    begin_line);
	if (!seen)
		return cae_error_set(err, -EINVAL, "no '*** Begin Patch' line found");
	return 0;
}

/* ---- unified diffs ---- */

/* A C-quoted name as git writes it ("a/x\ty"), appended to out, which must have room for n
 * bytes (cae__buf_reserve): a name is never longer than its quoted form, so no append here
 * allocates or fails. Returns bytes consumed or 0. */
static size_t unquote(const char *s, size_t n, cae_buf *out)
{
	if (n < 2 || s[0] != '"')
		return 0;
	size_t i = 1;
	while (i < n) {
		char c = s[i];
		if (c == '"')
			return i + 1;
		if (c == '\\' && i + 1 < n) {
			char e = s[i + 1];
			char v;
			if (e >= '0' && e <= '7') {
				unsigned x = 0;
				size_t k = 0;
				while (k < 3 && i + 1 + k < n && s[i + 1 + k] >= '0' &&
				       s[i + 1 + k] <= '7') {
					x = x * 8 + (unsigned)(s[i + 1 + k] - '0');
					k++;
				}
				v = (char)x;
				i += 1 + k;
			} else {
				v = e == 'n'   ? '\n'
				    : e == 't' ? '\t'
				    : e == 'r' ? '\r'
				    : e == 'a' ? '\a'
				    : e == 'b' ? '\b'
				    : e == 'f' ? '\f'
				    : e == 'v' ? '\v'
					       : e;
				i += 2;
			}
			DISCARD_RESULT(
			    cae__buf_append(out, &v, 1)); /* cannot fail: room reserved */
			continue;
		}
		DISCARD_RESULT(cae__buf_append(out, &c, 1)); /* cannot fail: room reserved */
		i++;
	}
	return 0;
}

/* The name on a "--- " / "+++ " line: quoted, or up to a tab (timestamps follow a tab). */
static char *header_name(const char *s, size_t n)
{
	cae_buf b;
	cae__buf_init(&b, n + 1);
	if (n && s[0] == '"' && cae__buf_reserve(&b, n) < 0)
		return NULL;
	if (n && s[0] == '"' && unquote(s, n, &b)) {
		char *r = cae__buf_steal(&b, NULL);
		return r;
	}
	cae__buf_clear(&b);
	const char *tab = memchr(s, '\t', n);
	if (tab)
		n = (size_t)(tab - s);
	cae__patch_trim(&s, &n);
	return cae__memdup0(s, n);
}

static bool is_dev_null(const char *s)
{
	return strcmp(s, "/dev/null") == 0;
}

/* Drops the a/ and b/ prefixes git puts on names. */
static void strip_prefixes(char *old_name, char *new_name)
{
	bool o = old_name && !is_dev_null(old_name);
	bool n = new_name && !is_dev_null(new_name);
	bool oa = o && strncmp(old_name, "a/", 2) == 0 && old_name[2];
	bool nb = n && strncmp(new_name, "b/", 2) == 0 && new_name[2];
	if ((o && !oa) || (n && !nb))
		return; /* both sides must carry the prefix (or be /dev/null) */
	if (oa)
		memmove(old_name, old_name + 2, strlen(old_name + 2) + 1);
	if (nb)
		memmove(new_name, new_name + 2, strlen(new_name + 2) + 1);
}

/* "diff --git a/x b/y": the two names (prefixes kept), for sections without ---/+++. */
static void git_line_names(const char *s, size_t n, char **a, char **b)
{
	*a = *b = NULL;
	cae_buf q;
	cae__buf_init(&q, n + 1);
	if (n && s[0] == '"') {
		size_t k = cae__buf_reserve(&q, n) == 0 ? unquote(s, n, &q) : 0;
		if (!k) {
			cae__buf_clear(&q);
			return;
		}
		*a = cae__buf_steal(&q, NULL);
		const char *r = s + k;
		size_t rn = n - k;
		cae__patch_trim(&r, &rn);
		*b = header_name(r, rn);
		return;
	}
	cae__buf_clear(&q);
	/* unquoted: prefer the split where both halves name the same path */
	const char *best = NULL;
	for (const char *sp = memchr(s, ' ', n); sp;
	     sp = memchr(sp + 1, ' ', n - (size_t)(sp + 1 - s))) {
		size_t left = (size_t)(sp - s), right = n - left - 1;
		if (left >= 2 && right >= 2 && left == right &&
		    memcmp(s + 2, sp + 3, left - 2) == 0) {
			best = sp;
			break;
		}
		if (cae__patch_starts_with(sp + 1, right, "b/") || !best)
			best = sp;
		if ((size_t)(sp + 1 - s) >= n)
			break;
	}
	if (!best)
		return;
	*a = cae__memdup0(s, (size_t)(best - s));
	const char *r = best + 1;
	size_t rn = n - (size_t)(r - s);
	if (rn && r[0] == '"')
		*b = header_name(r, rn);
	else
		*b = cae__memdup0(r, rn);
}

typedef struct git_section {
	bool active;
	size_t lineno;
	const char *start;
	char *a, *b; /* names from the diff --git line */
	char *rename_from, *rename_to;
	bool new_file, deleted, copy;
} git_section;

static void git_section_clear(git_section *g)
{
	free(g->a);
	free(g->b);
	free(g->rename_from);
	free(g->rename_to);
	memset(g, 0, sizeof(*g));
}

/* A line that starts a new file: "diff --git ", or "--- " + "+++ " (+ "@@" when strict). */
static bool header_ahead(const patch_lines *it, bool strict)
{
	patch_line l, l2, l3;
	patch_lines la = *it;
	if (!cae__patch_lines_next(&la, &l))
		return false;
	if (cae__patch_starts_with(l.p, l.len, "diff --git "))
		return true;
	if (!cae__patch_starts_with(l.p, l.len, "--- "))
		return false;
	if (!cae__patch_lines_next(&la, &l2) || !cae__patch_starts_with(l2.p, l2.len, "+++ "))
		return false;
	if (!strict)
		return true;
	return cae__patch_lines_next(&la, &l3) && cae__patch_starts_with(l3.p, l3.len, "@@");
}

static bool is_hunk_line(const patch_line *l)
{
	return l->len && (l->p[0] == ' ' || l->p[0] == '-' || l->p[0] == '+');
}

/* Reads one "@@" hunk (the header line is next in it). */
static int unified_hunk(cae_patch *p, patch_lines *it, hunk_builder *b, const char *path,
			cae_error *err)
{
	patch_line l;
	cae__patch_lines_next(it, &l);
	cae_patch_hunk *h = hb_open(b, l.lineno);
	if (!h)
		return oom(err);
	bool hoom = false;
	if (!parse_unified_ranges(l.p + 2, l.len - 2, h, &hoom)) {
		/* a bare "@@" (or unreadable numbers): read the body by its prefixes */
		const char *s = l.p + 2;
		size_t n = l.len - 2;
		cae__patch_trim(&s, &n);
		if (cae__patch_starts_with(s, n, "@@")) {
			s += 2;
			n -= 2;
			cae__patch_trim(&s, &n);
		}
		if (n && !(h->heading = cae__memdup0(s, n)))
			return oom(err);
	}
	if (hoom)
		return oom(err);
	bool counted = h->has_range;
	size_t old_left = h->old_count, new_left = h->new_count;
	char prev = 0;
	while (cae__patch_lines_peek(it, &l)) {
		char c = l.len ? l.p[0] : 0;
		if (c == '\\') {
			cae__patch_lines_next(it, &l);
			if (prev == '-' || prev == ' ')
				h->old_no_newline = true;
			if (prev == '+' || prev == ' ')
				h->new_no_newline = true;
			if (prev)
				h->end_of_file = true;
			continue;
		}
		if (counted && old_left == 0 && new_left == 0) {
			/* the header's counts are used up: more hunk lines mean a miscount */
			if (!is_hunk_line(&l) || header_ahead(it, false))
				break;
			counted = false;
		}
		if (counted ? header_ahead(it, true) : header_ahead(it, false))
			break;
		if (c == 0) {
			/* an empty line: an empty context line whose space was lost */
			if (!counted) {
				patch_lines la = *it;
				patch_line nx;
				cae__patch_lines_next(&la, &nx);
				if (!cae__patch_lines_peek(&la, &nx) || !is_hunk_line(&nx) ||
				    header_ahead(&la, false))
					break;
			}
			c = ' ';
		} else if (c != ' ' && c != '-' && c != '+') {
			break;
		}
		if (counted) {
			if ((c != '+' && old_left == 0) || (c != '-' && new_left == 0))
				counted = false;
			else {
				if (c != '+')
					old_left--;
				if (c != '-')
					new_left--;
			}
		}
		cae__patch_lines_next(it, &l);
		if (hb_line(b, c, l.len ? l.p + 1 : l.p, l.len ? l.len - 1 : 0) < 0)
			return oom(err);
		prev = c;
	}
	b->cur = NULL;
	if (h->nlines == 0)
		return cae_error_set(err, -EINVAL, "line %zu: hunk of %s has no lines",
				     h->source_line, path);
	if (h->has_range) {
		size_t o = 0, n = 0;
		for (size_t i = 0; i < h->nlines; i++) {
			o += h->lines[i].kind != '+';
			n += h->lines[i].kind != '-';
		}
		if (o != h->old_count || n != h->new_count)
			cae__patch_warn(
			    p,
			    "line %zu: the hunk header of %s says -%zu,%zu +%zu,%zu but the "
			    "hunk has %zu old and %zu new lines; using the lines given",
			    h->source_line, path, h->old_start, h->old_count, h->new_start,
			    h->new_count, o, n);
	}
	return 0;
}

static int unified_hunks(cae_patch *p, patch_lines *it, cae_patch_file_op *op, cae_error *err)
{
	hunk_builder b = {.op = op};
	patch_line l;
	while (cae__patch_lines_peek(it, &l) && cae__patch_starts_with(l.p, l.len, "@@")) {
		int r = unified_hunk(p, it, &b, op->path, err);
		if (r < 0)
			return r;
	}
	return 0;
}

/* Builds the op of a file section from its names and emits it. */
static int unified_file(cae_patch *p, patch_lines *it, git_section *g, char *old_name,
			char *new_name, const char *section, size_t lineno, cae_error *err)
{
	_cleanup_free_ char *on = old_name, *nn = new_name;
	strip_prefixes(on, nn);
	if (g->rename_from && g->rename_to && (!on || !is_dev_null(on)) &&
	    (!nn || !is_dev_null(nn))) {
		free(on);
		free(nn);
		on = strdup(g->rename_from);
		nn = strdup(g->rename_to);
		if (!on || !nn)
			return oom(err);
	}
	if (!on || !nn || (is_dev_null(on) && is_dev_null(nn)) || !on[0] || !nn[0])
		return cae_error_set(err, -EINVAL, "line %zu: file header without usable names",
				     lineno);
	cae_patch_op_kind kind = is_dev_null(on)   ? CAE_PATCH_OP_ADD
				 : is_dev_null(nn) ? CAE_PATCH_OP_DELETE
						   : CAE_PATCH_OP_UPDATE;
	const char *path = kind == CAE_PATCH_OP_ADD ? nn : on;
	_cleanup_(cae__patch_file_op_freep) cae_patch_file_op *op =
	    op_new(kind, path, strlen(path));
	if (!op)
		return oom(err);
	if (kind == CAE_PATCH_OP_UPDATE && strcmp(on, nn) != 0 && !(op->move_to = strdup(nn)))
		return oom(err);
	int r = it ? unified_hunks(p, it, op, err) : 0;
	if (r < 0)
		return r;
	for (size_t i = 0; kind == CAE_PATCH_OP_ADD && i < op->nhunks; i++)
		for (size_t j = 0; j < op->hunks[i].nlines; j++)
			if (op->hunks[i].lines[j].kind != '+')
				return cae_error_set(
				    err, -EINVAL,
				    "line %zu: the hunk of new file %s has context "
				    "or removed lines",
				    op->hunks[i].source_line, path);
	if (kind == CAE_PATCH_OP_UPDATE && op->nhunks == 0 && !op->move_to) {
		if (g->active && !it)
			return 0; /* a mode-only change: nothing to do here */
		return cae_error_set(err, -EINVAL, "line %zu: no hunks for %s", lineno, path);
	}
	size_t slen = it ? (size_t)(it->cur - section) : 0;
	return emit_op(p, &op, section, slen, lineno, err);
}

/* A diff --git section that had no ---/+++ lines: a rename, an empty new or deleted file. */
static int git_section_finish(cae_patch *p, git_section *g, cae_error *err)
{
	if (!g->active)
		return 0;
	int r = 0;
	if (g->copy) {
		r = cae_error_set(err, -EINVAL,
				  "line %zu: file copies are not supported (write "
				  "the new file as an added file)",
				  g->lineno);
	} else if (g->rename_from && g->rename_to) {
		r = unified_file(p, NULL, g, strdup(g->rename_from), strdup(g->rename_to), NULL,
				 g->lineno, err);
	} else if (g->new_file || g->deleted) {
		char *a = g->a ? strdup(g->a) : NULL, *b = g->b ? strdup(g->b) : NULL;
		if (g->new_file) {
			free(a);
			a = strdup("/dev/null");
		} else {
			free(b);
			b = strdup("/dev/null");
		}
		r = unified_file(p, NULL, g, a, b, NULL, g->lineno, err);
	} else {
		char q[160];
		cae__patch_warn(p, "line %zu: skipped a change of file mode only (%s)", g->lineno,
				g->a ? cae__patch_quote(g->a, strlen(g->a), 80, q, sizeof(q))
				     : "?");
	}
	git_section_clear(g);
	return r;
}

static int set_str(char **dst, const char *s, size_t n)
{
	free(*dst);
	*dst = header_name(s, n);
	return *dst ? 0 : -ENOMEM;
}

int cae__patch_parse_unified(cae_patch *p, const char *text, size_t len, size_t first_lineno,
			     const char *default_path, cae_error *err)
{
	size_t before = p->ncmds;
	patch_lines it;
	patch_line l;
	cae__patch_lines_init(&it, text, len, first_lineno);
	git_section g = {0};
	int r = 0;
	while (r == 0 && cae__patch_lines_peek(&it, &l)) {
		const char *s = l.p;
		size_t n = l.len;
		if (cae__patch_starts_with(s, n, "diff --git ")) {
			if ((r = git_section_finish(p, &g, err)) < 0)
				break;
			cae__patch_lines_next(&it, &l);
			g.active = true;
			g.lineno = l.lineno;
			g.start = l.p;
			git_line_names(s + 11, n - 11, &g.a, &g.b);
			continue;
		}
		if (cae__patch_starts_with(s, n, "Binary files ") ||
		    cae__patch_starts_with(s, n, "GIT binary patch")) {
			r = cae_error_set(err, -EINVAL,
					  "line %zu: binary patches are not supported", l.lineno);
			break;
		}
		if (cae__patch_starts_with(s, n, "--- ") && header_ahead(&it, false)) {
			size_t lineno = l.lineno;
			const char *section = g.active ? g.start : l.p;
			patch_line l2;
			cae__patch_lines_next(&it, &l);
			cae__patch_lines_next(&it, &l2);
			char *on = header_name(l.p + 4, l.len - 4);
			char *nn = header_name(l2.p + 4, l2.len - 4);
			if (!on || !nn) {
				free(on);
				free(nn);
				r = oom(err);
				break;
			}
			r = unified_file(p, &it, &g, on, nn, section, g.active ? g.lineno : lineno,
					 err);
			git_section_clear(&g);
			continue;
		}
		if (g.active) {
			const char *rest;
			size_t rn;
			cae__patch_lines_next(&it, &l);
			if (cae__patch_starts_with(s, n, "rename from ") ||
			    cae__patch_starts_with(s, n, "rename old ")) {
				rest = s + (s[7] == 'f' ? 12 : 11);
				rn = n - (size_t)(rest - s);
				if (set_str(&g.rename_from, rest, rn) < 0)
					r = oom(err);
			} else if (cae__patch_starts_with(s, n, "rename to ") ||
				   cae__patch_starts_with(s, n, "rename new ")) {
				rest = s + (s[7] == 't' ? 10 : 11);
				rn = n - (size_t)(rest - s);
				if (set_str(&g.rename_to, rest, rn) < 0)
					r = oom(err);
			} else if (cae__patch_starts_with(s, n, "new file mode")) {
				g.new_file = true;
			} else if (cae__patch_starts_with(s, n, "deleted file mode")) {
				g.deleted = true;
			} else if (cae__patch_starts_with(s, n, "copy from ") ||
				   cae__patch_starts_with(s, n, "copy to ")) {
				g.copy = true;
			} else if (cae__patch_starts_with(s, n, "old mode") ||
				   cae__patch_starts_with(s, n, "new mode") ||
				   cae__patch_starts_with(s, n, "index ") ||
				   cae__patch_starts_with(s, n, "similarity index") ||
				   cae__patch_starts_with(s, n, "dissimilarity index")) {
				/* nothing to apply */
			} else {
				r = git_section_finish(p, &g, err);
			}
			continue;
		}
		if (cae__patch_starts_with(s, n, "@@") && default_path) {
			_cleanup_(cae__patch_file_op_freep) cae_patch_file_op *op =
			    op_new(CAE_PATCH_OP_UPDATE, default_path, strlen(default_path));
			if (!op) {
				r = oom(err);
				break;
			}
			const char *section = l.p;
			size_t lineno = l.lineno;
			if ((r = unified_hunks(p, &it, op, err)) < 0)
				break;
			r = emit_op(p, &op, section, (size_t)(it.cur - section), lineno, err);
			continue;
		}
		cae__patch_lines_next(&it, &l); /* prose between files */
	}
	if (r == 0)
		r = git_section_finish(p, &g, err);
	git_section_clear(&g);
	if (r < 0)
		return r;
	if (p->ncmds == before && p->nwarnings == 0)
		return cae_error_set(err, -EINVAL,
				     "line %zu: no file changes found in the diff (expected '--- "
				     "a/<path>' and '+++ b/<path>' headers, then '@@' hunks)",
				     first_lineno);
	return 0;
}
