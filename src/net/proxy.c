/* The filtering proxy (see cae/net.h): one thread per client, bounded in number, that reads
 * the request within a deadline, decides by the name asked for, resolves it here, connects
 * to the first resolved address the policy lets through (that very sockaddr: no second
 * resolution), then relays bytes both ways through a pipe per direction (splice: the bytes
 * stay in the kernel; a fixed buffer when pipes are not to be had). Listeners
 * (a helper's loopback sockets handed over) have a thread each that accepts. */
#include "cae/net.h"

#include "base/fs.h"
#include "base/macro.h"
#include "base/timeutil.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/banned.h"

#define STACK_SIZE (1024 * 1024)
#define MIN_BUFFER 4096

struct conn {
	struct conn *next, *prev;
	int cfd, ufd;
	cae_net_proxy *px;
};

struct listener {
	struct listener *next;
	int fd;
	pthread_t thread;
	cae_net_proxy *px;
};

struct denied {
	char host[CAE_NET_MAX_NAME + 1];
	int port;
	json_int_t count;
};

struct cae_net_proxy {
	cae_net_policy *policy;
	cae_net_proxy_options o;
	char *task;
	cae_log *log;
	pthread_attr_t attr;
	int wake[2]; /* listeners poll its read end: written when the proxy ends */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct conn *conns;
	int active;
	bool closing;
	struct listener *listeners;
	struct denied *den;
	size_t n_den;
};

void cae_net_proxy_options_init(cae_net_proxy_options *o)
{
	memset(o, 0, sizeof(*o));
	o->max_connections = 64;
	o->buffer_size = 65536;
	o->header_timeout_ms = 10000;
	o->connect_timeout_ms = 10000;
	o->max_denied = 64;
}

static const char *const proxy_env[] = {
    "HTTP_PROXY=http://127.0.0.1:3128",
    "HTTPS_PROXY=http://127.0.0.1:3128",
    "ALL_PROXY=socks5h://127.0.0.1:1080",
    "NO_PROXY=localhost,127.0.0.1,::1",
    "http_proxy=http://127.0.0.1:3128",
    "https_proxy=http://127.0.0.1:3128",
    "all_proxy=socks5h://127.0.0.1:1080",
    "no_proxy=localhost,127.0.0.1,::1",
    NULL,
};
_Static_assert(CAE_NET_HTTP_PORT == 3128 && CAE_NET_SOCKS_PORT == 1080, "proxy_env's ports");

const char *const *cae_net_proxy_env(void)
{
	return proxy_env;
}

int cae_net_proxy_new(cae_net_policy *policy, const cae_net_proxy_options *o, cae_log *log,
		      cae_net_proxy **out, cae_error *err)
{
	*out = NULL;
	cae_net_proxy *px = calloc(1, sizeof(*px));
	if (!px) {
		cae_net_policy_free(policy);
		return -ENOMEM;
	}
	px->policy = policy;
	if (o)
		px->o = *o;
	else
		cae_net_proxy_options_init(&px->o);
	if (px->o.max_connections < 1)
		px->o.max_connections = 1;
	if (px->o.buffer_size < MIN_BUFFER)
		px->o.buffer_size = MIN_BUFFER;
	px->task = o && o->task ? strdup(o->task) : NULL;
	px->log = log;
	if (pipe2(px->wake, O_CLOEXEC | O_NONBLOCK) < 0) {
		int e = errno;
		free(px->task);
		free(px);
		cae_net_policy_free(policy);
		return cae_error_set(err, -e, "pipe: %s", strerror(e));
	}
	pthread_mutex_init(&px->lock, NULL);
	pthread_cond_init(&px->cond, NULL);
	pthread_attr_init(&px->attr);
	pthread_attr_setstacksize(&px->attr, STACK_SIZE);
	pthread_attr_setdetachstate(&px->attr, PTHREAD_CREATE_DETACHED);
	*out = px;
	return 0;
}

/* ---- I/O with deadlines ---- */

static int wait_fd(int fd, short ev, int64_t deadline_ns)
{
	for (;;) {
		int ms = -1;
		if (deadline_ns) {
			int64_t left = deadline_ns - cae__now_ns();
			if (left <= 0)
				return -ETIMEDOUT;
			ms = (int)MIN(left / 1000000 + 1, INT32_MAX);
		}
		struct pollfd p = {.fd = fd, .events = ev};
		int r = poll(&p, 1, ms);
		if (r > 0)
			return 0;
		if (r == 0)
			return -ETIMEDOUT;
		if (errno != EINTR)
			return -errno;
	}
}

