/* The manager side of the multiplexed helper channel (cae/helper.h, src/helper/mux.h).
 *
 * One reader thread owns the stream's input: it parses frames and hands each to the call
 * waiting for that id (a record with an eventfd the caller polls together with its cancel
 * fd). Writers take a lock per frame. When the stream ends, every waiting call learns it:
 * a request not yet acknowledged did not run (-EPIPE), one acknowledged ended with the
 * helper (-ECONNRESET). Everything read is untrusted: lengths are bounded per request. */
#include "cae/helper.h"

#include "base/buf.h"
#include "base/macro.h"
#include "base/timeutil.h"
#include "helper/mux.h"
#include "helper/tun.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/banned.h"

#define ANSWER_MARGIN_MS 30000
#define SMALL_FRAME 65536 /* most a frame nobody asked for may carry */

struct call {
	struct call *next;
	uint32_t id;
	int ev; /* eventfd: written when acked or done */
	uint64_t max_body;
	bool acked;
	bool done;
	char type; /* of the answer */
	char *body;
	size_t len;
	const cae_live_io *live; /* a live run's: its output callback, called under lock */
};

struct cae_helper_mux {
	cae_helper_link link;
	pthread_t reader;
	bool reader_started;
	pthread_mutex_t lock; /* calls, next_id, dead, greeted */
	pthread_cond_t cond;  /* greeting */
	pthread_mutex_t wlock;
	struct call *calls;
	uint32_t next_id;
	bool greeted;
	cae_helper_credential_fn cred_fn; /* under lock */
	void *cred_ud;
	cae_tun_set *tun;	    /* the network's tunnels */
	cae_helper_conn_fn conn_fn; /* under lock: who serves the helper's connections */
	void *conn_ud;
	atomic_bool dead;
	char why[128]; /* why the stream ended */
};

static void signal_call(struct call *c)
{
	uint64_t one = 1;
	(void)!write(c->ev, &one, sizeof(one));
}

static struct call *find_locked(cae_helper_mux *m, uint32_t id)
{
	for (struct call *c = m->calls; c; c = c->next)
		if (c->id == id)
			return c;
	return NULL;
}

/* Reads exactly n bytes from the link, waiting as needed. 0, -EPIPE at end of file. */
static int link_read_full(cae_helper_mux *m, char *p, size_t n)
{
	while (n) {
		ssize_t r = m->link.read(m->link.ctx, p, n);
		if (r > 0) {
			p += r;
			n -= (size_t)r;
			continue;
		}
		if (r == 0)
			return -EPIPE;
		if (r != -EAGAIN && r != -EINTR)
			return (int)r;
		struct pollfd pfd = {.fd = m->link.fd, .events = POLLIN};
		if (poll(&pfd, 1, -1) < 0 && errno != EINTR)
			return -errno;
	}
	return 0;
}

static void end_stream(cae_helper_mux *m, const char *why)
{
	pthread_mutex_lock(&m->lock);
	if (!atomic_load(&m->dead))
		snprintf(m->why, sizeof(m->why), "%s", why);
	atomic_store(&m->dead, true);
	for (struct call *c = m->calls; c; c = c->next)
		signal_call(c);
	pthread_cond_broadcast(&m->cond);
	pthread_mutex_unlock(&m->lock);
}

static int send_frame(cae_helper_mux *m, char type, uint32_t id, const void *p, size_t n);

static int tun_send(void *ud, char type, uint32_t id, const void *p, size_t n)
{
	return send_frame(ud, type, id, p, n);
}

/* A connection the helper accepted on its loopback: one end of a socket pair is the tunnel's,
 * the other goes to whoever serves them (the proxy); without one, the tunnel is closed. */
