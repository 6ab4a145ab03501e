/* The local sandbox's command line (see sandbox.h): `cae-helper --enter` (cgroups, rlimits,
 * staged sources, the switch to the sandbox uid), then bwrap with a file system built from
 * nothing: only what commands need is bound in. */
#include "backend/sandbox.h"

#include "base/buf.h"
#include "base/chase.h"
#include "base/fs.h"
#include "base/macro.h"
#include "base/protect.h"
#include "helper/enter.h"

#include <dirent.h>
#include <ftw.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/banned.h"

struct argl {
	char **v;
	size_t n, cap;
	bool oom;
};

static void add(struct argl *a, const char *s)
{
	if (a->oom)
		return;
	if (a->n + 2 > a->cap) {
		size_t cap = a->cap ? a->cap * 2 : 64;
		char **v = realloc(a->v, cap * sizeof(char *));
		if (!v) {
			a->oom = true;
			return;
		}
		a->v = v;
		a->cap = cap;
	}
	char *d = strdup(s);
	if (!d) {
		a->oom = true;
		return;
	}
	a->v[a->n++] = d;
	a->v[a->n] = NULL;
}

static void addf(struct argl *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void addf(struct argl *a, const char *fmt, ...)
{
	char buf[4200];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	add(a, buf);
}

void cae__sandbox_argv_free(char **argv)
{
	if (!argv)
		return;
	for (char **p = argv; *p; p++)
		free(*p);
	free(argv);
}

/* What of /etc a command needs: name resolution, TLS roots, the dynamic linker's cache,
 * Debian's alternatives, time zone, shell defaults, language runtimes' own config. Never:
 * shadow files, sudoers, ssh keys, machine-id, the host's passwd, nor files where operators
 * keep credentials (gitconfig, pip.conf, npmrc: an extraHeader or an index token). */
static const char *const etc_names[] = {
    "alternatives",  "ld.so.cache", "ld.so.conf",     "ld.so.conf.d", "localtime",    "timezone",
    "nsswitch.conf", "host.conf",   "gai.conf",	      "protocols",    "services",     "ssl",
    "mime.types",    "bash.bashrc", "profile",	      "inputrc",      "locale.alias", "magic",
    "magic.mime",    "os-release",  "debian_version", "terminfo",
};
static const char *const etc_prefixes[] = {"java-", "python", "perl", "ca-certificates"};

/* Toolchains whose configuration directory under /etc also holds files where operators keep
 * credentials: only the named entries of it (Maven's m2.conf, which its launcher reads
 * through /usr/share/maven/bin/m2.conf, and its logging and toolchains files; never
 * settings.xml, whose <servers> hold repository passwords). */
static const struct {
	const char *dir;
	const char *const entries[4];
} etc_parts[] = {
    {"maven", {"m2.conf", "logging", "toolchains.xml", NULL}},
};

static bool etc_wanted(const char *name, bool network)
{
	if (network && (strcmp(name, "hosts") == 0 || strcmp(name, "resolv.conf") == 0))
		return true;
	for (size_t i = 0; i < ARRAY_SIZE(etc_names); i++)
		if (strcmp(name, etc_names[i]) == 0)
			return true;
	for (size_t i = 0; i < ARRAY_SIZE(etc_prefixes); i++)
		if (strncmp(name, etc_prefixes[i], strlen(etc_prefixes[i])) == 0)
			return true;
	return false;
}

static void add_etc(struct argl *a, bool network)
{
	add(a, "--dir");
	add(a, "/etc");
	DIR *d = opendir("/etc");
	if (!d)
		return;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.' || !etc_wanted(de->d_name, network))
			continue;
		add(a, "--ro-bind-try");
		addf(a, "/etc/%s", de->d_name);
		addf(a, "/etc/%s", de->d_name);
	}
	closedir(d);
	for (size_t i = 0; i < ARRAY_SIZE(etc_parts); i++) {
		char dir[64];
		struct stat st;
		snprintf(dir, sizeof(dir), "/etc/%s", etc_parts[i].dir);
		if (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode))
			continue;
		add(a, "--dir");
		add(a, dir);
		for (const char *const *e = etc_parts[i].entries; *e; e++) {
			add(a, "--ro-bind-try");
			addf(a, "%s/%s", dir, *e);
			addf(a, "%s/%s", dir, *e);
		}
	}
}

