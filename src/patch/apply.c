/* Applying hunks in memory, and checking a whole patch before anything is written.
 *
 * Locating a hunk: its old lines (context and removed) are searched in the file from the end
 * of the previous hunk, first byte-exact, then ignoring trailing whitespace, then ignoring
 * all whitespace. The search is a Rabin-Karp scan over line hashes (mod 2^61-1), so one hunk
 * costs O(file bytes) whatever its length, and a patch O(file bytes x hunks); a hash match
 * is verified line by line before it is taken. Unified line numbers are hints: the match
 * nearest to the expected line (shifted by the offset the previous hunk was found at) wins.
 * All hunks are located on the original text first, then the new text is built in one pass.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/macro.h"
#include "patch/patch-internal.h"

#include "base/banned.h"

__extension__ typedef unsigned __int128 u128;

#define M61 ((UINT64_C(1) << 61) - 1)
#define HASH_BASE (UINT64_C(0x5bd1e9955bd1e995) % M61)

enum { MODE_EXACT, MODE_RSTRIP, MODE_NOWS, MODE_COUNT };

static uint64_t mod61(uint64_t x)
{
	x = (x & M61) + (x >> 61);
	if (x >= M61)
		x -= M61;
	return x;
}

static uint64_t mulmod(uint64_t a, uint64_t b)
{
	u128 x = (u128)a * b;
	uint64_t r = (uint64_t)(x & M61) + (uint64_t)(x >> 61);
	while (r >= M61)
		r -= M61;
	return r;
}

static uint64_t addmod(uint64_t a, uint64_t b)
{
	uint64_t r = a + b;
	return r >= M61 ? r - M61 : r;
}

static uint64_t submod(uint64_t a, uint64_t b)
{
	return a >= b ? a - b : a + M61 - b;
}

static bool ws(char c)
{
	return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
}

static uint64_t line_hash(const char *p, size_t n, int mode)
{
	uint64_t h = UINT64_C(0xcbf29ce484222325);
	if (mode == MODE_RSTRIP)
		while (n && ws(p[n - 1]))
			n--;
	for (size_t i = 0; i < n; i++) {
		if (mode == MODE_NOWS && ws(p[i]))
			continue;
		h ^= (unsigned char)p[i];
		h *= UINT64_C(0x100000001b3);
	}
	return mod61(h) + 1 < M61 ? mod61(h) + 1 : 1;
}

static bool line_eq(const char *a, size_t an, const char *b, size_t bn, int mode)
{
	if (mode == MODE_EXACT)
		return an == bn && memcmp(a, b, an) == 0;
	if (mode == MODE_RSTRIP) {
		while (an && ws(a[an - 1]))
			an--;
		while (bn && ws(b[bn - 1]))
			bn--;
		return an == bn && memcmp(a, b, an) == 0;
	}
	size_t i = 0, j = 0;
	for (;;) {
		while (i < an && ws(a[i]))
			i++;
		while (j < bn && ws(b[j]))
			j++;
		if (i == an || j == bn)
			return i == an && j == bn;
		if (a[i] != b[j])
			return false;
		i++;
		j++;
	}
}

/* ---- the old text, line by line ---- */

typedef struct ftext {
	const char *s;
	size_t len;
	size_t nlines;
	const char *eol; /* the file's line ending for added lines: "\n" or "\r\n" */
} ftext;

/* The line at off: content [off, off+*clen) without its ending; returns the next offset. */
static size_t fline(const ftext *f, size_t off, size_t *clen)
{
	const char *nl = memchr(f->s + off, '\n', f->len - off);
	size_t e = nl ? (size_t)(nl - f->s) : f->len;
	size_t n = e - off;
	if (nl && n && f->s[e - 1] == '\r')
		n--;
	*clen = n;
	return nl ? e + 1 : f->len;
}

static size_t advance(const ftext *f, size_t off, size_t count)
{
	size_t cl;
	while (count-- && off < f->len)
		off = fline(f, off, &cl);
	return off;
}

static void ftext_init(ftext *f, const char *s, size_t len)
{
	f->s = s;
	f->len = len;
	size_t lf = 0, crlf = 0;
	const char *p = s, *end = s + len;
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		if (!nl)
			break;
		if (nl > s && nl[-1] == '\r')
			crlf++;
		else
			lf++;
		p = nl + 1;
	}
	f->nlines = lf + crlf + (len && s[len - 1] != '\n' ? 1 : 0);
	f->eol = crlf > lf ? "\r\n" : "\n";
}

