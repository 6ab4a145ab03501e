/* The text editor object: its workspace (opened once), limits, undo history and spare
 * buffer; the results it gives; the typed entry points, each run under the editor's lock.
 * See include/cae/editor.h. The commands themselves: view.c, edit.c; arguments: args.c;
 * paths: path.c (confinement in base/chase.h); files: file.c. */
#include "cae/editor.h"

#include "base/buf.h"
#include "base/macro.h"
#include "base/txn.h"
#include "base/utf8.h"
#include "editor-internal.h"

#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/banned.h"

#define ECHO_MAX_CHARS 1000 /* old_str echoed back in errors */

/* ---------------------------------------------------------------------------------------- */
/* Spare buffers */

void cae__ed_spare_put(cae_editor *ed, char *data)
{
	if (!data)
		return;
	size_t cap = malloc_usable_size(data);
	if (cap < ED_SPARE_MIN) {
		free(data);
		return;
	}
	free(ed->spare);
	ed->spare = data;
	ed->spare_cap = cap;
}

static void spare_release(void *ctx, char *data)
{
	cae__ed_spare_put(ctx, data);
}

/* A buffer of at least need bytes: the spare if its size is close (a buffer goes to the undo
 * history, whose budget counts the content), else a new one (with 1/32 to grow when large,
 * so that a later, slightly larger version of the file can reuse it). */
char *cae__ed_buf_get(cae_editor *ed, size_t need)
{
	if (ed->spare && ed->spare_cap >= need && ed->spare_cap - need <= need / 8 + (64 << 10)) {
		ed->spare_cap = 0;
		return TAKE_PTR(ed->spare);
	}
	return malloc(need >= ED_SPARE_MIN ? need + need / 32 : need);
}

/* ---------------------------------------------------------------------------------------- */
/* Results */

void cae_editor_limits_default(cae_editor_limits *limits)
{
	*limits = (cae_editor_limits){
	    .max_file_bytes = CAE_EDITOR_DEFAULT_MAX_FILE_BYTES,
	    .max_output_chars = CAE_EDITOR_DEFAULT_MAX_OUTPUT_CHARS,
	    .undo_depth = CAE_EDITOR_DEFAULT_UNDO_DEPTH,
	    .undo_budget_bytes = CAE_EDITOR_DEFAULT_UNDO_BUDGET_BYTES,
	    .max_dir_entries = CAE_EDITOR_DEFAULT_MAX_DIR_ENTRIES,
	};
}

const char *cae_editor_command_name(cae_editor_command cmd)
{
	switch (cmd) {
	case CAE_EDITOR_CMD_VIEW:
		return "view";
	case CAE_EDITOR_CMD_CREATE:
		return "create";
	case CAE_EDITOR_CMD_STR_REPLACE:
		return "str_replace";
	case CAE_EDITOR_CMD_INSERT:
		return "insert";
	case CAE_EDITOR_CMD_UNDO_EDIT:
		return "undo_edit";
	default:
		return "unknown";
	}
}

void cae_editor_result_clear(cae_editor_result *res)
{
	if (!res)
		return;
	free(res->text);
	free(res->summary);
	free(res->path);
	memset(res, 0, sizeof(*res));
}

static char *vfmt(const char *fmt, va_list ap) _printf_(1, 0);
static char *vfmt(const char *fmt, va_list ap)
{
	char *s = NULL;
	if (vasprintf(&s, fmt, ap) < 0)
		return NULL;
	return s;
}

int cae__ed_res_error(cae_editor_result *res, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	char *s = vfmt(fmt, ap);
	va_end(ap);
	if (!s)
		return -ENOMEM;
	free(res->text);
	free(res->summary);
	res->summary = NULL;
	res->text = s;
	res->is_error = true;
	return 0;
}

int cae__ed_res_ok(cae_editor_result *res, char *text, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	char *s = vfmt(fmt, ap);
	va_end(ap);
	if (!s || !text) {
		free(s);
		free(text);
		return -ENOMEM;
	}
	free(res->text);
	free(res->summary);
	res->text = text;
	res->summary = s;
	res->is_error = false;
	return 0;
}

