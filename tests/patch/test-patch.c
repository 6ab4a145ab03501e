/* Tests of the patch module: golden parse/apply cases under tests/data/patch/<case>/ and the
 * patch worker's required cases that belong to parsing and pure application (parse JSON and
 * Markdown, good and bad, and an empty patch; each file_edit action; a patch of several
 * commands).
 *
 * Golden case layout: input (the patch text), expected.json (cae_patch_to_json() of the
 * parse, or {"error": "<message>"}), and for command i with hunks optionally old.<i> (the
 * file before) with new.<i> (after) or error.<i> (the apply error message).
 */
#include "cae/patch.h"
#include "base/buf.h"
#include "testutil.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>

static char **cases;
static size_t ncases;

static const char *data_dir(void)
{
	const char *d = getenv("CAE_PATCH_DATA");
	return d ? d : "tests/data/patch";
}

static char *read_case_file(const char *dir, const char *name, size_t *len)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/%s/%s", data_dir(), dir, name);
	char *data = NULL;
	int r = cae__read_file(AT_FDCWD, path, (size_t)64 << 20, &data, len);
	if (r < 0)
		return NULL;
	return data;
}

static char *dump(const json_t *j)
{
	return json_dumps(j, JSON_INDENT(2) | JSON_SORT_KEYS);
}

static cae_patch *parse_ok(const char *text)
{
	cae_patch *p = NULL;
	cae_error err = {0};
	int r = cae_patch_parse(text, strlen(text), &p, &err);
	ck_assert_msg(r == 0, "parse failed: %s", err.message);
	return p;
}

static int parse_err(const char *text, cae_error *err)
{
	cae_patch *p = (cae_patch *)1;
	int r = cae_patch_parse(text, strlen(text), &p, err);
	ck_assert_int_lt(r, 0);
	ck_assert_ptr_null(p);
	return r;
}

/* ---- golden cases ---- */

START_TEST(golden)
{
	const char *name = cases[_i];
	size_t in_len, exp_len;
	char *input = read_case_file(name, "input", &in_len);
	char *exp_text = read_case_file(name, "expected.json", &exp_len);
	ck_assert_msg(input && exp_text, "%s: input or expected.json missing", name);
	json_error_t jerr;
	json_t *expected = json_loadb(exp_text, exp_len, 0, &jerr);
	ck_assert_msg(expected, "%s: expected.json: %s", name, jerr.text);

	cae_patch *p = NULL;
	cae_error err = {0};
	int r = cae_patch_parse(input, in_len, &p, &err);
	const char *want_err = json_string_value(json_object_get(expected, "error"));
	if (want_err) {
		ck_assert_msg(r < 0, "%s: parse should fail with: %s", name, want_err);
		ck_assert_msg(strcmp(err.message, want_err) == 0, "%s: error\n got: %s\nwant: %s",
			      name, err.message, want_err);
		ck_assert_ptr_null(p);
	} else {
		ck_assert_msg(r == 0, "%s: parse failed: %s", name, err.message);
		json_t *got = cae_patch_to_json(p);
		ck_assert_ptr_nonnull(got);
		if (!json_equal(got, expected)) {
			char *g = dump(got), *w = dump(expected);
			ck_abort_msg("%s: parse result differs\n--- got\n%s\n--- want\n%s", name, g,
				     w);
		}
		json_decref(got);
		/* the plan has one line per command and per warning */
		char *plan = cae_patch_plan_text(p);
		size_t lines = 0;
		for (const char *c = plan; *c; c++)
			lines += *c == '\n';
		ck_assert_uint_eq(lines, cae_patch_count(p) + cae_patch_warning_count(p));
		free(plan);

		for (size_t i = 0; i < cae_patch_count(p); i++) {
			char fn[32];
			snprintf(fn, sizeof(fn), "old.%zu", i);
			size_t old_len;
			char *old = read_case_file(name, fn, &old_len);
			if (!old)
				continue;
			const cae_patch_command *c = cae_patch_get(p, i);
			ck_assert_msg(c->op, "%s: command %zu has no hunks but %s exists", name, i,
				      fn);
			char *out = NULL;
			size_t out_len = 0;
			cae_error aerr = {0};
			int ar = cae_patch_apply_hunks(old, old_len, c->op, &out, &out_len, &aerr);
			snprintf(fn, sizeof(fn), "new.%zu", i);
			size_t want_len;
			char *want = read_case_file(name, fn, &want_len);
			snprintf(fn, sizeof(fn), "error.%zu", i);
			size_t werr_len;
			char *werr = read_case_file(name, fn, &werr_len);
			ck_assert_msg(want || werr, "%s: old.%zu without new.%zu or error.%zu",
				      name, i, i, i);
			if (want) {
				ck_assert_msg(ar == 0, "%s: apply %zu failed: %s", name, i,
					      aerr.message);
				ck_assert_msg(
				    out_len == want_len && memcmp(out, want, want_len) == 0,
				    "%s: apply %zu gives\n[%s]\nwant\n[%s]", name, i, out, want);
			} else {
				ck_assert_msg(ar < 0, "%s: apply %zu should fail", name, i);
				ck_assert_ptr_null(out);
				ck_assert_msg(strcmp(aerr.message, werr) == 0,
					      "%s: apply error\n got: %s\nwant: %s", name,
					      aerr.message, werr);
			}
			free(out);
			free(want);
			free(werr);
			free(old);
		}
	}
	cae_patch_free(p);
	json_decref(expected);
	free(input);
	free(exp_text);
}
END_TEST

/* ---- parsing: JSON (ok, bad), Markdown (ok, bad), empty ---- */

START_TEST(seed_parse_json_ok)
{
	cae_patch *p =
	    parse_ok("[{\"type\":\"file_edit\",\"action\":\"update\",\"target\":\"pkg/a.go\","
		     "\"content\":\"package a\\n\"},"
		     "{\"type\":\"shell_command\",\"action\":\"run\",\"target\":\"go test "
		     "./...\",\"content\":\"\"}]");
	ck_assert_int_eq(cae_patch_get_format(p), CAE_PATCH_FORMAT_JSON);
	ck_assert_uint_eq(cae_patch_count(p), 2);
	const cae_patch_command *c = cae_patch_get(p, 0);
	ck_assert_int_eq(c->type, CAE_PATCH_FILE_EDIT);
	ck_assert_int_eq(c->action, CAE_PATCH_UPDATE);
	ck_assert_str_eq(c->target, "pkg/a.go");
	ck_assert_str_eq(c->content, "package a\n");
	ck_assert_ptr_null(c->op);
	c = cae_patch_get(p, 1);
	ck_assert_int_eq(c->type, CAE_PATCH_SHELL_COMMAND);
	ck_assert_int_eq(c->action, CAE_PATCH_RUN);
	ck_assert_str_eq(c->target, "go test ./...");
	ck_assert_ptr_null(cae_patch_get(p, 2));
	ck_assert(!cae_patch_is_atomic(p));
	cae_patch_free(p);
}
END_TEST

