/* Internal to src/backend: the vtable every backend implements, and the shared steps of
 * prepare (clone, dependency install) that run through a backend's own exec. */
#ifndef CAE_BACKEND_INTERNAL_H
#define CAE_BACKEND_INTERNAL_H

#include "cae/backend.h"
#include "cae/config.h"
#include "cae/helper.h"

struct cae_log;

/* Runs one command in the environment being prepared. */
typedef int (*cae_env_exec_fn)(void *ctx, const cae_exec_request *req, cae_run_result *res,
			       cae_error *err);

/* One prepare in progress: what the lifecycle (src/backend/prepare.c) and a backend's hooks
 * share. The lifecycle owns the arrays and the strings; hooks add to them. */
/* How a backend wants dependencies installed (cae__deps_install). */
typedef struct cae_deps_opts {
	/* A Python virtual environment (a path as commands see it; NULL: none) that pip's
	 * installs go into, made (with the system's site packages visible) when missing: the
	 * host's Python is "externally managed" (PEP 668) where the environment's tools are the
	 * host's. Commands must find its bin/ first on PATH. */
	const char *python_venv;
	/* npm's cache is the shared one (pkgcache.h): `npm ci`, whose lock file pins every
	 * tarball's integrity and which reads no metadata, takes what the cache has without
	 * asking the registry (npm_config_prefer_offline) */
	bool npm_cache_shared;
	/* the project's node_modules is a shared tree of its lock file (pkgcache.h), put in
	 * place in npm_tree_ms: `npm ci` is not run, its result says so */
	bool npm_tree_linked;
	int64_t npm_tree_ms;
	/* after a successful `npm ci` (NULL: none; not after one that bypassed the shared
	 * cache): the backend keeps the project's node_modules as a shared tree when its lock
	 * file may have one */
	void (*npm_installed)(void *ctx);
	void *npm_installed_ctx;
	/* after the prepare's Maven install (NULL: none): the backend fills the shared Maven
	 * repository with what it resolved (pkgcache.h) */
	void (*maven_installed)(void *ctx);
	void *maven_installed_ctx;
} cae_deps_opts;

typedef struct cae_prepare {
	cae_backend *b;
	const cae_task *task;
	const cae_prepare_options *opts; /* never NULL */
	const char *environment;	 /* the environment used: configured, or the default */
	int cancel_fd;			 /* readable when the prepare is cancelled; -1: none */
	char created_at[40];		 /* ISO 8601 UTC, when step 1 began */
	json_t *warnings;		 /* array of strings: cae__prepare_warn */
	json_t *deps;			 /* array of objects, filled by the dependency step */
	/* ContainerInfo's limits, set by a container backend's hooks (owned; NULL: none):
	 * {disk: {mechanism: "storage_opt"|"emptydir"|"none", bytes}} */
	json_t *limits;
	/* Set by the create hook: */
	cae_env_exec_fn exec; /* runs a command in the environment being prepared */
	void *exec_ctx;
	const char *project;	 /* where the project is, as commands see it */
	cae_deps_opts deps_opts; /* how dependencies are installed (zero: as the image says) */
	bool given_as_is;	 /* a workspace used as is: no clone, no dependency install */
	json_t *create_fields;	 /* more fields for the environment.create event (owned) */
	void *state;		 /* the backend's own; its release hook frees it */
} cae_prepare;

/* Adds a warning to the environment's ContainerInfo and, when event is set, logs it. */
void cae__prepare_warn(cae_prepare *p, const char *event, const char *msg);

/* The runner's spec of one command of req, run in cwd with envp (NULL: the runner's
 * default), borrowing req's strings. */
cae_run_spec cae__backend_run_spec(const cae_exec_request *req, const char *cwd,
				   const char *const *envp);

/* The user's pass over command_executor.protected_paths of the container backends, before
 * they give the paths to root (docker: an archive upload, kubernetes: a root sidecar): shell
 * text run as the environment's user in the project (project, a string literal), "$@" the
 * paths. It gives the project safe.directory in the user's global git configuration (git
 * refuses a repository of another owner otherwise), then takes each path normalised (no
 * empty or "." component) as $q: one with a symbolic link on the way is skipped; a missing
 * one under .git becomes an empty directory when its parent is there, any other missing
 * one is skipped; keep (shell commands) runs for each of the rest, and next (shell lines)
 * after each path. */
