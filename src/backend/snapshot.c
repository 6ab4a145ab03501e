/* Snapshots, restores and forks of an environment (include/cae/snapshot.h): what every
 * backend shares. Each environment's snapshots are records in a directory of its own (its
 * backend's env_dir):
 *   <env dir>/snapshots/<id>/snapshot.json   what it is (and what its backend keeps there:
 *                                            the local backend's image or tree, docker's
 *                                            workspace image; see snapshot-local.c and
 *                                            snapshot-docker.c)
 *   <env dir>/snapshot.lock                  one snapshot, restore or live fork of it at a
 *                                            time (flock)
 * Here: names and ids, the bounds (command_executor.snapshots: per environment and in
 * bytes), listing, the temporary name a snapshot is made under (snapshots/.tmp.<tag>.<id>,
 * renamed into place after its snapshot.json: a snapshot killed half-way is never listed),
 * the results and events, and the sweep of what dead processes left and of snapshots past
 * their maximum age. The backend's storage is behind cae__snapshot_ops (snapshot.h). */
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
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/banned.h"

#define META_MAX (1024 * 1024)
#define LOCK_NAME "snapshot.lock"

/* ---- records ---- */

json_t *cae__snapshot_read_json(const char *path)
{
	_cleanup_free_ char *text = NULL;
	size_t len;
	if (cae__read_file(AT_FDCWD, path, META_MAX, &text, &len) < 0)
		return NULL;
	return json_loadb(text, len, 0, NULL);
}

int cae__snapshot_write_json(const char *path, json_t *j)
{
	_cleanup_free_ char *text = json_dumps(j, JSON_INDENT(2) | JSON_SORT_KEYS);
	return text ? cae__write_file_atomic(AT_FDCWD, path, text, strlen(text), 0600, false)
		    : -ENOMEM;
}

/* The storage of b's backend, or NULL (-EOPNOTSUPP with err set). */
static const cae__snapshot_ops *ops_of(cae_backend *b, cae_error *err)
{
	const char *n = cae_backend_name(b);
	if (strcmp(n, "local") == 0)
		return &cae__snapshot_local_ops;
	if (strcmp(n, "docker") == 0)
		return &cae__snapshot_docker_ops;
	if (strcmp(n, "kubernetes") == 0)
		return &cae__snapshot_kubernetes_ops;
	cae_error_set(err, -EOPNOTSUPP, "snapshots are not available on the %s backend yet", n);
	return NULL;
}

/* uuid's environment checked (ours, ready) through its backend: 0 with *meta, or -errno. */
static int load_meta(cae_backend *b, const cae__snapshot_ops *ops, const char *uuid, json_t **meta,
		     cae_error *err)
{
	if (!uuid || !cae_task_uuid_valid(uuid))
		return cae_error_set(err, -EINVAL, "invalid task uuid");
	return ops->check(b, uuid, meta, err);
}

static bool name_valid(const char *s)
{
	return s && cae_task_uuid_valid(s);
}

/* The environment's lock (snapshot.lock), held while its files are taken or replaced. */
int cae__snapshot_lock(const char *dir, bool wait)
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

bool cae__snapshot_held(const char *dir)
{
	if (!dir || !cae__is_dir(dir))
		return false;
	int fd = cae__snapshot_lock(dir, false);
	if (fd >= 0)
		close(fd);
	return fd == -EWOULDBLOCK;
}

/* Thaws the workspace's file system (one a killed snapshot left frozen; harmless on one that
 * is not). Under the environment's lock only. */
void cae__snapshot_thaw(const char *ws)
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
int cae__snapshot_clone_file(const char *src, const char *dst, const char **mech, cae_error *err)
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
int cae__snapshot_copy_tree(const char *src, const char *dst, cae_error *err)
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
int cae__snapshot_capture(const char *dir, const char *dst_dir, const char *tree_name,
			  const char **kind, const char **mech, cae_error *err)
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
		int r = cae__snapshot_clone_file(img, dimg, mech, err);
		if (fd >= 0) {
			(void)ioctl(fd, FITHAW, 0);
			freeze_guard_end(guard, done);
		}
		return r;
	}
	*kind = "tree";
	*mech = "copy";
	return cae__snapshot_copy_tree(ws, dtree, err);
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
		json_t *j = path ? cae__snapshot_read_json(path) : NULL;
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

