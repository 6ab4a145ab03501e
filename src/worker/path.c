/* What the worker refuses in a patch's path before touching anything, worded for the patch's
 * author. The rule itself is base/chase.h's cae__path_lexical, with the worker's stricter
 * choice that a patch path has no ".." at all; the file system (fs-host.c, wherever it runs) then
 * resolve every symbolic link inside the workspace. */
#include "worker/worker-internal.h"

#include "base/chase.h"
#include "base/macro.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/banned.h"

int cae__wk_path_rel(const char *root, const char *path, char **rel, cae_error *err)
{
	*rel = NULL;
	size_t len = path ? strlen(path) : 0;
	_cleanup_free_ char *r = NULL;
	switch (cae__path_lexical(root, NULL, path, len, CAE_PATH_NO_DOTDOT, &r)) {
	case 0:
		break;
	case -ENOENT:
		return cae_error_set(err, -EACCES, "empty path: give a file inside the workspace");
	case -ENAMETOOLONG:
		return cae_error_set(err, -EACCES, "path too long (%zu bytes, at most %d)", len,
				     CAE_PATH_MAX);
	case -EACCES:
		return cae_error_set(err, -EACCES,
				     "%s: security error: '..' is not allowed in a path; give the "
				     "path relative to the workspace %s",
				     path, root);
	case -EXDEV:
	case -EINVAL:
		return cae_error_set(err, -EACCES,
				     "%s: security error: the path is outside the workspace %s; "
				     "only files inside it can be written",
				     path, root);
	default:
		return cae_error_set(err, -ENOMEM, "out of memory");
	}
	if (!*r)
		return cae_error_set(err, -EACCES, "%s: the workspace itself is not a file", path);
	*rel = TAKE_PTR(r);
	return 0;
}
