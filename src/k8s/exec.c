/* Exec streams over the API server's WebSocket (include/cae/k8s.h), with libwebsockets
 * (loaded on first use: lws-lazy.h).
 *
 * One libwebsockets context for the process (the hub), serviced by one thread, which alone
 * calls into libwebsockets (others only wake it, with lws_cancel_service); every stream is a
 * client connection (wsi) on it with its own state, found from the wsi by its opaque user
 * pointer. stdout goes into one end of a socket pair whose other end the user reads (so a
 * helper link can poll it and shut it down), stderr into a tail (or, for a one-shot exec, a
 * capture), the status channel into a buffer. What a user wants done (connect, send what it
 * queued under the stream's lock, close) is flagged on the stream; the service thread acts on
 * the flags between two lws_service calls, so no libwebsockets call is ever made from
 * another thread. Closing a stream closes only its connection: the service thread unhooks
 * the wsi from the stream and kills it, then says the stream is detached, and only then is
 * the stream freed.
 *
 * The hub's life: made by the first stream to open, destroyed by the last one to close
 * (after its thread is joined), both under one lock that every open and close takes, so a
 * context is never destroyed while a stream uses it and there is never more than one. That
 * matters beyond tidiness: TLS needs LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT, and libwebsockets'
 * global OpenSSL teardown at a context's end strands OpenSSL's objects when another context
 * is still open (a leak each time streams overlapped, when each had its own context). With no
 * stream open nothing of libwebsockets remains, so nothing is left at exit either.
 *
 * TLS material: libwebsockets takes client certificates and CAs per vhost, so the hub has one
 * vhost per distinct set (CA, client certificate, key) that its streams used, made on first
 * use and kept as long as the hub (a handful: one per cluster and user at most); several
 * clusters or users can then have streams open at once. The bearer token is a header of each
 * connection, insecure-skip-tls-verify a flag of each connection. */
#include "k8s/k8s-internal.h"

#include "base/buf.h"
#include "base/macro.h"
#include "base/timeutil.h"
#include "k8s/lws-lazy.h"
#include "runner/capture.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/banned.h"

#define PROTOCOLS "v5.channel.k8s.io,v4.channel.k8s.io"
#define CHUNK (64 * 1024)
#define QUEUE_MAX (4 * 1024 * 1024)
#define STATUS_MAX (64 * 1024)
#define TAIL 4096
/* connections the hub polls at most (its streams, and the wake-up pipe) */
#define FD_LIMIT 4096
#define CH_STDIN 0
#define CH_STDOUT 1
#define CH_STDERR 2
#define CH_STATUS 3
#define CH_CLOSE 255 /* v5: ends the channel named by the next byte */

enum state { ST_CONNECTING, ST_OPEN, ST_CLOSED };

struct cae_k8s_stream {
	const cae_lws_api *L;
	const cae_k8s *k;
	struct lws_context *ctx; /* the hub's, while attached */
	bool attached;		 /* on the hub's list: must be detached before it is freed */
	struct cae_k8s_stream *prev, *next; /* the hub's list, under hub.lock */
	char *path;			    /* the exec URL's path and query */
	char hosthdr[300];
	int sv[2]; /* [0] the user's end, [1] the service thread's */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	/* under lock: */
	enum state state;
	bool stop;     /* the user closes it: the service thread is to drop the connection */
	bool detached; /* the service thread is done with it */
	bool v5;
	char proto[32];
	char why[256];
	cae_buf in; /* stdin not sent yet, from in_off */
	size_t in_off;
	bool close_stdin;
	char tail[TAIL]; /* stderr's last bytes, circular */
	size_t tail_len, tail_pos;
	char tail_text[TAIL + 1];
	cae_capture *err_capture; /* one-shot: all of stderr, bounded */
	cae_buf status;
	bool have_status;
	/* the service thread's own: */
	struct lws *wsi; /* NULL before the connect and once the connection is gone */
	bool started;	 /* the connect was made */
	bool gone;	 /* the connection ended (possibly before connect returned) */
	int chan;	 /* of the message being received */
};

/* A vhost of the hub: the TLS material it was made with (copies, to compare). */
struct hub_vhost {
	struct hub_vhost *next;
	struct lws_vhost *vh;
	bool tls;
	char *ca, *cert, *key;
	size_t ca_len, cert_len, key_len;
	char name[32]; /* libwebsockets keeps the pointer */
};

