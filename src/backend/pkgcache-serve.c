/* The read-only shared caches served over HTTP (pkgcache.h: kubernetes): the shared Go
 * module proxy (<instance key>/go-mod) under /go-mod/, pip's wheels (<instance
 * key>/pip-wheels) under /pip-wheels/ and Maven's repository (<instance key>/maven) under
 * /maven/, to the connections a pod's helper accepts on
 * 127.0.0.1:CAE_PKGCACHE_SERVE_PORT and carries over its exec stream (src/helper/tun.c).
 * One request per connection (Connection: close), at most CAE_PKGCACHE_SERVE_ENV_CONNS at
 * once for one environment (its cae_pkgcache_share), GET and HEAD only, a head of at most
 * 64 KiB parsed by the proxy's parser (src/net/parse.c); a path of plain components
 * (letters, digits and - _ . + ! ~ @, none empty or starting with a dot: no "..", none of
 * the trees' .filled, .used or temporary files) opened beneath the tree's directory with
 * openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_XDEV), a regular file only;
 * /pip-wheels/ itself is an HTML page of links to its wheels (what pip needs of an http
 * find-links URL); under /maven/, only the names the fill publishes (a release's .jar or
 * .pom and its .sha1: no maven-metadata.xml, which Maven then asks its other remotes
 * for). Nothing is ever written: the trees are cae's, filled by cae alone. */
#include "backend/pkgcache.h"

#include "backend/chan.h"
#include "backend/net-local.h"
#include "base/buf.h"
#include "base/fs.h"
#include "base/macro.h"
#include "cae/helper.h"
#include "cae/log.h"
#include "cae/net.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <unistd.h>

#include "base/banned.h"

#define HEAD_MAX 65536

#define IO_TIMEOUT_S 30	    /* a client that sends or takes nothing for this long is dropped */
#define PAGE_MAX (4u << 20) /* the wheels' page */

static atomic_int serving; /* connections, every environment together */

struct cae_pkgcache_share {
	const cae_config *cfg;
	atomic_int conns;
	atomic_int refs;
};

cae_pkgcache_share *cae__pkgcache_share_new(const cae_config *cfg)
{
	cae_pkgcache_share *s = calloc(1, sizeof(*s));
	if (s) {
		s->cfg = cfg;
		atomic_init(&s->conns, 0);
		atomic_init(&s->refs, 1);
	}
	return s;
}

void cae__pkgcache_share_unref(cae_pkgcache_share *s)
{
	if (s && atomic_fetch_sub(&s->refs, 1) == 1)
		free(s);
}

/* the trees served, each under /<name>/ (conn.dir's order) */
static const char *const trees[] = {"go-mod", "pip-wheels", "maven"};

struct conn {
	int fd;			    /* the client */
	int dir[ARRAY_SIZE(trees)]; /* the trees' directories (O_PATH; -1: not there) */
	cae_pkgcache_share *share;
};

static bool component_ok(const char *s, size_t n)
{
	if (n == 0 || s[0] == '.')
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      strchr("-_.+!~@", c)))
			return false;
	}
	return true;
}

/* rel ("a/b/c", no leading slash) made only of plain components. */
static bool path_ok(const char *rel)
{
	if (!*rel)
		return false;
	for (const char *p = rel;;) {
		size_t n = strcspn(p, "/");
		if (!component_ok(p, n))
			return false;
		if (!p[n])
			return true;
		p += n + 1;
	}
}

static int reply(int fd, const char *status, const char *type, uint64_t len, bool head_only,
		 const char *body)
{
	char h[512];
	int n = snprintf(h, sizeof(h),
			 "HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %llu\r\n"
			 "Cache-Control: no-store\r\nConnection: close\r\n\r\n",
			 status, type, (unsigned long long)len);
	int r = cae__write_all(fd, h, (size_t)n);
	if (r == 0 && body && !head_only)
		r = cae__write_all(fd, body, (size_t)len);
	return r;
}

