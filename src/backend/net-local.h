/* Internal to src/backend: the local backend's filtered network (net-local.c). */
#ifndef CAE_BACKEND_NET_LOCAL_H
#define CAE_BACKEND_NET_LOCAL_H

#include "cae/config.h"
#include "cae/helper.h"
#include "cae/log.h"
#include "cae/net.h"
#include "cae/runner.h"

/* The proxy of a sandbox whose helper runs in an empty network namespace: the helper's
 * loopback listeners (3128 HTTP, 1080 SOCKS5) handed to a new proxy of cfg's policy run by
 * this process. -errno with err set (the sandbox must not be used then). */
int cae__local_net_start(cae_helper *h, const cae_config *cfg, cae_log *log, const char *task,
			 cae_net_proxy **out, cae_error *err);

/* Moves px's refusals since the last command into res->network_denied (JSON text). */
void cae__local_net_report(cae_net_proxy *px, cae_run_result *res);

#endif