/* The directory of snapshot rec of the environment in dir (new string). */
static char *snap_path(const char *dir, json_t *rec)
{
	const char *id = json_string_value(json_object_get(rec, "id"));
	char *p = NULL;
	if (!name_valid(id) || asprintf(&p, "%s/" CAE_SNAPSHOT_DIR "/%s", dir, id) < 0)
		return NULL;
	return p;
}

int cae_snapshot_create(cae_backend *b, const char *uuid, const char *name, json_t **out,
			cae_error *err)
{
	int64_t t0 = cae__now_ms();
	const cae__snapshot_ops *ops = ops_of(b, err);
	if (!ops)
		return -EOPNOTSUPP;
	_cleanup_(json_decrefp) json_t *meta = NULL;
	int r = load_meta(b, ops, uuid, &meta, err);
	if (r < 0)
		return r;
	if (name && !name_valid(name))
		return cae_error_set(err, -EINVAL,
				     "invalid snapshot name (1-64 of A-Z a-z 0-9 _ . -, not "
				     "starting with . or -)");
	_cleanup_free_ char *dir = ops->env_dir(b, uuid);
	_cleanup_free_ char *sd = dir ? cae__path_join(dir, CAE_SNAPSHOT_DIR) : NULL;
	if (!sd)
		return -ENOMEM;
	const struct cae_config *cfg = b->cfg;
	int max = cfg->command_executor.snapshots.max_per_environment;
	uint64_t max_bytes = cfg->command_executor.snapshots.max_bytes;
	r = cae__mkdir_p(sd, 0700);
	if (r < 0)
		return cae_error_set(err, r, "cannot make %s: %s", sd, strerror(-r));
	_cleanup_close_ int lock = cae__snapshot_lock(dir, true);
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
	char id[64], tag[64];
	new_id(id, sizeof(id));
	cae__preparer_tag(tag, sizeof(tag));
	_cleanup_free_ char *tmp = NULL, *final = cae__path_join(sd, id);
	if (!final || asprintf(&tmp, "%s/" CAE_SNAPSHOT_TMP_PREFIX "%s.%s", sd, tag, id) < 0)
		return -ENOMEM;
	if (mkdir(tmp, 0700) < 0)
		return cae_error_set(err, -errno, "cannot make %s: %s", tmp, strerror(errno));
	char created[40];
	cae__iso8601_now(created, sizeof(created));
	json_t *rec = json_pack("{s:s, s:s?, s:s, s:s}", "id", id, "name", name, "task_uuid", uuid,
				"created_at", created);
	if (!rec) {
		(void)cae__rm_rf(tmp);
		return -ENOMEM;
	}
	r = ops->capture(b, uuid, meta, tmp, id, rec, err);
	uint64_t bytes = r == 0 ? cae__disk_use(tmp) : 0;
	bytes += (uint64_t)json_integer_value(json_object_get(rec, "outside_bytes"));
	json_object_del(rec, "outside_bytes");
	if (r == 0 && max_bytes && used + bytes > max_bytes)
		r = cae_error_set(err, -ENOSPC,
				  "the snapshot would make environment %s's snapshots take %llu "
				  "bytes, more than command_executor.snapshots.max_size (%llu)",
				  uuid, (unsigned long long)(used + bytes),
				  (unsigned long long)max_bytes);
	if (r == 0) {
		json_object_set_new(rec, "bytes", json_integer((json_int_t)bytes));
		_cleanup_free_ char *path = cae__path_join(tmp, "snapshot.json");
		r = path ? cae__snapshot_write_json(path, rec) : -ENOMEM;
		if (r == 0 && rename(tmp, final) < 0)
			r = -errno;
		if (r < 0)
			cae_error_set(err, r, "cannot record the snapshot: %s", strerror(-r));
	}
	if (r < 0) {
		if (ops->discard)
			ops->discard(b, rec);
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
	cae_error quiet = {0};
	const cae__snapshot_ops *ops = ops_of(b, uuid ? err : &quiet);
	if (!ops) {
		if (!uuid) {
			*out = arr;
			return 0;
		}
		json_decref(arr);
		return -EOPNOTSUPP;
	}
	if (uuid) {
		json_t *meta = NULL;
		int r = load_meta(b, ops, uuid, &meta, err);
		if (r < 0 && r != -EAGAIN) {
			json_decref(arr);
			return r;
		}
		json_decref(meta);
		_cleanup_free_ char *dir = ops->env_dir(b, uuid);
		if (dir)
			list_dir(dir, arr);
		*out = arr;
		return 0;
	}
	_cleanup_free_ char *root = ops->root(b);
	DIR *d = root ? opendir(root) : NULL;
	struct dirent *de;
	while (d && (de = readdir(d))) {
		if (!cae_task_uuid_valid(de->d_name) || !ops->sees(b, de->d_name))
			continue;
		_cleanup_free_ char *dir = cae__path_join(root, de->d_name);
		if (dir)
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
	int lock = cae__snapshot_lock(dir, true);
	if (lock < 0 && lock != -ENOENT)
		return cae_error_set(err, lock, "cannot lock environment %s: %s", uuid,
				     strerror(-lock));
	*s = snapshot && lock >= 0 ? find_snapshot(dir, snapshot) : NULL;
	if (!*s) {
		if (lock >= 0)
			close(lock);
		return cae_error_set(err, -ENOENT, "environment %s has no snapshot %s", uuid,
				     snapshot ? snapshot : "");
	}
	return lock;
}

int cae_snapshot_remove(cae_backend *b, const char *uuid, const char *snapshot, cae_error *err)
{
	const cae__snapshot_ops *ops = ops_of(b, err);
	if (!ops)
		return -EOPNOTSUPP;
	json_t *meta = NULL;
	int r = load_meta(b, ops, uuid, &meta, err);
	if (r < 0)
		return r;
	json_decref(meta);
	_cleanup_free_ char *dir = ops->env_dir(b, uuid);
	if (!dir)
		return -ENOMEM;
	json_t *s = NULL;
	_cleanup_close_ int lock = locked_snapshot(dir, uuid, snapshot, &s, err);
	if (lock < 0)
		return lock;
	_cleanup_free_ char *one = snap_path(dir, s);
	/* its record first: a removal killed half-way leaves nothing listed */
	_cleanup_free_ char *rec = one ? cae__path_join(one, "snapshot.json") : NULL;
	r = rec ? unlink(rec) < 0 && errno != ENOENT ? -errno : 0 : -ENOMEM;
	if (r == 0 && ops->discard)
		ops->discard(b, s);
	json_decref(s);
	if (r == 0)
		r = cae__rm_rf(one);
	return r < 0 ? cae_error_set(err, r, "cannot remove the snapshot: %s", strerror(-r)) : 0;
}

/* ---- restore ---- */

int cae_snapshot_restore(cae_backend *b, const char *uuid, const char *snapshot, json_t **out,
			 cae_error *err)
{
	int64_t t0 = cae__now_ms();
	const cae__snapshot_ops *ops = ops_of(b, err);
	if (!ops)
		return -EOPNOTSUPP;
	_cleanup_(json_decrefp) json_t *meta = NULL;
	int r = load_meta(b, ops, uuid, &meta, err);
	if (r < 0)
		return r;
	_cleanup_free_ char *dir = ops->env_dir(b, uuid);
	if (!dir)
		return -ENOMEM;
	_cleanup_(json_decrefp) json_t *s = NULL;
	_cleanup_close_ int lock = locked_snapshot(dir, uuid, snapshot, &s, err);
	if (lock < 0)
		return lock;
	_cleanup_free_ char *one = snap_path(dir, s);
	json_t *res = json_pack("{s:s, s:s}", "task_uuid", uuid, "snapshot",
				json_string_value(json_object_get(s, "id")));
	if (!one || !res) {
		json_decref(res);
		return -ENOMEM;
	}
	r = ops->restore(b, uuid, meta, one, s, res, err);
	if (r < 0) {
		json_decref(res);
		return r;
	}
	json_object_set_new(res, "duration_ms", json_integer(cae__now_ms() - t0));
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
static char *owner_of_snapshot(cae_backend *b, const cae__snapshot_ops *ops, const char *snapshot)
{
	_cleanup_free_ char *root = ops->root(b);
	DIR *d = root ? opendir(root) : NULL;
	char *found = NULL;
	struct dirent *de;
	while (d && !found && (de = readdir(d))) {
		if (!cae_task_uuid_valid(de->d_name))
			continue;
		_cleanup_free_ char *dir = cae__path_join(root, de->d_name);
		_cleanup_free_ char *sd = dir ? cae__path_join(dir, CAE_SNAPSHOT_DIR) : NULL;
		_cleanup_free_ char *one = sd ? cae__path_join(sd, snapshot) : NULL;
		if (one && name_valid(snapshot) && cae__is_dir(one) && ops->sees(b, de->d_name))
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
	const cae__snapshot_ops *ops = ops_of(b, err);
	if (!ops)
		return -EOPNOTSUPP;
	if (!new_uuid || !cae_task_uuid_valid(new_uuid))
		return cae_error_set(err, -EINVAL, "invalid task uuid for the fork");
	_cleanup_free_ char *src_uuid = from_uuid ? strdup(from_uuid) : NULL;
	if (!src_uuid && snapshot)
		src_uuid = owner_of_snapshot(b, ops, snapshot);
	if (!src_uuid)
		return cae_error_set(err, from_uuid || snapshot ? -ENOENT : -EINVAL,
				     snapshot ? "no snapshot %s" : "nothing to fork from%s",
				     snapshot ? snapshot : "");
	_cleanup_(json_decrefp) json_t *meta = NULL;
	int r = load_meta(b, ops, src_uuid, &meta, err);
	if (r < 0)
		return r;
	_cleanup_free_ char *sdir = ops->env_dir(b, src_uuid);
	if (!sdir)
		return -ENOMEM;
	_cleanup_(json_decrefp) json_t *s = NULL;
	_cleanup_free_ char *one = NULL;
	if (snapshot) {
		s = find_snapshot(sdir, snapshot);
		if (!s)
			return cae_error_set(err, -ENOENT, "environment %s has no snapshot %s",
					     src_uuid, snapshot);
		if (!(one = snap_path(sdir, s)))
			return -ENOMEM;
	}
	json_t *from = json_pack("{s:s, s:s?}", "task_uuid", src_uuid, "snapshot",
				 json_string_value(json_object_get(s, "id")));
	if (!from)
		return -ENOMEM;
	const char *mech = NULL;
	r = ops->fork(b, src_uuid, meta, one, s, new_uuid, from, info, &mech, err);
	json_t *res = r == 0 ? cae_env_info_to_json(info) : NULL;
	if (res) {
		json_object_set(res, "forked_from", from);
		json_object_set_new(res, "mechanism", json_string(mech ? mech : "copy"));
		json_object_set_new(res, "duration_ms", json_integer(cae__now_ms() - t0));
		cae_log_fields(b->log, CAE_LOG_INFO, "environment.fork",
			       json_pack("{s:s, s:O, s:s}", "task_uuid", new_uuid, "forked_from",
					 from, "mechanism", mech ? mech : "copy"),
			       NULL);
	}
	json_decref(from);
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
static int sweep_old(cae_backend *b, const cae__snapshot_ops *ops, const char *dir)
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
		if (t < 0 || t >= cutoff)
			continue;
		_cleanup_free_ char *one = snap_path(dir, e);
		_cleanup_free_ char *rec = one ? cae__path_join(one, "snapshot.json") : NULL;
		if (!rec || (unlink(rec) < 0 && errno != ENOENT))
			continue;
		if (ops->discard)
			ops->discard(b, e);
		if (cae__rm_rf(one) == 0)
			n++;
	}
	json_decref(arr);
	return n;
}

int cae__snapshot_sweep(cae_backend *b, const char *root)
{
	const cae__snapshot_ops *ops = ops_of(b, NULL);
	if (!ops)
		return 0;
	_cleanup_free_ char *own = root ? NULL : ops->root(b);
	if (!root && !(root = own))
		return 0;
	DIR *d = opendir(root);
	int n = 0;
	struct dirent *de;
	while (d && (de = readdir(d))) {
		if (!cae_task_uuid_valid(de->d_name) || !ops->sees(b, de->d_name))
			continue;
		_cleanup_free_ char *dir = cae__path_join(root, de->d_name);
		_cleanup_free_ char *sd = dir ? cae__path_join(dir, CAE_SNAPSHOT_DIR) : NULL;
		if (!sd)
			continue;
		/* busy: a snapshot, restore or fork of it is running now */
		_cleanup_close_ int lock = cae__snapshot_lock(dir, false);
		if (lock < 0)
			continue;
		if (ops->tidy)
			ops->tidy(b, de->d_name);
		n += sweep_prefix(sd, CAE_SNAPSHOT_TMP_PREFIX);
		n += sweep_prefix(dir, CAE_SNAPSHOT_RESTORE_PREFIX);
		n += sweep_old(b, ops, dir);
	}
	if (d)
		closedir(d);
	if (ops->sweep)
		n += ops->sweep(b);
	return n;
}
