/* cae-helper --enter: the first step of a local sandbox, run on the host before bwrap.
 *
 *   cae-helper --enter [--cgroup FILE]... [--rlimit NAME=N]... [--stage DIR SRC...]
 *                      [--hide DIR]... [--seccomp FILE] [--idmap UID:GID] [--user UID:GID] --
 * PROGRAM ARG...
 *
 * In this order, then exec PROGRAM (bwrap):
 *   1. write "0" to every FILE (a cgroup's cgroup.procs): this process, and all it starts,
 *      join the environment's cgroups before anything runs in them;
 *   2. set each rlimit (soft = hard; data, nproc, cpu, fsize, core, nofile);
 *   3. --stage (root only): in a mount namespace of our own, mount a small tmpfs on DIR and
 *      put each SRC on DIR/0, DIR/1, ...: bwrap runs as the sandbox uid below and must
 *      reach its sources, which may lie below directories only root may cross (/root). A
 *      directory is bind-mounted; a file is copied (content and mode), so that what bwrap
 *      binds from it names no host path (a bind's root in /proc/self/mountinfo is its
 *      source's path within its file system: here "/1", "/2" ... of the tmpfs). With
 *      --idmap, the first SRC (a directory) is mounted idmapped instead (base/idmap.h): its
 *      files of owner UID:GID on disk are the --user uid's there, and what that uid makes
 *      in it is the owner's on disk. Then, for each --hide DIR (where the state directory
 *      keeps environments' workspaces), every mount at or below it is detached from this
 *      namespace (the sources are staged by then): the namespace, and bwrap's made from
 *      it, hold no copy of another environment's workspace, so that its unmount on the host (a
 * restore, a cleanup) ends its file system and frees its image's disk at once, not when this
 * sandbox ends (the host's mounts are private on many machines: unmounts do not propagate);
 *   4. --seccomp: open FILE (a seccomp filter as a BPF program, which bwrap reads from the
 *      descriptor its own --seccomp names) on CAE_HELPER_ENTER_SECCOMP_FD, inherited by
 *      PROGRAM;
 *   5. join a new session keyring (KEYCTL_JOIN_SESSION_KEYRING), always: the sandbox never
 *      shares the caller's session keyring, nor another sandbox's (made before the switch
 *      of uid, so that it is charged to cae's key quota, not the sandbox uid's);
 *   6. --user: drop every group and switch to UID:GID for good (no capabilities are kept),
 *      so that bwrap's user namespace maps the sandbox's uid onto an unprivileged host uid,
 *      never onto root.
 * Any failure exits with 125 and a line on stderr; PROGRAM missing exits with 127. */
#include "helper/enter.h"

#include "base/idmap.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <linux/keyctl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/banned.h"

#define ENTER_FAIL 125

static int fail(const char *what, const char *arg, int e)
{
	fprintf(stderr, "cae-helper: enter: %s%s%s: %s\n", what, arg ? " " : "", arg ? arg : "",
		strerror(e));
	return ENTER_FAIL;
}

static int parse_u64(const char *s, unsigned long long *out)
{
	if (!*s)
		return -EINVAL;
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (*end || errno || s[0] == '-')
		return -EINVAL;
	*out = v;
	return 0;
}

static const struct {
	const char *name;
	int resource;
} rlimits[] = {
    {"data", RLIMIT_DATA},   {"nproc", RLIMIT_NPROC}, {"cpu", RLIMIT_CPU},
    {"fsize", RLIMIT_FSIZE}, {"core", RLIMIT_CORE},   {"nofile", RLIMIT_NOFILE},
};

static int set_rlimit(const char *spec)
{
	const char *eq = strchr(spec, '=');
	unsigned long long v;
	if (!eq || parse_u64(eq + 1, &v) < 0)
		return fail("bad --rlimit", spec, EINVAL);
	for (size_t i = 0; i < sizeof(rlimits) / sizeof(rlimits[0]); i++) {
		if (strlen(rlimits[i].name) != (size_t)(eq - spec) ||
		    strncmp(rlimits[i].name, spec, (size_t)(eq - spec)) != 0)
			continue;
		struct rlimit rl = {.rlim_cur = v, .rlim_max = v};
		if (setrlimit(rlimits[i].resource, &rl) < 0)
			return fail("setrlimit", spec, errno);
		return 0;
	}
	return fail("unknown rlimit", spec, EINVAL);
}

