/* The config's schema: one table of keys (path, type, field, bounds, environment variable,
 * default) drives defaults, the YAML walk, environment overrides, cae_config_set(),
 * to_json() and free(), so a new key is one line here and one field in cae/config.h. */
#include "config/config-internal.h"

#include <stddef.h>
#include <string.h>

#include "base/banned.h"

static const char *const backend_names[] = {"auto", "docker", "local", "kubernetes", NULL};
static const char *const netmode_names[] = {"bridge", "none", "host", NULL};
static const char *const truncate_names[] = {"head", "head_tail", NULL};
static const char *const sandbox_names[] = {"auto", "bubblewrap", "none", NULL};
static const char *const pull_names[] = {"IfNotPresent", "Always", "Never", NULL};
static const char *const editor_names[] = {"native", "mcp", NULL};

#define OFF(m) offsetof(cae_config, m)
#define SECTION(p)                                                                                 \
	{                                                                                          \
		.path = p, .type = V_SECTION                                                       \
	}
#define BOOL(p, m, d, e)                                                                           \
	{                                                                                          \
		.path = p, .type = V_BOOL, .off = OFF(m), .def = d, .env = e                       \
	}
#define INT(p, m, lo, hi, d, e)                                                                    \
	{                                                                                          \
		.path = p, .type = V_INT, .off = OFF(m), .min = lo, .max = hi, .def = d, .env = e  \
	}
#define SIZE(p, m, lo, hi, d)                                                                      \
	{                                                                                          \
		.path = p, .type = V_SIZE, .off = OFF(m), .min = lo, .max = hi, .def = d           \
	}
#define MEMSIZE(p, m, m2, lo, hi, d, e)                                                            \
	{                                                                                          \
		.path = p, .type = V_MEMSIZE, .off = OFF(m), .off2 = OFF(m2), .min = lo,           \
		.max = hi, .def = d, .env = e                                                      \
	}
#define DOUBLE(p, m, hi, d, e)                                                                     \
	{                                                                                          \
		.path = p, .type = V_DOUBLE, .off = OFF(m), .max = hi, .def = d, .env = e          \
	}
#define STR(p, m, fl, d, e)                                                                        \
	{                                                                                          \
		.path = p, .type = V_STRING, .off = OFF(m), .flags = fl, .def = d, .env = e        \
	}
#define ENUM(p, m, nm, d, e)                                                                       \
	{                                                                                          \
		.path = p, .type = V_ENUM, .off = OFF(m), .names = nm, .def = d, .env = e          \
	}
#define LIST(p, m, d)                                                                              \
	{                                                                                          \
		.path = p, .type = V_STRLIST, .off = OFF(m), .def = d                              \
	}
#define LISTF(p, m, fl, d)                                                                         \
	{                                                                                          \
		.path = p, .type = V_STRLIST, .off = OFF(m), .flags = fl, .def = d                 \
	}
#define ALIAS(p, of)                                                                               \
	{                                                                                          \
		.path = p, .alias_of = of                                                          \
	}