#define CAE_PROTECT_USER_PASS(project, keep, next)                                                 \
	"if command -v git >/dev/null 2>&1 && ! git config --global --get-all safe.directory "     \
	"2>/dev/null | grep -qx " project "; then\n"                                               \
	"  git config --global --add safe.directory " project "\n"                                 \
	"fi\n"                                                                                     \
	"for p in \"$@\"; do\n"                                                                    \
	"  ok=1 q=\n"                                                                              \
	"  old=$IFS; IFS=/\n"                                                                      \
	"  for c in $p; do\n"                                                                      \
	"    [ -n \"$c\" ] && [ \"$c\" != . ] || continue\n"                                       \
	"    q=${q:+$q/}$c\n"                                                                      \
	"    if [ -L \"$q\" ]; then ok=0; fi\n"                                                    \
	"  done\n"                                                                                 \
	"  IFS=$old\n"                                                                             \
	"  if [ $ok = 1 ] && [ -n \"$q\" ] && [ ! -e \"$q\" ]; then\n"                             \
	"    case $q in .git/*) if [ -d \"${q%/*}\" ]; then mkdir -- \"$q\"; else ok=0; fi ;;\n"   \
	"    *) ok=0 ;; esac\n"                                                                    \
	"  fi\n"                                                                                   \
	"  if [ $ok = 1 ] && [ -n \"$q\" ]; then " keep "; fi\n" next "done\n"

/* Runs the lifecycle with b's hooks (cae_backend_prepare). */
int cae__prepare_run(cae_backend *b, const cae_task *task, const char *env_name,
		     const cae_prepare_options *opts, cae_env_info *info, cae_error *err);

/* What a backend supplies. The prepare hooks run in the order of their steps; any of them
 * failing ends the prepare, and remove then takes away whatever create began. */
typedef struct cae_backend_ops {
	const char *name;
	/* step 1 (may be NULL): checks that need the backend (an image, a sandbox) */
	int (*validate)(cae_prepare *p, cae_error *err);
	/* steps 2 and failure, and cleanup: removes the task's environment, made or half made;
	 * graceful gives running commands a moment to stop. A missing environment is success. */
	int (*remove)(cae_backend *b, const char *task_uuid, bool graceful, cae_error *err);
	/* step 3: creates the environment, not ready yet; sets p->exec, p->exec_ctx,
	 * p->project, and p->given_as_is for a workspace used as is */
	int (*create)(cae_prepare *p, cae_error *err);
	/* step 4: fills the workspace (the clone) */
	int (*populate)(cae_prepare *p, cae_error *err);
	/* step 6 (may be NULL): starts what serves the editor in the environment */
	int (*editor)(cae_prepare *p, cae_error *err);
	/* step 7: marks the environment ready and fills info */
	int (*ready)(cae_prepare *p, cae_env_info *info, cae_error *err);
	/* after the last step, success or not (may be NULL): frees p->state */
	void (*release)(cae_prepare *p);

	int (*exec)(cae_backend *b, const char *task_uuid, const cae_exec_request *req,
		    cae_run_result *res, cae_error *err);
	/* may be NULL: the backend's environments are edited on this host (host_path) */
	int (*edit)(cae_backend *b, const char *task_uuid, const cae_editor_limits *limits,
		    const cae_editor_request *req, cae_editor_result *res, cae_error *err);
	/* may be NULL: file operations run by the environment's helper (cae_backend_fs) */
	int (*fs)(cae_backend *b, const char *task_uuid, const cae_fs_request *q, cae_fs_reply *rep,
		  cae_error *err);
	/* may be NULL: what commands, the editor and patches may not leave in the environment's
	 * workspace is put back (cae_backend_guard) */
	int (*guard)(cae_backend *b, const char *task_uuid, cae_error *err);
	/* filter (may be NULL) says which environments may be looked at */
	int (*cleanup_stale)(cae_backend *b, int64_t threshold_s, cae_env_filter_fn filter,
			     void *filter_ud, int *removed, cae_error *err);
	int (*list)(cae_backend *b, json_t **out, cae_error *err);
	int (*info)(cae_backend *b, const char *task_uuid, cae_env_info *info, cae_error *err);
	/* may be NULL: the backend runs no network proxy (cae_backend_network_denied) */
	json_t *(*network_denied)(cae_backend *b, const char *task_uuid);
	/* may be NULL: no port forwards (cae_backend_port_forward) */
	int (*port_forward)(cae_backend *b, const char *task_uuid, int port, int *host_port,
			    cae_error *err);
	/* may be NULL (then prepare counts the helper streams other processes keep in the
	 * environment): how many live processes other than this one hold uuid's environment,
	 * named in text ("pid N (comm), ...") */
	int (*holders)(cae_backend *b, const char *task_uuid, char *text, size_t size);
	void (*free)(cae_backend *b);
} cae_backend_ops;

