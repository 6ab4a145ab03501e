/* The helper's half of an environment's filtered network (cae/net.h): asked over the
 * channel, the helper (inside the environment's empty network namespace) makes the
 * listening sockets 127.0.0.1:3128 (HTTP proxy) and 127.0.0.1:1080 (SOCKS5) and hands them
 * to the manager, which accepts on them and runs the proxy: no connection passes through
 * the helper, and none is made by it. The manager's half is cae_helper_net_listeners
 * (client.c). */
#include "cae/helper.h"

#include "base/macro.h"
#include "helper/proto.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/banned.h"

static int listen_loopback(int port)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
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
	int h = listen_loopback(http_port);
	if (h < 0)
		return h;
	int s = listen_loopback(socks_port);
	int r = s < 0 ? s : cae__helper_send_fd(fd, h, 'h');
	if (r == 0)
		r = cae__helper_send_fd(fd, s, 's');
	close(h);
	if (s >= 0)
		close(s);
	return r;
}