START_TEST(seed_parse_json_bad)
{
	cae_error err = {0};
	/* malformed JSON: the position is named */
	ck_assert_int_eq(
	    parse_err("[\n  {\"type\": \"file_edit\",\n   \"action\" \"update\"}\n]", &err),
	    -EINVAL);
	ck_assert_msg(strstr(err.message, "invalid JSON at line 3, column 20"), "%s", err.message);
	ck_assert_str_eq(cae_error_kind(err.code), "INVALID_ARGUMENT");
	/* truncated JSON: the end is named */
	parse_err("[{\"type\": \"shell_command\", \"action\": \"run\", \"target\": \"ls", &err);
	ck_assert_msg(strstr(err.message, "invalid JSON at line 1"), "%s", err.message);
	/* an unknown or missing type or action is not a parse error: that command
	 * is kept as invalid, with its message naming the index, and fails in its turn */
	const struct {
		const char *json, *want;
	} invalid[] = {
	    {"[{\"type\":\"shell_command\",\"action\":\"run\",\"target\":\"ls\"},"
	     "{\"type\":\"shell_command\",\"action\":\"exec\",\"target\":\"ls\"}]",
	     "patch command at index 1: unknown action \"exec\" for type shell_command (expected "
	     "run)"},
	    {"[{\"action\":\"run\",\"target\":\"ls\"}]",
	     "patch command at index 0: \"type\" is missing or not a string (file_edit, "
	     "shell_command or git_operation)"},
	    {"[{\"type\":\"git_operation\",\"target\":\"x\"}]",
	     "patch command at index 0: \"action\" is missing or not a string (git_operation: "
	     "add, commit, reset, checkout)"},
	};
	for (size_t i = 0; i < sizeof(invalid) / sizeof(invalid[0]); i++) {
		cae_patch *p = parse_ok(invalid[i].json);
		const cae_patch_command *c = cae_patch_get(p, cae_patch_count(p) - 1);
		ck_assert_int_eq(c->type, CAE_PATCH_INVALID);
		ck_assert_str_eq(c->invalid, invalid[i].want);
		cae_patch_free(p);
	}
	parse_err("[{\"type\":\"file_edit\",\"action\":\"update\",\"target\":\"a\","
		  "\"metadata\":{\"k\":[1]}}]",
		  &err);
	ck_assert_msg(strstr(err.message, "metadata \"k\" must be a string"), "%s", err.message);
	parse_err("[{\"type\":\"file_edit\",\"action\":\"update\",\"target\":\"a\\u0000b\"}]",
		  &err);
	ck_assert_msg(strstr(err.message, "NUL byte"), "%s", err.message);
}
END_TEST

START_TEST(seed_parse_markdown_ok)
{
	cae_patch *p =
	    parse_ok("## edit\n\n```go:pkg/agent/loop.go\npackage agent\n```\n\n"
		     "```bash\ngo test ./pkg/agent/...\n```\n\n```sh\nls\n```\n\n"
		     "```git\ngit add pkg/agent/loop.go\ngit commit -m \"msg here\"\n```\n");
	ck_assert_int_eq(cae_patch_get_format(p), CAE_PATCH_FORMAT_MARKDOWN);
	ck_assert_uint_eq(cae_patch_count(p), 5);
	const cae_patch_command *c = cae_patch_get(p, 0);
	ck_assert_int_eq(c->type, CAE_PATCH_FILE_EDIT);
	ck_assert_int_eq(c->action, CAE_PATCH_UPDATE);
	ck_assert_str_eq(c->target, "pkg/agent/loop.go");
	ck_assert_str_eq(c->content, "package agent\n");
	ck_assert_str_eq(cae_patch_command_meta(c, "lang"), "go");
	ck_assert_ptr_null(cae_patch_command_meta(c, "nope"));
	c = cae_patch_get(p, 1);
	ck_assert_int_eq(c->type, CAE_PATCH_SHELL_COMMAND);
	ck_assert_str_eq(c->target, "go test ./pkg/agent/...");
	ck_assert_int_eq(cae_patch_get(p, 2)->type, CAE_PATCH_SHELL_COMMAND);
	c = cae_patch_get(p, 3);
	ck_assert_int_eq(c->action, CAE_PATCH_GIT_ADD);
	ck_assert_uint_eq(c->nargs, 1);
	ck_assert_str_eq(c->args[0], "pkg/agent/loop.go");
	c = cae_patch_get(p, 4);
	ck_assert_int_eq(c->action, CAE_PATCH_GIT_COMMIT);
	ck_assert_str_eq(c->content, "msg here");
	ck_assert_uint_eq(c->nargs, 0);
	ck_assert_uint_eq(cae_patch_warning_count(p), 0);
	cae_patch_free(p);
}
END_TEST

START_TEST(seed_parse_markdown_bad)
{
	/* unknown block: a warning, skipped, the rest kept */
	cae_patch *p = parse_ok("```python\nprint(1)\n```\n```bash\nmake\n```\n");
	ck_assert_uint_eq(cae_patch_count(p), 1);
	ck_assert_uint_eq(cae_patch_warning_count(p), 1);
	ck_assert_msg(strstr(cae_patch_warning(p, 0), "line 1: skipped a ```python block"), "%s",
		      cae_patch_warning(p, 0));
	ck_assert_ptr_null(cae_patch_warning(p, 1));
	cae_patch_free(p);
	/* only unknown blocks: zero commands, not an error */
	p = parse_ok("```text\nhello\n```\n");
	ck_assert_uint_eq(cae_patch_count(p), 0);
	ck_assert_uint_eq(cae_patch_warning_count(p), 1);
	cae_patch_free(p);
	/* a block cut short is an error: writing half a file is worse than nothing */
	cae_error err = {0};
	parse_err("text\n```go:a.go\npackage a\n", &err);
	ck_assert_str_eq(
	    err.message,
	    "line 2: code block ```go:a.go is never closed (the patch may be cut short)");
}
END_TEST

START_TEST(seed_parse_empty)
{
	const char *empties[] = {"", " ", "\n\n", " \t\r\n "};
	for (size_t i = 0; i < sizeof(empties) / sizeof(*empties); i++) {
		cae_patch *p = parse_ok(empties[i]);
		ck_assert_int_eq(cae_patch_get_format(p), CAE_PATCH_FORMAT_EMPTY);
		ck_assert_uint_eq(cae_patch_count(p), 0);
		char *plan = cae_patch_plan_text(p);
		ck_assert_str_eq(plan, "");
		free(plan);
		cae_patch_free(p);
	}
	cae_patch *p = NULL;
	ck_assert_int_eq(cae_patch_parse(NULL, 0, &p, NULL), 0);
	ck_assert_uint_eq(cae_patch_count(p), 0);
	cae_patch_free(p);
	cae_patch_free(NULL);
	/* neither JSON nor Markdown nor a diff: an error */
	cae_error err = {0};
	parse_err("please fix the bug\n", &err);
	ck_assert_msg(strstr(err.message, "unrecognized patch format"), "%s", err.message);
}
END_TEST

