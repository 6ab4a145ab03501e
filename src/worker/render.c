/* cae_worker_render(): a result as a person reads it (the summary, one ✓/✗ line per
 * command with its error indented, the commit, rollback and patch errors, a dry run's plan). */
#include "cae/worker.h"

#include "base/buf.h"
#include "base/utf8.h"

#include <string.h>

#include "base/banned.h"

/* The rendering is whole or nothing (NULL): every append's result is kept with r |= (a
 * failed one leaves r negative), and checked at the end. */

/* The target on one line: its first line, "…" when there is more or it is long. */
static int put_target(cae_buf *b, const char *t)
{
	const char *nl = strchr(t, '\n');
	size_t n = nl ? (size_t)(nl - t) : strlen(t);
	size_t cut = cae__utf8_prefix_chars(t, n, 200, NULL);
	int r = cae__buf_append(b, t, cut);
	if (cut < n || nl)
		r |= cae__buf_puts(b, " …");
	return r;
}

/* Appends text with every line after the first indented by indent. */
static int put_indented(cae_buf *b, const char *text, const char *indent)
{
	int r = 0;
	for (const char *s = text; *s;) {
		const char *nl = strchr(s, '\n');
		size_t n = nl ? (size_t)(nl - s) : strlen(s);
		if (s != text)
			r |= cae__buf_puts(b, indent);
		r |= cae__buf_append(b, s, n);
		if (!nl)
			break;
		r |= cae__buf_puts(b, "\n");
		s = nl + 1;
	}
	return r;
}

char *cae_worker_render(const json_t *result)
{
	cae_buf b;
	cae__buf_init(&b, (size_t)64 << 20);
	int ret = 0;
	const char *summary = json_string_value(json_object_get(result, "summary"));
	ret |= cae__buf_puts(&b, summary ? summary : "");
	ret |= cae__buf_puts(&b, "\n");
	if (json_is_true(json_object_get(result, "dry_run"))) {
		const char *plan = json_string_value(json_object_get(result, "plan"));
		if (plan && *plan) {
			ret |= cae__buf_puts(&b, "\n");
			ret |= cae__buf_puts(&b, plan);
		}
	}
	json_t *results = json_object_get(result, "results");
	if (json_array_size(results))
		ret |= cae__buf_puts(&b, "\n");
	size_t i;
	json_t *r;
	json_array_foreach(results, i, r)
	{
		json_t *cmd = json_object_get(r, "command");
		const char *type = json_string_value(json_object_get(cmd, "type"));
		const char *action = json_string_value(json_object_get(cmd, "action"));
		const char *target = json_string_value(json_object_get(cmd, "target"));
		bool ok = json_is_true(json_object_get(r, "success"));
		ret |= cae__buf_printf(&b, "%s [%zu] %s %s ", ok ? "✓" : "✗", i + 1,
				       type ? type : "", action ? action : "");
		ret |= put_target(&b, target ? target : "");
		ret |= cae__buf_printf(
		    &b, " (%lldms)", (long long)json_integer_value(json_object_get(r, "duration")));
		const char *e = json_string_value(json_object_get(r, "error"));
		if (e && *e) {
			ret |= cae__buf_puts(&b, "\n    error: ");
			ret |= put_indented(&b, e, "    ");
		}
		ret |= cae__buf_puts(&b, "\n");
	}
	const char *hash = json_string_value(json_object_get(result, "git_commit"));
	const char *ac = json_string_value(json_object_get(result, "auto_commit"));
	const char *ace = json_string_value(json_object_get(result, "auto_commit_error"));
	bool tail = hash || (ac && strcmp(ac, "committed") != 0) ||
		    json_object_get(result, "rolled_back") || json_object_get(result, "error");
	if (tail)
		ret |= cae__buf_puts(&b, "\n");
	if (hash)
		ret |= cae__buf_printf(&b, "git commit: %s\n", hash);
	else if (ac && strcmp(ac, "nothing_to_commit") == 0)
		ret |= cae__buf_puts(&b, "git commit: nothing to commit\n");
	else if (ac && strcmp(ac, "failed") == 0)
		ret |= cae__buf_printf(&b, "git commit failed: %s\n", ace ? ace : "");
	json_t *rb = json_object_get(result, "rolled_back");
	if (json_is_true(rb))
		ret |=
		    cae__buf_puts(&b, "rolled back: the workspace was restored to its state before "
				      "the patch\n");
	else if (rb) {
		const char *re = json_string_value(json_object_get(result, "rollback_error"));
		ret |= cae__buf_printf(&b, "rollback failed: %s\n", re ? re : "");
	}
	const char *err = json_string_value(json_object_get(result, "error"));
	if (err) {
		ret |= cae__buf_puts(&b, "error: ");
		ret |= put_indented(&b, err, "    ");
		ret |= cae__buf_puts(&b, "\n");
	}
	if (ret < 0) {
		cae__buf_clear(&b);
		return NULL;
	}
	return cae__buf_steal(&b, NULL);
}