static void tun_open(cae_helper_mux *m, uint32_t id, char kind)
{
	pthread_mutex_lock(&m->lock);
	cae_helper_conn_fn fn = m->conn_fn;
	void *ud = m->conn_ud;
	pthread_mutex_unlock(&m->lock);
	int sp[2];
	if (!fn || (kind != 'h' && kind != 's') ||
	    socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) < 0) {
		(void)send_frame(m, CAE_MUX_TUN_CLOSE, id, NULL, 0);
		return;
	}
	if (cae__tun_start(m->tun, id, sp[0], 0, NULL, 0) < 0) {
		close(sp[1]);
		(void)send_frame(m, CAE_MUX_TUN_CLOSE, id, NULL, 0);
		return;
	}
	(void)fn(ud, kind, sp[1]); /* taken over */
}

static void *reader_main(void *arg)
{
	cae_helper_mux *m = arg;
	for (;;) {
		unsigned char h[CAE_MUX_HEADER];
		int r = link_read_full(m, (char *)h, sizeof(h));
		if (r < 0) {
			end_stream(m, r == -EPIPE ? "end of file" : strerror(-r));
			return NULL;
		}
		char type;
		uint32_t id, n;
		if (cae__mux_parse_header(h, &type, &id, &n) < 0) {
			end_stream(m, "malformed frame");
			return NULL;
		}
		pthread_mutex_lock(&m->lock);
		struct call *c = find_locked(m, id);
		uint64_t max = c && (type == CAE_MUX_RESULT || type == CAE_MUX_EDIT_RESULT ||
				     type == CAE_MUX_FS_RESULT)
				   ? c->max_body
				   : SMALL_FRAME;
		pthread_mutex_unlock(&m->lock);
		if (n > max) {
			end_stream(m, "answer larger than asked for");
			return NULL;
		}
		char *body = malloc(n ? n : 1);
		if (!body) {
			end_stream(m, "out of memory");
			return NULL;
		}
		r = link_read_full(m, body, n);
		if (r < 0) {
			free(body);
			end_stream(m, r == -EPIPE ? "end of file" : strerror(-r));
			return NULL;
		}
		if (type == CAE_MUX_TUN_DATA || type == CAE_MUX_TUN_WINDOW ||
		    type == CAE_MUX_TUN_CLOSE) {
			cae__tun_frame(m->tun, type, id, body, n);
			continue;
		}
		if (type == CAE_MUX_TUN_OPEN) {
			tun_open(m, id, n == 1 ? body[0] : '?');
			free(body);
			continue;
		}
		if (type == CAE_MUX_CREDENTIAL) {
			pthread_mutex_lock(&m->lock);
			cae_helper_credential_fn fn = m->cred_fn;
			void *ud = m->cred_ud;
			pthread_mutex_unlock(&m->lock);
			char *reply = fn ? fn(ud, body, n) : NULL;
			(void)send_frame(m, CAE_MUX_CREDENTIAL_REPLY, id, reply,
					 reply ? strlen(reply) : 0);
			if (reply) {
				/* a token: do not leave it in freed memory */
				explicit_bzero(reply, strlen(reply));
				free(reply);
			}
			free(body);
			continue;
		}
		pthread_mutex_lock(&m->lock);
		if (type == CAE_MUX_HELLO) {
			m->greeted = true;
			pthread_cond_broadcast(&m->cond);
		}
		c = find_locked(m, id);
		if (c && type == CAE_MUX_OUTPUT && c->live && c->live->output && n > 1 &&
		    !c->done) {
			c->live->output(c->live->ud, body[0] == 2 ? 2 : 1, body + 1, n - 1);
		} else if (c && type == CAE_MUX_ACK) {
			c->acked = true;
			signal_call(c);
		} else if (c &&
			   (type == CAE_MUX_RESULT || type == CAE_MUX_PONG ||
			    type == CAE_MUX_EDIT_RESULT || type == CAE_MUX_FS_RESULT ||
			    type == CAE_MUX_NET_READY) &&
			   !c->done) {
			c->done = true;
			c->acked = true;
			c->type = type;
			c->body = TAKE_PTR(body);
			c->len = n;
			signal_call(c);
		}
		pthread_mutex_unlock(&m->lock);
		free(body);
	}
}

