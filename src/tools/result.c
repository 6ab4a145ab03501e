/* Tool results, made the same way for every tool: the one error shape, the text a model reads
 * beside the structured result, and host paths kept out of error messages. */
#include "tools/tools-internal.h"

#include "base/macro.h"
#include "base/utf8.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/banned.h"

void cae_tool_result_clear(cae_tool_result *res)
{
	if (!res)
		return;
	free(res->text);
	json_decref(res->structured);
	memset(res, 0, sizeof(*res));
}

json_t *cae__tool_error(const char *code, const char *fmt, ...)
{
	char msg[2048];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	_cleanup_free_ char *clean = cae__utf8_sanitize(msg, strlen(msg), NULL);
	return json_pack("{s:{s:s, s:s}}", "error", "code", code, "message", clean ? clean : "");
}

json_t *cae__tool_function(const char *name, const char *description, json_t *parameters)
{
	return json_pack("{s:s, s:s, s:o}", "name", name, "description", description, "parameters",
			 parameters);
}

int cae__tool_finish(cae_tool_result *res, json_t *structured, bool is_error, cae_error *err)
{
	if (!structured)
		return cae_error_set(err, -ENOMEM, "out of memory");
	res->is_error = is_error;
	res->structured = structured;
	json_t *e = json_object_get(structured, "error");
	const char *msg = json_string_value(json_object_get(e, "message"));
	const char *code = json_string_value(json_object_get(e, "code"));
	if (is_error && msg) {
		size_t n = strlen(msg) + (code ? strlen(code) : 0) + 4;
		res->text = malloc(n);
		if (res->text)
			snprintf(res->text, n, "%s: %s", code ? code : "ERROR", msg);
	} else {
		res->text = json_dumps(structured, JSON_COMPACT);
	}
	return res->text ? 0 : cae_error_set(err, -ENOMEM, "out of memory");
}

int cae__tool_finish_error(const cae_tool_env *env, cae_tool_result *res, const char *code,
			   cae_error *cause, cae_error *err)
{
	cae__tools_hide_host_paths(env->cfg, cause->message, sizeof(cause->message));
	/* a cause a user can act on (not found, invalid, unavailable, ...) says so */
	if (strcmp(code, "INTERNAL") == 0 && cause->code < 0)
		code = cae_error_kind(cause->code);
	return cae__tool_finish(res, cae__tool_error(code, "%s", cause->message), true, err);
}

static void replace_all(char *msg, size_t size, const char *what, const char *with)
{
	size_t wn = strlen(what), rn = strlen(with);
	if (wn < 2)
		return; /* "/" alone is no secret, and replacing it would mangle every path */
	for (char *at = strstr(msg, what); at; at = strstr(at + rn, what)) {
		size_t head = (size_t)(at - msg);
		if (head + rn >= size) {
			*at = '\0'; /* no room for the replacement: the message ends here */
			return;
		}
		size_t tail = strlen(at + wn);
		if (head + rn + tail + 1 > size)
			tail = size - 1 - head - rn;
		memmove(at + rn, at + wn, tail);
		at[rn + tail] = '\0';
		memcpy(at, with, rn);
	}
}

void cae__tools_hide_host_paths(const cae_config *cfg, char *msg, size_t size)
{
	const char *sd = cfg ? cfg->command_executor.state_dir : NULL;
	if (!cfg || size < 32)
		return;
	if (!sd)
		sd = "";
	char real[PATH_MAX];
	/* The longer spelling first, so that a prefix of it does not hide the rest. */
	const char *a = sd, *b = realpath(sd, real) ? real : NULL;
	if (b && strlen(b) > strlen(a)) {
		const char *t = a;
		a = b;
		b = t;
	}
	replace_all(msg, size, a, "<state directory>");
	if (b)
		replace_all(msg, size, b, "<state directory>");
	/* "cannot connect to the Docker engine at unix:///..." */
	const char *dh = cfg->command_executor.docker_host;
	if (dh && strncmp(dh, "unix://", 7) == 0)
		replace_all(msg, size, dh, "<docker socket>");
}
