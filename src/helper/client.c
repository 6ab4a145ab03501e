/* The manager side of the helper channel; see cae/helper.h. */
#include "cae/helper.h"

#include "base/buf.h"
#include "base/macro.h"
#include "base/timeutil.h"
#include "helper/proto.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/banned.h"

#ifndef CAE_LIBEXECDIR
#define CAE_LIBEXECDIR "/usr/local/libexec"
#endif

/* How long past a command's own timeout, grace and drain the helper may take to answer. */
#define ANSWER_MARGIN_MS 30000
#ifndef SPIN_NS
#define SPIN_NS 1000000
#endif

struct cae_helper {
	int ctl;
	pid_t pid;
	atomic_bool dead;
};

/* An absolute path: the helper may be started from another directory (bwrap --chdir). */
static int try_path(const char *p, char **out)
{
	if (access(p, X_OK) < 0)
		return -ENOENT;
	*out = realpath(p, NULL);
	return *out ? 0 : -errno;
}

/* name beside the running executable, then in the libexec directory, then on PATH; env
 * (when set) overrides. */
static int find_program(const char *env_name, const char *name, char **path)
{
	const char *env = getenv(env_name);
	if (env && *env)
		return try_path(env, path);
	char self[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n > 0) {
		self[n] = '\0';
		char *slash = strrchr(self, '/');
		if (slash && (size_t)(slash - self) + strlen(name) + 2 <= sizeof(self)) {
			snprintf(slash + 1, sizeof(self) - (size_t)(slash + 1 - self), "%s", name);
			if (try_path(self, path) == 0)
				return 0;
		}
	}
	char lib[PATH_MAX];
	snprintf(lib, sizeof(lib), "%s/%s", CAE_LIBEXECDIR, name);
	if (try_path(lib, path) == 0)
		return 0;
	return cae_runner_find_program(name, NULL, path) == 0 ? 0 : -ENOENT;
}

int cae_helper_find(char **path)
{
	return find_program("CAE_HELPER", "cae-helper", path);
}

int cae_helper_find_static(char **path)
{
	return find_program("CAE_HELPER_STATIC", "cae-helper-static", path);
}

