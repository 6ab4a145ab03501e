/* The Engine API client: DOCKER_HOST parsing, version negotiation, requests with timeouts,
 * retries and the engine's error messages (include/cae/docker.h). */
#include "docker/docker-internal.h"

#include "base/buf.h"
#include "base/fs.h"
#include "base/macro.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "base/banned.h"

#define POOL_MAX 4
#define RETRIES 2

struct cae_docker {
	cae_docker_endpoint ep;
	int64_t timeout_ms;
	pthread_mutex_t lock;
	bool negotiated;
	char version[16]; /* "1.41" */
	CURL *pool[POOL_MAX];
	int npool;
};

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_code;

static void curl_init(void)
{
	curl_init_code = curl_global_init(CURL_GLOBAL_DEFAULT);
}

/* ---- DOCKER_HOST ---- */

void cae__docker_endpoint_clear(cae_docker_endpoint *ep)
{
	if (!ep)
		return;
	free(ep->socket_path);
	free(ep->base_url);
	free(ep->host);
	memset(ep, 0, sizeof(*ep));
}

static char *str_printf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *str_printf(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	char *s = NULL;
	if (vasprintf(&s, fmt, ap) < 0)
		s = NULL;
	va_end(ap);
	return s;
}

int cae__docker_endpoint_parse(const char *host, cae_docker_endpoint *ep, cae_error *err)
{
	memset(ep, 0, sizeof(*ep));
	if (!host || !*host)
		host = CAE_DOCKER_DEFAULT_HOST;
	const char *path = NULL;
	if (strncmp(host, "unix://", 7) == 0)
		path = host + 7;
	else if (host[0] == '/')
		path = host;
	if (path) {
		if (path[0] != '/' || strlen(path) >= 108)
			return cae_error_set(
			    err, -EINVAL,
			    "DOCKER_HOST %s: expected unix:///absolute/path (at most "
			    "107 bytes)",
			    host);
		ep->is_unix = true;
		ep->socket_path = strdup(path);
		ep->base_url = strdup("http://localhost");
		ep->host = str_printf("unix://%s", path);
		goto done;
	}
	const char *rest = NULL;
	if (strncmp(host, "tcp://", 6) == 0)
		rest = host + 6;
	else if (strncmp(host, "http://", 7) == 0)
		rest = host + 7;
	if (!rest)
		return cae_error_set(err, -EINVAL,
				     "DOCKER_HOST %s: unsupported (use unix:///path or "
				     "tcp://host:port; TLS and ssh:// are not supported)",
				     host);
	size_t n = strcspn(rest, "/?#");
	if (n == 0 || (rest[n] && strcmp(rest + n, "/") != 0))
		return cae_error_set(err, -EINVAL, "DOCKER_HOST %s: expected tcp://host[:port]",
				     host);
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)rest[i];
		if (!(isalnum(c) || c == '.' || c == '-' || c == ':' || c == '[' || c == ']' ||
		      c == '_'))
			return cae_error_set(err, -EINVAL, "DOCKER_HOST %s: bad host name", host);
	}
	/* A port is present when the last ':' comes after any ']' (IPv6 literal). */
	const char *colon = memrchr(rest, ':', n);
	const char *bracket = memrchr(rest, ']', n);
	bool has_port = colon && (!bracket || colon > bracket);
	if (has_port) {
		const char *p = colon + 1;
		size_t pl = n - (size_t)(p - rest);
		if (pl == 0 || pl > 5 || strspn(p, "0123456789") < pl)
			return cae_error_set(err, -EINVAL, "DOCKER_HOST %s: bad port", host);
		long port = strtol(p, NULL, 10);
		if (port < 1 || port > 65535)
			return cae_error_set(err, -EINVAL, "DOCKER_HOST %s: bad port", host);
		ep->base_url = str_printf("http://%.*s", (int)n, rest);
		ep->host = str_printf("tcp://%.*s", (int)n, rest);
	} else {
		ep->base_url = str_printf("http://%.*s:2375", (int)n, rest);
		ep->host = str_printf("tcp://%.*s:2375", (int)n, rest);
	}
done:
	if (!ep->base_url || !ep->host || (ep->is_unix && !ep->socket_path)) {
		cae__docker_endpoint_clear(ep);
		return cae_error_set(err, -ENOMEM, "out of memory");
	}
	return 0;
}

/* ---- versions ---- */

static bool parse_version(const char *s, long *maj, long *min)
{
	if (!s || !isdigit((unsigned char)*s))
		return false;
	char *end;
	*maj = strtol(s, &end, 10);
	if (*end != '.' || !isdigit((unsigned char)end[1]))
		return false;
	*min = strtol(end + 1, &end, 10);
	return *end == '\0' && *maj >= 0 && *maj < 1000 && *min >= 0 && *min < 100000;
}

