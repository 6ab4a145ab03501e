/* Go's shared build cache on the kubernetes backend (pkgcache.h): filled by cae in a pod of
 * its own per Go image, kept on this host as a tar, extracted into a pod's own GOCACHE by its
 * prepare.
 *
 * Where the fill runs, and why. A pod is on a node, not on this host, and nothing of the host
 * is mounted into it (pkgcache-serve.c says why), so the cache travels: as a tar on an exec's
 * stdin, extracted by the pod's user into its own GOCACHE. Three ways to fill it were weighed:
 *   - this host's fill (the local backend's, pkgcache.c) when the host's `go version` equals
 *     the pod's: no pod at all, but a build cache entry is keyed by the compiler's identity,
 *     the C compiler's for cgo, GOAMD64 and the standard library's source bytes, none of which
 *     an equal version string vouches for (another build of the same release, another gcc, a
 *     patched GOROOT): a mismatch ships hundreds of megabytes of misses into every pod, and
 *     telling it apart would mean a compile in the pod. It also needs a go on this host.
 *   - the task's own pod, before any of the task's commands: no second pod, but the clone has
 *     run there (git over the task's repository, its checkout and the image's filters), and
 *     a flaw of git that runs code at a clone would leave that code in the pod as the pod's
 *     user, free to change the fill's files while they are written, and every later pod of the
 *     image would take them unchecked (Go checks an entry's size, not its content).
 *   - a pod of cae's own (chosen, as docker's container of its own): the task's image, on the
 *     task's node (where the image is) with the task pod's resource limits, and nothing of any
 *     task: no workspace, repository or service account token, an emptyDir at
 *     CAE_PKGCACHE_GO_FILL_INSIDE, cae's fill package (cae__pkgcache_go_fill_script), an empty
 *     HOME, GOENV and GOWORK off, GOFLAGS empty, GOPROXY off, GOTOOLCHAIN local, as the image's
 *     user 1000 with no capability, no privilege escalation and RuntimeDefault seccomp, on the
 *     task pod's network (the host's when the task's is: a cluster may have no other; the fill
 *     asks nothing of it, GOPROXY being off and the package importing the standard library
 *     alone). Its
 *     cost: one pod per image and instance, once (the time of `go test` of the standard
 *     library), deleted when its tar is read; activeDeadlineSeconds ends one whose cae died,
 *     and the next fill of the image deletes it by its name (one per image and instance).
 * The key is the image's digest (the sha256 of the imageID the kubelet reports for the task
 * pod's main container): everything an entry depends on is the image's, so a pod never gets
 * another image's misses; the fill pod must report the same imageID, or nothing is kept.
 *
 * The store is the fill pod's tar, kept as bytes (<key>.tar, 0444, cae's; written under a
 * temporary name in go-kubernetes-fill, 0700, and renamed into place), never extracted on
 * this host: what a pod extracts is cae's pod's output, and no pod can write to this host,
 * so a task's pod changing its own copy (it is its own, its user's files) changes nobody
 * else's. */
#include "backend/backend-internal.h"
#include "backend/pkgcache.h"
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
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/banned.h"

#define MAIN "main" /* the task pod's container, as backend-kubernetes.c */
#define FILL "fill" /* the fill pod's container */
#define FILL_LABEL "cae.pkgcache_fill"
#define FILL_TIMEOUT_MS (15 * 60 * 1000)
#define FILL_DEADLINE_S 1800
#define POD_START_MS (5 * 60 * 1000)
#define EXEC_OPEN_MS 30000
#define CHUNK (256 * 1024)
#define TAR_MAX (4ULL << 30)

/* The named container of pod's spec (kind "containers") or status ("containerStatuses"). */
static json_t *container_of(json_t *pod, const char *part, const char *kind, const char *name)
{
	size_t i;
	json_t *c;
	json_array_foreach(json_object_get(json_object_get(pod, part), kind), i, c)
	{
		const char *n = json_string_value(json_object_get(c, "name"));
		if (n && strcmp(n, name) == 0)
			return c;
	}
	return NULL;
}

