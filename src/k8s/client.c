/* The Kubernetes API over REST (include/cae/k8s.h): one libcurl handle per call (libcurl
 * loaded on first use, src/docker/curl-lazy.h), TLS with the kubeconfig's CA, client
 * certificate and key given as in-memory blobs, a bearer token in a header. */
#include "k8s/k8s-internal.h"

#include "backend/images.h"

#include "base/buf.h"
#include "base/macro.h"
#include "base/timeutil.h"
#include "docker/curl-lazy.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/banned.h"

#define CALL_TIMEOUT_MS 30000
#define CONNECT_TIMEOUT_MS 10000
#define BODY_MAX (64 * 1024 * 1024)

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_code = CURLE_FAILED_INIT;

static void curl_init(void)
{
	curl_init_code = curl_global_init(CURL_GLOBAL_DEFAULT);
}

/* host, port and scheme of "https://host:port[/]" (IPv6 in brackets). */
static int parse_server(cae_k8s *k, cae_error *err)
{
	const char *s = k->auth.server;
	k->tls = strncmp(s, "https://", 8) == 0;
	s += k->tls ? 8 : 7;
	const char *hend;
	if (*s == '[') {
		s++;
		hend = strchr(s, ']');
		if (!hend)
			return cae_error_set(err, -EINVAL, "bad server %s", k->auth.server);
	} else {
		hend = s + strcspn(s, ":/");
	}
	size_t hl = (size_t)(hend - s);
	if (hl == 0 || hl >= sizeof(k->host))
		return cae_error_set(err, -EINVAL, "bad server %s", k->auth.server);
	memcpy(k->host, s, hl);
	k->host[hl] = '\0';
	const char *p = hend + (*hend == ']');
	k->port = k->tls ? 443 : 80;
	if (*p == ':') {
		char *end;
		long port = strtol(p + 1, &end, 10);
		if (port <= 0 || port > 65535 || (*end && *end != '/'))
			return cae_error_set(err, -EINVAL, "bad server %s", k->auth.server);
		k->port = (int)port;
	} else if (*p && *p != '/') {
		return cae_error_set(err, -EINVAL, "bad server %s", k->auth.server);
	}
	return 0;
}

int cae_k8s_new(cae_k8s_auth *auth, cae_k8s **out, cae_error *err)
{
	cae_k8s *k = calloc(1, sizeof(*k));
	if (!k)
		return cae_error_set(err, -ENOMEM, "out of memory");
	k->auth = *auth;
	memset(auth, 0, sizeof(*auth));
	if (!k->auth.server) {
		cae_k8s_free(k);
		return cae_error_set(err, -EINVAL, "no API server");
	}
	int r = parse_server(k, err);
	if (r < 0) {
		cae_k8s_free(k);
		return r;
	}
	*out = k;
	return 0;
}

void cae_k8s_free(cae_k8s *k)
{
	if (!k)
		return;
	cae_k8s_auth_clear(&k->auth);
	free(k);
}

const char *cae_k8s_server(const cae_k8s *k)
{
	return k->auth.server;
}

const char *cae_k8s_namespace(const cae_k8s *k)
{
	return k->auth.namespace;
}

static size_t on_body(char *p, size_t size, size_t n, void *ud)
{
	cae_buf *b = ud;
	return cae__buf_append(b, p, size * n) == 0 ? size * n : 0;
}

static int status_errno(long st)
{
	switch (st) {
	case 404:
		return -ENOENT;
	case 409:
		return -EEXIST;
	case 401:
	case 403:
		return -EACCES;
	case 400:
	case 422:
		return -EINVAL;
	default:
		return -EIO;
	}
}