int cae__docker_version_cmp(const char *a, const char *b)
{
	long am, an, bm, bn;
	bool ao = parse_version(a, &am, &an), bo = parse_version(b, &bm, &bn);
	if (!ao || !bo)
		return ao - bo;
	if (am != bm)
		return am < bm ? -1 : 1;
	if (an != bn)
		return an < bn ? -1 : 1;
	return 0;
}

int cae__docker_negotiate(const char *server, char *out, size_t size, cae_error *err)
{
	long m, n;
	if (!server || !parse_version(server, &m, &n)) {
		snprintf(out, size, "%s", CAE_DOCKER_API_MAX);
		return 0;
	}
	if (cae__docker_version_cmp(server, CAE_DOCKER_API_MIN) < 0)
		return cae_error_set(err, -ENOTSUP,
				     "the Docker engine speaks API %s; cae needs at least %s",
				     server, CAE_DOCKER_API_MIN);
	if (cae__docker_version_cmp(server, CAE_DOCKER_API_MAX) < 0)
		snprintf(out, size, "%ld.%ld", m, n);
	else
		snprintf(out, size, "%s", CAE_DOCKER_API_MAX);
	return 0;
}

/* ---- errors ---- */

int cae__docker_status_errno(long status)
{
	switch (status) {
	case 400:
		return -EINVAL;
	case 401:
	case 403:
		return -EACCES;
	case 404:
		return -ENOENT;
	case 409:
		return -EEXIST;
	case 501:
		return -ENOSYS;
	case 503:
		return -EAGAIN;
	default:
		return -EIO;
	}
}

void cae__docker_error_message(const char *body, size_t len, char *out, size_t size)
{
	out[0] = '\0';
	if (!body || len == 0)
		return;
	json_error_t je;
	json_t *j = json_loadb(body, len, 0, &je);
	const char *msg = json_string_value(json_object_get(j, "message"));
	const char *src = msg ? msg : body;
	size_t sl = msg ? strlen(msg) : len;
	size_t k = 0;
	for (size_t i = 0; i < sl && k + 1 < size; i++) {
		unsigned char c = (unsigned char)src[i];
		out[k++] = (c == '\n' || c == '\r' || c == '\t') ? ' ' : (c < 0x20 ? '?' : (char)c);
	}
	out[k] = '\0';
	while (k > 0 && out[k - 1] == ' ')
		out[--k] = '\0';
	json_decref(j);
}

/* ---- handles ---- */

static CURL *handle_get(cae_docker *d)
{
	pthread_mutex_lock(&d->lock);
	CURL *h = d->npool > 0 ? d->pool[--d->npool] : NULL;
	pthread_mutex_unlock(&d->lock);
	if (h) {
		curl_easy_reset(h);
		return h;
	}
	return curl_easy_init();
}

static void handle_put(cae_docker *d, CURL *h)
{
	if (!h)
		return;
	pthread_mutex_lock(&d->lock);
	if (d->npool < POOL_MAX) {
		d->pool[d->npool++] = h;
		h = NULL;
	}
	pthread_mutex_unlock(&d->lock);
	if (h)
		curl_easy_cleanup(h);
}

static void set_endpoint(cae_docker *d, CURL *h)
{
	if (d->ep.is_unix)
		curl_easy_setopt(h, CURLOPT_UNIX_SOCKET_PATH, d->ep.socket_path);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_PROXY, "");
	curl_easy_setopt(h, CURLOPT_NOPROXY, "*");
}

int cae_docker_new(const char *host, cae_docker **out, cae_error *err)
{
	pthread_once(&curl_once, curl_init);
	if (curl_init_code != CURLE_OK)
		return cae_error_set(err, -EIO, "libcurl initialisation failed");
	cae_docker *d = calloc(1, sizeof(*d));
	if (!d)
		return cae_error_set(err, -ENOMEM, "out of memory");
	int r = cae__docker_endpoint_parse(host, &d->ep, err);
	if (r < 0) {
		free(d);
		return r;
	}
	d->timeout_ms = CAE_DOCKER_DEFAULT_TIMEOUT_MS;
	pthread_mutex_init(&d->lock, NULL);
	*out = d;
	return 0;
}

void cae_docker_free(cae_docker *d)
{
	if (!d)
		return;
	for (int i = 0; i < d->npool; i++)
		curl_easy_cleanup(d->pool[i]);
	pthread_mutex_destroy(&d->lock);
	cae__docker_endpoint_clear(&d->ep);
	free(d);
}

