/* The text editor tools: text_editor, whose command is an argument, and the split form
 * text_editor_<command>, one tool per command; their definitions and calls. The editor
 * itself is src/editor; the session holds the current environment's. */
#include "tools/tools-internal.h"

#include "base/macro.h"
#include "base/utf8.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/banned.h"

bool cae__tool_editor_enabled(const cae_config *cfg)
{
	return cfg->text_editor_mcp.enabled;
}

static const char editor_description[] =
    "View, create and edit files in the task's workspace.\n"
    "* `view` shows a file with line numbers (like `cat -n`) or lists a directory two levels "
    "deep; `view_range` [start, end] limits a file view (end -1 = to the end of the file).\n"
    "* `create` writes a new file and fails if the path exists.\n"
    "* `str_replace` replaces `old_str`, which must occur exactly once in the file (include "
    "enough context to make it unique; whitespace matters), with `new_str`.\n"
    "* `insert` inserts `new_str` after line `insert_line` (0 = at the top).\n"
    "* `undo_edit` reverts the last edit of the file.\n"
    "Paths are relative to /workspace/project or absolute inside it.";

static json_t *editor_property(const char *which)
{
	if (strcmp(which, "command") == 0)
		return json_pack(
		    "{s:s, s:[s, s, s, s, s], s:s}", "type", "string", "enum", "view", "create",
		    "str_replace", "insert", "undo_edit", "description",
		    "The command to run: view, create, str_replace, insert or undo_edit.");
	if (strcmp(which, "path") == 0)
		return json_pack(
		    "{s:s, s:s}", "type", "string", "description",
		    "Path of the file or directory, e.g. /workspace/project/src/main.py "
		    "or src/main.py.");
	if (strcmp(which, "file_text") == 0)
		return json_pack("{s:s, s:s}", "type", "string", "description",
				 "create: the content of the new file (at most "
				 "text_editor_mcp.max_file_size bytes, 10 MiB unless configured; "
				 "an edited file is held to the same size).");
	if (strcmp(which, "old_str") == 0)
		return json_pack("{s:s, s:s}", "type", "string", "description",
				 "str_replace: the exact text to replace (must occur once).");
	if (strcmp(which, "new_str") == 0)
		return json_pack("{s:s, s:s}", "type", "string", "description",
				 "str_replace: the replacement text (empty to delete); insert: the "
				 "text to insert.");
	if (strcmp(which, "insert_line") == 0)
		return json_pack("{s:s, s:i, s:s}", "type", "integer", "minimum", 0, "description",
				 "insert: the line after which new_str is inserted (0 = top; at "
				 "most the file's number of lines).");
	/* view_range */
	return json_pack("{s:s, s:{s:s, s:i}, s:i, s:i, s:s}", "type", "array", "items", "type",
			 "integer", "minimum", -1, "minItems", 2, "maxItems", 2, "description",
			 "view: [start, end] line range, 1-based, end -1 = end of file; start "
			 "at least 1 and at most the file's number of lines, end -1 or at "
			 "least start.");
}

json_t *cae__tool_editor_definition(void)
{
	json_t *props = json_object();
	const char *names[] = {"command", "path",	 "file_text", "old_str",
			       "new_str", "insert_line", "view_range"};
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		json_object_set_new(props, names[i], editor_property(names[i]));
	return cae__tool_function("text_editor", editor_description,
				  json_pack("{s:s, s:o, s:[s, s]}", "type", "object", "properties",
					    props, "required", "command", "path"));
}

static json_t *editor_split_def(const char *cmd, const char *desc, const char *const *props,
				const char *const *required)
{
	json_t *p = json_object(), *req = json_array();
	for (const char *const *x = props; *x; x++)
		json_object_set_new(p, *x, editor_property(*x));
	for (const char *const *x = required; *x; x++)
		json_array_append_new(req, json_string(*x));
	char name[64];
	snprintf(name, sizeof(name), "text_editor_%s", cmd);
	return cae__tool_function(
	    name, desc,
	    json_pack("{s:s, s:o, s:o}", "type", "object", "properties", p, "required", req));
}

static const char *const path_only[] = {"path", NULL};

json_t *cae__tool_editor_view_definition(void)
{
	static const char *const props[] = {"path", "view_range", NULL};
	return editor_split_def("view",
				"Show a file with line numbers (like `cat -n`) or list a directory "
				"two levels deep.",
				props, path_only);
}

json_t *cae__tool_editor_create_definition(void)
{
	static const char *const props[] = {"path", "file_text", NULL};
	return editor_split_def(
	    "create", "Create a new file with the given content; fails if the path exists.", props,
	    props);
}

json_t *cae__tool_editor_str_replace_definition(void)
{
	static const char *const props[] = {"path", "old_str", "new_str", NULL};
	static const char *const required[] = {"path", "old_str", NULL};
	return editor_split_def("str_replace",
				"Replace old_str, which must occur exactly once in the file, with "
				"new_str.",
				props, required);
}

json_t *cae__tool_editor_insert_definition(void)
{
	static const char *const props[] = {"path", "insert_line", "new_str", NULL};
	return editor_split_def("insert", "Insert new_str after line insert_line (0 = top).", props,
				props);
}

json_t *cae__tool_editor_undo_edit_definition(void)
{
	return editor_split_def("undo_edit", "Revert the last edit of the file.", path_only,
				path_only);
}