static int send_frame(cae_helper_mux *m, char type, uint32_t id, const void *p, size_t n)
{
	unsigned char h[CAE_MUX_HEADER];
	cae__mux_header(h, type, id, (uint32_t)n);
	pthread_mutex_lock(&m->wlock);
	int r = m->link.write(m->link.ctx, h, sizeof(h));
	if (r == 0 && n)
		r = m->link.write(m->link.ctx, p, n);
	pthread_mutex_unlock(&m->wlock);
	if (r < 0)
		end_stream(m, "cannot write to the helper");
	return r;
}

int cae_helper_mux_open(const cae_helper_link *link, int64_t timeout_ms, cae_helper_mux **out,
			cae_error *err)
{
	cae_helper_mux *m = calloc(1, sizeof(*m));
	if (!m) {
		link->close(link->ctx);
		return cae_error_set(err, -ENOMEM, "out of memory");
	}
	m->link = *link;
	m->next_id = 1;
	m->tun = cae__tun_set_new(tun_send, m, 0);
	if (!m->tun) {
		link->close(link->ctx);
		free(m);
		return cae_error_set(err, -ENOMEM, "out of memory");
	}
	pthread_mutex_init(&m->lock, NULL);
	pthread_mutex_init(&m->wlock, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&m->cond, &ca);
	pthread_condattr_destroy(&ca);
	if (pthread_create(&m->reader, NULL, reader_main, m) != 0) {
		cae_helper_mux_close(m);
		return cae_error_set(err, -EAGAIN, "cannot start the helper channel's reader");
	}
	m->reader_started = true;
	int64_t deadline = cae__now_ns() + timeout_ms * 1000000LL;
	pthread_mutex_lock(&m->lock);
	while (!m->greeted && !atomic_load(&m->dead) && cae__now_ns() < deadline) {
		struct timespec ts = {deadline / 1000000000LL, deadline % 1000000000LL};
		pthread_cond_timedwait(&m->cond, &m->lock, &ts);
	}
	bool ok = m->greeted && !atomic_load(&m->dead);
	char why[sizeof(m->why)];
	snprintf(why, sizeof(why), "%s", atomic_load(&m->dead) ? m->why : "no greeting in time");
	pthread_mutex_unlock(&m->lock);
	if (!ok) {
		cae_helper_mux_close(m);
		return cae_error_set(err, -EPIPE, "cae-helper did not start: %s", why);
	}
	*out = m;
	return 0;
}

bool cae_helper_mux_alive(const cae_helper_mux *m)
{
	return m && !atomic_load(&m->dead);
}

/* Registers a call; NULL when the stream is dead or on ENOMEM. */
static struct call *call_new(cae_helper_mux *m, uint64_t max_body)
{
	struct call *c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	c->ev = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (c->ev < 0) {
		free(c);
		return NULL;
	}
	c->max_body = max_body;
	pthread_mutex_lock(&m->lock);
	c->id = m->next_id++;
	if (m->next_id == 0)
		m->next_id = 1;
	c->next = m->calls;
	m->calls = c;
	pthread_mutex_unlock(&m->lock);
	return c;
}

static void call_free(cae_helper_mux *m, struct call *c)
{
	pthread_mutex_lock(&m->lock);
	for (struct call **p = &m->calls; *p; p = &(*p)->next) {
		if (*p == c) {
			*p = c->next;
			break;
		}
	}
	pthread_mutex_unlock(&m->lock);
	close(c->ev);
	free(c->body);
	free(c);
}

/* A live run's input from fd, as it comes: one STDIN frame per read; at its end (or a read
 * error) the empty frame that ends the command's input. Returns false once ended. */
static bool forward_stdin(cae_helper_mux *m, uint32_t id, int fd)
{
	char buf[65536];
	ssize_t n = read(fd, buf, sizeof(buf));
	if (n < 0 && (errno == EINTR || errno == EAGAIN))
		return true;
	(void)send_frame(m, CAE_MUX_STDIN, id, buf, n > 0 ? (size_t)n : 0);
	return n > 0;
}

/* A live run's signals from fd (a byte each), in a SIGNAL frame; at fd's end (or a read
 * error) returns false: no more to forward. */