int cae_helper_start(const char *const *argv, const char *const *envp, int64_t timeout_ms,
		     cae_helper **out, cae_error *err)
{
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
		return cae_error_set(err, -errno, "socketpair: %s", strerror(errno));
	_cleanup_close_ int mine = sv[0], theirs = sv[1];
	pid_t pid;
	int r = cae_runner_service_start(argv, envp, theirs, &pid, err);
	if (r < 0)
		return r;
	cae__closep(&theirs);
	theirs = -1;
	/* The greeting says the helper runs (the wrapper, e.g. bwrap, set it up). */
	struct pollfd p = {.fd = mine, .events = POLLIN};
	int pr;
	do
		pr = poll(&p, 1, timeout_ms > 0 ? (int)MIN(timeout_ms, INT_MAX) : 10000);
	while (pr < 0 && errno == EINTR);
	char hello[64] = {0};
	ssize_t n = pr > 0 ? recv(mine, hello, sizeof(hello) - 1, 0) : -1;
	char want[32];
	snprintf(want, sizeof(want), "cae-helper %d", CAE_HELPER_PROTOCOL);
	if (n <= 0 || strcmp(hello, want) != 0) {
		int st = cae_runner_service_stop(pid, 0);
		if (pr == 0)
			return cae_error_set(err, -ETIMEDOUT,
					     "cae-helper did not start within %lld ms",
					     (long long)timeout_ms);
		if (n > 0)
			return cae_error_set(err, -EPROTO,
					     "cae-helper speaks another protocol (%s)", hello);
		return cae_error_set(err, -ECHILD, "cae-helper did not start (%s %d)",
				     WIFSIGNALED(st) ? "signal" : "exit status",
				     WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
	}
	cae_helper *h = calloc(1, sizeof(*h));
	if (!h) {
		cae_runner_service_stop(pid, 0);
		return -ENOMEM;
	}
	h->ctl = TAKE_FD(mine);
	h->pid = pid;
	*out = h;
	return 0;
}

bool cae_helper_alive(const cae_helper *h)
{
	return h && !atomic_load(&h->dead);
}

pid_t cae_helper_pid(const cae_helper *h)
{
	return h ? h->pid : -1;
}

void cae_helper_stop(cae_helper *h)
{
	if (!h)
		return;
	close(h->ctl);
	cae_runner_service_stop(h->pid, 2000);
	free(h);
}

static size_t cap_or_default(size_t v)
{
	return v ? v : CAE_RUNNER_DEFAULT_MAX_OUTPUT;
}

int cae_helper_run(cae_helper *h, const cae_run_spec *spec, cae_run_result *res, cae_error *err)
{
	memset(res, 0, sizeof(*res));
	if (!spec || !spec->argv || !spec->argv[0] || !spec->argv[0][0])
		return cae_error_set(err, -EINVAL, "no command to run");
	if (!cae_helper_alive(h))
		return cae_error_set(err, -EPIPE, "cae-helper is gone");
	cae_buf req;
	cae__buf_init(&req, (size_t)CAE_HELPER_MAX_FRAME + CAE_HELPER_FRAME_HEADER);
	int r = cae__helper_encode_request(spec, NULL, &req);
	if (r < 0) {
		cae__buf_clear(&req);
		return cae_error_set(err, r == -E2BIG ? -E2BIG : r,
				     "command too large for cae-helper");
	}
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv) < 0) {
		cae__buf_clear(&req);
		return cae_error_set(err, -errno, "socketpair: %s", strerror(errno));
	}
	_cleanup_close_ int fd = sv[0];
	/* The helper's end must block: it reads the request with plain reads. */
	int fl = fcntl(sv[1], F_GETFL);
	(void)fcntl(sv[1], F_SETFL, fl & ~O_NONBLOCK);
	/* Queue what the socket takes before handing it over: the helper then finds the
	 * request complete instead of waiting for it. */
	size_t sent = 0;
	while (sent < req.len) {
		ssize_t w = send(fd, req.data + sent, req.len - sent, MSG_NOSIGNAL);
		if (w <= 0)
			break;
		sent += (size_t)w;
	}
	r = cae__helper_send_fd(h->ctl, sv[1], CAE_HELPER_FD_COMMAND);
	close(sv[1]);
	if (r < 0) {
		cae__buf_clear(&req);
		atomic_store(&h->dead, true);
		return cae_error_set(err, -EPIPE, "cae-helper is gone: %s", strerror(-r));
	}

	/* The answer may hold both streams, each up to 3 bytes per byte kept (U+FFFD). */
	uint64_t max_body =
	    3ull * (cap_or_default(spec->max_stdout) + cap_or_default(spec->max_stderr)) + 65536;
	if (max_body > CAE_HELPER_MAX_FRAME)
		max_body = CAE_HELPER_MAX_FRAME;
	int64_t guard_ns = INT64_MAX;
	if (spec->timeout_ms > 0)
		guard_ns = cae__now_ns() +
			   (spec->timeout_ms + MAX(spec->grace_ms, CAE_RUNNER_DEFAULT_GRACE_MS) +
			    MAX(spec->drain_ms, CAE_RUNNER_DEFAULT_DRAIN_MS) + ANSWER_MARGIN_MS) *
			       1000000LL;
	/* The helper's acknowledgement (it took the request: from here on the command may
	 * have run), then the answer's frame header. */
	unsigned char hdr[1 + CAE_HELPER_FRAME_HEADER];
	size_t hdr_got = 0, body_got = 0;
	uint32_t body_len = 0;
	_cleanup_free_ char *body = NULL;
	bool cancel_sent = false;
	int64_t spin_until = 0;
	r = 0;
	for (;;) {
		struct pollfd p[2];
		p[0] = (struct pollfd){.fd = fd, .events = POLLIN | (sent < req.len ? POLLOUT : 0)};
		int np = 1;
		if (spec->cancel_fd >= 0 && !cancel_sent)
			p[np++] = (struct pollfd){.fd = spec->cancel_fd, .events = POLLIN};
		int64_t now = cae__now_ns();
		if (now >= guard_ns) {
			r = cae_error_set(err, -ETIMEDOUT, "cae-helper did not answer in time");
			break;
		}
		int tmo = cae__poll_timeout_ms(guard_ns, now);
		int pr;
		if (spin_until == 0)
			spin_until = cae__now_ns() + SPIN_NS;
		if (cae__now_ns() < spin_until) {
			pr = poll(p, (nfds_t)np, 0);
			if (pr == 0) {
				sched_yield();
				continue;
			}
		} else {
			pr = poll(p, (nfds_t)np, tmo);
		}
		if (pr < 0 && errno != EINTR) {
			r = cae_error_set(err, -errno, "poll: %s", strerror(errno));
			break;
		}
		if (pr <= 0)
			continue;
		if (np > 1 && p[1].revents) {
			/* Any byte (or our close) cancels the command; the answer still comes. */
			(void)send(fd, "c", 1, MSG_NOSIGNAL);
			cancel_sent = true;
		}
		if ((p[0].revents & POLLOUT) && sent < req.len) {
			ssize_t w = send(fd, req.data + sent, req.len - sent, MSG_NOSIGNAL);
			if (w > 0)
				sent += (size_t)w;
			else if (w < 0 && errno != EAGAIN && errno != EINTR)
				sent =
				    req.len; /* the helper stopped reading: its answer says why */
		}
		if (!(p[0].revents & (POLLIN | POLLHUP | POLLERR)))
			continue;
		ssize_t n;
		if (hdr_got < sizeof(hdr)) {
			n = recv(fd, hdr + hdr_got, sizeof(hdr) - hdr_got, 0);
		} else {
			n = recv(fd, body + body_got, body_len - body_got, 0);
		}
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			continue;
		if (n <= 0 && hdr_got == 0) {
			/* Never taken (the helper died with the request queued): not run. */
			r = cae_error_set(err, -EPIPE, "cae-helper is gone (%s)",
					  n == 0 ? "end of file" : strerror(errno));
			break;
		}
		if (n <= 0) {
			r = cae_error_set(err, -ECONNRESET,
					  "cae-helper ended during the command (%s)",
					  n == 0 ? "end of file" : strerror(errno));
			break;
		}
		if (hdr_got < sizeof(hdr)) {
			hdr_got += (size_t)n;
			if (hdr[0] != CAE_HELPER_ACK) {
				r = cae_error_set(err, -EPROTO,
						  "cae-helper answer without acknowledgement");
				break;
			}
			if (hdr_got == sizeof(hdr)) {
				body_len = cae__helper_frame_length(hdr + 1);
				if (body_len > max_body || body_len == 0) {
					r = cae_error_set(err, -EPROTO,
							  "cae-helper answer of %u bytes refused",
							  body_len);
					break;
				}
				body = malloc(body_len);
				if (!body) {
					r = -ENOMEM;
					break;
				}
			}
		} else {
			body_got += (size_t)n;
		}
		if (hdr_got == sizeof(hdr) && body_got == body_len)
			break;
	}
	cae__buf_clear(&req);
	if (r < 0) {
		/* A helper that breaks the protocol or hangs is not trusted with another
		 * command: the owner stops it (cae_helper_stop kills what is left). */
		atomic_store(&h->dead, true);
		return r;
	}
	int status;
	r = cae__helper_decode_response(body, body_len, &status, res, err);
	if (r < 0) {
		atomic_store(&h->dead, true);
		return cae_error_set(err, -EPROTO, "cae-helper answer malformed: %s",
				     err ? err->message : "");
	}
	return status;
}

