/* The proxy's listeners of a container handed over a unix socket (net-handover.h). */
#include "backend/net-handover.h"

#include "base/macro.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "base/banned.h"

/* Connections looked at for the helper's, at most (others, an attacker's, are closed). */
#define MAX_TRIES 16

char *cae__net_handover_dir(const char *state_dir, const char *uuid)
{
	char *d = NULL;
	if (!state_dir || !uuid || !*uuid || strchr(uuid, '/') || uuid[0] == '.' ||
	    asprintf(&d, "%s/net/%s", state_dir, uuid) < 0)
		return NULL;
	return d;
}

/* path, a directory of this user's of mode `mode` (made when missing; not a symlink). */
static int own_dir(const char *path, mode_t mode)
{
	if (mkdir(path, mode) < 0 && errno != EEXIST)
		return -errno;
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	struct stat st;
	int r = fstat(fd, &st) < 0 ? -errno : 0;
	if (r == 0 && st.st_uid != geteuid())
		r = -EPERM;
	if (r == 0 && (st.st_mode & 07777) != mode && fchmod(fd, mode) < 0)
		r = -errno;
	close(fd);
	return r;
}

int cae__net_handover_dir_make(const char *state_dir, const char *uuid, char **out)
{
	*out = NULL;
	_cleanup_free_ char *d = cae__net_handover_dir(state_dir, uuid);
	_cleanup_free_ char *parent = NULL;
	if (!d || asprintf(&parent, "%s/net", state_dir) < 0)
		return -ENOMEM;
	(void)mkdir(state_dir, 0700);
	int r = own_dir(parent, 0700);
	if (r == 0)
		r = own_dir(d, 0711);
	if (r == 0)
		*out = TAKE_PTR(d);
	return r;
}

void cae__net_handover_dir_remove(const char *state_dir, const char *uuid)
{
	_cleanup_free_ char *d = cae__net_handover_dir(state_dir, uuid);
	int fd = d ? open(d, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) : -1;
	if (fd < 0)
		return;
	DIR *dir = fdopendir(fd);
	if (!dir) {
		close(fd);
		return;
	}
	struct dirent *e;
	while ((e = readdir(dir)))
		if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
			(void)unlinkat(dirfd(dir), e->d_name, 0);
	closedir(dir);
	(void)rmdir(d);
}

int cae__net_handover_sweep(const char *state_dir, bool (*gone)(const char *name, void *ud),
			    void *ud)
{
	_cleanup_free_ char *root = NULL;
	if (!state_dir || asprintf(&root, "%s/net", state_dir) < 0)
		return 0;
	DIR *d = opendir(root);
	if (!d)
		return 0;
	int n = 0;
	time_t now = time(NULL);
	struct dirent *e;
	while ((e = readdir(d))) {
		struct stat st;
		if (e->d_name[0] == '.' ||
		    fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
		    !S_ISDIR(st.st_mode) || now - st.st_mtime < 60 || !gone(e->d_name, ud))
			continue;
		cae__net_handover_dir_remove(state_dir, e->d_name);
		n++;
	}
	closedir(d);
	return n;
}

static void hex(char *out, const unsigned char *b, size_t n)
{
	static const char digits[] = "0123456789abcdef";
	for (size_t i = 0; i < n; i++) {
		out[2 * i] = digits[b[i] >> 4];
		out[2 * i + 1] = digits[b[i] & 15];
	}
	out[2 * n] = '\0';
}

