/* The JSON form: a JSON array of {type, action, target, content, metadata?}. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/macro.h"
#include "patch/patch-internal.h"

#include "base/banned.h"

static const struct {
	const char *name;
	cae_patch_type type;
	cae_patch_action action;
} json_actions[] = {
    {"create", CAE_PATCH_FILE_EDIT, CAE_PATCH_CREATE},
    {"update", CAE_PATCH_FILE_EDIT, CAE_PATCH_UPDATE},
    {"delete", CAE_PATCH_FILE_EDIT, CAE_PATCH_DELETE},
    {"append", CAE_PATCH_FILE_EDIT, CAE_PATCH_APPEND},
    {"run", CAE_PATCH_SHELL_COMMAND, CAE_PATCH_RUN},
    {"add", CAE_PATCH_GIT_OPERATION, CAE_PATCH_GIT_ADD},
    {"commit", CAE_PATCH_GIT_OPERATION, CAE_PATCH_GIT_COMMIT},
    {"reset", CAE_PATCH_GIT_OPERATION, CAE_PATCH_GIT_RESET},
    {"checkout", CAE_PATCH_GIT_OPERATION, CAE_PATCH_GIT_CHECKOUT},
};

static const char *const json_action_lists[] = {
    [CAE_PATCH_FILE_EDIT] = "create, update, delete, append",
    [CAE_PATCH_SHELL_COMMAND] = "run",
    [CAE_PATCH_GIT_OPERATION] = "add, commit, reset, checkout",
};

static int parse_type(const char *s, cae_patch_type *t)
{
	if (strcmp(s, "file_edit") == 0)
		*t = CAE_PATCH_FILE_EDIT;
	else if (strcmp(s, "shell_command") == 0)
		*t = CAE_PATCH_SHELL_COMMAND;
	else if (strcmp(s, "git_operation") == 0)
		*t = CAE_PATCH_GIT_OPERATION;
	else
		return -EINVAL;
	return 0;
}

/* A string field: absent or null gives "", anything but a string is an error. */
static int get_string(const json_t *o, const char *key, size_t index, const char **s, size_t *n,
		      cae_error *err)
{
	const json_t *v = json_object_get(o, key);
	if (!v || json_is_null(v)) {
		*s = "";
		*n = 0;
		return 0;
	}
	if (!json_is_string(v))
		return cae_error_set(err, -EINVAL,
				     "patch command at index %zu: \"%s\" must be a string", index,
				     key);
	*s = json_string_value(v);
	*n = json_string_length(v);
	return 0;
}

static int copy_metadata(const json_t *m, size_t index, json_t **out, cae_error *err)
{
	*out = NULL;
	if (!m || json_is_null(m))
		return 0;
	if (!json_is_object(m))
		return cae_error_set(
		    err, -EINVAL,
		    "patch command at index %zu: \"metadata\" must be an object of "
		    "strings",
		    index);
	_cleanup_(json_decrefp) json_t *o = json_object();
	if (!o)
		return cae_error_set(err, -ENOMEM, "out of memory");
	const char *k;
	json_t *v;
	json_object_foreach((json_t *)m, k, v)
	{
		json_t *s = NULL;
		if (json_is_string(v)) {
			s = json_incref(v);
		} else if (json_is_number(v) || json_is_boolean(v)) {
			/* metadata is a map of strings: scalars are taken as their JSON text */
			char *t = json_dumps(v, JSON_ENCODE_ANY);
			if (!t)
				return cae_error_set(err, -ENOMEM, "out of memory");
			s = json_string(t);
			free(t);
		} else if (json_is_null(v)) {
			continue;
		} else {
			return cae_error_set(
			    err, -EINVAL,
			    "patch command at index %zu: metadata \"%s\" must be a "
			    "string",
			    index, k);
		}
		if (!s || json_object_set_new(o, k, s) < 0)
			return cae_error_set(err, -ENOMEM, "out of memory");
	}
	*out = TAKE_PTR(o);
	return 0;
}

