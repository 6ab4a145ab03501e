/* The helper side of the channel (cae-helper's main loop); see cae/helper.h. */
#include "cae/helper.h"

#include "base/buf.h"
#include "base/fs.h"
#include "base/macro.h"
#include "base/timeutil.h"
#include "helper/proto.h"
#include "runner/proctree.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/banned.h"

#define MAX_PIDS 4096

/* Workers wait for commands on the channel themselves (the kernel hands each message to one
 * of them): a command costs no thread start and no hand-off. One worker is always idle; a
 * worker that takes a command starts another when it was the last idle one, and a worker
 * that finds enough idle ones on its return ends. */
#define MAX_IDLE_WORKERS 2

struct server {
	int ctl;
	int (*serve_stream)(int fd); /* NULL: stream sockets are refused (closed) */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	pthread_attr_t attr;
	int idle;    /* workers waiting on the channel */
	int running; /* commands being served */
	int threads; /* workers alive */
	bool ended;  /* the channel reached end of file (or failed) */
	int error;   /* -errno when it failed */
	int64_t last_activity_ns;
};

static int send_full(int fd, const char *p, size_t n)
{
	while (n) {
		ssize_t r = send(fd, p, n, MSG_NOSIGNAL);
		if (r > 0) {
			p += r;
			n -= (size_t)r;
		} else if (r < 0 && errno != EINTR) {
			return -errno;
		}
	}
	return 0;
}

extern char **environ;

/* envp for a request that adds to the helper's environment: ours, minus the names it sets,
 * then its entries. */
static char **env_with(char *const *add)
{
	size_t n = 0, k = 0;
	for (char **e = environ; e && *e; e++)
		n++;
	for (char *const *a = add; *a; a++)
		k++;
	char **v = calloc(n + k + 1, sizeof(char *));
	if (!v)
		return NULL;
	size_t o = 0;
	for (char **e = environ; e && *e; e++) {
		size_t kl = strcspn(*e, "=");
		bool replaced = false;
		for (char *const *a = add; *a && !replaced; a++)
			replaced = strncmp(*a, *e, kl) == 0 && (*a)[kl] == '=';
		if (!replaced)
			v[o++] = *e;
	}
	for (char *const *a = add; *a; a++)
		v[o++] = *a;
	return v;
}

/* The request's working directory must lie beneath its confinement (symlinks resolved). */
static int check_confined(const cae_helper_request *q, cae_error *err)
{
	if (!q->confine)
		return 0;
	char *real = realpath(q->cwd ? q->cwd : ".", NULL);
	size_t cl = strlen(q->confine);
	while (cl > 1 && q->confine[cl - 1] == '/')
		cl--;
	bool ok = real && strncmp(real, q->confine, cl) == 0 &&
		  (real[cl] == '\0' || real[cl] == '/' || cl == 1);
	free(real);
	if (ok)
		return 0;
	return cae_error_set(err, -ENOTDIR, "working directory %s is not a directory in %s",
			     q->cwd ? q->cwd : ".", q->confine);
}

