/* The command tools: exec_command and command-executor_execute_command, their definitions,
 * output schemas and calls. Both run through the backend, so they behave the same on every
 * backend. The exec_command definition's strings are fixed by the tool's specification and
 * must stay byte-identical. */
#include "tools/tools-internal.h"

#include "base/chase.h"
#include "base/macro.h"
#include "base/utf8.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/banned.h"

/* The numeric limits the command tools enforce: each is stated in the tool's input schema
 * (minimum/maximum, minItems/maxItems) from here, and an argument outside one is refused
 * with a message that gives the range. */
static const cae__int_limit EXEC_TIMEOUT_MS = {"timeout_ms", 1, 120000, 30000};
static const cae__int_limit EXEC_MAX_OUTPUT_CHARS = {"max_output_chars", 1000, 1000000, 200000};
#define EXEC_MAX_ARGV 4096 /* elements of exec_command's command */
#define EXECUTE_TIMEOUT_MAX_S 86400

void cae__tool_state_range(json_t *parameters, const cae__int_limit *lim)
{
	json_t *p = json_object_get(json_object_get(parameters, "properties"), lim->key);
	json_object_set_new(p, "minimum", json_integer(lim->lo));
	json_object_set_new(p, "maximum", json_integer(lim->hi));
}

bool cae__tool_command_executor_enabled(const cae_config *cfg)
{
	return cfg->command_executor.enabled;
}

int cae__tool_call_exec_command(const cae_tool_env *env, json_t *args, cae_tool_result *res,
				cae_error *err)
{
	bool is_error;
	json_t *out = cae__tool_exec_command(env, args, &is_error);
	return cae__tool_finish(res, out, is_error, err);
}

int cae__tool_call_execute_command(const cae_tool_env *env, json_t *args, cae_tool_result *res,
				   cae_error *err)
{
	bool is_error;
	json_t *out = cae__tool_execute_command(env, args, &is_error);
	return cae__tool_finish(res, out, is_error, err);
}

json_t *cae__tool_execute_command_definition(void)
{
	return cae__tool_function(
	    "command-executor_execute_command",
	    "Execute a shell command (run with `sh -c`) in the task's isolated execution "
	    "environment, where the project is cloned at /workspace/project and its "
	    "dependencies are installed. Use it to run tests, builds, linters, grep/find and "
	    "git. Returns exit_code, stdout, stderr and duration_ms; each output stream is "
	    "limited in size (stdout_truncated / stderr_truncated tell when it was cut).",
	    json_pack("{s:s, s:{s:{s:s, s:s}, s:{s:s, s:s}, s:{s:s, s:s, s:i, s:i}}, s:[s]}",
		      "type", "object", "properties", "command", "type", "string", "description",
		      "The command to execute, e.g. `pytest -q` or `grep -rn \"foo\" src/`.",
		      "working_directory", "type", "string", "description",
		      "Working directory (default: /workspace/project). Relative paths are "
		      "resolved against it.",
		      "timeout_seconds", "type", "integer", "description",
		      "Timeout in seconds (default: the configured timeout, 1800).", "minimum", 1,
		      "maximum", EXECUTE_TIMEOUT_MAX_S, "required", "command"));
}

/* Adds the optional "warning" (how the command ran, when worth saying) and "network_denied"
 * (what the environment's network proxy refused since the previous command) to a result
 * schema. */
static json_t *with_warning(json_t *schema)
{
	json_t *props = json_object_get(schema, "properties");
	json_object_set_new(props, "warning", json_pack("{s:s}", "type", "string"));
	json_object_set_new(props, "network_denied",
			    json_pack("{s:s, s:{s:s, s:{s:{s:s}, s:{s:s}, s:{s:s}}}}", "type",
				      "array", "items", "type", "object", "properties", "host",
				      "type", "string", "port", "type", "integer", "count", "type",
				      "integer"));
	return schema;
}

/* The result's "warning" and "network_denied", when the run has them. */
static void add_run_notes(json_t *out, const cae_run_result *res)
{
	if (!out)
		return;
	if (res->warning)
		json_object_set_new(out, "warning", json_string(res->warning));
	json_t *denied = res->network_denied ? json_loads(res->network_denied, 0, NULL) : NULL;
	if (json_is_array(denied))
		json_object_set_new(out, "network_denied", denied);
	else
		json_decref(denied);
}

