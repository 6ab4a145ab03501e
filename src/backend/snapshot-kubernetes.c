/* The kubernetes backend's snapshots (cae__snapshot_ops; the common part is snapshot.c).
 *
 * Mechanism: "tar-stream" (the test cluster, like many, has no CSI driver, so no
 * VolumeSnapshot is tried: the workspace is an emptyDir). A snapshot is a tar archive that
 * GNU tar (or any tar of the image) writes in the pod's main container, as the user
 * commands run as (1000), streamed out over one API server exec to this host and kept as
 * bytes, never extracted here: <state>/k8s-snapshots/<uuid>/snapshots/<id>/snapshot.tar
 * (written under the record's temporary name, at most command_executor.snapshots.max_size
 * bytes, renamed into place with its snapshot.json by snapshot.c). What it holds (the same
 * list is worked out again in the pod at a restore, never read from the archive):
 *   /workspace           every file of the workspace (tracked, untracked and ignored files,
 *                        .git, modes, links, times)
 *   $HOME                the user's home (pip --user, npm's and cargo's caches, dotfiles),
 *                        unless it is / or in the workspace
 *   /usr/local, /opt     when the user can write them (the images cae builds leave them
 *                        root's: commands run as 1000 with no capability and no privilege
 *                        escalation, so nothing else of the image can change)
 * Not held: processes, /tmp and /var/tmp, sockets and fifos (tar skips sockets), owners
 * (every file comes back as the user's, but the protected paths, which stay root's: see
 * restore), the modes of the directories that remain when the workspace is emptied (the
 * home, /workspace, and the root sidecar's directories). The archive is read while commands
 * may run: it is not taken at one instant (unlike docker's paused commit).
 *
 * Restore: one exec in the main container ends every process of the pod but its init (the
 * helper, PID 1): commands, process sessions and every manager's helper stream (kill -KILL
 * -1 as the user, twice), removes every file of the user in those paths, then extracts the
 * archive (sent on the exec's stdin: head -c SIZE, since protocol v4 cannot end stdin) with
 * --skip-old-files, so that what the root sidecar made root's at the prepare (the protected
 * paths and the directories on their way, which no command can change or remove) stays as
 * it is. Fork: a new pod like the source's (its spec, helper, limits, credential target and
 * forge; its own name, uuid, creation time, preparer, NetworkPolicy and forked_from
 * annotation), the helper delivered, the archive extracted in it, the protected paths given
 * to root again by its own root sidecar, then labelled ready. A fork of the live
 * environment takes its archive first (into the new environment's snapshots/.tmp.<tag>.fork,
 * which the sweep removes if the fork is killed). The new environment's directory is locked
 * until its pod is ready. remove_env drops an environment's records; `cae gc` those of
 * environments without a pod that no process holds. */
#include "backend/snapshot.h"

#include "backend/backend-internal.h"
#include "backend/net-local.h"

#include "base/fs.h"
#include "base/macro.h"
#include "base/timeutil.h"
#include "cae/helper.h"
#include "cae/k8s.h"
#include "cae/log.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/banned.h"

#define ROOT_DIR "k8s-snapshots"
#define ARCHIVE "snapshot.tar"
#define MAIN "main"	      /* as backend-kubernetes.c */
#define PROTECT "cae-protect" /* the root sidecar */
#define L_UUID "cae.task_uuid"
#define L_PHASE "cae.phase"
#define L_CREATED "cae.created_at"
#define A_UUID "cae.task_uuid"
#define A_CREATED "cae.created_at"
#define A_PREPARER "cae.preparer"
#define A_HELPER "cae.helper"
#define A_FORKED_FROM "cae.forked_from"
#define EXEC_OPEN_MS 30000
#define IDLE_MS (5 * 60 * 1000) /* a stream that moves no byte for this long fails */
#define CHUNK (256 * 1024)