static bool forward_signals(cae_helper_mux *m, uint32_t id, int fd)
{
	char buf[64];
	ssize_t n = read(fd, buf, sizeof(buf));
	if (n < 0 && (errno == EINTR || errno == EAGAIN))
		return true;
	if (n <= 0)
		return false;
	(void)send_frame(m, CAE_MUX_SIGNAL, id, buf, (size_t)n);
	return true;
}

/* Waits for c to be done, watching cancel_fd (-1: none) until deadline_ns, and forwarding a
 * live run's stdin_fd and signal_fd (-1: none). On cancel, sends CANCEL once and keeps waiting for
 * the answer. Returns 0 (done), -ETIMEDOUT, or the stream's end as -EPIPE (never acknowledged) /
 * -ECONNRESET. */
static int wait_call(cae_helper_mux *m, struct call *c, int cancel_fd, int stdin_fd, int signal_fd,
		     int64_t deadline_ns)
{
	bool cancel_sent = false;
	for (;;) {
		pthread_mutex_lock(&m->lock);
		bool done = c->done, acked = c->acked, dead = atomic_load(&m->dead);
		pthread_mutex_unlock(&m->lock);
		if (done)
			return 0;
		if (dead)
			return acked ? -ECONNRESET : -EPIPE;
		int64_t now = cae__now_ns();
		if (now >= deadline_ns)
			return -ETIMEDOUT;
		struct pollfd p[4] = {{.fd = c->ev, .events = POLLIN}};
		nfds_t np = 1, i_cancel = 0, i_in = 0, i_sig = 0;
		if (cancel_fd >= 0 && !cancel_sent)
			p[i_cancel = np++] = (struct pollfd){.fd = cancel_fd, .events = POLLIN};
		if (stdin_fd >= 0)
			p[i_in = np++] = (struct pollfd){.fd = stdin_fd, .events = POLLIN};
		if (signal_fd >= 0)
			p[i_sig = np++] = (struct pollfd){.fd = signal_fd, .events = POLLIN};
		int pr = poll(p, np, cae__poll_timeout_ms(deadline_ns, now));
		if (pr < 0 && errno != EINTR)
			return -errno;
		if (pr > 0 && (p[0].revents & POLLIN)) {
			uint64_t v;
			(void)!read(c->ev, &v, sizeof(v));
		}
		if (i_cancel && p[i_cancel].revents) {
			cancel_sent = true;
			(void)send_frame(m, CAE_MUX_CANCEL, c->id, NULL, 0);
		}
		if (i_in && p[i_in].revents && !forward_stdin(m, c->id, stdin_fd))
			stdin_fd = -1;
		if (i_sig && p[i_sig].revents && !forward_signals(m, c->id, signal_fd))
			signal_fd = -1;
	}
}

static size_t cap_or_default(size_t v)
{
	return v ? v : CAE_RUNNER_DEFAULT_MAX_OUTPUT;
}