static int fail(int fd, const char *status)
{
	return reply(fd, status, "text/plain", 0, false, NULL);
}

static int open_file(int dir, const char *rel)
{
	struct open_how how = {
	    .flags = O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK,
	    .resolve =
		RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV,
	};
	long fd;
	do
		fd = syscall(SYS_openat2, dir, rel, &how, sizeof(how));
	while (fd < 0 && (errno == EINTR || errno == EAGAIN));
	return fd < 0 ? -errno : (int)fd;
}

/* The wheels' page: a link per regular *.whl file of dir (names checked as paths are). */
static int wheels_page(int dir, int fd, bool head_only)
{
	int d = open_file(dir, ".");
	if (d < 0)
		return fail(fd, "404 Not Found");
	DIR *dp = fdopendir(d);
	if (!dp) {
		close(d);
		return fail(fd, "500 Internal Server Error");
	}
	cae_buf b;
	cae__buf_init(&b, PAGE_MAX);
	int r = cae__buf_append(&b, "<!DOCTYPE html>\n<html><body>\n", 29);
	struct dirent *e;
	while (r == 0 && (e = readdir(dp))) {
		size_t n = strlen(e->d_name);
		struct stat st;
		if (n < 5 || strcmp(e->d_name + n - 4, ".whl") != 0 ||
		    !component_ok(e->d_name, n) ||
		    fstatat(dirfd(dp), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
		    !S_ISREG(st.st_mode))
			continue;
		r = cae__buf_append(&b, "<a href=\"", 9);
		r = r < 0 ? r : cae__buf_append(&b, e->d_name, n);
		r = r < 0 ? r : cae__buf_append(&b, "\">", 2);
		r = r < 0 ? r : cae__buf_append(&b, e->d_name, n);
		r = r < 0 ? r : cae__buf_append(&b, "</a><br>\n", 9);
	}
	closedir(dp);
	r = r < 0 ? r : cae__buf_append(&b, "</body></html>\n", 15);
	r = r < 0 ? fail(fd, "500 Internal Server Error")
		  : reply(fd, "200 OK", "text/html", b.len, head_only, b.data);
	cae__buf_clear(&b);
	return r;
}

static int serve_file(int dir, const char *rel, int fd, bool head_only)
{
	int f = open_file(dir, rel);
	struct stat st;
	if (f < 0 || fstat(f, &st) < 0 || !S_ISREG(st.st_mode)) {
		if (f >= 0)
			close(f);
		return fail(fd, "404 Not Found");
	}
	const char *type = strstr(rel, ".info") ? "application/json" : "application/octet-stream";
	int r = reply(fd, "200 OK", type, (uint64_t)st.st_size, head_only, NULL);
	off_t off = 0;
	while (r == 0 && !head_only && off < st.st_size) {
		ssize_t k = sendfile(fd, f, &off, (size_t)MIN(st.st_size - off, (off_t)1 << 20));
		if (k <= 0)
			r = k < 0 && errno == EINTR ? 0 : -EIO;
	}
	close(f);
	return r;
}

/* One request: its method and target from the head the parser rewrote. */
static void serve(struct conn *c)
{
	char *buf = malloc(HEAD_MAX);
	if (!buf)
		return;
	size_t have = 0;
	cae_net_request req;
	for (;;) {
		memset(&req, 0, sizeof(req));
		cae_net_parse_request(buf, have, false, &req);
		if (req.kind != CAE_NET_REQ_INCOMPLETE || have == HEAD_MAX)
			break;
		ssize_t n = read(c->fd, buf + have, HEAD_MAX - have);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			goto out;
		have += (size_t)n;
	}
	if (req.kind != CAE_NET_REQ_FORWARD || !req.head) {
		(void)fail(c->fd, "400 Bad Request");
		goto out;
	}
	/* the head as the parser rewrote it: "METHOD TARGET HTTP/1.x\r\n..." */
	char *sp = strchr(req.head, ' ');
	char *target = sp ? sp + 1 : NULL;
	char *end = target ? strchr(target, ' ') : NULL;
	if (!end) {
		(void)fail(c->fd, "400 Bad Request");
		goto out;
	}
	*sp = *end = '\0';
	bool head_only = strcmp(req.head, "HEAD") == 0;
	if (!head_only && strcmp(req.head, "GET") != 0) {
		(void)fail(c->fd, "405 Method Not Allowed");
		goto out;
	}
	target[strcspn(target, "?#")] = '\0';
	int which = -1;
	const char *rel = NULL;
	for (int i = 0; i < (int)ARRAY_SIZE(trees) && which < 0; i++) {
		size_t n = strlen(trees[i]);
		if (target[0] == '/' && strncmp(target + 1, trees[i], n) == 0 &&
		    target[n + 1] == '/') {
			which = i;
			rel = target + n + 2;
		}
	}
	if (which < 0 || c->dir[which] < 0)
		(void)fail(c->fd, "404 Not Found");
	else if (which == 1 && !*rel)
		(void)wheels_page(c->dir[1], c->fd, head_only);
	else if (!path_ok(rel) || (which == 2 && !cae__pkgcache_maven_file_ok(rel)))
		(void)fail(c->fd, "404 Not Found");
	else
		(void)serve_file(c->dir[which], rel, c->fd, head_only);
out:
	free(req.head);
	free(buf);
}

static void conn_free(struct conn *c)
{
	close(c->fd);
	for (size_t i = 0; i < ARRAY_SIZE(c->dir); i++)
		if (c->dir[i] >= 0)
			close(c->dir[i]);
	atomic_fetch_sub(&c->share->conns, 1);
	cae__pkgcache_share_unref(c->share);
	free(c);
	atomic_fetch_sub(&serving, 1);
}

static void *conn_main(void *ud)
{
	struct conn *c = ud;
	serve(c);
	(void)shutdown(c->fd, SHUT_WR);
	conn_free(c);
	return NULL;
}

int cae__pkgcache_serve_conn(void *ud, char kind, int fd)
{
	(void)kind; /* the helper's one listener, the cache's port */
	cae_pkgcache_share *share = ud;
	const cae_config *cfg = share->cfg;
	if (atomic_fetch_add(&share->conns, 1) >= CAE_PKGCACHE_SERVE_ENV_CONNS) {
		atomic_fetch_sub(&share->conns, 1);
		close(fd);
		return -EAGAIN;
	}
	if (atomic_fetch_add(&serving, 1) >= CAE_PKGCACHE_SERVE_CONNS) {
		atomic_fetch_sub(&serving, 1);
		atomic_fetch_sub(&share->conns, 1);
		close(fd);
		return -EAGAIN;
	}
	struct conn *c = calloc(1, sizeof(*c));
	if (!c) {
		atomic_fetch_sub(&serving, 1);
		atomic_fetch_sub(&share->conns, 1);
		close(fd);
		return -ENOMEM;
	}
	atomic_fetch_add(&share->refs, 1);
	c->share = share;
	c->fd = fd;
	/* the trees' directories now (the thread touches no configuration) */
	for (size_t i = 0; i < ARRAY_SIZE(c->dir); i++) {
		char dir[PATH_MAX];
		c->dir[i] =
		    cae__pkgcache_shared_dir(cfg, trees[i], false, dir, sizeof(dir), NULL) == 1
			? open(dir, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
			: -1;
	}
	struct timeval tv = {.tv_sec = IO_TIMEOUT_S};
	(void)setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	(void)setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	pthread_t t;
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	int r = pthread_create(&t, &attr, conn_main, c);
	pthread_attr_destroy(&attr);
	if (r != 0) {
		conn_free(c);
		return -r;
	}
	return 0;
}

void cae__pkgcache_serve_env(int port, char env[CAE_PKGCACHE_SERVE_ENV_N][4200],
			     const char *envp[CAE_PKGCACHE_SERVE_ENV_N + 1])
{
	/* the operator's proxy after ours, as on the other backends: what ours lacks (a 404) */
	const char *gomod = cae__pkgcache_gomod_env();
	const char *rest = strchr(gomod, ',');
	snprintf(env[0], 4200, "GOPROXY=http://127.0.0.1:%d/go-mod%s", port, rest ? rest : "");
	snprintf(env[1], 4200, "PIP_FIND_LINKS=http://127.0.0.1:%d/pip-wheels/", port);
	/* what makes the profile of cae's Maven settings active, and its URL (pkgcache-maven.c) */
	snprintf(env[2], 4200, CAE_PKGCACHE_SERVE_URL_ENV "=http://127.0.0.1:%d", port);
	size_t n = 0;
	envp[n++] = env[0];
	envp[n++] = env[1];
	envp[n++] = env[2];
	/* PIP_INDEX_URL of cae's environment, as the other backends pass it */
	for (const char *const *e = cae__pkgcache_pip_env(); *e; e++)
		if (strncmp(*e, "PIP_INDEX_URL=", 14) == 0 && n < CAE_PKGCACHE_SERVE_ENV_N)
			envp[n++] = *e;
	envp[n] = NULL;
}

void cae__pkgcache_serve_start(cae_chan *c)
{
	cae_backend *b = c->t->b;
	if (!c->m || c->px || !c->t->ops->serve_caches ||
	    !b->cfg->command_executor.package_cache.enabled)
		return;
	cae_error e = {0};
	if (!c->share && !(c->share = cae__pkgcache_share_new(b->cfg)))
		return;
	/* the same port twice: one listener, which no other socket may share (on a node's
	 * network, another pod's task of the same uid could otherwise join it with
	 * SO_REUSEPORT and answer some of this pod's requests); on a node's network the ports
	 * are the node's, and the pods there take the first free one of the range, each
	 * pointed at its own by its variables */
	int r = -EADDRINUSE;
	for (int i = 0; r == -EADDRINUSE && i < CAE_PKGCACHE_SERVE_PORTS; i++) {
		char env[CAE_PKGCACHE_SERVE_ENV_N][4200];
		const char *envp[CAE_PKGCACHE_SERVE_ENV_N + 1];
		int port = CAE_PKGCACHE_SERVE_PORT + i;
		cae__pkgcache_serve_env(port, env, envp);
		cae_error_clear(&e);
		r = cae_helper_mux_net_listen(c->m, port, port, envp, cae__pkgcache_serve_conn,
					      c->share, &e);
	}
	if (r < 0) {
		char event[64];
		snprintf(event, sizeof(event), "%s.package_cache_unavailable", b->ops->name);
		cae_log_fields(b->log, CAE_LOG_WARN, event,
			       json_pack("{s:s}", "task_uuid", c->uuid),
			       "the %s's shared package caches are not served (%s)",
			       c->t->ops->what, e.message);
	}
}

void cae__pkgcache_serve_stop(cae_chan *c)
{
	cae__pkgcache_share_unref(c->share);
	c->share = NULL;
}

void cae__pkgcache_pod_fill(cae_prepare *p)
{
	/* cae's fills act for the task: only for a pod that has the network itself */
	if (!p->b->cfg->command_executor.package_cache.enabled ||
	    !cae__net_full(p->b->cfg, p->b->ops->name))
		return;
	cae_error e = {0};
	if (cae__pkgcache_gomod_pod(p, &e) < 0) {
		char w[1200];
		snprintf(w, sizeof(w), "the shared Go module cache is not filled: %.1100s",
			 e.message);
		cae__prepare_warn(p, "package_cache.unavailable", w);
	}
	cae_error_clear(&e);
	if (cae__pkgcache_pip_pod(p, &e) < 0) {
		char w[1200];
		snprintf(w, sizeof(w), "the shared pip wheels are not filled: %.1100s", e.message);
		cae__prepare_warn(p, "package_cache.unavailable", w);
	}
}