/* /bin, /lib, ... as on the host: links into /usr (merged /usr) or read-only trees. */
static void add_top(struct argl *a)
{
	static const char *const tops[] = {"bin", "sbin", "lib", "lib32", "lib64", "libx32"};
	add(a, "--ro-bind");
	add(a, "/usr");
	add(a, "/usr");
	for (size_t i = 0; i < ARRAY_SIZE(tops); i++) {
		char path[32], target[256];
		snprintf(path, sizeof(path), "/%s", tops[i]);
		struct stat st;
		if (lstat(path, &st) < 0)
			continue;
		if (S_ISLNK(st.st_mode)) {
			ssize_t n = readlink(path, target, sizeof(target) - 1);
			if (n <= 0)
				continue;
			target[n] = '\0';
			add(a, "--symlink");
			add(a, target);
			add(a, path);
		} else if (S_ISDIR(st.st_mode)) {
			add(a, "--ro-bind");
			add(a, path);
			add(a, path);
		}
	}
}

/* The components of a protected path (no "", no "."), at most max; returns how many, or 0
 * for a path that is not one (empty, "..", too deep). */
static size_t split_rel(char *buf, char **comp, size_t max)
{
	size_t k = 0;
	for (char *save = NULL, *c = strtok_r(buf, "/", &save); c; c = strtok_r(NULL, "/", &save)) {
		if (strcmp(c, ".") == 0)
			continue;
		if (strcmp(c, "..") == 0 || k == max)
			return 0;
		comp[k++] = c;
	}
	return k;
}

/* The first n components of comp joined with "/" into out. */
static void join_rel(char *out, size_t size, char *const *comp, size_t n)
{
	size_t o = 0;
	out[0] = '\0';
	for (size_t i = 0; i < n && o < size; i++)
		o += (size_t)snprintf(out + o, size - o, "%s%s", i ? "/" : "", comp[i]);
}

#define PROTECT_DEPTH 64

int cae__sandbox_protect_prepare(const char *project_host, const char *const *paths, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		char buf[PATH_MAX], rel[PATH_MAX], *comp[PROTECT_DEPTH];
		snprintf(buf, sizeof(buf), "%s", paths[i]);
		size_t k = split_rel(buf, comp, PROTECT_DEPTH);
		if (k < 2 || strcmp(comp[0], ".git") != 0)
			continue;
		join_rel(rel, sizeof(rel), comp, k);
		_cleanup_close_ int root = open(project_host, O_PATH | O_DIRECTORY | O_CLOEXEC);
		if (root < 0)
			return errno == ENOENT ? 0 : -errno;
		/* the parent, without following a link anywhere (it stays in the project) */
		_cleanup_(cae__chased_clear) cae_chased c = CAE_CHASED_INIT;
		if (cae__chase(root, rel, CAE_CHASE_PARENT | CAE_CHASE_NOFOLLOW, NULL, NULL, &c) <
			0 ||
		    c.exists || c.links)
			continue;
		if (mkdirat(c.fd, c.name, 0755) < 0 && errno != EEXIST)
			return -errno;
	}
	return 0;
}

/* Binds what keeps the protected paths read-only (see cae_sandbox_spec): the project onto
 * itself (unless it is the workspace mount itself), each directory on the way to a protected
 * path onto itself, then the path read-only. Checked on this host with lstat, never through
 * a symbolic link: a link would make bwrap bind whatever it points at on this host. No
 * command of the environment runs between this check and the mounts (a new sandbox is
 * started only when no command of the environment's previous one is alive: its PID
 * namespace ends with it). src: the workspace as bwrap's source. */