/* Runs one editor call; command (NULL: the one in args) is the split tool's. */
static int call_editor(const cae_tool_env *env, const char *command, json_t *args,
		       cae_tool_result *res, cae_error *err)
{
	_cleanup_(json_decrefp) json_t *a = NULL;
	if (command) {
		a = json_deep_copy(args);
		if (!a || json_object_set_new(a, "command", json_string(command)) < 0)
			return cae_error_set(err, -ENOMEM, "out of memory");
		args = a;
	}
	json_t *error = NULL;
	cae_editor_target t;
	if (cae__session_editor_acquire(env->session, &t, &error) < 0)
		return cae__tool_finish(res, error, true, err);
	cae_editor_result er;
	int r;
	if (t.mcp) {
		/* the configured MCP server runs it in the environment (editor_mcp.c) */
		cae_error e = {0};
		r = cae__mcp_editor_call(t.mcp, args, env->ctx ? env->ctx->cancel_fd : -1, &er, &e);
		if (r == 0 && t.backend && er.command != CAE_EDITOR_CMD_VIEW)
			DISCARD_RESULT(cae_backend_guard(t.backend, t.task_uuid, NULL));
		if (r < 0 && r != -ENOMEM) {
			cae__session_editor_release(env->session, &t);
			cae__tools_hide_host_paths(env->cfg, e.message, sizeof(e.message));
			return cae__tool_finish(
			    res,
			    cae__tool_error(r == -ECANCELED ? "CANCELLED" : "INTERNAL",
					    "the text editor failed: %s", e.message),
			    true, err);
		}
	} else if (t.local) {
		r = cae_editor_call(t.local, args, &er);
		/* a write on this host: .git/config back to the rule (a workspace the user owns) */
		if (r == 0 && er.command != CAE_EDITOR_CMD_VIEW)
			DISCARD_RESULT(cae_backend_guard(t.backend, t.task_uuid, NULL));
	} else {
		/* checked here, run by the environment's helper: the same results */
		cae_editor_request q;
		r = cae_editor_parse(args, &q, &er);
		if (r == 0) {
			cae_error e = {0};
			r = cae_backend_edit(t.backend, t.task_uuid, &t.limits, &q, &er, &e);
			if (r < 0) {
				cae__session_editor_release(env->session, &t);
				cae__tools_hide_host_paths(env->cfg, e.message, sizeof(e.message));
				return cae__tool_finish(
				    res,
				    cae__tool_error("INTERNAL", "the text editor failed: %s",
						    e.message),
				    true, err);
			}
		} else if (r > 0) {
			r = 0; /* the arguments' error is the result */
		}
	}
	cae__session_editor_release(env->session, &t);
	if (r < 0)
		return cae_error_set(err, r, "text editor: %s", strerror(-r));
	res->is_error = er.is_error;
	if (env->editor_compat) {
		res->text = cae_editor_result_compat_text(&er);
		res->structured = res->text ? json_loads(res->text, 0, NULL) : NULL;
	} else {
		res->text = er.text;
		er.text = NULL;
		/* The output can be a whole file: checked once here (a faster check than
		 * json_pack's), and the MCP result shares this string for its text. */
		size_t n = res->text ? strlen(res->text) : 0;
		json_t *out = res->text && cae__utf8_is_valid(res->text, n)
				  ? json_stringn_nocheck(res->text, n)
				  : NULL;
		res->structured = out ? json_pack("{s:s, s:s?, s:o, s:b}", "command",
						  cae_editor_command_name(er.command), "path",
						  er.path, "output", out, "is_error", er.is_error)
				      : NULL;
	}
	cae_editor_result_clear(&er);
	return res->text ? 0 : cae_error_set(err, -ENOMEM, "out of memory");
}

int cae__tool_call_editor(const cae_tool_env *env, json_t *args, cae_tool_result *res,
			  cae_error *err)
{
	return call_editor(env, NULL, args, res, err);
}

int cae__tool_call_editor_view(const cae_tool_env *env, json_t *args, cae_tool_result *res,
			       cae_error *err)
{
	return call_editor(env, "view", args, res, err);
}

int cae__tool_call_editor_create(const cae_tool_env *env, json_t *args, cae_tool_result *res,
				 cae_error *err)
{
	return call_editor(env, "create", args, res, err);
}

int cae__tool_call_editor_str_replace(const cae_tool_env *env, json_t *args, cae_tool_result *res,
				      cae_error *err)
{
	return call_editor(env, "str_replace", args, res, err);
}

int cae__tool_call_editor_insert(const cae_tool_env *env, json_t *args, cae_tool_result *res,
				 cae_error *err)
{
	return call_editor(env, "insert", args, res, err);
}

int cae__tool_call_editor_undo_edit(const cae_tool_env *env, json_t *args, cae_tool_result *res,
				    cae_error *err)
{
	return call_editor(env, "undo_edit", args, res, err);
}

/* A view is short and does not block: a bounded read of a file or directory listing, here
 * or through an environment's helper. Edits are not quick: they fsync. */
bool cae__tool_editor_quick(const json_t *args)
{
	const char *command = json_string_value(json_object_get(args, "command"));
	return command && strcmp(command, "view") == 0;
}

bool cae__tool_editor_view_quick(const json_t *args)
{
	(void)args;
	return true;
}