/* ---- patterns and searching ---- */

typedef struct pattern {
	const cae_patch_line **l;
	size_t k;
} pattern;

static bool window_eq(const ftext *f, size_t off, const pattern *pt, int mode)
{
	for (size_t j = 0; j < pt->k; j++) {
		if (off >= f->len)
			return false;
		size_t cl;
		size_t next = fline(f, off, &cl);
		if (!line_eq(f->s + off, cl, pt->l[j]->text, pt->l[j]->len, mode))
			return false;
		off = next;
	}
	return true;
}

typedef struct cand {
	size_t pos, off, dist;
} cand;

static int cand_cmp(const void *a, const void *b)
{
	const cand *x = a, *y = b;
	if (x->dist != y->dist)
		return x->dist < y->dist ? -1 : 1;
	return x->pos < y->pos ? -1 : x->pos > y->pos;
}

/* Finds pt (k >= 1) at a line >= from (offset from_off). Without a hint the first match
 * wins, with one the nearest; early: stop scanning once no later line can be nearer than a
 * hash match already seen (*stopped tells). Returns 1 and *pos, *off, 0 when absent, or
 * -ENOMEM. */
static int search_scan(const ftext *f, size_t from, size_t from_off, const pattern *pt, int mode,
		       bool have_hint, size_t hint, bool early, bool *stopped, size_t *pos,
		       size_t *off)
{
	size_t k = pt->k;
	uint64_t ph = 0, bk1 = 1;
	for (size_t j = 0; j < k; j++) {
		ph = addmod(mulmod(ph, HASH_BASE), line_hash(pt->l[j]->text, pt->l[j]->len, mode));
		if (j)
			bk1 = mulmod(bk1, HASH_BASE);
	}
	uint64_t w = 0;
	size_t lead = from_off, trail = from_off, cl;
	for (size_t j = 0; j < k; j++) {
		if (lead >= f->len)
			return 0;
		size_t next = fline(f, lead, &cl);
		w = addmod(mulmod(w, HASH_BASE), line_hash(f->s + lead, cl, mode));
		lead = next;
	}
	cand *cs = NULL;
	size_t nc = 0, cap = 0;
	size_t p = from;
	bool have_before = false; /* a candidate before the hint, the nearest one last */
	size_t before = 0;
	for (;;) {
		/* with a hint, stop once no later position can be nearer than a candidate found */
		if (early && have_hint && p > hint &&
		    ((have_before && p - hint > hint - before) || (nc && cs[nc - 1].pos >= hint))) {
			*stopped = true;
			break;
		}
		if (w == ph) {
			if (!have_hint) {
				if (window_eq(f, trail, pt, mode)) {
					*pos = p;
					*off = trail;
					return 1;
				}
			} else {
				if (nc == cap) {
					size_t ncap = cap ? cap * 2 : 16;
					cand *n = realloc(cs, ncap * sizeof(*n));
					if (!n) {
						free(cs);
						return -ENOMEM;
					}
					cs = n;
					cap = ncap;
				}
				size_t d = p >= hint ? (p - hint) * 2 : (hint - p) * 2 + 1;
				cs[nc++] = (cand){.pos = p, .off = trail, .dist = d};
				if (p < hint) {
					have_before = true;
					before = p;
				}
			}
		}
		if (lead >= f->len)
			break;
		size_t nl = fline(f, lead, &cl);
		uint64_t hin = line_hash(f->s + lead, cl, mode);
		size_t nt = fline(f, trail, &cl);
		uint64_t hout = line_hash(f->s + trail, cl, mode);
		w = addmod(mulmod(submod(w, mulmod(hout, bk1)), HASH_BASE), hin);
		lead = nl;
		trail = nt;
		p++;
	}
	int found = 0;
	if (nc) {
		qsort(cs, nc, sizeof(*cs), cand_cmp);
		for (size_t i = 0; i < nc && !found; i++)
			if (window_eq(f, cs[i].off, pt, mode)) {
				*pos = cs[i].pos;
				*off = cs[i].off;
				found = 1;
			}
	}
	free(cs);
	return found;
}