START_TEST(from_json_value)
{
	json_t *a = json_pack("[{ss ss ss ss}]", "type", "git_operation", "action", "commit",
			      "target", "--allow-empty", "content", "msg");
	cae_patch *p = NULL;
	cae_error err = {0};
	ck_assert_int_eq(cae_patch_from_json(a, &p, &err), 0);
	ck_assert_uint_eq(cae_patch_count(p), 1);
	const cae_patch_command *c = cae_patch_get(p, 0);
	ck_assert_str_eq(c->content, "msg");
	ck_assert_uint_eq(c->nargs, 1);
	ck_assert_str_eq(c->args[0], "--allow-empty");
	cae_patch_free(p);
	json_decref(a);
	json_t *o = json_object();
	ck_assert_int_eq(cae_patch_from_json(o, &p, &err), -EINVAL);
	ck_assert_ptr_null(p);
	ck_assert_msg(strstr(err.message, "must be an array"), "%s", err.message);
	json_decref(o);
}
END_TEST

START_TEST(json_nul_in_content)
{
	cae_patch *p =
	    parse_ok("[{\"type\":\"file_edit\",\"action\":\"create\",\"target\":\"b.bin\","
		     "\"content\":\"a\\u0000b\"}]");
	const cae_patch_command *c = cae_patch_get(p, 0);
	ck_assert_uint_eq(c->content_len, 3);
	ck_assert(memcmp(c->content, "a\0b", 3) == 0);
	cae_patch_free(p);
}
END_TEST

/* ---- Markdown details ---- */

START_TEST(markdown_git_add_vs_commit)
{
	cae_patch *p =
	    parse_ok("```git\ngit add a.go \"b c.go\"\ngit commit -m \"fix: x\"\n"
		     "git commit --message=\"second\"\ngit commit -m\"third\" --no-verify\n```\n");
	ck_assert_uint_eq(cae_patch_count(p), 4);
	const cae_patch_command *c = cae_patch_get(p, 0);
	ck_assert_int_eq(c->action, CAE_PATCH_GIT_ADD);
	ck_assert_uint_eq(c->nargs, 2);
	ck_assert_str_eq(c->args[1], "b c.go");
	ck_assert_str_eq(cae_patch_get(p, 1)->content, "fix: x");
	ck_assert_str_eq(cae_patch_get(p, 2)->content, "second");
	c = cae_patch_get(p, 3);
	ck_assert_str_eq(c->content, "third");
	ck_assert_uint_eq(c->nargs, 1);
	ck_assert_str_eq(c->args[0], "--no-verify");
	cae_patch_free(p);
}
END_TEST

START_TEST(markdown_fences_longer_and_tilde)
{
	/* content holding ``` needs a longer fence or ~~~ */
	cae_patch *p = parse_ok("`````md:a.md\n````\n```\n````\n`````\n~~~txt:b.txt\n```\n~~~\n");
	ck_assert_uint_eq(cae_patch_count(p), 2);
	ck_assert_str_eq(cae_patch_get(p, 0)->content, "````\n```\n````\n");
	ck_assert_str_eq(cae_patch_get(p, 1)->content, "```\n");
	cae_patch_free(p);
	/* a closing fence may not carry an info string; an indented one closes an indented block */
	p = parse_ok("  ```sh\n  echo x\n  ```\n");
	ck_assert_uint_eq(cae_patch_count(p), 1);
	ck_assert_str_eq(cae_patch_get(p, 0)->target, "  echo x");
	cae_patch_free(p);
}
END_TEST

/* ---- bounds ---- */

START_TEST(thousand_commands)
{
	cae_buf b;
	cae__buf_init(&b, (size_t)64 << 20);
	ck_assert_int_eq(cae__buf_puts(&b, "["), 0);
	for (int i = 0; i < 1000; i++)
		ck_assert_int_eq(
		    cae__buf_printf(
			&b,
			"%s{\"type\":\"file_edit\",\"action\":\"create\",\"target\":\"f%d.txt\","
			"\"content\":\"%d\\n\"}",
			i ? "," : "", i, i),
		    0);
	ck_assert_int_eq(cae__buf_puts(&b, "]"), 0);
	cae_patch *p = NULL;
	cae_error err = {0};
	ck_assert_int_eq(cae_patch_parse(b.data, b.len, &p, &err), 0);
	ck_assert_uint_eq(cae_patch_count(p), 1000);
	ck_assert_str_eq(cae_patch_get(p, 999)->target, "f999.txt");
	cae_patch_plan *plan = NULL;
	ck_assert_int_eq(cae_patch_check(p, NULL, &plan, &err), 0);
	ck_assert_uint_eq(cae_patch_plan_count(plan), 1000);
	cae_patch_plan_free(plan);
	cae_patch_free(p);
	cae__buf_clear(&b);

	/* the same as Markdown and as apply_patch */
	cae__buf_init(&b, (size_t)64 << 20);
	for (int i = 0; i < 1000; i++)
		ck_assert_int_eq(cae__buf_printf(&b, "```txt:d/f%d.txt\nline %d\n```\n", i, i), 0);
	ck_assert_int_eq(cae_patch_parse(b.data, b.len, &p, &err), 0);
	ck_assert_uint_eq(cae_patch_count(p), 1000);
	cae_patch_free(p);
	cae__buf_clear(&b);
	cae__buf_init(&b, (size_t)64 << 20);
	ck_assert_int_eq(cae__buf_puts(&b, "*** Begin Patch\n"), 0);
	for (int i = 0; i < 1000; i++)
		ck_assert_int_eq(cae__buf_printf(&b, "*** Add File: f%d\n+%d\n", i, i), 0);
	ck_assert_int_eq(cae__buf_puts(&b, "*** End Patch\n"), 0);
	ck_assert_int_eq(cae_patch_parse(b.data, b.len, &p, &err), 0);
	ck_assert_uint_eq(cae_patch_count(p), 1000);
	ck_assert_str_eq(cae_patch_get(p, 500)->content, "500\n");
	cae_patch_free(p);
	cae__buf_clear(&b);
}
END_TEST

START_TEST(too_many_commands)
{
	cae_buf b;
	cae__buf_init(&b, (size_t)64 << 20);
	for (int i = 0; i <= CAE_PATCH_MAX_COMMANDS; i++)
		ck_assert_int_eq(cae__buf_puts(&b, "```sh\nx\n```\n"), 0);
	cae_patch *p = NULL;
	cae_error err = {0};
	ck_assert_int_eq(cae_patch_parse(b.data, b.len, &p, &err), -E2BIG);
	ck_assert_msg(strstr(err.message, "more than 10000 commands"), "%s", err.message);
	cae__buf_clear(&b);
}
END_TEST

