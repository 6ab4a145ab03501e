/* The fast path of message parsing (see jsonrpc-internal.h).
 *
 * json_loadb reads through a character stream, appends each character of a token to a
 * buffer one call at a time and checks UTF-8 on the way: about 200 instructions a byte, as
 * much as the rest of a small tool call together, and milliseconds for a file sent whole in
 * a text_editor create. This parser scans strings 8 bytes at a time and builds the same
 * jansson values directly. It gives up on anything it does not handle, so that json_loadb
 * has the last word on every input it would refuse and on how to say why.
 */
#include "jsonrpc/jsonrpc-internal.h"

#include <stdlib.h>
#include <string.h>

#include "base/utf8.h"
#include "base/banned.h"

#define MAX_INT_DIGITS 18 /* fits int64 whatever the digits; longer goes to jansson */

struct in {
	const unsigned char *p;
	const unsigned char *end;
	unsigned depth;
	unsigned max_depth;
};

static void skip_ws(struct in *in)
{
	while (in->p < in->end &&
	       (*in->p == ' ' || *in->p == '\n' || *in->p == '\r' || *in->p == '\t'))
		in->p++;
}

/* Scans a string whose opening quote is at in->p: *s and *n get its raw contents, in->p moves
 * past the closing quote. Only the characters JSON allows raw: no control character, valid
 * UTF-8; escapes are checked when decoded. */
static bool scan_string(struct in *in, const unsigned char **s, size_t *n, bool *escaped)
{
	const unsigned char *p = in->p + 1, *end = in->end;
	*escaped = false;
	for (;;) {
		for (uint64_t w, sp; end - p >= 8; p += 8) {
			memcpy(&w, p, 8);
			if ((sp = cae_jsonrpc_special8(w)) != 0) {
				p += cae_jsonrpc_special8_offset(sp);
				break;
			}
		}
		if (p >= end)
			return false;
		unsigned char c = *p;
		if (c == '"')
			break;
		if (c == '\\') {
			*escaped = true;
			p += 2; /* the escaped character is checked by unescape */
			if (p > end)
				return false;
		} else if (c < 0x20) {
			return false;
		} else if (c >= 0x80) {
			size_t l = cae_utf8_seq_len(p, (size_t)(end - p));
			if (l == 0)
				return false;
			p += l;
		} else {
			p++;
		}
	}
	*s = in->p + 1;
	*n = (size_t)(p - *s);
	in->p = p + 1;
	return true;
}

static int hex4(const unsigned char *s)
{
	int v = 0;
	for (int i = 0; i < 4; i++) {
		unsigned char c = s[i];
		int d = c >= '0' && c <= '9'   ? c - '0'
			: c >= 'a' && c <= 'f' ? c - 'a' + 10
			: c >= 'A' && c <= 'F' ? c - 'A' + 10
					       : -1;
		if (d < 0)
			return -1;
		v = v * 16 + d;
	}
	return v;
}

/* Decodes the escapes of a scanned string into out (room for n bytes: decoding never
 * lengthens). Returns the length, or -1 for what jansson refuses (or allows only with
 * JSON_ALLOW_NUL: \u0000). */
static long unescape(const unsigned char *s, size_t n, char *out)
{
	size_t o = 0;
	for (size_t i = 0; i < n;) {
		if (s[i] != '\\') {
			out[o++] = (char)s[i++];
			continue;
		}
		if (i + 1 >= n)
			return -1;
		unsigned char c = s[i + 1];
		i += 2;
		switch (c) {
		case '"':
		case '\\':
		case '/':
			out[o++] = (char)c;
			continue;
		case 'b':
			out[o++] = '\b';
			continue;
		case 'f':
			out[o++] = '\f';
			continue;
		case 'n':
			out[o++] = '\n';
			continue;
		case 'r':
			out[o++] = '\r';
			continue;
		case 't':
			out[o++] = '\t';
			continue;
		case 'u':
			break;
		default:
			return -1;
		}
		if (i + 4 > n)
			return -1;
		long cp = hex4(s + i);
		i += 4;
		if (cp <= 0 || (cp >= 0xDC00 && cp <= 0xDFFF))
			return -1; /* \u0000, invalid, or a low surrogate first */
		if (cp >= 0xD800 && cp <= 0xDBFF) {
			if (i + 6 > n || s[i] != '\\' || s[i + 1] != 'u')
				return -1;
			long lo = hex4(s + i + 2);
			if (lo < 0xDC00 || lo > 0xDFFF)
				return -1;
			i += 6;
			cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
		}
		if (cp < 0x80) {
			out[o++] = (char)cp;
		} else if (cp < 0x800) {
			out[o++] = (char)(0xC0 | (cp >> 6));
			out[o++] = (char)(0x80 | (cp & 0x3F));
		} else if (cp < 0x10000) {
			out[o++] = (char)(0xE0 | (cp >> 12));
			out[o++] = (char)(0x80 | ((cp >> 6) & 0x3F));
			out[o++] = (char)(0x80 | (cp & 0x3F));
		} else {
			out[o++] = (char)(0xF0 | (cp >> 18));
			out[o++] = (char)(0x80 | ((cp >> 12) & 0x3F));
			out[o++] = (char)(0x80 | ((cp >> 6) & 0x3F));
			out[o++] = (char)(0x80 | (cp & 0x3F));
		}
	}
	return (long)o;
}

