/* cae-helper --stream: the helper side of the multiplexed channel (mux.h). The manager
 * starts it with one Engine API exec and keeps that exec's stdin and stdout open: every
 * request is a frame on stdin, every answer a frame on stdout, and any number run at once
 * (one thread each, with the runner's semantics). End of file on stdin (the manager closed
 * the stream or died) cancels every command, and the helper exits: nothing it started is
 * left. While connected it tells PID 1 (cae-helper --init) that a manager is there. */
#include "helper/mux.h"

#include "base/buf.h"
#include "base/macro.h"
#include "base/timeutil.h"
#include "cae/editor.h"
#include "cae/helper.h"
#include "runner/proctree.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/banned.h"

#define MAX_PIDS 4096
#define END_WAIT_MS 3000

/* A request being served: its cancel pipe. */
struct sreq {
	struct sreq *next;
	uint32_t id;
	int cancel_w;
};

struct stream {
	int out;
	pthread_mutex_t ed_lock; /* the editor below */
	cae_editor *ed;		 /* opened on the first edit, for ed_root */
	char *ed_root;
	pthread_mutex_t wlock; /* one frame at a time on out */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct sreq *reqs;
	int running;
	bool broken; /* out failed: the manager is gone */
};

struct job {
	struct stream *st;
	char type; /* CAE_MUX_RUN or CAE_MUX_EDIT */
	uint32_t id;
	char *body;
	size_t len;
	int cancel_r;
};

static int write_full(int fd, const void *p, size_t n)
{
	const char *c = p;
	while (n) {
		ssize_t w = write(fd, c, n);
		if (w > 0) {
			c += w;
			n -= (size_t)w;
		} else if (w < 0 && errno != EINTR) {
			return -errno;
		}
	}
	return 0;
}

static int read_full(int fd, void *p, size_t n)
{
	char *c = p;
	while (n) {
		ssize_t r = read(fd, c, n);
		if (r > 0) {
			c += r;
			n -= (size_t)r;
		} else if (r == 0) {
			return -EPIPE;
		} else if (errno != EINTR) {
			return -errno;
		}
	}
	return 0;
}

static int send_frame(struct stream *st, char type, uint32_t id, const void *p, size_t n)
{
	unsigned char h[CAE_MUX_HEADER];
	cae_mux_header(h, type, id, (uint32_t)n);
	pthread_mutex_lock(&st->wlock);
	int r = st->broken ? -EPIPE : write_full(st->out, h, sizeof(h));
	if (r == 0 && n)
		r = write_full(st->out, p, n);
	if (r < 0)
		st->broken = true;
	pthread_mutex_unlock(&st->wlock);
	return r;
}

static bool job_ack(void *ud)
{
	struct job *j = ud;
	return send_frame(j->st, CAE_MUX_ACK, j->id, NULL, 0) == 0;
}

/* One edit: the editor of the stream (one workspace: a request for another root reopens it)
 * runs what the manager checked; undo history lives as long as the stream. */
static int handle_edit(struct stream *st, const char *body, size_t len, cae_buf *out)
{
	cae_error err = {0};
	cae_helper_edit e;
	cae_editor_result res = {0};
	int status = cae_helper_decode_edit(body, len, &e, &err);
	if (status == 0) {
		pthread_mutex_lock(&st->ed_lock);
		if (!st->ed || strcmp(st->ed_root, e.root) != 0) {
			cae_editor_free(st->ed);
			free(st->ed_root);
			st->ed_root = strdup(e.root);
			st->ed =
			    st->ed_root ? cae_editor_new(e.root, e.root, &e.limits, &err) : NULL;
		}
		status =
		    st->ed ? cae_editor_run(st->ed, &e.req, &res) : (err.code ? err.code : -ENOMEM);
		pthread_mutex_unlock(&st->ed_lock);
		cae_helper_edit_clear(&e);
	}
	int r = cae_helper_encode_edit_result(status, err.message, &res, out);
	cae_editor_result_clear(&res);
	return r;
}