/* The paths a snapshot holds, as "$@" relative to / (the shell that follows runs in /). */
#define PATHS_SCRIPT                                                                               \
	"cd / || exit 3\n"                                                                         \
	"set -- workspace\n"                                                                       \
	"h=${HOME:-}\n"                                                                            \
	"case $h in /|/workspace|/workspace/*|*/../*|*/..) h= ;; esac\n"                           \
	"[ -n \"$h\" ] && [ -d \"$h\" ] && [ ! -L \"$h\" ] && set -- \"$@\" \"${h#/}\"\n"          \
	"for d in usr/local opt; do [ -d \"/$d\" ] && [ ! -L \"/$d\" ] && [ -w \"/$d\" ] && "      \
	"set -- \"$@\" \"$d\"; done\n"

/* The archive on stdout. */
static const char capture_script[] = PATHS_SCRIPT "exec tar -cf - -- \"$@\"\n";

/* $1: the archive's size, $2: 1 to end every process first. Reads the archive on stdin. */
static const char extract_script[] =
    "n=$1 k=$2; shift 2\n" PATHS_SCRIPT
    "if [ \"$k\" = 1 ]; then kill -9 -1 2>/dev/null; kill -9 -1 2>/dev/null; fi\n"
    "u=$(id -u)\n"
    "for d in \"$@\"; do find \"/$d\" -xdev -mindepth 1 -depth -user \"$u\" -delete "
    "2>/dev/null; done\n"
    "head -c \"$n\" | tar -xpf - --no-same-owner --skip-old-files || exit 4\n"
    "echo restored\n";

static char *k8s_root(cae_backend *b)
{
	const char *state = b->cfg->command_executor.state_dir;
	return state ? cae__path_join(state, ROOT_DIR) : NULL;
}

static char *env_dir(cae_backend *b, const char *uuid)
{
	_cleanup_free_ char *root = k8s_root(b);
	return root ? cae__path_join(root, uuid) : NULL;
}

static const char *pod_meta(json_t *pod, const char *kind, const char *k)
{
	return json_string_value(
	    json_object_get(json_object_get(json_object_get(pod, "metadata"), kind), k));
}

static const char *pod_name_of(json_t *pod)
{
	return json_string_value(json_object_get(json_object_get(pod, "metadata"), "name"));
}

/* Whether uuid has a pod (1), none (0), or the API did not say (-1). */
static int has_pod(cae_backend *b, const char *uuid)
{
	json_t *pod = NULL;
	int r = cae__k8s_get_pod(b, uuid, &pod, NULL);
	json_decref(pod);
	return r == 0 ? 1 : r == -ENOENT ? 0 : -1;
}

static bool k8s_sees(cae_backend *b, const char *uuid)
{
	json_t *pod = NULL;
	bool mine = cae__k8s_get_pod(b, uuid, &pod, NULL) == 0 &&
		    cae__backend_sees(b, pod_meta(pod, "labels", CAE_LABEL_INSTANCE));
	json_decref(pod);
	return mine;
}

static int k8s_check(cae_backend *b, const char *uuid, json_t **out, cae_error *err)
{
	return cae__k8s_env_pod(b, uuid, out, err);
}

/* ---- the archive's streams ---- */

/* Waits until s has stdout bytes or its end (IDLE_MS at most). */
static int wait_readable(cae_k8s_stream *s)
{
	struct pollfd p = {.fd = cae_k8s_stream_fd(s), .events = POLLIN};
	int n;
	do
		n = poll(&p, 1, IDLE_MS);
	while (n < 0 && errno == EINTR);
	return n < 0 ? -errno : n == 0 ? -ETIMEDOUT : 0;
}

/* The end of s: its exit code 0 or err set (what, its stderr). */
static int stream_end(cae_k8s_stream *s, const char *what, cae_error *err)
{
	int code = -1;
	cae_error e = {0};
	int r = cae_k8s_stream_status(s, &code, &e);
	if (r < 0)
		return cae_error_set(err, r == -EAGAIN ? -EIO : r, "%s: %s", what,
				     e.message[0] ? e.message : "the exec said no status");
	if (code != 0)
		return cae_error_set(err, -EIO, "%s (exit code %d): %.400s", what, code,
				     cae_k8s_stream_stderr(s));
	return 0;
}

