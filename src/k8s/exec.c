/* Exec streams over the API server's WebSocket (include/cae/k8s.h), with libwebsockets
 * (loaded on first use: lws-lazy.h).
 *
 * One libwebsockets context per stream, serviced by the stream's own thread, which alone
 * touches the connection: stdout goes into one end of a socket pair whose other end the
 * user reads (so a helper link can poll it and shut it down), stderr into a tail (or, for a
 * one-shot exec, a capture), the status channel into a buffer; what the user writes is
 * queued under a lock and the service thread is woken (lws_cancel_service) to send it. */
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
#define CH_STDIN 0
#define CH_STDOUT 1
#define CH_STDERR 2
#define CH_STATUS 3
#define CH_CLOSE 255 /* v5: ends the channel named by the next byte */

enum state { ST_CONNECTING, ST_OPEN, ST_CLOSED };

struct cae_k8s_stream {
	const cae_lws_api *L;
	const cae_k8s *k;
	struct lws_context *ctx;
	struct lws *wsi; /* the service thread's; NULL once destroyed */
	pthread_t thread;
	bool thread_started;
	int sv[2]; /* [0] the user's end, [1] the service thread's */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	/* under lock: */
	enum state state;
	bool stop;
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
	int chan; /* of the message being received */
};

static struct cae_k8s_stream *of_wsi(struct lws *wsi, const cae_lws_api *L)
{
	return L->context_user(L->get_context(wsi));
}

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
			cae__buf_clear(&s->in);
			cae__buf_init(&s->in, SIZE_MAX);
			s->in_off = 0;
		}
	} else if (close_now) {
		buf[LWS_PRE] = CH_CLOSE;
		buf[LWS_PRE + 1] = CH_STDIN;
		s->close_stdin = false;
	}
	bool more = s->in.len > s->in_off || (s->close_stdin && s->v5);
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

static int callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
		    size_t len)
{
	(void)user;
	const cae_lws_api *L = cae__lws();
	struct cae_k8s_stream *s = of_wsi(wsi, L);
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
		s->wsi = NULL;
		closed(s, why);
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
	case LWS_CALLBACK_EVENT_WAIT_CANCELLED: {
		pthread_mutex_lock(&s->lock);
		bool wake = s->wsi && s->state == ST_OPEN &&
			    (s->stop || s->in.len > s->in_off || (s->close_stdin && s->v5));
		pthread_mutex_unlock(&s->lock);
		if (wake)
			L->callback_on_writable(s->wsi);
		return 0;
	}
	case LWS_CALLBACK_CLIENT_CLOSED:
	case LWS_CALLBACK_WSI_DESTROY:
		if (wsi == s->wsi) {
			s->wsi = NULL;
			closed(s, "connection closed");
		}
		return 0;
	default:
		return 0;
	}
}

static const struct lws_protocols protocols[] = {
    {"cae-k8s", callback, 0, CHUNK + 16, 0, NULL, 0},
    {NULL, NULL, 0, 0, 0, NULL, 0},
};

static void *service_main(void *arg)
{
	struct cae_k8s_stream *s = arg;
	for (;;) {
		pthread_mutex_lock(&s->lock);
		bool quit = s->state == ST_CLOSED || (s->stop && !s->wsi);
		pthread_mutex_unlock(&s->lock);
		if (quit)
			break;
		if (s->L->service(s->ctx, 0) < 0)
			break;
	}
	closed(s, "service ended");
	return NULL;
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
	_cleanup_free_ char *path = exec_path(ns, pod, container, argv);
	if (!path) {
		cae_k8s_stream_close(s);
		return cae_error_set(err, -ENOMEM, "out of memory");
	}
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, s->sv) < 0) {
		int e = errno;
		cae_k8s_stream_close(s);
		return cae_error_set(err, -e, "socketpair: %s", strerror(e));
	}
	struct lws_context_creation_info info;
	memset(&info, 0, sizeof(info));
	info.port = CONTEXT_PORT_NO_LISTEN;
	info.protocols = protocols;
	info.user = s;
	info.gid = -1;
	info.uid = -1;
	info.fd_limit_per_thread = 8;
	if (k->tls) {
		info.options = LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT;
		info.client_ssl_ca_mem = k->auth.ca_pem;
		info.client_ssl_ca_mem_len = (unsigned)k->auth.ca_len;
		info.client_ssl_cert_mem = k->auth.cert_pem;
		info.client_ssl_cert_mem_len = (unsigned)k->auth.cert_len;
		info.client_ssl_key_mem = k->auth.key_pem;
		info.client_ssl_key_mem_len = (unsigned)k->auth.key_len;
	}
	s->ctx = L->create_context(&info);
	if (!s->ctx) {
		cae_k8s_stream_close(s);
		return cae_error_set(err, -EIO,
				     "libwebsockets: cannot create a context (TLS setup?)");
	}
	char hosthdr[300];
	snprintf(hosthdr, sizeof(hosthdr), "%s:%d", k->host, k->port);
	struct lws_client_connect_info cc;
	memset(&cc, 0, sizeof(cc));
	cc.context = s->ctx;
	cc.address = k->host;
	cc.port = k->port;
	cc.path = path;
	cc.host = hosthdr;
	cc.origin = hosthdr;
	cc.protocol = PROTOCOLS;
	cc.local_protocol_name = "cae-k8s";
	cc.pwsi = &s->wsi;
	if (k->tls)
		cc.ssl_connection = LCCSCF_USE_SSL |
				    (k->auth.insecure ? LCCSCF_ALLOW_SELFSIGNED |
							    LCCSCF_SKIP_SERVER_CERT_HOSTNAME_CHECK |
							    LCCSCF_ALLOW_INSECURE
						      : 0);
	if (!L->client_connect_via_info(&cc) && s->state != ST_CLOSED) {
		cae_k8s_stream_close(s);
		return cae_error_set(err, -ECONNREFUSED, "exec in pod %s: cannot connect to %s",
				     pod, k->auth.server);
	}
	if (pthread_create(&s->thread, NULL, service_main, s) != 0) {
		cae_k8s_stream_close(s);
		return cae_error_set(err, -EAGAIN, "cannot start a thread");
	}
	s->thread_started = true;
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
	while (s->state == ST_OPEN && !s->stop && s->in.len - s->in_off > QUEUE_MAX)
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
	if (s->thread_started) {
		pthread_mutex_lock(&s->lock);
		s->stop = true;
		pthread_cond_broadcast(&s->cond);
		pthread_mutex_unlock(&s->lock);
		s->L->cancel_service(s->ctx);
		pthread_join(s->thread, NULL);
	}
	if (s->ctx)
		s->L->context_destroy(s->ctx);
	if (s->sv[0] >= 0)
		close(s->sv[0]);
	if (s->sv[1] >= 0)
		close(s->sv[1]);
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
	if (r < 0)
		goto out;
	if (stdin_len)
		r = cae_k8s_stream_write(s, stdin_data, stdin_len);
	if (r == 0 && stdin_data)
		(void)cae_k8s_stream_close_stdin(s);
	char buf[CHUNK];
	while (r == 0) {
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
