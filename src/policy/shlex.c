/* The shell-aware lexer of the command policy: see shlex.h.
 *
 * One `struct lexer` walks one string. Command substitutions $(...) and process
 * substitutions <(...) >(...) are lexed by a child lexer on the same string that stops at the
 * matching ')'; backquotes are unescaped first and lexed as a string of their own. Nesting
 * (the context stack of subshells and case statements, plus child lexers, ${...} and
 * $((...))) is counted in one number bounded by max_depth, so hostile input can neither
 * exhaust the C stack nor make us loop: every step either consumes input or fails.
 */
#include "policy/shlex.h"

#include "base/macro.h"
#include "base/utf8.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/banned.h"

enum lex_mode {
	MODE_TOP,   /* the whole string */
	MODE_SUBST, /* inside $( ), <( ), >( ): stops after the matching ')' */
};

enum ctx_kind {
	CTX_SUBSHELL,
	CTX_CASE_PATTERN, /* expecting "pattern | pattern )" or esac */
	CTX_CASE_BODY,	  /* the commands of one case item, up to ;; or esac */
};

struct heredoc {
	char *delim;
	bool quoted; /* a quoted delimiter: the body is not expanded */
	bool strip;  /* <<- : leading tabs are removed */
};

struct word_acc {
	char *p;
	size_t len, cap;
	bool quoted, dynamic, glob, brace;
	bool plain;	  /* only plain unquoted characters so far */
	size_t plain_len; /* length of the plain prefix */
};

struct lexer {
	const char *s;
	size_t len, pos;
	unsigned depth, max_depth;
	cae_sh_command_fn fn;
	void *ud;
	cae_error *err;
	enum lex_mode mode;
	size_t start;	 /* where this lexer started (for messages) */
	bool closed;	 /* MODE_SUBST: the closing ')' was seen */
	bool at_start;	 /* command position: reserved words are recognised */
	bool after_time; /* just after the `time` keyword: -p is its option */

	cae_sh_word *words;
	size_t n_words, cap_words;
	size_t cmd_start, cmd_end;
	bool have_start;

	struct heredoc *hd;
	size_t n_hd, cap_hd;

	unsigned char *ctx;
	size_t n_ctx, cap_ctx;
};

static int lex_run(struct lexer *lx);
static int scan_word(struct lexer *lx, struct word_acc *wa);
static int scan_dollar(struct lexer *lx, struct word_acc *wa, bool in_dq);
static int scan_dquote(struct lexer *lx, struct word_acc *wa);
static int scan_backtick(struct lexer *lx, struct word_acc *wa, bool in_dq);

static int lex_fail(struct lexer *lx, size_t off, const char *what)
{
	return cae_error_set(lx->err, -EINVAL, "%s (at byte %zu)", what, off);
}

static unsigned cur_depth(const struct lexer *lx)
{
	return lx->depth + (unsigned)lx->n_ctx;
}

/* Makes room for one more level of nesting, or fails with -ELOOP. */
static int nest_check(struct lexer *lx)
{
	if (cur_depth(lx) + 1 > lx->max_depth)
		return cae_error_set(lx->err, -ELOOP,
				     "nested more than %u levels deep (at byte %zu)", lx->max_depth,
				     lx->pos);
	return 0;
}

static bool is_blank(char c)
{
	return c == ' ' || c == '\t';
}

