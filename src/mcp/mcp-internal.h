/* Internal to the MCP server (and its fuzz target): decoding of request params and building
 * of results, free of I/O and threads. */
#ifndef CAE_MCP_INTERNAL_H
#define CAE_MCP_INTERNAL_H

#include <jansson.h>
#include <stdbool.h>

#include "cae/jsonrpc.h"
#include "cae/mcp.h"
#include "cae/session.h"

/* tools/call params: {name: string, arguments?: object, _meta?: {progressToken?}}. */
typedef struct cae_mcp_call_params {
	const char *name;	/* borrowed from params */
	json_t *arguments;	/* new reference: the arguments, {} when absent */
	json_t *progress_token; /* borrowed, NULL when absent: a string or a number */
} cae_mcp_call_params;

/* Returns 0, or -EINVAL with e set (-32602). On success clear *p with _params_clear. */
int cae__mcp_decode_call_params(json_t *params, cae_mcp_call_params *p, cae_jsonrpc_err *e);
void cae__mcp_call_params_clear(cae_mcp_call_params *p);

/* initialize params: {protocolVersion: string, capabilities?, clientInfo?}. *version is
 * borrowed. Returns 0 or -EINVAL with e set (-32602). */
int cae__mcp_decode_initialize(json_t *params, const char **version, cae_jsonrpc_err *e);

/* tools/list and prompts/list params: absent or an object; a cursor is refused (nothing is
 * paginated). */
int cae__mcp_decode_list_params(json_t *params, cae_jsonrpc_err *e);

/* prompts/get params: {name: string, arguments?: object of strings}. *name and *args
 * (NULL when absent) are borrowed from params. Returns 0 or -EINVAL with e set (-32602). */
int cae__mcp_decode_get_prompt(json_t *params, const char **name, json_t **args,
			       cae_jsonrpc_err *e);

/* A GetPromptResult: {description, messages: [{role: "user", content: {type: "text",
 * text}}]}. New reference, NULL on ENOMEM. */
json_t *cae__mcp_prompt_result(const char *description, const char *text);

/* notifications/cancelled params: the requestId (borrowed), or NULL when unusable. */
json_t *cae__mcp_decode_cancelled(json_t *params);

/* The initialize result for a negotiated version. New reference, NULL on ENOMEM. */
json_t *cae__mcp_initialize_result(const char *version, const char *name,
				   const char *server_version, const char *instructions);

/* A CallToolResult: {content: [{type: "text", text}], structuredContent?, isError}. Text is
 * repaired to valid UTF-8; without text, the structured content is rendered as JSON text.
 * structuredContent only when with_structured, the result is not an error, and
 * res->structured is an object. New
 * reference, NULL on ENOMEM. */
json_t *cae__mcp_tool_result_json(const cae_tool_result *res, bool with_structured);

/* The JSON-RPC error for a handler's protocol failure (see cae_mcp_handler.call_tool). */
json_t *cae__mcp_call_error(json_t *id, const char *tool, int code, const cae_error *err);

/* Frees what a handler put in a result (the server owns it once call_tool returned). */
void cae__mcp_tool_result_release(cae_tool_result *res);

#endif
