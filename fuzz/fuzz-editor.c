/* Fuzz target for the text editor: arbitrary argument bytes against a small workspace.
 *
 * An input that parses as a JSON object is one cae_editor_call; anything else goes through
 * the direct entry points (byte 0 picks the command, the rest is split at '\x01' into path,
 * first and second string, so non-UTF-8 and NUL-free binary strings reach the editor too).
 * The workspace lives in a temporary directory created once, next to an `outside` directory
 * that a symlink in the workspace points to; after every input the outside file must be
 * unchanged, the result text valid UTF-8 and the compat rendering valid JSON. Every 256
 * inputs the workspace is reset so that state stays small. */
#include "cae/editor.h"

#include "base/fs.h"
#include "base/utf8.h"

#include <fcntl.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char *tmp_dir, *ws_dir, *outside_file;
static cae_editor *editor;
static unsigned inputs;

static const char SECRET[] = "outside the workspace\nneedle\n";

static void put(const char *dir, const char *name, const char *content, size_t len)
{
	char *p = cae__path_join(dir, name);
	FILE *f = p ? fopen(p, "wb") : NULL;
	if (!f)
		abort();
	if (len && fwrite(content, 1, len, f) != len)
		abort();
	fclose(f);
	free(p);
}

static void seed_workspace(void)
{
	cae__rm_rf(ws_dir);
	if (cae__mkdir_p(ws_dir, 0755) < 0)
		abort();
	char *sub = cae__path_join(ws_dir, "src/pkg");
	if (!sub || cae__mkdir_p(sub, 0755) < 0)
		abort();
	free(sub);
	static const char py[] = "import os\n\n\ndef main():\n\tprint('needle')\n\treturn 0\n";
	static const char crlf[] = "one\r\ntwo\r\nneedle\r\n";
	static const char nofinal[] = "a\nb\nneedle";
	static const char bin[] = "\x7f"
				  "ELF\0\0needle";
	put(ws_dir, "main.py", py, sizeof(py) - 1);
	put(ws_dir, "crlf.txt", crlf, sizeof(crlf) - 1);
	put(ws_dir, "nofinal.txt", nofinal, sizeof(nofinal) - 1);
	put(ws_dir, "bin.dat", bin, sizeof(bin) - 1);
	put(ws_dir, "src/pkg/mod.py", "x = 1\n", 6);
	put(ws_dir, "empty.txt", "", 0);
	char *l1 = cae__path_join(ws_dir, "out"), *l2 = cae__path_join(ws_dir, "src/up");
	if (!l1 || !l2 || symlink("../outside", l1) < 0 || symlink("..", l2) < 0)
		abort();
	free(l1);
	free(l2);
	cae_editor_free(editor);
	cae_editor_limits lim;
	cae_editor_limits_default(&lim);
	lim.max_file_bytes = 1 << 16;
	lim.max_output_chars = 4000;
	lim.undo_budget_bytes = 1 << 18;
	lim.max_dir_entries = 200;
	editor = cae_editor_new(ws_dir, "/workspace/project", &lim, NULL);
	if (!editor)
		abort();
}

static void cleanup(void)
{
	cae_editor_free(editor);
	editor = NULL;
	if (tmp_dir)
		cae__rm_rf(tmp_dir);
	free(tmp_dir);
	free(ws_dir);
	free(outside_file);
}

static void setup_once(void)
{
	if (tmp_dir)
		return;
	atexit(cleanup);
	const char *base = getenv("TMPDIR");
	char tmpl[4096];
	snprintf(tmpl, sizeof(tmpl), "%s/cae-fuzz-editor-XXXXXX", base && *base ? base : "/tmp");
	if (!mkdtemp(tmpl))
		abort();
	tmp_dir = strdup(tmpl);
	ws_dir = cae__path_join(tmp_dir, "ws");
	char *outside = cae__path_join(tmp_dir, "outside");
	if (!ws_dir || !outside || cae__mkdir_p(outside, 0755) < 0)
		abort();
	put(outside, "secret.txt", SECRET, sizeof(SECRET) - 1);
	outside_file = cae__path_join(outside, "secret.txt");
	free(outside);
	seed_workspace();
}

static void check_invariants(const cae_editor_result *res)
{
	if (!res->text || !cae__utf8_is_valid(res->text, strlen(res->text)))
		abort();
	char *compat = cae_editor_result_compat_text(res);
	if (!compat)
		abort();
	json_t *j = json_loads(compat, 0, NULL);
	if (!j)
		abort();
	json_decref(j);
	free(compat);
	char *now = NULL;
	size_t len = 0;
	if (cae__read_file(AT_FDCWD, outside_file, 1 << 16, &now, &len) < 0 ||
	    len != sizeof(SECRET) - 1 || memcmp(now, SECRET, len) != 0)
		abort(); /* something outside the workspace changed */
	free(now);
}

/* Next field of a '\x01'-separated input, as a new NUL-terminated string. */
static char *field(const uint8_t **p, const uint8_t *end, size_t *len)
{
	const uint8_t *s = *p;
	const uint8_t *e = memchr(s, 0x01, (size_t)(end - s));
	if (!e)
		e = end;
	*len = (size_t)(e - s);
	char *r = malloc(*len + 1);
	if (!r)
		abort();
	memcpy(r, s, *len);
	r[*len] = '\0';
	*p = e < end ? e + 1 : end;
	return r;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	setup_once();
	if (++inputs % 256 == 0)
		seed_workspace();
	cae_editor_result res;
	json_t *args = json_loadb((const char *)data, size, JSON_ALLOW_NUL, NULL);
	if (args && json_is_object(args)) {
		if (cae_editor_call(editor, args, &res) == 0) {
			check_invariants(&res);
			cae_editor_result_clear(&res);
		}
		json_decref(args);
		return 0;
	}
	json_decref(args);
	if (size == 0)
		return 0;
	const uint8_t *p = data + 1, *end = data + size;
	size_t plen, alen, blen;
	char *path = field(&p, end, &plen);
	char *a = field(&p, end, &alen);
	char *b = field(&p, end, &blen);
	/* The direct API takes NUL-terminated paths: an embedded NUL just shortens it. */
	int r;
	switch (data[0] % 6) {
	case 0: {
		long long range[2] = {(long long)(alen % 40) - 2, (long long)(blen % 40) - 2};
		r = cae_editor_view(editor, path, (data[0] & 0x80) ? range : NULL, &res);
		break;
	}
	case 1:
		r = cae_editor_create(editor, path, a, alen, &res);
		break;
	case 2:
		r = cae_editor_str_replace(editor, path, a, alen, (data[0] & 0x80) ? NULL : b, blen,
					   &res);
		break;
	case 3:
		r = cae_editor_insert(editor, path, (long long)(blen % 12) - 1, a, alen, &res);
		break;
	case 4:
		r = cae_editor_undo_edit(editor, path, &res);
		break;
	default:
		r = cae_editor_view(editor, path, NULL, &res);
		break;
	}
	if (r == 0) {
		check_invariants(&res);
		cae_editor_result_clear(&res);
	}
	free(path);
	free(a);
	free(b);
	return 0;
}