static int set_git_args(cae_patch_command *c, size_t index, cae_error *err)
{
	int r = cae__patch_shell_split(c->target, strlen(c->target), &c->args, NULL, &c->nargs);
	if (r == -EINVAL)
		return cae_error_set(err, r,
				     "patch command at index %zu: unterminated quote in "
				     "target",
				     index);
	if (r < 0)
		return cae_error_set(err, r, "out of memory");
	return 0;
}

/* "target" and "content" of command o, as get_string takes them. */
static int get_target_content(const json_t *o, size_t index, const char **target, size_t *tlen,
			      const char **content, size_t *clen, cae_error *err)
{
	int r = get_string(o, "target", index, target, tlen, err);
	return r < 0 ? r : get_string(o, "content", index, content, clen, err);
}

/* A command of an unknown or missing type or action ("unknown command type" is that
 * command's error when it is executed, the worker's rule): kept, with its target and content as
 * given, so that it fails in its turn and, in continue mode, the others run. */
static int add_invalid(cae_patch *p, const json_t *o, size_t index, const char *why, cae_error *err)
{
	const char *target, *content;
	size_t tlen, clen;
	int r = get_target_content(o, index, &target, &tlen, &content, &clen, err);
	if (r < 0)
		return r;
	cae_patch_command *c;
	r = cae__patch_add_command(p, &c, err);
	if (r < 0)
		return r;
	c->type = CAE_PATCH_INVALID;
	c->action = CAE_PATCH_RUN;
	free(c->target);
	free(c->content);
	/* a NUL in a target that is never used cuts only what is shown */
	c->target = cae__memdup0(target, tlen);
	c->content = cae__memdup0(content, clen);
	c->content_len = clen;
	c->invalid = strdup(why);
	if (!c->target || !c->content || !c->invalid)
		return cae_error_set(err, -ENOMEM, "out of memory");
	return copy_metadata(json_object_get(o, "metadata"), index, &c->metadata, err);
}