/* The hex digest of container's image in pod (its imageID's last "sha256:") into key. */
static int image_key(json_t *pod, const char *container, char key[65], cae_error *err)
{
	const char *id = json_string_value(json_object_get(
	    container_of(pod, "status", "containerStatuses", container), "imageID"));
	const char *h = NULL;
	for (const char *s = id; s && (s = strstr(s, "sha256:")); s += 7)
		h = s + 7;
	if (!h || strlen(h) != 64 || strspn(h, "0123456789abcdef") != 64)
		return cae_error_set(err, -EINVAL, "the pod's image has no sha256 digest (%s)",
				     id ? id : "no imageID");
	memcpy(key, h, 65);
	return 0;
}

/* Waits until s has stdout bytes or its end (idle_ms at most), or cancel_fd is readable. */
static int wait_readable(cae_k8s_stream *s, int cancel_fd, int idle_ms)
{
	struct pollfd p[2] = {{.fd = cae_k8s_stream_fd(s), .events = POLLIN},
			      {.fd = cancel_fd, .events = POLLIN}};
	int n;
	do
		n = poll(p, cancel_fd >= 0 ? 2 : 1, idle_ms);
	while (n < 0 && errno == EINTR);
	if (n > 0 && cancel_fd >= 0 && p[1].revents)
		return -ECANCELED;
	return n < 0 ? -errno : n == 0 ? -ETIMEDOUT : 0;
}

/* s's stdout to its end: into fd when fd >= 0 (at most TAR_MAX bytes; *total counted),
 * dropped otherwise; then its exit code 0, or err set (what). */
static int drain(cae_k8s_stream *s, int fd, int cancel_fd, int idle_ms, uint64_t *total,
		 const char *what, cae_error *err)
{
	_cleanup_free_ char *buf = malloc(CHUNK);
	int r = buf ? 0 : cae_error_set(err, -ENOMEM, "out of memory");
	while (r == 0) {
		ssize_t n = cae_k8s_stream_read(s, buf, CHUNK);
		if (n == -EAGAIN) {
			if ((r = wait_readable(s, cancel_fd, idle_ms)) < 0)
				cae_error_set(err, r, "%s: %s", what, strerror(-r));
			continue;
		}
		if (n < 0)
			r = cae_error_set(err, (int)n, "%s: %s", what, strerror((int)-n));
		if (n <= 0)
			break;
		if (fd < 0)
			continue;
		if ((*total += (uint64_t)n) > TAR_MAX)
			r = cae_error_set(err, -EFBIG, "%s: more than %llu bytes", what,
					  (unsigned long long)TAR_MAX);
		else if ((r = cae__write_all(fd, buf, (size_t)n)) < 0)
			cae_error_set(err, r, "%s: %s", what, strerror(-r));
	}
	if (r < 0)
		return r;
	int code = -1;
	cae_error e = {0};
	if ((r = cae_k8s_stream_status(s, &code, &e)) < 0)
		return cae_error_set(err, r == -EAGAIN ? -EIO : r, "%s: %s", what,
				     e.message[0] ? e.message : "the exec said no status");
	if (code != 0)
		return cae_error_set(err, -EIO, "%s (exit code %d): %.600s", what, code,
				     cae_k8s_stream_stderr(s));
	return 0;
}