static int send_all(int fd, const void *data, size_t len, int64_t deadline_ns)
{
	const char *p = data;
	while (len) {
		ssize_t w = send(fd, p, len, MSG_NOSIGNAL);
		if (w > 0) {
			p += w;
			len -= (size_t)w;
			continue;
		}
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && errno != EAGAIN)
			return -errno;
		int r = wait_fd(fd, POLLOUT, deadline_ns);
		if (r < 0)
			return r;
	}
	return 0;
}

/* ---- refusals ---- */

static void record_denied(cae_net_proxy *px, const char *host, int port, cae_net_verdict v,
			  const char *why)
{
	pthread_mutex_lock(&px->lock);
	bool found = false;
	for (size_t i = 0; i < px->n_den && !found; i++)
		if (px->den[i].port == port && strcmp(px->den[i].host, host) == 0) {
			px->den[i].count++;
			found = true;
		}
	if (!found && px->n_den < px->o.max_denied) {
		struct denied *d = realloc(px->den, (px->n_den + 1) * sizeof(*d));
		if (d) {
			px->den = d;
			snprintf(d[px->n_den].host, sizeof(d->host), "%s", host);
			d[px->n_den].port = port;
			d[px->n_den].count = 1;
			px->n_den++;
		}
	}
	pthread_mutex_unlock(&px->lock);
	cae_log_fields(px->log, CAE_LOG_WARN, "network.denied",
		       json_pack("{s:s?, s:s, s:i, s:s}", "task", px->task, "host", host, "port",
				 port, "rule", cae_net_verdict_rule(v)),
		       "blocked by cae network policy: %s", why);
}

json_t *cae_net_proxy_take_denied(cae_net_proxy *px)
{
	if (!px)
		return NULL;
	pthread_mutex_lock(&px->lock);
	json_t *a = NULL;
	if (px->n_den) {
		a = json_array();
		for (size_t i = 0; a && i < px->n_den; i++)
			json_array_append_new(a, json_pack("{s:s, s:i, s:I}", "host",
							   px->den[i].host, "port", px->den[i].port,
							   "count", px->den[i].count));
	}
	free(px->den);
	px->den = NULL;
	px->n_den = 0;
	pthread_mutex_unlock(&px->lock);
	return a;
}

static void http_answer(int fd, const char *status, const char *body, int64_t deadline_ns)
{
	char msg[1024];
	int n = snprintf(msg, sizeof(msg),
			 "HTTP/1.1 %s\r\nContent-Type: text/plain\r\nContent-Length: %zu\r\n"
			 "Connection: close\r\n\r\n%s",
			 status, strlen(body), body);
	(void)send_all(fd, msg, (size_t)MIN(n, (int)sizeof(msg) - 1), deadline_ns);
}

static void socks_answer(int fd, unsigned char rep, int64_t deadline_ns)
{
	unsigned char r[10] = {5, rep, 0, 1, 0, 0, 0, 0, 0, 0};
	(void)send_all(fd, r, sizeof(r), deadline_ns);
}

/* ---- one client ---- */

/* Connects to the first address of host:port the policy lets through; the caller answers
 * a refusal (*v, why) or a failure (-errno). */
