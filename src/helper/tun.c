/* Tunnels over the multiplexed helper channel (tun.h). */
#include "helper/tun.h"

#include "base/macro.h"
#include "helper/mux.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/banned.h"

/* Credit is returned once this much was written (or when nothing is left to write). */
#define CREDIT_STEP (CAE_TUN_WINDOW / 4)
/* Frame bodies of CAE_TUN_CHUNK kept for the channel's reader (cae__tun_body): a fresh
 * allocation per frame is, under musl's allocator (the static helper), a mapping made and
 * returned each time, with its page faults and TLB shootdowns across the tunnels' threads. */
#define BODY_CACHE 16

struct chunk {
	struct chunk *next;
	char *p;
	size_t n, off;
	bool pooled; /* p came from cae__tun_body: it may go back to the cache */
};

struct tun {
	struct tun *next;
	cae_tun_set *s;
	uint32_t id;
	int fd;
	int ev; /* wakes the tunnel's thread */
	/* under s->lock */
	struct chunk *qhead, *qtail; /* from the peer, to write to fd */
	size_t queued;
	size_t credit;	/* what we may still send */
	bool peer_eof;	/* the peer's direction ended: shut fd's write side once drained */
	bool closed;	/* the peer closed it, or the set ends: nothing more is sent */
	bool violated;	/* the peer sent beyond the window: reset */
	bool discard;	/* fd cannot be written any more: the peer's data is dropped */
	char open_type; /* sent first by the thread */
	char *open_p;
	size_t open_n;
};

struct cae_tun_set {
	cae_tun_send_fn send;
	void *ud;
	uint32_t id_base, next;
	pthread_mutex_t lock;
	pthread_cond_t cond; /* count reached 0 */
	struct tun *list;
	int count;
	bool ending;
	char *cache[BODY_CACHE]; /* bodies of CAE_TUN_CHUNK bytes to reuse (under lock) */
	int ncache;
};

static void wake(struct tun *t)
{
	uint64_t one = 1;
	(void)!write(t->ev, &one, sizeof(one));
}

cae_tun_set *cae__tun_set_new(cae_tun_send_fn send, void *ud, uint32_t id_base)
{
	cae_tun_set *s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	s->send = send;
	s->ud = ud;
	s->id_base = id_base;
	pthread_mutex_init(&s->lock, NULL);
	pthread_cond_init(&s->cond, NULL);
	return s;
}

uint32_t cae__tun_next_id(cae_tun_set *s)
{
	pthread_mutex_lock(&s->lock);
	uint32_t id;
	do
		id = s->id_base | (++s->next & 0x7fffffffu);
	while (id == 0);
	pthread_mutex_unlock(&s->lock);
	return id;
}

static struct tun *find_locked(cae_tun_set *s, uint32_t id)
{
	for (struct tun *t = s->list; t; t = t->next)
		if (t->id == id)
			return t;
	return NULL;
}

/* A body done with (s->lock held): back to the cache when it came from it and there is
 * room, else freed. */
static void body_put_locked(cae_tun_set *s, char *p, bool pooled)
{
	if (p && pooled && !s->ending && s->ncache < BODY_CACHE)
		s->cache[s->ncache++] = p;
	else
		free(p);
}

char *cae__tun_body(cae_tun_set *s, size_t n)
{
	if (n > CAE_TUN_CHUNK)
		return malloc(n);
	pthread_mutex_lock(&s->lock);
	char *p = s->ncache ? s->cache[--s->ncache] : NULL;
	pthread_mutex_unlock(&s->lock);
	return p ? p : malloc(CAE_TUN_CHUNK);
}

static void free_chunks(struct tun *t)
{
	while (t->qhead) {
		struct chunk *c = t->qhead;
		t->qhead = c->next;
		body_put_locked(t->s, c->p, c->pooled);
		free(c);
	}
	t->qtail = NULL;
	t->queued = 0;
}

static void send_u32(struct tun *t, char type, uint32_t v)
{
	unsigned char b[4] = {(unsigned char)v, (unsigned char)(v >> 8), (unsigned char)(v >> 16),
			      (unsigned char)(v >> 24)};
	(void)t->s->send(t->s->ud, type, t->id, b, sizeof(b));
}

/* Writes what is queued to fd without blocking; returns the bytes written, or -1 when fd
 * failed. */