/* The fill pod of task_pod's image (see the file's header). */
static json_t *fill_spec(const char *name, json_t *task_pod, const char *instance)
{
	json_t *main = container_of(task_pod, "spec", "containers", MAIN);
	const char *image = json_string_value(json_object_get(main, "image"));
	const char *pull = json_string_value(json_object_get(main, "imagePullPolicy"));
	const char *node =
	    json_string_value(json_object_get(json_object_get(task_pod, "spec"), "nodeName"));
	json_t *limits = json_object_get(json_object_get(main, "resources"), "limits");
	if (!image)
		return NULL;
	char deadline[24];
	snprintf(deadline, sizeof(deadline), "%d", FILL_DEADLINE_S);
	json_t *env = json_pack(
	    "[{s:s, s:s}, {s:s, s:s}, {s:s, s:s}, {s:s, s:s}, {s:s, s:s}, {s:s, s:s}, {s:s, s:s}, "
	    "{s:s, s:s}, {s:s, s:s}, {s:s, s:s}]",
	    "name", "HOME", "value", CAE_PKGCACHE_GO_FILL_INSIDE "/home", "name", "GOCACHE",
	    "value", CAE_PKGCACHE_GO_FILL_INSIDE "/build", "name", "GOENV", "value", "off", "name",
	    "GOFLAGS", "value", "", "name", "GOPROXY", "value", "off", "name", "GOWORK", "value",
	    "off", "name", "GO111MODULE", "value", "on", "name", "GOTOOLCHAIN", "value", "local",
	    "name", "LANG", "value", "C.UTF-8", "name", "CAE_GO_FILL", "value",
	    cae__pkgcache_go_fill_script);
	json_t *c =
	    json_pack("{s:s, s:s, s:s, s:[s, s], s:s, s:o, s:[{s:s, s:s}], s:{s:b, s:{s:[s]}}}",
		      "name", FILL, "image", image, "imagePullPolicy", pull ? pull : "IfNotPresent",
		      "command", "sleep", deadline, "workingDir", "/", "env", env, "volumeMounts",
		      "name", FILL, "mountPath", CAE_PKGCACHE_GO_FILL_INSIDE, "securityContext",
		      "allowPrivilegeEscalation", 0, "capabilities", "drop", "ALL");
	/* requests: small, as the task pods' (a request equal to the limits would not be
	 * placed beside the task pod on a small node) */
	json_t *res = json_pack("{s:{s:s, s:s}}", "requests", "cpu", "10m", "memory", "32Mi");
	if (res && json_is_object(limits))
		json_object_set(res, "limits", limits);
	if (c)
		json_object_set_new(c, "resources", res);
	else
		json_decref(res);
	json_t *spec = json_pack(
	    "{s:s, s:b, s:b, s:i, s:i, s:b, s:{s:i, s:i, s:b, s:{s:s}}, s:[{s:s, s:{}}], s:[o]}",
	    "restartPolicy", "Never", "automountServiceAccountToken", 0, "enableServiceLinks", 0,
	    "activeDeadlineSeconds", FILL_DEADLINE_S, "terminationGracePeriodSeconds", 0,
	    "hostNetwork",
	    json_is_true(json_object_get(json_object_get(task_pod, "spec"), "hostNetwork")),
	    "securityContext", "runAsUser", 1000, "runAsGroup", 1000, "runAsNonRoot", 1,
	    "seccompProfile", "type", "RuntimeDefault", "volumes", "name", FILL, "emptyDir",
	    "containers", c);
	if (spec && node)
		json_object_set_new(spec, "nodeName", json_string(node));
	return json_pack("{s:s, s:s, s:{s:s, s:{s:s, s:s}}, s:o}", "apiVersion", "v1", "kind",
			 "Pod", "metadata", "name", name, "labels", CAE_LABEL_INSTANCE, instance,
			 FILL_LABEL, "go", "spec", spec);
}

static int still_there(json_t *pod, void *ud, cae_error *err)
{
	(void)pod;
	(void)ud;
	(void)err;
	return 0;
}

/* The fill pod name made, a left one of that name deleted first. */
static int create_fill_pod(cae_k8s *k, const char *ns, const char *name, json_t *spec,
			   cae_error *err)
{
	int r = cae_k8s_pod_create(k, ns, spec, NULL, err);
	if (r != -EEXIST)
		return r;
	/* one left by a fill whose cae died: gone before this one is made */
	cae_error_clear(err);
	(void)cae_k8s_pod_delete(k, ns, name, 0, NULL);
	r = cae_k8s_pod_wait(k, ns, name, still_there, NULL, 120000, NULL, NULL);
	if (r != -ENOENT)
		return cae_error_set(err, -EEXIST, "pod %s (a fill's) is still there", name);
	return cae_k8s_pod_create(k, ns, spec, NULL, err);
}