static int connect_upstream(cae_net_proxy *px, const char *host, int port, bool literal,
			    cae_net_verdict *v, char *why, size_t why_size)
{
	char ps[8];
	snprintf(ps, sizeof(ps), "%d", port);
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM,
				 .ai_flags = AI_NUMERICSERV | (literal ? AI_NUMERICHOST : 0)};
	struct addrinfo *ai = NULL;
	int gr = getaddrinfo(host, ps, &hints, &ai);
	if (gr != 0) {
		snprintf(why, why_size, "cae proxy: %s cannot be resolved (%s)", host,
			 gai_strerror(gr));
		return -EHOSTUNREACH;
	}
	int fd = -1, last = -EHOSTUNREACH;
	const char *kind = NULL;
	char first[INET6_ADDRSTRLEN] = "";
	bool any_ok = false;
	int64_t deadline = cae__now_ns() + px->o.connect_timeout_ms * 1000000;
	for (struct addrinfo *a = ai; a && fd < 0; a = a->ai_next) {
		const char *k = NULL;
		if (!cae_net_policy_address_ok(px->policy, a->ai_addr, &k)) {
			if (!kind) {
				kind = k ? k : "forbidden";
				const void *src =
				    a->ai_family == AF_INET
					? (const void *)&((struct sockaddr_in *)(void *)a->ai_addr)
					      ->sin_addr
					: (const void *)&((struct sockaddr_in6 *)(void *)a->ai_addr)
					      ->sin6_addr;
				inet_ntop(a->ai_family, src, first, sizeof(first));
			}
			continue;
		}
		any_ok = true;
		/* this very address, checked above: connect to it */
		int s = socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
		if (s < 0) {
			last = -errno;
			continue;
		}
		int r = connect(s, a->ai_addr, a->ai_addrlen);
		if (r < 0 && errno == EINPROGRESS) {
			r = wait_fd(s, POLLOUT, deadline);
			int soerr = 0;
			socklen_t sl = sizeof(soerr);
			if (r == 0 && getsockopt(s, SOL_SOCKET, SO_ERROR, &soerr, &sl) == 0 &&
			    soerr)
				r = -soerr;
			if (r < 0)
				errno = -r;
		}
		if (r < 0) {
			last = -errno;
			close(s);
			continue;
		}
		fd = s;
	}
	freeaddrinfo(ai);
	if (fd >= 0)
		return fd;
	if (!any_ok) {
		*v = CAE_NET_DENY_ADDRESS;
		snprintf(why, why_size, "%s resolves to %s, a %s address not in allowed_addresses",
			 host, first, kind ? kind : "forbidden");
		return -EACCES;
	}
	snprintf(why, why_size, "cae proxy: %s port %d: %s", host, port, strerror(-last));
	return last;
}

/* The pipe a direction splices through: the connection's buffer size (64 KiB), grown to
 * SPLICE_BULK the first time one splice fills half of it, i.e. for a bulk transfer only: 256 KiB
 * moves it in four times fewer splice calls (and window updates) than 64 KiB, for a third
 * less of the proxy's CPU per byte (1 MiB saves little more and keeps more bytes in flight,
 * BENCHMARKS.md). Short exchanges keep the small pipe: an unprivileged user's pipes count
 * their size against fs.pipe-user-pages-soft, past which every new pipe of that user is
 * tiny. */
#define SPLICE_BULK (256u << 10)

/* The send buffer of the client's socket (the kernel doubles it): a fixed 128 KiB instead of
 * autotuning up to tcp_wmem's maximum (4 MiB) keeps what waits for a slow client small, and
 * keeps the bytes the client reads still in the cache: with autotuning the client's copy
 * out of the kernel cost half again the direct path's (BENCHMARKS.md). The client's side is
 * the environment's loopback or the helper's channel, where 256 KiB in flight is plenty; the
 * upstream's side keeps autotuning (a real network's bandwidth-delay product). */
#define CLIENT_SNDBUF (128 << 10)

struct dir {
	int from, to;
	char *buf;
	size_t len, off;
	bool eof;
	/* a pipe to splice through (the bytes stay in the kernel), or -1: the buffer */
	int pr, pw;
	size_t inpipe, psize;
};

/* Whether d holds bytes not yet sent on. */
static bool pending(const struct dir *d)
{
	return d->pr >= 0 ? d->inpipe > 0 : d->len > d->off;
}

/* Moves what is there from d->from to d->to without waiting: sends what the buffer (or
 * pipe) holds, refills it, and again, until a side would block. Returns -1 when the
 * connection is broken. */
