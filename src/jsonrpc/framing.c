/* Newline-delimited framing with a bounded line length. A line over the bound is skipped
 * without being kept, and on the way its top-level "id" is picked out by a small scanner
 * (jansson parses only whole documents, and this one is never held whole), so that the error
 * answer can carry the request's id. */
#include "cae/jsonrpc.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/banned.h"

#define READ_CHUNK ((size_t)64 << 10)
#define ID_MAX 256 /* the longest id text kept (a number or a string with its quotes) */

/* The top-level "id" member of a JSON object seen a piece at a time. Only what it needs is
 * tracked: nesting depth, strings and their escapes, whether a string at depth 1 is a key
 * (and whether it reads exactly "id"), and the value that follows such a key. An id spelt
 * with escapes in its key is not recognised (the answer then has a null id). */
typedef struct idscan {
	int depth;
	bool in_str, esc, bad; /* bad: not an object, or too deep to care */
	bool want_key;	       /* at depth 1, the next string is a key */
	bool in_key;	       /* reading a key at depth 1 */
	size_t key_len;	       /* bytes of the key so far; key_ok while they match "id" */
	bool key_ok;
	bool after_id_key; /* the key was "id": its ':' and value follow */
	bool in_value;	   /* capturing the id's value */
	bool found;	   /* a whole value was captured */
	char val[ID_MAX + 1];
	size_t val_len;
} idscan;

static void id_value_end(idscan *s)
{
	s->in_value = false;
	s->found = s->val_len > 0 && s->val_len <= ID_MAX;
	s->val[s->val_len <= ID_MAX ? s->val_len : 0] = '\0';
}

static void id_value_put(idscan *s, char c)
{
	if (s->val_len < ID_MAX)
		s->val[s->val_len] = c;
	s->val_len++; /* past ID_MAX: too long, dropped at the end */
}

/* The value after the key "id" begins with c (a quote, a digit, ...): captured unless an id
 * was found already (the first one counts). */
static void id_value_start(idscan *s, char c)
{
	s->after_id_key = false;
	s->in_value = !s->found;
	s->val_len = 0;
	if (s->in_value)
		id_value_put(s, c);
}

static void scan_feed(idscan *s, const char *p, size_t n)
{
	for (size_t i = 0; i < n && !s->bad; i++) {
		char c = p[i];
		if (s->in_value && !s->in_str) {
			/* a number, true, false or null: ends at a delimiter */
			if (c == ',' || c == '}' || c == ']' || c == ' ' || c == '\t' ||
			    c == '\r' || c == '\n')
				id_value_end(s);
			else {
				id_value_put(s, c);
				continue;
			}
		}
		if (s->in_str) {
			if (s->in_value)
				id_value_put(s, c);
			if (s->esc) {
				s->esc = false;
				s->key_ok = false;
			} else if (c == '\\') {
				s->esc = true;
			} else if (c == '"') {
				s->in_str = false;
				if (s->in_value)
					id_value_end(s);
				if (s->in_key) {
					s->in_key = false;
					s->after_id_key = s->key_ok && s->key_len == 2;
				}
			} else if (s->in_key) {
				s->key_ok = s->key_ok && s->key_len < 2 && c == "id"[s->key_len];
				s->key_len++;
			}
			continue;
		}
		switch (c) {
		case ' ':
		case '\t':
		case '\r':
		case '\n':
			break;
		case '"':
			s->in_str = true;
			if (s->depth == 1 && s->want_key) {
				s->want_key = false;
				s->in_key = true;
				s->key_len = 0;
				s->key_ok = true;
			} else if (s->depth == 1 && s->after_id_key) {
				id_value_start(s, c);
			}
			break;
		case ':':
			break;
		case '{':
		case '[':
			if (s->depth == 0 && c != '{')
				s->bad = true;
			s->after_id_key = false; /* an object or array as the id: not one */
			s->depth++;
			s->want_key = s->depth == 1;
			if (s->depth > 1000000)
				s->bad = true;
			break;
		case '}':
		case ']':
			s->depth--;
			s->after_id_key = false;
			break;
		case ',':
			if (s->depth == 1)
				s->want_key = true;
			s->after_id_key = false;
			break;
		default:
			if (s->depth == 0) {
				s->bad = true;
			} else if (s->depth == 1 && s->after_id_key) {
				id_value_start(s, c);
			}
		}
	}
}

struct cae_jsonrpc_framer {
	char *buf; /* pending bytes are buf[start, end) */
	size_t start;
	size_t end;
	size_t cap;
	size_t scanned; /* bytes from start known to hold no newline */
	size_t max_line;
	bool discarding;    /* inside an oversized line: skip to its newline */
	idscan scan;	    /* the oversized line's id, read while it is skipped */
	json_t *dropped_id; /* the id of the last oversized line, or NULL */
};

/* Most bytes ever pending: one maximal line, its newline, and one read's worth. */
static size_t framer_limit(const cae_jsonrpc_framer *f)
{
	return f->max_line + 1 + READ_CHUNK;
}

cae_jsonrpc_framer *cae_jsonrpc_framer_new(size_t max_line)
{
	cae_jsonrpc_framer *f = calloc(1, sizeof(*f));
	if (!f)
		return NULL;
	f->max_line = max_line ? max_line : CAE_JSONRPC_DEFAULT_MAX_MESSAGE;
	return f;
}

void cae_jsonrpc_framer_free(cae_jsonrpc_framer *f)
{
	if (!f)
		return;
	free(f->buf);
	json_decref(f->dropped_id);
	free(f);
}

