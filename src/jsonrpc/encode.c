/* Encoding of a message as one compact JSON line.
 *
 * The bytes are exactly those of jansson's json_dumps(JSON_COMPACT) (members in insertion
 * order, the same escapes: \" \\ \b \f \n \r \t and \u00XX with upper-case hex for the other
 * control characters, everything else as is), but written in one pass into one buffer:
 * json_dumps decodes every character of every string, calls back for each run between
 * escapes, keeps a hash table of the containers it is in (loop detection) and copies the
 * result once more at the end, which made it most of the server's time for a tool result
 * that carries a file's text. Anything unusual (a value nested deeper than FAST_DEPTH, which
 * also covers reference cycles, or a string that is not valid UTF-8) is handed to json_dumps
 * whole, so the outcome, including failure, is always the one json_dumps gives.
 */
#include "cae/jsonrpc.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/utf8.h"
#include "jsonrpc/jsonrpc-internal.h"
#include "base/banned.h"

#define FAST_DEPTH 64
#define NOT_FAST (-EDOM) /* let json_dumps decide */

struct out {
	char *p;
	size_t len;
	size_t cap;
	/* The last long string written, to copy when the same one comes again: a tool result's
	 * text is both its text content and its structured output (one shared json_t). */
	const char *last;
	size_t last_n;	 /* its length */
	size_t last_at;	 /* where its encoding starts in p */
	size_t last_len; /* and its length */
};

#define REUSE_MIN 256 /* bytes: shorter strings are not worth remembering */

static int grow(struct out *o, size_t n)
{
	if (n > SIZE_MAX / 2 - o->len)
		return -ENOMEM;
	size_t cap = o->cap ? o->cap : 1024;
	while (cap < o->len + n)
		cap *= 2;
	char *p = realloc(o->p, cap);
	if (!p)
		return -ENOMEM;
	o->p = p;
	o->cap = cap;
	return 0;
}

static inline int reserve(struct out *o, size_t n)
{
	return o->cap - o->len >= n ? 0 : grow(o, n);
}

static int put(struct out *o, const char *s, size_t n)
{
	int r = reserve(o, n);
	if (r < 0)
		return r;
	memcpy(o->p + o->len, s, n);
	o->len += n;
	return 0;
}

/* 0: copied as is; 1: escaped; 2: the lead byte of a multi-byte sequence (validated). */
static const uint8_t byte_class[256] = {
    [0x00 ... 0x1f] = 1,
    ['"'] = 1,
    ['\\'] = 1,
    [0x80 ... 0xff] = 2,
};

/* The two-character escape of c, or 0 for the \u00XX form. */
static char short_escape(unsigned char c)
{
	switch (c) {
	case '"':
		return '"';
	case '\\':
		return '\\';
	case '\b':
		return 'b';
	case '\f':
		return 'f';
	case '\n':
		return 'n';
	case '\r':
		return 'r';
	case '\t':
		return 't';
	default:
		return 0;
	}
}

/* Writes str as a JSON string. */
static int put_escaped(struct out *o, const char *str, size_t n)
{
	static const char hex[] = "0123456789ABCDEF";
	const unsigned char *s = (const unsigned char *)str;
	/* Room for the common case (nothing to escape); each escape reserves its extra. */
	int r = reserve(o, n + 2);
	if (r < 0)
		return r;
	char *d = o->p + o->len;
	*d++ = '"';
	size_t i = 0;
	while (i < n) {
		/* Plain bytes are copied as they are scanned, 8 at a time: a word with a byte that
		 * is not plain is copied whole (the room is there) but counted only up to that
		 * byte. The last few bytes go one by one. */
		for (uint64_t w, sp; i + 8 <= n; i += 8, d += 8) {
			memcpy(&w, s + i, 8);
			memcpy(d, &w, 8);
			if ((sp = cae__jsonrpc_special8(w)) != 0) {
				size_t k = cae__jsonrpc_special8_offset(sp);
				i += k;
				d += k;
				break;
			}
		}
		while (i < n && byte_class[s[i]] == 0)
			*d++ = (char)s[i++];
		if (i == n)
			break;
		if (byte_class[s[i]] == 2) {
			size_t l = cae__utf8_seq_len(s + i, n - i);
			if (l == 0)
				return NOT_FAST;
			for (size_t k = 0; k < l; k++)
				*d++ = (char)s[i++];
			continue;
		}
		/* An escape of up to 6 bytes for 1 byte, then the rest and the closing quote. */
		o->len = (size_t)(d - o->p);
		if ((r = reserve(o, 6 + (n - i - 1) + 1)) < 0)
			return r;
		d = o->p + o->len;
		unsigned char c = s[i++];
		char e = short_escape(c);
		*d++ = '\\';
		if (e) {
			*d++ = e;
		} else {
			*d++ = 'u';
			*d++ = '0';
			*d++ = '0';
			*d++ = hex[c >> 4];
			*d++ = hex[c & 15];
		}
	}
	*d++ = '"';
	o->len = (size_t)(d - o->p);
	return 0;
}

/* Writes str as a JSON string, or copies the encoding of the last long string when this is
 * the same one again (the same bytes at the same address). */
