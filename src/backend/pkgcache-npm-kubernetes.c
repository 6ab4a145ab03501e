/* The shared node_modules trees on the kubernetes backend (pkgcache.h): the pod's
 * node_modules after the prepare's `npm ci` streamed out of the pod as a tar and kept
 * sealed on this host beside the other backends' trees, and put into a new pod of the same
 * lock file and image instead of running `npm ci` again.
 *
 * A pod is not on this host: both sides go over an API server exec into the main
 * container, as the pod's user (snapshot-kubernetes.c streams its archives the same way).
 * The store reads the tar that the image's tar wrote of what npm made, in a pod where
 * nothing else of the task's ran, as untrusted bytes: cae__pkgcache_npm_extract creates
 * each entry itself beneath the store's own directory, opening every directory on the way
 * without following a link. The put sends a tar cae made from the store on the exec's
 * stdin (`head -c SIZE`: the exec protocol cannot end stdin), extracted by the pod's tar at
 * the project once the same shell has seen that it has no node_modules. */
#include "backend/pkgcache.h"

#include "backend/backend-internal.h"
#include "backend/snapshot.h"
#include "base/fs.h"
#include "base/macro.h"
#include "base/timeutil.h"
#include "cae/k8s.h"
#include "cae/log.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/banned.h"

#define MAIN "main" /* as backend-kubernetes.c */
#define UID 1000    /* the pod's user (backend-kubernetes.c) */
#define EXEC_OPEN_MS 30000
#define IDLE_MS (5 * 60 * 1000) /* a stream that moves no byte for this long fails */
#define CHUNK (256 * 1024)

/* $1: the project. The tar of its node_modules on stdout (the link itself, if it is one). */
static const char take_script[] = "cd \"$1\" || exit 3\nexec tar -cf - node_modules\n";

/* $1: the project, $2: the tar's size, on stdin. Extracted only where no node_modules is. */
static const char put_script[] = "cd \"$1\" || exit 3\n"
				 "if [ -e node_modules ] || [ -L node_modules ]; then exit 3; fi\n"
				 "head -c \"$2\" | tar -xf - --no-same-owner || exit 4\n"
				 "echo put\n";

/* Waits until s has stdout bytes or its end (IDLE_MS at most), or cancel_fd is readable. */
static int wait_readable(cae_k8s_stream *s, int cancel_fd)
{
	struct pollfd p[2] = {{.fd = cae_k8s_stream_fd(s), .events = POLLIN},
			      {.fd = cancel_fd, .events = POLLIN}};
	int n;
	do
		n = poll(p, cancel_fd >= 0 ? 2 : 1, IDLE_MS);
	while (n < 0 && errno == EINTR);
	if (n > 0 && cancel_fd >= 0 && (p[1].revents & POLLIN))
		return -ECANCELED;
	return n < 0 ? -errno : n == 0 ? -ETIMEDOUT : 0;
}

/* The rest of s's stdout into fd (-1: dropped), at most max bytes, then its exit code: 0,
 * or -errno with err set (what: the exec, for the message). */
static int drain(cae_k8s_stream *s, int fd, uint64_t max, int cancel_fd, const char *what,
		 cae_error *err)
{
	_cleanup_free_ char *buf = malloc(CHUNK);
	if (!buf)
		return cae_error_set(err, -ENOMEM, "out of memory");
	uint64_t total = 0;
	int r = 0;
	for (;;) {
		ssize_t n = cae_k8s_stream_read(s, buf, CHUNK);
		if (n == -EAGAIN) {
			if ((r = wait_readable(s, cancel_fd)) < 0)
				return cae_error_set(err, r, "%s: %s", what, strerror(-r));
			continue;
		}
		if (n < 0)
			return cae_error_set(err, (int)n, "%s: %s", what, strerror((int)-n));
		if (n == 0)
			break;
		if ((total += (uint64_t)n) > max)
			return cae_error_set(err, -EFBIG, "%s: more than %llu bytes", what,
					     (unsigned long long)max);
		if (fd >= 0 && (r = cae__write_all(fd, buf, (size_t)n)) < 0)
			return cae_error_set(err, r, "%s: %s", what, strerror(-r));
	}
	int code = -1;
	cae_error e = {0};
	if ((r = cae_k8s_stream_status(s, &code, &e)) < 0)
		return cae_error_set(err, r == -EAGAIN ? -EIO : r, "%s: %s", what,
				     e.message[0] ? e.message : "the exec said no status");
	if (code != 0)
		return cae_error_set(err, code == 3 ? -EEXIST : -EIO, "%s (exit code %d): %.400s",
				     what, code, cae_k8s_stream_stderr(s));
	return 0;
}

