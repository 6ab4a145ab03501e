/* Internal to src/backend: the local backend's sandbox (bubblewrap behind
 * `cae-helper --enter`), its command line, its environment and its bounds.
 *
 * Inside, a command sees only the system trees read-only (/usr and the /bin, /lib... links),
 * a minimal /etc, its workspace read-write at /workspace (the project at
 * /workspace/project, as in containers), a private sized /tmp, /proc of its own PID
 * namespace and a minimal /dev; the protected paths of its project read-only (see
 * cae_sandbox_spec). It runs as uid 1000 ("agent") in a user namespace of its
 * own with no capabilities and no way to make another user namespace; on the host that uid
 * is an unprivileged one (command_executor.local.sandbox_uid when cae runs as root, else
 * cae's own uid), never root. */
#ifndef CAE_BACKEND_SANDBOX_H
#define CAE_BACKEND_SANDBOX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Paths inside the sandbox. */
#define CAE_SANDBOX_ROOT "/workspace"
#define CAE_SANDBOX_PROJECT "/workspace/project"
#define CAE_SANDBOX_HELPER "/.cae/cae-helper"
#define CAE_SANDBOX_UID 1000
#define CAE_SANDBOX_HOME "/home/agent"
/* how many read-only caches a sandbox may bind (cae_sandbox_spec.ro_cache) */
#define CAE_SANDBOX_RO_CACHES 4
/* Commands' PATH (cae__sandbox_env) */
#define CAE_SANDBOX_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

typedef struct cae_sandbox_limits {
	int pids;	       /* processes (cgroup) or the sandbox uid's processes (rlimit) */
	uint64_t memory_bytes; /* cgroup memory, or RLIMIT_DATA per process */
	double cpus;	       /* cgroup CPU quota; no rlimit equivalent */
	int64_t cpu_seconds;   /* RLIMIT_CPU per process */
	uint64_t tmp_bytes;    /* size of the /tmp tmpfs */
	uint64_t file_bytes;   /* RLIMIT_FSIZE: the largest file a command may write */
} cae_sandbox_limits;

typedef struct cae_sandbox_spec {
	const char *helper;	 /* cae-helper on the host: the enter step (and served inside) */
	const char *bwrap;	 /* bwrap on the host */
	const char *ws_host;	 /* host directory bound read-write ... */
	const char *ws_inside;	 /* ... here: CAE_SANDBOX_ROOT, or CAE_SANDBOX_PROJECT for a
				  * workspace used as is (then /workspace/tmp is /tmp) */
	const char *etc_dir;	 /* host directory with the sandbox's passwd and group */
	const char *chdir;	 /* inside path */
	bool network;		 /* share the host's network namespace */
	bool serve;		 /* bind cae-helper in and run it (else argv below) */
	const char *const *argv; /* the command, when !serve */
	uid_t uid;		 /* host uid to switch to (0: stay, cae is not root) */
	gid_t gid;
	/* ws_host bound idmapped (uid != 0 only): its files of owner_uid:owner_gid on disk
	 * are uid:gid's in the sandbox, and what uid makes there is the owner's on disk */
	bool idmap;
	uid_t owner_uid;
	gid_t owner_gid;
	char **cgroup_procs; /* cgroup.procs files to join (borrowed) */
	size_t n_cgroup;
	const cae_sandbox_limits *limits;
	bool rlimit_nproc;    /* bound processes with RLIMIT_NPROC (no cgroup, own uid) */
	bool die_with_parent; /* bwrap ends with the thread that started it */
	const char *seccomp;  /* the seccomp filter's BPF file on the host (seccomp.h), loaded
			       * by bwrap for the sandbox's first program; NULL: none */
	/* Paths relative to the project (command_executor.protected_paths, borrowed): each one
	 * that exists as a file or directory (not a symbolic link) is bound read-only onto
	 * itself, and the project and every directory on the way to it are bound onto
	 * themselves, so that no command can rename or remove them (a mount point is EBUSY)
	 * to put a writable one in its place. */
	const char *const *protected_paths;
	size_t n_protected;
	/* A host directory bound read-write at npm_cache_inside (the shared package cache,
	 * pkgcache.h); NULL: none */
	const char *npm_cache;
	const char *npm_cache_inside;
	/* Host directories where environments' workspaces are mounted (the state directory's
	 * local/ and docker-disk/; NULL: none): their mounts are detached from the sandbox's
	 * mount namespaces once its sources are staged (uid != 0 only; enter.c) */
	const char *hide[2];
	/* Host directories (or files) bound read-only at ro_cache_inside (the shared Go module
	 * proxy, pip's wheels, Maven's repository and cae's settings.xml for it, pkgcache.h);
	 * NULL: none */
	const char *ro_cache[CAE_SANDBOX_RO_CACHES];
	const char *ro_cache_inside[CAE_SANDBOX_RO_CACHES];
} cae_sandbox_spec;

/* The full command line (enter step + bwrap + program), a NULL-terminated array of new
 * strings; free with cae__sandbox_argv_free(). NULL on ENOMEM. */
char **cae__sandbox_argv(const cae_sandbox_spec *s);
void cae__sandbox_argv_free(char **argv);
static inline void cae__sandbox_argv_free_p(char ***p)
{
	cae__sandbox_argv_free(*p);
}

/* Makes each missing protected path under .git (the default .git/hooks, say) an empty
 * directory when its parent directory exists, below the project directory project_host on
 * this host, so that the sandbox can bind it read-only: a command could otherwise make it
 * with content. Paths outside .git are protected when they exist. Returns 0 or -errno. */
int cae__sandbox_protect_prepare(const char *project_host, const char *const *paths, size_t n);

/* The environment of a sandboxed command: a fixed minimal set (PATH, HOME, USER, LOGNAME,
 * SHELL, TMPDIR, LANG, TERM) plus extra "K=V" entries; none of cae's own environment (its
 * tokens in particular) goes in. New array of new strings (cae__sandbox_argv_free). */
char **cae__sandbox_env(const char *const *extra);

/* Gives every file below root (root included, links not followed) to uid:gid. */
int cae__sandbox_chown_tree(const char *root, uid_t uid, gid_t gid);

/* Writes passwd, group and gitconfig (the commits' identity: [user] name and email, one
 * line each, the lowest of git's configurations: the agent's own wins) for the sandbox into
 * dir (created), atomically. */
int cae__sandbox_write_etc(const char *dir, const char *git_name, const char *git_email);

/* Cgroups (cgroup.c): makes cae-<name> below this process's cgroup in every hierarchy with
 * pids, memory and cpu, with lim's bounds; *procs gets the cgroup.procs paths (new).
 * -errno when cgroups cannot be used here (not writable, v2 controllers not delegable):
 * nothing is left then. */
int cae__sandbox_cgroup_setup(const char *name, const cae_sandbox_limits *lim, char ***procs,
			      size_t *n);
/* Removes cae-<name> where it is empty (a running sandbox keeps it). */
void cae__sandbox_cgroup_remove(const char *name);
/* Removes every empty cae-<name> cgroup below ours for which keep(name) is false (a cgroup
 * just made is empty until its sandbox joins it: keep() must claim live environments'). */
int cae__sandbox_cgroup_sweep(bool (*keep)(const char *name, void *ud), void *ud);

/* Where an environment's files would be reachable only through a name the sandbox uid
 * cannot resolve, --enter stages them in a private mount namespace on this directory. */
#define CAE_SANDBOX_STAGE "/sys"

#endif