static void add_protected(struct argl *a, const cae_sandbox_spec *s, const char *src)
{
	if (!s->n_protected)
		return;
	bool in_root = strcmp(s->ws_inside, CAE_SANDBOX_ROOT) == 0;
	char host[PATH_MAX], from[PATH_MAX];
	snprintf(host, sizeof(host), "%s%s", s->ws_host, in_root ? "/project" : "");
	snprintf(from, sizeof(from), "%s%s", src, in_root ? "/project" : "");
	struct stat st;
	if (lstat(host, &st) < 0 || !S_ISDIR(st.st_mode))
		return;
	if (in_root) {
		add(a, "--bind");
		add(a, from);
		add(a, CAE_SANDBOX_PROJECT);
	}
	for (size_t i = 0; i < s->n_protected; i++) {
		char buf[PATH_MAX], rel[PATH_MAX], *comp[PROTECT_DEPTH];
		snprintf(buf, sizeof(buf), "%s", s->protected_paths[i]);
		size_t k = split_rel(buf, comp, PROTECT_DEPTH);
		bool ok = k > 0;
		for (size_t j = 1; ok && j <= k; j++) {
			join_rel(rel, sizeof(rel), comp, j);
			char h[PATH_MAX * 2];
			snprintf(h, sizeof(h), "%s/%s", host, rel);
			ok = lstat(h, &st) == 0 && !S_ISLNK(st.st_mode) &&
			     (j == k || S_ISDIR(st.st_mode));
			if (!ok)
				break;
			/* a directory on the way: a mount point of its own (not when it is
			 * protected itself: it is bound read-only then) */
			bool bind = j == k || !cae__protected_lexical(rel, s->protected_paths,
								      s->n_protected);
			if (!bind)
				continue;
			add(a, j == k ? "--ro-bind" : "--bind");
			addf(a, "%s/%s", from, rel);
			addf(a, "%s/%s", CAE_SANDBOX_PROJECT, rel);
		}
	}
}

