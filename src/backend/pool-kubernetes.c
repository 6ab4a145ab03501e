/* The kubernetes backend's part of the warm pool (the policy is src/backend/pool.c's): pool
 * members are pods started ahead exactly as a prepare of their environment would start its
 * pod (same spec, the helper delivered and running), so that a prepare skips the create,
 * the scheduling, the helper's delivery and the start.
 *
 * A pool pod is labelled with its pool's key (cae__k8s_pool_spec: a hash of the pod's spec
 * and of the helper it gets) and its creation time in seconds since the epoch. It is free
 * while it has the pool's key label. A prepare whose own pod would have the same key claims
 * one by a merge patch that carries the resourceVersion listed: it gives the pod the task's
 * labels and annotations, takes the pool's labels away and cuts its deadline. The API server
 * applies an update to the version it names only: of two claimers of one pod, the second
 * gets 409 Conflict and tries the next pod, then prepares cold.
 *
 * Pods cannot be renamed: a claimed pod keeps its pool name, and the backend finds it by its
 * task uuid label. A pool pod's activeDeadlineSeconds is the configured one plus the pool's
 * maximum age; the claim lowers it (the API allows lowering only) so that the pod has the
 * configured one from the claim on, as a cold pod has from its start.
 *
 * Every remover deletes with the same precondition (the version listed), so that a pod
 * claimed in between is left to its task. */
#include "backend/backend-internal.h"

#include "base/macro.h"
#include "base/timeutil.h"
#include "cae/k8s.h"
#include "cae/log.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/banned.h"

/* the creation time label, as on a task's pod (seconds since the epoch) */
#define LABEL_CREATED "cae.created_at"
#define LABEL_ENV "cae.environment"

static json_t *md_of(json_t *pod)
{
	return json_object_get(pod, "metadata");
}

static const char *label(json_t *pod, const char *k)
{
	return json_string_value(json_object_get(json_object_get(md_of(pod), "labels"), k));
}

static const char *name_of(json_t *pod)
{
	const char *n = json_string_value(json_object_get(md_of(pod), "name"));
	return n && strncmp(n, CAE_POOL_NAME_PREFIX, strlen(CAE_POOL_NAME_PREFIX)) == 0 ? n : NULL;
}

static int64_t created_of(json_t *pod)
{
	int64_t n = cae__pool_seconds(label(pod, LABEL_CREATED));
	return n > 0 ? n
		     : cae__parse_iso8601(
			   json_string_value(json_object_get(md_of(pod), "creationTimestamp")));
}

static const char *rv_of(json_t *pod)
{
	return json_string_value(json_object_get(md_of(pod), "resourceVersion"));
}

static char *pod_path(cae_backend *b, const char *name)
{
	const char *ns;
	(void)cae__k8s_client(b, &ns);
	char *p = NULL;
	return asprintf(&p, "/api/v1/namespaces/%s/pods/%s", ns, name) < 0 ? NULL : p;
}

static int list(cae_backend *b, const char *selector, json_t **all, cae_error *err)
{
	const char *ns;
	cae_k8s *k = cae__k8s_client(b, &ns);
	return cae_k8s_pod_list(k, ns, selector, all, err);
}

static void member(json_t *pod, cae_pool_member *m)
{
	const char *ph =
	    json_string_value(json_object_get(json_object_get(pod, "status"), "phase"));
	bool deleting = json_object_get(md_of(pod), "deletionTimestamp") != NULL;
	*m = (cae_pool_member){.entry = pod,
			       .name = name_of(pod),
			       .id = json_string_value(json_object_get(md_of(pod), "uid")),
			       .key = label(pod, CAE_POOL_LABEL),
			       .environment = label(pod, LABEL_ENV),
			       .instance = label(pod, CAE_LABEL_INSTANCE),
			       .created = created_of(pod),
			       .max_age = cae__pool_seconds(label(pod, CAE_POOL_LABEL_MAX_AGE)),
			       .state = deleting		     ? CAE_POOL_DELETING
					: !ph			     ? CAE_POOL_OTHER
					: strcmp(ph, "Running") == 0 ? CAE_POOL_RUNNING
					: strcmp(ph, "Pending") == 0 ? CAE_POOL_STARTING
								     : CAE_POOL_OTHER};
	struct tm tm;
	time_t t = (time_t)m->created;
	if (m->created > 0 && gmtime_r(&t, &tm))
		strftime(m->created_at, sizeof(m->created_at), "%Y-%m-%dT%H:%M:%SZ", &tm);
	snprintf(m->state_name, sizeof(m->state_name), "%s",
		 deleting ? "removing"
		 : ph	  ? ph
			  : "unknown");
	for (char *s = m->state_name; *s; s++)
		*s = (char)tolower((unsigned char)*s);
}