int cae__pkgcache_npm_k8s_take(cae_backend *b, const char *pod, const char *dir, int root,
			       int cancel_fd, cae_error *err)
{
	const char *ns;
	cae_k8s *k = cae__k8s_client(b, &ns);
	char trees[PATH_MAX];
	int r = cae__pkgcache_npm_trees_dir(b->cfg, trees, sizeof(trees), err);
	if (r < 0)
		return r;
	_cleanup_close_ int fd = cae__pkgcache_npm_archive_file(trees, err);
	if (fd < 0)
		return fd;
	const char *argv[] = {"sh", "-c", take_script, "cae-npm-tree", dir, NULL};
	cae_k8s_stream *s = NULL;
	if ((r = cae_k8s_exec_open(k, ns, pod, MAIN, argv, EXEC_OPEN_MS, &s, err)) < 0)
		return cae_error_prefix(err, "the node_modules tar's exec");
	r = drain(s, fd, CAE_PKGCACHE_NPM_ARCHIVE_MAX, cancel_fd, "tar of node_modules in the pod",
		  err);
	cae_k8s_stream_close(s);
	if (r < 0)
		return r;
	if (lseek(fd, 0, SEEK_SET) < 0)
		return cae_error_set(err, -errno, "%s", strerror(errno));
	/* the pod's tar: untrusted */
	if ((r = cae__pkgcache_npm_extract(fd, root)) < 0)
		return cae_error_set(err, r, "the pod's tar of %s/node_modules: %s", dir,
				     strerror(-r));
	return 0;
}

/* The tree's key for the pod's project (pkgcache.h), *key NULL when it has none; *pod its
 * name. */
static int k8s_key(cae_prepare *p, bool installed, char pod[256], char **key, size_t *len,
		   char name[17], cae_error *err)
{
	*key = NULL;
	json_t *obj = NULL;
	int r = cae__k8s_get_pod(p->b, p->task->uuid, &obj, err);
	if (r < 0)
		return r;
	/* node and npm are the image's: the id the kubelet ran */
	const char *image = NULL,
		   *n =
		       json_string_value(json_object_get(json_object_get(obj, "metadata"), "name"));
	size_t i;
	json_t *c;
	json_array_foreach(json_object_get(json_object_get(obj, "status"), "containerStatuses"), i,
			   c)
	{
		const char *cn = json_string_value(json_object_get(c, "name"));
		if (cn && strcmp(cn, MAIN) == 0)
			image = json_string_value(json_object_get(c, "imageID"));
	}
	char head[640];
	bool ok = n && image && image[0] && strlen(image) < 512 && !strchr(image, '\n') &&
		  strlen(n) < 256;
	if (ok) {
		snprintf(pod, 256, "%s", n);
		snprintf(head, sizeof(head), "cae-npm-tree-kubernetes 1\n%s\n", image);
	}
	json_decref(obj);
	return ok ? cae__pkgcache_npm_exec_key(p, head, installed, key, len, name, err) : 0;
}

/* After the prepare's `npm ci` (nothing else of the task's ran in the pod): its
 * node_modules kept as the shared tree of its lock file. 1 kept; 0 not eligible or already
 * there; -errno with err set. */
static int k8s_store(cae_prepare *p, cae_error *err)
{
	_cleanup_free_ char *key = NULL;
	size_t klen = 0;
	char name[17], pod[256];
	int r = k8s_key(p, true, pod, &key, &klen, name, err);
	if (r < 0 || !key)
		return r;
	char trees[PATH_MAX], tmp[PATH_MAX + 64], path[PATH_MAX + 96];
	if ((r = cae__pkgcache_npm_trees_dir(p->b->cfg, trees, sizeof(trees), err)) < 0)
		return r;
	int lock;
	if ((r = cae__pkgcache_npm_tree_begin(trees, name, key, klen, tmp, sizeof(tmp), &lock,
					      err)) <= 0)
		return r;
	snprintf(path, sizeof(path), "%s/node_modules", tmp);
	int root = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (root < 0)
		r = cae_error_set(err, -errno, "%s: %s", path, strerror(errno));
	else {
		r = cae__pkgcache_npm_k8s_take(p->b, pod, p->project, root, p->cancel_fd, err);
		close(root);
	}
	int end = cae__pkgcache_npm_tree_end(trees, name, tmp, r, lock);
	if (r == 0 && end < 0)
		return cae_error_set(err, end, "cannot keep the pod's node_modules: %s",
				     strerror(-end));
	return r < 0 ? r : 1;
}

static void k8s_keep(void *ctx)
{
	cae_prepare *p = ctx;
	cae_error e;
	cae_error_clear(&e);
	if (k8s_store(p, &e) < 0)
		cae_log_fields(
		    p->b->log, CAE_LOG_WARN, "kubernetes.npm_tree_not_kept",
		    json_pack("{s:s, s:s}", "task_uuid", p->task->uuid, "error", e.message),
		    "the pod's node_modules was not kept as a shared tree");
}