int cae_helper_mux_run(cae_helper_mux *m, const cae_run_spec *spec, const char *const *env_add,
		       const char *confine, cae_run_result *res, cae_error *err)
{
	memset(res, 0, sizeof(*res));
	if (!spec || !spec->argv || !spec->argv[0] || !spec->argv[0][0])
		return cae_error_set(err, -EINVAL, "no command to run");
	if (!cae_helper_mux_alive(m))
		return cae_error_set(err, -EPIPE, "cae-helper is gone");
	cae_buf req;
	cae__buf_init(&req, (size_t)CAE_HELPER_MAX_FRAME + CAE_HELPER_FRAME_HEADER);
	cae_helper_request_extra x = {.env_add = env_add, .confine = confine};
	cae_run_spec sent = *spec;
	if (spec->live) {
		/* a live run's stdin comes in STDIN frames */
		sent.has_stdin = false;
		sent.stdin_data = NULL;
		sent.stdin_len = 0;
	}
	int r = cae__helper_encode_request(&sent, &x, &req);
	if (r < 0) {
		cae__buf_clear(&req);
		return cae_error_set(err, r, "command too large for cae-helper");
	}
	/* The answer holds both streams, each up to 3 bytes per byte kept (U+FFFD). */
	uint64_t max_body =
	    3ull * (cap_or_default(spec->max_stdout) + cap_or_default(spec->max_stderr)) + 65536;
	struct call *c = call_new(m, MIN(max_body, (uint64_t)CAE_HELPER_MAX_FRAME));
	if (!c) {
		cae__buf_clear(&req);
		return cae_error_set(err, -ENOMEM, "out of memory");
	}
	const cae_live_io *live = spec->live;
	c->live = live;
	r = send_frame(m, live ? CAE_MUX_RUN_LIVE : CAE_MUX_RUN, c->id,
		       req.data + CAE_HELPER_FRAME_HEADER, req.len - CAE_HELPER_FRAME_HEADER);
	cae__buf_clear(&req);
	int stdin_fd = live ? live->stdin_fd : -1;
	if (r == 0 && live && stdin_fd < 0) {
		/* the request's own stdin, then its end */
		for (size_t off = 0; r == 0 && spec->has_stdin && off < spec->stdin_len;) {
			size_t n = MIN(spec->stdin_len - off, (size_t)65536);
			r = send_frame(m, CAE_MUX_STDIN, c->id, spec->stdin_data + off, n);
			off += n;
		}
		if (r == 0)
			r = send_frame(m, CAE_MUX_STDIN, c->id, NULL, 0);
	}
	int64_t deadline = INT64_MAX;
	if (spec->timeout_ms > 0)
		deadline = cae__now_ns() +
			   (spec->timeout_ms + MAX(spec->grace_ms, CAE_RUNNER_DEFAULT_GRACE_MS) +
			    MAX(spec->drain_ms, CAE_RUNNER_DEFAULT_DRAIN_MS) + ANSWER_MARGIN_MS) *
			       1000000LL;
	if (r == 0)
		r = wait_call(m, c, spec->cancel_fd, stdin_fd,
			      live && live->signal_fd > 0 ? live->signal_fd : -1, deadline);
	else
		r = -EPIPE;
	if (r < 0) {
		char why[sizeof(m->why)];
		pthread_mutex_lock(&m->lock);
		snprintf(why, sizeof(why), "%s", m->why[0] ? m->why : "no answer");
		pthread_mutex_unlock(&m->lock);
		call_free(m, c);
		if (r == -ETIMEDOUT) {
			/* a helper that hangs is not trusted with another command */
			end_stream(m, "did not answer in time");
			return cae_error_set(err, r, "cae-helper did not answer in time");
		}
		if (r == -EPIPE)
			return cae_error_set(err, r, "cae-helper is gone (%s)", why);
		return cae_error_set(err, r, "cae-helper ended during the command (%s)", why);
	}
	int status;
	r = cae__helper_decode_response(c->body, c->len, &status, res, err);
	call_free(m, c);
	if (r < 0) {
		end_stream(m, "malformed answer");
		return cae_error_set(err, -EPROTO, "cae-helper answer malformed: %s",
				     err ? err->message : "");
	}
	return status;
}

#define EDIT_TIMEOUT_MS (10 * 60 * 1000)

/* One request acknowledged only by its answer (an edit, a file operation): sends the frame
 * encoded in q (cleared here), waits for the answer of type answer (at most max_body
 * bytes). Returns the call (decode its body, then call_free), or NULL with *r and err set:
 * a stream that ended before the answer may have run the request (-ECONNRESET). */
static struct call *round_trip(cae_helper_mux *m, char type, char answer, cae_buf *q,
			       uint64_t max_body, const char *what, int *r, cae_error *err)
{
	struct call *c = call_new(m, max_body);
	if (!c) {
		cae__buf_clear(q);
		*r = cae_error_set(err, -ENOMEM, "out of memory");
		return NULL;
	}
	int k = send_frame(m, type, c->id, q->data + CAE_HELPER_FRAME_HEADER,
			   q->len - CAE_HELPER_FRAME_HEADER);
	cae__buf_clear(q);
	if (k == 0)
		k = wait_call(m, c, -1, -1, -1, cae__now_ns() + EDIT_TIMEOUT_MS * 1000000LL);
	else
		k = -EPIPE;
	if (k == 0 && c->type != answer)
		k = -EPROTO;
	if (k == 0)
		return c;
	call_free(m, c);
	if (k == -ETIMEDOUT || k == -EPROTO)
		end_stream(m, "no answer");
	*r = cae_error_set(err, k == -EPIPE ? -ECONNRESET : k, "cae-helper ended during %s", what);
	return NULL;
}