static struct {
	pthread_mutex_t life;	 /* held to make the hub, to attach, to leave and to end it */
	size_t users;		 /* under life: streams attached */
	struct lws_context *ctx; /* set and cleared under life, while users == 0 */
	pthread_t thread;
	pthread_mutex_t lock; /* the streams list, quit and dead */
	struct cae_k8s_stream *streams;
	bool quit; /* the thread is to end (the last stream left) */
	bool dead; /* lws_service failed: the thread ended, no stream may attach */
	/* the service thread's own while it runs, then the last leaver's: */
	struct hub_vhost *vhosts;
	unsigned vhost_seq;
} hub = {.life = PTHREAD_MUTEX_INITIALIZER, .lock = PTHREAD_MUTEX_INITIALIZER};

static void on_stderr(struct cae_k8s_stream *s, const char *p, size_t n)
{
	if (s->err_capture) {
		(void)cae__capture_add(s->err_capture, p, n);
		return;
	}
	for (size_t i = 0; i < n; i++) {
		s->tail[s->tail_pos] = p[i];
		s->tail_pos = (s->tail_pos + 1) % TAIL;
		if (s->tail_len < TAIL)
			s->tail_len++;
	}
}

/* stdout to the user's socket; dropped when the user has shut it down. */
static void on_stdout(struct cae_k8s_stream *s, const char *p, size_t n)
{
	while (n) {
		ssize_t w = send(s->sv[1], p, n, MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return;
		p += w;
		n -= (size_t)w;
	}
}

static void closed(struct cae_k8s_stream *s, const char *why)
{
	pthread_mutex_lock(&s->lock);
	if (why && !s->why[0] && s->state != ST_CLOSED)
		snprintf(s->why, sizeof(s->why), "%s", why);
	s->state = ST_CLOSED;
	pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->lock);
	(void)shutdown(s->sv[1], SHUT_WR);
}

static int send_some(struct cae_k8s_stream *s, struct lws *wsi)
{
	unsigned char buf[LWS_PRE + 1 + CHUNK];
	pthread_mutex_lock(&s->lock);
	if (s->stop) {
		pthread_mutex_unlock(&s->lock);
		return -1;
	}
	size_t n = s->in.len - s->in_off;
	if (n > CHUNK)
		n = CHUNK;
	bool close_now = n == 0 && s->close_stdin && s->v5;
	if (n) {
		buf[LWS_PRE] = CH_STDIN;
		memcpy(buf + LWS_PRE + 1, s->in.data + s->in_off, n);
		s->in_off += n;
		if (s->in_off == s->in.len) {
			/* all sent: the queue starts again at its buffer's start */
			s->in.len = s->in_off = 0;
			s->in.data[0] = '\0';
		} else if (s->in_off >= QUEUE_MAX) {
			/* what is sent leaves the buffer, so that it stays within twice what
			 * the user may queue however long the stream (a restore's archive
			 * is written while this drains it, and never all drained before
			 * its end) */
			s->in.len -= s->in_off;
			memmove(s->in.data, s->in.data + s->in_off, s->in.len);
			s->in.data[s->in.len] = '\0';
			s->in_off = 0;
		}
	} else if (close_now) {
		buf[LWS_PRE] = CH_CLOSE;
		buf[LWS_PRE + 1] = CH_STDIN;
		s->close_stdin = false;
	}
	bool more = s->in.len > s->in_off || (s->close_stdin && s->v5);
	/* a writer that waits for room goes on once half the queue is sent (one wake-up per
	 * QUEUE_MAX / 2 bytes, not one per frame) */
	if (s->in.len - s->in_off <= QUEUE_MAX / 2)
		pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->lock);
	if (n && s->L->write(wsi, buf + LWS_PRE, n + 1, LWS_WRITE_BINARY) < (int)(n + 1))
		return -1;
	if (close_now && s->L->write(wsi, buf + LWS_PRE, 2, LWS_WRITE_BINARY) < 2)
		return -1;
	if (more)
		s->L->callback_on_writable(wsi);
	return 0;
}

/* The connection ended (or never was): unhooked from its stream, whose reader sees the end. */
static void gone(struct cae_k8s_stream *s, struct lws *wsi, const char *why)
{
	s->L->set_opaque_user_data(wsi, NULL);
	s->wsi = NULL;
	s->gone = true;
	closed(s, why);
}