static int search(const ftext *f, size_t from, size_t from_off, const pattern *pt, int mode,
		  bool have_hint, size_t hint, size_t *pos, size_t *off)
{
	bool stopped = false;
	int r = search_scan(f, from, from_off, pt, mode, have_hint, hint, true, &stopped, pos, off);
	if (r == 0 && stopped) /* only hash collisions near the hint: look at everything */
		r = search_scan(f, from, from_off, pt, mode, have_hint, hint, false, &stopped, pos,
				off);
	return r;
}

/* End-anchored: the pattern must end the file, or be followed only by blank lines (a few). */
static bool search_eof(const ftext *f, size_t from, size_t from_off, const pattern *pt, int mode,
		       size_t *pos, size_t *off)
{
	if (pt->k > f->nlines)
		return false;
	for (size_t t = 0; t <= 8 && pt->k + t <= f->nlines; t++) {
		size_t start = f->nlines - pt->k - t;
		if (start < from)
			break;
		size_t o = advance(f, from_off, start - from);
		if (t) {
			/* the t lines after the window must be blank */
			size_t q = advance(f, o, pt->k), cl;
			bool blank = true;
			for (size_t i = 0; i < t && blank; i++) {
				size_t nx = fline(f, q, &cl);
				for (size_t c = 0; c < cl; c++)
					blank = blank && ws(f->s[q + c]);
				q = nx;
			}
			if (!blank)
				break;
		}
		if (window_eq(f, o, pt, mode)) {
			*pos = start;
			*off = o;
			return true;
		}
	}
	return false;
}

typedef struct loc {
	size_t pos, off; /* where the old lines start */
	size_t nused;	 /* hunk lines used (trailing blank context may be dropped) */
} loc;

static const char *hunk_first_old(const cae_patch_hunk *h, size_t *n)
{
	for (size_t i = 0; i < h->nlines; i++)
		if (h->lines[i].kind != '+') {
			*n = h->lines[i].len;
			return h->lines[i].text;
		}
	*n = 0;
	return NULL;
}

/* Where the hunk's old lines (pt) come closest, from line `from` on: the start whose prefix
 * of matching lines (whitespace ignored) is longest, at least one line. false: no line of
 * the hunk's first is anywhere. */
static bool closest(const ftext *f, size_t from, size_t from_off, const pattern *pt,
		    size_t *best_pos, size_t *best_len, size_t *miss_off)
{
	*best_len = 0;
	size_t off = from_off, cl;
	for (size_t p = from; off < f->len; p++) {
		size_t o = off, j = 0;
		while (j < pt->k && o < f->len) {
			size_t next = fline(f, o, &cl);
			if (!line_eq(f->s + o, cl, pt->l[j]->text, pt->l[j]->len, MODE_NOWS))
				break;
			o = next;
			j++;
		}
		if (j > *best_len && j < pt->k) {
			*best_len = j;
			*best_pos = p;
			*miss_off = o;
		}
		off = fline(f, off, &cl);
	}
	return *best_len > 0;
}

/* The hunk did not apply: say where it came closest and which line differs there (the first
 * line that does not match, in the file and in the hunk), or, when not even its first line
 * is in the file, that line. */
static int not_found(const ftext *f, size_t from, size_t from_off, const cae_patch_file_op *op,
		     size_t hi, const cae_patch_hunk *h, const char *where, cae_error *err)
{
	size_t maxk = h->nlines ? h->nlines : 1;
	_cleanup_free_ const cae_patch_line **buf = calloc(maxk, sizeof(*buf));
	pattern pt = {.l = buf, .k = 0};
	for (size_t j = 0; buf && j < h->nlines; j++)
		if (h->lines[j].kind != '+')
			buf[pt.k++] = &h->lines[j];
	size_t pos = 0, len = 0, miss = 0;
	char q[200], q2[200];
	if (buf && pt.k > 1 && closest(f, from, from_off, &pt, &pos, &len, &miss)) {
		const cae_patch_line *want = pt.l[len];
		if (miss < f->len) {
			size_t cl;
			fline(f, miss, &cl);
			return cae_error_set(
			    err, -EINVAL,
			    "hunk %zu of %s did not apply: context not found %s; closest at line "
			    "%zu, where line %zu of the file is \"%s\" and the hunk expects \"%s\"",
			    hi + 1, op->path, where, pos + 1, pos + len + 1,
			    cae__patch_quote(f->s + miss, cl, 80, q2, sizeof(q2)),
			    cae__patch_quote(want->text, want->len, 80, q, sizeof(q)));
		}
		return cae_error_set(
		    err, -EINVAL,
		    "hunk %zu of %s did not apply: context not found %s; closest at "
		    "line %zu, where the file ends and the hunk expects \"%s\"",
		    hi + 1, op->path, where, pos + 1,
		    cae__patch_quote(want->text, want->len, 80, q, sizeof(q)));
	}
	size_t n;
	const char *first = hunk_first_old(h, &n);
	if (first)
		return cae_error_set(err, -EINVAL,
				     "hunk %zu of %s did not apply: context not found %s (expected "
				     "\"%s\")",
				     hi + 1, op->path, where,
				     cae__patch_quote(first, n, 80, q, sizeof(q)));
	return cae_error_set(err, -EINVAL, "hunk %zu of %s did not apply: context not found %s",
			     hi + 1, op->path, where);
}

