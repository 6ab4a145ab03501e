/* Internal to src/backend: the backends' network: the local backend's filtered network
 * (net-local.c), and the forge rule and prepare result of every backend (net-chan.c). */
#ifndef CAE_BACKEND_NET_LOCAL_H
#define CAE_BACKEND_NET_LOCAL_H

#include "cae/backend.h"
#include "cae/config.h"
#include "cae/helper.h"
#include "cae/log.h"
#include "cae/net.h"
#include "cae/runner.h"

/* The proxy of a sandbox whose helper runs in an empty network namespace: the helper's
 * loopback listeners (3128 HTTP, 1080 SOCKS5) handed to a new proxy of cfg's policy run by
 * this process. -errno with err set (the sandbox must not be used then). */
int cae__local_net_start(cae_helper *h, const cae_config *cfg, cae_log *log, const char *task,
			 const char *forge, cae_net_proxy **out, cae_error *err);

/* A sandbox's port forwards (cae_backend_port_forward), over a stream of its helper h. */
typedef struct cae__local_fwd cae__local_fwd;
cae__local_fwd *cae__local_fwd_new(void); /* NULL: out of memory */
/* The forward of port (an existing one, or a new one): *host_port on the host's 127.0.0.1. */
int cae__local_fwd_open(cae__local_fwd *f, cae_helper *h, int port, int *host_port, cae_error *err);
/* Closes every forward and the stream (before the helper stops). Accepts NULL. */
void cae__local_fwd_free(cae__local_fwd *f);

/* Moves px's refusals since the last command into res->network_denied (JSON text). */
void cae__local_net_report(cae_net_proxy *px, cae_run_result *res);

/* The forge rule (cae_net_policy_for_forge): "host:port" of task's clone source when it is
 * http or https (the forge a push goes to), else NULL. New string. */
char *cae__net_forge(const cae_config *cfg, const cae_task *task);
/* Whether backend's environments have no network of their own (local: local.network off;
 * docker and kubernetes: network mode none or no external_access). */
bool cae__net_none(const cae_config *cfg, const char *backend);

/* Whether an environment of backend has the network itself: not none, no allow-list (what
 * cae__net_info calls "full"). */
bool cae__net_full(const cae_config *cfg, const char *backend);
/* Whether an environment with forge (may be NULL) gets cae's proxy: a filtered network, or
 * none with a forge to reach. */
bool cae__net_proxied(const cae_config *cfg, const char *backend, const char *forge);
/* The prepare result's "network": {access: "full"|"none"|"filtered", proxy: {http,
 * socks5} when the proxy serves it, forge: "host:port" when the forge rule applies}. */
json_t *cae__net_info(const cae_config *cfg, const char *backend, const cae_task *task);
/* A stream's network (docker, kubernetes: net-chan.c): when an environment with forge (may
 * be NULL) gets cae's proxy, the helper of m listens on the environment's loopback and its
 * connections go to the proxy returned (free it after closing m); NULL when it gets none,
 * or the proxy could not start (logged: <backend>.network_unavailable; its commands then
 * have no network). what: "container", "pod". prepare: the prepare's own stream, whose
 * steps get no NO_PROXY (everything they reach goes through the proxy). net_dir: the
 * environment's handover directory on this host (net-handover.h; NULL: none), through
 * which the helper's listeners come to the proxy when it can. */
cae_net_proxy *cae__net_mux_start(cae_backend *b, cae_helper_mux *m, const char *uuid,
				  const char *forge, const char *what, bool prepare,
				  const char *net_dir);

/* Kubernetes egress (net-kubernetes.c): the NetworkPolicy denying a pod's egress, one per
 * pod, selecting the pods labelled CAE_K8S_EGRESS_LABEL with cae__k8s_egress_label(name).
 * Whether cfg's kubernetes environments get one (a filtered network, or none). */
#define CAE_K8S_EGRESS_LABEL "cae.egress"
bool cae__k8s_egress_denied(const cae_config *cfg);
/* The label value of the policy named name: name itself, or its hash when longer than 63. */
void cae__k8s_egress_label(const char *name, char *buf, size_t size);
/* Creates the policy name (the task's cold pod name) in ns; one already there is success.
 * -EACCES: no permission (networkpolicies create in ns). */
struct cae_k8s;
int cae__k8s_egress_create(struct cae_k8s *k, const char *ns, const char *name, const char *uuid,
			   const char *instance, cae_error *err);
/* Deletes the policy name; none (or no permission to see one) is success. */
int cae__k8s_egress_delete(struct cae_k8s *k, const char *ns, const char *name, cae_error *err);

#endif