int cae_helper_mux_edit(cae_helper_mux *m, const char *root, const cae_editor_limits *limits,
			const cae_editor_request *req, cae_editor_result *res, cae_error *err)
{
	memset(res, 0, sizeof(*res));
	if (!cae_helper_mux_alive(m))
		return cae_error_set(err, -EPIPE, "cae-helper is gone");
	cae_buf q;
	cae__buf_init(&q, (size_t)CAE_HELPER_MAX_FRAME + CAE_HELPER_FRAME_HEADER);
	int r = cae__helper_encode_edit(root, limits, req, &q);
	if (r < 0) {
		cae__buf_clear(&q);
		return cae_error_set(err, r, "edit too large for cae-helper");
	}
	struct call *c = round_trip(m, CAE_MUX_EDIT, CAE_MUX_EDIT_RESULT, &q, CAE_HELPER_MAX_FRAME,
				    "the edit", &r, err);
	if (!c)
		return r;
	int status;
	r = cae__helper_decode_edit_result(c->body, c->len, &status, res, err);
	call_free(m, c);
	if (r < 0) {
		end_stream(m, "malformed edit result");
		return cae_error_set(err, -EPROTO, "cae-helper edit result malformed");
	}
	return status;
}

int cae_helper_mux_fs(cae_helper_mux *m, const cae_fs_request *fq, cae_fs_reply *rep,
		      cae_error *err)
{
	memset(rep, 0, sizeof(*rep));
	if (!cae_helper_mux_alive(m))
		return cae_error_set(err, -ECONNRESET, "cae-helper is gone");
	cae_buf q;
	cae__buf_init(&q, (size_t)CAE_HELPER_MAX_FRAME + CAE_HELPER_FRAME_HEADER);
	int r = cae__helper_encode_fs(fq, &q);
	if (r < 0) {
		cae__buf_clear(&q);
		return cae_error_set(err, r, "file operation too large for cae-helper");
	}
	uint64_t max = fq->op == CAE_FS_READ ? MIN(fq->max, (uint64_t)CAE_HELPER_MAX_FRAME) : 0;
	struct call *c = round_trip(m, CAE_MUX_FS, CAE_MUX_FS_RESULT, &q, max + 65536,
				    "a file operation", &r, err);
	if (!c)
		return r;
	int status;
	r = cae__helper_decode_fs_result(c->body, c->len, &status, rep, err);
	call_free(m, c);
	if (r < 0) {
		end_stream(m, "malformed file result");
		return cae_error_set(err, -EPROTO, "cae-helper file result malformed");
	}
	return status;
}

void cae_helper_mux_set_credentials(cae_helper_mux *m, cae_helper_credential_fn fn, void *ud)
{
	pthread_mutex_lock(&m->lock);
	m->cred_fn = fn;
	m->cred_ud = ud;
	pthread_mutex_unlock(&m->lock);
}

int cae_helper_mux_ping(cae_helper_mux *m, int64_t timeout_ms, cae_error *err)
{
	if (!cae_helper_mux_alive(m))
		return cae_error_set(err, -EPIPE, "cae-helper is gone");
	struct call *c = call_new(m, 0);
	if (!c)
		return cae_error_set(err, -ENOMEM, "out of memory");
	int r = send_frame(m, CAE_MUX_PING, c->id, NULL, 0);
	if (r == 0)
		r = wait_call(m, c, -1, -1, -1, cae__now_ns() + timeout_ms * 1000000LL);
	call_free(m, c);
	return r < 0 ? cae_error_set(err, r, "cae-helper did not answer a ping") : 0;
}

