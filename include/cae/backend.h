/* Backends: where an environment lives. One interface, three implementations:
 *   local      — a directory under the state directory, commands confined with bubblewrap
 *                when it is installed (src/backend/backend-local.c);
 *   docker     — one container per task through the Engine API (src/backend/backend-docker.c);
 *   kubernetes — one pod per task through the API server (src/backend/backend-kubernetes.c).
 * All return the same ContainerInfo and the same command results (tests/backend/
 * test-conformance.c runs the same scenarios against each).
 *
 * Ownership: cae_task and cae_env_info own their strings; *_clear frees them and accepts a
 * zeroed struct. Backends are opaque; cae_backend_free accepts NULL.
 */
#ifndef CAE_BACKEND_H
#define CAE_BACKEND_H

#include "cae/export.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "cae/editor.h"
#include "cae/error.h"
#include "cae/runner.h"

#ifdef __cplusplus
extern "C" {
#endif

struct cae_config;
struct cae_log;

typedef enum cae_task_kind { CAE_TASK_ISSUE = 0, CAE_TASK_PULL_REQUEST } cae_task_kind;

/* A task: {uuid, repo (URL, local path, or platform+owner+name), kind, branch?, target_branch?} */
typedef struct cae_task {
	char *uuid;
	char *repo;	/* URL or local path; NULL when platform/owner/name are given */
	char *platform; /* "github" | "gitlab" | NULL */
	char *owner;
	char *name;
	cae_task_kind kind;
	char *branch;	     /* pull request: the source branch */
	char *target_branch; /* pull request: the branch it merges into */
} cae_task;

/* Parses {uuid, repo | (platform, owner, name), kind?, branch?, target_branch?}. A missing
 * uuid is an error; repo given as "owner/name" with a platform is accepted. */
CAE_EXPORT int cae_task_from_json(json_t *j, cae_task *t, cae_error *err);
CAE_EXPORT json_t *cae_task_to_json(const cae_task *t); /* new reference */
/* For a task the model gave (MCP environment_prepare): https, http, git and ssh URLs and
 * scp-like user@host:path are accepted; a local path or file:// URL only when its real path
 * lies under the real path of one of command_executor.local_repo_roots, and then t->repo
 * becomes that real path; remote-helper transports (ext::...) and other schemes never.
 * Returns 0, or -EINVAL / -EPERM with a message naming only t->repo as given. The
 * operator's own tasks (CLI) are not checked. */
CAE_EXPORT int cae_task_check_model_repo(const struct cae_config *cfg, cae_task *t, cae_error *err);
CAE_EXPORT void cae_task_clear(cae_task *t);
/* True for a syntactically acceptable task uuid: 1-64 of [A-Za-z0-9_.-], not starting
 * with '.' or '-' (it becomes a container and a directory name). */
CAE_EXPORT bool cae_task_uuid_valid(const char *uuid);

/* ContainerInfo: what a prepared environment is (the result of prepare). */
typedef struct cae_env_info {
	char *container_id;
	char *task_uuid;
	char *environment_name;
	char *workspace_path; /* where the project is, as commands see it */
	char *host_path;      /* local backend: the project directory on this host; else NULL */
	char *created_at;     /* ISO 8601 UTC */
	char *status;	      /* "ready", "creating", ... */
	char *backend;	      /* "local" | "docker" | "kubernetes" */
	char *sandbox;	      /* local: "bubblewrap" | "none"; docker, kubernetes: NULL */
	json_t *warnings;     /* array of strings (owned reference) */
	json_t *deps;	 /* array of {manifest, command, success, exit_code, duration_ms, error?} */
	json_t *limits;	 /* local sandbox: {mechanism: "cgroup"|"rlimit", pids, memory_bytes,
			  * cpus, cpu_seconds, tmp_bytes, file_bytes, uid}; else NULL */
	char *instance;	 /* the cae instance it belongs to (command_executor.instance); NULL:
			  * none recorded (made before instances were), nobody's but
			  * --all-instances' */
	json_t *network; /* {access: "full"|"none"|"filtered", proxy: {http, socks5} when
			  * commands reach out through cae's proxy, forge: "host:port" the
			  * environment may reach under none (the forge it was cloned from)};
			  * NULL: not known */
} cae_env_info;

CAE_EXPORT json_t *cae_env_info_to_json(const cae_env_info *info); /* new reference */
CAE_EXPORT int cae_env_info_from_json(json_t *j, cae_env_info *info, cae_error *err);
CAE_EXPORT void cae_env_info_clear(cae_env_info *info);

/* One command in an environment. Paths are as commands see them. */
typedef struct cae_exec_request {
	const char *const *argv;      /* borrowed, >= 1 */
	const char *cwd;	      /* NULL: the workspace (project) directory */
	const char *const *extra_env; /* borrowed, "K=V" entries added to the environment */
	const char *stdin_data;
	size_t stdin_len;
	bool has_stdin;
	int64_t timeout_ms;
	size_t max_stdout;
	size_t max_stderr;
	cae_truncate_mode truncate;
	int cancel_fd; /* readable = cancel the command; -1: none (0 is fd 0: set -1) */
	bool network;  /* local sandbox: allow network for this command (prepare steps) */
	/* borrowed; NULL: none. The command's output as it comes and its stdin from a
	 * descriptor (cae/runner.h). Where the environment cannot stream (a container without
	 * its helper), output comes only in the result, and a stdin descriptor is refused
	 * (-EOPNOTSUPP). */
	const cae_live_io *live;
} cae_exec_request;

/* Progress callback for prepare (steps: "validate", "remove", "create", "clone", "deps",
 * "editor", "ready"). */
typedef void (*cae_progress_fn)(void *userdata, int step, int total, const char *message);

typedef struct cae_prepare_options {
	const char *workspace;	  /* local only: use this existing directory as is (no clone) */
	cae_progress_fn progress; /* may be NULL */
	void *progress_userdata;
	int cancel_fd; /* readable = stop preparing; -1: none (0 is fd 0: set -1) */
	/* An environment of the task that exists already is replaced only when nothing would
	 * be lost: none of its files changed since their last commit (`git status
	 * --porcelain` in it), no other live process preparing it, and holders NULL. Else
	 * the prepare fails with -EBUSY and says what would be lost, unless force. */
	bool force;
	/* what the caller itself holds in the environment that a prepare would end (its
	 * process sessions, a text); NULL: nothing */
	const char *holders;
} cae_prepare_options;

typedef struct cae_backend cae_backend;

/* Creates the backend named by cfg->command_executor.backend ("auto" picks kubernetes when
 * command_executor.kubernetes is configured, else docker when an engine answers, else
 * local). log may be NULL. cfg and log are borrowed and must outlive
 * the backend. */
CAE_EXPORT int cae_backend_new(const struct cae_config *cfg, struct cae_log *log, cae_backend **out,
			       cae_error *err);
/* The backend cae_backend_new would create for cfg: "local", "docker" or "kubernetes" (with
 * "auto": kubernetes when configured, docker when an engine answers, else local); an
 * unknown name as it is. Static. */
CAE_EXPORT const char *cae_backend_resolve_name(const struct cae_config *cfg);
/* Creates a specific backend: "local", "docker" or "kubernetes". */
CAE_EXPORT int cae_backend_new_named(const char *name, const struct cae_config *cfg,
				     struct cae_log *log, cae_backend **out, cae_error *err);
CAE_EXPORT void cae_backend_free(cae_backend *b);
/* Environments belong to an instance (command_executor.instance, recorded on each): a
 * backend lists, collects, removes, replaces, claims and runs commands in its own
 * instance's only; another instance's environment is "not found" to info, exec and list,
 * and cleanup and prepare of its uuid are refused (-EPERM, -EEXIST). With all set, list,
 * the stale collection and the pool's status, drain and gc look at every instance's (and
 * at environments without one); cleanup, prepare and exec still never touch another's. */
CAE_EXPORT void cae_backend_set_all_instances(cae_backend *b, bool all);
/* This backend's instance (borrowed, lives as long as b). */
CAE_EXPORT const char *cae_backend_instance(const cae_backend *b);
CAE_EXPORT const char *cae_backend_name(const cae_backend *b);

/* Prepares the task's environment: validates the name (unknown: the default, with a warning),
 * removes any environment of the same task, creates it, clones, installs dependencies,
 * starts the text editor, fills info. On failure nothing is left behind and err names the
 * step. environment_name may be NULL (the default environment). */
CAE_EXPORT int cae_backend_prepare(cae_backend *b, const cae_task *task,
				   const char *environment_name, const cae_prepare_options *opts,
				   cae_env_info *info, cae_error *err);
/* Runs one command. -ENOENT: no such environment ("environment not found"), or the program
 * was not found; -ENOTDIR: bad cwd; the result otherwise. res->network_denied: what the
 * environment's network proxy refused since it was last taken (cae/net.h). */
CAE_EXPORT int cae_backend_exec(cae_backend *b, const char *task_uuid, const cae_exec_request *req,
				cae_run_result *res, cae_error *err);
/* What the environment's network proxy refused since it was last taken (by this call or a
 * command's result), [{host, port, count}], and resets the record; NULL when nothing was
 * refused or the environment has no proxy in this process. */
CAE_EXPORT json_t *cae_backend_network_denied(cae_backend *b, const char *task_uuid);
/* A port forward: *host_port gets a port on the host's 127.0.0.1 whose connections this
 * process carries to 127.0.0.1:port in the environment, over its helper's channel (any
 * network mode, none included). It lasts as long as the environment's channel in this
 * process (until the environment is cleaned up or the backend freed); asking again for the
 * same port gives the same one. -ENOENT: no such environment; -EOPNOTSUPP: no helper. */
CAE_EXPORT int cae_backend_port_forward(cae_backend *b, const char *task_uuid, int port,
					int *host_port, cae_error *err);
/* Runs a checked text editor request in an environment that is not on this host (its
 * workspace is edited where commands run, by the environment's helper). -EOPNOTSUPP when
 * the backend or the environment cannot (then err says why), -ENOENT when there is no such
 * environment; else as cae_editor_run. */
CAE_EXPORT int cae_backend_edit(cae_backend *b, const char *task_uuid,
				const cae_editor_limits *limits, const cae_editor_request *req,
				cae_editor_result *res, cae_error *err);
/* Runs one of the patch worker's file operations where the environment's files are: in a
 * container by its helper (include/cae/helper.h), for a local environment in this process.
 * A request opens the workspace as commands see it (cae_env_info.workspace_path); a handle
 * serves only the environment that opened it. -EOPNOTSUPP when the environment cannot (a
 * container without a working helper); else the operation's status. */
struct cae_fs_request;
struct cae_fs_reply;
CAE_EXPORT int cae_backend_fs(cae_backend *b, const char *task_uuid, const struct cae_fs_request *q,
			      struct cae_fs_reply *rep, cae_error *err);
/* Puts back what commands, the text editor and patches may not leave in the environment's
 * workspace: for a workspace the user owns (local --workspace), every .git/config entry that
 * would run a program or read another file in the user's own git on the host and that the
 * user did not have (src/backend/gitconfig-guard.c). Run by the backend after each command;
 * callers that write files on this host (the editor, the patch worker) call it after they
 * wrote. Nothing for other environments and backends. */
CAE_EXPORT int cae_backend_guard(cae_backend *b, const char *task_uuid, cae_error *err);
/* Removes the environment (retrying up to 3 times). A missing environment is success. */
CAE_EXPORT int cae_backend_cleanup(cae_backend *b, const char *task_uuid, cae_error *err);
/* Removes every stale environment: older than threshold_s seconds, or whose prepare died,
 * or that can no longer run a command (docker: its container stopped for good; local: the
 * workspace directory is gone). An environment still being prepared by a live process is
 * never removed. *removed gets the count. */
CAE_EXPORT int cae_backend_cleanup_stale(cae_backend *b, int64_t threshold_s, int *removed,
					 cae_error *err);

/* Which environments a collection may look at (by task uuid); NULL: every one. */
typedef bool (*cae_env_filter_fn)(const char *task_uuid, void *userdata);

/* cae_backend_cleanup_stale over the environments filter accepts. */
CAE_EXPORT int cae_backend_cleanup_stale_filtered(cae_backend *b, int64_t threshold_s,
						  cae_env_filter_fn filter, void *userdata,
						  int *removed, cae_error *err);

/* Collection without a human: a thread that runs cae_backend_cleanup_stale at once and then
 * every interval_ms, until stopped. Each run logs environment.cleanup_stale. */
typedef struct cae_backend_collector cae_backend_collector;
typedef struct cae_collector_options {
	int64_t interval_ms; /* between runs; <= 0: one run only */
	int64_t threshold_s; /* as cae_backend_cleanup_stale */
	cae_env_filter_fn filter;
	void *filter_userdata;
} cae_collector_options;
/* b is borrowed and must outlive the collector. *out is new (cae_backend_collector_stop). */
CAE_EXPORT int cae_backend_collector_start(cae_backend *b, const cae_collector_options *o,
					   cae_backend_collector **out, cae_error *err);
/* Waits until at least runs collections have finished, or timeout_ms passed; returns how
 * many have finished. */
CAE_EXPORT unsigned cae_backend_collector_wait(cae_backend_collector *c, unsigned runs,
					       int64_t timeout_ms);
/* Stops the collector (a run in progress finishes first) and frees it. Accepts NULL. */
CAE_EXPORT void cae_backend_collector_stop(cae_backend_collector *c);

/* Removes the environments this backend object prepared and nobody cleaned up since, when
 * each is still the one it prepared (the same container id and creation time: not prepared
 * again by another process meanwhile). What any other process prepared stays. *removed
 * gets the count. */
CAE_EXPORT int cae_backend_cleanup_prepared(cae_backend *b, int *removed, cae_error *err);
/* The environments this backend knows: a JSON array of ContainerInfo (new reference). */
CAE_EXPORT int cae_backend_list(cae_backend *b, json_t **out, cae_error *err);
/* ContainerInfo of one environment; -ENOENT when there is none. */
CAE_EXPORT int cae_backend_info(cae_backend *b, const char *task_uuid, cae_env_info *info,
				cae_error *err);

/* The docker backend's warm pool (command_executor.pool): containers started ahead for
 * each pooled environment and claimed by prepares whose container would be the same. On
 * any other backend these return -EOPNOTSUPP. */
/* Removes this configuration's pool containers that are past the maximum age or not
 * running, then starts new ones until each pooled environment has size (in engine slots;
 * cancel_fd, -1 for none, stops it). *created gets the count. */
CAE_EXPORT int cae_backend_pool_fill(cae_backend *b, int cancel_fd, int *created, cae_error *err);
/* Every pool container of the engine: a JSON array of {name, container_id, environment,
 * key, created_at, age_s, max_age_s, state, expired, this_config} (new reference). */
CAE_EXPORT int cae_backend_pool_status(cae_backend *b, json_t **out, cae_error *err);
/* Removes the pool containers of this configuration's pools (all: of every pool). */
CAE_EXPORT int cae_backend_pool_drain(cae_backend *b, bool all, int *removed, cae_error *err);
/* Removes every pool container past its own maximum age or no longer running (what
 * `cae gc` does with pools). */
CAE_EXPORT int cae_backend_pool_gc(cae_backend *b, int *removed, cae_error *err);

/* The environment name actually used: name when it is configured, else the default
 * environment; *warning (new string or NULL) explains a fallback. */
CAE_EXPORT const char *cae_backend_select_environment(const struct cae_config *cfg,
						      const char *name, char **warning);

#ifdef __cplusplus
}
#endif
#endif