static int pump(struct dir *d, size_t size)
{
	if (d->pr >= 0)
		size = d->psize;
	const unsigned fl = SPLICE_F_NONBLOCK | SPLICE_F_MOVE;
	for (int k = 0; k < 64; k++) {
		if (d->pr >= 0 && d->inpipe > 0) {
			ssize_t w = splice(d->pr, NULL, d->to, NULL, d->inpipe, fl);
			if (w < 0)
				return errno == EAGAIN || errno == EINTR ? 0 : -1;
			d->inpipe -= (size_t)w;
			if (d->inpipe > 0)
				return 0;
		} else if (d->len > d->off) {
			ssize_t w = send(d->to, d->buf + d->off, d->len - d->off, MSG_NOSIGNAL);
			if (w < 0)
				return errno == EAGAIN || errno == EINTR ? 0 : -1;
			d->off += (size_t)w;
			if (d->off < d->len)
				return 0;
			d->off = d->len = 0;
		}
		if (d->eof)
			return 0;
		ssize_t r = d->pr >= 0 ? splice(d->from, NULL, d->pw, NULL, size, fl)
				       : recv(d->from, d->buf, size, 0);
		if (r < 0)
			return errno == EAGAIN || errno == EINTR ? 0 : -1;
		if (r == 0) {
			d->eof = true;
			shutdown(d->to, SHUT_WR);
			return 0;
		}
		if (d->pr >= 0) {
			d->inpipe = (size_t)r;
			/* (a pipe's slots may fill before its bytes: half is full) */
			if ((size_t)r >= d->psize / 2 && d->psize < SPLICE_BULK &&
			    fcntl(d->pw, F_SETPIPE_SZ, (int)SPLICE_BULK) >= (int)SPLICE_BULK)
				d->psize = SPLICE_BULK;
		} else
			d->len = (size_t)r;
	}
	return 0;
}

/* A pipe of size bytes for d (the copying buffer stays the fallback). */
static void splice_pipe(struct dir *d, size_t size)
{
	int p[2];
	if (pipe2(p, O_CLOEXEC | O_NONBLOCK) < 0)
		return;
	int got = fcntl(p[1], F_SETPIPE_SZ, (int)size);
	if (got < 0)
		got = fcntl(p[1], F_GETPIPE_SZ);
	if (got <= 0) {
		close(p[0]);
		close(p[1]);
		return;
	}
	d->psize = (size_t)got;
	d->pr = p[0];
	d->pw = p[1];
}