/* An environment this backend object prepared (cae_backend_cleanup_prepared). */
struct cae_prepared_env {
	struct cae_prepared_env *next;
	char *uuid;
	char *container_id;
	char *created_at;
};

struct cae_backend {
	const cae_backend_ops *ops;
	const cae_config *cfg;
	struct cae_log *log;
	void *impl;
	struct cae_prepared_env *prepared; /* under a lock of backend.c */
	/* the collector running on this backend, woken to refill the warm pool after a
	 * claim (cae__backend_pool_wake); under a lock of backend.c */
	struct cae_backend_collector *collector;
	/* the helper streams this process opened to the pool members it started, kept for
	 * its own claims (src/backend/pool.c); under a lock of pool.c */
	struct cae_pool_kept *kept;
	/* the instance it acts for (cae_config_instance), and whether it looks at every
	 * instance's environments (cae_backend_set_all_instances) */
	char instance[CAE_CONFIG_INSTANCE_MAX];
	bool all_instances;
};

/* The label (docker, kubernetes) and metadata field (local) naming an environment's
 * instance. */
#define CAE_LABEL_INSTANCE "cae.instance"
/* True when an environment recording instance (NULL: none) is b's own. */
bool cae__backend_own(const cae_backend *b, const char *instance);
/* True when b may look at it: its own, or any when b looks at every instance. */
bool cae__backend_sees(const cae_backend *b, const char *instance);
/* The error of an environment of another instance met by uuid (-EPERM), for what must
 * never act on it. */
int cae__backend_foreign(const cae_backend *b, const char *uuid, cae_error *err);

/* Records info as prepared by b (after a prepare succeeded). */
void cae__backend_remember(cae_backend *b, const cae_env_info *info);

int cae__local_backend_new(const cae_config *cfg, struct cae_log *log, cae_backend **out,
			   cae_error *err);
int cae__docker_backend_new(const cae_config *cfg, struct cae_log *log, cae_backend **out,
			    cae_error *err);
int cae__kubernetes_backend_new(const cae_config *cfg, struct cae_log *log, cae_backend **out,
				cae_error *err);
/* True when command_executor.kubernetes names a namespace or a kubeconfig (for "auto"). */
bool cae__kubernetes_backend_configured(const cae_config *cfg);
/* cae doctor: runs the local backend's sandbox probe (backend-local.c). */
int cae__local_probe(cae_backend *b, const char **why, const char **seccomp_why);
/* True when a Docker engine answers at cfg's DOCKER_HOST (for backend "auto"). */
bool cae__docker_backend_available(const cae_config *cfg);

/* ---- the warm pool (src/backend/pool.c: its policy, once; pool-docker.c and
 * pool-kubernetes.c: what each backend does its own way) ----
 * Members (containers, pods) started ahead, named CAE_POOL_NAME_PREFIX<key>-<random>,
 * labelled with their pool's key (CAE_POOL_LABEL: a hash of what a prepare of their
 * environment would create, minus what is the task's), their creation time and their
 * maximum age, and without a task. A prepare whose own key it is claims one, atomically in
 * the backend's own way: docker, a mkdir of CAE_POOL_CLAIM_MARK as the container's user
 * through its helper's stream (one caller only succeeds), then a rename to the task's
 * creating name, the task's record (CAE_POOL_CLAIM_DIR, root's) written by the prepare's
 * last upload; kubernetes, a merge patch carrying the resourceVersion it listed (the API
 * server refuses all but the first such update: 409), which gives the pod the task's
 * labels and annotations and takes the pool's labels away (a claimed pod keeps its pool
 * name: the backend finds it by its uuid label). */
#define CAE_DOCKER_NAME_PREFIX "coding-agent-exec-"
#define CAE_DOCKER_LABEL_CREATED "cae.created_at"
#define CAE_POOL_NAME_PREFIX "coding-agent-pool-"
#define CAE_POOL_LABEL "cae.pool"
#define CAE_POOL_LABEL_MAX_AGE "cae.pool_max_age"
/* in the scratch directory, which the image gives the container's user: the claim's mkdir
 * needs no root (an exec as root, ~50 ms, or an archive upload) */
