/* From the agent's path to a target in the workspace. The confinement itself is base/chase.h:
 * cae__path_lexical turns the path into a workspace-relative one (".." left for the resolver),
 * cae__chase resolves it beneath the workspace fd (openat2 RESOLVE_BENEATH, a final symbolic
 * link followed by hand). What remains here is the editor's wording of each refusal, its
 * undo key, and the refusal to write at or below a protected path (base/protect.h). */
#include "editor-internal.h"

#include "base/buf.h"
#include "base/chase.h"
#include "base/fs.h"
#include "base/macro.h"
#include "base/protect.h"
#include "base/txn.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/banned.h"

char *cae__ed_path_root_normalize(const char *display_root)
{
	if (!display_root || display_root[0] != '/')
		return NULL;
	char *root = NULL;
	if (cae__path_lexical("/", NULL, display_root, strlen(display_root),
			      CAE_PATH_FOLD_DOTDOT | CAE_PATH_ABSOLUTE, &root) < 0)
		return NULL;
	return root;
}

ed_path_error cae__ed_path_to_rel(const char *root, const char *path, size_t len, char **rel)
{
	switch (cae__path_lexical(root, NULL, path, len, CAE_PATH_UTF8, rel)) {
	case 0:
		return ED_PATH_OK;
	case -ENOENT:
		return ED_PATH_EMPTY;
	case -ENAMETOOLONG:
		return ED_PATH_TOO_LONG;
	case -EINVAL:
		return ED_PATH_NUL;
	case -EILSEQ:
		return ED_PATH_NOT_UTF8;
	case -EXDEV:
		return ED_PATH_OUTSIDE;
	default:
		return ED_PATH_NOMEM;
	}
}

char *cae__ed_path_display(const char *root, const char *rel)
{
	return cae__path_join(root, rel);
}

void cae__ed_target_clear(ed_target *t)
{
	free(t->display);
	free(t->key);
	free(t->dir);
	free(t->base);
	if (t->dfd >= 0)
		close(t->dfd);
	*t = (ed_target)ED_TARGET_INIT;
}

int cae__ed_resolve_error(cae_editor *ed, cae_editor_result *res, const char *display, int e)
{
	int r;
	switch (e) {
	case -ENOENT:
		r = cae__ed_res_error(
		    res, "The path %s does not exist. Please provide a valid path.", display);
		break;
	case -ENOTDIR:
		r = cae__ed_res_error(
		    res,
		    "The path %s does not exist (a part of it is not a directory). "
		    "Please provide a valid path.",
		    display);
		break;
	case -EXDEV:
		r = cae__ed_res_error(
		    res,
		    "The path %s leads outside the workspace %s (through `..` or a "
		    "symbolic link). Only files and directories inside %s can be "
		    "viewed or edited.",
		    display, ed->root, ed->root);
		break;
	case -ELOOP:
		r = cae__ed_res_error(
		    res,
		    "The path %s could not be resolved: too many levels of symbolic "
		    "links, or a link that is not allowed.",
		    display);
		break;
	case -ENAMETOOLONG:
		r = cae__ed_res_error(res, "The path %s is too long (a name in it is too long).",
				      display);
		break;
	case -EACCES:
	case -EPERM:
		r = cae__ed_res_error(res, "Permission denied while trying to access %s.", display);
		break;
	case -ENOMEM:
		return -ENOMEM;
	default:
		r = cae__ed_res_error(res, "Ran into %s while trying to access %s.", strerror(-e),
				      display);
		break;
	}
	return r < 0 ? r : 1;
}

/* The lexical step, worded for the agent. Returns 0 (*rel new), 1 (error set), -ENOMEM. */
static int to_rel(cae_editor *ed, const char *path, size_t len, char **rel, cae_editor_result *res)
{
	int r;
	switch (cae__ed_path_to_rel(ed->root, path, len, rel)) {
	case ED_PATH_OK:
		return 0;
	case ED_PATH_EMPTY:
		r = cae__ed_res_error(
		    res, "Parameter `path` must not be empty: give a path inside %s.", ed->root);
		break;
	case ED_PATH_TOO_LONG:
		r = cae__ed_res_error(
		    res, "The path is too long (%zu bytes); a path has at most %d bytes.", len,
		    ED_PATH_MAX);
		break;
	case ED_PATH_NUL:
		r = cae__ed_res_error(
		    res, "The path contains a NUL character, which no file name can hold.");
		break;
	case ED_PATH_NOT_UTF8:
		r = cae__ed_res_error(res,
				      "The path is not valid UTF-8; give the path as UTF-8 text.");
		break;
	case ED_PATH_OUTSIDE:
		r = cae__ed_res_error(
		    res,
		    "The path %.*s is outside the workspace %s. Only files and "
		    "directories inside %s can be viewed or edited; a relative path "
		    "is taken relative to %s.",
		    (int)len, path, ed->root, ed->root, ed->root);
		break;
	case ED_PATH_NOMEM:
	default:
		return -ENOMEM;
	}
	return r < 0 ? r : 1;
}

