/* The kubernetes backend's warm pool (command_executor.pool): pods started ahead exactly as a
 * prepare of their environment would start its pod (same spec, the helper delivered and
 * running), so that a prepare skips the create, the scheduling, the helper's delivery and
 * the start. The public entry points are src/backend/pool.c's, which come here for this
 * backend.
 *
 * A pool pod is named coding-agent-pool-<key>-<random> and labelled with its pool's key
 * (cae__k8s_pool_spec: a hash of the pod's spec and of the helper it gets), its
 * environment, its creation time (seconds since the epoch) and its maximum age; it carries
 * no task and no credential. It is free while it has the pool's key label. A prepare whose
 * own pod would have the same key claims one:
 *
 *   list    the free pods of the key, oldest first (the first to expire);
 *   patch   the first that runs and is younger than its maximum age, by a merge patch that
 *           carries the resourceVersion listed: it gives the pod the task's labels and
 *           annotations, takes the pool's labels away and cuts its deadline. The API server
 *           applies an update to the version it names only: of two claimers of one pod,
 *           the second gets 409 Conflict and tries the next pod, then prepares cold.
 *
 * Pods cannot be renamed: a claimed pod keeps its pool name, and the backend finds it by its
 * task uuid label. A pool pod's activeDeadlineSeconds is the configured one plus the pool's
 * maximum age; the claim lowers it (the API allows lowering only) so that the pod has the
 * configured one from the claim on, as a cold pod has from its start.
 *
 * A pod past its maximum age, or that does not run, is never handed out: claims, fills,
 * `cae pool drain` and `cae gc` delete it with the same precondition (the version listed),
 * so that a pod claimed in between is left to its task. One filler per pool key and state
 * directory at a time (cae__pool_fill_lock), so that two fillers do not overfill. */
#include "backend/backend-internal.h"

#include "base/macro.h"
#include "base/timeutil.h"
#include "cae/k8s.h"
#include "cae/log.h"

#include <ctype.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "base/banned.h"

/* the creation time label, as on a task's pod (seconds since the epoch) */
#define LABEL_CREATED "cae.created_at"
#define LABEL_ENV "cae.environment"
#define CREATED_GRACE_S 300 /* pending: a filler still starts it (or died) */

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
	const char *v = label(pod, LABEL_CREATED);
	long long n = v ? strtoll(v, NULL, 10) : 0;
	return n > 0 ? (int64_t)n
		     : cae__parse_iso8601(
			   json_string_value(json_object_get(md_of(pod), "creationTimestamp")));
}

/* The pod's own maximum age (its label), else fallback. */
static int64_t max_age_of(json_t *pod, int64_t fallback)
{
	const char *v = label(pod, CAE_POOL_LABEL_MAX_AGE);
	long long n = v ? strtoll(v, NULL, 10) : 0;
	return n > 0 ? (int64_t)n : fallback;
}

static const char *phase_of(json_t *pod)
{
	return json_string_value(json_object_get(json_object_get(pod, "status"), "phase"));
}

static bool deleting(json_t *pod)
{
	return json_object_get(md_of(pod), "deletionTimestamp") != NULL;
}

static bool running(json_t *pod)
{
	const char *ph = phase_of(pod);
	return ph && strcmp(ph, "Running") == 0 && !deleting(pod);
}

static bool pending(json_t *pod)
{
	const char *ph = phase_of(pod);
	return ph && strcmp(ph, "Pending") == 0 && !deleting(pod);
}

static char *pod_path(cae_backend *b, const char *name)
{
	const char *ns;
	(void)cae__k8s_client(b, &ns);
	char *p = NULL;
	return asprintf(&p, "/api/v1/namespaces/%s/pods/%s", ns, name) < 0 ? NULL : p;
}

