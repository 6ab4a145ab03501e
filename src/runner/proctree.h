/* Process-tree bookkeeping for the runner (internal): the child-subreaper setting, the set
 * of commands currently running in this process, killing a whole tree, and reaping what
 * was re-parented to us. Linux /proc based. */
#ifndef CAE_RUNNER_PROCTREE_H
#define CAE_RUNNER_PROCTREE_H

#include <sys/types.h>

/* Makes this process a child subreaper (once). */
void cae__proctree_init(void);
/* The registry of running commands' pids; spawn happens under the lock so that a
 * concurrent sweep never takes a new command for an orphan. */
void cae__proctree_lock(void);
void cae__proctree_unlock(void);
void cae__proctree_register(pid_t pid);	  /* call with the lock held */
void cae__proctree_unregister(pid_t pid); /* takes the lock */
/* Sends sig to pid's process group and to every descendant of pid; with SIGKILL, repeats
 * until no descendant is left alive (bounded). pid itself is signalled too. */
void cae__proctree_kill_tree(pid_t pid, int sig);
/* Kills and reaps every child of this process that is not a registered running command
 * (orphans re-parented to us as subreaper), with their descendants. */
void cae__proctree_reap_orphans(void);
/* Appends the pids of pid's descendants to out (at most max); returns the count. */
size_t cae__proctree_descendants(pid_t pid, pid_t *out, size_t max);

#endif