/* The fill in pod name (of task_pod's image, key) streamed into fd. */
static int run_fill(cae_prepare *p, cae_k8s *k, const char *ns, const char *name, json_t *task_pod,
		    const char *key, int fd, cae_error *err)
{
	json_t *spec = fill_spec(name, task_pod, p->b->instance);
	if (!spec)
		return cae_error_set(err, -ENOMEM, "out of memory");
	int r = create_fill_pod(k, ns, name, spec, err);
	json_decref(spec);
	if (r < 0)
		return cae_error_prefix(err, "the Go build cache's fill pod %s", name);
	json_t *pod = NULL;
	char got[65];
	r = cae_k8s_pod_wait(k, ns, name, cae_k8s_pod_running, NULL, POD_START_MS, &pod, err);
	if (r == 0 && (r = image_key(pod, FILL, got, err)) == 0 && strcmp(got, key) != 0)
		r = cae_error_set(err, -ESTALE,
				  "the fill pod's image (sha256:%s) is not the task's (sha256:%s)",
				  got, key);
	json_decref(pod);
	cae_k8s_stream *s = NULL;
	if (r == 0) {
		const char *argv[] = {"sh", "-c",
				      "eval \"$CAE_GO_FILL\" && exec tar -cf - -C "
				      "" CAE_PKGCACHE_GO_FILL_INSIDE "/build .",
				      NULL};
		r = cae_k8s_exec_open(k, ns, name, FILL, argv, EXEC_OPEN_MS, &s, err);
	}
	if (r == 0) {
		uint64_t total = 0;
		r = drain(s, fd, p->cancel_fd, FILL_TIMEOUT_MS, &total,
			  "filling the shared Go build cache in its pod", err);
		if (r == 0 && total == 0)
			r = cae_error_set(err, -EIO, "the Go build cache's fill wrote nothing");
		cae_k8s_stream_close(s);
	}
	(void)cae_k8s_pod_delete(k, ns, name, 0, NULL);
	return r < 0 ? r : 0;
}

/* shared/<key>.tar, filled unless it is there. */
static int fill(cae_prepare *p, cae_k8s *k, const char *ns, json_t *task_pod, const char *key,
		const char *shared, const char *tar, cae_error *err)
{
	char work[PATH_MAX], lock[PATH_MAX + 80], tmp[PATH_MAX + 80], name[64];
	struct stat st;
	if (lstat(tar, &st) == 0 && S_ISREG(st.st_mode))
		return 0;
	if (cae__pkgcache_path(p->b->cfg, "go-kubernetes-fill", work, sizeof(work)) < 0)
		return cae_error_set(err, -ENAMETOOLONG, "the package cache's path is too long");
	if (mkdir(work, 0700) < 0 && errno != EEXIST)
		return cae_error_set(err, -errno, "cannot make %s: %s", work, strerror(errno));
	snprintf(lock, sizeof(lock), "%s/%s.lock", work, key);
	snprintf(tmp, sizeof(tmp), "%s/%s.tar", work, key);
	_cleanup_close_ int lfd = open(lock, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (lfd < 0 || flock(lfd, LOCK_EX) < 0)
		return cae_error_set(err, -errno, "cannot lock %s: %s", lock, strerror(errno));
	if (lstat(tar, &st) == 0 && S_ISREG(st.st_mode))
		return 0; /* another prepare filled it meanwhile */
	(void)unlink(tmp);
	_cleanup_close_ int fd =
	    open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return cae_error_set(err, -errno, "%s: %s", tmp, strerror(errno));
	/* one fill pod per image and instance (another instance's is not this one's to delete) */
	uint64_t h = cae__pkgcache_fnv1a(0xcbf29ce484222325ULL, shared, strlen(shared));
	h = cae__pkgcache_fnv1a(h, key, strlen(key));
	snprintf(name, sizeof(name), "cae-gofill-%016llx", (unsigned long long)h);
	int r = run_fill(p, k, ns, name, task_pod, key, fd, err);
	if (r == 0 && (fsync(fd) < 0 || fchmod(fd, 0444) < 0))
		r = cae_error_set(err, -errno, "%s: %s", tmp, strerror(errno));
	if (r == 0 && rename(tmp, tar) < 0)
		r = cae_error_set(err, -errno, "cannot move %s: %s", tmp, strerror(errno));
	if (r < 0)
		(void)unlink(tmp);
	return r;
}

/* The tar at path extracted into gocache in pod, as its user. */
static int deliver(cae_prepare *p, cae_k8s *k, const char *ns, const char *pod, const char *path,
		   const char *gocache, cae_error *err)
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0)
		return cae_error_set(err, -errno, "%s: %s", path, strerror(errno));
	char size[32];
	snprintf(size, sizeof(size), "%lld", (long long)st.st_size);
	/* protocol v4 cannot end stdin: head takes the tar's bytes */
	const char *argv[] = {"sh",
			      "-c",
			      "mkdir -p \"$1\" && head -c \"$2\" | tar -xf - -C \"$1\" "
			      "--no-same-owner",
			      "cae-gocache",
			      gocache,
			      size,
			      NULL};
	cae_k8s_stream *s = NULL;
	int r = cae_k8s_exec_open(k, ns, pod, MAIN, argv, EXEC_OPEN_MS, &s, err);
	if (r < 0)
		return r;
	_cleanup_free_ char *buf = malloc(CHUNK);
	if (!buf)
		r = cae_error_set(err, -ENOMEM, "out of memory");
	for (off_t left = st.st_size; r == 0 && left > 0;) {
		ssize_t n = read(fd, buf, left < CHUNK ? (size_t)left : CHUNK);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			r = cae_error_set(err, n < 0 ? -errno : -EIO, "%s: %s", path,
					  n < 0 ? strerror(errno) : "short read");
			break;
		}
		left -= n;
		if ((r = cae_k8s_stream_write(s, buf, (size_t)n)) < 0)
			cae_error_set(err, r, "the Go build cache's stream: %s", strerror(-r));
	}
	uint64_t none = 0;
	if (r == 0)
		r = drain(s, -1, p->cancel_fd, 5 * 60000, &none,
			  "extracting the shared Go build cache in the pod", err);
	cae_k8s_stream_close(s);
	return r;
}

