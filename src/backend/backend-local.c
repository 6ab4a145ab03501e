/* The local backend: an environment is a directory under the state directory,
 *   <state_dir>/local/<uuid>/meta.json          ContainerInfo + where the workspace is
 *   <state_dir>/local/<uuid>/workspace/project  the clone
 *   <state_dir>/local/<uuid>/workspace/tmp      scratch
 *   <state_dir>/local/<uuid>/disk.img           the workspace's file system, mounted on
 *                                               workspace/ (diskfs.h; root only)
 * or an existing directory used as is (prepare option `workspace`). Commands run on this host
 * in a sandbox (sandbox.h): bubblewrap behind `cae-helper --enter`, an unprivileged uid in a
 * user namespace of its own, only system trees, a minimal /etc and the workspace (at
 * /workspace) in its file system, cgroup or rlimit bounds, no network unless configured.
 * Without the means for that, commands are refused unless the config says
 * command_executor.local.unconfined: true.
 *
 * A sandbox lives as long as its environment: the first command of an environment starts
 * cae-helper under bwrap and every command after it is forked by that helper inside the
 * same namespaces (creating namespaces costs milliseconds; a fork inside them does not); a
 * command whose output and input flow while it runs (cae_live_io: progress, process
 * sessions) reaches it through a multiplexed stream of its own (cae_helper_open_mux), so a
 * server it starts shares loopback with the commands after it. Commands that need another
 * confinement than the environment's (prepare steps that need the network) and hosts without
 * cae-helper get a sandbox of their own per command. */
#include "backend/backend-internal.h"
#include "backend/diskfs.h"
#include "backend/envtools.h"
#include "backend/net-local.h"
#include "backend/pkgcache.h"
#include "backend/sandbox.h"
#include "backend/seccomp.h"
#include "backend/snapshot.h"

#include "base/chase.h"
#include "base/fs.h"
#include "base/idmap.h"
#include "base/macro.h"
#include "base/timeutil.h"
#include "cae/helper.h"
#include "cae/log.h"
#include "worker/fs-serve.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sys/un.h>
#include <sys/socket.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "base/banned.h"

extern char **environ;

#define META_MAX (1024 * 1024)
/* <state_dir>/local/.creating.<pid>.<start>.<uuid>: an environment's directory being made */
#define CREATING_PREFIX ".creating."

/* The sandbox helper of one environment. */
struct local_helper {
	struct local_helper *next;
	char *uuid;
	char *root; /* the workspace root it binds read-write */
	dev_t dev;  /* ... and that directory's identity: a re-created workspace needs a */
	ino_t ino;  /* new sandbox */
	bool network;
	char cgname[160]; /* its cgroup, removed when it stops (if nothing else uses it) */
	cae_helper *h;
	/* a filtered network's proxy (net-local.c), or NULL */
	cae_net_proxy *proxy;
	cae__local_fwd *fwd; /* its port forwards (net-local.c) */
	int refs;	     /* commands running through it */
	bool retired;	     /* out of the list: stopped when the last command ends */
};

/* What exec needs of a ready environment's meta.json, kept while the file is unchanged (same
 * inode, size and mtime: every write replaces the file), so that a command costs a stat
 * instead of a read and a JSON parse. */
#define META_CACHE 8
struct meta_entry {
	char *uuid;
	dev_t dev;
	ino_t ino;
	off_t size;
	struct timespec mtime;
	char *root;
	char *project;
	bool sandbox;
	bool external;
	uid_t uid;
	gid_t gid;
	bool idmap;
	uid_t owner_uid;
	gid_t owner_gid;
	char *git_credential;
	char *forge;
};

/* The credential channel of one environment in this process: a socket in the workspace root
 * (/workspace/.cae-run inside the sandbox) that `cae-helper --credential` reaches, answered by
 * a thread here (cae__git_credential_answer). */
struct local_cred {
	struct local_cred *next;
	char *uuid;
	char *target; /* "host user forge" */
	char path[PATH_MAX];
	int fd;
	pthread_t thread;
	cae_backend *b;
};

struct local_impl {
	char *root;	 /* <state_dir>/local */
	char *disk_root; /* <state_dir>/docker-disk (diskfs.h) */
	pthread_mutex_t meta_lock;
	struct meta_entry meta[META_CACHE];
	unsigned meta_next;
	pthread_mutex_t probe_lock;
	bool probed;
	bool bwrap_ok;
	char *bwrap;	     /* path of bwrap, when usable */
	char *probe_error;   /* why not, when not */
	char *etc_dir;	     /* <state_dir>/local/.sandbox-etc: the sandbox's passwd and group */
	char *seccomp;	     /* <etc_dir>/seccomp.bpf, the sandbox's seccomp filter; NULL: none */
	char *seccomp_error; /* why there is none */
	int clone_timeout_s;
	pthread_mutex_t helper_lock;
	struct local_helper *helpers;
	struct local_cred *creds; /* under helper_lock */
	bool helper_probed;
	char *helper_path; /* NULL: no cae-helper, or it could not start: a sandbox per command */
	cae_wk_fs_table files; /* the patch worker's file service (local_fs) */
};

/* An environment as exec needs it. */
struct local_env {
	const char *uuid; /* set when the environment is ready: its sandbox may be kept */
	char *root;	  /* the directory commands may write: workspace root (realpath) */
	char *project;	  /* the project directory (realpath) */
	const char *default_cwd;
	bool sandbox;  /* confine with bubblewrap */
	bool network;  /* network inside the sandbox */
	bool filtered; /* no network but cae's proxy (cae_net_config_filtered) */
	bool external; /* a workspace used as is: bound at /workspace/project */
	int cancel_fd; /* prepare: cancels every step that has no cancel fd of its own; -1: none */
	const char *task; /* the task uuid, for the cgroup's name (also while preparing) */
	uid_t uid;	  /* host uid of sandboxed commands (0: cae's own, it is not root) */
	gid_t gid;
	bool idmap;	 /* a workspace used as is, bound idmapped: its owner's files are uid's */
	uid_t owner_uid; /* ... that owner on disk */
	gid_t owner_gid;
	char *git_credential; /* where a push may authenticate ("host user forge"), or NULL */
	char *forge;	      /* the forge it was cloned from ("host:port"), or NULL */
	struct local_impl *impl;
	const cae_config *cfg;
};

static void local_env_clear(struct local_env *e)
{
	free(e->root);
	free(e->project);
	free(e->git_credential);
	free(e->forge);
	memset(e, 0, sizeof(*e));
	e->cancel_fd = -1;
}

/* Where commands see env's workspace root: inside the sandbox, or the host path. */
static const char *inside_root(const struct local_env *e)
{
	if (!e->sandbox)
		return e->root;
	return e->external ? CAE_SANDBOX_PROJECT : CAE_SANDBOX_ROOT;
}

/* Where commands see the project. New string. */
static char *inside_project(const struct local_env *e)
{
	if (!e->sandbox)
		return strdup(e->project);
	return strdup(CAE_SANDBOX_PROJECT);
}

/* The bounds of env's sandbox, from the keys containers use. */
static cae_sandbox_limits sandbox_limits(const cae_config *cfg)
{
	double cpus = cfg->command_executor.docker.resources.cpu_limit;
	uint64_t mem = cfg->command_executor.docker.resources.memory_bytes;
	uint64_t disk = cfg->command_executor.docker.resources.disk_bytes;
	cae_sandbox_limits l = {
	    .pids = cfg->command_executor.docker.resources.pids_limit,
	    .memory_bytes = mem,
	    .cpus = cpus,
	    .cpu_seconds = (int64_t)cfg->command_executor.execution.timeout_seconds *
			   (int64_t)(cpus < 1 ? 1 : cpus + 0.999),
	    .file_bytes = disk,
	    .tmp_bytes = disk && disk < mem ? disk : mem,
	};
	return l;
}

/* The cgroup name of an environment: its uuid and which state directory it belongs to
 * (two state directories may hold the same uuid). */
static void cgroup_name(const struct local_impl *li, const char *uuid, char *buf, size_t len)
{
	uint32_t h = 2166136261u;
	for (const char *p = li->root; *p; p++)
		h = (h ^ (unsigned char)*p) * 16777619u;
	snprintf(buf, len, "%s-%08x", uuid, h);
}

static struct local_impl *impl_of(cae_backend *b)
{
	return b->impl;
}

/* The host uid sandboxed commands run as: when cae is root, an unprivileged one; else
 * cae's own (0 in the spec: no switch). */
static void sandbox_ids(const cae_config *cfg, uid_t *uid, gid_t *gid)
{
	if (geteuid() == 0) {
		*uid = (uid_t)cfg->command_executor.local.sandbox_uid;
		*gid = (gid_t)cfg->command_executor.local.sandbox_uid;
	} else {
		*uid = 0;
		*gid = 0;
	}
}

/* The seccomp filter (seccomp.h) is written once per backend next to the sandbox's /etc
 * files; without it, sandboxes run without a filter and every prepare says so. */
