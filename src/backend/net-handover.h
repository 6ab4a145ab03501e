/* Internal to src/backend: the proxy's listeners of a container handed to this process over
 * a unix socket (net-handover.c), so that the container's connections reach cae's proxy
 * without crossing the engine's exec stream.
 *
 * With an engine on this host, a filtered container is made with its own host directory
 * (<state_dir>/net/<uuid>, nothing else in it) bind-mounted read-only at
 * CAE_NET_HANDOVER_MOUNT; its network stays none. A manager that opens a stream to it binds
 * a unix socket of a random name there and tells the helper (over the stream, NET_LISTEN)
 * its name and a random token; the helper connects and sends the token with its two
 * loopback listeners (SCM_RIGHTS); the manager checks the token and that both are listening
 * TCP sockets on 127.0.0.1 at the proxy's ports, accepts on them itself (as for the local
 * sandbox: an accepted socket belongs to the container's network namespace, the proxy's
 * upstream socket to the host's), acknowledges, and removes the socket: while the
 * environment runs, its directory is empty. Anything else (no directory, a remote engine,
 * a refused or bad handover) leaves the helper accepting and tunnelling over the stream. */
#ifndef CAE_BACKEND_NET_HANDOVER_H
#define CAE_BACKEND_NET_HANDOVER_H

#include "cae/net.h"

#include <stdbool.h>
#include <stddef.h>

/* Where a container sees its directory. */
#define CAE_NET_HANDOVER_MOUNT "/run/cae-net"

/* <state_dir>/net/<uuid> (new; NULL: no state_dir or out of memory). */
char *cae__net_handover_dir(const char *state_dir, const char *uuid);
/* Makes that directory (its parent 0700, it 0711: a container's user may reach a socket it
 * is told the name of, not list it), or checks the one there is this user's; new path in
 * *out. 0 or -errno. */
int cae__net_handover_dir_make(const char *state_dir, const char *uuid, char **out);
/* Removes it and whatever a manager that died left in it. */
void cae__net_handover_dir_remove(const char *state_dir, const char *uuid);
/* Removes the directories of <state_dir>/net whose environment is gone (gone(name, ud):
 * true), except those made in the last minute (a prepare may be making its container).
 * Returns how many. */
int cae__net_handover_sweep(const char *state_dir, bool (*gone)(const char *name, void *ud),
			    void *ud);

typedef struct cae__net_handover {
	int dirfd, lfd;
	char name[24];					/* the socket's, in the directory */
	char path[sizeof(CAE_NET_HANDOVER_MOUNT) + 24]; /* ... as the container sees it */
	char token[33];
} cae__net_handover;

/* A socket of a random name in dir, listening, and a random token. 0, or -errno (nothing
 * made). */
int cae__net_handover_open(const char *dir, cae__net_handover *h);
/* After the helper answered NET_LISTEN: takes the listeners it handed over (only from a
 * connection already waiting, with the token; others are closed unread) into px. 1: handed
 * over (and acknowledged: the helper accepts no more); 0: not (the helper goes on
 * tunnelling). Either way the socket is closed and removed. */
int cae__net_handover_take(cae__net_handover *h, cae_net_proxy *px, int http_port, int socks_port);
/* Closes and removes h's socket (cae__net_handover_take does). */
void cae__net_handover_close(cae__net_handover *h);

#endif