/* The free pods of key's pool (NULL: of every pool), oldest first. */
static int list_pool(cae_backend *b, const char *key, json_t **out, cae_error *err)
{
	const char *ns;
	cae_k8s *k = cae__k8s_client(b, &ns);
	char sel[64 + CAE_POOL_KEY_MAX];
	snprintf(sel, sizeof(sel), "%s%s%s", CAE_POOL_LABEL, key ? "=" : "", key ? key : "");
	json_t *all = NULL;
	int r = cae_k8s_pod_list(k, ns, sel, &all, err);
	if (r < 0)
		return r;
	*out = json_array();
	size_t i;
	json_t *pod;
	json_array_foreach(all, i, pod)
	{
		if (!name_of(pod))
			continue;
		size_t at = json_array_size(*out);
		while (at > 0 && created_of(json_array_get(*out, at - 1)) > created_of(pod))
			at--;
		json_array_insert(*out, at, pod);
	}
	json_decref(all);
	return 0;
}

/* Deletes pool pod pod unless it changed since it was listed (claimed): 1 when deleted, 0
 * when left (claimed, or gone already), < 0 on failure. why and age: for the log. */
static int remove_free(cae_backend *b, json_t *pod, const char *why, int64_t age, cae_error *err)
{
	const char *ns;
	cae_k8s *k = cae__k8s_client(b, &ns);
	const char *name = name_of(pod);
	const char *rv = json_string_value(json_object_get(md_of(pod), "resourceVersion"));
	if (!name || !rv)
		return 0;
	_cleanup_free_ char *path = pod_path(b, name);
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
		return cae_error_prefix(err, "cannot remove pool pod %s", name);
	cae_log_fields(b->log, CAE_LOG_INFO, "pool.removed",
		       json_pack("{s:s, s:s?, s:s, s:I}", "pod", name, "pool",
				 label(pod, CAE_POOL_LABEL), "reason", why, "age_s",
				 (json_int_t)age),
		       NULL);
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

int cae__k8s_pool_claim(cae_backend *b, const char *key, json_t *patch, char *name, size_t size,
			cae_error *err)
{
	(void)err;
	const char *ns;
	cae_k8s *k = cae__k8s_client(b, &ns);
	json_t *all = NULL;
	cae_error e = {0};
	if (list_pool(b, key, &all, &e) < 0) {
		cae_log_event(b->log, CAE_LOG_WARN, "pool.claim_failed", "%s", e.message);
		return 0;
	}
	int64_t now = (int64_t)time(NULL);
	int64_t fallback = b->cfg->command_executor.pool.max_age_seconds;
	int found = 0;
	size_t i;
	json_t *pod;
	json_array_foreach(all, i, pod)
	{
		const char *pn = name_of(pod);
		const char *rv = json_string_value(json_object_get(md_of(pod), "resourceVersion"));
		if (!running(pod) || !pn || !rv)
			continue;
		/* the younger of its own maximum age and this configuration's */
		int64_t age = now - created_of(pod), limit = max_age_of(pod, fallback);
		if (age >= (limit < fallback ? limit : fallback) || age < 0) {
			/* never handed out: removed, unless another claimer has it */
			if (remove_free(b, pod, "past its maximum age", age, &e) < 0)
				cae_log_event(b->log, CAE_LOG_WARN, "pool.remove_failed", "%s",
					      e.message);
			continue;
		}
		json_t *p = json_deep_copy(patch);
		json_t *md = json_object_get(p, "metadata");
		json_t *labels = json_object_get(md, "labels");
		if (!labels)
			json_object_set_new(md, "labels", labels = json_object());
		json_object_set_new(md, "resourceVersion", json_string(rv));
		json_object_set_new(labels, CAE_POOL_LABEL, json_null());
		json_object_set_new(labels, CAE_POOL_LABEL_MAX_AGE, json_null());
		int64_t deadline = claimed_deadline(b, pod, now);
		if (deadline > 0)
			json_object_set_new(
			    p, "spec",
			    json_pack("{s:I}", "activeDeadlineSeconds", (json_int_t)deadline));
		_cleanup_free_ char *path = pod_path(b, pn);
		int r = !path || !md ? -ENOMEM : cae_k8s_call(k, "PATCH", path, p, NULL, &e);
		json_decref(p);
		if (r == -EEXIST || r == -ENOENT)
			continue; /* another claimer's (or gone) */
		if (r < 0) {
			cae_log_event(b->log, CAE_LOG_WARN, "pool.claim_failed", "%s: %s", pn,
				      e.message);
			break;
		}
		snprintf(name, size, "%s", pn);
		cae_log_fields(
		    b->log, CAE_LOG_INFO, "pool.claimed",
		    json_pack("{s:s, s:s, s:I}", "pod", pn, "pool", key, "age_s", (json_int_t)age),
		    NULL);
		found = 1;
		break;
	}
	json_decref(all);
	(void)ns;
	return found;
}

static bool cancelled(int fd)
{
	struct pollfd pfd = {.fd = fd, .events = POLLIN};
	return fd >= 0 && poll(&pfd, 1, 0) > 0;
}

int cae__k8s_pool_fill_env(cae_backend *b, const char *environment, int cancel_fd, int *created,
			   cae_error *err)
{
	const cae_config *cfg = b->cfg;
	json_t *pod = NULL;
	char key[CAE_POOL_KEY_MAX];
	_cleanup_free_ char *helper = NULL;
	int r = cae__k8s_pool_spec(b, environment, &pod, key, &helper, err);
	if (r < 0)
		return r;
	int lock = cae__pool_fill_lock(b, key);
	if (lock == -EBUSY) {
		json_decref(pod);
		return 0; /* another process fills this pool now */
	}
	json_t *all = NULL;
	r = list_pool(b, key, &all, err);
	int64_t now = (int64_t)time(NULL);
	int64_t max_age = cfg->command_executor.pool.max_age_seconds;
	int live = 0;
	size_t i;
	json_t *c;
	json_array_foreach(r == 0 ? all : NULL, i, c)
	{
		int64_t age = now - created_of(c);
		const char *why = NULL;
		if (deleting(c))
			continue;
		if (running(c) && age >= max_age_of(c, max_age))
			why = "past its maximum age";
		else if (pending(c) && age < CREATED_GRACE_S)
			continue; /* being started by another process */
		else if (!running(c))
			why = "not running";
		if (!why) {
			live++;
			continue;
		}
		cae_error e = {0};
		if (remove_free(b, c, why, age, &e) < 0)
			cae_log_event(b->log, CAE_LOG_WARN, "pool.remove_failed", "%s", e.message);
	}
	json_decref(all);
	json_t *md = json_object_get(pod, "metadata");
	json_t *labels = json_object_get(md, "labels");
	json_t *spec = json_object_get(pod, "spec");
	char age_s[24], at[24];
	snprintf(age_s, sizeof(age_s), "%d", cfg->command_executor.pool.max_age_seconds);
	json_object_set_new(labels, CAE_POOL_LABEL, json_string(key));
	json_object_set_new(labels, CAE_POOL_LABEL_MAX_AGE, json_string(age_s));
	/* the pod's deadline runs from its start: the pool's time is added, and taken away
	 * again at the claim */
	json_t *dl = json_object_get(spec, "activeDeadlineSeconds");
	if (json_is_integer(dl))
		json_object_set_new(spec, "activeDeadlineSeconds",
				    json_integer(json_integer_value(dl) + max_age));
	while (r == 0 && live < cfg->command_executor.pool.size) {
		if (cancelled(cancel_fd)) {
			r = cae_error_set(err, -ECANCELED, "pool fill cancelled");
			break;
		}
		unsigned char rnd[4];
		if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd)) {
			r = cae_error_set(err, -EIO, "getrandom failed");
			break;
		}
		char name[96];
		snprintf(name, sizeof(name), CAE_POOL_NAME_PREFIX "%s-%02x%02x%02x%02x", key,
			 rnd[0], rnd[1], rnd[2], rnd[3]);
		snprintf(at, sizeof(at), "%lld", (long long)time(NULL));
		json_object_set_new(md, "name", json_string(name));
		json_object_set_new(labels, LABEL_CREATED, json_string(at));
		int64_t t0 = cae__now_ms();
		r = cae__k8s_pool_start(b, pod, helper, cancel_fd, err);
		if (r < 0) {
			cae_error_prefix(err, "pool");
			break;
		}
		live++;
		(*created)++;
		cae_log_fields(b->log, CAE_LOG_INFO, "pool.created",
			       json_pack("{s:s, s:s, s:s, s:I}", "pod", name, "environment",
					 environment, "pool", key, "ms",
					 (json_int_t)(cae__now_ms() - t0)),
			       NULL);
	}
	json_decref(pod);
	if (lock >= 0)
		close(lock);
	return r;
}