/* The archive of pod's paths written to path (made, must not exist), at most max bytes (0:
 * no bound); *size its length. */
static int archive_out(cae_backend *b, const char *pod, const char *path, uint64_t max,
		       uint64_t *size, cae_error *err)
{
	const char *ns;
	cae_k8s *k = cae__k8s_client(b, &ns);
	_cleanup_close_ int fd =
	    open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return cae_error_set(err, -errno, "%s: %s", path, strerror(errno));
	const char *argv[] = {"sh", "-c", capture_script, NULL};
	cae_k8s_stream *s = NULL;
	int r = cae_k8s_exec_open(k, ns, pod, MAIN, argv, EXEC_OPEN_MS, &s, err);
	if (r < 0)
		return cae_error_prefix(err, "snapshot: the archive's exec");
	_cleanup_free_ char *buf = malloc(CHUNK);
	uint64_t total = 0;
	if (!buf)
		r = cae_error_set(err, -ENOMEM, "out of memory");
	while (r == 0) {
		ssize_t n = cae_k8s_stream_read(s, buf, CHUNK);
		if (n == -EAGAIN) {
			if ((r = wait_readable(s)) < 0)
				cae_error_set(err, r, "snapshot: the archive's stream: %s",
					      strerror(-r));
			continue;
		}
		if (n < 0) {
			r = cae_error_set(err, (int)n, "snapshot: the archive's stream: %s",
					  strerror((int)-n));
			break;
		}
		if (n == 0)
			break;
		total += (uint64_t)n;
		if (max && total > max) {
			r = cae_error_set(err, -ENOSPC,
					  "the snapshot is larger than "
					  "command_executor.snapshots.max_size (%llu bytes)",
					  (unsigned long long)max);
			break;
		}
		if ((r = cae__write_all(fd, buf, (size_t)n)) < 0)
			cae_error_set(err, r, "%s: %s", path, strerror(-r));
	}
	if (r == 0)
		r = stream_end(s, "snapshot: tar in the pod failed", err);
	cae_k8s_stream_close(s);
	if (r == 0 && fsync(fd) < 0)
		r = cae_error_set(err, -errno, "%s: %s", path, strerror(errno));
	*size = total;
	return r;
}

/* The archive at path extracted in pod by extract_script (kill: end every process first). */
static int archive_in(cae_backend *b, const char *pod, const char *path, bool kill, cae_error *err)
{
	const char *ns;
	cae_k8s *k = cae__k8s_client(b, &ns);
	_cleanup_close_ int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0)
		return cae_error_set(err, -errno, "%s: %s", path, strerror(errno));
	char size[32];
	snprintf(size, sizeof(size), "%lld", (long long)st.st_size);
	const char *argv[] = {"sh", "-c", extract_script, "cae-restore", size, kill ? "1" : "0",
			      NULL};
	cae_k8s_stream *s = NULL;
	int r = cae_k8s_exec_open(k, ns, pod, MAIN, argv, EXEC_OPEN_MS, &s, err);
	if (r < 0)
		return cae_error_prefix(err, "restore: the archive's exec");
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
			cae_error_set(err, r, "restore: the archive's stream: %s", strerror(-r));
	}
	/* its stdout ("restored") until the end */
	char out[256];
	while (r == 0) {
		ssize_t n = cae_k8s_stream_read(s, out, sizeof(out));
		if (n == -EAGAIN) {
			if ((r = wait_readable(s)) < 0)
				cae_error_set(err, r, "restore: the archive's stream: %s",
					      strerror(-r));
			continue;
		}
		if (n < 0)
			r = cae_error_set(err, (int)n, "restore: the archive's stream: %s",
					  strerror((int)-n));
		if (n <= 0)
			break;
	}
	if (r == 0)
		r = stream_end(s, "restore: extracting the archive in the pod failed", err);
	cae_k8s_stream_close(s);
	return r;
}