static void probe_seccomp(struct local_impl *li)
{
	cae_error e = {0};
	_cleanup_close_ int dfd = open(li->etc_dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	int r = dfd < 0 ? cae_error_set(&e, -errno, "seccomp: %s", strerror(errno))
			: cae__seccomp_write(dfd, "seccomp.bpf", &e);
	if (r == 0)
		li->seccomp = cae__path_join(li->etc_dir, "seccomp.bpf");
	if (!li->seccomp)
		li->seccomp_error = strdup(r < 0 ? e.message : "out of memory");
}

/* Probing costs a sandbox start: done once per backend, on first use. It starts exactly
 * what commands get (the enter step, the uid switch, a user namespace, the file system),
 * so that a host that cannot do any of it is found here, not at the first command. */
static void probe_bwrap(cae_backend *b, struct local_impl *li)
{
	char *path = NULL, *helper = NULL;
	char why[512] = "";
	if (cae_runner_find_program("bwrap", NULL, &path) < 0)
		snprintf(why, sizeof(why), "bubblewrap (bwrap) is not installed");
	else if (cae_helper_find(&helper) < 0)
		snprintf(why, sizeof(why), "cae-helper was not found");
	else if (cae__sandbox_write_etc(li->etc_dir, b->cfg->command_executor.git.user_name,
					b->cfg->command_executor.git.user_email) < 0)
		snprintf(why, sizeof(why), "cannot write the sandbox's /etc files");
	if (!*why)
		probe_seccomp(li);
	if (!*why) {
		cae_sandbox_limits lim = sandbox_limits(b->cfg);
		const char *cmd[] = {"true", NULL};
		cae_sandbox_spec spec = {.helper = helper,
					 .bwrap = path,
					 .ws_host = li->etc_dir,
					 .ws_inside = CAE_SANDBOX_ROOT,
					 .etc_dir = li->etc_dir,
					 .chdir = "/",
					 .argv = cmd,
					 .limits = &lim,
					 .seccomp = li->seccomp};
		sandbox_ids(b->cfg, &spec.uid, &spec.gid);
		char **argv = cae__sandbox_argv(&spec);
		_cleanup_(cae__sandbox_argv_free_p) char **envp = cae__sandbox_env(NULL);
		cae_run_spec rs = {.argv = (const char *const *)argv,
				   .envp = (const char *const *)envp,
				   .timeout_ms = 10000,
				   .cancel_fd = -1};
		cae_run_result res;
		if (!argv || !envp) {
			snprintf(why, sizeof(why), "out of memory");
		} else if (cae_runner_run(&rs, &res, NULL) == 0) {
			if (res.exit_code != 0)
				snprintf(why, sizeof(why),
					 "bubblewrap cannot make a sandbox here (user namespaces "
					 "disabled?): %.300s",
					 res.err);
			cae_run_result_clear(&res);
		} else {
			snprintf(why, sizeof(why), "bubblewrap could not be started");
		}
		cae__sandbox_argv_free(argv);
	}
	if (!*why) {
		li->bwrap_ok = true;
		li->bwrap = path;
		li->helper_path = helper;
		path = NULL;
		helper = NULL;
	} else {
		li->probe_error = strdup(why);
	}
	free(path);
	free(helper);
}

/* 1: confine; 0: run unconfined (the config says so); < 0: refuse (err says why). */
static int use_sandbox(cae_backend *b, cae_error *err)
{
	struct local_impl *li = impl_of(b);
	const cae_config *cfg = b->cfg;
	cae_config_sandbox mode = cfg->command_executor.local.sandbox;
	if (mode == CAE_CONFIG_SANDBOX_NONE)
		return 0; /* the config requires unconfined: true for this */
	pthread_mutex_lock(&li->probe_lock);
	if (!li->probed) {
		probe_bwrap(b, li);
		li->probed = true;
	}
	pthread_mutex_unlock(&li->probe_lock);
	if (li->bwrap_ok)
		return 1;
	if (mode == CAE_CONFIG_SANDBOX_AUTO && cfg->command_executor.local.unconfined)
		return 0;
	return cae_error_set(err, -ENOSYS,
			     "no sandbox for commands on this host: %s; install bubblewrap, or set "
			     "command_executor.local.unconfined: true to run commands unconfined",
			     li->probe_error ? li->probe_error : "unknown reason");
}

/* cae doctor (doctor-local.c): the probe commands get, run now; *why and *seccomp_why
 * (borrowed from b, NULL when fine) say what failed. 0 when a sandbox starts, else -ENOSYS. */
int cae__local_probe(cae_backend *b, const char **why, const char **seccomp_why)
{
	struct local_impl *li = impl_of(b);
	pthread_mutex_lock(&li->probe_lock);
	if (!li->probed) {
		probe_bwrap(b, li);
		li->probed = true;
	}
	pthread_mutex_unlock(&li->probe_lock);
	*why = li->bwrap_ok ? NULL : li->probe_error ? li->probe_error : "unknown reason";
	*seccomp_why = li->seccomp ? NULL : li->seccomp_error ? li->seccomp_error : "not tried";
	return li->bwrap_ok ? 0 : -ENOSYS;
}

/* The status an environment's metadata stands for: "creating" only while the process that
 * prepares it lives; a preparation that died is "failed". */
static const char *meta_status(json_t *meta, int clone_timeout_s)
{
	const char *status = json_string_value(json_object_get(meta, "status"));
	if (!status)
		return "failed";
	if (strcmp(status, "creating") != 0)
		return status;
	const char *preparer = json_string_value(json_object_get(meta, "preparer"));
	int64_t created =
	    cae__parse_iso8601(json_string_value(json_object_get(meta, "created_at")));
	/* a prepare of this host is alive while its process is; one recorded elsewhere (a
	 * state directory shared between hosts) for as long as a clone may take */
	if (!preparer || !cae__preparer_alive(preparer, created, clone_timeout_s))
		return "failed";
	return status;
}

static char *task_dir(struct local_impl *li, const char *uuid)
{
	return cae__path_join(li->root, uuid);
}

static bool is_secret_var(const char *kv, size_t kl, const cae_config *cfg)
{
	static const char *const names[] = {"GITHUB_PERSONAL_ACCESS_TOKEN",
					    "GITLAB_PERSONAL_ACCESS_TOKEN", "CAE_GIT_TOKEN"};
	for (size_t i = 0; i < ARRAY_SIZE(names); i++)
		if (strlen(names[i]) == kl && strncmp(kv, names[i], kl) == 0)
			return true;
	const char *v = kv + kl + 1;
	const char *tokens[] = {cfg ? cfg->github.token : NULL, cfg ? cfg->gitlab.token : NULL};
	for (size_t i = 0; i < ARRAY_SIZE(tokens); i++)
		if (tokens[i] && *tokens[i] && kv[kl] == '=' && strstr(v, tokens[i]))
			return true;
	return false;
}

/* Unconfined: envp = the caller's environment less every secret (the tokens, by name and
 * by value), with extra "K=V" entries replacing or adding. The strings are borrowed. */
static char **build_env(const char *const *extra, const cae_config *cfg)
{
	size_t n = 0, m = 0;
	for (char **e = environ; e && *e; e++)
		n++;
	for (const char *const *e = extra; e && *e; e++)
		m++;
	char **out = calloc(n + m + 1, sizeof(char *));
	if (!out)
		return NULL;
	size_t k = 0;
	for (char **e = environ; e && *e; e++) {
		const char *eq = strchr(*e, '=');
		size_t kl = eq ? (size_t)(eq - *e) : strlen(*e);
		bool replaced = !eq || is_secret_var(*e, kl, cfg);
		for (const char *const *x = extra; x && *x && !replaced; x++)
			if (strncmp(*x, *e, kl) == 0 && (*x)[kl] == '=')
				replaced = true;
		if (!replaced)
			out[k++] = *e;
	}
	for (const char *const *x = extra; x && *x; x++)
		out[k++] = (char *)*x;
	out[k] = NULL;
	return out;
}

/* Resolves a command's working directory inside the environment, as commands see paths:
 * relative ones against the project, absolute ones must lie in the workspace root ('\\'
 * accepted as a separator). The confinement is openat2(RESOLVE_BENEATH) on the host
 * directory; the result is the real path of what was opened, as commands see it. */
static int resolve_cwd(const struct local_env *env, const char *cwd, char **out, cae_error *err)
{
	const char *iroot = inside_root(env);
	if (!cwd || !*cwd) {
		*out = env->default_cwd ? strdup(env->default_cwd) : inside_project(env);
		return *out ? 0 : -ENOMEM;
	}
	/* the text (relative ones start at the project), then where it leads, beneath root */
	_cleanup_free_ char *iproject = inside_project(env);
	if (!iproject)
		return -ENOMEM;
	_cleanup_free_ char *rel = NULL;
	int r = cae__path_lexical(iroot, iproject, cwd, strlen(cwd), CAE_PATH_BACKSLASH, &rel);
	if (r == -ENOMEM)
		return r;
	if (r < 0)
		return cae_error_set(err, -ENOTDIR,
				     "working directory is outside the workspace: %s", cwd);
	if (!*rel) {
		free(rel);
		rel = strdup(".");
	}
	if (!rel)
		return -ENOMEM;
	_cleanup_close_ int rootfd = open(env->root, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (rootfd < 0)
		return cae_error_set(err, -ENOENT,
				     "environment gone: its workspace no longer exists");
	_cleanup_close_ int fd = cae__open_beneath(rootfd, rel, O_PATH | O_DIRECTORY, 0);
	if (fd < 0) {
		if (fd == -EXDEV)
			return cae_error_set(err, -ENOTDIR,
					     "working directory is outside the workspace: %s", cwd);
		return cae_error_set(err, -ENOTDIR, "not a directory: %s", cwd);
	}
	_cleanup_free_ char *real = cae__fd_path(fd);
	if (!real)
		return cae_error_set(err, -EIO, "cannot resolve %s", cwd);
	size_t rl = strlen(env->root);
	if (strncmp(real, env->root, rl) != 0 || (real[rl] != '/' && real[rl] != '\0'))
		return cae_error_set(err, -ENOTDIR,
				     "working directory is outside the workspace: %s", cwd);
	*out = real[rl] ? cae__path_join(iroot, real + rl + 1) : strdup(iroot);
	return *out ? 0 : -ENOMEM;
}

static void helper_free(struct local_helper *lh)
{
	if (!lh)
		return;
	cae__local_fwd_free(lh->fwd);
	cae_helper_stop(lh->h);
	cae_net_proxy_free(lh->proxy);
	if (lh->cgname[0])
		cae__sandbox_cgroup_remove(lh->cgname);
	free(lh->uuid);
	free(lh->root);
	free(lh);
}

/* Takes lh out of the list (lock held); returns it when nobody uses it (to be freed by the
 * caller after unlocking), else NULL (the last user frees it). */
static struct local_helper *helper_retire_locked(struct local_impl *li, struct local_helper *lh)
{
	for (struct local_helper **pp = &li->helpers; *pp; pp = &(*pp)->next)
		if (*pp == lh) {
			*pp = lh->next;
			break;
		}
	lh->next = NULL;
	lh->retired = true;
	return lh->refs == 0 ? lh : NULL;
}

/* Stops the sandbox of uuid, if any (the environment is being removed or re-created). */
static void helper_forget(struct local_impl *li, const char *uuid)
{
	struct local_helper *dead = NULL;
	pthread_mutex_lock(&li->helper_lock);
	for (struct local_helper *lh = li->helpers; lh; lh = lh->next)
		if (strcmp(lh->uuid, uuid) == 0) {
			dead = helper_retire_locked(li, lh);
			break;
		}
	pthread_mutex_unlock(&li->helper_lock);
	helper_free(dead);
}

#define CRED_DIR ".cae-run"
#define CRED_MAX 65536

static void *cred_main(void *arg)
{
	struct local_cred *c = arg;
	for (;;) {
		int fd = accept4(c->fd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			return NULL;
		}
		/* one request at a time: git asks once per push */
		char *req = malloc(CRED_MAX);
		size_t n = 0;
		struct pollfd pfd = {.fd = fd, .events = POLLIN};
		while (req && n < CRED_MAX && poll(&pfd, 1, 10000) > 0) {
			ssize_t k = read(fd, req + n, CRED_MAX - n);
			if (k <= 0)
				break;
			n += (size_t)k;
		}
		char *reply = req ? cae__git_credential_answer(c->b->cfg, c->b->log, c->uuid,
							       c->target, req, n)
				  : NULL;
		if (reply) {
			(void)cae__write_all(fd, reply, strlen(reply));
			explicit_bzero(reply, strlen(reply));
			free(reply);
		}
		free(req);
		close(fd);
	}
}

static void cred_free(struct local_cred *c)
{
	if (!c)
		return;
	shutdown(c->fd, SHUT_RDWR);
	pthread_join(c->thread, NULL);
	close(c->fd);
	unlink(c->path);
	free(c->uuid);
	free(c->target);
	free(c);
}

/* The credential channel of env in this process, started on first use; the socket's inside
 * path into *inside. Returns false when there is none (no credential target, or it could not
 * be made). */
static bool cred_channel(cae_backend *b, const struct local_env *env, char *inside, size_t size)
{
	struct local_impl *li = impl_of(b);
	if (!env->git_credential || !env->uuid || env->external)
		return false;
	char name[64];
	snprintf(name, sizeof(name), "cred-%d.sock", (int)getpid());
	snprintf(inside, size, "%s/%s/%s", inside_root(env), CRED_DIR, name);
	pthread_mutex_lock(&li->helper_lock);
	for (struct local_cred *c = li->creds; c; c = c->next)
		if (strcmp(c->uuid, env->uuid) == 0) {
			pthread_mutex_unlock(&li->helper_lock);
			return true;
		}
	struct local_cred *c = calloc(1, sizeof(*c));
	bool ok = false;
	_cleanup_free_ char *dir = cae__path_join(env->root, CRED_DIR);
	if (c && dir && (c->uuid = strdup(env->uuid)) &&
	    (c->target = strdup(env->git_credential))) {
		/* the sandbox's user reaches the socket; nobody else */
		(void)mkdir(dir, 0700);
		bool owned = chown(dir, env->uid, env->gid) == 0 || env->uid == 0;
		snprintf(c->path, sizeof(c->path), "%s/%s", dir, name);
		unlink(c->path);
		struct sockaddr_un sa = {.sun_family = AF_UNIX};
		c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		c->b = b;
		/* bound through the directory's descriptor: a state directory's path, with a long
		 * task uuid, may be longer than sun_path's 108 bytes */
		_cleanup_close_ int dfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
		ok = owned && c->fd >= 0 && dfd >= 0 &&
		     snprintf(sa.sun_path, sizeof(sa.sun_path), "/proc/self/fd/%d/%s", dfd, name) <
			 (int)sizeof(sa.sun_path);
		if (ok) {
			ok = bind(c->fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
			     chown(c->path, env->uid, env->gid) == 0 && chmod(c->path, 0600) == 0 &&
			     listen(c->fd, 8) == 0 &&
			     pthread_create(&c->thread, NULL, cred_main, c) == 0;
		}
	}
	if (ok) {
		c->next = li->creds;
		li->creds = c;
	} else if (c) {
		if (c->fd > 0)
			close(c->fd);
		unlink(c->path);
		free(c->uuid);
		free(c->target);
		free(c);
	}
	pthread_mutex_unlock(&li->helper_lock);
	return ok;
}

/* The environment of uuid goes: its credential channel too. */
static void cred_forget(struct local_impl *li, const char *uuid)
{
	struct local_cred *dead = NULL;
	pthread_mutex_lock(&li->helper_lock);
	for (struct local_cred **pp = &li->creds; *pp; pp = &(*pp)->next)
		if (strcmp((*pp)->uuid, uuid) == 0) {
			dead = *pp;
			*pp = dead->next;
			break;
		}
	pthread_mutex_unlock(&li->helper_lock);
	cred_free(dead);
}

void cae__local_stop_sandbox(cae_backend *b, const char *uuid)
{
	helper_forget(impl_of(b), uuid);
	cred_forget(impl_of(b), uuid);
}

/* The command line of a sandbox for env: the environment's cgroup when cgroups can be used
 * here (else rlimits), its uid, its file system. serve: cae-helper inside, else argv.
 * New array (cae__sandbox_argv_free). */
/* The shared npm cache of env's sandbox uid (pkgcache.h), made when make is set; 1 with out
 * set, 0 when there is none (caches off, unconfined, a workspace used as is). */
static int npm_cache_of(const struct local_env *env, bool make, char *out, size_t size,
			cae_error *err)
{
	if (!env->sandbox || env->external)
		return 0;
	/* uid 0: commands run as cae's own user (it is not root) */
	uid_t uid = env->uid ? env->uid : getuid();
	gid_t gid = env->uid ? env->gid : getgid();
	char owner[32];
	snprintf(owner, sizeof(owner), "local-%u", (unsigned)uid);
	return cae__pkgcache_npm_dir(env->cfg, owner, uid, gid, make, out, size, err);
}

/* Go's build cache of env (pkgcache.h): <root>/.cache/go-build, seeded from the shared one
 * when the project has a go.mod; inside, GOCACHE_INSIDE. Made when make is set (1, 0: none,
 * -errno); without make, 1 when it exists. */
#define GOCACHE_INSIDE CAE_SANDBOX_ROOT "/.cache/go-build"
static int go_cache_of(const struct local_env *env, bool make, cae_error *err)
{
	if (!env->sandbox || env->external || !env->cfg->command_executor.package_cache.enabled)
		return 0;
	char dir[PATH_MAX + 32], mod[PATH_MAX + 16];
	snprintf(dir, sizeof(dir), "%s/.cache/go-build", env->root);
	snprintf(mod, sizeof(mod), "%s/go.mod", env->project);
	if (!make || access(mod, F_OK) < 0)
		return !make && cae__is_dir(dir);
	uid_t uid = env->uid ? env->uid : getuid();
	gid_t gid = env->uid ? env->gid : getgid();
	char parent[PATH_MAX + 16];
	snprintf(parent, sizeof(parent), "%s/.cache", env->root);
	struct stat st;
	if ((mkdir(parent, 0755) < 0 && errno != EEXIST) || lstat(parent, &st) < 0)
		return cae_error_set(err, -errno, "cannot make %s: %s", parent, strerror(errno));
	/* made by cae before any command of this environment ran: a directory, never a link */
	if (!S_ISDIR(st.st_mode) || lchown(parent, uid, gid) < 0)
		return cae_error_set(err, -ENOTDIR, "cannot use %s: not a directory of cae's",
				     parent);
	/* the sandbox as cae's own uid could write through a link: copies */
	return cae__pkgcache_go(env->cfg, dir, uid, gid, uid == getuid(), err);
}

/* The shared Go module proxy and pip's wheels (pkgcache.h), bound read-only into env's
 * sandbox: 1 with out set (made), 0 when there is none. */
static int go_mod_of(const struct local_env *env, char *out, size_t size)
{
	return env->sandbox && !env->external &&
	       cae__pkgcache_gomod_dir(env->cfg, true, out, size, NULL) == 1;
}

static int pip_wheels_of(const struct local_env *env, char *out, size_t size)
{
	return env->sandbox && !env->external &&
	       cae__pkgcache_pip_dir(env->cfg, true, out, size, NULL) == 1;
}

/* Maven's shared repository and cae's settings.xml naming it (Maven's global settings in
 * the sandbox, where the host's, which may hold credentials, is not), when the host has
 * Debian's Maven configuration directory. */
static int maven_of(const struct local_env *env, char *dir, char *settings, size_t size)
{
	return env->sandbox && !env->external && cae__is_dir("/etc/maven") &&
	       cae__pkgcache_maven_dir(env->cfg, true, dir, size, NULL) == 1 &&
	       cae__pkgcache_maven_settings_file(env->cfg, settings, size, NULL) == 1;
}

/* The shared node_modules tree of the project's lock file (pkgcache.h), put in place of
 * its `npm ci` when there is one. */
static void npm_tree_put(cae_prepare *p, const struct local_env *env)
{
	/* (none without the dependency step: there is no npm ci to stand in for) */
	if (!p->deps_opts.npm_cache_shared || !env->cfg->command_executor.clone.auto_install_deps ||
	    p->given_as_is)
		return;
	uid_t uid = env->uid ? env->uid : getuid();
	gid_t gid = env->uid ? env->gid : getgid();
	cae_error e;
	cae_error_clear(&e);
	int64_t t0 = cae__now_ms();
	/* the sandbox as cae's own uid could write through a link: copies */
	int r = cae__pkgcache_npm_tree_link(env->cfg, env->project, uid, gid, uid == getuid(), &e);
	p->deps_opts.npm_tree_linked = r == 1;
	p->deps_opts.npm_tree_ms = cae__now_ms() - t0;
	if (r < 0) {
		char w[1200];
		snprintf(w, sizeof(w), "the shared node_modules is not used: %.1100s", e.message);
		cae__prepare_warn(p, "package_cache.unavailable", w);
	}
}

/* After the prepare's `npm ci`: its node_modules kept as the shared tree of its lock file,
 * when it may be (pkgcache.h); nothing of the environment's ran since. */
static void npm_tree_keep(void *ctx)
{
	const struct local_env *env = ctx;
	cae_error e;
	cae_error_clear(&e);
	(void)cae__pkgcache_npm_tree_store(env->cfg, env->project, &e);
}

static char **env_sandbox_argv(const struct local_env *env, bool network, const char *dir,
			       bool serve, const char *const *argv, bool die_with_parent)
{
	struct local_impl *li = env->impl;
	cae_sandbox_limits lim = sandbox_limits(env->cfg);
	char name[160];
	cgroup_name(li, env->task, name, sizeof(name));
	char **procs = NULL;
	size_t n = 0;
	if (cae__sandbox_cgroup_setup(name, &lim, &procs, &n) < 0)
		n = 0;
	cae_sandbox_spec spec = {
	    .helper = li->helper_path,
	    .bwrap = li->bwrap,
	    .ws_host = env->root,
	    .ws_inside = env->external ? CAE_SANDBOX_PROJECT : CAE_SANDBOX_ROOT,
	    .etc_dir = li->etc_dir,
	    .chdir = dir,
	    .network = network,
	    .serve = serve,
	    .argv = argv,
	    .uid = env->uid,
	    .gid = env->gid,
	    .idmap = env->idmap,
	    .owner_uid = env->owner_uid,
	    .owner_gid = env->owner_gid,
	    .cgroup_procs = procs,
	    .n_cgroup = n,
	    .limits = &lim,
	    .rlimit_nproc = n == 0 && env->uid != 0,
	    .die_with_parent = die_with_parent,
	    .seccomp = li->seccomp,
	    .protected_paths =
		(const char *const *)env->cfg->command_executor.protected_paths.items,
	    .n_protected = env->cfg->command_executor.protected_paths.n,
	    .hide = {li->root, li->disk_root},
	};
	char cache[PATH_MAX];
	if (npm_cache_of(env, false, cache, sizeof(cache), NULL) == 1) {
		spec.npm_cache = cache;
		spec.npm_cache_inside = CAE_PKGCACHE_NPM;
	}
	char gomod[PATH_MAX], wheels[PATH_MAX];
	if (go_mod_of(env, gomod, sizeof(gomod))) {
		spec.ro_cache[0] = gomod;
		spec.ro_cache_inside[0] = CAE_PKGCACHE_GO_MOD;
	}
	if (pip_wheels_of(env, wheels, sizeof(wheels))) {
		spec.ro_cache[1] = wheels;
		spec.ro_cache_inside[1] = CAE_PKGCACHE_PIP_WHEELS;
	}
	char maven[PATH_MAX], settings[PATH_MAX];
	if (maven_of(env, maven, settings, PATH_MAX)) {
		spec.ro_cache[2] = maven;
		spec.ro_cache_inside[2] = CAE_PKGCACHE_MAVEN;
		spec.ro_cache[3] = settings;
		spec.ro_cache_inside[3] = CAE_PKGCACHE_MAVEN_SETTINGS;
	}
	/* a missing .git/hooks is made (empty) so that it can be bound read-only too */
	char project[PATH_MAX];
	snprintf(project, sizeof(project), "%s%s", env->root, env->external ? "" : "/project");
	(void)cae__sandbox_protect_prepare(project, spec.protected_paths, spec.n_protected);
	char **out = cae__sandbox_argv(&spec);
	for (size_t i = 0; i < n; i++)
		free(procs[i]);
	free(procs);
	return out;
}

static int helper_launch(cae_backend *b, struct local_env *env, struct local_helper **out,
			 cae_error *err)
{
	_cleanup_(cae__sandbox_argv_free_p) char **argv =
	    env_sandbox_argv(env, env->network, inside_root(env), true, NULL, false);
	_cleanup_(cae__sandbox_argv_free_p) char **envp = cae__sandbox_env(NULL);
	if (!argv || !envp)
		return -ENOMEM;
	struct local_helper *lh = calloc(1, sizeof(*lh));
	if (!lh)
		return -ENOMEM;
	struct stat st;
	if (stat(env->root, &st) == 0) {
		lh->dev = st.st_dev;
		lh->ino = st.st_ino;
	}
	lh->uuid = strdup(env->uuid);
	lh->root = strdup(env->root);
	lh->network = env->network;
	lh->fwd = cae__local_fwd_new();
	cgroup_name(env->impl, env->task, lh->cgname, sizeof(lh->cgname));
	int r = lh->uuid && lh->root
		    ? cae_helper_start((const char *const *)argv, (const char *const *)envp, 10000,
				       &lh->h, err)
		    : -ENOMEM;
	if (r == 0 && env->filtered)
		r = cae__local_net_start(lh->h, env->cfg, b->log, env->uuid, env->forge, &lh->proxy,
					 err);
	if (r < 0) {
		helper_free(lh);
		return r;
	}
	cae_log_fields(
	    b->log, CAE_LOG_DEBUG, "sandbox.start",
	    json_pack("{s:s, s:i}", "task_uuid", env->uuid, "pid", (int)cae_helper_pid(lh->h)),
	    NULL);
	*out = lh;
	return 0;
}

/* The environment's sandbox helper, started on first use, with a reference taken. */
static int helper_acquire(cae_backend *b, struct local_env *env, struct local_helper **out,
			  cae_error *err)
{
	struct local_impl *li = impl_of(b);
	struct local_helper *dead = NULL, *found = NULL;
	int r = 0;
	pthread_mutex_lock(&li->helper_lock);
	struct stat st;
	bool have_st = stat(env->root, &st) == 0;
	for (struct local_helper *lh = li->helpers; lh; lh = lh->next) {
		if (strcmp(lh->uuid, env->uuid) != 0)
			continue;
		if (cae_helper_alive(lh->h) && strcmp(lh->root, env->root) == 0 &&
		    lh->network == env->network && have_st && st.st_dev == lh->dev &&
		    st.st_ino == lh->ino)
			found = lh;
		else
			dead = helper_retire_locked(li, lh);
		break;
	}
	if (!found) {
		r = helper_launch(b, env, &found, err);
		if (r < 0) {
			cae_log_event(b->log, CAE_LOG_WARN, "sandbox.helper_failed",
				      "the sandbox could not start: %s", err ? err->message : "");
			found = NULL;
			goto out;
		}
		found->next = li->helpers;
		li->helpers = found;
	}
	found->refs++;
out:
	pthread_mutex_unlock(&li->helper_lock);
	helper_free(dead);
	*out = found;
	return r;
}

static void helper_release(struct local_impl *li, struct local_helper *lh)
{
	struct local_helper *dead = NULL;
	pthread_mutex_lock(&li->helper_lock);
	lh->refs--;
	if (!lh->retired && !cae_helper_alive(lh->h))
		helper_retire_locked(li, lh);
	if (lh->retired && lh->refs == 0)
		dead = lh;
	pthread_mutex_unlock(&li->helper_lock);
	helper_free(dead);
}

/* What the proxy of uuid's sandbox in this process refused since it was last taken. */
static json_t *local_network_denied(cae_backend *b, const char *uuid)
{
	struct local_impl *li = impl_of(b);
	json_t *d = NULL;
	pthread_mutex_lock(&li->helper_lock);
	for (struct local_helper *lh = li->helpers; lh && !d; lh = lh->next)
		if (lh->proxy && strcmp(lh->uuid, uuid) == 0)
			d = cae_net_proxy_take_denied(lh->proxy);
	pthread_mutex_unlock(&li->helper_lock);
	return d;
}

/* Runs spec in the environment's long-lived sandbox. Returns 1 when there is none to use
 * (the caller starts a sandbox for this command), else the runner's result. */
static int helper_exec(cae_backend *b, struct local_env *env, const cae_run_spec *spec,
		       cae_run_result *res, cae_error *err)
{
	struct local_impl *li = impl_of(b);
	for (int attempt = 0; attempt < 2; attempt++) {
		struct local_helper *lh;
		int r = helper_acquire(b, env, &lh, err);
		if (r < 0)
			return r;
		if (spec->live) {
			/* output and input that flow while it runs: a stream of its own */
			cae_helper_mux *m = NULL;
			r = cae_helper_open_mux(lh->h, 10000, &m, err);
			if (r == 0)
				r = cae_helper_mux_run(m, spec, NULL, NULL, res, err);
			cae_helper_mux_close(m);
		} else {
			r = cae_helper_run(lh->h, spec, res, err);
		}
		if (r == 0 && lh->proxy)
			cae__local_net_report(lh->proxy, res);
		helper_release(li, lh);
		/* Gone before the command was sent (it did not run): once more, in a new one. */
		if (r == -EPIPE && attempt == 0)
			continue;
		if (r == -EPIPE || r == -ECONNRESET || r == -ETIMEDOUT || r == -EPROTO)
			cae_log_event(b->log, CAE_LOG_WARN, "sandbox.helper_lost", "%s",
				      err ? err->message : "cae-helper ended");
		return r;
	}
	return 1;
}

/* The environment's Python virtual environment (deps.c installs Python dependencies into
 * it): .venv in the workspace root, beside the project rather than in it (no clone, status
 * or commit of the project sees it), in the workspace's file system (its disk bound counts
 * it), gone with the environment; the host's own Python refuses pip installs (PEP 668).
 * None for a workspace used as is (its root is the project). out: as commands see it. */
static bool venv_of(const struct local_env *env, char *out, size_t size)
{
	if (env->external)
		return false;
	snprintf(out, size, "%s/.venv", env->sandbox ? CAE_SANDBOX_ROOT : env->root);
	return true;
}

/* b may be NULL when env has no uuid (prepare steps). */
static int local_env_exec(cae_backend *b, struct local_env *env, const cae_exec_request *req,
			  cae_run_result *res, cae_error *err)
{
	_cleanup_free_ char *cwd = NULL;
	int r = resolve_cwd(env, req->cwd, &cwd, err);
	if (r < 0)
		return r;
	_cleanup_free_ char **plain_env = NULL;
	_cleanup_(cae__sandbox_argv_free_p) char **sandbox_env = NULL;
	/* git push on demand: git's credential helper asks this process (cred_channel) */
	char sock[PATH_MAX], sock_env[PATH_MAX + 32];
	size_t ne = 0;
	for (const char *const *e = req->extra_env; e && *e; e++)
		ne++;
	_cleanup_free_ const char **extra = calloc(ne + 7 + 8 + 2 + 8, sizeof(char *));
	if (!extra)
		return -ENOMEM;
	ne = 0;
	for (const char *const *e = req->extra_env; e && *e; e++)
		extra[ne++] = *e;
	if (b && env->sandbox && env->uuid) {
		/* without a channel the credential helper says no token is configured */
		if (cred_channel(b, env, sock, sizeof(sock))) {
			snprintf(sock_env, sizeof(sock_env), "CAE_CREDENTIAL_SOCKET=%s", sock);
			extra[ne++] = sock_env;
		}
		/* the empty value resets the list: ours is the only helper, whatever the
		 * repository's configuration names */
		extra[ne++] = "GIT_CONFIG_COUNT=2";
		extra[ne++] = "GIT_CONFIG_KEY_0=credential.helper";
		extra[ne++] = "GIT_CONFIG_VALUE_0=";
		extra[ne++] = "GIT_CONFIG_KEY_1=credential.helper";
		extra[ne++] = "GIT_CONFIG_VALUE_1=!/.cae/cae-helper --credential";
	}
	/* a filtered network: the proxy on the sandbox's loopback, for every command */
	for (const char *const *e = cae_net_proxy_env(); env->filtered && env->sandbox && *e; e++)
		extra[ne++] = *e;
	/* the virtual environment, once made, first on PATH (after the caller's own PATH) */
	char venv[PATH_MAX], host_bin[PATH_MAX * 2], venv_env[PATH_MAX + 16],
	    path_env[PATH_MAX * 2 + 16];
	struct stat vst;
	if (venv_of(env, venv, sizeof(venv)) &&
	    (snprintf(host_bin, sizeof(host_bin), "%s/.venv/bin", env->root),
	     lstat(host_bin, &vst) == 0 && S_ISDIR(vst.st_mode))) {
		const char *base = getenv("PATH");
		snprintf(path_env, sizeof(path_env), "PATH=%s/bin:%s", venv,
			 env->sandbox ? CAE_SANDBOX_PATH
			 : base	      ? base
				      : "/usr/bin:/bin");
		snprintf(venv_env, sizeof(venv_env), "VIRTUAL_ENV=%s", venv);
		extra[ne++] = path_env;
		extra[ne++] = venv_env;
	}
	/* the shared package caches, when the sandbox binds them */
	char cache[PATH_MAX];
	bool npm = npm_cache_of(env, false, cache, sizeof(cache), NULL) == 1;
	for (const char *const *e = cae__pkgcache_env(); npm && *e; e++)
		extra[ne++] = *e;
	if (go_cache_of(env, false, NULL) == 1)
		extra[ne++] = "GOCACHE=" GOCACHE_INSIDE;
	if (go_mod_of(env, cache, sizeof(cache)))
		extra[ne++] = cae__pkgcache_gomod_env();
	bool wheels = pip_wheels_of(env, cache, sizeof(cache));
	for (const char *const *e = cae__pkgcache_pip_env(); wheels && *e; e++)
		extra[ne++] = *e;
	extra[ne] = NULL;
	if (env->sandbox)
		sandbox_env = cae__sandbox_env(extra);
	else
		plain_env = build_env(extra, env->cfg);
	char **envp = env->sandbox ? sandbox_env : plain_env;
	if (!envp)
		return -ENOMEM;
	cae_run_spec spec = cae__backend_run_spec(req, cwd, (const char *const *)envp);
	if (!env->sandbox)
		return cae_runner_run(&spec, res, err);
	if (b && env->uuid && (env->network || !req->network)) {
		r = helper_exec(b, env, &spec, res, err);
		if (r <= 0)
			return r;
	}
	/* A sandbox for this command alone (a prepare step that needs the network). Inside
	 * it bwrap would only exit 1 for a missing program: look a bare name up here on the
	 * sandbox's PATH (the same /usr as inside). */
	_cleanup_free_ char *prog = NULL;
	if (!strchr(req->argv[0], '/') &&
	    cae_runner_find_program(req->argv[0], (const char *const *)envp, &prog) < 0)
		return cae_error_set(err, -ENOENT, "command not found: %s", req->argv[0]);
	/* This thread waits for the command: bwrap may die with it. */
	_cleanup_(cae__sandbox_argv_free_p) char **argv =
	    env_sandbox_argv(env, env->network || req->network, cwd, false, req->argv, true);
	if (!argv)
		return -ENOMEM;
	spec.argv = (const char *const *)argv;
	/* The command is found inside, on the sandbox's PATH; bwrap itself by its path. */
	spec.cwd = NULL;
	r = cae_runner_run(&spec, res, err);
	/* its whole tree is gone: the cgroup stays only if a sandbox still uses it */
	char name[160];
	cgroup_name(env->impl, env->task, name, sizeof(name));
	cae__sandbox_cgroup_remove(name);
	return r;
}

static int env_exec_cb(void *ctx, const cae_exec_request *req, cae_run_result *res, cae_error *err)
{
	const struct local_env *env = ctx;
	if (req->cancel_fd >= 0 || env->cancel_fd < 0)
		return local_env_exec(NULL, ctx, req, res, err);
	cae_exec_request r = *req;
	r.cancel_fd = env->cancel_fd;
	return local_env_exec(NULL, ctx, &r, res, err);
}

static int read_meta(struct local_impl *li, const char *uuid, json_t **out, cae_error *err)
{
	_cleanup_free_ char *dir = task_dir(li, uuid);
	_cleanup_free_ char *path = dir ? cae__path_join(dir, "meta.json") : NULL;
	if (!path)
		return -ENOMEM;
	_cleanup_free_ char *text = NULL;
	size_t len;
	int r = cae__read_file(AT_FDCWD, path, META_MAX, &text, &len);
	if (r == -ENOENT)
		return cae_error_set(err, -ENOENT, "no environment for task %s", uuid);
	if (r < 0)
		return cae_error_set(err, -EIO, "environment %s: cannot read its metadata: %s",
				     uuid, strerror(-r));
	json_error_t je;
	*out = json_loadb(text, len, 0, &je);
	if (!*out)
		return cae_error_set(err, -EINVAL,
				     "environment %s: its metadata is unreadable (line %d: %s)",
				     uuid, je.line, je.text);
	json_object_set_new(*out, "status", json_string(meta_status(*out, li->clone_timeout_s)));
	return 0;
}

static int write_meta(struct local_impl *li, const char *uuid, json_t *meta, cae_error *err)
{
	_cleanup_free_ char *dir = task_dir(li, uuid);
	_cleanup_free_ char *path = dir ? cae__path_join(dir, "meta.json") : NULL;
	_cleanup_free_ char *text = json_dumps(meta, JSON_INDENT(2) | JSON_SORT_KEYS);
	if (!path || !text)
		return -ENOMEM;
	int r = cae__write_file_atomic(AT_FDCWD, path, text, strlen(text), 0600, false);
	if (r < 0)
		return cae_error_set(err, r, "environment %s: cannot write its metadata: %s", uuid,
				     strerror(-r));
	return 0;
}

static void meta_entry_clear(struct meta_entry *m)
{
	free(m->uuid);
	free(m->root);
	free(m->project);
	free(m->git_credential);
	free(m->forge);
	memset(m, 0, sizeof(*m));
}

static bool meta_matches(const struct meta_entry *m, const char *uuid, const struct stat *st)
{
	return m->uuid && strcmp(m->uuid, uuid) == 0 && m->dev == st->st_dev &&
	       m->ino == st->st_ino && m->size == st->st_size &&
	       m->mtime.tv_sec == st->st_mtim.tv_sec && m->mtime.tv_nsec == st->st_mtim.tv_nsec;
}

/* root and project of a ready environment from the cache; false when not cached. */
static bool meta_cached(struct local_impl *li, const char *uuid, const struct stat *st,
			struct local_env *env)
{
	bool hit = false;
	pthread_mutex_lock(&li->meta_lock);
	for (size_t i = 0; i < META_CACHE && !hit; i++) {
		if (!meta_matches(&li->meta[i], uuid, st))
			continue;
		env->root = strdup(li->meta[i].root);
		env->project = strdup(li->meta[i].project);
		env->sandbox = li->meta[i].sandbox;
		env->external = li->meta[i].external;
		env->uid = li->meta[i].uid;
		env->gid = li->meta[i].gid;
		env->idmap = li->meta[i].idmap;
		env->owner_uid = li->meta[i].owner_uid;
		env->owner_gid = li->meta[i].owner_gid;
		env->git_credential =
		    li->meta[i].git_credential ? strdup(li->meta[i].git_credential) : NULL;
		env->forge = li->meta[i].forge ? strdup(li->meta[i].forge) : NULL;
		hit = env->root && env->project &&
		      (!li->meta[i].git_credential || env->git_credential) &&
		      (!li->meta[i].forge || env->forge);
		if (!hit)
			local_env_clear(env);
	}
	pthread_mutex_unlock(&li->meta_lock);
	return hit;
}

static void meta_remember(struct local_impl *li, const char *uuid, const struct stat *st,
			  const struct local_env *env)
{
	pthread_mutex_lock(&li->meta_lock);
	struct meta_entry *m = NULL;
	for (size_t i = 0; i < META_CACHE && !m; i++)
		if (li->meta[i].uuid && strcmp(li->meta[i].uuid, uuid) == 0)
			m = &li->meta[i];
	if (!m)
		m = &li->meta[li->meta_next++ % META_CACHE];
	meta_entry_clear(m);
	m->uuid = strdup(uuid);
	m->root = strdup(env->root);
	m->project = strdup(env->project);
	if (!m->uuid || !m->root || !m->project) {
		meta_entry_clear(m);
	} else {
		m->sandbox = env->sandbox;
		m->external = env->external;
		m->uid = env->uid;
		m->gid = env->gid;
		m->idmap = env->idmap;
		m->owner_uid = env->owner_uid;
		m->owner_gid = env->owner_gid;
		m->git_credential = env->git_credential ? strdup(env->git_credential) : NULL;
		m->forge = env->forge ? strdup(env->forge) : NULL;
		m->dev = st->st_dev;
		m->ino = st->st_ino;
		m->size = st->st_size;
		m->mtime = st->st_mtim;
	}
	pthread_mutex_unlock(&li->meta_lock);
}

/* The workspace's own file system mounted again where it is not (after a reboot): returns
 * 1 when it was, 0 when there was nothing to do (no image, or mounted), -errno. */
static int disk_remount(struct local_impl *li, const char *uuid, cae_error *err)
{
	_cleanup_free_ char *dir = task_dir(li, uuid);
	_cleanup_free_ char *img = dir ? cae__path_join(dir, CAE_DISKFS_IMAGE) : NULL;
	_cleanup_free_ char *ws = dir ? cae__path_join(dir, "workspace") : NULL;
	if (!ws)
		return -ENOMEM;
	return cae__diskfs_remount(img, ws, err);
}

static int load_env(cae_backend *b, const char *uuid, struct local_env *env, cae_error *err)
{
	struct local_impl *li = impl_of(b);
	memset(env, 0, sizeof(*env));
	env->cancel_fd = -1;
	_cleanup_free_ char *dir = task_dir(li, uuid);
	_cleanup_free_ char *path = dir ? cae__path_join(dir, "meta.json") : NULL;
	if (!path)
		return -ENOMEM;
	struct stat st;
	bool have_st = stat(path, &st) == 0;
	if (!have_st || !meta_cached(li, uuid, &st, env)) {
		json_t *meta = NULL;
		int r = read_meta(li, uuid, &meta, err);
		if (r < 0)
			return r;
		const char *root = json_string_value(json_object_get(meta, "workspace_root"));
		const char *project = json_string_value(json_object_get(meta, "host_path"));
		const char *status = json_string_value(json_object_get(meta, "status"));
		/* another instance's environment runs nothing of ours */
		if (!cae__backend_own(b, json_string_value(json_object_get(meta, "instance")))) {
			json_decref(meta);
			return cae_error_set(err, -ENOENT, "no environment for task %s", uuid);
		}
		if (!root || !project) {
			json_decref(meta);
			return cae_error_set(err, -EINVAL, "environment %s: metadata incomplete",
					     uuid);
		}
		if (!status || strcmp(status, "ready") != 0) {
			r = cae_error_set(err, -EAGAIN, "environment %s is not ready: %s", uuid,
					  status && strcmp(status, "creating") == 0
					      ? "its prepare is still running"
					      : "its prepare did not finish (prepare it again)");
			json_decref(meta);
			return r;
		}
		env->root = strdup(root);
		env->project = strdup(project);
		env->sandbox = strcmp(json_string_value(json_object_get(meta, "sandbox")) ?: "",
				      "bubblewrap") == 0;
		env->external = json_is_true(json_object_get(meta, "external"));
		env->uid = (uid_t)json_integer_value(json_object_get(meta, "sandbox_uid"));
		env->gid = (gid_t)json_integer_value(json_object_get(meta, "sandbox_gid"));
		json_t *owner = json_object_get(meta, "idmap_owner");
		env->idmap = json_array_size(owner) == 2;
		env->owner_uid = (uid_t)json_integer_value(json_array_get(owner, 0));
		env->owner_gid = (gid_t)json_integer_value(json_array_get(owner, 1));
		const char *gc = json_string_value(json_object_get(meta, "git_credential"));
		env->git_credential = gc ? strdup(gc) : NULL;
		const char *fg = json_string_value(json_object_get(meta, "forge"));
		env->forge = fg ? strdup(fg) : NULL;
		json_decref(meta);
		if (!env->root || !env->project) {
			local_env_clear(env);
			return -ENOMEM;
		}
		/* st was taken before the read: if the file changed in between, the next
		 * stat differs and reads again. */
		if (have_st)
			meta_remember(li, uuid, &st, env);
	}
	if (!cae__is_dir(env->project) && !env->external && disk_remount(li, uuid, err) < 0) {
		local_env_clear(env);
		return -EIO;
	}
	if (!cae__is_dir(env->project)) {
		local_env_clear(env);
		return cae_error_set(err, -ENOENT,
				     "environment gone: the workspace of task %s no longer exists",
				     uuid);
	}
	/* The environment keeps the confinement it was prepared with (its paths depend on
	 * it); the config decides whether that may still run. */
	int sb = use_sandbox(b, err);
	if (env->sandbox && sb != 1) {
		local_env_clear(env);
		return sb < 0 ? sb
			      : cae_error_set(err, -ENOSYS,
					      "the environment of task %s is "
					      "sandboxed but the config now says "
					      "sandbox: none; prepare it again",
					      uuid);
	}
	if (!env->sandbox && sb != 0) {
		local_env_clear(env);
		return cae_error_set(err, -ENOSYS,
				     "the environment of task %s was prepared unconfined and the "
				     "config no longer allows that (command_executor.local."
				     "unconfined); prepare it again",
				     uuid);
	}
	cae_error_clear(err);
	env->filtered = cae__net_proxied(b->cfg, "local", env->forge);
	env->network = b->cfg->command_executor.local.network && !env->filtered;
	env->impl = li;
	env->cfg = b->cfg;
	env->uuid = uuid;
	env->task = uuid;
	return 0;
}

/* A workspace the user owns: .git/config back to the rule (gitconfig-guard.c). A failure is
 * logged (the command's result stands) and returned. */
static int guard_env(cae_backend *b, const char *uuid, const struct local_env *env)
{
	_cleanup_free_ char *dir = task_dir(impl_of(b), uuid);
	cae_error e = {0};
	int r = dir ? cae__gitguard_enforce(b->cfg, b->log, uuid, env->project, dir, &e) : -ENOMEM;
	if (r < 0)
		cae_log_fields(b->log, CAE_LOG_ERROR, "git.config_guard_failed",
			       json_pack("{s:s, s:s}", "task_uuid", uuid, "error", e.message),
			       NULL);
	return r;
}

static int local_exec(cae_backend *b, const char *uuid, const cae_exec_request *req,
		      cae_run_result *res, cae_error *err)
{
	struct local_env env;
	int r = load_env(b, uuid, &env, err);
	if (r < 0)
		return r;
	r = local_env_exec(b, &env, req, res, err);
	if (env.external)
		guard_env(b, uuid, &env);
	local_env_clear(&env);
	return r;
}

static int local_port_forward(cae_backend *b, const char *uuid, int port, int *host_port,
			      cae_error *err)
{
	struct local_env env;
	int r = load_env(b, uuid, &env, err);
	if (r < 0)
		return r;
	if (!env.sandbox || env.network) {
		/* the host's network: the port is this host's already */
		*host_port = port;
		local_env_clear(&env);
		return 0;
	}
	struct local_helper *lh;
	r = helper_acquire(b, &env, &lh, err);
	if (r == 0) {
		r = cae__local_fwd_open(lh->fwd, lh->h, port, host_port, err);
		helper_release(impl_of(b), lh);
	}
	local_env_clear(&env);
	return r;
}

static int local_guard(cae_backend *b, const char *uuid, cae_error *err)
{
	struct local_env env;
	int r = load_env(b, uuid, &env, err);
	if (r < 0)
		return r;
	r = env.external ? guard_env(b, uuid, &env) : 0;
	local_env_clear(&env);
	return r;
}

static int remove_task_dir(cae_backend *b, const char *uuid, cae_error *err)
{
	struct local_impl *li = impl_of(b);
	_cleanup_free_ char *dir = task_dir(li, uuid);
	if (!dir)
		return -ENOMEM;
	helper_forget(li, uuid);
	cred_forget(li, uuid);
	/* the last guard of a workspace the user owns, while its record is still there */
	struct local_env env;
	if (load_env(b, uuid, &env, NULL) == 0) {
		if (env.external)
			guard_env(b, uuid, &env);
		local_env_clear(&env);
	}
	char name[160];
	cgroup_name(li, uuid, name, sizeof(name));
	cae__sandbox_cgroup_remove(name);
	/* the workspace's own file system first: nothing may be removed through its mount */
	_cleanup_free_ char *img = cae__path_join(dir, CAE_DISKFS_IMAGE);
	_cleanup_free_ char *ws = cae__path_join(dir, "workspace");
	if (!img || !ws)
		return -ENOMEM;
	int r = cae__diskfs_release(img, ws);
	if (r < 0)
		return cae_error_set(err, r, "could not unmount the workspace of task %s: %s", uuid,
				     strerror(-r));
	for (int attempt = 0; attempt < 3; attempt++) {
		r = cae__rm_rf(dir);
		if (r == 0 && !cae__is_dir(dir))
			return 0;
		usleep(100000);
	}
	return cae_error_set(err, r < 0 ? r : -EBUSY,
			     "could not remove the environment of task %s: %s", uuid,
			     strerror(r < 0 ? -r : EBUSY));
}

static int local_remove(cae_backend *b, const char *uuid, bool graceful, cae_error *err)
{
	(void)graceful; /* a helper that is stopped takes its commands with it either way */
	return remove_task_dir(b, uuid, err);
}

/* ---- prepare hooks (the lifecycle is src/backend/prepare.c) ---- */

/* One local prepare in progress. */
struct local_prep {
	struct local_env env; /* how prepare steps run (sandboxed when the environment is) */
	json_t *meta;	      /* meta.json as written at create */
	char *seen_project;   /* the project as commands see it */
	bool give_away;	      /* the workspace becomes the sandbox uid's */
	char venv[PATH_MAX];  /* the Python virtual environment as commands see it (venv_of) */
};

static struct local_prep *prep_of(cae_prepare *p)
{
	return p->state;
}

static int local_validate(cae_prepare *p, cae_error *err)
{
	struct local_prep *lp = calloc(1, sizeof(*lp));
	if (!lp)
		return cae_error_set(err, -ENOMEM, "out of memory");
	p->state = lp;
	int sandbox = use_sandbox(p->b, err);
	if (sandbox < 0)
		return sandbox;
	lp->env.sandbox = sandbox;
	if (!sandbox)
		cae__prepare_warn(p, NULL,
				  "commands run unconfined on this host "
				  "(command_executor.local.unconfined: true)");
	return 0;
}

/* The environment's limits as ContainerInfo reports them; a cgroup is tried here (and
 * removed: it is made again when a sandbox starts, nothing is kept for an idle environment). */
static json_t *probe_limits(cae_prepare *p, const struct local_env *env)
{
	struct local_impl *li = impl_of(p->b);
	cae_sandbox_limits lim = sandbox_limits(p->b->cfg);
	char name[160];
	cgroup_name(li, p->task->uuid, name, sizeof(name));
	char **procs = NULL;
	size_t n = 0;
	bool cg = cae__sandbox_cgroup_setup(name, &lim, &procs, &n) == 0;
	for (size_t i = 0; i < n; i++)
		free(procs[i]);
	free(procs);
	cae__sandbox_cgroup_remove(name);
	if (!cg)
		cae__prepare_warn(p, NULL,
				  env->uid != 0
				      ? "no cgroup could be made for the sandbox: commands are "
					"bounded by rlimits (per process memory and CPU time, "
					"processes of the sandbox uid), not as a whole"
				      : "no cgroup could be made for the sandbox: commands are "
					"bounded by rlimits per process; the number of processes "
					"is not bounded");
	if (!li->seccomp) {
		char msg[1200];
		snprintf(msg, sizeof(msg),
			 "no seccomp filter in the sandbox (%s): system calls such as keyctl, "
			 "bpf and io_uring are not refused",
			 li->seccomp_error ? li->seccomp_error : "unknown reason");
		cae__prepare_warn(p, "local.seccomp_unavailable", msg);
	}
	return json_pack("{s:s, s:b, s:o?, s:I, s:o?, s:I, s:I, s:o?, s:i}", "mechanism",
			 cg ? "cgroup" : "rlimit", "seccomp", li->seccomp != NULL, "pids",
			 cg || env->uid != 0 ? json_integer(lim.pids) : NULL, "memory_bytes",
			 (json_int_t)lim.memory_bytes, "cpus", cg ? json_real(lim.cpus) : NULL,
			 "cpu_seconds", (json_int_t)lim.cpu_seconds, "tmp_bytes",
			 (json_int_t)lim.tmp_bytes, "file_bytes",
			 lim.file_bytes ? json_integer((json_int_t)lim.file_bytes) : NULL, "uid",
			 CAE_SANDBOX_UID);
}

/* How the workspace's total disk use is bounded (limits.disk): its own file system when this
 * host can make one (diskfs.h), else nothing, which the warnings say. */
static json_t *disk_plan(cae_prepare *p, bool external)
{
	uint64_t bytes = p->b->cfg->command_executor.docker.resources.disk_bytes;
	const char *why = NULL;
	if (!bytes)
		why = "command_executor.docker.resources.disk_limit is 0";
	else if (external)
		why = "a workspace used as is stays on its own file system";
	else
		(void)cae__diskfs_usable(&why);
	if (why) {
		char msg[300];
		snprintf(msg, sizeof(msg), "the workspace's total disk use is not bounded: %s",
			 why);
		cae__prepare_warn(p, NULL, msg);
	}
	return json_pack("{s:s, s:o?}", "mechanism", why ? "none" : "loopfs", "bytes",
			 why ? NULL : json_integer((json_int_t)bytes));
}

/* Makes the workspace's file system on root (an empty directory) and its scratch directory;
 * where that fails, the workspace stays a plain directory and the warnings say so. */
static int disk_make(cae_prepare *p, const char *dir, const char *root, json_t *limits,
		     cae_error *err)
{
	_cleanup_free_ char *img = cae__path_join(dir, CAE_DISKFS_IMAGE);
	_cleanup_free_ char *tmp = cae__path_join(root, "tmp");
	if (!img || !tmp)
		return cae_error_set(err, -ENOMEM, "out of memory");
	cae_error derr;
	cae_error_clear(&derr);
	uint64_t bytes = p->b->cfg->command_executor.docker.resources.disk_bytes;
	int r = cae__diskfs_create(img, root, bytes, p->cancel_fd, &derr);
	if (r == -ECANCELED)
		return cae_error_set(err, r, "cancelled");
	if (r < 0) {
		char msg[sizeof(derr.message) + 64];
		snprintf(msg, sizeof(msg), "the workspace's total disk use is not bounded: %s",
			 derr.message);
		cae__prepare_warn(p, NULL, msg);
		(void)cae__diskfs_release(img, root);
		json_object_set_new(limits, "disk", json_pack("{s:s}", "mechanism", "none"));
	}
	if (mkdir(tmp, 0700) < 0 && errno != EEXIST)
		return cae_error_set(err, -errno, "cannot create the environment's directory: %s",
				     strerror(errno));
	return 0;
}

/* Whether a workspace used as is (real, owned by st's uid:gid) can be bound idmapped so that
 * its owner's files are the sandbox uid's (base/idmap.h): env says so when it can; the
 * warnings say what happens instead when it cannot. */
static bool workspace_idmap(cae_prepare *p, struct local_env *env, const char *real,
			    const struct stat *st)
{
	int r = cae__idmap_probe(real, st->st_uid, st->st_gid, env->uid, env->gid);
	if (r < 0) {
		char msg[400];
		snprintf(msg, sizeof(msg),
			 "the workspace cannot be mapped for the sandbox's user (idmapped mount: "
			 "%s): %s",
			 strerror(-r),
			 st->st_uid == 0 ? "it is given to the sandbox's user instead"
					 : "commands run as its owner instead");
		cae__prepare_warn(p, NULL, msg);
		return false;
	}
	env->idmap = true;
	env->owner_uid = st->st_uid;
	env->owner_gid = st->st_gid;
	return true;
}

/* The environment's directory with, from its first moment, a record of who makes it: it is
 * made under a temporary name (CREATING_PREFIX, naming this process) with that record in it
 * and then renamed into place, so that a prepare killed at any moment leaves an environment
 * listed as failed and collected, or a temporary directory the stale cleanup removes once
 * its process is gone: never a directory nobody lists. */
static int make_task_dir(struct local_impl *li, cae_prepare *p, const char *dir,
			 const char *workspace, const char *cid, const char *preparer,
			 cae_error *err)
{
	int r = cae__mkdir_p(li->root, 0700);
	if (r < 0)
		return cae_error_set(err, r, "cannot create the environment's directory: %s",
				     strerror(-r));
	char tag[64];
	cae__preparer_tag(tag, sizeof(tag));
	_cleanup_free_ char *tmp = NULL;
	if (asprintf(&tmp, "%s/" CREATING_PREFIX "%s.%s", li->root, tag, p->task->uuid) < 0)
		return cae_error_set(err, -ENOMEM, "out of memory");
	(void)cae__rm_rf(tmp);
	if (mkdir(tmp, 0700) < 0)
		return cae_error_set(err, -errno, "cannot create the environment's directory: %s",
				     strerror(errno));
	json_t *stub =
	    json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:s}", "container_id", cid,
		      "task_uuid", p->task->uuid, "environment_name", p->environment,
		      "workspace_path", workspace ? workspace : CAE_SANDBOX_ROOT "/project",
		      "created_at", p->created_at, "status", "creating", "backend", "local",
		      "preparer", preparer, "instance", p->b->instance);
	_cleanup_free_ char *text = stub ? json_dumps(stub, JSON_INDENT(2) | JSON_SORT_KEYS) : NULL;
	json_decref(stub);
	_cleanup_free_ char *meta = cae__path_join(tmp, "meta.json");
	r = text && meta ? cae__write_file_atomic(AT_FDCWD, meta, text, strlen(text), 0600, false)
			 : -ENOMEM;
	if (r == 0 && rename(tmp, dir) < 0) {
		r = -errno;
		/* what an older cae left (a directory without a record): the record goes in */
		_cleanup_free_ char *in_place = cae__path_join(dir, "meta.json");
		if ((r == -EEXIST || r == -ENOTEMPTY) && cae__is_dir(dir))
			r = in_place ? cae__write_file_atomic(AT_FDCWD, in_place, text,
							      strlen(text), 0600, false)
				     : -ENOMEM;
	}
	if (r < 0) {
		(void)cae__rm_rf(tmp);
		return cae_error_set(err, r, "cannot create the environment's directory: %s",
				     strerror(-r));
	}
	(void)cae__rm_rf(tmp);
	return 0;
}

static int local_create(cae_prepare *p, cae_error *err)
{
	struct local_impl *li = impl_of(p->b);
	struct local_prep *lp = prep_of(p);
	struct local_env *env = &lp->env;
	const cae_config *cfg = p->b->cfg;
	const char *workspace = p->opts->workspace;
	_cleanup_free_ char *dir = task_dir(li, p->task->uuid);
	_cleanup_free_ char *wsroot = dir ? cae__path_join(dir, "workspace") : NULL;
	_cleanup_free_ char *tmp = wsroot ? cae__path_join(wsroot, "tmp") : NULL;
	if (!tmp)
		return cae_error_set(err, -ENOMEM, "out of memory");
	char preparer[CAE_PREPARER_MAX];
	cae__preparer_label(preparer, sizeof(preparer));
	char cid[128];
	snprintf(cid, sizeof(cid), "local-%s", p->task->uuid);
	int r = make_task_dir(li, p, dir, workspace, cid, preparer, err);
	if (r < 0)
		return r;
	json_t *disk = disk_plan(p, workspace != NULL);
	bool loopfs =
	    disk && strcmp(json_string_value(json_object_get(disk, "mechanism")), "loopfs") == 0;
	r = workspace ? 0 : cae__mkdir_p(loopfs ? wsroot : tmp, 0700);
	if (r < 0) {
		json_decref(disk);
		return cae_error_set(err, r, "cannot create the environment's directory: %s",
				     strerror(-r));
	}
	env->impl = li;
	env->cfg = cfg;
	env->task = p->task->uuid;
	env->network = true;
	env->external = workspace != NULL;
	env->cancel_fd = p->cancel_fd;
	sandbox_ids(cfg, &env->uid, &env->gid);
	lp->give_away = env->uid != 0 && env->sandbox;
	char real[PATH_MAX];
	if (workspace) {
		struct stat st;
		if (!realpath(workspace, real) || stat(real, &st) < 0 || !S_ISDIR(st.st_mode))
			return cae_error_set(err, -ENOTDIR, "workspace is not a directory: %s",
					     workspace);
		if (env->uid != 0 && env->sandbox && workspace_idmap(p, env, real, &st)) {
			/* bound idmapped for the sandbox's uid: nothing changes on disk */
			lp->give_away = false;
		} else if (env->uid != 0 && st.st_uid != 0) {
			/* A directory of another user's: commands run as that user. */
			env->uid = st.st_uid;
			env->gid = st.st_gid;
			lp->give_away = false;
		} else if (lp->give_away) {
			cae__prepare_warn(p, NULL,
					  "the workspace belonged to root: it now belongs to the "
					  "sandbox's user (command_executor.local.sandbox_uid)");
		}
		env->root = strdup(real);
		env->project = strdup(real);
		p->given_as_is = true;
	} else {
		if (!realpath(wsroot, real))
			return cae_error_set(err, -errno, "the workspace: %s", strerror(errno));
		env->root = strdup(real);
		env->project = cae__path_join(real, "project");
	}
	if (!env->root || !env->project)
		return cae_error_set(err, -ENOMEM, "out of memory");
	if (!env->sandbox)
		env->uid = env->gid = 0;
	json_t *limits = env->sandbox ? probe_limits(p, env) : json_object();
	json_object_set_new(limits, "disk", disk);
	lp->seen_project = inside_project(env);
	if (!lp->seen_project)
		return cae_error_set(err, -ENOMEM, "out of memory");
	lp->meta = json_pack(
	    "{s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:b, s:i, s:i, s:s, s:o?}",
	    "container_id", cid, "task_uuid", p->task->uuid, "environment_name", p->environment,
	    "workspace_path", lp->seen_project, "host_path", env->project, "workspace_root",
	    env->root, "created_at", p->created_at, "status", "creating", "backend", "local",
	    "sandbox", env->sandbox ? "bubblewrap" : "none", "external", workspace != NULL,
	    "sandbox_uid", (int)env->uid, "sandbox_gid", (int)env->gid, "preparer", preparer,
	    "limits", limits);
	if (lp->meta)
		json_object_set_new(lp->meta, "instance", json_string(p->b->instance));
	if (!lp->meta)
		return cae_error_set(err, -ENOMEM, "out of memory");
	if (env->idmap)
		json_object_set_new(lp->meta, "idmap_owner",
				    json_pack("[i, i]", (int)env->owner_uid, (int)env->owner_gid));
	if (!workspace && env->sandbox) {
		/* where a push from the sandbox may authenticate (the token is asked for then) */
		char *host = NULL;
		const char *user = NULL, *token = NULL;
		if (cae__git_credential_target(cfg, p->task, &host, &user, &token, NULL) == 0 &&
		    host) {
			const char *forge = token == cfg->github.token ? "github" : "gitlab";
			char *v = NULL;
			if (asprintf(&v, "%s %s %s", host, user, forge) >= 0)
				json_object_set_new(lp->meta, "git_credential", json_string(v));
			free(v);
		}
		free(host);
		/* the forge a push goes to, reached through the proxy under network none */
		_cleanup_free_ char *forge = cae__net_forge(cfg, p->task);
		if (forge)
			json_object_set_new(lp->meta, "forge", json_string(forge));
	}
	/* the user's own .git/config, which commands may not add to (gitconfig-guard.c) */
	if (workspace && (r = cae__gitguard_record(env->project, dir, err)) < 0)
		return r;
	r = write_meta(li, p->task->uuid, lp->meta, err);
	if (r < 0)
		return r;
	/* after the metadata: a prepare killed from here on is collected with its mount */
	if (loopfs && (r = disk_make(p, dir, env->root, limits, err)) < 0)
		return r;
	p->exec = env_exec_cb;
	p->exec_ctx = env;
	p->project = lp->seen_project;
	if (venv_of(env, lp->venv, sizeof(lp->venv)))
		p->deps_opts.python_venv = lp->venv;
	char cache[PATH_MAX];
	cae_error cerr;
	cae_error_clear(&cerr);
	int cr = npm_cache_of(env, true, cache, sizeof(cache), &cerr);
	p->deps_opts.npm_cache_shared = cr == 1;
	if (cr == 1) {
		p->deps_opts.npm_installed = npm_tree_keep;
		p->deps_opts.npm_installed_ctx = env;
	}
	/* cae's fill of the shared Maven repository after the prepare's Maven install, for an
	 * environment that has the network itself (the fill fetches the paths it names) */
	if (env->sandbox && !env->external && cae__net_full(p->b->cfg, "local")) {
		p->deps_opts.maven_installed = cae__pkgcache_maven_installed;
		p->deps_opts.maven_installed_ctx = p;
	}
	if (cr < 0) {
		char w[1200];
		snprintf(w, sizeof(w), "the shared package cache is not used: %.1100s",
			 cerr.message);
		cae__prepare_warn(p, "package_cache.unavailable", w);
	}
	p->create_fields = json_pack("{s:s}", "sandbox", env->sandbox ? "bubblewrap" : "none");
	return 0;
}

static int local_populate(cae_prepare *p, cae_error *err)
{
	struct local_prep *lp = prep_of(p);
	struct local_env *env = &lp->env;
	if (!p->given_as_is) {
		/* git runs on the host, unconfined (the source may be a local path the sandbox
		 * hides), in an environment of its own (hostgit.c); nothing of the repository
		 * runs during a clone. */
		cae_host_exec_ctx hc = {.cfg = p->b->cfg, .cancel_fd = env->cancel_fd};
		int r = cae__git_clone_cached(cae__host_exec, &hc, p->b->cfg, p->b->log, p->task,
					      env->project, NULL, NULL, env->cancel_fd, err);
		if (r < 0)
			return r;
	}
	if (lp->give_away) {
		int r = cae__sandbox_chown_tree(env->root, env->uid, env->gid);
		if (r < 0)
			return cae_error_set(err, r,
					     "cannot give the workspace to the sandbox's user: %s",
					     strerror(-r));
	}
	cae_error gerr;
	cae_error_clear(&gerr);
	if (go_cache_of(env, true, &gerr) < 0) {
		char w[1200];
		snprintf(w, sizeof(w), "the shared Go build cache is not used: %.1100s",
			 gerr.message);
		cae__prepare_warn(p, "package_cache.unavailable", w);
	}
	/* cae's fills of the shared Go modules and pip wheels, from the clone's go.mod, go.sum
	 * and requirements.txt before anything of the environment ran; only for an environment
	 * that has the network itself (the host's, no allow-list): a fill acts for the task,
	 * and a Go proxy fetches the module paths a go.mod names from their own hosts */
	if (env->sandbox && !env->external && cae__net_full(p->b->cfg, "local")) {
		char w[1200];
		if (cae__pkgcache_gomod_fill_project(p->b->cfg, env->project, &gerr) < 0) {
			snprintf(w, sizeof(w), "the shared Go module cache is not filled: %.1100s",
				 gerr.message);
			cae__prepare_warn(p, "package_cache.unavailable", w);
		}
		if (cae__pkgcache_pip_fill_project(p->b->cfg, env->project, &gerr) < 0) {
			snprintf(w, sizeof(w), "the shared pip wheels are not filled: %.1100s",
				 gerr.message);
			cae__prepare_warn(p, "package_cache.unavailable", w);
		}
	}
	npm_tree_put(p, env);
	/* the host's tools are the environment's: say which of its name's are missing */
	cae__env_tools_check(p);
	return 0;
}

/* The text editor is native and in-process for this backend: step 6 has nothing to start. */

static int local_ready(cae_prepare *p, cae_env_info *info, cae_error *err)
{
	struct local_prep *lp = prep_of(p);
	json_object_set_new(lp->meta, "status", json_string("ready"));
	json_object_set(lp->meta, "warnings", p->warnings);
	json_object_set(lp->meta, "deps", p->deps);
	int r = write_meta(impl_of(p->b), p->task->uuid, lp->meta, err);
	return r < 0 ? r : cae_env_info_from_json(lp->meta, info, err);
}

static void local_release(cae_prepare *p)
{
	struct local_prep *lp = prep_of(p);
	if (!lp)
		return;
	local_env_clear(&lp->env);
	json_decref(lp->meta);
	free(lp->seen_project);
	free(lp);
	p->state = NULL;
}

static int local_info(cae_backend *b, const char *uuid, cae_env_info *info, cae_error *err)
{
	json_t *meta = NULL;
	int r = read_meta(impl_of(b), uuid, &meta, err);
	if (r < 0)
		return r;
	r = cae_env_info_from_json(meta, info, err);
	json_decref(meta);
	return r;
}

static int local_holders(cae_backend *b, const char *uuid, char *text, size_t size)
{
	json_t *meta = NULL;
	text[0] = '\0';
	if (read_meta(impl_of(b), uuid, &meta, NULL) < 0)
		return 0;
	int n = cae__sandbox_holders(json_string_value(json_object_get(meta, "workspace_root")),
				     text, size);
	json_decref(meta);
	return n;
}

/* The patch worker's file service: the files are on this host, so the requests are answered
 * here, by the code a container's helper runs there. A request names the workspace as
 * commands see it; what is opened is the environment's project directory on this host, with
 * command_executor.protected_paths refused (the sandbox's read-only binds do not reach this
 * process), and a handle serves only the environment that opened it. */
static int local_fs(cae_backend *b, const char *uuid, const cae_fs_request *q, cae_fs_reply *rep,
		    cae_error *err)
{
	struct local_impl *li = impl_of(b);
	if (q->op != CAE_FS_OPEN)
		return cae__wk_fs_serve(&li->files, uuid, NULL, q, rep, err);
	cae_env_info info;
	int r = local_info(b, uuid, &info, err);
	if (r < 0)
		return r;
	bool own = cae__backend_own(b, info.instance);
	if (own && info.host_path && !cae__is_dir(info.host_path))
		(void)disk_remount(li, uuid, NULL); /* after a reboot */
	if (!own)				    /* another instance's: not ours to open */
		r = cae_error_set(err, -ENOENT, "no environment for task %s", uuid);
	else if (!info.host_path || !info.workspace_path || !q->root ||
		 strcmp(q->root, info.workspace_path) != 0)
		r = cae_error_set(err, -EINVAL, "%s is not the workspace of environment %s",
				  q->root ? q->root : "(none)", uuid);
	else
		r = cae__wk_fs_serve(
		    &li->files, uuid,
		    &(cae_wk_fs_open){
			.root = info.host_path,
			.protected_paths =
			    (const char *const *)b->cfg->command_executor.protected_paths.items,
			.n_protected = b->cfg->command_executor.protected_paths.n},
		    q, rep, err);
	cae_env_info_clear(&info);
	return r;
}

typedef int (*each_fn)(cae_backend *b, const char *uuid, json_t *meta, void *ud);

static int for_each_env(cae_backend *b, each_fn fn, void *ud)
{
	struct local_impl *li = impl_of(b);
	DIR *d = opendir(li->root);
	if (!d)
		return errno == ENOENT ? 0 : -errno;
	struct dirent *de;
	int r = 0;
	while ((de = readdir(d))) {
		if (!cae_task_uuid_valid(de->d_name))
			continue;
		json_t *meta = NULL;
		if (read_meta(li, de->d_name, &meta, NULL) < 0)
			continue;
		r = fn(b, de->d_name, meta, ud);
		json_decref(meta);
		if (r < 0)
			break;
	}
	closedir(d);
	return r;
}

/* ---- resource view ----
 * What an environment's processes use, from /proc, so that any process (not only the one
 * whose sandbox runs them) sees it: a sandboxed process is one whose root has the
 * environment's workspace directory mounted where the sandbox binds it (the same device and
 * inode through /proc/<pid>/root); an unconfined one runs with its working directory in the
 * workspace. One scan of /proc serves every environment of a list. */

struct proc_use {
	dev_t dev, dev_project; /* /proc/<pid>/root/workspace and .../workspace/project */
	ino_t ino, ino_project;
	char cwd[PATH_MAX];
	uint64_t ticks; /* utime + stime */
	uint64_t rss_pages;
};

struct proc_scan {
	struct proc_use *p;
	size_t n;
};

static void proc_scan(struct proc_scan *sc)
{
	memset(sc, 0, sizeof(*sc));
	DIR *d = opendir("/proc");
	if (!d)
		return;
	size_t cap = 0;
	pid_t self = getpid();
	struct dirent *de;
	while ((de = readdir(d))) {
		char *end;
		long pid = strtol(de->d_name, &end, 10);
		if (*end || pid <= 0 || pid == self)
			continue;
		struct proc_use u = {0};
		char path[96];
		struct stat st;
		snprintf(path, sizeof(path), "/proc/%ld/root" CAE_SANDBOX_ROOT, pid);
		if (stat(path, &st) == 0) {
			u.dev = st.st_dev;
			u.ino = st.st_ino;
		}
		snprintf(path, sizeof(path), "/proc/%ld/root" CAE_SANDBOX_PROJECT, pid);
		if (stat(path, &st) == 0) {
			u.dev_project = st.st_dev;
			u.ino_project = st.st_ino;
		}
		snprintf(path, sizeof(path), "/proc/%ld/cwd", pid);
		ssize_t k = readlink(path, u.cwd, sizeof(u.cwd) - 1);
		u.cwd[k > 0 ? k : 0] = '\0';
		if (!u.ino && !u.ino_project && !u.cwd[0])
			continue;
		_cleanup_free_ char *text = NULL;
		size_t len;
		snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
		if (cae__read_file(AT_FDCWD, path, 4096, &text, &len) < 0)
			continue;
		/* after the command name (which may hold spaces and parentheses): fields 3.. */
		const char *rp = strrchr(text, ')');
		unsigned long long ut = 0, stt = 0;
		long long rss = 0;
		if (!rp ||
		    sscanf(rp + 2,
			   "%*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %llu %llu %*s %*s %*s "
			   "%*s %*s %*s %*s %*s %lld",
			   &ut, &stt, &rss) != 3)
			continue;
		u.ticks = ut + stt;
		u.rss_pages = rss > 0 ? (uint64_t)rss : 0;
		if (sc->n == cap) {
			size_t nc = cap ? cap * 2 : 64;
			struct proc_use *np = realloc(sc->p, nc * sizeof(*np));
			if (!np)
				break;
			sc->p = np;
			cap = nc;
		}
		sc->p[sc->n++] = u;
	}
	closedir(d);
}

static bool under(const char *path, const char *dir)
{
	size_t l = strlen(dir);
	return l && strncmp(path, dir, l) == 0 && (path[l] == '/' || path[l] == '\0');
}

/* {cpu_seconds, memory_bytes, pids} of meta's environment, with its limits
 * (memory_limit_bytes, cpus_limit, pids_limit, mechanism) as its sandbox applies them. */
static json_t *resources_of(const struct proc_scan *sc, json_t *meta)
{
	const char *root = json_string_value(json_object_get(meta, "workspace_root"));
	const char *sandbox = json_string_value(json_object_get(meta, "sandbox"));
	bool external = json_is_true(json_object_get(meta, "external"));
	struct stat st;
	if (!root || stat(root, &st) < 0)
		return NULL;
	bool confined = sandbox && strcmp(sandbox, "bubblewrap") == 0;
	uint64_t ticks = 0, pages = 0;
	int n = 0;
	for (size_t i = 0; i < sc->n; i++) {
		const struct proc_use *u = &sc->p[i];
		bool in;
		if (confined && external)
			in = u->ino_project == st.st_ino && u->dev_project == st.st_dev;
		else if (confined)
			in = u->ino == st.st_ino && u->dev == st.st_dev;
		else
			in = under(u->cwd, root);
		if (in) {
			ticks += u->ticks;
			pages += u->rss_pages;
			n++;
		}
	}
	long hz = sysconf(_SC_CLK_TCK), page = sysconf(_SC_PAGESIZE);
	json_t *out = json_pack(
	    "{s:f, s:I, s:i}", "cpu_seconds", (double)ticks / (double)(hz > 0 ? hz : 100),
	    "memory_bytes", (json_int_t)(pages * (uint64_t)(page > 0 ? page : 4096)), "pids", n);
	json_t *lim = json_object_get(meta, "limits");
	if (out && lim) {
		json_t *v;
		if ((v = json_object_get(lim, "memory_bytes")))
			json_object_set(out, "memory_limit_bytes", v);
		if ((v = json_object_get(lim, "cpus")))
			json_object_set(out, "cpus_limit", v);
		if ((v = json_object_get(lim, "pids")))
			json_object_set(out, "pids_limit", v);
		if ((v = json_object_get(lim, "mechanism")))
			json_object_set(out, "mechanism", v);
		/* the workspace's own file system: what it holds, of what it may */
		json_t *disk = json_object_get(lim, "disk");
		struct statvfs vfs;
		if (json_is_integer(json_object_get(disk, "bytes")) && cae__diskfs_mounted(root) &&
		    statvfs(root, &vfs) == 0) {
			json_object_set_new(out, "disk_bytes",
					    json_integer((json_int_t)((vfs.f_blocks - vfs.f_bfree) *
								      vfs.f_frsize)));
			json_object_set(out, "disk_limit_bytes", json_object_get(disk, "bytes"));
		}
	}
	return out;
}

struct list_ctx {
	json_t *out;
	struct proc_scan scan;
};

static int list_one(cae_backend *b, const char *uuid, json_t *meta, void *ud)
{
	struct list_ctx *lc = ud;
	cae_env_info info;
	if (cae_env_info_from_json(meta, &info, NULL) == 0) {
		json_t *j = cae_env_info_to_json(&info);
		const char *status = json_string_value(json_object_get(meta, "status"));
		json_t *res = j && status && strcmp(status, "ready") == 0
				  ? resources_of(&lc->scan, meta)
				  : NULL;
		if (res)
			json_object_set_new(j, "resources", res);
		json_array_append_new(lc->out, j);
		cae_env_info_clear(&info);
	}
	return 0;
}

static int local_list(cae_backend *b, json_t **out, cae_error *err)
{
	*out = json_array();
	struct list_ctx lc = {.out = *out};
	proc_scan(&lc.scan);
	int r = for_each_env(b, list_one, &lc);
	free(lc.scan.p);
	if (r < 0) {
		json_decref(*out);
		*out = NULL;
		return cae_error_set(err, r, "cannot list environments: %s", strerror(-r));
	}
	return 0;
}

struct stale_ctx {
	cae_env_filter_fn filter;
	void *filter_ud;
	int64_t cutoff;
	int removed;
	int failed;
};

static int stale_one(cae_backend *b, const char *uuid, json_t *meta, void *ud)
{
	struct stale_ctx *s = ud;
	if (!cae__backend_sees(b, json_string_value(json_object_get(meta, "instance"))) ||
	    (s->filter && !s->filter(uuid, s->filter_ud)))
		return 0;
	int64_t t = cae__parse_iso8601(json_string_value(json_object_get(meta, "created_at")));
	/* a preparation that died is collected whatever its age, and so is a ready environment
	 * whose workspace root is gone (a workspace used as is, deleted since) */
	const char *status = json_string_value(json_object_get(meta, "status"));
	bool failed = !status || strcmp(status, "failed") == 0;
	const char *hp = json_string_value(json_object_get(meta, "workspace_root"));
	bool gone = status && strcmp(status, "ready") == 0 && hp && !cae__is_dir(hp);
	if (!failed && !gone && t >= 0 && t > s->cutoff)
		return 0;
	if (remove_task_dir(b, uuid, NULL) == 0)
		s->removed++;
	else
		s->failed++;
	return 0;
}

/* Whether cgroup <name> (as cgroup_name() makes them) may belong to a live environment:
 * another state directory's, or one of ours whose directory exists. */
static bool cgroup_in_use(const char *name, void *ud)
{
	struct local_impl *li = ud;
	const char *dash = strrchr(name, '-');
	char ours[160];
	cgroup_name(li, "", ours, sizeof(ours)); /* "-<hash>" */
	if (!dash || strcmp(dash, ours) != 0)
		return true;
	char uuid[128];
	snprintf(uuid, sizeof(uuid), "%.*s", (int)(dash - name), name);
	_cleanup_free_ char *dir = task_dir(li, uuid);
	return !dir || access(dir, F_OK) == 0;
}

/* The temporary directories of prepares killed before their environment's directory was in
 * place (make_task_dir): removed once the process their name tags is gone. */
static void sweep_creating(cae_backend *b, struct stale_ctx *s)
{
	struct local_impl *li = impl_of(b);
	DIR *d = opendir(li->root);
	if (!d)
		return;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (strncmp(de->d_name, CREATING_PREFIX, strlen(CREATING_PREFIX)) != 0 ||
		    cae__preparer_tag_alive(de->d_name + strlen(CREATING_PREFIX)))
			continue;
		_cleanup_free_ char *dir = cae__path_join(li->root, de->d_name);
		_cleanup_free_ char *meta = dir ? cae__path_join(dir, "meta.json") : NULL;
		_cleanup_free_ char *text = NULL;
		size_t len;
		json_t *j = meta && cae__read_file(AT_FDCWD, meta, META_MAX, &text, &len) == 0
				? json_loadb(text, len, 0, NULL)
				: NULL;
		/* another instance's, recorded as such, is left to it */
		bool theirs =
		    j && !cae__backend_sees(b, json_string_value(json_object_get(j, "instance")));
		json_decref(j);
		if (!dir || theirs)
			continue;
		if (cae__rm_rf(dir) == 0)
			s->removed++;
		else
			s->failed++;
	}
	closedir(d);
}