void cae_docker_set_timeout(cae_docker *d, int64_t timeout_ms)
{
	d->timeout_ms = timeout_ms > 0 ? timeout_ms : CAE_DOCKER_DEFAULT_TIMEOUT_MS;
}

const char *cae_docker_host(const cae_docker *d)
{
	return d->ep.host;
}

/* ---- one HTTP request ---- */

struct response {
	cae_buf body;
	bool too_big;
	char api_version[32];
};

static size_t on_body(char *p, size_t size, size_t nmemb, void *ud)
{
	struct response *r = ud;
	size_t n = size * nmemb;
	if (r->body.len + n > r->body.max) {
		r->too_big = true;
		return 0;
	}
	return cae__buf_append(&r->body, p, n) == 0 ? n : 0;
}

static size_t on_header(char *p, size_t size, size_t nmemb, void *ud)
{
	struct response *r = ud;
	size_t n = size * nmemb;
	static const char key[] = "api-version:";
	if (n > sizeof(key) - 1 && strncasecmp(p, key, sizeof(key) - 1) == 0) {
		size_t i = sizeof(key) - 1, k = 0;
		while (i < n && (p[i] == ' ' || p[i] == '\t'))
			i++;
		while (i < n && k + 1 < sizeof(r->api_version) && p[i] != '\r' && p[i] != '\n')
			r->api_version[k++] = p[i++];
		r->api_version[k] = '\0';
	}
	return n;
}

/* Performs method url_path (already versioned) with body text; fills resp and *status.
 * Returns 0 (any HTTP status) or a transport -errno with err set. */
static int perform(cae_docker *d, const char *method, const char *url_path, const char *body,
		   int64_t timeout_ms, struct response *resp, long *status, cae_error *err)
{
	CURL *h = handle_get(d);
	if (!h)
		return cae_error_set(err, -ENOMEM, "out of memory");
	_cleanup_free_ char *url = str_printf("%s%s", d->ep.base_url, url_path);
	if (!url) {
		handle_put(d, h);
		return cae_error_set(err, -ENOMEM, "out of memory");
	}
	char errbuf[CURL_ERROR_SIZE];
	errbuf[0] = '\0';
	struct curl_slist *hdrs = NULL;
	hdrs = curl_slist_append(hdrs, "Expect:");
	if (body)
		hdrs = curl_slist_append(hdrs, "Content-Type: application/json");
	set_endpoint(d, h);
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
	curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)timeout_ms);
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)MIN(timeout_ms, 10000));
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, resp);
	curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(h, CURLOPT_HEADERDATA, resp);
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
	if (strcmp(method, "GET") == 0) {
		curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
	} else if (strcmp(method, "HEAD") == 0) {
		curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
	} else {
		curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
		if (strcmp(method, "POST") == 0 || strcmp(method, "PUT") == 0) {
			curl_easy_setopt(h, CURLOPT_POSTFIELDS, body ? body : "");
			curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)(body ? strlen(body) : 0));
		}
	}
	CURLcode c = curl_easy_perform(h);
	curl_slist_free_all(hdrs);
	int r = 0;
	if (c == CURLE_OK) {
		curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, status);
	} else {
		const char *why = errbuf[0] ? errbuf : curl_easy_strerror(c);
		if (c == CURLE_COULDNT_CONNECT || c == CURLE_COULDNT_RESOLVE_HOST)
			r = cae_error_set(err, -ECONNREFUSED,
					  "cannot connect to the Docker engine at %s: %s",
					  d->ep.host, why);
		else if (c == CURLE_OPERATION_TIMEDOUT)
			r = cae_error_set(err, -ETIMEDOUT,
					  "%s %s: no answer from the engine within "
					  "%lld ms",
					  method, url_path, (long long)timeout_ms);
		else if (c == CURLE_WRITE_ERROR && resp->too_big)
			r = cae_error_set(err, -EFBIG, "%s %s: response larger than %u bytes",
					  method, url_path, CAE_DOCKER_MAX_RESPONSE);
		else
			r = cae_error_set(err, -EIO, "%s %s: %s", method, url_path, why);
	}
	/* A failed transfer may leave the connection in an unknown state: drop the handle. */
	if (r < 0) {
		curl_easy_cleanup(h);
		return r;
	}
	handle_put(d, h);
	return 0;
}

static bool idempotent(const char *method)
{
	return strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0 ||
	       strcmp(method, "DELETE") == 0;
}

/* Asks the engine for its API version and publishes the one to speak. Runs without the
 * lock (handle_get takes it); two threads racing here both ask /_ping and agree. */