static int join_cgroup(const char *procs)
{
	int fd = open(procs, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return fail("cgroup", procs, errno);
	ssize_t n = write(fd, "0", 1);
	int e = errno;
	close(fd);
	return n == 1 ? 0 : fail("cgroup", procs, n < 0 ? e : EIO);
}

/* Copies the regular file src (content and permission bits) to the new file target. */
static int stage_copy(const char *src, const char *target)
{
	int in = open(src, O_RDONLY | O_CLOEXEC);
	if (in < 0)
		return fail("stage", src, errno);
	struct stat st;
	int out = fstat(in, &st) < 0
		      ? -1
		      : open(target, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, st.st_mode & 0755);
	if (out < 0) {
		int e = errno;
		close(in);
		return fail("stage copy", target, e);
	}
	int r = 0;
	for (;;) {
		ssize_t k = sendfile(out, in, NULL, 1 << 20);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			r = fail("stage copy", src, errno);
		if (k <= 0)
			break;
	}
	if (r == 0 && fchmod(out, st.st_mode & 0755) < 0)
		r = fail("stage copy", target, errno);
	close(in);
	close(out);
	return r;
}

static int parse_ids(const char *spec, unsigned long long *uid, unsigned long long *gid)
{
	char buf[64];
	snprintf(buf, sizeof(buf), "%s", spec);
	char *colon = strchr(buf, ':');
	if (!colon)
		return -EINVAL;
	*colon = '\0';
	if (parse_u64(buf, uid) < 0 || parse_u64(colon + 1, gid) < 0 || *uid > 0xfffffffeULL ||
	    *gid > 0xfffffffeULL)
		return -EINVAL;
	return 0;
}

/* src idmapped (owner idmap -> user) on target. */
static int stage_idmapped(const char *src, const char *target, const char *idmap, const char *user)
{
	unsigned long long ou, og, uu, ug;
	if (!user || parse_ids(idmap, &ou, &og) < 0 || parse_ids(user, &uu, &ug) < 0)
		return fail("bad --idmap (it needs --user)", idmap, EINVAL);
	int ns = cae__idmap_userns((uid_t)ou, (gid_t)og, (uid_t)uu, (gid_t)ug);
	if (ns < 0)
		return fail("idmap user namespace", idmap, -ns);
	int t = cae__idmap_clone(src, ns);
	close(ns);
	if (t < 0)
		return fail("idmapped mount of", src, -t);
	int r = cae__idmap_attach(t, target);
	close(t);
	return r < 0 ? fail("idmapped mount on", target, -r) : 0;
}

/* The mount point field of a /proc/self/mountinfo line, unescaped into out (octal escapes:
 * \040 for a space, \011, \012, \134). Returns 0, or -1 for a line without one. */
static int mountinfo_point(const char *line, char *out, size_t size)
{
	const char *p = line;
	for (int f = 0; f < 4; f++) {
		p = strchr(p, ' ');
		if (!p)
			return -1;
		p++;
	}
	size_t n = 0;
	while (*p && *p != ' ' && *p != '\n' && n + 1 < size) {
		if (p[0] == '\\' && p[1] >= '0' && p[1] <= '3' && p[2] >= '0' && p[2] <= '7' &&
		    p[3] >= '0' && p[3] <= '7') {
			out[n++] = (char)((p[1] - '0') * 64 + (p[2] - '0') * 8 + (p[3] - '0'));
			p += 4;
		} else {
			out[n++] = *p++;
		}
	}
	out[n] = '\0';
	return n > 0 ? 0 : -1;
}

/* Detaches every mount at or below dir from this mount namespace: passes over
 * /proc/self/mountinfo until one finds nothing (a mount stacked on another, a line the
 * file's reader skipped as the table changed under it). */
static int hide(const char *named)
{
	/* the mount table has real paths: a state directory named through a symbolic link (or
	 * with "..") is looked for by the path it resolves to; none yet, nothing below it */
	char dir[PATH_MAX];
	if (!realpath(named, dir))
		return errno == ENOENT ? 0 : fail("hide", named, errno);
	size_t len = strlen(dir);
	while (len > 1 && dir[len - 1] == '/')
		len--;
	char *line = NULL;
	size_t cap = 0;
	char mp[PATH_MAX];
	int r = 0;
	for (int pass = 0, detached = 1; r == 0 && detached > 0; pass++) {
		if (pass == 16) {
			r = fail("hide: mounts keep coming below", dir, EBUSY);
			break;
		}
		FILE *f = fopen("/proc/self/mountinfo", "re");
		if (!f) {
			r = fail("hide: /proc/self/mountinfo", NULL, errno);
			break;
		}
		detached = 0;
		while (r == 0 && getline(&line, &cap, f) > 0) {
			if (mountinfo_point(line, mp, sizeof(mp)) < 0 ||
			    strncmp(mp, dir, len) != 0 || (mp[len] != '\0' && mp[len] != '/'))
				continue;
			/* (one below a mount already detached went with it) */
			if (umount2(mp, MNT_DETACH | UMOUNT_NOFOLLOW) == 0)
				detached++;
			else if (errno != EINVAL && errno != ENOENT)
				r = fail("hide", mp, errno);
		}
		fclose(f);
	}
	free(line);
	return r;
}

#define HIDE_MAX 4

static int stage(const char *dir, char **srcs, int n, const char *idmap, const char *user,
		 char *const *hidden, int n_hidden)
{
	if (geteuid() != 0)
		return fail("--stage needs root", NULL, EPERM);
	if (unshare(CLONE_NEWNS) < 0)
		return fail("unshare mount namespace", NULL, errno);
	/* Nothing we mount here may reach the host; the host's unmounts still reach us. */
	if (mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL) < 0)
		return fail("mount --make-rslave /", NULL, errno);
	/* (sized for the copied files: the helper and the sandbox's passwd and group) */
	if (mount("cae-stage", dir, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=16m") < 0)
		return fail("mount tmpfs on", dir, errno);
	for (int i = 0; i < n; i++) {
		struct stat st;
		if (stat(srcs[i], &st) < 0)
			return fail("stage", srcs[i], errno);
		char target[4096];
		snprintf(target, sizeof(target), "%s/%d", dir, i);
		if (S_ISREG(st.st_mode)) {
			int r = stage_copy(srcs[i], target);
			if (r != 0)
				return r;
			continue;
		}
		if (!S_ISDIR(st.st_mode))
			return fail("stage (neither a file nor a directory)", srcs[i], EINVAL);
		if (mkdir(target, 0755) < 0)
			return fail("mkdir", target, errno);
		if (i == 0 && idmap) {
			int r = stage_idmapped(srcs[i], target, idmap, user);
			if (r != 0)
				return r;
			continue;
		}
		if (mount(srcs[i], target, NULL, MS_BIND | MS_REC, NULL) < 0)
			return fail("bind", srcs[i], errno);
	}
	int r = 0;
	for (int i = 0; r == 0 && i < n_hidden; i++)
		r = hide(hidden[i]);
	return r;
}

/* The seccomp filter on the descriptor bwrap is told to read it from. */
static int open_seccomp(const char *file)
{
	int fd = open(file, O_RDONLY);
	if (fd < 0)
		return fail("seccomp filter", file, errno);
	if (fd != CAE_HELPER_ENTER_SECCOMP_FD) {
		if (dup2(fd, CAE_HELPER_ENTER_SECCOMP_FD) < 0)
			return fail("dup2 seccomp filter", file, errno);
		close(fd);
	}
	return 0;
}

/* A session keyring of our own, which PROGRAM and everything it starts inherit. A kernel
 * without keys (ENOSYS) has nothing to share. */
static int new_session_keyring(void)
{
	if (syscall(SYS_keyctl, KEYCTL_JOIN_SESSION_KEYRING, NULL) < 0 && errno != ENOSYS)
		return fail("join a new session keyring", NULL, errno);
	return 0;
}

static int become(const char *spec)
{
	unsigned long long uid, gid;
	char buf[64];
	snprintf(buf, sizeof(buf), "%s", spec);
	char *colon = strchr(buf, ':');
	if (!colon)
		return fail("bad --user", spec, EINVAL);
	*colon = '\0';
	if (parse_u64(buf, &uid) < 0 || parse_u64(colon + 1, &gid) < 0 || uid == 0 || gid == 0 ||
	    uid > 0xfffffffeULL || gid > 0xfffffffeULL)
		return fail("bad --user", spec, EINVAL);
	if (setgroups(0, NULL) < 0)
		return fail("setgroups", NULL, errno);
	if (setresgid((gid_t)gid, (gid_t)gid, (gid_t)gid) < 0)
		return fail("setresgid", colon + 1, errno);
	if (setresuid((uid_t)uid, (uid_t)uid, (uid_t)uid) < 0)
		return fail("setresuid", buf, errno);
	/* For good: there is no way back to root. */
	if (setuid(0) == 0)
		return fail("still root after setresuid", NULL, EPERM);
	return 0;
}

int cae__helper_enter_main(int argc, char **argv)
{
	const char *stage_dir = NULL, *user = NULL, *seccomp = NULL, *idmap = NULL;
	char **stage_srcs = NULL, *hidden[HIDE_MAX];
	int n_stage = 0, n_hidden = 0, i = 1, r;
	if (i < argc && strcmp(argv[i], "--enter") == 0)
		i++;
	for (; i < argc; i++) {
		if (strcmp(argv[i], "--") == 0) {
			i++;
			break;
		}
		if (i + 1 >= argc)
			return fail("missing value for", argv[i], EINVAL);
		if (strcmp(argv[i], "--cgroup") == 0) {
			if ((r = join_cgroup(argv[++i])) != 0)
				return r;
		} else if (strcmp(argv[i], "--rlimit") == 0) {
			if ((r = set_rlimit(argv[++i])) != 0)
				return r;
		} else if (strcmp(argv[i], "--user") == 0) {
			user = argv[++i];
		} else if (strcmp(argv[i], "--seccomp") == 0) {
			seccomp = argv[++i];
		} else if (strcmp(argv[i], "--idmap") == 0) {
			idmap = argv[++i];
		} else if (strcmp(argv[i], "--hide") == 0) {
			if (n_hidden == HIDE_MAX)
				return fail("too many --hide", argv[i + 1], E2BIG);
			hidden[n_hidden] = argv[++i];
			if (hidden[n_hidden][0] != '/' || strcmp(hidden[n_hidden], "/") == 0)
				return fail("bad --hide (not an absolute path below /)",
					    hidden[n_hidden], EINVAL);
			n_hidden++;
		} else if (strcmp(argv[i], "--stage") == 0) {
			stage_dir = argv[++i];
			stage_srcs = argv + i + 1;
			while (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0) {
				i++;
				n_stage++;
			}
		} else {
			return fail("unknown option", argv[i], EINVAL);
		}
	}
	if (i >= argc)
		return fail("no program after --", NULL, EINVAL);
	if (n_hidden > 0 && !stage_dir)
		return fail("--hide needs --stage", hidden[0], EINVAL);
	if (stage_dir &&
	    (r = stage(stage_dir, stage_srcs, n_stage, idmap, user, hidden, n_hidden)) != 0)
		return r;
	if (seccomp && (r = open_seccomp(seccomp)) != 0)
		return r;
	if ((r = new_session_keyring()) != 0)
		return r;
	if (user && (r = become(user)) != 0)
		return r;
	execv(argv[i], argv + i);
	fprintf(stderr, "cae-helper: enter: %s: %s\n", argv[i], strerror(errno));
	return 127;
}
