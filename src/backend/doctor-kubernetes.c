/* cae doctor, the kubernetes backend's checks: the kubeconfig (command_executor.kubernetes
 * .kubeconfig, $KUBECONFIG, the pod's service account, ~/.kube/config), the cluster's API
 * (reachable, its version), the namespace (pods visible, as the backend checks when it
 * starts), and for every configured environment whether the nodes have its image, with the
 * pull policy that decides what a missing one means. */
#include "backend/doctor.h"

#include "cae/k8s.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/banned.h"

/* Whether a node's image name is ref: the runtime lists "docker.io/library/x:tag" for
 * "x:tag" and "docker.io/o/x:tag" for "o/x:tag". */
static bool same_image(const char *listed, const char *ref)
{
	if (strcmp(listed, ref) == 0)
		return true;
	static const char *const prefixes[] = {"docker.io/library/", "docker.io/"};
	for (size_t i = 0; i < 2; i++) {
		size_t n = strlen(prefixes[i]);
		if (strncmp(listed, prefixes[i], n) == 0 && strcmp(listed + n, ref) == 0)
			return true;
	}
	return false;
}

static bool node_has(json_t *node, const char *ref)
{
	size_t i, j;
	json_t *img, *name;
	json_array_foreach(json_object_get(json_object_get(node, "status"), "images"), i, img)
	{
		json_array_foreach(json_object_get(img, "names"), j, name)
		{
			if (json_string_value(name) && same_image(json_string_value(name), ref))
				return true;
		}
	}
	return false;
}

static const char *const pull_names[] = {"IfNotPresent", "Always", "Never"};

static void check_images(const cae_config *cfg, cae_k8s *k, json_t *checks)
{
	const __typeof__(cfg->command_executor.kubernetes) *kc = &cfg->command_executor.kubernetes;
	int policy =
	    kc->image_pull_policy >= 0 && kc->image_pull_policy < 3 ? kc->image_pull_policy : 0;
	json_t *nodes = NULL, *one = NULL;
	cae_error err = {0};
	int r;
	if (kc->node_name) {
		char path[512];
		snprintf(path, sizeof(path), "/api/v1/nodes/%s", kc->node_name);
		r = cae_k8s_call(k, "GET", path, NULL, &one, &err);
		nodes = json_array();
		if (r >= 0)
			json_array_append(nodes, one);
	} else {
		json_t *list = NULL;
		r = cae_k8s_call(k, "GET", "/api/v1/nodes", NULL, &list, &err);
		nodes = json_incref(json_object_get(list, "items"));
		json_decref(list);
	}
	json_decref(one);
	if (r < 0 || !json_is_array(nodes)) {
		cae__doctor_add(checks, "nodes", false, false,
				r == -EACCES ? "let this user get and list nodes (a ClusterRole), "
					       "so that doctor can see their images"
					     : "check the cluster's nodes (kubectl get nodes)",
				"cannot read the nodes%s%s: %s",
				kc->node_name ? " (node_name " : "",
				kc->node_name ? kc->node_name : "", r < 0 ? err.message : "?");
		json_decref(nodes);
		return;
	}
	size_t total = json_array_size(nodes);
	cae__doctor_add(checks, "nodes", total > 0, true,
			"the cluster needs a node that can run pods", "%zu node%s%s%s%s", total,
			total == 1 ? "" : "s", kc->node_name ? " (pods bound to " : "",
			kc->node_name ? kc->node_name : "", kc->node_name ? ")" : "");
	for (size_t e = 0; e < cfg->command_executor.n_environments; e++) {
		const cae_config_environment *env = &cfg->command_executor.environments[e];
		bool deflt = strcmp(env->name, cfg->command_executor.default_environment) == 0;
		size_t have = 0, i;
		json_t *node;
		char names[256] = "";
		json_array_foreach(nodes, i, node)
		{
			if (!node_has(node, env->image))
				continue;
			have++;
			const char *n = json_string_value(
			    json_object_get(json_object_get(node, "metadata"), "name"));
			size_t l = strlen(names);
			snprintf(names + l, sizeof(names) - l, "%s%s", l ? ", " : "", n ? n : "?");
		}
		/* Always and IfNotPresent pull what a node lacks; only a registry that has the
		 * image makes that work, which doctor cannot see from here */
		bool ok = total > 0 && have == total;
		char name[128], build[512], fix[1400];
		snprintf(name, sizeof(name), "image %s", env->name);
		snprintf(
		    fix, sizeof(fix),
		    "get %s onto every node: %s, then import it into each node's container "
		    "runtime (docker save %s | ctr -n k8s.io images import -), or push it to a "
		    "registry the nodes pull from and keep image_pull_policy IfNotPresent or "
		    "Always (now %s)",
		    env->image, cae__doctor_image_fix(env->name, env->image, build, sizeof(build)),
		    env->image, pull_names[policy]);
		cae__doctor_add(checks, name, ok, deflt && policy == 2, fix,
				"%s on %zu of %zu node%s%s%s%s; image_pull_policy %s%s", env->image,
				have, total, total == 1 ? "" : "s", have ? " (" : "", names,
				have ? ")" : "", pull_names[policy],
				ok	      ? ""
				: policy == 2 ? ": a pod on a node without it fails "
						"(ErrImageNeverPull)"
					      : ": a node without it pulls it from its registry");
	}
	json_decref(nodes);
}