START_TEST(fifty_megabytes)
{
	size_t n = (size_t)50 << 20;
	cae_buf b;
	cae__buf_init(&b, n * 2);
	ck_assert_int_eq(cae__buf_puts(&b, "[{\"type\":\"file_edit\",\"action\":\"create\","
					   "\"target\":\"big.txt\",\"content\":\""),
			 0);
	/* lines of 63 'x' and an escaped newline: 50 MiB of content */
	char chunk[66];
	memset(chunk, 'x', 63);
	memcpy(chunk + 63, "\\n", 2);
	for (size_t i = 0; i < n / 64; i++)
		ck_assert_int_eq(cae__buf_append(&b, chunk, 65), 0);
	ck_assert_int_eq(cae__buf_puts(&b, "\"}]"), 0);
	ck_assert(!b.truncated);
	cae_patch *p = NULL;
	cae_error err = {0};
	ck_assert_int_eq(cae_patch_parse(b.data, b.len, &p, &err), 0);
	const cae_patch_command *c = cae_patch_get(p, 0);
	ck_assert_uint_eq(c->content_len, n);
	json_t *j = cae_patch_command_to_json(c, 1000);
	ck_assert(json_is_true(json_object_get(j, "content_truncated")));
	ck_assert_uint_eq(json_string_length(json_object_get(j, "content")), 1000);
	ck_assert_int_eq(json_integer_value(json_object_get(j, "content_bytes")), (json_int_t)n);
	json_decref(j);
	char *plan = cae_patch_plan_text(p);
	ck_assert_str_eq(plan, "[1] file_edit create big.txt (52428800 bytes)\n");
	free(plan);
	cae_patch_free(p);
	cae__buf_clear(&b);

	/* the same content in a Markdown block */
	cae__buf_init(&b, n + 1024);
	ck_assert_int_eq(cae__buf_puts(&b, "```txt:big.txt\n"), 0);
	for (size_t i = 0; i < n / 64; i++)
		ck_assert_int_eq(
		    cae__buf_puts(
			&b, "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\n"),
		    0);
	ck_assert_int_eq(cae__buf_puts(&b, "```\n"), 0);
	ck_assert_int_eq(cae_patch_parse(b.data, b.len, &p, &err), 0);
	ck_assert_uint_eq(cae_patch_get(p, 0)->content_len, n);
	cae_patch_free(p);
	cae__buf_clear(&b);
}
END_TEST

START_TEST(hostile_sizes)
{
	cae_patch *p = NULL;
	cae_error err = {0};
	/* the length is refused before the text is read */
	ck_assert_int_eq(cae_patch_parse("x", CAE_PATCH_MAX_INPUT + 1, &p, &err), -E2BIG);
	ck_assert_msg(strstr(err.message, "more than the limit"), "%s", err.message);
	/* one line longer than the line limit in a line-based form */
	size_t n = CAE_PATCH_MAX_LINE + 64;
	char *t = malloc(n + 1);
	memcpy(t, "```txt:a\n", 9);
	memset(t + 9, 'a', n - 9);
	t[n] = '\0';
	ck_assert_int_eq(cae_patch_parse(t, n, &p, &err), -E2BIG);
	ck_assert_msg(strstr(err.message, "line 2 is longer than the limit"), "%s", err.message);
	free(t);
	/* deep JSON nesting is refused by the JSON parser, not the stack */
	cae_buf b;
	cae__buf_init(&b, 1 << 20);
	for (int i = 0; i < 100000; i++)
		ck_assert_int_eq(cae__buf_puts(&b, "["), 0);
	ck_assert_int_lt(cae_patch_parse(b.data, b.len, &p, &err), 0);
	cae__buf_clear(&b);
}
END_TEST

/* ---- applying ---- */

static cae_patch_file_op *first_op(cae_patch *p);

START_TEST(hostile_shapes)
{
	/* file blocks whose inner fences never balance: every block falls back to the plain
	 * closing rule, and the nesting scan's budget keeps the parse linear */
	cae_buf b;
	cae__buf_init(&b, (size_t)64 << 20);
	for (int i = 0; i < 9999; i++)
		ck_assert_int_eq(cae__buf_puts(&b, "```a:b\n```x\n```\n"), 0);
	cae_patch *p = NULL;
	cae_error err = {0};
	ck_assert_int_eq(cae_patch_parse(b.data, b.len, &p, &err), 0);
	ck_assert_uint_eq(cae_patch_count(p), 9999);
	ck_assert_str_eq(cae_patch_get(p, 9998)->content, "```x\n");
	cae_patch_free(p);
	cae__buf_clear(&b);
	/* a ```git block with a quote that never closes: joined a bounded number of lines */
	ck_assert_int_eq(cae__buf_puts(&b, "```git\ngit commit -m \"x\n"), 0);
	for (int i = 0; i < 5000; i++)
		ck_assert_int_eq(cae__buf_puts(&b, "git add y\n"), 0);
	ck_assert_int_eq(cae__buf_puts(&b, "```\n"), 0);
	ck_assert_int_eq(cae_patch_parse(b.data, b.len, &p, &err), 0);
	ck_assert_uint_eq(cae_patch_count(p), 5000 - 200);
	ck_assert_str_eq(cae_patch_warning(p, 0),
			 "line 2: skipped a git command with an unterminated quote");
	cae_patch_free(p);
	cae__buf_clear(&b);
	/* a hunk header with absurd numbers */
	p = parse_ok("--- a/f\n+++ b/f\n@@ -99999999999999999999,1 +1 @@\n-a\n+b\n");
	ck_assert(!cae_patch_get(p, 0)->op->hunks[0].has_range);
	cae_patch_free(p);
	p = parse_ok("--- a/f\n+++ b/f\n@@ -18446744073709551615,2 +1 @@\n-a\n+b\n");
	char *out;
	size_t n;
	ck_assert_int_eq(cae_patch_apply_hunks("a\n", 2, first_op(p), &out, &n, &err), 0);
	ck_assert_str_eq(out, "b\n");
	free(out);
	cae_patch_free(p);
}
END_TEST

static cae_patch_file_op *first_op(cae_patch *p)
{
	for (size_t i = 0; i < cae_patch_count(p); i++)
		if (cae_patch_get(p, i)->op)
			return cae_patch_get(p, i)->op;
	ck_abort_msg("no file op");
	return NULL;
}

START_TEST(apply_failure_produces_nothing)
{
	cae_patch *p = parse_ok("*** Begin Patch\n*** Update File: a\n@@\n-x\n+y\n@@\n-nope\n+z\n"
				"*** End Patch\n");
	char *out = (char *)1;
	size_t n = 7;
	cae_error err = {0};
	ck_assert_int_eq(cae_patch_apply_hunks("x\n", 2, first_op(p), &out, &n, &err), -EINVAL);
	ck_assert_ptr_null(out);
	ck_assert_uint_eq(n, 0);
	ck_assert_str_eq(
	    err.message,
	    "hunk 2 of a did not apply: context not found after line 1 (expected \"nope\")");
	cae_patch_free(p);
}
END_TEST

/* A hunk that does not apply names the line that differs where it came closest, not its
 * first line (which matched). */
START_TEST(apply_failure_names_the_differing_line)
{
	const char *old = "one\ntwo\nthree\nfour\nfive\n";
	cae_patch *p = parse_ok("*** Begin Patch\n*** Update File: a\n@@\n one\n-TWO\n+2\n three\n"
				"*** End Patch\n");
	char *out = NULL;
	size_t n = 0;
	cae_error err = {0};
	ck_assert_int_eq(cae_patch_apply_hunks(old, strlen(old), first_op(p), &out, &n, &err),
			 -EINVAL);
	ck_assert_str_eq(
	    err.message,
	    "hunk 1 of a did not apply: context not found in the file; closest at "
	    "line 1, where line 2 of the file is \"two\" and the hunk expects \"TWO\"");
	cae_patch_free(p);
	p = parse_ok("--- a/a\n+++ b/a\n@@ -3,3 +3,3 @@\n three\n four\n-FIVE\n+5\n");
	ck_assert_int_eq(cae_patch_apply_hunks(old, strlen(old), first_op(p), &out, &n, &err),
			 -EINVAL);
	ck_assert_str_eq(
	    err.message,
	    "hunk 1 of a did not apply: context not found near line 3; closest at "
	    "line 3, where line 5 of the file is \"five\" and the hunk expects \"FIVE\"");
	cae_patch_free(p);
	/* past the end of the file */
	p = parse_ok("--- a/a\n+++ b/a\n@@ -4,3 +4,3 @@\n four\n five\n-six\n+6\n");
	ck_assert_int_eq(cae_patch_apply_hunks(old, strlen(old), first_op(p), &out, &n, &err),
			 -EINVAL);
	ck_assert_str_eq(err.message,
			 "hunk 1 of a did not apply: context not found near line 4; closest at "
			 "line 4, where the file ends and the hunk expects \"six\"");
	cae_patch_free(p);
}
END_TEST