static int callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
		    size_t len)
{
	(void)user;
	const cae_lws_api *L = cae__lws();
	/* NULL for the hub's own wsi (the cancel pipe) and for a connection already unhooked */
	struct cae_k8s_stream *s = L->get_opaque_user_data(wsi);
	if (!s)
		return 0;
	switch (reason) {
	case LWS_CALLBACK_CLIENT_APPEND_HANDSHAKE_HEADER: {
		if (!s->k->auth.token)
			return 0;
		unsigned char **p = (unsigned char **)in, *end = *p + len;
		char v[8192];
		int n = snprintf(v, sizeof(v), "Bearer %s", s->k->auth.token);
		if (n < 0 || (size_t)n >= sizeof(v) ||
		    L->add_http_header_by_token(wsi, WSI_TOKEN_HTTP_AUTHORIZATION,
						(const unsigned char *)v, n, p, end))
			return -1;
		explicit_bzero(v, sizeof(v));
		return 0;
	}
	case LWS_CALLBACK_CLIENT_FILTER_PRE_ESTABLISH: {
		/* the response's headers are there only now */
		char proto[32] = "";
		if (L->hdr_copy(wsi, proto, sizeof(proto), WSI_TOKEN_PROTOCOL) < 0)
			proto[0] = '\0';
		pthread_mutex_lock(&s->lock);
		snprintf(s->proto, sizeof(s->proto), "%s", proto);
		s->v5 = strcmp(proto, "v5.channel.k8s.io") == 0;
		pthread_mutex_unlock(&s->lock);
		return 0;
	}
	case LWS_CALLBACK_CLIENT_ESTABLISHED: {
		pthread_mutex_lock(&s->lock);
		s->state = ST_OPEN;
		bool pending = s->in.len > s->in_off;
		pthread_cond_broadcast(&s->cond);
		pthread_mutex_unlock(&s->lock);
		if (pending)
			L->callback_on_writable(wsi);
		return 0;
	}
	case LWS_CALLBACK_CLIENT_CONNECTION_ERROR: {
		char why[200];
		unsigned st = L->http_client_http_response(wsi);
		if (st)
			snprintf(why, sizeof(why), "HTTP %u (%.*s)", st,
				 in ? (int)MIN(len, 120) : 0, in ? (const char *)in : "");
		else
			snprintf(why, sizeof(why), "%.*s", in ? (int)MIN(len, 180) : 7,
				 in ? (const char *)in : "refused");
		gone(s, wsi, why);
		return 0;
	}
	case LWS_CALLBACK_CLIENT_RECEIVE: {
		const char *p = in;
		if (L->is_first_fragment(wsi)) {
			if (len == 0)
				return 0;
			s->chan = (unsigned char)p[0];
			p++;
			len--;
		}
		if (s->chan == CH_STDOUT) {
			on_stdout(s, p, len);
		} else if (s->chan == CH_STDERR || s->chan == CH_STATUS) {
			pthread_mutex_lock(&s->lock);
			if (s->chan == CH_STDERR)
				on_stderr(s, p, len);
			else if (cae__buf_append(&s->status, p, len) == 0 &&
				 L->is_final_fragment(wsi))
				s->have_status = true;
			pthread_mutex_unlock(&s->lock);
		}
		return 0;
	}
	case LWS_CALLBACK_CLIENT_WRITEABLE:
		return send_some(s, wsi);
	case LWS_CALLBACK_CLIENT_CLOSED:
	case LWS_CALLBACK_WSI_DESTROY:
		gone(s, wsi, "connection closed");
		return 0;
	default:
		return 0;
	}
}

static const struct lws_protocols protocols[] = {
    {"cae-k8s", callback, 0, CHUNK + 16, 0, NULL, 0},
    {NULL, NULL, 0, 0, 0, NULL, 0},
};

/* ---- the hub (its service thread's side) ---- */

static bool same(const char *a, size_t alen, const char *b, size_t blen)
{
	return alen == blen && (alen == 0 || (a && b && memcmp(a, b, alen) == 0));
}

static char *dup_mem(const char *p, size_t n, bool *fail)
{
	if (!p)
		return NULL;
	char *c = malloc(n ? n : 1);
	if (!c)
		*fail = true;
	else
		memcpy(c, p, n);
	return c;
}

static void hub_vhost_free(struct hub_vhost *v)
{
	if (v->key)
		explicit_bzero(v->key, v->key_len);
	free(v->ca);
	free(v->cert);
	free(v->key);
	free(v);
}

/* The hub's vhost for k's TLS material, made on first use; NULL when libwebsockets refuses
 * the material. */