#define CAE_POOL_CLAIM_MARK "/workspace/tmp/.cae-claim"
/* root's: the claimed task's record, written with the protected paths (the user cannot
 * change it) */
#define CAE_POOL_CLAIM_DIR "/.cae-claim"
/* the push-credential target of the task that claimed it (the label a cold prepare sets) */
#define CAE_POOL_CLAIM_CREDENTIAL CAE_POOL_CLAIM_DIR "/git_credential"
/* the forge rule's "host:port" of that task (the label cae.forge of a cold prepare) */
#define CAE_POOL_CLAIM_FORGE CAE_POOL_CLAIM_DIR "/forge"
#define CAE_POOL_KEY_MAX 17 /* 16 hex digits and the NUL */

/* A pool member as the policy sees it: what the backend's list entry says. */
typedef enum {
	CAE_POOL_OTHER,	   /* neither: stopped, failed, gone */
	CAE_POOL_RUNNING,  /* may be handed out (when young enough) */
	CAE_POOL_STARTING, /* created, not yet running: a filler starts it (or died) */
	CAE_POOL_DELETING, /* its removal is under way */
} cae_pool_state;

typedef struct cae_pool_member {
	json_t *entry;		 /* the backend's list entry (borrowed from the list) */
	const char *name;	 /* its pool name; NULL: not a pool member */
	const char *id;		 /* the engine's id of it (container id, pod uid), or NULL */
	const char *key;	 /* its pool's key, or NULL */
	const char *environment; /* or NULL */
	const char *instance;	 /* the cae instance it belongs to, or NULL */
	int64_t created;	 /* seconds since the epoch */
	int64_t max_age;	 /* its own maximum age (s); 0: none (the configured one holds) */
	cae_pool_state state;
	char created_at[40]; /* for the status: its creation time as it shows it ("": none) */
	char state_name[32]; /* for the status: the backend's word for its state ("": none) */
} cae_pool_member;

struct cae_helper_mux;
struct cae_pool_kept;

/* What a backend does its own way; the rest is src/backend/pool.c's. */
typedef struct cae_pool_ops {
	const char *noun; /* a member, in logs and messages: "container", "pod" */
	/* What a prepare of environment would create, without what is the task's (*spec new),
	 * its pool key, and the static helper it gets (*helper new; NULL: none). */
	int (*spec)(cae_backend *b, const char *environment, json_t **spec,
		    char key[CAE_POOL_KEY_MAX], char **helper, cae_error *err);
	/* The entries labelled as selector says ("cae.pool=<key>", "cae.pool"), any state. */
	int (*list)(cae_backend *b, const char *selector, json_t **all, cae_error *err);
	/* m from list entry entry. */
	void (*member)(json_t *entry, cae_pool_member *m);
	/* Creates member name of pool key from spec (borrowed) and starts it with helper
	 * (NULL: none); on failure nothing is left. */
	int (*create)(cae_backend *b, json_t *spec, const char *key, const char *name,
		      const char *helper, int cancel_fd, cae_error *err);
	/* Removes m unless another caller claimed it since it was listed (age: for a claim
	 * that never finished; *why may be changed to say so): 1 when removed, 0 when left,
	 * < 0 on failure. */
	int (*remove)(cae_backend *b, const cae_pool_member *m, int64_t age, const char **why,
		      cae_error *err);
	/* Claims m for the caller of cae__pool_claim (ctx: its), fields (the pool.claimed
	 * event's) may get more: 0 when claimed, -EBUSY when another caller has it (or it is
	 * gone), another < 0 when this one failed (no more are tried). */
	int (*claim)(cae_backend *b, const cae_pool_member *m, void *ctx, json_t *fields,
		     cae_error *err);
	/* May be NULL: a stream to the helper of member name, just started by this process
	 * (0 with *mux new; < 0: none), kept for this process's claim of it. */
	int (*open_stream)(cae_backend *b, const char *name, struct cae_helper_mux **mux);
} cae_pool_ops;

extern const cae_pool_ops cae__docker_pool_ops;
extern const cae_pool_ops cae__k8s_pool_ops;