static int locate(const ftext *f, const cae_patch_file_op *op, loc *locs, cae_error *err)
{
	size_t min = 0, min_off = 0;
	bool have_delta = false;
	long long delta = 0;
	size_t maxk = 0;
	for (size_t i = 0; i < op->nhunks; i++)
		maxk = MAX(maxk, op->hunks[i].nlines);
	_cleanup_free_ const cae_patch_line **buf = calloc(maxk + 1, sizeof(*buf));
	if (!buf)
		return cae_error_set(err, -ENOMEM, "out of memory");

	for (size_t hi = 0; hi < op->nhunks; hi++) {
		const cae_patch_hunk *h = &op->hunks[hi];
		char where[96];
		/* "@@ context" lines, in order */
		bool ctx_found = false;
		size_t ctx_pos = 0, ctx_off = 0;
		for (size_t c = 0; c < h->ncontexts; c++) {
			cae_patch_line cl = {
			    .kind = ' ', .text = h->contexts[c], .len = strlen(h->contexts[c])};
			const cae_patch_line *one = &cl;
			pattern pt = {.l = &one, .k = 1};
			size_t from = ctx_found ? ctx_pos + 1 : min;
			size_t from_off = ctx_found ? advance(f, ctx_off, 1) : min_off;
			int r = 0;
			for (int m = 0; m < MODE_COUNT && r == 0; m++)
				r = search(f, from, from_off, &pt, m, false, 0, &ctx_pos, &ctx_off);
			if (r < 0)
				return cae_error_set(err, r, "out of memory");
			if (r == 0) {
				char q[200];
				return cae_error_set(
				    err, -EINVAL,
				    "hunk %zu of %s did not apply: context line "
				    "\"%s\" not found after line %zu",
				    hi + 1, op->path,
				    cae__patch_quote(cl.text, cl.len, 80, q, sizeof(q)), from);
			}
			ctx_found = true;
		}
		size_t from = ctx_found ? ctx_pos : min;
		size_t from_off = ctx_found ? ctx_off : min_off;

		bool have_hint = h->has_range;
		size_t hint = 0;
		if (have_hint) {
			long long e = (long long)(h->old_count == 0 ? h->old_start
						  : h->old_start    ? h->old_start - 1
								    : 0);
			if (have_delta)
				e += delta;
			hint = e < 0 ? 0 : (size_t)e;
			snprintf(where, sizeof(where), "near line %zu", hint + 1);
		} else if (h->end_of_file) {
			snprintf(where, sizeof(where), "at the end of the file");
		} else if (from == 0) {
			snprintf(where, sizeof(where), "in the file");
		} else {
			snprintf(where, sizeof(where), "after line %zu", from);
		}

		size_t nused = h->nlines;
		size_t pos = 0, off = 0;
		bool found = false;
		for (int attempt = 0; attempt < 4 && !found; attempt++) {
			pattern pt = {.l = buf, .k = 0};
			for (size_t j = 0; j < nused; j++)
				if (h->lines[j].kind != '+')
					buf[pt.k++] = &h->lines[j];
			if (pt.k == 0) {
				/* a pure insertion */
				if (ctx_found)
					pos = ctx_pos + 1;
				else if (have_hint)
					pos = hint;
				else
					pos = f->nlines;
				pos = MAX(pos, min);
				pos = MIN(pos, f->nlines);
				off = advance(f, min_off, pos - min);
				found = true;
				break;
			}
			for (int m = 0; m < MODE_COUNT && !found; m++) {
				if (h->end_of_file) {
					found = search_eof(f, from, from_off, &pt, m, &pos, &off);
				} else {
					int r = search(f, from, from_off, &pt, m, have_hint, hint,
						       &pos, &off);
					if (r < 0)
						return cae_error_set(err, r, "out of memory");
					found = r == 1;
				}
			}
			if (found)
				break;
			/* trailing empty context lines may have been added by a model or an editor
			 */
			if (nused == 0 || h->lines[nused - 1].kind != ' ')
				break;
			const cae_patch_line *last = &h->lines[nused - 1];
			bool blank = true;
			for (size_t c = 0; c < last->len; c++)
				blank = blank && ws(last->text[c]);
			if (!blank)
				break;
			nused--;
		}
		if (!found)
			return not_found(f, from, from_off, op, hi, h, where, err);
		if (have_hint) {
			delta = (long long)pos - (long long)(h->old_count == 0 ? h->old_start
							     : h->old_start    ? h->old_start - 1
									       : 0);
			have_delta = true;
		}
		size_t k = 0;
		for (size_t j = 0; j < nused; j++)
			k += h->lines[j].kind != '+';
		locs[hi] = (loc){.pos = pos, .off = off, .nused = nused};
		min = pos + k;
		min_off = advance(f, off, k);
	}
	return 0;
}

