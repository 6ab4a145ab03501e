/* Internal to src/tools: the tool table and what the tool families share.
 *
 * One row of the table (table.c) per tool name gives everything about that tool: whether the
 * configuration enables it, its definition (name, description, input schema), its output
 * schema, the function that runs it and whether a call is quick. Dispatch
 * (cae_session_call_tool), the definitions in every form (definitions.c) and the front ends'
 * quick check (cae_session_call_is_quick) all read the table; nothing else compares tool
 * names. Each family of tools lives in a file of its own (exec_tools.c, editor_tools.c,
 * patch_tools.c, env_tools.c); session.c keeps the session's state.
 */
#ifndef CAE_TOOLS_INTERNAL_H
#define CAE_TOOLS_INTERNAL_H

#include <jansson.h>
#include <stdbool.h>

#include "cae/backend.h"
#include "cae/config.h"
#include "cae/editor.h"
#include "cae/log.h"
#include "cae/policy.h"
#include "cae/secrets.h"
#include "cae/session.h"

/* What a tool call sees of the session: the current environment is copied under the session
 * lock when the call starts (cae__session_snapshot), so that a concurrent environment_prepare
 * does not change it under the call. task_uuid and workspace_path are owned by the env
 * (cae__tool_env_clear); the rest is borrowed from the session for the call. */
typedef struct cae_tool_env {
	cae_session *session;
	cae_backend *backend; /* the current environment's; NULL when none */
	char *task_uuid;      /* NULL: no environment ready */
	char *workspace_path; /* as commands see it */
	const cae_config *cfg;
	const cae_policy *policy;
	cae_log *log;		    /* may be NULL */
	const cae_secrets *secrets; /* masked in tool output */
	bool editor_compat;	    /* text editor results in the npm server's shape */
	const cae_call_ctx *ctx;    /* may be NULL */
} cae_tool_env;

/* A command's live output as progress notifications (progress.c), for the command tools. */
typedef struct cae__tool_live {
	cae_live_io io;
	const cae_call_ctx *ctx;
	const cae_secrets *secrets;
	uint64_t total; /* output bytes so far: the progress value */
	char tail[2048];
	size_t tail_len;
	bool sent;
	int64_t next_ns;
} cae__tool_live;

/* The live io for a command of this call (for cae_exec_request.live), or NULL when the
 * caller did not ask for progress. l must outlive the command. */
const cae_live_io *cae__tool_live_init(cae__tool_live *l, const cae_tool_env *env);

/* ---- process sessions (procs.c) -------------------------------------------------------- */

/* The session's table of process sessions: commands that outlive one call, each on a thread
 * of its own through cae_backend_exec with live io. Ids are unique within the table. */
typedef struct cae__procs cae__procs;
typedef struct cae__proc_start {
	cae_backend *backend; /* borrowed: must outlive the table (the session's) */
	const char *task_uuid;
	const char *env_created; /* the environment's created_at (NULL: unknown) */
	const char *command;	 /* run with sh -c */
	const char *cwd;	 /* as commands see it; NULL: the workspace */
	int64_t timeout_ms;
} cae__proc_start;
typedef struct cae__proc_read {
	int64_t wait_ms;  /* wait at most this long ... */
	bool until_exit;  /* ... for the end (else: for new output or the end) */
	bool page;	  /* take the next page of output */
	size_t max_chars; /* its size */
} cae__proc_read;

cae__procs *cae__procs_new(const cae_config *cfg, cae_log *log);
/* Ends every session, waits for their threads, frees t. Accepts NULL. */
void cae__procs_free(cae__procs *t);
/* -EMFILE when the environment runs the maximum already (err says so). */
int cae__procs_start(cae__procs *t, const cae__proc_start *o, unsigned *id, cae_error *err);
/* The session's state, and with o->page its next page of output (masked with secrets):
 * {session_id, command, task_uuid, state, exit_code, started_at, duration_ms, unread_bytes,
 * stdin_open, signal?, error?, warning?, output?, dropped_bytes?, more?}. NULL with err set
 * (-ENOENT: no such session). */
