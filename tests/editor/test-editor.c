/* Tests of the text editor (src/editor/).
 *
 * 1. Golden cases: tests/data/editor/<case>/ (path given as argv[1]):
 *      args.json      one call (an object) or several (an array; each element one call)
 *      expected.txt   for every call "[ok]\n" or "[error]\n", then the result text, then "\n"
 *                     (with setup "compat": the bhouston JSON text instead of the text)
 *      before/        the workspace before (optional: empty)
 *      after/         the regular files of the workspace afterwards (optional: = before/)
 *      setup.json     optional: {"symlinks": {"rel": "target"}, "dirs": ["rel"],
 *                     "fifos": ["rel"], "modes": {"rel": "0755"}, "limits": {...},
 *                     "compat": true}
 *    The workspace is <tmp>/ws, shown to the editor as /workspace/project; <tmp>/outside
 *    holds files that must never be read or changed (checked after every case), so symlinks
 *    can point at "../outside/...". Set CAE_EDITOR_BLESS=1 to (re)write expected.txt and
 *    after/ from the actual results (then review them!).
 * 2. Code-level tests: the symlink-swap race, long and invalid paths, /proc/self/root,
 *    CRLF, modes, undo bounds, the compat shape, a directory named `x$(touch pwned)`.
 */
#include "cae/editor.h"

#include "base/fs.h"
#include "base/macro.h"
#include "crashutil.h"
#include "testutil.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define DISPLAY_ROOT "/workspace/project"

static const char *data_dir;
static char **cases;
static int ncases;

/* ------------------------------------------------------------------------------------------ */
/* Small file helpers */

static char *slurp(const char *path, size_t *len)
{
	char *data = NULL;
	size_t n = 0;
	if (cae__read_file(AT_FDCWD, path, 64 << 20, &data, &n) < 0)
		return NULL;
	if (len)
		*len = n;
	return data;
}

static void spit(const char *path, const char *data, size_t len)
{
	FILE *f = fopen(path, "wb");
	ck_assert_msg(f != NULL, "cannot write %s", path);
	if (len)
		ck_assert_uint_eq(fwrite(data, 1, len, f), len);
	fclose(f);
}

static char *pjoin(const char *a, const char *b)
{
	char *p = cae__path_join(a, b);
	ck_assert_ptr_nonnull(p);
	return p;
}

/* Copies regular files and directories of src into dst (created), keeping modes. */
static void copy_tree(const char *src, const char *dst)
{
	ck_assert_int_eq(cae__mkdir_p(dst, 0755), 0);
	DIR *d = opendir(src);
	if (!d)
		return;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		char *s = pjoin(src, de->d_name), *t = pjoin(dst, de->d_name);
		struct stat st;
		ck_assert_int_eq(lstat(s, &st), 0);
		if (S_ISDIR(st.st_mode)) {
			copy_tree(s, t);
		} else if (S_ISREG(st.st_mode)) {
			size_t n;
			char *c = slurp(s, &n);
			ck_assert_ptr_nonnull(c);
			spit(t, c, n);
			chmod(t, st.st_mode & 07777);
			free(c);
		}
		free(s);
		free(t);
	}
	closedir(d);
}

/* ------------------------------------------------------------------------------------------ */
/* Tree manifests: one sorted line per non-directory entry */

typedef struct lines {
	char **v;
	size_t n, cap;
} lines;

static void lines_add(lines *l, char *s)
{
	if (l->n == l->cap) {
		l->cap = l->cap ? l->cap * 2 : 16;
		l->v = realloc(l->v, l->cap * sizeof(char *));
		ck_assert_ptr_nonnull(l->v);
	}
	l->v[l->n++] = s;
}

static int str_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static char *escape(const char *s, size_t n)
{
	char *r = malloc(n * 4 + 1);
	size_t o = 0;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c == '\\') {
			r[o++] = '\\';
			r[o++] = '\\';
		} else if (c < 0x20 || c == 0x7f) {
			snprintf(r + o, 5, "\\x%02x", c);
			o += 4;
		} else {
			r[o++] = (char)c;
		}
	}
	r[o] = 0;
	return r;
}

static void walk(const char *root, const char *rel, json_t *modes, lines *out)
{
	char *dir = *rel ? pjoin(root, rel) : strdup(root);
	DIR *d = opendir(dir);
	if (!d) {
		free(dir);
		return;
	}
	struct dirent *de;
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		char *r = *rel ? pjoin(rel, de->d_name) : strdup(de->d_name);
		char *full = pjoin(root, r);
		struct stat st;
		ck_assert_int_eq(lstat(full, &st), 0);
		char *line = NULL;
		if (S_ISDIR(st.st_mode)) {
			walk(root, r, modes, out);
		} else if (S_ISLNK(st.st_mode)) {
			char t[4096];
			ssize_t n = readlink(full, t, sizeof(t) - 1);
			ck_assert_int_ge(n, 0);
			t[n] = 0;
			ck_assert_int_ge(asprintf(&line, "%s -> %s", r, t), 0);
		} else if (S_ISFIFO(st.st_mode)) {
			ck_assert_int_ge(asprintf(&line, "%s (fifo)", r), 0);
		} else {
			size_t n;
			char *c = slurp(full, &n);
			ck_assert_ptr_nonnull(c);
			char *e = escape(c, n);
			char mode[16] = "";
			if (modes && json_object_get(modes, r))
				snprintf(mode, sizeof(mode), " %04o",
					 (unsigned)(st.st_mode & 07777));
			ck_assert_int_ge(asprintf(&line, "%s%s: %s", r, mode, e), 0);
			free(c);
			free(e);
		}
		if (line)
			lines_add(out, line);
		free(r);
		free(full);
	}
	closedir(d);
	free(dir);
}

static char *manifest_of(lines *l)
{
	if (l->n)
		qsort(l->v, l->n, sizeof(char *), str_cmp);
	size_t total = 1;
	for (size_t i = 0; i < l->n; i++)
		total += strlen(l->v[i]) + 1;
	char *s = malloc(total);
	size_t o = 0;
	for (size_t i = 0; i < l->n; i++) {
		size_t k = strlen(l->v[i]);
		memcpy(s + o, l->v[i], k);
		o += k;
		s[o++] = '\n';
		free(l->v[i]);
	}
	s[o] = 0;
	free(l->v);
	memset(l, 0, sizeof(*l));
	return s;
}

static char *manifest(const char *root, json_t *modes)
{
	lines l = {0};
	walk(root, "", modes, &l);
	return manifest_of(&l);
}

/* ------------------------------------------------------------------------------------------ */
/* A sandbox: <tmp>/ws and <tmp>/outside */

typedef struct sandbox {
	char *tmp, *ws, *outside;
	char *outside_manifest;
} sandbox;

static void sandbox_init(sandbox *sb)
{
	sb->tmp = tu_mkdtemp();
	sb->ws = pjoin(sb->tmp, "ws");
	sb->outside = pjoin(sb->tmp, "outside");
	ck_assert_int_eq(cae__mkdir_p(sb->ws, 0755), 0);
	char *d = pjoin(sb->outside, "dir");
	ck_assert_int_eq(cae__mkdir_p(d, 0755), 0);
	free(d);
	tu_write(sb->outside, "secret.txt", "top secret\nneedle\n");
	tu_write(sb->outside, "dir/f.txt", "outside file\nneedle\n");
	tu_write(sb->outside, "dir/a.txt", "outside a\nneedle\n");
	sb->outside_manifest = manifest(sb->outside, NULL);
}

/* Nothing outside the workspace changed, and no `pwned` file appeared anywhere. */
static void sandbox_check_outside(const sandbox *sb)
{
	char *now = manifest(sb->outside, NULL);
	ck_assert_str_eq(now, sb->outside_manifest);
	free(now);
	char *p = pjoin(sb->tmp, "pwned");
	ck_assert_msg(access(p, F_OK) != 0, "pwned file created");
	free(p);
	ck_assert_msg(access("pwned", F_OK) != 0, "pwned file created in cwd");
}

static void sandbox_free(sandbox *sb)
{
	cae__rm_rf(sb->tmp);
	free(sb->tmp);
	free(sb->ws);
	free(sb->outside);
	free(sb->outside_manifest);
}

/* ------------------------------------------------------------------------------------------ */
/* Golden cases */

static void apply_setup(const char *root, json_t *setup)
{
	const char *k;
	json_t *v;
	size_t i;
	json_array_foreach(json_object_get(setup, "dirs"), i, v)
	{
		char *p = pjoin(root, json_string_value(v));
		ck_assert_int_eq(cae__mkdir_p(p, 0755), 0);
		free(p);
	}
	json_object_foreach(json_object_get(setup, "symlinks"), k, v)
	{
		char *p = pjoin(root, k);
		ck_assert_msg(symlink(json_string_value(v), p) == 0, "symlink %s: %s", p,
			      strerror(errno));
		free(p);
	}
	json_array_foreach(json_object_get(setup, "fifos"), i, v)
	{
		char *p = pjoin(root, json_string_value(v));
		ck_assert_int_eq(mkfifo(p, 0644), 0);
		free(p);
	}
	json_object_foreach(json_object_get(setup, "modes"), k, v)
	{
		char *p = pjoin(root, k);
		if (access(p, F_OK) == 0)
			ck_assert_int_eq(chmod(p, (mode_t)strtol(json_string_value(v), NULL, 8)),
					 0);
		free(p);
	}
}

static void limits_from(json_t *setup, cae_editor_limits *lim)
{
	cae_editor_limits_default(lim);
	json_t *l = json_object_get(setup, "limits"), *v;
	if ((v = json_object_get(l, "max_file_bytes")))
		lim->max_file_bytes = (size_t)json_integer_value(v);
	if ((v = json_object_get(l, "max_output_chars")))
		lim->max_output_chars = (size_t)json_integer_value(v);
	if ((v = json_object_get(l, "undo_depth")))
		lim->undo_depth = (unsigned)json_integer_value(v);
	if ((v = json_object_get(l, "undo_budget_bytes")))
		lim->undo_budget_bytes = (size_t)json_integer_value(v);
	if ((v = json_object_get(l, "max_dir_entries")))
		lim->max_dir_entries = (size_t)json_integer_value(v);
}

static void append(char **acc, size_t *len, const char *s)
{
	size_t k = strlen(s);
	*acc = realloc(*acc, *len + k + 1);
	memcpy(*acc + *len, s, k + 1);
	*len += k;
}