static void *job_main(void *arg)
{
	struct job *j = arg;
	struct stream *st = j->st;
	cae_buf out;
	cae_buf_init(&out, (size_t)CAE_HELPER_MAX_FRAME + CAE_HELPER_FRAME_HEADER);
	if (j->type == CAE_MUX_EDIT) {
		if (handle_edit(st, j->body, j->len, &out) == 0)
			(void)send_frame(st, CAE_MUX_EDIT_RESULT, j->id,
					 out.data + CAE_HELPER_FRAME_HEADER,
					 out.len - CAE_HELPER_FRAME_HEADER);
	} else if (cae_helper_handle_request(j->body, j->len, j->cancel_r, job_ack, j, &out) == 0) {
		(void)send_frame(st, CAE_MUX_RESULT, j->id, out.data + CAE_HELPER_FRAME_HEADER,
				 out.len - CAE_HELPER_FRAME_HEADER);
	}
	cae_buf_clear(&out);
	pthread_mutex_lock(&st->lock);
	for (struct sreq **p = &st->reqs; *p; p = &(*p)->next) {
		if ((*p)->id == j->id) {
			struct sreq *r = *p;
			*p = r->next;
			close(r->cancel_w);
			free(r);
			break;
		}
	}
	st->running--;
	pthread_cond_broadcast(&st->cond);
	pthread_mutex_unlock(&st->lock);
	close(j->cancel_r);
	free(j->body);
	free(j);
	return NULL;
}

static int start_job(struct stream *st, char type, uint32_t id, char *body, size_t len)
{
	int p[2];
	struct job *j = calloc(1, sizeof(*j));
	struct sreq *r = calloc(1, sizeof(*r));
	if (!j || !r || pipe2(p, O_CLOEXEC) < 0) {
		free(j);
		free(r);
		free(body);
		return -ENOMEM;
	}
	*j = (struct job){
	    .st = st, .type = type, .id = id, .body = body, .len = len, .cancel_r = p[0]};
	*r = (struct sreq){.id = id, .cancel_w = p[1]};
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&attr, 256 * 1024);
	pthread_mutex_lock(&st->lock);
	r->next = st->reqs;
	st->reqs = r;
	st->running++;
	pthread_t t;
	int e = pthread_create(&t, &attr, job_main, j);
	if (e != 0) {
		st->reqs = r->next;
		st->running--;
	}
	pthread_mutex_unlock(&st->lock);
	pthread_attr_destroy(&attr);
	if (e != 0) {
		close(p[0]);
		close(p[1]);
		free(r);
		free(j->body);
		free(j);
		return -EAGAIN;
	}
	return 0;
}

static void cancel(struct stream *st, uint32_t id, bool all)
{
	pthread_mutex_lock(&st->lock);
	for (struct sreq *r = st->reqs; r; r = r->next)
		if (all || r->id == id)
			(void)!write(r->cancel_w, "c", 1);
	pthread_mutex_unlock(&st->lock);
}

/* At the end: whatever still runs below us, with its descendants, is killed. */
static void kill_descendants(void)
{
	pid_t *pids = malloc(MAX_PIDS * sizeof(pid_t));
	if (!pids)
		return;
	for (int round = 0; round < 10; round++) {
		size_t n = cae_proctree_descendants(getpid(), pids, MAX_PIDS);
		if (n == 0)
			break;
		for (size_t i = 0; i < n; i++)
			kill(pids[i], SIGKILL);
		nanosleep(&(struct timespec){0, 5 * 1000000L}, NULL);
	}
	free(pids);
}

