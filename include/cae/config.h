/* cae's configuration: config.yaml (command_executor.*, text_editor_mcp.*, worker.*, ...)
 * + environment variables.
 *
 * A cae_config is a plain struct that owns everything it points to (strings, lists);
 * cae_config_free() releases it all. Modules read it directly; nothing in it changes after
 * loading unless a caller changes it (use cae_config_set() to change a value by key).
 *
 * Where the config comes from, in order (later wins):
 *   1. built-in defaults (cae_config_defaults(), documented per field below);
 *   2. a YAML file: the `path` argument; else $CAE_CONFIG; else ./config.yaml if it exists;
 *      else $XDG_CONFIG_HOME/cae/config.yaml (XDG_CONFIG_HOME defaults to ~/.config) if it
 *      exists; else none. An explicit path or $CAE_CONFIG that does not exist is an error.
 *   3. environment variables (a set but empty variable counts as unset):
 *        COMMAND_EXECUTOR_ENABLED   command_executor.enabled
 *        EXECUTOR_BACKEND           command_executor.backend (auto|docker|local|kubernetes)
 *        DOCKER_HOST                command_executor.docker_host
 *        EXECUTOR_BASE_IMAGE        command_executor.docker.base_image
 *        EXECUTOR_CPU_LIMIT         command_executor.docker.resources.cpu_limit
 *        EXECUTOR_MEMORY_LIMIT      command_executor.docker.resources.memory_limit
 *        EXECUTOR_TIMEOUT           command_executor.execution.timeout_seconds
 *        CAE_STATE_DIR              command_executor.state_dir
 *        CAE_INSTANCE               command_executor.instance
 *        CAE_K8S_NAMESPACE          command_executor.kubernetes.namespace
 *        TEXT_EDITOR_MCP_ENABLED    text_editor_mcp.enabled
 *        PICOCLAW_WORKER_AUTO_COMMIT, PICOCLAW_WORKER_COMMIT_PREFIX,
 *        PICOCLAW_WORKER_COMMAND_TIMEOUT, PICOCLAW_WORKER_GIT_TIMEOUT,
 *        PICOCLAW_WORKER_STOP_ON_ERROR, PICOCLAW_WORKER_ENABLED,
 *        PICOCLAW_WORKER_DRY_RUN, PICOCLAW_WORKER_ROLLBACK      worker.*
 *        GITHUB_PERSONAL_ACCESS_TOKEN github.token
 *        GITLAB_PERSONAL_ACCESS_TOKEN gitlab.token, GITLAB_API_URL gitlab.api_url
 *
 * Value syntax (file, environment and cae_config_set() alike):
 *   booleans  true/false, yes/no, on/off, 1/0 (any case)
 *   sizes     a number of bytes, or a number with a binary suffix k/m/g/t (optionally
 *             followed by b or ib, any case): "4g" = 4 GiB, "512m", "1.5g"
 *   lists     a YAML sequence; from the environment or cae_config_set(): comma-separated
 *   maps      (environments) a YAML mapping; otherwise "name=image,name2=image2"
 *   A YAML null (`key:` with no value, `~`, `null`) keeps the default (an empty list for
 *   lists and maps).
 *
 * Errors name the key, the file and the line, e.g.
 *   config.yaml:12: command_executor.execution.timeout_seconds: expected a positive integer, got
 * "abc" and for the environment the variable: environment variable EXECUTOR_TIMEOUT: expected a
 * positive integer, got "abc" Unknown keys are not errors: each gives a line in cfg->warnings
 * ("config.yaml:7: unknown key "command_executor.foo" (ignored)"). A key given twice in one mapping
 * is an error. The file is at most CAE_CONFIG_MAX_BYTES, nested at most CAE_CONFIG_MAX_DEPTH deep,
 * holds one YAML document; anchors and aliases are allowed.
 *
 * Depends on base, jansson and libyaml only (no logger: the caller logs cfg->warnings).
 */
#ifndef CAE_CONFIG_H
#define CAE_CONFIG_H