START_TEST(apply_hint_picks_nearest)
{
	/* two identical regions: the unified line number decides */
	const char *old = "k\nv=1\nk\nmid\nmid\nmid\nk\nv=1\nk\n";
	cae_patch *p = parse_ok("--- a/f\n+++ b/f\n@@ -7,3 +7,3 @@\n k\n-v=1\n+v=2\n k\n");
	char *out;
	size_t n;
	cae_error err = {0};
	ck_assert_int_eq(cae_patch_apply_hunks(old, strlen(old), first_op(p), &out, &n, &err), 0);
	ck_assert_str_eq(out, "k\nv=1\nk\nmid\nmid\nmid\nk\nv=2\nk\n");
	free(out);
	cae_patch_free(p);
	/* without a line number (apply_patch) the first one after the previous hunk wins */
	p = parse_ok(
	    "*** Begin Patch\n*** Update File: f\n@@\n k\n-v=1\n+v=2\n k\n*** End Patch\n");
	ck_assert_int_eq(cae_patch_apply_hunks(old, strlen(old), first_op(p), &out, &n, &err), 0);
	ck_assert_str_eq(out, "k\nv=2\nk\nmid\nmid\nmid\nk\nv=1\nk\n");
	free(out);
	cae_patch_free(p);
}
END_TEST

START_TEST(apply_crlf_no_final_newline)
{
	/* CRLF file without a final newline; the last line changes */
	const char *old = "a\r\nb\r\nc";
	cae_patch *p = parse_ok("*** Begin Patch\n*** Update File: f\n@@\n b\n-c\n+C\n+D\n"
				"*** End Patch\n");
	char *out;
	size_t n;
	cae_error err = {0};
	ck_assert_int_eq(cae_patch_apply_hunks(old, strlen(old), first_op(p), &out, &n, &err), 0);
	ck_assert_str_eq(out, "a\r\nb\r\nC\r\nD");
	free(out);
	cae_patch_free(p);
	/* a patch text sent with CRLF line endings applies to an LF file */
	p = parse_ok(
	    "*** Begin Patch\r\n*** Update File: f\r\n@@\r\n-x\r\n+y\r\n*** End Patch\r\n");
	ck_assert_int_eq(cae_patch_apply_hunks("x\n", 2, first_op(p), &out, &n, &err), 0);
	ck_assert_str_eq(out, "y\n");
	free(out);
	cae_patch_free(p);
}
END_TEST

START_TEST(apply_add_ignores_old_and_empty_file)
{
	cae_patch *p = parse_ok("--- /dev/null\n+++ b/n.txt\n@@ -0,0 +1,2 @@\n+a\n+b\n"
				"\\ No newline at end of file\n");
	char *out;
	size_t n;
	cae_error err = {0};
	ck_assert_str_eq(cae_patch_get(p, 0)->content, "a\nb");
	ck_assert_int_eq(cae_patch_apply_hunks("junk\n", 5, first_op(p), &out, &n, &err), 0);
	ck_assert_str_eq(out, "a\nb");
	free(out);
	cae_patch_free(p);
	/* an insertion into an empty file */
	p = parse_ok("*** Begin Patch\n*** Update File: e\n@@\n+first\n*** End Patch\n");
	ck_assert_int_eq(cae_patch_apply_hunks("", 0, first_op(p), &out, &n, &err), 0);
	ck_assert_str_eq(out, "first\n");
	free(out);
	cae_patch_free(p);
}
END_TEST

START_TEST(apply_large_and_adversarial)
{
	/* 200,000 lines, 50 hunks spread over the file */
	size_t nl = 200000;
	cae_buf f, d;
	cae__buf_init(&f, (size_t)64 << 20);
	cae__buf_init(&d, (size_t)64 << 20);
	for (size_t i = 0; i < nl; i++)
		ck_assert_int_eq(cae__buf_printf(&f, "line %zu\n", i), 0);
	ck_assert_int_eq(cae__buf_puts(&d, "--- a/big\n+++ b/big\n"), 0);
	for (size_t h = 0; h < 50; h++) {
		size_t at = h * 4000 + 100;
		ck_assert_int_eq(
		    cae__buf_printf(
			&d, "@@ -%zu,3 +%zu,3 @@\n line %zu\n-line %zu\n+LINE %zu\n line %zu\n",
			at + 1, at + 1, at, at + 1, at + 1, at + 2),
		    0);
	}
	cae_patch *p = NULL;
	cae_error err = {0};
	ck_assert_int_eq(cae_patch_parse(d.data, d.len, &p, &err), 0);
	char *out;
	size_t n;
	ck_assert_int_eq(cae_patch_apply_hunks(f.data, f.len, first_op(p), &out, &n, &err), 0);
	ck_assert_uint_eq(n, f.len);
	ck_assert_ptr_nonnull(strstr(out, "\nLINE 196101\n"));
	ck_assert_ptr_null(strstr(out, "\nline 196101\n"));
	free(out);
	cae_patch_free(p);
	cae__buf_clear(&d);
	cae__buf_clear(&f);

	/* identical lines everywhere and a long hunk that almost matches at every position:
	 * the rolling hash keeps this linear per hunk (no quadratic blow-up) */
	for (size_t i = 0; i < 100000; i++)
		ck_assert_int_eq(cae__buf_puts(&f, "x\n"), 0);
	ck_assert_int_eq(cae__buf_puts(&d, "*** Begin Patch\n*** Update File: same\n@@\n"), 0);
	for (size_t i = 0; i < 2000; i++)
		ck_assert_int_eq(cae__buf_puts(&d, " x\n"), 0);
	ck_assert_int_eq(cae__buf_puts(&d, "-y\n+z\n*** End Patch\n"), 0);
	ck_assert_int_eq(cae_patch_parse(d.data, d.len, &p, &err), 0);
	ck_assert_int_eq(cae_patch_apply_hunks(f.data, f.len, first_op(p), &out, &n, &err),
			 -EINVAL);
	ck_assert_msg(strstr(err.message, "hunk 1 of same did not apply"), "%s", err.message);
	cae_patch_free(p);
	cae__buf_clear(&d);
	cae__buf_clear(&f);
}
END_TEST

/* ---- check: the whole patch in memory ---- */

typedef struct fake_fs {
	const char *names[8];
	const char *contents[8];
	int reads;
} fake_fs;