static int refuse_protected(cae_editor *ed, cae_editor_result *res, const char *display)
{
	cae_buf list;
	cae__buf_init(&list, 64 * 1024);
	int r = 0;
	for (size_t i = 0; i < ed->lim.n_protected_paths && r == 0; i++)
		r = cae__buf_printf(&list, "%s%s", i ? ", " : "", ed->lim.protected_paths[i]);
	if (r == 0)
		r = cae__ed_res_error(
		    res,
		    "The path %s is protected: it is, or lies below, one of the workspace's "
		    "protected paths (%s), which the editor does not create, edit or undo (and "
		    "commands cannot change). Edit files elsewhere in the workspace.",
		    display, list.data ? list.data : "");
	cae__buf_clear(&list);
	return r < 0 ? -ENOMEM : 1;
}

static int resolve(cae_editor *ed, const char *path, size_t len, bool create, bool write,
		   ed_target *t, cae_editor_result *res)
{
	*t = (ed_target)ED_TARGET_INIT;
	_cleanup_free_ char *rel = NULL;
	int r = to_rel(ed, path, len, &rel, res);
	if (r != 0)
		return r;
	t->display = cae__ed_path_display(ed->root, rel);
	if (!t->display)
		return -ENOMEM;
	bool guard = write && ed->lim.n_protected_paths > 0;
	/* as written: refused before a missing directory is made */
	if (guard &&
	    cae__protected_lexical(rel, ed->lim.protected_paths, ed->lim.n_protected_paths))
		return refuse_protected(ed, res, t->display);
	_cleanup_(cae__chased_clear) cae_chased c = CAE_CHASED_INIT;
	r = cae__chase(ed->root_fd, rel, CAE_CHASE_PARENT | (create ? CAE_CHASE_MKDIR : 0),
		       ed->create_txn ? cae__txn_mkdir_hook : NULL, ed->create_txn, &c);
	if (r < 0)
		return cae__ed_resolve_error(ed, res, t->display, r);
	t->exists = c.exists;
	t->st = c.st;
	t->dfd = TAKE_FD(c.fd);
	if (!*c.name) {
		/* A directory named as itself (the workspace, "dir/", a link to ".."): dfd is
		 * that directory; its path is its undo key. */
		t->key = TAKE_PTR(c.dir);
	} else {
		/* The undo key: the parent directory's identity and the name, so every spelling
		 * of the path (links, "..") shares one history. */
		struct stat dst;
		if (fstat(t->dfd, &dst) < 0)
			return cae__ed_resolve_error(ed, res, t->display, -errno);
		if (asprintf(&t->key, "%llu:%llu/%s", (unsigned long long)dst.st_dev,
			     (unsigned long long)dst.st_ino, c.name) < 0) {
			t->key = NULL;
			return -ENOMEM;
		}
		t->dir = TAKE_PTR(c.dir);
		t->base = TAKE_PTR(c.name);
	}
	if (guard) {
		/* as resolved: whatever links or spelling led here */
		r = cae__protected_at(ed->root_fd, t->dfd, t->base ? t->base : "",
				      ed->lim.protected_paths, ed->lim.n_protected_paths);
		if (r > 0)
			return refuse_protected(ed, res, t->display);
		if (r < 0)
			return cae__ed_resolve_error(ed, res, t->display, r);
	}
	res->path = strdup(t->display);
	return res->path ? 0 : -ENOMEM;
}

int cae__ed_resolve(cae_editor *ed, const char *path, size_t len, bool create, ed_target *t,
		    cae_editor_result *res)
{
	return resolve(ed, path, len, create, false, t, res);
}

int cae__ed_resolve_write(cae_editor *ed, const char *path, size_t len, bool create, ed_target *t,
			  cae_editor_result *res)
{
	return resolve(ed, path, len, create, true, t, res);
}