#include "cae/export.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cae/error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CAE_CONFIG_MAX_BYTES (1024 * 1024)
#define CAE_CONFIG_MAX_DEPTH 64
#define CAE_CONFIG_MAX_PROTECTED 32 /* entries of command_executor.protected_paths */

typedef enum cae_config_backend {
	CAE_CONFIG_BACKEND_AUTO = 0, /* docker when an engine answers, else local */
	CAE_CONFIG_BACKEND_DOCKER,
	CAE_CONFIG_BACKEND_LOCAL,
	CAE_CONFIG_BACKEND_KUBERNETES, /* one pod per task (auto: when kubernetes is configured) */
} cae_config_backend;

typedef enum cae_config_network_mode {
	CAE_CONFIG_NETWORK_BRIDGE = 0, /* external access (default) */
	CAE_CONFIG_NETWORK_NONE,       /* no network at all */
	CAE_CONFIG_NETWORK_HOST,       /* the host's network namespace */
} cae_config_network_mode;

typedef enum cae_config_truncate {
	CAE_CONFIG_TRUNCATE_HEAD = 0,  /* keep the beginning (the default) */
	CAE_CONFIG_TRUNCATE_HEAD_TAIL, /* keep beginning and end with an omission marker */
} cae_config_truncate;

typedef enum cae_config_sandbox {
	CAE_CONFIG_SANDBOX_AUTO = 0, /* bubblewrap when usable, else refused (see unconfined) */
	CAE_CONFIG_SANDBOX_BUBBLEWRAP,
	CAE_CONFIG_SANDBOX_NONE,
} cae_config_sandbox;

typedef enum cae_config_editor_mode {
	CAE_CONFIG_EDITOR_NATIVE = 0, /* cae's own editor (cae-helper) */
	CAE_CONFIG_EDITOR_MCP,	      /* a stdio MCP text-editor server run inside the
				       * environment (text_editor_mcp.mcp_server.command), driven
				       * by cae_editor_mcp (cae/editor.h) */
} cae_config_editor_mode;

/* An owned list of owned strings. */
typedef struct cae_config_strlist {
	char **items;
	size_t n;
} cae_config_strlist;

/* One entry of command_executor.environments. */
typedef struct cae_config_environment {
	char *name;  /* [a-z0-9][a-z0-9_.-]*, at most 63 characters */
	char *image; /* e.g. coding-agent-executor-python:latest */
} cae_config_environment;