int cae_patch_apply_hunks(const char *old, size_t old_len, const cae_patch_file_op *op,
			  char **new_text, size_t *new_len, cae_error *err)
{
	*new_text = NULL;
	*new_len = 0;
	if (op->kind == CAE_PATCH_OP_ADD) {
		old = "";
		old_len = 0;
	}
	if (old_len > CAE_PATCH_MAX_FILE)
		return cae_error_set(err, -EFBIG, "%s is %zu bytes, more than the limit of %zu",
				     op->path, old_len, CAE_PATCH_MAX_FILE);
	if (!old)
		old = "";
	if (op->kind == CAE_PATCH_OP_DELETE && op->nhunks == 0) {
		*new_text = strdup("");
		return *new_text ? 0 : cae_error_set(err, -ENOMEM, "out of memory");
	}
	ftext f;
	ftext_init(&f, old, old_len);
	_cleanup_free_ loc *locs = calloc(op->nhunks + 1, sizeof(*locs));
	if (!locs)
		return cae_error_set(err, -ENOMEM, "out of memory");
	int r = locate(&f, op, locs, err);
	if (r < 0)
		return r;

	size_t eol_len = strlen(f.eol);
	size_t bound = old_len + eol_len + 1;
	for (size_t i = 0; i < op->nhunks; i++)
		for (size_t j = 0; j < op->hunks[i].nlines; j++)
			if (op->hunks[i].lines[j].kind == '+')
				bound += op->hunks[i].lines[j].len + eol_len;
	char *out = malloc(bound + 1);
	if (!out)
		return cae_error_set(err, -ENOMEM, "out of memory");
	size_t o = 0, cur = 0, cl;
	bool want_final = old_len == 0 || old[old_len - 1] == '\n';
	for (size_t i = 0; i < op->nhunks; i++) {
		const cae_patch_hunk *h = &op->hunks[i];
		memcpy(out + o, old + cur, locs[i].off - cur);
		o += locs[i].off - cur;
		size_t fo = locs[i].off;
		for (size_t j = 0; j < locs[i].nused; j++) {
			const cae_patch_line *pl = &h->lines[j];
			if (pl->kind == '+') {
				memcpy(out + o, pl->text, pl->len);
				o += pl->len;
				memcpy(out + o, f.eol, eol_len);
				o += eol_len;
				continue;
			}
			size_t next = fline(&f, fo, &cl);
			if (pl->kind == ' ') {
				memcpy(out + o, old + fo, next - fo);
				o += next - fo;
				if (old[next - 1] != '\n') {
					memcpy(out + o, f.eol, eol_len);
					o += eol_len;
				}
			}
			fo = next;
		}
		cur = fo;
		if (h->new_no_newline)
			want_final = false;
		else if (h->old_no_newline)
			want_final = true;
	}
	memcpy(out + o, old + cur, old_len - cur);
	o += old_len - cur;
	if (old_len > cur && old[old_len - 1] != '\n') {
		memcpy(out + o, f.eol, eol_len);
		o += eol_len;
	}
	/* every line now ends with a line ending; drop the last one if the file had none */
	if (!want_final && o) {
		if (out[o - 1] == '\n')
			o--;
		if (o && out[o - 1] == '\r')
			o--;
	}
	out[o] = '\0';
	if (op->kind == CAE_PATCH_OP_DELETE && o != 0) {
		free(out);
		return cae_error_set(err, -EINVAL,
				     "%s does not match the content the patch deletes (%zu bytes "
				     "would remain)",
				     op->path, o);
	}
	*new_text = out;
	*new_len = o;
	return 0;
}

