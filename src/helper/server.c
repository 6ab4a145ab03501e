/* The helper side of the channel (cae-helper's main loop); see cae/helper.h. */
#include "cae/helper.h"

#include "base/buf.h"
#include "base/macro.h"
#include "base/timeutil.h"
#include "helper/proto.h"
#include "runner/proctree.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/banned.h"

#define MAX_PIDS 4096

static atomic_int running;
static atomic_llong last_activity_ns;

/* Reads exactly n bytes; 0, or -EPIPE at end of file, or -errno. */
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

static void serve_one(int fd)
{
	unsigned char hdr[CAE_HELPER_FRAME_HEADER];
	if (read_full(fd, hdr, sizeof(hdr)) < 0)
		return;
	uint32_t len = cae_helper_frame_length(hdr);
	cae_error err = { 0 };
	int status;
	cae_run_result res = { 0 };
	cae_helper_request req = { 0 };
	_cleanup_free_ char *body = NULL;
	if (len > CAE_HELPER_MAX_FRAME) {
		status = cae_error_set(&err, -E2BIG, "helper request too large (%u bytes)", len);
	} else if (!(body = malloc(len ? len : 1))) {
		status = cae_error_set(&err, -ENOMEM, "out of memory");
	} else if (read_full(fd, body, len) < 0) {
		return;
	} else {
		status = cae_helper_decode_request(body, len, &req, &err);
	}
	free(TAKE_PTR(body));
	if (status == 0) {
		req.spec.cancel_fd = fd;
		req.spec.has_cancel_fd = true;
		status = cae_runner_run(&req.spec, &res, &err);
	}
	cae_helper_request_clear(&req);
	cae_buf out;
	cae_buf_init(&out, (size_t)CAE_HELPER_MAX_FRAME + CAE_HELPER_FRAME_HEADER);
	int r = cae_helper_encode_response(status, err.message, &res, &out);
	if (r == -E2BIG && status == 0) {
		/* Outputs past what a frame holds (caps above the frame limit): say so. */
		cae_buf_clear(&out);
		cae_error_set(&err, -E2BIG, "command output too large for the helper channel");
		r = cae_helper_encode_response(-E2BIG, err.message, NULL, &out);
	}
	cae_run_result_clear(&res);
	if (r == 0)
		(void)send_full(fd, out.data, out.len);
	cae_buf_clear(&out);
}

static void *serve_thread(void *arg)
{
	int fd = (int)(intptr_t)arg;
	serve_one(fd);
	close(fd);
	atomic_store(&last_activity_ns, cae_now_ns());
	atomic_fetch_sub(&running, 1);
	return NULL;
}

/* Receives one message; returns the fd it carried, -1 for a message without one, -EPIPE at
 * end of file, -errno on error. */
static int recv_fd(int ctl)
{
	char byte;
	struct iovec iov = { .iov_base = &byte, .iov_len = 1 };
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int))];
	} u;
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
			    .msg_controllen = sizeof(u.buf) };
	ssize_t n;
	do
		n = recvmsg(ctl, &m, MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	if (n == 0)
		return -EPIPE;
	if (n < 0)
		return -errno;
	int fd = -1;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		size_t nfd = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		int *fds = (int *)(void *)CMSG_DATA(c);
		for (size_t i = 0; i < nfd; i++) {
			if (fd < 0)
				fd = fds[i];
			else
				close(fds[i]); /* one fd per message: close extras */
		}
	}
	return fd;
}

/* At the end: every command still running, with its descendants, is killed. */
static void kill_children(void)
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
		struct timespec ts = { 0, 5 * 1000000L };
		nanosleep(&ts, NULL);
	}
	free(pids);
}

int cae_helper_serve(int ctl, const cae_helper_serve_options *opts)
{
	int64_t max_idle_ms = opts ? opts->max_idle_ms : 0;
	cae_proctree_init();
	char hello[32];
	int hl = snprintf(hello, sizeof(hello), "cae-helper %d", CAE_HELPER_PROTOCOL);
	if (send(ctl, hello, (size_t)hl, MSG_NOSIGNAL) < 0)
		return -errno;
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&attr, 256 * 1024);
	atomic_store(&last_activity_ns, cae_now_ns());
	int ret = 0;
	for (;;) {
		int tmo = -1;
		if (max_idle_ms > 0) {
			int64_t idle_ms = (cae_now_ns() - atomic_load(&last_activity_ns)) / 1000000;
			if (atomic_load(&running) == 0 && idle_ms >= max_idle_ms) {
				ret = -ETIMEDOUT;
				break;
			}
			tmo = (int)MIN(max_idle_ms - MIN(idle_ms, max_idle_ms) + 1, 60000);
			if (tmo < 10)
				tmo = 10;
		}
		struct pollfd p = { .fd = ctl, .events = POLLIN };
		int pr = poll(&p, 1, tmo);
		if (pr < 0 && errno != EINTR) {
			ret = -errno;
			break;
		}
		if (pr <= 0)
			continue;
		int fd = recv_fd(ctl);
		if (fd == -EPIPE)
			break;
		if (fd < 0 && fd != -1) {
			ret = fd;
			break;
		}
		atomic_store(&last_activity_ns, cae_now_ns());
		if (fd < 0)
			continue; /* a message without a socket: a keep-alive */
		atomic_fetch_add(&running, 1);
		pthread_t t;
		if (pthread_create(&t, &attr, serve_thread, (void *)(intptr_t)fd) != 0) {
			atomic_fetch_sub(&running, 1);
			close(fd); /* the manager sees end of file: the command did not run */
		}
	}
	pthread_attr_destroy(&attr);
	kill_children();
	return ret;
}