static int negotiate(cae_docker *d, int64_t timeout_ms, bool retry, cae_error *err)
{
	int r = 0;
	for (int attempt = 0; attempt <= (retry ? RETRIES : 0); attempt++) {
		if (attempt)
			nanosleep(&(struct timespec){0, 100000000L * attempt * attempt}, NULL);
		struct response resp = {0};
		cae__buf_init(&resp.body, 4096);
		long status = 0;
		r = perform(d, "GET", "/_ping", NULL, timeout_ms, &resp, &status, err);
		if (r < 0) {
			cae__buf_clear(&resp.body);
			continue;
		}
		if (status != 200) {
			char msg[512];
			cae__docker_error_message(resp.body.data, resp.body.len, msg, sizeof(msg));
			cae__buf_clear(&resp.body);
			return cae_error_set(err, cae__docker_status_errno(status),
					     "GET /_ping: %s (HTTP %ld)", msg, status);
		}
		cae__buf_clear(&resp.body);
		char server[32];
		snprintf(server, sizeof(server), "%s", resp.api_version);
		if (!server[0]) {
			/* No API-Version header: ask /version (unversioned). */
			struct response vr = {0};
			cae__buf_init(&vr.body, 64 * 1024);
			if (perform(d, "GET", "/version", NULL, timeout_ms, &vr, &status, NULL) ==
				0 &&
			    status == 200) {
				json_t *j = json_loadb(vr.body.data ? vr.body.data : "",
						       vr.body.len, 0, NULL);
				const char *v = json_string_value(json_object_get(j, "ApiVersion"));
				if (v)
					snprintf(server, sizeof(server), "%s", v);
				json_decref(j);
			}
			cae__buf_clear(&vr.body);
		}
		char version[16];
		r = cae__docker_negotiate(server[0] ? server : NULL, version, sizeof(version), err);
		if (r < 0)
			return r;
		pthread_mutex_lock(&d->lock);
		memcpy(d->version, version, sizeof(version));
		d->negotiated = true;
		pthread_mutex_unlock(&d->lock);
		return 0;
	}
	return r;
}

static int ensure_negotiated(cae_docker *d, cae_error *err)
{
	pthread_mutex_lock(&d->lock);
	bool done = d->negotiated;
	pthread_mutex_unlock(&d->lock);
	if (done)
		return 0;
	return negotiate(d, d->timeout_ms, true, err);
}

int cae_docker_ping(cae_docker *d, int64_t timeout_ms, cae_error *err)
{
	return negotiate(d, timeout_ms > 0 ? timeout_ms : d->timeout_ms, false, err);
}

const char *cae_docker_api_version(cae_docker *d, cae_error *err)
{
	/* version is written once, before negotiated is set, and never changes after. */
	return ensure_negotiated(d, err) == 0 ? d->version : NULL;
}

int cae__docker_version_prefix(cae_docker *d, char *prefix, size_t size, cae_error *err)
{
	int r = ensure_negotiated(d, err);
	if (r < 0)
		return r;
	snprintf(prefix, size, "/v%s", d->version);
	return 0;
}

static int docker_call(cae_docker *d, const char *method, const char *path, json_t *body,
		       json_t **resp_json, int64_t timeout_ms, cae_buf *raw, cae_error *err)
{
	if (resp_json)
		*resp_json = NULL;
	char prefix[24];
	int r = cae__docker_version_prefix(d, prefix, sizeof(prefix), err);
	if (r < 0)
		return r;
	_cleanup_free_ char *url_path = str_printf("%s%s", prefix, path);
	_cleanup_free_ char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
	if (!url_path || (body && !text))
		return cae_error_set(err, -ENOMEM, "out of memory");
	int attempts = idempotent(method) ? RETRIES + 1 : 1;
	struct response resp = {0};
	long status = 0;
	for (int attempt = 0; attempt < attempts; attempt++) {
		if (attempt)
			nanosleep(&(struct timespec){0, 100000000L * attempt * attempt}, NULL);
		cae__buf_clear(&resp.body);
		memset(&resp, 0, sizeof(resp));
		cae__buf_init(&resp.body, CAE_DOCKER_MAX_RESPONSE);
		r = perform(d, method, url_path, text, timeout_ms, &resp, &status, err);
		if (r == 0 || r == -EFBIG)
			break;
	}
	if (r < 0) {
		cae__buf_clear(&resp.body);
		return r;
	}
	if ((status >= 200 && status < 300) || status == 304) {
		if (resp_json && resp.body.len > 0)
			*resp_json = json_loadb(resp.body.data, resp.body.len, 0, NULL);
		if (raw) {
			*raw = resp.body;
			return (int)status;
		}
		cae__buf_clear(&resp.body);
		return (int)status;
	}
	char msg[768];
	cae__docker_error_message(resp.body.data, resp.body.len, msg, sizeof(msg));
	cae__buf_clear(&resp.body);
	return cae_error_set(err, cae__docker_status_errno(status), "%s %s: %s (HTTP %ld)", method,
			     path, msg[0] ? msg : "no message", status);
}