json_t *cae__procs_read(cae__procs *t, unsigned id, const cae__proc_read *o,
			const cae_secrets *secrets, cae_error *err);
/* Writes what the stdin pipe takes without waiting; closes it after when asked and all was
 * written. The state with written_bytes (and a note when not all was). */
json_t *cae__procs_write(cae__procs *t, unsigned id, const char *data, size_t len, bool close_stdin,
			 cae_error *err);
/* Sends sig (1 to 64) to the process group of a running command, which may go on; the state
 * with signal_sent (false: it was no longer running). */
json_t *cae__procs_signal(cae__procs *t, unsigned id, int sig, cae_error *err);
/* Stops the command's tree (SIGTERM, then SIGKILL after the grace) and waits for its end. */
json_t *cae__procs_kill(cae__procs *t, unsigned id, cae_error *err);
/* Every session's state, oldest first (new array). */
json_t *cae__procs_list(cae__procs *t);
int cae__procs_max_per_env(const cae__procs *t);
/* Ends the sessions of an environment (before it is removed or prepared again). */
void cae__procs_end_env(cae__procs *t, const char *task_uuid);
/* "N running process session(s) (p1: command, ...)" of task_uuid's environment (new), or
 * NULL when none runs there. */
char *cae__procs_running_text(cae__procs *t, const char *task_uuid);
/* True when the session's model-facing tools may act on task_uuid's environment: one the
 * session prepared or was given at start, or any with
 * command_executor.sessions.share_environments. */
bool cae__session_owns(cae_session *s, const char *task_uuid);
/* True when this instance has an environment of task_uuid (or another instance has one
 * that the uuid would collide with), on the session's backends. */
bool cae__session_env_exists(cae_session *s, const char *task_uuid);
/* The refusal of a task uuid that is not the session's: the same words whether another
 * session's environment has it or none does. */
#define CAE_SESSION_NOT_OWNED                                                                      \
	"task %s is not one of this session's environments (those it prepared with "               \
	"environment_prepare or was given at start; environment_list shows them)"
/* The session's table (session.c). */
cae__procs *cae__session_procs(cae_session *s);
/* cae_snapshot_restore of task_uuid after its process sessions and editor server ended;
 * *out gets sessions_ended (what ended, or null). */
int cae__session_restore(cae_session *s, const char *task_uuid, const char *snapshot, json_t **out,
			 cae_error *err);
/* cae_snapshot_fork; the new environment becomes the session's and its current one. */
int cae__session_fork(cae_session *s, const char *from_uuid, const char *snapshot,
		      const char *new_uuid, json_t **out, cae_error *err);

/* Which definitions list offers a tool (cae_tools_options); a bit each. */
typedef enum cae_tool_family {
	CAE_TOOL_COMMAND_EXECUTOR = 1 << 0, /* command-executor_execute_command */
	CAE_TOOL_EXEC = 1 << 1,		    /* exec_command */
	CAE_TOOL_EDITOR = 1 << 2,	    /* the one text_editor (split_editor off) */
	CAE_TOOL_EDITOR_SPLIT = 1 << 3,	    /* text_editor_<command> (split_editor on) */
	CAE_TOOL_PATCH = 1 << 4,	    /* apply_patch (patch_tool) */
	CAE_TOOL_ENVIRONMENT = 1 << 5,	    /* environment_* (environment_tools) */
	CAE_TOOL_PROCESS = 1 << 6,	    /* process_* (process_tools) */
} cae_tool_family;

/* Runs the tool with args (an object, borrowed): returns 0 with *res filled (res->is_error
 * for a tool failure), or a negative errno with err set. */
typedef int (*cae_tool_call_fn)(const cae_tool_env *env, json_t *args, cae_tool_result *res,
				cae_error *err);