/* Directories named as environments that have no record: a live prepare's directory has
 * its record from the moment it is in place (make_task_dir renames both at once), so one
 * without is what a killed prepare's children (a git clone that ran on after cae was killed
 * recreates the leading directories of what it writes) or an older cae left. The filter
 * cannot know whose it is: only a run that sees every environment removes them. */
static void sweep_unrecorded(cae_backend *b, struct stale_ctx *s)
{
	struct local_impl *li = impl_of(b);
	if (s->filter)
		return;
	DIR *d = opendir(li->root);
	if (!d)
		return;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (!cae_task_uuid_valid(de->d_name))
			continue;
		_cleanup_free_ char *dir = task_dir(li, de->d_name);
		_cleanup_free_ char *meta = dir ? cae__path_join(dir, "meta.json") : NULL;
		struct stat st;
		if (!meta || !cae__is_dir(dir) || lstat(meta, &st) == 0 || errno != ENOENT)
			continue;
		if (remove_task_dir(b, de->d_name, NULL) == 0)
			s->removed++;
		else
			s->failed++;
	}
	closedir(d);
}

static int local_cleanup_stale(cae_backend *b, int64_t threshold_s, cae_env_filter_fn filter,
			       void *filter_ud, int *removed, cae_error *err)
{
	struct stale_ctx s = {
	    .filter = filter, .filter_ud = filter_ud, .cutoff = (int64_t)time(NULL) - threshold_s};
	int r = for_each_env(b, stale_one, &s);
	sweep_creating(b, &s);
	sweep_unrecorded(b, &s);
	s.removed += cae__snapshot_sweep(b, impl_of(b)->root); /* killed snapshots' leftovers */
	/* cgroups of sandboxes whose manager died before it could remove them */
	(void)cae__sandbox_cgroup_sweep(cgroup_in_use, impl_of(b));
	*removed = s.removed;
	cae_log_fields(b->log, CAE_LOG_INFO, "environment.cleanup_stale",
		       json_pack("{s:i, s:i, s:I}", "removed", s.removed, "failed", s.failed,
				 "threshold_s", (json_int_t)threshold_s),
		       NULL);
	if (r < 0)
		return cae_error_set(err, r, "cannot list environments: %s", strerror(-r));
	if (s.failed)
		return cae_error_set(err, -EBUSY, "%d stale environment(s) could not be removed",
				     s.failed);
	return 0;
}