/* True when cfg keeps a pool for environment. */
bool cae__pool_wanted(const cae_config *cfg, const char *environment);
/* A positive whole number of seconds in a label, else 0. */
int64_t cae__pool_seconds(const char *label);
/* The pool key of spec (a member's create body or pod, without what is the task's) and the
 * static helper a member gets (NULL: none; its path, size and time count), and b's instance
 * (a pool is its instance's): a 64-bit FNV-1a hash in hex, which only tells specs apart. 0, or
 * -ENOMEM. */
int cae__pool_key(const cae_backend *b, json_t *spec, const char *helper,
		  char key[CAE_POOL_KEY_MAX]);
/* Sets p up for the steps of a prepare of environment up to the create body, as a backend's
 * ops->spec runs them: on quiet, a copy of b without its log (their warnings are the body's,
 * not events), for a task of uuid "pool" (task, filled here). 0, or -ENOMEM with err set;
 * p->warnings is the caller's to release either way. */
int cae__pool_prepare_init(cae_prepare *p, cae_backend *quiet, cae_backend *b, cae_task *task,
			   const char *environment, cae_error *err);
/* Claims the oldest running member of key's pool younger than its own and the configured
 * maximum age (older ones met on the way are removed) through b's ops->claim (ctx: its).
 * 1 when one was claimed, 0 when none was. */
int cae__pool_claim(cae_backend *b, const char *key, void *ctx);
/* The stream this process kept to member name's helper since it started it, taken out of
 * b's kept streams (the caller's to close); NULL: none. Streams are kept up to
 * CAE_POOL_KEPT_MAX, and one whose member left the pool (claimed by another process,
 * removed) is closed at the next list of its pool. */
struct cae_helper_mux *cae__pool_kept_take(cae_backend *b, const char *name);
/* Closes b's kept streams (when b goes). */
void cae__pool_kept_free(cae_backend *b);
#define CAE_POOL_KEPT_MAX 128
/* The collector's pool step: cae_backend_pool_fill when cfg has a pool, else nothing. */
void cae__pool_maintain(cae_backend *b);
/* How often the collector gives b's pool a step of its own (half its maximum age, in ms);
 * 0: b has no pool. */
int64_t cae__pool_period_ms(const cae_backend *b);
/* Wakes the collector running on b (if any) for a pool step. */
void cae__backend_pool_wake(cae_backend *b);

struct cae_docker;
/* What the docker backend lends its pool (src/backend/backend-docker.c). */
struct cae_docker *cae__docker_client(cae_backend *b);
/* The create body a prepare of environment would send, without what is the task's (uuid,
 * creation time, preparer, credential target), its pool key, and the static helper to
 * upload (*helper new; NULL: none on this host). *body is new. */
int cae__docker_pool_spec(cae_backend *b, const char *environment, json_t **body,
			  char key[CAE_POOL_KEY_MAX], char **helper, cae_error *err);
/* Creates container name from body (borrowed), uploads helper (NULL: none) and starts it,
 * in an engine slot; *id is new. On failure the container is removed. */
int cae__docker_create_started(cae_backend *b, const char *name, json_t *body, const char *helper,
			       int cancel_fd, char **id, cae_error *err);
/* A warm pool container's body (new; NULL: body as it is): body with the container's own
 * directory for the handover of its proxy listeners (net-handover.h), pool@NAME, since its
 * task is not known yet. */
json_t *cae__docker_pool_net_body(cae_backend *b, json_t *body, const char *name);
/* Stops (no grace) and removes a container by id or name, in an engine slot; a missing one
 * is success. */
int cae__docker_remove(cae_backend *b, const char *id, cae_error *err);
/* Closes this process's stream to uuid's helper (its container is about to go). */
void cae__docker_forget(cae_backend *b, const char *uuid);
/* Whether tar (n bytes, made in a container: untrusted) holds only regular files and
 * directories named beneath prefix (e.g. "workspace/project/") without a ".." component,
 * in headers read as the engine's extraction reads them (POSIX ustar or GNU, octal
 * sizes), up to its end (two zero blocks): what may be extracted at "/" as root. */
bool cae__tar_confined(const char *tar, size_t n, const char *prefix);
/* A stream to the helper of container name (a pool member: addressed by its pool name), as
 * a prepare opens it: 0 with *mux new; -EBUSY when the container is gone or does not run;
 * -ENOTCONN when its helper did not answer; another -errno when the engine failed. */
