/* cae_editor_call: the tool's JSON arguments checked and turned into a command, with an
 * error result the agent can act on for each mistake (a missing or mistyped parameter, an
 * unknown command). */
#include "editor-internal.h"

#include "base/macro.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "base/banned.h"

static const struct {
	const char *name;
	cae_editor_command cmd;
} COMMANDS[] = {
    {"view", CAE_EDITOR_CMD_VIEW},
    {"create", CAE_EDITOR_CMD_CREATE},
    {"str_replace", CAE_EDITOR_CMD_STR_REPLACE},
    {"insert", CAE_EDITOR_CMD_INSERT},
    {"undo_edit", CAE_EDITOR_CMD_UNDO_EDIT},
};

/* A string argument: 0 absent (missing or null), 1 present, -1 wrong type. */
static int get_str(json_t *args, const char *key, const char **s, size_t *n)
{
	json_t *v = json_object_get(args, key);
	*s = NULL;
	*n = 0;
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_string(v))
		return -1;
	*s = json_string_value(v);
	*n = json_string_length(v);
	return 1;
}

/* An integer (or a real with an integral value). */
static bool get_int(json_t *v, long long *out)
{
	if (json_is_integer(v)) {
		*out = (long long)json_integer_value(v);
		return true;
	}
	if (json_is_real(v)) {
		double d = json_real_value(v);
		if (d >= -4.0e18 && d <= 4.0e18 && d == (double)(long long)d) {
			*out = (long long)d;
			return true;
		}
	}
	return false;
}

int ed_call_locked(cae_editor *ed, json_t *args, cae_editor_result *res)
{
	if (!json_is_object(args))
		return ed_res_error(res,
				    "Invalid arguments: expected a JSON object with `command` and "
				    "`path`.");
	const char *cmd_s, *path, *s1, *s2;
	size_t cmd_n, plen, n1, n2;
	int k = get_str(args, "command", &cmd_s, &cmd_n);
	if (k <= 0)
		return ed_res_error(
		    res,
		    "Parameter `command` %s: one of view, create, str_replace, insert, "
		    "undo_edit.",
		    k == 0 ? "is required" : "must be a string");
	cae_editor_command cmd = CAE_EDITOR_CMD_UNKNOWN;
	for (size_t i = 0; i < ARRAY_SIZE(COMMANDS); i++)
		if (strlen(COMMANDS[i].name) == cmd_n && strcmp(COMMANDS[i].name, cmd_s) == 0)
			cmd = COMMANDS[i].cmd;
	if (cmd == CAE_EDITOR_CMD_UNKNOWN) {
		_cleanup_free_ char *echo = ed_echo_str(cmd_s, cmd_n);
		if (!echo)
			return -ENOMEM;
		return ed_res_error(
		    res,
		    "Unrecognized command %s. The allowed commands are: view, create, "
		    "str_replace, insert, undo_edit",
		    echo);
	}
	res->command = cmd;
	const char *name = cae_editor_command_name(cmd);
	k = get_str(args, "path", &path, &plen);
	if (k == 0)
		return ed_res_error(res, "Parameter `path` is required for command: %s", name);
	if (k < 0)
		return ed_res_error(res, "Parameter `path` must be a string (command: %s)", name);

	switch (cmd) {
	case CAE_EDITOR_CMD_VIEW: {
		json_t *vr = json_object_get(args, "view_range");
		long long range[2];
		bool have = false;
		if (vr && !json_is_null(vr) && !(json_is_array(vr) && json_array_size(vr) == 0)) {
			if (!json_is_array(vr) || json_array_size(vr) != 2 ||
			    !get_int(json_array_get(vr, 0), &range[0]) ||
			    !get_int(json_array_get(vr, 1), &range[1]))
				return ed_res_error(res,
						    "Invalid `view_range`. It should be a list of "
						    "two integers: [start_line, end_line], counted "
						    "from 1, with end_line -1 for the end of the "
						    "file.");
			have = true;
		}
		return ed_do_view(ed, path, plen, have ? range : NULL, res);
	}
	case CAE_EDITOR_CMD_CREATE:
		k = get_str(args, "file_text", &s1, &n1);
		if (k == 0)
			return ed_res_error(
			    res, "Parameter `file_text` is required for command: %s", name);
		if (k < 0)
			return ed_res_error(res, "Parameter `file_text` must be a string");
		return ed_do_create(ed, path, plen, s1, n1, res);
	case CAE_EDITOR_CMD_STR_REPLACE:
		k = get_str(args, "old_str", &s1, &n1);
		if (k == 0)
			return ed_res_error(res, "Parameter `old_str` is required for command: %s",
					    name);
		if (k < 0)
			return ed_res_error(res, "Parameter `old_str` must be a string");
		if (get_str(args, "new_str", &s2, &n2) < 0)
			return ed_res_error(res, "Parameter `new_str` must be a string");
		return ed_do_str_replace(ed, path, plen, s1, n1, s2, n2, res);
	case CAE_EDITOR_CMD_INSERT: {
		json_t *il = json_object_get(args, "insert_line");
		long long line;
		if (!il || json_is_null(il))
			return ed_res_error(
			    res, "Parameter `insert_line` is required for command: %s", name);
		if (!get_int(il, &line))
			return ed_res_error(res,
					    "Invalid `insert_line` parameter: it should be an "
					    "integer, the line after which to insert (0 for the "
					    "top of the file).");
		k = get_str(args, "new_str", &s2, &n2);
		if (k == 0)
			return ed_res_error(res, "Parameter `new_str` is required for command: %s",
					    name);
		if (k < 0)
			return ed_res_error(res, "Parameter `new_str` must be a string");
		return ed_do_insert(ed, path, plen, line, s2, n2, res);
	}
	case CAE_EDITOR_CMD_UNDO_EDIT:
		return ed_do_undo(ed, path, plen, res);
	default:
		return 0;
	}
}