static struct lws_vhost *vhost_for(const cae_lws_api *L, const cae_k8s *k)
{
	const cae_k8s_auth *a = &k->auth;
	for (struct hub_vhost *v = hub.vhosts; v; v = v->next)
		if (v->tls == k->tls &&
		    (!k->tls || (same(v->ca, v->ca_len, a->ca_pem, a->ca_len) &&
				 same(v->cert, v->cert_len, a->cert_pem, a->cert_len) &&
				 same(v->key, v->key_len, a->key_pem, a->key_len))))
			return v->vh;
	struct hub_vhost *v = calloc(1, sizeof(*v));
	if (!v)
		return NULL;
	bool fail = false;
	v->tls = k->tls;
	if (k->tls) {
		v->ca = dup_mem(a->ca_pem, a->ca_len, &fail);
		v->ca_len = v->ca ? a->ca_len : 0;
		v->cert = dup_mem(a->cert_pem, a->cert_len, &fail);
		v->cert_len = v->cert ? a->cert_len : 0;
		v->key = dup_mem(a->key_pem, a->key_len, &fail);
		v->key_len = v->key ? a->key_len : 0;
	}
	snprintf(v->name, sizeof(v->name), "cae-k8s-%u", hub.vhost_seq++);
	struct lws_context_creation_info info;
	memset(&info, 0, sizeof(info));
	info.port = CONTEXT_PORT_NO_LISTEN;
	info.protocols = protocols;
	info.vhost_name = v->name;
	if (k->tls) {
		/* without it libwebsockets makes no client TLS context for the vhost */
		info.options = LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT;
		info.client_ssl_ca_mem = a->ca_pem;
		info.client_ssl_ca_mem_len = (unsigned)a->ca_len;
		info.client_ssl_cert_mem = a->cert_pem;
		info.client_ssl_cert_mem_len = (unsigned)a->cert_len;
		info.client_ssl_key_mem = a->key_pem;
		info.client_ssl_key_mem_len = (unsigned)a->key_len;
	}
	if (!fail)
		v->vh = L->create_vhost(hub.ctx, &info);
	if (!v->vh) {
		hub_vhost_free(v);
		return NULL;
	}
	v->next = hub.vhosts;
	hub.vhosts = v;
	return v->vh;
}

/* Connects s (the service thread, between two services). */
static void start(struct cae_k8s_stream *s)
{
	const cae_lws_api *L = s->L;
	const cae_k8s *k = s->k;
	s->started = true;
	struct lws_vhost *vh = vhost_for(L, k);
	if (!vh) {
		closed(s, "libwebsockets: cannot set up the connection (TLS material?)");
		return;
	}
	struct lws_client_connect_info cc;
	memset(&cc, 0, sizeof(cc));
	cc.context = s->ctx;
	cc.vhost = vh;
	cc.address = k->host;
	cc.port = k->port;
	cc.path = s->path;
	cc.host = s->hosthdr;
	cc.origin = s->hosthdr;
	cc.protocol = PROTOCOLS;
	cc.local_protocol_name = "cae-k8s";
	cc.opaque_user_data = s;
	if (k->tls)
		cc.ssl_connection = LCCSCF_USE_SSL |
				    (k->auth.insecure ? LCCSCF_ALLOW_SELFSIGNED |
							    LCCSCF_SKIP_SERVER_CERT_HOSTNAME_CHECK |
							    LCCSCF_ALLOW_INSECURE
						      : 0);
	struct lws *wsi = L->client_connect_via_info(&cc);
	/* an error met at once has called back already (gone) and freed the wsi */
	if (wsi && !s->gone) {
		s->wsi = wsi;
	} else if (!wsi) {
		char why[300];
		snprintf(why, sizeof(why), "cannot connect to %s", k->auth.server);
		closed(s, why);
	}
}

/* What the user of s asked for, done by the service thread (under hub.lock). */
static void tend(struct cae_k8s_stream *s)
{
	const cae_lws_api *L = s->L;
	pthread_mutex_lock(&s->lock);
	bool stop = s->stop, detached = s->detached;
	bool to_send = s->state == ST_OPEN && (s->in.len > s->in_off || (s->close_stdin && s->v5));
	pthread_mutex_unlock(&s->lock);
	if (detached)
		return;
	if (stop) {
		struct lws *wsi = s->wsi;
		if (wsi) {
			/* no callback of it reaches s from here on */
			L->set_opaque_user_data(wsi, NULL);
			s->wsi = NULL;
			L->set_timeout(wsi, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_SYNC);
		}
		closed(s, "closed");
		pthread_mutex_lock(&s->lock);
		s->detached = true;
		pthread_cond_broadcast(&s->cond);
		pthread_mutex_unlock(&s->lock);
		return;
	}
	if (!s->started)
		start(s);
	else if (s->wsi && to_send)
		L->callback_on_writable(s->wsi);
}