static bool is_name_start(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

static bool is_name_char(char c)
{
	return is_name_start(c) || (c >= '0' && c <= '9');
}

/* c is one of the characters of set (never true for NUL). */
static bool is_in(char c, const char *set)
{
	return c != '\0' && strchr(set, c) != NULL;
}

static char peek(const struct lexer *lx, size_t ahead)
{
	return lx->pos + ahead < lx->len ? lx->s[lx->pos + ahead] : '\0';
}

static bool at_end(const struct lexer *lx)
{
	return lx->pos >= lx->len;
}

/* ---- word accumulator ---- */

static void wa_init(struct word_acc *wa)
{
	memset(wa, 0, sizeof(*wa));
	wa->plain = true;
}

static void wa_free(struct word_acc *wa)
{
	free(wa->p);
	wa->p = NULL;
	wa->len = wa->cap = 0;
}

static int wa_append(struct word_acc *wa, const char *p, size_t n)
{
	if (wa->len + n + 1 > wa->cap) {
		size_t ncap = wa->cap ? wa->cap : 32;
		while (ncap < wa->len + n + 1) {
			if (ncap > SIZE_MAX / 2)
				return -ENOMEM;
			ncap *= 2;
		}
		char *np = realloc(wa->p, ncap);
		if (!np)
			return -ENOMEM;
		wa->p = np;
		wa->cap = ncap;
	}
	memcpy(wa->p + wa->len, p, n);
	wa->len += n;
	wa->p[wa->len] = '\0';
	if (wa->plain)
		wa->plain_len = wa->len;
	return 0;
}

static int wa_putc(struct word_acc *wa, char c)
{
	return wa_append(wa, &c, 1);
}

/* Appends source text that is not plain (quoted or an expansion). */
static int wa_append_special(struct word_acc *wa, const char *p, size_t n)
{
	wa->plain = false;
	return wa_append(wa, p, n);
}

/* ---- the current simple command ---- */

static void free_words(struct lexer *lx)
{
	for (size_t i = 0; i < lx->n_words; i++)
		free(lx->words[i].text);
	lx->n_words = 0;
}

static int push_word(struct lexer *lx, struct word_acc *wa, size_t start)
{
	if (lx->n_words == lx->cap_words) {
		size_t ncap = lx->cap_words ? lx->cap_words * 2 : 8;
		cae_sh_word *nw = realloc(lx->words, ncap * sizeof(*nw));
		if (!nw)
			return -ENOMEM;
		lx->words = nw;
		lx->cap_words = ncap;
	}
	if (!wa->p) {
		int r = wa_append(wa, "", 0);
		if (r < 0)
			return r;
	}
	cae_sh_word *w = &lx->words[lx->n_words++];
	memset(w, 0, sizeof(*w));
	w->text = TAKE_PTR(wa->p);
	w->len = wa->len;
	w->quoted = wa->quoted;
	w->dynamic = wa->dynamic;
	w->glob = wa->glob;
	w->brace = wa->brace;
	/* NAME=... or NAME+=... with the name and the '=' unquoted */
	const char *eq = memchr(w->text, '=', wa->plain_len);
	if (eq && eq > w->text && is_name_start(w->text[0])) {
		const char *q = w->text + 1;
		while (q < eq && is_name_char(*q))
			q++;
		if (q == eq || (q + 1 == eq && *q == '+'))
			w->assign_len = (size_t)(eq - w->text) + 1;
	}
	wa->len = wa->cap = 0;
	if (!lx->have_start) {
		lx->cmd_start = start;
		lx->have_start = true;
	}
	lx->cmd_end = lx->pos;
	return 0;
}

/* Ends the current simple command and reports it. */
static int finish(struct lexer *lx)
{
	int r = 0;
	if (lx->n_words > 0) {
		size_t end = lx->cmd_end > lx->cmd_start ? lx->cmd_end : lx->cmd_start;
		cae_sh_command cmd = {
		    .words = lx->words,
		    .n_words = lx->n_words,
		    .src = lx->s + lx->cmd_start,
		    .src_len = end - lx->cmd_start,
		    .depth = cur_depth(lx),
		};
		r = lx->fn(&cmd, lx->ud);
	}
	free_words(lx);
	lx->have_start = false;
	lx->after_time = false;
	return r;
}

/* ---- the context stack ---- */

static int ctx_push(struct lexer *lx, enum ctx_kind k)
{
	int r = nest_check(lx);
	if (r < 0)
		return r;
	if (lx->n_ctx == lx->cap_ctx) {
		size_t ncap = lx->cap_ctx ? lx->cap_ctx * 2 : 8;
		unsigned char *nc = realloc(lx->ctx, ncap);
		if (!nc)
			return -ENOMEM;
		lx->ctx = nc;
		lx->cap_ctx = ncap;
	}
	lx->ctx[lx->n_ctx++] = (unsigned char)k;
	return 0;
}

static int ctx_top(const struct lexer *lx)
{
	return lx->n_ctx ? lx->ctx[lx->n_ctx - 1] : -1;
}

static void lexer_init(struct lexer *lx, const struct lexer *parent, const char *s, size_t len,
		       size_t pos, unsigned depth, enum lex_mode mode)
{
	memset(lx, 0, sizeof(*lx));
	lx->s = s;
	lx->len = len;
	lx->pos = pos;
	lx->start = pos;
	lx->depth = depth;
	lx->max_depth = parent->max_depth;
	lx->fn = parent->fn;
	lx->ud = parent->ud;
	lx->err = parent->err;
	lx->mode = mode;
	lx->at_start = true;
}

static void lexer_done(struct lexer *lx)
{
	free_words(lx);
	free(lx->words);
	for (size_t i = 0; i < lx->n_hd; i++)
		free(lx->hd[i].delim);
	free(lx->hd);
	free(lx->ctx);
}

/* ---- nested constructs ---- */

/* $( ... ), <( ... ), >( ... ): pos is just after the '('. */
static int lex_subst(struct lexer *lx)
{
	int r = nest_check(lx);
	if (r < 0)
		return r;
	struct lexer child;
	lexer_init(&child, lx, lx->s, lx->len, lx->pos, cur_depth(lx) + 1, MODE_SUBST);
	r = lex_run(&child);
	lx->pos = child.pos;
	lexer_done(&child);
	return r;
}

/* Scans up to the ')' that closes an already opened '(' (need_double: "))" closes, as in
 * $(( )) and (( ))). Quotes and substitutions inside are honoured (and substitutions
 * lexed). Returns 0, 1 when need_double and a lone ')' closed it (not arithmetic after
 * all), or < 0. */
static int scan_parens(struct lexer *lx, bool need_double, size_t open_off)
{
	struct word_acc scratch;
	wa_init(&scratch);
	int level = 0, r = 0;
	while (!at_end(lx)) {
		char c = lx->s[lx->pos];
		switch (c) {
		case '\\':
			lx->pos += lx->pos + 1 < lx->len ? 2 : 1;
			break;
		case '\'': {
			const char *q = memchr(lx->s + lx->pos + 1, '\'', lx->len - lx->pos - 1);
			if (!q) {
				r = lex_fail(lx, lx->pos, "unterminated single quote");
				goto out;
			}
			lx->pos = (size_t)(q - lx->s) + 1;
			break;
		}
		case '"':
			r = scan_dquote(lx, &scratch);
			break;
		case '$':
			r = scan_dollar(lx, &scratch, false);
			break;
		case '`':
			r = scan_backtick(lx, &scratch, false);
			break;
		case '(':
			level++;
			lx->pos++;
			break;
		case ')':
			lx->pos++;
			if (level > 0) {
				level--;
				break;
			}
			if (!need_double)
				goto out;
			if (peek(lx, 0) == ')') {
				lx->pos++;
				goto out;
			}
			r = 1;
			goto out;
		default:
			lx->pos++;
			break;
		}
		if (r != 0)
			goto out;
		scratch.len = 0;
	}
	r = lex_fail(lx, open_off, "unterminated '('");
out:
	wa_free(&scratch);
	return r;
}

/* ${ ... }: pos is just after the '{'. */
static int scan_brace(struct lexer *lx, bool in_dq, size_t open_off)
{
	int r = nest_check(lx);
	if (r < 0)
		return r;
	lx->depth++;
	struct word_acc scratch;
	wa_init(&scratch);
	while (!at_end(lx)) {
		char c = lx->s[lx->pos];
		if (c == '}') {
			lx->pos++;
			goto out;
		} else if (c == '\\') {
			lx->pos += lx->pos + 1 < lx->len ? 2 : 1;
		} else if (c == '\'' && !in_dq) {
			const char *q = memchr(lx->s + lx->pos + 1, '\'', lx->len - lx->pos - 1);
			if (!q) {
				r = lex_fail(lx, lx->pos, "unterminated single quote");
				goto out;
			}
			lx->pos = (size_t)(q - lx->s) + 1;
		} else if (c == '"') {
			r = scan_dquote(lx, &scratch);
		} else if (c == '$') {
			r = scan_dollar(lx, &scratch, in_dq);
		} else if (c == '`') {
			r = scan_backtick(lx, &scratch, in_dq);
		} else {
			lx->pos++;
		}
		if (r != 0)
			goto out;
		scratch.len = 0;
	}
	r = lex_fail(lx, open_off, "unterminated '${'");
out:
	lx->depth--;
	wa_free(&scratch);
	return r;
}

static int put_utf8(struct word_acc *wa, uint32_t cp)
{
	char b[4];
	size_t n;
	if (cp < 0x80) {
		b[0] = (char)cp;
		n = 1;
	} else if (cp < 0x800) {
		b[0] = (char)(0xc0 | (cp >> 6));
		b[1] = (char)(0x80 | (cp & 0x3f));
		n = 2;
	} else if (cp < 0x10000) {
		b[0] = (char)(0xe0 | (cp >> 12));
		b[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
		b[2] = (char)(0x80 | (cp & 0x3f));
		n = 3;
	} else if (cp < 0x110000) {
		b[0] = (char)(0xf0 | (cp >> 18));
		b[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
		b[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
		b[3] = (char)(0x80 | (cp & 0x3f));
		n = 4;
	} else {
		return 0;
	}
	return wa_append(wa, b, n);
}

/* $'...' (bash ANSI-C quoting): pos is just after the opening quote. */
static int scan_ansi(struct lexer *lx, struct word_acc *wa, size_t open_off)
{
	wa->quoted = true;
	wa->plain = false;
	while (!at_end(lx)) {
		char c = lx->s[lx->pos];
		int r;
		if (c == '\'') {
			lx->pos++;
			return 0;
		}
		if (c != '\\' || lx->pos + 1 >= lx->len) {
			r = wa_putc(wa, c);
			lx->pos++;
			if (r < 0)
				return r;
			continue;
		}
		char n = lx->s[lx->pos + 1];
		lx->pos += 2;
		switch (n) {
		case 'n':
			r = wa_putc(wa, '\n');
			break;
		case 't':
			r = wa_putc(wa, '\t');
			break;
		case 'r':
			r = wa_putc(wa, '\r');
			break;
		case 'a':
			r = wa_putc(wa, '\a');
			break;
		case 'b':
			r = wa_putc(wa, '\b');
			break;
		case 'f':
			r = wa_putc(wa, '\f');
			break;
		case 'v':
			r = wa_putc(wa, '\v');
			break;
		case 'e':
		case 'E':
			r = wa_putc(wa, 27);
			break;
		case '\\':
		case '\'':
		case '"':
		case '?':
			r = wa_putc(wa, n);
			break;
		case 'c':
			if (at_end(lx)) {
				r = wa_append(wa, "\\c", 2);
				break;
			}
			r = wa_putc(wa, (char)(lx->s[lx->pos++] & 0x1f));
			break;
		case 'x':
		case 'u':
		case 'U': {
			int maxd = n == 'x' ? 2 : n == 'u' ? 4 : 8, d = 0;
			uint32_t v = 0;
			while (d < maxd && !at_end(lx) &&
			       cae__hex_digit((unsigned char)lx->s[lx->pos]) >= 0) {
				v = v * 16 +
				    (uint32_t)cae__hex_digit((unsigned char)lx->s[lx->pos++]);
				d++;
			}
			if (d == 0) {
				char esc[2] = {'\\', n};
				r = wa_append(wa, esc, 2);
			} else if (n == 'x') {
				r = wa_putc(wa, (char)v);
			} else {
				r = put_utf8(wa, v);
			}
			break;
		}
		default:
			if (n >= '0' && n <= '7') {
				unsigned v = (unsigned)(n - '0');
				for (int d = 1; d < 3 && !at_end(lx) && lx->s[lx->pos] >= '0' &&
						lx->s[lx->pos] <= '7';
				     d++)
					v = v * 8 + (unsigned)(lx->s[lx->pos++] - '0');
				r = wa_putc(wa, (char)(v & 0xff));
			} else {
				char esc[2] = {'\\', n};
				r = wa_append(wa, esc, 2);
			}
			break;
		}
		if (r < 0)
			return r;
	}
	return lex_fail(lx, open_off, "unterminated $'...' quote");
}

/* pos is on the '$'. */
static int scan_dollar(struct lexer *lx, struct word_acc *wa, bool in_dq)
{
	size_t start = lx->pos;
	char n = peek(lx, 1);
	int r;
	if (n == '(') {
		if (peek(lx, 2) == '(') {
			r = nest_check(lx);
			if (r < 0)
				return r;
			lx->depth++;
			lx->pos += 3;
			r = scan_parens(lx, true, start);
			lx->depth--;
			if (r == 1) { /* $( (subshell) ... ) */
				lx->pos = start + 2;
				r = lex_subst(lx);
			}
		} else {
			lx->pos += 2;
			r = lex_subst(lx);
		}
		if (r != 0)
			return r;
		wa->dynamic = true;
		return wa_append_special(wa, lx->s + start, lx->pos - start);
	}
	if (n == '{') {
		lx->pos += 2;
		r = scan_brace(lx, in_dq, start);
		if (r != 0)
			return r;
		wa->dynamic = true;
		return wa_append_special(wa, lx->s + start, lx->pos - start);
	}
	if (n == '\'' && !in_dq) {
		lx->pos += 2;
		return scan_ansi(lx, wa, start);
	}
	if (n == '"' && !in_dq) {
		lx->pos += 1;
		return scan_dquote(lx, wa);
	}
	if (is_name_start(n)) {
		lx->pos += 2;
		while (!at_end(lx) && is_name_char(lx->s[lx->pos]))
			lx->pos++;
		wa->dynamic = true;
		return wa_append_special(wa, lx->s + start, lx->pos - start);
	}
	if (is_in(n, "0123456789@*#?-$!")) {
		lx->pos += 2;
		wa->dynamic = true;
		return wa_append_special(wa, lx->s + start, 2);
	}
	lx->pos++;
	return wa_putc(wa, '$');
}

/* pos is on the opening '"'. */
static int scan_dquote(struct lexer *lx, struct word_acc *wa)
{
	size_t open = lx->pos;
	wa->quoted = true;
	wa->plain = false;
	lx->pos++;
	while (!at_end(lx)) {
		char c = lx->s[lx->pos];
		int r;
		if (c == '"') {
			lx->pos++;
			/* an empty "" still makes a word */
			return wa_append(wa, "", 0);
		}
		if (c == '\\' && lx->pos + 1 < lx->len) {
			char n = lx->s[lx->pos + 1];
			if (n == '\n') {
				lx->pos += 2;
				continue;
			}
			if (n == '$' || n == '`' || n == '"' || n == '\\') {
				lx->pos += 2;
				r = wa_putc(wa, n);
			} else {
				lx->pos++;
				r = wa_putc(wa, '\\');
			}
		} else if (c == '$') {
			r = scan_dollar(lx, wa, true);
		} else if (c == '`') {
			r = scan_backtick(lx, wa, true);
		} else {
			lx->pos++;
			r = wa_putc(wa, c);
		}
		if (r != 0)
			return r;
	}
	return lex_fail(lx, open, "unterminated double quote");
}

/* pos is on the opening '`'. */
static int scan_backtick(struct lexer *lx, struct word_acc *wa, bool in_dq)
{
	size_t start = lx->pos;
	struct word_acc body;
	wa_init(&body);
	int r = 0;
	lx->pos++;
	for (;;) {
		if (at_end(lx)) {
			wa_free(&body);
			return lex_fail(lx, start, "unterminated backquote");
		}
		char c = lx->s[lx->pos];
		if (c == '`')
			break;
		if (c == '\\' && lx->pos + 1 < lx->len) {
			char n = lx->s[lx->pos + 1];
			if (n == '$' || n == '`' || n == '\\' || (in_dq && n == '"')) {
				r = wa_putc(&body, n);
				lx->pos += 2;
				if (r < 0)
					goto out;
				continue;
			}
		}
		r = wa_putc(&body, c);
		lx->pos++;
		if (r < 0)
			goto out;
	}
	lx->pos++;
	r = nest_check(lx);
	if (r < 0)
		goto out;
	struct lexer child;
	lexer_init(&child, lx, body.p ? body.p : "", body.len, 0, cur_depth(lx) + 1, MODE_TOP);
	r = lex_run(&child);
	lexer_done(&child);
	if (r != 0)
		goto out;
	wa->dynamic = true;
	r = wa_append_special(wa, lx->s + start, lx->pos - start);
out:
	wa_free(&body);
	return r;
}

static bool is_word_end(char c)
{
	return is_blank(c) || c == '\n' || c == ';' || c == '&' || c == '|' || c == ')';
}

static int scan_word(struct lexer *lx, struct word_acc *wa)
{
	while (!at_end(lx)) {
		char c = lx->s[lx->pos];
		size_t start = lx->pos;
		int r;
		if (is_word_end(c))
			break;
		if (c == '<' || c == '>') {
			if (wa->len == 0 && !wa->quoted && peek(lx, 1) == '(') {
				/* process substitution */
				lx->pos += 2;
				r = lex_subst(lx);
				if (r != 0)
					return r;
				wa->dynamic = true;
				r = wa_append_special(wa, lx->s + start, lx->pos - start);
				if (r < 0)
					return r;
				continue;
			}
			break;
		}
		if (c == '(') {
			bool array = wa->plain && wa->len > 0 && wa->p[wa->len - 1] == '=' &&
				     memchr(wa->p, '=', wa->len) == wa->p + wa->len - 1;
			bool extglob =
			    wa->plain && wa->len > 0 && is_in(wa->p[wa->len - 1], "@!?*+");
			if (!array && !extglob)
				break;
			lx->pos++;
			r = scan_parens(lx, false, start);
			if (r != 0)
				return r;
			if (array)
				wa->dynamic = true;
			else
				wa->glob = true;
			r = wa_append_special(wa, lx->s + start, lx->pos - start);
			if (r < 0)
				return r;
			continue;
		}
		switch (c) {
		case '\\':
			if (peek(lx, 1) == '\n') {
				lx->pos += 2;
				r = 0;
			} else if (lx->pos + 1 < lx->len) {
				wa->quoted = true;
				wa->plain = false;
				r = wa_putc(wa, lx->s[lx->pos + 1]);
				lx->pos += 2;
			} else {
				r = wa_putc(wa, '\\');
				lx->pos++;
			}
			break;
		case '\'': {
			const char *q = memchr(lx->s + lx->pos + 1, '\'', lx->len - lx->pos - 1);
			if (!q)
				return lex_fail(lx, lx->pos, "unterminated single quote");
			wa->quoted = true;
			wa->plain = false;
			r = wa_append(wa, lx->s + lx->pos + 1, (size_t)(q - lx->s) - lx->pos - 1);
			lx->pos = (size_t)(q - lx->s) + 1;
			break;
		}
		case '"':
			r = scan_dquote(lx, wa);
			break;
		case '$':
			r = scan_dollar(lx, wa, false);
			break;
		case '`':
			r = scan_backtick(lx, wa, false);
			break;
		default:
			if (c == '*' || c == '?' || c == '[')
				wa->glob = true;
			else if (c == '{')
				wa->brace = true;
			r = wa_putc(wa, c);
			lx->pos++;
			break;
		}
		if (r != 0)
			return r;
	}
	return 0;
}

/* Scans one word at pos into a fresh accumulator (the caller frees it). */
static int scan_one(struct lexer *lx, struct word_acc *wa)
{
	wa_init(wa);
	return scan_word(lx, wa);
}

static bool wa_is(const struct word_acc *wa, const char *kw)
{
	return !wa->quoted && !wa->dynamic && wa->p && strcmp(wa->p, kw) == 0;
}

static void skip_blanks(struct lexer *lx)
{
	while (!at_end(lx)) {
		char c = lx->s[lx->pos];
		if (is_blank(c))
			lx->pos++;
		else if (c == '\\' && peek(lx, 1) == '\n')
			lx->pos += 2;
		else
			break;
	}
}

/* ---- here-documents ---- */

static int read_heredocs(struct lexer *lx)
{
	int r = 0;
	struct word_acc scratch;
	wa_init(&scratch);
	for (size_t i = 0; i < lx->n_hd && r == 0; i++) {
		const struct heredoc *h = &lx->hd[i];
		size_t dlen = strlen(h->delim);
		while (!at_end(lx) && r == 0) {
			size_t p = lx->pos;
			if (h->strip)
				while (p < lx->len && lx->s[p] == '\t')
					p++;
			const char *nl = memchr(lx->s + p, '\n', lx->len - p);
			size_t line_end = nl ? (size_t)(nl - lx->s) : lx->len;
			if (line_end - p == dlen && memcmp(lx->s + p, h->delim, dlen) == 0) {
				lx->pos = nl ? line_end + 1 : line_end;
				break;
			}
			if (h->quoted) {
				lx->pos = nl ? line_end + 1 : line_end;
				continue;
			}
			/* an unquoted delimiter: $(...), `...` and ${...} in the body run */
			while (!at_end(lx) && lx->s[lx->pos] != '\n' && r == 0) {
				char c = lx->s[lx->pos];
				if (c == '\\')
					lx->pos += lx->pos + 1 < lx->len ? 2 : 1;
				else if (c == '$')
					r = scan_dollar(lx, &scratch, true);
				else if (c == '`')
					r = scan_backtick(lx, &scratch, true);
				else
					lx->pos++;
				scratch.len = 0;
			}
			if (!at_end(lx) && r == 0)
				lx->pos++;
		}
	}
	for (size_t i = 0; i < lx->n_hd; i++)
		free(lx->hd[i].delim);
	lx->n_hd = 0;
	wa_free(&scratch);
	return r;
}

static int push_heredoc(struct lexer *lx, struct word_acc *delim, bool strip)
{
	if (lx->n_hd == lx->cap_hd) {
		size_t ncap = lx->cap_hd ? lx->cap_hd * 2 : 4;
		struct heredoc *nh = realloc(lx->hd, ncap * sizeof(*nh));
		if (!nh)
			return -ENOMEM;
		lx->hd = nh;
		lx->cap_hd = ncap;
	}
	char *d = strdup(delim->p ? delim->p : "");
	if (!d)
		return -ENOMEM;
	lx->hd[lx->n_hd++] = (struct heredoc){.delim = d, .quoted = delim->quoted, .strip = strip};
	return 0;
}

/* Blanks, newlines (with the here-documents they end) and comments, where the grammar
 * allows a newline list. */
static int skip_space(struct lexer *lx)
{
	for (;;) {
		skip_blanks(lx);
		if (at_end(lx))
			return 0;
		char c = lx->s[lx->pos];
		if (c == '\n') {
			lx->pos++;
			int r = read_heredocs(lx);
			if (r != 0)
				return r;
		} else if (c == '#') {
			while (!at_end(lx) && lx->s[lx->pos] != '\n')
				lx->pos++;
		} else {
			return 0;
		}
	}
}

/* ---- redirections, compound commands ---- */

/* pos is on '<', '>' or "&>"; start is where the redirection began (an fd number). */
static int lex_redirect(struct lexer *lx, size_t start)
{
	bool heredoc = false, strip = false;
	char c = lx->s[lx->pos];
	if (c == '&') {
		lx->pos += 2; /* &> */
		if (peek(lx, 0) == '>')
			lx->pos++;
	} else if (c == '<') {
		lx->pos++;
		char n = peek(lx, 0);
		if (n == '<') {
			lx->pos++;
			if (peek(lx, 0) == '<') {
				lx->pos++; /* <<< here-string */
			} else {
				heredoc = true;
				if (peek(lx, 0) == '-') {
					strip = true;
					lx->pos++;
				}
			}
		} else if (n == '&' || n == '>') {
			lx->pos++;
		}
	} else {
		lx->pos++;
		char n = peek(lx, 0);
		if (n == '>' || n == '|' || n == '&')
			lx->pos++;
	}
	skip_blanks(lx);
	if (at_end(lx))
		return lex_fail(lx, start, "redirection without a target");
	char t = lx->s[lx->pos];
	if (t == '\n' || t == ';' || t == '&' || t == '|' || t == '(' || t == ')' ||
	    ((t == '<' || t == '>') && peek(lx, 1) != '('))
		return lex_fail(lx, start, "redirection without a target");
	struct word_acc wa;
	size_t before = lx->pos;
	int r = scan_one(lx, &wa);
	if (r == 0 && lx->pos == before)
		r = lex_fail(lx, start, "redirection without a target");
	if (r == 0 && heredoc)
		r = push_heredoc(lx, &wa, strip);
	wa_free(&wa);
	if (r != 0)
		return r;
	if (!lx->have_start) {
		lx->cmd_start = start;
		lx->have_start = true;
	}
	lx->cmd_end = lx->pos;
	return 0;
}

/* After "case": the subject, "in", then patterns. */
static int lex_case_head(struct lexer *lx, size_t kw_off)
{
	struct word_acc wa;
	skip_blanks(lx);
	if (at_end(lx))
		return lex_fail(lx, kw_off, "unterminated case");
	int r = scan_one(lx, &wa);
	wa_free(&wa);
	if (r != 0)
		return r;
	r = skip_space(lx);
	if (r != 0)
		return r;
	r = scan_one(lx, &wa);
	bool in = wa_is(&wa, "in");
	wa_free(&wa);
	if (r != 0)
		return r;
	if (!in)
		return lex_fail(lx, kw_off, "expected 'in' after case");
	return ctx_push(lx, CTX_CASE_PATTERN);
}

/* In CTX_CASE_PATTERN: "esac", or "[(] pattern [| pattern]... )". */
static int lex_case_pattern(struct lexer *lx)
{
	struct word_acc wa;
	int r = skip_space(lx);
	if (r != 0)
		return r;
	if (at_end(lx))
		return lex_fail(lx, lx->pos, "unterminated case");
	if (lx->s[lx->pos] == '(')
		lx->pos++;
	for (bool first = true;; first = false) {
		skip_blanks(lx);
		size_t before = lx->pos;
		r = scan_one(lx, &wa);
		bool esac = first && wa_is(&wa, "esac");
		wa_free(&wa);
		if (r != 0)
			return r;
		if (esac) {
			lx->n_ctx--;
			lx->at_start = true;
			return 0;
		}
		skip_blanks(lx);
		char c = peek(lx, 0);
		if (c == '|' && lx->pos > before) {
			lx->pos++;
			continue;
		}
		if (c == ')' && lx->pos > before) {
			lx->pos++;
			break;
		}
		return lex_fail(lx, lx->pos, "could not read a case pattern");
	}
	lx->ctx[lx->n_ctx - 1] = CTX_CASE_BODY;
	lx->at_start = true;
	return 0;
}

/* After "for" or "select": NAME [in WORDS...] or ((...)). */
static int lex_for_head(struct lexer *lx, size_t kw_off)
{
	struct word_acc wa;
	skip_blanks(lx);
	if (peek(lx, 0) == '(' && peek(lx, 1) == '(') {
		lx->pos += 2;
		int r = nest_check(lx);
		if (r < 0)
			return r;
		lx->depth++;
		r = scan_parens(lx, true, kw_off);
		lx->depth--;
		if (r == 1)
			return lex_fail(lx, kw_off, "could not read for ((...))");
		return r;
	}
	int r = scan_one(lx, &wa);
	wa_free(&wa);
	if (r != 0)
		return r;
	size_t save = lx->pos;
	r = skip_space(lx);
	if (r != 0)
		return r;
	if (at_end(lx) || is_in(lx->s[lx->pos], ";&|()<>")) {
		lx->pos = save;
		return 0;
	}
	r = scan_one(lx, &wa);
	bool in = wa_is(&wa, "in");
	wa_free(&wa);
	if (r != 0)
		return r;
	if (!in) {
		lx->pos = save; /* "do" comes next: lexed again as a keyword */
		return 0;
	}
	for (;;) {
		skip_blanks(lx);
		if (at_end(lx) || is_in(lx->s[lx->pos], ";&|()<>\n#"))
			return 0;
		size_t before = lx->pos;
		r = scan_one(lx, &wa);
		wa_free(&wa);
		if (r != 0)
			return r;
		if (lx->pos == before)
			return lex_fail(lx, before, "could not read a for list");
	}
}

/* After "[[": words and operators up to "]]". */
static int lex_dbracket(struct lexer *lx, size_t kw_off)
{
	struct word_acc wa;
	for (;;) {
		int r = skip_space(lx);
		if (r != 0)
			return r;
		if (at_end(lx))
			return lex_fail(lx, kw_off, "unterminated [[");
		char c = lx->s[lx->pos];
		if (is_in(c, "()!&|<>;")) {
			lx->pos++;
			continue;
		}
		size_t before = lx->pos;
		r = scan_one(lx, &wa);
		bool end = wa_is(&wa, "]]");
		wa_free(&wa);
		if (r != 0)
			return r;
		if (end)
			return 0;
		if (lx->pos == before)
			lx->pos++;
	}
}

/* A word at pos: a reserved word, an fd number before a redirection, or a word of the
 * current simple command. */
static int lex_word(struct lexer *lx)
{
	size_t start = lx->pos;
	struct word_acc wa;
	int r = scan_one(lx, &wa);
	if (r != 0) {
		wa_free(&wa);
		return r;
	}
	if (lx->pos == start) { /* cannot happen; never loop */
		wa_free(&wa);
		return lex_fail(lx, start, "unexpected character");
	}
	char next = peek(lx, 0);
	if ((next == '<' || next == '>') && !wa.quoted && !wa.dynamic && wa.len > 0) {
		bool fd = strspn(wa.p, "0123456789") == wa.len;
		if (!fd && wa.len > 2 && wa.p[0] == '{' && wa.p[wa.len - 1] == '}') {
			fd = is_name_start(wa.p[1]);
			for (size_t i = 2; i + 1 < wa.len; i++)
				fd = fd && is_name_char(wa.p[i]);
		}
		if (fd) {
			wa_free(&wa);
			return lex_redirect(lx, start);
		}
	}
	bool after_time = lx->after_time;
	lx->after_time = false;
	if (lx->at_start && !wa.quoted && !wa.dynamic) {
		/* bash's `time [-p]` times a whole pipeline, compound commands included */
		if (strcmp(wa.p, "time") == 0 || (after_time && strcmp(wa.p, "-p") == 0)) {
			wa_free(&wa);
			lx->after_time = true;
			return 0;
		}
		static const char *const skip_kw[] = {"if", "then", "else",  "elif",  "fi",
						      "do", "done", "while", "until", "!",
						      "{",  "}",    "coproc"};
		for (size_t i = 0; i < ARRAY_SIZE(skip_kw); i++) {
			if (strcmp(wa.p, skip_kw[i]) == 0) {
				wa_free(&wa);
				return 0;
			}
		}
		if (strcmp(wa.p, "esac") == 0) {
			wa_free(&wa);
			int top = ctx_top(lx);
			if (top == CTX_CASE_BODY || top == CTX_CASE_PATTERN)
				lx->n_ctx--;
			return 0;
		}
		if (strcmp(wa.p, "case") == 0) {
			wa_free(&wa);
			return lex_case_head(lx, start);
		}
		if (strcmp(wa.p, "for") == 0 || strcmp(wa.p, "select") == 0) {
			wa_free(&wa);
			return lex_for_head(lx, start);
		}
		if (strcmp(wa.p, "[[") == 0) {
			wa_free(&wa);
			return lex_dbracket(lx, start);
		}
		if (strcmp(wa.p, "function") == 0) {
			wa_free(&wa);
			skip_blanks(lx);
			r = scan_one(lx, &wa);
			wa_free(&wa);
			if (r != 0)
				return r;
			skip_blanks(lx);
			if (peek(lx, 0) == '(') {
				lx->pos++;
				skip_blanks(lx);
				if (peek(lx, 0) != ')')
					return lex_fail(lx, lx->pos,
							"expected ')' after function name");
				lx->pos++;
			}
			return 0;
		}
	}
	r = push_word(lx, &wa, start);
	wa_free(&wa);
	if (r < 0)
		return r;
	lx->at_start = false;
	return 0;
}

static int lex_open_paren(struct lexer *lx)
{
	size_t start = lx->pos;
	if (lx->n_words > 0) {
		/* name () compound-command: a function definition */
		if (lx->n_words == 1 && !lx->words[0].quoted && !lx->words[0].dynamic) {
			lx->pos++;
			skip_blanks(lx);
			if (peek(lx, 0) == ')') {
				lx->pos++;
				free_words(lx);
				lx->have_start = false;
				lx->at_start = true;
				return 0;
			}
		}
		return lex_fail(lx, start, "unexpected '('");
	}
	if (peek(lx, 1) == '(') {
		/* (( arithmetic )), or two subshells */
		int r = nest_check(lx);
		if (r < 0)
			return r;
		lx->pos += 2;
		lx->depth++;
		r = scan_parens(lx, true, start);
		lx->depth--;
		if (r != 1) {
			lx->at_start = true;
			return r;
		}
		lx->pos = start;
	}
	int r = ctx_push(lx, CTX_SUBSHELL);
	if (r < 0)
		return r;
	lx->pos++;
	lx->at_start = true;
	return 0;
}

static int lex_eof(struct lexer *lx)
{
	int r = finish(lx);
	if (r != 0)
		return r;
	if (lx->mode == MODE_SUBST)
		return lex_fail(lx, lx->start, "unterminated '$(' or '<('");
	if (ctx_top(lx) == CTX_SUBSHELL)
		return lex_fail(lx, lx->len, "unterminated '('");
	if (lx->n_ctx > 0)
		return lex_fail(lx, lx->len, "unterminated case");
	return 0;
}

static int lex_run(struct lexer *lx)
{
	for (;;) {
		int r;
		if (ctx_top(lx) == CTX_CASE_PATTERN) {
			r = lex_case_pattern(lx);
			if (r != 0)
				return r;
			continue;
		}
		skip_blanks(lx);
		if (at_end(lx))
			return lex_eof(lx);
		char c = lx->s[lx->pos];
		switch (c) {
		case '#':
			while (!at_end(lx) && lx->s[lx->pos] != '\n')
				lx->pos++;
			continue;
		case '\n':
			r = finish(lx);
			if (r != 0)
				return r;
			lx->pos++;
			r = read_heredocs(lx);
			if (r != 0)
				return r;
			lx->at_start = true;
			continue;
		case ';': {
			bool case_end = false;
			r = finish(lx);
			if (r != 0)
				return r;
			lx->pos++;
			if (peek(lx, 0) == ';') {
				lx->pos++;
				if (peek(lx, 0) == '&')
					lx->pos++;
				case_end = true;
			} else if (peek(lx, 0) == '&') {
				lx->pos++;
				case_end = true;
			}
			if (case_end && ctx_top(lx) == CTX_CASE_BODY)
				lx->ctx[lx->n_ctx - 1] = CTX_CASE_PATTERN;
			lx->at_start = true;
			continue;
		}
		case '&':
			if (peek(lx, 1) == '>') {
				r = lex_redirect(lx, lx->pos);
				if (r != 0)
					return r;
				continue;
			}
			r = finish(lx);
			if (r != 0)
				return r;
			lx->pos++;
			if (peek(lx, 0) == '&')
				lx->pos++;
			lx->at_start = true;
			continue;
		case '|':
			r = finish(lx);
			if (r != 0)
				return r;
			lx->pos++;
			if (peek(lx, 0) == '|' || peek(lx, 0) == '&')
				lx->pos++;
			lx->at_start = true;
			continue;
		case '(':
			r = lex_open_paren(lx);
			if (r != 0)
				return r;
			continue;
		case ')':
			r = finish(lx);
			if (r != 0)
				return r;
			if (ctx_top(lx) == CTX_SUBSHELL) {
				lx->n_ctx--;
				lx->pos++;
				lx->at_start = true;
				continue;
			}
			if (lx->n_ctx == 0 && lx->mode == MODE_SUBST) {
				lx->pos++;
				lx->closed = true;
				return 0;
			}
			return lex_fail(lx, lx->pos, "unexpected ')'");
		case '<':
		case '>':
			if (peek(lx, 1) == '(')
				break; /* a process substitution word */
			r = lex_redirect(lx, lx->pos);
			if (r != 0)
				return r;
			continue;
		default:
			break;
		}
		r = lex_word(lx);
		if (r != 0)
			return r;
	}
}

int cae__sh_lex(const char *s, size_t len, unsigned depth, unsigned max_depth, cae_sh_command_fn fn,
		void *userdata, cae_error *err)
{
	if (!s || !fn)
		return -EINVAL;
	struct lexer root = {.max_depth = max_depth, .fn = fn, .ud = userdata, .err = err};
	if (depth > max_depth)
		return cae_error_set(err, -ELOOP, "nested more than %u levels deep", max_depth);
	struct lexer lx;
	lexer_init(&lx, &root, s, len, 0, depth, MODE_TOP);
	int r = lex_run(&lx);
	lexer_done(&lx);
	return r;
}