/* Moves pending bytes to the front and makes room for n more (n within the limit). */
static int framer_reserve(cae_jsonrpc_framer *f, size_t n)
{
	if (f->start > 0) {
		memmove(f->buf, f->buf + f->start, f->end - f->start);
		f->end -= f->start;
		f->start = 0;
	}
	size_t need = f->end + n + 1; /* + NUL written over a newline or at the end */
	if (need <= f->cap)
		return 0;
	size_t cap = f->cap ? f->cap : 4096;
	while (cap < need)
		cap *= 2;
	if (cap > framer_limit(f) + 1)
		cap = framer_limit(f) + 1;
	char *p = realloc(f->buf, cap);
	if (!p)
		return -ENOMEM;
	f->buf = p;
	f->cap = cap;
	return 0;
}

long cae_jsonrpc_framer_feed(cae_jsonrpc_framer *f, const void *data, size_t n)
{
	size_t pending = f->end - f->start;
	size_t room = framer_limit(f) > pending ? framer_limit(f) - pending : 0;
	if (n > room)
		n = room;
	if (n == 0)
		return 0;
	int r = framer_reserve(f, n);
	if (r < 0)
		return r;
	memcpy(f->buf + f->end, data, n);
	f->end += n;
	return (long)n;
}

long cae_jsonrpc_framer_read(cae_jsonrpc_framer *f, int fd)
{
	size_t pending = f->end - f->start;
	size_t room = framer_limit(f) > pending ? framer_limit(f) - pending : 0;
	if (room > READ_CHUNK)
		room = READ_CHUNK;
	if (room == 0)
		return -ENOBUFS; /* the caller did not drain with _next first */
	int r = framer_reserve(f, room);
	if (r < 0)
		return r;
	for (;;) {
		ssize_t k = read(fd, f->buf + f->end, room);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return -errno;
		f->end += (size_t)k;
		return (long)k;
	}
}

static bool blank(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r')
			return false;
	return true;
}

/* An oversized line starts: its id is looked for in what is skipped of it. */
static void drop_begin(cae_jsonrpc_framer *f)
{
	memset(&f->scan, 0, sizeof(f->scan));
	json_decref(f->dropped_id);
	f->dropped_id = NULL;
}

/* ... and ends: its id, when one was seen, is kept for cae_jsonrpc_framer_dropped_id. */
static int drop_end(cae_jsonrpc_framer *f)
{
	idscan *s = &f->scan;
	if (s->in_value)
		id_value_end(s);
	if (s->found) {
		json_t *id = json_loads(s->val, JSON_DECODE_ANY, NULL);
		if (json_is_string(id) || json_is_integer(id))
			f->dropped_id = id;
		else
			json_decref(id);
	}
	return -E2BIG;
}

/* Hands out buf[start, start+n) as a line and moves past it and its terminator. */
static int take_line(cae_jsonrpc_framer *f, size_t n, size_t skip, const char **line, size_t *len)
{
	char *s = f->buf + f->start;
	f->start += n + skip;
	f->scanned = 0;
	if (n > f->max_line) {
		drop_begin(f);
		scan_feed(&f->scan, s, n);
		return drop_end(f);
	}
	if (n > 0 && s[n - 1] == '\r')
		n--;
	s[n] = '\0';
	*line = s;
	*len = n;
	return 1;
}

int cae_jsonrpc_framer_next(cae_jsonrpc_framer *f, const char **line, size_t *len)
{
	for (;;) {
		size_t pending = f->end - f->start;
		if (pending == 0) {
			f->start = f->end = f->scanned = 0;
			return 0;
		}
		char *s = f->buf + f->start;
		char *nl = memchr(s + f->scanned, '\n', pending - f->scanned);
		if (f->discarding) {
			if (!nl) {
				scan_feed(&f->scan, s, pending);
				f->start = f->end = f->scanned = 0;
				return 0;
			}
			scan_feed(&f->scan, s, (size_t)(nl - s));
			f->start += (size_t)(nl - s) + 1;
			f->scanned = 0;
			f->discarding = false;
			return drop_end(f);
		}
		if (!nl) {
			f->scanned = pending;
			if (pending > f->max_line) {
				/* Too long already: skip it from here on, reading its id on the
				 * way; reported once its end is reached. */
				drop_begin(f);
				scan_feed(&f->scan, s, pending);
				f->discarding = true;
				f->start = f->end = f->scanned = 0;
			}
			return 0;
		}
		size_t n = (size_t)(nl - s);
		if (n <= f->max_line && blank(s, n)) {
			f->start += n + 1;
			f->scanned = 0;
			continue;
		}
		return take_line(f, n, 1, line, len);
	}
}

int cae_jsonrpc_framer_finish(cae_jsonrpc_framer *f, const char **line, size_t *len)
{
	int r = cae_jsonrpc_framer_next(f, line, len);
	if (r != 0)
		return r;
	if (f->discarding) {
		f->discarding = false;
		f->start = f->end = f->scanned = 0;
		return drop_end(f);
	}
	size_t pending = f->end - f->start;
	if (pending == 0 || blank(f->buf + f->start, pending)) {
		f->start = f->end = f->scanned = 0;
		return 0;
	}
	/* There is always room for the NUL: framer_reserve keeps one spare byte. */
	return take_line(f, pending, 0, line, len);
}

json_t *cae_jsonrpc_framer_dropped_id(const cae_jsonrpc_framer *f)
{
	return f->dropped_id ? json_incref(f->dropped_id) : NULL;
}