typedef struct cae_tool_def {
	const char *name;
	cae_tool_family family;
	/* The one place that decides whether the configuration enables the tool: a disabled
	 * tool is neither listed nor dispatched. */
	bool (*enabled)(const cae_config *cfg);
	/* The definition in the functions form, {name, description, parameters} (the
	 * parameters are the input schema). New reference. */
	json_t *(*definition)(void);
	/* The MCP outputSchema (new reference); NULL: none. */
	json_t *(*output_schema)(void);
	cae_tool_call_fn call;
	/* True when a call with these arguments is short and never blocks, so that a front end
	 * may run it inline; NULL: never. */
	bool (*quick)(const json_t *args);
} cae_tool_def;

/* The table, in the order the tools are listed; cae__tool_table_size rows. */
extern const cae_tool_def cae__tool_table[];
extern const size_t cae__tool_table_size;
/* The row named name, or NULL. */
const cae_tool_def *cae__tool_lookup(const char *name);

/* ---- the session, as the tool families see it (session.c) ------------------------------ */

/* Fills *env for one call (ctx borrowed, may be NULL). -ENOMEM. */
int cae__session_snapshot(cae_session *s, const cae_call_ctx *ctx, cae_tool_env *env);
void cae__tool_env_clear(cae_tool_env *env);
/* Where the current environment's files are edited: in this process (local, the session
 * locked until release), or by the environment's backend (backend and task_uuid set: an
 * environment elsewhere, its helper runs the editor). */
typedef struct cae__mcp_editor cae__mcp_editor;
typedef struct cae_editor_target {
	cae_editor *local;
	cae__mcp_editor *mcp; /* text_editor_mcp.mode mcp: the server's client (a reference) */
	cae_backend *backend;
	char *task_uuid; /* owned */
	cae_editor_limits limits;
} cae_editor_target;

/* 0 with *t filled (release it with cae__session_editor_release), or -1 with *error set to a
 * tool error (new reference) when there is no environment or it has no editor. */
int cae__session_editor_acquire(cae_session *s, cae_editor_target *t, json_t **error);
void cae__session_editor_release(cae_session *s, cae_editor_target *t);
/* Every environment of the session's backends: {"environments": [ContainerInfo...],
 * "current": uuid?, "backend": name}. New reference, or NULL with err set. */
json_t *cae__session_environments(cae_session *s, cae_error *err);

/* ---- text_editor_mcp.mode mcp (editor_mcp.c): the server run in an environment ---------- */

/* Starts cfg's text-editor server in the environment (b borrowed, must outlive it) and a
 * client for it (cae/editor.h); *out holds one reference. */
int cae__mcp_editor_start(const cae_config *cfg, cae_backend *b, const char *task_uuid,
			  const char *workspace_path, const cae_editor_limits *limits,
			  cae__mcp_editor **out, cae_error *err);
cae__mcp_editor *cae__mcp_editor_ref(cae__mcp_editor *m);
/* Drops a reference; the last ends the server, waits for it and frees. Accepts NULL. */
void cae__mcp_editor_unref(cae__mcp_editor *m);
/* Asks the server to end (its command is cancelled: its whole tree killed). */
void cae__mcp_editor_stop(cae__mcp_editor *m);
/* False once the server ended or a call left it in an unknown state. */
bool cae__mcp_editor_usable(cae__mcp_editor *m);
const char *cae__mcp_editor_task(const cae__mcp_editor *m);
/* cae_editor_mcp_call; a server left in an unknown state is ended. */
int cae__mcp_editor_call(cae__mcp_editor *m, json_t *args, int cancel_fd, cae_editor_result *res,
			 cae_error *err);

/* ---- results (result.c) ---------------------------------------------------------------- */

