/* Per-environment cgroups for the local sandbox: pids, memory and cpu bounds, on cgroup v2
 * (the unified hierarchy with its controllers) or on v1 (one hierarchy per controller).
 * The environment's cgroup is made below the cgroup this process is in, so that it stays
 * inside whatever bounds the operator put on cae itself. Processes join it in
 * `cae-helper --enter` before bwrap starts (no window in which a child escapes). */
#include "backend/sandbox.h"

#include "base/fs.h"
#include "base/macro.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/banned.h"

#define CG_ROOT "/sys/fs/cgroup"

/* The v1 hierarchies an environment's cgroup is made in. */
static const char *const v1_controllers[] = {"pids", "memory", "cpu"};

/* This process's cgroup path in the hierarchy that has `controller` (v1), or in the unified
 * hierarchy when controller is NULL. New string, or NULL. */
static char *own_cgroup(const char *controller)
{
	_cleanup_free_ char *text = NULL;
	size_t len;
	if (cae__read_file(AT_FDCWD, "/proc/self/cgroup", 65536, &text, &len) < 0)
		return NULL;
	for (char *line = text, *next; line && *line; line = next) {
		next = strchr(line, '\n');
		if (next)
			*next++ = '\0';
		char *c1 = strchr(line, ':');
		char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
		if (!c2)
			continue;
		*c2 = '\0';
		const char *list = c1 + 1, *path = c2 + 1;
		if (!controller) {
			if (strcmp(line, "0") == 0 && *list == '\0')
				return strdup(path);
			continue;
		}
		/* "cpu,cpuacct": the controller is one of the comma-separated names */
		size_t cl = strlen(controller);
		for (const char *p = list; *p;) {
			const char *comma = strchr(p, ',');
			size_t l = comma ? (size_t)(comma - p) : strlen(p);
			if (l == cl && strncmp(p, controller, l) == 0)
				return strdup(path);
			p += l + (comma ? 1 : 0);
		}
	}
	return NULL;
}