void cae_helper_mux_close(cae_helper_mux *m)
{
	if (!m)
		return;
	/* Shutting the stream down ends the helper and wakes the reader with end of file. */
	(void)shutdown(m->link.fd, SHUT_RDWR);
	if (m->reader_started)
		pthread_join(m->reader, NULL);
	cae__tun_set_free(m->tun);
	m->link.close(m->link.ctx);
	while (m->calls) {
		struct call *c = m->calls;
		m->calls = c->next;
		close(c->ev);
		free(c->body);
		free(c);
	}
	pthread_mutex_destroy(&m->lock);
	pthread_mutex_destroy(&m->wlock);
	pthread_cond_destroy(&m->cond);
	free(m);
}

int cae_helper_mux_net_listen(cae_helper_mux *m, int http_port, int socks_port,
			      const char *const *env, cae_helper_conn_fn fn, void *ud,
			      cae_error *err)
{
	return cae_helper_mux_net_listen_handover(m, http_port, socks_port, env, NULL, NULL, fn, ud,
						  err);
}

int cae_helper_mux_net_listen_handover(cae_helper_mux *m, int http_port, int socks_port,
				       const char *const *env, const char *path, const char *token,
				       cae_helper_conn_fn fn, void *ud, cae_error *err)
{
	if (!cae_helper_mux_alive(m))
		return cae_error_set(err, -EPIPE, "cae-helper is gone");
	pthread_mutex_lock(&m->lock);
	m->conn_fn = fn;
	m->conn_ud = ud;
	pthread_mutex_unlock(&m->lock);
	cae_buf q;
	cae__buf_init(&q, 65536);
	unsigned char hdr[CAE_HELPER_FRAME_HEADER + 4] = {0,
							  0,
							  0,
							  0,
							  (unsigned char)http_port,
							  (unsigned char)(http_port >> 8),
							  (unsigned char)socks_port,
							  (unsigned char)(socks_port >> 8)};
	int r = cae__buf_append(&q, hdr, sizeof(hdr));
	for (const char *const *e = env; r == 0 && e && *e; e++)
		r = cae__buf_append(&q, *e, strlen(*e) + 1);
	if (r == 0 && path && token) {
		r = cae__buf_append(&q, "", 1);
		if (r == 0)
			r = cae__buf_append(&q, path, strlen(path) + 1);
		if (r == 0)
			r = cae__buf_append(&q, token, strlen(token) + 1);
	}
	if (r < 0) {
		cae__buf_clear(&q);
		return cae_error_set(err, -ENOMEM, "out of memory");
	}
	struct call *c = round_trip(m, CAE_MUX_NET_LISTEN, CAE_MUX_NET_READY, &q, 4,
				    "the network's set-up", &r, err);
	if (!c)
		return r;
	const unsigned char *b = (const unsigned char *)c->body;
	int32_t v = c->len == 4 ? (int32_t)((uint32_t)b[0] | (uint32_t)b[1] << 8 |
					    (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24)
				: -EPROTO;
	call_free(m, c);
	if (v > 0 || v < -4095)
		v = -EPROTO;
	if (v < 0)
		return cae_error_set(err, v,
				     "cae-helper could not listen on 127.0.0.1:%d and :%d in the "
				     "environment: %s",
				     http_port, socks_port, strerror(-v));
	return 0;
}

int cae_helper_mux_connect(cae_helper_mux *m, int port, int fd, cae_error *err)
{
	if (!cae_helper_mux_alive(m)) {
		close(fd);
		return cae_error_set(err, -EPIPE, "cae-helper is gone");
	}
	unsigned char p[2] = {(unsigned char)port, (unsigned char)(port >> 8)};
	int r =
	    cae__tun_start(m->tun, cae__tun_next_id(m->tun), fd, CAE_MUX_TUN_CONNECT, p, sizeof(p));
	return r < 0 ? cae_error_set(err, r, "cannot open a connection through cae-helper: %s",
				     strerror(-r))
		     : 0;
}

int cae_helper_mux_tunnels(cae_helper_mux *m)
{
	return cae__tun_count(m->tun);
}
