/* JSON-RPC 2.0 message parsing, validation, construction and encoding. */
#include "cae/jsonrpc.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/macro.h"
#include "base/utf8.h"
#include "jsonrpc/jsonrpc-internal.h"
#include "base/banned.h"

int cae_jsonrpc_err_set(cae_jsonrpc_err *e, int code, const char *fmt, ...)
{
	if (!e)
		return -EINVAL;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(e->message, sizeof(e->message), fmt, ap);
	va_end(ap);
	e->code = code;
	return -EINVAL;
}

/* Nesting depth of arrays and objects outside strings, stopping early past max. The text
 * need not be valid JSON: the parser judges that afterwards. */
static bool depth_within(const char *s, size_t n, unsigned max)
{
	unsigned depth = 0;
	bool in_string = false;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (in_string) {
			if (c == '\\')
				i++;
			else if (c == '"')
				in_string = false;
			continue;
		}
		switch (c) {
		case '"':
			in_string = true;
			break;
		case '[':
		case '{':
			if (++depth > max)
				return false;
			break;
		case ']':
		case '}':
			if (depth > 0)
				depth--;
			break;
		default:
			break;
		}
	}
	return true;
}

/* ---- numbers jansson cannot hold ----
 * An integer beyond int64 or a real beyond double stops jansson's parser, and the answer
 * to such a request would have no id. The text is parsed a second time with each such
 * number token (outside strings) turned into a string: a NUL byte followed by the token
 * as written. No other string can start with NUL (the text is only rewritten when it holds
 * no \u0000 escape, and the first parse refuses NUL in strings), so a request's "id" (and
 * notifications/cancelled's "requestId") stay such raw numbers, which the encoder writes
 * back as the client wrote them; other big numbers become reals (or their token as a
 * string when even a double overflows). */