int cae__docker_open_stream(cae_backend *b, const char *name, struct cae_helper_mux **mux);
/* Claims a container of key's pool (src/backend/pool-docker.c) for a task: renamed to name.
 * mux (NULL: the pool's containers have no helper) gets the stream the claim was made
 * through (NULL when it was made with an exec). Returns 1 with *claimed (the engine's list
 * entry, new) when one was claimed, 0 when none was. */
int cae__docker_pool_claim(cae_backend *b, const char *key, const char *name,
			   struct cae_helper_mux **mux, json_t **claimed, cae_error *err);

struct cae_k8s;
/* What the kubernetes backend lends its pool (src/backend/backend-kubernetes.c). */
struct cae_k8s *cae__k8s_client(cae_backend *b, const char **ns);
/* The pod a prepare of environment would create, without its name and without what is the
 * task's (labels and annotations of the uuid, the phase, the creation time, the preparer,
 * the credential target), its pool key, and the static helper to deliver (*helper new; NULL:
 * none on this host). *pod is new. */
int cae__k8s_pool_spec(cae_backend *b, const char *environment, json_t **pod,
		       char key[CAE_POOL_KEY_MAX], char **helper, cae_error *err);
/* Creates pod (borrowed; named), delivers helper (NULL: none) and waits until it runs. On
 * failure the pod is deleted. */
int cae__k8s_pool_start(cae_backend *b, json_t *pod, const char *helper, int cancel_fd,
			cae_error *err);
/* Claims a pod of key's pool (src/backend/pool-kubernetes.c) by the merge patch patch
 * (borrowed; the resourceVersion, the pool labels' removal and the deadline are added).
 * Returns 1 with its name in name when one was claimed, 0 when none was. */
int cae__k8s_pool_claim(cae_backend *b, const char *key, json_t *patch, char *name, size_t size,
			cae_error *err);

/* How many manager processes other than this one run a sandbox helper in the local
 * environment whose workspace root is workspace_root (src/backend/holders.c), named in
 * text ("pid N (comm), ..."; at most 8 counted). */
int cae__sandbox_holders(const char *workspace_root, char *text, size_t size);

/* An engine's storage driver from its GET /info (borrowed from info; "" when not said) and,
 * in *backing, the file system under it ("" when not said); whether that driver takes a size
 * option, so that disk_limit bounds a container (overlay2 only on xfs with pquota, which
 * cannot be seen from here: tried, and dropped with a warning when the engine refuses). In
 * backend-docker.c; cae doctor says the same. */
const char *cae__docker_driver(json_t *info, const char **backing);
bool cae__docker_driver_sized(const char *driver, const char *backing);

/* The process preparing an environment (src/backend/preparer.c). The label names this
 * process: "<boot id>/<pid namespace>/<pid>/<start time>", at most CAE_PREPARER_MAX bytes
 * with the NUL. Alive: on this host and PID namespace, /proc/<pid> is still that process;
 * from elsewhere (a remote engine, another namespace) it cannot be seen, and a prepare
 * created less than timeout_s ago (created: seconds since the epoch) counts as alive. */
#define CAE_PREPARER_MAX 256
void cae__preparer_label(char *out, size_t size);
bool cae__preparer_alive(const char *label, int64_t created, int timeout_s);
/* The same for a name (a temporary directory of a prepare): "<pid>.<start>" of this
 * process, and whether the process a tag names still lives on this host. */
void cae__preparer_tag(char *out, size_t size);
bool cae__preparer_tag_alive(const char *tag);

/* A counting semaphore across processes (src/backend/slots.c): n lock files in dir (made
 * when missing), each held by an flock that dies with its holder. Takes a free slot into
 * *fd_out; when none is free, -EAGAIN unless wait, else waits for one (cancel_fd, -1 for
 * none, ends the wait with -ECANCELED). cae__slot_release(fd) gives it back (-1: none). */
int cae__slot_acquire(const char *dir, int n, bool wait, int cancel_fd, int *fd_out,
		      cae_error *err);
void cae__slot_release(int fd);

/* The URL to clone (token-free) and, when a token applies, the token (borrowed from cfg) and
 * the user name git must send with it ("x-access-token" for GitHub, "oauth2" for GitLab).
 * *url is new. */
int cae__git_clone_source(const cae_config *cfg, const cae_task *task, char **url,
			  const char **token, const char **user, cae_error *err);