static int create(cae_backend *b, json_t *spec, const char *key, const char *name,
		  const char *helper, int cancel_fd, cae_error *err)
{
	json_t *pod = json_deep_copy(spec);
	json_t *md = json_object_get(pod, "metadata");
	json_t *labels = json_object_get(md, "labels");
	if (!labels) {
		json_decref(pod);
		return cae_error_set(err, -ENOMEM, "out of memory");
	}
	char age_s[24], at[24];
	int max_age = b->cfg->command_executor.pool.max_age_seconds;
	snprintf(age_s, sizeof(age_s), "%d", max_age);
	snprintf(at, sizeof(at), "%lld", (long long)time(NULL));
	json_object_set_new(md, "name", json_string(name));
	json_object_set_new(labels, CAE_POOL_LABEL, json_string(key));
	json_object_set_new(labels, CAE_POOL_LABEL_MAX_AGE, json_string(age_s));
	json_object_set_new(labels, LABEL_CREATED, json_string(at));
	/* the pod's deadline runs from its start: the pool's time is added, and taken away
	 * again at the claim */
	json_t *ps = json_object_get(pod, "spec");
	json_t *dl = json_object_get(ps, "activeDeadlineSeconds");
	if (json_is_integer(dl))
		json_object_set_new(ps, "activeDeadlineSeconds",
				    json_integer(json_integer_value(dl) + max_age));
	int r = cae__k8s_pool_start(b, pod, helper, cancel_fd, err);
	json_decref(pod);
	return r;
}

/* Deletes m unless it changed since it was listed (claimed): 1 when deleted, 0 when left
 * (claimed, or gone already), < 0 on failure. */
static int remove_free(cae_backend *b, const cae_pool_member *m, int64_t age, const char **why,
		       cae_error *err)
{
	(void)age;
	(void)why;
	const char *ns;
	cae_k8s *k = cae__k8s_client(b, &ns);
	const char *rv = rv_of(m->entry);
	if (!rv)
		return 0;
	_cleanup_free_ char *path = pod_path(b, m->name);
	json_t *body = json_pack("{s:s, s:s, s:i, s:s, s:{s:s}}", "kind", "DeleteOptions",
				 "apiVersion", "v1", "gracePeriodSeconds", 0, "propagationPolicy",
				 "Background", "preconditions", "resourceVersion", rv);
	int r = !path || !body ? cae_error_set(err, -ENOMEM, "out of memory")
			       : cae_k8s_call(k, "DELETE", path, body, NULL, err);
	json_decref(body);
	(void)ns;
	if (r == -EEXIST || r == -ENOENT)
		return 0;
	if (r < 0)
		return cae_error_prefix(err, "cannot remove pool pod %s", m->name);
	return 1;
}

/* The activeDeadlineSeconds that gives pod, claimed now, the configured deadline from now
 * on; 0 when it has none or already no more than that. */
static int64_t claimed_deadline(cae_backend *b, json_t *pod, int64_t now)
{
	json_t *cur = json_object_get(json_object_get(pod, "spec"), "activeDeadlineSeconds");
	int64_t start = cae__parse_iso8601(
	    json_string_value(json_object_get(json_object_get(pod, "status"), "startTime")));
	if (start <= 0)
		start = created_of(pod);
	int64_t want =
	    b->cfg->command_executor.kubernetes.active_deadline_seconds + (now - start) + 1;
	if (!json_is_integer(cur) || start <= 0 || want >= json_integer_value(cur))
		return 0;
	return want;
}

/* A claim's caller: the task's patch, and where the claimed pod's name goes. */
struct claimer {
	json_t *patch;
	char *name;
	size_t size;
};

static int claim(cae_backend *b, const cae_pool_member *m, void *ctx, json_t *fields,
		 cae_error *err)
{
	(void)fields;
	struct claimer *c = ctx;
	const char *ns;
	cae_k8s *k = cae__k8s_client(b, &ns);
	const char *rv = rv_of(m->entry);
	if (!rv)
		return -EBUSY;
	json_t *p = json_deep_copy(c->patch);
	json_t *md = json_object_get(p, "metadata");
	json_t *labels = json_object_get(md, "labels");
	if (!labels)
		json_object_set_new(md, "labels", labels = json_object());
	json_object_set_new(md, "resourceVersion", json_string(rv));
	json_object_set_new(labels, CAE_POOL_LABEL, json_null());
	json_object_set_new(labels, CAE_POOL_LABEL_MAX_AGE, json_null());
	int64_t deadline = claimed_deadline(b, m->entry, (int64_t)time(NULL));
	if (deadline > 0)
		json_object_set_new(
		    p, "spec", json_pack("{s:I}", "activeDeadlineSeconds", (json_int_t)deadline));
	_cleanup_free_ char *path = pod_path(b, m->name);
	int r = !path || !md ? cae_error_set(err, -ENOMEM, "out of memory")
			     : cae_k8s_call(k, "PATCH", path, p, NULL, err);
	json_decref(p);
	(void)ns;
	if (r == -EEXIST || r == -ENOENT)
		return -EBUSY; /* another claimer's (or gone) */
	if (r < 0) {
		cae_error_prefix(err, "%s", m->name);
		return r == -EBUSY ? -EIO : r;
	}
	snprintf(c->name, c->size, "%s", m->name);
	return 0;
}

int cae__k8s_pool_claim(cae_backend *b, const char *key, json_t *patch, char *name, size_t size,
			cae_error *err)
{
	(void)err;
	struct claimer c = {.patch = patch, .name = name, .size = size};
	return cae__pool_claim(b, key, &c);
}

const cae_pool_ops cae__k8s_pool_ops = {
    .noun = "pod",
    .spec = cae__k8s_pool_spec,
    .list = list,
    .member = member,
    .create = create,
    .remove = remove_free,
    .claim = claim,
};