int cae__pkgcache_go_pod_seed(cae_prepare *p, cae_error *err)
{
	const cae_config *cfg = p->b->cfg;
	char shared[PATH_MAX], tar[PATH_MAX + 80];
	if (!cfg->command_executor.package_cache.enabled)
		return 0;
	int r;
	_cleanup_free_ char *gocache = NULL;
	if ((r = cae__pkgcache_go_probe(p, &gocache, err)) <= 0)
		return r;
	if ((r = cae__pkgcache_shared_dir(cfg, "go-kubernetes", true, shared, sizeof(shared),
					  err)) <= 0)
		return r;
	cae__pkgcache_used(shared); /* the last use, for the prune */
	json_t *pod = NULL;
	if ((r = cae__k8s_get_pod(p->b, p->task->uuid, &pod, err)) < 0)
		return r;
	const char *ns;
	cae_k8s *k = cae__k8s_client(p->b, &ns);
	char key[65];
	const char *name =
	    json_string_value(json_object_get(json_object_get(pod, "metadata"), "name"));
	if ((r = image_key(pod, MAIN, key, err)) == 0) {
		snprintf(tar, sizeof(tar), "%s/%s.tar", shared, key);
		r = fill(p, k, ns, pod, key, shared, tar, err);
	}
	if (r == 0)
		r = name ? deliver(p, k, ns, name, tar, gocache, err)
			 : cae_error_set(err, -EINVAL, "the pod has no name");
	json_decref(pod);
	return r < 0 ? r : 1;
}

void cae__pkgcache_go_pod(cae_prepare *p)
{
	cae_error e = {0};
	int64_t t0 = cae__now_ms();
	int r = cae__pkgcache_go_pod_seed(p, &e);
	if (r < 0) {
		char w[1200];
		snprintf(w, sizeof(w), "the shared Go build cache is not used: %.1100s", e.message);
		cae__prepare_warn(p, "package_cache.unavailable", w);
	} else if (r > 0) {
		cae_log_fields(p->b->log, CAE_LOG_INFO, "package_cache.go_build_seeded",
			       json_pack("{s:s, s:I}", "task_uuid", p->task->uuid, "ms",
					 (json_int_t)(cae__now_ms() - t0)),
			       "the shared Go build cache is in the pod's GOCACHE");
	}
}