static int fake_read(void *ud, const char *path, char **data, size_t *len, cae_error *err)
{
	fake_fs *fs = ud;
	fs->reads++;
	for (int i = 0; i < 8 && fs->names[i]; i++)
		if (strcmp(fs->names[i], path) == 0) {
			if (data) {
				*data = strdup(fs->contents[i]);
				*len = strlen(fs->contents[i]);
			}
			return 0;
		}
	return -ENOENT;
}

static int check(cae_patch *p, fake_fs *ffs, cae_patch_plan **plan, cae_error *err)
{
	cae_patch_fs fs = {.read = fake_read, .userdata = ffs};
	return cae_patch_check(p, &fs, plan, err);
}

START_TEST(check_all_or_nothing)
{
	fake_fs ffs = {.names = {"a.txt", "b.txt"}, .contents = {"one\ntwo\n", "three\n"}};
	cae_patch *p = parse_ok("*** Begin Patch\n*** Update File: a.txt\n@@\n-one\n+ONE\n"
				"*** Update File: b.txt\n@@\n-four\n+FOUR\n*** End Patch\n");
	ck_assert(cae_patch_is_atomic(p));
	cae_patch_plan *plan = (cae_patch_plan *)1;
	cae_error err = {0};
	ck_assert_int_eq(check(p, &ffs, &plan, &err), -EINVAL);
	ck_assert_ptr_null(plan);
	ck_assert_str_eq(err.message, "hunk 1 of b.txt did not apply: context not found in the "
				      "file (expected \"four\")");
	cae_patch_free(p);

	/* the same patch fixed: every new content computed */
	p = parse_ok("*** Begin Patch\n*** Update File: a.txt\n@@\n-one\n+ONE\n"
		     "*** Update File: b.txt\n@@\n-three\n+THREE\n*** End Patch\n");
	ck_assert_int_eq(check(p, &ffs, &plan, &err), 0);
	ck_assert_uint_eq(cae_patch_plan_count(plan), 2);
	const cae_patch_step *s = cae_patch_plan_step(plan, 0);
	ck_assert_int_eq(s->kind, CAE_PATCH_STEP_WRITE);
	ck_assert_str_eq(s->path, "a.txt");
	ck_assert_ptr_null(s->old_path);
	ck_assert_str_eq(s->data, "ONE\ntwo\n");
	ck_assert_uint_eq(s->len, 8);
	ck_assert(!s->deferred);
	ck_assert_str_eq(cae_patch_plan_step(plan, 1)->data, "THREE\n");
	ck_assert_ptr_null(cae_patch_plan_step(plan, 2));
	cae_patch_plan_free(plan);
	cae_patch_free(p);
}
END_TEST

START_TEST(check_sequence_move_add_delete)
{
	fake_fs ffs = {.names = {"src/a.py", "gone.txt"}, .contents = {"x = 1\ny = 2\n", "bye\n"}};
	cae_patch *p =
	    parse_ok("*** Begin Patch\n"
		     "*** Update File: src/a.py\n@@\n-x = 1\n+x = 10\n"
		     "*** Update File: ./src/a.py\n*** Move to: src/b.py\n@@\n-y = 2\n+y = 20\n"
		     "*** Add File: src/c.py\n+print(1)\n"
		     "*** Delete File: gone.txt\n"
		     "*** Update File: src/b.py\n@@\n x = 10\n+z = 3\n"
		     "*** End Patch\n");
	cae_patch_plan *plan = NULL;
	cae_error err = {0};
	ck_assert_int_eq(check(p, &ffs, &plan, &err), 0);
	ck_assert_uint_eq(cae_patch_plan_count(plan), 5);
	const cae_patch_step *s = cae_patch_plan_step(plan, 1);
	/* the second update sees the first one's result, and moves the file */
	ck_assert_int_eq(s->kind, CAE_PATCH_STEP_WRITE);
	ck_assert_str_eq(s->path, "src/b.py");
	ck_assert_str_eq(s->old_path, "./src/a.py");
	ck_assert_str_eq(s->data, "x = 10\ny = 20\n");
	s = cae_patch_plan_step(plan, 2);
	ck_assert_int_eq(s->kind, CAE_PATCH_STEP_WRITE);
	ck_assert_str_eq(s->path, "src/c.py");
	ck_assert_str_eq(s->data, "print(1)\n");
	s = cae_patch_plan_step(plan, 3);
	ck_assert_int_eq(s->kind, CAE_PATCH_STEP_DELETE);
	ck_assert_str_eq(s->path, "gone.txt");
	/* the moved file is known under its new name without reading it again */
	ck_assert_str_eq(cae_patch_plan_step(plan, 4)->data, "x = 10\nz = 3\ny = 20\n");
	ck_assert_int_eq(ffs.reads, 2);
	cae_patch_plan_free(plan);
	cae_patch_free(p);

	/* after the move, the old name no longer exists */
	p = parse_ok("*** Begin Patch\n*** Update File: src/a.py\n*** Move to: src/b.py\n"
		     "*** Delete File: src/a.py\n*** End Patch\n");
	ck_assert_int_eq(check(p, &ffs, &plan, &err), -ENOENT);
	ck_assert_str_eq(err.message, "cannot delete src/a.py: no such file");
	cae_patch_free(p);
}
END_TEST

START_TEST(check_missing_files)
{
	fake_fs ffs = {.names = {"d.txt"}, .contents = {"hello\n"}};
	cae_patch_plan *plan = NULL;
	cae_error err = {0};
	cae_patch *p = parse_ok("--- a/none.txt\n+++ b/none.txt\n@@ -1 +1 @@\n-a\n+b\n");
	ck_assert_int_eq(check(p, &ffs, &plan, &err), -ENOENT);
	ck_assert_str_eq(err.message, "cannot patch none.txt: no such file");
	cae_patch_free(p);
	/* a hunked delete must match the file */
	p = parse_ok("--- a/d.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-goodbye\n");
	ck_assert_int_eq(check(p, &ffs, &plan, &err), -EINVAL);
	ck_assert_msg(strstr(err.message, "hunk 1 of d.txt did not apply"), "%s", err.message);
	cae_patch_free(p);
	p = parse_ok("--- a/d.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-hello\n");
	ck_assert_int_eq(check(p, &ffs, &plan, &err), 0);
	ck_assert_int_eq(cae_patch_plan_step(plan, 0)->kind, CAE_PATCH_STEP_DELETE);
	cae_patch_plan_free(plan);
	cae_patch_free(p);
	/* no fs given: a patch that must read fails clearly */
	p = parse_ok("--- a/d.txt\n+++ b/d.txt\n@@ -1 +1 @@\n-hello\n+hi\n");
	ck_assert_int_eq(cae_patch_check(p, NULL, &plan, &err), -EINVAL);
	ck_assert_str_eq(err.message, "cannot read d.txt: no file access given");
	cae_patch_free(p);
}
END_TEST

/* The file_edit cases (create, update, delete, append, path outside the workspace) at the plan
 * level: what the executor will write. Confinement is the executor's (openat2 beneath the
 * workspace); the plan hands it the path unchanged. */
