/* A session: what every interface (CLI, MCP server, library user) talks to. It holds the
 * configuration, the backend, the policy, the secrets, the logger and the current
 * environment, and dispatches the agent tools by name. The MCP server and `cae tools` only
 * use this header.
 *
 * Tool names: "command-executor_execute_command", "exec_command", "text_editor",
 * "text_editor_<command>" (view, create, str_replace, insert, undo_edit), "apply_patch",
 * "environment_list", "environment_prepare", "environment_cleanup"; the configuration
 * disables some (cae_session_tool_list lists those enabled).
 *
 * Secrets: the session owns the set its tool output is masked with (a command's output that
 * shows a token shows *** instead), filled with the configuration's GitHub and GitLab tokens
 * and cae_session_add_secret; each is registered in the logger too, when there is one, so
 * masking does not depend on having a logger.
 */
#ifndef CAE_SESSION_H
#define CAE_SESSION_H

#include "cae/export.h"

#include <jansson.h>
#include <stdbool.h>

#include "cae/backend.h"
#include "cae/config.h"
#include "cae/error.h"
#include "cae/log.h"
#include "cae/policy.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cae_session cae_session;

/* Per-call context supplied by the interface. All fields optional (zero = absent, except
 * cancel_fd: -1 = absent). */
typedef struct cae_call_ctx {
	/* Becomes readable when the call is cancelled (MCP notifications/cancelled): a running
	 * command is killed and the call returns a cancelled error. -1: none (0 is fd 0: a
	 * zero-initialised context must set -1). */
	int cancel_fd;
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

CAE_EXPORT void cae_tool_result_clear(cae_tool_result *res);

/* The tools offered now, as MCP `tools/list` entries: [{name, description, inputSchema,
 * outputSchema?}]. New reference. with_output_schema: include outputSchema (protocol
 * versions that have it). */
CAE_EXPORT json_t *cae_session_tool_list(cae_session *s, bool with_output_schema);

/* True when a call of tool name with args (borrowed, may be NULL) is short and never
 * blocks (a text editor view), so that a front end may run it inline instead of handing it to
 * a worker thread. */
CAE_EXPORT bool cae_session_call_is_quick(const cae_session *s, const char *name,
					  const json_t *args);

/* Calls a tool. args is borrowed. Returns 0 with *res filled (check res->is_error), or a
 * negative errno for a protocol-level failure with err set. */
CAE_EXPORT int cae_session_call_tool(cae_session *s, const char *name, json_t *args,
				     const cae_call_ctx *ctx, cae_tool_result *res, cae_error *err);

/* A new session over cfg (STOLEN: freed with the session) and log (borrowed, may be NULL,
 * must outlive the session). The backend is created from the config (auto: docker when an
 * engine answers, else local). */
CAE_EXPORT int cae_session_new(cae_config *cfg, cae_log *log, cae_session **out, cae_error *err);
CAE_EXPORT void cae_session_free(cae_session *s); /* accepts NULL */

/* Makes an existing directory the current environment (local backend, used as is). */
CAE_EXPORT int cae_session_use_workspace(cae_session *s, const char *dir, cae_error *err);
/* Prepares an environment for task and makes it current; *info (may be NULL) receives its
 * ContainerInfo as JSON (new reference). ctx (may be NULL) carries progress/cancellation. */
CAE_EXPORT int cae_session_prepare(cae_session *s, const cae_task *task, const char *environment,
				   const cae_call_ctx *ctx, json_t **info, cae_error *err);
/* cae_session_prepare, and with force an existing environment of the task is replaced even
 * when that loses its uncommitted changes, the process sessions running in it or a prepare
 * another live process runs (without force: -EBUSY naming what would be lost). */
CAE_EXPORT int cae_session_prepare_ex(cae_session *s, const cae_task *task, const char *environment,
				      bool force, const cae_call_ctx *ctx, json_t **info,
				      cae_error *err);
/* Makes an environment prepared earlier (maybe by another process) current. */
CAE_EXPORT int cae_session_set_current(cae_session *s, const char *task_uuid, cae_error *err);
/* Removes an environment (NULL: the current one). */
CAE_EXPORT int cae_session_cleanup(cae_session *s, const char *task_uuid, cae_error *err);
/* The current environment's task uuid (borrowed, NULL when none). */
CAE_EXPORT const char *cae_session_current(cae_session *s);
/* The command-executor system-prompt section for the session's current environment as it
 * was prepared (its backend, its environment's tools, what each dependency install did), or
 * NULL when there is none or its prepare installed nothing (the configuration's own section,
 * cae_prompt_command_executor, then says the same). A new string. */
CAE_EXPORT char *cae_session_prompt_command_executor(cae_session *s);
/* Borrowed accessors. */
CAE_EXPORT cae_backend *cae_session_backend(cae_session *s);
CAE_EXPORT const cae_config *cae_session_config(const cae_session *s);
/* The command policy configured by cfg->command_executor.allowed_commands (new, or NULL with
 * err set). */
CAE_EXPORT cae_policy *cae_policy_from_config(const cae_config *cfg, cae_error *err);
/* Text editor results in the npm mcp-server-text-editor (bhouston) shape. */
CAE_EXPORT void cae_session_set_editor_compat(cae_session *s, bool on);
/* Registers a secret (copied) that tool output and the log must not show: in the session's
 * secrets and in the logger's. Returns as cae_secrets_add (NULL or "" is ignored, shorter
 * than CAE_SECRETS_MIN_LEN is -EINVAL). */
CAE_EXPORT int cae_session_add_secret(cae_session *s, const char *secret);

#ifdef __cplusplus
}
#endif
#endif