static int write_str(const char *dir, const char *file, const char *value)
{
	_cleanup_free_ char *p = cae__path_join(dir, file);
	if (!p)
		return -ENOMEM;
	_cleanup_close_ int fd = open(p, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	ssize_t n = write(fd, value, strlen(value));
	if (n < 0)
		return -errno;
	return (size_t)n == strlen(value) ? 0 : -EIO;
}

static bool is_v2(void)
{
	return access(CG_ROOT "/cgroup.controllers", F_OK) == 0;
}

/* The directory of the environment's cgroup in one hierarchy (new string). */
static char *cg_dir(const char *mount, const char *controller, const char *name)
{
	_cleanup_free_ char *own = own_cgroup(controller);
	if (!own)
		return NULL;
	_cleanup_free_ char *base = cae__path_join(mount, own);
	if (!base)
		return NULL;
	char leaf[160];
	snprintf(leaf, sizeof(leaf), "cae-%s", name);
	return cae__path_join(base, leaf);
}

static int make_dir(const char *dir)
{
	if (mkdir(dir, 0755) < 0 && errno != EEXIST)
		return -errno;
	return 0;
}

static void free_list(char **l, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(l[i]);
	free(l);
}

static int setup_v2(const char *name, const cae_sandbox_limits *lim, char ***procs, size_t *n)
{
	_cleanup_free_ char *dir = cg_dir(CG_ROOT, NULL, name);
	if (!dir)
		return -ENOENT;
	/* The controllers must be enabled for our children; refused when our own cgroup has
	 * processes and is not the root (v2's "no internal processes" rule). */
	char *slash = strrchr(dir, '/');
	*slash = '\0';
	int r = write_str(dir, "cgroup.subtree_control", "+pids +memory +cpu");
	*slash = '/';
	if (r < 0)
		return r;
	if ((r = make_dir(dir)) < 0)
		return r;
	char v[64];
	snprintf(v, sizeof(v), "%d", lim->pids);
	if ((r = write_str(dir, "pids.max", v)) < 0)
		return r;
	snprintf(v, sizeof(v), "%" PRIu64, lim->memory_bytes);
	if ((r = write_str(dir, "memory.max", v)) < 0)
		return r;
	(void)write_str(dir, "memory.swap.max", "0");
	snprintf(v, sizeof(v), "%lld 100000", (long long)(lim->cpus * 100000));
	if ((r = write_str(dir, "cpu.max", v)) < 0)
		return r;
	char **l = calloc(1, sizeof(char *));
	if (!l || !(l[0] = cae__path_join(dir, "cgroup.procs"))) {
		free(l);
		return -ENOMEM;
	}
	*procs = l;
	*n = 1;
	return 0;
}

static int setup_v1(const char *name, const cae_sandbox_limits *lim, char ***procs, size_t *n)
{
	const char *const *ctl = v1_controllers;
	char **l = calloc(ARRAY_SIZE(v1_controllers), sizeof(char *));
	if (!l)
		return -ENOMEM;
	size_t k = 0;
	int r = 0;
	for (size_t i = 0; i < ARRAY_SIZE(v1_controllers) && r == 0; i++) {
		_cleanup_free_ char *mount = cae__path_join(CG_ROOT, ctl[i]);
		_cleanup_free_ char *dir = mount ? cg_dir(mount, ctl[i], name) : NULL;
		if (!dir) {
			r = -ENOENT;
			break;
		}
		if ((r = make_dir(dir)) < 0)
			break;
		char v[64];
		if (strcmp(ctl[i], "pids") == 0) {
			snprintf(v, sizeof(v), "%d", lim->pids);
			r = write_str(dir, "pids.max", v);
		} else if (strcmp(ctl[i], "memory") == 0) {
			snprintf(v, sizeof(v), "%" PRIu64, lim->memory_bytes);
			r = write_str(dir, "memory.limit_in_bytes", v);
			/* memory + swap, where swap accounting is on */
			(void)write_str(dir, "memory.memsw.limit_in_bytes", v);
		} else {
			r = write_str(dir, "cpu.cfs_period_us", "100000");
			snprintf(v, sizeof(v), "%lld", (long long)(lim->cpus * 100000));
			if (r == 0)
				r = write_str(dir, "cpu.cfs_quota_us", v);
		}
		if (r == 0 && !(l[k++] = cae__path_join(dir, "cgroup.procs")))
			r = -ENOMEM;
	}
	if (r < 0) {
		free_list(l, k);
		return r;
	}
	*procs = l;
	*n = k;
	return 0;
}

int cae__sandbox_cgroup_setup(const char *name, const cae_sandbox_limits *lim, char ***procs,
			      size_t *n)
{
	*procs = NULL;
	*n = 0;
	if (access(CG_ROOT, W_OK) < 0 && errno != EROFS)
		return -EACCES;
	int r = is_v2() ? setup_v2(name, lim, procs, n) : setup_v1(name, lim, procs, n);
	if (r < 0)
		cae__sandbox_cgroup_remove(name);
	return r;
}

void cae__sandbox_cgroup_remove(const char *name)
{
	if (is_v2()) {
		_cleanup_free_ char *dir = cg_dir(CG_ROOT, NULL, name);
		if (dir)
			(void)rmdir(dir);
		return;
	}
	const char *const *ctl = v1_controllers;
	for (size_t i = 0; i < ARRAY_SIZE(v1_controllers); i++) {
		_cleanup_free_ char *mount = cae__path_join(CG_ROOT, ctl[i]);
		_cleanup_free_ char *dir = mount ? cg_dir(mount, ctl[i], name) : NULL;
		if (dir)
			(void)rmdir(dir); /* refused while processes are in it: fine */
	}
}

/* Removes the empty "cae-*" cgroups below ours that keep() does not claim. */
static int sweep_dir(const char *dir, bool (*keep)(const char *name, void *ud), void *ud)
{
	DIR *d = opendir(dir);
	if (!d)
		return 0;
	int removed = 0;
	struct dirent *de;
	while ((de = readdir(d)))
		if (strncmp(de->d_name, "cae-", 4) == 0 && de->d_type == DT_DIR &&
		    !keep(de->d_name + 4, ud) && unlinkat(dirfd(d), de->d_name, AT_REMOVEDIR) == 0)
			removed++;
	closedir(d);
	return removed;
}

int cae__sandbox_cgroup_sweep(bool (*keep)(const char *name, void *ud), void *ud)
{
	if (is_v2()) {
		_cleanup_free_ char *own = own_cgroup(NULL);
		_cleanup_free_ char *dir = own ? cae__path_join(CG_ROOT, own) : NULL;
		return dir ? sweep_dir(dir, keep, ud) : 0;
	}
	const char *const *ctl = v1_controllers;
	int removed = 0;
	for (size_t i = 0; i < ARRAY_SIZE(v1_controllers); i++) {
		_cleanup_free_ char *own = own_cgroup(ctl[i]);
		_cleanup_free_ char *mount = cae__path_join(CG_ROOT, ctl[i]);
		_cleanup_free_ char *dir = own && mount ? cae__path_join(mount, own) : NULL;
		if (dir)
			removed += sweep_dir(dir, keep, ud);
	}
	return removed;
}
