/* Internal to src/backend: the local sandbox's seccomp filter (seccomp.c), built with
 * libseccomp and handed to bwrap (`--seccomp FD`, through `cae-helper --enter --seccomp`).
 *
 * What it refuses, with an error and never a kill (default: allow), at least what Docker's
 * default profile refuses a container without capabilities: the kernel's key store, bpf,
 * perf_event_open, userfaultfd, io_uring, kexec, modules, setting clocks, file handles, the
 * mount family, swap, reboot, accounting, quotas, new namespaces (clone and unshare with a
 * CLONE_NEW* flag, setns), personality flags other than Linux's defaults; clone3 is ENOSYS
 * (its flags are in memory a filter cannot read), so that libc falls back to clone, whose
 * flags are checked. ptrace stays allowed (debuggers of a command's own children), as in
 * Docker on kernels >= 4.8; cae's helpers are non-dumpable instead.
 *
 * The filter covers the machine's native ABI and, on x86_64, the i386 and x32 ABIs with the
 * same rules; a system call of any other ABI is refused (EPERM). */
#ifndef CAE_BACKEND_SECCOMP_H
#define CAE_BACKEND_SECCOMP_H

#include "cae/error.h"

/* Writes the filter, as the classic BPF program bwrap reads, to dirfd/name (a single
 * component) atomically, mode 0644. Returns 0 or -errno (err names the cause). */
int cae__seccomp_write(int dirfd, const char *name, cae_error *err);

#endif