typedef struct cae_config {
	struct {
		bool enabled;		    /* true (the command executor is cae's product) */
		cae_config_backend backend; /* auto */
		char *docker_host;	    /* "unix:///var/run/docker.sock" */
		cae_config_environment *environments; /* python, miniforge, node, java, go ->
						       * coding-agent-executor-<name>:latest */
		size_t n_environments;		      /* at most 64 */
		char *default_environment;	      /* "python"; must name one of environments */
		/* Absolute path of cae's state (local workspaces, metadata). Default:
		 * $XDG_STATE_HOME/cae, else $HOME/.local/state/cae, else /var/lib/cae when HOME
		 * is unset — the same rule for root and other users. A leading "~/" is expanded. */
		char *state_dir;
		/* Which cae instance this is (CAE_INSTANCE): recorded on every environment it
		 * makes (a docker and pod label, the local metadata, pool members), and the
		 * CLI, `cae gc`, `cae mcp`'s collector and the warm pool act only on their own
		 * instance's environments: another instance's are never listed, removed,
		 * replaced or claimed (`--all-instances` widens list, gc and pool drain).
		 * 1-63 of [A-Za-z0-9._-], a letter or digit at both ends. NULL (the default):
		 * derived from the state directory (cae_config_instance). */
		char *instance;
		/* Directories under which environment_prepare over MCP (the model's request) may
		 * name a local repository: a path whose real path lies under one of these real
		 * paths; URLs (https, http, git, ssh, user@host:path) are always accepted, other
		 * local paths and file:// refused, ext:: always. [] (none: the model names remote
		 * repositories only). The operator's own --repo, --workspace and --task (CLI) are
		 * not limited. Absolute paths; a leading "~/" is expanded. */
		cae_config_strlist local_repo_roots;
		/* Workspace-relative paths that commands and the editor (text editor, patch
		 * worker) may not change: each one, and everything below it, is read-only to
		 * them on every backend, whatever the spelling (links, ".", case). No "..",
		 * not absolute, not the workspace itself; at most CAE_CONFIG_MAX_PROTECTED.
		 * [".git/hooks"]: a hook written by a command never runs in the agent's own
		 * git either. cae's own git steps ignore hooks wherever they are. */
		cae_config_strlist protected_paths;
		struct {
			char *name; /* "command-executor" (informative) */
			cae_config_strlist
			    command; /* an external MCP server's npx command, read so that such
				      * config files load; cae does not run it */
		} mcp_server;
		struct {
			/* Image for an environment name missing from `environments` (and the only
			 * image when the map is empty). "coding-agent-executor-python:latest" */
			char *base_image;
			struct {
				double cpu_limit;   /* 2 (CPUs, 0.01 to 1024) */
				char *memory_limit; /* "4g" as written */
				uint64_t
				    memory_bytes;    /* 4294967296, from memory_limit (>= 6 MiB) */
				char *disk_limit;    /* "10g" as written; "0" = no limit */
				uint64_t disk_bytes; /* 10737418240, from disk_limit */
				int pids_limit;	     /* 1024 */
			} resources;
			struct {
				/* bridge (default). `external_access: false` without an explicit
				 * mode means none; mode none means external_access false. */
				cae_config_network_mode mode;
				bool external_access; /* true */
				/* One policy for every backend (cae/net.h says what the entries
				 * are and how they match). whitelist_mode true: only the names
				 * of allowed_domains are reachable, through cae's filtering
				 * proxy (enforced by the local backend; docker and kubernetes
				 * warn that they do not enforce it yet). */
				bool whitelist_mode;		    /* false */
				cae_config_strlist allowed_domains; /* [] "example.com",
								     * "*.example.com:443" */
				/* names refused even when allowed (non-empty: the proxy is on
				 * even without whitelist_mode) */
				cae_config_strlist denied_domains; /* [] */
				/* addresses (CIDRs) the proxy may connect to although they are
				 * loopback, private, link-local, unique-local or metadata
				 * addresses, and IP literals it lets through */
				cae_config_strlist allowed_addresses; /* [] "127.0.0.1/32" */
			} network;
			bool mount_docker_socket; /* false (a warning is due when true) */
			/* 3600: a container's cae-helper stops it after this long without a
			 * manager connected (a leaked container ends by itself; the next command
			 * starts it again); 0: never */
			int helper_lifetime_seconds;
			/* 4: container create, start, stop and remove of every cae process
			 * using this state directory run at most this many at a time (a
			 * counting semaphore of lock files under the state directory); the
			 * clone and commands are not limited */
			int max_concurrent_engine_ops;
		} docker;
		/* The docker backend's warm pool: containers started ahead for each
		 * environment of environments ([]: the default one), kept at size each, never
		 * handed out past max_age_seconds. size 0: no pool. */
		struct {
			int size;			 /* 0 */
			int max_age_seconds;		 /* 1800 */
			cae_config_strlist environments; /* [] */
		} pool;
		/* The kubernetes backend; its pods take docker.resources' limits. */
		struct {
			char
			    *namespace;	  /* NULL: the kubeconfig context's, else "default";
					   * set (or kubeconfig set): backend auto picks kubernetes */
			char *kubeconfig; /* NULL: $KUBECONFIG, the pod's service account,
					   * ~/.kube/config */
			char *context;	  /* NULL: the kubeconfig's current-context */
			int active_deadline_seconds; /* 86400: a pod's lifetime bound */
			char *node_name; /* NULL: the scheduler places pods; set: bound there */
			int image_pull_policy; /* 0 IfNotPresent (default), 1 Always, 2 Never */
			bool protect_with_root_sidecar; /* true: protected_paths are made root's by
							 * a short-lived root container of the pod;
							 * false (clusters that refuse root
							 * containers): not enforced for commands,
							 * with a warning */
			bool require_network_policy;	/* false: a pod's NetworkPolicy that could
							 * not be made is a warning; true: a
							 * failed prepare */
		} kubernetes;
		struct {
			bool shallow;		/* true */
			int depth;		/* 1 */
			bool auto_install_deps; /* true */
			int timeout_seconds;	/* 300 */
			/* The only key ssh may use for git on this host (the mirror cache, the
			 * local backend's clone, a local repository's bundle): NULL: none (no
			 * agent, no ~/.ssh either way; src/backend/hostgit.c). */
			char *ssh_identity_file;
			/* The host keys that ssh accepts there, besides the system's
			 * /etc/ssh/ssh_known_hosts: NULL: those only (never ~/.ssh). */
			char *ssh_known_hosts_file;
			/* A bare mirror of each remote repository under
			 * <state_dir>/mirrors/, fetched on this host before each clone, which
			 * then copies local objects (src/backend/mirror.c). */
			struct {
				bool enabled;	   /* false */
				int max_age_hours; /* 168: `cae cache prune` removes mirrors
						    * unused for longer */
			} mirror_cache;
		} clone;
		/* Package caches shared by this instance's environments on this host
		 * (<state_dir>/package-cache/<instance>/, src/backend/pkgcache.h), read and
		 * filled by the environments' installs; the local and docker backends (a
		 * docker engine on this host). Only caches whose tool verifies what it reads
		 * are shared read-write (npm's: content-addressed, integrity-checked); Go's
		 * build cache and modules, pip's wheels and Maven's release artifacts
		 * read-only, filled by cae alone; pip's HTTP cache and Maven's local
		 * repository are not, since nothing checks them when they are read. */
		struct {
			bool enabled;	    /* false */
			int max_age_hours;  /* 168: `cae cache prune` removes caches unused
					     * for longer */
			uint64_t max_bytes; /* max_size, 10g: ... then the least recently
					     * used ones until the rest take at most this
					     * (0: no bound) */
			char *maven_remote; /* "https://repo.maven.apache.org/maven2/": where
					     * cae fetches what it puts in the shared Maven
					     * repository */
		} package_cache;
		/* Snapshots of an environment (include/cae/snapshot.h), kept with it and
		 * removed with it. */
		struct {
			int max_per_environment; /* 8: a snapshot past this many is refused
						  * (0: snapshots refused) */
			int max_age_hours;	 /* 168: `cae gc` and the collector remove
						  * older ones (0: kept as long as their
						  * environment) */
			uint64_t max_bytes;	 /* max_size, 20g: a snapshot that would make
						  * an environment's snapshots take more of
						  * the disk is refused (0: no bound) */
		} snapshots;
		/* The identity of the commits an agent makes in an environment (`git commit`
		 * works as the prompts ask, on every backend): the environment's own git
		 * configuration (the local sandbox's /etc/gitconfig, a container's or pod's
		 * ~/.gitconfig when it sets none), never the project's; the agent's own
		 * `git config` wins. One line each. */
		struct {
			char *user_name;  /* "Coding Agent" */
			char *user_email; /* "coding-agent@localhost" */
		} git;
		struct {
			int timeout_seconds;	      /* 1800 */
			uint64_t max_output_size;     /* 1048576 bytes per stream */
			cae_config_truncate truncate; /* head */
		} execution;
		struct {
			/* 8: process sessions running at once in one environment (process_*
			 * tools); 0: the process tools are off */
			int max_per_environment;
			/* 1048576: output of a session kept unread; past it the oldest is
			 * dropped (and the next read says how much) */
			uint64_t buffer_size;
			/* false: over MCP, the model's tools act only on the session's own
			 * environments (prepared by it with environment_prepare, or given at
			 * start with --task/--workspace); another task uuid is refused with
			 * the message of one that does not exist. true: any environment of
			 * this instance. */
			bool share_environments;
		} sessions;
		struct {
			/* 24: `cae mcp` removes stale environments when it starts and then
			 * this often; 0: never by itself (`cae gc` still does) */
			int interval_hours;
			int stale_threshold_hours; /* 24 */
			/* true: `cae mcp` removes, when it ends, the environments it prepared
			 * that are still the ones it prepared */
			bool on_session_end;
		} cleanup;
		struct {
			bool use_default;		/* true */
			cae_config_strlist additional;	/* [] */
			cae_config_strlist exclude;	/* [] */
			cae_config_strlist custom_list; /* [] (used when use_default is false) */
			bool enforce;			/* false: only the deny-list is enforced */
		} allowed_commands;
		struct {
			/* auto: bubblewrap when it can confine here, else commands are refused
			 * unless `unconfined` is true. none requires unconfined: true. */
			cae_config_sandbox sandbox;
			/* false: no network inside the sandbox; true: the host's network
			 * (the local spelling of docker.network.external_access, whose
			 * default stays false here). A filtered network (whitelist_mode or
			 * denied_domains) wins over it: an empty network namespace whose
			 * one way out is cae's proxy. */
			bool network;
			bool unconfined; /* false: never run commands outside a sandbox */
			/* The host uid (and gid) sandboxed commands run as when cae runs as
			 * root (100000); inside they are uid 1000. Never 0. */
			int sandbox_uid;
		} local;
	} command_executor;

	struct {
		bool enabled;		     /* true */
		cae_config_editor_mode mode; /* native */
		struct {
			char *name; /* "text-editor" */
			cae_config_strlist
			    command; /* ["npx", "-y", "mcp-server-text-editor"] (mode mcp): the
				      * server's argv, run like a command in the environment's
				      * workspace (its PATH, confinement and user); its stdio
				      * is the MCP channel. `text_editor_mcp.command` is
				      * accepted as an alias */
			/* mode mcp: the server's tool that text_editor calls are forwarded to
			 * ("text_editor", with the command as an argument); a server without it
			 * but with <tool>_view, <tool>_create, ... gets the split form */
			char *tool;
			/* mode mcp: seconds a call (the server's start and handshake included)
			 * may take (60); past it the call fails and the server is ended, to be
			 * started again by the next call */
			int timeout;
		} mcp_server;
		uint64_t max_file_size;	 /* 10 MiB: larger files are refused for view and edit */
		int undo_depth;		 /* 10 edits per file (0 = no undo) */
		uint64_t undo_max_bytes; /* 64 MiB of undo history per environment */
		int view_max_chars;	 /* 16000 characters per view result */
	} text_editor_mcp;

	struct {
		bool enabled;		     /* true */
		bool auto_commit;	     /* false */
		char *commit_message_prefix; /* "[Worker Auto-Commit]" (alias: commit_prefix) */
		int command_timeout;	     /* 300 s for shell commands (alias: shell_timeout) */
		int git_timeout;	     /* 30 s */
		bool stop_on_error;	     /* false: continue mode */
		bool dry_run;		     /* false */
		bool rollback;		     /* false */
	} worker;

	struct {
		char *token; /* NULL; secret */
	} github;
	struct {
		char *token;	 /* NULL; secret */
		char *api_url;	 /* "https://gitlab.com/api/v4" */
		bool ssl_verify; /* true */
	} gitlab;

	char *source;		     /* the file loaded, NULL for built-in defaults only */
	cae_config_strlist warnings; /* unknown keys etc., at most 101 lines */
} cae_config;

