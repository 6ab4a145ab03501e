/* Snapshots, restores and forks of a local environment (include/cae/snapshot.h):
 *   <state_dir>/local/<uuid>/snapshots/<id>/snapshot.json   what it is
 *   <state_dir>/local/<uuid>/snapshots/<id>/disk.img        the workspace's file system, or
 *   <state_dir>/local/<uuid>/snapshots/<id>/tree/           a copy of the workspace's tree
 *   <state_dir>/local/<uuid>/snapshot.lock                  one snapshot, restore or live
 *                                                           fork of it at a time (flock)
 * A snapshot is made in snapshots/.tmp.<tag>.<id> and renamed into place; a restore's image
 * or tree in <uuid>/.restore.<tag>.*; a fork in <state_dir>/local/.creating.<tag>.<uuid>, the
 * prepare's own temporary name: each names its process (cae__preparer_tag), so whatever a
 * killed one left is a temporary the sweep removes once that process is gone, never a
 * snapshot or environment that looks whole. */
#include "backend/snapshot.h"

#include "backend/backend-internal.h"
#include "backend/diskfs.h"

#include "base/fs.h"
#include "base/macro.h"
#include "base/timeutil.h"
#include "cae/log.h"
#include "cae/snapshot.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/fs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/banned.h"

#define META_MAX (1024 * 1024)
#define TMP_PREFIX ".tmp."
#define RESTORE_PREFIX ".restore."
#define CREATING_PREFIX ".creating."
#define LOCK_NAME "snapshot.lock"

/* ---- paths and records ---- */

static char *local_root(cae_backend *b)
{
	return cae__path_join(b->cfg->command_executor.state_dir, "local");
}

static char *env_dir(cae_backend *b, const char *uuid)
{
	_cleanup_free_ char *root = local_root(b);
	return root ? cae__path_join(root, uuid) : NULL;
}

static json_t *read_json(const char *path)
{
	_cleanup_free_ char *text = NULL;
	size_t len;
	if (cae__read_file(AT_FDCWD, path, META_MAX, &text, &len) < 0)
		return NULL;
	return json_loadb(text, len, 0, NULL);
}

static int write_json(const char *path, json_t *j)
{
	_cleanup_free_ char *text = json_dumps(j, JSON_INDENT(2) | JSON_SORT_KEYS);
	return text ? cae__write_file_atomic(AT_FDCWD, path, text, strlen(text), 0600, false)
		    : -ENOMEM;
}

/* uuid's metadata, when the environment is this instance's, ready, and in the state
 * directory (not a workspace used as is). */
static int load_meta(cae_backend *b, const char *uuid, json_t **out, cae_error *err)
{
	if (strcmp(cae_backend_name(b), "local") != 0)
		return cae_error_set(err, -EOPNOTSUPP,
				     "snapshots are not available on the %s backend yet",
				     cae_backend_name(b));
	if (!uuid || !cae_task_uuid_valid(uuid))
		return cae_error_set(err, -EINVAL, "invalid task uuid");
	_cleanup_free_ char *dir = env_dir(b, uuid);
	_cleanup_free_ char *path = dir ? cae__path_join(dir, "meta.json") : NULL;
	if (!path)
		return -ENOMEM;
	json_t *meta = read_json(path);
	if (!meta || !cae__backend_own(b, json_string_value(json_object_get(meta, "instance")))) {
		json_decref(meta);
		return cae_error_set(err, -ENOENT, "no environment for task %s", uuid);
	}
	const char *status = json_string_value(json_object_get(meta, "status"));
	int r = 0;
	if (!status || strcmp(status, "ready") != 0)
		r = cae_error_set(err, -EAGAIN, "environment %s is not ready", uuid);
	else if (json_is_true(json_object_get(meta, "external")))
		r = cae_error_set(err, -EOPNOTSUPP,
				  "environment %s is a workspace used as is (the user's own "
				  "directory): snapshot it with the user's own tools",
				  uuid);
	if (r < 0) {
		json_decref(meta);
		return r;
	}
	*out = meta;
	return 0;
}

static bool name_valid(const char *s)
{
	return s && cae_task_uuid_valid(s);
}

/* The environment's lock (snapshot.lock), held while its files are taken or replaced. */
static int lock_env(const char *dir, bool wait)
{
	_cleanup_free_ char *path = cae__path_join(dir, LOCK_NAME);
	if (!path)
		return -ENOMEM;
	int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	if (flock(fd, LOCK_EX | (wait ? 0 : LOCK_NB)) < 0) {
		int e = errno;
		close(fd);
		return -e;
	}
	return fd;
}

/* Thaws the workspace's file system (one a killed snapshot left frozen; harmless on one that
 * is not). Under the environment's lock only. */