int cae_docker_call(cae_docker *d, const char *method, const char *path, json_t *body,
		    json_t **resp_json, cae_error *err)
{
	return docker_call(d, method, path, body, resp_json, d->timeout_ms, NULL, err);
}

int cae__docker_call_raw(cae_docker *d, const char *method, const char *path, char **body,
			 size_t *len, cae_error *err)
{
	cae_buf raw = {0};
	int r = docker_call(d, method, path, NULL, NULL, d->timeout_ms, &raw, err);
	if (r < 0)
		return r;
	*body = cae__buf_steal(&raw, len);
	return *body ? r : cae_error_set(err, -ENOMEM, "out of memory");
}

int cae__docker_connect_raw(cae_docker *d, int64_t timeout_ms, CURL **out, curl_socket_t *sock,
			    cae_error *err)
{
	CURL *h = curl_easy_init();
	if (!h)
		return cae_error_set(err, -ENOMEM, "out of memory");
	char errbuf[CURL_ERROR_SIZE];
	errbuf[0] = '\0';
	set_endpoint(d, h);
	curl_easy_setopt(h, CURLOPT_URL, d->ep.base_url);
	curl_easy_setopt(h, CURLOPT_CONNECT_ONLY, 1L);
	curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)MIN(timeout_ms, 10000));
	CURLcode c = curl_easy_perform(h);
	if (c != CURLE_OK) {
		int r = cae_error_set(err, -ECONNREFUSED,
				      "cannot connect to the Docker engine at %s: %s", d->ep.host,
				      errbuf[0] ? errbuf : curl_easy_strerror(c));
		curl_easy_cleanup(h);
		return r;
	}
	curl_socket_t s = CURL_SOCKET_BAD;
	if (curl_easy_getinfo(h, CURLINFO_ACTIVESOCKET, &s) != CURLE_OK || s == CURL_SOCKET_BAD) {
		curl_easy_cleanup(h);
		return cae_error_set(err, -EIO, "no socket from libcurl");
	}
	curl_easy_setopt(h, CURLOPT_ERRORBUFFER, NULL);
	*out = h;
	*sock = s;
	return 0;
}

/* ---- containers ---- */

char *cae__docker_escape(const char *s)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t n = strlen(s);
	char *out = malloc(n * 3 + 1);
	if (!out)
		return NULL;
	size_t k = 0;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
			out[k++] = (char)c;
		} else {
			out[k++] = '%';
			out[k++] = hex[c >> 4];
			out[k++] = hex[c & 15];
		}
	}
	out[k] = '\0';
	return out;
}

static int call_id(cae_docker *d, const char *method, const char *fmt_path, const char *id,
		   const char *query, json_t *body, json_t **resp, int64_t extra_ms, cae_error *err)
{
	_cleanup_free_ char *eid = cae__docker_escape(id);
	if (!eid)
		return cae_error_set(err, -ENOMEM, "out of memory");
	_cleanup_free_ char *path = NULL;
	if (asprintf(&path, "/containers/%s%s%s", eid, fmt_path, query ? query : "") < 0)
		return cae_error_set(err, -ENOMEM, "out of memory");
	return docker_call(d, method, path, body, resp, d->timeout_ms + extra_ms, NULL, err);
}

int cae_docker_container_create(cae_docker *d, const char *name, json_t *config, char **id,
				json_t **warnings, cae_error *err)
{
	*id = NULL;
	if (warnings)
		*warnings = NULL;
	_cleanup_free_ char *ename = name ? cae__docker_escape(name) : NULL;
	_cleanup_free_ char *path = NULL;
	if ((name && !ename) || asprintf(&path, "/containers/create%s%s", ename ? "?name=" : "",
					 ename ? ename : "") < 0)
		return cae_error_set(err, -ENOMEM, "out of memory");
	json_t *resp = NULL;
	int r = cae_docker_call(d, "POST", path, config, &resp, err);
	if (r < 0)
		return r;
	const char *cid = json_string_value(json_object_get(resp, "Id"));
	if (!cid) {
		json_decref(resp);
		return cae_error_set(err, -EPROTO, "POST /containers/create: no Id in the answer");
	}
	*id = strdup(cid);
	if (warnings) {
		json_t *w = json_object_get(resp, "Warnings");
		*warnings = json_is_array(w) ? json_incref(w) : json_array();
	}
	json_decref(resp);
	return *id ? 0 : cae_error_set(err, -ENOMEM, "out of memory");
}