/* ---- checking a whole patch ---- */

struct cae_patch_plan {
	cae_patch_step *steps;
	size_t nsteps;
	char **owned;
	size_t nowned;
};

enum { OV_CONTENT = 1, OV_ABSENT, OV_PENDING };

typedef struct ov_entry {
	char *key;
	int state;
	const char *data; /* OV_CONTENT: borrowed or == own */
	size_t len;
	char *own;    /* buffer owned by the overlay */
	cae_buf pend; /* OV_PENDING: bytes appended to an unread file */
} ov_entry;

typedef struct overlay {
	ov_entry *e;
	size_t cap, n;
	const cae_patch_fs *fs;
} overlay;

static char *norm_path(const char *p)
{
	size_t n = strlen(p);
	char *r = malloc(n + 1);
	if (!r)
		return NULL;
	size_t o = 0, i = 0;
	while (i < n) {
		if (p[i] == '/' && o > 0 && r[o - 1] == '/') {
			i++;
			continue;
		}
		if (p[i] == '.' && (o == 0 || r[o - 1] == '/') && (i + 1 == n || p[i + 1] == '/')) {
			i += 2;
			continue;
		}
		r[o++] = p[i++];
	}
	while (o > 1 && r[o - 1] == '/')
		o--;
	r[o] = '\0';
	return r;
}

static uint64_t str_hash(const char *s)
{
	uint64_t h = UINT64_C(0xcbf29ce484222325);
	for (; *s; s++) {
		h ^= (unsigned char)*s;
		h *= UINT64_C(0x100000001b3);
	}
	return h;
}

static void ov_clear(overlay *ov)
{
	for (size_t i = 0; i < ov->cap; i++) {
		free(ov->e[i].key);
		free(ov->e[i].own);
		cae__buf_clear(&ov->e[i].pend);
	}
	free(ov->e);
	ov->e = NULL;
	ov->cap = ov->n = 0;
}

/* The entry for path, created empty (state 0) when new. NULL on ENOMEM. */
static ov_entry *ov_get(overlay *ov, const char *path)
{
	if (ov->n * 2 >= ov->cap) {
		size_t ncap = ov->cap ? ov->cap * 2 : 64;
		ov_entry *ne = calloc(ncap, sizeof(*ne));
		if (!ne)
			return NULL;
		for (size_t i = 0; i < ov->cap; i++) {
			if (!ov->e[i].key)
				continue;
			size_t j = str_hash(ov->e[i].key) & (ncap - 1);
			while (ne[j].key)
				j = (j + 1) & (ncap - 1);
			ne[j] = ov->e[i];
		}
		free(ov->e);
		ov->e = ne;
		ov->cap = ncap;
	}
	char *key = norm_path(path);
	if (!key)
		return NULL;
	size_t j = str_hash(key) & (ov->cap - 1);
	while (ov->e[j].key) {
		if (strcmp(ov->e[j].key, key) == 0) {
			free(key);
			return &ov->e[j];
		}
		j = (j + 1) & (ov->cap - 1);
	}
	ov->e[j].key = key;
	cae__buf_init(&ov->e[j].pend, SIZE_MAX / 2);
	ov->n++;
	return &ov->e[j];
}

static void ov_set(ov_entry *e, int state, const char *data, size_t len, char *own)
{
	if (e->own != own)
		free(e->own);
	e->own = own;
	e->state = state;
	e->data = data;
	e->len = len;
	cae__buf_clear(&e->pend);
}

/* The current content of path: 1 (exists, *data and *len borrowed from the overlay), 0 (does
 * not exist) or -errno. want_data false: existence only. */
