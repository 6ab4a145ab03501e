/* Internal to src/tools: the agent tools over a backend. Each tool takes its JSON arguments
 * (borrowed) and returns its structured result (new reference), setting *is_error for a tool
 * failure; the session turns that into text + structuredContent. */
#ifndef CAE_TOOLS_INTERNAL_H
#define CAE_TOOLS_INTERNAL_H

#include <jansson.h>
#include <stdbool.h>

#include "cae/backend.h"
#include "cae/config.h"
#include "cae/log.h"
#include "cae/policy.h"
#include "cae/session.h"

/* What the command tools need from the session: borrowed for the call. */
typedef struct cae_tool_env {
	cae_backend *backend;
	const char *task_uuid;	    /* NULL: no environment ready */
	const char *workspace_path; /* as commands see it */
	const cae_config *cfg;
	const cae_policy *policy;
	cae_log *log;
	const cae_call_ctx *ctx; /* may be NULL */
} cae_tool_env;

/* SPEC §7.2 / seed 001. */
json_t *cae_tool_exec_command(const cae_tool_env *env, json_t *args, bool *is_error);
/* SPEC §7.1 / seed 000 §6. */
json_t *cae_tool_execute_command(const cae_tool_env *env, json_t *args, bool *is_error);

/* {"error": {"code": kind, "message": msg}} — the one shape of a tool error. */
json_t *cae_tool_error(const char *code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Error messages go to the model, which must not learn host paths it did not give: the
 * state directory (as configured and its real path) in msg becomes "<state directory>" and
 * a unix:// Docker host "<docker socket>", in place (msg is NUL-terminated within size). */
void cae_tools_hide_host_paths(const cae_config *cfg, char *msg, size_t size);

/* Quotes argv for sh: words of safe characters stay as they are, others are single-quoted.
 * New string. */
char *cae_shell_join(const char *const *argv, size_t argc);

/* Lexically normalises path (joined to base when relative): '\' becomes '/', "." and ".."
 * components are resolved without touching the filesystem. New string. */
char *cae_path_normalize(const char *base, const char *path);

#endif