/* The tree of trees/name put at the pod's project over stdin of one exec. */
static int k8s_put_tree(cae_prepare *p, const char *pod, const char *trees, const char *name,
			cae_error *err)
{
	_cleanup_close_ int fd = cae__pkgcache_npm_archive_file(trees, err);
	if (fd < 0)
		return fd;
	off_t size;
	int r = cae__pkgcache_npm_pack(trees, name, fd, UID, UID);
	if (r < 0 || (size = lseek(fd, 0, SEEK_END)) < 0 || lseek(fd, 0, SEEK_SET) < 0)
		return cae_error_set(err, r < 0 ? r : -errno,
				     "cannot read the shared tree %s/%s: %s", trees, name,
				     strerror(r < 0 ? -r : errno));
	const char *ns;
	cae_k8s *k = cae__k8s_client(p->b, &ns);
	char n[32];
	snprintf(n, sizeof(n), "%lld", (long long)size);
	const char *argv[] = {"sh", "-c", put_script, "cae-npm-tree", p->project, n, NULL};
	cae_k8s_stream *s = NULL;
	if ((r = cae_k8s_exec_open(k, ns, pod, MAIN, argv, EXEC_OPEN_MS, &s, err)) < 0)
		return cae_error_prefix(err, "the node_modules tar's exec");
	_cleanup_free_ char *buf = malloc(CHUNK);
	if (!buf)
		r = cae_error_set(err, -ENOMEM, "out of memory");
	bool sent = r == 0;
	for (off_t left = size; sent && left > 0;) {
		ssize_t got = read(fd, buf, left < CHUNK ? (size_t)left : CHUNK);
		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0) {
			r = cae_error_set(err, got < 0 ? -errno : -EIO, "the shared tree's tar: %s",
					  got < 0 ? strerror(errno) : "short read");
			break;
		}
		left -= got;
		if ((r = cae_k8s_stream_write(s, buf, (size_t)got)) < 0) {
			/* the shell may have ended first: its exit code says why */
			sent = false;
			cae_error_set(err, r, "the node_modules tar's stream: %s", strerror(-r));
		}
	}
	if (buf && (r == 0 || !sent)) {
		cae_error e = {0};
		int d = drain(s, -1, 4096, p->cancel_fd, "tar -x of node_modules in the pod", &e);
		if (r == 0 || d == -EEXIST) {
			r = d;
			if (d < 0)
				*err = e;
		}
	}
	cae_k8s_stream_close(s);
	return r;
}

/* In place of the prepare's `npm ci`: the tree of the project's key put there. 1 in place
 * (p->deps_opts says so); 0 none for this key (*eligible: one may be kept after npm ci);
 * -errno with err set (what was put removed). */
static int k8s_put(cae_prepare *p, bool *eligible, cae_error *err)
{
	int64_t t0 = cae__now_ms();
	_cleanup_free_ char *key = NULL;
	size_t klen = 0;
	char name[17], trees[PATH_MAX], pod[256];
	*eligible = false;
	int r = k8s_key(p, false, pod, &key, &klen, name, err);
	if (r < 0 || !key)
		return r;
	*eligible = true;
	if ((r = cae__pkgcache_npm_trees_dir(p->b->cfg, trees, sizeof(trees), err)) < 0)
		return r;
	/* the same bytes, not only the same name */
	if (!cae__pkgcache_npm_tree_is(trees, name, key, klen))
		return 0;
	if ((r = k8s_put_tree(p, pod, trees, name, err)) < 0) {
		/* a node_modules that was there already is not this put's */
		if (r != -EEXIST)
			cae__pkgcache_npm_exec_remove(p);
		return r;
	}
	cae__pkgcache_npm_used(trees);
	p->deps_opts.npm_tree_linked = true;
	p->deps_opts.npm_tree_ms = cae__now_ms() - t0;
	return 1;
}

void cae__pkgcache_npm_k8s(cae_prepare *p)
{
	/* (in place of the prepare's npm ci: none without the dependency step) */
	const cae_config *cfg = p->b->cfg;
	if (!cfg->command_executor.package_cache.enabled ||
	    !cfg->command_executor.clone.auto_install_deps || p->given_as_is)
		return;
	cae_error e;
	cae_error_clear(&e);
	bool eligible = false;
	int r = k8s_put(p, &eligible, &e);
	if (r < 0) {
		char w[1200];
		snprintf(w, sizeof(w), "the shared node_modules is not used: %.1100s", e.message);
		cae__prepare_warn(p, "package_cache.unavailable", w);
	}
	if (r == 0 && eligible) {
		p->deps_opts.npm_installed = k8s_keep;
		p->deps_opts.npm_installed_ctx = p;
	}
}