static void *service_main(void *arg)
{
	const cae_lws_api *L = arg;
	for (;;) {
		pthread_mutex_lock(&hub.lock);
		bool quit = hub.quit;
		for (struct cae_k8s_stream *s = hub.streams; s && !quit; s = s->next)
			tend(s);
		pthread_mutex_unlock(&hub.lock);
		if (quit)
			return NULL;
		if (L->service(hub.ctx, 0) < 0)
			break;
	}
	/* libwebsockets gave up: every stream ends (the context goes with the last one) */
	pthread_mutex_lock(&hub.lock);
	hub.dead = true;
	for (struct cae_k8s_stream *s = hub.streams; s; s = s->next) {
		if (s->wsi)
			L->set_opaque_user_data(s->wsi, NULL);
		s->wsi = NULL;
		closed(s, "libwebsockets' service ended");
		pthread_mutex_lock(&s->lock);
		s->detached = true;
		pthread_cond_broadcast(&s->cond);
		pthread_mutex_unlock(&s->lock);
	}
	pthread_mutex_unlock(&hub.lock);
	return NULL;
}

/* ---- the hub (its users' side) ---- */

/* Ends the hub (under hub.life, with no stream attached). */
static void hub_end(const cae_lws_api *L)
{
	pthread_mutex_lock(&hub.lock);
	hub.quit = true;
	pthread_mutex_unlock(&hub.lock);
	L->cancel_service(hub.ctx);
	pthread_join(hub.thread, NULL);
	L->context_destroy(hub.ctx);
	hub.ctx = NULL;
	while (hub.vhosts) {
		struct hub_vhost *v = hub.vhosts;
		hub.vhosts = v->next;
		hub_vhost_free(v);
	}
	hub.quit = hub.dead = false;
}

/* Puts s on the hub (made when there is none) and wakes the service thread to connect it. */
static int hub_attach(struct cae_k8s_stream *s, cae_error *err)
{
	const cae_lws_api *L = s->L;
	int r = 0;
	pthread_mutex_lock(&hub.life);
	if (!hub.ctx) {
		struct lws_context_creation_info info;
		memset(&info, 0, sizeof(info));
		info.port = CONTEXT_PORT_NO_LISTEN;
		info.options =
		    LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT | LWS_SERVER_OPTION_EXPLICIT_VHOSTS;
		info.gid = -1;
		info.uid = -1;
		info.fd_limit_per_thread = FD_LIMIT;
		hub.ctx = L->create_context(&info);
		if (!hub.ctx)
			r = cae_error_set(err, -EIO,
					  "libwebsockets: cannot create a context (TLS setup?)");
		else if (pthread_create(&hub.thread, NULL, service_main, (void *)L) != 0) {
			L->context_destroy(hub.ctx);
			hub.ctx = NULL;
			r = cae_error_set(err, -EAGAIN, "cannot start a thread");
		}
	}
	if (r == 0) {
		pthread_mutex_lock(&hub.lock);
		if (hub.dead) {
			r = cae_error_set(err, -EIO, "libwebsockets' service ended");
		} else {
			s->next = hub.streams;
			if (hub.streams)
				hub.streams->prev = s;
			hub.streams = s;
			s->ctx = hub.ctx;
			s->attached = true;
			hub.users++;
		}
		pthread_mutex_unlock(&hub.lock);
	}
	pthread_mutex_unlock(&hub.life);
	if (r == 0)
		L->cancel_service(s->ctx);
	return r;
}

/* Takes s off the hub once the service thread let go of it; the last one ends the hub. */
static void hub_detach(struct cae_k8s_stream *s)
{
	const cae_lws_api *L = s->L;
	pthread_mutex_lock(&s->lock);
	s->stop = true;
	pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->lock);
	L->cancel_service(s->ctx);
	pthread_mutex_lock(&s->lock);
	while (!s->detached)
		pthread_cond_wait(&s->cond, &s->lock);
	pthread_mutex_unlock(&s->lock);
	pthread_mutex_lock(&hub.life);
	pthread_mutex_lock(&hub.lock);
	if (s->prev)
		s->prev->next = s->next;
	else
		hub.streams = s->next;
	if (s->next)
		s->next->prev = s->prev;
	pthread_mutex_unlock(&hub.lock);
	s->attached = false;
	if (--hub.users == 0)
		hub_end(L);
	pthread_mutex_unlock(&hub.life);
}

