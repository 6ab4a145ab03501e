/* Scratch directories that name their owner, so that `cae gc` can remove those of dead
 * processes and never those of live ones (libc only).
 *
 * A scratch directory is <TMPDIR or /tmp>/<prefix><pid>-<start>.XXXXXX, where <start> is the
 * owner's start time (field 22 of /proc/<pid>/stat), so a reused pid is not mistaken for
 * the owner. */
#ifndef CAE_BASE_SCRATCH_H
#define CAE_BASE_SCRATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* The start time of process pid (clock ticks since boot), 0 when it does not exist. */
unsigned long long cae__process_start_time(pid_t pid);

/* Makes a scratch directory (mode 0700) for this process under base (NULL: $TMPDIR, else
 * /tmp). Returns 0 with the path in out[0..size), or -errno. */
int cae__scratch_mkdtemp(const char *base, const char *prefix, char *out, size_t size);

/* Whether name (a directory entry) is prefix<pid>-<start>.* of a process that is gone.
 * *owned: the name carries an owner at all. */
bool cae__scratch_owner_dead(const char *name, const char *prefix, bool *owned);

/* Removes from dir (NULL: $TMPDIR and /tmp) every entry named prefix* whose owner is dead,
 * and those without an owner in their name (made by older versions) last changed more than
 * legacy_age_s seconds ago (< 0: never). Adds the number removed to *removed. Returns 0 or
 * the first error. */
int cae__scratch_gc(const char *dir, const char *prefix, int64_t legacy_age_s, unsigned *removed);

#endif