json_t *cae__tool_execute_command_output_schema(void)
{
	return with_warning(
	    json_pack("{s:s, s:{s:{s:s}, s:{s:s}, s:{s:s}, s:{s:s}, s:{s:s}, s:{s:s}, s:{s:s}}, "
		      "s:[s, s, s, s]}",
		      "type", "object", "properties", "exit_code", "type", "integer", "stdout",
		      "type", "string", "stderr", "type", "string", "duration_ms", "type",
		      "integer", "stdout_truncated", "type", "boolean", "stderr_truncated", "type",
		      "boolean", "timed_out", "type", "boolean", "required", "exit_code", "stdout",
		      "stderr", "duration_ms"));
}

json_t *cae__tool_exec_command_definition(void)
{
	/* The strings are verbatim from the tool's specification, which fixes the descriptions:
	 * the limits are stated in schema keywords, which leave them unchanged. */
	json_t *f = cae__tool_function(
	    "exec_command",
	    "Runs a command once in the workspace and returns stdout, stderr, and exit code.",
	    json_pack(
		"{s:s, s:{s:{s:s, s:s}, s:{s:s, s:{s:s}, s:s}, s:{s:s, s:[s, s], s:s, "
		"s:s}, s:{s:s, s:s}, s:{s:s, s:i, s:s}, s:{s:s, s:i, s:s}}, s:[s, s]}",
		"type", "object", "properties", "cwd", "type", "string", "description",
		"Working directory path in workspace.", "command", "type", "array", "items", "type",
		"string", "description",
		"Only the target command tokens to run (e.g. bun run dev).", "shell_mode", "type",
		"string", "enum", "default", "direct", "default", "default", "description",
		"Use default to apply OS shell wrapper automatically (default: default).", "stdin",
		"type", "string", "description", "UTF-8 stdin text.", "timeout_ms", "type",
		"number", "default", 30000, "description",
		"Execution timeout in milliseconds (default: 30000).", "max_output_chars", "type",
		"number", "default", 200000, "description",
		"Per-stream output char limit (default: 200000).", "required", "cwd", "command"));
	json_t *parameters = json_object_get(f, "parameters");
	json_t *command = json_object_get(json_object_get(parameters, "properties"), "command");
	json_object_set_new(command, "minItems", json_integer(1));
	json_object_set_new(command, "maxItems", json_integer(EXEC_MAX_ARGV));
	cae__tool_state_range(parameters, &EXEC_TIMEOUT_MS);
	cae__tool_state_range(parameters, &EXEC_MAX_OUTPUT_CHARS);
	return f;
}

json_t *cae__tool_exec_command_output_schema(void)
{
	return with_warning(json_pack(
	    "{s:s, s:{s:{s:s}, s:{s:s, s:{s:s}}, s:{s:s}, s:{s:s}, s:{s:s}, s:{s:s}, "
	    "s:{s:s}, s:{s:s}, s:{s:s}}, s:[s, s, s, s, s, s, s, s, s]}",
	    "type", "object", "properties", "cwd", "type", "string", "command", "type", "array",
	    "items", "type", "string", "exit_code", "type", "integer", "stdout", "type", "string",
	    "stderr", "type", "string", "stdout_truncated", "type", "boolean", "stderr_truncated",
	    "type", "boolean", "timed_out", "type", "boolean", "duration_ms", "type", "integer",
	    "required", "cwd", "command", "exit_code", "stdout", "stderr", "stdout_truncated",
	    "stderr_truncated", "timed_out", "duration_ms"));
}

static bool shell_safe(const char *s)
{
	if (!*s)
		return false;
	for (const char *p = s; *p; p++) {
		char c = *p;
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      strchr("@%+=:,./-_", c)))
			return false;
	}
	return true;
}

