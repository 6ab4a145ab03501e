/* Internal to src/backend: what the local backend and the snapshots (snapshot.c,
 * include/cae/snapshot.h) share. */
#ifndef CAE_BACKEND_SNAPSHOT_H
#define CAE_BACKEND_SNAPSHOT_H

#include "cae/backend.h"

/* <state_dir>/local/<uuid>/snapshots: an environment's snapshots, removed with it */
#define CAE_SNAPSHOT_DIR "snapshots"

/* Stops this process's sandbox of uuid's environment and its credential channel (what runs
 * in it ends): the first step of a restore (backend-local.c). */
void cae__local_stop_sandbox(cae_backend *b, const char *uuid);

/* What a snapshot, restore or fork killed half-way left under root (<state_dir>/local): the
 * temporaries of processes that are gone are removed and a workspace file system left frozen
 * is thawed. Returns how many temporaries went. (Forks are made under the prepare's
 * .creating.<tag>.<uuid> name, which the environments' own sweep removes.) */
int cae__snapshot_sweep(cae_backend *b, const char *root);

#endif