static int put_string(struct out *o, const char *str, size_t n)
{
	if (n < REUSE_MIN)
		return put_escaped(o, str, n);
	if (str == o->last && n == o->last_n) {
		int r = reserve(o, o->last_len);
		if (r < 0)
			return r;
		memcpy(o->p + o->len, o->p + o->last_at, o->last_len);
		o->len += o->last_len;
		return 0;
	}
	size_t at = o->len;
	int r = put_escaped(o, str, n);
	if (r == 0) {
		o->last = str;
		o->last_n = n;
		o->last_at = at;
		o->last_len = o->len - at;
	}
	return r;
}

static int put_value(struct out *o, const json_t *v, unsigned depth);

static int put_real(struct out *o, const json_t *v)
{
	/* Rare in messages; jansson's own rendering (precision, ".0", exponent form). */
	char *s = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
	if (!s)
		return NOT_FAST;
	int r = put(o, s, strlen(s));
	free(s);
	return r;
}

static int put_object(struct out *o, const json_t *v, unsigned depth)
{
	json_t *obj = (json_t *)v; /* the iterator API is not const; nothing is changed */
	int r = put(o, "{", 1);
	for (void *it = json_object_iter(obj); r == 0 && it;) {
		r = put_string(o, json_object_iter_key(it), json_object_iter_key_len(it));
		if (r == 0)
			r = put(o, ":", 1);
		if (r == 0)
			r = put_value(o, json_object_iter_value(it), depth + 1);
		it = json_object_iter_next(obj, it);
		if (r == 0 && it)
			r = put(o, ",", 1);
	}
	return r < 0 ? r : put(o, "}", 1);
}

static int put_array(struct out *o, const json_t *v, unsigned depth)
{
	int r = put(o, "[", 1);
	size_t n = json_array_size(v);
	for (size_t i = 0; r == 0 && i < n; i++) {
		if (i > 0)
			r = put(o, ",", 1);
		if (r == 0)
			r = put_value(o, json_array_get(v, i), depth + 1);
	}
	return r < 0 ? r : put(o, "]", 1);
}

static int put_value(struct out *o, const json_t *v, unsigned depth)
{
	if (!v || depth > FAST_DEPTH)
		return NOT_FAST;
	switch (json_typeof(v)) {
	case JSON_OBJECT:
		return put_object(o, v, depth);
	case JSON_ARRAY:
		return put_array(o, v, depth);
	case JSON_STRING:
		return put_string(o, json_string_value(v), json_string_length(v));
	case JSON_INTEGER: {
		char b[32];
		int k = snprintf(b, sizeof(b), "%" JSON_INTEGER_FORMAT, json_integer_value(v));
		return k > 0 && (size_t)k < sizeof(b) ? put(o, b, (size_t)k) : NOT_FAST;
	}
	case JSON_REAL:
		return put_real(o, v);
	case JSON_TRUE:
		return put(o, "true", 4);
	case JSON_FALSE:
		return put(o, "false", 5);
	case JSON_NULL:
		return put(o, "null", 4);
	}
	return NOT_FAST;
}

static char *encode_any(const json_t *msg, size_t *len);

/* The line as json_dumps writes it, plus the newline. */
static char *encode_slow(const json_t *msg, size_t *len)
{
	char *s = json_dumps(msg, JSON_COMPACT);
	if (!s)
		return NULL;
	size_t n = strlen(s);
	char *p = realloc(s, n + 2);
	if (!p) {
		free(s);
		return NULL;
	}
	p[n] = '\n';
	p[n + 1] = '\0';
	if (len)
		*len = n + 1;
	return p;
}

/* A message's raw-number id (cae_jsonrpc_raw_number) was written as the string
 * "\u0000<token>": written back as the bare token, in place. The pattern is the envelope's
 * first two members with JSON's own quotes, which a string's content cannot hold unescaped,
 * and no other string starts with NUL. */
static void restore_raw_ids(char *p, size_t *len)
{
	static const char pat[] = "{\"jsonrpc\":\"2.0\",\"id\":\"\\u0000";
	const size_t pl = sizeof(pat) - 1, keep = pl - 7; /* up to and with "id": */
	size_t n = *len;
	char *at = p;
	while ((at = memmem(at, n - (size_t)(at - p), pat, pl)) != NULL) {
		char *tok = at + pl;
		char *q = memchr(tok, '"', n - (size_t)(tok - p));
		if (!q)
			break;
		/* "{...id":" + \u0000 + token + '"'  ->  "{...id":" + token */
		memmove(at + keep, tok, (size_t)(q - tok));
		char *end = at + keep + (q - tok);
		memmove(end, q + 1, n - (size_t)(q + 1 - p));
		n -= 8;
		p[n] = '\0';
		at = end;
	}
	*len = n;
}

char *cae_jsonrpc_encode(const json_t *msg, size_t *len)
{
	size_t n;
	char *p = encode_any(msg, &n);
	if (p && memchr(p, '\\', n) && memmem(p, n, "\\u0000", 6))
		restore_raw_ids(p, &n);
	if (p && len)
		*len = n;
	return p;
}

static char *encode_any(const json_t *msg, size_t *len)
{
	if (!json_is_object(msg) && !json_is_array(msg))
		return NULL; /* as json_dumps without JSON_ENCODE_ANY */
	struct out o = {0};
	int r = put_value(&o, msg, 0);
	if (r == 0)
		r = put(&o, "\n", 2);
	if (r < 0) {
		free(o.p);
		return r == NOT_FAST ? encode_slow(msg, len) : NULL;
	}
	if (len)
		*len = o.len - 1;
	return o.p;
}