static int ov_read(overlay *ov, const char *path, bool want_data, const char **data, size_t *len,
		   cae_error *err)
{
	ov_entry *e = ov_get(ov, path);
	if (!e)
		return cae_error_set(err, -ENOMEM, "out of memory");
	if (e->state == OV_CONTENT) {
		*data = e->data;
		*len = e->len;
		return 1;
	}
	if (e->state == OV_ABSENT)
		return 0;
	if (!ov->fs || !ov->fs->read)
		return cae_error_set(err, -EINVAL, "cannot read %s: no file access given", path);
	if (!want_data && e->state != OV_PENDING) {
		int r = ov->fs->read(ov->fs->userdata, path, NULL, NULL, err);
		if (r == -ENOENT) {
			ov_set(e, OV_ABSENT, NULL, 0, NULL);
			return 0;
		}
		return r < 0 ? r : 1;
	}
	char *d = NULL;
	size_t n = 0;
	int r = ov->fs->read(ov->fs->userdata, path, &d, &n, err);
	if (r == -ENOENT) {
		free(d);
		d = NULL;
		n = 0;
		if (e->state != OV_PENDING) {
			ov_set(e, OV_ABSENT, NULL, 0, NULL);
			return 0;
		}
	} else if (r < 0) {
		free(d);
		if (!err || !err->message[0])
			cae_error_set(err, r, "cannot read %s", path);
		return r;
	}
	if (e->state == OV_PENDING) {
		/* appends to a file not read yet: the base, then what was appended */
		char *m = malloc(n + e->pend.len + 1);
		if (!m) {
			free(d);
			return cae_error_set(err, -ENOMEM, "out of memory");
		}
		if (n)
			memcpy(m, d, n);
		if (e->pend.len)
			memcpy(m + n, e->pend.data, e->pend.len);
		n += e->pend.len;
		m[n] = '\0';
		free(d);
		d = m;
	}
	if (!d && !(d = strdup("")))
		return cae_error_set(err, -ENOMEM, "out of memory");
	ov_set(e, OV_CONTENT, d, n, d);
	*data = d;
	*len = n;
	return 1;
}

static int plan_own(cae_patch_plan *plan, char *buf)
{
	char **n = realloc(plan->owned, (plan->nowned + 1) * sizeof(*n));
	if (!n) {
		free(buf);
		return -ENOMEM;
	}
	plan->owned = n;
	plan->owned[plan->nowned++] = buf;
	return 0;
}

void cae_patch_plan_free(cae_patch_plan *plan)
{
	if (!plan)
		return;
	cae__patch_strv_free(plan->owned, plan->nowned);
	free(plan->steps);
	free(plan);
}

DEFINE_TRIVIAL_CLEANUP_FUNC(cae_patch_plan *, cae_patch_plan_free)

size_t cae_patch_plan_count(const cae_patch_plan *plan)
{
	return plan ? plan->nsteps : 0;
}

const cae_patch_step *cae_patch_plan_step(const cae_patch_plan *plan, size_t i)
{
	return plan && i < plan->nsteps ? &plan->steps[i] : NULL;
}

static int check_append(overlay *ov, const cae_patch_command *c, cae_error *err)
{
	ov_entry *e = ov_get(ov, c->target);
	if (!e)
		return cae_error_set(err, -ENOMEM, "out of memory");
	if (e->state == OV_CONTENT || e->state == OV_ABSENT) {
		size_t base = e->state == OV_CONTENT ? e->len : 0;
		char *m = malloc(base + c->content_len + 1);
		if (!m)
			return cae_error_set(err, -ENOMEM, "out of memory");
		if (base)
			memcpy(m, e->data, base);
		memcpy(m + base, c->content, c->content_len);
		m[base + c->content_len] = '\0';
		ov_set(e, OV_CONTENT, m, base + c->content_len, m);
		return 0;
	}
	e->state = OV_PENDING;
	if (cae__buf_append(&e->pend, c->content, c->content_len) < 0)
		return cae_error_set(err, -ENOMEM, "out of memory");
	return 0;
}

/* A file_edit that reads its file (patch, move, hunked delete) before any RUN step. */
static int check_file_op(overlay *ov, cae_patch_plan *plan, cae_patch_step *st,
			 const cae_patch_command *c, cae_error *err)
{
	const cae_patch_file_op *op = c->op;
	const char *old = NULL;
	size_t old_len = 0;
	int r = ov_read(ov, op->path, true, &old, &old_len, err);
	if (r < 0)
		return r;
	if (r == 0)
		return cae_error_set(err, -ENOENT, "cannot %s %s: no such file",
				     op->kind == CAE_PATCH_OP_DELETE ? "delete" : "patch",
				     op->path);
	char *out;
	size_t out_len;
	r = cae_patch_apply_hunks(old, old_len, op, &out, &out_len, err);
	if (r < 0)
		return r;
	if (op->kind == CAE_PATCH_OP_DELETE) {
		free(out);
		ov_entry *e = ov_get(ov, op->path);
		if (!e)
			return cae_error_set(err, -ENOMEM, "out of memory");
		ov_set(e, OV_ABSENT, NULL, 0, NULL);
		return 0;
	}
	if (plan_own(plan, out) < 0)
		return cae_error_set(err, -ENOMEM, "out of memory");
	st->data = out;
	st->len = out_len;
	ov_entry *e = ov_get(ov, st->path);
	if (!e)
		return cae_error_set(err, -ENOMEM, "out of memory");
	ov_set(e, OV_CONTENT, out, out_len, NULL);
	if (st->old_path) {
		ov_entry *eo = ov_get(ov, st->old_path);
		if (!eo)
			return cae_error_set(err, -ENOMEM, "out of memory");
		ov_set(eo, OV_ABSENT, NULL, 0, NULL);
	}
	return 0;
}