/* Where a push from task's environment may authenticate: the clone URL's host[:port]
 * (*host new) with the user and token (borrowed from cfg) git must send there; *host stays
 * NULL when no token applies (a local repository, no token configured). */
int cae__git_credential_target(const cae_config *cfg, const cae_task *task, char **host,
			       const char **user, const char **token, cae_error *err);

/* What an environment records of cae__git_credential_target for task: "host user forge"
 * (forge: "github" or "gitlab", whose token answers), new; NULL when no token applies.
 * Every form of the task's repository (a URL, {platform, owner, name}, a local path: NULL)
 * is its business, not the caller's. */
char *cae__git_credential_record(const cae_config *cfg, const cae_task *task);

/* The answer to git's credential request (git's text protocol) from a command of uuid's
 * environment, whose credential target is target ("host user forge", as the environment
 * recorded it): "username=..\npassword=..\n" for that host over http(s) when the forge's
 * token is configured, else NULL. Audited as the event git.credential. New string. */
char *cae__git_credential_answer(const cae_config *cfg, struct cae_log *log, const char *uuid,
				 const char *target, const char *request, size_t len);

/* GitLab's path_with_namespace of project owner/name, from GET {api_url}/projects/{id} with
 * the configured token (PRIVATE-TOKEN header) and TLS verification per gitlab.ssl_verify.
 * *path is new. */
int cae__gitlab_project_path(const cae_config *cfg, const char *owner, const char *name,
			     char **path, cae_error *err);

/* Clones task's repository into dest (a path as commands see it; its parent must exist),
 * shallow unless configured, pull requests with the source branch checked
 * out and origin/<target> fetched deep enough for `git diff origin/<target>...HEAD`. The
 * token reaches git only through the environment of each git process (a credential helper
 * that reads it from there); the remote URL stays token-free. */
int cae__git_clone(cae_env_exec_fn exec, void *ctx, const cae_config *cfg, struct cae_log *log,
		   const cae_task *task, const char *dest, cae_error *err);

/* Where one git process runs (exec, ctx) and the credential it may send (token NULL: none),
 * with TLS verification or not, for at most timeout_s seconds. */
typedef struct cae_git_ctx {
	cae_env_exec_fn exec;
	void *ctx;
	const char *token;
	const char *user;
	bool ssl_verify;
	int timeout_s;
} cae_git_ctx;

/* Runs git: argv starts with CAE_GIT_ARGV; the token (if any) only in that process's
 * environment, read by a credential helper given on the command line. */
int cae__git_run(const cae_git_ctx *g, const char *cwd, const char *const *argv,
		 cae_run_result *res, cae_error *err);
/* cae__git_run, and git's exit status as an error: -EIO, "what: <git's fatal line>" (URL
 * credentials redacted). */
int cae__git_step(const cae_git_ctx *g, const char *cwd, const char *const *argv, const char *what,
		  cae_error *err);
/* The context of cae__host_exec: the configuration (the state directory, the ssh identity)
 * and the cancel fd of a request that has none (-1: none). */
typedef struct cae_host_exec_ctx {
	const cae_config *cfg;
	int cancel_fd;
} cae_host_exec_ctx;
/* An exec callback that runs git on this host, unconfined, in the environment of
 * cae__hostgit_env (nothing of this process's) plus extra_env. ctx: a cae_host_exec_ctx. */
int cae__host_exec(void *ctx, const cae_exec_request *req, cae_run_result *res, cae_error *err);

/* The environment of every git and ssh cae runs on this host (src/backend/hostgit.c, which
 * says what is in it): made from nothing, HOME an empty directory of cae's own, ssh without
 * config, agent or key but clone.ssh_identity_file; extra ("K=V", borrowed) added, replacing
 * a fixed entry of the same name. *out: a new array of new strings (cae__hostgit_env_free). */
int cae__hostgit_env(const cae_config *cfg, const char *const *extra, char ***out, cae_error *err);
void cae__hostgit_env_free(char **envp);
/* <state_dir>/host-home, made (0700) or made again empty when it is not a directory of ours
 * with mode 0700 and nothing in it; *out: its path (new string). Without a state directory,
 * "/nonexistent". */
int cae__hostgit_home(const cae_config *cfg, char **out, cae_error *err);
/* GIT_SSH_COMMAND's value (new string, NULL on ENOMEM). */
char *cae__hostgit_ssh_command(const cae_config *cfg);