/* Built-in defaults (no file, no environment overrides). envp (NULL = environ) is read only
 * for the default state_dir (XDG_STATE_HOME, HOME). Returns a new config, NULL on ENOMEM. */
CAE_EXPORT cae_config *cae_config_defaults(char *const *envp);

/* Loads the effective config: defaults, the file (see the top of this header; path NULL =
 * the default lookup), then the environment envp (NULL = environ). On success *out is a new
 * config. On failure returns -errno (-EINVAL for a bad value or bad YAML, -ENOENT for a
 * missing explicit file, -EFBIG for a file over CAE_CONFIG_MAX_BYTES) with err set. */
CAE_EXPORT int cae_config_load(cae_config **out, const char *path, char *const *envp,
			       cae_error *err);

/* Same from a document in memory (text need not be NUL-terminated; len bytes). filename is
 * used in messages and as cfg->source (NULL: "<string>"). envp NULL = environ; pass an
 * empty array ({NULL}) for no environment overrides. */
CAE_EXPORT int cae_config_load_string(cae_config **out, const char *text, size_t len,
				      const char *filename, char *const *envp, cae_error *err);

/* True for a label-safe string: 1-63 of [A-Za-z0-9._-], a letter or digit at both ends. */
CAE_EXPORT bool cae_config_label_valid(const char *s);

