/* The text editor: argument handling, path resolution inside the workspace, the five
 * commands and their reference-format outputs. See include/cae/editor.h.
 *
 * Confinement: the workspace is opened once (O_PATH). A path is resolved to (parent directory
 * fd, final name) with openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS) from that fd; the final
 * name is then only used with *at() calls on the parent fd and O_NOFOLLOW, and a symbolic link
 * as the final name is followed by hand (re-resolved beneath the workspace), so a path swapped
 * for a symlink between our check and our use can never lead out. */
#include "cae/editor.h"

#include "base/buf.h"
#include "base/fs.h"
#include "base/macro.h"
#include "base/timeutil.h"
#include "base/txn.h"
#include "base/utf8.h"
#include "editor-internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <malloc.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "base/banned.h"

#define SNIPPET_LINES 4
#define ECHO_MAX_CHARS 1000 /* old_str echoed back in errors */
#define MAX_LISTED_LINES 50 /* line numbers named in the "multiple occurrences" error */
#define SYMLINK_MAX_FOLLOW 40
#define NEW_FILE_MODE 0644
#define NEW_DIR_MODE 0755

static const char REVIEW_HINT[] =
    "Review the changes and make sure they are as expected. Edit the file again if necessary.";
static const char REVIEW_HINT_INSERT[] =
    "Review the changes and make sure they are as expected (correct indentation, no duplicate "
    "lines, etc). Edit the file again if necessary.";

struct cae_editor {
	int root_fd; /* O_PATH | O_DIRECTORY */
	char *root;  /* display root, normalised */
	/* The workspace's journal (base/txn.h): every write is a transaction, so a process
	 * killed mid-write leaves no staged file once recovered. NULL when the journal
	 * directory cannot be made (writes are then plain temporary file + rename). */
	cae_wsj *wsj;
	/* The transaction of the `create` being run (its directories are made in it, so that a
	 * crash or a failure removes them again), else NULL. */
	cae_txn *create_txn;
	cae_editor_limits lim;
	ed_undo *undo;
	pthread_mutex_t lock;
	unsigned tmp_counter;
	/* The latest large buffer let go of (an undo entry dropped, a failed edit's file), for
	 * the next read of a file of about its size: faulting fresh pages in costs more than
	 * reading the file (10 MB: ~6 ms against ~2-4 ms). At most one, of at most
	 * max_file_bytes plus a little. */
	char *spare;
	size_t spare_cap;
};

/* Buffers from this size on are kept for reuse, and allocated with room to grow. */
#define SPARE_MIN ((size_t)1 << 20)

/* Takes data (may be NULL): kept as the spare if large, else freed. */
static void spare_put(cae_editor *ed, char *data)
{
	if (!data)
		return;
	size_t cap = malloc_usable_size(data);
	if (cap < SPARE_MIN) {
		free(data);
		return;
	}
	free(ed->spare);
	ed->spare = data;
	ed->spare_cap = cap;
}

static void spare_release(void *ctx, char *data)
{
	spare_put(ctx, data);
}

/* A buffer of at least need bytes: the spare if its size is close (a buffer goes to the undo
 * history, whose budget counts the content), else a new one (with 1/32 to grow when large,
 * so that a later, slightly larger version of the file can reuse it). */