static int parse_one(cae_patch *p, const json_t *o, size_t index, cae_error *err)
{
	static const char *const known[] = {"type", "action", "target", "content", "metadata"};
	if (!json_is_object(o))
		return cae_error_set(err, -EINVAL, "patch command at index %zu must be an object",
				     index);
	const char *k;
	json_t *v;
	json_object_foreach((json_t *)o, k, v)
	{
		bool ok = false;
		for (size_t i = 0; i < ARRAY_SIZE(known); i++)
			ok = ok || strcmp(k, known[i]) == 0;
		if (!ok)
			return cae_error_set(err, -EINVAL,
					     "patch command at index %zu: unknown field \"%s\" "
					     "(fields: type, action, target, content, metadata)",
					     index, k);
	}
	const json_t *jt = json_object_get(o, "type"), *ja = json_object_get(o, "action");
	char why[512];
	why[0] = '\0';
	cae_patch_type type = CAE_PATCH_INVALID;
	cae_patch_action action = CAE_PATCH_RUN;
	const char *an = json_is_string(ja) ? json_string_value(ja) : "";
	if (!json_is_string(jt)) {
		snprintf(why, sizeof(why),
			 "patch command at index %zu: \"type\" is missing or not a string "
			 "(file_edit, shell_command or git_operation)",
			 index);
	} else if (parse_type(json_string_value(jt), &type) < 0) {
		type = CAE_PATCH_INVALID;
		snprintf(why, sizeof(why),
			 "patch command at index %zu: unknown type \"%.200s\" (expected "
			 "file_edit, shell_command or git_operation)",
			 index, json_string_value(jt));
	} else if (!json_is_string(ja)) {
		snprintf(why, sizeof(why),
			 "patch command at index %zu: \"action\" is missing or not a string "
			 "(%s: %s)",
			 index, cae_patch_type_name(type), json_action_lists[type]);
		type = CAE_PATCH_INVALID;
	} else {
		bool found = false;
		for (size_t i = 0; i < ARRAY_SIZE(json_actions); i++)
			if (json_actions[i].type == type && strcmp(json_actions[i].name, an) == 0) {
				action = json_actions[i].action;
				found = true;
			}
		if (!found) {
			snprintf(why, sizeof(why),
				 "patch command at index %zu: unknown action \"%.200s\" for type "
				 "%s (expected %s)",
				 index, an, cae_patch_type_name(type), json_action_lists[type]);
			type = CAE_PATCH_INVALID;
		}
	}
	if (type == CAE_PATCH_INVALID)
		return add_invalid(p, o, index, why, err);

	const char *target, *content;
	size_t tlen, clen;
	int r = get_target_content(o, index, &target, &tlen, &content, &clen, err);
	if (r < 0)
		return r;
	if (memchr(target, '\0', tlen))
		return cae_error_set(err, -EINVAL,
				     "patch command at index %zu: \"target\" contains a NUL byte",
				     index);
	const char *t = target;
	size_t tn = tlen;
	cae__patch_trim(&t, &tn);
	bool need_target = type == CAE_PATCH_FILE_EDIT || action == CAE_PATCH_GIT_ADD ||
			   action == CAE_PATCH_GIT_CHECKOUT;
	if (need_target && tn == 0)
		return cae_error_set(err, -EINVAL,
				     "patch command at index %zu: %s %s needs a "
				     "non-empty \"target\"",
				     index, cae_patch_type_name(type), an);
	if (type == CAE_PATCH_SHELL_COMMAND && tn == 0) {
		const char *cc = content;
		size_t cn = clen;
		cae__patch_trim(&cc, &cn);
		if (cn == 0)
			return cae_error_set(
			    err, -EINVAL,
			    "patch command at index %zu: shell_command run needs a "
			    "command in \"target\"",
			    index);
	}

	cae_patch_command *c;
	r = cae__patch_add_command(p, &c, err);
	if (r < 0)
		return r;
	c->type = type;
	c->action = action;
	free(c->target);
	free(c->content);
	/* paths are taken trimmed: a model's stray space is never part of a file name */
	c->target = type == CAE_PATCH_FILE_EDIT ? cae__memdup0(t, tn) : cae__memdup0(target, tlen);
	c->content = cae__memdup0(content, clen);
	c->content_len = clen;
	if (!c->target || !c->content)
		return cae_error_set(err, -ENOMEM, "out of memory");
	r = copy_metadata(json_object_get(o, "metadata"), index, &c->metadata, err);
	if (r < 0)
		return r;
	if (type == CAE_PATCH_GIT_OPERATION)
		return set_git_args(c, index, err);
	return 0;
}

int cae__patch_parse_json_value(cae_patch *p, const json_t *arr, cae_error *err)
{
	if (!json_is_array(arr))
		return cae_error_set(err, -EINVAL,
				     "patch JSON must be an array of commands [{\"type\", "
				     "\"action\", \"target\", \"content\"}], got %s",
				     json_is_object(arr) ? "an object (wrap one command in [ ])"
							 : "another JSON value");
	if (json_array_size(arr) > CAE_PATCH_MAX_COMMANDS)
		return cae_error_set(err, -E2BIG,
				     "patch has %zu commands, more than the limit of %d",
				     json_array_size(arr), CAE_PATCH_MAX_COMMANDS);
	for (size_t i = 0; i < json_array_size(arr); i++) {
		int r = parse_one(p, json_array_get(arr, i), i, err);
		if (r < 0)
			return r;
	}
	return 0;
}

int cae__patch_parse_json_text(cae_patch *p, const char *text, size_t len, cae_error *err)
{
	json_error_t jerr;
	_cleanup_(json_decrefp) json_t *v =
	    json_loadb(text, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &jerr);
	if (!v)
		return cae_error_set(err, -EINVAL, "invalid JSON at line %d, column %d: %s",
				     jerr.line, jerr.column, jerr.text);
	return cae__patch_parse_json_value(p, v, err);
}