/* ---- a multiplexed stream to the sandbox's helper ---- */

static ssize_t sock_read(void *ctx, char *buf, size_t size)
{
	ssize_t n = recv(*(int *)ctx, buf, size, MSG_DONTWAIT);
	if (n < 0)
		return errno == EAGAIN || errno == EWOULDBLOCK ? -EAGAIN : -errno;
	return n;
}

static int sock_write(void *ctx, const void *p, size_t n)
{
	const char *c = p;
	while (n) {
		ssize_t w = send(*(int *)ctx, c, n, MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return w < 0 ? -errno : -EPIPE;
		c += w;
		n -= (size_t)w;
	}
	return 0;
}

static void sock_close(void *ctx)
{
	close(*(int *)ctx);
	free(ctx);
}

int cae_helper_open_mux(cae_helper *h, int64_t timeout_ms, cae_helper_mux **out, cae_error *err)
{
	if (!cae_helper_alive(h))
		return cae_error_set(err, -EPIPE, "cae-helper is gone");
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
		return cae_error_set(err, -errno, "socketpair: %s", strerror(errno));
	int r = cae__helper_send_fd(h->ctl, sv[1], CAE_HELPER_FD_STREAM);
	close(sv[1]);
	int *fd = r == 0 ? malloc(sizeof(int)) : NULL;
	if (!fd) {
		close(sv[0]);
		if (r == 0)
			return cae_error_set(err, -ENOMEM, "out of memory");
		atomic_store(&h->dead, true);
		return cae_error_set(err, -EPIPE, "cae-helper is gone: %s", strerror(-r));
	}
	*fd = sv[0];
	cae_helper_link link = {
	    .fd = sv[0], .read = sock_read, .write = sock_write, .close = sock_close, .ctx = fd};
	return cae_helper_mux_open(&link, timeout_ms, out, err);
}

/* The network proxy's listeners (helper side: net.c). */
int cae_helper_net_listeners(cae_helper *h, int64_t timeout_ms, int *http_fd, int *socks_fd,
			     cae_error *err)
{
	*http_fd = *socks_fd = -1;
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
		return cae_error_set(err, -errno, "socketpair: %s", strerror(errno));
	int r =
	    cae_helper_alive(h) ? cae__helper_send_fd(h->ctl, sv[1], CAE_HELPER_FD_NET) : -EPIPE;
	close(sv[1]);
	int got[2] = {-1, -1};
	for (int i = 0; r == 0 && i < 2; i++) {
		struct pollfd p = {.fd = sv[0], .events = POLLIN};
		if (poll(&p, 1, (int)timeout_ms) <= 0) {
			r = -ETIMEDOUT;
			break;
		}
		char kind = 0;
		int fd = cae__helper_recv_fd(sv[0], &kind);
		if (fd < 0) {
			r = fd == -1 ? -EPROTO : fd;
			break;
		}
		got[kind == 's'] = fd;
	}
	close(sv[0]);
	if (r == 0 && (got[0] < 0 || got[1] < 0))
		r = -EPROTO;
	if (r < 0) {
		for (int i = 0; i < 2; i++)
			if (got[i] >= 0)
				close(got[i]);
		return cae_error_set(err, r,
				     "the environment's helper could not listen for the proxy: %s",
				     strerror(-r));
	}
	*http_fd = got[0];
	*socks_fd = got[1];
	return 0;
}