char *cae__ed_echo_str(const char *s, size_t n)
{
	size_t chars = 0;
	size_t keep = cae__utf8_prefix_chars(s, n, ECHO_MAX_CHARS, &chars);
	if (keep == n)
		return strndup(s, n);
	char *r = NULL;
	if (asprintf(&r, "%.*s[... %zu more characters]", (int)keep, s,
		     cae__ed_count_chars(s + keep, n - keep)) < 0)
		return NULL;
	return r;
}

void cae__ed_out_init(cae_buf *b)
{
	cae__buf_init(b, SIZE_MAX - 1);
}

/* ---------------------------------------------------------------------------------------- */
/* Editor */

static bool limits_valid(const cae_editor_limits *l)
{
	return l->max_file_bytes > 0 && l->max_output_chars > 0 && l->max_dir_entries > 0;
}

cae_editor *cae_editor_new(const char *root_path, const char *display_root,
			   const cae_editor_limits *limits, cae_error *err)
{
	cae_editor_limits lim;
	if (limits)
		lim = *limits;
	else
		cae_editor_limits_default(&lim);
	if (!limits_valid(&lim)) {
		cae_error_set(err, -EINVAL, "editor limits: sizes must be greater than 0");
		return NULL;
	}
	if (!root_path || !*root_path) {
		cae_error_set(err, -EINVAL, "editor: no workspace directory given");
		return NULL;
	}
	if (!display_root)
		display_root = root_path;
	_cleanup_free_ char *root = cae__ed_path_root_normalize(display_root);
	if (!root) {
		cae_error_set(err, -EINVAL, "editor: display root '%s' is not an absolute path",
			      display_root);
		return NULL;
	}
	_cleanup_close_ int fd = open(root_path, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0) {
		cae_error_set(err, -errno, "editor: cannot open workspace '%s': %s", root_path,
			      strerror(errno));
		return NULL;
	}
	cae_editor *ed = calloc(1, sizeof(*ed));
	if (!ed) {
		cae_error_set(err, -ENOMEM, "editor: out of memory");
		return NULL;
	}
	ed->undo = cae__ed_undo_new(lim.undo_depth, lim.undo_budget_bytes);
	if (!ed->undo) {
		free(ed);
		cae_error_set(err, -ENOMEM, "editor: out of memory");
		return NULL;
	}
	pthread_mutex_init(&ed->lock, NULL);
	cae__ed_undo_set_release(ed->undo, spare_release, ed);
	ed->lim = lim;
	ed->lim.protected_paths = NULL;
	ed->lim.n_protected_paths = 0;
	/* Finishes what a process killed while editing this workspace left (a failure leaves
	 * only temporary files, and the next open tries again). */
	if (cae__wsj_open(fd, &ed->wsj) == 0)
		(void)cae__wsj_recover(ed->wsj, NULL);
	ed->root_fd = TAKE_FD(fd);
	ed->root = TAKE_PTR(root);
	if (lim.n_protected_paths) {
		ed->protected = calloc(lim.n_protected_paths, sizeof(char *));
		for (size_t i = 0; ed->protected && i < lim.n_protected_paths; i++)
			if (!(ed->protected[i] = strdup(lim.protected_paths[i]))) {
				for (size_t j = 0; j < i; j++)
					free(ed->protected[j]);
				free(ed->protected);
				ed->protected = NULL;
			}
		if (!ed->protected) {
			cae_editor_free(ed);
			cae_error_set(err, -ENOMEM, "editor: out of memory");
			return NULL;
		}
		ed->lim.protected_paths = (const char *const *)ed->protected;
		ed->lim.n_protected_paths = lim.n_protected_paths;
	}
	return ed;
}

void cae_editor_free(cae_editor *ed)
{
	if (!ed)
		return;
	if (ed->root_fd >= 0)
		close(ed->root_fd);
	cae__ed_undo_free(ed->undo);
	cae__wsj_free(ed->wsj);
	free(ed->spare);
	for (size_t i = 0; i < ed->lim.n_protected_paths; i++)
		free(ed->protected[i]);
	free(ed->protected);
	pthread_mutex_destroy(&ed->lock);
	free(ed->root);
	free(ed);
}