int cae_docker_container_start(cae_docker *d, const char *id, cae_error *err)
{
	int r = call_id(d, "POST", "/start", id, NULL, NULL, NULL, 0, err);
	return r < 0 ? r : 0;
}

int cae_docker_container_inspect(cae_docker *d, const char *id, json_t **out, cae_error *err)
{
	int r = call_id(d, "GET", "/json", id, NULL, NULL, out, 0, err);
	if (r < 0)
		return r;
	if (!json_is_object(*out)) {
		json_decref(*out);
		*out = NULL;
		return cae_error_set(err, -EPROTO, "GET /containers/%s/json: not an object", id);
	}
	return 0;
}

int cae_docker_container_stats(cae_docker *d, const char *id, json_t **out, cae_error *err)
{
	*out = NULL;
	int r = call_id(d, "GET", "/stats", id, "?stream=false&one-shot=true", NULL, out, 0, err);
	if (r < 0)
		return r;
	if (!json_is_object(*out)) {
		json_decref(*out);
		*out = NULL;
		return cae_error_set(err, -EPROTO, "GET /containers/%s/stats: not an object", id);
	}
	return 0;
}

static json_int_t num(json_t *o, const char *k)
{
	json_t *v = json_object_get(o, k);
	return json_is_integer(v) ? json_integer_value(v) : (json_int_t)json_number_value(v);
}

json_t *cae_docker_stats_summary(json_t *stats, json_t *inspect)
{
	json_t *cpu = json_object_get(stats, "cpu_stats");
	json_t *pre = json_object_get(stats, "precpu_stats");
	json_t *mem = json_object_get(stats, "memory_stats");
	json_t *pids = json_object_get(stats, "pids_stats");
	json_int_t total = num(json_object_get(cpu, "cpu_usage"), "total_usage");
	json_t *out = json_pack("{s:f}", "cpu_seconds", (double)total / 1e9);
	if (!out)
		return NULL;
	/* the engine's own formula, when it sent two samples */
	json_int_t pre_total = num(json_object_get(pre, "cpu_usage"), "total_usage");
	json_int_t sys = num(cpu, "system_cpu_usage"), pre_sys = num(pre, "system_cpu_usage");
	json_int_t online = num(cpu, "online_cpus");
	if (pre_sys > 0 && sys > pre_sys && total >= pre_total)
		json_object_set_new(
		    out, "cpu_percent",
		    json_real((double)(total - pre_total) / (double)(sys - pre_sys) *
			      (double)(online > 0 ? online : 1) * 100.0));
	json_int_t usage = num(mem, "usage");
	json_t *ms = json_object_get(mem, "stats");
	json_int_t cache = json_object_get(ms, "inactive_file") ? num(ms, "inactive_file")
								: num(ms, "total_inactive_file");
	json_object_set_new(out, "memory_bytes",
			    json_integer(usage > cache ? usage - cache : usage));
	json_object_set_new(out, "memory_limit_bytes", json_integer(num(mem, "limit")));
	json_object_set_new(out, "pids", json_integer(num(pids, "current")));
	if (num(pids, "limit") > 0)
		json_object_set_new(out, "pids_limit", json_integer(num(pids, "limit")));
	json_int_t nano = num(json_object_get(inspect, "HostConfig"), "NanoCpus");
	if (nano > 0)
		json_object_set_new(out, "cpus_limit", json_real((double)nano / 1e9));
	return out;
}

int cae_docker_container_stop(cae_docker *d, const char *id, int timeout_s, cae_error *err)
{
	char q[32];
	snprintf(q, sizeof(q), "?t=%d", timeout_s);
	/* The call itself lasts up to timeout_s: allow for it. */
	int r = call_id(d, "POST", "/stop", id, q, NULL, NULL, (int64_t)timeout_s * 1000, err);
	return r < 0 ? r : 0;
}

int cae_docker_container_kill(cae_docker *d, const char *id, const char *signal, cae_error *err)
{
	char q[48];
	snprintf(q, sizeof(q), "?signal=%s", signal ? signal : "KILL");
	int r = call_id(d, "POST", "/kill", id, q, NULL, NULL, 0, err);
	return r < 0 ? r : 0;
}

int cae_docker_container_restart(cae_docker *d, const char *id, int timeout_s, cae_error *err)
{
	char q[32];
	snprintf(q, sizeof(q), "?t=%d", timeout_s);
	int r = call_id(d, "POST", "/restart", id, q, NULL, NULL, (int64_t)timeout_s * 1000, err);
	return r < 0 ? r : 0;
}