int cae__k8s_pool_status(cae_backend *b, json_t *keys, json_t **out, cae_error *err)
{
	json_t *all = NULL;
	int r = list_pool(b, NULL, &all, err);
	if (r < 0)
		return r;
	int64_t now = (int64_t)time(NULL);
	int64_t fallback = b->cfg->command_executor.pool.max_age_seconds;
	*out = json_array();
	size_t i;
	json_t *pod;
	json_array_foreach(all, i, pod)
	{
		const char *key = label(pod, CAE_POOL_LABEL);
		int64_t created = created_of(pod), age = now - created,
			max_age = max_age_of(pod, fallback);
		char at[40] = "", state[32];
		struct tm tm;
		time_t t = (time_t)created;
		if (created > 0 && gmtime_r(&t, &tm))
			strftime(at, sizeof(at), "%Y-%m-%dT%H:%M:%SZ", &tm);
		snprintf(state, sizeof(state), "%s",
			 deleting(pod)	 ? "removing"
			 : phase_of(pod) ? phase_of(pod)
					 : "unknown");
		for (char *s = state; *s; s++)
			*s = (char)tolower((unsigned char)*s);
		json_array_append_new(
		    *out, json_pack("{s:s?, s:s?, s:s?, s:s?, s:s?, s:I, s:I, s:s, s:b, s:b}",
				    "name", name_of(pod), "container_id",
				    json_string_value(json_object_get(md_of(pod), "uid")),
				    "environment", label(pod, LABEL_ENV), "key", key, "created_at",
				    at[0] ? at : NULL, "age_s", (json_int_t)age, "max_age_s",
				    (json_int_t)max_age, "state", state, "expired", age >= max_age,
				    "this_config", key && json_object_get(keys, key) != NULL));
	}
	json_decref(all);
	return 0;
}

