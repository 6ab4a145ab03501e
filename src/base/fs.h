/* File and path helpers (libc + Linux syscalls only). All fds are O_CLOEXEC from birth. */
#ifndef CAE_BASE_FS_H
#define CAE_BASE_FS_H

#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>
#include <sys/types.h>

/* openat2(dirfd, path, flags, mode) with RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS: the path
 * (relative, or "" / "." for dirfd itself) and every symlink on the way must stay below
 * dirfd. Returns an fd or -errno (-EXDEV when the path escapes). O_CLOEXEC is added; retried
 * when the kernel answers EAGAIN (a rename raced with "..") or EINTR. The kernel primitive
 * under base/chase.h, which is where a path from outside is resolved. */
int cae__open_beneath(int dirfd, const char *path, int flags, mode_t mode);

#define CAE_WRITE_NOREPLACE 1u /* fail with -EEXIST when the name exists */

/* Writes the content of a new file into fd (empty, O_WRONLY, borrowed). Returns 0 or
 * -errno. It may fchown the file; the mode is applied after it. */
typedef int (*cae_fill_fn)(void *ctx, int fd);

/* The one atomic writer: replaces (or, with CAE_WRITE_NOREPLACE, only creates) dfd/name with
 * a temporary file made in dfd (.cae-tmp-*, O_EXCL), given the owner of what it replaces
 * (cae__keep_owner), filled by fill(ctx, fd), mode & 07777 applied, fsync'd, renamed over
 * name; then dfd is fsync'd. name is a single component. dfd may be an O_PATH fd. On failure
 * the temporary file is removed and name untouched. Returns 0 or -errno. */
int cae__write_atomic(int dfd, const char *name, mode_t mode, unsigned flags, cae_fill_fn fill,
		      void *ctx);

/* cae__write_atomic of data for path (relative to dirfd, AT_FDCWD allowed; its directory
 * must exist). With beneath=true the directory is opened with cae__open_beneath. Returns 0
 * or -errno. */
int cae__write_file_atomic(int dirfd, const char *path, const void *data, size_t len, mode_t mode,
			   bool beneath);

/* Reads a whole file (at most max bytes; -EFBIG when larger). *out is NUL-terminated and
 * owned by the caller. */
int cae__read_file(int dirfd, const char *path, size_t max, char **out, size_t *len);
/* Same from an open fd (not closed). */
int cae__read_fd(int fd, size_t max, char **out, size_t *len);
/* read() exactly len bytes, retrying on EINTR and short reads; -EPIPE at end of file. */
int cae__read_exact(int fd, void *data, size_t len);
/* write() all of it, retrying on EINTR and short writes. */
int cae__write_all(int fd, const void *data, size_t len);

/* Run as root, cae writes into workspaces that belong to a sandbox's unprivileged user:
 * what it creates there must stay that user's. When we are root, gives fd (a file just
 * created in directory dfd to replace or add dfd/base) the owner of the file it replaces,
 * else the owner of dfd. Does nothing for other users; best effort. */
void cae__keep_owner(int fd, int dfd, const char *base);
/* Same for a directory just made: dfd/name gets dfd's owner (when we are root). */
void cae__keep_owner_dir(int dfd, const char *name);

/* The path an fd refers to (through /proc/self/fd). New string, or NULL. */
char *cae__fd_path(int fd);

/* mkdir -p. Returns 0 if the directory exists afterwards. */
int cae__mkdir_p(const char *path, mode_t mode);
/* rm -rf without following symlinks and without crossing into other mounts' symlinks.
 * A missing path is success. */
int cae__rm_rf(const char *path);
/* rm -rf of the entries below dirfd/name (name removed too). */
int cae__rm_rf_at(int dirfd, const char *name);

/* The bytes a file or tree takes on disk (allocated blocks; links not followed, other
 * mounts not entered); 0 when it cannot be read. */
uint64_t cae__disk_use(const char *path);

/* Joins two path parts with one '/'. Returns a new string or NULL. */
char *cae__path_join(const char *a, const char *b);
/* True if path is a directory (following symlinks). */
bool cae__is_dir(const char *path);

/* Renames from to to in dfd unless to exists (-EEXIST): renameat2(RENAME_NOREPLACE), or
 * link + unlink on file systems without it. 0 or -errno. */
int cae__rename_noreplace(int dfd, const char *from, const char *to);

#endif