int cae_k8s_call(cae_k8s *k, const char *method, const char *path, json_t *body, json_t **out,
		 cae_error *err)
{
	if (out)
		*out = NULL;
	pthread_once(&curl_once, curl_init);
	if (curl_init_code != CURLE_OK)
		return cae_error_set(err, -ENOSYS, "libcurl: %s",
				     cae__curl_error() ? cae__curl_error() : "cannot initialise");
	CURL *h = curl_easy_init();
	if (!h)
		return cae_error_set(err, -ENOMEM, "libcurl: cannot make a handle");
	_cleanup_free_ char *url = NULL;
	_cleanup_free_ char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
	_cleanup_free_ char *authz = NULL;
	if (asprintf(&url, "%s%s", k->auth.server, path) < 0)
		url = NULL;
	if (k->auth.token && asprintf(&authz, "Authorization: Bearer %s", k->auth.token) < 0)
		authz = NULL;
	if (!url || (body && !text) || (k->auth.token && !authz)) {
		curl_easy_cleanup(h);
		return cae_error_set(err, -ENOMEM, "out of memory");
	}
	struct curl_slist *hdrs = curl_slist_append(NULL, "Accept: application/json");
	if (body)
		hdrs = curl_slist_append(hdrs, strcmp(method, "PATCH") == 0
						   ? "Content-Type: application/merge-patch+json"
						   : "Content-Type: application/json");
	if (authz)
		hdrs = curl_slist_append(hdrs, authz);
	cae_buf resp;
	cae__buf_init(&resp, BODY_MAX);
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)CALL_TIMEOUT_MS);
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)CONNECT_TIMEOUT_MS);
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, &resp);
	curl_easy_setopt(h, CURLOPT_USERAGENT, "cae/" CAE_VERSION);
	if (text) {
		curl_easy_setopt(h, CURLOPT_POSTFIELDS, text);
		curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)strlen(text));
	}
	if (k->auth.ca_pem) {
		struct curl_blob b = {k->auth.ca_pem, k->auth.ca_len, CURL_BLOB_NOCOPY};
		curl_easy_setopt(h, CURLOPT_CAINFO_BLOB, &b);
	}
	if (k->auth.cert_pem) {
		struct curl_blob c = {k->auth.cert_pem, k->auth.cert_len, CURL_BLOB_NOCOPY};
		struct curl_blob kb = {k->auth.key_pem, k->auth.key_len, CURL_BLOB_NOCOPY};
		curl_easy_setopt(h, CURLOPT_SSLCERT_BLOB, &c);
		curl_easy_setopt(h, CURLOPT_SSLCERTTYPE, "PEM");
		curl_easy_setopt(h, CURLOPT_SSLKEY_BLOB, &kb);
		curl_easy_setopt(h, CURLOPT_SSLKEYTYPE, "PEM");
	}
	if (k->auth.insecure) {
		curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 0L);
		curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 0L);
	}
	CURLcode cc = curl_easy_perform(h);
	long st = 0;
	curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &st);
	curl_slist_free_all(hdrs);
	int r = 0;
	if (cc != CURLE_OK) {
		r = cae_error_set(err, cc == CURLE_OPERATION_TIMEDOUT ? -ETIMEDOUT : -ECONNREFUSED,
				  "%s %s: %s", method, path, curl_easy_strerror(cc));
	} else {
		json_t *j = resp.len ? json_loadb(resp.data, resp.len, 0, NULL) : NULL;
		if (st < 200 || st >= 300) {
			const char *m = json_string_value(json_object_get(j, "message"));
			r = cae_error_set(err, status_errno(st), "%s %s: HTTP %ld: %s", method,
					  path, st, m ? m : "(no message)");
			json_decref(j);
		} else if (out) {
			*out = j;
		} else {
			json_decref(j);
		}
	}
	cae__buf_clear(&resp);
	curl_easy_cleanup(h);
	return r;
}

/* Percent-encodes s for a path segment or a query value. New string. */
char *cae__k8s_escape(const char *s)
{
	CURL *h = curl_easy_init();
	char *e = h ? curl_easy_escape(h, s, (int)strlen(s)) : NULL;
	char *r = e ? strdup(e) : NULL;
	if (e)
		curl_free(e);
	if (h)
		curl_easy_cleanup(h);
	return r;
}

static char *pods_path(const char *ns, const char *name, const char *query)
{
	_cleanup_free_ char *ens = cae__k8s_escape(ns);
	_cleanup_free_ char *en = name ? cae__k8s_escape(name) : NULL;
	char *p = NULL;
	if (!ens || (name && !en) ||
	    asprintf(&p, "/api/v1/namespaces/%s/pods%s%s%s", ens, name ? "/" : "", name ? en : "",
		     query ? query : "") < 0)
		return NULL;
	return p;
}

int cae_k8s_pod_create(cae_k8s *k, const char *ns, json_t *pod, json_t **out, cae_error *err)
{
	_cleanup_free_ char *p = pods_path(ns, NULL, NULL);
	if (!p)
		return cae_error_set(err, -ENOMEM, "out of memory");
	return cae_k8s_call(k, "POST", p, pod, out, err);
}

int cae_k8s_pod_get(cae_k8s *k, const char *ns, const char *name, json_t **out, cae_error *err)
{
	_cleanup_free_ char *p = pods_path(ns, name, NULL);
	if (!p)
		return cae_error_set(err, -ENOMEM, "out of memory");
	return cae_k8s_call(k, "GET", p, NULL, out, err);
}

int cae_k8s_pod_list(cae_k8s *k, const char *ns, const char *label_selector, json_t **items,
		     cae_error *err)
{
	*items = NULL;
	_cleanup_free_ char *sel = label_selector ? cae__k8s_escape(label_selector) : NULL;
	_cleanup_free_ char *q = NULL;
	if (sel && asprintf(&q, "?labelSelector=%s", sel) < 0)
		q = NULL;
	_cleanup_free_ char *p = (!label_selector || q) ? pods_path(ns, NULL, q) : NULL;
	if (!p)
		return cae_error_set(err, -ENOMEM, "out of memory");
	json_t *list = NULL;
	int r = cae_k8s_call(k, "GET", p, NULL, &list, err);
	if (r < 0)
		return r;
	json_t *it = json_object_get(list, "items");
	*items = json_is_array(it) ? json_incref(it) : json_array();
	json_decref(list);
	return 0;
}