char *cae__shell_join(const char *const *argv, size_t argc)
{
	size_t cap = 1;
	for (size_t i = 0; i < argc; i++)
		cap += strlen(argv[i]) * 4 + 3;
	char *out = malloc(cap);
	if (!out)
		return NULL;
	size_t o = 0;
	for (size_t i = 0; i < argc; i++) {
		if (i)
			out[o++] = ' ';
		if (shell_safe(argv[i])) {
			size_t l = strlen(argv[i]);
			memcpy(out + o, argv[i], l);
			o += l;
			continue;
		}
		out[o++] = '\'';
		for (const char *p = argv[i]; *p; p++) {
			if (*p == '\'') {
				memcpy(out + o, "'\\''", 4);
				o += 4;
			} else {
				out[o++] = *p;
			}
		}
		out[o++] = '\'';
	}
	out[o] = '\0';
	return out;
}

json_t *cae__tool_cwd(const cae_tool_env *env, const char *path, char **cwd)
{
	int r =
	    cae__path_lexical("/", env->workspace_path, path, strlen(path),
			      CAE_PATH_FOLD_DOTDOT | CAE_PATH_BACKSLASH | CAE_PATH_ABSOLUTE, cwd);
	if (r == 0)
		return NULL;
	if (r == -ENOMEM)
		return cae__tool_error("INTERNAL", "out of memory");
	if (r == -EXDEV)
		return cae__tool_error("NOT_DIRECTORY",
				       "working directory %s is outside the workspace", path);
	return cae__tool_error("INVALID_ARGUMENT", "bad working directory %s: %s", path,
			       strerror(-r));
}

/* Cuts the len bytes of valid UTF-8 at s (NULs included: they are output too) to max_chars
 * characters; *len becomes the new length. */
static void cut_chars(char *s, size_t *len, size_t max_chars, bool *truncated)
{
	size_t chars;
	size_t b = cae__utf8_prefix_chars(s, *len, max_chars, &chars);
	if (b < *len) {
		s[b] = '\0';
		*len = b;
		*truncated = true;
	}
}

/* Output that reaches the model: known secrets become ***. */
static json_t *redacted_string(const cae_secrets *secrets, const char *s)
{
	_cleanup_free_ char *r = cae_secrets_mask(secrets, s ? s : "");
	return json_string(r ? r : "");
}

/* The same for a command's output of len bytes, kept whole: a NUL byte (find -print0, git
 * ls-files -z, binary output) is U+0000 in the JSON string, never the end of the text. */
static json_t *redacted_output(const cae_secrets *secrets, const char *s, size_t len)
{
	size_t n = 0;
	_cleanup_free_ char *r = cae_secrets_maskn(secrets, s ? s : "", s ? len : 0, &n);
	return r ? json_stringn(r, n) : json_string("");
}

json_t *cae__tool_command_args(json_t *args, const char **command, const char **wd)
{
	json_t *jcmd = json_object_get(args, "command");
	if (!json_is_string(jcmd) || json_string_length(jcmd) == 0)
		return cae__tool_error("INVALID_ARGUMENT", "command must be a non-empty string");
	if (strlen(json_string_value(jcmd)) != json_string_length(jcmd))
		return cae__tool_error("INVALID_ARGUMENT",
				       "command must not contain NUL characters");
	json_t *jwd = json_object_get(args, "working_directory");
	if (jwd && !json_is_null(jwd) && !json_is_string(jwd))
		return cae__tool_error("INVALID_ARGUMENT", "working_directory must be a string");
	*command = json_string_value(jcmd);
	*wd = json_is_string(jwd) && json_string_length(jwd) ? json_string_value(jwd) : NULL;
	return NULL;
}

long long cae__tool_default_timeout_s(const cae_config *cfg)
{
	return cfg->command_executor.execution.timeout_seconds > 0
		   ? cfg->command_executor.execution.timeout_seconds
		   : 1800;
}

char *cae__tool_policy_refusal(const cae_tool_env *env, const char *tool,
			       const cae_policy_verdict *v)
{
	cae_log_fields(env->log, CAE_LOG_WARN, "policy.denied",
		       json_pack("{s:s, s:s}", "tool", tool, "program", v->program), "%s",
		       v->reason);
	return cae_policy_verdict_stderr(v);
}

