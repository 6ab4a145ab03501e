/* Workspace confinement in one place (libc + Linux syscalls only): how a path given by an
 * agent, a patch or a command becomes a file beneath a root directory.
 *
 * Two steps, always the same:
 *   1. cae__path_lexical: the text alone. The agent's path (relative, or absolute under the
 *      root as the agent sees it) becomes a path relative to the root; empty and "."
 *      components and repeated or trailing slashes go.
 *   2. cae__chase: the file system. That relative path is resolved beneath an open root
 *      directory with openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS); a final symbolic
 *      link is followed by hand, beneath the root too. Everything after it is done with
 *      *at() calls on the directory fd it returns, so a name swapped for a symbolic link
 *      between our check and our use can never lead out.
 *
 * The one rule for "..": it never climbs above the root, and an attempt to is an error
 * (-EXDEV), never clamped. By default step 1 leaves ".." in place and step 2 resolves it the
 * way the kernel does (physically: "link/.." is the parent of the link's target), refusing
 * with -EXDEV one that would leave the root. CAE_PATH_FOLD_DOTDOT folds ".." in the text
 * instead, for paths that are never resolved on this host (a display root, a working
 * directory inside a container): one with nothing left to remove is -EXDEV. Absolute
 * symbolic links lead out of the root by definition (-EXDEV), like openat2's
 * RESOLVE_BENEATH.
 *
 * One limit for symbolic links: CAE_CHASE_SYMLINK_MAX, the kernel's own (MAXSYMLINKS), for
 * the final links followed here; the kernel applies the same number inside each lookup.
 */
#ifndef CAE_BASE_CHASE_H
#define CAE_BASE_CHASE_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/stat.h>

/* The longest path accepted from outside, in bytes. */
#define CAE_PATH_MAX 4096

/* ---- Step 1: the text ---- */

#define CAE_PATH_FOLD_DOTDOT (1u << 0) /* fold ".." lexically (see above) */
#define CAE_PATH_NO_DOTDOT (1u << 1)   /* refuse any ".." component: -EACCES */
#define CAE_PATH_BACKSLASH (1u << 2)   /* '\' separates components too */
#define CAE_PATH_UTF8 (1u << 3)	       /* refuse invalid UTF-8: -EILSEQ */
#define CAE_PATH_ABSOLUTE (1u << 4)    /* *out is absolute: root + "/" + the relative path */

/* Turns path (len bytes, not NUL-terminated necessarily) into a path relative to root.
 * root (borrowed) is absolute: the root as the path's author sees it ("/" allowed). A
 * relative path starts at base (absolute, at or below root; NULL: root itself); an
 * absolute one must start with root's components, compared one by one as they are
 * written ("/w/../w/p" is not under "/w/p"). Returns 0 with *out new: "a/b", "" for the
 * root itself (with CAE_PATH_ABSOLUTE "/w/p/a/b", "/w/p"), or, checked in this order:
 *   -ENOENT        the path is empty
 *   -ENAMETOOLONG  longer than CAE_PATH_MAX bytes
 *   -EINVAL        a NUL byte in it; or root is not absolute, or base not under root
 *   -EILSEQ        not UTF-8 (CAE_PATH_UTF8)
 *   -EXDEV         absolute and not under root; or a folded ".." above the root
 *   -EACCES        a ".." component (CAE_PATH_NO_DOTDOT)
 *   -ENOMEM */
int cae__path_lexical(const char *root, const char *base, const char *path, size_t len,
		      unsigned flags, char **out);

/* ---- Step 2: the file system ---- */

#define CAE_CHASE_SYMLINK_MAX 40

#define CAE_CHASE_PARENT (1u << 0)   /* stop at the directory holding the last component */
#define CAE_CHASE_MKDIR (1u << 1)    /* make missing directories (see cae__chase) */
#define CAE_CHASE_NOFOLLOW (1u << 2) /* a final symbolic link is the target, not followed */

/* Makes the directory name in dfd, whose path relative to the root is path (for a journal).
 * Returns 0, -EEXIST, or -errno. */
typedef int (*cae__chase_mkdir_fn)(void *ctx, int dfd, const char *name, const char *path);

/* What cae__chase found. dir + "/" + name is a path of the target relative to the root: the
 * caller's path with every final symbolic link replaced by its target, ".." folded where
 * that names the same directory. Owned by the struct: cae__chased_clear. */
typedef struct cae_chased {
	int fd;		/* O_PATH: with CAE_CHASE_PARENT the directory holding name, else the
			 * target itself; when name is "", the target directory itself */
	char *dir;	/* relative to the root, "" for the root */
	char *name;	/* the last component; "" when the target is a directory named by the
			 * root itself, a trailing "/" or ".", or a final ".." */
	bool exists;	/* false only with CAE_CHASE_PARENT: name is missing in fd */
	struct stat st; /* of the target when it exists (a symbolic link with NOFOLLOW) */
	unsigned links; /* final symbolic links followed */
} cae_chased;

#define CAE_CHASED_INIT                                                                            \
	{                                                                                          \
		.fd = -1                                                                           \
	}

/* Resolves path (relative to the directory root_fd, borrowed) beneath root_fd. Intermediate
 * components are resolved by openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS); a final
 * symbolic link is read and followed by hand, beneath root_fd, at most
 * CAE_CHASE_SYMLINK_MAX times (then -ELOOP), unless CAE_CHASE_NOFOLLOW. A trailing "/"
 * asks for a directory (and follows a final link, as for the kernel). "" and "." are the
 * root. Without CAE_CHASE_PARENT the target must exist (-ENOENT).
 *
 * CAE_CHASE_MKDIR makes the missing directories of the caller's path (all but the last
 * component with CAE_CHASE_PARENT unless it ends in "/"; all of them otherwise), each one
 * beneath root_fd, with mkdir_fn(ctx, ...) when given, else mode 0755 and the owner of its
 * parent (cae__keep_owner_dir). Never on a path with a ".." component, and never on the
 * target of a symbolic link.
 *
 * Errors: -EXDEV the path or a symbolic link leads outside root_fd (an absolute path or link
 * too); -ELOOP too many symbolic links, or a /proc magic link on the way; -ENOENT,
 * -ENOTDIR, -ENAMETOOLONG (a path longer than PATH_MAX), -EINVAL (NULL path), -ENOMEM, or
 * what a system call returned. out is always initialised (clear it in every case); on an
 * error, out->links still counts the final links followed before it (-ENOENT after one: a
 * dangling link). */
int cae__chase(int root_fd, const char *path, unsigned flags, cae__chase_mkdir_fn mkdir_fn,
	       void *ctx, cae_chased *out);

/* Closes and frees what out holds; leaves CAE_CHASED_INIT. */
void cae__chased_clear(cae_chased *c);

#endif