START_TEST(golden)
{
	const char *name = cases[_i];
	char *cdir = pjoin(data_dir, name);
	char *p_args = pjoin(cdir, "args.json"), *p_exp = pjoin(cdir, "expected.txt");
	char *p_before = pjoin(cdir, "before"), *p_after = pjoin(cdir, "after");
	char *p_setup = pjoin(cdir, "setup.json");
	json_error_t je;
	json_t *args = json_load_file(p_args, JSON_ALLOW_NUL, &je);
	ck_assert_msg(args != NULL, "%s: %s line %d", p_args, je.text, je.line);
	json_t *setup =
	    access(p_setup, F_OK) == 0 ? json_load_file(p_setup, 0, &je) : json_object();
	ck_assert_msg(setup != NULL, "%s: %s", p_setup, je.text);

	sandbox sb;
	sandbox_init(&sb);
	if (cae__is_dir(p_before))
		copy_tree(p_before, sb.ws);
	apply_setup(sb.ws, setup);

	cae_editor_limits lim;
	limits_from(setup, &lim);
	cae_error err = {0};
	cae_editor *ed = cae_editor_new(sb.ws, DISPLAY_ROOT, &lim, &err);
	ck_assert_msg(ed != NULL, "%s", err.message);
	bool compat = json_is_true(json_object_get(setup, "compat"));

	char *actual = strdup("");
	size_t alen = 0;
	size_t ncalls = json_is_array(args) ? json_array_size(args) : 1;
	for (size_t i = 0; i < ncalls; i++) {
		json_t *call = json_is_array(args) ? json_array_get(args, i) : args;
		cae_editor_result res;
		ck_assert_int_eq(cae_editor_call(ed, call, &res), 0);
		ck_assert_ptr_nonnull(res.text);
		append(&actual, &alen, res.is_error ? "[error]\n" : "[ok]\n");
		if (compat) {
			char *c = cae_editor_result_compat_text(&res);
			ck_assert_ptr_nonnull(c);
			append(&actual, &alen, c);
			free(c);
		} else {
			append(&actual, &alen, res.text);
		}
		append(&actual, &alen, "\n");
		cae_editor_result_clear(&res);
		sandbox_check_outside(&sb);
	}
	cae_editor_free(ed);

	/* The workspace afterwards: after/ (or before/) plus what setup made. */
	sandbox exp_sb = {0};
	exp_sb.tmp = tu_mkdtemp();
	const char *src = cae__is_dir(p_after) ? p_after : p_before;
	if (cae__is_dir(src))
		copy_tree(src, exp_sb.tmp);
	apply_setup(exp_sb.tmp, setup);
	json_t *modes = json_object_get(setup, "modes");
	char *got_tree = manifest(sb.ws, modes);
	char *want_tree = manifest(exp_sb.tmp, modes);

	if (getenv("CAE_EDITOR_BLESS")) {
		spit(p_exp, actual, alen);
		/* after/ only when the workspace changed. */
		char *btmp = tu_mkdtemp();
		if (cae__is_dir(p_before))
			copy_tree(p_before, btmp);
		apply_setup(btmp, setup);
		char *before_tree = manifest(btmp, modes);
		cae__rm_rf(p_after);
		if (strcmp(got_tree, before_tree) != 0)
			copy_tree(sb.ws, p_after);
		cae__rm_rf(btmp);
		free(btmp);
		free(before_tree);
	} else {
		char *expected = slurp(p_exp, NULL);
		ck_assert_msg(expected != NULL, "%s missing", p_exp);
		ck_assert_msg(strcmp(actual, expected) == 0,
			      "case %s: output differs\n--- expected\n%s\n--- actual\n%s", name,
			      expected, actual);
		ck_assert_msg(strcmp(got_tree, want_tree) == 0,
			      "case %s: workspace differs\n--- expected\n%s--- actual\n%s", name,
			      want_tree, got_tree);
		free(expected);
	}
	sandbox_check_outside(&sb);
	free(got_tree);
	free(want_tree);
	cae__rm_rf(exp_sb.tmp);
	free(exp_sb.tmp);
	sandbox_free(&sb);
	free(actual);
	json_decref(args);
	json_decref(setup);
	free(cdir);
	free(p_args);
	free(p_exp);
	free(p_before);
	free(p_after);
	free(p_setup);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */
/* Code-level tests */

typedef struct fixture {
	sandbox sb;
	cae_editor *ed;
} fixture;

static void fx_init(fixture *fx, const cae_editor_limits *lim, const char *display)
{
	sandbox_init(&fx->sb);
	cae_error err = {0};
	fx->ed = cae_editor_new(fx->sb.ws, display, lim, &err);
	ck_assert_msg(fx->ed != NULL, "%s", err.message);
}

static void fx_free(fixture *fx)
{
	cae_editor_free(fx->ed);
	sandbox_check_outside(&fx->sb);
	sandbox_free(&fx->sb);
}

/* Runs one JSON call; returns the result (caller clears). */
static cae_editor_result run(cae_editor *ed, const char *json)
{
	json_error_t je;
	json_t *a = json_loads(json, JSON_ALLOW_NUL, &je);
	ck_assert_msg(a != NULL, "bad test json %s: %s", json, je.text);
	cae_editor_result res;
	ck_assert_int_eq(cae_editor_call(ed, a, &res), 0);
	ck_assert_ptr_nonnull(res.text);
	json_decref(a);
	return res;
}

static void expect_ok(cae_editor *ed, const char *json)
{
	cae_editor_result r = run(ed, json);
	ck_assert_msg(!r.is_error, "%s -> %s", json, r.text);
	cae_editor_result_clear(&r);
}

static void expect_error(cae_editor *ed, const char *json, const char *needle)
{
	cae_editor_result r = run(ed, json);
	ck_assert_msg(r.is_error, "%s -> not an error: %s", json, r.text);
	ck_assert_msg(strstr(r.text, needle) != NULL, "%s -> %s (wanted '%s')", json, r.text,
		      needle);
	cae_editor_result_clear(&r);
}

static char *ws_read(fixture *fx, const char *rel, size_t *len)
{
	char *p = pjoin(fx->sb.ws, rel);
	char *c = slurp(p, len);
	free(p);
	return c;
}

static void ws_write(fixture *fx, const char *rel, const char *data)
{
	char *p = pjoin(fx->sb.ws, rel);
	spit(p, data, strlen(data));
	free(p);
}

static void ws_assert(fixture *fx, const char *rel, const char *want)
{
	size_t n;
	char *c = ws_read(fx, rel, &n);
	ck_assert_msg(c != NULL, "%s missing", rel);
	ck_assert_uint_eq(n, strlen(want));
	ck_assert_msg(memcmp(c, want, n) == 0, "%s: got '%s' want '%s'", rel, c, want);
	free(c);
}

/* -- the race: a directory swapped with a symlink to outside while edits run -- */

typedef struct swapper {
	int wsfd;
	const char *a, *b; /* exchanged over and over */
	atomic_bool stop;
	atomic_long swaps;
} swapper;

static void *swap_loop(void *arg)
{
	swapper *s = arg;
	while (!atomic_load(&s->stop)) {
		if (renameat2(s->wsfd, s->a, s->wsfd, s->b, RENAME_EXCHANGE) == 0)
			atomic_fetch_add(&s->swaps, 1);
	}
	return NULL;
}

START_TEST(race_symlink_swap)
{
	fixture fx;
	fx_init(&fx, NULL, DISPLAY_ROOT);
	char *sub = pjoin(fx.sb.ws, "sub"), *alt = pjoin(fx.sb.ws, "alt");
	char *flink = pjoin(fx.sb.ws, "flink");
	ck_assert_int_eq(mkdir(sub, 0755), 0);
	/* The same names and contents as outside/dir: an escape would succeed visibly. */
	ws_write(&fx, "sub/f.txt", "outside file\nneedle\n");
	ws_write(&fx, "sub/a.txt", "outside a\nneedle\n");
	ws_write(&fx, "file.txt", "outside a\nneedle\n");
	/* A directory swapped with a symlink to outside, and a file swapped with one. */
	ck_assert_int_eq(symlink("../outside/dir", alt), 0);
	ck_assert_int_eq(symlink("../outside/dir/a.txt", flink), 0);
	int wsfd = open(fx.sb.ws, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	ck_assert_int_ge(wsfd, 0);
	swapper s1 = {.wsfd = wsfd, .a = "sub", .b = "alt"};
	swapper s2 = {.wsfd = wsfd, .a = "file.txt", .b = "flink"};
	pthread_t t1, t2;
	ck_assert_int_eq(pthread_create(&t1, NULL, swap_loop, &s1), 0);
	ck_assert_int_eq(pthread_create(&t2, NULL, swap_loop, &s2), 0);
	static const char *calls[] = {
	    "{\"command\":\"str_replace\",\"path\":\"sub/f.txt\",\"old_str\":\"needle\","
	    "\"new_str\":\"NEEDLE\"}",
	    "{\"command\":\"str_replace\",\"path\":\"sub/f.txt\",\"old_str\":\"NEEDLE\","
	    "\"new_str\":\"needle\"}",
	    "{\"command\":\"insert\",\"path\":\"sub/a.txt\",\"insert_line\":0,"
	    "\"new_str\":\"x\"}",
	    "{\"command\":\"undo_edit\",\"path\":\"sub/a.txt\"}",
	    "{\"command\":\"create\",\"path\":\"sub/new.txt\",\"file_text\":\"n\"}",
	    "{\"command\":\"undo_edit\",\"path\":\"sub/new.txt\"}",
	    "{\"command\":\"view\",\"path\":\"sub/f.txt\"}",
	    "{\"command\":\"view\",\"path\":\"sub\"}",
	    "{\"command\":\"str_replace\",\"path\":\"file.txt\",\"old_str\":\"needle\","
	    "\"new_str\":\"NEEDLE\"}",
	    "{\"command\":\"undo_edit\",\"path\":\"file.txt\"}",
	    "{\"command\":\"insert\",\"path\":\"file.txt\",\"insert_line\":1,"
	    "\"new_str\":\"y\"}",
	    "{\"command\":\"view\",\"path\":\"file.txt\"}",
	};
	long ok = 0;
	for (int i = 0; i < 1000; i++) {
		cae_editor_result r = run(fx.ed, calls[i % ARRAY_SIZE(calls)]);
		if (!r.is_error)
			ok++;
		/* Nothing outside may ever be shown either. */
		ck_assert_msg(strstr(r.text, "top secret") == NULL, "%s", r.text);
		cae_editor_result_clear(&r);
		sandbox_check_outside(&fx.sb);
	}
	atomic_store(&s1.stop, true);
	atomic_store(&s2.stop, true);
	pthread_join(t1, NULL);
	pthread_join(t2, NULL);
	close(wsfd);
	ck_assert_int_gt(atomic_load(&s1.swaps), 0);
	ck_assert_int_gt(atomic_load(&s2.swaps), 0);
	ck_assert_int_gt(ok, 0);
	sandbox_check_outside(&fx.sb);
	free(sub);
	free(alt);
	free(flink);
	fx_free(&fx);
}
END_TEST

/* -- paths -- */

static void all_commands_refuse_path(fixture *fx, const char *path_json, const char *needle)
{
	char buf[8192];
	snprintf(buf, sizeof(buf), "{\"command\":\"view\",\"path\":%s}", path_json);
	expect_error(fx->ed, buf, needle);
	snprintf(buf, sizeof(buf), "{\"command\":\"create\",\"path\":%s,\"file_text\":\"x\"}",
		 path_json);
	expect_error(fx->ed, buf, needle);
	snprintf(buf, sizeof(buf),
		 "{\"command\":\"str_replace\",\"path\":%s,\"old_str\":\"needle\",\"new_str\":"
		 "\"X\"}",
		 path_json);
	expect_error(fx->ed, buf, needle);
	snprintf(buf, sizeof(buf),
		 "{\"command\":\"insert\",\"path\":%s,\"insert_line\":0,\"new_str\":\"X\"}",
		 path_json);
	expect_error(fx->ed, buf, needle);
	snprintf(buf, sizeof(buf), "{\"command\":\"undo_edit\",\"path\":%s}", path_json);
	expect_error(fx->ed, buf, needle);
}

START_TEST(path_100kb)
{
	fixture fx;
	fx_init(&fx, NULL, DISPLAY_ROOT);
	size_t n = 100 * 1024;
	char *p = malloc(n + 1);
	for (size_t i = 0; i < n; i += 2) {
		p[i] = 'a';
		p[i + 1] = '/';
	}
	p[n - 1] = 'f';
	p[n] = 0;
	json_t *ps = json_string(p);
	const char *cmds[] = {"view", "create", "str_replace", "insert", "undo_edit"};
	for (size_t i = 0; i < ARRAY_SIZE(cmds); i++) {
		json_t *a =
		    json_pack("{s:s, s:O, s:s, s:s, s:s, s:i}", "command", cmds[i], "path", ps,
			      "file_text", "x", "old_str", "a", "new_str", "b", "insert_line", 0);
		cae_editor_result r;
		ck_assert_int_eq(cae_editor_call(fx.ed, a, &r), 0);
		ck_assert(r.is_error);
		ck_assert_msg(strstr(r.text, "too long (102400 bytes)") != NULL, "%s", r.text);
		ck_assert_uint_lt(strlen(r.text), 1000); /* the path is not echoed */
		cae_editor_result_clear(&r);
		json_decref(a);
	}
	/* The direct API says the same. */
	cae_editor_result r;
	ck_assert_int_eq(cae_editor_create(fx.ed, p, "x", 1, &r), 0);
	ck_assert(r.is_error);
	cae_editor_result_clear(&r);
	json_decref(ps);
	free(p);
	char *m = manifest(fx.sb.ws, NULL);
	ck_assert_str_eq(m, "");
	free(m);
	fx_free(&fx);
}
END_TEST

START_TEST(path_invalid_utf8)
{
	fixture fx;
	fx_init(&fx, NULL, DISPLAY_ROOT);
	const char *bad = "bad\xff\xfe.txt";
	cae_editor_result r;
	ck_assert_int_eq(cae_editor_create(fx.ed, bad, "x", 1, &r), 0);
	ck_assert(r.is_error);
	ck_assert_str_eq(r.text, "The path is not valid UTF-8; give the path as UTF-8 text.");
	cae_editor_result_clear(&r);
	ck_assert_int_eq(cae_editor_view(fx.ed, bad, NULL, &r), 0);
	ck_assert(r.is_error);
	cae_editor_result_clear(&r);
	ck_assert_int_eq(cae_editor_str_replace(fx.ed, bad, "a", 1, "b", 1, &r), 0);
	ck_assert(r.is_error);
	cae_editor_result_clear(&r);
	ck_assert_int_eq(cae_editor_insert(fx.ed, bad, 0, "b", 1, &r), 0);
	ck_assert(r.is_error);
	cae_editor_result_clear(&r);
	ck_assert_int_eq(cae_editor_undo_edit(fx.ed, bad, &r), 0);
	ck_assert(r.is_error);
	cae_editor_result_clear(&r);
	/* A file with that (non-UTF-8) name exists: still refused, never half-read. */
	char *p = pjoin(fx.sb.ws, bad);
	spit(p, "needle\n", 7);
	free(p);
	ck_assert_int_eq(cae_editor_view(fx.ed, bad, NULL, &r), 0);
	ck_assert(r.is_error);
	cae_editor_result_clear(&r);
	/* A directory view shows such a name with U+FFFD, as valid UTF-8. */
	ck_assert_int_eq(cae_editor_view(fx.ed, ".", NULL, &r), 0);
	ck_assert(!r.is_error);
	ck_assert_msg(strstr(r.text, "/workspace/project/bad\xef\xbf\xbd\xef\xbf\xbd.txt\n") !=
			  NULL,
		      "%s", r.text);
	cae_editor_result_clear(&r);
	/* JSON with an embedded NUL in the path. */
	expect_error(fx.ed, "{\"command\":\"view\",\"path\":\"a\\u0000b\"}", "NUL character");
	fx_free(&fx);
}
END_TEST

START_TEST(path_proc_self_root)
{
	/* Display root = the host path: the kind of setup where /proc/self/root/<ws>/... would
	 * name a file inside the workspace if resolved naively. */
	sandbox tmp;
	sandbox_init(&tmp);
	cae_error err = {0};
	fixture fx = {.sb = tmp};
	fx.ed = cae_editor_new(tmp.ws, tmp.ws, NULL, &err);
	ck_assert_ptr_nonnull(fx.ed);
	ws_write(&fx, "a.txt", "needle\n");
	char pj[4096];
	snprintf(pj, sizeof(pj), "\"/proc/self/root%s/a.txt\"", tmp.ws);
	all_commands_refuse_path(&fx, pj, "is outside the workspace");
	all_commands_refuse_path(&fx, "\"/proc/self/root/etc/passwd\"", "is outside the workspace");
	snprintf(pj, sizeof(pj), "\"/proc/self/root%s/secret.txt\"", tmp.outside);
	all_commands_refuse_path(&fx, pj, "is outside the workspace");
	/* A link inside the workspace to /proc/self/root (absolute) and one climbing to it. */
	char *l1 = pjoin(tmp.ws, "proc_root"), *l2 = pjoin(tmp.ws, "proc_up");
	ck_assert_int_eq(symlink("/proc/self/root", l1), 0);
	ck_assert_int_eq(symlink("../../../../../../../../../../proc/self/root", l2), 0);
	snprintf(pj, sizeof(pj), "\"proc_root%s/secret.txt\"", tmp.outside);
	all_commands_refuse_path(&fx, pj, "leads outside the workspace");
	snprintf(pj, sizeof(pj), "\"proc_up%s/secret.txt\"", tmp.outside);
	all_commands_refuse_path(&fx, pj, "leads outside the workspace");
	/* Magic links of our own process: /proc/self/fd/N inside would be a magic link. */
	char *l3 = pjoin(tmp.ws, "fdlink");
	ck_assert_int_eq(symlink("/proc/self/fd/0", l3), 0);
	all_commands_refuse_path(&fx, "\"fdlink\"", "leads outside the workspace");
	ws_assert(&fx, "a.txt", "needle\n");
	free(l1);
	free(l2);
	free(l3);
	fx_free(&fx);
}
END_TEST

START_TEST(path_symlink_loop)
{
	fixture fx;
	fx_init(&fx, NULL, DISPLAY_ROOT);
	char *a = pjoin(fx.sb.ws, "loop_a"), *b = pjoin(fx.sb.ws, "loop_b");
	ck_assert_int_eq(symlink("loop_b", a), 0);
	ck_assert_int_eq(symlink("loop_a", b), 0);
	expect_error(fx.ed, "{\"command\":\"view\",\"path\":\"loop_a\"}", "symbolic links");
	expect_error(fx.ed, "{\"command\":\"str_replace\",\"path\":\"loop_a\",\"old_str\":\"x\"}",
		     "symbolic links");
	expect_error(fx.ed, "{\"command\":\"view\",\"path\":\"loop_a/x\"}", "symbolic links");
	free(a);
	free(b);
	fx_free(&fx);
}
END_TEST

START_TEST(path_display_root_forms)
{
	fixture fx;
	fx_init(&fx, NULL, "/workspace/project/"); /* trailing slash normalised */
	ws_write(&fx, "a.txt", "hello\n");
	cae_editor_result r =
	    run(fx.ed, "{\"command\":\"view\",\"path\":\"/workspace/project//./a.txt\"}");
	ck_assert(!r.is_error);
	ck_assert_str_eq(r.path, "/workspace/project/a.txt");
	cae_editor_result_clear(&r);
	/* A sibling with the root as a string prefix is outside. */
	expect_error(fx.ed, "{\"command\":\"view\",\"path\":\"/workspace/projectX/a.txt\"}",
		     "outside the workspace");
	/* ".." inside the workspace is fine (resolved by the kernel: x must exist); above it is
	 * not. */
	char *x = pjoin(fx.sb.ws, "x");
	ck_assert_int_eq(mkdir(x, 0755), 0);
	free(x);
	expect_ok(fx.ed, "{\"command\":\"view\",\"path\":\"/workspace/project/x/../a.txt\"}");
	expect_error(fx.ed, "{\"command\":\"view\",\"path\":\"../ws/a.txt\"}",
		     "outside the workspace");
	fx_free(&fx);
	/* "/" as the display root: every absolute path maps into the workspace. */
	fixture f2;
	fx_init(&f2, NULL, "/");
	ws_write(&f2, "b.txt", "bee\n");
	r = run(f2.ed, "{\"command\":\"view\",\"path\":\"/b.txt\"}");
	ck_assert(!r.is_error);
	ck_assert_str_eq(r.path, "/b.txt");
	cae_editor_result_clear(&r);
	expect_error(f2.ed, "{\"command\":\"view\",\"path\":\"/etc/passwd\"}", "does not exist");
	fx_free(&f2);
}
END_TEST

/* -- content fidelity -- */

START_TEST(crlf_preserved)
{
	fixture fx;
	fx_init(&fx, NULL, DISPLAY_ROOT);
	ws_write(&fx, "w.txt", "one\r\ntwo\r\nthree\r\n");
	expect_ok(fx.ed,
		  "{\"command\":\"str_replace\",\"path\":\"w.txt\",\"old_str\":\"one\\ntwo\","
		  "\"new_str\":\"uno\\ndos\\nextra\"}");
	ws_assert(&fx, "w.txt", "uno\r\ndos\r\nextra\r\nthree\r\n");
	/* old_str given with CRLF works too. */
	expect_ok(fx.ed,
		  "{\"command\":\"str_replace\",\"path\":\"w.txt\",\"old_str\":\"dos\\r\\nextra\","
		  "\"new_str\":\"dos\"}");
	ws_assert(&fx, "w.txt", "uno\r\ndos\r\nthree\r\n");
	expect_ok(
	    fx.ed,
	    "{\"command\":\"insert\",\"path\":\"w.txt\",\"insert_line\":3,\"new_str\":\"four\"}");
	ws_assert(&fx, "w.txt", "uno\r\ndos\r\nthree\r\nfour\r\n");
	cae_editor_result r = run(fx.ed, "{\"command\":\"view\",\"path\":\"w.txt\"}");
	ck_assert_msg(strchr(r.text, '\r') == NULL, "%s", r.text);
	cae_editor_result_clear(&r);
	expect_ok(fx.ed, "{\"command\":\"undo_edit\",\"path\":\"w.txt\"}");
	ws_assert(&fx, "w.txt", "uno\r\ndos\r\nthree\r\n");
	/* A file with mixed endings is edited byte for byte. */
	ws_write(&fx, "m.txt", "a\r\nb\nc\r\n");
	expect_ok(fx.ed, "{\"command\":\"str_replace\",\"path\":\"m.txt\",\"old_str\":\"b\","
			 "\"new_str\":\"B\"}");
	ws_assert(&fx, "m.txt", "a\r\nB\nc\r\n");
	fx_free(&fx);
}
END_TEST

START_TEST(final_newline_tabs_literal)
{
	fixture fx;
	fx_init(&fx, NULL, DISPLAY_ROOT);
	ws_write(&fx, "n.txt", "a\n\tb\nc");
	expect_ok(fx.ed, "{\"command\":\"str_replace\",\"path\":\"n.txt\",\"old_str\":\"c\","
			 "\"new_str\":\"$& $1 $$ \\\\1 \\\\0 \\t\"}");
	ws_assert(&fx, "n.txt", "a\n\tb\n$& $1 $$ \\1 \\0 \t");
	expect_ok(
	    fx.ed,
	    "{\"command\":\"insert\",\"path\":\"n.txt\",\"insert_line\":3,\"new_str\":\"d\"}");
	ws_assert(&fx, "n.txt", "a\n\tb\n$& $1 $$ \\1 \\0 \t\nd");
	expect_ok(fx.ed, "{\"command\":\"insert\",\"path\":\"n.txt\",\"insert_line\":1,\"new_str\":"
			 "\"\\tx\\n\"}");
	ws_assert(&fx, "n.txt", "a\n\tx\n\tb\n$& $1 $$ \\1 \\0 \t\nd");
	fx_free(&fx);
}
END_TEST

START_TEST(mode_and_atomicity)
{
	fixture fx;
	fx_init(&fx, NULL, DISPLAY_ROOT);
	ws_write(&fx, "run.sh", "#!/bin/sh\necho hi\n");
	char *p = pjoin(fx.sb.ws, "run.sh");
	ck_assert_int_eq(chmod(p, 0750), 0);
	struct stat before, after;
	ck_assert_int_eq(stat(p, &before), 0);
	expect_ok(fx.ed, "{\"command\":\"str_replace\",\"path\":\"run.sh\",\"old_str\":\"hi\","
			 "\"new_str\":\"ho\"}");
	ck_assert_int_eq(stat(p, &after), 0);
	ck_assert_uint_eq(after.st_mode & 07777, 0750);
	/* Replaced by rename: a new inode, so readers never see a half-written file. */
	ck_assert(after.st_ino != before.st_ino);
	expect_ok(fx.ed, "{\"command\":\"undo_edit\",\"path\":\"run.sh\"}");
	ck_assert_int_eq(stat(p, &after), 0);
	ck_assert_uint_eq(after.st_mode & 07777, 0750);
	/* New files: 0644. */
	expect_ok(fx.ed, "{\"command\":\"create\",\"path\":\"new.txt\",\"file_text\":\"x\"}");
	char *q = pjoin(fx.sb.ws, "new.txt");
	ck_assert_int_eq(stat(q, &after), 0);
	ck_assert_uint_eq(after.st_mode & 07777, 0644);
	/* No temporary files are left behind. */
	char *m = manifest(fx.sb.ws, NULL);
	ck_assert_str_eq(m, "new.txt: x\nrun.sh: #!/bin/sh\\x0aecho hi\\x0a\n");
	free(m);
	free(p);
	free(q);
	fx_free(&fx);
}
END_TEST

START_TEST(symlink_inside_followed)
{
	fixture fx;
	fx_init(&fx, NULL, DISPLAY_ROOT);
	char *d = pjoin(fx.sb.ws, "real");
	ck_assert_int_eq(mkdir(d, 0755), 0);
	ws_write(&fx, "real/t.txt", "target\n");
	char *l = pjoin(fx.sb.ws, "link.txt"), *ld = pjoin(fx.sb.ws, "dirlink");
	ck_assert_int_eq(symlink("real/t.txt", l), 0);
	ck_assert_int_eq(symlink("real", ld), 0);
	expect_ok(fx.ed,
		  "{\"command\":\"str_replace\",\"path\":\"link.txt\",\"old_str\":\"target\","
		  "\"new_str\":\"edited\"}");
	ws_assert(&fx, "real/t.txt", "edited\n");
	struct stat st;
	ck_assert_int_eq(lstat(l, &st), 0);
	ck_assert(S_ISLNK(st.st_mode)); /* the link itself stays a link */
	/* Editing through the link records the history under the target's path. */
	expect_ok(fx.ed, "{\"command\":\"undo_edit\",\"path\":\"real/t.txt\"}");
	ws_assert(&fx, "real/t.txt", "target\n");
	expect_ok(fx.ed,
		  "{\"command\":\"str_replace\",\"path\":\"dirlink/t.txt\",\"old_str\":\"target\","
		  "\"new_str\":\"via dir\"}");
	ws_assert(&fx, "real/t.txt", "via dir\n");
	free(d);
	free(l);
	free(ld);
	fx_free(&fx);
}
END_TEST

/* -- undo bounds -- */

START_TEST(undo_depth_and_budget)
{
	cae_editor_limits lim;
	cae_editor_limits_default(&lim);
	lim.undo_depth = 3;
	fixture fx;
	fx_init(&fx, &lim, DISPLAY_ROOT);
	ws_write(&fx, "u.txt", "v0\n");
	char buf[256];
	for (int i = 0; i < 5; i++) {
		snprintf(buf, sizeof(buf),
			 "{\"command\":\"str_replace\",\"path\":\"u.txt\",\"old_str\":\"v%d\","
			 "\"new_str\":\"v%d\"}",
			 i, i + 1);
		expect_ok(fx.ed, buf);
	}
	ws_assert(&fx, "u.txt", "v5\n");
	for (int i = 4; i >= 2; i--) {
		expect_ok(fx.ed, "{\"command\":\"undo_edit\",\"path\":\"u.txt\"}");
		snprintf(buf, sizeof(buf), "v%d\n", i);
		ws_assert(&fx, "u.txt", buf);
	}
	expect_error(fx.ed, "{\"command\":\"undo_edit\",\"path\":\"u.txt\"}",
		     "No edit history found for /workspace/project/u.txt.");
	ck_assert_uint_eq(cae_editor_undo_bytes(fx.ed), 0);
	fx_free(&fx);

	/* Budget: each entry costs its bytes + 64 + the key; the oldest go first. */
	cae_editor_limits_default(&lim);
	lim.undo_budget_bytes = 600;
	fixture f2;
	fx_init(&f2, &lim, DISPLAY_ROOT);
	char content[201];
	memset(content, 'x', 199);
	content[199] = '\n';
	content[200] = 0;
	ws_write(&f2, "a.txt", content);
	ws_write(&f2, "b.txt", content);
	expect_ok(
	    f2.ed,
	    "{\"command\":\"insert\",\"path\":\"a.txt\",\"insert_line\":0,\"new_str\":\"a1\"}");
	expect_ok(
	    f2.ed,
	    "{\"command\":\"insert\",\"path\":\"b.txt\",\"insert_line\":0,\"new_str\":\"b1\"}");
	ck_assert_uint_le(cae_editor_undo_bytes(f2.ed), 600);
	expect_ok(
	    f2.ed,
	    "{\"command\":\"insert\",\"path\":\"b.txt\",\"insert_line\":0,\"new_str\":\"b2\"}");
	ck_assert_uint_le(cae_editor_undo_bytes(f2.ed), 600);
	/* a.txt's entry was the oldest: evicted. */
	expect_error(f2.ed, "{\"command\":\"undo_edit\",\"path\":\"a.txt\"}", "No edit history");
	expect_ok(f2.ed, "{\"command\":\"undo_edit\",\"path\":\"b.txt\"}");
	expect_ok(f2.ed, "{\"command\":\"undo_edit\",\"path\":\"b.txt\"}");
	ws_assert(&f2, "b.txt", content);
	/* A file larger than the whole budget: edited, and the answer says undo is not possible. */
	char big[1001];
	memset(big, 'y', 999);
	big[999] = '\n';
	big[1000] = 0;
	ws_write(&f2, "big.txt", big);
	cae_editor_result r =
	    run(f2.ed, "{\"command\":\"insert\",\"path\":\"big.txt\",\"insert_line\":1,"
		       "\"new_str\":\"z\"}");
	ck_assert(!r.is_error);
	ck_assert_msg(strstr(r.text, "cannot be undone") != NULL, "%s", r.text);
	cae_editor_result_clear(&r);
	expect_error(f2.ed, "{\"command\":\"undo_edit\",\"path\":\"big.txt\"}", "No edit history");
	ck_assert_uint_le(cae_editor_undo_bytes(f2.ed), 600);
	fx_free(&f2);

	/* Undo disabled. */
	cae_editor_limits_default(&lim);
	lim.undo_depth = 0;
	fixture f3;
	fx_init(&f3, &lim, DISPLAY_ROOT);
	ws_write(&f3, "c.txt", "c\n");
	expect_ok(
	    f3.ed,
	    "{\"command\":\"insert\",\"path\":\"c.txt\",\"insert_line\":0,\"new_str\":\"x\"}");
	expect_error(f3.ed, "{\"command\":\"undo_edit\",\"path\":\"c.txt\"}", "No edit history");
	fx_free(&f3);
}
END_TEST

START_TEST(file_size_limit)
{
	cae_editor_limits lim;
	cae_editor_limits_default(&lim);
	lim.max_file_bytes = 20;
	fixture fx;
	fx_init(&fx, &lim, DISPLAY_ROOT);
	ws_write(&fx, "s.txt", "0123456789\n");
	expect_error(fx.ed,
		     "{\"command\":\"str_replace\",\"path\":\"s.txt\",\"old_str\":\"0\","
		     "\"new_str\":\"0123456789abcdef\"}",
		     "over the limit of 20 bytes");
	ws_assert(&fx, "s.txt", "0123456789\n");
	ws_write(&fx, "l.txt", "0123456789012345678901234\n");
	expect_error(fx.ed, "{\"command\":\"view\",\"path\":\"l.txt\"}", "too large");
	expect_error(fx.ed,
		     "{\"command\":\"create\",\"path\":\"c.txt\",\"file_text\":"
		     "\"0123456789012345678901234\"}",
		     "too large");
	fx_free(&fx);
}
END_TEST

/* -- the bhouston compat shape -- */

START_TEST(compat_shape)
{
	fixture fx;
	fx_init(&fx, NULL, DISPLAY_ROOT);
	ws_write(&fx, "c.py", "print(1)\n");
	cae_editor_result r =
	    run(fx.ed, "{\"command\":\"view\",\"path\":\"/workspace/project/c.py\","
		       "\"description\":\"look at the file\"}");
	ck_assert(!r.is_error);
	char *t = cae_editor_result_compat_text(&r);
	json_t *j = json_loads(t, 0, NULL);
	ck_assert_ptr_nonnull(j);
	ck_assert_uint_eq(json_object_size(j), 3);
	ck_assert(json_is_true(json_object_get(j, "success")));
	ck_assert_str_eq(json_string_value(json_object_get(j, "message")), "File content:");
	ck_assert_str_eq(json_string_value(json_object_get(j, "content")), r.text);
	/* Keys in bhouston's order. */
	ck_assert_msg(strncmp(t, "{\"success\":true,\"message\":", 26) == 0, "%s", t);
	json_decref(j);
	free(t);
	cae_editor_result_clear(&r);

	r = run(fx.ed, "{\"command\":\"str_replace\",\"path\":\"c.py\",\"old_str\":\"nope\","
		       "\"new_str\":\"x\",\"description\":\"fix\"}");
	ck_assert(r.is_error);
	t = cae_editor_result_compat_text(&r);
	j = json_loads(t, 0, NULL);
	ck_assert(json_is_false(json_object_get(j, "success")));
	ck_assert_str_eq(json_string_value(json_object_get(j, "message")), r.text);
	ck_assert_ptr_null(json_object_get(j, "content"));
	json_decref(j);
	free(t);
	cae_editor_result_clear(&r);

	r = run(fx.ed, "{\"command\":\"insert\",\"path\":\"c.py\",\"insert_line\":1,"
		       "\"new_str\":\"print(2)\",\"description\":\"add\"}");
	ck_assert(!r.is_error);
	ck_assert_str_eq(r.summary,
			 "Successfully inserted text after line 1 in /workspace/project/c.py");
	ck_assert_int_eq(r.command, CAE_EDITOR_CMD_INSERT);
	cae_editor_result_clear(&r);
	fx_free(&fx);
}
END_TEST

/* -- a directory named x$(touch pwned) -- */

START_TEST(shell_metachar_names)
{
	fixture fx;
	fx_init(&fx, NULL, DISPLAY_ROOT);
	char *d = pjoin(fx.sb.ws, "x$(touch pwned)");
	ck_assert_int_eq(mkdir(d, 0755), 0);
	char *d2 = pjoin(fx.sb.ws, "x$(touch pwned)/`touch pwned`;touch pwned");
	ck_assert_int_eq(mkdir(d2, 0755), 0);
	cae_editor_result r = run(fx.ed, "{\"command\":\"view\",\"path\":\"/workspace/project\"}");
	ck_assert(!r.is_error);
	ck_assert_msg(strstr(r.text,
			     "/workspace/project/x$(touch pwned)\n"
			     "/workspace/project/x$(touch pwned)/`touch pwned`;touch pwned\n"),
		      "%s", r.text);
	cae_editor_result_clear(&r);
	expect_ok(fx.ed, "{\"command\":\"view\",\"path\":\"x$(touch pwned)\"}");
	expect_ok(fx.ed, "{\"command\":\"create\",\"path\":\"x$(touch "
			 "pwned)/f.txt\",\"file_text\":\"$(touch pwned)\\n\"}");
	expect_ok(fx.ed, "{\"command\":\"str_replace\",\"path\":\"x$(touch "
			 "pwned)/f.txt\",\"old_str\":\"$(touch pwned)\","
			 "\"new_str\":\"`touch pwned`\"}");
	ws_assert(&fx, "x$(touch pwned)/f.txt", "`touch pwned`\n");
	char *m = manifest(fx.sb.ws, NULL);
	ck_assert_msg(strstr(m, "pwned:") == NULL && strncmp(m, "pwned", 5) != 0, "%s", m);
	free(m);
	free(d);
	free(d2);
	fx_free(&fx);
}
END_TEST

/* -- bigger inputs -- */

START_TEST(large_file_edit)
{
	fixture fx;
	fx_init(&fx, NULL, DISPLAY_ROOT);
	size_t n = 10 * 1024 * 1024;
	char *big = malloc(n + 1);
	size_t o = 0;
	for (size_t line = 0; o + 64 < n; line++)
		o += (size_t)snprintf(big + o, 64, "line %zu of a large file, some filler text\n",
				      line);
	big[o] = 0;
	char *p = pjoin(fx.sb.ws, "big.txt");
	spit(p, big, o);
	expect_ok(
	    fx.ed,
	    "{\"command\":\"str_replace\",\"path\":\"big.txt\",\"old_str\":\"line 123456 of\","
	    "\"new_str\":\"LINE 123456 OF\"}");
	cae_editor_result r = run(
	    fx.ed, "{\"command\":\"view\",\"path\":\"big.txt\",\"view_range\":[123457,123457]}");
	ck_assert_str_eq(r.text,
			 "Here's the result of running `cat -n` on /workspace/project/big.txt:\n"
			 "123457\tLINE 123456 OF a large file, some filler text\n");
	cae_editor_result_clear(&r);
	/* The whole file is clipped at 16,000 characters with a hint. */
	r = run(fx.ed, "{\"command\":\"view\",\"path\":\"big.txt\"}");
	ck_assert_uint_lt(strlen(r.text), 17000);
	ck_assert_msg(strstr(r.text, "<response clipped><NOTE>") != NULL, "%s", r.text);
	ck_assert_msg(strstr(r.text, "`view_range`") != NULL, "%s", r.text);
	cae_editor_result_clear(&r);
	expect_ok(fx.ed, "{\"command\":\"undo_edit\",\"path\":\"big.txt\"}");
	size_t len;
	char *c = slurp(p, &len);
	ck_assert_uint_eq(len, o);
	ck_assert(memcmp(c, big, o) == 0);
	free(c);
	free(big);
	free(p);
	fx_free(&fx);
}
END_TEST

/* -- large files: read, checked and searched in pieces of 256 KiB, written in 512 KiB -- */

#define PIECE (256 * 1024)

/* n bytes of numbered lines ("l<no> filler...\n"), the last line complete. */
static char *make_lines(size_t n, size_t *len)
{
	char *b = malloc(n + 128);
	size_t o = 0;
	for (size_t line = 1; o < n; line++)
		o += (size_t)snprintf(b + o, 128, "l%zu some filler text for a line\n", line);
	*len = o;
	return b;
}

static size_t nl_before(const char *s, size_t off)
{
	size_t c = 0;
	for (size_t i = 0; i < off; i++)
		c += s[i] == '\n';
	return c;
}

static cae_editor_result replace(cae_editor *ed, const char *path, const char *old, const char *new)
{
	cae_editor_result r;
	ck_assert_int_eq(cae_editor_str_replace(ed, path, old, strlen(old), new, strlen(new), &r),
			 0);
	ck_assert_ptr_nonnull(r.text);
	return r;
}

START_TEST(large_file_pieces)
{
	fixture fx;
	fx_init(&fx, NULL, DISPLAY_ROOT);
	size_t len;
	char *big = make_lines(2 * 1024 * 1024, &len);
	/* A marker across the first piece boundary, a 4-byte character across the second. */
	size_t at = PIECE - 3;
	memcpy(big + at, "<MARK>", 6);
	memcpy(big + 2 * PIECE - 2, "\xf0\x9f\x98\x80", 4);
	char *p = pjoin(fx.sb.ws, "big.txt");
	spit(p, big, len);
	cae_editor_result r = replace(fx.ed, "big.txt", "<MARK>", "[replaced]");
	ck_assert_msg(!r.is_error, "%s", r.text);
	/* The snippet is numbered from 4 lines above the marker's line. */
	size_t line = nl_before(big, at) + 1;
	char want[64];
	snprintf(want, sizeof(want), "\n%6zu\t", line - 4);
	ck_assert_msg(strstr(r.text, want) != NULL, "no line %zu in %s", line - 4, r.text);
	snprintf(want, sizeof(want), "\n%6zu\t", line - 5);
	ck_assert_msg(strstr(r.text, want) == NULL, "line %zu in %s", line - 5, r.text);
	ck_assert_msg(strstr(r.text, "[replaced]") != NULL, "%s", r.text);
	cae_editor_result_clear(&r);
	/* Byte for byte what was asked, across the 512 KiB write pieces too. */
	size_t got_len;
	char *got = slurp(p, &got_len);
	ck_assert_uint_eq(got_len, len + 4);
	ck_assert(memcmp(got, big, at) == 0);
	ck_assert(memcmp(got + at, "[replaced]", 10) == 0);
	ck_assert(memcmp(got + at + 10, big + at + 6, len - at - 6) == 0);
	free(got);

	/* Two occurrences, each across a piece boundary: both lines listed. */
	memcpy(big + 3 * PIECE - 4, "<TWO>", 5);
	memcpy(big + 5 * PIECE - 1, "<TWO>", 5);
	spit(p, big, len);
	r = replace(fx.ed, "big.txt", "<TWO>", "x");
	ck_assert(r.is_error);
	snprintf(want, sizeof(want), "in lines [%zu, %zu]", nl_before(big, 3 * PIECE - 4) + 1,
		 nl_before(big, 5 * PIECE - 1) + 1);
	ck_assert_msg(strstr(r.text, want) != NULL, "%s (wanted %s)", r.text, want);
	cae_editor_result_clear(&r);
	/* Occurrences overlapping the first one do not count (as memmem from its end): "zyz"
	 * is in "zyzyz" once, here across a piece boundary. */
	char *orig = make_lines(2 * 1024 * 1024, &len);
	memcpy(big + 3 * PIECE - 4, orig + 3 * PIECE - 4, 5);
	memcpy(big + 5 * PIECE - 1, orig + 5 * PIECE - 1, 5);
	free(orig);
	memcpy(big + 3 * PIECE - 2, "zyzyz", 5);
	spit(p, big, len);
	r = replace(fx.ed, "big.txt", "zyz", "Q");
	ck_assert_msg(!r.is_error, "%s", r.text);
	cae_editor_result_clear(&r);
	got = slurp(p, &got_len);
	ck_assert_uint_eq(got_len, len - 2);
	ck_assert(memcmp(got, big, 3 * PIECE - 2) == 0);
	ck_assert(memcmp(got + 3 * PIECE - 2, "Qyz", 3) == 0);
	ck_assert(memcmp(got + 3 * PIECE + 1, big + 3 * PIECE + 3, len - 3 * PIECE - 3) == 0);
	free(got);

	/* An invalid byte just after a piece boundary, then a NUL far after it. */
	memcpy(big + 2 * PIECE - 2, "ab\xff", 3);
	spit(p, big, len);
	r = replace(fx.ed, "big.txt", "l1 ", "L1 ");
	ck_assert(r.is_error);
	snprintf(want, sizeof(want), "on line %zu, at offset %zu", nl_before(big, 2 * PIECE) + 1,
		 (size_t)2 * PIECE);
	ck_assert_msg(strstr(r.text, want) != NULL, "%s (wanted %s)", r.text, want);
	cae_editor_result_clear(&r);
	big[7 * PIECE + 5] = '\0';
	spit(p, big, len);
	r = replace(fx.ed, "big.txt", "l1 ", "L1 ");
	ck_assert(r.is_error);
	snprintf(want, sizeof(want), "NUL byte at offset %zu", (size_t)7 * PIECE + 5);
	ck_assert_msg(strstr(r.text, want) != NULL, "%s (wanted %s)", r.text, want);
	cae_editor_result_clear(&r);
	free(big);
	free(p);
	fx_free(&fx);
}
END_TEST

START_TEST(large_crlf_edit)
{
	fixture fx;
	fx_init(&fx, NULL, DISPLAY_ROOT);
	size_t lf_len;
	char *lf = make_lines(2 * 1024 * 1024, &lf_len);
	memcpy(lf + PIECE, "<M>", 3);
	/* The same text with CRLF endings. */
	char *crlf = malloc(lf_len * 2);
	size_t n = 0;
	for (size_t i = 0; i < lf_len; i++) {
		if (lf[i] == '\n')
			crlf[n++] = '\r';
		crlf[n++] = lf[i];
	}
	char *p = pjoin(fx.sb.ws, "w.txt");
	spit(p, crlf, n);
	cae_editor_result r = replace(fx.ed, "w.txt", "<M>", "a\nb");
	ck_assert_msg(!r.is_error, "%s", r.text);
	snprintf(crlf, 64, "\n%6zu\t", nl_before(lf, PIECE) + 2); /* the line "b" is shown */
	ck_assert_msg(strstr(r.text, crlf) != NULL, "%s", r.text);
	ck_assert_msg(strchr(r.text, '\r') == NULL, "%s", r.text);
	cae_editor_result_clear(&r);
	/* What the file must now be: the CRLF text with "<M>" as "a\r\nb". */
	size_t k = 0;
	for (size_t i = 0; i < lf_len; i++) {
		if (i == PIECE) {
			memcpy(crlf + k, "a\r\nb", 4);
			k += 4;
			i += 2;
			continue;
		}
		if (lf[i] == '\n')
			crlf[k++] = '\r';
		crlf[k++] = lf[i];
	}
	size_t got_len;
	char *got = slurp(p, &got_len);
	ck_assert_uint_eq(got_len, k);
	ck_assert(memcmp(got, crlf, k) == 0);
	free(got);
	free(crlf);
	free(lf);
	free(p);
	fx_free(&fx);
}
END_TEST

START_TEST(long_old_str)
{
	/* An old_str of 700 KB, longer than a read piece (searched once enough has been read). */
	fixture fx;
	fx_init(&fx, NULL, DISPLAY_ROOT);
	size_t len;
	char *big = make_lines(2 * 1024 * 1024, &len);
	char *p = pjoin(fx.sb.ws, "long.txt");
	spit(p, big, len);
	size_t at = PIECE + 1000, olen = 700 * 1000;
	cae_editor_result r;
	ck_assert_int_eq(cae_editor_str_replace(fx.ed, "long.txt", big + at, olen, "X", 1, &r), 0);
	ck_assert_msg(!r.is_error, "%s", r.text);
	cae_editor_result_clear(&r);
	size_t got_len;
	char *got = slurp(p, &got_len);
	ck_assert_uint_eq(got_len, len - olen + 1);
	ck_assert(memcmp(got, big, at) == 0);
	ck_assert_int_eq(got[at], 'X');
	ck_assert(memcmp(got + at + 1, big + at + olen, len - at - olen) == 0);
	free(got);
	free(big);
	free(p);
	fx_free(&fx);
}
END_TEST

static int count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	ck_assert_ptr_nonnull(d);
	int n = 0;
	while (readdir(d))
		n++;
	closedir(d);
	return n;
}

/* The old version of an edited large file is closed on a thread of its own: wait (bounded)
 * until every fd opened since `before` is closed again. */
static void assert_fds_back_to(int before)
{
	for (int i = 0; i < 1000 && count_fds() > before; i++)
		usleep(10 * 1000);
	ck_assert_int_eq(count_fds(), before);
}

START_TEST(large_buffers_reused)
{
	int fds_before = count_fds();
	/* Edits of a 2 MB file with room for two undo entries: older entries are dropped and
	 * their buffers read into again; every state must still come back with undo. */
	cae_editor_limits lim;
	cae_editor_limits_default(&lim);
	lim.undo_budget_bytes = 5u << 20;
	fixture fx;
	fx_init(&fx, &lim, DISPLAY_ROOT);
	size_t len;
	char *big = make_lines(2 * 1024 * 1024, &len);
	memcpy(big + len / 2, "<00>", 4);
	char *p = pjoin(fx.sb.ws, "r.txt");
	spit(p, big, len);
	char states[6][5];
	for (int i = 0; i < 6; i++) {
		snprintf(states[i], sizeof(states[i]), "<%02d>", i);
		if (i == 0)
			continue;
		cae_editor_result r = replace(fx.ed, "r.txt", states[i - 1], states[i]);
		ck_assert_msg(!r.is_error, "%s", r.text);
		cae_editor_result_clear(&r);
		/* A failed edit in between (its buffer is let go of too). */
		r = replace(fx.ed, "r.txt", "no such text", "x");
		ck_assert(r.is_error);
		cae_editor_result_clear(&r);
	}
	ck_assert_uint_le(cae_editor_undo_bytes(fx.ed), lim.undo_budget_bytes);
	/* Only the workspace directory stays open. */
	assert_fds_back_to(fds_before + 1);
	for (int i = 4; i >= 3; i--) {
		expect_ok(fx.ed, "{\"command\":\"undo_edit\",\"path\":\"r.txt\"}");
		size_t got_len;
		char *got = slurp(p, &got_len);
		ck_assert_uint_eq(got_len, len);
		memcpy(big + len / 2, states[i], 4);
		ck_assert_msg(memcmp(got, big, len) == 0, "state %d", i);
		free(got);
	}
	expect_error(fx.ed, "{\"command\":\"undo_edit\",\"path\":\"r.txt\"}",
		     "No edit history found");
	/* Undo disabled: every buffer is let go of at once, edits go on. */
	cae_editor_limits none = lim;
	none.undo_depth = 0;
	cae_editor_free(fx.ed);
	fx.ed = cae_editor_new(fx.sb.ws, DISPLAY_ROOT, &none, NULL);
	ck_assert_ptr_nonnull(fx.ed);
	for (int i = 3; i > 0; i--) {
		cae_editor_result r = replace(fx.ed, "r.txt", states[i], states[i - 1]);
		ck_assert_msg(!r.is_error, "%s", r.text);
		ck_assert_msg(strstr(r.text, "cannot be undone") != NULL, "%s", r.text);
		cae_editor_result_clear(&r);
	}
	size_t got_len;
	char *got = slurp(p, &got_len);
	memcpy(big + len / 2, "<00>", 4);
	ck_assert_uint_eq(got_len, len);
	ck_assert(memcmp(got, big, len) == 0);
	free(got);
	free(big);
	free(p);
	fx_free(&fx);
	assert_fds_back_to(fds_before);
}
END_TEST

START_TEST(special_files)
{
	fixture fx;
	fx_init(&fx, NULL, DISPLAY_ROOT);
	char *f = pjoin(fx.sb.ws, "fifo");
	ck_assert_int_eq(mkfifo(f, 0644), 0);
	/* Must not block on the FIFO. */
	expect_error(fx.ed, "{\"command\":\"view\",\"path\":\"fifo\"}", "is a FIFO");
	expect_error(
	    fx.ed, "{\"command\":\"insert\",\"path\":\"fifo\",\"insert_line\":0,\"new_str\":\"x\"}",
	    "is a FIFO");
	expect_error(fx.ed, "{\"command\":\"create\",\"path\":\"fifo\",\"file_text\":\"x\"}",
		     "File already exists");
	free(f);
	fx_free(&fx);
}
END_TEST

START_TEST(bad_editor_args)
{
	cae_error err = {0};
	ck_assert_ptr_null(cae_editor_new("/nonexistent/dir/xyz", "/w", NULL, &err));
	ck_assert_int_eq(err.code, -ENOENT);
	ck_assert_ptr_null(cae_editor_new("/tmp", "relative", NULL, &err));
	ck_assert_int_eq(err.code, -EINVAL);
	cae_editor_limits lim;
	cae_editor_limits_default(&lim);
	lim.max_output_chars = 0;
	ck_assert_ptr_null(cae_editor_new("/tmp", "/w", &lim, &err));
	cae_editor_free(NULL);
	cae_editor_result_clear(NULL);
}
END_TEST

/* ------------------------------------------------------------------------------------------ */

static int list_cases(const char *dir)
{
	struct dirent **names;
	int n = scandir(dir, &names, NULL, alphasort);
	if (n < 0)
		return -1;
	cases = calloc((size_t)n, sizeof(char *));
	for (int i = 0; i < n; i++) {
		if (names[i]->d_name[0] != '.') {
			char *p = cae__path_join(dir, names[i]->d_name);
			char *a = cae__path_join(p, "args.json");
			if (access(a, F_OK) == 0)
				cases[ncases++] = strdup(names[i]->d_name);
			free(p);
			free(a);
		}
		free(names[i]);
	}
	free(names);
	return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Crash consistency: SIGKILL at every kill point of a sequence of edits */

static const char *const KILL_SEQ[] = {
    "{\"command\":\"create\",\"path\":\"n1.txt\",\"file_text\":\"new one\\n\"}",
    "{\"command\":\"create\",\"path\":\"deep/er/n2.txt\",\"file_text\":\"two\\n\"}",
    "{\"command\":\"str_replace\",\"path\":\"a.txt\",\"old_str\":\"alpha\",\"new_str\":\"ALPHA\"}",
    "{\"command\":\"insert\",\"path\":\"b.txt\",\"insert_line\":1,\"new_str\":\"inserted\"}",
    "{\"command\":\"str_replace\",\"path\":\"crlf.txt\",\"old_str\":\"two\",\"new_str\":\"TWO\"}",
    "{\"command\":\"undo_edit\",\"path\":\"a.txt\"}",
    "{\"command\":\"str_replace\",\"path\":\"sub/c.txt\",\"old_str\":\"gamma\",\"new_str\":\"G\"}",
    "{\"command\":\"insert\",\"path\":\"a.txt\",\"insert_line\":0,\"new_str\":\"top\"}",
    "{\"command\":\"undo_edit\",\"path\":\"n1.txt\"}",
    "{\"command\":\"undo_edit\",\"path\":\"b.txt\"}",
    "{\"command\":\"str_replace\",\"path\":\"run.sh\",\"old_str\":\"hi\",\"new_str\":\"hello\"}",
    "{\"command\":\"insert\",\"path\":\"big.txt\",\"insert_line\":1000,\"new_str\":\"middle\"}",
    "{\"command\":\"str_replace\",\"path\":\"big.txt\",\"old_str\":\"L05000\",\"new_str\":\"X\"}",
    "{\"command\":\"undo_edit\",\"path\":\"big.txt\"}",
    "{\"command\":\"create\",\"path\":\"n1.txt\",\"file_text\":\"again\\n\"}",
    "{\"command\":\"str_replace\",\"path\":\"n1.txt\",\"old_str\":\"again\",\"new_str\":\"AGAIN\"}",
    "{\"command\":\"undo_edit\",\"path\":\"n1.txt\"}",
    "{\"command\":\"undo_edit\",\"path\":\"n1.txt\"}",
    "{\"command\":\"str_replace\",\"path\":\"deep/er/"
    "n2.txt\",\"old_str\":\"two\",\"new_str\":\"2\"}",
    "{\"command\":\"insert\",\"path\":\"crlf.txt\",\"insert_line\":2,\"new_str\":\"three\"}",
    "{\"command\":\"undo_edit\",\"path\":\"crlf.txt\"}",
    "{\"command\":\"undo_edit\",\"path\":\"crlf.txt\"}",
    "{\"command\":\"str_replace\",\"path\":\"a.txt\",\"old_str\":\"top\",\"new_str\":\"TOP\"}",
    "{\"command\":\"undo_edit\",\"path\":\"sub/c.txt\"}",
    "{\"command\":\"str_replace\",\"path\":\"link.txt\",\"old_str\":\"TOP\",\"new_str\":\"via\"}",
    "{\"command\":\"create\",\"path\":\"sub/n3.txt\",\"file_text\":\"three\\n\"}",
    "{\"command\":\"insert\",\"path\":\"sub/n3.txt\",\"insert_line\":1,\"new_str\":\"four\"}",
    "{\"command\":\"undo_edit\",\"path\":\"a.txt\"}",
};
#define KILL_SEQ_N ARRAY_SIZE(KILL_SEQ)

static void kill_ws_reset(const char *ws)
{
	ck_assert_int_eq(cae__rm_rf(ws), 0);
	ck_assert_int_eq(cae__mkdir_p(ws, 0755), 0);
	char *sub = pjoin(ws, "sub");
	ck_assert_int_eq(cae__mkdir_p(sub, 0755), 0);
	free(sub);
	tu_write(ws, "a.txt", "alpha\nbeta\n");
	tu_write(ws, "b.txt", "one\ntwo\nthree\n");
	tu_write(ws, "crlf.txt", "one\r\ntwo\r\n");
	tu_write(ws, "sub/c.txt", "gamma\ndelta\n");
	tu_write(ws, "run.sh", "#!/bin/sh\necho hi\n");
	char *p = pjoin(ws, "run.sh");
	ck_assert_int_eq(chmod(p, 0751), 0);
	free(p);
	p = pjoin(ws, "link.txt");
	ck_assert_int_eq(symlink("a.txt", p), 0);
	free(p);
	cae_buf big;
	cae__buf_init(&big, SIZE_MAX - 1);
	for (int i = 0; i < 20000; i++)
		ck_assert_int_eq(
		    cae__buf_printf(&big, "L%05d some text to make the file larger than a piece\n",
				    i),
		    0);
	tu_write(ws, "big.txt", big.data);
	cae__buf_clear(&big);
}

typedef struct kill_job {
	const char *ws;
	int progress; /* write end: one byte per finished edit */
} kill_job;

static int kill_job_run(void *arg)
{
	kill_job *j = arg;
	cae_editor *ed = cae_editor_new(j->ws, DISPLAY_ROOT, NULL, NULL);
	if (!ed)
		return 1;
	for (size_t i = 0; i < KILL_SEQ_N; i++) {
		json_t *a = json_loads(KILL_SEQ[i], 0, NULL);
		cae_editor_result r;
		if (!a || cae_editor_call(ed, a, &r) < 0 || r.is_error)
			return 2;
		cae_editor_result_clear(&r);
		json_decref(a);
		if (write(j->progress, "x", 1) != 1)
			return 3;
	}
	cae_editor_free(ed);
	return 0;
}

static int recover_job(void *arg)
{
	cae_editor *ed = cae_editor_new(arg, DISPLAY_ROOT, NULL, NULL);
	cae_editor_free(ed);
	return ed ? 0 : 1;
}

START_TEST(sigkill_every_edit_point)
{
	/* The states after 0, 1, ... edits, from an uninterrupted run. */
	sandbox sb;
	sandbox_init(&sb);
	char *states[KILL_SEQ_N + 1];
	kill_ws_reset(sb.ws);
	int temps = 0;
	states[0] = cu_state(sb.ws, &temps);
	cae_editor *ed = cae_editor_new(sb.ws, DISPLAY_ROOT, NULL, NULL);
	ck_assert_ptr_nonnull(ed);
	for (size_t i = 0; i < KILL_SEQ_N; i++) {
		expect_ok(ed, KILL_SEQ[i]);
		states[i + 1] = cu_state(sb.ws, &temps);
		ck_assert_int_eq(temps, 0);
	}
	cae_editor_free(ed);
	/* Killed at the n-th kill point, for every n until the sequence finishes: once
	 * recovered (the next editor opened on the workspace; every third time after a
	 * recovery that is itself killed), the workspace is the state after the edits reported
	 * done, or after the next one: every file old or new, no temporary file, no journal. */
	long n = 1, killed = 0, newer = 0;
	for (;; n++) {
		kill_ws_reset(sb.ws);
		int fds[2];
		ck_assert_int_eq(pipe(fds), 0);
		kill_job j = {sb.ws, fds[1]};
		int k = cu_run_killed(n, kill_job_run, &j);
		close(fds[1]);
		char buf[KILL_SEQ_N + 1];
		ssize_t done = read(fds[0], buf, sizeof(buf));
		close(fds[0]);
		ck_assert_int_ge(done, 0);
		if (!k) {
			ck_assert_int_eq(done, (ssize_t)KILL_SEQ_N);
			break;
		}
		killed++;
		if (n % 3 == 0)
			(void)cu_run_killed(n % 5 + 1, recover_job, sb.ws);
		ck_assert_int_eq(recover_job(sb.ws), 0);
		char *now = cu_state(sb.ws, &temps);
		ck_assert_msg(temps == 0, "kill point %ld: temporary files left:\n%s", n, now);
		ck_assert_msg(cu_journals(sb.ws) == 0, "kill point %ld: a journal is left", n);
		bool old = strcmp(now, states[done]) == 0;
		bool next = (size_t)done < KILL_SEQ_N && strcmp(now, states[done + 1]) == 0;
		ck_assert_msg(old || next, "kill point %ld after %zd edits: state\n%s\nwanted\n%s",
			      n, done, now, states[done]);
		newer += next && !old;
		free(now);
	}
	/* hundreds of kill points, some landing after an edit's rename */
	fprintf(stderr, "sigkill_every_edit_point: %ld kill points, %ld found the newer state\n",
		killed, newer);
	ck_assert_int_ge(killed, 200);
	ck_assert_int_gt(newer, 0);
	for (size_t i = 0; i <= KILL_SEQ_N; i++)
		free(states[i]);
	sandbox_free(&sb);
}
END_TEST

START_TEST(undo_refuses_external_change)
{
	fixture fx;
	fx_init(&fx, NULL, DISPLAY_ROOT);
	tu_write(fx.sb.ws, "u.txt", "one\ntwo\n");
	expect_ok(fx.ed, "{\"command\":\"str_replace\",\"path\":\"u.txt\",\"old_str\":\"one\","
			 "\"new_str\":\"ONE\"}");
	/* changed by someone else (same size: only the content tells) */
	tu_write(fx.sb.ws, "u.txt", "ONE\nTWO\n");
	expect_error(
	    fx.ed, "{\"command\":\"undo_edit\",\"path\":\"u.txt\"}",
	    "/workspace/project/u.txt changed since the last edit (by a command or another "
	    "process); undo_edit would discard that change");
	char *p = pjoin(fx.sb.ws, "u.txt");
	size_t len;
	char *got = slurp(p, &len);
	ck_assert_str_eq(got, "ONE\nTWO\n");
	free(got);
	/* the history is kept: once the file holds the edit's result again, undo works */
	tu_write(fx.sb.ws, "u.txt", "ONE\ntwo\n");
	expect_ok(fx.ed, "{\"command\":\"undo_edit\",\"path\":\"u.txt\"}");
	got = slurp(p, &len);
	ck_assert_str_eq(got, "one\ntwo\n");
	free(got);
	/* a created file removed by someone else is not brought back */
	expect_ok(fx.ed, "{\"command\":\"create\",\"path\":\"c.txt\",\"file_text\":\"c\\n\"}");
	expect_ok(fx.ed, "{\"command\":\"str_replace\",\"path\":\"c.txt\",\"old_str\":\"c\","
			 "\"new_str\":\"d\"}");
	char *c = pjoin(fx.sb.ws, "c.txt");
	ck_assert_int_eq(unlink(c), 0);
	expect_error(fx.ed, "{\"command\":\"undo_edit\",\"path\":\"c.txt\"}",
		     "was removed since the last edit");
	ck_assert_int_ne(access(c, F_OK), 0);
	free(c);
	free(p);
	fx_free(&fx);
}
END_TEST

START_TEST(leftover_staged_file_recovered)
{
	/* A journal left by a dead process (forged here as a killed one would leave it): the
	 * next editor removes its staged file; a journal of a live transaction is left alone. */
	sandbox sb;
	sandbox_init(&sb);
	tu_write(sb.ws, "f.txt", "old\n");
	tu_write(sb.ws, ".cae-tmp-1-1-1", "half");
	char *jd = pjoin(sb.tmp, CAE_JOURNAL_DIR);
	ck_assert_int_eq(cae__mkdir_p(jd, 0700), 0);
	/* the journal name starts with the hash of the workspace's real path */
	char real[4096];
	ck_assert_ptr_nonnull(realpath(sb.ws, real));
	char name[128];
	snprintf(name, sizeof(name), "%016llx.1.1.1.journal",
		 (unsigned long long)cu_hash(real, strlen(real)));
	char *jp = pjoin(jd, name);
	FILE *f = fopen(jp, "w");
	ck_assert_ptr_nonnull(f);
	fprintf(f, "cae-journal 1 %s\nS . f.txt .cae-tmp-1-1-1\n", real);
	fclose(f);
	cae_editor *ed = cae_editor_new(sb.ws, DISPLAY_ROOT, NULL, NULL);
	ck_assert_ptr_nonnull(ed);
	int temps = 0;
	char *st = cu_state(sb.ws, &temps);
	ck_assert_int_eq(temps, 0);
	ck_assert_int_ne(access(jp, F_OK), 0);
	char *p = pjoin(sb.ws, "f.txt");
	size_t len;
	char *got = slurp(p, &len);
	ck_assert_str_eq(got, "old\n");
	free(got);
	free(p);
	free(st);
	cae_editor_free(ed);
	free(jp);
	free(jd);
	sandbox_free(&sb);
}
END_TEST

START_TEST(forged_journal_stays_inside)
{
	/* Journals an agent could forge when the journal directory is reachable: nothing outside
	 * the workspace is touched, a malformed journal is kept (for a person) and does nothing,
	 * and the editor goes on working. */
	sandbox sb;
	sandbox_init(&sb);
	tu_write(sb.ws, "f.txt", "keep\n");
	tu_write(sb.ws, "notcae", "keep too\n");
	char *lnk = pjoin(sb.ws, "out");
	ck_assert_int_eq(symlink("../outside/dir", lnk), 0);
	free(lnk);
	char real[4096];
	ck_assert_ptr_nonnull(realpath(sb.ws, real));
	char *jd = pjoin(sb.tmp, CAE_JOURNAL_DIR);
	ck_assert_int_eq(cae__mkdir_p(jd, 0700), 0);
	static const char *const bodies[] = {
	    "S .. secret.txt .cae-tmp-x\nC\n",	       /* ".." as the directory */
	    "S . ../outside/secret.txt .cae-x\n",      /* a name with '/' */
	    "S . f.txt notcae\nC\n",		       /* a staged name not ours */
	    "X out f.txt\nX out a.txt\nC\n",	       /* through a symlink leading out */
	    "D ../outside/dir\n",		       /* a directory outside */
	    "B . f.txt ../../outside/secret.txt\nA\n", /* a backup outside */
	};
	char *paths[ARRAY_SIZE(bodies)];
	for (size_t i = 0; i < ARRAY_SIZE(bodies); i++) {
		char name[128];
		snprintf(name, sizeof(name), "%016llx.1.%zu.1.journal",
			 (unsigned long long)cu_hash(real, strlen(real)), i);
		paths[i] = pjoin(jd, name);
		FILE *f = fopen(paths[i], "w");
		ck_assert_ptr_nonnull(f);
		fprintf(f, "cae-journal 1 %s\n%s", real, bodies[i]);
		fclose(f);
	}
	cae_editor *ed = cae_editor_new(sb.ws, DISPLAY_ROOT, NULL, NULL);
	ck_assert_ptr_nonnull(ed);
	sandbox_check_outside(&sb);
	char *p = pjoin(sb.ws, "f.txt");
	size_t len;
	char *got = slurp(p, &len);
	ck_assert_str_eq(got, "keep\n");
	free(got);
	free(p);
	p = pjoin(sb.ws, "notcae");
	got = slurp(p, &len);
	ck_assert_str_eq(got, "keep too\n");
	free(got);
	free(p);
	/* malformed journals, and the one whose steps cannot be done beneath the workspace,
	 * stay for a person to look at */
	for (size_t i = 0; i < ARRAY_SIZE(bodies); i++)
		ck_assert_msg(access(paths[i], F_OK) == 0, "journal %zu removed", i);
	expect_ok(ed, "{\"command\":\"str_replace\",\"path\":\"f.txt\",\"old_str\":\"keep\","
		      "\"new_str\":\"kept\"}");
	cae_editor_free(ed);
	for (size_t i = 0; i < ARRAY_SIZE(bodies); i++)
		free(paths[i]);
	free(jd);
	sandbox_free(&sb);
}
END_TEST

/* Protected paths: create, str_replace, insert and undo_edit at or below .git/hooks are
 * refused however the path is spelt (".", "//", ASCII case, an absolute path, a link to the
 * directory, to its parent, to a file in it, a chain of links), nothing is made on the way,
 * the file stays as it was; viewing stays allowed, and a neighbour (".git/hooksX",
 * ".git/config") is writable. */
START_TEST(protected_paths_refused)
{
	static const char *const prot[] = {".git/hooks"};
	cae_editor_limits lim;
	cae_editor_limits_default(&lim);
	lim.protected_paths = prot;
	lim.n_protected_paths = 1;
	fixture fx;
	fx_init(&fx, &lim, DISPLAY_ROOT);
	tu_sh(
	    "cd '%s' && mkdir -p .git/hooks sub && printf 'old\\n' > .git/hooks/pre-commit && "
	    "ln -s .git/hooks hl && ln -s .git g && ln -s .git/hooks/pre-commit f && "
	    "ln -s hl chain && ln -s ../.git/hooks sub/up && ln -s .git/hooks/post-merge dangling",
	    fx.sb.ws);
	static const char *const creates[] = {
	    ".git/hooks/post-commit",
	    ".git/./hooks/post-commit",
	    ".git//hooks/post-commit",
	    ".GIT/hooks/post-commit",
	    ".git/HOOKS/post-commit",
	    DISPLAY_ROOT "/.git/hooks/post-commit",
	    "sub/../.git/hooks/post-commit",
	    "hl/post-commit",
	    "g/hooks/post-commit",
	    "chain/post-commit",
	    "sub/up/post-commit",
	    "dangling",
	    ".git/hooks/new/dir/x",
	};
	for (size_t i = 0; i < ARRAY_SIZE(creates); i++) {
		char json[512];
		snprintf(json, sizeof(json),
			 "{\"command\":\"create\",\"path\":\"%s\",\"file_text\":\"pwned\\n\"}",
			 creates[i]);
		expect_error(fx.ed, json, "is protected");
	}
	static const char *const existing[] = {".git/hooks/pre-commit", "f", "hl/pre-commit",
					       "g/hooks/pre-commit", ".git/./Hooks/pre-commit"};
	for (size_t i = 0; i < ARRAY_SIZE(existing); i++) {
		char json[512];
		snprintf(json, sizeof(json),
			 "{\"command\":\"str_replace\",\"path\":\"%s\",\"old_str\":\"old\","
			 "\"new_str\":\"pwned\"}",
			 existing[i]);
		expect_error(fx.ed, json, "is protected");
		snprintf(json, sizeof(json),
			 "{\"command\":\"insert\",\"path\":\"%s\",\"insert_line\":0,"
			 "\"new_str\":\"pwned\"}",
			 existing[i]);
		expect_error(fx.ed, json, "is protected");
		snprintf(json, sizeof(json), "{\"command\":\"undo_edit\",\"path\":\"%s\"}",
			 existing[i]);
		expect_error(fx.ed, json, "is protected");
	}
	ws_assert(&fx, ".git/hooks/pre-commit", "old\n");
	char *made = pjoin(fx.sb.ws, ".git/hooks/new");
	ck_assert_int_ne(access(made, F_OK), 0);
	free(made);
	char *pc = pjoin(fx.sb.ws, ".git/hooks/post-commit");
	ck_assert_int_ne(access(pc, F_OK), 0);
	free(pc);
	/* the protected directory itself, once gone, cannot be made again as a file */
	tu_sh("rm -rf '%s/.git/hooks'", fx.sb.ws);
	expect_error(fx.ed, "{\"command\":\"create\",\"path\":\".git/hooks\",\"file_text\":\"x\"}",
		     "is protected");
	expect_error(fx.ed, "{\"command\":\"create\",\"path\":\"g/hooks\",\"file_text\":\"x\"}",
		     "is protected");
	tu_sh("mkdir '%s/.git/hooks' && echo old > '%s/.git/hooks/pre-commit'", fx.sb.ws, fx.sb.ws);
	/* reading stays allowed; neighbours stay writable */
	expect_ok(fx.ed, "{\"command\":\"view\",\"path\":\".git/hooks/pre-commit\"}");
	expect_ok(fx.ed, "{\"command\":\"create\",\"path\":\".git/hooksX\",\"file_text\":\"x\"}");
	expect_ok(fx.ed, "{\"command\":\"create\",\"path\":\".git/config\",\"file_text\":\"x\"}");
	expect_ok(fx.ed, "{\"command\":\"create\",\"path\":\"sub/a.txt\",\"file_text\":\"a\\n\"}");
	expect_ok(fx.ed, "{\"command\":\"str_replace\",\"path\":\"sub/a.txt\",\"old_str\":\"a\","
			 "\"new_str\":\"b\"}");
	expect_ok(fx.ed, "{\"command\":\"undo_edit\",\"path\":\"sub/a.txt\"}");
	ws_assert(&fx, "sub/a.txt", "a\n");
	fx_free(&fx);
	/* without protected paths (an empty list) the same write is the agent's */
	cae_editor_limits_default(&lim);
	fx_init(&fx, &lim, DISPLAY_ROOT);
	tu_sh("mkdir -p '%s/.git/hooks'", fx.sb.ws);
	expect_ok(fx.ed, "{\"command\":\"create\",\"path\":\".git/hooks/x\",\"file_text\":\"x\"}");
	fx_free(&fx);
}
END_TEST

int main(int argc, char **argv)
{
	data_dir = argc > 1 ? argv[1] : "tests/data/editor";
	if (list_cases(data_dir) < 0 || ncases == 0) {
		fprintf(stderr, "no golden cases under %s\n", data_dir);
		return EXIT_FAILURE;
	}
	Suite *s = suite_create("editor");
	TCase *g = tcase_create("golden");
	tcase_set_timeout(g, 30);
	tcase_add_loop_test(g, golden, 0, ncases);
	suite_add_tcase(s, g);
	TCase *c = tcase_create("code");
	tcase_set_timeout(c, 120);
	tcase_add_test(c, race_symlink_swap);
	tcase_add_test(c, path_100kb);
	tcase_add_test(c, path_invalid_utf8);
	tcase_add_test(c, path_proc_self_root);
	tcase_add_test(c, path_symlink_loop);
	tcase_add_test(c, path_display_root_forms);
	tcase_add_test(c, crlf_preserved);
	tcase_add_test(c, final_newline_tabs_literal);
	tcase_add_test(c, mode_and_atomicity);
	tcase_add_test(c, symlink_inside_followed);
	tcase_add_test(c, undo_depth_and_budget);
	tcase_add_test(c, protected_paths_refused);
	tcase_add_test(c, file_size_limit);
	tcase_add_test(c, compat_shape);
	tcase_add_test(c, shell_metachar_names);
	tcase_add_test(c, large_file_edit);
	tcase_add_test(c, large_file_pieces);
	tcase_add_test(c, large_crlf_edit);
	tcase_add_test(c, long_old_str);
	tcase_add_test(c, large_buffers_reused);
	tcase_add_test(c, special_files);
	tcase_add_test(c, bad_editor_args);
	tcase_add_test(c, undo_refuses_external_change);
	tcase_add_test(c, leftover_staged_file_recovered);
	tcase_add_test(c, forged_journal_stays_inside);
	suite_add_tcase(s, c);
	TCase *k = tcase_create("crash");
	tcase_set_timeout(k, 600);
	tcase_add_test(k, sigkill_every_edit_point);
	suite_add_tcase(s, k);
	int r = tu_run(s);
	for (int i = 0; i < ncases; i++)
		free(cases[i]);
	free(cases);
	return r;
}