#define CAE_CONFIG_INSTANCE_MAX 64 /* an instance name and its NUL */
/* The instance of cfg (command_executor.instance): as configured, else "s" and 12 hex
 * digits of a hash of the state directory's real path (its path as written when it does
 * not exist yet), so that every process using one state directory is one instance unless
 * configured otherwise. Writes it into out (CAE_CONFIG_INSTANCE_MAX bytes); returns out. */
CAE_EXPORT const char *cae_config_instance(const cae_config *cfg, char *out);

/* A new deep copy of cfg (NULL on ENOMEM). */
CAE_EXPORT cae_config *cae_config_dup(const cae_config *cfg);

/* Sets one value by its dotted key ("command_executor.execution.timeout_seconds") from its
 * text form (the environment-variable syntax above), with the same validation; all or
 * nothing (cfg is unchanged on failure). Aliases are accepted. Returns 0, or -EINVAL (bad
 * value, unknown key, or an inconsistent result) / -ENOMEM with err set. */
CAE_EXPORT int cae_config_set(cae_config *cfg, const char *key, const char *value, cae_error *err);

/* The image configured for an environment name, NULL if the name is not in the map.
 * Borrowed from cfg. */
CAE_EXPORT const char *cae_config_environment_image(const cae_config *cfg, const char *name);

