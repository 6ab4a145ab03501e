/* The MCP server core: Model Context Protocol over newline-delimited JSON-RPC 2.0 (the stdio
 * transport). It knows the protocol (initialize and version negotiation, ping, tools/list,
 * tools/call, prompts/list, prompts/get, progress, cancellation, batches where the version
 * has them) and nothing about the tools: those come through a cae_mcp_handler, normally a
 * cae_session (session.h). The prompts are the system-prompt sections (prompt.h), answered
 * on the reading thread (they are rendered already).
 *
 * Threads: cae_mcp_serve reads on the calling thread; tools/list and tools/call run on worker
 * threads (at most opts->max_calls at once, a bounded queue behind them), so that ping and
 * notifications/cancelled are handled while a tool runs; a call the handler declares quick
 * runs on the reading thread itself. Every message written is one line,
 * written whole under a lock. The handler's functions are called from worker threads, several
 * at once: the handler serializes what must be serial.
 *
 * Output is written with write(2) (send(2) with MSG_NOSIGNAL on sockets): a process serving a
 * pipe should ignore SIGPIPE so that a vanished client is an error, not a signal.
 */
#ifndef CAE_MCP_H
#define CAE_MCP_H

#include "cae/export.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "cae/error.h"
#include "cae/prompt.h"
#include "cae/session.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Protocol versions spoken, newest first. A client asking for one of them gets it; any other
 * request is answered with the newest, which the client may refuse. */
#define CAE_MCP_PROTOCOL_LATEST "2025-11-25"
extern CAE_EXPORT const char *const cae_mcp_protocol_versions[]; /* NULL-terminated */

/* What a protocol version has: outputSchema and structuredContent (2025-06-18 on), JSON-RPC
 * batches (2024-11-05 and 2025-03-26; 2025-06-18 removed them), a message in progress
 * notifications (2025-03-26 on). NULL or an unknown version behaves as the newest. */
CAE_EXPORT bool cae_mcp_version_has_structured(const char *version);
CAE_EXPORT bool cae_mcp_version_has_batches(const char *version);
CAE_EXPORT bool cae_mcp_version_has_progress_message(const char *version);
/* The version to answer an initialize request asking for `requested` (may be NULL). Static. */
CAE_EXPORT const char *cae_mcp_negotiate(const char *requested);

/* The tools behind the server. list_tools and call_tool are called from worker threads
 * (call_tool from the reader thread for a call that call_is_quick accepts). */
typedef struct cae_mcp_handler {
	/* The tools as MCP tools/list entries: a JSON array (new reference) of {name,
	 * description, inputSchema, outputSchema?}; NULL on failure. */
	json_t *(*list_tools)(void *userdata, bool with_output_schema);
	/* Runs a tool; args (an object) is borrowed. Returns 0 with *res filled (the server
	 * frees it: text with free(), structured with json_decref(); structured becomes
	 * structuredContent for successful results only), or < 0 with err set for a
	 * protocol failure: -ENOENT unknown tool, -EINVAL invalid arguments (JSON-RPC -32602),
	 * -ECANCELED after ctx->cancel_fd became readable, anything else -32603. */
	int (*call_tool)(void *userdata, const char *name, json_t *args, const cae_call_ctx *ctx,
			 cae_tool_result *res, cae_error *err);
	void *userdata;
	/* May be NULL. True for a call that is short and does not block (no process, no
	 * network, no wait for anything slow: a text editor view, say). Such a call runs on
	 * the reader thread, without the hand-off to a worker, which costs more than the call;
	 * meanwhile nothing else is read, and it gets no cancel fd (it is over before a
	 * cancellation could be read). Called on the reader thread; must not block. */
	bool (*call_is_quick)(void *userdata, const char *name, const json_t *args);
} cae_mcp_handler;

typedef struct cae_mcp_options {
	size_t max_message_size; /* bytes per incoming line; 0: CAE_JSONRPC_DEFAULT_MAX_MESSAGE */
	unsigned max_depth;	 /* JSON nesting; 0: 64 */
	unsigned max_calls;	 /* tool calls running at once; 0: 4 */
	unsigned max_queued;	 /* requests waiting for a worker; 0: 64 (more: -32000) */
	const char *server_name; /* serverInfo.name; NULL: "cae" */
	const char *server_version; /* serverInfo.version; NULL: the cae version */
	const char *instructions;   /* initialize result's instructions; NULL: none */
	/* Served by prompts/list and prompts/get, and declared as the prompts capability;
	 * NULL: no prompts (those methods are not found). Borrowed for the serve. */
	const cae_prompts *prompts;
	/* May be NULL. prompts/get of a section without arguments asks it first: a new text for
	 * the caller's state (the command-executor section of the environment its session
	 * prepared), or NULL to serve the rendered one. Called on the reader thread. */
	char *(*prompt_text)(void *userdata, const char *name);
	void *prompt_userdata;
	/* When readable (a signal's self-pipe, say): cancel running calls, drop queued ones,
	 * and return. -1: none (0 is fd 0: set -1). */
	int shutdown_fd;
	/* Diagnostics (the server itself never prints): level "debug"|"info"|"warning"|"error",
	 * a stable event name ("mcp.parse_error", "mcp.tool_call", ...) and a message. Called
	 * from any of the server's threads. */
	void (*log)(void *userdata, const char *level, const char *event, const char *message);
	void *log_userdata;
	/* May be NULL. False for a level that log would drop: the message is then not even
	 * formatted (a tool call logs at "info"). */
	bool (*log_enabled)(void *userdata, const char *level);
} cae_mcp_options;

/* Serves MCP on in_fd/out_fd until end of input or shutdown_fd; either cancels the calls
 * still running (their commands' process trees are killed; a cancelled call gets no answer)
 * and drops the queued ones. Requests other than initialize and ping before a successful
 * initialize get a -32002 error. opts may be NULL. Returns 0, or -errno with err set: a read
 * error, -EPIPE when out_fd closed, -ENOMEM. */
CAE_EXPORT int cae_mcp_serve(const cae_mcp_handler *h, int in_fd, int out_fd,
			     const cae_mcp_options *opts, cae_error *err);

#ifdef __cplusplus
}
#endif
#endif