char **cae__sandbox_argv(const cae_sandbox_spec *s)
{
	struct argl a = {0};
	const cae_sandbox_limits *l = s->limits;
	/* 1. the enter step */
	add(&a, s->helper);
	add(&a, "--enter");
	for (size_t i = 0; i < s->n_cgroup; i++) {
		add(&a, "--cgroup");
		add(&a, s->cgroup_procs[i]);
	}
	if (l->memory_bytes && s->n_cgroup == 0) {
		add(&a, "--rlimit");
		addf(&a, "data=%" PRIu64, l->memory_bytes);
	}
	if (s->rlimit_nproc && l->pids > 0) {
		add(&a, "--rlimit");
		addf(&a, "nproc=%d", l->pids);
	}
	if (l->cpu_seconds > 0) {
		add(&a, "--rlimit");
		addf(&a, "cpu=%" PRId64, l->cpu_seconds);
	}
	if (l->file_bytes) {
		add(&a, "--rlimit");
		addf(&a, "fsize=%" PRIu64, l->file_bytes);
	}
	add(&a, "--rlimit");
	add(&a, "core=0");
	/* Sources the sandbox uid may not be able to reach by name: staged (root only). */
	/* The files (passwd, group, the helper) are copied there: no bind names a path of the
	 * state directory or of cae's installation in the sandbox's /proc/self/mountinfo. */
	const char *files[] = {"passwd", "group", "gitconfig"};
	char src_ws[64], src_helper[64], src_cache[64], src_ro[CAE_SANDBOX_RO_CACHES][64],
	    src_etc[ARRAY_SIZE(files)][PATH_MAX];
	const char *ws = s->ws_host, *helper = s->helper, *cache = s->npm_cache,
		   *ro[CAE_SANDBOX_RO_CACHES];
	for (size_t i = 0; i < CAE_SANDBOX_RO_CACHES; i++)
		ro[i] = s->ro_cache[i];
	for (size_t i = 0; i < ARRAY_SIZE(files); i++)
		snprintf(src_etc[i], sizeof(src_etc[i]), "%s/%s", s->etc_dir, files[i]);
	if (s->uid != 0) {
		add(&a, "--stage");
		add(&a, CAE_SANDBOX_STAGE);
		add(&a, s->ws_host);
		for (size_t i = 0; i < ARRAY_SIZE(files); i++) {
			add(&a, src_etc[i]);
			snprintf(src_etc[i], sizeof(src_etc[i]), "%s/%zu", CAE_SANDBOX_STAGE,
				 i + 1);
		}
		snprintf(src_ws, sizeof(src_ws), "%s/0", CAE_SANDBOX_STAGE);
		ws = src_ws;
		if (s->serve) {
			add(&a, s->helper);
			snprintf(src_helper, sizeof(src_helper), "%s/%zu", CAE_SANDBOX_STAGE,
				 ARRAY_SIZE(files) + 1);
			helper = src_helper;
		}
		if (cache) {
			add(&a, s->npm_cache);
			snprintf(src_cache, sizeof(src_cache), "%s/%zu", CAE_SANDBOX_STAGE,
				 ARRAY_SIZE(files) + 1 + (s->serve ? 1 : 0));
			cache = src_cache;
		}
		size_t next = ARRAY_SIZE(files) + 1 + (s->serve ? 1 : 0) + (cache ? 1 : 0);
		for (size_t i = 0; i < CAE_SANDBOX_RO_CACHES; i++) {
			if (!ro[i])
				continue;
			add(&a, s->ro_cache[i]);
			snprintf(src_ro[i], sizeof(src_ro[i]), "%s/%zu", CAE_SANDBOX_STAGE, next++);
			ro[i] = src_ro[i];
		}
		for (size_t i = 0; i < ARRAY_SIZE(s->hide); i++)
			if (s->hide[i]) {
				add(&a, "--hide");
				add(&a, s->hide[i]);
			}
		if (s->idmap) {
			add(&a, "--idmap");
			addf(&a, "%u:%u", (unsigned)s->owner_uid, (unsigned)s->owner_gid);
		}
		add(&a, "--user");
		addf(&a, "%u:%u", (unsigned)s->uid, (unsigned)s->gid);
	}
	if (s->seccomp) {
		add(&a, "--seccomp");
		add(&a, s->seccomp);
	}
	add(&a, "--");
	/* 2. bwrap */
	add(&a, s->bwrap);
	const char *ns[] = {"--unshare-user", "--disable-userns", "--unshare-pid",
			    "--unshare-ipc",  "--unshare-uts",	  "--unshare-cgroup-try",
			    "--new-session"};
	for (size_t i = 0; i < ARRAY_SIZE(ns); i++)
		add(&a, ns[i]);
	if (!s->network)
		add(&a, "--unshare-net");
	if (s->die_with_parent)
		add(&a, "--die-with-parent");
	/* the helper is the PID namespace's init (a subreaper and non-dumpable anyway): no bwrap
	 * init that a command could trace and freeze, and no signal of a command reaches it */
	if (s->serve)
		add(&a, "--as-pid-1");
	if (s->seccomp) {
		add(&a, "--seccomp");
		addf(&a, "%d", CAE_HELPER_ENTER_SECCOMP_FD);
	}
	add(&a, "--uid");
	addf(&a, "%d", CAE_SANDBOX_UID);
	add(&a, "--gid");
	addf(&a, "%d", CAE_SANDBOX_UID);
	add_top(&a);
	add_etc(&a, s->network);
	for (size_t i = 0; i < ARRAY_SIZE(files); i++) {
		add(&a, "--ro-bind");
		add(&a, src_etc[i]);
		addf(&a, "/etc/%s", files[i]);
	}
	add(&a, "--proc");
	add(&a, "/proc");
	add(&a, "--dev");
	add(&a, "/dev");
	add(&a, "--size");
	addf(&a, "%" PRIu64, l->tmp_bytes);
	add(&a, "--tmpfs");
	add(&a, "/tmp");
	add(&a, "--size");
	addf(&a, "%" PRIu64, l->tmp_bytes < (64u << 20) ? l->tmp_bytes : (uint64_t)(64u << 20));
	add(&a, "--tmpfs");
	add(&a, "/dev/shm");
	add(&a, "--remount-ro");
	add(&a, "/dev");
	const char *layout[] = {"--dir", "/tmp/home", "--symlink", "/tmp/home", CAE_SANDBOX_HOME,
				"--dir", "/var",      "--symlink", "../tmp",	"/var/tmp"};
	for (size_t i = 0; i < ARRAY_SIZE(layout); i++)
		add(&a, layout[i]);
	add(&a, "--bind");
	add(&a, ws);
	add(&a, s->ws_inside);
	if (strcmp(s->ws_inside, CAE_SANDBOX_ROOT) != 0) {
		add(&a, "--symlink");
		add(&a, "/tmp");
		add(&a, CAE_SANDBOX_ROOT "/tmp");
	}
	add_protected(&a, s, ws);
	if (cache) {
		add(&a, "--bind");
		add(&a, cache);
		add(&a, s->npm_cache_inside);
	}
	for (size_t i = 0; i < CAE_SANDBOX_RO_CACHES; i++) {
		if (!ro[i])
			continue;
		add(&a, "--ro-bind");
		add(&a, ro[i]);
		add(&a, s->ro_cache_inside[i]);
	}
	if (s->serve) {
		add(&a, "--ro-bind");
		add(&a, helper);
		add(&a, CAE_SANDBOX_HELPER);
	}
	add(&a, "--remount-ro");
	add(&a, "/");
	add(&a, "--chdir");
	add(&a, s->chdir);
	add(&a, "--");
	if (s->serve) {
		add(&a, CAE_SANDBOX_HELPER);
	} else {
		for (const char *const *p = s->argv; p && *p; p++)
			add(&a, *p);
	}
	if (a.oom) {
		cae__sandbox_argv_free(a.v);
		return NULL;
	}
	return a.v;
}