/* The guard of .git/config in a workspace the user owns (src/backend/gitconfig-guard.c, which
 * says the rule). dir: the environment's own directory in cae's state, where the record is
 * kept. Record: at prepare, the user's .git/config as it is (nothing for a .git that is a
 * file). Enforce: after a command, patch or editor write, .git/config holds only entries on
 * the allow list and the user's recorded ones (event git.config_guard when anything went);
 * nothing when there is no record. */
int cae__gitguard_record(const char *project, const char *dir, cae_error *err);
int cae__gitguard_enforce(const cae_config *cfg, struct cae_log *log, const char *uuid,
			  const char *project, const char *dir, cae_error *err);

/* The host-side cache of bare mirrors (src/backend/mirror.c): <state_dir>/mirrors/<key>.git,
 * key a hash of the URL as normalised (scheme and host in lower case, no trailing "/" or
 * ".git"), each with its lock file <key>.lock (flock: exclusive while the mirror is made or
 * fetched, shared while a clone reads it; its mtime is the last use). A mirror holds
 * the branches and tags (refs/heads/, refs/tags/) of the remote and its HEAD, fetched with the
 * task's token through the credential helper of cae__git_run: no token is ever written into it. */
typedef struct cae_mirror {
	char *dir;  /* the bare repository */
	char *lock; /* its lock file */
	int fd;	    /* the lock, held shared after cae__mirror_open; -1: none */
} cae_mirror;

/* Brings the mirror of url up to date on this host (g: how git authenticates; g->exec must
 * run on this host) and holds it shared for reading: a mirror that is incomplete (its
 * marker file missing or naming another URL), holds a lock file of git (a git killed while
 * writing it) or whose fetch fails is removed and made anew (event git.mirror_rebuild with
 * the reason); so is any mirror when rebuild is set (a clone from it failed). On failure
 * nothing is held and m is cleared. cancel_fd (-1: none) ends the wait for the lock with
 * -ECANCELED. */
int cae__mirror_open(const cae_config *cfg, struct cae_log *log, const char *url,
		     const cae_git_ctx *g, bool rebuild, int cancel_fd, cae_mirror *m,
		     cae_error *err);
/* Releases the lock and frees m's strings (a cleared m is fine). */
void cae__mirror_close(cae_mirror *m);
/* Removes, each under its lock (a mirror in use is skipped), the mirrors of cfg's state
 * directory unused for longer than max_age_s, or every one when all is set. Each one removed
 * is appended to removed (may be NULL) as {"key", "url"}; *count gets how many. */
int cae__mirror_prune(const cae_config *cfg, int64_t max_age_s, bool all, json_t *removed,
		      int *count, cae_error *err);

/* Makes a host mirror readable by the environment's git: copies it in and sets *path (new) to
 * where the environment sees the copy, which the clone step removes after cloning. */
typedef int (*cae_mirror_ship_fn)(void *ctx, const char *mirror, char **path, cae_error *err);

/* cae__git_clone through the mirror cache (when command_executor.clone.mirror_cache.enabled
 * and the repository is remote): the mirror is fetched on this host, the clone then reads
 * it (ship NULL: the environment sees this host's files; else through ship) with the same
 * options, PR fetches and deepening as from the remote, and origin is set back to the
 * remote's URL. A clone from the mirror that fails has the mirror rebuilt and is tried
 * once more; without a usable mirror the clone is cae__git_clone's, from the remote.
 * cancel_fd (-1: none) cancels the host's steps (the environment's have exec's own). */
int cae__git_clone_cached(cae_env_exec_fn exec, void *ctx, const cae_config *cfg,
			  struct cae_log *log, const cae_task *task, const char *dest,
			  cae_mirror_ship_fn ship, void *ship_ctx, int cancel_fd, cae_error *err);

/* Installs dependencies: detects manifests in project (a path as commands see it) and runs each
 * install with a 600 s timeout, as opts says (NULL: the environment's defaults); every outcome
 * is appended to deps (array of objects) and each failure also as a line to warnings;
 * cancel_fd (-1: none) cancels. Never fails the preparation. */
void cae__deps_install(cae_env_exec_fn exec, void *ctx, struct cae_log *log, const char *project,
		       const cae_deps_opts *opts, json_t *deps, json_t *warnings, int cancel_fd);

#endif