static char *buf_get(cae_editor *ed, size_t need)
{
	if (ed->spare && ed->spare_cap >= need && ed->spare_cap - need <= need / 8 + (64 << 10)) {
		ed->spare_cap = 0;
		return TAKE_PTR(ed->spare);
	}
	return malloc(need >= SPARE_MIN ? need + need / 32 : need);
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

static char *vfmt(const char *fmt, va_list ap) _printf_(1, 0);
static char *vfmt(const char *fmt, va_list ap)
{
	char *s = NULL;
	if (vasprintf(&s, fmt, ap) < 0)
		return NULL;
	return s;
}

/* Sets a tool error. Returns 0, or -ENOMEM. */
static int res_error(cae_editor_result *res, const char *fmt, ...) _printf_(2, 3);
static int res_error(cae_editor_result *res, const char *fmt, ...)
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

/* Sets a success: text is stolen, summary formatted. */
static int res_ok(cae_editor_result *res, char *text, const char *fmt, ...) _printf_(3, 4);
static int res_ok(cae_editor_result *res, char *text, const char *fmt, ...)
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

/* old_str as echoed in an error: at most ECHO_MAX_CHARS characters. New string. */
static char *echo_str(const char *s, size_t n)
{
	size_t chars = 0;
	size_t keep = cae_utf8_prefix_chars(s, n, ECHO_MAX_CHARS, &chars);
	if (keep == n)
		return strndup(s, n);
	char *r = NULL;
	if (asprintf(&r, "%.*s[... %zu more characters]", (int)keep, s,
		     ed_count_chars(s + keep, n - keep)) < 0)
		return NULL;
	return r;
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
	_cleanup_free_ char *root = ed_path_root_normalize(display_root);
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
	ed->undo = ed_undo_new(lim.undo_depth, lim.undo_budget_bytes);
	if (!ed->undo) {
		free(ed);
		cae_error_set(err, -ENOMEM, "editor: out of memory");
		return NULL;
	}
	pthread_mutex_init(&ed->lock, NULL);
	ed_undo_set_release(ed->undo, spare_release, ed);
	ed->lim = lim;
	/* Finishes what a process killed while editing this workspace left (a failure leaves
	 * only temporary files, and the next open tries again). */
	if (cae_wsj_open(fd, &ed->wsj) == 0)
		(void)cae_wsj_recover(ed->wsj, NULL);
	ed->root_fd = TAKE_FD(fd);
	ed->root = TAKE_PTR(root);
	return ed;
}

void cae_editor_free(cae_editor *ed)
{
	if (!ed)
		return;
	if (ed->root_fd >= 0)
		close(ed->root_fd);
	ed_undo_free(ed->undo);
	cae_wsj_free(ed->wsj);
	free(ed->spare);
	pthread_mutex_destroy(&ed->lock);
	free(ed->root);
	free(ed);
}

size_t cae_editor_undo_bytes(cae_editor *ed)
{
	pthread_mutex_lock(&ed->lock);
	size_t n = ed_undo_bytes(ed->undo);
	pthread_mutex_unlock(&ed->lock);
	return n;
}

/* ---------------------------------------------------------------------------------------- */
/* Path resolution */

typedef struct target {
	char *display; /* the agent's path in display form (what outputs echo) */
	char *key;     /* workspace-relative path after following a final symlink (undo key) */
	char *dir;     /* dfd's path relative to the workspace ("" for it), when base is set */
	int dfd;       /* parent directory (O_PATH), beneath the workspace; -1 for the root */
	bool dfd_owned;
	char *base; /* final name in dfd; NULL when the target is the workspace itself */
	bool exists;
	struct stat st; /* when exists (not following a final symlink: that is resolved) */
} target;

static void target_clear(target *t)
{
	free(t->display);
	free(t->key);
	free(t->dir);
	free(t->base);
	if (t->dfd_owned && t->dfd >= 0)
		close(t->dfd);
	memset(t, 0, sizeof(*t));
	t->dfd = -1;
}

static const char *file_type_name(mode_t m)
{
	if (S_ISFIFO(m))
		return "a FIFO";
	if (S_ISSOCK(m))
		return "a socket";
	if (S_ISCHR(m))
		return "a character device";
	if (S_ISBLK(m))
		return "a block device";
	return "not a regular file";
}

/* cae_open_beneath, retried when openat2 asks for it (-EAGAIN: a concurrent rename or mount
 * while ".." was being resolved). */
static int open_beneath(int dirfd, const char *path, int flags)
{
	int fd = -EAGAIN;
	for (int i = 0; i < 64 && fd == -EAGAIN; i++)
		fd = cae_open_beneath(dirfd, path, flags, 0);
	return fd;
}

/* The error for a failed openat2/fstatat during resolution. Returns 1 (error set) or
 * -ENOMEM. */
static int resolve_error(cae_editor *ed, cae_editor_result *res, const char *display, int e)
{
	int r;
	switch (e) {
	case -ENOENT:
		r = res_error(res, "The path %s does not exist. Please provide a valid path.",
			      display);
		break;
	case -ENOTDIR:
		r = res_error(res,
			      "The path %s does not exist (a part of it is not a directory). "
			      "Please provide a valid path.",
			      display);
		break;
	case -EXDEV:
		r = res_error(res,
			      "The path %s leads outside the workspace %s (through `..` or a "
			      "symbolic link). Only files and directories inside %s can be viewed "
			      "or edited.",
			      display, ed->root, ed->root);
		break;
	case -ELOOP:
		r = res_error(res,
			      "The path %s could not be resolved: too many levels of symbolic "
			      "links, or a link that is not allowed.",
			      display);
		break;
	case -ENAMETOOLONG:
		r = res_error(res, "The path %s is too long (a name in it is too long).", display);
		break;
	case -EACCES:
	case -EPERM:
		r = res_error(res, "Permission denied while trying to access %s.", display);
		break;
	case -ENOMEM:
		return -ENOMEM;
	default:
		r = res_error(res, "Ran into %s while trying to access %s.", strerror(-e), display);
		break;
	}
	return r < 0 ? r : 1;
}

/* mkdir -p of the workspace-relative directory dir, every step beneath the workspace. */
static int mkdir_beneath(cae_editor *ed, const char *dir)
{
	_cleanup_free_ char *p = strdup(dir);
	if (!p)
		return -ENOMEM;
	size_t len = strlen(p);
	for (size_t i = 0; i <= len; i++) {
		if (p[i] != '/' && p[i] != '\0')
			continue;
		char saved = p[i];
		p[i] = '\0';
		int fd = open_beneath(ed->root_fd, p, O_PATH | O_DIRECTORY);
		if (fd == -ENOENT) {
			char *slash = strrchr(p, '/');
			const char *name = slash ? slash + 1 : p;
			int pfd = ed->root_fd;
			bool owned = false;
			if (slash) {
				*slash = '\0';
				pfd = open_beneath(ed->root_fd, p, O_PATH | O_DIRECTORY);
				*slash = '/';
				if (pfd < 0)
					return pfd;
				owned = true;
			}
			int r;
			if (ed->create_txn) {
				/* announced in the journal: a rollback removes it */
				r = cae_txn_mkdir(ed->create_txn, p);
				r = r == -EEXIST ? 0 : r;
			} else {
				r = mkdirat(pfd, name, NEW_DIR_MODE) < 0 && errno != EEXIST ? -errno
											    : 0;
				if (r == 0)
					cae_keep_owner_dir(pfd, name);
			}
			if (owned)
				close(pfd);
			if (r < 0)
				return r;
			fd = open_beneath(ed->root_fd, p, O_PATH | O_DIRECTORY);
		}
		if (fd < 0)
			return fd;
		close(fd);
		p[i] = saved;
	}
	return 0;
}

static bool has_dotdot(const char *rel)
{
	for (const char *p = rel; (p = strstr(p, "..")); p += 2)
		if ((p == rel || p[-1] == '/') && (p[2] == '/' || p[2] == '\0'))
			return true;
	return false;
}

/* Resolves the agent's path. Returns 0 (t filled), 1 (error result set), or -ENOMEM.
 * With create, missing parent directories are made. */
static int resolve(cae_editor *ed, const char *path, size_t len, bool create, target *t,
		   cae_editor_result *res)
{
	memset(t, 0, sizeof(*t));
	t->dfd = -1;
	_cleanup_free_ char *rel = NULL;
	int r;
	switch (ed_path_to_rel(ed->root, path, len, &rel)) {
	case ED_PATH_OK:
		break;
	case ED_PATH_EMPTY:
		r = res_error(res, "Parameter `path` must not be empty: give a path inside %s.",
			      ed->root);
		return r < 0 ? r : 1;
	case ED_PATH_TOO_LONG:
		r = res_error(res, "The path is too long (%zu bytes); a path has at most %d bytes.",
			      len, ED_PATH_MAX);
		return r < 0 ? r : 1;
	case ED_PATH_NUL:
		r = res_error(res,
			      "The path contains a NUL character, which no file name can hold.");
		return r < 0 ? r : 1;
	case ED_PATH_NOT_UTF8:
		r = res_error(res, "The path is not valid UTF-8; give the path as UTF-8 text.");
		return r < 0 ? r : 1;
	case ED_PATH_OUTSIDE:
		r = res_error(res,
			      "The path %.*s is outside the workspace %s. Only files and "
			      "directories inside %s can be viewed or edited; a relative path is "
			      "taken relative to %s.",
			      (int)len, path, ed->root, ed->root, ed->root);
		return r < 0 ? r : 1;
	case ED_PATH_NOMEM:
	default:
		return -ENOMEM;
	}
	t->display = ed_path_display(ed->root, rel);
	if (!t->display)
		return -ENOMEM;
	if (!*rel) {
		t->key = strdup("");
		if (!t->key)
			return -ENOMEM;
		if (fstat(ed->root_fd, &t->st) < 0)
			return resolve_error(ed, res, t->display, -errno);
		t->exists = true;
		return 0;
	}

	_cleanup_free_ char *cur = TAKE_PTR(rel);
	for (int follow = 0;; follow++) {
		/* cur is relative to the workspace; split off its final name. */
		char *slash = strrchr(cur, '/');
		const char *name = slash ? slash + 1 : cur;
		if (t->dfd_owned)
			close(t->dfd);
		t->dfd = -1;
		t->dfd_owned = false;
		if (slash) {
			*slash = '\0';
			int fd = open_beneath(ed->root_fd, cur, O_PATH | O_DIRECTORY);
			if (fd == -ENOENT && create && follow == 0 && !has_dotdot(cur)) {
				int m = mkdir_beneath(ed, cur);
				if (m < 0 && m != -ENOENT && m != -ENOTDIR)
					return resolve_error(ed, res, t->display, m);
				fd = open_beneath(ed->root_fd, cur, O_PATH | O_DIRECTORY);
			}
			*slash = '/';
			if (fd < 0)
				return resolve_error(ed, res, t->display, fd);
			t->dfd = fd;
			t->dfd_owned = true;
		} else {
			t->dfd = ed->root_fd;
		}
		if (strcmp(name, "..") == 0 || strcmp(name, ".") == 0) {
			/* Only after following a link ("l -> .."): a directory, resolved by the
			 * kernel; it is then the target itself (dfd, no base). */
			int fd = open_beneath(ed->root_fd, cur, O_PATH | O_DIRECTORY);
			if (fd < 0)
				return resolve_error(ed, res, t->display, fd);
			if (t->dfd_owned)
				close(t->dfd);
			t->dfd = fd;
			t->dfd_owned = true;
			if (fstat(fd, &t->st) < 0)
				return resolve_error(ed, res, t->display, -errno);
			t->exists = true;
			t->key = strdup(cur);
			return t->key ? 0 : -ENOMEM;
		}
		if (fstatat(t->dfd, name, &t->st, AT_SYMLINK_NOFOLLOW) < 0) {
			if (errno != ENOENT)
				return resolve_error(ed, res, t->display, -errno);
			t->exists = false;
		} else {
			t->exists = true;
		}
		if (!t->exists || !S_ISLNK(t->st.st_mode)) {
			/* The undo key: the parent directory's identity and the name, so every
			 * spelling of the path (links, "..") shares one history. */
			struct stat dst;
			if (fstat(t->dfd, &dst) < 0)
				return resolve_error(ed, res, t->display, -errno);
			if (asprintf(&t->key, "%llu:%llu/%s", (unsigned long long)dst.st_dev,
				     (unsigned long long)dst.st_ino, name) < 0) {
				t->key = NULL;
				return -ENOMEM;
			}
			t->base = strdup(name);
			t->dir = slash ? strndup(cur, (size_t)(slash - cur)) : strdup("");
			return t->base && t->dir ? 0 : -ENOMEM;
		}
		/* A symbolic link as the final name: follow it by hand, beneath the workspace. */
		if (follow >= SYMLINK_MAX_FOLLOW)
			return resolve_error(ed, res, t->display, -ELOOP);
		char target_buf[PATH_MAX];
		ssize_t n = readlinkat(t->dfd, name, target_buf, sizeof(target_buf) - 1);
		if (n < 0)
			return resolve_error(ed, res, t->display, -errno);
		target_buf[n] = '\0';
		if (n == 0 || target_buf[0] == '/')
			return resolve_error(ed, res, t->display, -EXDEV);
		char *next;
		if (slash) {
			*slash = '\0';
			next = ed_path_join_rel(cur, target_buf);
		} else {
			next = strdup(target_buf);
		}
		if (!next)
			return -ENOMEM;
		free(cur);
		cur = next;
		/* Strip trailing slashes ("dir/" as a link target). */
		size_t cl = strlen(cur);
		while (cl > 1 && cur[cl - 1] == '/')
			cur[--cl] = '\0';
	}
}

/* ---------------------------------------------------------------------------------------- */
/* Reading and writing */

typedef struct loaded {
	cae_editor *ed;
	int fd;	   /* a large file stays open until its edit is written: see close_later */
	char *raw; /* the file's bytes */
	size_t raw_len;
	char *conv;	  /* LF copy of a CRLF file, else NULL */
	const char *text; /* raw or conv */
	size_t len;
	bool crlf;
	struct stat st;
} loaded;

static void loaded_clear(loaded *l)
{
	if (l->ed)
		spare_put(l->ed, l->raw);
	else
		free(l->raw);
	free(l->conv);
	if (l->fd >= 0)
		close(l->fd);
	memset(l, 0, sizeof(*l));
	l->fd = -1;
}

static void *closer(void *arg)
{
	close((int)(intptr_t)arg);
	return NULL;
}

/* Closes fd on a short-lived thread of its own. For the old version of a large file that an
 * edit has just replaced: its last reference goes with this close, and the kernel frees its
 * pages and blocks then (10 MB: ~1 ms on tmpfs, ~5-10 ms on ext4), which the rename would
 * otherwise do while the agent waits. Falls back to closing here. */
static void close_later(int fd)
{
	pthread_attr_t attr;
	pthread_t th;
	if (pthread_attr_init(&attr) != 0) {
		close(fd);
		return;
	}
	(void)pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	(void)pthread_attr_setstacksize(&attr, 64 << 10);
	if (pthread_create(&th, &attr, closer, (void *)(intptr_t)fd) != 0)
		close(fd);
	pthread_attr_destroy(&attr);
}

static int too_large_error(cae_editor *ed, cae_editor_result *res, const char *display,
			   unsigned long long size)
{
	int r =
	    res_error(res,
		      "The file %s is too large for the text editor (%llu bytes; the limit is "
		      "%zu bytes). Use shell commands (e.g. `grep -n`, `sed -n '10,20p'`) to work "
		      "with it.",
		      display, size, ed->lim.max_file_bytes);
	return r < 0 ? r : 1;
}

/* The refusals shared by the commands that take a file: a directory (only `view` lists
 * one) and anything but a regular file. Return 1 (error result set) or -ENOMEM. */
static int refuse_directory(cae_editor_result *res, const target *t)
{
	int r = res_error(res,
			  "The path %s is a directory and only the `view` command can be used on "
			  "directories",
			  t->display);
	return r < 0 ? r : 1;
}

static int refuse_special(cae_editor_result *res, const target *t)
{
	int r = res_error(res,
			  "The path %s is %s; the text editor only views and edits regular files "
			  "and directories.",
			  t->display, file_type_name(t->st.st_mode));
	return r < 0 ? r : 1;
}

/* Pieces in which a file is read and checked while it is in the cache. */
#define READ_PIECE ((size_t)256 << 10)

/* Opens and reads the regular file t (which exists). Returns 0, 1 (error set) or -ENOMEM.
 * With want_lf, a CRLF file is also converted for editing. With search (may be NULL), the
 * raw bytes are searched as they are read (the result is only meaningful when the file turns
 * out valid and not CRLF). */
static int load_file(cae_editor *ed, const target *t, bool want_lf, ed_search *search, loaded *l,
		     cae_editor_result *res)
{
	int r;
	memset(l, 0, sizeof(*l));
	l->ed = ed;
	l->fd = -1;
	if (!S_ISREG(t->st.st_mode))
		return refuse_special(res, t);
	if ((unsigned long long)t->st.st_size > ed->lim.max_file_bytes)
		return too_large_error(ed, res, t->display, (unsigned long long)t->st.st_size);
	_cleanup_close_ int fd =
	    openat(t->dfd, t->base, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
	if (fd < 0 && errno == ELOOP) {
		r = res_error(res, "The file %s changed while it was being opened; try again.",
			      t->display);
		return r < 0 ? r : 1;
	}
	if (fd < 0)
		return resolve_error(ed, res, t->display, -errno);
	if (fstat(fd, &l->st) < 0)
		return resolve_error(ed, res, t->display, -errno);
	if (!S_ISREG(l->st.st_mode) || l->st.st_ino != t->st.st_ino ||
	    l->st.st_dev != t->st.st_dev) {
		r = res_error(res, "The file %s changed while it was being opened; try again.",
			      t->display);
		return r < 0 ? r : 1;
	}
	size_t cap = (size_t)l->st.st_size;
	if (cap > ed->lim.max_file_bytes)
		return too_large_error(ed, res, t->display, (unsigned long long)cap);
	char *buf = buf_get(ed, cap + 1);
	if (!buf)
		return -ENOMEM;
	ed_scan scan;
	ed_scan_init(&scan);
	size_t n = 0;
	for (;;) {
		char *dst = buf + n;
		size_t want = cap - n < READ_PIECE ? cap - n : READ_PIECE;
		char probe[4096];
		if (n == cap) {
			/* All that fstat announced is read: a short read into probe tells whether
			 * the file grew since (it is then read on, within the limit). */
			dst = probe;
			want = cap < ed->lim.max_file_bytes ? sizeof(probe) : 1;
		}
		ssize_t got = read(fd, dst, want);
		if (got < 0) {
			if (errno == EINTR)
				continue;
			int e = errno;
			free(buf);
			if (n == cap && cap >= ed->lim.max_file_bytes)
				return resolve_error(ed, res, t->display, -e);
			r = res_error(res, "Ran into %s while trying to read %s", strerror(e),
				      t->display);
			return r < 0 ? r : 1;
		}
		if (got == 0)
			break;
		if (dst == probe) {
			if (cap >= ed->lim.max_file_bytes) {
				free(buf);
				return too_large_error(ed, res, t->display,
						       (unsigned long long)cap + 1);
			}
			size_t ncap = cap < 4096 ? 4096 : cap * 2;
			if (ncap < n + (size_t)got)
				ncap = n + (size_t)got;
			if (ncap > ed->lim.max_file_bytes)
				ncap = ed->lim.max_file_bytes;
			if (n + (size_t)got > ncap) {
				free(buf);
				return too_large_error(ed, res, t->display,
						       (unsigned long long)ncap + 1);
			}
			char *nb = realloc(buf, ncap + 1);
			if (!nb) {
				free(buf);
				return -ENOMEM;
			}
			buf = nb;
			cap = ncap;
			memcpy(buf + n, probe, (size_t)got);
		}
		n += (size_t)got;
		ed_scan_feed(&scan, buf, n, false);
		/* (A long old_str is searched less often: the last m - 1 bytes are searched
		 * again each time.) */
		if (search && scan.info.nul_at == SIZE_MAX && scan.info.bad_at == SIZE_MAX &&
		    n - search->next >= 4 * search->m)
			ed_search_feed(search, buf, n);
	}
	if (search && scan.info.nul_at == SIZE_MAX && scan.info.bad_at == SIZE_MAX)
		ed_search_feed(search, buf, n);
	buf[n] = '\0';
	l->raw = buf;
	l->raw_len = n;
	if (n >= SPARE_MIN)
		l->fd = TAKE_FD(fd);

	ed_scan_feed(&scan, buf, n, true);
	const ed_text_info info = scan.info;
	if (info.nul_at != SIZE_MAX) {
		loaded_clear(l);
		r = res_error(res,
			      "The file %s looks like a binary file (it contains a NUL byte at "
			      "offset %zu); the text editor only views and edits text files. Use a "
			      "shell command (e.g. `file`, `xxd | head`) to inspect it.",
			      t->display, info.nul_at);
		return r < 0 ? r : 1;
	}
	if (info.bad_at != SIZE_MAX) {
		size_t line = ed_count_newlines(buf, info.bad_at) + 1;
		loaded_clear(l);
		r = res_error(
		    res,
		    "The file %s is not valid UTF-8 text (the first invalid byte is on "
		    "line %zu, at offset %zu); the text editor only views and edits UTF-8 "
		    "text files. Use a shell command (e.g. `iconv`, `file`) to inspect or "
		    "convert it.",
		    t->display, line, info.bad_at);
		return r < 0 ? r : 1;
	}
	l->crlf = info.has_cr && ed_is_crlf(buf, n);
	l->text = l->raw;
	l->len = n;
	if (l->crlf && want_lf) {
		l->conv = ed_crlf_to_lf(buf, n, &l->len);
		if (!l->conv) {
			loaded_clear(l);
			return -ENOMEM;
		}
		l->text = l->conv;
	}
	return 0;
}

typedef struct seg {
	const char *p;
	size_t n;
} seg;

/* Bytes written per write call; the writeback of each such piece is started at once. */
#define WRITE_PIECE ((size_t)512 << 10)
#define WRITE_IOV 8

/* Writes the concatenation of segs to fd in pieces of WRITE_PIECE bytes (one writev each),
 * starting the writeback of every piece as soon as it is written (sync_file_range, a hint:
 * the fsync that follows still does the real work). The disk then writes the beginning of
 * a large file while the rest is copied, and the fsync has less left to wait for: 10 MB on
 * ext4 are durable ~4 ms sooner. Returns 0 or -errno. */
static int write_segs(int fd, const seg *segs, size_t nsegs)
{
	size_t si = 0, so = 0; /* the next byte: segs[si].p[so] */
	off_t done = 0, started = 0;
	for (;;) {
		while (si < nsegs && so == segs[si].n) {
			si++;
			so = 0;
		}
		if (si == nsegs)
			return 0;
		struct iovec iov[WRITE_IOV];
		int k = 0;
		size_t room = WRITE_PIECE;
		for (size_t i = si, o = so; i < nsegs && k < WRITE_IOV && room > 0; i++, o = 0) {
			size_t take = segs[i].n - o < room ? segs[i].n - o : room;
			if (take == 0)
				continue;
			iov[k++] = (struct iovec){(void *)(uintptr_t)(segs[i].p + o), take};
			room -= take;
		}
		ssize_t w = writev(fd, iov, k);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return -errno;
		if (w == 0)
			return -EIO;
		done += w;
		for (size_t left = (size_t)w; left > 0;) {
			size_t take = segs[si].n - so < left ? segs[si].n - so : left;
			so += take;
			left -= take;
			if (so == segs[si].n) {
				si++;
				so = 0;
			}
		}
		if ((size_t)(done - started) >= WRITE_PIECE) {
			(void)sync_file_range(fd, started, done - started, SYNC_FILE_RANGE_WRITE);
			started = done;
		}
	}
}

/* Feeds segs to hs (NULL: nothing). */
static void hash_segs(ed_hash *hs, const seg *segs, size_t nsegs)
{
	for (size_t i = 0; hs && i < nsegs; i++)
		ed_hash_feed(hs, segs[i].p, segs[i].n);
}

/* The new content into fd (crlf: every "\n" written as "\r\n"), hashed into hs (may be
 * NULL), then the owner and mode. */
static int fill_file(int fd, const seg *segs, size_t nsegs, bool crlf, mode_t mode,
		     const struct stat *owner, ed_hash *hs)
{
	int r = 0;
	if (crlf) {
		cae_buf b;
		size_t total = 0;
		for (size_t i = 0; i < nsegs; i++)
			total += segs[i].n;
		cae_buf_init(&b, SIZE_MAX - 1);
		r = cae_buf_reserve(&b, total + total / 8 + 16);
		for (size_t i = 0; r == 0 && i < nsegs; i++)
			r = ed_lf_to_crlf(&b, segs[i].p, segs[i].n);
		seg all = {b.data, b.len};
		if (r == 0)
			r = write_segs(fd, &all, 1);
		if (r == 0)
			hash_segs(hs, &all, 1);
		cae_buf_clear(&b);
	} else {
		r = write_segs(fd, segs, nsegs);
		if (r == 0)
			hash_segs(hs, segs, nsegs);
	}
	if (r == 0 && owner && (owner->st_uid != geteuid() || owner->st_gid != getegid())) {
		/* Keep the owner when we may (root); a failure leaves ours. */
		if (fchown(fd, owner->st_uid, owner->st_gid) < 0) {
		}
	}
	if (r == 0 && fchmod(fd, mode & 07777) < 0)
		r = -errno;
	return r;
}

/* Writes the concatenation of segs to t (dfd/base) atomically: a staged file in the same
 * directory, fsync, rename over (or, with noreplace, only if base does not exist), fsync of
 * the directory; as a transaction of the workspace's journal when there is one, so that a
 * staged file left by a crash is removed by the next recovery. mode is applied; with owner,
 * its uid/gid are kept where we can. With crlf, every "\n" is written as "\r\n". hash (may be
 * NULL) gets the ed_hash of the bytes written. Returns 0 or -errno. */
static int write_atomic(cae_editor *ed, const target *t, const seg *segs, size_t nsegs, bool crlf,
			mode_t mode, const struct stat *owner, bool noreplace, uint64_t *hash)
{
	int dfd = t->dfd;
	const char *base = t->base;
	ed_hash hs;
	ed_hash_init(&hs);
	cae_txn *tx = TAKE_PTR(ed->create_txn);
	if (tx || (ed->wsj && cae_txn_begin(ed->wsj, &tx) == 0)) {
		int fd = cae_txn_stage(tx, dfd, t->dir ? t->dir : "", base,
				       noreplace ? CAE_TXN_NOREPLACE : 0);
		if (fd < 0) {
			cae_txn_abort(tx);
			return fd;
		}
		int r = fill_file(fd, segs, nsegs, crlf, mode, owner, hash ? &hs : NULL);
		int d = cae_txn_stage_done(tx, fd);
		if (r == 0)
			r = d;
		if (r < 0) {
			cae_txn_abort(tx);
			return r;
		}
		r = cae_txn_commit(tx, NULL);
		if (r == 0 && hash)
			*hash = ed_hash_final(&hs);
		return r;
	}
	char tmp[96];
	int fd = -1;
	for (int attempt = 0; attempt < 100; attempt++) {
		snprintf(tmp, sizeof(tmp), ".cae-edit-%d-%u-%u", (int)getpid(), ++ed->tmp_counter,
			 (unsigned)(cae_now_ns() & 0xffffffffu));
		fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (fd >= 0 || errno != EEXIST)
			break;
	}
	if (fd < 0)
		return -errno;
	int r = fill_file(fd, segs, nsegs, crlf, mode, owner, hash ? &hs : NULL);
	if (r == 0 && fsync(fd) < 0)
		r = -errno;
	if (close(fd) < 0 && r == 0)
		r = -errno;
	if (r == 0) {
		if (noreplace) {
			if (renameat2(dfd, tmp, dfd, base, RENAME_NOREPLACE) < 0) {
				r = -errno;
				if (r == -EINVAL || r == -ENOSYS) {
					/* No RENAME_NOREPLACE here: link() also refuses to replace.
					 */
					r = linkat(dfd, tmp, dfd, base, 0) < 0 ? -errno : 0;
					unlinkat(dfd, tmp, 0);
					if (r < 0)
						return r;
				}
			}
		} else if (renameat(dfd, tmp, dfd, base) < 0) {
			r = -errno;
		}
	}
	if (r < 0) {
		unlinkat(dfd, tmp, 0);
		return r;
	}
	int sfd = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (sfd >= 0) {
		(void)fsync(sfd);
		close(sfd);
	}
	if (hash)
		*hash = ed_hash_final(&hs);
	return 0;
}

static int write_error(cae_editor_result *res, const char *display, int e)
{
	int r;
	if (e == -ENOMEM)
		return -ENOMEM;
	if (e == -EEXIST)
		r = res_error(res,
			      "File already exists at: %s. Cannot overwrite files using command "
			      "`create`.",
			      display);
	else
		r = res_error(res, "Ran into %s while trying to write to %s", strerror(-e),
			      display);
	return r < 0 ? r : 1;
}

/* ---------------------------------------------------------------------------------------- */
/* Output helpers */

static const char CLIP_NOTE_FMT[] =
    "<response clipped><NOTE>To save on context only part of this file has been shown to "
    "you: lines %zu-%zu of %zu%s. Use `view_range` to see other lines (e.g. [%zu, -1]), or "
    "search inside the file with `grep -n` to find the line numbers of what you are looking "
    "for.</NOTE>\n";
static const char CLIP_NOTE_CUT_FMT[] =
    "<response clipped><NOTE>To save on context only part of this file has been shown to "
    "you: line %zu is longer than the output limit of %zu characters and was cut. Use a "
    "shell command (e.g. `cut -c1-2000` or `fold`) to read long lines, and `view_range` for "
    "other lines.</NOTE>\n";

/* "Here's the result of running `cat -n` on {descriptor}:\n" + numbered s, clipped with a
 * note. total_lines is the file's line count (for the note); 0 = not shown. */
static int make_output(cae_editor *ed, cae_buf *out, const char *s, size_t n, const char *descr,
		       size_t first_no, size_t total_lines, bool strip_cr)
{
	int r = cae_buf_printf(out, "Here's the result of running `cat -n` on %s:\n", descr);
	if (r < 0)
		return r;
	ed_numbered nb;
	r = ed_number_lines(out, s, n, first_no, ed->lim.max_output_chars, strip_cr, &nb);
	if (r < 0)
		return r;
	if (!nb.clipped)
		return 0;
	size_t last = first_no + nb.lines_shown - 1;
	if (nb.line_cut)
		return cae_buf_printf(out, CLIP_NOTE_CUT_FMT, last, ed->lim.max_output_chars);
	return cae_buf_printf(out, CLIP_NOTE_FMT, first_no, last, total_lines, "", last + 1);
}

static void out_init(cae_buf *b)
{
	cae_buf_init(b, SIZE_MAX - 1);
}

/* ---------------------------------------------------------------------------------------- */
/* view */

typedef struct listing {
	cae_editor *ed;
	cae_buf *out;
	size_t chars;
	bool clipped;
	char *capped_dir; /* the first directory with more entries than max_dir_entries */
	size_t capped_total;
	size_t capped_more; /* other such directories */
} listing;

typedef struct dent {
	char *name;
	bool is_dir;
} dent;

static int dent_cmp(const void *a, const void *b)
{
	return strcmp(((const dent *)a)->name, ((const dent *)b)->name);
}

/* A name as shown: valid UTF-8, control characters as '?'. New string. */
static char *display_name(const char *name)
{
	size_t n;
	char *s = cae_utf8_sanitize(name, strlen(name), &n);
	if (!s)
		return NULL;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
			s[i] = '?';
	return s;
}

static int list_line(listing *ls, const char *path)
{
	size_t len = strlen(path);
	size_t chars = ed_count_chars(path, len) + 1;
	if (ls->chars + chars > ls->ed->lim.max_output_chars) {
		ls->clipped = true;
		return 0;
	}
	ls->chars += chars;
	int r = cae_buf_append(ls->out, path, len);
	return r < 0 ? r : cae_buf_append(ls->out, "\n", 1);
}

static bool dent_is_dir(DIR *d, const struct dirent *de)
{
	if (de->d_type != DT_UNKNOWN)
		return de->d_type == DT_DIR;
	struct stat st;
	return fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode);
}

/* Reads the visible entries of d: all of them, or the max_dir_entries first in name order
 * (memory stays bounded for huge directories). Sorted. */
static int read_entries(listing *ls, DIR *d, const char *shown, dent **out, size_t *count)
{
	size_t max = ls->ed->lim.max_dir_entries, n = 0, cap = 0, total = 0;
	dent *ents = NULL;
	bool sorted = false;
	int r = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue; /* ".", "..", hidden */
		total++;
		size_t pos = n;
		if (n == max) {
			/* Full: keep the entry only if it sorts before the current last one. */
			if (!sorted) {
				qsort(ents, n, sizeof(dent), dent_cmp);
				sorted = true;
			}
			if (strcmp(de->d_name, ents[n - 1].name) >= 0)
				continue;
			size_t lo = 0, hi = n - 1;
			while (lo < hi) {
				size_t mid = (lo + hi) / 2;
				if (strcmp(ents[mid].name, de->d_name) < 0)
					lo = mid + 1;
				else
					hi = mid;
			}
			pos = lo;
			free(ents[n - 1].name);
			memmove(ents + pos + 1, ents + pos, (n - 1 - pos) * sizeof(dent));
			n--;
		} else if (n == cap) {
			size_t nc = cap ? cap * 2 : 32;
			if (nc > max)
				nc = max;
			dent *ne = realloc(ents, nc * sizeof(dent));
			if (!ne) {
				r = -ENOMEM;
				break;
			}
			ents = ne;
			cap = nc;
		}
		ents[pos].name = strdup(de->d_name);
		if (!ents[pos].name) {
			if (pos != n)
				memmove(ents + pos, ents + pos + 1, (n - pos) * sizeof(dent));
			r = -ENOMEM;
			break;
		}
		ents[pos].is_dir = dent_is_dir(d, de);
		n++;
	}
	if (r == 0 && !sorted && n > 1)
		qsort(ents, n, sizeof(dent), dent_cmp);
	if (r == 0 && total > n) {
		if (!ls->capped_dir) {
			ls->capped_dir = strdup(shown);
			ls->capped_total = total;
			if (!ls->capped_dir)
				r = -ENOMEM;
		} else {
			ls->capped_more++;
		}
	}
	*out = ents;
	*count = n;
	return r;
}