/* The effective config as a new JSON object with the same keys as config.yaml (the output
 * is itself a valid config file). With redact_secrets, tokens become "***" (null when unset)
 * and the user:password part of URLs becomes *** (user:pw@host -> ***@host).
 * NULL on ENOMEM. */
CAE_EXPORT json_t *cae_config_to_json(const cae_config *cfg, bool redact_secrets);

/* The reference of every key, as a new JSON array in the schema's order: sections
 * {key, type: "section", description} before their keys {key, type (boolean, integer, size,
 * number, string, enum, list, map), description, default (the text form, a list or a map;
 * null: none, or computed as the description says), env (the environment variable or null),
 * min and max (integers, sizes in bytes, numbers), values (enum), aliases, secret,
 * absolute_path}. -EINVAL (err names it) when a key has no reference text or a text names no
 * key: `cae config reference` writes docs/config.md from it, and its test keeps the two equal. */
CAE_EXPORT int cae_config_reference(json_t **out, cae_error *err);

/* Parses a size ("4g", "512m", "1048576", "1.5GiB") into bytes. Returns 0 or -EINVAL. */
CAE_EXPORT int cae_config_parse_size(const char *s, uint64_t *out);
/* Parses a boolean (true/false/yes/no/on/off/1/0, any case). Returns 0 or -EINVAL. */
CAE_EXPORT int cae_config_parse_bool(const char *s, bool *out);

/* Names of enum values as written in config.yaml ("auto", "bridge", "head_tail", ...). */
CAE_EXPORT const char *cae_config_backend_name(cae_config_backend b);
CAE_EXPORT const char *cae_config_network_mode_name(cae_config_network_mode m);

/* Frees the items, leaves an empty list. */
CAE_EXPORT void cae_config_strlist_clear(cae_config_strlist *l);
CAE_EXPORT void cae_config_free(cae_config *cfg); /* accepts NULL */

#ifdef __cplusplus
}
#endif
#endif