int cae_docker_container_rename(cae_docker *d, const char *id, const char *name, cae_error *err)
{
	_cleanup_free_ char *ename = cae__docker_escape(name);
	_cleanup_free_ char *q = NULL;
	if (!ename || asprintf(&q, "?name=%s", ename) < 0)
		return cae_error_set(err, -ENOMEM, "out of memory");
	int r = call_id(d, "POST", "/rename", id, q, NULL, NULL, 0, err);
	return r < 0 ? r : 0;
}

int cae_docker_container_remove(cae_docker *d, const char *id, bool force, bool volumes,
				cae_error *err)
{
	char q[32];
	snprintf(q, sizeof(q), "?force=%d&v=%d", force ? 1 : 0, volumes ? 1 : 0);
	int r = call_id(d, "DELETE", "", id, q, NULL, NULL, 0, err);
	return r < 0 ? r : 0;
}

int cae_docker_container_list(cae_docker *d, bool all, json_t *filters, json_t **out,
			      cae_error *err)
{
	*out = NULL;
	_cleanup_free_ char *ftext = filters ? json_dumps(filters, JSON_COMPACT) : NULL;
	_cleanup_free_ char *efilters = ftext ? cae__docker_escape(ftext) : NULL;
	_cleanup_free_ char *path = NULL;
	if ((filters && !efilters) ||
	    asprintf(&path, "/containers/json?all=%d%s%s", all ? 1 : 0, efilters ? "&filters=" : "",
		     efilters ? efilters : "") < 0)
		return cae_error_set(err, -ENOMEM, "out of memory");
	int r = cae_docker_call(d, "GET", path, NULL, out, err);
	if (r < 0)
		return r;
	if (!json_is_array(*out)) {
		json_decref(*out);
		*out = NULL;
		return cae_error_set(err, -EPROTO, "GET /containers/json: not an array");
	}
	return 0;
}

struct upload {
	int fd;
	bool failed;
};

static size_t on_read(char *buf, size_t size, size_t nmemb, void *ud)
{
	struct upload *u = ud;
	for (;;) {
		ssize_t n = read(u->fd, buf, size * nmemb);
		if (n >= 0)
			return (size_t)n;
		if (errno != EINTR) {
			u->failed = true;
			return CURL_READFUNC_ABORT;
		}
	}
}

/* The archive calls' failures: curl's (the engine unreachable, a timeout, ...) and the
 * engine's answer that is not a 2xx (its message from body). */
static int archive_curl_error(CURLcode c, const char *errbuf, const char *method, const char *id,
			      cae_error *err)
{
	return cae_error_set(err,
			     c == CURLE_COULDNT_CONNECT	     ? -ECONNREFUSED
			     : c == CURLE_OPERATION_TIMEDOUT ? -ETIMEDOUT
							     : -EIO,
			     "%s /containers/%s/archive: %s", method, id,
			     errbuf[0] ? errbuf : curl_easy_strerror(c));
}

static int archive_status_error(long status, const cae_buf *body, const char *method,
				const char *id, cae_error *err)
{
	char msg[768];
	cae__docker_error_message(body->data, body->len, msg, sizeof(msg));
	return cae_error_set(err, cae__docker_status_errno(status),
			     "%s /containers/%s/archive: %s (HTTP %ld)", method, id,
			     msg[0] ? msg : "no message", status);
}

int cae_docker_put_archive(cae_docker *d, const char *id, const char *path, int fd, uint64_t size,
			   cae_error *err)
{
	char prefix[24];
	int r = cae__docker_version_prefix(d, prefix, sizeof(prefix), err);
	if (r < 0)
		return r;
	_cleanup_free_ char *eid = cae__docker_escape(id);
	_cleanup_free_ char *epath = cae__docker_escape(path);
	_cleanup_free_ char *url = NULL;
	if (!eid || !epath ||
	    asprintf(&url, "%s%s/containers/%s/archive?path=%s", d->ep.base_url, prefix, eid,
		     epath) < 0)
		return cae_error_set(err, -ENOMEM, "out of memory");
	CURL *h = handle_get(d);
	if (!h)
		return cae_error_set(err, -ENOMEM, "out of memory");
	struct response resp = {0};
	cae__buf_init(&resp.body, 64 * 1024);
	struct upload up = {.fd = fd};
	char errbuf[CURL_ERROR_SIZE];
	errbuf[0] = '\0';
	struct curl_slist *hdrs = curl_slist_append(NULL, "Content-Type: application/x-tar");
	hdrs = curl_slist_append(hdrs, "Expect:");
	set_endpoint(d, h);
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
	curl_easy_setopt(h, CURLOPT_READFUNCTION, on_read);
	curl_easy_setopt(h, CURLOPT_READDATA, &up);
	curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, (curl_off_t)size);
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
	curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
	curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)d->timeout_ms);
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)MIN(d->timeout_ms, 10000));
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, &resp);
	CURLcode c = curl_easy_perform(h);
	curl_slist_free_all(hdrs);
	long status = 0;
	if (c == CURLE_OK)
		curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
	if (c != CURLE_OK) {
		curl_easy_cleanup(h);
		cae__buf_clear(&resp.body);
		if (up.failed)
			return cae_error_set(err, -EIO,
					     "PUT /containers/%s/archive: cannot read the "
					     "archive",
					     id);
		return archive_curl_error(c, errbuf, "PUT", id, err);
	}
	handle_put(d, h);
	if (status >= 200 && status < 300) {
		cae__buf_clear(&resp.body);
		return 0;
	}
	r = archive_status_error(status, &resp.body, "PUT", id, err);
	cae__buf_clear(&resp.body);
	return r;
}