size_t cae_editor_undo_bytes(cae_editor *ed)
{
	pthread_mutex_lock(&ed->lock);
	size_t n = cae__ed_undo_bytes(ed->undo);
	pthread_mutex_unlock(&ed->lock);
	return n;
}

/* ---------------------------------------------------------------------------------------- */
/* Entry points */

static int finish(cae_editor *ed, cae_editor_result *res, int r)
{
	pthread_mutex_unlock(&ed->lock);
	if (r < 0)
		cae_editor_result_clear(res);
	return r < 0 ? r : 0;
}

int cae_editor_run(cae_editor *ed, const cae_editor_request *q, cae_editor_result *res)
{
	memset(res, 0, sizeof(*res));
	res->command = q->command;
	if (!q->path)
		return cae__ed_res_error(res, "Parameter `path` is required") < 0 ? -ENOMEM : 0;
	pthread_mutex_lock(&ed->lock);
	int r;
	switch (q->command) {
	case CAE_EDITOR_CMD_VIEW:
		r = cae__ed_do_view(ed, q->path, q->path_len, q->has_range ? q->range : NULL, res);
		break;
	case CAE_EDITOR_CMD_CREATE:
		r = cae__ed_do_create(ed, q->path, q->path_len, q->text ? q->text : "", q->text_len,
				      res);
		break;
	case CAE_EDITOR_CMD_STR_REPLACE:
		r = cae__ed_do_str_replace(ed, q->path, q->path_len, q->text ? q->text : "",
					   q->text_len, q->new_str, q->new_len, res);
		break;
	case CAE_EDITOR_CMD_INSERT:
		r = cae__ed_do_insert(ed, q->path, q->path_len, q->line,
				      q->new_str ? q->new_str : "", q->new_len, res);
		break;
	case CAE_EDITOR_CMD_UNDO_EDIT:
		r = cae__ed_do_undo(ed, q->path, q->path_len, res);
		break;
	default:
		r = cae__ed_res_error(
		    res, "Unrecognized command. The allowed commands are: view, create, "
			 "str_replace, insert, undo_edit");
	}
	return finish(ed, res, r);
}

int cae_editor_view(cae_editor *ed, const char *path, const long long *view_range,
		    cae_editor_result *res)
{
	memset(res, 0, sizeof(*res));
	res->command = CAE_EDITOR_CMD_VIEW;
	pthread_mutex_lock(&ed->lock);
	return finish(ed, res, cae__ed_do_view(ed, path, strlen(path), view_range, res));
}

int cae_editor_create(cae_editor *ed, const char *path, const char *file_text, size_t len,
		      cae_editor_result *res)
{
	memset(res, 0, sizeof(*res));
	res->command = CAE_EDITOR_CMD_CREATE;
	pthread_mutex_lock(&ed->lock);
	return finish(ed, res, cae__ed_do_create(ed, path, strlen(path), file_text, len, res));
}

int cae_editor_str_replace(cae_editor *ed, const char *path, const char *old_str, size_t old_len,
			   const char *new_str, size_t new_len, cae_editor_result *res)
{
	memset(res, 0, sizeof(*res));
	res->command = CAE_EDITOR_CMD_STR_REPLACE;
	pthread_mutex_lock(&ed->lock);
	return finish(ed, res,
		      cae__ed_do_str_replace(ed, path, strlen(path), old_str, old_len, new_str,
					     new_len, res));
}

int cae_editor_insert(cae_editor *ed, const char *path, long long insert_line, const char *new_str,
		      size_t new_len, cae_editor_result *res)
{
	memset(res, 0, sizeof(*res));
	res->command = CAE_EDITOR_CMD_INSERT;
	pthread_mutex_lock(&ed->lock);
	return finish(
	    ed, res, cae__ed_do_insert(ed, path, strlen(path), insert_line, new_str, new_len, res));
}

int cae_editor_undo_edit(cae_editor *ed, const char *path, cae_editor_result *res)
{
	memset(res, 0, sizeof(*res));
	res->command = CAE_EDITOR_CMD_UNDO_EDIT;
	pthread_mutex_lock(&ed->lock);
	return finish(ed, res, cae__ed_do_undo(ed, path, strlen(path), res));
}