static void relay(int a, int b, size_t size)
{
	struct dir d[2] = {{a, b, malloc(size), 0, 0, false, -1, -1, 0, 0},
			   {b, a, malloc(size), 0, 0, false, -1, -1, 0, 0}};
	/* splice has no MSG_NOSIGNAL: a peer gone raises SIGPIPE at this thread (one of the
	 * proxy's own), held blocked here and taken before the thread goes on */
	sigset_t pipe_set, old;
	sigemptyset(&pipe_set);
	sigaddset(&pipe_set, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
	if (!d[0].buf || !d[1].buf)
		goto out;
	/* a pipe holds its pages only while bytes pass through it */
	splice_pipe(&d[0], size);
	splice_pipe(&d[1], size);
	for (;;) {
		if (pump(&d[0], size) < 0 || pump(&d[1], size) < 0)
			break;
		struct pollfd p[2] = {{.fd = a}, {.fd = b}};
		bool any = false;
		for (int i = 0; i < 2; i++) {
			struct pollfd *pf = d[i].from == a ? &p[0] : &p[1];
			struct pollfd *pt = d[i].to == a ? &p[0] : &p[1];
			if (pending(&d[i])) {
				pt->events |= POLLOUT;
				any = true;
			} else if (!d[i].eof) {
				pf->events |= POLLIN;
				any = true;
			}
		}
		if (!any)
			break;
		if (poll(p, 2, -1) < 0 && errno != EINTR)
			break;
	}
out:
	for (int i = 0; i < 2; i++) {
		free(d[i].buf);
		if (d[i].pr >= 0) {
			close(d[i].pr);
			close(d[i].pw);
		}
	}
	sigset_t waiting;
	if (sigpending(&waiting) == 0 && sigismember(&waiting, SIGPIPE))
		(void)sigtimedwait(&pipe_set, NULL, &(struct timespec){0, 0});
	pthread_sigmask(SIG_SETMASK, &old, NULL);
}

/* Reads into buf[*len..cap) until parse gives a verdict, the buffer is full (bad) or the
 * deadline passes (0 bytes: the client is dropped without an answer). */
static int read_request(int fd, char *buf, size_t cap, size_t *len, bool socks, int64_t deadline_ns,
			cae_net_request *req)
{
	for (;;) {
		cae_net_parse_request(buf, *len, socks, req);
		if (req->kind != CAE_NET_REQ_INCOMPLETE)
			return 0;
		if (*len == cap) {
			req->kind = CAE_NET_REQ_BAD;
			return 0;
		}
		int r = wait_fd(fd, POLLIN, deadline_ns);
		if (r < 0)
			return r;
		ssize_t n = recv(fd, buf + *len, cap - *len, 0);
		if (n == 0)
			return -ECONNRESET;
		if (n < 0 && errno != EAGAIN && errno != EINTR)
			return -errno;
		if (n > 0)
			*len += (size_t)n;
	}
}

static void serve(cae_net_proxy *px, struct conn *c)
{
	size_t cap = px->o.buffer_size;
	char *buf = malloc(cap + 1);
	if (!buf)
		return;
	int64_t deadline = cae__now_ns() + px->o.header_timeout_ms * 1000000;
	size_t len = 0;
	cae_net_request req;
	int r = read_request(c->cfd, buf, cap, &len, false, deadline, &req);
	bool socks = req.kind == CAE_NET_REQ_SOCKS_GREETING;
	if (r < 0)
		goto out;
	if (socks) {
		unsigned char method[2] = {5, req.socks_no_auth ? 0 : 0xff};
		if (send_all(c->cfd, method, 2, deadline) < 0 || !req.socks_no_auth)
			goto out;
		memmove(buf, buf + req.consumed, len - req.consumed);
		len -= req.consumed;
		r = read_request(c->cfd, buf, cap, &len, true, deadline, &req);
		if (r < 0)
			goto out;
	}
	if (req.kind == CAE_NET_REQ_SOCKS_BADCMD) {
		socks_answer(c->cfd, 7, deadline);
		goto out;
	}
	if (req.kind == CAE_NET_REQ_BAD) {
		cae_log_fields(px->log, CAE_LOG_INFO, "network.bad_request",
			       json_pack("{s:s?, s:s}", "task", px->task, "protocol",
					 socks ? "socks5" : "http"),
			       "a malformed proxy request was refused");
		if (socks)
			socks_answer(c->cfd, 1, deadline);
		else
			http_answer(c->cfd, "400 Bad Request",
				    "cae proxy: malformed proxy request\n", deadline);
		goto out;
	}
	char why[CAE_NET_MAX_NAME + 160];
	cae_net_verdict v = cae_net_policy_check(px->policy, req.host, req.port, why, sizeof(why));
	int ufd = -EACCES;
	if (v == CAE_NET_ALLOW) {
		unsigned char a[16];
		bool literal = req.socks_literal || inet_pton(AF_INET6, req.host, a) == 1 ||
			       inet_pton(AF_INET, req.host, a) == 1;
		ufd = connect_upstream(px, req.host, req.port, literal, &v, why, sizeof(why));
	}
	if (ufd < 0) {
		char text[sizeof(why) + 64];
		if (v != CAE_NET_ALLOW) {
			record_denied(px, req.host, req.port, v, why);
			snprintf(text, sizeof(text), "blocked by cae network policy: %s\n", why);
			if (socks)
				socks_answer(c->cfd, 2, deadline);
			else
				http_answer(c->cfd, "403 Forbidden", text, deadline);
		} else {
			snprintf(text, sizeof(text), "%s\n", why);
			if (socks)
				socks_answer(c->cfd, ufd == -EHOSTUNREACH ? 4 : 5, deadline);
			else
				http_answer(c->cfd, "502 Bad Gateway", text, deadline);
		}
		goto out;
	}
	pthread_mutex_lock(&px->lock);
	c->ufd = ufd;
	bool closing = px->closing;
	pthread_mutex_unlock(&px->lock);
	if (closing)
		goto out;
	int one = 1, sndbuf = CLIENT_SNDBUF;
	(void)setsockopt(ufd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	(void)setsockopt(c->cfd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
	int64_t wd = cae__now_ns() + px->o.connect_timeout_ms * 1000000;
	if (req.kind == CAE_NET_REQ_CONNECT) {
		static const char ok[] = "HTTP/1.1 200 Connection established\r\n\r\n";
		r = send_all(c->cfd, ok, sizeof(ok) - 1, wd);
	} else if (req.kind == CAE_NET_REQ_FORWARD) {
		r = send_all(ufd, req.head, req.head_len, wd);
	} else {
		unsigned char ok[10] = {5, 0, 0, 1, 0, 0, 0, 0, 0, 0};
		r = send_all(c->cfd, ok, sizeof(ok), wd);
	}
	/* what the client sent after its request (a TLS hello, a body) goes on */
	if (r == 0 && len > req.consumed)
		r = send_all(ufd, buf + req.consumed, len - req.consumed, wd);
	free(buf);
	buf = NULL;
	if (r == 0)
		relay(c->cfd, ufd, cap);
out:
	free(req.head);
	free(buf);
}

static void *conn_main(void *arg)
{
	struct conn *c = arg;
	cae_net_proxy *px = c->px;
	serve(px, c);
	pthread_mutex_lock(&px->lock);
	if (c->prev)
		c->prev->next = c->next;
	else
		px->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	close(c->cfd);
	if (c->ufd >= 0)
		close(c->ufd);
	free(c);
	px->active--;
	pthread_cond_broadcast(&px->cond);
	pthread_mutex_unlock(&px->lock);
	return NULL;
}

int cae_net_proxy_serve_fd(cae_net_proxy *px, int fd)
{
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0 ||
	    fcntl(fd, F_SETFD, FD_CLOEXEC) < 0) {
		int e = -errno;
		close(fd);
		return e;
	}
	pthread_mutex_lock(&px->lock);
	if (px->closing || px->active >= px->o.max_connections) {
		pthread_mutex_unlock(&px->lock);
		close(fd);
		return -EAGAIN;
	}
	struct conn *c = calloc(1, sizeof(*c));
	if (!c) {
		pthread_mutex_unlock(&px->lock);
		close(fd);
		return -ENOMEM;
	}
	c->cfd = fd;
	c->ufd = -1;
	c->px = px;
	pthread_t t;
	if (pthread_create(&t, &px->attr, conn_main, c) != 0) {
		pthread_mutex_unlock(&px->lock);
		free(c);
		close(fd);
		return -EAGAIN;
	}
	c->next = px->conns;
	if (c->next)
		c->next->prev = c;
	px->conns = c;
	px->active++;
	pthread_mutex_unlock(&px->lock);
	return 0;
}

static void *listen_main(void *arg)
{
	struct listener *l = arg;
	for (;;) {
		struct pollfd p[2] = {{.fd = l->fd, .events = POLLIN},
				      {.fd = l->px->wake[0], .events = POLLIN}};
		if (poll(p, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			return NULL;
		}
		if (p[1].revents)
			return NULL;
		if (p[0].revents & (POLLERR | POLLNVAL))
			return NULL;
		int fd = accept4(l->fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (fd < 0) {
			if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
			    errno == ENOMEM) {
				struct timespec ts = {0, 10 * 1000000L};
				nanosleep(&ts, NULL);
			}
			continue;
		}
		(void)cae_net_proxy_serve_fd(l->px, fd);
	}
}

int cae_net_proxy_listen_fd(cae_net_proxy *px, int fd)
{
	int fl = fcntl(fd, F_GETFL);
	(void)fcntl(fd, F_SETFL, fl | O_NONBLOCK);
	struct listener *l = calloc(1, sizeof(*l));
	if (!l) {
		close(fd);
		return -ENOMEM;
	}
	l->fd = fd;
	l->px = px;
	if (pthread_create(&l->thread, NULL, listen_main, l) != 0) {
		close(fd);
		free(l);
		return -EAGAIN;
	}
	pthread_mutex_lock(&px->lock);
	l->next = px->listeners;
	px->listeners = l;
	pthread_mutex_unlock(&px->lock);
	return 0;
}

int cae_net_proxy_active(cae_net_proxy *px)
{
	pthread_mutex_lock(&px->lock);
	int n = px->active;
	pthread_mutex_unlock(&px->lock);
	return n;
}

void cae_net_proxy_free(cae_net_proxy *px)
{
	if (!px)
		return;
	(void)cae__write_all(px->wake[1], "x", 1);
	pthread_mutex_lock(&px->lock);
	struct listener *ls = px->listeners;
	px->listeners = NULL;
	pthread_mutex_unlock(&px->lock);
	while (ls) {
		struct listener *next = ls->next;
		pthread_join(ls->thread, NULL);
		close(ls->fd);
		free(ls);
		ls = next;
	}
	pthread_mutex_lock(&px->lock);
	px->closing = true;
	for (struct conn *c = px->conns; c; c = c->next) {
		shutdown(c->cfd, SHUT_RDWR);
		if (c->ufd >= 0)
			shutdown(c->ufd, SHUT_RDWR);
	}
	while (px->active > 0)
		pthread_cond_wait(&px->cond, &px->lock);
	pthread_mutex_unlock(&px->lock);
	close(px->wake[0]);
	close(px->wake[1]);
	pthread_attr_destroy(&px->attr);
	pthread_mutex_destroy(&px->lock);
	pthread_cond_destroy(&px->cond);
	free(px->den);
	free(px->task);
	cae_net_policy_free(px->policy);
	free(px);
}
