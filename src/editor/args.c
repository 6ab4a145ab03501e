/* cae_editor_parse and cae_editor_call: the tool's JSON arguments checked and turned into a
 * request (cae_editor_run runs it, here or in a container's helper), with an
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

/* A mistake in the arguments: the error result, and 1 (-ENOMEM when it cannot be made). */
#define BAD(...) return cae__ed_res_error(res, __VA_ARGS__) < 0 ? -ENOMEM : 1

int cae_editor_parse(json_t *args, cae_editor_request *req, cae_editor_result *res)
{
	memset(req, 0, sizeof(*req));
	if (!json_is_object(args))
		BAD("Invalid arguments: expected a JSON object with `command` and "
		    "`path`.");
	const char *cmd_s, *path, *s1, *s2;
	size_t cmd_n, plen, n1, n2;
	int k = get_str(args, "command", &cmd_s, &cmd_n);
	if (k <= 0)
		BAD("Parameter `command` %s: one of view, create, str_replace, insert, "
		    "undo_edit.",
		    k == 0 ? "is required" : "must be a string");
	cae_editor_command cmd = CAE_EDITOR_CMD_UNKNOWN;
	for (size_t i = 0; i < ARRAY_SIZE(COMMANDS); i++)
		if (strlen(COMMANDS[i].name) == cmd_n && strcmp(COMMANDS[i].name, cmd_s) == 0)
			cmd = COMMANDS[i].cmd;
	if (cmd == CAE_EDITOR_CMD_UNKNOWN) {
		_cleanup_free_ char *echo = cae__ed_echo_str(cmd_s, cmd_n);
		if (!echo)
			return -ENOMEM;
		BAD("Unrecognized command %s. The allowed commands are: view, create, "
		    "str_replace, insert, undo_edit",
		    echo);
	}
	res->command = cmd;
	req->command = cmd;
	const char *name = cae_editor_command_name(cmd);
	k = get_str(args, "path", &path, &plen);
	if (k == 0)
		BAD("Parameter `path` is required for command: %s", name);
	if (k < 0)
		BAD("Parameter `path` must be a string (command: %s)", name);
	req->path = path;
	req->path_len = plen;

	switch (cmd) {
	case CAE_EDITOR_CMD_VIEW: {
		json_t *vr = json_object_get(args, "view_range");
		long long range[2];
		bool have = false;
		if (vr && !json_is_null(vr) && !(json_is_array(vr) && json_array_size(vr) == 0)) {
			if (!json_is_array(vr) || json_array_size(vr) != 2 ||
			    !get_int(json_array_get(vr, 0), &range[0]) ||
			    !get_int(json_array_get(vr, 1), &range[1]))
				BAD("Invalid `view_range`. It should be a list of "
				    "two integers: [start_line, end_line], counted "
				    "from 1, with end_line -1 for the end of the "
				    "file.");
			have = true;
		}
		req->has_range = have;
		if (have) {
			req->range[0] = range[0];
			req->range[1] = range[1];
		}
		return 0;
	}
	case CAE_EDITOR_CMD_CREATE:
		k = get_str(args, "file_text", &s1, &n1);
		if (k == 0)
			BAD("Parameter `file_text` is required for command: %s", name);
		if (k < 0)
			BAD("Parameter `file_text` must be a string");
		req->text = s1;
		req->text_len = n1;
		return 0;
	case CAE_EDITOR_CMD_STR_REPLACE:
		k = get_str(args, "old_str", &s1, &n1);
		if (k == 0)
			BAD("Parameter `old_str` is required for command: %s", name);
		if (k < 0)
			BAD("Parameter `old_str` must be a string");
		if (get_str(args, "new_str", &s2, &n2) < 0)
			BAD("Parameter `new_str` must be a string");
		req->text = s1;
		req->text_len = n1;
		req->new_str = s2;
		req->new_len = n2;
		return 0;
	case CAE_EDITOR_CMD_INSERT: {
		json_t *il = json_object_get(args, "insert_line");
		long long line;
		if (!il || json_is_null(il))
			BAD("Parameter `insert_line` is required for command: %s", name);
		if (!get_int(il, &line))
			BAD("Invalid `insert_line` parameter: it should be an "
			    "integer, the line after which to insert (0 for the "
			    "top of the file).");
		k = get_str(args, "new_str", &s2, &n2);
		if (k == 0)
			BAD("Parameter `new_str` is required for command: %s", name);
		if (k < 0)
			BAD("Parameter `new_str` must be a string");
		req->line = line;
		req->new_str = s2;
		req->new_len = n2;
		return 0;
	}
	case CAE_EDITOR_CMD_UNDO_EDIT:
		return 0;
	default:
		return 0;
	}
}

char *cae_editor_result_compat_text(const cae_editor_result *res)
{
	json_t *o = json_object();
	if (!o)
		return NULL;
	int r = json_object_set_new(o, "success", json_boolean(!res->is_error));
	if (res->is_error) {
		r |= json_object_set_new(o, "message", json_string(res->text ? res->text : ""));
	} else {
		r |= json_object_set_new(o, "message",
					 json_string(res->summary ? res->summary : ""));
		r |= json_object_set_new(o, "content", json_string(res->text ? res->text : ""));
	}
	char *s = r == 0 ? json_dumps(o, JSON_COMPACT) : NULL;
	json_decref(o);
	return s;
}

int cae_editor_call(cae_editor *ed, json_t *args, cae_editor_result *res)
{
	memset(res, 0, sizeof(*res));
	cae_editor_request req;
	int r = cae_editor_parse(args, &req, res);
	if (r < 0) {
		cae_editor_result_clear(res);
		return r;
	}
	if (r > 0)
		return 0; /* the arguments' error is the result */
	return cae_editor_run(ed, &req, res);
}