/* A scanned string's value: points into the input when it has no escape, else decoded into
 * *buf (allocated; the caller frees it; NULL on failure). */
static bool string_value(const unsigned char *s, size_t n, bool escaped, const char **v, size_t *vn,
			 char **buf)
{
	*buf = NULL;
	if (!escaped) {
		*v = (const char *)s;
		*vn = n;
		return true;
	}
	*buf = malloc(n ? n : 1);
	if (!*buf)
		return false;
	long k = unescape(s, n, *buf);
	if (k < 0) {
		free(*buf);
		*buf = NULL;
		return false;
	}
	*v = *buf;
	*vn = (size_t)k;
	return true;
}

static json_t *parse_value(struct in *in);

static json_t *parse_string(struct in *in)
{
	const unsigned char *s;
	size_t n, vn;
	bool escaped;
	const char *v;
	char *buf;
	if (!scan_string(in, &s, &n, &escaped))
		return NULL;
	json_t *j = string_value(s, n, escaped, &v, &vn, &buf) ? json_stringn_nocheck(v, vn) : NULL;
	free(buf);
	return j;
}

static json_t *parse_integer(struct in *in)
{
	const unsigned char *p = in->p, *end = in->end;
	bool neg = p < end && *p == '-';
	if (neg)
		p++;
	const unsigned char *digits = p;
	json_int_t v = 0;
	while (p < end && *p >= '0' && *p <= '9')
		v = v * 10 + (*p++ - '0');
	size_t nd = (size_t)(p - digits);
	if (nd == 0 || nd > MAX_INT_DIGITS || (nd > 1 && digits[0] == '0'))
		return NULL;
	if (p < end && (*p == '.' || *p == 'e' || *p == 'E'))
		return NULL; /* a real: jansson's strtod and its range checks */
	in->p = p;
	return json_integer(neg ? -v : v);
}

static json_t *parse_literal(struct in *in, const char *word, size_t n, json_t *value)
{
	if ((size_t)(in->end - in->p) < n || memcmp(in->p, word, n) != 0)
		return NULL;
	in->p += n;
	return value;
}

static json_t *parse_object(struct in *in)
{
	json_t *obj = json_object();
	if (!obj)
		return NULL;
	in->p++;
	skip_ws(in);
	if (in->p < in->end && *in->p == '}') {
		in->p++;
		return obj;
	}
	for (;;) {
		const unsigned char *s;
		size_t n, kn;
		bool escaped;
		const char *key;
		char *buf = NULL;
		if (in->p >= in->end || *in->p != '"' || !scan_string(in, &s, &n, &escaped) ||
		    !string_value(s, n, escaped, &key, &kn, &buf))
			goto fail;
		skip_ws(in);
		json_t *v = NULL;
		if (in->p < in->end && *in->p == ':') {
			in->p++;
			skip_ws(in);
			v = parse_value(in);
		}
		/* A duplicate key: JSON_REJECT_DUPLICATES makes it jansson's error to report. */
		if (!v || json_object_getn(obj, key, kn) ||
		    json_object_setn_new_nocheck(obj, key, kn, v) < 0) {
			json_decref(v);
			free(buf);
			goto fail;
		}
		free(buf);
		skip_ws(in);
		if (in->p >= in->end)
			goto fail;
		if (*in->p == '}') {
			in->p++;
			return obj;
		}
		if (*in->p != ',')
			goto fail;
		in->p++;
		skip_ws(in);
	}
fail:
	json_decref(obj);
	return NULL;
}

static json_t *parse_array(struct in *in)
{
	json_t *arr = json_array();
	if (!arr)
		return NULL;
	in->p++;
	skip_ws(in);
	if (in->p < in->end && *in->p == ']') {
		in->p++;
		return arr;
	}
	for (;;) {
		if (json_array_append_new(arr, parse_value(in)) < 0)
			break;
		skip_ws(in);
		if (in->p >= in->end)
			break;
		if (*in->p == ']') {
			in->p++;
			return arr;
		}
		if (*in->p != ',')
			break;
		in->p++;
		skip_ws(in);
	}
	json_decref(arr);
	return NULL;
}

/* A value at in->p (no whitespace before it). */
static json_t *parse_value(struct in *in)
{
	if (in->p >= in->end)
		return NULL;
	json_t *v;
	switch (*in->p) {
	case '{':
	case '[':
		if (++in->depth > in->max_depth)
			return NULL;
		v = *in->p == '{' ? parse_object(in) : parse_array(in);
		in->depth--;
		return v;
	case '"':
		return parse_string(in);
	case 't':
		return parse_literal(in, "true", 4, json_true());
	case 'f':
		return parse_literal(in, "false", 5, json_false());
	case 'n':
		return parse_literal(in, "null", 4, json_null());
	default:
		return parse_integer(in);
	}
}

json_t *cae_jsonrpc_parse_fast(const char *text, size_t len, unsigned max_depth)
{
	struct in in = {(const unsigned char *)text, (const unsigned char *)text + len, 0,
			max_depth};
	skip_ws(&in);
	if (in.p >= in.end || (*in.p != '{' && *in.p != '['))
		return NULL;
	json_t *v = parse_value(&in);
	skip_ws(&in);
	if (v && in.p != in.end) {
		json_decref(v);
		return NULL;
	}
	return v;
}