bool cae__tool_int_arg(json_t *args, const cae__int_limit *lim, long long *out, json_t **error)
{
	const char *key = lim->key;
	long long lo = lim->lo, hi = lim->hi;
	json_t *v = json_object_get(args, key);
	if (!v || json_is_null(v)) {
		*out = lim->def;
		return true;
	}
	double d;
	if (json_is_integer(v))
		d = (double)json_integer_value(v);
	else if (json_is_real(v))
		d = json_real_value(v);
	else {
		*error = cae__tool_error("INVALID_ARGUMENT",
					 "%s must be a number, an integer from %lld to %lld", key,
					 lo, hi);
		return false;
	}
	if (!isfinite(d) || d < (double)lo || d > (double)hi || d != floor(d)) {
		*error = cae__tool_error("INVALID_ARGUMENT",
					 "%s must be an integer from %lld to %lld", key, lo, hi);
		return false;
	}
	*out = (long long)d;
	return true;
}

/* The call's cancel fd, -1: none. */
static int call_cancel_fd(const cae_tool_env *env)
{
	return env->ctx ? env->ctx->cancel_fd : -1;
}

json_t *cae__tool_exec_command(const cae_tool_env *env, json_t *args, bool *is_error)
{
	*is_error = true;
	if (!json_is_object(args))
		return cae__tool_error("INVALID_ARGUMENT", "arguments must be an object");
	json_t *jcwd = json_object_get(args, "cwd");
	if (!json_is_string(jcwd) || json_string_length(jcwd) == 0)
		return cae__tool_error("INVALID_ARGUMENT", "cwd must be a non-empty string");
	json_t *jcmd = json_object_get(args, "command");
	if (!json_is_array(jcmd) || json_array_size(jcmd) == 0 ||
	    json_array_size(jcmd) > EXEC_MAX_ARGV)
		return cae__tool_error("INVALID_ARGUMENT",
				       "command must be an array of 1 to %d strings (it has %zu)",
				       EXEC_MAX_ARGV, json_array_size(jcmd));
	size_t argc = json_array_size(jcmd);
	for (size_t i = 0; i < argc; i++)
		if (!json_is_string(json_array_get(jcmd, i)))
			return cae__tool_error("INVALID_ARGUMENT", "command[%zu] must be a string",
					       i);
	if (json_string_length(json_array_get(jcmd, 0)) == 0)
		return cae__tool_error("INVALID_ARGUMENT", "command[0] must not be empty");
	const char *mode = "default";
	json_t *jmode = json_object_get(args, "shell_mode");
	if (jmode && !json_is_null(jmode)) {
		mode = json_string_value(jmode);
		if (!mode || (strcmp(mode, "default") != 0 && strcmp(mode, "direct") != 0))
			return cae__tool_error("INVALID_ARGUMENT",
					       "shell_mode must be \"default\" or \"direct\"");
	}
	json_t *jstdin = json_object_get(args, "stdin");
	if (jstdin && !json_is_null(jstdin) && !json_is_string(jstdin))
		return cae__tool_error("INVALID_ARGUMENT", "stdin must be a string");
	long long timeout_ms, max_chars;
	json_t *error = NULL;
	if (!cae__tool_int_arg(args, &EXEC_TIMEOUT_MS, &timeout_ms, &error) ||
	    !cae__tool_int_arg(args, &EXEC_MAX_OUTPUT_CHARS, &max_chars, &error))
		return error;
	if (!env->task_uuid)
		return cae__tool_error(
		    "NOT_FOUND",
		    "no environment is ready: prepare one first (environment_prepare)");
	/* Strings of the argument array: borrowed from args for the call. */
	_cleanup_free_ const char **argv = calloc(argc + 1, sizeof(char *));
	if (!argv)
		return cae__tool_error("INTERNAL", "out of memory");
	for (size_t i = 0; i < argc; i++)
		argv[i] = json_string_value(json_array_get(jcmd, i));
	bool direct = strcmp(mode, "direct") == 0;
	_cleanup_free_ char *cwd = NULL;
	json_t *bad = cae__tool_cwd(env, json_string_value(jcwd), &cwd);
	if (bad)
		return bad;

	/* The policy's deny-list holds for both tools. */
	cae_policy_verdict v;
	_cleanup_free_ char *script = NULL;
	if (!direct)
		script = argc == 1 ? strdup(argv[0]) : cae__shell_join(argv, argc);
	if (!direct && !script)
		return cae__tool_error("INTERNAL", "out of memory");
	if (env->policy) {
		if (direct)
			cae_policy_check_argv(env->policy, argv, &v);
		else
			cae_policy_check(env->policy, script, &v);
		if (!v.allowed) {
			_cleanup_free_ char *serr =
			    cae__tool_policy_refusal(env, "exec_command", &v);
			*is_error = false;
			return json_pack("{s:s, s:O, s:i, s:s, s:s, s:b, s:b, s:b, s:i}", "cwd",
					 cwd, "command", jcmd, "exit_code", 126, "stdout", "",
					 "stderr", serr ? serr : v.reason, "stdout_truncated", 0,
					 "stderr_truncated", 0, "timed_out", 0, "duration_ms", 0);
		}
	}
	/* COMMAND_NOT_FOUND is decided by the backend, on the PATH of the environment the command
	 * runs in (the host's for the local backend, the container's for docker): -ENOENT. */
	const char *sh_argv[] = {"sh", "-c", script, NULL};
	int cancel_fd = call_cancel_fd(env);
	size_t cap = (size_t)max_chars * 4;
	cae__tool_live live;
	cae_exec_request req = {
	    .argv = direct ? argv : sh_argv,
	    .cwd = cwd,
	    .stdin_data = json_string_value(jstdin),
	    .stdin_len = jstdin ? json_string_length(jstdin) : 0,
	    .has_stdin = json_is_string(jstdin),
	    .timeout_ms = timeout_ms,
	    .max_stdout = cap,
	    .max_stderr = cap,
	    .cancel_fd = cancel_fd,
	    .live = cae__tool_live_init(&live, env),
	};
	cae_run_result res;
	cae_error err;
	cae_error_clear(&err);
	int r = cae_backend_exec(env->backend, env->task_uuid, &req, &res, &err);
	if (r < 0)
		cae__tools_hide_host_paths(env->cfg, err.message, sizeof(err.message));
	if (r == -ENOTDIR)
		return cae__tool_error("NOT_DIRECTORY", "%s", err.message);
	if (r == -ENOENT && direct)
		return cae__tool_error("COMMAND_NOT_FOUND", "%s", err.message);
	if (r < 0)
		return cae__tool_error("INTERNAL", "%s", err.message);
	if (res.cancelled) {
		cae_run_result_clear(&res);
		return cae__tool_error("CANCELLED", "the command was cancelled");
	}
	bool out_tr = res.out_truncated, err_tr = res.err_truncated;
	cut_chars(res.out, &res.out_len, (size_t)max_chars, &out_tr);
	cut_chars(res.err, &res.err_len, (size_t)max_chars, &err_tr);
	json_t *out = json_pack("{s:s, s:O, s:i, s:o, s:o, s:b, s:b, s:b, s:I}", "cwd", cwd,
				"command", jcmd, "exit_code", res.timed_out ? 124 : res.exit_code,
				"stdout", redacted_output(env->secrets, res.out, res.out_len),
				"stderr", redacted_output(env->secrets, res.err, res.err_len),
				"stdout_truncated", out_tr, "stderr_truncated", err_tr, "timed_out",
				res.timed_out, "duration_ms", (json_int_t)res.duration_ms);
	add_run_notes(out, &res);
	cae_log_fields(env->log, CAE_LOG_INFO, "tool.exec_command",
		       json_pack("{s:i, s:b, s:I}", "exit_code",
				 res.timed_out ? 124 : res.exit_code, "timed_out", res.timed_out,
				 "duration_ms", (json_int_t)res.duration_ms),
		       NULL);
	cae_run_result_clear(&res);
	*is_error = false;
	return out;
}

