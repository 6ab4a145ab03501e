/* Internal to src/backend: the tools each environment name stands for, and the check that
 * tells which of them a local environment lacks. The local backend runs the host's own tools
 * whatever the environment's name, so its prepare says which of the named environment's
 * tools this host has not (`go` for environment go), rather than pretending it is that
 * environment. The container images' own tool lists (for the prompts) are kept with the
 * images; this table only names what makes an environment that language's. */
#ifndef CAE_BACKEND_ENVTOOLS_H
#define CAE_BACKEND_ENVTOOLS_H

#include "backend/backend-internal.h"

/* The programs (space-separated) that environment stands for; NULL for a name not known. */
const char *cae__env_tools(const char *environment);

/* Looks for p's environment's tools through p->exec (on the environment's PATH, as commands
 * find them) and adds a warning naming each one missing (environment.tools_missing); one
 * that cannot be looked for is a warning too. Never fails the prepare. */
void cae__env_tools_check(cae_prepare *p);

#endif