static void local_free(cae_backend *b)
{
	struct local_impl *li = impl_of(b);
	cae__diskfs_settle(); /* what its restores let go of */
	if (li) {
		while (li->helpers) {
			struct local_helper *lh = li->helpers;
			li->helpers = lh->next;
			helper_free(lh);
		}
		while (li->creds) {
			struct local_cred *c = li->creds;
			li->creds = c->next;
			cred_free(c);
		}
		free(li->helper_path);
		cae__wk_fs_table_clear(&li->files);
		pthread_mutex_destroy(&li->files.lock);
		for (size_t i = 0; i < META_CACHE; i++)
			meta_entry_clear(&li->meta[i]);
		pthread_mutex_destroy(&li->meta_lock);
		free(li->root);
		free(li->disk_root);
		free(li->bwrap);
		free(li->probe_error);
		free(li->etc_dir);
		free(li->seccomp);
		free(li->seccomp_error);
		pthread_mutex_destroy(&li->probe_lock);
		pthread_mutex_destroy(&li->helper_lock);
		free(li);
	}
	free(b);
}

static const cae_backend_ops local_ops = {
    .name = "local",
    .validate = local_validate,
    .remove = local_remove,
    .create = local_create,
    .populate = local_populate,
    .ready = local_ready,
    .release = local_release,
    .exec = local_exec,
    .cleanup_stale = local_cleanup_stale,
    .list = local_list,
    .info = local_info,
    .network_denied = local_network_denied,
    .port_forward = local_port_forward,
    .holders = local_holders,
    .fs = local_fs,
    .guard = local_guard,
    .free = local_free,
};

