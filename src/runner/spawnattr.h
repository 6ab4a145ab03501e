/* Spawn attributes shared by commands and services (internal to src/runner). */
#ifndef CAE_RUNNER_SPAWNATTR_H
#define CAE_RUNNER_SPAWNATTR_H

#include <spawn.h>

/* Initialises attr for a child in its own process group with an empty signal mask and every
 * signal at its default disposition. Destroy with posix_spawnattr_destroy(). */
void cae__spawnattr_init_command(posix_spawnattr_t *attr);

#endif
