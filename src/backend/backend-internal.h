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
typedef struct cae_prepare {
	cae_backend *b;
	const cae_task *task;
	const cae_prepare_options *opts; /* never NULL */
	const char *environment;	 /* the environment used: configured, or the default */
	int cancel_fd;			 /* readable when the prepare is cancelled; -1: none */
	char created_at[40];		 /* ISO 8601 UTC, when step 1 began */
	json_t *warnings;		 /* array of strings: cae__prepare_warn */
	json_t *deps;			 /* array of objects, filled by the dependency step */
	/* Set by the create hook: */
	cae_env_exec_fn exec; /* runs a command in the environment being prepared */
	void *exec_ctx;
	const char *project;   /* where the project is, as commands see it */
	bool given_as_is;      /* a workspace used as is: no clone, no dependency install */
	json_t *create_fields; /* more fields for the environment.create event (owned) */
	void *state;	       /* the backend's own; its release hook frees it */
} cae_prepare;

/* Adds a warning to the environment's ContainerInfo and, when event is set, logs it. */
void cae__prepare_warn(cae_prepare *p, const char *event, const char *msg);

/* The runner's spec of one command of req, run in cwd with envp (NULL: the runner's
 * default), borrowing req's strings. */
cae_run_spec cae__backend_run_spec(const cae_exec_request *req, const char *cwd,
				   const char *const *envp);

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
	/* filter (may be NULL) says which environments may be looked at */
	int (*cleanup_stale)(cae_backend *b, int64_t threshold_s, cae_env_filter_fn filter,
			     void *filter_ud, int *removed, cae_error *err);
	int (*list)(cae_backend *b, json_t **out, cae_error *err);
	int (*info)(cae_backend *b, const char *task_uuid, cae_env_info *info, cae_error *err);
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
};

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
/* True when a Docker engine answers at cfg's DOCKER_HOST (for backend "auto"). */
bool cae__docker_backend_available(const cae_config *cfg);

/* The process preparing an environment (src/backend/preparer.c). The label names this
 * process: "<boot id>/<pid namespace>/<pid>/<start time>", at most CAE_PREPARER_MAX bytes
 * with the NUL. Alive: on this host and PID namespace, /proc/<pid> is still that process;
 * from elsewhere (a remote engine, another namespace) it cannot be seen, and a prepare
 * created less than timeout_s ago (created: seconds since the epoch) counts as alive. */
#define CAE_PREPARER_MAX 256
void cae__preparer_label(char *out, size_t size);
bool cae__preparer_alive(const char *label, int64_t created, int timeout_s);

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

/* Installs dependencies: detects manifests in project (a path as commands see it) and runs each
 * install with a 600 s timeout; every outcome is appended to deps (array of objects) and
 * each failure also as a line to warnings; cancel_fd (-1: none) cancels. Never fails the
 * preparation. */
void cae__deps_install(cae_env_exec_fn exec, void *ctx, struct cae_log *log, const char *project,
		       json_t *deps, json_t *warnings, int cancel_fd);

#endif