int cae__local_backend_new(const cae_config *cfg, cae_log *log, cae_backend **out, cae_error *err)
{
	const char *state = cfg->command_executor.state_dir;
	if (!state || state[0] != '/')
		return cae_error_set(err, -EINVAL,
				     "command_executor.state_dir must be an absolute path");
	cae_backend *b = calloc(1, sizeof(*b));
	struct local_impl *li = calloc(1, sizeof(*li));
	if (!b || !li) {
		free(b);
		free(li);
		return -ENOMEM;
	}
	pthread_mutex_init(&li->probe_lock, NULL);
	pthread_mutex_init(&li->helper_lock, NULL);
	pthread_mutex_init(&li->meta_lock, NULL);
	cae__wk_fs_table_init(&li->files);
	li->root = cae__path_join(state, "local");
	li->disk_root = cae__path_join(state, CAE_DISKFS_CONTAINER_DIR);
	li->etc_dir = li->root ? cae__path_join(li->root, ".sandbox-etc") : NULL;
	li->clone_timeout_s = cfg->command_executor.clone.timeout_seconds;
	b->ops = &local_ops;
	b->cfg = cfg;
	b->log = log;
	b->impl = li;
	if (!li->root || !li->disk_root || !li->etc_dir) {
		local_free(b);
		return -ENOMEM;
	}
	int r = cae__mkdir_p(li->root, 0700);
	if (r < 0) {
		cae_error_set(err, r, "cannot create state directory %s: %s", li->root,
			      strerror(-r));
		local_free(b);
		return r;
	}
	*out = b;
	return 0;
}