/* ---- snapshot ---- */

static int k8s_capture(cae_backend *b, const char *uuid, json_t *meta, const char *tmp,
		       const char *id, json_t *rec, cae_error *err)
{
	(void)uuid;
	(void)id;
	_cleanup_free_ char *path = cae__path_join(tmp, ARCHIVE);
	if (!path)
		return -ENOMEM;
	uint64_t size = 0;
	int r = archive_out(b, pod_name_of(meta), path,
			    b->cfg->command_executor.snapshots.max_bytes, &size, err);
	if (r < 0)
		return r;
	json_object_set_new(rec, "kind", json_string("archive"));
	json_object_set_new(rec, "mechanism", json_string("tar-stream"));
	return 0;
}

/* ---- restore ---- */

static int k8s_restore(cae_backend *b, const char *uuid, json_t *meta, const char *one, json_t *rec,
		       json_t *res, cae_error *err)
{
	(void)rec;
	_cleanup_free_ char *path = cae__path_join(one, ARCHIVE);
	if (!path)
		return -ENOMEM;
	/* this process's stream goes first: the others' end with the pod's processes */
	cae__k8s_forget(b, uuid);
	int r = archive_in(b, pod_name_of(meta), path, true, err);
	if (r < 0)
		return r;
	json_object_set_new(res, "mechanism", json_string("tar-stream"));
	json_object_set_new(res, "sandbox_stopped", json_true());
	json_object_set_new(res, "container_restarted", json_false());
	json_object_set_new(res, "processes_ended",
			    json_string("every process of the pod but its init (the helper): its "
					"commands, process sessions and helper streams"));
	return 0;
}

/* ---- fork ---- */

/* The pod of new_uuid like src's (the API's object): its spec, what its annotations and
 * labels say of the environment, with its own identity. */
static json_t *pod_like(cae_backend *b, json_t *src, const char *new_uuid, json_t *forked_from,
			cae_error *err)
{
	char name[160], created[40], epoch[24], preparer[CAE_PREPARER_MAX];
	cae__k8s_pod_name(name, sizeof(name), new_uuid);
	cae__iso8601_now(created, sizeof(created));
	snprintf(epoch, sizeof(epoch), "%lld", (long long)cae__parse_iso8601(created));
	cae__preparer_label(preparer, sizeof(preparer));
	json_t *md = json_object_get(src, "metadata");
	json_t *spec = json_deep_copy(json_object_get(src, "spec"));
	json_t *labels = json_deep_copy(json_object_get(md, "labels"));
	json_t *ann = json_deep_copy(json_object_get(md, "annotations"));
	_cleanup_free_ char *from = json_dumps(forked_from, JSON_COMPACT);
	if (!spec || !labels || !ann || !from) {
		json_decref(spec);
		json_decref(labels);
		json_decref(ann);
		cae_error_set(err, -ENOMEM, "out of memory");
		return NULL;
	}
	/* what admission fills in from a priority class */
	json_object_del(spec, "priority");
	json_object_del(spec, "preemptionPolicy");
	/* a pool pod's keys are not the fork's */
	json_object_del(labels, CAE_POOL_LABEL);
	json_object_del(labels, CAE_POOL_LABEL_MAX_AGE);
	json_object_del(ann, CAE_POOL_LABEL);
	json_object_del(ann, CAE_POOL_LABEL_MAX_AGE);
	json_object_set_new(labels, L_PHASE, json_string("creating"));
	json_object_set_new(labels, L_CREATED, json_string(epoch));
	json_object_set_new(labels, CAE_LABEL_INSTANCE, json_string(b->instance));
	json_object_del(labels, L_UUID);
	size_t ul = strlen(new_uuid);
	bool label_ok = ul > 0 && ul <= 63;
	for (const char *c = new_uuid; label_ok && *c; c++)
		label_ok = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
			   (*c >= '0' && *c <= '9') ||
			   ((*c == '-' || *c == '_' || *c == '.') && c != new_uuid && c[1]);
	if (label_ok)
		json_object_set_new(labels, L_UUID, json_string(new_uuid));
	if (json_object_get(labels, CAE_K8S_EGRESS_LABEL)) {
		char egress[64];
		cae__k8s_egress_label(name, egress, sizeof(egress));
		json_object_set_new(labels, CAE_K8S_EGRESS_LABEL, json_string(egress));
	}
	json_object_set_new(ann, A_UUID, json_string(new_uuid));
	json_object_set_new(ann, A_CREATED, json_string(created));
	json_object_set_new(ann, A_PREPARER, json_string(preparer));
	json_object_set_new(ann, A_FORKED_FROM, json_string(from));
	return json_pack("{s:s, s:s, s:{s:s, s:o, s:o}, s:o}", "apiVersion", "v1", "kind", "Pod",
			 "metadata", "name", name, "labels", labels, "annotations", ann, "spec",
			 spec);
}