struct download {
	int fd;
	uint64_t max, got;
	bool too_big, failed;
	cae_buf error; /* the body of an answer that is not a 2xx */
	long status;
	CURL *h;
};

static size_t on_download(char *p, size_t size, size_t nmemb, void *ud)
{
	struct download *dl = ud;
	size_t n = size * nmemb;
	if (!dl->status)
		curl_easy_getinfo(dl->h, CURLINFO_RESPONSE_CODE, &dl->status);
	if (dl->status < 200 || dl->status >= 300)
		return cae__buf_append(&dl->error, p, n) == 0 ? n : 0;
	if (dl->got + n > dl->max) {
		dl->too_big = true;
		return 0;
	}
	if (cae__write_all(dl->fd, p, n) < 0) {
		dl->failed = true;
		return 0;
	}
	dl->got += n;
	return n;
}

int cae_docker_get_archive(cae_docker *d, const char *id, const char *path, int fd, uint64_t max,
			   uint64_t *size, cae_error *err)
{
	char prefix[24];
	int r = cae__docker_version_prefix(d, prefix, sizeof(prefix), err);
	if (r < 0)
		return r;
	_cleanup_free_ char *eid = cae__docker_escape(id);
	_cleanup_free_ char *epath = cae__docker_escape(path);
	_cleanup_free_ char *url = NULL;
	if (!eid || !epath ||
	    asprintf(&url, "%s%s/containers/%s/archive?path=%s", d->ep.base_url, prefix, eid,
		     epath) < 0)
		return cae_error_set(err, -ENOMEM, "out of memory");
	CURL *h = handle_get(d);
	if (!h)
		return cae_error_set(err, -ENOMEM, "out of memory");
	struct download dl = {.fd = fd, .max = max, .h = h};
	cae__buf_init(&dl.error, 64 * 1024);
	char errbuf[CURL_ERROR_SIZE];
	errbuf[0] = '\0';
	struct curl_slist *hdrs = curl_slist_append(NULL, "Expect:");
	set_endpoint(d, h);
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
	curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
	curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)d->timeout_ms);
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)MIN(d->timeout_ms, 10000));
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_download);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, &dl);
	CURLcode c = curl_easy_perform(h);
	curl_slist_free_all(hdrs);
	long status = 0;
	if (c == CURLE_OK)
		curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
	if (c != CURLE_OK) {
		curl_easy_cleanup(h);
		cae__buf_clear(&dl.error);
		if (dl.too_big)
			return cae_error_set(err, -EFBIG,
					     "GET /containers/%s/archive: larger than %llu bytes",
					     id, (unsigned long long)max);
		if (dl.failed)
			return cae_error_set(
			    err, -EIO, "GET /containers/%s/archive: cannot write the archive", id);
		return archive_curl_error(c, errbuf, "GET", id, err);
	}
	handle_put(d, h);
	if (status >= 200 && status < 300) {
		cae__buf_clear(&dl.error);
		if (size)
			*size = dl.got;
		return 0;
	}
	r = archive_status_error(status, &dl.error, "GET", id, err);
	cae__buf_clear(&dl.error);
	return r;
}

int cae_docker_info(cae_docker *d, json_t **out, cae_error *err)
{
	int r = cae_docker_call(d, "GET", "/info", NULL, out, err);
	if (r < 0)
		return r;
	if (!json_is_object(*out)) {
		json_decref(*out);
		*out = NULL;
		return cae_error_set(err, -EPROTO, "GET /info: not an object");
	}
	return 0;
}