/* The exec path: /api/v1/namespaces/NS/pods/POD/exec?container=..&command=..&stdin=true... */
static char *exec_path(const char *ns, const char *pod, const char *container,
		       const char *const *argv)
{
	cae_buf b;
	cae__buf_init(&b, 1024 * 1024);
	_cleanup_free_ char *ens = cae__k8s_escape(ns);
	_cleanup_free_ char *epod = cae__k8s_escape(pod);
	int r = !ens || !epod ? -ENOMEM : 0;
	char head[1024];
	if (r == 0) {
		snprintf(head, sizeof(head), "/api/v1/namespaces/%s/pods/%s/exec?", ens, epod);
		r = cae__buf_append(&b, head, strlen(head));
	}
	if (r == 0 && container) {
		_cleanup_free_ char *ec = cae__k8s_escape(container);
		r = ec ? cae__buf_printf(&b, "container=%s&", ec) : -ENOMEM;
	}
	for (const char *const *a = argv; r == 0 && *a; a++) {
		_cleanup_free_ char *e = cae__k8s_escape(*a);
		r = e ? cae__buf_printf(&b, "command=%s&", e) : -ENOMEM;
	}
	if (r == 0)
		r = cae__buf_printf(&b, "stdin=true&stdout=true&stderr=true");
	if (r < 0) {
		cae__buf_clear(&b);
		return NULL;
	}
	size_t n;
	return cae__buf_steal(&b, &n);
}

static int stream_open(cae_k8s *k, const char *ns, const char *pod, const char *container,
		       const char *const *argv, int64_t timeout_ms, cae_capture *err_capture,
		       cae_k8s_stream **out, cae_error *err)
{
	const cae_lws_api *L = cae__lws();
	if (!L)
		return cae_error_set(err, -ENOSYS, "%s", cae__lws_error());
	struct cae_k8s_stream *s = calloc(1, sizeof(*s));
	if (!s)
		return cae_error_set(err, -ENOMEM, "out of memory");
	s->L = L;
	s->k = k;
	s->sv[0] = s->sv[1] = -1;
	s->err_capture = err_capture;
	pthread_mutex_init(&s->lock, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&s->cond, &ca);
	pthread_condattr_destroy(&ca);
	cae__buf_init(&s->in, SIZE_MAX);
	cae__buf_init(&s->status, STATUS_MAX);
	snprintf(s->hosthdr, sizeof(s->hosthdr), "%s:%d", k->host, k->port);
	s->path = exec_path(ns, pod, container, argv);
	if (!s->path) {
		cae_k8s_stream_close(s);
		return cae_error_set(err, -ENOMEM, "out of memory");
	}
	if (strlen(s->path) > CAE_K8S_EXEC_PATH_MAX) {
		size_t n = strlen(s->path);
		cae_k8s_stream_close(s);
		return cae_error_set(err, -E2BIG,
				     "exec in pod %s: the command makes an exec URL of %zu bytes, "
				     "more than libwebsockets sends (%d): pass it on stdin",
				     pod, n, CAE_K8S_EXEC_PATH_MAX);
	}
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, s->sv) < 0) {
		int e = errno;
		cae_k8s_stream_close(s);
		return cae_error_set(err, -e, "socketpair: %s", strerror(e));
	}
	int r = hub_attach(s, err);
	if (r < 0) {
		cae_k8s_stream_close(s);
		return r;
	}
	struct timespec until;
	clock_gettime(CLOCK_MONOTONIC, &until);
	until.tv_sec += (time_t)(timeout_ms / 1000);
	until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
	if (until.tv_nsec >= 1000000000L) {
		until.tv_sec++;
		until.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&s->lock);
	int w = 0;
	while (s->state == ST_CONNECTING && w != ETIMEDOUT)
		w = pthread_cond_timedwait(&s->cond, &s->lock, &until);
	enum state st = s->state;
	char why[256];
	snprintf(why, sizeof(why), "%s", s->why);
	pthread_mutex_unlock(&s->lock);
	if (st != ST_OPEN) {
		cae_k8s_stream_close(s);
		if (st == ST_CONNECTING)
			return cae_error_set(err, -ETIMEDOUT,
					     "exec in pod %s: no answer in %lld ms", pod,
					     (long long)timeout_ms);
		/* the upgrade was refused: the pod is gone, or not running */
		int e = strstr(why, "HTTP 404")				     ? -ESRCH
			: strstr(why, "HTTP 400")			     ? -EAGAIN
			: strstr(why, "HTTP 403") || strstr(why, "HTTP 401") ? -EACCES
									     : -ECONNREFUSED;
		return cae_error_set(err, e, "exec in pod %s: %s", pod, why);
	}
	*out = s;
	return 0;
}

