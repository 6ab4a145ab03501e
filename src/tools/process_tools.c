/* The process tools: process_start, process_read, process_write, process_wait, process_kill
 * and process_list, over the session's table of process sessions (procs.c). A session's
 * command is checked by the same policy and runs with the same environment, working
 * directory rules and confinement as exec_command; its output reaches the model masked. */
#include "tools/tools-internal.h"

#include "base/macro.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/banned.h"

static const cae__int_limit START_WAIT_MS = {"wait_ms", 0, 60000, 1000};
static const cae__int_limit READ_WAIT_MS = {"wait_ms", 0, 60000, 0};
static const cae__int_limit WAIT_TIMEOUT_MS = {"timeout_ms", 1, 600000, 30000};
static const cae__int_limit MAX_CHARS = {"max_chars", 1000, 200000, 20000};
#define START_TIMEOUT_MAX_S 86400
#define WRITE_MAX_BYTES (1024 * 1024)

bool cae__tool_process_enabled(const cae_config *cfg)
{
	return cfg->command_executor.enabled &&
	       cfg->command_executor.sessions.max_per_environment > 0;
}

bool cae__tool_process_quick(const json_t *args)
{
	(void)args;
	return true;
}

bool cae__tool_process_read_quick(const json_t *args)
{
	json_t *w = json_object_get(args, "wait_ms");
	return !w || json_is_null(w) || (json_is_number(w) && json_number_value(w) == 0);
}

/* ---- definitions ---- */

#define SESSION_ID_SCHEMA                                                                          \
	"{s:s, s:s}", "type", "string", "description",                                             \
	    "The session id process_start returned, e.g. \"p1\" (process_list shows them all)."

static json_t *object_schema(json_t *properties, json_t *required)
{
	return json_pack("{s:s, s:o, s:o}", "type", "object", "properties", properties, "required",
			 required ? required : json_array());
}

static void add_prop(json_t *parameters, const char *name, json_t *schema)
{
	json_object_set_new(json_object_get(parameters, "properties"), name, schema);
}

static void add_session_id(json_t *parameters)
{
	add_prop(parameters, "session_id", json_pack(SESSION_ID_SCHEMA));
	json_array_append_new(json_object_get(parameters, "required"), json_string("session_id"));
}

static void add_max_chars(json_t *parameters)
{
	add_prop(parameters, "max_chars",
		 json_pack("{s:s, s:s}", "type", "integer", "description",
			   "Most characters of output this call returns (default 20000); the "
			   "rest stays for the next read (more: true)."));
	cae__tool_state_range(parameters, &MAX_CHARS);
}

/* What every result says about output, for the descriptions. */
#define OUTPUT_NOTE                                                                                \
	" The result holds the session's state (running, exited, killed, timed_out or failed), "   \
	"exit_code (null while it runs), and the output written since the last read "              \
	"(stdout and stderr interleaved as they came) up to max_chars; more: true when unread "    \
	"output remains; dropped_bytes > 0 when output was dropped unread because it passed the "  \
	"session's buffer (1 MiB by default)."

json_t *cae__tool_process_start_definition(void)
{
	json_t *p = object_schema(
	    json_pack("{s:{s:s, s:s}, s:{s:s, s:s}, s:{s:s, s:s}, s:{s:s, s:s}}", "command", "type",
		      "string", "description",
		      "The command (run with `sh -c`), e.g. `npm run dev` or `python3 -i`.",
		      "working_directory", "type", "string", "description",
		      "Working directory (default: the project). Relative paths are resolved "
		      "against it.",
		      "wait_ms", "type", "integer", "description",
		      "How long to wait before returning, for the command to end or print "
		      "something (default 1000).",
		      "timeout_seconds", "type", "integer", "description",
		      "The session is killed after this long (default: the configured command "
		      "timeout, 1800 by default)."),
	    json_pack("[s]", "command"));
	cae__tool_state_range(p, &START_WAIT_MS);
	json_t *ts = json_object_get(json_object_get(p, "properties"), "timeout_seconds");
	json_object_set_new(ts, "minimum", json_integer(1));
	json_object_set_new(ts, "maximum", json_integer(START_TIMEOUT_MAX_S));
	add_max_chars(p);
	return cae__tool_function(
	    "process_start",
	    "Start a command in the background in the task's environment and get a session id "
	    "back, with the output it printed within wait_ms. Use it for what must outlive one "
	    "call: a dev server, a file watcher, a REPL, a long build or test run; use "
	    "exec_command for commands that finish on their own. The command gets the same "
	    "environment, policy and confinement as exec_command, and keeps running between "
	    "calls until it exits, is killed (process_kill), passes timeout_seconds, or its "
	    "environment is cleaned up or this session ends: it never outlives them. A server it "
	    "starts is reachable from later commands of the environment on loopback. A limited "
	    "number of sessions run at once per environment (8 by default; process_list says "
	    "how many). Then read new output with process_read, write to its stdin "
	    "with process_write, wait for it with process_wait, list sessions with "
	    "process_list." OUTPUT_NOTE,
	    p);
}