char **cae__sandbox_env(const char *const *extra)
{
	struct argl a = {0};
	const char *fixed[] = {"PATH=" CAE_SANDBOX_PATH,
			       ("HOME=" CAE_SANDBOX_HOME),
			       "USER=agent",
			       "LOGNAME=agent",
			       "SHELL=/bin/sh",
			       "TMPDIR=/tmp",
			       "LANG=C.UTF-8",
			       "TERM=dumb"};
	for (size_t i = 0; i < ARRAY_SIZE(fixed); i++) {
		size_t kl = (size_t)(strchr(fixed[i], '=') - fixed[i]);
		bool replaced = false;
		for (const char *const *x = extra; x && *x && !replaced; x++)
			replaced = strncmp(*x, fixed[i], kl + 1) == 0;
		if (!replaced)
			add(&a, fixed[i]);
	}
	for (const char *const *x = extra; x && *x; x++)
		add(&a, *x);
	if (!a.v && !a.oom)
		add(&a, "PATH=/usr/bin:/bin");
	if (a.oom) {
		cae__sandbox_argv_free(a.v);
		return NULL;
	}
	return a.v;
}

/* A git configuration value, quoted: backslash and double quote escaped (one line). */
static int put_git_value(cae_buf *b, const char *v)
{
	int r = cae__buf_puts(b, "\"");
	for (const char *p = v; r == 0 && *p; p++)
		r = (*p == '\\' || *p == '"') ? cae__buf_printf(b, "\\%c", *p)
					      : cae__buf_append(b, p, 1);
	return r < 0 ? r : cae__buf_puts(b, "\"\n");
}

int cae__sandbox_write_etc(const char *dir, const char *git_name, const char *git_email)
{
	static const char passwd[] = "root:x:0:0:root:/root:/usr/sbin/nologin\n"
				     "agent:x:1000:1000:agent:/home/agent:/bin/sh\n"
				     "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n";
	static const char group[] = "root:x:0:\nagent:x:1000:\nnogroup:x:65534:\n";
	int r = cae__mkdir_p(dir, 0755);
	if (r < 0)
		return r;
	_cleanup_free_ char *p = cae__path_join(dir, "passwd");
	_cleanup_free_ char *g = cae__path_join(dir, "group");
	if (!p || !g)
		return -ENOMEM;
	r = cae__write_file_atomic(AT_FDCWD, p, passwd, sizeof(passwd) - 1, 0644, false);
	if (r == 0)
		r = cae__write_file_atomic(AT_FDCWD, g, group, sizeof(group) - 1, 0644, false);
	if (r < 0)
		return r;
	cae_buf b;
	cae__buf_init(&b, 8192);
	r = cae__buf_puts(&b, "# the environment's git identity (command_executor.git)\n[user]\n"
			      "\tname = ");
	if (r == 0)
		r = put_git_value(&b, git_name ? git_name : "Coding Agent");
	if (r == 0)
		r = cae__buf_puts(&b, "\temail = ");
	if (r == 0)
		r = put_git_value(&b, git_email ? git_email : "coding-agent@localhost");
	_cleanup_free_ char *gc = cae__path_join(dir, "gitconfig");
	if (r == 0 && !gc)
		r = -ENOMEM;
	if (r == 0)
		r = cae__write_file_atomic(AT_FDCWD, gc, b.data, b.len, 0644, false);
	cae__buf_clear(&b);
	return r;
}

static uid_t chown_uid;
static gid_t chown_gid;

static int chown_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)flag;
	(void)ftw;
	if (st->st_uid == chown_uid && st->st_gid == chown_gid)
		return 0;
	return lchown(path, chown_uid, chown_gid) < 0 ? -errno : 0;
}

int cae__sandbox_chown_tree(const char *root, uid_t uid, gid_t gid)
{
	/* nftw has no user pointer: one tree at a time */
	static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
	pthread_mutex_lock(&lock);
	chown_uid = uid;
	chown_gid = gid;
	int r = nftw(root, chown_one, 32, FTW_PHYS | FTW_MOUNT);
	pthread_mutex_unlock(&lock);
	return r == 0 ? 0 : r < -1 ? r : -EPERM;
}