/* {"error": {"code": kind, "message": msg}} — the one shape of a tool error. */
json_t *cae__tool_error(const char *code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Fills res from a structured result (stolen): its text is the JSON, or "CODE: message" for
 * an error. Returns 0, or -ENOMEM with err set (structured NULL, or no memory for the
 * text). */
int cae__tool_finish(cae_tool_result *res, json_t *structured, bool is_error, cae_error *err);
/* cae__tool_finish of a tool error whose message is cause's, host paths hidden (in cause's
 * message too). */
int cae__tool_finish_error(const cae_tool_env *env, cae_tool_result *res, const char *code,
			   cae_error *cause, cae_error *err);
/* {name, description, parameters} (parameters stolen). New reference. */
json_t *cae__tool_function(const char *name, const char *description, json_t *parameters);

/* Error messages go to the model, which must not learn host paths it did not give: the
 * state directory (as configured and its real path) in msg becomes "<state directory>" and
 * a unix:// Docker host "<docker socket>", in place (msg is NUL-terminated within size). */
void cae__tools_hide_host_paths(const cae_config *cfg, char *msg, size_t size);

/* ---- the families: the functions their table rows point to ----------------------------- */

/* exec_tools.c: command-executor_execute_command and exec_command. */
bool cae__tool_command_executor_enabled(const cae_config *cfg);
json_t *cae__tool_execute_command_definition(void);
json_t *cae__tool_execute_command_output_schema(void);
int cae__tool_call_execute_command(const cae_tool_env *env, json_t *args, cae_tool_result *res,
				   cae_error *err);
json_t *cae__tool_exec_command_definition(void);
json_t *cae__tool_exec_command_output_schema(void);
int cae__tool_call_exec_command(const cae_tool_env *env, json_t *args, cae_tool_result *res,
				cae_error *err);
/* The tools themselves: the structured result (new reference), *is_error for a failure. */
json_t *cae__tool_exec_command(const cae_tool_env *env, json_t *args, bool *is_error);
json_t *cae__tool_execute_command(const cae_tool_env *env, json_t *args, bool *is_error);

/* editor_tools.c: text_editor (the command is an argument) and text_editor_<command>. */
bool cae__tool_editor_enabled(const cae_config *cfg);
json_t *cae__tool_editor_definition(void);
int cae__tool_call_editor(const cae_tool_env *env, json_t *args, cae_tool_result *res,
			  cae_error *err);
bool cae__tool_editor_quick(const json_t *args); /* a view */
json_t *cae__tool_editor_view_definition(void);
int cae__tool_call_editor_view(const cae_tool_env *env, json_t *args, cae_tool_result *res,
			       cae_error *err);
bool cae__tool_editor_view_quick(const json_t *args); /* always */
json_t *cae__tool_editor_create_definition(void);
int cae__tool_call_editor_create(const cae_tool_env *env, json_t *args, cae_tool_result *res,
				 cae_error *err);
json_t *cae__tool_editor_str_replace_definition(void);
int cae__tool_call_editor_str_replace(const cae_tool_env *env, json_t *args, cae_tool_result *res,
				      cae_error *err);
json_t *cae__tool_editor_insert_definition(void);
int cae__tool_call_editor_insert(const cae_tool_env *env, json_t *args, cae_tool_result *res,
				 cae_error *err);
json_t *cae__tool_editor_undo_edit_definition(void);
int cae__tool_call_editor_undo_edit(const cae_tool_env *env, json_t *args, cae_tool_result *res,
				    cae_error *err);

/* patch_tools.c: apply_patch. */
bool cae__tool_patch_enabled(const cae_config *cfg);
json_t *cae__tool_apply_patch_definition(void);
int cae__tool_call_apply_patch(const cae_tool_env *env, json_t *args, cae_tool_result *res,
			       cae_error *err);

/* env_tools.c: environment_list, environment_prepare, environment_cleanup,
 * environment_port_forward. */
bool cae__tool_environment_enabled(const cae_config *cfg); /* always */
json_t *cae__tool_environment_list_definition(void);
int cae__tool_call_environment_list(const cae_tool_env *env, json_t *args, cae_tool_result *res,
				    cae_error *err);
json_t *cae__tool_environment_prepare_definition(void);
int cae__tool_call_environment_prepare(const cae_tool_env *env, json_t *args, cae_tool_result *res,
				       cae_error *err);
json_t *cae__tool_environment_cleanup_definition(void);
json_t *cae__tool_environment_port_forward_definition(void);
int cae__tool_call_environment_port_forward(const cae_tool_env *env, json_t *args,
					    cae_tool_result *res, cae_error *err);
int cae__tool_call_environment_cleanup(const cae_tool_env *env, json_t *args, cae_tool_result *res,
				       cae_error *err);

/* snapshot_tools.c: environment_snapshot, environment_restore, environment_fork. */
json_t *cae__tool_environment_snapshot_definition(void);
int cae__tool_call_environment_snapshot(const cae_tool_env *env, json_t *args, cae_tool_result *res,
					cae_error *err);
json_t *cae__tool_environment_restore_definition(void);
int cae__tool_call_environment_restore(const cae_tool_env *env, json_t *args, cae_tool_result *res,
				       cae_error *err);
json_t *cae__tool_environment_fork_definition(void);
int cae__tool_call_environment_fork(const cae_tool_env *env, json_t *args, cae_tool_result *res,
				    cae_error *err);

/* process_tools.c: process_start, process_read, process_write, process_wait, process_kill,
 * process_list. */
bool cae__tool_process_enabled(const cae_config *cfg);
json_t *cae__tool_process_start_definition(void);
int cae__tool_call_process_start(const cae_tool_env *env, json_t *args, cae_tool_result *res,
				 cae_error *err);
json_t *cae__tool_process_read_definition(void);
int cae__tool_call_process_read(const cae_tool_env *env, json_t *args, cae_tool_result *res,
				cae_error *err);
bool cae__tool_process_read_quick(const json_t *args); /* no wait */
json_t *cae__tool_process_write_definition(void);
int cae__tool_call_process_write(const cae_tool_env *env, json_t *args, cae_tool_result *res,
				 cae_error *err);
bool cae__tool_process_quick(const json_t *args); /* always */
json_t *cae__tool_process_wait_definition(void);
int cae__tool_call_process_wait(const cae_tool_env *env, json_t *args, cae_tool_result *res,
				cae_error *err);
json_t *cae__tool_process_kill_definition(void);
int cae__tool_call_process_kill(const cae_tool_env *env, json_t *args, cae_tool_result *res,
				cae_error *err);
json_t *cae__tool_process_list_definition(void);
int cae__tool_call_process_list(const cae_tool_env *env, json_t *args, cae_tool_result *res,
				cae_error *err);

/* ---- helpers of the command tools (exec_tools.c) --------------------------------------- */

/* Quotes argv for sh: words of safe characters stay as they are, others are single-quoted.
 * New string. */
char *cae__shell_join(const char *const *argv, size_t argc);

/* A numeric argument's bounds and default: stated in the tool's schema and enforced with a
 * message that gives the range. */
typedef struct cae__int_limit {
	const char *key;
	long long lo, hi, def;
} cae__int_limit;
/* Adds lim's minimum and maximum to the schema of property lim->key of parameters. */
void cae__tool_state_range(json_t *parameters, const cae__int_limit *lim);
/* The argument lim->key of args (its default when absent): true, or false with *error set to
 * a tool error that names the range. */
bool cae__tool_int_arg(json_t *args, const cae__int_limit *lim, long long *out, json_t **error);
/* The working directory a tool call names, as an absolute path: relative ones start at the
 * project, ".." folds, and climbing above "/" is refused. Returns a tool error, or NULL with
 * *cwd set. */
json_t *cae__tool_cwd(const cae_tool_env *env, const char *path, char **cwd);
/* The command and working_directory arguments of a shell-command tool: command a non-empty
 * string without NUL, working_directory a string, null or absent (*wd NULL then, and when it
 * is empty). Returns a tool error, or NULL with both set. */
json_t *cae__tool_command_args(json_t *args, const char **command, const char **wd);
/* The configured command timeout in seconds (command_executor.execution.timeout_seconds;
 * 1800 when unset). */
long long cae__tool_default_timeout_s(const cae_config *cfg);
/* For a verdict that refuses (v->allowed false): logs policy.denied for tool and returns the
 * refusal's stderr text (NULL when out of memory: use v->reason). */
char *cae__tool_policy_refusal(const cae_tool_env *env, const char *tool,
			       const cae_policy_verdict *v);

#endif
