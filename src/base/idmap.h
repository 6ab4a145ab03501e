/* Idmapped mounts (Linux >= 5.12; root only): a directory seen through a mount on which the
 * files of one owner (uid:gid on disk) belong to another uid:gid, and what that uid creates
 * there is the owner's on disk. The local sandbox binds a workspace the user owns this way
 * for its unprivileged uid, so that the directory is never given away. libc only (the
 * static helper links it). */
#ifndef CAE_BASE_IDMAP_H
#define CAE_BASE_IDMAP_H

#include <sys/types.h>

/* A user namespace (an fd of /proc/<pid>/ns/user) whose one mapping sends on-disk uid
 * from_uid (and gid from_gid) to host uid to_uid (gid to_gid): what an idmapped mount takes.
 * Returns the fd (O_CLOEXEC) or -errno. */
int cae__idmap_userns(uid_t from_uid, gid_t from_gid, uid_t to_uid, gid_t to_gid);

/* A detached copy of the mount tree at src (not its submounts), idmapped through userns_fd.
 * Returns its fd (O_CLOEXEC) or -errno (-EINVAL or -EOPNOTSUPP: the file system takes no
 * idmapping; -ENOSYS: the kernel has no idmapped mounts). */
int cae__idmap_clone(const char *src, int userns_fd);

/* Attaches a tree from cae__idmap_clone on target (an existing directory or file). */
int cae__idmap_attach(int tree_fd, const char *target);

/* Whether src can be mapped so (the file system and the kernel support it): 0 or -errno. */
int cae__idmap_probe(const char *src, uid_t from_uid, gid_t from_gid, uid_t to_uid, gid_t to_gid);

#endif