static void thaw(const char *ws)
{
	if (!cae__diskfs_mounted(ws))
		return;
	_cleanup_close_ int fd = open(ws, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd >= 0)
		(void)ioctl(fd, FITHAW, 0);
}

/* ---- copies ---- */

/* Copies the file src to dst (made, must not exist): a clone (FICLONE) where the file
 * system shares extents, else its data extents copied (holes stay holes). *mech says
 * which. */
static int clone_file(const char *src, const char *dst, const char **mech, cae_error *err)
{
	_cleanup_close_ int in = open(src, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (in < 0)
		return cae_error_set(err, -errno, "%s: %s", src, strerror(errno));
	_cleanup_close_ int out =
	    open(dst, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (out < 0)
		return cae_error_set(err, -errno, "%s: %s", dst, strerror(errno));
	if (ioctl(out, FICLONE, in) == 0) {
		*mech = "reflink";
		return 0;
	}
	if (errno != EOPNOTSUPP && errno != EXDEV && errno != EINVAL && errno != ENOTTY &&
	    errno != ENOSYS)
		return cae_error_set(err, -errno, "cannot clone the image: %s", strerror(errno));
	*mech = "copy";
	struct stat st;
	if (fstat(in, &st) < 0 || ftruncate(out, st.st_size) < 0)
		return cae_error_set(err, -errno, "cannot copy the image: %s", strerror(errno));
	off_t pos = 0;
	while (pos < st.st_size) {
		off_t data = lseek(in, pos, SEEK_DATA);
		if (data < 0) {
			if (errno == ENXIO)
				break; /* only a hole is left */
			return cae_error_set(err, -errno, "cannot copy the image: %s",
					     strerror(errno));
		}
		off_t hole = lseek(in, data, SEEK_HOLE);
		if (hole < 0)
			hole = st.st_size;
		off_t o_in = data, o_out = data;
		while (o_in < hole) {
			ssize_t n =
			    copy_file_range(in, &o_in, out, &o_out, (size_t)(hole - o_in), 0);
			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0)
				return cae_error_set(err, n < 0 ? -errno : -EIO,
						     "cannot copy the image: %s",
						     n < 0 ? strerror(errno) : "short copy");
		}
		pos = hole;
	}
	if (fsync(out) < 0)
		return cae_error_set(err, -errno, "cannot copy the image: %s", strerror(errno));
	return 0;
}

/* cp -a --reflink=auto src dst (dst must not exist): a tree with its modes, owners, links. */
static int copy_tree(const char *src, const char *dst, cae_error *err)
{
	const char *argv[] = {"cp", "-a", "--reflink=auto", "--no-target-directory", "--", src,
			      dst,  NULL};
	const char *envp[] = {"PATH=/usr/bin:/bin", "LC_ALL=C", NULL};
	cae_run_spec spec = {
	    .argv = argv, .envp = envp, .max_stdout = 4096, .max_stderr = 4096, .cancel_fd = -1};
	cae_run_result res;
	int r = cae_runner_run(&spec, &res, err);
	if (r < 0)
		return r;
	if (res.exit_code != 0)
		r = cae_error_set(err, -EIO, "cp failed (exit %d): %.300s", res.exit_code,
				  res.err ? res.err : "");
	cae_run_result_clear(&res);
	return r;
}

/* Tells the guard that the file system was thawed by its process, and reaps it. */
static void freeze_guard_end(pid_t guard, int done)
{
	if (guard <= 0)
		return;
	(void)cae__write_all(done, "d", 1);
	close(done);
	while (waitpid(guard, NULL, 0) < 0 && errno == EINTR)
		;
}

/* Freezes the file system of fd (FIFREEZE) under a guard: a child process that thaws it if
 * this process dies before freeze_guard_end (its end of the pipe closes with it, SIGKILL
 * included), so that a snapshot killed half-way never leaves a workspace whose writes hang.
 * Returns the guard's pid (*done: the pipe's end to write "done" to) or -errno. */
static pid_t freeze_guard(int fd, int *done)
{
	int p[2];
	if (pipe2(p, O_CLOEXEC) < 0)
		return -errno;
	pid_t pid = fork();
	if (pid < 0) {
		int e = errno;
		close(p[0]);
		close(p[1]);
		return -e;
	}
	if (pid == 0) {
		close(p[1]);
		char c;
		ssize_t n;
		do
			n = read(p[0], &c, 1);
		while (n < 0 && errno == EINTR);
		if (n <= 0) /* end of file: the snapshot's process died while it was frozen */
			(void)ioctl(fd, FITHAW, 0);
		_exit(0);
	}
	close(p[0]);
	if (ioctl(fd, FIFREEZE, 0) < 0) {
		int e = errno;
		freeze_guard_end(pid, p[1]);
		return -e;
	}
	*done = p[1];
	return pid;
}

/* Takes the environment in dir as it is now into dst_dir (made by the caller): its image as
 * dst_dir/disk.img (the file system frozen meanwhile) or its tree as dst_dir/<tree_name>.
 * Under the environment's lock. */
static int capture(const char *dir, const char *dst_dir, const char *tree_name, const char **kind,
		   const char **mech, cae_error *err)
{
	_cleanup_free_ char *img = cae__path_join(dir, CAE_DISKFS_IMAGE);
	_cleanup_free_ char *ws = cae__path_join(dir, "workspace");
	_cleanup_free_ char *dimg = cae__path_join(dst_dir, CAE_DISKFS_IMAGE);
	_cleanup_free_ char *dtree = cae__path_join(dst_dir, tree_name);
	if (!img || !ws || !dimg || !dtree)
		return -ENOMEM;
	if (access(img, F_OK) == 0) {
		*kind = "image";
		_cleanup_close_ int fd = -1;
		pid_t guard = -1;
		int done = -1;
		if (cae__diskfs_mounted(ws)) {
			fd = open(ws, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			int e = fd < 0 || syncfs(fd) < 0 ? -errno : 0;
			if (e == 0 && (guard = freeze_guard(fd, &done)) < 0)
				e = (int)guard;
			if (e < 0)
				return cae_error_set(
				    err, e, "cannot freeze the workspace's file system: %s",
				    strerror(-e));
		}
		int r = clone_file(img, dimg, mech, err);
		if (fd >= 0) {
			(void)ioctl(fd, FITHAW, 0);
			freeze_guard_end(guard, done);
		}
		return r;
	}
	*kind = "tree";
	*mech = "copy";
	return copy_tree(ws, dtree, err);
}

/* ---- snapshots ---- */

static void new_id(char *out, size_t size)
{
	unsigned char rnd[4] = {0};
	if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
		rnd[0] ^= (unsigned char)getpid();
	time_t now = time(NULL);
	struct tm tm;
	gmtime_r(&now, &tm);
	snprintf(out, size, "snap-%04d%02d%02d%02d%02d%02d-%02x%02x%02x%02x", tm.tm_year + 1900,
		 tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, rnd[0], rnd[1],
		 rnd[2], rnd[3]);
}

static int by_created(const void *a, const void *b)
{
	json_t *const *x = a, *const *y = b;
	int c = strcmp(json_string_value(json_object_get(*x, "created_at")) ?: "",
		       json_string_value(json_object_get(*y, "created_at")) ?: "");
	return c ? c
		 : strcmp(json_string_value(json_object_get(*x, "id")) ?: "",
			  json_string_value(json_object_get(*y, "id")) ?: "");
}

/* The whole snapshots of the environment in dir, oldest first (appended to arr). */
static void list_dir(const char *dir, json_t *arr)
{
	_cleanup_free_ char *sd = cae__path_join(dir, CAE_SNAPSHOT_DIR);
	DIR *d = sd ? opendir(sd) : NULL;
	if (!d)
		return;
	size_t first = json_array_size(arr);
	struct dirent *de;
	while ((de = readdir(d))) {
		if (!name_valid(de->d_name))
			continue;
		_cleanup_free_ char *one = cae__path_join(sd, de->d_name);
		_cleanup_free_ char *path = one ? cae__path_join(one, "snapshot.json") : NULL;
		json_t *j = path ? read_json(path) : NULL;
		if (j && json_is_object(j))
			json_array_append_new(arr, j);
		else
			json_decref(j);
	}
	closedir(d);
	size_t n = json_array_size(arr) - first;
	json_t **v = n ? calloc(n, sizeof(*v)) : NULL;
	if (!v)
		return;
	for (size_t i = 0; i < n; i++)
		v[i] = json_incref(json_array_get(arr, first + i));
	qsort(v, n, sizeof(*v), by_created);
	for (size_t i = 0; i < n; i++)
		json_array_set_new(arr, first + i, v[i]);
	free(v);
}

/* The snapshot of dir's environment whose id or name is s (new reference), or NULL. */
static json_t *find_snapshot(const char *dir, const char *s)
{
	json_t *arr = json_array();
	list_dir(dir, arr);
	json_t *found = NULL, *e;
	size_t i;
	json_array_foreach(arr, i, e)
	{
		const char *id = json_string_value(json_object_get(e, "id"));
		const char *name = json_string_value(json_object_get(e, "name"));
		if ((id && strcmp(id, s) == 0) || (name && strcmp(name, s) == 0)) {
			found = json_incref(e);
			break;
		}
	}
	json_decref(arr);
	return found;
}

int cae_snapshot_create(cae_backend *b, const char *uuid, const char *name, json_t **out,
			cae_error *err)
{
	int64_t t0 = cae__now_ms();
	json_t *meta = NULL;
	int r = load_meta(b, uuid, &meta, err);
	if (r < 0)
		return r;
	json_decref(meta);
	if (name && !name_valid(name))
		return cae_error_set(err, -EINVAL,
				     "invalid snapshot name (1-64 of A-Z a-z 0-9 _ . -, not "
				     "starting with . or -)");
	_cleanup_free_ char *dir = env_dir(b, uuid);
	_cleanup_free_ char *sd = dir ? cae__path_join(dir, CAE_SNAPSHOT_DIR) : NULL;
	if (!sd)
		return -ENOMEM;
	const struct cae_config *cfg = b->cfg;
	int max = cfg->command_executor.snapshots.max_per_environment;
	uint64_t max_bytes = cfg->command_executor.snapshots.max_bytes;
	_cleanup_close_ int lock = lock_env(dir, true);
	if (lock < 0)
		return cae_error_set(err, lock, "cannot lock environment %s: %s", uuid,
				     strerror(-lock));
	json_t *have = json_array();
	list_dir(dir, have);
	size_t count = json_array_size(have);
	uint64_t used = 0;
	bool dup = false;
	size_t i;
	json_t *e;
	json_array_foreach(have, i, e)
	{
		used += (uint64_t)json_integer_value(json_object_get(e, "bytes"));
		const char *n = json_string_value(json_object_get(e, "name"));
		dup |= name && n && strcmp(n, name) == 0;
	}
	json_decref(have);
	if (dup)
		return cae_error_set(err, -EEXIST, "environment %s has a snapshot named %s", uuid,
				     name);
	if ((int)count >= max)
		return cae_error_set(err, -ENOSPC,
				     "environment %s has %zu snapshot(s), the most "
				     "command_executor.snapshots.max_per_environment allows: "
				     "remove one first",
				     uuid, count);
	r = cae__mkdir_p(sd, 0700);
	if (r < 0)
		return cae_error_set(err, r, "cannot make %s: %s", sd, strerror(-r));
	char id[64], tag[64];
	new_id(id, sizeof(id));
	cae__preparer_tag(tag, sizeof(tag));
	_cleanup_free_ char *tmp = NULL, *final = cae__path_join(sd, id);
	if (!final || asprintf(&tmp, "%s/" TMP_PREFIX "%s.%s", sd, tag, id) < 0)
		return -ENOMEM;
	if (mkdir(tmp, 0700) < 0)
		return cae_error_set(err, -errno, "cannot make %s: %s", tmp, strerror(errno));
	_cleanup_free_ char *ws = cae__path_join(dir, "workspace");
	if (ws)
		thaw(ws); /* one a killed snapshot left frozen */
	const char *kind = NULL, *mech = NULL;
	r = ws ? capture(dir, tmp, "tree", &kind, &mech, err) : -ENOMEM;
	uint64_t bytes = r == 0 ? cae__disk_use(tmp) : 0;
	if (r == 0 && max_bytes && used + bytes > max_bytes)
		r = cae_error_set(err, -ENOSPC,
				  "the snapshot would make environment %s's snapshots take %llu "
				  "bytes, more than command_executor.snapshots.max_size (%llu)",
				  uuid, (unsigned long long)(used + bytes),
				  (unsigned long long)max_bytes);
	char created[40];
	cae__iso8601_now(created, sizeof(created));
	json_t *rec = NULL;
	if (r == 0) {
		rec = json_pack("{s:s, s:s?, s:s, s:s, s:I, s:s, s:s}", "id", id, "name", name,
				"task_uuid", uuid, "created_at", created, "bytes",
				(json_int_t)bytes, "mechanism", mech, "kind", kind);
		_cleanup_free_ char *path = cae__path_join(tmp, "snapshot.json");
		r = rec && path ? write_json(path, rec) : -ENOMEM;
		if (r == 0 && rename(tmp, final) < 0)
			r = -errno;
		if (r < 0)
			cae_error_set(err, r, "cannot record the snapshot: %s", strerror(-r));
	}
	if (r < 0) {
		json_decref(rec);
		(void)cae__rm_rf(tmp);
		return r;
	}
	json_object_set_new(rec, "duration_ms", json_integer(cae__now_ms() - t0));
	cae_log_fields(b->log, CAE_LOG_INFO, "environment.snapshot", json_deep_copy(rec), NULL);
	if (out)
		*out = rec;
	else
		json_decref(rec);
	return 0;
}

int cae_snapshot_list(cae_backend *b, const char *uuid, json_t **out, cae_error *err)
{
	json_t *arr = json_array();
	if (!arr)
		return -ENOMEM;
	if (uuid) {
		json_t *meta = NULL;
		int r = load_meta(b, uuid, &meta, err);
		if (r < 0 && r != -EAGAIN) {
			json_decref(arr);
			return r;
		}
		json_decref(meta);
		_cleanup_free_ char *dir = env_dir(b, uuid);
		if (dir)
			list_dir(dir, arr);
		*out = arr;
		return 0;
	}
	if (strcmp(cae_backend_name(b), "local") != 0) {
		*out = arr;
		return 0;
	}
	_cleanup_free_ char *root = local_root(b);
	DIR *d = root ? opendir(root) : NULL;
	struct dirent *de;
	while (d && (de = readdir(d))) {
		if (!cae_task_uuid_valid(de->d_name))
			continue;
		_cleanup_free_ char *dir = cae__path_join(root, de->d_name);
		_cleanup_free_ char *mp = dir ? cae__path_join(dir, "meta.json") : NULL;
		json_t *meta = mp ? read_json(mp) : NULL;
		bool mine = meta && cae__backend_sees(
					b, json_string_value(json_object_get(meta, "instance")));
		json_decref(meta);
		if (mine)
			list_dir(dir, arr);
	}
	if (d)
		closedir(d);
	*out = arr;
	return 0;
}

/* The environment in dir locked (waiting for another snapshot, restore or fork of it) and its
 * snapshot named snapshot into *s: the lock's descriptor, or -errno with err set. */
static int locked_snapshot(const char *dir, const char *uuid, const char *snapshot, json_t **s,
			   cae_error *err)
{
	int lock = lock_env(dir, true);
	if (lock < 0)
		return cae_error_set(err, lock, "cannot lock environment %s: %s", uuid,
				     strerror(-lock));
	*s = snapshot ? find_snapshot(dir, snapshot) : NULL;
	if (!*s) {
		close(lock);
		return cae_error_set(err, -ENOENT, "environment %s has no snapshot %s", uuid,
				     snapshot ? snapshot : "");
	}
	return lock;
}

int cae_snapshot_remove(cae_backend *b, const char *uuid, const char *snapshot, cae_error *err)
{
	json_t *meta = NULL;
	int r = load_meta(b, uuid, &meta, err);
	if (r < 0)
		return r;
	json_decref(meta);
	_cleanup_free_ char *dir = env_dir(b, uuid);
	if (!dir)
		return -ENOMEM;
	json_t *s = NULL;
	_cleanup_close_ int lock = locked_snapshot(dir, uuid, snapshot, &s, err);
	if (lock < 0)
		return lock;
	_cleanup_free_ char *sd = cae__path_join(dir, CAE_SNAPSHOT_DIR);
	_cleanup_free_ char *one =
	    sd ? cae__path_join(sd, json_string_value(json_object_get(s, "id"))) : NULL;
	json_decref(s);
	r = one ? cae__rm_rf(one) : -ENOMEM;
	return r < 0 ? cae_error_set(err, r, "cannot remove the snapshot: %s", strerror(-r)) : 0;
}

/* ---- restore ---- */

int cae_snapshot_restore(cae_backend *b, const char *uuid, const char *snapshot, json_t **out,
			 cae_error *err)
{
	int64_t t0 = cae__now_ms();
	json_t *meta = NULL;
	int r = load_meta(b, uuid, &meta, err);
	if (r < 0)
		return r;
	_cleanup_free_ char *wsroot =
	    strdup(json_string_value(json_object_get(meta, "workspace_root")) ?: "");
	json_decref(meta);
	_cleanup_free_ char *dir = env_dir(b, uuid);
	if (!dir || !wsroot)
		return -ENOMEM;
	json_t *s = NULL;
	_cleanup_close_ int lock = locked_snapshot(dir, uuid, snapshot, &s, err);
	if (lock < 0)
		return lock;
	_cleanup_free_ char *id = strdup(json_string_value(json_object_get(s, "id")));
	bool image = strcmp(json_string_value(json_object_get(s, "kind")) ?: "", "image") == 0;
	json_decref(s);
	char holders[512];
	if (cae__sandbox_holders(wsroot, holders, sizeof(holders)) > 0)
		return cae_error_set(err, -EBUSY,
				     "environment %s runs commands of other processes (%s): "
				     "end them first",
				     uuid, holders);
	/* what runs in this process's sandbox of it ends: the sandbox binds the old files */
	cae__local_stop_sandbox(b, uuid);
	char tag[64];
	cae__preparer_tag(tag, sizeof(tag));
	_cleanup_free_ char *sd = cae__path_join(dir, CAE_SNAPSHOT_DIR);
	_cleanup_free_ char *one = sd && id ? cae__path_join(sd, id) : NULL;
	_cleanup_free_ char *ws = cae__path_join(dir, "workspace");
	_cleanup_free_ char *tmp = NULL, *old = NULL;
	if (!one || !ws || asprintf(&tmp, "%s/" RESTORE_PREFIX "%s.new", dir, tag) < 0 ||
	    asprintf(&old, "%s/" RESTORE_PREFIX "%s.old", dir, tag) < 0)
		return -ENOMEM;
	const char *mech = "copy";
	(void)cae__rm_rf(tmp);
	if (image) {
		thaw(ws);
		_cleanup_free_ char *src = cae__path_join(one, CAE_DISKFS_IMAGE);
		_cleanup_free_ char *img = cae__path_join(dir, CAE_DISKFS_IMAGE);
		if (!src || !img)
			return -ENOMEM;
		r = clone_file(src, tmp, &mech, err);
		/* Unmounted, then the image replaced, then mounted: killed in between, the next
		 * use mounts whichever image is in place, the old or the new, each whole. */
		for (int i = 0; r == 0 && i < 16 && cae__diskfs_mounted(ws); i++)
			if (umount2(ws, MNT_DETACH | UMOUNT_NOFOLLOW) < 0 && errno != EINVAL)
				r = cae_error_set(err, -errno, "cannot unmount the workspace: %s",
						  strerror(errno));
		if (r == 0 && rename(tmp, img) < 0)
			r = cae_error_set(err, -errno, "cannot put the image in place: %s",
					  strerror(errno));
		if (r == 0 && (r = cae__diskfs_remount(img, ws, err)) > 0)
			r = 0;
		if (r < 0)
			(void)unlink(tmp);
	} else {
		_cleanup_free_ char *src = cae__path_join(one, "tree");
		r = src ? copy_tree(src, tmp, err) : -ENOMEM;
		/* one exchange: the workspace is the old tree or the new one, never neither */
		if (r == 0 && renameat2(AT_FDCWD, tmp, AT_FDCWD, ws, RENAME_EXCHANGE) < 0)
			r = cae_error_set(err, -errno, "cannot put the workspace in place: %s",
					  strerror(errno));
		(void)cae__rm_rf(tmp); /* the old tree after the exchange */
	}
	if (r < 0)
		return r;
	json_t *res = json_pack("{s:s, s:s, s:s, s:I, s:b}", "task_uuid", uuid, "snapshot", id,
				"mechanism", mech, "duration_ms", (json_int_t)(cae__now_ms() - t0),
				"sandbox_stopped", true);
	cae_log_fields(b->log, CAE_LOG_INFO, "environment.restore", json_deep_copy(res), NULL);
	if (out)
		*out = res;
	else
		json_decref(res);
	return 0;
}

/* ---- fork ---- */

/* The environment id snapshot belongs to (new string), looking in every environment of
 * this instance, or NULL. */
static char *owner_of_snapshot(cae_backend *b, const char *snapshot)
{
	_cleanup_free_ char *root = local_root(b);
	DIR *d = root ? opendir(root) : NULL;
	char *found = NULL;
	struct dirent *de;
	while (d && !found && (de = readdir(d))) {
		if (!cae_task_uuid_valid(de->d_name))
			continue;
		_cleanup_free_ char *dir = cae__path_join(root, de->d_name);
		_cleanup_free_ char *sd = dir ? cae__path_join(dir, CAE_SNAPSHOT_DIR) : NULL;
		_cleanup_free_ char *one = sd ? cae__path_join(sd, snapshot) : NULL;
		if (one && name_valid(snapshot) && cae__is_dir(one))
			found = strdup(de->d_name);
	}
	if (d)
		closedir(d);
	return found;
}

int cae_snapshot_fork(cae_backend *b, const char *from_uuid, const char *snapshot,
		      const char *new_uuid, cae_env_info *info, json_t **out, cae_error *err)
{
	int64_t t0 = cae__now_ms();
	memset(info, 0, sizeof(*info));
	if (!new_uuid || !cae_task_uuid_valid(new_uuid))
		return cae_error_set(err, -EINVAL, "invalid task uuid for the fork");
	_cleanup_free_ char *src_uuid = from_uuid ? strdup(from_uuid) : NULL;
	if (!src_uuid && snapshot && strcmp(cae_backend_name(b), "local") == 0)
		src_uuid = owner_of_snapshot(b, snapshot);
	if (!src_uuid)
		return cae_error_set(err, from_uuid || snapshot ? -ENOENT : -EINVAL,
				     snapshot ? "no snapshot %s" : "nothing to fork from%s",
				     snapshot ? snapshot : "");
	json_t *meta = NULL;
	int r = load_meta(b, src_uuid, &meta, err);
	if (r < 0)
		return r;
	_cleanup_free_ char *root = local_root(b);
	_cleanup_free_ char *sdir = env_dir(b, src_uuid);
	_cleanup_free_ char *ndir = root ? cae__path_join(root, new_uuid) : NULL;
	char real[PATH_MAX];
	if (!sdir || !ndir || !realpath(root, real)) {
		json_decref(meta);
		return cae_error_set(err, -ENOMEM, "the state directory: %s", strerror(errno));
	}
	if (access(ndir, F_OK) == 0) {
		json_decref(meta);
		return cae_error_set(err, -EEXIST, "task %s has an environment already", new_uuid);
	}
	char tag[64];
	cae__preparer_tag(tag, sizeof(tag));
	_cleanup_free_ char *tmp = NULL;
	if (asprintf(&tmp, "%s/" CREATING_PREFIX "%s.%s", root, tag, new_uuid) < 0) {
		json_decref(meta);
		return -ENOMEM;
	}
	(void)cae__rm_rf(tmp);
	if (mkdir(tmp, 0700) < 0) {
		r = cae_error_set(err, -errno, "cannot make %s: %s", tmp, strerror(errno));
		json_decref(meta);
		return r;
	}
	const char *kind = NULL, *mech = NULL;
	char *snap_id = NULL;
	if (snapshot) {
		json_t *s = find_snapshot(sdir, snapshot);
		if (!s) {
			r = cae_error_set(err, -ENOENT, "environment %s has no snapshot %s",
					  src_uuid, snapshot);
		} else {
			snap_id = strdup(json_string_value(json_object_get(s, "id")));
			_cleanup_free_ char *sd = cae__path_join(sdir, CAE_SNAPSHOT_DIR);
			_cleanup_free_ char *one =
			    sd && snap_id ? cae__path_join(sd, snap_id) : NULL;
			_cleanup_free_ char *simg =
			    one ? cae__path_join(one, CAE_DISKFS_IMAGE) : NULL;
			_cleanup_free_ char *stree = one ? cae__path_join(one, "tree") : NULL;
			_cleanup_free_ char *dimg = cae__path_join(tmp, CAE_DISKFS_IMAGE);
			_cleanup_free_ char *dtree = cae__path_join(tmp, "workspace");
			kind = json_string_value(json_object_get(s, "kind"));
			if (!simg || !stree || !dimg || !dtree)
				r = -ENOMEM;
			else if (kind && strcmp(kind, "image") == 0)
				r = clone_file(simg, dimg, &mech, err);
			else {
				mech = "copy";
				r = copy_tree(stree, dtree, err);
			}
			kind = NULL;
			json_decref(s);
		}
	} else {
		_cleanup_close_ int lock = lock_env(sdir, true);
		_cleanup_free_ char *ws = cae__path_join(sdir, "workspace");
		if (lock < 0)
			r = cae_error_set(err, lock, "cannot lock environment %s", src_uuid);
		else if (!ws)
			r = -ENOMEM;
		else {
			thaw(ws);
			r = capture(sdir, tmp, "workspace", &kind, &mech, err);
		}
	}
	_cleanup_free_ char *nimg = cae__path_join(tmp, CAE_DISKFS_IMAGE);
	_cleanup_free_ char *nws = cae__path_join(tmp, "workspace");
	if (r == 0 && nimg && nws && access(nimg, F_OK) == 0 && mkdir(nws, 0700) < 0)
		r = cae_error_set(err, -errno, "cannot make the workspace: %s", strerror(errno));
	/* its own metadata: the source's, with its own name, paths and creation time */
	char created[40], cid[128], wsroot[PATH_MAX + 128], project[PATH_MAX + 160];
	cae__iso8601_now(created, sizeof(created));
	snprintf(cid, sizeof(cid), "local-%s", new_uuid);
	snprintf(wsroot, sizeof(wsroot), "%s/%s/workspace", real, new_uuid);
	snprintf(project, sizeof(project), "%s/project", wsroot);
	json_object_set_new(meta, "task_uuid", json_string(new_uuid));
	json_object_set_new(meta, "container_id", json_string(cid));
	json_object_set_new(meta, "created_at", json_string(created));
	json_object_set_new(meta, "workspace_root", json_string(wsroot));
	json_object_set_new(meta, "host_path", json_string(project));
	json_object_set_new(meta, "instance", json_string(b->instance));
	json_object_set_new(meta, "forked_from",
			    json_pack("{s:s, s:s?}", "task_uuid", src_uuid, "snapshot", snap_id));
	free(snap_id);
	_cleanup_free_ char *mpath = cae__path_join(tmp, "meta.json");
	if (r == 0)
		r = mpath ? write_json(mpath, meta) : -ENOMEM;
	if (r == 0 && renameat2(AT_FDCWD, tmp, AT_FDCWD, ndir, RENAME_NOREPLACE) < 0)
		r = cae_error_set(err, -errno,
				  errno == EEXIST ? "task %s has an environment already"
						  : "cannot put the fork in place: %s",
				  errno == EEXIST ? new_uuid : strerror(errno));
	if (r < 0) {
		(void)cae__rm_rf(tmp);
		json_decref(meta);
		return r;
	}
	/* mounted now (else by its first use) */
	_cleanup_free_ char *img = cae__path_join(ndir, CAE_DISKFS_IMAGE);
	_cleanup_free_ char *ws = cae__path_join(ndir, "workspace");
	if (img && ws)
		(void)cae__diskfs_remount(img, ws, NULL);
	r = cae_env_info_from_json(meta, info, err);
	json_t *res = r == 0 ? cae_env_info_to_json(info) : NULL;
	if (res) {
		json_object_set(res, "forked_from", json_object_get(meta, "forked_from"));
		json_object_set_new(res, "mechanism", json_string(mech ? mech : "copy"));
		json_object_set_new(res, "duration_ms", json_integer(cae__now_ms() - t0));
		cae_log_fields(b->log, CAE_LOG_INFO, "environment.fork",
			       json_pack("{s:s, s:O, s:s}", "task_uuid", new_uuid, "forked_from",
					 json_object_get(meta, "forked_from"), "mechanism",
					 mech ? mech : "copy"),
			       NULL);
	}
	json_decref(meta);
	if (out)
		*out = res;
	else
		json_decref(res);
	return r;
}

/* ---- collection ---- */

/* Removes the entries of dir starting with prefix whose process (the tag after the prefix)
 * is gone. */
static int sweep_prefix(const char *dir, const char *prefix)
{
	DIR *d = opendir(dir);
	if (!d)
		return 0;
	int n = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (strncmp(de->d_name, prefix, strlen(prefix)) != 0 ||
		    cae__preparer_tag_alive(de->d_name + strlen(prefix)))
			continue;
		_cleanup_free_ char *p = cae__path_join(dir, de->d_name);
		if (p && cae__rm_rf(p) == 0)
			n++;
	}
	closedir(d);
	return n;
}

/* Removes the snapshots of the environment in dir older than
 * command_executor.snapshots.max_age_hours (0: none). */
static int sweep_old(cae_backend *b, const char *dir, const char *sd)
{
	int hours = b->cfg->command_executor.snapshots.max_age_hours;
	if (hours <= 0)
		return 0;
	int64_t cutoff = (int64_t)time(NULL) - (int64_t)hours * 3600;
	json_t *arr = json_array();
	list_dir(dir, arr);
	int n = 0;
	size_t i;
	json_t *e;
	json_array_foreach(arr, i, e)
	{
		int64_t t = cae__parse_iso8601(json_string_value(json_object_get(e, "created_at")));
		const char *id = json_string_value(json_object_get(e, "id"));
		if (t < 0 || t >= cutoff || !name_valid(id))
			continue;
		_cleanup_free_ char *one = cae__path_join(sd, id);
		if (one && cae__rm_rf(one) == 0)
			n++;
	}
	json_decref(arr);
	return n;
}

int cae__snapshot_sweep(cae_backend *b, const char *root)
{
	DIR *d = opendir(root);
	if (!d)
		return 0;
	int n = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (!cae_task_uuid_valid(de->d_name))
			continue;
		_cleanup_free_ char *dir = cae__path_join(root, de->d_name);
		_cleanup_free_ char *mp = dir ? cae__path_join(dir, "meta.json") : NULL;
		_cleanup_free_ char *sd = dir ? cae__path_join(dir, CAE_SNAPSHOT_DIR) : NULL;
		_cleanup_free_ char *ws = dir ? cae__path_join(dir, "workspace") : NULL;
		json_t *meta = mp ? read_json(mp) : NULL;
		bool mine = meta && cae__backend_sees(
					b, json_string_value(json_object_get(meta, "instance")));
		json_decref(meta);
		if (!mine || !sd || !ws)
			continue;
		/* busy: a snapshot, restore or fork of it is running now */
		_cleanup_close_ int lock = lock_env(dir, false);
		if (lock < 0)
			continue;
		thaw(ws);
		n += sweep_prefix(sd, TMP_PREFIX);
		n += sweep_prefix(dir, RESTORE_PREFIX);
		n += sweep_old(b, dir, sd);
	}
	closedir(d);
	return n;
}
