/* Port forwards (cae/helper.h): a loopback listener on the host whose connections are
 * carried over a helper's stream to a port in the environment (tun.c). One thread accepts;
 * each connection is a tunnel of the stream. */
#include "cae/helper.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/banned.h"

struct cae_helper_forward {
	cae_helper_mux *m;
	int port, host_port;
	int lfd;
	int stop[2]; /* closing stop[1] ends the thread */
	pthread_t thread;
};

static void *forward_main(void *arg)
{
	cae_helper_forward *f = arg;
	for (;;) {
		struct pollfd p[2] = {{.fd = f->stop[0], .events = POLLIN},
				      {.fd = f->lfd, .events = POLLIN}};
		if (poll(p, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			return NULL;
		}
		if (p[0].revents)
			return NULL;
		if (!(p[1].revents & POLLIN))
			continue;
		int fd = accept4(f->lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0)
			continue;
		(void)cae_helper_mux_connect(f->m, f->port, fd, NULL); /* fd taken over */
	}
}

int cae_helper_forward_open(cae_helper_mux *m, int port, cae_helper_forward **out, int *host_port,
			    cae_error *err)
{
	*out = NULL;
	if (port < 1 || port > 65535)
		return cae_error_set(err, -EINVAL, "port must be 1-65535, not %d", port);
	if (!cae_helper_mux_alive(m))
		return cae_error_set(err, -EPIPE, "cae-helper is gone");
	cae_helper_forward *f = calloc(1, sizeof(*f));
	if (!f)
		return cae_error_set(err, -ENOMEM, "out of memory");
	f->m = m;
	f->port = port;
	f->stop[0] = f->stop[1] = -1;
	f->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in sa = {.sin_family = AF_INET};
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	socklen_t sl = sizeof(sa);
	int r = 0;
	if (f->lfd < 0 || bind(f->lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    listen(f->lfd, 64) < 0 || getsockname(f->lfd, (struct sockaddr *)&sa, &sl) < 0 ||
	    pipe2(f->stop, O_CLOEXEC) < 0)
		r = -errno;
	else if ((r = pthread_create(&f->thread, NULL, forward_main, f)) != 0)
		r = -r;
	if (r < 0) {
		if (f->lfd >= 0)
			close(f->lfd);
		if (f->stop[0] >= 0) {
			close(f->stop[0]);
			close(f->stop[1]);
		}
		free(f);
		return cae_error_set(err, r, "cannot listen on 127.0.0.1 for the forward: %s",
				     strerror(-r));
	}
	f->host_port = ntohs(sa.sin_port);
	*host_port = f->host_port;
	*out = f;
	return 0;
}

int cae_helper_forward_port(const cae_helper_forward *f)
{
	return f->port;
}

int cae_helper_forward_host_port(const cae_helper_forward *f)
{
	return f->host_port;
}

void cae_helper_forward_close(cae_helper_forward *f)
{
	if (!f)
		return;
	close(f->stop[1]);
	pthread_join(f->thread, NULL);
	close(f->stop[0]);
	close(f->lfd);
	free(f);
}
