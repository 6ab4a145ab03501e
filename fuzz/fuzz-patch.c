/* Fuzz target for the patch module: parse arbitrary bytes; render what parsed; apply every
 * hunked file operation to a small fixed text (LF, CRLF, blank, indented lines and no final
 * newline), to an empty text and to the input itself; check the whole patch against a fake
 * file system. Nothing may crash, leak or run away. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cae/patch.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char fixed_text[] =
    "line 1\nline 2\r\n\n  indented\t\n-x\n+y\n @@\nlast without newline";

static int fuzz_read(void *userdata, const char *path, char **out, size_t *len, cae_error *err)
{
	(void)userdata;
	(void)err;
	if (path[0] == 'm') /* "missing..." paths do not exist */
		return -ENOENT;
	if (out) {
		*out = strdup(fixed_text);
		if (!*out)
			return -ENOMEM;
		*len = sizeof(fixed_text) - 1;
	}
	return 0;
}

static void try_apply(const cae_patch_file_op *op, const char *old, size_t old_len)
{
	char *out = NULL;
	size_t n = 0;
	cae_error err = {0};
	if (cae_patch_apply_hunks(old, old_len, op, &out, &n, &err) == 0) {
		if (!out || out[n] != '\0')
			abort();
		free(out);
	} else if (out) {
		abort(); /* a failed apply produces nothing */
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size > ((size_t)1 << 20))
		return 0;
	const char *text = (const char *)data;
	cae_patch *p = NULL;
	cae_error err = {0};
	if (cae_patch_parse(text, size, &p, &err) < 0) {
		if (p || err.message[0] == '\0')
			abort(); /* an error always says why, and leaves nothing behind */
		return 0;
	}
	json_t *j = cae_patch_to_json(p);
	char *s = j ? json_dumps(j, 0) : NULL;
	free(s);
	json_decref(j);
	free(cae_patch_plan_text(p));
	for (size_t i = 0; i < cae_patch_count(p); i++) {
		const cae_patch_command *c = cae_patch_get(p, i);
		if (!c->target || !c->content)
			abort();
		json_t *cj = cae_patch_command_to_json(c, 16);
		json_decref(cj);
		if (!c->op)
			continue;
		try_apply(c->op, fixed_text, sizeof(fixed_text) - 1);
		try_apply(c->op, "", 0);
		try_apply(c->op, text, size);
	}
	cae_patch_fs fs = {.read = fuzz_read};
	cae_patch_plan *plan = NULL;
	if (cae_patch_check(p, &fs, &plan, &err) == 0) {
		if (cae_patch_plan_count(plan) != cae_patch_count(p))
			abort();
		cae_patch_plan_free(plan);
	} else if (plan) {
		abort();
	}
	cae_patch_free(p);
	return 0;
}