START_TEST(seed_file_edit_plan)
{
	fake_fs ffs = {.names = {"log.txt", "old.txt"}, .contents = {"a\n", "x\n"}};
	cae_patch *p =
	    parse_ok("[{\"type\":\"file_edit\",\"action\":\"create\",\"target\":\"n.txt\","
		     "\"content\":\"new\\n\"},"
		     "{\"type\":\"file_edit\",\"action\":\"update\",\"target\":\"n.txt\","
		     "\"content\":\"upd\\n\"},"
		     "{\"type\":\"file_edit\",\"action\":\"append\",\"target\":\"log.txt\","
		     "\"content\":\"b\\n\"},"
		     "{\"type\":\"file_edit\",\"action\":\"delete\",\"target\":\"old.txt\"},"
		     "{\"type\":\"file_edit\",\"action\":\"update\",\"target\":\"../"
		     "outside.txt\",\"content\":\"\"}]");
	cae_patch_plan *plan = NULL;
	cae_error err = {0};
	ck_assert_int_eq(check(p, &ffs, &plan, &err), 0);
	const cae_patch_step *s = cae_patch_plan_step(plan, 0);
	ck_assert_int_eq(s->kind, CAE_PATCH_STEP_WRITE);
	ck_assert_str_eq(s->data, "new\n");
	ck_assert_str_eq(cae_patch_plan_step(plan, 1)->data, "upd\n");
	s = cae_patch_plan_step(plan, 2);
	ck_assert_int_eq(s->kind, CAE_PATCH_STEP_APPEND);
	ck_assert_str_eq(s->path, "log.txt");
	ck_assert_str_eq(s->data, "b\n");
	ck_assert_int_eq(cae_patch_plan_step(plan, 3)->kind, CAE_PATCH_STEP_DELETE);
	ck_assert_str_eq(cae_patch_plan_step(plan, 4)->path, "../outside.txt");
	cae_patch_plan_free(plan);
	cae_patch_free(p);

	/* delete of a missing file fails the check */
	p = parse_ok("[{\"type\":\"file_edit\",\"action\":\"delete\",\"target\":\"nope\"}]");
	ck_assert_int_eq(check(p, &ffs, &plan, &err), -ENOENT);
	cae_patch_free(p);
	/* a written file is seen by a later hunk without reading the disk */
	ffs.reads = 0;
	p = parse_ok("```txt:x\nfirst\n```\n```diff:x\n@@ -1 +1 @@\n-first\n+FIRST\n```\n");
	ck_assert_int_eq(check(p, &ffs, &plan, &err), 0);
	ck_assert_str_eq(cae_patch_plan_step(plan, 1)->data, "FIRST\n");
	ck_assert_int_eq(ffs.reads, 0);
	cae_patch_plan_free(plan);
	cae_patch_free(p);
}
END_TEST

START_TEST(check_append_then_patch)
{
	fake_fs ffs = {.names = {"log.txt"}, .contents = {"a\n"}};
	cae_patch *p =
	    parse_ok("[{\"type\":\"file_edit\",\"action\":\"append\",\"target\":\"log.txt\","
		     "\"content\":\"b\\n\"}]");
	cae_patch_plan *plan = NULL;
	cae_error err = {0};
	ck_assert_int_eq(check(p, &ffs, &plan, &err), 0);
	ck_assert_int_eq(ffs.reads, 0); /* an append alone reads nothing */
	cae_patch_plan_free(plan);
	cae_patch_free(p);
	/* an append creates a missing file: deleting it afterwards is fine */
	p = parse_ok("[{\"type\":\"file_edit\",\"action\":\"append\",\"target\":\"new.txt\","
		     "\"content\":\"x\"},"
		     "{\"type\":\"file_edit\",\"action\":\"delete\",\"target\":\"new.txt\"},"
		     "{\"type\":\"file_edit\",\"action\":\"append\",\"target\":\"log.txt\","
		     "\"content\":\"c\\n\"},"
		     "{\"type\":\"file_edit\",\"action\":\"delete\",\"target\":\"log.txt\"},"
		     "{\"type\":\"file_edit\",\"action\":\"delete\",\"target\":\"log.txt\"}]");
	ck_assert_int_eq(check(p, &ffs, &plan, &err), -ENOENT);
	ck_assert_str_eq(err.message, "cannot delete log.txt: no such file");
	cae_patch_free(p);
}
END_TEST

START_TEST(check_after_run_is_deferred)
{
	fake_fs ffs = {.names = {"a.txt"}, .contents = {"1\n"}};
	cae_patch *p = parse_ok("```diff:a.txt\n@@ -1 +1 @@\n-1\n+2\n```\n"
				"```bash\nmake gen\n```\n"
				"```diff:gen.txt\n@@ -1 +1 @@\n-x\n+y\n```\n"
				"```txt:plain.txt\nhi\n```\n");
	cae_patch_plan *plan = NULL;
	cae_error err = {0};
	ck_assert_int_eq(check(p, &ffs, &plan, &err), 0);
	ck_assert_uint_eq(cae_patch_plan_count(plan), 4);
	const cae_patch_step *s = cae_patch_plan_step(plan, 0);
	ck_assert(!s->deferred);
	ck_assert_str_eq(s->data, "2\n");
	s = cae_patch_plan_step(plan, 1);
	ck_assert_int_eq(s->kind, CAE_PATCH_STEP_RUN);
	ck_assert_int_eq(s->command->type, CAE_PATCH_SHELL_COMMAND);
	/* gen.txt may be made by `make gen`: computed when executed, not now */
	s = cae_patch_plan_step(plan, 2);
	ck_assert_int_eq(s->kind, CAE_PATCH_STEP_WRITE);
	ck_assert(s->deferred);
	ck_assert_ptr_null(s->data);
	ck_assert_str_eq(s->path, "gen.txt");
	s = cae_patch_plan_step(plan, 3);
	ck_assert(!s->deferred);
	ck_assert_str_eq(s->data, "hi\n");
	ck_assert_int_eq(ffs.reads, 1);
	cae_patch_plan_free(plan);
	cae_patch_free(p);
}
END_TEST

/* A complete patch run, at this layer: a JSON patch of several commands
 * gives one plan step per command, in order, ready for the executor. */
START_TEST(seed_integration_plan)
{
	cae_patch *p =
	    parse_ok("[{\"type\":\"file_edit\",\"action\":\"create\",\"target\":\"a.go\","
		     "\"content\":\"package a\\n\"},"
		     "{\"type\":\"shell_command\",\"action\":\"run\",\"target\":\"go test ./...\"},"
		     "{\"type\":\"git_operation\",\"action\":\"add\",\"target\":\"a.go\"},"
		     "{\"type\":\"git_operation\",\"action\":\"commit\",\"content\":\"add a\"}]");
	cae_patch_plan *plan = NULL;
	cae_error err = {0};
	ck_assert_int_eq(cae_patch_check(p, NULL, &plan, &err), 0);
	ck_assert_uint_eq(cae_patch_plan_count(plan), 4);
	const cae_patch_step *s = cae_patch_plan_step(plan, 0);
	ck_assert_int_eq(s->kind, CAE_PATCH_STEP_WRITE);
	ck_assert_str_eq(s->path, "a.go");
	for (size_t i = 1; i < 4; i++) {
		s = cae_patch_plan_step(plan, i);
		ck_assert_int_eq(s->kind, CAE_PATCH_STEP_RUN);
		ck_assert_uint_eq(s->index, i);
		ck_assert_ptr_eq(s->command, cae_patch_get(p, i));
	}
	cae_patch_plan_free(plan);
	char *text = cae_patch_plan_text(p);
	ck_assert_str_eq(text, "[1] file_edit create a.go (10 bytes)\n"
			       "[2] shell_command run go test ./...\n"
			       "[3] git_operation add a.go\n"
			       "[4] git_operation commit \"add a\"\n");
	free(text);
	cae_patch_free(p);
}
END_TEST

