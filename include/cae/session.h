/* A session: what every interface (CLI, MCP server, library user) talks to. It holds the
 * configuration, the backend, the policy, the logger and the current environment, and
 * dispatches the agent tools by name. The MCP server and `cae tools` only use this header.
 *
 * Tool names: "command-executor_execute_command", "exec_command", "text_editor",
 * "apply_patch", "environment_list", "environment_prepare", "environment_cleanup".
 */
#ifndef CAE_SESSION_H
#define CAE_SESSION_H

#include <jansson.h>
#include <stdbool.h>

#include "cae/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cae_session cae_session;

/* Per-call context supplied by the interface. All fields optional (zero = absent). */
typedef struct cae_call_ctx {
	/* Becomes readable when the call is cancelled (MCP notifications/cancelled): a running
	 * command is killed and the call returns a cancelled error. -1 or 0-initialised = none;
	 * set has_cancel_fd to use fd 0. */
	int cancel_fd;
	bool has_cancel_fd;
	/* Progress reports during long calls (environment_prepare): progress counts up to
	 * total (total may be 0 when unknown). message is borrowed for the call only. */
	void (*progress)(void *userdata, double progress, double total, const char *message);
	void *progress_userdata;
} cae_call_ctx;

/* A tool's result. `text` is what a model reads (MCP text content); `structured` is the
 * same result as JSON (MCP structuredContent); is_error marks a tool failure (MCP isError),
 * as opposed to a protocol failure, which cae_session_call_tool reports by returning < 0
 * (-ENOENT: unknown tool; -EINVAL: arguments not an object). Owned by the result. */
typedef struct cae_tool_result {
	char *text;
	json_t *structured;
	bool is_error;
} cae_tool_result;

void cae_tool_result_clear(cae_tool_result *res);

/* The tools offered now, as MCP `tools/list` entries: [{name, description, inputSchema,
 * outputSchema?}]. New reference. with_output_schema: include outputSchema (protocol
 * versions that have it). */
json_t *cae_session_tool_list(cae_session *s, bool with_output_schema);

/* Calls a tool. args is borrowed. Returns 0 with *res filled (check res->is_error), or a
 * negative errno for a protocol-level failure with err set. */
int cae_session_call_tool(cae_session *s, const char *name, json_t *args, const cae_call_ctx *ctx,
			  cae_tool_result *res, cae_error *err);

#ifdef __cplusplus
}
#endif
#endif