static bool has_container(json_t *pod, const char *name)
{
	size_t i;
	json_t *c;
	json_array_foreach(json_object_get(json_object_get(pod, "spec"), "containers"), i, c)
	{
		const char *n = json_string_value(json_object_get(c, "name"));
		if (n && strcmp(n, name) == 0)
			return true;
	}
	return false;
}

/* The pod name ready (label cae.phase). */
static int mark_ready(cae_backend *b, const char *name, cae_error *err)
{
	const char *ns;
	cae_k8s *k = cae__k8s_client(b, &ns);
	_cleanup_free_ char *path = NULL;
	if (asprintf(&path, "/api/v1/namespaces/%s/pods/%s", ns, name) < 0)
		return cae_error_set(err, -ENOMEM, "out of memory");
	json_t *patch = json_pack("{s:{s:{s:s}}}", "metadata", "labels", L_PHASE, "ready");
	json_t *out = NULL;
	int r = patch ? cae_k8s_call(k, "PATCH", path, patch, &out, err)
		      : cae_error_set(err, -ENOMEM, "out of memory");
	json_decref(patch);
	json_decref(out);
	return r < 0 ? r : 0;
}

static int k8s_fork(cae_backend *b, const char *src, json_t *meta, const char *one, json_t *s,
		    const char *new_uuid, json_t *forked_from, cae_env_info *info,
		    const char **mechp, cae_error *err)
{
	(void)s;
	if (has_pod(b, new_uuid) != 0)
		return cae_error_set(err, -EEXIST, "task %s has an environment already", new_uuid);
	_cleanup_free_ char *ndir = env_dir(b, new_uuid);
	_cleanup_free_ char *sdir = env_dir(b, src);
	_cleanup_free_ char *nsd = ndir ? cae__path_join(ndir, CAE_SNAPSHOT_DIR) : NULL;
	if (!ndir || !sdir || !nsd)
		return -ENOMEM;
	/* held until the pod is ready: the sweep leaves what it makes alone meanwhile */
	int r = cae__mkdir_p(nsd, 0700);
	if (r < 0)
		return cae_error_set(err, r, "cannot make %s: %s", nsd, strerror(-r));
	_cleanup_close_ int nlock = cae__snapshot_lock(ndir, false);
	if (nlock < 0)
		return cae_error_set(err, -EEXIST, "task %s has an environment already", new_uuid);
	_cleanup_free_ char *archive = NULL, *tmp = NULL;
	if (one) {
		archive = cae__path_join(one, ARCHIVE);
		if (!archive)
			return -ENOMEM;
	} else {
		/* the source as it is now, one snapshot or live fork of it at a time */
		char tag[64];
		cae__preparer_tag(tag, sizeof(tag));
		if (asprintf(&tmp, "%s/" CAE_SNAPSHOT_TMP_PREFIX "%s.fork", nsd, tag) < 0)
			return -ENOMEM;
		archive = cae__path_join(tmp, ARCHIVE);
		r = archive ? cae__mkdir_p(sdir, 0700) : -ENOMEM;
		if (r == 0 && mkdir(tmp, 0700) < 0)
			r = -errno;
		_cleanup_close_ int slock = r == 0 ? cae__snapshot_lock(sdir, true) : r;
		uint64_t size = 0;
		if (slock < 0)
			r = cae_error_set(err, slock, "cannot lock environment %s", src);
		else
			r = archive_out(b, pod_name_of(meta), archive,
					b->cfg->command_executor.snapshots.max_bytes, &size, err);
		if (r < 0) {
			(void)cae__rm_rf(tmp);
			(void)cae__rm_rf(ndir);
			return r;
		}
	}
	json_t *pod = pod_like(b, meta, new_uuid, forked_from, err);
	if (!pod) {
		if (tmp)
			(void)cae__rm_rf(tmp);
		(void)cae__rm_rf(ndir);
		return -ENOMEM;
	}
	char name[160];
	snprintf(name, sizeof(name), "%s", pod_name_of(pod));
	_cleanup_free_ char *helper = NULL;
	if (pod_meta(meta, "annotations", A_HELPER) && cae_helper_find_static(&helper) < 0)
		r = cae_error_set(err, -ENOENT,
				  "the source's pod runs cae-helper, but cae-helper-static was not "
				  "found on this host");
	const char *ns;
	cae_k8s *k = cae__k8s_client(b, &ns);
	if (r == 0 && json_object_get(json_object_get(json_object_get(pod, "metadata"), "labels"),
				      CAE_K8S_EGRESS_LABEL))
		r = cae__k8s_egress_create(k, ns, name, new_uuid, b->instance, err);
	if (r == 0)
		r = cae__k8s_pool_start(b, pod, helper, -1, err);
	bool made = r == 0;
	if (r == 0)
		r = archive_in(b, name, archive, false, err);
	if (r == 0 && has_container(pod, PROTECT))
		r = cae__k8s_protect(b, new_uuid, name, err);
	if (r == 0)
		r = mark_ready(b, name, err);
	json_decref(pod);
	if (tmp)
		(void)cae__rm_rf(tmp);
	if (r < 0) {
		cae_error e = {0};
		if (made)
			(void)b->ops->remove(b, new_uuid, false, &e);
		else
			(void)cae__k8s_egress_delete(k, ns, name, NULL);
		(void)cae__rm_rf(ndir);
		return r;
	}
	*mechp = "tar-stream";
	return cae_backend_info(b, new_uuid, info, err);
}