static int check_command(overlay *ov, cae_patch_plan *plan, cae_patch_step *st,
			 const cae_patch_command *c, bool after_run, cae_error *err)
{
	const cae_patch_file_op *op = c->op;
	switch (c->action) {
	case CAE_PATCH_CREATE:
	case CAE_PATCH_UPDATE: {
		st->kind = CAE_PATCH_STEP_WRITE;
		st->path = c->target;
		st->data = c->content;
		st->len = c->content_len;
		ov_entry *e = ov_get(ov, c->target);
		if (!e)
			return cae_error_set(err, -ENOMEM, "out of memory");
		ov_set(e, OV_CONTENT, c->content, c->content_len, NULL);
		return 0;
	}
	case CAE_PATCH_APPEND:
		st->kind = CAE_PATCH_STEP_APPEND;
		st->path = c->target;
		st->data = c->content;
		st->len = c->content_len;
		return check_append(ov, c, err);
	case CAE_PATCH_DELETE: {
		st->kind = CAE_PATCH_STEP_DELETE;
		st->path = op ? op->path : c->target;
		if (after_run) {
			st->deferred = op && op->nhunks > 0;
			return 0;
		}
		if (op && op->nhunks)
			return check_file_op(ov, plan, st, c, err);
		const char *d;
		size_t n;
		int r = ov_read(ov, st->path, false, &d, &n, err);
		if (r < 0)
			return r;
		if (r == 0)
			return cae_error_set(err, -ENOENT, "cannot delete %s: no such file",
					     st->path);
		ov_entry *e = ov_get(ov, st->path);
		if (!e)
			return cae_error_set(err, -ENOMEM, "out of memory");
		ov_set(e, OV_ABSENT, NULL, 0, NULL);
		return 0;
	}
	case CAE_PATCH_PATCH:
	case CAE_PATCH_MOVE:
		st->kind = CAE_PATCH_STEP_WRITE;
		st->path = op->move_to ? op->move_to : op->path;
		st->old_path = op->move_to ? op->path : NULL;
		if (after_run) {
			st->deferred = true;
			return 0;
		}
		return check_file_op(ov, plan, st, c, err);
	default:
		return cae_error_set(err, -EINVAL, "unexpected file_edit action %s",
				     cae_patch_action_name(c->action));
	}
}

int cae_patch_check(const cae_patch *p, const cae_patch_fs *fs, cae_patch_plan **out,
		    cae_error *err)
{
	*out = NULL;
	_cleanup_(cae_patch_plan_freep) cae_patch_plan *plan = calloc(1, sizeof(*plan));
	if (!plan)
		return cae_error_set(err, -ENOMEM, "out of memory");
	plan->steps = calloc(p->ncmds + 1, sizeof(*plan->steps));
	if (!plan->steps)
		return cae_error_set(err, -ENOMEM, "out of memory");
	overlay ov = {.fs = fs};
	bool after_run = false;
	int r = 0;
	for (size_t i = 0; i < p->ncmds && r == 0; i++) {
		const cae_patch_command *c = &p->cmds[i];
		cae_patch_step *st = &plan->steps[i];
		st->index = i;
		st->command = c;
		if (c->type != CAE_PATCH_FILE_EDIT) {
			st->kind = CAE_PATCH_STEP_RUN;
			after_run = true;
			continue;
		}
		r = check_command(&ov, plan, st, c, after_run, err);
	}
	ov_clear(&ov);
	if (r < 0)
		return r;
	plan->nsteps = p->ncmds;
	*out = TAKE_PTR(plan);
	return 0;
}
