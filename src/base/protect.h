/* Protected paths (command_executor.protected_paths): workspace-relative paths that the
 * editor and the patch worker never write, whatever spelling leads there. Owned by base:
 * the editor (src/editor/path.c) and the worker's host file system (src/worker/fs-host.c)
 * both ask here; commands are kept out by the backends (a read-only mount, ownership).
 *
 * A target is protected when its physical path below the workspace (what the kernel says
 * the resolved directory is, so links, "." and ".." are gone) is a protected path or lies
 * below one, compared component by component without regard to ASCII case (".GIT/Hooks"
 * is refused too: on a case-insensitive file system it is the same directory). */
#ifndef CAE_BASE_PROTECT_H
#define CAE_BASE_PROTECT_H

#include <stdbool.h>
#include <stddef.h>

/* Whether the workspace-relative path rel (as the agent wrote it, already made relative:
 * no "..", see cae__path_lexical) is at or below one of paths[0..n): the check before
 * anything is resolved or made. */
bool cae__protected_lexical(const char *rel, const char *const *paths, size_t n);

/* Whether name in the directory dfd (name "" for dfd itself) is at or below one of
 * paths[0..n), the workspace being the directory root_fd. Returns 1 (protected), 0 (not),
 * or -errno when the physical paths cannot be read (callers refuse then) or dfd is not
 * beneath root_fd (-EXDEV). */
int cae__protected_at(int root_fd, int dfd, const char *name, const char *const *paths, size_t n);

#endif
