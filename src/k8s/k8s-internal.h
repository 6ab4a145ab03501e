/* Internal to src/k8s: the client's state, shared by the REST calls (client.c) and the exec
 * streams (exec.c). */
#ifndef CAE_K8S_INTERNAL_H
#define CAE_K8S_INTERNAL_H

#include "cae/k8s.h"

struct cae_k8s {
	cae_k8s_auth auth;
	char host[256]; /* from auth.server: host (no brackets), port, TLS */
	int port;
	bool tls;
};

/* Percent-encodes s (a path segment, a query value). New string, NULL when out of memory. */
char *cae__k8s_escape(const char *s);

#endif