int cae_helper_serve_stream(int in, int out, int heartbeat_s)
{
	cae_proctree_init();
	struct stream st = {.out = out};
	pthread_mutex_init(&st.ed_lock, NULL);
	pthread_mutex_init(&st.wlock, NULL);
	pthread_mutex_init(&st.lock, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&st.cond, &ca);
	pthread_condattr_destroy(&ca);

	char hello[32];
	int hl = snprintf(hello, sizeof(hello), "cae-helper %d", CAE_HELPER_PROTOCOL);
	int ret = send_frame(&st, CAE_MUX_HELLO, 0, hello, (size_t)hl);
	if (heartbeat_s > 0)
		kill(1, SIGUSR1);
	int64_t next_beat = cae_now_ns() + (int64_t)heartbeat_s * 1000000000LL;
	while (ret == 0) {
		struct pollfd pfd = {.fd = in, .events = POLLIN};
		int tmo = heartbeat_s > 0 ? cae_poll_timeout_ms(next_beat, cae_now_ns()) : -1;
		int pr = poll(&pfd, 1, tmo);
		if (pr < 0 && errno != EINTR) {
			ret = -errno;
			break;
		}
		if (heartbeat_s > 0 && cae_now_ns() >= next_beat) {
			kill(1, SIGUSR1);
			next_beat = cae_now_ns() + (int64_t)heartbeat_s * 1000000000LL;
		}
		if (pr <= 0)
			continue;
		unsigned char h[CAE_MUX_HEADER];
		int r = read_full(in, h, sizeof(h));
		if (r < 0) {
			ret = r == -EPIPE ? 0 : r;
			break;
		}
		char type;
		uint32_t id, n;
		if (cae_mux_parse_header(h, &type, &id, &n) < 0) {
			ret = -EPROTO;
			break;
		}
		char *body = malloc(n ? n : 1);
		if (!body) {
			ret = -ENOMEM;
			break;
		}
		r = read_full(in, body, n);
		if (r < 0) {
			free(body);
			ret = r == -EPIPE ? 0 : r;
			break;
		}
		switch (type) {
		case CAE_MUX_EDIT:
			if (start_job(&st, CAE_MUX_EDIT, id, body, n) < 0) {
				cae_buf e;
				cae_buf_init(&e, 4096);
				if (cae_helper_encode_edit_result(-EAGAIN,
								  "cae-helper: cannot start "
								  "a thread",
								  NULL, &e) == 0)
					(void)send_frame(&st, CAE_MUX_EDIT_RESULT, id,
							 e.data + CAE_HELPER_FRAME_HEADER,
							 e.len - CAE_HELPER_FRAME_HEADER);
				cae_buf_clear(&e);
			}
			break;
		case CAE_MUX_RUN:
			if (start_job(&st, CAE_MUX_RUN, id, body, n) < 0) {
				cae_buf e;
				cae_buf_init(&e, 4096);
				if (cae_helper_encode_response(-EAGAIN,
							       "cae-helper: cannot start "
							       "a thread",
							       NULL, &e) == 0) {
					(void)send_frame(&st, CAE_MUX_ACK, id, NULL, 0);
					(void)send_frame(&st, CAE_MUX_RESULT, id,
							 e.data + CAE_HELPER_FRAME_HEADER,
							 e.len - CAE_HELPER_FRAME_HEADER);
				}
				cae_buf_clear(&e);
			}
			break;
		case CAE_MUX_CANCEL:
			cancel(&st, id, false);
			free(body);
			break;
		case CAE_MUX_PING:
			(void)send_frame(&st, CAE_MUX_PONG, id, NULL, 0);
			free(body);
			break;
		default:
			free(body); /* a newer manager's frame */
		}
	}
	/* The manager is gone (or broke the protocol): every command ends. */
	cancel(&st, 0, true);
	pthread_mutex_lock(&st.lock);
	int64_t deadline = cae_now_ns() + END_WAIT_MS * 1000000LL;
	while (st.running > 0 && cae_now_ns() < deadline) {
		struct timespec ts = {deadline / 1000000000LL, deadline % 1000000000LL};
		pthread_cond_timedwait(&st.cond, &st.lock, &ts);
	}
	pthread_mutex_unlock(&st.lock);
	kill_descendants();
	return ret;
}
