/* MCP protocol pieces without I/O: versions, params decoding, results. */
#include "mcp/mcp-internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/macro.h"
#include "base/utf8.h"
#include "base/banned.h"

const char *const cae_mcp_protocol_versions[] = {
    CAE_MCP_PROTOCOL_LATEST, "2025-06-18", "2025-03-26", "2024-11-05", NULL,
};

static bool version_is(const char *v, const char *x)
{
	return v && strcmp(v, x) == 0;
}

bool cae_mcp_version_has_structured(const char *version)
{
	return !version_is(version, "2025-03-26") && !version_is(version, "2024-11-05");
}

bool cae_mcp_version_has_batches(const char *version)
{
	return version_is(version, "2025-03-26") || version_is(version, "2024-11-05");
}

bool cae_mcp_version_has_progress_message(const char *version)
{
	return !version_is(version, "2024-11-05");
}

const char *cae_mcp_negotiate(const char *requested)
{
	for (size_t i = 0; requested && cae_mcp_protocol_versions[i]; i++)
		if (strcmp(requested, cae_mcp_protocol_versions[i]) == 0)
			return cae_mcp_protocol_versions[i];
	return CAE_MCP_PROTOCOL_LATEST;
}

int cae__mcp_decode_call_params(json_t *params, cae_mcp_call_params *p, cae_jsonrpc_err *e)
{
	memset(p, 0, sizeof(*p));
	if (!json_is_object(params))
		return cae_jsonrpc_err_set(
		    e, CAE_JSONRPC_INVALID_PARAMS,
		    "Invalid params: tools/call needs {\"name\", \"arguments\"}");
	json_t *name = json_object_get(params, "name");
	if (!json_is_string(name) || json_string_length(name) == 0)
		return cae_jsonrpc_err_set(e, CAE_JSONRPC_INVALID_PARAMS,
					   "Invalid params: \"name\" must be a non-empty string");
	json_t *args = json_object_get(params, "arguments");
	if (args && !json_is_object(args) && !json_is_null(args))
		return cae_jsonrpc_err_set(e, CAE_JSONRPC_INVALID_PARAMS,
					   "Invalid params: \"arguments\" must be an object");
	json_t *meta = json_object_get(params, "_meta");
	json_t *token = NULL;
	if (meta && !json_is_null(meta)) {
		if (!json_is_object(meta))
			return cae_jsonrpc_err_set(e, CAE_JSONRPC_INVALID_PARAMS,
						   "Invalid params: \"_meta\" must be an object");
		token = json_object_get(meta, "progressToken");
		if (json_is_null(token))
			token = NULL;
		if (token && !json_is_string(token) && !json_is_number(token))
			return cae_jsonrpc_err_set(
			    e, CAE_JSONRPC_INVALID_PARAMS,
			    "Invalid params: \"progressToken\" must be a string or a number");
	}
	p->arguments = json_is_object(args) ? json_incref(args) : json_object();
	if (!p->arguments)
		return cae_jsonrpc_err_set(e, CAE_JSONRPC_INTERNAL_ERROR,
					   "Internal error: out of memory");
	p->name = json_string_value(name);
	p->progress_token = token;
	return 0;
}

void cae__mcp_call_params_clear(cae_mcp_call_params *p)
{
	if (!p)
		return;
	json_decref(p->arguments);
	memset(p, 0, sizeof(*p));
}

int cae__mcp_decode_initialize(json_t *params, const char **version, cae_jsonrpc_err *e)
{
	*version = NULL;
	if (!json_is_object(params))
		return cae_jsonrpc_err_set(e, CAE_JSONRPC_INVALID_PARAMS,
					   "Invalid params: initialize needs {\"protocolVersion\", "
					   "\"capabilities\", \"clientInfo\"}");
	json_t *v = json_object_get(params, "protocolVersion");
	if (!json_is_string(v))
		return cae_jsonrpc_err_set(e, CAE_JSONRPC_INVALID_PARAMS,
					   "Invalid params: \"protocolVersion\" must be a string");
	json_t *caps = json_object_get(params, "capabilities");
	if (caps && !json_is_object(caps))
		return cae_jsonrpc_err_set(e, CAE_JSONRPC_INVALID_PARAMS,
					   "Invalid params: \"capabilities\" must be an object");
	*version = json_string_value(v);
	return 0;
}

int cae__mcp_decode_list_params(json_t *params, cae_jsonrpc_err *e)
{
	if (!params || json_is_null(params))
		return 0;
	if (!json_is_object(params))
		return cae_jsonrpc_err_set(e, CAE_JSONRPC_INVALID_PARAMS,
					   "Invalid params: list params must be an object");
	json_t *cursor = json_object_get(params, "cursor");
	if (cursor && !json_is_null(cursor))
		return cae_jsonrpc_err_set(
		    e, CAE_JSONRPC_INVALID_PARAMS,
		    "Invalid params: unknown cursor (the list has one page)");
	return 0;
}

