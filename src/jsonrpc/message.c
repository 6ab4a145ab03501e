/* JSON-RPC 2.0 message parsing, validation, construction and encoding. */
#include "cae/jsonrpc.h"

#include <errno.h>
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
	_cleanup_free_ char *fixed = cae_utf8_sanitize(s, strlen(s), &n);
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