static json_t *exec_result(int exit_code, json_t *out, json_t *err, int64_t duration_ms,
			   bool out_tr, bool err_tr, bool timed_out)
{
	return json_pack("{s:i, s:o, s:o, s:I, s:b, s:b, s:b}", "exit_code", exit_code, "stdout",
			 out, "stderr", err, "duration_ms", (json_int_t)duration_ms,
			 "stdout_truncated", out_tr, "stderr_truncated", err_tr, "timed_out",
			 timed_out);
}

json_t *cae__tool_execute_command(const cae_tool_env *env, json_t *args, bool *is_error)
{
	*is_error = true;
	if (!json_is_object(args))
		return cae__tool_error("INVALID_ARGUMENT", "arguments must be an object");
	const char *command, *wd;
	json_t *error = cae__tool_command_args(args, &command, &wd);
	if (error)
		return error;
	long long timeout_s;
	const cae__int_limit timeout_limit = {"timeout_seconds", 1, EXECUTE_TIMEOUT_MAX_S,
					      cae__tool_default_timeout_s(env->cfg)};
	if (!cae__tool_int_arg(args, &timeout_limit, &timeout_s, &error))
		return error;
	if (!env->task_uuid)
		return cae__tool_error("INTERNAL",
				       "Execution environment not ready: prepare one first "
				       "(environment_prepare)");
	*is_error = false;
	if (env->policy) {
		cae_policy_verdict v;
		cae_policy_check(env->policy, command, &v);
		if (!v.allowed) {
			_cleanup_free_ char *serr =
			    cae__tool_policy_refusal(env, "command-executor_execute_command", &v);
			return exec_result(126, json_string(""),
					   json_string(serr ? serr : v.reason), 0, false, false,
					   false);
		}
	}
	_cleanup_free_ char *cwd = NULL;
	json_t *bad = cae__tool_cwd(env, wd ? wd : ".", &cwd);
	if (bad) {
		json_decref(bad);
		char msg[1200];
		snprintf(msg, sizeof(msg),
			 "Command execution error: working directory %s is outside the workspace",
			 wd ? wd : ".");
		return exec_result(-1, json_string(""), redacted_string(env->secrets, msg), 0,
				   false, false, false);
	}
	const char *argv[] = {"sh", "-c", command, NULL};
	int cancel_fd = call_cancel_fd(env);
	size_t cap = (size_t)env->cfg->command_executor.execution.max_output_size;
	cae__tool_live live;
	cae_exec_request req = {
	    .argv = argv,
	    .cwd = cwd,
	    .timeout_ms = timeout_s * 1000,
	    .max_stdout = cap ? cap : CAE_RUNNER_DEFAULT_MAX_OUTPUT,
	    .max_stderr = cap ? cap : CAE_RUNNER_DEFAULT_MAX_OUTPUT,
	    .truncate =
		env->cfg->command_executor.execution.truncate == CAE_CONFIG_TRUNCATE_HEAD_TAIL
		    ? CAE_TRUNCATE_HEAD_TAIL
		    : CAE_TRUNCATE_HEAD,
	    .cancel_fd = cancel_fd,
	    .live = cae__tool_live_init(&live, env),
	};
	cae_run_result res;
	cae_error err;
	cae_error_clear(&err);
	int r = cae_backend_exec(env->backend, env->task_uuid, &req, &res, &err);
	if (r < 0) {
		cae__tools_hide_host_paths(env->cfg, err.message, sizeof(err.message));
		char msg[1200];
		snprintf(msg, sizeof(msg), "Command execution error: %s", err.message);
		return exec_result(-1, json_string(""), redacted_string(env->secrets, msg), 0,
				   false, false, false);
	}
	json_t *out;
	if (res.cancelled) {
		*is_error = true;
		out = cae__tool_error("CANCELLED", "the command was cancelled");
	} else if (res.timed_out) {
		char msg[128];
		snprintf(msg, sizeof(msg), "Command timeout after %lld seconds", timeout_s);
		out =
		    exec_result(-1, redacted_output(env->secrets, res.out, res.out_len),
				json_string(msg), res.duration_ms, res.out_truncated, false, true);
	} else {
		out =
		    exec_result(res.exit_code, redacted_output(env->secrets, res.out, res.out_len),
				redacted_output(env->secrets, res.err, res.err_len),
				res.duration_ms, res.out_truncated, res.err_truncated, false);
		if (res.term_signal == 9)
			json_object_set_new(out, "killed_by_signal", json_integer(9));
	}
	add_run_notes(out, &res);
	cae_log_fields(env->log, CAE_LOG_INFO, "tool.execute_command",
		       json_pack("{s:i, s:b, s:I}", "exit_code", res.timed_out ? -1 : res.exit_code,
				 "timed_out", res.timed_out, "duration_ms",
				 (json_int_t)res.duration_ms),
		       NULL);
	cae_run_result_clear(&res);
	return out;
}