/* ---- rendering ---- */

START_TEST(plan_text_forms)
{
	cae_patch *p = parse_ok("```bash\nmake\nmake test\n```\n"
				"```git\ngit commit\ngit commit -m \"a\nb\"\n```\n"
				"```diff\n--- a/x.py\n+++ b/y.py\n@@ -1,2 +1,2 @@\n k\n-a\n+b\n"
				"--- a/z\n+++ /dev/null\n@@ -1 +0,0 @@\n-z\n```\n"
				"```text\nskip\n```\n");
	char *text = cae_patch_plan_text(p);
	ck_assert_str_eq(text, "[1] shell_command run make (+1 more line)\n"
			       "[2] git_operation commit \"Auto-commit by Worker\"\n"
			       "[3] git_operation commit \"a\" (+1 more line)\n"
			       "[4] file_edit move x.py -> y.py (1 hunk, +1 -1)\n"
			       "[5] file_edit delete z\n"
			       "warning: line 22: skipped a ```text block: no target path (write "
			       "```text:<path> to write a file)\n");
	free(text);
	cae_patch_free(p);
}
END_TEST

START_TEST(json_rendering)
{
	cae_patch *p = parse_ok("[{\"type\":\"file_edit\",\"action\":\"create\",\"target\":\"x\","
				"\"content\":\"caf\\u00e9 \\u00e9t\\u00e9\"}]");
	const cae_patch_command *c = cae_patch_get(p, 0);
	/* a cut never splits a UTF-8 character */
	json_t *j = cae_patch_command_to_json(c, 4);
	ck_assert_str_eq(json_string_value(json_object_get(j, "content")), "caf");
	json_decref(j);
	j = cae_patch_command_to_json(c, 0);
	ck_assert_ptr_null(json_object_get(j, "content_truncated"));
	ck_assert_str_eq(json_string_value(json_object_get(j, "type")), "file_edit");
	ck_assert_str_eq(json_string_value(json_object_get(j, "action")), "create");
	json_decref(j);
	cae_patch_free(p);
	/* invalid UTF-8 in a Markdown file block becomes U+FFFD in JSON, bytes kept as is */
	p = parse_ok("```txt:b\n\xff\xfe\n```\n");
	c = cae_patch_get(p, 0);
	ck_assert_uint_eq(c->content_len, 3);
	j = cae_patch_to_json(p);
	ck_assert_str_eq(json_string_value(json_object_get(
			     json_array_get(json_object_get(j, "commands"), 0), "content")),
			 "\xef\xbf\xbd\xef\xbf\xbd\n");
	json_decref(j);
	cae_patch_free(p);
	ck_assert_str_eq(cae_patch_format_name(CAE_PATCH_FORMAT_UNIFIED), "unified");
	ck_assert_str_eq(cae_patch_type_name(CAE_PATCH_GIT_OPERATION), "git_operation");
	ck_assert_str_eq(cae_patch_action_name(CAE_PATCH_GIT_CHECKOUT), "checkout");
}
END_TEST

START_TEST(warnings_are_capped)
{
	cae_buf b;
	cae__buf_init(&b, 1 << 20);
	for (int i = 0; i < 150; i++)
		ck_assert_int_eq(cae__buf_puts(&b, "```text\nx\n```\n"), 0);
	cae_patch *p = NULL;
	cae_error err = {0};
	ck_assert_int_eq(cae_patch_parse(b.data, b.len, &p, &err), 0);
	ck_assert_uint_eq(cae_patch_warning_count(p), CAE_PATCH_MAX_WARNINGS);
	char *text = cae_patch_plan_text(p);
	ck_assert_ptr_nonnull(strstr(text, "warning: 50 more warnings\n"));
	free(text);
	cae_patch_free(p);
	cae__buf_clear(&b);
}
END_TEST

/* ---- suite ---- */

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static void load_cases(void)
{
	DIR *d = opendir(data_dir());
	if (!d) {
		fprintf(stderr, "test-patch: cannot open %s (set CAE_PATCH_DATA)\n", data_dir());
		exit(EXIT_FAILURE);
	}
	struct dirent *de;
	size_t cap = 0;
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		if (ncases == cap) {
			cap = cap ? cap * 2 : 64;
			cases = realloc(cases, cap * sizeof(*cases));
		}
		cases[ncases++] = strdup(de->d_name);
	}
	closedir(d);
	qsort(cases, ncases, sizeof(*cases), cmp_str);
}

static Suite *make_suite(void)
{
	Suite *s = suite_create("patch");
	TCase *tc = tcase_create("golden");
	tcase_add_loop_test(tc, golden, 0, (int)ncases);
	suite_add_tcase(s, tc);

	tc = tcase_create("parse");
	tcase_add_test(tc, seed_parse_json_ok);
	tcase_add_test(tc, seed_parse_json_bad);
	tcase_add_test(tc, seed_parse_markdown_ok);
	tcase_add_test(tc, seed_parse_markdown_bad);
	tcase_add_test(tc, seed_parse_empty);
	tcase_add_test(tc, from_json_value);
	tcase_add_test(tc, json_nul_in_content);
	tcase_add_test(tc, markdown_git_add_vs_commit);
	tcase_add_test(tc, markdown_fences_longer_and_tilde);
	tcase_add_test(tc, plan_text_forms);
	tcase_add_test(tc, json_rendering);
	tcase_add_test(tc, warnings_are_capped);
	suite_add_tcase(s, tc);

	tc = tcase_create("bounds");
	tcase_set_timeout(tc, 240);
	tcase_add_test(tc, thousand_commands);
	tcase_add_test(tc, too_many_commands);
	tcase_add_test(tc, fifty_megabytes);
	tcase_add_test(tc, hostile_sizes);
	tcase_add_test(tc, hostile_shapes);
	tcase_add_test(tc, apply_large_and_adversarial);
	suite_add_tcase(s, tc);

	tc = tcase_create("apply");
	tcase_add_test(tc, apply_failure_produces_nothing);
	tcase_add_test(tc, apply_failure_names_the_differing_line);
	tcase_add_test(tc, apply_hint_picks_nearest);
	tcase_add_test(tc, apply_crlf_no_final_newline);
	tcase_add_test(tc, apply_add_ignores_old_and_empty_file);
	tcase_add_test(tc, check_all_or_nothing);
	tcase_add_test(tc, check_sequence_move_add_delete);
	tcase_add_test(tc, check_missing_files);
	tcase_add_test(tc, seed_file_edit_plan);
	tcase_add_test(tc, check_append_then_patch);
	tcase_add_test(tc, check_after_run_is_deferred);
	tcase_add_test(tc, seed_integration_plan);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	load_cases();
	int r = tu_run(make_suite());
	for (size_t i = 0; i < ncases; i++)
		free(cases[i]);
	free(cases);
	return r;
}