static bool number_char(char c)
{
	return (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E';
}

/* True when the token [p, p + n) is a number jansson refuses for its size. */
static bool number_overflows(const char *p, size_t n)
{
	_cleanup_free_ char *tok = strndup(p, n);
	if (!tok)
		return false;
	bool real = strpbrk(tok, ".eE") != NULL;
	char *end;
	errno = 0;
	if (real) {
		double d = strtod(tok, &end);
		return *end == '\0' && errno == ERANGE && isinf(d);
	}
	(void)strtoll(tok, &end, 10);
	return *end == '\0' && errno == ERANGE;
}

/* The text with every overflowing number token outside strings quoted as "\u0000<token>".
 * NULL when there is none (or on ENOMEM). */
static char *quote_big_numbers(const char *s, size_t n, size_t *out_len)
{
	if (memmem(s, n, "\\u0000", 6))
		return NULL;
	size_t cap = 3 * n + 16; /* a token of 5 or more bytes grows by 8 */
	char *out = malloc(cap);
	if (!out)
		return NULL;
	size_t o = 0;
	bool in_string = false, changed = false;
	for (size_t i = 0; i < n;) {
		char c = s[i];
		if (in_string) {
			out[o++] = c;
			if (c == '\\' && i + 1 < n)
				out[o++] = s[++i];
			else if (c == '"')
				in_string = false;
			i++;
			continue;
		}
		if (c == '"') {
			in_string = true;
			out[o++] = s[i++];
			continue;
		}
		if (c != '-' && !(c >= '0' && c <= '9')) {
			out[o++] = s[i++];
			continue;
		}
		size_t j = i;
		while (j < n && number_char(s[j]))
			j++;
		bool big = j - i >= 5 && number_overflows(s + i, j - i);
		if (big) {
			memcpy(out + o, "\"\\u0000", 7);
			o += 7;
		}
		memcpy(out + o, s + i, j - i);
		o += j - i;
		if (big) {
			out[o++] = '"';
			changed = true;
		}
		i = j;
	}
	if (!changed) {
		free(out);
		return NULL;
	}
	*out_len = o;
	return out;
}

const char *cae_jsonrpc_raw_number(const json_t *v, size_t *len)
{
	if (!json_is_string(v) || json_string_length(v) < 2 || json_string_value(v)[0] != '\0')
		return NULL;
	if (len)
		*len = json_string_length(v) - 1;
	return json_string_value(v) + 1;
}

/* The value that stands for x when x is a quoted big number (a real, or the number's text
 * when even a double overflows; null on ENOMEM); NULL when x is not one. */
static json_t *big_number_value(json_t *x)
{
	size_t n;
	const char *tok = cae_jsonrpc_raw_number(x, &n);
	if (!tok)
		return NULL;
	double d = strtod(tok, NULL);
	json_t *r = isfinite(d) ? json_real(d) : json_stringn(tok, n);
	return r ? r : json_null();
}

/* Turns the quoted big numbers of v back into numbers, except at the places that keep
 * them raw (skip, borrowed, may be NULL). */
static void unquote_big_numbers(json_t *v, const json_t *skip)
{
	if (json_is_object(v)) {
		const char *k;
		json_t *x;
		void *tmp;
		json_object_foreach_safe(v, tmp, k, x)
		{
			if (x == skip)
				continue;
			json_t *r = big_number_value(x);
			if (!r)
				unquote_big_numbers(x, skip);
			else
				json_object_set_new(v, k, r);
		}
	} else if (json_is_array(v)) {
		for (size_t i = 0; i < json_array_size(v); i++) {
			json_t *x = json_array_get(v, i);
			json_t *r = big_number_value(x);
			if (!r)
				unquote_big_numbers(x, skip);
			else
				json_array_set_new(v, i, r);
		}
	}
}

/* One message of a reparsed text: its id and cancelled request id stay raw. */
static void unquote_message(json_t *m)
{
	if (!json_is_object(m)) {
		unquote_big_numbers(m, NULL);
		return;
	}
	const char *k;
	json_t *x;
	json_object_foreach(m, k, x)
	{
		if (strcmp(k, "id") == 0)
			continue;
		if (strcmp(k, "params") == 0 && json_is_object(x))
			unquote_big_numbers(x, json_object_get(x, "requestId"));
		else
			unquote_big_numbers(x, NULL);
	}
}

static json_t *parse_with_big_numbers(const char *text, size_t len)
{
	size_t n;
	_cleanup_free_ char *q = quote_big_numbers(text, len, &n);
	if (!q)
		return NULL;
	json_t *v =
	    json_loadb(q, n, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, NULL);
	if (json_is_array(v)) {
		size_t i;
		json_t *m;
		json_array_foreach(v, i, m) unquote_message(m);
	} else if (v) {
		unquote_message(v);
	}
	return v;
}

int cae_jsonrpc_parse(const char *text, size_t len, unsigned max_depth, json_t **out,
		      cae_jsonrpc_err *e)
{
	*out = NULL;
	if (max_depth == 0)
		max_depth = CAE_JSONRPC_DEFAULT_MAX_DEPTH;
	if (!depth_within(text, len, max_depth))
		return cae_jsonrpc_err_set(e, CAE_JSONRPC_INVALID_REQUEST,
					   "Invalid Request: nested deeper than %u levels",
					   max_depth);
	json_error_t je;
	json_t *v = json_loadb(text, len, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &je);
	if (!v && json_error_code(&je) == json_error_numeric_overflow)
		v = parse_with_big_numbers(text, len);
	if (!v)
		return cae_jsonrpc_err_set(e, CAE_JSONRPC_PARSE_ERROR, "Parse error: %s at byte %d",
					   je.text, je.position);
	if (!json_is_object(v) && !json_is_array(v)) {
		json_decref(v);
		return cae_jsonrpc_err_set(e, CAE_JSONRPC_INVALID_REQUEST,
					   "Invalid Request: a message must be a JSON object");
	}
	*out = v;
	return 0;
}

bool cae_jsonrpc_id_valid(const json_t *id)
{
	return json_is_string(id) || json_is_integer(id);
}

int cae_jsonrpc_validate(json_t *v, cae_jsonrpc_msg *m, cae_jsonrpc_err *e)
{
	memset(m, 0, sizeof(*m));
	if (!json_is_object(v))
		return cae_jsonrpc_err_set(e, CAE_JSONRPC_INVALID_REQUEST,
					   "Invalid Request: a message must be a JSON object");
	json_t *id = json_object_get(v, "id");
	if (cae_jsonrpc_id_valid(id))
		m->id = id;
	json_t *version = json_object_get(v, "jsonrpc");
	if (!json_is_string(version) || strcmp(json_string_value(version), "2.0") != 0)
		return cae_jsonrpc_err_set(e, CAE_JSONRPC_INVALID_REQUEST,
					   "Invalid Request: \"jsonrpc\" must be \"2.0\"");

	json_t *method = json_object_get(v, "method");
	if (method) {
		if (!json_is_string(method))
			return cae_jsonrpc_err_set(e, CAE_JSONRPC_INVALID_REQUEST,
						   "Invalid Request: \"method\" must be a string");
		json_t *params = json_object_get(v, "params");
		if (params && !json_is_object(params) && !json_is_array(params))
			return cae_jsonrpc_err_set(
			    e, CAE_JSONRPC_INVALID_REQUEST,
			    "Invalid Request: \"params\" must be an object or an array");
		if (id && !m->id)
			return cae_jsonrpc_err_set(
			    e, CAE_JSONRPC_INVALID_REQUEST,
			    "Invalid Request: \"id\" must be a string or an integer");
		m->kind = id ? CAE_JSONRPC_REQUEST : CAE_JSONRPC_NOTIFICATION;
		m->method = json_string_value(method);
		m->params = params;
		return 0;
	}

	json_t *result = json_object_get(v, "result");
	json_t *error = json_object_get(v, "error");
	if (!result && !error)
		return cae_jsonrpc_err_set(e, CAE_JSONRPC_INVALID_REQUEST,
					   "Invalid Request: \"method\" is missing");
	if (result && error)
		return cae_jsonrpc_err_set(
		    e, CAE_JSONRPC_INVALID_REQUEST,
		    "Invalid Request: a response has either \"result\" or \"error\"");
	if (!id || (!m->id && !json_is_null(id)))
		return cae_jsonrpc_err_set(e, CAE_JSONRPC_INVALID_REQUEST,
					   "Invalid Request: a response needs a valid \"id\"");
	if (error && (!json_is_object(error) || !json_is_integer(json_object_get(error, "code")) ||
		      !json_is_string(json_object_get(error, "message"))))
		return cae_jsonrpc_err_set(
		    e, CAE_JSONRPC_INVALID_REQUEST,
		    "Invalid Request: \"error\" needs an integer code and a string message");
	m->kind = CAE_JSONRPC_RESPONSE;
	m->id = id;
	m->result = result;
	m->error = error;
	return 0;
}

/* The id is copied, not shared: an answer may be written by another thread than the one
 * that owns the request. */
static json_t *envelope(json_t *id)
{
	json_t *o = json_object();
	if (!o)
		return NULL;
	if (json_object_set_new(o, "jsonrpc", json_string("2.0")) < 0 ||
	    json_object_set_new(o, "id", id ? json_deep_copy(id) : json_null()) < 0) {
		json_decref(o);
		return NULL;
	}
	return o;
}

json_t *cae_jsonrpc_result(json_t *id, json_t *result)
{
	json_t *o = result ? envelope(id) : NULL;
	if (!o || json_object_set_new(o, "result", result) < 0) {
		if (!o)
			json_decref(result);
		json_decref(o);
		return NULL;
	}
	return o;
}

/* A JSON string from bytes that may not be UTF-8. */
static json_t *string_repaired(const char *s)
{
	json_t *j = json_string(s);
	if (j)
		return j;
	size_t n;
	_cleanup_free_ char *fixed = cae__utf8_sanitize(s, strlen(s), &n);
	return fixed ? json_stringn(fixed, n) : NULL;
}

json_t *cae_jsonrpc_error(json_t *id, int code, const char *message, json_t *data)
{
	json_t *err = json_object();
	json_t *o = envelope(id);
	if (!err || !o || json_object_set_new(err, "code", json_integer(code)) < 0 ||
	    json_object_set_new(err, "message", string_repaired(message ? message : "")) < 0 ||
	    (data && json_object_set(err, "data", data) < 0) ||
	    json_object_set(o, "error", err) < 0) {
		json_decref(data);
		json_decref(err);
		json_decref(o);
		return NULL;
	}
	json_decref(data);
	json_decref(err);
	return o;
}

json_t *cae_jsonrpc_notification(const char *method, json_t *params)
{
	json_t *o = json_object();
	if (!o || json_object_set_new(o, "jsonrpc", json_string("2.0")) < 0 ||
	    json_object_set_new(o, "method", json_string(method)) < 0 ||
	    (params && json_object_set(o, "params", params) < 0)) {
		json_decref(params);
		json_decref(o);
		return NULL;
	}
	json_decref(params);
	return o;
}