/* A tool that returns a session's new output: session_id, the wait lim (described by
 * wait_text) and max_chars. */
static json_t *output_tool(const char *name, const char *text, const cae__int_limit *lim,
			   const char *wait_text)
{
	json_t *p = object_schema(
	    json_pack("{s:{s:s, s:s}}", lim->key, "type", "integer", "description", wait_text),
	    NULL);
	add_session_id(p);
	cae__tool_state_range(p, lim);
	add_max_chars(p);
	return cae__tool_function(name, text, p);
}

json_t *cae__tool_process_read_definition(void)
{
	return output_tool("process_read",
			   "Read a process session's output written since the last read (each "
			   "byte is returned once)." OUTPUT_NOTE,
			   &READ_WAIT_MS,
			   "Wait up to this long for new output or the end when there is none yet "
			   "(default 0: return at once).");
}

json_t *cae__tool_process_write_definition(void)
{
	json_t *p = object_schema(
	    json_pack("{s:{s:s, s:i, s:s}, s:{s:s, s:s}}", "input", "type", "string", "maxLength",
		      WRITE_MAX_BYTES, "description",
		      "Text for the command's stdin, e.g. \"print(1 + 1)\\n\" for a REPL (add "
		      "the newline a line needs).",
		      "close_stdin", "type", "boolean", "description",
		      "Close its stdin after the input (end of input), default false."),
	    json_pack("[s]", "input"));
	add_session_id(p);
	return cae__tool_function(
	    "process_write",
	    "Write text to a running process session's stdin, and optionally close it. Returns at "
	    "once with written_bytes: input the command does not read yet waits in a pipe of 64 "
	    "KiB, and what does not fit is not written (the result says so: write the rest "
	    "later). Read the answer with process_read (use its wait_ms).",
	    p);
}

json_t *cae__tool_process_wait_definition(void)
{
	return output_tool("process_wait",
			   "Wait for a process session to end, then return its exit code and new "
			   "output (as process_read)." OUTPUT_NOTE,
			   &WAIT_TIMEOUT_MS,
			   "How long to wait for the session to end (default 30000); it keeps "
			   "running when the wait is over.");
}

/* The signals process_kill sends on request, by name. */
static const struct {
	const char *name;
	int sig;
} SIGNALS[] = {{"INT", SIGINT},	  {"TERM", SIGTERM}, {"HUP", SIGHUP},  {"QUIT", SIGQUIT},
	       {"USR1", SIGUSR1}, {"USR2", SIGUSR2}, {"KILL", SIGKILL}};

json_t *cae__tool_process_kill_definition(void)
{
	json_t *names = json_array();
	for (size_t i = 0; i < ARRAY_SIZE(SIGNALS); i++)
		json_array_append_new(names, json_string(SIGNALS[i].name));
	json_t *p = object_schema(
	    json_pack("{s:{s:s, s:o, s:s}}", "signal", "type", "string", "enum", names,
		      "description",
		      "Only send this signal to the command's process group, as a terminal's "
		      "Ctrl-C sends INT, and return at once: the session goes on unless the "
		      "command exits of it (read or wait for it after). The session's shell (sh "
		      "-c) gets it too and, waiting for a child, ends with 128 + the signal when "
		      "the child ends: start a REPL or server with exec (\"exec python3 -i\") "
		      "so that it alone gets it. Without it, the session is stopped."),
	    NULL);
	add_session_id(p);
	return cae__tool_function(
	    "process_kill",
	    "Stop a process session: SIGTERM to the command and everything it started, SIGKILL "
	    "to what is left after a 2 s grace period. Returns its final state; its unread "
	    "output can still be read. With signal, only sends that signal (e.g. INT to "
	    "interrupt a REPL's running statement) and returns the state with signal_sent.",
	    p);
}

json_t *cae__tool_process_list_definition(void)
{
	return cae__tool_function(
	    "process_list",
	    "List this session's process sessions, running and ended (the most recent that "
	    "ended are kept per environment), with id, command, environment (task_uuid), state, "
	    "exit_code, started_at, duration_ms and unread_bytes.",
	    object_schema(json_object(), NULL));
}

/* ---- calls ---- */

static int finish(cae_tool_result *res, json_t *out, cae_error *err)
{
	bool is_error = json_object_get(out, "error") != NULL;
	return cae__tool_finish(res, out, is_error, err);
}