int cae_k8s_pod_delete(cae_k8s *k, const char *ns, const char *name, int grace_s, cae_error *err)
{
	_cleanup_free_ char *p = pods_path(ns, name, NULL);
	json_t *body =
	    json_pack("{s:s, s:s, s:i, s:s}", "kind", "DeleteOptions", "apiVersion", "v1",
		      "gracePeriodSeconds", grace_s, "propagationPolicy", "Background");
	int r = !p || !body ? cae_error_set(err, -ENOMEM, "out of memory")
			    : cae_k8s_call(k, "DELETE", p, body, NULL, err);
	json_decref(body);
	return r;
}

/* A container status (borrowed) whose waiting reason will not pass by itself, its reason in
 * *reason. */
static json_t *stuck_status(json_t *statuses, const char **reason)
{
	static const char *const stuck[] = {"ErrImageNeverPull",
					    "ErrImagePull",
					    "ImagePullBackOff",
					    "InvalidImageName",
					    "CreateContainerConfigError",
					    "CreateContainerError",
					    "RunContainerError",
					    "CrashLoopBackOff",
					    NULL};
	size_t i;
	json_t *c;
	json_array_foreach(statuses, i, c)
	{
		const char *r = json_string_value(json_object_get(
		    json_object_get(json_object_get(c, "state"), "waiting"), "reason"));
		for (size_t k = 0; r && stuck[k]; k++)
			if (strcmp(r, stuck[k]) == 0) {
				*reason = r;
				return c;
			}
	}
	return NULL;
}

/* The imagePullPolicy of the pod's container (or init container) named name. */
static const char *pull_policy(json_t *pod, const char *name)
{
	const char *lists[] = {"containers", "initContainers"};
	for (size_t l = 0; name && l < 2; l++) {
		size_t i;
		json_t *c;
		json_array_foreach(json_object_get(json_object_get(pod, "spec"), lists[l]), i, c)
		{
			if (json_is_string(json_object_get(c, "name")) &&
			    strcmp(json_string_value(json_object_get(c, "name")), name) == 0)
				return json_string_value(json_object_get(c, "imagePullPolicy"));
		}
	}
	return NULL;
}

int cae_k8s_pod_running(json_t *pod, void *ud, cae_error *err)
{
	(void)ud;
	json_t *st = json_object_get(pod, "status");
	const char *phase = json_string_value(json_object_get(st, "phase"));
	if (phase && strcmp(phase, "Running") == 0)
		return 1;
	if (phase && (strcmp(phase, "Succeeded") == 0 || strcmp(phase, "Failed") == 0)) {
		const char *m = json_string_value(json_object_get(st, "message"));
		return cae_error_set(err, -ECHILD, "pod %s%s%s", phase, m ? ": " : "", m ? m : "");
	}
	const char *r = NULL;
	json_t *c = stuck_status(json_object_get(st, "initContainerStatuses"), &r);
	if (!c)
		c = stuck_status(json_object_get(st, "containerStatuses"), &r);
	if (c && (strstr(r, "Image") || strcmp(r, "ErrImagePull") == 0))
		/* the image is not on the node: say which, and how to get it there */
		return cae__image_missing_kubernetes(
		    r, json_string_value(json_object_get(c, "image")),
		    pull_policy(pod, json_string_value(json_object_get(c, "name"))),
		    json_string_value(json_object_get(
			json_object_get(json_object_get(c, "state"), "waiting"), "message")),
		    err);
	if (c)
		return cae_error_set(err, -ECHILD, "pod cannot start: %s", r);
	return 0;
}

int cae_k8s_pod_wait(cae_k8s *k, const char *ns, const char *name, cae_k8s_pod_pred pred, void *ud,
		     int64_t timeout_ms, json_t **out, cae_error *err)
{
	if (out)
		*out = NULL;
	int64_t deadline = cae__now_ms() + timeout_ms;
	/* the kubelet reports in steps of a few hundred milliseconds: read at 50 ms at first,
	 * then less often */
	long pause_ms = 50;
	for (;;) {
		json_t *pod = NULL;
		int r = cae_k8s_pod_get(k, ns, name, &pod, err);
		if (r < 0)
			return r;
		r = pred(pod, ud, err);
		if (r != 0 || cae__now_ms() >= deadline) {
			if (out)
				*out = pod;
			else
				json_decref(pod);
			if (r == 0)
				return cae_error_set(err, -ETIMEDOUT,
						     "pod %s: not ready after %lld ms", name,
						     (long long)timeout_ms);
			return r < 0 ? r : 0;
		}
		json_decref(pod);
		nanosleep(&(struct timespec){0, pause_ms * 1000000L}, NULL);
		if (pause_ms < 200)
			pause_ms += 25;
	}
}