int cae__helper_handle_request(const char *body, size_t len, int cancel_fd, const cae_live_io *live,
			       bool (*ack)(void *ud), void *ud, const char *const *server_env,
			       cae_buf *out)
{
	cae_error err = {0};
	cae_run_result res = {0};
	cae_helper_request req = {0};
	int status = cae__helper_decode_request(body, len, &req, &err);
	if (!ack(ud))
		status = -EPIPE; /* the manager is gone: do not run it */
	_cleanup_free_ char **envp = NULL;
	_cleanup_free_ char **adds = NULL;
	if (status == 0 && server_env && server_env[0]) {
		size_t n = 0, k = 0;
		for (char **a = req.env_add; a && *a; a++)
			n++;
		for (const char *const *a = server_env; *a; a++)
			k++;
		adds = calloc(n + k + 1, sizeof(char *));
		if (!adds) {
			status = cae_error_set(&err, -ENOMEM, "out of memory");
		} else {
			for (size_t i = 0; i < n; i++)
				adds[i] = req.env_add[i];
			for (size_t i = 0; i < k; i++)
				adds[n + i] = (char *)server_env[i];
		}
	}
	char **add = adds ? adds : req.env_add;
	if (status == 0 && add && !req.envp) {
		envp = env_with(add);
		if (!envp)
			status = cae_error_set(&err, -ENOMEM, "out of memory");
		req.spec.envp = (const char *const *)envp;
	}
	if (status == 0)
		status = check_confined(&req, &err);
	if (status == 0) {
		req.spec.cancel_fd = cancel_fd;
		req.spec.live = live;
		status = cae_runner_run(&req.spec, &res, &err);
	}
	cae__helper_request_clear(&req);
	int r = cae__helper_encode_response(status, err.message, &res, out);
	if (r == -E2BIG && status == 0) {
		/* Outputs past what a frame holds (caps above the frame limit): say so. */
		cae__buf_clear(out); /* the maximum is kept */
		cae_error_set(&err, -E2BIG, "command output too large for the helper channel");
		r = cae__helper_encode_response(-E2BIG, err.message, NULL, out);
	}
	cae_run_result_clear(&res);
	return r;
}

static bool ack_on_socket(void *ud)
{
	char ack = CAE_HELPER_ACK;
	return send_full(*(int *)ud, &ack, 1) == 0;
}

static void serve_one(int fd)
{
	unsigned char hdr[CAE_HELPER_FRAME_HEADER];
	if (cae__read_exact(fd, hdr, sizeof(hdr)) < 0)
		return;
	uint32_t len = cae__helper_frame_length(hdr);
	cae_buf out;
	cae__buf_init(&out, (size_t)CAE_HELPER_MAX_FRAME + CAE_HELPER_FRAME_HEADER);
	int r;
	if (len > CAE_HELPER_MAX_FRAME) {
		if (!ack_on_socket(&fd))
			return;
		r = cae__helper_encode_response(-E2BIG, "helper request too large", NULL, &out);
	} else {
		_cleanup_free_ char *body = malloc(len ? len : 1);
		if (!body) {
			if (!ack_on_socket(&fd))
				return;
			r = cae__helper_encode_response(-ENOMEM, "out of memory", NULL, &out);
		} else if (cae__read_exact(fd, body, len) < 0) {
			return;
		} else {
			r = cae__helper_handle_request(body, len, fd, NULL, ack_on_socket, &fd,
						       NULL, &out);
		}
	}
	if (r == 0)
		(void)send_full(fd, out.data, out.len);
	cae__buf_clear(&out);
}

/* At the end: every command still running, with its descendants, is killed. */
static void kill_children(void)
{
	pid_t *pids = malloc(MAX_PIDS * sizeof(pid_t));
	if (!pids)
		return;
	for (int round = 0; round < 10; round++) {
		size_t n = cae__proctree_descendants(getpid(), pids, MAX_PIDS);
		if (n == 0)
			break;
		for (size_t i = 0; i < n; i++)
			kill(pids[i], SIGKILL);
		struct timespec ts = {0, 5 * 1000000L};
		nanosleep(&ts, NULL);
	}
	free(pids);
}

static void *worker(void *arg);

/* Starts a worker (lock held). */
static int spawn_worker_locked(struct server *sv)
{
	pthread_t t;
	if (pthread_create(&t, &sv->attr, worker, sv) != 0)
		return -EAGAIN;
	sv->threads++;
	sv->idle++;
	return 0;
}