static ssize_t drain_queue(struct tun *t)
{
	cae_tun_set *s = t->s;
	size_t total = 0;
	for (;;) {
		pthread_mutex_lock(&s->lock);
		struct chunk *c = t->qhead;
		pthread_mutex_unlock(&s->lock);
		if (!c)
			return (ssize_t)total;
		/* only this thread removes chunks: c stays valid */
		ssize_t w = send(t->fd, c->p + c->off, c->n - c->off, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return (ssize_t)total;
		if (w < 0)
			return -1;
		total += (size_t)w;
		pthread_mutex_lock(&s->lock);
		c->off += (size_t)w;
		t->queued -= (size_t)w;
		if (c->off == c->n) {
			t->qhead = c->next;
			if (!t->qhead)
				t->qtail = NULL;
			body_put_locked(s, c->p, c->pooled);
			free(c);
		}
		pthread_mutex_unlock(&s->lock);
	}
}

static void *tun_main(void *arg)
{
	struct tun *t = arg;
	cae_tun_set *s = t->s;
	bool rd_eof = false, wr_shut = false, send_close = true, hup = false;
	size_t unacked = 0;
	char *buf = malloc(CAE_TUN_CHUNK);
	if (t->open_type)
		(void)s->send(s->ud, t->open_type, t->id, t->open_p, t->open_n);
	free(t->open_p);
	t->open_p = NULL;
	while (buf) {
		pthread_mutex_lock(&s->lock);
		bool closed = t->closed, violated = t->violated, peer_eof = t->peer_eof;
		size_t credit = t->credit;
		pthread_mutex_unlock(&s->lock);
		if (violated)
			break;
		ssize_t w = wr_shut ? 0 : drain_queue(t);
		pthread_mutex_lock(&s->lock);
		if (w < 0) {
			/* the socket's reader is gone: what it was sent is dropped, what it
			 * wrote is still read */
			free_chunks(t);
			t->discard = true;
			wr_shut = true;
			w = 0;
		}
		bool empty = t->qhead == NULL;
		pthread_mutex_unlock(&s->lock);
		/* the peer closed: what it sent before is still written, nothing more read */
		if (closed) {
			send_close = false;
			if (empty || wr_shut)
				break;
			struct pollfd p = {.fd = t->fd, .events = POLLOUT};
			if (poll(&p, 1, 1000) <= 0 || (p.revents & (POLLERR | POLLHUP)))
				break;
			continue;
		}
		unacked += (size_t)w;
		if (unacked >= CREDIT_STEP || (empty && unacked > 0)) {
			send_u32(t, CAE_MUX_TUN_WINDOW, (uint32_t)unacked);
			unacked = 0;
		}
		if (peer_eof && empty && !wr_shut) {
			(void)shutdown(t->fd, SHUT_WR);
			wr_shut = true;
		}
		if (rd_eof && wr_shut)
			break;
		/* read what the window allows, then look again before sleeping */
		if (credit > 0 && !rd_eof) {
			ssize_t n =
			    recv(t->fd, buf, MIN(credit, (size_t)CAE_TUN_CHUNK), MSG_DONTWAIT);
			if (n > 0) {
				pthread_mutex_lock(&s->lock);
				t->credit -= (size_t)n;
				pthread_mutex_unlock(&s->lock);
				if (s->send(s->ud, CAE_MUX_TUN_DATA, t->id, buf, (size_t)n) < 0)
					break;
				continue;
			}
			if (n == 0) {
				rd_eof = true;
				if (s->send(s->ud, CAE_MUX_TUN_DATA, t->id, NULL, 0) < 0)
					break;
				continue;
			}
			if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
				break;
		}
		struct pollfd p[2] = {{.fd = t->ev, .events = POLLIN},
				      {.fd = hup ? -1 : t->fd,
				       .events = (short)((credit > 0 && !rd_eof ? POLLIN : 0) |
							 (empty ? 0 : POLLOUT))}};
		if (poll(p, 2, -1) < 0 && errno != EINTR)
			break;
		if (p[0].revents & POLLIN) {
			uint64_t v;
			(void)!read(t->ev, &v, sizeof(v));
		}
		if ((p[1].revents & (POLLERR | POLLNVAL)) && !(p[1].revents & POLLIN))
			break;
		/* the socket is shut both ways: what is left to read is read as credit comes,
		 * nothing more can be written */
		if (p[1].revents & POLLHUP) {
			if (rd_eof)
				break;
			hup = true;
		}
	}
	free(buf);
	if (send_close)
		(void)s->send(s->ud, CAE_MUX_TUN_CLOSE, t->id, NULL, 0);
	pthread_mutex_lock(&s->lock);
	for (struct tun **pp = &s->list; *pp; pp = &(*pp)->next) {
		if (*pp == t) {
			*pp = t->next;
			break;
		}
	}
	free_chunks(t);
	close(t->fd);
	close(t->ev);
	free(t);
	if (--s->count == 0)
		pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->lock);
	return NULL;
}