int cae__k8s_pool_remove(cae_backend *b, json_t *keys, bool expired_only, int *removed,
			 cae_error *err)
{
	json_t *all = NULL;
	int r = list_pool(b, NULL, &all, err);
	if (r < 0)
		return r;
	int64_t now = (int64_t)time(NULL);
	int64_t fallback = b->cfg->command_executor.pool.max_age_seconds;
	int failed = 0;
	cae_error e = {0};
	size_t i;
	json_t *pod;
	json_array_foreach(all, i, pod)
	{
		const char *key = label(pod, CAE_POOL_LABEL);
		if (keys && (!key || !json_object_get(keys, key)))
			continue;
		if (deleting(pod))
			continue;
		int64_t age = now - created_of(pod), max_age = max_age_of(pod, fallback);
		const char *why = expired_only ? NULL : "drained";
		if (running(pod) && age >= max_age)
			why = "past its maximum age";
		else if (!running(pod) && !(pending(pod) && age < CREATED_GRACE_S))
			why = "not running";
		if (!why)
			continue;
		int k = remove_free(b, pod, why, age, &e);
		if (k > 0)
			(*removed)++;
		else if (k < 0)
			failed++;
	}
	json_decref(all);
	if (failed)
		return cae_error_set(err, -EBUSY, "%d pool pod(s) could not be removed: %s", failed,
				     e.message);
	return 0;
}