/* The session_id argument ("p" and the table's number): true, or false with *error set. */
static bool session_id_arg(json_t *args, unsigned *id, json_t **error)
{
	const char *v = json_string_value(json_object_get(args, "session_id"));
	if (!v) {
		*error = cae__tool_error("INVALID_ARGUMENT",
					 "session_id is required: a string such as \"p1\" "
					 "(process_list shows them)");
		return false;
	}
	char *end = NULL;
	unsigned long n = v[0] == 'p' && v[1] >= '1' && v[1] <= '9' ? strtoul(v + 1, &end, 10) : 0;
	if (!end || *end || n > UINT_MAX) {
		*error = cae__tool_error("NOT_FOUND",
					 "no process session %.64s (ids look like \"p1\"; "
					 "process_list shows them)",
					 v);
		return false;
	}
	*id = (unsigned)n;
	return true;
}

/* A tool error for a table failure. */
static json_t *table_error(const cae_tool_env *env, int r, cae_error *e)
{
	cae__tools_hide_host_paths(env->cfg, e->message, sizeof(e->message));
	const char *code = r == -ENOENT	   ? "NOT_FOUND"
			   : r == -EMFILE  ? "LIMIT"
			   : r == -EPIPE   ? "STDIN_CLOSED"
			   : r == -ENOTDIR ? "NOT_DIRECTORY"
					   : "INTERNAL";
	return cae__tool_error(code, "%s", e->message[0] ? e->message : strerror(-r));
}

static json_t *read_result(const cae_tool_env *env, unsigned id, const cae__proc_read *o)
{
	cae_error e = {0};
	json_t *j = cae__procs_read(cae__session_procs(env->session), id, o, env->secrets, &e);
	if (!j)
		return table_error(env, e.code ? e.code : -ENOMEM, &e);
	/* an error message may name host paths: the model only learns paths it gave */
	json_t *em = json_object_get(j, "error");
	if (json_is_string(em)) {
		char msg[1024];
		snprintf(msg, sizeof(msg), "%s", json_string_value(em));
		cae__tools_hide_host_paths(env->cfg, msg, sizeof(msg));
		json_object_set_new(j, "error", json_string(msg));
	}
	return j;
}

static json_t *process_start(const cae_tool_env *env, json_t *args)
{
	const char *command, *wd;
	json_t *error = cae__tool_command_args(args, &command, &wd);
	if (error)
		return error;
	long long wait_ms, timeout_s, max_chars;
	const cae__int_limit timeout_limit = {
	    "timeout_seconds", 1, START_TIMEOUT_MAX_S,
	    MIN(cae__tool_default_timeout_s(env->cfg), START_TIMEOUT_MAX_S)};
	if (!cae__tool_int_arg(args, &START_WAIT_MS, &wait_ms, &error) ||
	    !cae__tool_int_arg(args, &timeout_limit, &timeout_s, &error) ||
	    !cae__tool_int_arg(args, &MAX_CHARS, &max_chars, &error))
		return error;
	if (!env->task_uuid)
		return cae__tool_error(
		    "NOT_FOUND",
		    "no environment is ready: prepare one first (environment_prepare)");
	if (env->policy) {
		cae_policy_verdict v;
		cae_policy_check(env->policy, command, &v);
		if (!v.allowed) {
			_cleanup_free_ char *serr =
			    cae__tool_policy_refusal(env, "process_start", &v);
			return cae__tool_error("DENIED", "%s", serr ? serr : v.reason);
		}
	}
	_cleanup_free_ char *cwd = NULL;
	json_t *bad = cae__tool_cwd(env, wd ? wd : ".", &cwd);
	if (bad)
		return bad;
	/* the environment as it is now: another one of the same task later is not this one */
	cae_env_info info;
	cae_error e = {0};
	int r = cae_backend_info(env->backend, env->task_uuid, &info, &e);
	if (r < 0)
		return table_error(env, r, &e);
	cae__proc_start o = {
	    .backend = env->backend,
	    .task_uuid = env->task_uuid,
	    .env_created = info.created_at,
	    .command = command,
	    .cwd = cwd,
	    .timeout_ms = timeout_s * 1000,
	};
	unsigned id = 0;
	r = cae__procs_start(cae__session_procs(env->session), &o, &id, &e);
	cae_env_info_clear(&info);
	if (r < 0)
		return table_error(env, r, &e);
	cae__proc_read ro = {.wait_ms = wait_ms, .page = true, .max_chars = (size_t)max_chars};
	/* wait for the end or the first output, then a little more for what follows it */
	json_t *j = read_result(env, id, &ro);
	if (!j || json_object_get(j, "error"))
		return j;
	const char *state = json_string_value(json_object_get(j, "state"));
	/* A command that could not run at all is a failed call, not a session. */
	if (state && strcmp(state, "failed") == 0) {
		json_t *err =
		    cae__tool_error("INTERNAL", "the command could not start: %s",
				    json_string_value(json_object_get(j, "error")) ?: "unknown");
		json_decref(j);
		return err;
	}
	return j;
}