/* Order matters: a section comes before its keys (to_json builds objects in this order). */
const struct cfg_key cfg_keys[] = {
    SECTION("command_executor"),
    BOOL(CE "enabled", command_executor.enabled, "true", "COMMAND_EXECUTOR_ENABLED"),
    ENUM(CE "backend", command_executor.backend, backend_names, "auto", "EXECUTOR_BACKEND"),
    STR(CE "docker_host", command_executor.docker_host, F_NONEMPTY | F_URL,
	"unix:///var/run/docker.sock", "DOCKER_HOST"),
    {.path = CE "environments",
     .type = V_ENVMAP,
     .def = "python=coding-agent-executor-python:latest,"
	    "miniforge=coding-agent-executor-miniforge:latest,"
	    "node=coding-agent-executor-node:latest,"
	    "java=coding-agent-executor-java:latest,"
	    "go=coding-agent-executor-go:latest"},
    STR(CE "default_environment", command_executor.default_environment, F_NONEMPTY, "python", NULL),
    STR(CE "state_dir", command_executor.state_dir, F_NONEMPTY | F_ABSPATH, NULL, "CAE_STATE_DIR"),
    STR(CE "instance", command_executor.instance, F_NONEMPTY | F_LABEL, NULL, "CAE_INSTANCE"),
    LISTF(CE "local_repo_roots", command_executor.local_repo_roots, F_ABSPATH, NULL),
    LIST(CE "protected_paths", command_executor.protected_paths, ".git/hooks"),
    SECTION(CE "mcp_server"),
    STR(CE "mcp_server.name", command_executor.mcp_server.name, 0, "command-executor", NULL),
    LIST(CE "mcp_server.command", command_executor.mcp_server.command,
	 "npx,@sunwood-ai-labs/command-executor-mcp-server"),
    SECTION(CE "docker"),
    STR(CE "docker.base_image", command_executor.docker.base_image, F_NONEMPTY,
	"coding-agent-executor-python:latest", "EXECUTOR_BASE_IMAGE"),
    SECTION(CE "docker.resources"),
    DOUBLE(CE "docker.resources.cpu_limit", command_executor.docker.resources.cpu_limit, 1024, "2",
	   "EXECUTOR_CPU_LIMIT"),
    MEMSIZE(CE "docker.resources.memory_limit", command_executor.docker.resources.memory_limit,
	    command_executor.docker.resources.memory_bytes, 6 * MiB, 1024 * TiB, "4g",
	    "EXECUTOR_MEMORY_LIMIT"),
    MEMSIZE(CE "docker.resources.disk_limit", command_executor.docker.resources.disk_limit,
	    command_executor.docker.resources.disk_bytes, 0, 1024 * 1024 * TiB, "10g", NULL),
    INT(CE "docker.resources.pids_limit", command_executor.docker.resources.pids_limit, 1, 4194304,
	"1024", NULL),
    SECTION(CE "docker.network"),
    ENUM(CE "docker.network.mode", command_executor.docker.network.mode, netmode_names, "bridge",
	 NULL),
    BOOL(CE "docker.network.external_access", command_executor.docker.network.external_access,
	 "true", NULL),
    BOOL(CE "docker.network.whitelist_mode", command_executor.docker.network.whitelist_mode,
	 "false", NULL),
    LIST(CE "docker.network.allowed_domains", command_executor.docker.network.allowed_domains,
	 NULL),
    LIST(CE "docker.network.denied_domains", command_executor.docker.network.denied_domains, NULL),
    LIST(CE "docker.network.allowed_addresses", command_executor.docker.network.allowed_addresses,
	 NULL),
    INT(CE "docker.helper_lifetime_seconds", command_executor.docker.helper_lifetime_seconds, 0,
	604800, "3600", NULL),
    INT(CE "docker.max_concurrent_engine_ops", command_executor.docker.max_concurrent_engine_ops, 1,
	1024, "4", NULL),
    BOOL(CE "docker.mount_docker_socket", command_executor.docker.mount_docker_socket, "false",
	 NULL),
    SECTION(CE "pool"),
    INT(CE "pool.size", command_executor.pool.size, 0, 64, "0", NULL),
    INT(CE "pool.max_age_seconds", command_executor.pool.max_age_seconds, 1, 604800, "1800", NULL),
    LIST(CE "pool.environments", command_executor.pool.environments, NULL),
    SECTION(CE "kubernetes"),
    STR(CE "kubernetes.namespace", command_executor.kubernetes.namespace, F_NONEMPTY, NULL,
	"CAE_K8S_NAMESPACE"),
    STR(CE "kubernetes.kubeconfig", command_executor.kubernetes.kubeconfig, F_NONEMPTY | F_ABSPATH,
	NULL, NULL),
    STR(CE "kubernetes.context", command_executor.kubernetes.context, F_NONEMPTY, NULL, NULL),
    INT(CE "kubernetes.active_deadline_seconds",
	command_executor.kubernetes.active_deadline_seconds, 60, 31536000, "86400", NULL),
    STR(CE "kubernetes.node_name", command_executor.kubernetes.node_name, F_NONEMPTY, NULL, NULL),
    ENUM(CE "kubernetes.image_pull_policy", command_executor.kubernetes.image_pull_policy,
	 pull_names, "IfNotPresent", NULL),
    BOOL(CE "kubernetes.protect_with_root_sidecar",
	 command_executor.kubernetes.protect_with_root_sidecar, "true", NULL),
    BOOL(CE "kubernetes.require_network_policy", command_executor.kubernetes.require_network_policy,
	 "false", NULL),
    SECTION(CE "clone"),
    BOOL(CE "clone.shallow", command_executor.clone.shallow, "true", NULL),
    INT(CE "clone.depth", command_executor.clone.depth, 1, 1000000, "1", NULL),
    BOOL(CE "clone.auto_install_deps", command_executor.clone.auto_install_deps, "true", NULL),
    INT(CE "clone.timeout_seconds", command_executor.clone.timeout_seconds, 1, 86400, "300", NULL),
    STR(CE "clone.ssh_identity_file", command_executor.clone.ssh_identity_file,
	F_NONEMPTY | F_ABSPATH, NULL, NULL),
    STR(CE "clone.ssh_known_hosts_file", command_executor.clone.ssh_known_hosts_file,
	F_NONEMPTY | F_ABSPATH, NULL, NULL),
    SECTION(CE "clone.mirror_cache"),
    BOOL(CE "clone.mirror_cache.enabled", command_executor.clone.mirror_cache.enabled, "false",
	 NULL),
    INT(CE "clone.mirror_cache.max_age_hours", command_executor.clone.mirror_cache.max_age_hours, 1,
	876000, "168", NULL),
    SECTION(CE "package_cache"),
    BOOL(CE "package_cache.enabled", command_executor.package_cache.enabled, "false", NULL),
    INT(CE "package_cache.max_age_hours", command_executor.package_cache.max_age_hours, 1, 876000,
	"168", NULL),
    SIZE(CE "package_cache.max_size", command_executor.package_cache.max_bytes, 0,
	 1024 * 1024 * TiB, "10g"),
    STR(CE "package_cache.maven_remote", command_executor.package_cache.maven_remote,
	F_NONEMPTY | F_URL, "https://repo.maven.apache.org/maven2/", NULL),
    SECTION(CE "snapshots"),
    INT(CE "snapshots.max_per_environment", command_executor.snapshots.max_per_environment, 0, 1000,
	"8", NULL),
    INT(CE "snapshots.max_age_hours", command_executor.snapshots.max_age_hours, 0, 876000, "168",
	NULL),
    SIZE(CE "snapshots.max_size", command_executor.snapshots.max_bytes, 0, 1024 * 1024 * TiB,
	 "20g"),
    SECTION(CE "git"),
    STR(CE "git.user_name", command_executor.git.user_name, F_NONEMPTY | F_LINE, "Coding Agent",
	NULL),
    STR(CE "git.user_email", command_executor.git.user_email, F_NONEMPTY | F_LINE,
	"coding-agent@localhost", NULL),
    SECTION(CE "execution"),
    INT(CE "execution.timeout_seconds", command_executor.execution.timeout_seconds, 1, 604800,
	"1800", "EXECUTOR_TIMEOUT"),
    SIZE(CE "execution.max_output_size", command_executor.execution.max_output_size, 1, GiB,
	 "1048576"),
    ENUM(CE "execution.truncate", command_executor.execution.truncate, truncate_names, "head",
	 NULL),
    SECTION(CE "sessions"),
    INT(CE "sessions.max_per_environment", command_executor.sessions.max_per_environment, 0, 256,
	"8", NULL),
    SIZE(CE "sessions.buffer_size", command_executor.sessions.buffer_size, 4096, GiB, "1048576"),
    BOOL(CE "sessions.share_environments", command_executor.sessions.share_environments, "false",
	 NULL),
    SECTION(CE "cleanup"),
    INT(CE "cleanup.interval_hours", command_executor.cleanup.interval_hours, 0, 8760, "24", NULL),
    INT(CE "cleanup.stale_threshold_hours", command_executor.cleanup.stale_threshold_hours, 1, 8760,
	"24", NULL),
    BOOL(CE "cleanup.on_session_end", command_executor.cleanup.on_session_end, "true", NULL),
    SECTION(CE "allowed_commands"),
    BOOL(CE "allowed_commands.use_default", command_executor.allowed_commands.use_default, "true",
	 NULL),
    LIST(CE "allowed_commands.additional", command_executor.allowed_commands.additional, NULL),
    LIST(CE "allowed_commands.exclude", command_executor.allowed_commands.exclude, NULL),
    LIST(CE "allowed_commands.custom_list", command_executor.allowed_commands.custom_list, NULL),
    BOOL(CE "allowed_commands.enforce", command_executor.allowed_commands.enforce, "false", NULL),
    SECTION(CE "local"),
    ENUM(CE "local.sandbox", command_executor.local.sandbox, sandbox_names, "auto", NULL),
    BOOL(CE "local.network", command_executor.local.network, "false", NULL),
    BOOL(CE "local.unconfined", command_executor.local.unconfined, "false", NULL),
    INT(CE "local.sandbox_uid", command_executor.local.sandbox_uid, 1, 2147483646, "100000", NULL),

    SECTION("text_editor_mcp"),
    BOOL(TE "enabled", text_editor_mcp.enabled, "true", "TEXT_EDITOR_MCP_ENABLED"),
    ENUM(TE "mode", text_editor_mcp.mode, editor_names, "native", NULL),
    SECTION(TE "mcp_server"),
    STR(TE "mcp_server.name", text_editor_mcp.mcp_server.name, 0, "text-editor", NULL),
    LIST(TE "mcp_server.command", text_editor_mcp.mcp_server.command,
	 "npx,-y,mcp-server-text-editor"),
    ALIAS(TE "command", TE "mcp_server.command"),
    STR(TE "mcp_server.tool", text_editor_mcp.mcp_server.tool, 0, "text_editor", NULL),
    INT(TE "mcp_server.timeout", text_editor_mcp.mcp_server.timeout, 1, 3600, "60", NULL),
    SIZE(TE "max_file_size", text_editor_mcp.max_file_size, 1, GiB, "10m"),
    INT(TE "undo_depth", text_editor_mcp.undo_depth, 0, 1000, "10", NULL),
    SIZE(TE "undo_max_bytes", text_editor_mcp.undo_max_bytes, 0, 16 * GiB, "64m"),
    INT(TE "view_max_chars", text_editor_mcp.view_max_chars, 100, 10000000, "16000", NULL),

    SECTION("worker"),
    BOOL("worker.enabled", worker.enabled, "true", "PICOCLAW_WORKER_ENABLED"),
    BOOL("worker.auto_commit", worker.auto_commit, "false", "PICOCLAW_WORKER_AUTO_COMMIT"),
    STR("worker.commit_message_prefix", worker.commit_message_prefix, 0, "[Worker Auto-Commit]",
	"PICOCLAW_WORKER_COMMIT_PREFIX"),
    ALIAS("worker.commit_prefix", "worker.commit_message_prefix"),
    INT("worker.command_timeout", worker.command_timeout, 1, 86400, "300",
	"PICOCLAW_WORKER_COMMAND_TIMEOUT"),
    ALIAS("worker.shell_timeout", "worker.command_timeout"),
    INT("worker.git_timeout", worker.git_timeout, 1, 3600, "30", "PICOCLAW_WORKER_GIT_TIMEOUT"),
    BOOL("worker.stop_on_error", worker.stop_on_error, "false", "PICOCLAW_WORKER_STOP_ON_ERROR"),
    BOOL("worker.dry_run", worker.dry_run, "false", "PICOCLAW_WORKER_DRY_RUN"),
    BOOL("worker.rollback", worker.rollback, "false", "PICOCLAW_WORKER_ROLLBACK"),

    SECTION("github"),
    STR("github.token", github.token, F_SECRET, NULL, "GITHUB_PERSONAL_ACCESS_TOKEN"),
    SECTION("gitlab"),
    STR("gitlab.token", gitlab.token, F_SECRET, NULL, "GITLAB_PERSONAL_ACCESS_TOKEN"),
    STR("gitlab.api_url", gitlab.api_url, F_NONEMPTY | F_URL, "https://gitlab.com/api/v4",
	"GITLAB_API_URL"),
    BOOL("gitlab.ssl_verify", gitlab.ssl_verify, "true", NULL),
};

const size_t cfg_nkeys = ARRAY_SIZE(cfg_keys);
_Static_assert(ARRAY_SIZE(cfg_keys) <= CFG_MAX_KEYS, "CFG_MAX_KEYS is too small");

int cae__cfg_find_key(const char *path)
{
	for (size_t i = 0; i < cfg_nkeys; i++)
		if (strcmp(cfg_keys[i].path, path) == 0)
			return (int)i;
	return -1;
}

int cae__cfg_canonical(int idx)
{
	if (idx >= 0 && cfg_keys[idx].alias_of)
		return cae__cfg_find_key(cfg_keys[idx].alias_of);
	return idx;
}

const char *cae_config_backend_name(cae_config_backend b)
{
	return (unsigned)b < ARRAY_SIZE(backend_names) - 1 ? backend_names[b] : "?";
}

const char *cae_config_network_mode_name(cae_config_network_mode m)
{
	return (unsigned)m < ARRAY_SIZE(netmode_names) - 1 ? netmode_names[m] : "?";
}