/* Lists the entries of the directory dfd (consumed), shown as `shown`, depth 1 or 2. */
static int list_dir(listing *ls, int dfd, const char *shown, int depth)
{
	DIR *d = fdopendir(dfd);
	if (!d) {
		close(dfd);
		return 0; /* unreadable: listed without entries, like find's stderr-only case */
	}
	dent *ents = NULL;
	size_t n = 0;
	int r = read_entries(ls, d, shown, &ents, &n);
	for (size_t i = 0; r == 0 && i < n && !ls->clipped; i++) {
		_cleanup_free_ char *dn = display_name(ents[i].name);
		_cleanup_free_ char *child = dn ? cae_path_join(shown, dn) : NULL;
		if (!child) {
			r = -ENOMEM;
			break;
		}
		r = list_line(ls, child);
		if (r == 0 && depth < 2 && ents[i].is_dir && !ls->clipped) {
			/* O_NOFOLLOW: a symlink is listed, never descended (find -P). */
			int sub = open_beneath(dirfd(d), ents[i].name,
					       O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
			if (sub >= 0)
				r = list_dir(ls, sub, child, depth + 1);
		}
	}
	for (size_t i = 0; i < n; i++)
		free(ents[i].name);
	free(ents);
	closedir(d);
	return r;
}

static int view_dir(cae_editor *ed, const target *t, cae_editor_result *res)
{
	int fd = t->base       ? open_beneath(t->dfd, t->base, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
		 : t->dfd >= 0 ? open_beneath(t->dfd, ".", O_RDONLY | O_DIRECTORY)
			       : open_beneath(ed->root_fd, ".", O_RDONLY | O_DIRECTORY);
	if (fd < 0)
		return resolve_error(ed, res, t->display, fd);
	cae_buf out;
	out_init(&out);
	listing ls = {.ed = ed, .out = &out};
	int r = cae_buf_printf(&out,
			       "Here's the files and directories up to 2 levels deep in %s, "
			       "excluding hidden items:\n",
			       t->display);
	if (r == 0)
		r = list_line(&ls, t->display);
	if (r == 0)
		r = list_dir(&ls, fd, t->display, 1);
	else
		close(fd);
	if (r == 0 && ls.clipped)
		r = cae_buf_printf(
		    &out,
		    "<response clipped><NOTE>Only part of this directory listing has "
		    "been shown (the output limit is %zu characters). View a "
		    "subdirectory, or use a shell command such as `find %s -maxdepth 1` "
		    "or `ls`, to see the rest.</NOTE>\n",
		    ed->lim.max_output_chars, t->display);
	if (r == 0 && ls.capped_dir) {
		r = cae_buf_printf(&out,
				   "Note: %s has %zu entries; only the first %zu in name order are "
				   "listed",
				   ls.capped_dir, ls.capped_total, ed->lim.max_dir_entries);
		if (r == 0 && ls.capped_more)
			r = cae_buf_printf(&out, " (%zu more director%s cut the same way)",
					   ls.capped_more,
					   ls.capped_more == 1 ? "y was" : "ies were");
		if (r == 0)
			r = cae_buf_puts(&out, ". Use a shell command such as `ls` to see all.\n");
	}
	free(ls.capped_dir);
	if (r == 0)
		r = cae_buf_append(&out, "\n", 1);
	if (r < 0) {
		cae_buf_clear(&out);
		return r;
	}
	return res_ok(res, cae_buf_steal(&out, NULL), "Directory listing for %s:", t->display);
}

static int view_file(cae_editor *ed, const target *t, const long long *range,
		     cae_editor_result *res)
{
	_cleanup_(loaded_clear) loaded l = {.fd = -1};
	int r = load_file(ed, t, false, NULL, &l, res);
	if (r != 0)
		return r;
	size_t nlines = ed_count_lines(l.text, l.len);
	size_t first = 1, last = nlines, start_off = 0, end_off = l.len;
	bool clamped = false;
	if (range) {
		long long a = range[0], b = range[1];
		if (nlines == 0) {
			r = res_error(res,
				      "Invalid `view_range`: [%lld, %lld]. The file %s is empty (0 "
				      "lines); view it without `view_range`.",
				      a, b, t->display);
			return r < 0 ? r : 1;
		}
		if (a < 1 || (unsigned long long)a > nlines) {
			r = res_error(
			    res,
			    "Invalid `view_range`: [%lld, %lld]. Its first element `%lld` "
			    "should be within the range of lines of the file: [1, %zu]",
			    a, b, a, nlines);
			return r < 0 ? r : 1;
		}
		if (b != -1 && b < a) {
			r = res_error(
			    res,
			    "Invalid `view_range`: [%lld, %lld]. Its second element `%lld` "
			    "should be larger or equal than its first `%lld`, or -1 for the "
			    "end of the file",
			    a, b, b, a);
			return r < 0 ? r : 1;
		}
		first = (size_t)a;
		if (b == -1 || (unsigned long long)b >= nlines) {
			clamped = b != -1 && (unsigned long long)b > nlines;
			last = nlines;
		} else {
			last = (size_t)b;
		}
		start_off = ed_line_offset(l.text, l.len, first - 1);
		end_off = ed_skip_lines(l.text, l.len, start_off, last - first + 1);
	}
	cae_buf out;
	out_init(&out);
	r = make_output(ed, &out, l.text + start_off, end_off - start_off, t->display, first,
			nlines, l.crlf);
	if (r == 0 && clamped)
		r = cae_buf_printf(
		    &out,
		    "Note: `view_range` [%lld, %lld] goes past the end of the file, "
		    "which has %zu lines; lines %zu-%zu are shown. Use -1 as the second "
		    "element to view up to the end of the file.\n",
		    range[0], range[1], nlines, first, nlines);
	if (r < 0) {
		cae_buf_clear(&out);
		return r;
	}
	return res_ok(res, cae_buf_steal(&out, NULL), "File content:");
}

/* resolve(), and the result names the file it acts on. Returns 0, 1 (error result set), or
 * -ENOMEM. */
static int resolve_named(cae_editor *ed, const char *path, size_t len, bool create, target *t,
			 cae_editor_result *res)
{
	int r = resolve(ed, path, len, create, t, res);
	if (r != 0)
		return r;
	res->path = strdup(t->display);
	return res->path ? 0 : -ENOMEM;
}

static int do_view(cae_editor *ed, const char *path, size_t plen, const long long *range,
		   cae_editor_result *res)
{
	_cleanup_(target_clear) target t = {.dfd = -1};
	int r = resolve_named(ed, path, plen, false, &t, res);
	if (r != 0)
		return r < 0 ? r : 0;
	if (!t.exists)
		r = resolve_error(ed, res, t.display, -ENOENT);
	else if (S_ISDIR(t.st.st_mode)) {
		if (range) {
			r = res_error(res, "The `view_range` parameter is not allowed when `path` "
					   "points to a directory.");
			r = r < 0 ? r : 1;
		} else {
			r = view_dir(ed, &t, res);
		}
	} else {
		r = view_file(ed, &t, range, res);
	}
	return r < 0 ? r : 0;
}

/* ---------------------------------------------------------------------------------------- */
/* Edits */

/* Common checks for commands that edit an existing file. Returns 0, 1 (error set), <0. */
static int check_editable(cae_editor *ed, const target *t, cae_editor_result *res)
{
	if (!t->exists)
		return resolve_error(ed, res, t->display, -ENOENT);
	if (S_ISDIR(t->st.st_mode))
		return refuse_directory(res, t);
	return 0;
}

static int text_arg_check(cae_editor_result *res, const char *name, const char *s, size_t n)
{
	int r;
	if (memchr(s, '\0', n)) {
		r = res_error(
		    res,
		    "Parameter `%s` contains a NUL character; the text editor only writes "
		    "text files.",
		    name);
		return r < 0 ? r : 1;
	}
	if (!cae_utf8_is_valid(s, n)) {
		r = res_error(res, "Parameter `%s` is not valid UTF-8 text.", name);
		return r < 0 ? r : 1;
	}
	return 0;
}

static int do_create(cae_editor *ed, const char *path, size_t plen, const char *text, size_t len,
		     cae_editor_result *res)
{
	int r = text_arg_check(res, "file_text", text, len);
	if (r != 0)
		return r < 0 ? r : 0;
	_cleanup_(target_clear) target t = {.dfd = -1};
	if (len > ed->lim.max_file_bytes) {
		r = res_error(res,
			      "Parameter `file_text` is too large (%zu bytes; the limit is %zu "
			      "bytes).",
			      len, ed->lim.max_file_bytes);
		return r < 0 ? r : 0;
	}
	/* missing directories are made in the write's transaction */
	if (ed->wsj && cae_txn_begin(ed->wsj, &ed->create_txn) < 0)
		ed->create_txn = NULL;
	r = resolve_named(ed, path, plen, true, &t, res);
	if (r == 0 && t.exists && S_ISDIR(t.st.st_mode))
		r = refuse_directory(res, &t);
	else if (r == 0 && t.exists) {
		r = res_error(res,
			      "File already exists at: %s. Cannot overwrite files using command "
			      "`create`.",
			      t.display);
		r = r < 0 ? r : 1;
	}
	if (r != 0) {
		cae_txn_abort(TAKE_PTR(ed->create_txn));
		return r < 0 ? r : 0;
	}
	seg s = {text, len};
	uint64_t written = 0;
	r = write_atomic(ed, &t, &s, 1, false, NEW_FILE_MODE, NULL, true,
			 ed->lim.undo_depth ? &written : NULL);
	cae_txn_abort(TAKE_PTR(ed->create_txn)); /* (taken by write_atomic) */
	if (r < 0) {
		r = write_error(res, t.display, r);
		return r < 0 ? r : 0;
	}
	if (ed_undo_push(ed->undo, t.key, NULL, 0, false, written) < 0)
		return -ENOMEM;
	_cleanup_free_ char *msg = NULL;
	if (asprintf(&msg, "File created successfully at: %s", t.display) < 0)
		return -ENOMEM;
	return res_ok(res, TAKE_PTR(msg), "File created: %s", t.display);
}

/* Builds and writes an edit: segments of the new (LF-form) text; keeps the old content for
 * undo. Returns 0, 1 (error set), <0. */
static int commit_edit(cae_editor *ed, const target *t, loaded *l, const seg *segs, size_t nsegs,
		       cae_editor_result *res, bool *undo_kept)
{
	size_t total = 0;
	for (size_t i = 0; i < nsegs; i++)
		total += segs[i].n;
	if (total > ed->lim.max_file_bytes) {
		int r = res_error(res,
				  "No change was made: the edited file %s would be %zu bytes, over "
				  "the limit of %zu bytes.",
				  t->display, total, ed->lim.max_file_bytes);
		return r < 0 ? r : 1;
	}
	uint64_t written = 0;
	int r = write_atomic(ed, t, segs, nsegs, l->crlf, l->st.st_mode, &l->st, false,
			     ed->lim.undo_depth ? &written : NULL);
	if (r < 0)
		return write_error(res, t->display, r);
	if (l->fd >= 0) {
		close_later(l->fd);
		l->fd = -1;
	}
	r = ed_undo_push(ed->undo, t->key, TAKE_PTR(l->raw), l->raw_len, true, written);
	if (r < 0)
		return r;
	*undo_kept = r == 1;
	return 0;
}

static const char UNDO_NOT_KEPT[] =
    "Note: this edit cannot be undone with `undo_edit` (the file is larger than the undo "
    "memory, or undo is disabled).\n";

/* Numbers a snippet built from pieces (pre + mid + post) starting at line first_no. */
static int snippet_output(cae_editor *ed, cae_buf *out, const seg *parts, size_t nparts,
			  const char *descr, size_t first_no)
{
	cae_buf sn;
	cae_buf_init(&sn, SIZE_MAX - 1);
	int r = 0;
	for (size_t i = 0; r == 0 && i < nparts; i++)
		r = cae_buf_append(&sn, parts[i].p, parts[i].n);
	if (r == 0) {
		r = cae_buf_printf(out, "Here's the result of running `cat -n` on %s:\n", descr);
		ed_numbered nb;
		if (r == 0)
			r = ed_number_lines(out, sn.data ? sn.data : "", sn.len, first_no,
					    ed->lim.max_output_chars, false, &nb);
		if (r == 0 && nb.clipped)
			r = cae_buf_puts(out, "<response clipped><NOTE>The snippet was clipped to "
					      "save on context; use `view` with `view_range` to "
					      "see the edited lines.</NOTE>\n");
	}
	cae_buf_clear(&sn);
	return r;
}

/* "Multiple occurrences" error: the line of every occurrence (non-overlapping, like the
 * reference's count), also for a multi-line old_str (the line where each one starts). */
static int multiple_error(cae_editor_result *res, const char *text, size_t len, const char *old,
			  size_t olen, size_t first)
{
	cae_buf lines;
	cae_buf_init(&lines, 1 << 16);
	size_t listed = 0, line = 1, counted = 0, last_line = 0;
	int r = cae_buf_puts(&lines, "[");
	for (size_t pos = first; r == 0;) {
		line += ed_count_newlines(text + counted, pos - counted);
		counted = pos;
		if (line != last_line) {
			if (listed < MAX_LISTED_LINES)
				r = cae_buf_printf(&lines, "%s%zu", listed ? ", " : "", line);
			listed++;
			last_line = line;
		}
		const char *next = memmem(text + pos + olen, len - pos - olen, old, olen);
		if (!next)
			break;
		pos = (size_t)(next - text);
	}
	if (r == 0 && listed > MAX_LISTED_LINES)
		r = cae_buf_printf(&lines, ", ... (%zu lines in all)", listed);
	if (r == 0)
		r = cae_buf_puts(&lines, "]");
	_cleanup_free_ char *echo = echo_str(old, olen);
	if (r == 0 && echo)
		r = res_error(res,
			      "No replacement was performed. Multiple occurrences of old_str `%s` "
			      "in lines %s%s. Please ensure it is unique: include more of the "
			      "surrounding lines in old_str.",
			      echo, lines.data,
			      memchr(old, '\n', olen) ? " (the line where each occurrence starts)"
						      : "");
	else if (r == 0)
		r = -ENOMEM;
	cae_buf_clear(&lines);
	return r < 0 ? r : 1;
}

/* "No match" error, with the line of a match that differs only in whitespace if any. */
static int nomatch_error(cae_editor_result *res, const target *t, const char *text, size_t len,
			 const char *old, size_t olen)
{
	ed_ws_match m[MAX_LISTED_LINES];
	bool gave_up;
	size_t found = ed_ws_find(text, len, old, olen, m, MAX_LISTED_LINES, &gave_up);
	cae_buf hint;
	cae_buf_init(&hint, 1 << 16);
	int r = 0;
	if (found == 1) {
		if (m[0].first_line == m[0].last_line)
			r = cae_buf_printf(&hint, "at line %zu", m[0].first_line);
		else
			r = cae_buf_printf(&hint, "at lines %zu-%zu", m[0].first_line,
					   m[0].last_line);
		if (r == 0)
			r = cae_buf_puts(&hint,
					 ". View those lines and copy them exactly into old_str, "
					 "whitespace included.");
	} else if (found > 1) {
		r = cae_buf_puts(&hint, "at lines [");
		size_t shown = found < MAX_LISTED_LINES ? found : MAX_LISTED_LINES;
		for (size_t i = 0; r == 0 && i < shown; i++)
			r = cae_buf_printf(&hint, "%s%zu", i ? ", " : "", m[i].first_line);
		if (r == 0 && found > shown)
			r = cae_buf_printf(&hint, ", ... (%zu in all)", found);
		if (r == 0)
			r = cae_buf_puts(&hint,
					 "]. View those lines, copy the one you mean exactly "
					 "into old_str, whitespace included, with enough "
					 "surrounding lines to make it unique.");
	}
	_cleanup_free_ char *echo = echo_str(old, olen);
	if (r == 0 && !echo)
		r = -ENOMEM;
	if (r == 0 && found == 0)
		r = res_error(res,
			      "No replacement was performed, old_str `%s` did not appear verbatim "
			      "in %s.",
			      echo, t->display);
	else if (r == 0)
		r = res_error(
		    res,
		    "No replacement was performed, old_str `%s` did not appear verbatim "
		    "in %s. %s that differ%s from it only in whitespace (indentation, tabs "
		    "or spaces, line endings, trailing spaces) %s found %s",
		    echo, t->display, found == 1 ? "A match" : "Matches", found == 1 ? "s" : "",
		    found == 1 ? "was" : "were", hint.data);
	cae_buf_clear(&hint);
	return r < 0 ? r : 1;
}

/* For a CRLF file: old_str/new_str with "\r\n" as "\n" (a new copy in *owned if changed). */
static int to_lf(bool crlf, const char **s, size_t *n, char **owned)
{
	*owned = NULL;
	if (!crlf || !memchr(*s, '\r', *n))
		return 0;
	*owned = ed_crlf_to_lf(*s, *n, n);
	if (!*owned)
		return -ENOMEM;
	*s = *owned;
	return 0;
}

static int finish_edit_output(cae_buf *out, const char *hint, bool undo_kept)
{
	int r = cae_buf_puts(out, hint);
	if (r == 0 && !undo_kept)
		r = cae_buf_printf(out, "\n%s", UNDO_NOT_KEPT);
	return r;
}

static int do_str_replace(cae_editor *ed, const char *path, size_t plen, const char *old,
			  size_t olen, const char *new, size_t nlen, cae_editor_result *res)
{
	int r;
	if (!new) {
		new = "";
		nlen = 0;
	}
	if (olen == 0) {
		r = res_error(res, "Parameter `old_str` must not be empty: it must be the exact "
				   "text to replace, whitespace and indentation included.");
		return r < 0 ? r : 0;
	}
	if ((r = text_arg_check(res, "old_str", old, olen)) != 0 ||
	    (r = text_arg_check(res, "new_str", new, nlen)) != 0)
		return r < 0 ? r : 0;
	if (olen == nlen && memcmp(old, new, olen) == 0) {
		r = res_error(res, "No replacement was performed: `old_str` and `new_str` are "
				   "identical, so the file would not change.");
		return r < 0 ? r : 0;
	}
	_cleanup_(target_clear) target t = {.dfd = -1};
	r = resolve_named(ed, path, plen, false, &t, res);
	if (r != 0)
		return r < 0 ? r : 0;
	if ((r = check_editable(ed, &t, res)) != 0)
		return r < 0 ? r : 0;
	/* old_str is searched while the file is read; that result stands unless the file is
	 * CRLF (it is then searched again, in LF form). */
	ed_search se;
	ed_search_init(&se, old, olen);
	_cleanup_(loaded_clear) loaded l = {.fd = -1};
	if ((r = load_file(ed, &t, true, &se, &l, res)) != 0)
		return r < 0 ? r : 0;
	_cleanup_free_ char *old_own = NULL, *new_own = NULL;
	if (to_lf(l.crlf, &old, &olen, &old_own) < 0 || to_lf(l.crlf, &new, &nlen, &new_own) < 0)
		return -ENOMEM;
	if (olen == nlen && memcmp(old, new, olen) == 0) {
		r = res_error(res, "No replacement was performed: `old_str` and `new_str` only "
				   "differ in line endings, so the file would not change.");
		return r < 0 ? r : 0;
	}
	const char *text = l.text;
	size_t len = l.len;
	if (l.crlf) {
		ed_search_init(&se, old, olen);
		ed_search_feed(&se, text, len);
	}
	if (se.first == SIZE_MAX) {
		r = nomatch_error(res, &t, text, len, old, olen);
		return r < 0 ? r : 0;
	}
	size_t off = se.first;
	if (se.second != SIZE_MAX) {
		r = multiple_error(res, text, len, old, olen, off);
		return r < 0 ? r : 0;
	}

	/* The answer first (it reads the old text, which goes to the undo history). */
	size_t line0 = se.newlines;
	size_t pre = ed_back_lines(text, off, SNIPPET_LINES);
	size_t first_no = line0 - ed_count_newlines(text + pre, off - pre) + 1;
	size_t post_end = ed_skip_lines(text, len, off + olen, SNIPPET_LINES + 1);
	seg parts[3] = {
	    {text + pre, off - pre},
	    {new, nlen},
	    {text + off + olen, post_end - off - olen},
	};
	cae_buf out;
	out_init(&out);
	_cleanup_free_ char *descr = NULL;
	if (asprintf(&descr, "a snippet of %s", t.display) < 0)
		return -ENOMEM;
	r = cae_buf_printf(&out, "The file %s has been edited. ", t.display);
	if (r == 0)
		r = snippet_output(ed, &out, parts, 3, descr, first_no);
	if (r < 0) {
		cae_buf_clear(&out);
		return r;
	}
	seg segs[3] = {
	    {text, off},
	    {new, nlen},
	    {text + off + olen, len - off - olen},
	};
	bool kept = false;
	r = commit_edit(ed, &t, &l, segs, 3, res, &kept);
	if (r == 0)
		r = finish_edit_output(&out, REVIEW_HINT, kept);
	if (r != 0) {
		cae_buf_clear(&out);
		return r < 0 ? r : 0;
	}
	return res_ok(res, cae_buf_steal(&out, NULL), "Successfully replaced text in %s",
		      t.display);
}

static int do_insert(cae_editor *ed, const char *path, size_t plen, long long line, const char *new,
		     size_t nlen, cae_editor_result *res)
{
	int r = text_arg_check(res, "new_str", new, nlen);
	if (r != 0)
		return r < 0 ? r : 0;
	_cleanup_(target_clear) target t = {.dfd = -1};
	r = resolve_named(ed, path, plen, false, &t, res);
	if (r != 0)
		return r < 0 ? r : 0;
	if ((r = check_editable(ed, &t, res)) != 0)
		return r < 0 ? r : 0;
	_cleanup_(loaded_clear) loaded l = {.fd = -1};
	if ((r = load_file(ed, &t, true, NULL, &l, res)) != 0)
		return r < 0 ? r : 0;
	const char *text = l.text;
	size_t len = l.len;
	size_t nlines = ed_count_lines(text, len);
	if (line < 0 || (unsigned long long)line > nlines) {
		r = res_error(
		    res,
		    "Invalid `insert_line` parameter: %lld. It should be within the range "
		    "of lines of the file: [0, %zu] (0 inserts at the top, %zu after the "
		    "last line)",
		    line, nlines, nlines);
		return r < 0 ? r : 0;
	}
	_cleanup_free_ char *new_own = NULL;
	if (to_lf(l.crlf, &new, &nlen, &new_own) < 0)
		return -ENOMEM;
	size_t L = (size_t)line;
	bool ends_nl = len == 0 || text[len - 1] == '\n';
	bool new_ends_nl = nlen > 0 && new[nlen - 1] == '\n';
	seg segs[4];
	size_t nsegs;
	seg parts[5];
	size_t nparts;
	if (L == nlines && !ends_nl) {
		/* After an unterminated last line: it gets its "\n", the file stays without a
		 * final newline. */
		size_t body = new_ends_nl ? nlen - 1 : nlen;
		size_t pre = ed_back_lines(text, len, SNIPPET_LINES - 1);
		segs[0] = (seg){text, len};
		segs[1] = (seg){"\n", 1};
		segs[2] = (seg){new, body};
		nsegs = 3;
		parts[0] = (seg){text + pre, len - pre};
		parts[1] = (seg){"\n", 1};
		parts[2] = (seg){new, body};
		nparts = 3;
	} else {
		size_t off = ed_line_offset(text, len, L);
		size_t pre = ed_back_lines(text, off, SNIPPET_LINES);
		size_t post = ed_skip_lines(text, len, off, SNIPPET_LINES);
		segs[0] = (seg){text, off};
		segs[1] = (seg){new, nlen};
		segs[2] = (seg){"\n", new_ends_nl ? 0 : 1};
		segs[3] = (seg){text + off, len - off};
		nsegs = 4;
		parts[0] = (seg){text + pre, off - pre};
		parts[1] = segs[1];
		parts[2] = segs[2];
		parts[3] = (seg){text + off, post - off};
		nparts = 4;
	}
	size_t first_no = L >= SNIPPET_LINES ? L - SNIPPET_LINES + 1 : 1;
	cae_buf out;
	out_init(&out);
	r = cae_buf_printf(&out, "The file %s has been edited. ", t.display);
	if (r == 0)
		r = snippet_output(ed, &out, parts, nparts, "a snippet of the edited file",
				   first_no);
	if (r < 0) {
		cae_buf_clear(&out);
		return r;
	}
	bool kept = false;
	r = commit_edit(ed, &t, &l, segs, nsegs, res, &kept);
	if (r == 0)
		r = finish_edit_output(&out, REVIEW_HINT_INSERT, kept);
	if (r != 0) {
		cae_buf_clear(&out);
		return r < 0 ? r : 0;
	}
	return res_ok(res, cae_buf_steal(&out, NULL),
		      "Successfully inserted text after line %lld in %s", line, t.display);
}

/* Whether t still holds what the editor wrote (ed_hash `written`). Returns 0 (it does), 1 (it
 * changed or is gone), or -ENOMEM. */
static int changed_since(cae_editor *ed, const target *t, uint64_t written)
{
	if (!t->exists || !S_ISREG(t->st.st_mode) ||
	    (unsigned long long)t->st.st_size > ed->lim.max_file_bytes)
		return 1;
	_cleanup_close_ int fd =
	    openat(t->dfd, t->base, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
	if (fd < 0)
		return 1;
	char *buf = NULL;
	size_t n = 0;
	int r = cae_read_fd(fd, ed->lim.max_file_bytes, &buf, &n);
	if (r == -ENOMEM)
		return r;
	if (r < 0)
		return 1;
	ed_hash hs;
	ed_hash_init(&hs);
	ed_hash_feed(&hs, buf, n);
	spare_put(ed, buf);
	return ed_hash_final(&hs) == written ? 0 : 1;
}

static int do_undo(cae_editor *ed, const char *path, size_t plen, cae_editor_result *res)
{
	_cleanup_(target_clear) target t = {.dfd = -1};
	int r = resolve_named(ed, path, plen, false, &t, res);
	if (r != 0)
		return r < 0 ? r : 0;
	if (t.exists && S_ISDIR(t.st.st_mode)) {
		r = refuse_directory(res, &t);
		return r < 0 ? r : 0;
	}
	if (t.exists && !S_ISREG(t.st.st_mode)) {
		r = refuse_special(res, &t);
		return r < 0 ? r : 0;
	}
	char *data = NULL;
	size_t len = 0;
	bool existed = false;
	uint64_t written = 0;
	if (ed_undo_pop(ed->undo, t.key, &data, &len, &existed, &written) == 0) {
		r = res_error(res, "No edit history found for %s.", t.display);
		return r < 0 ? r : 0;
	}
	/* Only what the edit wrote is undone: a change made since (a command, another process)
	 * would be lost without a word. The entry stays for when the file is back. */
	int c = changed_since(ed, &t, written);
	if (c != 0) {
		if (ed_undo_push(ed->undo, t.key, data, len, existed, written) < 0 || c < 0)
			return -ENOMEM;
		if (!t.exists)
			r = res_error(res,
				      "%s was removed since the last edit (by a command or another "
				      "process); undo_edit would bring back an older version and "
				      "discard that removal. Nothing was changed; use `create` to "
				      "write the file again.",
				      t.display);
		else
			r = res_error(res,
				      "%s changed since the last edit (by a command or another "
				      "process); undo_edit would discard that change. Nothing was "
				      "changed: view the file and edit it instead.",
				      t.display);
		return r < 0 ? r : 0;
	}
	if (!existed) {
		if (t.exists && unlinkat(t.dfd, t.base, 0) < 0 && errno != ENOENT) {
			int e = -errno;
			if (ed_undo_push(ed->undo, t.key, NULL, 0, false, written) < 0)
				return -ENOMEM;
			r = write_error(res, t.display, e);
			return r < 0 ? r : 0;
		}
		_cleanup_free_ char *msg = NULL;
		if (asprintf(&msg,
			     "Last edit to %s undone successfully. The file did not exist before "
			     "it was created with `create`, so it has been removed.",
			     t.display) < 0)
			return -ENOMEM;
		return res_ok(res, TAKE_PTR(msg), "Successfully reverted last edit to %s",
			      t.display);
	}
	seg s = {data, len};
	r = write_atomic(ed, &t, &s, 1, false, t.exists ? t.st.st_mode : NEW_FILE_MODE,
			 t.exists ? &t.st : NULL, false, NULL);
	if (r < 0) {
		/* Keep the entry: the agent may retry. */
		if (ed_undo_push(ed->undo, t.key, data, len, true, written) < 0)
			return -ENOMEM;
		r = write_error(res, t.display, r);
		return r < 0 ? r : 0;
	}
	cae_buf out;
	out_init(&out);
	r = cae_buf_printf(&out, "Last edit to %s undone successfully. ", t.display);
	if (r == 0)
		r = make_output(ed, &out, data, len, t.display, 1, ed_count_lines(data, len),
				ed_is_crlf(data, len));
	spare_put(ed, data);
	if (r < 0) {
		cae_buf_clear(&out);
		return r;
	}
	return res_ok(res, cae_buf_steal(&out, NULL), "Successfully reverted last edit to %s",
		      t.display);
}

/* ---------------------------------------------------------------------------------------- */
/* Entry points */

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

static int call_locked(cae_editor *ed, json_t *args, cae_editor_result *res)
{
	if (!json_is_object(args))
		return res_error(res,
				 "Invalid arguments: expected a JSON object with `command` and "
				 "`path`.");
	const char *cmd_s, *path, *s1, *s2;
	size_t cmd_n, plen, n1, n2;
	int k = get_str(args, "command", &cmd_s, &cmd_n);
	if (k <= 0)
		return res_error(
		    res,
		    "Parameter `command` %s: one of view, create, str_replace, insert, "
		    "undo_edit.",
		    k == 0 ? "is required" : "must be a string");
	cae_editor_command cmd = CAE_EDITOR_CMD_UNKNOWN;
	for (size_t i = 0; i < ARRAY_SIZE(COMMANDS); i++)
		if (strlen(COMMANDS[i].name) == cmd_n && strcmp(COMMANDS[i].name, cmd_s) == 0)
			cmd = COMMANDS[i].cmd;
	if (cmd == CAE_EDITOR_CMD_UNKNOWN) {
		_cleanup_free_ char *echo = echo_str(cmd_s, cmd_n);
		if (!echo)
			return -ENOMEM;
		return res_error(res,
				 "Unrecognized command %s. The allowed commands are: view, create, "
				 "str_replace, insert, undo_edit",
				 echo);
	}
	res->command = cmd;
	const char *name = cae_editor_command_name(cmd);
	k = get_str(args, "path", &path, &plen);
	if (k == 0)
		return res_error(res, "Parameter `path` is required for command: %s", name);
	if (k < 0)
		return res_error(res, "Parameter `path` must be a string (command: %s)", name);

	switch (cmd) {
	case CAE_EDITOR_CMD_VIEW: {
		json_t *vr = json_object_get(args, "view_range");
		long long range[2];
		bool have = false;
		if (vr && !json_is_null(vr) && !(json_is_array(vr) && json_array_size(vr) == 0)) {
			if (!json_is_array(vr) || json_array_size(vr) != 2 ||
			    !get_int(json_array_get(vr, 0), &range[0]) ||
			    !get_int(json_array_get(vr, 1), &range[1]))
				return res_error(res,
						 "Invalid `view_range`. It should be a list of "
						 "two integers: [start_line, end_line], counted "
						 "from 1, with end_line -1 for the end of the "
						 "file.");
			have = true;
		}
		return do_view(ed, path, plen, have ? range : NULL, res);
	}
	case CAE_EDITOR_CMD_CREATE:
		k = get_str(args, "file_text", &s1, &n1);
		if (k == 0)
			return res_error(res, "Parameter `file_text` is required for command: %s",
					 name);
		if (k < 0)
			return res_error(res, "Parameter `file_text` must be a string");
		return do_create(ed, path, plen, s1, n1, res);
	case CAE_EDITOR_CMD_STR_REPLACE:
		k = get_str(args, "old_str", &s1, &n1);
		if (k == 0)
			return res_error(res, "Parameter `old_str` is required for command: %s",
					 name);
		if (k < 0)
			return res_error(res, "Parameter `old_str` must be a string");
		if (get_str(args, "new_str", &s2, &n2) < 0)
			return res_error(res, "Parameter `new_str` must be a string");
		return do_str_replace(ed, path, plen, s1, n1, s2, n2, res);
	case CAE_EDITOR_CMD_INSERT: {
		json_t *il = json_object_get(args, "insert_line");
		long long line;
		if (!il || json_is_null(il))
			return res_error(res, "Parameter `insert_line` is required for command: %s",
					 name);
		if (!get_int(il, &line))
			return res_error(res, "Invalid `insert_line` parameter: it should be an "
					      "integer, the line after which to insert (0 for the "
					      "top of the file).");
		k = get_str(args, "new_str", &s2, &n2);
		if (k == 0)
			return res_error(res, "Parameter `new_str` is required for command: %s",
					 name);
		if (k < 0)
			return res_error(res, "Parameter `new_str` must be a string");
		return do_insert(ed, path, plen, line, s2, n2, res);
	}
	case CAE_EDITOR_CMD_UNDO_EDIT:
		return do_undo(ed, path, plen, res);
	default:
		return 0;
	}
}

static int finish(cae_editor *ed, cae_editor_result *res, int r)
{
	pthread_mutex_unlock(&ed->lock);
	if (r < 0)
		cae_editor_result_clear(res);
	return r < 0 ? r : 0;
}

int cae_editor_call(cae_editor *ed, json_t *args, cae_editor_result *res)
{
	memset(res, 0, sizeof(*res));
	pthread_mutex_lock(&ed->lock);
	return finish(ed, res, call_locked(ed, args, res));
}

int cae_editor_view(cae_editor *ed, const char *path, const long long *view_range,
		    cae_editor_result *res)
{
	memset(res, 0, sizeof(*res));
	res->command = CAE_EDITOR_CMD_VIEW;
	pthread_mutex_lock(&ed->lock);
	return finish(ed, res, do_view(ed, path, strlen(path), view_range, res));
}

int cae_editor_create(cae_editor *ed, const char *path, const char *file_text, size_t len,
		      cae_editor_result *res)
{
	memset(res, 0, sizeof(*res));
	res->command = CAE_EDITOR_CMD_CREATE;
	pthread_mutex_lock(&ed->lock);
	return finish(ed, res, do_create(ed, path, strlen(path), file_text, len, res));
}

int cae_editor_str_replace(cae_editor *ed, const char *path, const char *old_str, size_t old_len,
			   const char *new_str, size_t new_len, cae_editor_result *res)
{
	memset(res, 0, sizeof(*res));
	res->command = CAE_EDITOR_CMD_STR_REPLACE;
	pthread_mutex_lock(&ed->lock);
	return finish(
	    ed, res,
	    do_str_replace(ed, path, strlen(path), old_str, old_len, new_str, new_len, res));
}

int cae_editor_insert(cae_editor *ed, const char *path, long long insert_line, const char *new_str,
		      size_t new_len, cae_editor_result *res)
{
	memset(res, 0, sizeof(*res));
	res->command = CAE_EDITOR_CMD_INSERT;
	pthread_mutex_lock(&ed->lock);
	return finish(ed, res,
		      do_insert(ed, path, strlen(path), insert_line, new_str, new_len, res));
}

int cae_editor_undo_edit(cae_editor *ed, const char *path, cae_editor_result *res)
{
	memset(res, 0, sizeof(*res));
	res->command = CAE_EDITOR_CMD_UNDO_EDIT;
	pthread_mutex_lock(&ed->lock);
	return finish(ed, res, do_undo(ed, path, strlen(path), res));
}