int cae__tool_call_process_start(const cae_tool_env *env, json_t *args, cae_tool_result *res,
				 cae_error *err)
{
	return finish(res, process_start(env, args), err);
}

static json_t *process_read(const cae_tool_env *env, json_t *args, bool until_exit)
{
	unsigned id;
	long long wait_ms, max_chars;
	json_t *error = NULL;
	if (!session_id_arg(args, &id, &error) ||
	    !cae__tool_int_arg(args, until_exit ? &WAIT_TIMEOUT_MS : &READ_WAIT_MS, &wait_ms,
			       &error) ||
	    !cae__tool_int_arg(args, &MAX_CHARS, &max_chars, &error))
		return error;
	cae__proc_read o = {.wait_ms = wait_ms,
			    .until_exit = until_exit,
			    .page = true,
			    .max_chars = (size_t)max_chars};
	return read_result(env, id, &o);
}

int cae__tool_call_process_read(const cae_tool_env *env, json_t *args, cae_tool_result *res,
				cae_error *err)
{
	return finish(res, process_read(env, args, false), err);
}

int cae__tool_call_process_wait(const cae_tool_env *env, json_t *args, cae_tool_result *res,
				cae_error *err)
{
	return finish(res, process_read(env, args, true), err);
}

static json_t *process_write(const cae_tool_env *env, json_t *args)
{
	unsigned id;
	json_t *error = NULL;
	if (!session_id_arg(args, &id, &error))
		return error;
	json_t *in = json_object_get(args, "input");
	if (!json_is_string(in))
		return cae__tool_error("INVALID_ARGUMENT", "input must be a string");
	if (json_string_length(in) > WRITE_MAX_BYTES)
		return cae__tool_error("INVALID_ARGUMENT",
				       "input must be at most %d bytes (it has %zu)",
				       WRITE_MAX_BYTES, json_string_length(in));
	json_t *close = json_object_get(args, "close_stdin");
	if (close && !json_is_null(close) && !json_is_boolean(close))
		return cae__tool_error("INVALID_ARGUMENT", "close_stdin must be a boolean");
	cae_error e = {0};
	json_t *j = cae__procs_write(cae__session_procs(env->session), id, json_string_value(in),
				     json_string_length(in), json_is_true(close), &e);
	return j ? j : table_error(env, e.code ? e.code : -ENOMEM, &e);
}

int cae__tool_call_process_write(const cae_tool_env *env, json_t *args, cae_tool_result *res,
				 cae_error *err)
{
	return finish(res, process_write(env, args), err);
}

static json_t *process_kill(const cae_tool_env *env, json_t *args)
{
	unsigned id;
	json_t *error = NULL;
	if (!session_id_arg(args, &id, &error))
		return error;
	json_t *js = json_object_get(args, "signal");
	int sig = 0;
	if (js) {
		const char *v = json_string_value(js);
		for (size_t i = 0; v && !sig && i < ARRAY_SIZE(SIGNALS); i++)
			if (strcmp(v, SIGNALS[i].name) == 0)
				sig = SIGNALS[i].sig;
		if (!sig)
			return cae__tool_error("INVALID_ARGUMENT",
					       "signal must be one of INT, TERM, HUP, QUIT, USR1, "
					       "USR2 or KILL");
	}
	cae_error e = {0};
	cae__procs *t = cae__session_procs(env->session);
	json_t *j = sig ? cae__procs_signal(t, id, sig, &e) : cae__procs_kill(t, id, &e);
	return j ? j : table_error(env, e.code ? e.code : -ENOMEM, &e);
}

int cae__tool_call_process_kill(const cae_tool_env *env, json_t *args, cae_tool_result *res,
				cae_error *err)
{
	return finish(res, process_kill(env, args), err);
}

int cae__tool_call_process_list(const cae_tool_env *env, json_t *args, cae_tool_result *res,
				cae_error *err)
{
	(void)args;
	cae__procs *t = cae__session_procs(env->session);
	json_t *list = cae__procs_list(t);
	json_t *out = list ? json_pack("{s:o, s:i}", "sessions", list, "max_per_environment",
				       cae__procs_max_per_env(t))
			   : NULL;
	return finish(res, out ? out : cae__tool_error("INTERNAL", "out of memory"), err);
}
