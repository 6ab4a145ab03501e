/* The environment tools: environment_list, environment_prepare, environment_cleanup and
 * environment_port_forward, their definitions and calls, over the session's environments. */
#include "tools/tools-internal.h"

#include "base/macro.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/banned.h"

bool cae__tool_environment_enabled(const cae_config *cfg)
{
	(void)cfg;
	return true;
}

json_t *cae__tool_environment_list_definition(void)
{
	return cae__tool_function("environment_list",
				  "List the execution environments and which one is current; for "
				  "each running one, `resources`: CPU time and memory in use "
				  "(cpu_seconds, memory_bytes, pids) next to its limits "
				  "(cpus_limit, memory_limit_bytes, pids_limit).",
				  json_pack("{s:s, s:{}}", "type", "object", "properties"));
}

json_t *cae__tool_environment_prepare_definition(void)
{
	return cae__tool_function(
	    "environment_prepare",
	    "Prepare an isolated execution environment for a task: clone the repository "
	    "(a URL or a local path), install its dependencies, and make it the current "
	    "environment for the other tools. Returns its ContainerInfo.",
	    json_pack("{s:s, s:{s:{s:s, s:{s:{s:s}, s:{s:s}, s:{s:s, s:[s, s]}, s:{s:s}, "
		      "s:{s:s}}, s:[s, s]}, s:{s:s, s:s}, s:{s:s, s:s}}, s:[s]}",
		      "type", "object", "properties", "task", "type", "object", "properties",
		      "uuid", "type", "string", "repo", "type", "string", "kind", "type", "string",
		      "enum", "issue", "pull_request", "branch", "type", "string", "target_branch",
		      "type", "string", "required", "uuid", "repo", "environment", "type", "string",
		      "description",
		      "Environment name (python, node, java, go, miniforge); default python.",
		      "force", "type", "boolean", "description",
		      "Preparing a task's existing environment again replaces it. Without force "
		      "that is refused when it would lose something (files changed since their "
		      "last commit, running process sessions), and the refusal names what; "
		      "true replaces it anyway. Default false.",
		      "required", "task"));
}

json_t *cae__tool_environment_cleanup_definition(void)
{
	return cae__tool_function("environment_cleanup",
				  "Remove an execution environment (default: the current one).",
				  json_pack("{s:s, s:{s:{s:s}}}", "type", "object", "properties",
					    "task_uuid", "type", "string"));
}

json_t *cae__tool_environment_port_forward_definition(void)
{
	return cae__tool_function(
	    "environment_port_forward",
	    "Make a port of the current environment reachable from the host (e.g. a server "
	    "started with process_start): returns {host: \"127.0.0.1\", host_port}, a port "
	    "on the host's loopback that is forwarded to that port on the environment's "
	    "127.0.0.1 (whatever its network mode). It lasts until the environment is cleaned "
	    "up or this session ends; asking again for the same port gives the same one.",
	    json_pack("{s:s, s:{s:{s:s, s:i, s:i, s:s}}, s:[s]}", "type", "object", "properties",
		      "port", "type", "integer", "minimum", 1, "maximum", 65535, "description",
		      "The port the server listens on in the environment.", "required", "port"));
}

/* What the model sees of an environment: where things are as commands see them, not where
 * they are on this host (the state directory is the operator's business). */
static void model_view(json_t *info)
{
	json_object_del(info, "host_path");
}

static int invalid(cae_tool_result *res, const char *message, cae_error *err)
{
	return cae__tool_finish(res, cae__tool_error("INVALID_ARGUMENT", "%s", message), true, err);
}

int cae__tool_call_environment_list(const cae_tool_env *env, json_t *args, cae_tool_result *res,
				    cae_error *err)
{
	(void)args;
	cae_error cause;
	cae_error_clear(&cause);
	json_t *out = cae__session_environments(env->session, &cause);
	if (!out)
		return cae__tool_finish_error(env, res, "INTERNAL", &cause, err);
	size_t i;
	json_t *e;
	json_array_foreach(json_object_get(out, "environments"), i, e) model_view(e);
	return cae__tool_finish(res, out, false, err);
}