int cae__tun_start(cae_tun_set *s, uint32_t id, int fd, char open_type, const void *p, size_t n)
{
	struct tun *t = calloc(1, sizeof(*t));
	int r = t ? 0 : -ENOMEM;
	if (t) {
		t->ev = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
		if (t->ev < 0)
			r = -errno;
	}
	if (r == 0 && open_type && n && !(t->open_p = malloc(n)))
		r = -ENOMEM;
	if (r < 0) {
		if (t && t->ev >= 0)
			close(t->ev);
		free(t);
		close(fd);
		return r;
	}
	(void)fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
	t->s = s;
	t->id = id;
	t->fd = fd;
	t->credit = CAE_TUN_WINDOW;
	t->open_type = open_type;
	if (n && t->open_p)
		memcpy(t->open_p, p, n);
	t->open_n = n;
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&attr, 128 * 1024);
	pthread_mutex_lock(&s->lock);
	if (s->ending)
		r = -EPIPE;
	else if (s->count >= CAE_TUN_MAX)
		r = -EAGAIN;
	else if (find_locked(s, id))
		r = -EEXIST;
	if (r == 0) {
		pthread_t th;
		int e = pthread_create(&th, &attr, tun_main, t);
		if (e == 0) {
			t->next = s->list;
			s->list = t;
			s->count++;
		} else {
			r = -e;
		}
	}
	pthread_mutex_unlock(&s->lock);
	pthread_attr_destroy(&attr);
	if (r < 0) {
		free(t->open_p);
		close(t->ev);
		close(fd);
		free(t);
	}
	return r;
}

static void frame(cae_tun_set *s, char type, uint32_t id, char *body, size_t n, bool pooled)
{
	pthread_mutex_lock(&s->lock);
	struct tun *t = find_locked(s, id);
	if (!t || t->closed || t->violated) {
		body_put_locked(s, body, pooled);
		pthread_mutex_unlock(&s->lock);
		return;
	}
	if (type == CAE_MUX_TUN_DATA) {
		struct chunk *c = NULL;
		if (n == 0) {
			t->peer_eof = true;
		} else if (t->discard) {
			/* dropped (the body with it, below) */
		} else if (t->peer_eof || t->queued + n > CAE_TUN_WINDOW ||
			   !(c = calloc(1, sizeof(*c)))) {
			t->violated = true;
		} else {
			*c = (struct chunk){.p = body, .n = n, .pooled = pooled};
			body = NULL;
			if (t->qtail)
				t->qtail->next = c;
			else
				t->qhead = c;
			t->qtail = c;
			t->queued += n;
		}
	} else if (type == CAE_MUX_TUN_WINDOW && n == 4) {
		const unsigned char *b = (const unsigned char *)body;
		uint32_t v = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 |
			     (uint32_t)b[3] << 24;
		if (t->credit + v > CAE_TUN_WINDOW)
			t->violated = true;
		else
			t->credit += v;
	} else if (type == CAE_MUX_TUN_CLOSE) {
		t->closed = true;
	}
	wake(t);
	body_put_locked(s, body, pooled);
	pthread_mutex_unlock(&s->lock);
}

void cae__tun_frame(cae_tun_set *s, char type, uint32_t id, char *body, size_t n)
{
	frame(s, type, id, body, n, false);
}

void cae__tun_frame_body(cae_tun_set *s, char type, uint32_t id, char *body, size_t n)
{
	frame(s, type, id, body, n, true);
}

int cae__tun_count(cae_tun_set *s)
{
	pthread_mutex_lock(&s->lock);
	int n = s->count;
	pthread_mutex_unlock(&s->lock);
	return n;
}

void cae__tun_set_free(cae_tun_set *s)
{
	if (!s)
		return;
	pthread_mutex_lock(&s->lock);
	s->ending = true;
	for (struct tun *t = s->list; t; t = t->next) {
		t->closed = true;
		/* a thread blocked writing to the channel is released by the channel's end;
		 * one blocked in nothing else */
		(void)shutdown(t->fd, SHUT_RDWR);
		wake(t);
	}
	while (s->count > 0)
		pthread_cond_wait(&s->cond, &s->lock);
	while (s->ncache > 0)
		free(s->cache[--s->ncache]);
	pthread_mutex_unlock(&s->lock);
	pthread_mutex_destroy(&s->lock);
	pthread_cond_destroy(&s->cond);
	free(s);
}