int cae__mcp_decode_get_prompt(json_t *params, const char **name, json_t **args, cae_jsonrpc_err *e)
{
	*name = NULL;
	*args = NULL;
	if (!json_is_object(params))
		return cae_jsonrpc_err_set(e, CAE_JSONRPC_INVALID_PARAMS,
					   "Invalid params: prompts/get needs {\"name\", "
					   "\"arguments\"}");
	json_t *n = json_object_get(params, "name");
	if (!json_is_string(n) || json_string_length(n) == 0 ||
	    strlen(json_string_value(n)) != json_string_length(n))
		return cae_jsonrpc_err_set(e, CAE_JSONRPC_INVALID_PARAMS,
					   "Invalid params: \"name\" must be a non-empty string");
	json_t *a = json_object_get(params, "arguments");
	if (a && !json_is_null(a) && !json_is_object(a))
		return cae_jsonrpc_err_set(e, CAE_JSONRPC_INVALID_PARAMS,
					   "Invalid params: \"arguments\" must be an object");
	*name = json_string_value(n);
	*args = json_is_object(a) ? a : NULL;
	return 0;
}

json_t *cae__mcp_prompt_result(const char *description, const char *text)
{
	size_t n = strlen(text);
	json_t *t = cae__utf8_is_valid(text, n) ? json_stringn_nocheck(text, n) : NULL;
	return t ? json_pack("{s:s, s:[{s:s, s:{s:s, s:o}}]}", "description", description,
			     "messages", "role", "user", "content", "type", "text", "text", t)
		 : NULL;
}

json_t *cae__mcp_decode_cancelled(json_t *params)
{
	if (!json_is_object(params))
		return NULL;
	json_t *id = json_object_get(params, "requestId");
	return cae_jsonrpc_id_valid(id) ? id : NULL;
}

json_t *cae__mcp_initialize_result(const char *version, const char *name,
				   const char *server_version, const char *instructions)
{
	json_t *r = json_pack("{s:s, s:{s:{s:b}}, s:{s:s, s:s}}", "protocolVersion", version,
			      "capabilities", "tools", "listChanged", 0, "serverInfo", "name", name,
			      "version", server_version);
	if (r && instructions &&
	    json_object_set_new(r, "instructions", json_string(instructions)) < 0) {
		json_decref(r);
		return NULL;
	}
	return r;
}

/* A JSON string for text, repaired to valid UTF-8. The text of a tool result is often the
 * structured result's "output" too (the text editor): then that string is shared rather
 * than checked and copied once more. */
static json_t *text_json(const char *s, const json_t *structured)
{
	size_t n = strlen(s);
	json_t *out = json_object_get(structured, "output");
	if (json_is_string(out) && json_string_length(out) == n &&
	    memcmp(json_string_value(out), s, n) == 0)
		return json_incref(out);
	if (cae__utf8_is_valid(s, n))
		return json_stringn_nocheck(s, n);
	_cleanup_free_ char *fixed = cae__utf8_sanitize(s, n, &n);
	return fixed ? json_stringn(fixed, n) : NULL;
}

json_t *cae__mcp_tool_result_json(const cae_tool_result *res, bool with_structured)
{
	_cleanup_free_ char *dumped = NULL;
	const char *text = res->text;
	if (!text && res->structured)
		text = dumped = json_dumps(res->structured, JSON_COMPACT);
	json_t *item = json_pack("{s:s, s:o}", "type", "text", "text",
				 text_json(text ? text : "", res->structured));
	json_t *r = json_pack("{s:[o], s:b}", "content", item, "isError", res->is_error ? 1 : 0);
	if (!r)
		return NULL;
	/* Only successful results carry structuredContent: clients validate it against the
	 * tool's outputSchema (the SDK does so whenever it is present), and an error's shape is
	 * not the result's. The error is in the text. */
	if (with_structured && !res->is_error && json_is_object(res->structured) &&
	    json_object_set(r, "structuredContent", res->structured) < 0) {
		json_decref(r);
		return NULL;
	}
	return r;
}

json_t *cae__mcp_call_error(json_t *id, const char *tool, int code, const cae_error *err)
{
	const char *detail = err && err->message[0] ? err->message : NULL;
	char msg[CAE_ERROR_MSG_MAX + 128];
	int jcode = CAE_JSONRPC_INVALID_PARAMS;
	switch (code) {
	case -ENOENT:
		snprintf(msg, sizeof(msg), "Unknown tool: %s%s%s", tool, detail ? ": " : "",
			 detail ? detail : "");
		break;
	case -EINVAL:
		snprintf(msg, sizeof(msg), "Invalid params: %s",
			 detail ? detail : "invalid arguments for the tool");
		break;
	case -ECANCELED:
		jcode = CAE_JSONRPC_INTERNAL_ERROR;
		snprintf(msg, sizeof(msg), "Request cancelled%s%s", detail ? ": " : "",
			 detail ? detail : "");
		break;
	default:
		jcode = CAE_JSONRPC_INTERNAL_ERROR;
		snprintf(msg, sizeof(msg), "Internal error: %s",
			 detail ? detail : strerror(code < 0 ? -code : code));
		break;
	}
	return cae_jsonrpc_error(id, jcode, msg, NULL);
}

void cae__mcp_tool_result_release(cae_tool_result *res)
{
	if (!res)
		return;
	free(res->text);
	json_decref(res->structured);
	res->text = NULL;
	res->structured = NULL;
	res->is_error = false;
}
