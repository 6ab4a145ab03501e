/* What cae knows of its language images: the tools of each environment's image (the
 * Dockerfiles' toolchains over docker/common-packages, kept in step with them by the tests
 * that run them), the messages of a missing image on docker and kubernetes, and the
 * warnings said once per engine per process. */
#include "backend/images.h"

#include "base/macro.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/banned.h"

#define COMMON                                                                                     \
	"make", "gcc", "g++", "git", "curl", "wget", "jq", "tree", "patch", "grep", "sed", "awk",  \
	    "find", "tar", "unzip", "xz", "diff", "ps", "less"

static const char *const python_tools[] = {"python", "python3", "pip",	"pytest", "black",
					   "flake8", "mypy",	COMMON, NULL};
static const char *const node_tools[] = {"node", "npm",	   "npx",  "yarn", "pnpm",
					 "tsc",	 "eslint", COMMON, NULL};
static const char *const java_tools[] = {"java", "javac", "mvn", "gradle", COMMON, NULL};
static const char *const go_tools[] = {"go", "gofmt", COMMON, NULL};
static const char *const miniforge_tools[] = {"conda", "mamba", "python", "python3",
					      "pip",   COMMON,	NULL};

static const struct {
	const char *name;
	const char *const *tools;
} images[] = {
    {"python", python_tools}, {"node", node_tools},	      {"java", java_tools},
    {"go", go_tools},	      {"miniforge", miniforge_tools},
};

const char *const *cae__image_tools(const char *environment)
{
	for (size_t i = 0; environment && i < ARRAY_SIZE(images); i++)
		if (strcmp(images[i].name, environment) == 0)
			return images[i].tools;
	return NULL;
}

bool cae__image_cae_name(const char *image, char *name, size_t size)
{
	static const char prefix[] = "coding-agent-executor-";
	if (!image || strncmp(image, prefix, sizeof(prefix) - 1) != 0)
		return false;
	const char *n = image + sizeof(prefix) - 1;
	size_t len = strcspn(n, ":@");
	for (size_t i = 0; i < ARRAY_SIZE(images); i++)
		if (strlen(images[i].name) == len && strncmp(images[i].name, n, len) == 0 &&
		    len < size) {
			snprintf(name, size, "%s", images[i].name);
			return true;
		}
	return false;
}

int cae__image_missing_docker(const char *image, const char *environment, cae_error *err)
{
	char name[32];
	char how[256];
	if (cae__image_cae_name(image, name, sizeof(name)))
		snprintf(how, sizeof(how), "build it with `cae images build %s`", name);
	else
		snprintf(how, sizeof(how),
			 "pull it (`docker pull %.120s`) or load it (`docker load`)", image);
	return cae_error_set(err, -ENOENT,
			     "image %s of environment %s is not on the Docker engine: %s, then "
			     "prepare again",
			     image, environment ? environment : "?", how);
}

int cae__image_missing_kubernetes(const char *reason, const char *image, const char *policy,
				  const char *detail, cae_error *err)
{
	char name[32];
	char build[128] = "";
	if (cae__image_cae_name(image, name, sizeof(name)))
		snprintf(build, sizeof(build), "build it with `cae images build %s`, then ", name);
	bool never = policy && strcmp(policy, "Never") == 0;
	return cae_error_set(
	    err, -ENOENT,
	    "pod cannot start: %s: the node has not got image %s and its pull policy is %s "
	    "(command_executor.kubernetes.image_pull_policy)%s%s; to get it there, %s%s; or "
	    "push it to a registry the nodes pull from and set image_pull_policy to "
	    "IfNotPresent",
	    reason, image ? image : "?", policy ? policy : "unknown", detail ? ": " : "",
	    detail ? detail : "", build,
	    never ? "load it into every node's container runtime (`docker save IMAGE | ctr -n "
		    "k8s.io images import -` on the node, `kind load docker-image IMAGE`, or "
		    "`minikube image load IMAGE`)"
		  : "load it into every node's container runtime (`docker save IMAGE | ctr -n "
		    "k8s.io images import -` on the node) and set image_pull_policy to Never");
}

/* ---- warnings once per engine ---- */

/* what was said, for the life of the process (bounded: a 257th text is said every time) */
static pthread_mutex_t said_lock = PTHREAD_MUTEX_INITIALIZER;
static char **said;
static size_t n_said;

bool cae__engine_warning_first(const char *engine, const char *text)
{
	char *key = NULL;
	if (asprintf(&key, "%s\n%s", engine ? engine : "", text ? text : "") < 0)
		return true; /* no memory to remember: say it */
	bool first = true;
	pthread_mutex_lock(&said_lock);
	for (size_t i = 0; i < n_said && first; i++)
		if (strcmp(said[i], key) == 0)
			first = false;
	if (first && n_said < 256) {
		char **grown = realloc(said, (n_said + 1) * sizeof(*said));
		if (grown) {
			said = grown;
			said[n_said++] = key;
			key = NULL;
		}
	}
	pthread_mutex_unlock(&said_lock);
	free(key);
	return first;
}