int cae__net_handover_open(const char *dir, cae__net_handover *h)
{
	*h = (cae__net_handover){.dirfd = -1, .lfd = -1};
	unsigned char rnd[24];
	if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
		return -EIO;
	char nm[17];
	hex(nm, rnd, 8);
	hex(h->token, rnd + 8, 16);
	snprintf(h->name, sizeof(h->name), "p-%s", nm);
	snprintf(h->path, sizeof(h->path), "%s/%s", CAE_NET_HANDOVER_MOUNT, h->name);
	h->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (h->dirfd < 0)
		return -errno;
	/* bound through the directory's descriptor: no path length limit, no symlink */
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	snprintf(sa.sun_path, sizeof(sa.sun_path), "/proc/self/fd/%d/%s", h->dirfd, h->name);
	h->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	int r = h->lfd < 0 ? -errno : 0;
	if (r == 0 && bind(h->lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		r = -errno;
	/* the container's user is not this one: it may connect (the token says who it is) */
	if (r == 0 && (fchmodat(h->dirfd, h->name, 0666, 0) < 0 || listen(h->lfd, 8) < 0)) {
		r = -errno;
		(void)unlinkat(h->dirfd, h->name, 0);
	}
	if (r < 0) {
		if (h->lfd >= 0)
			close(h->lfd);
		close(h->dirfd);
		*h = (cae__net_handover){.dirfd = -1, .lfd = -1};
	}
	return r;
}

void cae__net_handover_close(cae__net_handover *h)
{
	if (h->lfd >= 0) {
		(void)unlinkat(h->dirfd, h->name, 0);
		close(h->lfd);
	}
	if (h->dirfd >= 0)
		close(h->dirfd);
	h->lfd = h->dirfd = -1;
}

/* fd is a TCP socket listening on 127.0.0.1:port. */
static bool loopback_listener(int fd, int port)
{
	struct stat st;
	if (fstat(fd, &st) < 0 || !S_ISSOCK(st.st_mode))
		return false;
	int v = 0;
	socklen_t l = sizeof(v);
	if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &v, &l) < 0 || v != AF_INET)
		return false;
	l = sizeof(v);
	if (getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &v, &l) < 0 || v != IPPROTO_TCP)
		return false;
	l = sizeof(v);
	if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &v, &l) < 0 || v != 1)
		return false;
	struct sockaddr_in sa;
	l = sizeof(sa);
	return getsockname(fd, (struct sockaddr *)&sa, &l) == 0 && l == sizeof(sa) &&
	       sa.sin_family == AF_INET && sa.sin_addr.s_addr == htonl(INADDR_LOOPBACK) &&
	       ntohs(sa.sin_port) == port;
}

/* One waiting connection's message: the token and two descriptors; 0 with fds[] set, or -1
 * (whatever came is closed). */
static int receive(int c, const char *token, int fds[2])
{
	char data[64];
	struct iovec iov = {.iov_base = data, .iov_len = sizeof(data)};
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(4 * sizeof(int))];
	} u;
	memset(&u, 0, sizeof(u));
	struct msghdr m = {.msg_iov = &iov,
			   .msg_iovlen = 1,
			   .msg_control = u.buf,
			   .msg_controllen = sizeof(u.buf)};
	ssize_t n = recvmsg(c, &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
	int got[4], k = 0;
	for (struct cmsghdr *h = n >= 0 ? CMSG_FIRSTHDR(&m) : NULL; h; h = CMSG_NXTHDR(&m, h)) {
		if (h->cmsg_level != SOL_SOCKET || h->cmsg_type != SCM_RIGHTS)
			continue;
		size_t nfd = (h->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < nfd; i++) {
			int fd;
			memcpy(&fd, CMSG_DATA(h) + i * sizeof(int), sizeof(int));
			if (k < 4)
				got[k++] = fd;
			else
				close(fd);
		}
	}
	/* the token compared in full whatever differs */
	unsigned char diff = n == 32 ? 0 : 1;
	for (size_t i = 0; n == 32 && i < 32; i++)
		diff |= (unsigned char)(data[i] ^ token[i]);
	if (diff || k != 2 || (m.msg_flags & (MSG_CTRUNC | MSG_TRUNC))) {
		for (int i = 0; i < k; i++)
			close(got[i]);
		return -1;
	}
	fds[0] = got[0];
	fds[1] = got[1];
	return 0;
}

int cae__net_handover_take(cae__net_handover *h, cae_net_proxy *px, int http_port, int socks_port)
{
	int done = 0;
	/* the helper connected and sent before it answered: its connection is waiting */
	for (int i = 0; h->lfd >= 0 && !done && i < MAX_TRIES; i++) {
		int c = accept4(h->lfd, NULL, NULL, SOCK_CLOEXEC);
		if (c < 0)
			break;
		int fds[2];
		if (receive(c, h->token, fds) < 0) {
			close(c);
			continue;
		}
		if (!loopback_listener(fds[0], http_port) ||
		    !loopback_listener(fds[1], socks_port)) {
			close(fds[0]);
			close(fds[1]);
			close(c);
			continue;
		}
		int r = cae_net_proxy_listen_fd(px, fds[0]); /* taken over, also on failure */
		if (r == 0)
			r = cae_net_proxy_listen_fd(px, fds[1]);
		else
			close(fds[1]);
		/* without the acknowledgement the helper goes on accepting too */
		if (r == 0 && send(c, "k", 1, MSG_NOSIGNAL | MSG_DONTWAIT) == 1)
			done = 1;
		close(c);
		break;
	}
	cae__net_handover_close(h);
	return done;
}
