/* The snapshot tools: environment_snapshot, environment_restore and environment_fork
 * (include/cae/snapshot.h), on the session's own environments only (cae__session_owns); a
 * fork becomes the session's. */
#include "tools/tools-internal.h"

#include "base/macro.h"
#include "cae/snapshot.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "base/banned.h"

json_t *cae__tool_environment_snapshot_definition(void)
{
	return cae__tool_function(
	    "environment_snapshot",
	    "Record the files of the current environment (the whole workspace: tracked, "
	    "untracked and ignored files, .git, modes, links; in a container also what "
	    "commands changed outside it, such as installed packages; not processes), to go "
	    "back to "
	    "with environment_restore or start new environments from with environment_fork. "
	    "Returns {id, name, bytes, mechanism, ...}.",
	    json_pack("{s:s, s:{s:{s:s, s:s}, s:{s:s, s:s}}}", "type", "object", "properties",
		      "name", "type", "string", "description",
		      "A name to restore it by (letters, digits, _ . -; unique per environment).",
		      "task_uuid", "type", "string", "description",
		      "The environment (default: the current one)."));
}

json_t *cae__tool_environment_restore_definition(void)
{
	return cae__tool_function(
	    "environment_restore",
	    "Put the current environment back as a snapshot recorded it: files added since "
	    "are gone, changed ones as they were. Its running process sessions are ended "
	    "first (sessions_ended says which).",
	    json_pack("{s:s, s:{s:{s:s, s:s}, s:{s:s, s:s}}, s:[s]}", "type", "object",
		      "properties", "snapshot", "type", "string", "description",
		      "The snapshot's id or name.", "task_uuid", "type", "string", "description",
		      "The environment (default: the current one).", "required", "snapshot"));
}

json_t *cae__tool_environment_fork_definition(void)
{
	return cae__tool_function(
	    "environment_fork",
	    "Make a new environment (its own uuid, sandbox and limits) that starts from "
	    "another of this session's environments as it is now, or from one of its "
	    "snapshots, and make it the current one. Nothing writable is shared with the "
	    "source. Returns its ContainerInfo with forked_from.",
	    json_pack("{s:s, s:{s:{s:s, s:{s:{s:s}}, s:[s]}, s:{s:s, s:{s:{s:s}, s:{s:s}}}}, "
		      "s:[s, s]}",
		      "type", "object", "properties", "task", "type", "object", "properties",
		      "uuid", "type", "string", "required", "uuid", "from", "type", "object",
		      "properties", "task_uuid", "type", "string", "snapshot", "type", "string",
		      "required", "task", "from"));
}

static int invalid(cae_tool_result *res, const char *message, cae_error *err)
{
	return cae__tool_finish(res, cae__tool_error("INVALID_ARGUMENT", "%s", message), true, err);
}

/* args[key] as a string, NULL when missing; *bad when present and not a string. */
static const char *opt_string(json_t *args, const char *key, bool *bad)
{
	json_t *j = json_object_get(args, key);
	if (j && !json_is_null(j) && !json_is_string(j))
		*bad = true;
	return json_string_value(j);
}

/* The environment a call means (given, else the current one), when the session owns it;
 * else NULL and the refusal in msg. */
static const char *target(const cae_tool_env *env, const char *given, char *msg, size_t size)
{
	const char *t = given ? given : env->task_uuid;
	if (!t || !*t) {
		snprintf(msg, size, "no task_uuid given and no current environment");
		return NULL;
	}
	if (!cae__session_owns(env->session, t)) {
		snprintf(msg, size, CAE_SESSION_NOT_OWNED, t);
		return NULL;
	}
	return t;
}

int cae__tool_call_environment_snapshot(const cae_tool_env *env, json_t *args, cae_tool_result *res,
					cae_error *err)
{
	bool bad = false;
	const char *name = opt_string(args, "name", &bad);
	const char *given = opt_string(args, "task_uuid", &bad);
	if (bad)
		return invalid(res, "name and task_uuid must be strings", err);
	char msg[512];
	const char *t = target(env, given, msg, sizeof(msg));
	if (!t)
		return invalid(res, msg, err);
	cae_error cause;
	cae_error_clear(&cause);
	json_t *out = NULL;
	int r = cae_snapshot_create(cae_session_backend(env->session), t, name, &out, &cause);
	if (r < 0)
		return cae__tool_finish_error(env, res, "INTERNAL", &cause, err);
	return cae__tool_finish(res, out, false, err);
}

int cae__tool_call_environment_restore(const cae_tool_env *env, json_t *args, cae_tool_result *res,
				       cae_error *err)
{
	bool bad = false;
	const char *snap = opt_string(args, "snapshot", &bad);
	const char *given = opt_string(args, "task_uuid", &bad);
	if (bad || !snap)
		return invalid(res, "snapshot (a string) is required; task_uuid must be a string",
			       err);
	char msg[512];
	const char *t = target(env, given, msg, sizeof(msg));
	if (!t)
		return invalid(res, msg, err);
	cae_error cause;
	cae_error_clear(&cause);
	json_t *out = NULL;
	int r = cae__session_restore(env->session, t, snap, &out, &cause);
	if (r < 0)
		return cae__tool_finish_error(env, res, "INTERNAL", &cause, err);
	return cae__tool_finish(res, out, false, err);
}

int cae__tool_call_environment_fork(const cae_tool_env *env, json_t *args, cae_tool_result *res,
				    cae_error *err)
{
	json_t *jt = json_object_get(args, "task");
	json_t *jf = json_object_get(args, "from");
	bool bad = !json_is_object(jt) || !json_is_object(jf);
	const char *uuid = bad ? NULL : opt_string(jt, "uuid", &bad);
	const char *from = bad ? NULL : opt_string(jf, "task_uuid", &bad);
	const char *snap = bad ? NULL : opt_string(jf, "snapshot", &bad);
	if (bad || !uuid || !cae_task_uuid_valid(uuid))
		return invalid(res,
			       "task {uuid} (a valid task uuid) and from {task_uuid?, snapshot?} "
			       "are required",
			       err);
	char msg[512];
	/* the source is one of the session's (a snapshot: of the environment given, else of
	 * the current one) */
	const char *t = target(env, from, msg, sizeof(msg));
	if (!t)
		return invalid(res, msg, err);
	/* the new uuid must be free: another session's environment is never taken over */
	if (cae__session_env_exists(env->session, uuid)) {
		snprintf(msg, sizeof(msg), CAE_SESSION_NOT_OWNED "; choose another uuid", uuid);
		return invalid(res, msg, err);
	}
	cae_error cause;
	cae_error_clear(&cause);
	json_t *out = NULL;
	int r = cae__session_fork(env->session, t, snap, uuid, &out, &cause);
	if (r == -EEXIST) {
		snprintf(msg, sizeof(msg), CAE_SESSION_NOT_OWNED "; choose another uuid", uuid);
		return invalid(res, msg, err);
	}
	if (r < 0)
		return cae__tool_finish_error(env, res, "INTERNAL", &cause, err);
	json_object_del(out, "host_path");
	return cae__tool_finish(res, out, false, err);
}
