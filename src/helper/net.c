/* The helper's half of an environment's filtered network (cae/net.h). In the local
 * sandbox (CAE_HELPER_FD_NET): asked over the
 * channel, the helper (inside the environment's empty network namespace) makes the
 * listening sockets 127.0.0.1:3128 (HTTP proxy) and 127.0.0.1:1080 (SOCKS5) and hands them
 * to the manager, which accepts on them and runs the proxy: no connection passes through
 * the helper, and none is made by it. The manager's half is cae_helper_net_listeners
 * (client.c). In a container or pod, the stream helper listens itself and carries each
 * connection over its channel (stream.c, tun.c), unless its manager takes the listeners
 * over a unix socket it can reach (cae__helper_net_handover; src/backend/net-handover.h). */
#include "cae/helper.h"

#include "base/macro.h"
#include "helper/proto.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "base/banned.h"

int cae__helper_listen_loopback(int port, bool share)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	int one = 1;
	if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
	    (share && setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) < 0)) {
		int e = -errno;
		close(fd);
		return e;
	}
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 128) < 0) {
		int e = -errno;
		close(fd);
		return e;
	}
	return fd;
}

int cae__helper_net_listen(int fd, int http_port, int socks_port)
{
	int h = cae__helper_listen_loopback(http_port, false);
	if (h < 0)
		return h;
	int s = cae__helper_listen_loopback(socks_port, false);
	int r = s < 0 ? s : cae__helper_send_fd(fd, h, 'h');
	if (r == 0)
		r = cae__helper_send_fd(fd, s, 's');
	close(h);
	if (s >= 0)
		close(s);
	return r;
}

int cae__helper_net_handover(const char *path, const char *token, int hfd, int sfd)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	size_t pl = strlen(path), tl = strlen(token);
	if (pl >= sizeof(sa.sun_path) || tl == 0 || tl > 64)
		return -EINVAL;
	memcpy(sa.sun_path, path, pl);
	int c = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (c < 0)
		return -errno;
	struct iovec iov = {.iov_base = (void *)token, .iov_len = tl};
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(2 * sizeof(int))];
	} u;
	memset(&u, 0, sizeof(u));
	struct msghdr m = {.msg_iov = &iov,
			   .msg_iovlen = 1,
			   .msg_control = u.buf,
			   .msg_controllen = sizeof(u.buf)};
	struct cmsghdr *h = CMSG_FIRSTHDR(&m);
	h->cmsg_level = SOL_SOCKET;
	h->cmsg_type = SCM_RIGHTS;
	h->cmsg_len = CMSG_LEN(2 * sizeof(int));
	int fds[2] = {hfd, sfd};
	memcpy(CMSG_DATA(h), fds, sizeof(fds));
	/* a unix connection is made at once (or refused: a full backlog, no manager there) */
	if (connect(c, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    sendmsg(c, &m, MSG_NOSIGNAL | MSG_DONTWAIT) != (ssize_t)tl) {
		int e = -errno;
		close(c);
		return e < 0 ? e : -EIO;
	}
	return c;
}