int cae__tool_call_environment_prepare(const cae_tool_env *env, json_t *args, cae_tool_result *res,
				       cae_error *err)
{
	json_t *jt = json_object_get(args, "task");
	json_t *je = json_object_get(args, "environment");
	if (je && !json_is_null(je) && !json_is_string(je))
		return invalid(res, "environment must be a string", err);
	cae_error cause;
	cae_error_clear(&cause);
	cae_task task;
	if (cae_task_from_json(jt, &task, &cause) < 0)
		return invalid(res, cause.message, err);
	/* The model names remote repositories; host paths are the operator's. */
	if (cae_task_check_model_repo(env->cfg, &task, &cause) < 0) {
		cae_task_clear(&task);
		return invalid(res, cause.message, err);
	}
	json_t *jf = json_object_get(args, "force");
	if (jf && !json_is_null(jf) && !json_is_boolean(jf)) {
		cae_task_clear(&task);
		return invalid(res, "force must be a boolean", err);
	}
	/* a uuid the session does not own: prepared over only when no environment has it (one
	 * of another session or instance is never replaced, and refused in the same words) */
	char refused[512] = "";
	if (!cae__session_owns(env->session, task.uuid) &&
	    cae__session_env_exists(env->session, task.uuid))
		snprintf(refused, sizeof(refused), CAE_SESSION_NOT_OWNED "; choose another uuid",
			 task.uuid);
	json_t *info = NULL;
	int r = refused[0] ? -EPERM
			   : cae_session_prepare_ex(env->session, &task, json_string_value(je),
						    json_is_true(jf), env->ctx, &info, &cause);
	if (r == -EEXIST)
		snprintf(refused, sizeof(refused), CAE_SESSION_NOT_OWNED "; choose another uuid",
			 task.uuid);
	cae_task_clear(&task);
	if (refused[0])
		return invalid(res, refused, err);
	if (r < 0)
		return cae__tool_finish_error(env, res, "INTERNAL", &cause, err);
	model_view(info);
	return cae__tool_finish(res, info, false, err);
}

int cae__tool_call_environment_cleanup(const cae_tool_env *env, json_t *args, cae_tool_result *res,
				       cae_error *err)
{
	json_t *ju = json_object_get(args, "task_uuid");
	if (ju && !json_is_null(ju) && !json_is_string(ju))
		return invalid(res, "task_uuid must be a string", err);
	const char *target = json_is_string(ju) ? json_string_value(ju) : env->task_uuid;
	if (!target || !*target)
		return invalid(res, "no task_uuid given and no current environment", err);
	if (!cae__session_owns(env->session, target)) {
		char msg[512];
		snprintf(msg, sizeof(msg), CAE_SESSION_NOT_OWNED, target);
		return invalid(res, msg, err);
	}
	cae_error cause;
	cae_error_clear(&cause);
	/* a task already removed (or never prepared) is no error, and says it removed nothing */
	bool existed = cae__session_env_exists(env->session, target);
	int r = cae_session_cleanup(env->session, target, &cause);
	if (r < 0)
		return cae__tool_finish_error(env, res, "INTERNAL", &cause, err);
	return cae__tool_finish(
	    res, json_pack("{s:s, s:b}", "task_uuid", target, "removed", existed), false, err);
}

int cae__tool_call_environment_port_forward(const cae_tool_env *env, json_t *args,
					    cae_tool_result *res, cae_error *err)
{
	json_t *jp = json_object_get(args, "port");
	json_int_t port = json_is_integer(jp) ? json_integer_value(jp) : 0;
	if (port < 1 || port > 65535)
		return invalid(res, "port must be an integer from 1 to 65535", err);
	if (!env->backend || !env->task_uuid)
		return invalid(res, "no current environment: prepare one first", err);
	cae_error cause;
	cae_error_clear(&cause);
	int host_port = 0;
	int r =
	    cae_backend_port_forward(env->backend, env->task_uuid, (int)port, &host_port, &cause);
	if (r < 0)
		return cae__tool_finish_error(env, res, "INTERNAL", &cause, err);
	return cae__tool_finish(res,
				json_pack("{s:s, s:i, s:I, s:s}", "host", "127.0.0.1", "host_port",
					  host_port, "port", port, "task_uuid", env->task_uuid),
				false, err);
}