int cae_k8s_exec_open(cae_k8s *k, const char *ns, const char *pod, const char *container,
		      const char *const *argv, int64_t timeout_ms, cae_k8s_stream **out,
		      cae_error *err)
{
	return stream_open(k, ns, pod, container, argv, timeout_ms, NULL, out, err);
}

int cae_k8s_stream_fd(const cae_k8s_stream *s)
{
	return s->sv[0];
}

ssize_t cae_k8s_stream_read(cae_k8s_stream *s, char *buf, size_t size)
{
	ssize_t n = recv(s->sv[0], buf, size, MSG_DONTWAIT);
	if (n >= 0)
		return n;
	return errno == EAGAIN || errno == EWOULDBLOCK ? -EAGAIN : -errno;
}

int cae_k8s_stream_write(cae_k8s_stream *s, const void *p, size_t n)
{
	pthread_mutex_lock(&s->lock);
	/* a full queue takes more once half of it is sent */
	if (s->in.len - s->in_off > QUEUE_MAX)
		while (s->state == ST_OPEN && !s->stop && s->in.len - s->in_off > QUEUE_MAX / 2)
			pthread_cond_wait(&s->cond, &s->lock);
	int r = s->state != ST_OPEN || s->stop ? -EPIPE : cae__buf_append(&s->in, p, n);
	pthread_mutex_unlock(&s->lock);
	if (r == 0)
		s->L->cancel_service(s->ctx);
	return r;
}

int cae_k8s_stream_close_stdin(cae_k8s_stream *s)
{
	pthread_mutex_lock(&s->lock);
	int r = s->state != ST_OPEN ? -EPIPE : !s->v5 ? -EOPNOTSUPP : 0;
	if (r == 0)
		s->close_stdin = true;
	pthread_mutex_unlock(&s->lock);
	if (r == 0)
		s->L->cancel_service(s->ctx);
	return r;
}

const char *cae_k8s_stream_stderr(cae_k8s_stream *s)
{
	pthread_mutex_lock(&s->lock);
	size_t start = (s->tail_pos + TAIL - s->tail_len) % TAIL;
	for (size_t i = 0; i < s->tail_len; i++)
		s->tail_text[i] = s->tail[(start + i) % TAIL];
	s->tail_text[s->tail_len] = '\0';
	pthread_mutex_unlock(&s->lock);
	return s->tail_text;
}

const char *cae_k8s_stream_protocol(const cae_k8s_stream *s)
{
	return s->proto;
}

int cae_k8s_stream_status(cae_k8s_stream *s, int *exit_code, cae_error *err)
{
	pthread_mutex_lock(&s->lock);
	json_t *j = s->have_status ? json_loadb(s->status.data, s->status.len, 0, NULL) : NULL;
	pthread_mutex_unlock(&s->lock);
	if (!j)
		return cae_error_set(err, -EAGAIN, "no exit status from the API server");
	const char *st = json_string_value(json_object_get(j, "status"));
	const char *reason = json_string_value(json_object_get(j, "reason"));
	int r = 0;
	if (st && strcmp(st, "Success") == 0) {
		*exit_code = 0;
	} else if (reason && strcmp(reason, "NonZeroExitCode") == 0) {
		r = -EIO;
		size_t i;
		json_t *c;
		json_array_foreach(json_object_get(json_object_get(j, "details"), "causes"), i, c)
		{
			const char *cr = json_string_value(json_object_get(c, "reason"));
			const char *m = json_string_value(json_object_get(c, "message"));
			char *end;
			long v = m ? strtol(m, &end, 10) : -1;
			if (cr && m && strcmp(cr, "ExitCode") == 0 && end != m && !*end && v >= 0 &&
			    v <= 255) {
				*exit_code = (int)v;
				r = 0;
			}
		}
		if (r < 0)
			cae_error_set(err, r, "exit status without an exit code");
	} else {
		const char *m = json_string_value(json_object_get(j, "message"));
		r = cae_error_set(err, -EIO, "%s", m ? m : "the command could not run");
	}
	json_decref(j);
	return r;
}