void cae__doctor_kubernetes(const cae_config *cfg, json_t *checks)
{
	const __typeof__(cfg->command_executor.kubernetes) *kc = &cfg->command_executor.kubernetes;
	cae__doctor_state_dir(cfg, checks, true);
	cae_k8s_auth auth;
	cae_error err = {0};
	int r = cae_k8s_auth_load(kc->kubeconfig, kc->context, &auth, &err);
	char server[512];
	snprintf(server, sizeof(server), "%s", r == 0 && auth.server ? auth.server : "");
	cae__doctor_add(checks, "kubeconfig", r == 0, true,
			"set command_executor.kubernetes.kubeconfig (or KUBECONFIG) to a "
			"kubeconfig whose user has a token or a client certificate",
			"%s%s%s%s", r == 0 ? "server " : "", server,
			kc->context ? ", context " : "",
			r == 0 ? kc->context ? kc->context : "" : err.message);
	if (r < 0)
		return;
	cae_k8s *k = NULL;
	r = cae_k8s_new(&auth, &k, &err);
	cae_k8s_auth_clear(&auth);
	json_t *ver = NULL;
	if (r == 0)
		r = cae_k8s_call(k, "GET", "/version", NULL, &ver, &err);
	cae__doctor_add(checks, "cluster", r >= 0, true,
			"check that the API server is up and reachable from here, and that the "
			"kubeconfig's credentials are valid",
			"%s %s%s", server, r >= 0 ? "answers, Kubernetes " : "does not answer: ",
			r >= 0 ? json_string_value(json_object_get(ver, "gitVersion"))
				     ? json_string_value(json_object_get(ver, "gitVersion"))
				     : "?"
			       : err.message);
	json_decref(ver);
	if (r < 0) {
		cae_k8s_free(k);
		return;
	}
	const char *ns = kc->namespace		? kc->namespace
			 : cae_k8s_namespace(k) ? cae_k8s_namespace(k)
						: "default";
	char path[512], fix[600];
	/* a namespace that does not exist lists no pods (200): asked for by name first; a user
	 * who may not read namespaces is judged by the pods alone */
	snprintf(path, sizeof(path), "/api/v1/namespaces/%s", ns);
	json_t *obj = NULL;
	r = cae_k8s_call(k, "GET", path, NULL, &obj, &err);
	json_decref(obj);
	if (r != -ENOENT) {
		snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods?limit=1", ns);
		json_t *pods = NULL;
		r = cae_k8s_call(k, "GET", path, NULL, &pods, &err);
		json_decref(pods);
	}
	snprintf(fix, sizeof(fix),
		 r == -ENOENT
		     ? "kubectl create namespace %s, or set "
		       "command_executor.kubernetes.namespace (CAE_K8S_NAMESPACE)"
		     : "let this user get, list, create, delete and exec into pods in %s (a "
		       "Role and a RoleBinding)",
		 ns);
	cae__doctor_add(checks, "namespace", r >= 0, true, fix, "%s%s%s", ns,
			r >= 0 ? ": pods can be listed" : ": ", r >= 0 ? "" : err.message);
	check_images(cfg, k, checks);
	cae_k8s_free(k);
}