/* ---- removal and sweeps ---- */

void cae__snapshot_k8s_drop(cae_backend *b, const char *uuid)
{
	_cleanup_free_ char *dir = env_dir(b, uuid);
	if (dir)
		(void)cae__rm_rf(dir);
}

/* Whether <root>/<uuid> is held by a process (a snapshot or fork of it runs). */
static bool held(cae_backend *b, const char *uuid)
{
	_cleanup_free_ char *dir = env_dir(b, uuid);
	return cae__snapshot_held(dir);
}

/* Records of environments without a pod, held by no process. */
static int k8s_sweep(cae_backend *b)
{
	int n = 0;
	_cleanup_free_ char *root = k8s_root(b);
	DIR *d = root ? opendir(root) : NULL;
	struct dirent *de;
	while (d && (de = readdir(d))) {
		if (!cae_task_uuid_valid(de->d_name) || held(b, de->d_name) ||
		    has_pod(b, de->d_name) != 0)
			continue;
		cae__snapshot_k8s_drop(b, de->d_name);
		n++;
	}
	if (d)
		closedir(d);
	return n;
}

const cae__snapshot_ops cae__snapshot_kubernetes_ops = {
    .env_dir = env_dir,
    .root = k8s_root,
    .sees = k8s_sees,
    .check = k8s_check,
    .capture = k8s_capture,
    .restore = k8s_restore,
    .fork = k8s_fork,
    .sweep = k8s_sweep,
};
