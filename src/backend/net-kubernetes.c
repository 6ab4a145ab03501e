/* The egress of a kubernetes environment whose network is filtered or none: a NetworkPolicy
 * of the pod's namespace, one per pod, named as the task's cold pod, selecting the pod by
 * its label cae.egress and allowing no egress at all (policyTypes [Egress], no rule). The
 * pod's only way out is then its helper's exec stream (which is the API server's connection
 * to the kubelet, not egress of the pod) carrying connections to cae's proxy (net-chan.c).
 * Created before the pod (or before the claim of a warm pool pod, which gets the label with
 * the claim), deleted after it (cleanup, gc, a re-prepare's removal). A NetworkPolicy is
 * enforced only by a network plugin that implements it, and never for a pod on the host's
 * network: cae cannot tell from the API whether this cluster's does, and says so. */
#include "backend/net-local.h"

#include "backend/backend-internal.h"

#include "base/macro.h"
#include "cae/k8s.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/banned.h"

bool cae__k8s_egress_denied(const cae_config *cfg)
{
	return cae_net_config_filtered(cfg) || cae__net_none(cfg, "kubernetes");
}

void cae__k8s_egress_label(const char *pod, char *buf, size_t size)
{
	size_t n = strlen(pod);
	if (n <= 63) {
		snprintf(buf, size, "%s", pod);
		return;
	}
	/* a label value has at most 63 characters: a longer name by its 64-bit FNV-1a hash */
	uint64_t h = 14695981039346656037ull;
	for (const char *p = pod; *p; p++)
		h = (h ^ (unsigned char)*p) * 1099511628211ull;
	snprintf(buf, size, "h-%016llx", (unsigned long long)h);
}

static char *policy_path(const char *ns, const char *name)
{
	/* (DNS names, as the pods' paths) */
	char *p = NULL;
	if (asprintf(&p, "/apis/networking.k8s.io/v1/namespaces/%s/networkpolicies%s%s", ns,
		     name ? "/" : "", name ? name : "") < 0)
		return NULL;
	return p;
}

int cae__k8s_egress_create(cae_k8s *k, const char *ns, const char *name, const char *uuid,
			   const char *instance, cae_error *err)
{
	char value[64];
	cae__k8s_egress_label(name, value, sizeof(value));
	_cleanup_free_ char *path = policy_path(ns, NULL);
	json_t *np =
	    json_pack("{s:s, s:s, s:{s:s, s:{s:s, s:s}, s:{s:s}}, s:{s:{s:{s:s}}, s:[s], s:[]}}",
		      "apiVersion", "networking.k8s.io/v1", "kind", "NetworkPolicy", "metadata",
		      "name", name, "labels", "cae.task", "1", CAE_LABEL_INSTANCE, instance,
		      "annotations", "cae.task_uuid", uuid, "spec", "podSelector", "matchLabels",
		      CAE_K8S_EGRESS_LABEL, value, "policyTypes", "Egress", "egress");
	int r = !path || !np ? cae_error_set(err, -ENOMEM, "out of memory")
			     : cae_k8s_call(k, "POST", path, np, NULL, err);
	json_decref(np);
	/* there already: a prepare of the same task made it meanwhile (the same policy) */
	return r == -EEXIST ? 0 : r;
}

int cae__k8s_egress_delete(cae_k8s *k, const char *ns, const char *name, cae_error *err)
{
	_cleanup_free_ char *path = policy_path(ns, name);
	if (!path)
		return cae_error_set(err, -ENOMEM, "out of memory");
	cae_error e = {0};
	int r = cae_k8s_call(k, "DELETE", path, NULL, NULL, &e);
	/* none (never made, or gone), or not ours to see: nothing of ours is left */
	if (r == -ENOENT || r == -EACCES)
		return 0;
	return r < 0 ? cae_error_set(err, r, "NetworkPolicy %s: %s", name, e.message) : 0;
}