static void *worker(void *arg)
{
	struct server *sv = arg;
	for (;;) {
		char kind = 0;
		int fd = cae__helper_recv_fd(sv->ctl, &kind);
		pthread_mutex_lock(&sv->lock);
		sv->last_activity_ns = cae__now_ns();
		if (fd < 0 && fd != -1) {
			/* End of file (or a broken channel): every worker sees it and ends. */
			if (!sv->ended) {
				sv->ended = true;
				sv->error = fd == -EPIPE ? 0 : fd;
			}
			sv->idle--;
			sv->threads--;
			pthread_cond_broadcast(&sv->cond);
			pthread_mutex_unlock(&sv->lock);
			return NULL;
		}
		if (fd == -1) { /* a message without a socket: a keep-alive */
			pthread_mutex_unlock(&sv->lock);
			continue;
		}
		sv->idle--;
		sv->running++;
		if (sv->idle == 0)
			(void)spawn_worker_locked(sv); /* if it fails, commands wait for this one */
		pthread_mutex_unlock(&sv->lock);

		if (kind == CAE_HELPER_FD_STREAM) {
			if (sv->serve_stream)
				(void)sv->serve_stream(fd);
		} else if (kind == CAE_HELPER_FD_NET) {
			(void)cae__helper_net_listen(fd, CAE_HELPER_NET_HTTP_PORT,
						     CAE_HELPER_NET_SOCKS_PORT);
		} else {
			serve_one(fd);
		}
		close(fd);

		pthread_mutex_lock(&sv->lock);
		sv->running--;
		sv->last_activity_ns = cae__now_ns();
		bool leave = sv->idle >= MAX_IDLE_WORKERS || sv->ended;
		if (leave)
			sv->threads--;
		else
			sv->idle++;
		pthread_cond_broadcast(&sv->cond);
		pthread_mutex_unlock(&sv->lock);
		if (leave)
			return NULL;
	}
}

int cae_helper_serve(int ctl, const cae_helper_serve_options *opts)
{
	int64_t max_idle_ms = opts ? opts->max_idle_ms : 0;
	cae__proctree_init();
	char hello[32];
	int hl = snprintf(hello, sizeof(hello), "cae-helper %d", CAE_HELPER_PROTOCOL);
	if (send(ctl, hello, (size_t)hl, MSG_NOSIGNAL) < 0)
		return -errno;
	struct server *sv = calloc(1, sizeof(*sv));
	if (!sv)
		return -ENOMEM;
	sv->ctl = ctl;
	sv->serve_stream = opts ? opts->serve_stream : NULL;
	sv->last_activity_ns = cae__now_ns();
	pthread_mutex_init(&sv->lock, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&sv->cond, &ca);
	pthread_condattr_destroy(&ca);
	pthread_attr_init(&sv->attr);
	pthread_attr_setdetachstate(&sv->attr, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&sv->attr, 256 * 1024);

	int ret = 0;
	pthread_mutex_lock(&sv->lock);
	if (spawn_worker_locked(sv) < 0) {
		ret = -EAGAIN;
		sv->ended = true;
	}
	while (!sv->ended) {
		if (max_idle_ms <= 0) {
			pthread_cond_wait(&sv->cond, &sv->lock);
			continue;
		}
		int64_t until = sv->last_activity_ns + max_idle_ms * 1000000LL;
		if (sv->running == 0 && cae__now_ns() >= until) {
			ret = -ETIMEDOUT;
			break;
		}
		if (sv->running > 0)
			until = cae__now_ns() + max_idle_ms * 1000000LL;
		struct timespec ts = {until / 1000000000LL, until % 1000000000LL};
		pthread_cond_timedwait(&sv->cond, &sv->lock, &ts);
	}
	if (sv->ended && sv->error < 0)
		ret = sv->error;
	pthread_mutex_unlock(&sv->lock);

	/* Wake the workers still waiting on the channel, stop every command, and wait (a
	 * little) for the workers to finish answering. */
	shutdown(ctl, SHUT_RDWR);
	kill_children();
	pthread_mutex_lock(&sv->lock);
	int64_t deadline = cae__now_ns() + 2000 * 1000000LL;
	while (sv->threads > 0 && cae__now_ns() < deadline) {
		struct timespec ts = {deadline / 1000000000LL, deadline % 1000000000LL};
		pthread_cond_timedwait(&sv->cond, &sv->lock, &ts);
	}
	bool clean = sv->threads == 0;
	pthread_mutex_unlock(&sv->lock);
	if (clean) {
		pthread_attr_destroy(&sv->attr);
		pthread_cond_destroy(&sv->cond);
		pthread_mutex_destroy(&sv->lock);
		free(sv);
	}
	/* else a worker still holds sv: the process is about to exit; leave it be. */
	return ret;
}