void cae_k8s_stream_close(cae_k8s_stream *s)
{
	if (!s)
		return;
	if (s->attached)
		hub_detach(s);
	if (s->sv[0] >= 0)
		close(s->sv[0]);
	if (s->sv[1] >= 0)
		close(s->sv[1]);
	free(s->path);
	cae__buf_clear(&s->in);
	cae__buf_clear(&s->status);
	pthread_cond_destroy(&s->cond);
	pthread_mutex_destroy(&s->lock);
	free(s);
}

/* ---- one command ---- */

int cae_k8s_exec(cae_k8s *k, const char *ns, const char *pod, const char *container,
		 const char *const *argv, const char *stdin_data, size_t stdin_len,
		 int64_t timeout_ms, size_t max_stdout, size_t max_stderr, int cancel_fd,
		 cae_run_result *res, cae_error *err)
{
	memset(res, 0, sizeof(*res));
	int64_t t0 = cae__now_ns();
	int64_t deadline = timeout_ms > 0 ? t0 + timeout_ms * 1000000LL : INT64_MAX;
	cae_capture out, errc;
	cae__capture_init(&out, max_stdout ? max_stdout : 1024 * 1024, CAE_TRUNCATE_HEAD);
	cae__capture_init(&errc, max_stderr ? max_stderr : 1024 * 1024, CAE_TRUNCATE_HEAD);
	cae_k8s_stream *s = NULL;
	int64_t open_ms = timeout_ms > 0 && timeout_ms < 30000 ? timeout_ms : 30000;
	int r = stream_open(k, ns, pod, container, argv, open_ms, &errc, &s, err);
	if (r == -ETIMEDOUT && timeout_ms > 0 && timeout_ms <= open_ms) {
		/* the command's own deadline passed before the API server answered (a busy
		 * cluster): the command timed out, as one that ran too long does */
		res->timed_out = true;
		r = 0;
		cae_error_clear(err);
	} else if (r < 0) {
		goto out;
	}
	if (s && stdin_len)
		r = cae_k8s_stream_write(s, stdin_data, stdin_len);
	if (s && r == 0 && stdin_data)
		(void)cae_k8s_stream_close_stdin(s);
	char buf[CHUNK];
	while (s && r == 0) {
		ssize_t n = cae_k8s_stream_read(s, buf, sizeof(buf));
		if (n > 0) {
			r = cae__capture_add(&out, buf, (size_t)n);
			continue;
		}
		if (n == 0)
			break;
		if (n != -EAGAIN) {
			r = (int)n;
			break;
		}
		int64_t now = cae__now_ns();
		if (now >= deadline) {
			res->timed_out = true;
			break;
		}
		struct pollfd pfd[2] = {{.fd = s->sv[0], .events = POLLIN},
					{.fd = cancel_fd, .events = POLLIN}};
		int pr = poll(pfd, cancel_fd >= 0 ? 2 : 1,
			      deadline == INT64_MAX ? -1 : cae__poll_timeout_ms(deadline, now));
		if (pr > 0 && cancel_fd >= 0 && (pfd[1].revents & (POLLIN | POLLHUP))) {
			res->cancelled = true;
			break;
		}
	}
	if (r < 0) {
		r = cae_error_set(err, r, "exec in pod %s: %s", pod, strerror(-r));
		goto out;
	}
	if (!res->timed_out && !res->cancelled) {
		r = cae_k8s_stream_status(s, &res->exit_code, err);
		if (r < 0)
			goto out;
	} else {
		res->exit_code = -1;
	}
	cae_k8s_stream_close(s); /* the service thread is done with errc */
	s = NULL;
	res->out_total = out.total;
	res->err_total = errc.total;
	res->out = cae__capture_finish(&out, &res->out_len, &res->out_truncated);
	res->err = cae__capture_finish(&errc, &res->err_len, &res->err_truncated);
	if (!res->out || !res->err) {
		cae_run_result_clear(res);
		r = cae_error_set(err, -ENOMEM, "out of memory");
		goto out;
	}
	res->duration_us = (cae__now_ns() - t0) / 1000;
	res->duration_ms = res->duration_us / 1000;
out:
	cae_k8s_stream_close(s);
	cae__capture_clear(&out);
	cae__capture_clear(&errc);
	return r;
}
